#include "runtime/buffer.hpp"

#include <algorithm>
#include <vector>

#include "tg/helpers.hpp"
#include "uop/uop.hpp"

namespace tg {

Buffer::Buffer(std::string device_, int64_t size_, DType dtype_)
    : device(canonicalize_device(device_)), size(size_), dtype(dtype_), offset(0) {
  if (size < 0) throw Error("Buffer: size must be >= 0, got " + std::to_string(size) + " on " + device);
}

Buffer::Buffer(std::shared_ptr<Buffer> base, int64_t size_, DType dtype_, int64_t byte_offset)
    : device(base->device), size(size_), dtype(dtype_), offset(base->offset + byte_offset),
      base_(base->base_ ? base->base_ : std::move(base)) {
  if (byte_offset < 0 || size < 0 || offset + nbytes() > base_->nbytes())
    throw Error("Buffer.view: " + std::to_string(size) + " x " + dtype.str() + " at byte offset " + std::to_string(offset) +
                " doesn't fit in the base's " + std::to_string(base_->nbytes()) + " bytes");
}

Buffer::~Buffer() {
  if (!buf_ || base_) return;
  if (device.rfind("DISK", 0) != 0) GlobalCounters::mem_used -= nbytes();
  if (!mapping_) allocator_->free(buf_, static_cast<size_t>(std::max<int64_t>(nbytes(), 1)));
}

std::shared_ptr<Buffer> Buffer::view(int64_t size_, DType dtype_, int64_t byte_offset) {
  return std::make_shared<Buffer>(shared_from_this(), size_, dtype_, byte_offset);
}

Compiled& Buffer::dev() { return get_device(device); }
Allocator& Buffer::allocator() { return allocator_ ? *allocator_ : dev().allocator(); }

Buffer& Buffer::allocate() {
  if (buf_) throw Error("Buffer.allocate: " + str() + " is already allocated");
  Allocator& a = allocator();
  if (base_) {
    base_->ensure_allocated();
    buf_ = a.offset(base_->buf_, static_cast<size_t>(nbytes()), static_cast<size_t>(offset));
  } else {
    bool disk = device.rfind("DISK", 0) == 0;
    if (disk && nbytes() == 0) throw Error("Buffer.allocate: DISK buffers need a positive size, got " + str());
    // a 0-element buffer still gets a real (1-byte) allocation so it has a valid pointer
    buf_ = a.alloc(static_cast<size_t>(std::max<int64_t>(nbytes(), 1)));
    if (!disk) GlobalCounters::mem_used += nbytes();
  }
  allocator_ = &a;
  return *this;
}

bool Buffer::map_from_disk(Buffer& src) {
  // CPU kernels read any host address (vector loads go through memcpy), so the file's bytes serve as they are
  if (buf_ || base_ || device != "CPU" || src.device.rfind("DISK:", 0) != 0 || src.nbytes() != nbytes() || nbytes() == 0 ||
      !getenv("DISK_ZERO_COPY", 1))
    return false;
  mapping_ = map_file_private(src.device.substr(5), static_cast<size_t>(src.offset), static_cast<size_t>(nbytes()), &buf_);
  allocator_ = &allocator();
  GlobalCounters::mem_used += nbytes();
  return true;
}

Buffer& Buffer::ensure_allocated() { return buf_ ? *this : allocate(); }

void* Buffer::ptr() {
  TG_ASSERT(buf_ != nullptr, "Buffer.ptr on unallocated " + str());
  return buf_;
}

void Buffer::copyin(const void* src, size_t n) {
  if (n != static_cast<size_t>(nbytes()))
    throw Error("Buffer.copyin: size mismatch, got " + std::to_string(n) + " bytes for " + str() + " (" + std::to_string(nbytes()) + " bytes)");
  ensure_allocated();
  if (n) allocator_->copyin(buf_, src, n);
}

void Buffer::copyout(void* dst, size_t n) {
  if (n != static_cast<size_t>(nbytes()))
    throw Error("Buffer.copyout: size mismatch, got " + std::to_string(n) + " bytes for " + str() + " (" + std::to_string(nbytes()) + " bytes)");
  if (!buf_) throw Error("Buffer.copyout: " + str() + " is not allocated; realize it first");
  if (n) allocator_->copyout(dst, buf_, n);
}

std::string Buffer::as_bytes() {
  std::string r(static_cast<size_t>(nbytes()), '\0');
  copyout(r.data(), r.size());
  return r;
}

std::string Buffer::str() const {
  return std::string("<buf real:") + (buf_ ? "True" : "False") + " device:" + device + " size:" + std::to_string(size) +
         " dtype:" + dtype.str() + " offset:" + std::to_string(offset) + ">";
}

void copy_buffer(Buffer& dest, Buffer& src) {
  if (dest.nbytes() != src.nbytes())
    throw Error("copy_buffer: size mismatch, " + dest.str() + " has " + std::to_string(dest.nbytes()) + " bytes, " + src.str() +
                " has " + std::to_string(src.nbytes()));
  copy_buffer(dest, src, src.nbytes());
}

void copy_buffer(Buffer& dest, Buffer& src, int64_t nbytes) {
  TG_ASSERT(nbytes <= dest.nbytes() && nbytes <= src.nbytes(), "copy_buffer: " + std::to_string(nbytes) + " bytes don't fit " + dest.str() + " <- " + src.str());
  if (!src.is_allocated()) throw Error("copy_buffer: source " + src.str() + " is not allocated");
  dest.ensure_allocated();
  size_t n = static_cast<size_t>(nbytes);
  if (n == 0) return;
  if (const void* h = src.allocator().as_host(src.ptr())) { dest.copyin(h, n); return; }
  if (const void* h = dest.allocator().as_host(dest.ptr()); h && dest.device.rfind("DISK", 0) != 0) {
    src.copyout(const_cast<void*>(h), n);
    return;
  }
  std::vector<char> staging(n);
  src.copyout(staging.data(), n);
  dest.copyin(staging.data(), n);
}

}  // namespace tg
