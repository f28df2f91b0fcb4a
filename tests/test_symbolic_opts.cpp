// Opts on symbolic reduce axes: UNROLL of a loop whose length is an expression of Variables splits it
// into tiles of amt unrolled lanes plus a tail (codegen/lowerer.cpp). Every length must give the
// fixed-shape result: 1, 2, 3, around one and two tiles, and large ones, eagerly and under TinyJit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "access.hpp"
#include "codegen/kernel.hpp"
#include "engine/realize.hpp"
#include "renderer/cstyle.hpp"
#include "runtime/device.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); i++) ASSERT_NEAR(a[i], b[i], tol * std::max(1.0f, std::fabs(b[i]))) << what << " at " << i;
}
std::vector<float> vals(const Tensor& t) { return t.contiguous().realize().tolist<float>(); }

constexpr int64_t kMax = 300;

// the optimized kernels of a symbolic tensor's schedule, as get_kernel makes them
std::vector<Kernel> kernels_of(const Tensor& t, const Renderer& ren) {
  std::vector<Kernel> out;
  for (const ScheduleItem& si : t.schedule()) {
    if (si.kind != MetaOps::KERNEL) continue;
    Kernel k(Access::uop(si.ast), ren);
    k.skip_failed_opts = !k.vars.empty();
    k.hand_coded_optimizations();
    k.skip_failed_opts = false;
    out.push_back(std::move(k));
  }
  return out;
}

// the tile size the CPU heuristics split a symbolic row of floats into
int64_t cpu_tile() {
  Variable n("n", 1, kMax);
  Tensor x = Tensor::empty({4, kMax}).shrink({{sint(0), sint(4)}, {sint(0), sint(n.bind(5))}});
  ClangRenderer ren;
  for (Kernel& k : kernels_of(x.sum(1), ren))
    if (!k.sym_splits.empty()) return k.sym_splits[0].second;
  return 0;
}

// lengths around the tile edges
std::vector<int64_t> lengths(int64_t tile) {
  std::vector<int64_t> ls{1, 2, 3, tile - 1, tile, tile + 1, 2 * tile - 1, 2 * tile, 2 * tile + 1, 3 * tile + 5, 257, kMax};
  std::sort(ls.begin(), ls.end());
  ls.erase(std::unique(ls.begin(), ls.end()), ls.end());
  ls.erase(std::remove_if(ls.begin(), ls.end(), [](int64_t l) { return l < 1 || l > kMax; }), ls.end());
  return ls;
}

}  // namespace

// Before: the heuristics' UNROLL of a symbolic axis was refused, so the reduce ran one scalar loop
TEST(SymbolicOpts, CpuSplitsSymbolicReduceIntoTilesAndTail) {
  Variable n("n", 1, kMax);
  Tensor x = Tensor::empty({4, kMax}).shrink({{sint(0), sint(4)}, {sint(0), sint(n.bind(37))}});
  ClangRenderer ren;
  for (const Tensor& r : {x.sum(1), x.max(1)}) {
    std::vector<Kernel> ks = kernels_of(r, ren);
    ASSERT_EQ(ks.size(), 1u);
    Kernel& k = ks[0];
    ASSERT_EQ(k.sym_splits.size(), 1u);
    EXPECT_TRUE(k.symbolic_axis(k.sym_splits[0].first));
    EXPECT_GE(k.sym_splits[0].second, 4);
    const bool unroll = std::any_of(k.applied_opts.begin(), k.applied_opts.end(), [](const Opt& o) { return o.op == OptOps::UNROLL; });
    EXPECT_TRUE(unroll);
    // two loops over the row (tiles with a vector accumulator, then the tail)
    int ranges = 0, vector_accs = 0;
    for (const UOp& u : k.linearize()) {
      ranges += u->op == Ops::RANGE;
      vector_accs += u->op == Ops::DEFINE_ACC && u->dtype.count > 1;
    }
    EXPECT_EQ(ranges, 3);   // the rows, the tiles, the tail
    EXPECT_EQ(vector_accs, 1);
    const std::string src = k.to_program().src;
    EXPECT_NE(src.find("/" + std::to_string(k.sym_splits[0].second) + ")"), std::string::npos) << src;
    EXPECT_NE(src.find("%" + std::to_string(k.sym_splits[0].second) + ")"), std::string::npos) << src;
  }
}

TEST(SymbolicOpts, SymbolicUnrollOptChecks) {
  Variable n("n", 1, 40);
  Tensor x = Tensor::empty({4, 40}).shrink({{sint(0), sint(4)}, {sint(0), sint(n.bind(7))}});
  ClangRenderer ren;
  const ScheduleItem si = x.sum(1).schedule().back();
  Kernel k(Access::uop(si.ast), ren);
  ASSERT_EQ(k.first_reduce(), 1);
  EXPECT_THROW(k.apply_opt({OptOps::UNROLL, 0, 0}), KernelOptError);    // a whole symbolic axis
  EXPECT_THROW(k.apply_opt({OptOps::UNROLL, 0, 32}), KernelOptError);   // max 40 is under two tiles of 32
  EXPECT_THROW(k.apply_opt({OptOps::UPCAST, 1, 4}), KernelOptError);    // not a loop axis to split
  EXPECT_THROW(k.apply_opt({OptOps::LOCAL, 1, 4}), KernelOptError);
  k.apply_opt({OptOps::UNROLL, 0, 8});
  EXPECT_THROW(k.apply_opt({OptOps::UNROLL, 0, 4}), KernelOptError);    // already split
  // a later opt on a fixed axis moves the split axis with the shape
  k.apply_opt({OptOps::UPCAST, 0, 4});
  ASSERT_EQ(k.sym_splits.size(), 1u);
  EXPECT_TRUE(k.symbolic_axis(k.sym_splits[0].first));
  EXPECT_EQ(k.first_reduce(), k.sym_splits[0].first);
}

// plain C++ references (no fixed-shape kernels to compile for every length)
std::vector<float> row_reduce(const std::vector<float>& x, int64_t rows, int64_t stride, int64_t len, const std::string& op) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows; r++) {
    const float* row = x.data() + r * stride;
    double sum = 0, mx = -INFINITY;
    for (int64_t i = 0; i < len; i++) sum += row[i], mx = std::max<double>(mx, row[i]);
    if (op == "sum") out.push_back(static_cast<float>(sum));
    if (op == "max") out.push_back(static_cast<float>(mx));
    if (op == "mean") out.push_back(static_cast<float>(sum / static_cast<double>(len)));
    if (op == "softmax") {
      double z = 0;
      for (int64_t i = 0; i < len; i++) z += std::exp(row[i] - mx);
      for (int64_t i = 0; i < len; i++) out.push_back(static_cast<float>(std::exp(row[i] - mx) / z));
    }
  }
  return out;
}

// sum, max (negative values: the identity must be -inf, not 0), mean and softmax over every edge length,
// one compiled kernel per op for all of them
TEST(SymbolicOpts, ReducesEqualReferenceAtTileEdges) {
  const int64_t tile = cpu_tile();
  ASSERT_GE(tile, 4);
  const int64_t R = 5;
  Variable n("n", 1, kMax);
  Tensor base = (Tensor::rand({R, kMax}) * 4 - 3).realize();
  const std::vector<float> x = base.tolist<float>();
  std::vector<float> neg(x.size());
  std::transform(x.begin(), x.end(), neg.begin(), [](float v) { return -v; });
  Tensor ints = (base * 100).cast(dtypes::int32).realize();
  const std::vector<int32_t> xi = ints.tolist<int32_t>();
  size_t cache_after_first = 0;
  for (int64_t l : lengths(tile)) {
    const std::string what = "n=" + std::to_string(l);
    Tensor sym = base.shrink({{sint(0), sint(R)}, {sint(0), sint(n.bind(l))}});
    expect_close(vals(sym.sum(1)), row_reduce(x, R, kMax, l, "sum"), 1e-5f, "sum " + what);
    expect_close(vals(sym.max(1)), row_reduce(x, R, kMax, l, "max"), 0, "max " + what);
    expect_close(vals((-sym).max(1)), row_reduce(neg, R, kMax, l, "max"), 0, "max of negatives " + what);
    expect_close(vals(sym.mean(1)), row_reduce(x, R, kMax, l, "mean"), 1e-5f, "mean " + what);
    expect_close(vals(sym.softmax(-1)), row_reduce(x, R, kMax, l, "softmax"), 1e-5f, "softmax " + what);
    std::vector<int32_t> isum = ints.shrink({{sint(0), sint(R)}, {sint(0), sint(n.bind(l))}}).sum(1).realize().tolist<int32_t>();
    for (int64_t r = 0; r < R; r++) {
      int64_t want = 0;
      for (int64_t i = 0; i < l; i++) want += xi[r * kMax + i];
      EXPECT_EQ(isum[r], want) << "int sum " << what << " row " << r;
    }
    if (!cache_after_first) cache_after_first = method_cache_size();
    else EXPECT_EQ(method_cache_size(), cache_after_first) << "a new length compiled a kernel: " << what;
  }
}

// a KV-cache style step under TinyJit: captured once, replayed for every length 1..3 tiles + 1 and
// some large ones, equal to a plain C++ attention each time, with no new kernels
TEST(SymbolicOpts, JitReplayEqualsReferenceForEveryLength) {
  const int64_t tile = cpu_tile();
  ASSERT_GE(tile, 4);
  const int64_t H = 3, D = 8;
  Tensor keys = Tensor::rand({1, H, kMax, D}).realize(), values = Tensor::rand({1, H, kMax, D}).realize();
  Tensor q = Tensor::rand({1, H, 1, D}).realize();
  const std::vector<float> kv = keys.tolist<float>(), vv = values.tolist<float>(), qv = q.tolist<float>();
  Variable sp("start_pos", 1, kMax - 1);
  TinyJit jit([&](const std::vector<Tensor>& in, const std::vector<Variable>& vars) {
    const sint end = vars[0] + 1;
    Tensor k = keys.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), end}, {sint(0), sint(D)}});
    Tensor v = values.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), end}, {sint(0), sint(D)}});
    Tensor scores = in[0].matmul(k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(D)));
    return std::vector<Tensor>{scores.softmax(-1).matmul(v), scores.max(-1), scores.sum(-1)};
  });
  std::vector<int64_t> positions;
  for (int64_t p = 1; p <= 3 * tile + 1; p++) positions.push_back(p);
  positions.insert(positions.end(), {100, 255, kMax - 1});
  size_t cache_after_capture = 0, kernels = 0;
  for (size_t i = 0; i < positions.size(); i++) {
    const int64_t p = positions[i], len = p + 1;
    std::vector<Tensor> got = jit({q}, {sp.bind(p)});
    if (i == 1) cache_after_capture = method_cache_size(), kernels = jit.captured_kernels();
    if (i > 1) EXPECT_EQ(method_cache_size(), cache_after_capture) << "start_pos " << p << " compiled a kernel";
    if (i >= 1) EXPECT_EQ(jit.captured_kernels(), kernels);
    // reference: scores, their max and sum, softmax @ v per head
    std::vector<float> scores, out, mx, sm;
    for (int64_t h = 0; h < H; h++) {
      for (int64_t j = 0; j < len; j++) {
        double s = 0;
        for (int64_t d = 0; d < D; d++) s += static_cast<double>(qv[h * D + d]) * kv[(h * kMax + j) * D + d];
        scores.push_back(static_cast<float>(s / std::sqrt(static_cast<double>(D))));
      }
      const std::vector<float> row(scores.end() - len, scores.end());
      mx.push_back(row_reduce(row, 1, len, len, "max")[0]);
      sm.push_back(row_reduce(row, 1, len, len, "sum")[0]);
      const std::vector<float> p_ = row_reduce(row, 1, len, len, "softmax");
      for (int64_t d = 0; d < D; d++) {
        double acc = 0;
        for (int64_t j = 0; j < len; j++) acc += static_cast<double>(p_[j]) * vv[(h * kMax + j) * D + d];
        out.push_back(static_cast<float>(acc));
      }
    }
    const std::string at = " at start_pos " + std::to_string(p);
    expect_close(vals(got[0]), out, 1e-5f, "attention" + at);
    expect_close(vals(got[1]), mx, 1e-5f, "max" + at);
    expect_close(vals(got[2]), sm, 1e-5f, "sum" + at);
  }
  ASSERT_GT(kernels, 0u);
}

// ---- gradients through symbolic movement ops (tinygrad's Reshape/Expand/Pad/Shrink take sints)

namespace {
// d loss / d x for loss(view(x)), once through the symbolic view and once through the fixed one
void expect_same_grad(const std::function<Tensor(const Tensor&, const sint&)>& loss, int64_t rows, int64_t cols, Variable v,
                      const std::string& what) {
  for (int64_t l : {1, 4, 7}) {
    Tensor data = Tensor::rand({rows, cols}).realize();
    Tensor xs = data.detach().contiguous().realize(), xf = data.detach().contiguous().realize();
    xs.requires_grad_(), xf.requires_grad_();
    Tensor ls = loss(xs, sint(v.bind(l)));
    EXPECT_TRUE(ls.sym_shape().empty());
    ls.backward();
    loss(xf, sint(l)).backward();
    ASSERT_TRUE(xs.grad() && xf.grad()) << what;
    expect_close(xs.grad()->tolist<float>(), xf.grad()->tolist<float>(), 1e-5f, what + " at " + std::to_string(l));
  }
}
}  // namespace

// Before: the symbolic overloads made views with no autograd record, so no gradient reached x
// (and a sum over a symbolic view failed backward's shape check).
TEST(SymbolicGrad, ShrinkAndPad) {
  Variable n("n", 1, 8);
  expect_same_grad([](const Tensor& x, const sint& l) {
    Tensor y = x.shrink({{sint(0), sint(3)}, {sint(1), l + 1}});
    return (y * y).sum() + y.pad({{sint(0), sint(0)}, {sint(2), sint(1)}}, 0).exp().sum();
  }, 3, 10, n, "shrink+pad");
}

TEST(SymbolicGrad, ReshapeAndExpand) {
  Variable n("n", 1, 8);
  expect_same_grad([](const Tensor& x, const sint& l) {
    Tensor y = x.shrink({{sint(0), sint(3)}, {sint(0), l}});
    Tensor r = y.reshape({sint(1), sint(3), l}) * 2;
    Tensor col = x.shrink({{sint(0), sint(3)}, {sint(9), sint(10)}}).expand({sint(3), l});   // (3, 1) -> (3, l)
    return (r.sum(0) * col).sum() + (col * col).mean();
  }, 3, 10, n, "reshape+expand");
}

TEST(SymbolicGrad, SoftmaxMaxMeanOverSymbolicAxis) {
  Variable n("n", 1, 8);
  expect_same_grad([](const Tensor& x, const sint& l) {
    Tensor y = x.shrink({{sint(0), sint(4)}, {sint(0), l}});
    Tensor w = Tensor::arange_sym(l).cast(dtypes::float32).reshape({sint(1), l}).expand({sint(4), l});
    return (y.softmax(-1) * w).sum() + y.max(1).sum() + y.mean() + y.var(1, false, 0).sum();
  }, 4, 8, n, "softmax+max+mean");
}

// ---- UPCAST of a symbolic global dim: tiles of amt lanes plus a tail loop (CPU)

namespace {
// two kernels with a symbolic global dim L (axis 1 of the output (R, L)): a dot over D per key
// (q @ keys^T's shape: q broadcast along L) and an elementwise map of a shrunk row
constexpr int64_t kR = 3, kD = 8, kL = 64;
struct SymGlobal {
  Tensor x = Tensor::rand({kR, kL, kD}).realize(), q = Tensor::rand({kR, 1, kD}).realize(), rows = Tensor::rand({kR, kL}).realize();
  std::vector<float> xv = x.tolist<float>(), qv = q.tolist<float>(), rv = rows.tolist<float>();
  Tensor dot(const sint& len) const { return (q * x.shrink({{sint(0), sint(kR)}, {sint(0), len}, {sint(0), sint(kD)}})).sum(-1); }
  Tensor map(const sint& len) const { return rows.shrink({{sint(0), sint(kR)}, {sint(0), len}}) * 2 + 1; }
  std::vector<float> dot_ref(int64_t len) const {
    std::vector<float> out;
    for (int64_t r = 0; r < kR; r++)
      for (int64_t l = 0; l < len; l++) {
        double acc = 0;
        for (int64_t d = 0; d < kD; d++) acc += static_cast<double>(qv[r * kD + d]) * xv[(r * kL + l) * kD + d];
        out.push_back(static_cast<float>(acc));
      }
    return out;
  }
  std::vector<float> map_ref(int64_t len) const {
    std::vector<float> out;
    for (int64_t r = 0; r < kR; r++)
      for (int64_t l = 0; l < len; l++) out.push_back(rv[r * kL + l] * 2 + 1);
    return out;
  }
};

// the symbolic global axis of a kernel
int64_t sym_global_axis(const Kernel& k) {
  for (int64_t a = 0; a < k.global_dims(); a++)
    if (k.symbolic_axis(a)) return a;
  return -1;
}

// Runs t's one kernel with the given opts (plus UPCAST of its symbolic global dim by amt) on the CPU;
// the runner is compiled on the first call and reused after, for the same unbound AST only.
struct ForcedKernel {
  int64_t amt;
  std::vector<Opt> extra;
  std::shared_ptr<CompiledRunner> prg;
  UOp ast;
  std::vector<float> operator()(const Tensor& t, int64_t n_out) {
    const std::vector<ScheduleItem> sched = t.schedule();
    EXPECT_EQ(sched.size(), 1u);
    const ScheduleItem& si = sched.back();
    if (!prg) {
      ast = Access::uop(si.ast);
      Kernel k(ast, get_renderer("CPU"));
      k.apply_opt({OptOps::UPCAST, sym_global_axis(k), amt});
      for (const Opt& o : extra) k.apply_opt(o);
      EXPECT_EQ(k.sym_splits.size(), 1u);
      RenderedProgram p = k.to_program();
      p.device = "CPU";
      prg = std::make_shared<CompiledRunner>(p);
    } else {
      EXPECT_EQ(Access::uop(si.ast), ast) << "a new length made another kernel";
    }
    ExecItem{prg, si.bufs, {}}.run(VarVals(si.var_vals.begin(), si.var_vals.end()));
    std::vector<float> out(si.bufs[0]->nbytes() / sizeof(float));
    si.bufs[0]->copyout(out.data(), out.size() * sizeof(float));
    out.resize(static_cast<size_t>(n_out));
    return out;
  }
};
}  // namespace

// Before: UPCAST of a symbolic dim was refused ("can't apply UPCAST to a symbolic dim")
TEST(SymbolicOpts, UpcastSymbolicGlobalDimEveryLength) {
  // (ForcedKernel runs a CPU kernel on the schedule's buffers: CudaSymbolicEmulated covers the GPU's)
  if (Device::default_device() != "CPU") GTEST_SKIP() << "runs CPU kernels on the default device's buffers";
  SymGlobal g;
  Variable n("n", 1, kL);
  for (int64_t amt : {3, 4, 8, 16}) {
    ForcedKernel dot{amt, {{OptOps::UNROLL, 0, 4}}, nullptr, UOp()}, map{amt, {}, nullptr, UOp()};
    std::vector<int64_t> ls;
    for (int64_t l = 1; l <= 3 * amt + 5; l++) ls.push_back(l);
    ls.push_back(kL);
    for (int64_t l : ls) {
      const std::string what = "amt " + std::to_string(amt) + " length " + std::to_string(l);
      expect_close(dot(g.dot(n.bind(l)), kR * l), g.dot_ref(l), 1e-5f, "dot " + what);
      expect_close(map(g.map(n.bind(l)), kR * l), g.map_ref(l), 1e-6f, "map " + what);
    }
  }
}

TEST(SymbolicOpts, UpcastSymbolicGlobalDimOptChecks) {
  SymGlobal g;
  Variable n("n", 1, kL), m("m", 1, 20);
  auto kernel = [&](const Tensor& t) { return Kernel(Access::uop(t.schedule().back().ast), get_renderer("CPU")); };
  Kernel k = kernel(g.dot(n.bind(5)));
  const int64_t a = sym_global_axis(k);
  ASSERT_GE(a, 0);
  EXPECT_THROW(k.apply_opt({OptOps::UPCAST, a, 17}), KernelOptError);   // more than 16 lanes
  EXPECT_THROW(k.apply_opt({OptOps::UPCAST, a, 0}), KernelOptError);    // a whole symbolic dim
  EXPECT_THROW(k.apply_opt({OptOps::UPCAST, a, 1}), KernelOptError);
  k.apply_opt({OptOps::UPCAST, a, 4});
  EXPECT_THROW(k.apply_opt({OptOps::UPCAST, a, 2}), KernelOptError);    // already upcast
  EXPECT_THROW(k.apply_opt({OptOps::UNROLL, 0, 32}), KernelOptError);   // (D is 8: an ordinary refusal still works)
  // a max under two tiles
  Kernel s = kernel(Tensor::rand({2, 20}).realize().shrink({{sint(0), sint(2)}, {sint(0), sint(m.bind(3))}}) + 1);
  EXPECT_THROW(s.apply_opt({OptOps::UPCAST, sym_global_axis(s), 16}), KernelOptError);
  // the CPU upcasts one symbolic global dim
  Tensor two = Tensor::rand({kL, 20}).realize().shrink({{sint(0), sint(n.bind(4))}, {sint(0), sint(m.bind(3))}}) + 1;
  Kernel t = kernel(two);
  ASSERT_EQ(t.global_dims(), 2);
  t.apply_opt({OptOps::UPCAST, 0, 4});
  EXPECT_THROW(t.apply_opt({OptOps::UPCAST, 1, 4}), KernelOptError);
  // nor the first dim of a kernel big enough to run on threads (its loop is the one they split)
  Variable big("big", 1, 1 << 16);
  Kernel b = kernel(Tensor::rand({1 << 16}).realize().shrink({{sint(0), sint(big.bind(100))}}) + 1);
  EXPECT_THROW(b.apply_opt({OptOps::UPCAST, 0, 4}), KernelOptError);
}

// the CPU heuristics tile q @ keys^T over a symbolic key length (4 keys per loaded q vector): the
// kernel splits it, with the tail loop after the tiles' loop (not inside it)
TEST(SymbolicOpts, HeuristicsUpcastSymbolicKeysOfDecodeScores) {
  Variable sp("start_pos", 1, kMax - 1);
  Tensor keys = Tensor::empty({1, 4, kMax, 64}).shrink({{sint(0), sint(1)}, {sint(0), sint(4)}, {sint(0), sp.bind(30) + 1}, {sint(0), sint(64)}});
  Tensor q = Tensor::empty({1, 4, 1, 64});
  std::vector<Kernel> ks = kernels_of(q.matmul(keys.transpose(-1, -2)), get_renderer("CPU"));
  ASSERT_EQ(ks.size(), 1u);
  Kernel& k = ks[0];
  ASSERT_EQ(k.sym_splits.size(), 1u);
  const auto [axis, amt] = k.sym_splits[0];
  EXPECT_LT(axis, k.first_reduce()) << "the key axis is a global dim";
  EXPECT_EQ(amt, 4);
  // the tiles' loop closes before the tail's opens: depth goes back to the head loop's in between
  int depth = 0, tail_depth = -1, tile_depth = -1;
  for (const UOp& u : k.linearize()) {
    if (u->op == Ops::RANGE) {
      depth++;
      const int64_t range_axis = u->as<std::vector<int64_t>>()[0];
      if (range_axis == axis) tile_depth = depth;
      if (range_axis == (int64_t{1} << 55) + axis) tail_depth = depth;   // (the lowerer's tail-loop arg: past every other)
    }
    if (u->op == Ops::ENDRANGE) depth--;
  }
  EXPECT_GT(tile_depth, 0);
  EXPECT_EQ(tail_depth, tile_depth) << "the tail loop nests in the tiles' loop";
}
