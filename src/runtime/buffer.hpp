// Buffer (tinygrad's device.py Buffer): memory of `size` elements of `dtype` on a device.
// Allocation is lazy; a view shares its base's memory at a byte offset. Make buffers with
// std::make_shared (view() needs shared ownership of the base).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/device.hpp"
#include "tg/dtype.hpp"

namespace tg {

class Buffer : public std::enable_shared_from_this<Buffer> {
 public:
  Buffer(std::string device, int64_t size, DType dtype);                                // a base buffer
  Buffer(std::shared_ptr<Buffer> base, int64_t size, DType dtype, int64_t byte_offset);  // a view; prefer view()
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const std::string device;   // canonical name
  const int64_t size;         // elements
  const DType dtype;
  const int64_t offset;       // bytes into the base; 0 for a base

  std::shared_ptr<Buffer> view(int64_t size, DType dtype, int64_t byte_offset);
  Buffer& allocate();           // tg::Error if already allocated
  // Allocates this (unallocated, base, host-memory) buffer as a private copy-on-write mapping of src's
  // file bytes (src on DISK, same byte size) instead of fresh memory: the bytes are the page cache's,
  // no copy and no fresh pages until a kernel writes to them; the file never changes. False (nothing
  // done) where that doesn't apply (see copy_buffer); the mapping lives as long as this buffer.
  bool map_from_disk(Buffer& src);
  Buffer& ensure_allocated();
  bool is_allocated() const { return buf_ != nullptr; }
  void* ptr();                  // the device handle (host pointer on CPU, device address on CUDA); allocated only
  int64_t nbytes() const { return size * dtype.itemsize(); }
  Buffer& base() { return base_ ? *base_ : *this; }
  bool is_view() const { return base_ != nullptr; }
  Allocator& allocator();
  Compiled& dev();

  // the schedule's reference count of LazyBuffers using this memory (kept on the base)
  int lb_refcount() const { return base_ ? base_->lb_refcount_ : lb_refcount_; }
  void ref(int cnt) { (base_ ? base_->lb_refcount_ : lb_refcount_) += cnt; }

  void copyin(const void* src, size_t nbytes);   // nbytes must equal nbytes(); allocates if needed
  void copyout(void* dst, size_t nbytes);        // nbytes must equal nbytes()
  std::string as_bytes();                        // copyout into a new byte string
  std::string str() const;                       // "<buf real:True device:CPU size:3 dtype:dtypes.int offset:0>"

 private:
  std::shared_ptr<Buffer> base_;
  Allocator* allocator_ = nullptr;
  void* buf_ = nullptr;
  std::shared_ptr<void> mapping_;   // map_from_disk's mapping: freed with the buffer, not by the allocator
  int lb_refcount_ = 0;
};

// Copies src's bytes into dest (same nbytes) across any two devices: directly when one side is
// host memory (CPU, DISK), else through a host staging copy. Allocates dest if needed.
void copy_buffer(Buffer& dest, Buffer& src);
void copy_buffer(Buffer& dest, Buffer& src, int64_t nbytes);   // the first nbytes of src

// A private (copy-on-write, writable) mapping of the n bytes of `path` at byte `offset`, populated
// read-only from the page cache; *ptr gets their address. Unmapped when the returned handle goes (disk.cpp).
std::shared_ptr<void> map_file_private(const std::string& path, size_t offset, size_t n, void** ptr);

}  // namespace tg
