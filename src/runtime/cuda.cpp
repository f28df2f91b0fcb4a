// CUDA device (tinygrad's ops_cuda): the driver API (libcuda.so.1) and NVRTC (libnvrtc.so),
// both loaded with dlopen at run time, so the library builds and runs where CUDA is absent.
// Kernels compile to a CUBIN for the GPU's own sm_XX and launch with cuLaunchKernel; kernel
// parameters are the buffers' device pointers, then the int variables, in order.
// Kernels and copies go in order on one non-blocking stream per device (not the legacy null stream,
// which serializes with every other stream). Host<->device copies pass through pinned staging
// buffers: a copy-in returns once the data is staged and its DMA queued, so it overlaps the kernels
// before it; a copy-out pipelines chunks (DMA of one while the last is copied out of staging).
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <sstream>
#include <vector>

#include "engine/profile.hpp"   // PROFILE spans of a new kernel's load and first launch (first-call time)
#include "runtime/device.hpp"
#include "runtime/tools.hpp"
#include "tg/helpers.hpp"
#include "uop/uop.hpp"   // TG_ASSERT

namespace tg {

namespace {

// ---- the few driver and NVRTC entry points we use (no CUDA headers at build time) ----

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUevent = void*;
using CUgraph = void*;
using CUgraphNode = void*;
using CUgraphExec = void*;
using nvrtcProgram = void*;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;

// cuda.h's CUDA_KERNEL_NODE_PARAMS_v2; its first fields are the v1 struct, so the same pointer suits
// the unversioned (v1) entry points of drivers older than CUDA 12
struct KernelNodeParams {
  CUfunction func;
  unsigned grid[3], block[3];
  unsigned shared_mem_bytes;
  void** kernel_params;
  void** extra;
  void* kern;   // CUkernel, used only when func is null
  CUcontext ctx;
};

struct CudaApi {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc_v2)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH_v2)(void*, CUdeviceptr, size_t);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuEventDestroy_v2)(CUevent);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync_v2)(void*, CUdeviceptr, size_t, CUstream);
  // optional: kernels that describe their launch in a module global (launch_info below) need these
  CUresult (*cuModuleGetGlobal_v2)(CUdeviceptr*, size_t*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuTensorMapEncodeTiled)(void*, int, unsigned, void*, const unsigned long long*, const unsigned long long*, const unsigned*,
                                     const unsigned*, int, int, int, int);
  // the driver's JIT linker (PTX_COMPILER=link): its ptxas in-process, the cubin handed back
  CUresult (*cuLinkCreate_v2)(unsigned, int*, void**, void**);
  CUresult (*cuLinkAddData_v2)(void*, int, void*, size_t, const char*, unsigned, int*, void**);
  CUresult (*cuLinkComplete)(void*, void**, size_t*);
  CUresult (*cuLinkDestroy)(void*);
  // CUDA graphs (optional: without them TinyJit replays kernel by kernel)
  CUresult (*cuGraphCreate)(CUgraph*, unsigned);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuGraphAddKernelNode)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const KernelNodeParams*);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode, const KernelNodeParams*);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  std::string graph_error;    // why graphs are unusable; empty when they loaded

  int (*nvrtcVersion)(int*, int*);
  int (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  int (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
  int (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
  int (*nvrtcGetProgramLog)(nvrtcProgram, char*);
  int (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*);
  int (*nvrtcGetCUBIN)(nvrtcProgram, char*);
  int (*nvrtcDestroyProgram)(nvrtcProgram*);
  const char* (*nvrtcGetErrorString)(int);

  std::string error;          // why CUDA is unusable; empty when it loaded
  std::string nvrtc_dir;      // folder NVRTC came from, for include paths
};

std::vector<std::string> nvrtc_candidates() {
  std::vector<std::string> names{"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}, dirs;
  for (const char* env : {"CUDA_PATH", "CUDA_HOME"})
    if (auto v = getenv_str(env, ""); !v.empty()) dirs.push_back(v + "/lib64"), dirs.push_back(v + "/lib");
  dirs.push_back("/usr/local/cuda/lib64");
  dirs.push_back("/usr/local/cuda/targets/x86_64-linux/lib");
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/usr/local", ec))
    if (e.path().filename().string().rfind("cuda-", 0) == 0) dirs.push_back(e.path().string() + "/lib64");
  std::vector<std::string> r = names;
  for (auto& d : dirs)
    for (auto& n : names) r.push_back(d + "/" + n);
  return r;
}

template <class F>
bool load_sym(void* lib, const char* name, F& fn, std::string& err) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn && err.empty()) err = std::string("symbol ") + name + " missing";
  return fn != nullptr;
}

const CudaApi& api() {
  static const CudaApi a = [] {
    CudaApi a{};
    void* cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu) { a.error = "libcuda.so.1 not found (no NVIDIA driver installed)"; return a; }
    std::string err;
#define TG_CU(name) load_sym(cu, #name, a.name, err)
    TG_CU(cuInit); TG_CU(cuDeviceGetCount); TG_CU(cuDeviceGet); TG_CU(cuDeviceGetAttribute); TG_CU(cuDevicePrimaryCtxRetain);
    TG_CU(cuCtxSetCurrent); TG_CU(cuCtxSynchronize); TG_CU(cuMemAlloc_v2); TG_CU(cuMemFree_v2); TG_CU(cuMemcpyHtoD_v2);
    TG_CU(cuMemcpyDtoH_v2); TG_CU(cuModuleLoadData); TG_CU(cuModuleUnload); TG_CU(cuModuleGetFunction); TG_CU(cuLaunchKernel);
    TG_CU(cuEventCreate); TG_CU(cuEventRecord); TG_CU(cuEventSynchronize); TG_CU(cuEventElapsedTime); TG_CU(cuEventDestroy_v2);
    TG_CU(cuGetErrorString); TG_CU(cuStreamCreate); TG_CU(cuStreamSynchronize); TG_CU(cuMemHostAlloc); TG_CU(cuMemFreeHost);
    TG_CU(cuMemcpyHtoDAsync_v2); TG_CU(cuMemcpyDtoHAsync_v2);
#undef TG_CU
    {
      std::string oerr;   // absent in old drivers: only kernels that ask for them fail (LaunchInfo)
      load_sym(cu, "cuModuleGetGlobal_v2", a.cuModuleGetGlobal_v2, oerr); load_sym(cu, "cuFuncSetAttribute", a.cuFuncSetAttribute, oerr);
      load_sym(cu, "cuTensorMapEncodeTiled", a.cuTensorMapEncodeTiled, oerr);
      load_sym(cu, "cuLinkCreate_v2", a.cuLinkCreate_v2, oerr), load_sym(cu, "cuLinkAddData_v2", a.cuLinkAddData_v2, oerr);
      load_sym(cu, "cuLinkComplete", a.cuLinkComplete, oerr), load_sym(cu, "cuLinkDestroy", a.cuLinkDestroy, oerr);
    }
    if (!err.empty()) { a.error = "libcuda.so.1 is too old: " + err; return a; }
    {
      std::string gerr;
      // CUDA 12's headers name the _v2 entry points; older drivers have only the v1 ones
      if (!load_sym(cu, "cuGraphAddKernelNode_v2", a.cuGraphAddKernelNode, gerr)) gerr.clear(), load_sym(cu, "cuGraphAddKernelNode", a.cuGraphAddKernelNode, gerr);
      if (!load_sym(cu, "cuGraphExecKernelNodeSetParams_v2", a.cuGraphExecKernelNodeSetParams, gerr))
        gerr.clear(), load_sym(cu, "cuGraphExecKernelNodeSetParams", a.cuGraphExecKernelNodeSetParams, gerr);
      load_sym(cu, "cuGraphCreate", a.cuGraphCreate, gerr); load_sym(cu, "cuGraphDestroy", a.cuGraphDestroy, gerr);
      load_sym(cu, "cuGraphInstantiateWithFlags", a.cuGraphInstantiateWithFlags, gerr); load_sym(cu, "cuGraphLaunch", a.cuGraphLaunch, gerr);
      load_sym(cu, "cuGraphExecDestroy", a.cuGraphExecDestroy, gerr);
      if (!gerr.empty()) a.graph_error = "libcuda.so.1 has no CUDA graphs (" + gerr + "); needs a CUDA 11.4+ driver";
    }
    std::vector<std::string> cands = nvrtc_candidates();
    void* rt = nullptr;
    for (auto& c : cands)
      if ((rt = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) { a.nvrtc_dir = std::filesystem::path(c).parent_path().string(); break; }
    if (!rt) { a.error = "libnvrtc.so not found (install the CUDA toolkit's NVRTC, e.g. apt-get install libnvrtc12 / cuda-nvrtc, or set CUDA_PATH)"; return a; }
#define TG_RTC(name) load_sym(rt, #name, a.name, err)
    TG_RTC(nvrtcVersion); TG_RTC(nvrtcCreateProgram); TG_RTC(nvrtcCompileProgram); TG_RTC(nvrtcGetProgramLogSize);
    TG_RTC(nvrtcGetProgramLog); TG_RTC(nvrtcGetCUBINSize); TG_RTC(nvrtcGetCUBIN); TG_RTC(nvrtcDestroyProgram); TG_RTC(nvrtcGetErrorString);
#undef TG_RTC
    if (!err.empty()) { a.error = "libnvrtc is too old (needs CUDA >= 11.1): " + err; return a; }
    if (CUresult r = a.cuInit(0); r != 0) a.error = "cuInit failed with error " + std::to_string(r) + " (driver present but no usable GPU)";
    return a;
  }();
  return a;
}

// the NVRTC / nvJitLink way to read a log or a binary: ask its size, then fill a buffer of that size
template <class H, class SizeFn, class GetFn>
std::string sized_bytes(H h, SizeFn size, GetFn get) {
  size_t n = 0;
  size(h, &n);
  std::string out(n, '\0');
  if (n) get(h, out.data());
  return out;
}

[[noreturn]] void fail(CUresult r, const std::string& what) {
  const char* s = nullptr;
  api().cuGetErrorString(r, &s);
  throw Error("CUDA error " + std::to_string(r) + " (" + (s ? s : "unknown") + ") in " + what);
}
void check(CUresult r, const std::string& what) {
  if (r != 0) fail(r, what);
}
// for the per-launch calls: a literal builds no std::string unless the call failed
void check(CUresult r, const char* what) {
  if (r != 0) fail(r, what);
}

// ---- compiler ----

// nvJitLink (CUDA 12+), loaded on first use: ptxas in-process, PTX -> cubin. The tensor-core GEMM's TMA kernel comes
// as PTX (codegen/tc_gemm_ptx.cpp): without NVRTC's front end and NVVM its compile is ptxas alone.
struct JitLinkApi {
  int (*create)(void**, unsigned, const char**) = nullptr;
  int (*add_data)(void*, int, const void*, size_t, const char*) = nullptr;
  int (*complete)(void*) = nullptr;
  int (*cubin_size)(void*, size_t*) = nullptr;
  int (*cubin)(void*, void*) = nullptr;
  int (*log_size)(void*, size_t*) = nullptr;
  int (*log)(void*, char*) = nullptr;
  int (*destroy)(void**) = nullptr;
  bool ok = false;
};
const JitLinkApi& jitlink() {
  static const JitLinkApi j = [] {
    JitLinkApi a;
    std::vector<std::string> cands;
    for (const char* n : {"libnvJitLink.so", "libnvJitLink.so.13", "libnvJitLink.so.12"}) {
      if (!api().nvrtc_dir.empty()) cands.push_back(api().nvrtc_dir + "/" + n);
      cands.push_back(n);
      cands.push_back(std::string("/usr/local/cuda/lib64/") + n);
    }
    void* lib = nullptr;
    for (const std::string& c : cands)
      if ((lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) return a;
    std::string err;
    load_sym(lib, "nvJitLinkCreate", a.create, err), load_sym(lib, "nvJitLinkAddData", a.add_data, err);
    load_sym(lib, "nvJitLinkComplete", a.complete, err), load_sym(lib, "nvJitLinkGetLinkedCubinSize", a.cubin_size, err);
    load_sym(lib, "nvJitLinkGetLinkedCubin", a.cubin, err), load_sym(lib, "nvJitLinkGetErrorLogSize", a.log_size, err);
    load_sym(lib, "nvJitLinkGetErrorLog", a.log, err), load_sym(lib, "nvJitLinkDestroy", a.destroy, err);
    a.ok = err.empty();
    return a;
  }();
  return j;
}

std::string nvjitlink_cubin(const std::string& ptx, const std::string& arch) {
  const JitLinkApi& j = jitlink();
  const std::string opt = "-arch=" + arch;
  const char* opts[] = {opt.c_str()};
  void* h = nullptr;
  if (j.create(&h, 1, opts) != 0) throw Error("CUDA compile: nvJitLinkCreate(" + opt + ") failed");
  auto fail = [&](const char* what) {
    const std::string log = sized_bytes(h, j.log_size, j.log);
    j.destroy(&h);
    throw Error(std::string("CUDA compile (nvJitLink ") + what + ", " + arch + "):\n" + log.c_str() + "\nPTX:\n" + ptx);
  };
  if (j.add_data(h, 2 /* NVJITLINK_INPUT_PTX */, ptx.data(), ptx.size(), "tg.ptx") != 0) fail("AddData");
  if (j.complete(h) != 0) fail("Complete");
  std::string bin = sized_bytes(h, j.cubin_size, j.cubin);
  j.destroy(&h);
  return bin;
}

// the toolkit's ptxas next to NVRTC (or under CUDA_PATH, CUDA_HOME, /usr/local/cuda), if any. A compile asks twice
// (the backend, the cachekey); the answer is kept per process for the CUDA_PATH and CUDA_HOME it was found with (a
// change of either looks again; a ptxas installed later in a process with the same values is not seen)
std::optional<std::string> ptxas_path() {
  static std::mutex mu;
  static std::optional<std::pair<std::string, std::optional<std::string>>> found;   // (CUDA_PATH \n CUDA_HOME, path)
  const std::string path_env = getenv_str("CUDA_PATH", ""), home_env = getenv_str("CUDA_HOME", "");
  const std::string key = path_env + "\n" + home_env;
  std::lock_guard<std::mutex> lock(mu);
  if (found && found->first == key) return found->second;
  std::vector<std::string> dirs;
  if (!api().nvrtc_dir.empty()) dirs.push_back(api().nvrtc_dir + "/../bin");
  for (const std::string& v : {path_env, home_env})
    if (!v.empty()) dirs.push_back(v + "/bin");
  dirs.push_back("/usr/local/cuda/bin");
  found.emplace(key, std::nullopt);
  for (const std::string& d : dirs)
    if (access((d + "/ptxas").c_str(), X_OK) == 0) return found->second = d + "/ptxas";
  return std::nullopt;
}

std::string ptxas_cubin(const std::string& exe, const std::string& ptx, const std::string& arch) {
  const std::string in = write_temp("tg_ptx", ".ptx", ptx), out = in + ".cubin";
  std::string log;
  std::vector<std::string> cmd{exe, "-arch=" + arch, "-o", out, in};
  // -O1 by default (ptxas' own default is 3): the 128x256 TMA GEMM's compile executes 11.5% fewer instructions, its
  // SASS keeps its registers and instruction count, and the GEMM's speed on the H100 was the same (tc_notes.md, ptx13b)
  cmd.push_back("-O" + std::to_string(getenv("PTX_OPT", int64_t{1})));
  const int rc = run_tool(cmd, &log);
  std::ifstream f(out, std::ios::binary);
  std::ostringstream bin;
  bin << f.rdbuf();
  unlink(in.c_str()), unlink(out.c_str());
  if (rc != 0) throw Error("CUDA compile (" + exe + " -arch=" + arch + ", exit " + std::to_string(rc) + "):\n" + log + "\nPTX:\n" + ptx);
  return bin.str();
}

// the driver's JIT linker: PTX -> cubin in-process, for the device of ctx. The result is a cubin, which the program
// and disk caches keep, but the linker compiles its inputs relocatable (-rdc), as nvJitLink does.
std::string link_cubin(const std::string& ptx, CUcontext ctx) {
  const CudaApi& a = api();
  check(a.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");   // BEAM compiles on worker threads
  std::string err(8192, '\0');
  std::vector<int> opt{5 /* CU_JIT_ERROR_LOG_BUFFER */, 6 /* ..._SIZE_BYTES */, 2 /* CU_JIT_WALL_TIME */};
  std::vector<void*> val{err.data(), reinterpret_cast<void*>(err.size()), nullptr};   // the driver writes the time into val[2]
  if (const int64_t o = getenv("PTX_OPT", int64_t{-1}); o >= 0)   // the JIT's -O (default 4)
    opt.push_back(7 /* CU_JIT_OPTIMIZATION_LEVEL */), val.push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(o)));
  void* st = nullptr;
  check(a.cuLinkCreate_v2(static_cast<unsigned>(opt.size()), opt.data(), val.data(), &st), "cuLinkCreate");
  void* cubin = nullptr;
  size_t n = 0;
  CUresult r = a.cuLinkAddData_v2(st, 1 /* CU_JIT_INPUT_PTX */, const_cast<char*>(ptx.data()), ptx.size(), "tg.ptx", 0, nullptr, nullptr);
  if (r == 0) r = a.cuLinkComplete(st, &cubin, &n);
  std::string bin = r == 0 ? std::string(static_cast<const char*>(cubin), n) : std::string();   // owned by the link state
  a.cuLinkDestroy(st);
  if (r != 0) throw Error("CUDA compile (the driver's JIT linker, error " + std::to_string(r) + "):\n" + err.c_str() + "\nPTX:\n" + ptx);
  float wall_ms = 0;
  std::memcpy(&wall_ms, &val[2], sizeof(float));
  if (debug() >= 3) std::fprintf(stderr, "cuLink: %zu bytes of PTX -> %zu of cubin in %.1f ms\n", ptx.size(), n, wall_ms);
  return bin;
}

// PTX text -> cubin for arch (sm_XXa). PTX_COMPILER picks how (H100 figures for the 128x256 GEMM's PTX: bench/
// tc_notes.md, session 13, ptx13b): ptxas (the default where found: the toolkit's binary, a child process,
// whole-program; 147 ms median first call), driver (the default without ptxas: the PTX is the binary and
// cuModuleLoadData JITs it whole-program, in-process; as fast as ptxas, 130-183 ms; CUDAProgram shares a loaded PTX
// module between the programs of one binary, so a new shape of a compiled config JITs nothing; the driver's compute
// cache keeps the result across processes unless CUDA_CACHE_DISABLE=1), link (the driver's JIT linker: a cubin, but
// compiled relocatable: 198-251 ms, and the kernel 15% slower at 4096^3: 16 bytes of stack) or nvjitlink (in-process,
// relocatable too: 215-263 ms). PTX_OPT sets the -O level of ptxas (default 1) and link (the driver's default 4).
std::string ptx_compiler() {
  const std::string how = getenv_str("PTX_COMPILER", "");
  return !how.empty() ? how : ptxas_path() ? "ptxas" : "driver";
}
std::string ptx_to_cubin(const std::string& ptx, const std::string& arch, CUcontext ctx) {
  const std::string how = ptx_compiler();
  const std::optional<std::string> exe = ptxas_path();
  const bool link = api().cuLinkCreate_v2 && api().cuLinkAddData_v2 && api().cuLinkComplete && api().cuLinkDestroy;
  if (how == "driver") return ptx;
  if (how == "link" && link) return link_cubin(ptx, ctx);
  if (how == "ptxas" && exe) return ptxas_cubin(*exe, ptx, arch);
  if (how == "nvjitlink" && jitlink().ok) return nvjitlink_cubin(ptx, arch);
  throw Error("PTX_COMPILER=" + how + ": not available here (driver JIT linker " + (link ? "loaded" : "not found") + ", ptxas " +
              (exe ? *exe : std::string("not found")) + ", libnvJitLink " + (jitlink().ok ? "loaded" : "not found") +
              "); use driver, link, ptxas or nvjitlink");
}

class CUDACompiler : public Compiler {
 public:
  CUDACompiler(std::string arch, CUcontext ctx) : arch_(std::move(arch)), ctx_(ctx) {
    api().nvrtcVersion(&major_, &minor_);
    opts_ = {"--gpu-architecture=" + arch_};
    for (const char* env : {"CUDA_PATH", "CUDA_HOME"})
      if (auto v = getenv_str(env, ""); !v.empty()) opts_.push_back("-I" + v + "/include");
    if (!api().nvrtc_dir.empty()) opts_.push_back("-I" + api().nvrtc_dir + "/../include");
    for (const char* d : {"/usr/local/cuda/include", "/usr/include", "/opt/cuda/include"}) opts_.push_back(std::string("-I") + d);
    if (major_ * 100 + minor_ >= 1204) opts_.push_back("--minimal");   // faster compiles of small kernels
    // NVRTC's automatic precompiled header (12.8+): the first kernel with a prelude (the defines and
    // cuda_fp16.h) writes it into a per-process folder under /tmp, later kernels with the same prelude load it
    // instead of parsing the header (9% of a 1536^3 GEMM's compile; same cubins, also from concurrent compiles).
    // NVRTC_PCH=0 turns it off.
    if (major_ * 100 + minor_ >= 1208 && getenv("NVRTC_PCH", 1) != 0) opts_.push_back("--pch");
  }
  std::string cachekey() const override {
    // the PTX backend too: the driver backend's binary is the PTX (the program caches must not hand it to another)
    return "CUDA " + arch_ + " nvrtc" + std::to_string(major_) + "." + std::to_string(minor_) + " cubin ptx:" + ptx_compiler() + getenv_str("PTX_OPT", "");
  }
  std::string compile(const std::string& src) override {
    // a PTX module (its own .target, sm_90a for the TMA GEMM): no NVRTC, PTX_COMPILER's backend
    if (src.rfind(".version", 0) == 0) {
      const size_t t = src.find(".target ");
      TG_ASSERT(t != std::string::npos, "CUDA compile: PTX without .target");
      return ptx_to_cubin(src, src.substr(t + 8, src.find_first_of(" \n", t + 8) - (t + 8)), ctx_);
    }
    const CudaApi& a = api();
    nvrtcProgram prog = nullptr;
    if (int r = a.nvrtcCreateProgram(&prog, src.c_str(), "<tg>", 0, nullptr, nullptr); r != 0)
      throw Error(std::string("CUDA compile: nvrtcCreateProgram failed: ") + a.nvrtcGetErrorString(r));
    std::vector<const char*> o;
    for (auto& s : opts_) o.push_back(s.c_str());
    // wgmma (the tensor-core GEMM template on Hopper) exists only for the arch-specific target sm_90a
    const std::string arch_a = "--gpu-architecture=" + arch_ + "a";
    if (arch_ == "sm_90" && src.find("wgmma.mma_async") != std::string::npos) o[0] = arch_a.c_str();
    int r = a.nvrtcCompileProgram(prog, static_cast<int>(o.size()), o.data());
    if (r != 0) {
      const std::string log = sized_bytes(prog, a.nvrtcGetProgramLogSize, a.nvrtcGetProgramLog);
      a.nvrtcDestroyProgram(&prog);
      throw Error(std::string("CUDA compile failed (NVRTC: ") + a.nvrtcGetErrorString(r) + ", " + arch_ + "):\n" + log.c_str() + "\nsource:\n" + src);
    }
    std::string bin = sized_bytes(prog, a.nvrtcGetCUBINSize, a.nvrtcGetCUBIN);
    a.nvrtcDestroyProgram(&prog);
    return bin;
  }

 private:
  std::string arch_;
  CUcontext ctx_;   // the JIT linker compiles for this context's device
  int major_ = 0, minor_ = 0;
  std::vector<std::string> opts_;
};

// ---- memory ----

// Pinned host memory the DMA engine reads and writes directly (pageable memory is staged by the
// driver, synchronously). Two slots alternate; an event says when a slot's last copy finished.
class Staging {
 public:
  static constexpr size_t kSlot = size_t{16} << 20;
  Staging(CUcontext ctx, CUstream stream) : ctx_(ctx), stream_(stream) {}
  ~Staging() {
    for (Slot& s : slots_) {
      if (s.done) api().cuEventDestroy_v2(s.done);
      if (s.host) api().cuMemFreeHost(s.host);
    }
  }
  // the next slot, once the copy that last used it has finished
  void* acquire(CUevent*& done) {
    Slot& s = slots_[next_];
    next_ = (next_ + 1) % slots_.size();
    if (!s.host) {
      check(api().cuMemHostAlloc(&s.host, kSlot, 0), "cuMemHostAlloc (pinned staging, " + std::to_string(kSlot) + " bytes)");
      check(api().cuEventCreate(&s.done, 0x2 /* CU_EVENT_DISABLE_TIMING */), "cuEventCreate");
    } else if (s.used) {
      check(api().cuEventSynchronize(s.done), "staging copy");
    }
    s.used = true;
    done = &s.done;
    return s.host;
  }
  CUstream stream() const { return stream_; }
 private:
  struct Slot { void* host = nullptr; CUevent done = nullptr; bool used = false; };
  CUcontext ctx_;
  CUstream stream_;
  std::array<Slot, 2> slots_{};
  size_t next_ = 0;
};

class CUDAAllocator : public Allocator {
 public:
  CUDAAllocator(CUcontext ctx, CUstream stream) : ctx_(ctx), stream_(stream), staging_(ctx, stream) {}
  void copyin(void* dst, const void* src, size_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    check(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    for (size_t off = 0; off < n; off += Staging::kSlot) {
      const size_t len = std::min(Staging::kSlot, n - off);
      CUevent* done = nullptr;
      void* host = staging_.acquire(done);
      std::memcpy(host, static_cast<const char*>(src) + off, len);
      check(api().cuMemcpyHtoDAsync_v2(reinterpret_cast<CUdeviceptr>(dst) + off, host, len, stream_),
            "cuMemcpyHtoDAsync (" + std::to_string(len) + " bytes)");
      check(api().cuEventRecord(*done, stream_), "cuEventRecord");
    }
  }
  void copyout(void* dst, const void* src, size_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    check(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    // queue chunk i+1 before copying chunk i out of staging
    struct Pending { void* host; CUevent* done; size_t off, len; };
    std::optional<Pending> last;
    auto drain = [&](const Pending& p) {
      check(api().cuEventSynchronize(*p.done), "cuMemcpyDtoHAsync (" + std::to_string(p.len) + " bytes)");
      std::memcpy(static_cast<char*>(dst) + p.off, p.host, p.len);
    };
    for (size_t off = 0; off < n; off += Staging::kSlot) {
      const size_t len = std::min(Staging::kSlot, n - off);
      CUevent* done = nullptr;
      if (last) drain(*last), last.reset();   // frees the other slot before acquire waits on it
      void* host = staging_.acquire(done);
      check(api().cuMemcpyDtoHAsync_v2(host, reinterpret_cast<CUdeviceptr>(src) + off, len, stream_),
            "cuMemcpyDtoHAsync (" + std::to_string(len) + " bytes)");
      check(api().cuEventRecord(*done, stream_), "cuEventRecord");
      last = Pending{host, done, off, len};
    }
    if (last) drain(*last);
  }
 protected:
  void* _alloc(size_t nbytes) override {
    check(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    CUdeviceptr p = 0;
    check(api().cuMemAlloc_v2(&p, nbytes), "cuMemAlloc (" + std::to_string(nbytes) + " bytes)");
    return reinterpret_cast<void*>(p);
  }
  void _free(void* p, size_t) override {
    api().cuCtxSetCurrent(ctx_);
    api().cuMemFree_v2(reinterpret_cast<CUdeviceptr>(p));   // waits for the work queued on it
  }
 private:
  CUcontext ctx_;
  CUstream stream_;
  Staging staging_;
  std::mutex mu_;
};

// ---- program ----

// cuLaunchKernel's kernelParams: a pointer to each argument's value (buffer addresses, then ints),
// on the stack for the usual few arguments
class ParamSlots {
 public:
  // extra: pointers to further argument values (the tensor maps of a TMA kernel), passed after the ints
  ParamSlots(const std::vector<void*>& bufs, const std::vector<int>& vals, const std::vector<void*>& extra = {})
      : n_(bufs.size() + vals.size() + extra.size()) {
    if (n_ > kInline) heap_vals_.resize(n_), heap_ptrs_.resize(n_);
    uint64_t* v = n_ > kInline ? heap_vals_.data() : vals_;
    void** p = n_ > kInline ? heap_ptrs_.data() : ptrs_;
    size_t i = 0;
    for (void* b : bufs) v[i] = reinterpret_cast<CUdeviceptr>(b), p[i] = &v[i], i++;
    for (int x : vals) {
      int32_t x32 = x;
      std::memcpy(&v[i], &x32, sizeof(x32));   // the kernel reads 4 bytes for an int
      p[i] = &v[i], i++;
    }
    for (void* e : extra) p[i++] = e;
  }
  ParamSlots(const ParamSlots&) = delete;
  ParamSlots& operator=(const ParamSlots&) = delete;
  void** ptrs() { return n_ > kInline ? heap_ptrs_.data() : ptrs_; }
 private:
  static constexpr size_t kInline = 16;
  size_t n_;
  uint64_t vals_[kInline];
  void* ptrs_[kInline];
  std::vector<uint64_t> heap_vals_;
  std::vector<void*> heap_ptrs_;
};

// grid and block from global and local sizes (missing dims are 1)
void launch_dims(const std::vector<int64_t>& global_size, const std::vector<int64_t>& local_size, unsigned g[3], unsigned l[3]) {
  for (size_t i = 0; i < 3; i++) {
    g[i] = i < global_size.size() ? static_cast<unsigned>(global_size[i]) : 1;
    l[i] = i < local_size.size() ? static_cast<unsigned>(local_size[i]) : 1;
  }
}

// A kernel may describe its launch in a module global `tg_launch` (long long[]; the tensor-core GEMM template
// does): {1, dynamic shared bytes, number of tensor maps, then per map kMapFields values: buffer index, data
// type (CUtensorMapDataType), rank, swizzle (CUtensorMapSwizzle), byte offset into the buffer, dims[5],
// byte strides of dims 1..4, box[5]}. A negative offset, dim or stride -(1 + i) is the launch's int argument i
// (vals[i]: the shape-generic GEMM's sizes and strides), offset and strides then counted in elements of the map's
// data type. Dynamic shared memory above 48 KiB needs the function attribute; a tensor map (cuTensorMapEncodeTiled,
// TMA) holds the buffer's address, so it is encoded per launch and passed by value (a __grid_constant__ parameter
// after the ints).
struct TensorMapSpec {
  int buf = 0, dtype = 0, rank = 0, swizzle = 0;
  long long offset = 0, dims[5] = {}, strides[4] = {};
  unsigned box[5] = {};
};
// bytes of an element of CUtensorMapDataType t (UINT8, UINT16, UINT32, INT32, UINT64, INT64, FLOAT16, FLOAT32,
// FLOAT64, BFLOAT16, FLOAT32_FTZ, TFLOAT32, TFLOAT32_FTZ)
long long tensor_map_elem_bytes(int t) {
  static const long long bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  TG_ASSERT(t >= 0 && t < 13, "tensor map data type " + std::to_string(t));
  return bytes[t];
}
// a tg_launch field: itself, or (negative) int argument -(1 + f) of the launch times scale
unsigned long long launch_field(long long f, const std::vector<int>& vals, long long scale, const std::string& name) {
  if (f >= 0) return static_cast<unsigned long long>(f);
  const size_t i = static_cast<size_t>(-(f + 1));
  TG_ASSERT(i < vals.size() && vals[i] >= 0, "kernel " + name + ": tensor map field refers to int argument " + std::to_string(i) + " of " +
                                                 std::to_string(vals.size()));
  return static_cast<unsigned long long>(vals[i]) * static_cast<unsigned long long>(scale);
}
struct alignas(64) TensorMap { unsigned long long v[16]; };
struct LaunchInfo {
  static constexpr int kMapFields = 19;
  unsigned shared_bytes = 0;
  std::vector<TensorMapSpec> maps;
};

std::optional<LaunchInfo> read_launch_info(CUmodule module, const std::string& name) {
  const CudaApi& a = api();
  CUdeviceptr dp = 0;
  size_t bytes = 0;
  if (!a.cuModuleGetGlobal_v2 || a.cuModuleGetGlobal_v2(&dp, &bytes, module, "tg_launch") != 0) return std::nullopt;
  std::vector<long long> v(bytes / sizeof(long long));
  check(a.cuMemcpyDtoH_v2(v.data(), dp, v.size() * sizeof(long long)), "reading tg_launch of " + name);
  TG_ASSERT(v.size() >= 3 && v[0] == 1 && v.size() == 3 + static_cast<size_t>(v[2]) * LaunchInfo::kMapFields,
            "tg_launch of " + name + " is malformed");
  LaunchInfo li;
  li.shared_bytes = static_cast<unsigned>(v[1]);
  for (long long m = 0; m < v[2]; m++) {
    const long long* f = v.data() + 3 + m * LaunchInfo::kMapFields;
    TensorMapSpec t;
    t.buf = static_cast<int>(f[0]), t.dtype = static_cast<int>(f[1]), t.rank = static_cast<int>(f[2]), t.swizzle = static_cast<int>(f[3]);
    t.offset = f[4];
    for (int i = 0; i < 5; i++) t.dims[i] = f[5 + i], t.box[i] = static_cast<unsigned>(f[14 + i]);
    for (int i = 0; i < 4; i++) t.strides[i] = f[10 + i];
    TG_ASSERT(t.rank >= 1 && t.rank <= 5, "tg_launch of " + name + ": tensor map rank " + std::to_string(t.rank));
    li.maps.push_back(t);
  }
  return li;
}

// A loaded module. A PTX binary (PTX_COMPILER=driver) JIT-compiles at every cuModuleLoadData (43 ms for the 128x256
// TMA GEMM on the H100), so its programs share one module per context: a new shape of a shape-generic kernel, which
// has the same binary, then loads nothing. Cubins load in ~1 ms and keep a module each.
struct Module {
  CUmodule m = nullptr;
  ~Module() { if (m) api().cuModuleUnload(m); }
};
std::shared_ptr<Module> load_module(CUcontext ctx, const std::string& lib, const std::string& name) {
  static std::mutex mu;
  static std::map<std::pair<CUcontext, std::string>, std::weak_ptr<Module>> ptx_modules;
  const bool ptx = lib.rfind(".version", 0) == 0;
  std::lock_guard<std::mutex> lock(mu);
  if (ptx)
    if (std::shared_ptr<Module> m = ptx_modules[{ctx, lib}].lock()) return m;
  auto m = std::make_shared<Module>();
  check(api().cuModuleLoadData(&m->m, lib.data()), "cuModuleLoadData for " + name);
  if (ptx) {
    std::erase_if(ptx_modules, [](const auto& e) { return e.second.expired(); });   // unloaded binaries' keys
    ptx_modules[{ctx, lib}] = m;
  }
  return m;
}

class CUDAProgram : public RuntimeProgram {
 public:
  CUDAProgram(CUcontext ctx, CUstream stream, const std::string& name, const std::string& lib) : ctx_(ctx), stream_(stream), name_(name) {
    check(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    {
      profile::Span span("module_load", name);
      loaded_ = load_module(ctx, lib, name);
      module_ = loaded_->m;
      check(api().cuModuleGetFunction(&fn_, module_, name.c_str()), "cuModuleGetFunction: no kernel named " + name + " in the module");
    }
    profile::Span span("launch_info", name);   // tg_launch read back, cuFuncSetAttribute
    if (auto li = read_launch_info(module_, name)) {
      info_ = std::move(*li);
      if (info_.shared_bytes > 48 * 1024) {
        if (!api().cuFuncSetAttribute) throw Error("kernel " + name + " needs cuFuncSetAttribute (a CUDA 9+ driver)");
        check(api().cuFuncSetAttribute(fn_, 8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */, static_cast<int>(info_.shared_bytes)),
              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " + std::to_string(info_.shared_bytes) + ") for " + name);
      }
      if (!info_.maps.empty() && !api().cuTensorMapEncodeTiled)
        throw Error("kernel " + name + " uses TMA: needs cuTensorMapEncodeTiled (a CUDA 12 driver); set TC_TMA=0");
    }
  }

  double operator()(const std::vector<void*>& bufs, const std::vector<int64_t>& global_size,
                    const std::vector<int64_t>& local_size, const std::vector<int>& vals, bool wait) override {
    const CudaApi& a = api();
    // a new kernel's first launch (lazy module loading may land here), its tensor maps' encoding in it
    std::optional<profile::Span> first;
    if (!launched_) first.emplace("first_launch", name_), launched_ = true;
    check(a.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    std::vector<TensorMap> maps;
    std::vector<void*> extra;
    {
      std::optional<profile::Span> enc;
      if (first && !info_.maps.empty()) enc.emplace("tensor_map_encode", name_);
      encode_maps(bufs, vals, maps, extra);
    }
    ParamSlots params(bufs, vals, extra);
    unsigned g[3], l[3];
    launch_dims(global_size, local_size, g, l);
    CUevent ev[2] = {nullptr, nullptr};
    if (wait) {
      for (auto& e : ev) check(a.cuEventCreate(&e, 0), "cuEventCreate");
      check(a.cuEventRecord(ev[0], stream_), "cuEventRecord");
    }
    if (CUresult r = a.cuLaunchKernel(fn_, g[0], g[1], g[2], l[0], l[1], l[2], info_.shared_bytes, stream_, params.ptrs(), nullptr); r != 0)
      fail(r, "cuLaunchKernel " + name_ + " grid " + to_str(global_size) + " block " + to_str(local_size));
    if (!wait) return 0;
    check(a.cuEventRecord(ev[1], stream_), "cuEventRecord");
    check(a.cuEventSynchronize(ev[1]), "kernel " + name_);
    float ms = 0;
    a.cuEventElapsedTime(&ms, ev[0], ev[1]);
    for (auto& e : ev) a.cuEventDestroy_v2(e);
    return ms * 1e-3;
  }
  // the kernel's tensor maps for these buffers (extra: a pointer to each, for ParamSlots); maps is sized once
  void encode_maps(const std::vector<void*>& bufs, const std::vector<int>& vals, std::vector<TensorMap>& maps, std::vector<void*>& extra) const {
    if (info_.maps.empty()) return;
    maps.resize(info_.maps.size());
    for (size_t i = 0; i < info_.maps.size(); i++) {
      const TensorMapSpec& t = info_.maps[i];
      TG_ASSERT(t.buf >= 0 && static_cast<size_t>(t.buf) < bufs.size(), "kernel " + name_ + ": tensor map of buffer " + std::to_string(t.buf));
      const long long es = tensor_map_elem_bytes(t.dtype);
      unsigned long long dims[5], strides[4];
      for (int d = 0; d < 5; d++) dims[d] = launch_field(t.dims[d], vals, 1, name_);
      for (int d = 0; d < 4; d++) strides[d] = launch_field(t.strides[d], vals, es, name_);
      void* addr = static_cast<char*>(bufs[t.buf]) + launch_field(t.offset, vals, es, name_);
      const unsigned elem_strides[5] = {1, 1, 1, 1, 1};
      if (CUresult r = api().cuTensorMapEncodeTiled(&maps[i], t.dtype, static_cast<unsigned>(t.rank), addr, dims, strides, t.box, elem_strides,
                                                    0, t.swizzle, 2 /* L2 promotion 128B */, 0 /* OOB: zeros */);
          r != 0)
        fail(r, "cuTensorMapEncodeTiled for " + name_ + " buffer " + std::to_string(t.buf) +
                    " (a TMA tensor needs a 16-byte aligned address and strides; TC_TMA=0 avoids TMA)");
      extra.push_back(&maps[i]);
    }
  }
  unsigned shared_bytes() const { return info_.shared_bytes; }
  CUfunction function() const { return fn_; }
  const std::string& name() const { return name_; }

 private:
  CUcontext ctx_;
  CUstream stream_;
  std::shared_ptr<Module> loaded_;   // module_'s owner
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  std::string name_;
  LaunchInfo info_;
  bool launched_ = false;
};

// ---- graphs (tinygrad's runtime/graph/cuda.py) ----

// Kernel nodes in a chain (each depends on the one before), instantiated once; update() rewrites a
// node's parameters in the executable graph with cuGraphExecKernelNodeSetParams.
class CUDAGraph : public DeviceGraph {
 public:
  CUDAGraph(CUcontext ctx, CUstream stream) : ctx_(ctx), stream_(stream) {
    check(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    check(api().cuGraphCreate(&graph_, 0), "cuGraphCreate");
  }
  ~CUDAGraph() override {
    api().cuCtxSetCurrent(ctx_);
    if (exec_) api().cuGraphExecDestroy(exec_);
    if (graph_) api().cuGraphDestroy(graph_);
    for (auto& e : ev_) if (e) api().cuEventDestroy_v2(e);
  }
  size_t add_kernel(RuntimeProgram& prg, const KernelLaunch& args) override {
    TG_ASSERT(!exec_, "CUDAGraph: add_kernel after instantiate");
    auto* cp = dynamic_cast<CUDAProgram*>(&prg);
    TG_ASSERT(cp, "CUDAGraph: a kernel of another device in a CUDA graph");
    std::vector<TensorMap> maps;
    std::vector<void*> extra;
    cp->encode_maps(args.bufs, args.vals, maps, extra);
    ParamSlots params(args.bufs, args.vals, extra);
    KernelNodeParams np = node_params(cp->function(), cp->shared_bytes(), args, params);
    CUgraphNode node = nullptr;
    check(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    const CUgraphNode* dep = nodes_.empty() ? nullptr : &nodes_.back();
    check(api().cuGraphAddKernelNode(&node, graph_, dep, dep ? 1 : 0, &np), "cuGraphAddKernelNode " + cp->name());
    nodes_.push_back(node);
    progs_.push_back(cp);
    return nodes_.size() - 1;
  }
  void instantiate() override {
    check(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    check(api().cuGraphInstantiateWithFlags(&exec_, graph_, 0), "cuGraphInstantiate (" + std::to_string(nodes_.size()) + " kernels)");
  }
  void update(size_t node, const KernelLaunch& args) override {
    TG_ASSERT(exec_ && node < nodes_.size(), "CUDAGraph: update of node " + std::to_string(node) + " before instantiate or out of range");
    std::vector<TensorMap> maps;
    std::vector<void*> extra;
    progs_[node]->encode_maps(args.bufs, args.vals, maps, extra);
    ParamSlots params(args.bufs, args.vals, extra);
    KernelNodeParams np = node_params(progs_[node]->function(), progs_[node]->shared_bytes(), args, params);
    check(api().cuGraphExecKernelNodeSetParams(exec_, nodes_[node], &np), "cuGraphExecKernelNodeSetParams");
  }
  double launch(bool wait) override {
    TG_ASSERT(exec_, "CUDAGraph: launch before instantiate");
    const CudaApi& a = api();
    check(a.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    if (wait) {
      for (auto& e : ev_) if (!e) check(a.cuEventCreate(&e, 0), "cuEventCreate");
      check(a.cuEventRecord(ev_[0], stream_), "cuEventRecord");
    }
    if (CUresult r = a.cuGraphLaunch(exec_, stream_); r != 0) fail(r, "cuGraphLaunch (" + std::to_string(nodes_.size()) + " kernels)");
    if (!wait) return 0;
    check(a.cuEventRecord(ev_[1], stream_), "cuEventRecord");
    check(a.cuEventSynchronize(ev_[1]), "graph of " + std::to_string(nodes_.size()) + " kernels");
    float ms = 0;
    a.cuEventElapsedTime(&ms, ev_[0], ev_[1]);
    return ms * 1e-3;
  }

 private:
  static KernelNodeParams node_params(CUfunction fn, unsigned shared_bytes, const KernelLaunch& args, ParamSlots& params) {
    KernelNodeParams np{};
    np.func = fn;
    np.shared_mem_bytes = shared_bytes;
    launch_dims(args.global_size, args.local_size, np.grid, np.block);
    np.kernel_params = params.ptrs();   // the driver copies the values now
    return np;
  }
  CUcontext ctx_;
  CUstream stream_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  std::vector<CUgraphNode> nodes_;
  std::vector<const CUDAProgram*> progs_;   // the programs outlive the graph (the JIT holds both)
  CUevent ev_[2] = {nullptr, nullptr};
};

class CUDADevice : public Compiled {
 public:
  CUDADevice(const std::string& name, int id) : Compiled(name) {
    const CudaApi& a = api();
    check(a.cuDeviceGet(&dev_, id), "cuDeviceGet(" + std::to_string(id) + ")");
    check(a.cuDevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
    int major = 0, minor = 0;
    check(a.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev_), "compute capability");
    check(a.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev_), "compute capability");
    arch_ = "sm_" + std::to_string(major) + std::to_string(minor);
    check(a.cuDeviceGetAttribute(&sms_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev_), "multiprocessor count");
    check(a.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    check(a.cuStreamCreate(&stream_, 0x1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");
    alloc_ = std::make_unique<CUDAAllocator>(ctx_, stream_);
    compiler_ = std::make_unique<CUDACompiler>(arch_, ctx_);
  }
  Allocator& allocator() override { return *alloc_; }
  Compiler& compiler() override { return *compiler_; }
  std::unique_ptr<RuntimeProgram> runtime(const std::string& fn_name, const std::string& lib) override {
    return std::make_unique<CUDAProgram>(ctx_, stream_, fn_name, lib);
  }
  std::unique_ptr<DeviceGraph> graph() override {
    if (!api().graph_error.empty()) {
      if (debug() >= 1) std::fprintf(stderr, "CUDA graphs unavailable: %s\n", api().graph_error.c_str());
      return nullptr;
    }
    return std::make_unique<CUDAGraph>(ctx_, stream_);
  }
  void synchronize() override {
    check(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    check(api().cuCtxSynchronize(), "cuCtxSynchronize on " + name);
  }
  std::string renderer_kind() const override { return "CUDA"; }
  std::string arch() const override { return arch_; }
  int multiprocessors() const override { return sms_; }

 private:
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  std::string arch_;
  int sms_ = 0;
  std::unique_ptr<CUDAAllocator> alloc_;
  std::unique_ptr<CUDACompiler> compiler_;
};

}  // namespace

// NVRTC alone (no driver needed): renders can be compiled on machines without a GPU.
namespace {
struct Nvrtc {
  int (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*compile)(nvrtcProgram, int, const char* const*) = nullptr;
  int (*log_size)(nvrtcProgram, size_t*) = nullptr;
  int (*log)(nvrtcProgram, char*) = nullptr;
  int (*cubin_size)(nvrtcProgram, size_t*) = nullptr;
  int (*cubin)(nvrtcProgram, char*) = nullptr;
  int (*destroy)(nvrtcProgram*) = nullptr;
  std::string dir;
};
const Nvrtc* nvrtc_only() {
  static const std::optional<Nvrtc> n = []() -> std::optional<Nvrtc> {
    for (auto& c : nvrtc_candidates()) {
      void* rt = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!rt) continue;
      Nvrtc r;
      std::string err;
      load_sym(rt, "nvrtcCreateProgram", r.create, err); load_sym(rt, "nvrtcCompileProgram", r.compile, err);
      load_sym(rt, "nvrtcGetProgramLogSize", r.log_size, err); load_sym(rt, "nvrtcGetProgramLog", r.log, err);
      load_sym(rt, "nvrtcGetCUBINSize", r.cubin_size, err); load_sym(rt, "nvrtcGetCUBIN", r.cubin, err);
      load_sym(rt, "nvrtcDestroyProgram", r.destroy, err);
      if (!err.empty()) return std::nullopt;
      r.dir = std::filesystem::path(c).parent_path().string();
      return r;
    }
    return std::nullopt;
  }();
  return n ? &*n : nullptr;
}
}  // namespace

bool nvrtc_available() { return nvrtc_only() != nullptr; }

std::string nvrtc_compile(const std::string& src, const std::string& arch) {
  const Nvrtc* n = nvrtc_only();
  if (!n) throw Error("nvrtc_compile: libnvrtc.so not found (install the CUDA toolkit's NVRTC or set CUDA_PATH)");
  std::vector<std::string> opts{"--gpu-architecture=" + arch, "-I" + n->dir + "/../include", "-I/usr/local/cuda/include"};
  std::vector<const char*> o;
  for (auto& x : opts) o.push_back(x.c_str());
  nvrtcProgram prog = nullptr;
  if (n->create(&prog, src.c_str(), "<tg>", 0, nullptr, nullptr) != 0) throw Error("nvrtc_compile: nvrtcCreateProgram failed");
  int r = n->compile(prog, static_cast<int>(o.size()), o.data());
  const std::string log = sized_bytes(prog, n->log_size, n->log);
  if (r != 0) {
    n->destroy(&prog);
    throw Error("nvrtc_compile (" + arch + ") failed:\n" + log + "\nsource:\n" + src);
  }
  std::string bin = sized_bytes(prog, n->cubin_size, n->cubin);
  n->destroy(&prog);
  return bin;
}

int cuda_device_count() {
  const CudaApi& a = api();
  if (!a.error.empty()) {
    if (debug() >= 1) std::fprintf(stderr, "CUDA unavailable: %s\n", a.error.c_str());
    return 0;
  }
  int n = 0;
  return a.cuDeviceGetCount(&n) == 0 ? n : 0;
}

std::unique_ptr<Compiled> make_cuda_device(const std::string& name) {
  const CudaApi& a = api();
  if (!a.error.empty()) throw Error("get_device(" + name + "): CUDA is not available: " + a.error + "; use DEVICE=CPU");
  size_t colon = name.find(':');
  int id = 0;
  try {
    id = colon == std::string::npos ? 0 : std::stoi(name.substr(colon + 1));
  } catch (const std::exception&) {
    throw Error("get_device(" + name + "): the CUDA device number must be an integer, e.g. CUDA:1");
  }
  int n = cuda_device_count();
  if (id < 0 || id >= n) throw Error("get_device(" + name + "): there are " + std::to_string(n) + " CUDA devices (CUDA:0 .. CUDA:" + std::to_string(n - 1) + ")");
  return std::make_unique<CUDADevice>(name, id);
}

}  // namespace tg
