// Tensor cores (OptOps::TC, WMMA -> mma.sync):
//   codegen checks that need no GPU: which kernels take the opt, the opts and shapes it leaves, the rendered
//     CUDA compiled to PTX by NVRTC (under /usr/local/cuda here and on CI) for sm_80 and sm_90a;
//   GPU checks against the CPU: square and odd shapes, batched, transposed, fp16/bf16 in, fp16/fp32 out, an epilogue.
#include <gtest/gtest.h>
#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <cstdlib>
#include <random>
#include <unistd.h>

#include "access.hpp"
#include "codegen/kernel.hpp"
#include "engine/realize.hpp"
#include "engine/schedule.hpp"
#include "renderer/cstyle.hpp"
#include "runtime/device.hpp"
#include "shape/shapetracker_arg.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {

const CUDARenderer& sm80() { static CUDARenderer r("sm_80"); return r; }

// the last kernel's AST of a tensor's schedule (built on the CPU: the AST does not depend on the device)
UOp last_ast(const Tensor& t) {
  UOp ast;
  for (const ScheduleItem& si : t.schedule())
    if (si.kind == MetaOps::KERNEL) ast = Access::uop(si.ast);
  return ast;
}

Tensor mat(Shape s, DType dt) { return Tensor::empty(std::move(s), {.dtype = dt, .device = "CPU"}); }

// out[m, n] = (dout) sum_k (acc) a[m, k] * b[k, n], by hand: the CPU schedule computes bfloat16 through its bits,
// a CUDA schedule multiplies bfloat16 loads directly, as built here
UOp gemm_ast(int64_t m, int64_t k, int64_t n, DType din, DType acc, DType dout) {
  auto ld = [&](int64_t i, const ShapeTracker& st) { return UOp(Ops::LOAD, din, {UOp(Ops::DEFINE_GLOBAL, din.ptr_to(), {}, i), st_uop(st)}); };
  UOp a = ld(1, ShapeTracker::from_shape({m, 1, k}).expand({m, n, k}));
  UOp b = ld(2, ShapeTracker::from_shape({k, n}).permute({1, 0}).reshape({1, n, k}).expand({m, n, k}));
  UOp mul = a.alu(BinaryOps::MUL, b);
  UOp red(Ops::REDUCE_AXIS, acc, {acc == din ? mul : mul.cast(acc)}, ReduceArg{ReduceOps::SUM, {2}});
  UOp out = dout == acc ? red : red.cast(dout);
  UOp st(Ops::STORE, dtypes::void_, {UOp(Ops::DEFINE_GLOBAL, dout.ptr_to(), {}, 0), st_uop(ShapeTracker::from_shape({m, n, 1})), out});
  return UOp(Ops::SINK, dtypes::void_, {st});
}

// the last kernel of a channels-last conv2d (tensor/conv.cpp; CONV_NHWC=2 takes it on the CPU too): the implicit GEMM
// out[n, co, y, x] = sum_{ky, kx, ci} xl[n, y*s + ky, x*s + kx, ci] * wl[co, ky, kx, ci], optionally + bias, relu
UOp conv_ast(const Shape& x, const Shape& w, int64_t stride, int64_t pad, bool bias_relu) {
  Context ctx({{"CONV_NHWC", 2}});
  std::optional<Tensor> bias;
  if (bias_relu) bias = mat({w[0]}, dtypes::half);
  Tensor out = mat(x, dtypes::half).conv2d(mat(w, dtypes::half), bias, 1, {stride}, {1}, {pad});
  return last_ast(bias_relu ? out.relu() : out);
}

// NVRTC straight from the toolkit: PTX needs no GPU and no driver
struct Nvrtc {
  using Prog = void*;
  int (*create)(Prog*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*compile)(Prog, int, const char* const*) = nullptr;
  int (*ptx_size)(Prog, size_t*) = nullptr;
  int (*ptx)(Prog, char*) = nullptr;
  int (*log_size)(Prog, size_t*) = nullptr;
  int (*log)(Prog, char*) = nullptr;
  int (*destroy)(Prog*) = nullptr;
  bool ok = false;
  Nvrtc() {
    void* h = nullptr;
    for (const char* n : {"libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"})
      if ((h = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) return;
    create = reinterpret_cast<decltype(create)>(dlsym(h, "nvrtcCreateProgram"));
    compile = reinterpret_cast<decltype(compile)>(dlsym(h, "nvrtcCompileProgram"));
    ptx_size = reinterpret_cast<decltype(ptx_size)>(dlsym(h, "nvrtcGetPTXSize"));
    ptx = reinterpret_cast<decltype(ptx)>(dlsym(h, "nvrtcGetPTX"));
    log_size = reinterpret_cast<decltype(log_size)>(dlsym(h, "nvrtcGetProgramLogSize"));
    log = reinterpret_cast<decltype(log)>(dlsym(h, "nvrtcGetProgramLog"));
    destroy = reinterpret_cast<decltype(destroy)>(dlsym(h, "nvrtcDestroyProgram"));
    ok = create && compile && ptx_size && ptx && log_size && log && destroy;
  }
  // PTX for arch, or the compiler's log after "ERROR:"
  std::string to_ptx(const std::string& src, const std::string& arch) const {
    Prog p = nullptr;
    if (create(&p, src.c_str(), "<tg>", 0, nullptr, nullptr) != 0) return "ERROR: create";
    std::vector<std::string> o{"--gpu-architecture=" + arch, "-I/usr/local/cuda/include"};
    if (const char* cp = std::getenv("CUDA_PATH")) o.push_back(std::string("-I") + cp + "/include");
    std::vector<const char*> oc;
    for (auto& s : o) oc.push_back(s.c_str());
    std::string out;
    if (compile(p, static_cast<int>(oc.size()), oc.data()) != 0) {
      size_t n = 0;
      log_size(p, &n);
      out.assign(n, '\0');
      log(p, out.data());
      out = "ERROR: " + out;
    } else {
      size_t n = 0;
      ptx_size(p, &n);
      out.assign(n, '\0');
      ptx(p, out.data());
    }
    destroy(&p);
    return out;
  }
};
const Nvrtc& nvrtc() { static Nvrtc n; return n; }

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) n++;
  return n;
}

// the warp emulators: a kernel's C++ emulation source compiled to a shared object, loaded; launch
// is its emu_launch (null when the compile or the load failed). The files go with the object.
using EmuLaunch = void (*)(void**, const int*, const int*);
struct Emulator {
  std::string base;
  void* h = nullptr;
  EmuLaunch launch = nullptr;
  Emulator(const std::string& src, const std::string& stem) : base(testing::TempDir() + stem + "_" + std::to_string(getpid())) {
    { FILE* f = std::fopen((base + ".cpp").c_str(), "w"); std::fputs(src.c_str(), f); std::fclose(f); }
    const std::string cmd = "c++ -std=c++20 -O1 -shared -fPIC -w -o " + base + ".so " + base + ".cpp -lpthread";
    if (std::system(cmd.c_str()) == 0 && (h = dlopen((base + ".so").c_str(), RTLD_NOW | RTLD_LOCAL)))
      launch = reinterpret_cast<EmuLaunch>(dlsym(h, "emu_launch"));
  }
  ~Emulator() {
    if (h) dlclose(h);
    std::remove((base + ".cpp").c_str());
    std::remove((base + ".so").c_str());
  }
};
}  // namespace

// ---------------------------------------------------------------- which kernels take tensor cores

TEST(TensorCores, HalfMatmulTakesTC) {
  UOp ast = last_ast(mat({64, 128}, dtypes::half).matmul(mat({128, 32}, dtypes::half)));
  Kernel k(ast, sm80());
  k.hand_coded_optimizations();
  ASSERT_FALSE(k.applied_opts.empty());
  EXPECT_EQ(k.applied_opts[0], (Opt{OptOps::TC, 0, 0}));
  ASSERT_TRUE(k.tensor_core);
  EXPECT_EQ(k.tensor_core->dtype_in, dtypes::half);
  EXPECT_EQ(k.tensor_core->dtype_out, dtypes::float32);   // half matmuls accumulate in float
  // 32 threads of the warp (5 local dims of 2) and a LOCAL of N from the hand-coded TC opts
  int64_t threads = 1;
  for (int64_t i = k.global_dims(); i < k.first_reduce(); i++) threads *= k.full_shape()[i];
  EXPECT_EQ(threads % 32, 0);
  RenderedProgram p = k.to_program();
  EXPECT_NE(p.src.find("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"), std::string::npos) << p.src;
  EXPECT_EQ(p.local_size[0] * p.local_size[1] * p.local_size[2] % 32, 0);
}

TEST(TensorCores, Bf16AndHalfOut) {
  {
    Kernel k(gemm_ast(32, 64, 32, dtypes::bfloat16, dtypes::float32, dtypes::bfloat16), sm80());
    ASSERT_TRUE(k.apply_tensor_cores(1));
    EXPECT_EQ(k.tensor_core->dtype_in, dtypes::bfloat16);
    EXPECT_NE(k.to_program().src.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), std::string::npos);
  }
  {
    // a half sum kept in half (acc_dtype half): the half -> half tensor core with packed accumulators (the WMMA
    // path; the shared-memory template accumulates in float)
    Context reg({{"TC_GEMM", 0}});
    Kernel k(last_ast(mat({32, 64}, dtypes::half).matmul(mat({64, 32}, dtypes::half), false, dtypes::half)), sm80());
    ASSERT_TRUE(k.apply_tensor_cores(1));
    EXPECT_EQ(k.tensor_core->dtype_out, dtypes::half);
    EXPECT_NE(k.to_program().src.find("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"), std::string::npos);
  }
}

TEST(TensorCores, NotTaken) {
  // float32 has no tensor core here; TC=0 turns them off; sm_75 has none; odd sizes need TC_OPT=2
  EXPECT_FALSE(Kernel(last_ast(mat({32, 64}, dtypes::float32).matmul(mat({64, 32}, dtypes::float32))), sm80()).apply_tensor_cores(1));
  UOp half_ast = last_ast(mat({32, 64}, dtypes::half).matmul(mat({64, 32}, dtypes::half)));
  EXPECT_FALSE(Kernel(half_ast, sm80()).apply_tensor_cores(0));
  EXPECT_FALSE(Kernel(half_ast, CUDARenderer("sm_75")).apply_tensor_cores(1));
  UOp odd = last_ast(mat({30, 66}, dtypes::half).matmul(mat({66, 20}, dtypes::half)));
  Kernel k0(odd, sm80());
  EXPECT_FALSE(k0.apply_tensor_cores(1, std::nullopt, 0, 0));
  EXPECT_TRUE(k0.applied_opts.empty());   // a failed attempt leaves the kernel as it was
  Kernel k2(odd, sm80());
  EXPECT_TRUE(k2.apply_tensor_cores(1, std::nullopt, 0, 2));   // pads M, N and K to the tensor core's dims
  EXPECT_NE(k2.to_program().src.find("mma.sync"), std::string::npos);
  // a TC opt must come first
  Kernel k3(half_ast, sm80());
  k3.apply_opt({OptOps::UPCAST, 0, 2});
  EXPECT_THROW(k3.apply_opt({OptOps::TC, 0, 0}), KernelOptError);
  // and the TC's local dims can't be upcast, nor grouped
  Kernel k4(half_ast, sm80());
  k4.apply_opt({OptOps::TC, 0, 0});
  EXPECT_THROW(k4.apply_opt({OptOps::UPCAST, k4.global_dims(), 2}), KernelOptError);
  EXPECT_THROW(k4.apply_opt({OptOps::GROUP, 0, 2}), KernelOptError);
}

TEST(TensorCores, OperandIndexFitsInt32) {
  // TC then a LOCAL of 32 on a 2048^3 GEMM: the operands' second view needs a stride of 2^31, which wrapped in
  // the kernel's int32 index (an illegal address on the H100 during BEAM). The opt is refused; the default stays.
  UOp ast = last_ast(mat({2048, 2048}, dtypes::half).matmul(mat({2048, 2048}, dtypes::half)));
  Kernel k(ast, sm80());
  k.apply_opt({OptOps::TC, 0, 0});
  EXPECT_THROW(k.apply_opt({OptOps::LOCAL, 0, 32}), KernelOptError);
  Kernel k2(ast, sm80());
  k2.hand_coded_optimizations();
  EXPECT_TRUE(k2.tensor_core);
  // every index the default 4096^3 kernel renders is small: no constant at or beyond 2^31
  Kernel k3(last_ast(mat({4096, 4096}, dtypes::half).matmul(mat({4096, 4096}, dtypes::half))), sm80());
  k3.hand_coded_optimizations();
  ASSERT_TRUE(k3.tensor_core);
  EXPECT_EQ(k3.to_program().src.find("2147483648"), std::string::npos);
}

TEST(TensorCores, TCLayoutShapes) {
  // 0.9.2's CUDA layout: K unrolled 8 and 2, M and N upcast 2, warp = N 2x2 and M 2x2x2 as locals
  Kernel k(last_ast(mat({64, 64}, dtypes::half).matmul(mat({64, 64}, dtypes::half))), sm80());
  k.apply_opt({OptOps::TC, 0, 0});
  EXPECT_EQ(k.local_dims, 5);
  EXPECT_EQ(k.upcasted, 4);
  const Shape& fs = k.full_shape();
  EXPECT_EQ(Shape(fs.end() - 4, fs.end()), Shape({8, 2, 2, 2}));
  EXPECT_EQ(Shape(fs.begin() + k.global_dims(), fs.begin() + k.first_reduce()), Shape({2, 2, 2, 2, 2}));
  // the optimized AST has a WMMA with the tensor core's upcast axes
  bool found = false;
  for (const UOp& u : k.get_optimized_ast().toposort())
    if (u->op == Ops::WMMA) {
      found = true;
      auto* w = dynamic_cast<const WMMAArg*>(u->as<ArgObjPtr>().get());
      ASSERT_TRUE(w);
      EXPECT_EQ(w->reduce_axes, (std::vector<int64_t>{k.first_upcast(), k.first_upcast() + 1}));
      EXPECT_EQ(w->upcast_axes[0], (std::vector<std::pair<int64_t, int64_t>>{{k.first_upcast(), 8}}));
    }
  EXPECT_TRUE(found);
}

// ---------------------------------------------------------------- the generated code through NVRTC

TEST(TensorCores, PTXHasMmaSync) {
  if (!nvrtc().ok) GTEST_SKIP() << "NVRTC not installed";
  struct Case { const char* what; UOp ast; };
  std::vector<Case> cases = {
      {"gemm fp16", last_ast(mat({256, 512}, dtypes::half).matmul(mat({512, 128}, dtypes::half)))},
      {"gemm bf16", gemm_ast(256, 512, 128, dtypes::bfloat16, dtypes::float32, dtypes::bfloat16)},
      {"gemm fp16 acc fp16", last_ast(mat({128, 256}, dtypes::half).matmul(mat({256, 128}, dtypes::half), false, dtypes::half))},
      {"batched + bias + relu",
       last_ast((mat({4, 128, 64}, dtypes::half).matmul(mat({4, 64, 96}, dtypes::half)) + mat({96}, dtypes::half)).relu())},
  };
  for (int pair = 0; pair < 2; pair++)
  for (const Case& c : cases) {
    Context pl({{"TC_PAIR_LOADS", pair}, {"TC_GEMM", 0}});   // the register (WMMA) path; TCGemm tests the template
    Kernel k(c.ast, sm80());
    k.hand_coded_optimizations();
    ASSERT_TRUE(k.tensor_core) << c.what;
    const std::string src = k.to_program().src;
    if (pair) EXPECT_NE(src.find(c.ast == cases[1].ast ? "nv_bfloat162 val" : "half2 val"), std::string::npos) << c.what << "\n" << src;
    for (const char* arch : {"sm_80", "sm_90a"}) {
      const std::string ptx = nvrtc().to_ptx(src, arch);
      ASSERT_EQ(ptx.rfind("ERROR:", 0), std::string::npos) << c.what << " " << arch << "\n" << ptx << "\n" << src;
      EXPECT_GE(count(ptx, "mma.sync.aligned.m16n8k16.row.col"), 1u) << c.what << " " << arch;
    }
  }
}

// ---------------------------------------------------------------- the warp layout, emulated on the CPU
// The rendered CUDA kernel is compiled as C++ with one std::thread per CUDA thread; the mma helper is replaced
// by a warp-wide emulation of mma.m16n8k16 that gathers every lane's fragments by the PTX ISA's layout
// ("Matrix Fragments for mma.m16n8k16"). half is float here and the inputs are small integers, so the
// result must equal the reference exactly: any mistake in fix_st, the lane order or the expander shows up.

namespace {
const char* kEmuShim = R"(
#include <barrier>
#include <thread>
#include <vector>
#define __global__
#define __device__ static
#define __launch_bounds__(x)
#define __align__(x) alignas(x)
#define __int_as_float(x) 0.0f
struct emu_dim3 { int x, y, z; };
static thread_local emu_dim3 threadIdx, blockIdx;
typedef float half;
struct float4 { float x, y, z, w; };
struct half2 { float x, y; };
static float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct emu_warp { std::barrier<>* bar; float a[32][8], b[32][4], c[32][4]; };
static thread_local emu_warp* emu_w;
static thread_local int emu_lane;
)";
// after the kernel's own half4/half8 structs
const char* kEmuMma = R"(
static float4 emu_mma(const half8& a8, const half4& b4, float4 c4) {
  emu_warp& w = *emu_w;
  const float* a = &a8.x; const float* b = &b4.x; float* c = &c4.x;
  for (int i = 0; i < 8; i++) w.a[emu_lane][i] = a[i];
  for (int i = 0; i < 4; i++) w.b[emu_lane][i] = b[i], w.c[emu_lane][i] = c[i];
  w.bar->arrive_and_wait();
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; l++) {
    int g = l >> 2, t = l % 4;
    for (int i = 0; i < 8; i++) A[g + 8 * ((i / 2) % 2)][2 * t + (i % 2) + 8 * (i / 4)] = w.a[l][i];
    for (int i = 0; i < 4; i++) B[2 * t + (i % 2) + 8 * (i / 2)][g] = w.b[l][i];
    for (int i = 0; i < 4; i++) C[g + 8 * (i / 2)][2 * t + (i % 2)] = w.c[l][i];
  }
  w.bar->arrive_and_wait();
  int g = emu_lane >> 2, t = emu_lane % 4;
  float4 d;
  float* dp = &d.x;
  for (int i = 0; i < 4; i++) {
    int r = g + 8 * (i / 2), col = 2 * t + (i % 2);
    float s = C[r][col];
    for (int k = 0; k < 16; k++) s += A[r][k] * B[k][col];
    dp[i] = s;
  }
  return d;
}
)";
// runs the kernel over the grid, one warp (32 threads) at a time
const char* kEmuLaunch = R"(
extern "C" void emu_launch(void** bufs, const int* g, const int* l) {
  const int nthreads = l[0] * l[1] * l[2];
  for (int gz = 0; gz < g[2]; gz++) for (int gy = 0; gy < g[1]; gy++) for (int gx = 0; gx < g[0]; gx++)
    for (int w0 = 0; w0 < nthreads; w0 += 32) {
      std::barrier<> bar(32);
      emu_warp warp{&bar, {}, {}, {}};
      std::vector<std::thread> ts;
      for (int lane = 0; lane < 32; lane++)
        ts.emplace_back([&, lane] {
          int tid = w0 + lane;
          threadIdx = {tid % l[0], (tid / l[0]) % l[1], tid / (l[0] * l[1])};
          blockIdx = {gx, gy, gz};
          emu_w = &warp; emu_lane = lane;
          EMU_KERNEL((float*)bufs[0], (const float*)bufs[1], (const float*)bufs[2]);
        });
      for (auto& t : ts) t.join();
    }
}
)";

// the kernel's source with the mma helper swapped for the emulation; empty when the layout isn't the expected one
std::string emulated_source(const RenderedProgram& p) {
  std::string src = p.src;
  const size_t a = src.find("__device__ float4 __WMMA_8_16_16_half_float("), b = src.find("return c;}", a);
  if (a == std::string::npos || b == std::string::npos) return "";
  src.replace(a, b + 10 - a, std::string(kEmuMma) + "static float4 __WMMA_8_16_16_half_float(half8 a, half4 b, float4 c) { return emu_mma(a, b, c); }");
  const size_t inc = src.find("#include <cuda_fp16.h>");
  if (inc != std::string::npos) src.erase(inc, std::string("#include <cuda_fp16.h>").size());
  return std::string(kEmuShim) + src + "\n#define EMU_KERNEL " + p.function_name + "\n" + kEmuLaunch;
}
}  // namespace

TEST(TensorCores, WarpLayoutEmulated) {
  if (std::system("command -v c++ >/dev/null 2>&1") != 0) GTEST_SKIP() << "no C++ compiler";
  std::mt19937 rng(7);
  struct Shp { int64_t m, k, n; std::vector<Opt> extra; };
  // the hand-coded TC opts, and a few extra ones a BEAM search could add after the TC opt
  std::vector<Shp> shapes = {{64, 64, 32, {}}, {32, 48, 64, {}}, {128, 32, 64, {}},
                             {64, 64, 64, {{OptOps::UPCAST, 0, 2}}}, {64, 64, 64, {{OptOps::UNROLL, 0, 2}}},
                             {64, 64, 64, {{OptOps::LOCAL, 0, 2}}}};
  int idx = 0;
  for (int pair = 0; pair < 2; pair++)
  for (const Shp& sh : shapes) {
    Context pl({{"TC_PAIR_LOADS", pair}, {"TC_GEMM", 0}});   // and with the A operand's lanes loaded in pairs
    SCOPED_TRACE(std::to_string(sh.m) + "x" + std::to_string(sh.k) + "x" + std::to_string(sh.n) + " case " + std::to_string(idx));
    Kernel k(gemm_ast(sh.m, sh.k, sh.n, dtypes::half, dtypes::float32, dtypes::float32), sm80());
    if (sh.extra.empty()) k.hand_coded_optimizations();
    else ASSERT_TRUE(k.apply_tensor_cores(1, sh.extra));
    ASSERT_TRUE(k.tensor_core);
    const RenderedProgram p = k.to_program();
    const std::string src = emulated_source(p);
    ASSERT_FALSE(src.empty()) << p.src;
    const Emulator emu(src, "tg_emu_" + std::to_string(idx++));
    ASSERT_TRUE(emu.launch) << src;
    const EmuLaunch launch = emu.launch;
    std::vector<float> A(sh.m * sh.k), B(sh.k * sh.n), C(sh.m * sh.n, NAN), ref(sh.m * sh.n, 0.0f);
    std::uniform_int_distribution<int> d(-3, 3);
    for (float& x : A) x = static_cast<float>(d(rng));
    for (float& x : B) x = static_cast<float>(d(rng));
    for (int64_t i = 0; i < sh.m; i++)
      for (int64_t j = 0; j < sh.n; j++)
        for (int64_t kk = 0; kk < sh.k; kk++) ref[i * sh.n + j] += A[i * sh.k + kk] * B[kk * sh.n + j];
    void* bufs[3] = {C.data(), A.data(), B.data()};
    int g[3], l[3];
    for (int i = 0; i < 3; i++) g[i] = static_cast<int>(p.global_size[i]), l[i] = static_cast<int>(p.local_size[i]);
    launch(bufs, g, l);
    int bad = 0;
    for (size_t i = 0; i < C.size(); i++) bad += !(C[i] == ref[i]);
    EXPECT_EQ(bad, 0) << "first: " << C[0] << " vs " << ref[0] << "\n" << p.src;
  }
}

// ---------------------------------------------------------------- the shared-memory GEMM template (codegen/tc_gemm.cpp)

namespace {
// the template's kernel for ast after the hand-coded opts (TC_OPT as given); empty src when it fell back
RenderedProgram template_program(const UOp& ast, const Renderer& r = sm80()) {
  Kernel k(ast, r);
  k.hand_coded_optimizations();
  return k.to_program();
}
// the TMA kernel rendered as PTX (codegen/tc_gemm_ptx.cpp) rather than CUDA C
bool is_ptx(const RenderedProgram& p) { return p.src.rfind(".version", 0) == 0; }
bool is_template(const RenderedProgram& p) { return p.src.find("tg_cp_async16") != std::string::npos || is_ptx(p); }
// the template's TF32 kernel (mma.sync m16n8k8 or wgmma k8 with tf32 operands)
bool is_tf32(const RenderedProgram& p) {
  return p.src.find("tg_mma_tf32(c[") != std::string::npos || p.src.find("tg_wgmma_tf32(d, ") != std::string::npos;
}

// trans: the PTX has ldmatrix.trans (an M/N-major operand); kmajor: A or B is K-major (wgmma applies on sm_90)
struct GemmCase { const char* what; UOp ast; int64_t tc_opt; bool trans; bool kmajor = true; };
std::vector<GemmCase> template_cases() {
  return {
      {"fp16 256x512x128", last_ast(mat({256, 512}, dtypes::half).matmul(mat({512, 128}, dtypes::half))), 0, true},
      {"bf16", gemm_ast(256, 512, 128, dtypes::bfloat16, dtypes::float32, dtypes::bfloat16), 0, true},
      {"fp16 acc fp16", last_ast(mat({128, 256}, dtypes::half).matmul(mat({256, 128}, dtypes::half), false, dtypes::half)), 0, true},
      {"batched + bias + relu",
       last_ast((mat({4, 128, 64}, dtypes::half).matmul(mat({4, 64, 96}, dtypes::half)) + mat({96}, dtypes::half)).relu()), 0, true},
      {"A transposed", last_ast(mat({128, 256}, dtypes::half).transpose().matmul(mat({128, 64}, dtypes::half))), 0, true, false},
      {"B transposed (linear)", last_ast(mat({256, 128}, dtypes::half).matmul(mat({64, 128}, dtypes::half).transpose())), 0, false},
      {"odd 1000^3 (TC_OPT=2)", last_ast(mat({1000, 1000}, dtypes::half).matmul(mat({1000, 1000}, dtypes::half))), 2, true},
      {"4096^3", last_ast(mat({4096, 4096}, dtypes::half).matmul(mat({4096, 4096}, dtypes::half))), 0, true},
  };
}

// c's template kernel for sm_90 and its sm_90a PTX; fatal failures when the template isn't chosen or NVRTC rejects it
void sm90_template_ptx(const GemmCase& c, RenderedProgram& p, std::string& ptx) {
  static const CUDARenderer sm90r("sm_90");
  p = template_program(c.ast, sm90r);
  ASSERT_TRUE(is_template(p)) << c.what;
  ptx = is_ptx(p) ? p.src : nvrtc().to_ptx(p.src, "sm_90a");
  ASSERT_EQ(ptx.rfind("ERROR:", 0), std::string::npos) << c.what << "\n" << ptx << "\n" << p.src;
}
}  // namespace

TEST(TCGemm, TakenAndFallsBack) {
  for (const GemmCase& c : template_cases()) {
    Context ctx({{"TC_OPT", c.tc_opt}});
    EXPECT_TRUE(is_template(template_program(c.ast))) << c.what;
  }
  // TC_GEMM=0, no tensor cores (fp32, sm_75), a 4097 row (not 16-byte aligned) and M=1 keep the register path or none
  UOp half_ast = last_ast(mat({256, 256}, dtypes::half).matmul(mat({256, 256}, dtypes::half)));
  { Context off({{"TC_GEMM", 0}}); EXPECT_FALSE(is_template(template_program(half_ast))); }
  EXPECT_FALSE(is_template(template_program(half_ast, CUDARenderer("sm_75"))));
  // fp32 (no tensor core) takes the SIMT template instead, unless SIMT_GEMM=0 or the shape is not a GEMM's (M=1)
  UOp f32_ast = last_ast(mat({256, 256}, dtypes::float32).matmul(mat({256, 256}, dtypes::float32)));
  EXPECT_NE(template_program(f32_ast).src.find("SIMT fp32"), std::string::npos);
  { Context off({{"SIMT_GEMM", 0}}); EXPECT_FALSE(is_template(template_program(f32_ast))); }
  EXPECT_FALSE(is_template(template_program(last_ast(mat({1, 256}, dtypes::float32).matmul(mat({256, 256}, dtypes::float32))))));
  Context ctx({{"TC_OPT", 2}});
  EXPECT_FALSE(is_template(template_program(last_ast(mat({64, 4097}, dtypes::half).matmul(mat({4097, 64}, dtypes::half))))));
  const RenderedProgram odd = template_program(last_ast(mat({4097, 64}, dtypes::half).matmul(mat({64, 33}, dtypes::half))));
  EXPECT_FALSE(is_template(odd));   // N=33: B's rows are not 16-byte aligned
  // with no TC_OPT asked for, sizes that are not multiples of the tensor core's dims pad (level 2) only when the
  // template takes the kernel (its edges are predicated); otherwise the kernel keeps no TC opt
  {
    Context unset(std::map<std::string, std::string>{{"TC_OPT", ""}});
    Kernel k(last_ast(mat({1000, 1000}, dtypes::half).matmul(mat({1000, 1000}, dtypes::half))), sm80());
    k.hand_coded_optimizations();
    ASSERT_TRUE(k.tensor_core);
    EXPECT_TRUE(is_template(k.to_program()));
    Kernel k2(last_ast(mat({100, 300}, dtypes::half).matmul(mat({300, 70}, dtypes::half))), sm80());
    k2.hand_coded_optimizations();
    EXPECT_FALSE(k2.tensor_core);
    Kernel k3(last_ast(mat({1000, 1000}, dtypes::half).matmul(mat({1000, 1000}, dtypes::half))), sm80());
    EXPECT_FALSE(k3.apply_tensor_cores(1, std::nullopt, 0, 0));   // an explicit level is kept
  }
  // a block tile the template can't build is a user error naming the variable
  {
    Context bad(std::map<std::string, std::string>{{"TC_GEMM_CFG", "100,128,2,4,3,2"}});
    EXPECT_THROW(template_program(half_ast), Error);
    Context bad2(std::map<std::string, std::string>{{"TC_WGMMA_CFG", "2,128,4,2"}});   // 64 KiB of shared memory
    EXPECT_THROW(template_program(half_ast, CUDARenderer("sm_90")), Error);
  }
  // the launch: one block per 128x128 (or 64x64) tile, batch in z
  const RenderedProgram p = template_program(template_cases()[3].ast);
  EXPECT_EQ(p.global_size[2], 4);
  EXPECT_EQ(p.local_size[0] % 32, 0);
}

TEST(TCGemm, PTXHasSharedMemoryPipeline) {
  if (!nvrtc().ok) GTEST_SKIP() << "NVRTC not installed";
  for (const GemmCase& c : template_cases()) {
    Context ctx({{"TC_OPT", c.tc_opt}});
    const RenderedProgram p = template_program(c.ast);
    ASSERT_TRUE(is_template(p)) << c.what;
    for (const char* arch : {"sm_80", "sm_90a"}) {
      const std::string ptx = nvrtc().to_ptx(p.src, arch);
      ASSERT_EQ(ptx.rfind("ERROR:", 0), std::string::npos) << c.what << " " << arch << "\n" << ptx << "\n" << p.src;
      EXPECT_GE(count(ptx, "cp.async.cg.shared.global"), 2u) << c.what << " " << arch;
      EXPECT_GE(count(ptx, "cp.async.wait_group"), 1u) << c.what << " " << arch;
      EXPECT_GE(count(ptx, "ldmatrix.sync.aligned.m8n8.x4"), 2u) << c.what << " " << arch;
      if (c.trans) EXPECT_GE(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans"), 1u) << c.what << " " << arch;
      EXPECT_GE(count(ptx, "mma.sync.aligned.m16n8k16.row.col.f32"), 16u) << c.what << " " << arch;
      // the operands come only through shared memory: no scalar 2-byte global loads in the main loop
      EXPECT_EQ(count(ptx, "ld.global.u16"), 0u) << c.what << " " << arch;
    }
  }
}

TEST(TCGemm, PTXHasWgmmaOnSm90) {
  if (!nvrtc().ok) GTEST_SKIP() << "NVRTC not installed";
  static const CUDARenderer sm90r("sm_90");
  for (const GemmCase& c : template_cases()) {
    Context ctx({{"TC_OPT", c.tc_opt}, {"TC_TMA", 0}});   // the cp.async wgmma kernel (PTXHasTmaOnSm90: the default)
    RenderedProgram p;
    std::string ptx;
    ASSERT_NO_FATAL_FAILURE(sm90_template_ptx(c, p, ptx));
    if (!c.kmajor) {   // both operands M/N-major: mma.sync
      EXPECT_GE(count(ptx, "mma.sync.aligned.m16n8k16"), 16u) << c.what;
      continue;
    }
    EXPECT_GE(count(ptx, "wgmma.mma_async.sync.aligned.m64n"), 2u) << c.what;
    EXPECT_GE(count(ptx, "wgmma.fence.sync.aligned"), 1u) << c.what;
    EXPECT_GE(count(ptx, "wgmma.wait_group.sync.aligned"), 1u) << c.what;
    EXPECT_GE(count(ptx, "fence.proxy.async.shared::cta"), 1u) << c.what;
    EXPECT_GE(count(ptx, "cp.async.cg.shared.global"), 2u) << c.what;
    EXPECT_GE(count(ptx, "ldmatrix.sync.aligned.m8n8.x4"), 1u) << c.what;
    EXPECT_EQ(count(ptx, "mma.sync"), 0u) << c.what;
  }
  // TC_WGMMA=0 keeps mma.sync on sm_90; sm_80 never gets wgmma
  Context off({{"TC_WGMMA", 0}});
  EXPECT_EQ(template_program(template_cases()[0].ast, sm90r).src.find("wgmma"), std::string::npos);
}

// sm_90's default: TMA bulk tensor copies into an mbarrier ring, a producer warpgroup (setmaxnreg) and consumer
// warpgroups of wgmma, the launch (dynamic shared memory, tensor maps) described in tg_launch; no cp.async
TEST(TCGemm, PTXHasTmaOnSm90) {
  if (!nvrtc().ok) GTEST_SKIP() << "NVRTC not installed";
  static const CUDARenderer sm90r("sm_90");
  for (int as_ptx : {1, 0})   // the kernel as PTX (the default) and as CUDA C (TC_PTX=0, the fallback)
  for (const GemmCase& c : template_cases()) {
    if (!c.kmajor) continue;   // both operands M/N-major: mma.sync (PTXHasWgmmaOnSm90)
    Context ctx({{"TC_OPT", c.tc_opt}, {"TC_PTX", as_ptx}});
    RenderedProgram p;
    std::string ptx;
    ASSERT_NO_FATAL_FAILURE(sm90_template_ptx(c, p, ptx));
    EXPECT_GE(count(ptx, "cp.async.bulk.tensor."), 2u) << c.what;
    EXPECT_GE(count(ptx, "mbarrier::complete_tx::bytes"), 2u) << c.what;
    EXPECT_GE(count(ptx, "mbarrier.arrive.expect_tx"), 1u) << c.what;
    EXPECT_GE(count(ptx, "mbarrier.try_wait.parity"), 2u) << c.what;
    EXPECT_GE(count(ptx, "mbarrier.init"), 2u) << c.what;
    if (p.local_size[0] == 384 && !as_ptx) {
      // 2 consumer warpgroups (128x256 tiles) in CUDA C: the producer gives registers to the consumers; R's fragments
      // by ldmatrix, the k tile's four wgmma unrolled (rolled, this kernel ran 11% slower in session 11)
      EXPECT_GE(count(ptx, "setmaxnreg"), 2u) << c.what;
      EXPECT_GE(count(ptx, "ldmatrix.sync.aligned.m8n8.x4"), 1u) << c.what;
      EXPECT_GE(count(ptx, "wgmma.mma_async.sync.aligned.m64n"), 4u) << c.what;
    } else if (p.local_size[0] == 384) {
      // as PTX, rolled like the 1-consumer kernel (PtxasTmaKernelAsPtx): ONE wgmma, both operands by descriptor; the
      // producer gives registers to the consumers
      EXPECT_EQ(count(ptx, "setmaxnreg"), 2u) << c.what;
      EXPECT_EQ(count(ptx, "ldmatrix"), 0u) << c.what;
      EXPECT_EQ(count(ptx, "wgmma.mma_async.sync.aligned.m64n"), 1u) << c.what;
      EXPECT_GE(count(ptx, "shfl.sync.idx"), 1u) << c.what;
    } else {
      // 1 consumer warpgroup (64x128 tiles, the shapes up to ~2000^3): both operands by descriptor (R transposed where
      // it is M/N-major), the k tile's four k16 steps in a rolled loop: ONE wgmma in the PTX (unrolled, each copy of
      // the asm with its 64 accumulators cost NVVM and ptxas ~5% of the compile), also where K is short (KT <= 8)
      EXPECT_EQ(p.local_size[0], 256) << c.what;
      EXPECT_EQ(count(ptx, "wgmma.mma_async.sync.aligned.m64n"), 1u) << c.what;
      EXPECT_EQ(count(ptx, "ldmatrix"), 0u) << c.what;
      if (as_ptx) EXPECT_NE(ptx.find(std::string(", 1, 1, ") + (c.trans ? "1" : "0") + ", 0;"), std::string::npos) << c.what;   // imm-trans-a
      else EXPECT_NE(p.src.find(std::string("tg_wgmma_ss<") + (c.trans ? "1" : "0") + ">(d, "), std::string::npos) << c.what;
      // the warpgroup index is warp-uniform to ptxas (else it serializes the rolled wgmma, C7520)
      EXPECT_GE(count(ptx, "shfl.sync.idx"), 1u) << c.what;
    }
    EXPECT_NE(ptx.find(" tg_launch["), std::string::npos) << c.what;   // the launch description the runtime reads
    EXPECT_EQ(count(ptx, "cp.async.cg"), 0u) << c.what;
    EXPECT_EQ(count(ptx, "mma.sync"), 0u) << c.what;
    // a persistent grid of at most one block per SM, dynamic shared memory beyond the 48 KiB static limit
    EXPECT_LE(p.global_size[0], 132) << c.what;
    EXPECT_EQ(p.global_size[2], 1) << c.what;
    EXPECT_NE(p.src.find(as_ptx ? ".extern .shared" : "extern __shared__"), std::string::npos) << c.what;
    EXPECT_EQ(is_ptx(p), as_ptx == 1) << c.what;
  }
  Context off({{"TC_TMA", 0}});
  EXPECT_EQ(template_program(template_cases()[0].ast, sm90r).src.find("cp.async.bulk"), std::string::npos);
  for (const char* cfg : {"2,256,5", "2,256,4,0,1"}) {   // 240 KiB of shared memory; a 5th field (no longer taken)
    Context bad(std::map<std::string, std::string>{{"TC_TMA", "1"}, {"TC_TMA_CFG", cfg}});
    EXPECT_THROW(template_program(template_cases()[0].ast, sm90r), Error) << cfg;
  }
}

// The TMA kernel's epilogue goes through shared memory: each consumer warp writes its accumulators as float4 into
// its stage, and a rolled loop renders the AST's epilogue once, with 16-byte stores where the output allows (the
// unrolled 64-128 stores per thread were most of NVRTC's time). Checked in the PTX: one global store instruction.
TEST(TCGemm, PTXTmaEpilogueStagedOnce) {
  if (!nvrtc().ok) GTEST_SKIP() << "NVRTC not installed";
  struct Case { const char* what; UOp ast; const char* cfg; size_t sts_v4, stg_v4, stg_scalar; int chunks; };
  const std::vector<Case> cases = {
      {"1536^3 (64x128 tiles)", last_ast(mat({1536, 1536}, dtypes::half).matmul(mat({1536, 1536}, dtypes::half))), "", 16, 1, 0, 1},
      {"4096^3 (128x256 tiles, 4 chunks of 64 columns)", last_ast(mat({4096, 4096}, dtypes::half).matmul(mat({4096, 4096}, dtypes::half))), "", 32,
       1, 0, 4},
      {"batched + bias + relu", last_ast((mat({4, 128, 64}, dtypes::half).matmul(mat({4, 64, 96}, dtypes::half)) + mat({96}, dtypes::half)).relu()),
       "", 16, 1, 0, 1},
      {"fp32 out: two 16-byte stores a run", gemm_ast(256, 512, 128, dtypes::half, dtypes::float32, dtypes::float32), "1,64,2,0", 8, 2, 0, 1},
      {"B^T, N=36: scalar stores", last_ast(mat({72, 40}, dtypes::half).matmul(mat({36, 40}, dtypes::half).transpose())), "1,64,2,0", 8, 0, 1, 1},
  };
  for (const char* as_ptx : {"1", "0"})
  for (const Case& c : cases) {
    Context ctx(std::map<std::string, std::string>{{"TC_OPT", "2"}, {"TC_TMA_CFG", c.cfg}, {"TC_PTX", as_ptx}});
    RenderedProgram p;
    std::string ptx;
    ASSERT_NO_FATAL_FAILURE(sm90_template_ptx({c.what, c.ast, 2, true}, p, ptx));
    ASSERT_NE(p.src.find("cp.async.bulk.tensor"), std::string::npos) << c.what;
    // the PTX kernel covers the 16-byte runs; scalar stores (N=36) take the CUDA C kernel
    EXPECT_EQ(is_ptx(p), as_ptx[0] == '1' && c.stg_scalar == 0) << c.what;
    if (!is_ptx(p)) EXPECT_NE(p.src.find("for (int c = 0; c < " + std::to_string(c.chunks) + "; c++)"), std::string::npos) << c.what;
    EXPECT_EQ(count(ptx, "st.shared.v4.f32"), c.sts_v4) << c.what;
    EXPECT_EQ(count(ptx, "st.global.v4"), c.stg_v4) << c.what;
    EXPECT_EQ(count(ptx, "st.global.") - count(ptx, "st.global.v4"), c.stg_scalar) << c.what;
    EXPECT_GE(count(ptx, "bar.warp.sync"), 2u) << c.what;
  }
}

// the TMA kernel's persistent grid is one block per SM of the device (the renderer's count from the CUDA device),
// 132 when unknown, TC_SMS when set
TEST(TCGemm, PersistentGridFollowsSMs) {
  const UOp ast = last_ast(mat({4096, 4096}, dtypes::half).matmul(mat({4096, 4096}, dtypes::half)));
  CUDARenderer r("sm_90");
  EXPECT_EQ(template_program(ast, r).global_size[0], 132);
  r.sms = 114;   // an H100 PCIe
  EXPECT_EQ(template_program(ast, r).global_size[0], 114);
  Context ctx({{"TC_SMS", 20}});
  EXPECT_EQ(template_program(ast, r).global_size[0], 20);
}

// conv2d fp16 (issue 12's benchmark shape): the channels-last conv's reduce is the template's implicit GEMM, gathered
// by cp.async (no TMA: its rows are not one stride), mma.sync on sm_80 and wgmma on sm_90
TEST(TCGemm, PTXConvImplicitGemm) {
  if (!nvrtc().ok) GTEST_SKIP() << "NVRTC not installed";
  const UOp ast = conv_ast({64, 256, 14, 14}, {256, 256, 3, 3}, 1, 1, false);
  static const CUDARenderer sm90r("sm_90");
  for (const Renderer* r : {static_cast<const Renderer*>(&sm80()), static_cast<const Renderer*>(&sm90r)}) {
    const bool sm90 = r == &sm90r;
    const RenderedProgram p = template_program(ast, *r);
    ASSERT_TRUE(is_template(p)) << p.src;
    EXPECT_NE(p.src.find("M=12544 N=256 K=2304"), std::string::npos) << p.src;
    const std::string ptx = nvrtc().to_ptx(p.src, sm90 ? "sm_90a" : "sm_80");
    ASSERT_EQ(ptx.rfind("ERROR:", 0), std::string::npos) << ptx << "\n" << p.src;
    EXPECT_GE(count(ptx, "cp.async.cg.shared.global"), 2u);
    EXPECT_EQ(count(ptx, "cp.async.bulk.tensor"), 0u);
    EXPECT_GE(count(ptx, sm90 ? "wgmma.mma_async.sync.aligned.m64n" : "mma.sync.aligned.m16n8k16"), 2u);
    EXPECT_EQ(count(ptx, "ld.global.u16"), 0u);
  }
  // CONV_NHWC=0 keeps the channels-first conv: its window view has masks (padding), not the template's
  Context off({{"CONV_NHWC", 0}});
  EXPECT_FALSE(is_template(template_program(last_ast(mat({64, 256, 14, 14}, dtypes::half).conv2d(mat({256, 256, 3, 3}, dtypes::half),
                                                                                                std::nullopt, 1, {1}, {1}, {1})))));
}

// ptxas -v's report ("Used N registers", spills) for PTX, or "" where the toolkit has no ptxas
std::string ptxas_report(const std::string& ptx, const std::string& arch) {
  const std::string bin = "/usr/local/cuda/bin/ptxas";
  if (access(bin.c_str(), X_OK) != 0) return "";
  char path[] = "/tmp/tg_ptxas_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "";
  FILE* f = fdopen(fd, "w");
  std::fputs(ptx.c_str(), f);
  std::fclose(f);
  std::string out;
  if (FILE* p = popen((bin + " -arch=" + arch + " -v -o /dev/null " + path + " 2>&1").c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof(buf), p)) out += buf;
    pclose(p);
  }
  std::remove(path);
  return out;
}

// The rolled wgmma of the 64x128-tile TMA kernel stays asynchronous: ptxas serializes the wgmma of a loop in a branch
// it can't prove warp-uniform ("C7520 ... serialized", seen here without the warpgroup index's shuffle)
TEST(TCGemm, PtxasKeepsRolledWgmmaAsync) {
  if (!nvrtc().ok) GTEST_SKIP() << "NVRTC not installed";
  const std::vector<GemmCase> cases = {
      {"1536^3 (B M/N-major: transposed A)", last_ast(mat({1536, 1536}, dtypes::half).matmul(mat({1536, 1536}, dtypes::half))), 0, true},
      {"B^T (K-major A)", last_ast(mat({1024, 512}, dtypes::half).matmul(mat({1024, 512}, dtypes::half).transpose())), 0, false},
  };
  for (int as_ptx : {1, 0})
  for (const GemmCase& c : cases) {
    Context ctx({{"TC_PTX", as_ptx}});
    RenderedProgram p;
    std::string ptx;
    ASSERT_NO_FATAL_FAILURE(sm90_template_ptx(c, p, ptx));
    ASSERT_TRUE(as_ptx ? is_ptx(p) : p.src.find("tg_wgmma_ss<") != std::string::npos) << c.what;
    const std::string rep = ptxas_report(ptx, "sm_90a");
    if (rep.empty()) GTEST_SKIP() << "no ptxas in the toolkit";
    EXPECT_NE(rep.find("Used "), std::string::npos) << c.what << "\n" << rep;
    EXPECT_EQ(rep.find("C7520"), std::string::npos) << c.what << "\n" << rep;
    EXPECT_EQ(rep.find("serialized"), std::string::npos) << c.what << "\n" << rep;
  }
}

// "Used N registers" of ptxas -v's report, -1 when absent
int ptxas_registers(const std::string& rep) {
  const size_t at = rep.find("Used ");
  return at == std::string::npos ? -1 : std::atoi(rep.c_str() + at + 5);
}

// The TMA kernel rendered directly as PTX (codegen/tc_gemm_ptx.cpp: no NVRTC front end or NVVM, ptxas only) for
// both tile configs, both layouts of R, batched + bias + relu, bf16 and fp32 out: ptxas accepts it, the wgmma stay
// asynchronous, no spills, and ptxas gives it as many registers as NVRTC's build of the C kernel (fewer without the
// register hand-over, TC_PTX_MAXNREG=0). The k tile's four k16 steps are ONE wgmma in a rolled loop, both operands by
// descriptor, for both configs (TC_PTX_KSTEPS=0: the 128x256 kernel's four wgmma after four ldmatrix, the C kernel's
// form; 2 and 4: that many wgmma by descriptors a loop iteration): ptxas' time grows with each wgmma in the text, so
// rolled the 128x256 kernel's compile executes 42% fewer instructions (tc_notes.md, session 14); its first k16 step
// of a tile overwrites the accumulators (wgmma's scale-d predicate) instead of 128 movs of zero. Fails on the old
// code (the 128x256 kernel had four wgmma and zeroed its accumulators).
TEST(TCGemm, PtxasTmaKernelAsPtx) {
  static const CUDARenderer sm90r("sm_90");
  struct Case { const char* what; UOp ast; bool two; bool r_kmajor; };
  const std::vector<Case> cases = {
      {"1536^3 (64x128, R = B N-major)", last_ast(mat({1536, 1536}, dtypes::half).matmul(mat({1536, 1536}, dtypes::half))), false, false},
      {"1024x1024x512 B^T (64x128, R = A K-major)", last_ast(mat({1024, 512}, dtypes::half).matmul(mat({1024, 512}, dtypes::half).transpose())), false, true},
      {"4096^3 (128x256, R = B N-major)", last_ast(mat({4096, 4096}, dtypes::half).matmul(mat({4096, 4096}, dtypes::half))), true, false},
      {"4096x4096x512 B^T (128x256, R = A K-major)", last_ast(mat({4096, 512}, dtypes::half).matmul(mat({4096, 512}, dtypes::half).transpose())), true, true},
      {"batched + bias + relu", last_ast((mat({4, 128, 64}, dtypes::half).matmul(mat({4, 64, 96}, dtypes::half)) + mat({96}, dtypes::half)).relu()), false, false},
      {"bf16 in, fp32 out", gemm_ast(256, 512, 128, dtypes::bfloat16, dtypes::float32, dtypes::float32), false, false},
  };
  for (auto [steps, maxnreg] : std::vector<std::pair<int, int>>{{1, 1}, {0, 1}, {1, 0}, {0, 0}, {2, 0}, {4, 0}})
  for (const Case& c : cases) {
    if ((steps != 1 || maxnreg) && !c.two) continue;   // the 64x128 kernel takes 1 either way, and no setmaxnreg
    SCOPED_TRACE("TC_PTX_KSTEPS=" + std::to_string(steps) + " TC_PTX_MAXNREG=" + std::to_string(maxnreg));
    Context ctx({{"TC_PTX_KSTEPS", steps}, {"TC_PTX_MAXNREG", maxnreg}});
    const RenderedProgram p = template_program(c.ast, sm90r);
    ASSERT_TRUE(is_ptx(p)) << c.what << "\n" << p.src.substr(0, 2000);
    const bool unrolled = c.two && steps == 0;
    EXPECT_EQ(p.local_size[0], c.two ? 384 : 256) << c.what;
    EXPECT_GE(count(p.src, "cp.async.bulk.tensor."), 2u) << c.what;
    EXPECT_EQ(count(p.src, "wgmma.mma_async.sync.aligned.m64n"), c.two && steps != 1 ? (unrolled ? 4u : size_t(steps)) : 1u) << c.what;
    EXPECT_EQ(count(p.src, "ldmatrix.sync.aligned.m8n8.x4"), unrolled ? 4u : 0u) << c.what;
    EXPECT_EQ(count(p.src, ".trans.shared.b16"), unrolled && !c.r_kmajor ? 4u : 0u) << c.what;
    // by descriptor: R transposed (imm-trans-a) where it is M/N-major; the 128x256 kernel's first k16 step of a
    // tile starts the accumulators (scale-d a predicate), the others zero them (scale-d true)
    if (!unrolled) EXPECT_NE(p.src.find(std::string(", 1, 1, ") + (c.r_kmajor ? "0" : "1") + ", 0;"), std::string::npos) << c.what;
    const bool zeroes = !c.two || unrolled;
    EXPECT_EQ(count(p.src, "%ptrue, 1, 1"), unrolled ? 4u : zeroes ? 1u : size_t(steps - 1)) << c.what;
    EXPECT_EQ(count(p.src, "mov.f32 %d"), zeroes ? (c.two ? 128u : 64u) : 0u) << c.what;
    // the register hand-over: asked for, or the ldmatrix form (without, ptxas serialized its wgmma: C7512, spills)
    const bool handover = maxnreg || unrolled;
    EXPECT_EQ(count(p.src, "setmaxnreg"), handover ? 2u : 0u) << c.what;
    EXPECT_EQ(count(p.src, "shfl.sync.idx"), 1u) << c.what;
    EXPECT_EQ(count(p.src, "st.shared.v4.f32"), c.two ? 32u : 16u) << c.what;
    EXPECT_NE(p.src.find(".visible .global .align 8 .b64 tg_launch["), std::string::npos) << c.what;
    const std::string rep = ptxas_report(p.src, "sm_90a");
    if (rep.empty()) GTEST_SKIP() << "no ptxas in the toolkit";
    EXPECT_EQ(rep.find("error"), std::string::npos) << c.what << "\n" << rep << "\n" << p.src;
    EXPECT_EQ(rep.find("C7520"), std::string::npos) << c.what << "\n" << rep;
    EXPECT_EQ(rep.find("serialized"), std::string::npos) << c.what << "\n" << rep;
    EXPECT_NE(rep.find(" 0 bytes spill stores, 0 bytes spill loads"), std::string::npos) << c.what << "\n" << rep;
    const int regs = ptxas_registers(rep);
    EXPECT_GT(regs, 0) << c.what << "\n" << rep;
    if (!nvrtc().ok) continue;
    Context cuda_c({{"TC_PTX", 0}});
    const RenderedProgram q = template_program(c.ast, sm90r);
    ASSERT_FALSE(is_ptx(q)) << c.what;
    // the C kernel's registers (it has setmaxnreg); the 128x256 PTX kernel without the hand-over needs fewer (all
    // 384 threads get the launch's count: it must fit one block a SM, 65536 / 384 = 170)
    const int c_regs = ptxas_registers(ptxas_report(nvrtc().to_ptx(q.src, "sm_90a"), "sm_90a"));
    if (c.two && !handover) EXPECT_LE(regs, std::min(c_regs, 170)) << c.what;
    else EXPECT_EQ(regs, c_regs) << c.what;
  }
}

// TC_PTX_KSTEPS takes 0, 1, 2 or 4: another value is a tg::Error naming it, not a silent fall back to the C kernel
TEST(TCGemm, PtxKstepsOutsideItsValuesIsAnError) {
  static const CUDARenderer sm90r("sm_90");
  const UOp ast = last_ast(mat({4096, 4096}, dtypes::half).matmul(mat({4096, 4096}, dtypes::half)));
  Context ctx({{"TC_PTX_KSTEPS", 3}});
  try {
    template_program(ast, sm90r);
    ADD_FAILURE() << "TC_PTX_KSTEPS=3 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TC_PTX_KSTEPS=3"), std::string::npos) << e.what();
  }
}

// Epilogues the PTX kernel doesn't cover take the TMA kernel in CUDA C (NVRTC): ops beyond ADD MUL MAX NEG and casts
// (sigmoid's EXP2 and RECIP), outputs without aligned runs of 8 (N=36), and TC_PTX=0; so does a block tile of 192
// S rows (TC_TMA_CFG; the PTX's index math takes powers of two: it threw on the H100 before). Those the bench and
// models use stay PTX: bias, relu, a residual add, fp16 accumulation.
TEST(TCGemm, PTXOrCudaCByEpilogue) {
  static const CUDARenderer sm90r("sm_90");
  Context ctx({{"TC_OPT", 2}});
  const Tensor a = mat({256, 128}, dtypes::half), b = mat({128, 192}, dtypes::half), bias = mat({192}, dtypes::half);
  const Tensor res = mat({256, 192}, dtypes::half);
  auto form = [&](const Tensor& t) {
    const RenderedProgram p = template_program(last_ast(t), sm90r);
    EXPECT_NE(p.src.find("cp.async.bulk.tensor"), std::string::npos) << p.src.substr(0, 2000);   // the TMA kernel either way
    return is_ptx(p);
  };
  EXPECT_TRUE(form(a.matmul(b)));
  EXPECT_TRUE(form((a.matmul(b) + bias).relu()));
  EXPECT_TRUE(form(a.matmul(b) + res));
  EXPECT_TRUE(form(a.matmul(b, false, dtypes::half)));
  EXPECT_FALSE(form((a.matmul(b) + bias).sigmoid()));
  EXPECT_FALSE(form(mat({72, 40}, dtypes::half).matmul(mat({36, 40}, dtypes::half).transpose())));
  {
    Context bs192(std::map<std::string, std::string>{{"TC_TMA_CFG", "2,192,4"}});
    EXPECT_FALSE(form(a.matmul(b)));
  }
  Context off({{"TC_PTX", 0}});
  EXPECT_FALSE(form(a.matmul(b)));
}

// fp32 without tensor cores: the SIMT template's main loop is 16-byte global loads, 16-byte shared-memory reads and
// 8x8 FMAs per k per thread (no scalar global loads; the old heuristic kernel had no shared memory): 4 reads of a
// k row per thread and 64 FMAs per k, 8 k per tile; 2 blocks per SM, so ptxas must fit 128 registers without spills
// (the FMA order by A's row needed 12 bytes of them, and ran 6% slower on the H100)
TEST(TCGemm, PTXSimtFp32) {
  if (!nvrtc().ok) GTEST_SKIP() << "NVRTC not installed";
  const RenderedProgram p = template_program(last_ast(mat({4096, 4096}, dtypes::float32).matmul(mat({4096, 4096}, dtypes::float32))));
  ASSERT_NE(p.src.find("SIMT fp32: block tile 128x128x8, 256 threads of 8x8, fragments double-buffered"), std::string::npos) << p.src;
  EXPECT_NE(p.src.find("__launch_bounds__(256, 2)"), std::string::npos);
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const std::string ptx = nvrtc().to_ptx(p.src, arch);
    ASSERT_EQ(ptx.rfind("ERROR:", 0), std::string::npos) << arch << "\n" << ptx << "\n" << p.src;
    EXPECT_EQ(count(ptx, "ld.global.v4.f32") + count(ptx, "ld.global.nc.v4.f32"), 4u) << arch;   // A and B: prologue, loop
    EXPECT_EQ(count(ptx, "ld.global.f32") + count(ptx, "ld.global.nc.f32"), 0u) << arch;
    EXPECT_EQ(count(ptx, "ld.shared.v4.f32"), 4u * 9) << arch;   // the first row, k+1 of 7 k, the next tile's first row
    EXPECT_EQ(count(ptx, "fma.rn.f32"), 512u) << arch;
    EXPECT_EQ(count(ptx, "bar.sync"), 2u) << arch;
    EXPECT_EQ(count(ptx, ".local"), 0u) << arch;
    const std::string rep = ptxas_report(ptx, arch);
    if (rep.empty()) continue;
    EXPECT_NE(rep.find(" 0 bytes spill stores"), std::string::npos) << arch << "\n" << rep;
    EXPECT_NE(rep.find("Used 12"), std::string::npos) << arch << "\n" << rep;   // 120-128 registers: 2 blocks of 256 per SM
  }
  EXPECT_EQ(p.local_size[0], 256);
  EXPECT_EQ(p.global_size[0], 32 * 32);
}

// ALLOW_TF32=1: an fp32 GEMM runs on TF32 tensor cores in the template's cp.async pipeline: mma.sync m16n8k8 on
// sm_80 (and sm_90 with TC_WGMMA=0), wgmma m64nNk8 on sm_90; K-major register operands by ldmatrix, M/N-major ones
// by scalar shared loads. Off (the default, as in torch), or on sm_75, it stays on the SIMT template (no tf32)
TEST(TCGemm, PTXTf32) {
  if (!nvrtc().ok) GTEST_SKIP() << "NVRTC not installed";
  static const CUDARenderer sm90r("sm_90");
  const UOp plain = last_ast(mat({4096, 4096}, dtypes::float32).matmul(mat({4096, 4096}, dtypes::float32)));
  const UOp at = last_ast(mat({256, 512}, dtypes::float32).transpose().matmul(mat({256, 384}, dtypes::float32)));
  const UOp bt = last_ast((mat({512, 256}, dtypes::float32).matmul(mat({384, 256}, dtypes::float32).transpose()) + mat({384}, dtypes::float32)).relu());
  for (const UOp& ast : {plain, at, bt})
    for (const Renderer* r : std::initializer_list<const Renderer*>{&sm80(), &sm90r}) {
      const bool sm90 = r == &sm90r;
      const std::string arch = sm90 ? "sm_90a" : "sm_80";
      for (int variant = 0; variant < (sm90 ? 3 : 2); variant++) {   // TF32_ROUND=0, 1; sm_90: mma.sync (TC_WGMMA=0)
        const bool round = variant == 1, wgmma = sm90 && variant < 2 && ast != at;   // at: no operand is K-major
        Context on({{"ALLOW_TF32", 1}, {"TF32_ROUND", round}, {"TC_WGMMA", wgmma}});
        const RenderedProgram p = template_program(ast, *r);
        ASSERT_TRUE(is_tf32(p)) << arch << "\n" << p.src;
        const std::string ptx = nvrtc().to_ptx(p.src, arch);
        ASSERT_EQ(ptx.rfind("ERROR:", 0), std::string::npos) << arch << "\n" << ptx << "\n" << p.src;
        if (wgmma) {
          EXPECT_GE(count(ptx, "wgmma.mma_async.sync.aligned.m64n") , 2u) << arch;
          EXPECT_GE(count(ptx, "k8.f32.tf32.tf32"), 2u) << arch;
          EXPECT_EQ(count(ptx, "mma.sync"), 0u) << arch;
        } else {
          EXPECT_GE(count(ptx, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"), 16u) << arch;
          EXPECT_EQ(count(ptx, "wgmma"), 0u) << arch;
        }
        EXPECT_GE(count(ptx, "cp.async.cg.shared.global"), 2u) << arch;
        EXPECT_EQ(count(ptx, "fma.rn.f32"), 0u) << arch;
        if (ast != bt) EXPECT_EQ(count(ptx, "ld.global.f32") + count(ptx, "ld.global.nc.f32"), 0u) << arch;   // bt: the bias
        EXPECT_EQ(count(ptx, "cvt.rna.tf32.f32") > 0, round) << arch;
      }
      Context off({{"ALLOW_TF32", 0}});
      const RenderedProgram p = template_program(ast, *r);
      ASSERT_NE(p.src.find("SIMT fp32"), std::string::npos) << p.src;
      const std::string ptx = nvrtc().to_ptx(p.src, arch);
      ASSERT_EQ(ptx.rfind("ERROR:", 0), std::string::npos) << arch << "\n" << ptx;
      EXPECT_EQ(count(ptx, "tf32"), 0u) << arch;
      EXPECT_GE(count(ptx, "fma.rn.f32"), 512u) << arch;
    }
  Context on({{"ALLOW_TF32", 1}});
  EXPECT_NE(template_program(plain, CUDARenderer("sm_75")).src.find("SIMT fp32"), std::string::npos);   // no TF32 before sm_80
  // a matrix-vector product keeps the heuristic's kernel
  EXPECT_FALSE(is_template(template_program(last_ast(mat({1, 256}, dtypes::float32).matmul(mat({256, 256}, dtypes::float32))))));
}

// The template run on the CPU: one std::thread per CUDA thread, __syncthreads a block barrier, cp.async a copy,
// ldmatrix and mma.sync warp-wide exchanges that follow the PTX ISA's fragment layouts. half is _Float16 and the
// inputs are small integers, so the output must equal an interpretation of the AST exactly.
namespace {
const char* kGemmEmuShim = R"(
#include <algorithm>
#include <barrier>
#include <map>
#include <mutex>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
#define TG_GEMM_EMU
#define __global__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(x) __attribute__((aligned(x)))
#define __int_as_float(x) 0.0f
using std::min; using std::max;
typedef _Float16 half;
static half __hmax(half a, half b) { return a > b ? a : b; }
struct alignas(16) float4 { float x, y, z, w; };
static float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static float fmaf(float a, float b, float c) { return a * b + c; }
struct emu_dim3 { int x, y, z; };
static thread_local emu_dim3 threadIdx, blockIdx;
struct emu_warp { std::barrier<>* bar; const void* ptr[32]; unsigned a[32][4], b[32][2]; float c[32][4]; };
static thread_local emu_warp* emu_w;
static thread_local std::barrier<>* emu_block;
static thread_local int emu_lane;
#define __syncthreads() emu_block->arrive_and_wait()
#define __syncwarp() emu_w->bar->arrive_and_wait()
struct alignas(16) uint4 { unsigned x, y, z, w; };
static void tg_cp_async16(void* dst, const void* src, int bytes) { if (bytes == 16) std::memcpy(dst, src, 16); else std::memset(dst, 0, 16); }
static void tg_cp_async4(void* dst, const void* src, int bytes) { if (bytes == 4) std::memcpy(dst, src, 4); else std::memset(dst, 0, 4); }
static void tg_cp_commit() {}
template <int N> static void tg_cp_wait() {}
static uint16_t emu_h(const void* p, int i) { uint16_t v; std::memcpy(&v, static_cast<const char*>(p) + 2 * i, 2); return v; }
// lane l gets, of matrix j (rows addressed by lanes 8j..8j+7), row l/4 and columns 2(l%4), 2(l%4)+1 (transposed: of the transpose)
static void emu_ldsm(unsigned* r, const void* p, bool trans) {
  emu_warp& w = *emu_w;
  w.ptr[emu_lane] = p;
  w.bar->arrive_and_wait();
  const int l = emu_lane;
  for (int j = 0; j < 4; j++) {
    if (!trans) r[j] = emu_h(w.ptr[8 * j + l / 4], 2 * (l % 4)) | (unsigned(emu_h(w.ptr[8 * j + l / 4], 2 * (l % 4) + 1)) << 16);
    else r[j] = emu_h(w.ptr[8 * j + 2 * (l % 4)], l / 4) | (unsigned(emu_h(w.ptr[8 * j + 2 * (l % 4) + 1], l / 4)) << 16);
  }
  w.bar->arrive_and_wait();
}
static void tg_ldsm_x4(unsigned* r, const void* p) { emu_ldsm(r, p, false); }
static void tg_ldsm_x4_t(unsigned* r, const void* p) { emu_ldsm(r, p, true); }
static float emu_f(unsigned bits) { uint16_t b = bits & 0xffff; half h; std::memcpy(&h, &b, 2); return float(h); }
// m16n8kK on one warp: the lanes' fragments are gathered through w, fill unpacks lane l's into A (16xK) and B (Kx8),
// then each lane computes its 4 outputs of C + A B
template <int K, class Fill> static void emu_mma_k(float* c, const unsigned* a, const unsigned* b, Fill fill) {
  emu_warp& w = *emu_w;
  for (int i = 0; i < 4; i++) w.a[emu_lane][i] = a[i], w.c[emu_lane][i] = c[i];
  for (int i = 0; i < 2; i++) w.b[emu_lane][i] = b[i];
  w.bar->arrive_and_wait();
  float A[16][K], B[K][8], C[16][8];
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    fill(A, B, w, l, g, t);
    for (int i = 0; i < 4; i++) C[g + 8 * (i >> 1)][2 * t + (i & 1)] = w.c[l][i];
  }
  w.bar->arrive_and_wait();
  const int g = emu_lane >> 2, t = emu_lane & 3;
  for (int i = 0; i < 4; i++) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float s = C[row][col];
    for (int k = 0; k < K; k++) s += A[row][k] * B[k][col];
    c[i] = s;
  }
}
static void tg_mma(float* c, const unsigned* a, const unsigned* b) {
  emu_mma_k<16>(c, a, b, [](float (&A)[16][16], float (&B)[16][8], const emu_warp& w, int l, int g, int t) {
    for (int j = 0; j < 4; j++)
      for (int h = 0; h < 2; h++) A[g + 8 * (j & 1)][2 * t + h + 8 * (j >> 1)] = emu_f(w.a[l][j] >> (16 * h));
    for (int j = 0; j < 2; j++)
      for (int h = 0; h < 2; h++) B[2 * t + h + 8 * j][g] = emu_f(w.b[l][j] >> (16 * h));
  });
}
// TF32: operands go in as fp32 bits (the tensor core ignores the low 13 mantissa bits); m16n8k8 fragments
static unsigned tg_tf32(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
static unsigned tg_tf32u(unsigned x) { return x; }
static float emu_tf(unsigned bits) { bits &= ~0x1fffu; float f; std::memcpy(&f, &bits, 4); return f; }
static void tg_mma_tf32(float* c, const unsigned* a, const unsigned* b) {
  emu_mma_k<8>(c, a, b, [](float (&A)[16][8], float (&B)[8][8], const emu_warp& w, int l, int g, int t) {
    for (int j = 0; j < 4; j++) A[g + 8 * (j & 1)][t + 4 * (j >> 1)] = emu_tf(w.a[l][j]);
    for (int j = 0; j < 2; j++) B[t + 4 * j][g] = emu_tf(w.b[l][j]);
  });
}
// wgmma: the warpgroup's A fragments (mma.sync's layout, warp w holding rows 16w..16w+15) times the descriptor's
// K-major matrix, read as 8-row groups 512 bytes apart with the 64-byte swizzle applied to the address bits
struct emu_wgroup { std::barrier<>* bar; unsigned a[128][4]; unsigned long long desc; };
static thread_local emu_wgroup* emu_g;
static thread_local int emu_gtid;
static void tg_wgmma_fence() {}
static void tg_wgmma_commit() {}
template <int N> static void tg_wgmma_wait() {}
static void tg_fence_async_smem() {}
static unsigned long long tg_desc(const void* p) { return reinterpret_cast<unsigned long long>(p); }
static unsigned long long tg_desc128(const void* p) { return reinterpret_cast<unsigned long long>(p) | (1ull << 63); }
static unsigned long long tg_desc128_mn(const void* p) { return reinterpret_cast<unsigned long long>(p) | (1ull << 63); }
// TMA and mbarriers: a barrier is a side-table entry keyed by its shared-memory address; a bulk tensor copy runs at
// once in the issuing thread (box elements innermost first, out-of-bounds zero, the 128-byte swizzle on the
// destination address bits) and then completes its bytes on the barrier
#define __device__
#define __grid_constant__
struct tg_tmap { const char* base; int rank; long long dims[5], strides[5]; int box[5]; };
static thread_local emu_dim3 gridDim;
// the shape-generic kernel's int arguments (RenderedProgram::arg_vals), set per launch: one build serves every shape
static long long emu_argv[64];
extern "C" void emu_set_args(const long long* a, int n) { for (int i = 0; i < n; i++) emu_argv[i] = a[i]; }
static thread_local unsigned char* emu_dsmem;
struct emu_bar { int expected = 0, pending = 0, phase = 0; long long tx = 0; };
static std::mutex emu_bar_mu;
static std::map<const void*, emu_bar> emu_bars;
static unsigned tg_smem_u32(const void* p) { return static_cast<unsigned>(reinterpret_cast<uintptr_t>(p)); }
static void emu_bar_done(emu_bar& b) { if (b.pending == 0 && b.tx == 0) b.phase ^= 1, b.pending = b.expected; }
static void tg_mbar_init(unsigned long long* b, unsigned n) { std::lock_guard<std::mutex> l(emu_bar_mu); emu_bars[b] = emu_bar{int(n), int(n), 0, 0}; }
static void tg_mbar_init_fence() {}
static void tg_mbar_arrive(unsigned long long* b) { std::lock_guard<std::mutex> l(emu_bar_mu); emu_bar& e = emu_bars.at(b); e.pending--; emu_bar_done(e); }
static void tg_mbar_expect_tx(unsigned long long* b, unsigned bytes) {
  std::lock_guard<std::mutex> l(emu_bar_mu); emu_bar& e = emu_bars.at(b); e.tx += bytes; e.pending--; emu_bar_done(e);
}
static void tg_mbar_wait(unsigned long long* b, unsigned parity) {
  for (;;) {
    { std::lock_guard<std::mutex> l(emu_bar_mu); if (unsigned(emu_bars.at(b).phase) != parity) return; }
    std::this_thread::yield();
  }
}
template <int N> static void tg_setmaxnreg_inc() {}
template <int N> static void tg_setmaxnreg_dec() {}
static void emu_tma(void* dst, const tg_tmap* m, const int* c, unsigned long long* bar) {
  long long n = 1;
  for (int i = 0; i < m->rank; i++) n *= m->box[i];
  for (long long e = 0; e < n; e++) {
    long long rest = e, src = 0;
    bool in = true;
    for (int i = 0; i < m->rank; i++) {
      const long long x = c[i] + rest % m->box[i];
      rest /= m->box[i];
      in = in && x >= 0 && x < m->dims[i];
      src += x * m->strides[i];
    }
    uintptr_t d = reinterpret_cast<uintptr_t>(dst) + 2 * e;
    d ^= ((d >> 7) & 7) << 4;
    const uint16_t v = in ? emu_h(m->base + src, 0) : 0;
    std::memcpy(reinterpret_cast<void*>(d), &v, 2);
  }
  std::lock_guard<std::mutex> l(emu_bar_mu);
  emu_bar& b = emu_bars.at(bar);
  b.tx -= 2 * n;
  emu_bar_done(b);
}
static void tg_tma2(void* d, const tg_tmap* m, int c0, int c1, unsigned long long* b) { int c[] = {c0, c1}; emu_tma(d, m, c, b); }
static void tg_tma3(void* d, const tg_tmap* m, int c0, int c1, int c2, unsigned long long* b) { int c[] = {c0, c1, c2}; emu_tma(d, m, c, b); }
static void tg_tma4(void* d, const tg_tmap* m, int c0, int c1, int c2, int c3, unsigned long long* b) { int c[] = {c0, c1, c2, c3}; emu_tma(d, m, c, b); }
template <int ND> static void tg_wgmma(float (&d)[ND], const unsigned* a, unsigned long long desc) {
  emu_wgroup& w = *emu_g;
  for (int i = 0; i < 4; i++) w.a[emu_gtid][i] = a[i];
  if (emu_gtid == 0) w.desc = desc;
  w.bar->arrive_and_wait();
  const int wi = emu_gtid / 32, l = emu_gtid % 32, g = l >> 2, t = l & 3;
  float A[2][16];   // this thread's two rows
  for (int rr = 0; rr < 2; rr++)
    for (int k = 0; k < 16; k++) {
      const int src = wi * 32 + g * 4 + (k % 8) / 2, reg = rr + 2 * (k / 8);
      A[rr][k] = emu_f(w.a[src][reg] >> (16 * (k % 2)));
    }
  for (int i = 0; i < ND; i++) {
    const int rr = (i & 3) >> 1, col = (i >> 2) * 8 + 2 * t + (i & 1);
    float s = d[i];
    for (int k = 0; k < 16; k++) {
      unsigned long long ad;
      if (w.desc >> 63) {   // tg_desc128: 8-row groups 1024 bytes apart, 128-byte rows, chunk ^= row % 8
        ad = (w.desc & ~(1ull << 63)) + (col / 8) * 1024 + (col % 8) * 128 + 2 * k;
        ad ^= ((ad >> 7) & 7) << 4;
      } else {
        ad = w.desc + (col / 8) * 512 + (col % 8) * 64 + 2 * k;
        ad ^= ((ad >> 7) & 3) << 4;
      }
      s += A[rr][k] * emu_f(emu_h(reinterpret_cast<const void*>(ad), 0));
    }
    d[i] = s;
  }
  w.bar->arrive_and_wait();
}
// wgmma with both operands by descriptor (the TMA kernel): each thread's two A rows (warp w: rows 16w + lane/4, +8)
// read from A's descriptor, K-major (TA 0: 128-byte rows, 8-row groups 1024 bytes apart) or M-major (TA 1: 128-byte
// k rows of 64 A rows), the 128-byte swizzle on the address bits; B as tg_wgmma's tg_desc128 operand
// wgmma is warpgroup-collective (.sync.aligned): the barriers keep the emulated threads together as the hardware's
// converged warps are, so that no lane releases a ring slot (mbarrier arrive) before its warpgroup's slower lanes
// have seen that slot's phase; without them a lane could miss a phase and wait on the parity forever
template <int TA, int ND> static void tg_wgmma_ss(float (&d)[ND], unsigned long long da, unsigned long long db) {
  emu_wgroup& w = *emu_g;
  w.bar->arrive_and_wait();
  const int wi = emu_gtid / 32, l = emu_gtid % 32, g = l >> 2, t = l & 3;
  auto at = [](unsigned long long base, int row, int k, bool k_major) {
    unsigned long long ad = (base & ~(1ull << 63)) + (k_major ? (row / 8) * 1024 + (row % 8) * 128 + 2 * k : k * 128 + 2 * row);
    ad ^= ((ad >> 7) & 7) << 4;
    return emu_f(emu_h(reinterpret_cast<const void*>(ad), 0));
  };
  for (int i = 0; i < ND; i++) {
    const int row = wi * 16 + g + 8 * ((i & 3) >> 1), col = (i >> 2) * 8 + 2 * t + (i & 1);
    float s = d[i];
    for (int k = 0; k < 16; k++) s += at(da, row, k, TA == 0) * at(db, col, k, true);
    d[i] = s;
  }
  w.bar->arrive_and_wait();
}
// warp-uniform values only (the kernels shuffle the warpgroup index from lane 0 so that ptxas sees it uniform)
static int __shfl_sync(unsigned, int v, int) { return v; }
// TF32 wgmma m64nNk8: A fragments as mma.sync m16n8k8's (warp w rows 16w..), the descriptor's rows of 4-byte k
template <int ND> static void tg_wgmma_tf32(float (&d)[ND], const unsigned* a, unsigned long long desc) {
  emu_wgroup& w = *emu_g;
  for (int i = 0; i < 4; i++) w.a[emu_gtid][i] = a[i];
  if (emu_gtid == 0) w.desc = desc;
  w.bar->arrive_and_wait();
  const int wi = emu_gtid / 32, l = emu_gtid % 32, g = l >> 2, t = l & 3;
  float A[2][8];
  for (int rr = 0; rr < 2; rr++)
    for (int k = 0; k < 8; k++) A[rr][k] = emu_tf(w.a[wi * 32 + g * 4 + k % 4][rr + 2 * (k / 4)]);
  for (int i = 0; i < ND; i++) {
    const int rr = (i & 3) >> 1, col = (i >> 2) * 8 + 2 * t + (i & 1);
    float s = d[i];
    for (int k = 0; k < 8; k++) {
      unsigned long long ad = w.desc + (col / 8) * 512 + (col % 8) * 64 + 4 * k;
      ad ^= ((ad >> 7) & 3) << 4;
      unsigned bits;
      std::memcpy(&bits, reinterpret_cast<const void*>(ad), 4);
      s += A[rr][k] * emu_tf(bits);
    }
    d[i] = s;
  }
  w.bar->arrive_and_wait();
}
struct emu_ptr { void* p; template <class T> operator T*() const { return static_cast<T*>(p); } };
)";
const char* kGemmEmuLaunch = R"(
extern "C" void emu_launch(void** bufs, const int* g, const int* l) {
  const int nthreads = l[0];
  for (int gz = 0; gz < g[2]; gz++) for (int gx = 0; gx < g[0]; gx++) {
    std::barrier<> block(nthreads);
    std::vector<unsigned char> emu_block_dsmem(EMU_DSMEM_BYTES);
    std::vector<std::barrier<>> bars;
    std::vector<emu_warp> warps(nthreads / 32);
    for (int i = 0; i < nthreads / 32; i++) warps[i].bar = new std::barrier<>(32);
    std::vector<emu_wgroup> groups((nthreads + 127) / 128);
    for (auto& g : groups) g.bar = new std::barrier<>(std::min(128, nthreads));
    std::vector<std::thread> ts;
    for (int tid = 0; tid < nthreads; tid++)
      ts.emplace_back([&, tid] {
        threadIdx = {tid, 0, 0};
        blockIdx = {gx, 0, gz};
        gridDim = {g[0], g[1], g[2]};
        emu_dsmem = emu_block_dsmem.data();
        emu_w = &warps[tid / 32]; emu_lane = tid % 32; emu_block = &block;
        emu_g = &groups[tid / 128]; emu_gtid = tid % 128;
        EMU_KERNEL(EMU_ARGS);
      });
    for (auto& t : ts) t.join();
    for (auto& w : warps) delete w.bar;
    for (auto& g : groups) delete g.bar;
  }
}
)";

// the AST evaluated per output element in double (single-view trackers; casts to half round)
struct AstEval {
  std::unordered_map<int64_t, std::vector<double>> bufs;   // by DEFINE_GLOBAL index
  static int64_t index(const ShapeTracker& st, const std::vector<int64_t>& idx, bool& valid) {
    EXPECT_EQ(st.views.size(), 1u) << st.str();
    const View& v = st.views[0];
    int64_t o = v.offset;
    for (size_t i = 0; i < idx.size(); i++) {
      if (v.mask && (idx[i] < (*v.mask)[i].first || idx[i] >= (*v.mask)[i].second)) valid = false;
      o += idx[i] * v.strides[i];
    }
    return o;
  }
  static double round_to(double x, DType dt) {
    if (dt == dtypes::half) return double(static_cast<_Float16>(x));
    if (dt == dtypes::float32) return double(static_cast<float>(x));
    if (dt == dtypes::bool_) return x != 0;
    return x;
  }
  double eval(const UOp& x, std::vector<int64_t>& idx) {
    switch (x->op) {
      case Ops::LOAD: {
        bool valid = true;
        const int64_t i = index(st_of(x->src[1]), idx, valid);
        return valid ? bufs.at(x->src[0]->as<int64_t>()).at(i) : 0.0;
      }
      case Ops::CONST: {
        bool valid = true;
        index(st_of(x->src[0]), idx, valid);
        return valid ? (x->is<double>() ? x->as<double>() : x->is<int64_t>() ? double(x->as<int64_t>()) : double(x->as<bool>())) : 0.0;
      }
      case Ops::CAST: return round_to(eval(x->src[0], idx), x->dtype);
      case Ops::REDUCE_AXIS: {
        const Shape& full = st_of(x->src[0]->op == Ops::CAST ? x->src[0]->src[0]->src[0]->src[1] : x->src[0]->src[0]->src[1]).shape();
        const auto& axes = x->as<ReduceArg>().axes;
        double s = 0;
        std::function<void(size_t)> rec = [&](size_t a) {
          if (a == axes.size()) { s += eval(x->src[0], idx); return; }
          for (int64_t i = 0; i < full[axes[a]]; i++) idx[axes[a]] = i, rec(a + 1);
          idx[axes[a]] = 0;
        };
        rec(0);
        return round_to(s, x->dtype);
      }
      case Ops::ALU: {
        std::vector<double> o;
        for (const UOp& s : x->src) o.push_back(eval(s, idx));
        if (x->is<BinaryOps>()) switch (x->as<BinaryOps>()) {
            case BinaryOps::ADD: return round_to(o[0] + o[1], x->dtype);
            case BinaryOps::MUL: return round_to(o[0] * o[1], x->dtype);
            case BinaryOps::MAX: return std::max(o[0], o[1]);
            case BinaryOps::CMPLT: return o[0] < o[1];
            case BinaryOps::CMPNE: return o[0] != o[1];
            default: break;
          }
        if (x->is<TernaryOps>() && x->as<TernaryOps>() == TernaryOps::WHERE) return o[0] != 0 ? o[1] : o[2];
        if (x->is<UnaryOps>() && x->as<UnaryOps>() == UnaryOps::NEG) return -o[0];
        ADD_FAILURE() << "AstEval: no ALU " << x.str();
        return NAN;
      }
      default: ADD_FAILURE() << "AstEval: no " << x.str(); return NAN;
    }
  }
};
}  // namespace

TEST(TCGemm, WarpEmulated) {
  if (std::system("command -v c++ >/dev/null 2>&1") != 0) GTEST_SKIP() << "no C++ compiler";
  Context cuda_c({{"TC_PTX", 0}});   // the emulator runs CUDA C: the TMA kernel's C form (the PTX form: on the GPU)
  std::mt19937 rng(11);
  struct EmuCase {
    const char* what; UOp ast; int64_t tc_opt, tile; bool sm90 = false; const char* tma = nullptr; bool tf32 = false;
    int same_src = -1;   // the case whose source this one must render (the shape-generic TMA kernel), its build reused
  };
  std::vector<EmuCase> cases = {
      {"64-tile 128x96x64", last_ast(mat({128, 64}, dtypes::half).matmul(mat({64, 96}, dtypes::half))), 0, 64},
      {"128-tile 128x256x64", last_ast(mat({128, 64}, dtypes::half).matmul(mat({64, 256}, dtypes::half))), 0, 128},
      {"A^T, 128-tile", last_ast(mat({96, 136}, dtypes::half).transpose().matmul(mat({96, 128}, dtypes::half))), 2, 128},
      {"B^T", last_ast(mat({64, 48}, dtypes::half).matmul(mat({80, 48}, dtypes::half).transpose())), 2, 64},
      {"odd M,N,K 72x40x24", last_ast(mat({72, 24}, dtypes::half).matmul(mat({24, 40}, dtypes::half))), 2, 64},
      {"batched + bias + relu, half out",
       last_ast((mat({2, 64, 48}, dtypes::half).matmul(mat({2, 48, 72}, dtypes::half)) + mat({72}, dtypes::half)).relu()), 2, 64},
      {"fp16 acc", last_ast(mat({64, 32}, dtypes::half).matmul(mat({32, 64}, dtypes::half), false, dtypes::half)), 0, 64},
      // sm_90: wgmma with A (K-major) from shared memory and B through registers, then B^T (K-major) by descriptor
      {"wgmma 128x128x64", last_ast(mat({128, 64}, dtypes::half).matmul(mat({64, 128}, dtypes::half))), 0, 0, true},
      {"wgmma B^T, odd 72x200x40", last_ast(mat({72, 40}, dtypes::half).matmul(mat({200, 40}, dtypes::half).transpose())), 2, 0, true},
      {"wgmma batched + bias + relu",
       last_ast((mat({2, 64, 48}, dtypes::half).matmul(mat({2, 48, 136}, dtypes::half)) + mat({136}, dtypes::half)).relu()), 2, 0, true},
      // sm_90's default TMA kernel (small tiles, 2-3 ring slots and a grid smaller than the tiles, so the ring and the
      // persistent loop wrap): B N-major through ldmatrix.trans panels; both K-major + bias + relu; batched (3-d maps)
      {"TMA 136x72x200, B N-major, grid 2", last_ast(mat({136, 72}, dtypes::half).matmul(mat({72, 200}, dtypes::half))), 2, 0, true,
       "2,128,3,2"},
      {"TMA B^T + bias + relu, 72x40x200, grid 1",
       last_ast((mat({72, 40}, dtypes::half).matmul(mat({200, 40}, dtypes::half).transpose()) + mat({200}, dtypes::half)).relu()), 2, 0, true,
       "1,64,2,1"},
      {"TMA batched", last_ast(mat({2, 64, 48}, dtypes::half).matmul(mat({2, 48, 136}, dtypes::half))), 2, 0, true,
       "2,64,2,1"},
      // the staged epilogue's forms: scalar stores (N=36 has no aligned runs of 8), fp32 out (two 16-byte stores a
      // run), and 128x256 tiles whose stages take 4 chunks of 64 columns beside the ring
      {"TMA B^T, N=36: scalar stores", last_ast(mat({72, 40}, dtypes::half).matmul(mat({36, 40}, dtypes::half).transpose())), 2, 0, true,
       "1,64,2,1"},
      {"TMA fp32 out", gemm_ast(72, 40, 136, dtypes::half, dtypes::float32, dtypes::float32), 2, 0, true, "1,64,2,1"},
      {"TMA 128x256 tiles, chunked stages", last_ast(mat({136, 72}, dtypes::half).matmul(mat({72, 200}, dtypes::half))), 2, 0, true,
       "2,256,4,1"},
      // the shape-generic TMA kernel: other odd shapes of cases 10-12's configs render their source and run their build
      // with other int arguments (M, N, K, batch, strides)
      {"TMA generic: case 10's source at 200x40x88", last_ast(mat({200, 40}, dtypes::half).matmul(mat({40, 88}, dtypes::half))), 2, 0, true,
       "2,128,3,2", false, 10},
      {"TMA generic: case 11's source at 56x24x136",
       last_ast((mat({56, 24}, dtypes::half).matmul(mat({136, 24}, dtypes::half).transpose()) + mat({136}, dtypes::half)).relu()), 2, 0, true,
       "1,64,2,1", false, 11},
      {"TMA generic: case 12's source at 3x40x24x72", last_ast(mat({3, 40, 24}, dtypes::half).matmul(mat({3, 24, 72}, dtypes::half))), 2, 0,
       true, "2,64,2,1", false, 12},
      // a weight broadcast over a batch: M is two axes (the epilogue's digits of em by the sizes as arguments)
      {"TMA generic: 3x40x24 @ 24x72, M over two axes", last_ast(mat({3, 40, 24}, dtypes::half).matmul(mat({24, 72}, dtypes::half))), 2, 0, true,
       "1,64,2,1"},
      // a conv as an implicit GEMM: rows (n, y, x) and k (ky, kx*cin) gathered from the channels-last copies
      {"conv 3x3 pad 1, 64-tile", conv_ast({2, 16, 6, 6}, {64, 16, 3, 3}, 1, 1, false), 2, 64},
      {"conv stride 2 + bias + relu, 128-tile", conv_ast({3, 24, 9, 9}, {40, 24, 3, 3}, 2, 1, true), 2, 128},
      {"conv wgmma 3x3 pad 1", conv_ast({2, 16, 6, 6}, {64, 16, 3, 3}, 1, 1, false), 2, 0, true},
      {"conv wgmma stride 2 + bias + relu", conv_ast({3, 24, 9, 9}, {40, 24, 3, 3}, 2, 1, true), 2, 0, true},
      // no tensor core: fp32 takes the SIMT template (K-major and M/N-major operands, edges, batch, epilogue, K not a
      // multiple of the k tile)
      {"SIMT fp32 136x200x72", last_ast(mat({136, 72}, dtypes::float32).matmul(mat({72, 200}, dtypes::float32))), 0, 0},
      {"SIMT fp32 A^T B^T + bias + relu",
       last_ast((mat({72, 136}, dtypes::float32).transpose().matmul(mat({200, 72}, dtypes::float32).transpose()) + mat({200}, dtypes::float32)).relu()),
       0, 0},
      {"SIMT fp32 batched", last_ast(mat({2, 64, 44}, dtypes::float32).matmul(mat({2, 44, 72}, dtypes::float32))), 0, 0},
      {"SIMT fp32 A^T, K=44", last_ast(mat({44, 72}, dtypes::float32).transpose().matmul(mat({44, 136}, dtypes::float32))), 0, 0},
      {"SIMT fp32 B^T, odd 136x200x72 + bias + relu",
       last_ast((mat({136, 72}, dtypes::float32).matmul(mat({200, 72}, dtypes::float32).transpose()) + mat({200}, dtypes::float32)).relu()), 0, 0},
      // ALLOW_TF32: fp32 on mma.sync m16n8k8 (K-major operands by ldmatrix, M/N-major ones by scalar loads), both tiles
      {"TF32 136x200x72, B N-major, 128-tile", last_ast(mat({136, 72}, dtypes::float32).matmul(mat({72, 200}, dtypes::float32))), 0, 128,
       false, nullptr, true},
      {"TF32 A^T B^T + bias + relu, 64-tile",
       last_ast((mat({72, 136}, dtypes::float32).transpose().matmul(mat({200, 72}, dtypes::float32).transpose()) + mat({200}, dtypes::float32)).relu()),
       0, 64, false, nullptr, true},
      {"TF32 wgmma batched, A^T (M-major, through registers), B^T, K=44",
       last_ast(mat({2, 44, 64}, dtypes::float32).transpose(-1, -2).matmul(mat({2, 72, 44}, dtypes::float32).transpose(-1, -2))), 0, 0, true,
       nullptr, true},
      {"TF32 mma.sync, A^T and B N-major (no K-major operand)",
       last_ast(mat({44, 64}, dtypes::float32).transpose().matmul(mat({44, 72}, dtypes::float32))), 0, 64, false, nullptr, true},
      {"TF32 wgmma 136x200x72, B N-major (A K-major by descriptor)",
       last_ast(mat({136, 72}, dtypes::float32).matmul(mat({72, 200}, dtypes::float32))), 0, 0, true, nullptr, true},
      {"TF32 wgmma B^T + bias + relu (A K-major through registers)",
       last_ast((mat({72, 40}, dtypes::float32).matmul(mat({200, 40}, dtypes::float32).transpose()) + mat({200}, dtypes::float32)).relu()), 0, 0,
       true, nullptr, true},
  };
  static const CUDARenderer sm90r("sm_90");
  int idx = 0;
  std::vector<std::string> srcs(cases.size());                 // each case's kernel source
  std::map<std::string, std::unique_ptr<Emulator>> builds;     // emulations by source: a shared source builds once
  for (const EmuCase& c : cases) {
    const size_t ci = static_cast<size_t>(&c - cases.data());
    // EMU_CASES=text runs only the cases whose name has it
    if (const std::string only = getenv_str("EMU_CASES"); !only.empty() && std::string(c.what).find(only) == std::string::npos) continue;
    SCOPED_TRACE(c.what);
    Context ctx(std::map<std::string, std::string>{{"TC_OPT", std::to_string(c.tc_opt)}, {"TC_GEMM_TILE", std::to_string(c.tile)},
                                                   {"TC_TMA", c.tma ? "1" : "0"}, {"TC_TMA_CFG", c.tma ? c.tma : ""},
                                                   {"ALLOW_TF32", c.tf32 ? "1" : "0"}});
    const RenderedProgram p = c.sm90 ? template_program(c.ast, sm90r) : template_program(c.ast);
    ASSERT_TRUE(is_template(p)) << p.src;
    ASSERT_EQ(p.src.find("wgmma.mma_async") != std::string::npos, c.sm90) << p.src;
    ASSERT_EQ(is_tf32(p), c.tf32) << p.src;
    ASSERT_EQ(p.src.find("SIMT fp32") != std::string::npos, std::string(c.what).rfind("SIMT", 0) == 0) << p.src;
    ASSERT_EQ(p.src.find("cp.async.bulk.tensor") != std::string::npos, c.tma != nullptr) << p.src;
    srcs[ci] = p.src;
    if (c.same_src >= 0 && !srcs[c.same_src].empty()) {
      EXPECT_EQ(p.src, srcs[c.same_src]);
      EXPECT_NE(p.arg_vals, template_program(cases[c.same_src].ast, sm90r).arg_vals);   // the shape is in the arguments
    }
    std::string src = p.src;
    for (const char* inc : {"#include <cuda_fp16.h>", "#define INFINITY (__int_as_float(0x7f800000))", "#define NAN (__int_as_float(0x7fffffff))"})
      if (size_t at = src.find(inc); at != std::string::npos) src.erase(at, std::string(inc).size());
    std::string args;
    for (int i = 0; i < p.n_bufs; i++) args += std::string(i ? ", " : "") + "emu_ptr{bufs[" + std::to_string(i) + "]}";
    std::string dsmem = "0";
    if (size_t at = src.find("extern __shared__ unsigned char tg_dsmem[];"); at != std::string::npos) {
      // TMA kernel: dynamic shared memory from tg_launch[1], the two tensor maps from its fields (runtime/cuda.cpp)
      src.replace(at, std::string("extern __shared__ unsigned char tg_dsmem[];").size(), "unsigned char* tg_dsmem = emu_dsmem;");
      // the int arguments (M, N, K, ...) between the buffers and the maps, as the runtime passes them
      for (size_t i = 0; i < p.arg_vals.size(); i++) args += ", int(emu_argv[" + std::to_string(i) + "])";
      args += ", emu_map(0, bufs), emu_map(1, bufs)";
      dsmem = "tg_launch[1]";
      // a negative field is int argument -(1 + f), offset and strides then in elements (2 bytes)
      src += R"(
static tg_tmap emu_map(int i, void** bufs) {
  const long long* f = tg_launch + 3 + 19 * i;
  auto v = [](long long x, long long scale) { return x >= 0 ? x : emu_argv[-x - 1] * scale; };
  tg_tmap m{static_cast<const char*>(bufs[f[0]]) + v(f[4], 2), int(f[2]), {}, {2}, {}};
  for (int d = 0; d < 5; d++) m.dims[d] = v(f[5 + d], 1), m.box[d] = int(f[14 + d]);
  for (int d = 1; d < 5; d++) m.strides[d] = v(f[9 + d], 2);
  return m;
}
)";
    }
    src = std::string(kGemmEmuShim) + src + "\n#define EMU_KERNEL " + p.function_name + "\n#define EMU_ARGS " + args +
          "\n#define EMU_DSMEM_BYTES " + dsmem + "\n" + kGemmEmuLaunch;
    const bool built = builds.count(src) != 0;
    EXPECT_EQ(built, c.same_src >= 0 && !srcs[c.same_src].empty()) << "a shared source builds once, another builds its own";
    std::unique_ptr<Emulator>& emu = builds[src];
    if (!emu) emu = std::make_unique<Emulator>(src, "tg_gemm_emu_" + std::to_string(idx++));
    ASSERT_TRUE(emu->launch) << src;
    const EmuLaunch launch = emu->launch;
    if (!p.arg_vals.empty()) {
      auto set_args = reinterpret_cast<void (*)(const long long*, int)>(dlsym(emu->h, "emu_set_args"));
      ASSERT_TRUE(set_args != nullptr);
      const std::vector<long long> a(p.arg_vals.begin(), p.arg_vals.end());
      ASSERT_LE(a.size(), 64u);
      set_args(a.data(), static_cast<int>(a.size()));
    }
    // buffers: inputs small integers, the output poisoned
    AstEval ev;
    std::map<int64_t, std::pair<DType, int64_t>> globals;   // index -> (dtype, elements)
    for (const UOp& u : c.ast.toposort())
      if ((u->op == Ops::LOAD || u->op == Ops::STORE) && u->src[0]->op == Ops::DEFINE_GLOBAL) {
        auto& g = globals[u->src[0]->as<int64_t>()];
        g.first = u->src[0]->dtype.base();
        g.second = std::max(g.second, st_of(u->src[1]).real_size());
      }
    std::vector<std::vector<char>> mem;
    std::vector<void*> bufs;
    std::uniform_int_distribution<int> d(-3, 3);
    for (auto& [i, g] : globals) {
      ASSERT_EQ(i, static_cast<int64_t>(bufs.size()));
      mem.emplace_back(g.second * g.first.itemsize());
      auto& vals = ev.bufs[i];
      for (int64_t j = 0; j < g.second; j++) {
        const double v = i == 0 ? NAN : d(rng);
        vals.push_back(v);
        if (g.first == dtypes::half) { _Float16 hv = static_cast<_Float16>(v); std::memcpy(mem.back().data() + 2 * j, &hv, 2); }
        else { ASSERT_EQ(g.first, dtypes::float32); float fv = static_cast<float>(v); std::memcpy(mem.back().data() + 4 * j, &fv, 4); }
      }
      bufs.push_back(mem.back().data());
    }
    int g3[3], l3[3];
    for (int i = 0; i < 3; i++) g3[i] = static_cast<int>(p.global_size[i]), l3[i] = static_cast<int>(p.local_size[i]);
    launch(bufs.data(), g3, l3);
    // every output element against the interpretation
    const UOp& store = c.ast->src[0];
    const Shape& out_shape = st_of(store->src[1]).shape();
    std::vector<int64_t> oi(out_shape.size(), 0);
    int64_t bad = 0, n = 0;
    const DType odt = globals[0].first;
    for (;;) {
      bool valid = true;
      const int64_t at = AstEval::index(st_of(store->src[1]), oi, valid);
      const double ref = ev.eval(store->src[2], oi);
      double got;
      if (odt == dtypes::half) { _Float16 hv; std::memcpy(&hv, mem[0].data() + 2 * at, 2); got = double(hv); }
      else { float fv; std::memcpy(&fv, mem[0].data() + 4 * at, 4); got = fv; }
      if (!(got == ref) && bad++ < 3) ADD_FAILURE() << "at " << to_str(oi) << ": " << got << " vs " << ref;
      n++;
      size_t a = out_shape.size();
      while (a-- > 0 && ++oi[a] == out_shape[a]) oi[a] = 0;
      if (a == static_cast<size_t>(-1)) break;
    }
    EXPECT_EQ(bad, 0) << "of " << n << "\n" << p.src;
  }
}

// The TMA kernel is shape-generic: GEMMs of one config (dtypes, layouts, tile config, epilogue ops) render ONE source
// with their shape in arg_vals (M, N, K first), so that a new shape reuses the compiled binary. The bench's shapes:
// 1024 and 1280-1664 take the 64x128 tiles, 1792 and 1920 the 128x256 ones; odd shapes (1000^3: every tile edge
// partial, K a partial k tile; 1000x520x1200) share the 64x128 source. NVRTC compiles it with the int parameters
// between the buffers and the two tensor maps, as the runtime passes them. Fails on the old code (the shape was
// compiled into the text: every shape its own source).
TEST(TCGemm, ShapeGenericTmaSource) {
  static const CUDARenderer sm90r("sm_90");
  for (int as_ptx : {1, 0}) {
  Context ctx({{"TC_PTX", as_ptx}});
  auto prog = [&](int64_t m, int64_t k, int64_t n) {
    return template_program(last_ast(mat({m, k}, dtypes::half).matmul(mat({k, n}, dtypes::half))), sm90r);
  };
  const RenderedProgram small = prog(1536, 1536, 1536), big = prog(1792, 1792, 1792);
  ASSERT_NE(small.src.find("cp.async.bulk.tensor"), std::string::npos) << small.src;
  EXPECT_NE(small.src, big.src);
  EXPECT_EQ(small.local_size[0], 256);
  EXPECT_EQ(big.local_size[0], 384);
  EXPECT_EQ(prog(1920, 1920, 1920).src, big.src);
  for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{{1024, 1024, 1024}, {1280, 1280, 1280}, {1408, 1408, 1408}, {1664, 1664, 1664},
                                                          {1000, 1000, 1000}, {1000, 520, 1200}}) {
    const RenderedProgram q = prog(m, k, n);
    EXPECT_EQ(q.src, small.src) << m << "x" << k << "x" << n;
    EXPECT_EQ(q.function_name, small.function_name);
    ASSERT_GE(q.arg_vals.size(), 3u);
    EXPECT_EQ(std::vector<int64_t>(q.arg_vals.begin(), q.arg_vals.begin() + 3), (std::vector<int64_t>{m, n, k}));
    // the display name (DEBUG=2) keeps the shape; the function's name doesn't
    EXPECT_NE(q.name, small.name);
    EXPECT_EQ(q.function_name.find(std::to_string(n)), std::string::npos) << q.function_name;
  }
  // (the PTX form's shared-memory offsets hold such numbers: 1536 = 3 x 512)
  if (!as_ptx)
    for (const char* n : {"1536", "1408", "1664", "1280"}) EXPECT_EQ(small.src.find(n), std::string::npos) << n << " in\n" << small.src;
  // batched with a bias + relu epilogue (3-d tensor maps, the batch sizes and the output's strides as arguments)
  auto batched = [&](int64_t b, int64_t m, int64_t k, int64_t n) {
    return template_program(last_ast((mat({b, m, k}, dtypes::half).matmul(mat({b, k, n}, dtypes::half)) + mat({n}, dtypes::half)).relu()), sm90r);
  };
  const RenderedProgram b1 = batched(4, 128, 64, 96), b2 = batched(2, 200, 40, 136);
  EXPECT_EQ(b1.src, b2.src);
  EXPECT_NE(b1.arg_vals, b2.arg_vals);
  EXPECT_NE(b1.src, small.src);
  for (const RenderedProgram* q : {&small, &big, &b1}) {
    EXPECT_EQ(is_ptx(*q), as_ptx == 1);
    if (is_ptx(*q)) {
      // parameters: the buffers (.u64), one .u32 per argument, the two tensor maps
      EXPECT_EQ(count(q->src, "\t.param .u64 p_data"), static_cast<size_t>(q->n_bufs));
      EXPECT_EQ(count(q->src, "\t.param .u32 p_tg_"), q->arg_vals.size()) << q->src.substr(0, 3000);
      EXPECT_EQ(count(q->src, ".param .align 64 .b8 p_tm_"), 2u);
      continue;
    }
    if (!nvrtc().ok) GTEST_SKIP() << "NVRTC not installed";
    const std::string ptx = nvrtc().to_ptx(q->src, "sm_90a");
    ASSERT_EQ(ptx.rfind("ERROR:", 0), std::string::npos) << ptx << "\n" << q->src;
    // parameters: the buffers, one .u32 per argument, the two tensor maps (the last is param n_bufs + args + 1)
    const std::string fn = q->function_name + "_param_";
    const size_t last = q->n_bufs + q->arg_vals.size() + 1;
    EXPECT_NE(ptx.find(fn + std::to_string(last)), std::string::npos) << ptx.substr(0, 4000);
    EXPECT_EQ(ptx.find(fn + std::to_string(last + 1)), std::string::npos);
    EXPECT_NE(ptx.find(".param .u32 " + fn + std::to_string(q->n_bufs)), std::string::npos) << ptx.substr(0, 4000);
  }
  }
}

// The runtime side on the CPU: a program's arg_vals reach its int parameters after the variables' values, and a
// second program with the same source (another shape's arguments) compiles nothing: CompiledRunner takes the first
// one's binary from the in-process program cache, also with the disk cache off. Fails on the old code (no arg_vals;
// every CompiledRunner compiled).
TEST(TCGemm, ArgValsAndProgramCacheOnCpu) {
  clear_method_cache();
  Context ctx({{"CACHELEVEL", 0}});
  RenderedProgram p;
  p.name = p.function_name = "tg_args";
  p.device = "CPU";
  p.src = "void tg_args(float* data0, const int v, const int n, const int m) { data0[0] = (float)(v * 10000 + n * 100 + m); }\n"
          "void tg_args_call(void** bufs, const int* vals, int core_lo, int core_hi) {\n"
          "  (void)core_lo; (void)core_hi; tg_args((float*)bufs[0], vals[0], vals[1], vals[2]);\n}\n";
  p.n_bufs = 1;
  p.outs = {0};
  p.vars = {"v"};
  p.var_ranges = {{0, 9}};
  p.arg_vals = {4, 2};
  Buffer out("CPU", 1, dtypes::float32);
  out.ensure_allocated();
  auto result = [&](CompiledRunner& r, int64_t v) {
    r({&out}, {{"v", v}}, true);
    float f = 0;
    out.copyout(&f, sizeof(f));
    return f;
  };
  Compiler& comp = get_device("CPU").compiler();
  const int64_t before = comp.compile_count;
  CompiledRunner r1(p);
  EXPECT_EQ(comp.compile_count, before + 1);
  EXPECT_EQ(result(r1, 3), 30402.0f);
  p.arg_vals = {7, 5};
  CompiledRunner r2(p);
  EXPECT_EQ(comp.compile_count, before + 1);   // the same source: its binary
  EXPECT_EQ(r2.lib, r1.lib);
  EXPECT_EQ(result(r2, 8), 80705.0f);
  clear_method_cache();   // empties the program cache too
  CompiledRunner r3(p);
  EXPECT_EQ(comp.compile_count, before + 2);
}

// ---------------------------------------------------------------- on the GPU against the CPU

namespace {
bool have_cuda() { return cuda_device_count() > 0; }

std::vector<float> to_floats(const Tensor& t) { return t.cast(dtypes::float32).to("CPU").tolist<float>(); }

// ||out - ref|| / ||ref||, NaN counts as failure
double rel_err(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  if (out.size() != ref.size()) return INFINITY;
  for (size_t i = 0; i < out.size(); i++) {
    if (std::isnan(out[i])) return INFINITY;
    num += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

// a (b,)m,k @ k,n GEMM on the GPU against the same math in float32 on the CPU; returns the GPU's kernels' TC use
void check_gemm(int64_t b, int64_t m, int64_t k, int64_t n, DType din, std::optional<DType> acc, bool trans_a, bool trans_b,
                bool epilogue, double tol) {
  SCOPED_TRACE(std::to_string(b) + "x" + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) + " " + din.str() +
               (trans_a ? " At" : "") + (trans_b ? " Bt" : "") + (epilogue ? " bias+relu" : ""));
  Shape sa = trans_a ? Shape{k, m} : Shape{m, k}, sb = trans_b ? Shape{n, k} : Shape{k, n};
  if (b > 1) sa.insert(sa.begin(), b), sb.insert(sb.begin(), b);
  Tensor a = (Tensor::randn(sa, {.device = "CPU"}) * 0.5).cast(din).realize(), bm = (Tensor::randn(sb, {.device = "CPU"}) * 0.5).cast(din).realize();
  Tensor bias = Tensor::randn({n}, {.device = "CPU"}).cast(din).realize();
  auto f = [&](const Tensor& x, const Tensor& y, const Tensor& bi) {
    Tensor xa = trans_a ? x.transpose(-1, -2) : x, yb = trans_b ? y.transpose(-1, -2) : y;
    Tensor r = xa.matmul(yb, false, acc);
    return epilogue ? (r + bi).relu() : r;
  };
  std::vector<float> ref = to_floats(f(a.cast(dtypes::float32), bm.cast(dtypes::float32), bias.cast(dtypes::float32)));
  std::vector<float> out = to_floats(f(a.to("CUDA"), bm.to("CUDA"), bias.to("CUDA")));
  EXPECT_LT(rel_err(out, ref), tol);
}
}  // namespace

TEST(TensorCoresGPU, GemmShapes) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  Tensor::manual_seed(12);
  // square, and M/N/K not multiples of any tile (TC_OPT=2 pads them)
  Context ctx({{"TC_OPT", 2}});
  for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{{256, 256, 256}, {1000, 1000, 1000}, {4097, 64, 33}, {1, 256, 128},
                                                          {128, 1, 64}, {100, 300, 70}})
    check_gemm(1, m, k, n, dtypes::half, std::nullopt, false, false, false, 5e-3);
}

TEST(TensorCoresGPU, DtypesBatchedTransposedEpilogue) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  Tensor::manual_seed(13);
  check_gemm(1, 512, 256, 384, dtypes::bfloat16, std::nullopt, false, false, false, 2e-2);
  check_gemm(1, 256, 512, 256, dtypes::half, dtypes::half, false, false, false, 2e-2);   // fp16 accumulate and out
  check_gemm(3, 128, 192, 64, dtypes::half, std::nullopt, false, false, false, 5e-3);     // batched
  check_gemm(1, 256, 128, 192, dtypes::half, std::nullopt, true, false, false, 5e-3);     // A transposed
  check_gemm(1, 256, 128, 192, dtypes::half, std::nullopt, false, true, false, 5e-3);     // B transposed
  check_gemm(2, 128, 256, 128, dtypes::half, std::nullopt, false, false, true, 5e-3);     // bias + relu fused
}

// every block tile a sweep may pick as a default, on edges that need predication, with A or B K-major (wgmma's
// shared-memory operand is the K-major one); the big square case takes the 128x128 tiles by default
TEST(TensorCoresGPU, TemplateConfigs) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  Tensor::manual_seed(15);
  check_gemm(1, 2048, 256, 2048, dtypes::half, std::nullopt, false, false, false, 5e-3);
  for (const char* cfg : {"128,128,2,4,3,2", "128,128,2,2,3,2", "64,64,2,2,4,4", "128,64,2,2,4,2", "128,256,2,4,2,1"}) {
    SCOPED_TRACE(std::string("TC_GEMM_CFG=") + cfg);
    Context ctx(std::map<std::string, std::string>{{"TC_GEMM_CFG", cfg}, {"TC_WGMMA", "0"}, {"TC_OPT", "2"}});
    check_gemm(1, 520, 264, 392, dtypes::half, std::nullopt, false, false, false, 5e-3);
    check_gemm(1, 520, 264, 392, dtypes::half, std::nullopt, false, true, true, 5e-3);
  }
  for (const char* cfg : {"2,128,3,2,0", "2,128,3,2,1", "2,256,2,1,0", "1,128,4,2,1", "1,256,2,1,0", "1,192,3,1,1", "2,64,4,2,2"}) {
    SCOPED_TRACE(std::string("TC_WGMMA_CFG=") + cfg);
    Context ctx(std::map<std::string, std::string>{{"TC_WGMMA_CFG", cfg}, {"TC_OPT", "2"}});
    check_gemm(1, 520, 264, 392, dtypes::half, std::nullopt, false, false, false, 5e-3);
    check_gemm(1, 520, 264, 392, dtypes::half, std::nullopt, false, true, true, 5e-3);
    check_gemm(2, 136, 72, 200, dtypes::bfloat16, std::nullopt, false, false, false, 2e-2);
  }
}

// sm_90's TMA kernel: every tile shape and ring depth a sweep may pick, on M/N/K edges TMA zero-fills (K=264 is
// 4 k tiles + 8), A or B K-major (B N-major goes through ldmatrix.trans), batched (a 3-d tensor map), a bias+relu
// epilogue, several tiles per block of the persistent grid (grid 3) and a batch broadcast operand
TEST(TensorCoresGPU, TmaConfigs) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  if (get_device("CUDA").arch() != "sm_90") GTEST_SKIP() << "TMA kernel: sm_90 only";
  Tensor::manual_seed(16);
  check_gemm(1, 2048, 512, 2048, dtypes::half, std::nullopt, false, false, false, 5e-3);   // the default config
  check_gemm(1, 4096, 256, 4096, dtypes::bfloat16, std::nullopt, false, true, true, 2e-2);
  for (const char* cfg : {"2,256,4", "2,128,5", "2,128,4,3", "1,128,6", "1,256,4", "2,192,4", "2,64,8,5", "1,128,6,2"}) {
    SCOPED_TRACE(std::string("TC_TMA_CFG=") + cfg);
    Context ctx(std::map<std::string, std::string>{{"TC_TMA_CFG", cfg}, {"TC_OPT", "2"}});
    check_gemm(1, 520, 264, 392, dtypes::half, std::nullopt, false, false, false, 5e-3);
    check_gemm(1, 520, 264, 392, dtypes::half, std::nullopt, false, true, true, 5e-3);
    check_gemm(2, 136, 72, 200, dtypes::bfloat16, std::nullopt, false, false, false, 2e-2);
    check_gemm(1, 256, 512, 256, dtypes::half, dtypes::half, false, false, false, 2e-2);
  }
  Context ctx({{"TC_OPT", 2}});
  Tensor a = (Tensor::randn({3, 200, 96}, {.device = "CPU"}) * 0.5).cast(dtypes::half).realize();
  Tensor w = (Tensor::randn({96, 136}, {.device = "CPU"}) * 0.5).cast(dtypes::half).realize();
  std::vector<float> ref = to_floats(a.cast(dtypes::float32).matmul(w.cast(dtypes::float32)));
  EXPECT_LT(rel_err(to_floats(a.to("CUDA").matmul(w.to("CUDA"))), ref), 5e-3);
}

// fp32 GEMMs take the SIMT template: edges, K-major and M/N-major operands, batch, a fused epilogue, K not a multiple
// of the k tile, a grid of several waves of blocks
TEST(TensorCoresGPU, SimtFp32) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  Tensor::manual_seed(17);
  check_gemm(1, 520, 264, 392, dtypes::float32, std::nullopt, false, false, false, 1e-5);
  check_gemm(1, 520, 268, 392, dtypes::float32, std::nullopt, true, true, true, 1e-5);
  check_gemm(3, 128, 192, 64, dtypes::float32, std::nullopt, false, false, false, 1e-5);
  check_gemm(1, 136, 44, 200, dtypes::float32, std::nullopt, true, false, true, 1e-5);
  check_gemm(1, 1024, 1024, 1024, dtypes::float32, std::nullopt, false, true, false, 1e-5);
  check_gemm(1, 2048, 64, 4096, dtypes::float32, std::nullopt, false, false, false, 1e-5);
}

// ALLOW_TF32=1: fp32 GEMMs on TF32 tensor cores against fp32 on the CPU. TF32 keeps 10 mantissa bits, so the
// error is ~1e-3 relative: within 5e-3, and above 1e-5 (an fp32 kernel's error is ~1e-7), which shows TF32 ran
TEST(TensorCoresGPU, Tf32) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  if (std::atoi(get_device("CUDA").arch().c_str() + 3) < 80) GTEST_SKIP() << "TF32: sm_80+";
  Tensor::manual_seed(19);
  // raw fp32 bits, cvt.rna rounding, and mma.sync instead of wgmma on sm_90
  for (auto [round, wgmma] : std::vector<std::pair<const char*, const char*>>{{"0", "1"}, {"1", "1"}, {"0", "0"}}) {
    Context ctx(std::map<std::string, std::string>{{"ALLOW_TF32", "1"}, {"TF32_ROUND", round}, {"TC_WGMMA", wgmma}});
    for (auto [b, m, k, n, ta, tb, epi] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, bool>>{
             {1, 1024, 1024, 1024, false, false, false}, {1, 520, 264, 392, true, true, true}, {3, 136, 72, 200, false, true, false},
             {1, 1000, 1000, 1000, false, false, false}, {1, 4096, 512, 4096, false, false, true}}) {
      SCOPED_TRACE(std::string("TF32_ROUND=") + round + " TC_WGMMA=" + wgmma);
      Shape sa = ta ? Shape{k, m} : Shape{m, k}, sb = tb ? Shape{n, k} : Shape{k, n};
      if (b > 1) sa.insert(sa.begin(), b), sb.insert(sb.begin(), b);
      Tensor x = Tensor::randn(sa, {.device = "CPU"}).realize(), y = Tensor::randn(sb, {.device = "CPU"}).realize();
      Tensor bias = Tensor::randn({n}, {.device = "CPU"}).realize();
      auto f = [&](const Tensor& xx, const Tensor& yy, const Tensor& bb) {
        Tensor r = (ta ? xx.transpose(-1, -2) : xx).matmul(tb ? yy.transpose(-1, -2) : yy);
        return epi ? (r + bb).relu() : r;
      };
      std::vector<float> ref;
      {
        Context cpu({{"ALLOW_TF32", 0}});
        ref = to_floats(f(x, y, bias));
      }
      const double err = rel_err(to_floats(f(x.to("CUDA"), y.to("CUDA"), bias.to("CUDA"))), ref);
      EXPECT_LT(err, 5e-3) << b << "x" << m << "x" << k << "x" << n;
      EXPECT_GT(err, 1e-5) << b << "x" << m << "x" << k << "x" << n << ": as exact as fp32, so TF32 was not used";
    }
  }
}

TEST(TensorCoresGPU, Conv2dHalf) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  Tensor::manual_seed(14);
  Tensor x = Tensor::randn({4, 32, 14, 14}, {.device = "CPU"}).cast(dtypes::half).realize();
  Tensor w = (Tensor::randn({64, 32, 3, 3}, {.device = "CPU"}) * 0.1).cast(dtypes::half).realize();
  std::vector<float> ref = to_floats(x.cast(dtypes::float32).conv2d(w.cast(dtypes::float32), std::nullopt, 1, {1}, {1}, {1}));
  std::vector<float> out = to_floats(x.to("CUDA").conv2d(w.to("CUDA"), std::nullopt, 1, {1}, {1}, {1}));
  EXPECT_LT(rel_err(out, ref), 5e-3);
}

// the channels-last implicit GEMM on the GPU (fp16 in, fp32 accumulate) against fp32 on the CPU: the benchmark's
// channel count, a strided conv with bias + relu fused, bf16, and the fp16 backward (its input gradient is again a
// channels-last conv; the weight gradient the reduce over (n, y, x))
TEST(TensorCoresGPU, Conv2dImplicitGemm) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  Tensor::manual_seed(18);
  struct C { Shape x, w; int64_t stride, pad; bool bias; DType dt; double tol; };
  for (const C& c : std::vector<C>{{{8, 256, 14, 14}, {256, 256, 3, 3}, 1, 1, false, dtypes::half, 5e-3},
                                   {{5, 64, 17, 13}, {96, 64, 3, 3}, 2, 1, true, dtypes::half, 5e-3},
                                   {{4, 32, 10, 10}, {48, 32, 1, 1}, 1, 0, false, dtypes::bfloat16, 2e-2}}) {
    SCOPED_TRACE(to_str(c.x) + " * " + to_str(c.w));
    Tensor x = Tensor::randn(c.x, {.device = "CPU"}).cast(c.dt).realize(), w = (Tensor::randn(c.w, {.device = "CPU"}) * 0.1).cast(c.dt).realize();
    Tensor b = Tensor::randn({c.w[0]}, {.device = "CPU"}).cast(c.dt).realize();
    auto f = [&](const Tensor& xx, const Tensor& ww, const Tensor& bb) {
      Tensor o = xx.conv2d(ww, c.bias ? std::optional<Tensor>(bb) : std::nullopt, 1, {c.stride}, {1}, {c.pad});
      return c.bias ? o.relu() : o;
    };
    std::vector<float> ref = to_floats(f(x.cast(dtypes::float32), w.cast(dtypes::float32), b.cast(dtypes::float32)));
    EXPECT_LT(rel_err(to_floats(f(x.to("CUDA"), w.to("CUDA"), b.to("CUDA"))), ref), c.tol);
  }
  // backward, fp16 on the GPU against fp32 on the CPU
  Tensor x = Tensor::randn({4, 64, 12, 12}, {.device = "CPU"}).cast(dtypes::half).realize();
  Tensor w = (Tensor::randn({32, 64, 3, 3}, {.device = "CPU"}) * 0.1).cast(dtypes::half).realize();
  Tensor r = Tensor::randn({4, 32, 12, 12}, {.device = "CPU"}).realize();
  auto grads = [&](const Tensor& xx, const Tensor& ww, const Tensor& rr) {
    Tensor xg = xx.detach().requires_grad_(), wg = ww.detach().requires_grad_();
    (xg.conv2d(wg, std::nullopt, 1, {1}, {1}, {1}).cast(dtypes::float32) * rr).sum().backward();
    return std::pair{to_floats(*xg.grad()), to_floats(*wg.grad())};
  };
  auto [rx, rw] = grads(x.cast(dtypes::float32), w.cast(dtypes::float32), r);
  auto [gx, gw] = grads(x.to("CUDA"), w.to("CUDA"), r.to("CUDA"));
  EXPECT_LT(rel_err(gx, rx), 1e-2);
  EXPECT_LT(rel_err(gw, rw), 1e-2);
}

// A new shape of a config compiled already in the process compiles nothing (the disk cache off): the shape-generic
// TMA kernel's binary is reused with other int arguments, and the results are right (odd M/N/K edges included).
// Fails on the old code (each shape compiled its own kernel).
TEST(TensorCoresGPU, NewShapeReusesTheTmaBinary) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  if (get_device("CUDA").arch() != "sm_90") GTEST_SKIP() << "TMA kernel: sm_90 only";
  Tensor::manual_seed(20);
  Context ctx({{"CACHELEVEL", 0}});
  Compiler& comp = get_device("CUDA").compiler();
  auto gemm = [&](int64_t m, int64_t k, int64_t n) {
    SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n));
    Tensor a = (Tensor::randn({m, k}, {.device = "CPU"}) * 0.5).cast(dtypes::half).realize();
    Tensor b = (Tensor::randn({k, n}, {.device = "CPU"}) * 0.5).cast(dtypes::half).realize();
    Tensor ga = a.to("CUDA").realize(), gb = b.to("CUDA").realize();
    const int64_t before = comp.compile_count;
    Tensor c = ga.matmul(gb).realize();
    const int64_t compiles = comp.compile_count - before;
    EXPECT_LT(rel_err(to_floats(c), to_floats(a.cast(dtypes::float32).matmul(b.cast(dtypes::float32)))), 5e-3);
    return compiles;
  };
  gemm(1536, 1536, 1536);
  EXPECT_EQ(gemm(1000, 520, 1200), 0);
  EXPECT_EQ(gemm(1408, 1408, 1408), 0);
  EXPECT_EQ(gemm(1000, 1000, 1000), 0);
  gemm(4096, 4096, 4096);   // the 128x256 tiles' config
  EXPECT_EQ(gemm(2048, 1000, 3000), 0);
}

// The TMA kernel's PTX through the driver: PTX_COMPILER=driver hands the PTX on and cuModuleLoadData JITs it, once
// for all programs of the binary (CUDAProgram shares the module); PTX_COMPILER=link returns the JIT linker's cubin,
// and a PTX error there comes back as a tg::Error with the JIT's log. Either way two shapes of the 128x256 config are
// right, the first compiles (the compiler's cachekey names the backend) and the second nothing. Fails on the old code
// (no link backend: it threw; the cachekey did not name the backend).
TEST(TensorCoresGPU, DriverJitBackends) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  if (get_device("CUDA").arch() != "sm_90") GTEST_SKIP() << "TMA kernel: sm_90 only";
  struct Env {   // PTX_COMPILER for this test only
    explicit Env(const char* v) { setenv("PTX_COMPILER", v, 1); }
    ~Env() { unsetenv("PTX_COMPILER"); }
  };
  static const CUDARenderer sm90r("sm_90");
  const RenderedProgram p = template_program(last_ast(mat({4096, 4096}, dtypes::half).matmul(mat({4096, 4096}, dtypes::half))), sm90r);
  ASSERT_TRUE(is_ptx(p));
  Compiler& comp = get_device("CUDA").compiler();
  for (const char* how : {"link", "driver"}) {
    SCOPED_TRACE(how);
    Env env(how);
    const std::string bin = comp.compile(p.src);
    if (std::string(how) == "driver") EXPECT_EQ(bin, p.src);
    else EXPECT_EQ(bin.substr(0, 4), "\x7f" "ELF");
    if (std::string(how) == "link") {
      std::string bad = p.src;
      bad.replace(bad.find("wgmma.mma_async"), 5, "wgmmx");
      try {
        comp.compile(bad);
        ADD_FAILURE() << "bad PTX compiled";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("JIT linker"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("wgmmx"), std::string::npos) << e.what();
      }
    }
    Tensor::manual_seed(22);
    Context ctx({{"CACHELEVEL", 0}, {"TC_OPT", 2}});
    // 128x256 tiles; the second shape (>= 96 tiles of 128x256: the same config) reuses the first's binary
    for (int64_t m : {1792, 2048}) {
      Tensor a = (Tensor::randn({m, 1544}, {.device = "CPU"}) * 0.5).cast(dtypes::half).realize();
      Tensor b = (Tensor::randn({1544, 1792}, {.device = "CPU"}) * 0.5).cast(dtypes::half).realize();
      Tensor ga = a.to("CUDA").realize(), gb = b.to("CUDA").realize();
      const int64_t before = comp.compile_count;
      Tensor c = ga.matmul(gb).realize();
      EXPECT_EQ(comp.compile_count - before, m == 2048 ? 0 : 1) << m;
      EXPECT_LT(rel_err(to_floats(c), to_floats(a.cast(dtypes::float32).matmul(b.cast(dtypes::float32)))), 5e-3) << m;
    }
  }
}

// The TMA kernel as PTX (the default) and as CUDA C (TC_PTX=0, the fallback for epilogues the PTX doesn't cover)
// against the CPU: odd M/N/K edges, batched, A or B transposed (R K-major or not), bias + relu, a residual add,
// fp16/bf16 in with fp16/bf16/fp32 out, both tile configs (the 128x256 PTX kernel in each TC_PTX_KSTEPS form, with
// and without TC_PTX_MAXNREG); a sigmoid epilogue takes the C kernel in either setting.
TEST(TensorCoresGPU, TmaPtxAndCudaC) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  if (get_device("CUDA").arch() != "sm_90") GTEST_SKIP() << "TMA kernel: sm_90 only";
  for (int as_ptx : {1, 0}) {
    SCOPED_TRACE(as_ptx ? "PTX" : "CUDA C");
    Tensor::manual_seed(21);
    Context ctx({{"TC_OPT", 2}, {"TC_PTX", as_ptx}});
    check_gemm(1, 1000, 1000, 1000, dtypes::half, std::nullopt, false, false, false, 5e-3);
    check_gemm(1, 520, 264, 392, dtypes::half, std::nullopt, false, true, true, 5e-3);
    check_gemm(1, 1000, 136, 520, dtypes::half, std::nullopt, true, false, true, 5e-3);
    check_gemm(3, 200, 72, 136, dtypes::half, std::nullopt, false, false, true, 5e-3);
    check_gemm(2, 136, 72, 200, dtypes::bfloat16, std::nullopt, false, false, false, 2e-2);
    check_gemm(1, 256, 512, 256, dtypes::half, dtypes::half, false, false, false, 2e-2);
    check_gemm(1, 4096, 256, 4096, dtypes::bfloat16, std::nullopt, false, true, true, 2e-2);   // 128x256 tiles, R K-major
    check_gemm(1, 3000, 200, 2056, dtypes::half, std::nullopt, false, false, true, 5e-3);       // 128x256, ldmatrix.trans
    // the 128x256 PTX kernel's other forms: R by ldmatrix (0), 2 or 4 wgmma by descriptors a loop iteration, the
    // register hand-over (setmaxnreg, which 0 always has: session 13's kernel)
    for (auto [steps, maxnreg] : std::vector<std::pair<int, int>>{{0, 1}, {1, 0}, {2, 0}, {4, 0}}) {
      if (!as_ptx) break;
      SCOPED_TRACE("TC_PTX_KSTEPS=" + std::to_string(steps) + " TC_PTX_MAXNREG=" + std::to_string(maxnreg));
      Context form({{"TC_PTX_KSTEPS", steps}, {"TC_PTX_MAXNREG", maxnreg}});
      check_gemm(1, 4096, 256, 4096, dtypes::bfloat16, std::nullopt, false, true, true, 2e-2);
      check_gemm(1, 3000, 200, 2056, dtypes::half, std::nullopt, false, false, true, 5e-3);
    }
    Tensor a = (Tensor::randn({520, 264}, {.device = "CPU"}) * 0.5).cast(dtypes::half).realize();
    Tensor w = (Tensor::randn({264, 392}, {.device = "CPU"}) * 0.5).cast(dtypes::half).realize();
    Tensor r = Tensor::randn({520, 392}, {.device = "CPU"}).cast(dtypes::half).realize();
    Tensor bias = Tensor::randn({392}, {.device = "CPU"}).cast(dtypes::half).realize();
    auto f32 = [](const Tensor& t) { return t.cast(dtypes::float32); };
    // a residual add with fp32 out, and a sigmoid epilogue
    EXPECT_LT(rel_err(to_floats((a.to("CUDA").matmul(w.to("CUDA")) + r.to("CUDA")).cast(dtypes::float32)), to_floats(f32(a).matmul(f32(w)) + f32(r))), 5e-3);
    EXPECT_LT(rel_err(to_floats((a.to("CUDA").matmul(w.to("CUDA")) + bias.to("CUDA")).sigmoid()), to_floats((f32(a).matmul(f32(w)) + f32(bias)).sigmoid())),
              5e-3);
  }
}
