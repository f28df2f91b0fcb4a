// Reduce folding (codegen/reduce_fold): closed forms of sums over a RANGE. The rules on hand-built
// graphs (closed form == brute-force sum for every value of the free variables), then end to end:
// arange, rand, gathers and one_hot run without a loop over the folded axis.
#include <gtest/gtest.h>

#include <random>

#include "codegen/kernel.hpp"
#include "codegen/reduce_fold.hpp"
#include "codegen/uopgraph.hpp"
#include "engine/realize.hpp"
#include "engine/schedule.hpp"
#include "renderer/cstyle.hpp"
#include "tg/tg.hpp"
#include "uop/symbolic.hpp"

using namespace tg;

namespace {
using Vars = std::unordered_map<std::string, int64_t>;
UOp ic(int64_t v) { return UOp::const_(dtypes::int32, v); }
UOp rng(int64_t axis, int64_t lo, int64_t hi) { return UOp(Ops::RANGE, dtypes::int32, {ic(lo), ic(hi)}, std::vector<int64_t>{axis, 1}); }
UOp var(const std::string& n, int64_t lo, int64_t hi) { return UOp(Ops::DEFINE_VAR, dtypes::int32, {ic(lo), ic(hi)}, n); }
int64_t ev(const UOp& u, const Vars& v) { return const_to_int(eval_uop(u, v)); }

// sum over r in [lo, hi) of term, evaluated point by point
int64_t brute_sum(const UOp& term, const UOp& r, Vars v) {
  int64_t s = 0, lo = const_to_int(r->src[0].const_value()), hi = const_to_int(r->src[1].const_value());
  for (int64_t i = lo; i < hi; i++) {
    v["ridx" + std::to_string(r->as<std::vector<int64_t>>()[0])] = i;
    s += ev(term, v);
  }
  return s;
}

// the folded term (free of r) equals the brute-force sum for x in [xlo, xhi]
void expect_folds(const UOp& term, const UOp& r, const UOp& x, int64_t xlo, int64_t xhi) {
  std::optional<UOp> f = fold_range_sum(term, r);
  ASSERT_TRUE(f.has_value()) << term.str();
  EXPECT_FALSE(depends_on(*f, r));
  UOp s = simplify(*f);
  for (int64_t xv = xlo; xv <= xhi; xv++) {
    Vars v{{x->as<std::string>(), xv}};
    ASSERT_EQ(ev(s, v), brute_sum(term, r, v)) << "x=" << xv << " term " << term.render();
  }
}

// the rendered C source of every kernel that realizing t runs
std::vector<std::string> kernel_sources(const Tensor& t) {
  std::vector<std::string> out;
  for (const ScheduleItem& si : t.schedule())
    if (si.kind == MetaOps::KERNEL) out.push_back(get_runner("CPU", Access::uop(si.ast))->p.src);
  return out;
}
int count(const std::string& s, const std::string& sub) {
  int n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + 1)) n++;
  return n;
}
}  // namespace

// ******************** helpers ********************

TEST(FoldRules, LinearIn) {
  UOp r = rng(0, 0, 10), x = var("x", -5, 5);
  auto l = linear_in(x + r * 3 - r + 7, r);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->mul, 2);
  for (int64_t xv = -5; xv <= 5; xv++) EXPECT_EQ(ev(l->base, {{"x", xv}}), xv + 7);
  EXPECT_FALSE(linear_in(r * r, r).has_value());
  EXPECT_FALSE(linear_in((r + x) % 3, r).has_value());
  EXPECT_EQ(linear_in(x * 4, r)->mul, 0);
}

TEST(FoldRules, FloorDivEveryBranch) {
  // non-negative, shifted (bounds known) and the remainder fix-up (bounds unknown)
  for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{{0, 40}, {-40, 40}, {-2147483647, 2147483647}}) {
    UOp a = var("a", lo, hi);
    for (int64_t k = 1; k <= 7; k++) {
      UOp f = floor_div(a, k);
      for (int64_t av = std::max<int64_t>(lo, -40); av <= std::min<int64_t>(hi, 40); av++) {
        int64_t want = av >= 0 ? av / k : -((-av + k - 1) / k);
        ASSERT_EQ(ev(f, {{"a", av}}), want) << av << " // " << k << " bounds " << lo << ".." << hi;
      }
    }
  }
}

// ******************** arange: counting sums ********************

TEST(FoldRules, CountLessThan) {
  UOp x = var("x", -30, 30);
  for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{{0, 10}, {3, 17}})
    for (int64_t m : {-3, -2, -1, 1, 2, 3}) {
      UOp r = rng(0, lo, hi), v = ic(5);
      expect_folds((x + r * m).lt(ic(4)).where(v, ic(0)), r, x, -30, 30);            // lin < c
      expect_folds((x + r * m).lt(ic(4)).alu(UnaryOps::NEG).where(v, ic(0)), r, x, -30, 30);   // lin >= c
      expect_folds(ic(2).lt(r * m - x).where(v, ic(0)), r, x, -30, 30);              // c < lin
    }
}

TEST(FoldRules, CountIntersectionsAndGates) {
  UOp r = rng(0, 0, 12), x = var("x", -20, 20), y = var("y", 0, 3);
  UOp both = (r + x).lt(ic(9)) & (ic(2) - r).lt(x);   // two-sided window, like a padded cumsum
  expect_folds(both.where(ic(3), ic(0)), r, x, -20, 20);
  UOp gated = (r * 2 + x).lt(ic(7)) & y.lt(ic(2));      // a condition free of r stays a gate
  for (int64_t yv = 0; yv <= 3; yv++) {
    UOp t = gated.where(ic(1), ic(0));
    UOp f = simplify(*fold_range_sum(t, r));
    for (int64_t xv = -20; xv <= 20; xv++) {
      Vars v{{"x", xv}, {"y", yv}};
      ASSERT_EQ(ev(f, v), brute_sum(t, r, v));
    }
  }
  // the lowerer's valid: bool MUL as AND
  expect_folds(UOp(Ops::ALU, dtypes::bool_, {(r + x).lt(ic(5)), ic(1).lt(r)}, BinaryOps::MUL).where(ic(1), ic(0)), r, x, -20, 20);
  // a lone != is not an interval, a nonlinear index is not either
  EXPECT_FALSE(fold_range_sum(r.ne(x).where(ic(1), ic(0)), r).has_value());
  EXPECT_FALSE(fold_range_sum((r * r).lt(x).where(ic(1), ic(0)), r).has_value());
}

// A gate on thread indices (a GPU kernel's pad: gidx*8+lidx*2+j < c) bounds each of them, so the
// MOD in a cumsum's index drops and the count folds; the closed form equals the loop for every thread.
TEST(FoldRules, GateOnThreadIndicesNarrowsThem) {
  UOp g(Ops::SPECIAL, dtypes::int32, {ic(16)}, std::string("gidx0")), l(Ops::SPECIAL, dtypes::int32, {ic(4)}, std::string("lidx0"));
  UOp j = rng(1, 0, 2), r = rng(0, 0, 64);
  UOp out = g * 8 + l * 2 + j;   // 0..127, only 0..63 are valid
  UOp term = (out.lt(ic(64)) & ((out + r) % 127).lt(ic(63)).alu(UnaryOps::NEG)).where(ic(1), ic(0));
  auto f = fold_range_sum(term, r);
  ASSERT_TRUE(f.has_value()) << term.render();
  EXPECT_FALSE(depends_on(*f, r));
  UOp s = simplify(*f);
  for (int64_t gv = 0; gv < 16; gv++)
    for (int64_t lv = 0; lv < 4; lv++)
      for (int64_t jv = 0; jv < 2; jv++) {
        Vars v{{"gidx0", gv}, {"lidx0", lv}, {"ridx1", jv}};
        ASSERT_EQ(ev(s, v), brute_sum(term, r, v)) << gv << " " << lv << " " << jv;
      }
}

// ******************** indexing: sum of where(r == x, v(r), 0) ********************

TEST(FoldRules, IndexSubstitutesTheRange) {
  UOp r = rng(0, 2, 11), x = var("x", -5, 15);
  UOp v = r * r + 1;   // any function of r
  expect_folds(x.eq(r).where(v, ic(0)), r, x, -5, 15);
  expect_folds((r * -1 + x).eq(ic(3)).where(v, ic(0)), r, x, -5, 15);   // r == x - 3
  expect_folds((x.eq(r) & r.lt(ic(7))).where(v * 2, ic(0)), r, x, -5, 15);   // other conditions at r = x
  EXPECT_FALSE(fold_range_sum(x.eq(r * 2).where(v, ic(0)), r).has_value());   // 2r == x: not one point per x
}

TEST(FoldRules, IndexGatesTheLoads) {
  UOp r = rng(0, 0, 60000), x = var("x", -100, 70000);
  UOp buf(Ops::DEFINE_GLOBAL, dtypes::float32.ptr_to(), {}, int64_t{1});
  UOp col = var("col", 0, 783);
  UOp ld(Ops::LOAD, dtypes::float32, {buf, r * 784 + col});
  auto f = fold_range_sum(x.eq(r).where(ld, UOp::const_(dtypes::float32, 0.0)), r);
  ASSERT_TRUE(f.has_value());
  std::vector<UOp> loads;
  for (const UOp& u : f->toposort())
    if (u->op == Ops::LOAD) loads.push_back(u);
  ASSERT_EQ(loads.size(), 1u);
  ASSERT_EQ(loads[0]->src.size(), 4u);   // buf, idx, alt, gate: an out-of-range x reads nothing
  UOp idx = loads[0]->src[1], gate = loads[0]->src[3];
  for (int64_t xv : {-100, -1, 0, 5, 59999, 60000, 70000}) {
    Vars v{{"x", xv}, {"col", 3}};
    EXPECT_EQ(ev(gate, v) != 0, xv >= 0 && xv < 60000);
    if (xv >= 0 && xv < 60000) EXPECT_EQ(ev(idx, v), xv * 784 + 3);
  }
}

// ******************** REDUCE rules ********************

TEST(FoldRules, ReduceSplitsFoldableTerms) {
  UOp r = rng(0, 0, 10), x = var("x", -3, 12);
  UOp buf(Ops::DEFINE_GLOBAL, dtypes::int32.ptr_to(), {}, int64_t{1});
  UOp other(Ops::LOAD, dtypes::int32, {buf, r});   // not foldable: stays in a REDUCE
  UOp red(Ops::REDUCE, dtypes::int32, {(x + r).lt(ic(5)).where(ic(2), ic(0)) + other, r}, BinaryOps::ADD);
  auto c = reduce_collapse(red);
  ASSERT_TRUE(c.has_value());
  int reduces = 0;
  for (const UOp& u : c->toposort()) {
    if (u->op != Ops::REDUCE) continue;
    reduces++;
    EXPECT_EQ(u->src[0], other);
  }
  EXPECT_EQ(reduces, 1);
  // MAX has no such closed form
  EXPECT_FALSE(reduce_collapse(UOp(Ops::REDUCE, dtypes::int32, {x.eq(r).where(ic(1), ic(0)), r}, BinaryOps::MAX)).has_value());
}

// The lowerer's upcast reduce: GEP(CONTRACT(x), i) for each of k lanes, x using EXPAND(0..k-1).
TEST(FoldRules, ReduceMergesUpcastLanes) {
  const int64_t k = 4;
  UOp r = rng(1, 0, 25), x = var("x", -10, 110);
  std::vector<UOp> lanes;
  for (int64_t i = 0; i < k; i++) lanes.push_back(ic(i));
  UOp ex(Ops::EXPAND, dtypes::int32, lanes, std::vector<int64_t>{2, k});
  UOp body = (x + r * -8 + ex * -2).lt(ic(-50)).where(ic(1), ic(0));   // q = 4r + lane, coefficient -2
  UOp con(Ops::CONTRACT, dtypes::int32.vec(k), {body}, std::vector<int64_t>{2, k});
  UOp sum = con.gep(0);
  for (int64_t i = 1; i < k; i++) sum = sum + con.gep(i);
  auto c = reduce_collapse(UOp(Ops::REDUCE, dtypes::int32, {sum, r}, BinaryOps::ADD));
  ASSERT_TRUE(c.has_value());
  UOp s = simplify(*c);
  for (int64_t xv = -10; xv <= 110; xv++) {
    int64_t want = 0;
    for (int64_t i = 0; i < k; i++) want += brute_sum(substitute(body, ex, ic(i)), r, {{"x", xv}});
    ASSERT_EQ(ev(s, {{"x", xv}}), want) << xv;
  }
}

TEST(FoldRules, Canonicalization) {
  UOp b = var("x", 0, 10).lt(ic(5)), y = var("y", -3, 3);
  UOp g = graph_rewrite(UOp(Ops::SINK, dtypes::void_, {b.cast(dtypes::int32) * y}), constant_folder());
  EXPECT_EQ(g->src[0], b.where(y, ic(0)));   // cast(bool) * y -> where
  UOp b2 = var("z", 0, 10).lt(ic(3));
  g = graph_rewrite(UOp(Ops::SINK, dtypes::void_, {b.where(b2.where(y, ic(0)), ic(0))}), constant_folder());
  EXPECT_EQ(g->src[0], (b & b2).where(y, ic(0)));   // nested wheres with 0 arms
}

// ******************** end to end ********************

TEST(FoldEndToEnd, ArangeHasNoInnerLoop) {
  Tensor a = Tensor::arange(1000);
  std::vector<std::string> src = kernel_sources(a);
  ASSERT_EQ(src.size(), 1u);
  EXPECT_EQ(count(src[0], "for ("), 1) << src[0];   // only the output loop
  std::vector<int32_t> v = Tensor::arange(1000).tolist<int32_t>();
  for (int i = 0; i < 1000; i++) ASSERT_EQ(v[i], i);
}

TEST(FoldEndToEnd, ArangeVariants) {
  auto ints = Tensor::arange_int(5, 2000, 3).tolist<int32_t>();
  ASSERT_EQ(ints.size(), 665u);
  for (size_t i = 0; i < ints.size(); i++) ASSERT_EQ(ints[i], 5 + 3 * static_cast<int>(i));
  auto down = Tensor::arange_int(1000, -1000, -7).tolist<int32_t>();
  ASSERT_EQ(down.size(), 286u);
  for (size_t i = 0; i < down.size(); i++) ASSERT_EQ(down[i], 1000 - 7 * static_cast<int>(i));
  Tensor f = Tensor::arange(-3.5, 400.0, 0.5);
  for (const std::string& s : kernel_sources(f)) EXPECT_EQ(count(s, "for ("), 1) << s;
  auto fl = Tensor::arange(-3.5, 400.0, 0.5).tolist<float>();
  ASSERT_EQ(fl.size(), 807u);
  for (size_t i = 0; i < fl.size(); i++) ASSERT_EQ(fl[i], -3.5f + 0.5f * static_cast<float>(i));
}

// The kernels that make random numbers have no loop over n on any target: the arange under
// threefry is folded. On CUDA the pad gate of Tensor::cat reads gidx0*128+lidx0*4+j < n/2 (thread
// indices, not RANGEs); before the fold narrowed those it ran a reduce of n/2 per element (n^2).
TEST(FoldEndToEnd, RandKernelsHaveNoReduce) {
  const int64_t n = int64_t{1} << 24;
  ClangRenderer cpu;
  CUDARenderer cuda("sm_90");
  for (const Renderer* ren : std::initializer_list<const Renderer*>{&cpu, &cuda}) {
    int kernels = 0;
    for (const ScheduleItem& si : Tensor::rand({n}).schedule()) {
      if (si.kind != MetaOps::KERNEL) continue;
      kernels++;
      Kernel k(Access::uop(si.ast), *ren);
      k.hand_coded_optimizations();
      RenderedProgram p = k.to_program();
      for (const UOp& u : k.uops) {
        EXPECT_NE(u->op, Ops::DEFINE_ACC) << ren->device << " " << p.name << "\n" << p.src;   // no accumulator: no reduce
        if (u->op == Ops::RANGE && !is_parallel_range(u)) ADD_FAILURE() << ren->device << " loop in " << p.name << "\n" << p.src;
      }
    }
    EXPECT_GE(kernels, 1);
    // threefry, then one kernel turning each pair's words into floats, and the counter's update on a later
    // call; before: the hi words and the cat of both halves had kernels of their own (2.5 ms for 2^28 on an H100)
    EXPECT_LE(kernels, 3) << ren->device;
  }
  // the stream is tinygrad's: see TensorRandom.MatchesTinygradThreefry for the exact values
  Tensor::manual_seed(42);
  EXPECT_EQ(Tensor::rand({5}).tolist<float>()[0], 0.1813475489616394f);
}

// The gather folds when the arange is fused into it (FUSE_ARANGE, on by default; an arange the scheduler
// can't lower into its consumer is realized on its own, see TensorReduce.Cumsum).
TEST(FoldEndToEnd, GatherRowsWithoutALoopOverThem) {
  Context fuse({{"FUSE_ARANGE", 1}});
  const int64_t rows = 60000, cols = 784, n = 512;
  std::vector<uint8_t> h(rows * cols);
  std::mt19937 g(0);
  for (auto& v : h) v = static_cast<uint8_t>(g());
  std::vector<int32_t> idx(n);
  for (auto& v : idx) v = static_cast<int32_t>(g() % rows);
  idx[0] = 0, idx[1] = rows - 1, idx[2] = -1;   // edges, and a negative index counting from the end
  Tensor X = Tensor::from<uint8_t>(h, {rows, cols});
  X.realize();
  Tensor I = Tensor::from<int32_t>(idx, {n});
  I.realize();
  for (const std::string& s : kernel_sources(X[{I}])) EXPECT_EQ(s.find("< 60000"), std::string::npos) << s;
  auto out = X[{I}].tolist<uint8_t>();
  for (int64_t i = 0; i < n; i++) {
    int64_t row = idx[i] < 0 ? idx[i] + rows : idx[i];
    for (int64_t j = 0; j < cols; j++) ASSERT_EQ(out[i * cols + j], h[row * cols + j]) << i << "," << j;
  }
}

TEST(FoldEndToEnd, OneHotAndCrossEntropyBackward) {
  Context fuse({{"FUSE_ARANGE", 1}});
  const int64_t classes = 1000;
  const std::vector<int64_t> labels{3, 999, 0, 512};
  Tensor y = Tensor::from<int32_t>({3, 999, 0, 512}, {4});
  for (const std::string& s : kernel_sources(y.one_hot(classes))) EXPECT_EQ(s.find("< 1000;"), s.find("ridx0 < 1000;")) << s;
  auto oh = y.one_hot(classes).tolist<int32_t>();
  for (int64_t i = 0; i < 4; i++)
    for (int64_t c = 0; c < classes; c++) ASSERT_EQ(oh[i * classes + c], c == labels[i] ? 1 : 0);
  // d/dlogits of mean cross entropy = (softmax - one_hot) / batch
  std::vector<float> logits(4 * classes);
  for (size_t i = 0; i < logits.size(); i++) logits[i] = static_cast<float>((i * 37) % 101) / 50.0f;
  Tensor L = Tensor::from<float>(logits, {4, classes}, {.requires_grad = true});
  L.sparse_categorical_crossentropy(y).backward();
  auto grad = L.grad()->tolist<float>();
  for (int64_t i = 0; i < 4; i++) {
    double mx = -1e30, z = 0;
    for (int64_t c = 0; c < classes; c++) mx = std::max(mx, double(logits[i * classes + c]));
    for (int64_t c = 0; c < classes; c++) z += std::exp(logits[i * classes + c] - mx);
    for (int64_t c = 0; c < classes; c++) {
      double p = std::exp(logits[i * classes + c] - mx) / z;
      double want = (p - (c == labels[i] ? 1.0 : 0.0)) / 4.0;
      ASSERT_NEAR(grad[i * classes + c], want, 1e-6) << i << "," << c;
    }
  }
}
