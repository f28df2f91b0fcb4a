// DISK device ("DISK:/path"): a file as memory, for loading and saving weights.
// The file is mapped read-only (a stray write can't corrupt a checkpoint); copyin writes
// through pwrite, which the shared mapping sees. The first allocation opens and maps the file,
// growing (or creating) it when it is smaller than asked; the last free unmaps it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/buffer.hpp"
#include "tg/helpers.hpp"

namespace tg {

namespace {

class DiskAllocator : public Allocator {
 public:
  explicit DiskAllocator(std::string path) : path_(std::move(path)) {}
  ~DiskAllocator() override { close_map(); }

  void copyin(void* dst, const void* src, size_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    size_t off = static_cast<size_t>(static_cast<char*>(dst) - base_);
    if (wfd_ < 0) wfd_ = ::open(path_.c_str(), O_RDWR);
    if (wfd_ < 0) throw Error("DISK:" + path_ + ": can't open for writing: " + std::strerror(errno));
    for (size_t done = 0; done < n;) {
      ssize_t w = ::pwrite(wfd_, static_cast<const char*>(src) + done, n - done, static_cast<off_t>(off + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw Error("DISK:" + path_ + ": write failed at byte " + std::to_string(off + done) + ": " + std::strerror(errno));
      done += static_cast<size_t>(w);
    }
  }
  void copyout(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  const void* as_host(void* p) const override { return p; }

 protected:
  bool lru() const override { return false; }   // a free closes the file instead of caching it
  void* _alloc(size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (count_ > 0 && nbytes > size_)
      throw Error("DISK:" + path_ + ": can't reopen with a larger size (" + std::to_string(nbytes) + " bytes) while it is open with " +
                  std::to_string(size_) + "; free the other DISK buffers of this file first");
    if (count_++ == 0) open_map(nbytes);
    return base_;
  }
  void _free(void*, size_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (--count_ == 0) close_map();
  }

 private:
  void open_map(size_t nbytes) {
    struct stat st{};
    if (::stat(path_.c_str(), &st) != 0 || static_cast<size_t>(st.st_size) < nbytes) {
      int fd = ::open(path_.c_str(), O_RDWR | O_CREAT, 0644);
      if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(nbytes)) != 0) {
        std::string e = std::strerror(errno);
        if (fd >= 0) ::close(fd);
        count_ = 0;
        throw Error("DISK:" + path_ + ": can't create or grow the file to " + std::to_string(nbytes) + " bytes: " + e);
      }
      ::close(fd);
    }
    int fd = ::open(path_.c_str(), O_RDONLY);
    void* p = fd < 0 ? MAP_FAILED : ::mmap(nullptr, nbytes, PROT_READ, MAP_SHARED, fd, 0);
    std::string e = std::strerror(errno);
    if (fd >= 0) ::close(fd);   // the mapping keeps the file
    if (p == MAP_FAILED) { count_ = 0; throw Error("DISK:" + path_ + ": can't open or map the file: " + e); }
    base_ = static_cast<char*>(p);
    size_ = nbytes;
  }
  void close_map() {
    if (base_) ::munmap(base_, size_);
    if (wfd_ >= 0) ::close(wfd_);
    base_ = nullptr;
    size_ = 0;
    wfd_ = -1;
  }
  std::string path_;
  std::mutex mu_;
  char* base_ = nullptr;
  size_t size_ = 0;
  int count_ = 0, wfd_ = -1;
};

class DiskDevice : public Compiled {
 public:
  explicit DiskDevice(const std::string& name) : Compiled(name), alloc_(name.substr(5)) {}
  Allocator& allocator() override { return alloc_; }
 private:
  DiskAllocator alloc_;
};

}  // namespace

std::shared_ptr<void> map_file_private(const std::string& path, size_t offset, size_t n, void** ptr) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE)), lead = offset % page, len = lead + n;
  int fd = ::open(path.c_str(), O_RDONLY);
  // populated read-only, then made writable: populating a writable private mapping would copy every page
  void* p = fd < 0 ? MAP_FAILED : ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, static_cast<off_t>(offset - lead));
  std::string e = std::strerror(errno);
  if (fd >= 0) ::close(fd);
  if (p == MAP_FAILED) throw Error("DISK:" + path + ": can't map " + std::to_string(n) + " bytes at " + std::to_string(offset) + ": " + e);
  if (::mprotect(p, len, PROT_READ | PROT_WRITE) != 0) {
    e = std::strerror(errno);
    ::munmap(p, len);
    throw Error("DISK:" + path + ": can't make a private mapping writable: " + e);
  }
  *ptr = static_cast<char*>(p) + lead;
  return std::shared_ptr<void>(p, [len](void* q) { ::munmap(q, len); });
}

std::unique_ptr<Compiled> make_disk_device(const std::string& name) { return std::make_unique<DiskDevice>(name); }

}  // namespace tg
