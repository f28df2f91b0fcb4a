// CPU device (tinygrad's ops_clang): C source -> clang (or cc) -> .so bytes -> dlopen, run on
// the thread pool. Calling convention fixed with the C renderer: each source exports
//   void NAME_call(void** bufs, const int* vals, int core_lo, int core_hi)
// which runs the kernel for global index 0 in [core_lo, core_hi).
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/device.hpp"
#include "runtime/threadpool.hpp"
#include "runtime/tools.hpp"
#include "tg/helpers.hpp"

namespace tg {

namespace {

// ---- temp files ----

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& suffix, const std::string& data = "") : path(write_temp("tg", suffix, data)) {}
  ~TempFile() { unlink(path.c_str()); }
};

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> r;
  std::stringstream ss(s);
  for (std::string w; ss >> w;) r.push_back(w);
  return r;
}

std::string numbered(const std::string& src) {
  std::stringstream in(src), out;
  int i = 1;
  for (std::string line; std::getline(in, line); i++) out << (i < 10 ? "  " : i < 100 ? " " : "") << i << " " << line << "\n";
  return out.str();
}

// ---- compiler ----

// Half-precision selects, clamps, masked reductions and float round trips: the code shapes after which gcc
// emits masked vmovsh (the CPU reference kernels of the fp16 GEMM tests failed to assemble on one such machine)
constexpr const char* kHalfSelects = R"(typedef _Float16 h;
void sel(h* restrict o, const h* restrict a, const h* restrict b, int n) {
  for (int i = 0; i < n; i++) { h x = a[i], y = b[i]; o[i] = x > y ? x : (h)0; } }
h maxr(const h* a, int n) { h m = a[0]; for (int i = 1; i < n; i++) m = a[i] > m ? a[i] : m; return m; }
h pick(h a, h b, int c) { return c ? a : b; }
void clampf(h* restrict o, const float* restrict a, int n) {
  for (int i = 0; i < n; i++) { float v = a[i]; o[i] = (h)(v < 0.f ? 0.f : v > 1.f ? 1.f : v); } }
float dot(const h* restrict a, const h* restrict b, int n) {
  float acc = 0.f; for (int i = 0; i < n; i++) acc += (float)a[i] * (float)(i < n - 3 ? b[i] : (h)1); return acc; }
)";

class ClangCompiler : public Compiler {
 public:
  // CC overrides (may hold extra words, e.g. "ccache clang"); else clang, else the system cc.
  static std::vector<std::string> cc() {
    std::string env = getenv_str("CC", "");
    if (!env.empty()) return split_words(env);
    static const std::string found = find_tool("clang") ? "clang" : "cc";
    return {found};
  }
  static std::vector<std::string> flags() {
    static const std::vector<std::string> f = [] {
      // 512-bit vectors kept whole: the renderer's float16 accumulators (vector_bytes 64) are otherwise split
      // into two 256-bit halves on cores tuned to prefer them (clang's icelake), which doubles the
      // registers a register tile needs and spills it (matmul 1024^3 1.5x, a 4 x 5 conv tile 2.6x)
      std::vector<std::string> r{"-shared", "-O2", "-march=native", "-mprefer-vector-width=512", "-fPIC", "-fno-math-errno", "-w", "-x", "c"};
      if (!assembles_native_fp16()) r.insert(r.begin() + 4, "-mno-avx512fp16");
      return r;
    }();
    return f;
  }
  // A compiler newer than its assembler emits AVX512-FP16 code for -march=native (a CPU with it) that the
  // assembler rejects ("unsupported masking for `vmovsh'", binutils < 2.39 beside a newer gcc): ask the
  // toolchain once whether it has the extension and can assemble its masked moves; if not, leave it out.
  static bool assembles_native_fp16() {
    auto ok = [](std::vector<std::string> argv, const std::string& suffix, const std::string& src) {
      TempFile in(suffix, src), out(".o"), log(".log");
      argv.insert(argv.end(), {in.path, "-o", out.path});
      int err = 0;
      return run_process(argv, log.path, err) == 0;
    };
    std::vector<std::string> c = cc();
    c.insert(c.end(), {"-march=native", "-c", "-x", "c"});
    if (!ok(c, ".c", "#ifdef __AVX512FP16__\n#error has fp16\n#endif\nint x;\n")) {
      // the masked moves the kernels' half selects, clamps and loads compile to (which forms the assembler
      // rejects differs by version: three hand-written forms passed where the kernels' code failed)
      std::vector<std::string> as = cc();
      as.insert(as.end(), {"-c", "-x", "assembler"});
      std::vector<std::string> full = cc();
      full.insert(full.end(), {"-O2", "-march=native", "-c", "-x", "c"});
      return ok(as, ".s", "vmovsh %xmm1, %xmm2, %xmm0{%k1}\nvmovsh (%rax), %xmm0{%k1}{z}\nvmovsh %xmm0, (%rax){%k1}\n") &&
             ok(full, ".c", kHalfSelects);
    }
    return true;   // no AVX512-FP16 under -march=native: nothing to leave out
  }
  // -march=native binaries only run on this kind of CPU, so a shared cache must tell CPUs apart
  static const std::string& cpu_model() {
    static const std::string model = [] {
      std::ifstream f("/proc/cpuinfo");
      for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 1);
      return std::string(" unknown");
    }();
    return model;
  }
  std::string cachekey() const override {
    std::string k = "CPU" + cpu_model() + ":";
    for (auto& w : cc()) k += " " + w;
    for (auto& f : flags()) k += " " + f;
    return k;
  }
  std::string compile(const std::string& src) override {
    TempFile in(".c", src), out(".so"), log(".log");
    std::vector<std::string> argv = cc();
    auto fl = flags();
    argv.insert(argv.end(), fl.begin(), fl.end());
    argv.insert(argv.end(), {in.path, "-o", out.path, "-lm"});
    int err = 0, rc = run_process(argv, log.path, err);
    if (rc == -1)
      throw Error("CPU compile: can't run the C compiler '" + argv[0] + "' (" + std::strerror(err) +
                  "); install clang (apt-get install clang) or set CC to a working C compiler");
    if (rc != 0)
      throw Error("CPU compile failed (" + argv[0] + " exit " + std::to_string(rc) + "):\n" + read_file(log.path) +
                  "source:\n" + numbered(src));
    return read_file(out.path);
  }
};

// ---- program ----

using CallFn = void (*)(void**, const int*, int, int);

class CPUProgram : public RuntimeProgram {
 public:
  CPUProgram(const std::string& name, const std::string& lib) : name_(name) {
    TempFile so(".so", lib);   // dlopen needs a file; unlinked once loaded
    handle_ = dlopen(so.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw Error("CPU program " + name + ": dlopen failed: " + dlerror());
    fn_ = reinterpret_cast<CallFn>(dlsym(handle_, (name + "_call").c_str()));
    if (!fn_) {
      dlclose(handle_);
      throw Error("CPU program " + name + ": the binary has no entry point " + name +
                  "_call(void** bufs, const int* vals, int core_lo, int core_hi); the C renderer must emit it");
    }
  }
  ~CPUProgram() override { if (handle_) dlclose(handle_); }

  double operator()(const std::vector<void*>& bufs, const std::vector<int64_t>& global_size,
                    const std::vector<int64_t>& local_size, const std::vector<int>& vals, bool wait) override {
    // a clock read costs as much as a tiny kernel (tens of ns; more in a VM): only when timed
    const auto t0 = wait ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    void** b = const_cast<void**>(bufs.data());
    const int* v = vals.data();
    const int64_t g = global_size.empty() ? 1 : global_size[0];
    ThreadPool::global().parallel_range(g, [&](int64_t lo, int64_t hi) { fn_(b, v, static_cast<int>(lo), static_cast<int>(hi)); });
    if (!wait) return 0;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  std::string name_;
  void* handle_ = nullptr;
  CallFn fn_ = nullptr;
};

// ---- graph ----

// tinygrad's ClangGraph without its code generation: the batch's calls, each with its own copy of
// the arguments (as a CUDA graph holds its nodes' parameters), run in order by one launch. The same
// contract as CUDA graphs, so TinyJit's batching and in-place updates run on every machine.
class CPUGraph : public DeviceGraph {
 public:
  size_t add_kernel(RuntimeProgram& prg, const KernelLaunch& args) override {
    if (instantiated_) throw Error("CPU graph: add_kernel after instantiate");
    auto* p = dynamic_cast<CPUProgram*>(&prg);
    if (!p) throw Error("CPU graph: only CPU kernels can be added");
    nodes_.push_back({p, args});
    return nodes_.size() - 1;
  }
  void instantiate() override { instantiated_ = true; }
  void update(size_t node, const KernelLaunch& args) override {
    if (!instantiated_ || node >= nodes_.size()) throw Error("CPU graph: update of node " + std::to_string(node) + " before instantiate or out of range");
    nodes_[node].args = args;
  }
  double launch(bool wait) override {
    if (!instantiated_) throw Error("CPU graph: launch before instantiate");
    const auto t0 = wait ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    for (Node& n : nodes_) (*n.prg)(n.args.bufs, n.args.global_size, n.args.local_size, n.args.vals, false);
    return wait ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() : 0;
  }

 private:
  struct Node { CPUProgram* prg; KernelLaunch args; };
  std::vector<Node> nodes_;
  bool instantiated_ = false;
};

// ---- memory ----

class MallocAllocator : public Allocator {
 public:
  void copyin(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copyout(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  const void* as_host(void* p) const override { return p; }
 protected:
  // Large buffers are mapped with their pages populated in one call: first touching fresh pages one fault
  // at a time runs at ~0.25 GB/s in a VM (a 500 MB checkpoint copy took seconds), populating at ~3 GB/s.
  // Buffers of 4 MB and more are placed on 2 MB boundaries and asked for transparent huge pages: a kernel
  // streaming a 38 MB operand (beautiful_mnist's conv1 grad_output) through 4 KB pages misses the TLB on
  // every page it enters (6-8% of the conv1 weight gradient's time). CPU_HUGEPAGES=0: 4 KB pages.
  static constexpr size_t kMapBytes = size_t(1) << 20, kHugeMin = size_t(4) << 20, kHuge = size_t(2) << 20;
  static void* map_huge(size_t nbytes) {
    char* p = static_cast<char*>(::mmap(nullptr, nbytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) return nullptr;
    char* a = p + (kHuge - reinterpret_cast<uintptr_t>(p) % kHuge) % kHuge;   // the first 2 MB boundary
    if (a > p) ::munmap(p, static_cast<size_t>(a - p));
    if (const size_t tail = static_cast<size_t>(p + nbytes + kHuge - (a + nbytes))) ::munmap(a + nbytes, tail);
    ::madvise(a, nbytes, MADV_HUGEPAGE);
    if (::madvise(a, nbytes, MADV_POPULATE_WRITE) != 0)   // (older kernels: the pages fault in on first touch)
      for (size_t i = 0; i < nbytes; i += 4096) a[i] = 0;
    return a;
  }
  void* _alloc(size_t nbytes) override {
    if (nbytes >= kHugeMin && getenv("CPU_HUGEPAGES", 1))
      if (void* p = map_huge(nbytes)) return p;
    if (nbytes >= kMapBytes) {
      void* p = ::mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
      if (p == MAP_FAILED) throw Error("CPU: out of memory mapping " + std::to_string(nbytes) + " bytes");
      return p;
    }
    void* p = nullptr;
    // 64-byte aligned so vector loads (float4, AVX) are aligned
    if (posix_memalign(&p, 64, (nbytes + 63) / 64 * 64) != 0)
      throw Error("CPU: out of memory allocating " + std::to_string(nbytes) + " bytes");
    return p;
  }
  void _free(void* p, size_t nbytes) override {
    if (nbytes >= kMapBytes) ::munmap(p, nbytes);
    else std::free(p);
  }
};

class CPUDevice : public Compiled {
 public:
  using Compiled::Compiled;
  Allocator& allocator() override { return alloc_; }
  Compiler& compiler() override { return compiler_; }
  std::unique_ptr<RuntimeProgram> runtime(const std::string& fn_name, const std::string& lib) override {
    return std::make_unique<CPUProgram>(fn_name, lib);
  }
  std::unique_ptr<DeviceGraph> graph() override { return std::make_unique<CPUGraph>(); }
  std::string renderer_kind() const override { return "C"; }
  // gcc has no __fp16 on x86; clang's __fp16 computes in float, as tinygrad's CLANG device does
  std::string c_half_type() const override {
    for (const std::string& w : ClangCompiler::cc())
      if (w.find("clang") != std::string::npos) return "__fp16";
    return "_Float16";
  }

 private:
  MallocAllocator alloc_;
  ClangCompiler compiler_;
};

}  // namespace

std::unique_ptr<Compiled> make_cpu_device(const std::string& name) { return std::make_unique<CPUDevice>(name); }

}  // namespace tg
