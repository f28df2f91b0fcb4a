// Tensor cores (OptOps::TC, WMMA -> mma.sync):
//   codegen checks that need no GPU: which kernels take the opt, the opts and shapes it leaves, the rendered
//     CUDA compiled to PTX by NVRTC (under /usr/local/cuda here and on CI) for sm_80 and sm_90a;
//   GPU checks against the CPU: square and odd shapes, batched, transposed, fp16/bf16 in, fp16/fp32 out, an epilogue.
#include <gtest/gtest.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "codegen/kernel.hpp"
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
    if (si.kind == MetaOps::KERNEL) ast = si.ast;
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
    // a half sum kept in half (acc_dtype half): the half -> half tensor core with packed accumulators
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
  for (const Case& c : cases) {
    Kernel k(c.ast, sm80());
    k.hand_coded_optimizations();
    ASSERT_TRUE(k.tensor_core) << c.what;
    const std::string src = k.to_program().src;
    for (const char* arch : {"sm_80", "sm_90a"}) {
      const std::string ptx = nvrtc().to_ptx(src, arch);
      ASSERT_EQ(ptx.rfind("ERROR:", 0), std::string::npos) << c.what << " " << arch << "\n" << ptx << "\n" << src;
      EXPECT_GE(count(ptx, "mma.sync.aligned.m16n8k16.row.col"), 1u) << c.what << " " << arch;
    }
  }
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

TEST(TensorCoresGPU, Conv2dHalf) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  Tensor::manual_seed(14);
  Tensor x = Tensor::randn({4, 32, 14, 14}, {.device = "CPU"}).cast(dtypes::half).realize();
  Tensor w = (Tensor::randn({64, 32, 3, 3}, {.device = "CPU"}) * 0.1).cast(dtypes::half).realize();
  std::vector<float> ref = to_floats(x.cast(dtypes::float32).conv2d(w.cast(dtypes::float32), std::nullopt, 1, {1}, {1}, {1}));
  std::vector<float> out = to_floats(x.to("CUDA").conv2d(w.to("CUDA"), std::nullopt, 1, {1}, {1}, {1}));
  EXPECT_LT(rel_err(out, ref), 5e-3);
}
