// Devices (tinygrad's device.py): a Compiled device bundles an Allocator, a Compiler and a
// program loader. get_device("CPU" | "CUDA:1" | "DISK:/path") opens each device once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tg {

// Device memory. Opaque handles are void*: a host pointer (CPU, DISK) or a device address (CUDA).
// Freed buffers are kept per size and handed out again (tinygrad's LRUAllocator), so a training
// loop doesn't call malloc/cuMemAlloc every step; LRU=0 frees at once.
class Allocator {
 public:
  virtual ~Allocator() = default;
  void* alloc(size_t nbytes);
  void free(void* p, size_t nbytes);
  void free_cache();                                        // really frees every cached buffer
  size_t cached_bytes() const;
  virtual void copyin(void* dst, const void* src, size_t n) = 0;    // host -> device
  virtual void copyout(void* dst, const void* src, size_t n) = 0;   // device -> host
  virtual void* offset(void* base, size_t nbytes, size_t byte_offset);   // a view into base
  virtual const void* as_host(void* p) const { return nullptr; }   // host-readable address, if any
 protected:
  virtual void* _alloc(size_t nbytes) = 0;   // throws tg::Error when out of memory
  virtual void _free(void* p, size_t nbytes) = 0;
  virtual bool lru() const { return true; }
 private:
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> cache_;
};

// Turns source into a binary. compile_cached consults the sqlite disk cache (cache.hpp).
class Compiler {
 public:
  virtual ~Compiler() = default;
  virtual std::string compile(const std::string& src) = 0;   // the binary's bytes; tg::Error on failure
  std::string compile_cached(const std::string& src);
  virtual std::string cachekey() const = 0;                  // device + compiler + flags
  int64_t compile_count = 0;                                 // real (uncached) compiles, for tests and DEBUG
  double compile_seconds = 0;                                // time spent in them
};

// A loaded kernel. Returns the kernel's run time in seconds when wait, else 0.
class RuntimeProgram {
 public:
  virtual ~RuntimeProgram() = default;
  virtual double operator()(const std::vector<void*>& bufs, const std::vector<int64_t>& global_size,
                            const std::vector<int64_t>& local_size, const std::vector<int>& vals, bool wait) = 0;
};

// Launch arguments of one kernel as a runtime takes them: buffer handles, then int variable values.
struct KernelLaunch {
  std::vector<void*> bufs;
  std::vector<int> vals;
  std::vector<int64_t> global_size{1, 1, 1}, local_size{1, 1, 1};
  bool operator==(const KernelLaunch&) const = default;
};

// A device-side batch of kernels (tinygrad's GraphRunner backends; CUDA graphs): recorded once,
// launched with one call, each kernel running after the one added before it. A kernel's arguments
// and launch dims are changed in place (no rebuild) before the next launch.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual size_t add_kernel(RuntimeProgram& prg, const KernelLaunch& args) = 0;   // before instantiate(); its node index
  virtual void instantiate() = 0;
  virtual void update(size_t node, const KernelLaunch& args) = 0;                // after instantiate()
  virtual double launch(bool wait) = 0;   // queued on the device's stream; the run time in seconds when wait, else 0
};

class Compiled {
 public:
  explicit Compiled(std::string name_) : name(std::move(name_)) {}
  virtual ~Compiled() = default;
  Compiled(const Compiled&) = delete;
  Compiled& operator=(const Compiled&) = delete;

  const std::string name;   // canonical: "CPU", "CUDA", "CUDA:1", "DISK:/path"
  virtual Allocator& allocator() = 0;
  virtual Compiler& compiler();   // DISK: throws
  virtual std::unique_ptr<RuntimeProgram> runtime(const std::string& fn_name, const std::string& lib);
  virtual void synchronize() {}
  // A new, empty device graph; nullptr where the device has none (CPU, or a driver without graphs).
  virtual std::unique_ptr<DeviceGraph> graph() { return nullptr; }
  virtual std::string renderer_kind() const { return ""; }   // "C", "CUDA"; "" can't run kernels
  virtual std::string arch() const { return ""; }            // "sm_90" on CUDA
  virtual int multiprocessors() const { return 0; }         // the GPU's SM count (CUDA); 0: unknown
  virtual std::string c_half_type() const { return ""; }     // CPU: "__fp16" with clang, "_Float16" with gcc
};

Compiled& get_device(const std::string& name);   // unknown or absent -> tg::Error listing the known devices
std::string canonicalize_device(const std::string& name);   // "cpu"/"CLANG" -> "CPU", "cuda:0" -> "CUDA", "" -> default
std::string default_device();                    // DEVICE=..., or CPU=1/CUDA=1, else the best present
std::vector<std::string> available_devices();    // devices that can run kernels here: "CPU", then "CUDA" when present

// Factories, one per backend file (cpu.cpp, cuda.cpp, disk.cpp).
std::unique_ptr<Compiled> make_cpu_device(const std::string& name);
std::unique_ptr<Compiled> make_cuda_device(const std::string& name);
std::unique_ptr<Compiled> make_disk_device(const std::string& name);
int cuda_device_count();   // 0 when there is no driver or no GPU; never throws
// NVRTC without a GPU or driver: compiles CUDA source to a CUBIN for arch ("sm_90"); tg::Error with
// the compiler's log on failure or when NVRTC is absent.
bool nvrtc_available();
std::string nvrtc_compile(const std::string& src, const std::string& arch);

}  // namespace tg
