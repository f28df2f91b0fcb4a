// Runs the CUDA kernels of a schedule on the CPU: each rendered kernel is compiled as C++ with
// threadIdx/blockIdx thread-locals, one std::thread per CUDA thread of a block (blocks one after
// another, so `__shared__` is a function static), __syncthreads a block barrier and
// __shfl_xor_sync an exchange through a per-block slot array between two barriers. That checks
// the generated index math, loop bounds, gates and the group reduction without a GPU (CI has none).
// Limits: float/int kernels only (no half), every thread of a block must reach each barrier and
// shuffle (the kernels the GPU heuristics make for rows do: see lowerer.cpp's store gate).
#pragma once
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "access.hpp"
#include "codegen/kernel.hpp"
#include "renderer/cstyle.hpp"
#include "runtime/buffer.hpp"
#include "tg/tg.hpp"

namespace cuda_emu {

// the CUDA the renderer emits, as C++ over std::thread
inline const char* kPrelude = R"EMU(
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
struct emu_dim3 { int x = 0, y = 0, z = 0; };
thread_local emu_dim3 threadIdx, blockIdx;
static std::barrier<>* emu_bar = nullptr;
static uint64_t emu_slots[1024];
#define __global__
#define __launch_bounds__(n)
#define __shared__ static
#define __syncthreads() emu_bar->arrive_and_wait()
inline int emu_tid();
template <class T> T __shfl_xor_sync(unsigned, T v, int m) {
  static_assert(sizeof(T) <= 8);
  const int t = emu_tid();
  std::memcpy(&emu_slots[t], &v, sizeof(T));
  emu_bar->arrive_and_wait();
  T r;
  std::memcpy(&r, &emu_slots[t ^ m], sizeof(T));
  emu_bar->arrive_and_wait();
  return r;
}
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float max(float a, float b) { return a > b ? a : b; }
inline double max(double a, double b) { return a > b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
using std::exp2; using std::log2; using std::sqrt; using std::sin;
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct int2 { int x, y; };
struct int4 { int x, y, z, w; };
inline int2 make_int2(int a, int b) { return {a, b}; }
inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }
static int emu_lx = 1, emu_ly = 1;
inline int emu_tid() { return threadIdx.x + emu_lx * (threadIdx.y + emu_ly * threadIdx.z); }
)EMU";

// the launcher: a std::thread per thread of a block, running every block in turn
inline const char* kLaunch = R"EMU(
extern "C" void emu_launch(void** bufs, const int* vals, const int* g, const int* l) {
  const int n = l[0] * l[1] * l[2];
  emu_lx = l[0], emu_ly = l[1];
  std::barrier<> bar(n);
  emu_bar = &bar;
  std::vector<std::thread> ts;
  for (int t = 0; t < n; t++)
    ts.emplace_back([&, t] {
      threadIdx = {t % l[0], (t / l[0]) % l[1], t / (l[0] * l[1])};
      for (int bz = 0; bz < g[2]; bz++)
        for (int by = 0; by < g[1]; by++)
          for (int bx = 0; bx < g[0]; bx++) {
            blockIdx = {bx, by, bz};
            emu_call(bufs, vals);
            bar.arrive_and_wait();   // the block's shared memory is the next block's
          }
    });
  for (auto& t : ts) t.join();
}
)EMU";

using Launch = void (*)(void**, const int*, const int*, const int*);

// one compiled kernel (the .so and its source are removed when it goes)
struct Compiled {
  std::string base;
  void* h = nullptr;
  Launch launch = nullptr;
  std::string error;
  explicit Compiled(const tg::RenderedProgram& p) {
    static int idx = 0;
    base = "/tmp/tg_cuda_emu_" + std::to_string(getpid()) + "_" + std::to_string(idx++);
    // the kernel's parameters: pointers are the buffers in order, ints the variables in order
    std::smatch m;
    const std::regex sig("\\b" + p.function_name + "\\(([^)]*)\\)");
    if (!std::regex_search(p.src, m, sig)) { error = "no signature for " + p.function_name; return; }
    std::string call = p.function_name + "(";
    std::string params = m[1].str();
    int nb = 0, nv = 0;
    for (size_t pos = 0; pos <= params.size();) {
      size_t end = params.find(',', pos);
      if (end == std::string::npos) end = params.size();
      const std::string prm = params.substr(pos, end - pos);
      const size_t star = prm.rfind('*');
      if (nb + nv) call += ", ";
      if (star != std::string::npos) call += "(" + prm.substr(0, star + 1) + ")bufs[" + std::to_string(nb++) + "]";
      else call += "vals[" + std::to_string(nv++) + "]";
      pos = end + 1;
    }
    call += ");";
    std::string src = std::string(kPrelude) + p.src + "\nvoid emu_call(void** bufs, const int* vals) { " + call + " }\n" + kLaunch;
    // the renderer's own macros are the GPU's; the prelude defines what they need
    src = std::regex_replace(src, std::regex("#define INFINITY.*\n|#define NAN.*\n"), "");
    { FILE* f = std::fopen((base + ".cpp").c_str(), "w"); std::fputs(src.c_str(), f); std::fclose(f); }
    const std::string cmd = "c++ -std=c++20 -O1 -shared -fPIC -w -o " + base + ".so " + base + ".cpp -lpthread 2> " + base + ".log";
    if (std::system(cmd.c_str()) != 0 || !(h = dlopen((base + ".so").c_str(), RTLD_NOW | RTLD_LOCAL))) {
      FILE* f = std::fopen((base + ".log").c_str(), "r");
      char buf[4096] = {0};
      if (f) { size_t n = std::fread(buf, 1, sizeof(buf) - 1, f); buf[n] = 0; std::fclose(f); }
      error = "emulation compile failed: " + std::string(buf) + "\n" + src;
      return;
    }
    launch = reinterpret_cast<Launch>(dlsym(h, "emu_launch"));
  }
  ~Compiled() {
    if (h) dlclose(h);
    for (const char* ext : {".cpp", ".so", ".log"}) std::remove((base + ext).c_str());
  }
};

// The kernels as the GPU would get them (hand-coded opts for `ren`, or `opts` when given), and a run
// of them on host memory: realized CPU buffers are the inputs, the others start zeroed.
struct Run {
  std::vector<tg::RenderedProgram> programs;
  std::vector<std::vector<tg::Opt>> opts;
  std::vector<std::string> errors;
  std::vector<char> out;   // the last kernel's first output's bytes
};

inline Run run(const tg::Tensor& t, const tg::Renderer& ren, const std::optional<std::vector<tg::Opt>>& opts = std::nullopt) {
  using namespace tg;
  Run r;
  std::map<Buffer*, std::vector<char>> mem;
  auto host = [&](const std::shared_ptr<Buffer>& b) -> char* {
    Buffer& base = b->base();
    auto [it, fresh] = mem.try_emplace(&base, std::vector<char>(base.nbytes(), 0));
    if (fresh && base.is_allocated()) base.copyout(it->second.data(), it->second.size());
    return it->second.data() + b->offset;
  };
  static std::map<std::string, std::unique_ptr<Compiled>> cache;   // by source: one compile per kernel
  const std::vector<ScheduleItem> sched = t.schedule();
  for (const ScheduleItem& si : sched) {
    if (si.kind != MetaOps::KERNEL) { r.errors.push_back("not a kernel: " + si.str()); continue; }
    Kernel k(Access::uop(si.ast), ren);
    if (opts) {
      for (const Opt& o : *opts) k.apply_opt(o);
    } else {
      k.skip_failed_opts = !k.vars.empty();
      k.hand_coded_optimizations();
      k.skip_failed_opts = false;
    }
    RenderedProgram p = k.to_program("emu_kernel");   // (one name: one compile per program)
    auto& c = cache[p.src];
    if (!c) c = std::make_unique<Compiled>(p);
    if (!c->launch) { r.errors.push_back(c->error); return r; }
    std::vector<void*> bufs;
    for (const auto& b : si.bufs) bufs.push_back(host(b));
    std::vector<int> vals;
    std::unordered_map<std::string, int64_t> vv(si.var_vals.begin(), si.var_vals.end());
    for (const std::string& v : p.vars) vals.push_back(static_cast<int>(vv.at(v)));
    for (int64_t a : p.arg_vals) vals.push_back(static_cast<int>(a));   // a shape-generic kernel's sizes, after the variables
    auto [g, l] = p.launch_dims(vv);
    std::vector<int> gi(3, 1), li(3, 1);
    for (size_t i = 0; i < g.size() && i < 3; i++) gi[i] = static_cast<int>(g[i]);
    for (size_t i = 0; i < l.size() && i < 3; i++) li[i] = static_cast<int>(l[i]);
    c->launch(bufs.data(), vals.data(), gi.data(), li.data());
    r.programs.push_back(p);
    r.opts.push_back(k.applied_opts);
    const auto& o = si.bufs[0];
    r.out.assign(host(o), host(o) + o->nbytes());
  }
  return r;
}

template <class T>
std::vector<T> values(const Run& r) {
  std::vector<T> v(r.out.size() / sizeof(T));
  std::memcpy(v.data(), r.out.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace cuda_emu
