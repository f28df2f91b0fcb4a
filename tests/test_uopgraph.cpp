// Codegen rewrite passes on hand-built lowered graphs (tinygrad 0.9.2 forms), and the accuracy of
// the transcendental approximations evaluated by constant folding (exec_alu).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "codegen/uopgraph.hpp"
#include "tg/helpers.hpp"

using namespace tg;

namespace {
UOp ci(int64_t v) { return UOp::const_(dtypes::int32, v); }
UOp cf(double v) { return UOp::const_(dtypes::float32, v); }
UOp buf(int i) { return UOp(Ops::DEFINE_GLOBAL, dtypes::float32.ptr_to(), {}, int64_t{i}); }
UOp range(int axis, int64_t n, bool reduce) {
  return UOp(Ops::RANGE, dtypes::int32, {ci(0), ci(n)}, std::vector<int64_t>{axis, reduce ? 1 : 0});
}
UOp load(const UOp& b, const UOp& idx) { return UOp(Ops::LOAD, dtypes::float32, {b, idx}); }
UOp store(const UOp& b, const UOp& idx, const UOp& v) { return UOp(Ops::STORE, dtypes::void_, {b, idx, v}); }
UOp sink(std::vector<UOp> s) { return UOp(Ops::SINK, dtypes::void_, std::move(s)); }
std::vector<UOp> find(const UOp& g, Ops op) {
  std::vector<UOp> out;
  for (const UOp& u : g.toposort())
    if (u->op == op) out.push_back(u);
  return out;
}
}  // namespace

TEST(UOpGraph, ReduceBecomesAccumulator) {
  UOp r = range(0, 16, true);
  UOp ld = load(buf(1), r);
  UOp red(Ops::REDUCE, dtypes::float32, {ld, r}, ReduceOps::SUM);
  UOp out = full_graph_rewrite(sink({store(buf(0), ci(0), red)}));
  EXPECT_TRUE(find(out, Ops::REDUCE).empty());
  auto accs = find(out, Ops::DEFINE_ACC);
  ASSERT_EQ(accs.size(), 1u);
  const UOp& acc = accs[0];
  EXPECT_EQ(acc->src.size(), 2u);
  EXPECT_EQ(acc->src[0], cf(0.0));
  EXPECT_EQ(acc->src[1], r);
  EXPECT_EQ(acc->arg, Arg(std::vector<int64_t>{0}));
  UOp phi(Ops::PHI, dtypes::float32, {acc, acc + ld});
  EXPECT_EQ(out, sink({store(buf(0), ci(0), phi)}));
}

TEST(UOpGraph, MaxReduceStartsAtMinusInf) {
  UOp r = range(0, 8, true);
  UOp ld = load(buf(1), r);
  UOp out = full_graph_rewrite(sink({store(buf(0), ci(0), UOp(Ops::REDUCE, dtypes::float32, {ld, r}, ReduceOps::MAX))}));
  auto accs = find(out, Ops::DEFINE_ACC);
  ASSERT_EQ(accs.size(), 1u);
  EXPECT_TRUE(std::isinf(const_to_double(accs[0]->src[0].const_value())));
  EXPECT_LT(const_to_double(accs[0]->src[0].const_value()), 0);
  EXPECT_EQ(find(out, Ops::PHI).at(0)->src[1], accs[0].max(ld));
}

TEST(UOpGraph, ReduceOverUnusedRangeIsAMultiply) {
  UOp r0 = range(0, 4, false), r1 = range(1, 6, true);
  UOp ld = load(buf(1), r0);
  UOp red(Ops::REDUCE, dtypes::float32, {ld, r1}, ReduceOps::SUM);
  UOp out = full_graph_rewrite(sink({store(buf(0), r0, red)}));
  EXPECT_EQ(out, sink({store(buf(0), r0, ld * cf(6.0))}));
  EXPECT_TRUE(find(out, Ops::DEFINE_ACC).empty());
}

TEST(UOpGraph, TwoReducesGetNumberedAccumulators) {
  UOp r = range(0, 16, true);
  UOp a(Ops::REDUCE, dtypes::float32, {load(buf(1), r), r}, ReduceOps::SUM);
  UOp b(Ops::REDUCE, dtypes::float32, {load(buf(2), r), r}, ReduceOps::MAX);
  UOp out = full_graph_rewrite(sink({store(buf(0), ci(0), a + b)}));
  auto accs = find(out, Ops::DEFINE_ACC);
  ASSERT_EQ(accs.size(), 2u);
  EXPECT_NE(accs[0]->arg, accs[1]->arg);
}

TEST(UOpGraph, ExpandUnrollsStores) {
  // an upcast axis of size 4: one STORE per lane
  UOp r = range(0, 8, false);
  UOp lanes(Ops::EXPAND, dtypes::int32, {ci(0), ci(1), ci(2), ci(3)}, std::vector<int64_t>{1, 4});
  UOp idx = r * ci(4) + lanes;
  UOp out = full_graph_rewrite(sink({store(buf(0), idx, load(buf(1), idx) * cf(2.0))}));
  EXPECT_TRUE(find(out, Ops::EXPAND).empty());
  ASSERT_EQ(out->src.size(), 4u);
  for (int i = 0; i < 4; i++) {
    UOp li = i == 0 ? r * ci(4) : r * ci(4) + ci(i);
    EXPECT_EQ(out->src[i], store(buf(0), li, load(buf(1), li) * cf(2.0))) << i;
  }
}

TEST(UOpGraph, ContractMakesVectorsThenScalarAlu) {
  UOp lanes(Ops::EXPAND, dtypes::int32, {ci(0), ci(1)}, std::vector<int64_t>{2, 2});
  UOp ld = load(buf(1), lanes);
  UOp con(Ops::CONTRACT, dtypes::float32.vec(2), {ld}, std::vector<int64_t>{2, 2});
  UOp v = con + UOp::const_(dtypes::float32.vec(2), 1.0);
  UOp st(Ops::STORE, dtypes::void_, {UOp(Ops::DEFINE_GLOBAL, dtypes::float32.vec(2).ptr_to(), {}, int64_t{0}), ci(0), v});
  UOp out = full_graph_rewrite(sink({st}));
  UOp val = out->src[0]->src[2];
  ASSERT_EQ(val->op, Ops::VECTORIZE);
  ASSERT_EQ(val->src.size(), 2u);
  EXPECT_EQ(val->src[0], load(buf(1), ci(0)) + cf(1.0));
  EXPECT_EQ(val->src[1], load(buf(1), ci(1)) + cf(1.0));
  // CONTRACT without an EXPAND repeats its element
  UOp one = load(buf(1), ci(5));
  UOp c2(Ops::CONTRACT, dtypes::float32.vec(2), {one}, std::vector<int64_t>{2, 2});
  EXPECT_EQ(graph_rewrite(c2, expander()), UOp(Ops::VECTORIZE, dtypes::float32.vec(2), {one, one}));
}

TEST(UOpGraph, ExpandArgsMergeAndIndex) {
  // EXPAND of EXPANDs over different axes flattens to one over both (axis order sorted)
  UOp a(Ops::EXPAND, dtypes::int32, {ci(0), ci(1)}, std::vector<int64_t>{0, 2});
  UOp b(Ops::EXPAND, dtypes::int32, {ci(10), ci(20), ci(30)}, std::vector<int64_t>{1, 3});
  UOp out = graph_rewrite(a + b, constant_folder() + expander());
  ASSERT_EQ(out->op, Ops::EXPAND);
  EXPECT_EQ(out->arg, Arg(std::vector<int64_t>{0, 2, 1, 3}));
  std::vector<int64_t> got;
  for (auto& s : out->src) got.push_back(const_to_int(s.const_value()));
  EXPECT_EQ(got, (std::vector<int64_t>{10, 20, 30, 11, 21, 31}));
}

TEST(UOpGraph, GatesAndConstFolds) {
  UOp idx = range(0, 4, false);
  UOp t = UOp::const_(dtypes::bool_, true), f = UOp::const_(dtypes::bool_, false);
  UOp gl(Ops::LOAD, dtypes::float32, {buf(1), idx, cf(0.0), t});
  UOp fl(Ops::LOAD, dtypes::float32, {buf(1), idx, cf(7.0), f});
  UOp dead(Ops::STORE, dtypes::void_, {buf(0), idx, gl, f});
  UOp out = full_graph_rewrite(sink({store(buf(0), idx, gl + fl), dead}));
  EXPECT_EQ(out, sink({store(buf(0), idx, load(buf(1), idx) + cf(7.0))}));
  // storing a value loaded from the same place is a NOOP
  EXPECT_EQ(full_graph_rewrite(sink({store(buf(0), idx, load(buf(0), idx))})), sink({}));
  // a select between a new value and the old one becomes a gated store
  UOp g = idx.lt(ci(2));
  UOp sel = store(buf(0), idx, g.where(cf(1.0), load(buf(0), idx)));
  EXPECT_EQ(full_graph_rewrite(sink({sel})), sink({UOp(Ops::STORE, dtypes::void_, {buf(0), idx, cf(1.0), g})}));
}

TEST(UOpGraph, VectorGepCastBitcastFolds) {
  UOp a = load(buf(1), ci(0)), b = load(buf(1), ci(1));
  UOp v(Ops::VECTORIZE, dtypes::float32.vec(2), {a, b});
  EXPECT_EQ(graph_rewrite(v.gep(1), constant_folder()), b);
  UOp w(Ops::VECTORIZE, dtypes::float32.vec(2), {v.gep(0), v.gep(1)});
  EXPECT_EQ(graph_rewrite(w.gep(0) + w.gep(1), constant_folder()), a + b);
  EXPECT_EQ(graph_rewrite(ci(3).cast(dtypes::float32), constant_folder()), cf(3.0));
  EXPECT_EQ(graph_rewrite(cf(1.0).bitcast(dtypes::int32), constant_folder()), ci(0x3f800000));
  EXPECT_EQ(graph_rewrite(ci(0x40000000).bitcast(dtypes::float32), constant_folder()), cf(2.0));
  EXPECT_EQ(graph_rewrite(a.cast(dtypes::float32), constant_folder()), a);
}

// ---------------------------------------------------------------- transcendental
namespace {
// The approximation evaluated by constant folding, in the dtype of x.
double approx(UOp (*fn)(const UOp&), DType dt, double x) {
  UOp r = graph_rewrite(fn(UOp::const_(dt, x)), constant_folder());
  EXPECT_EQ(r->op, Ops::CONST) << "did not fold to a constant at x=" << x;
  return const_to_double(r.const_value());
}
UOp xsin1(const UOp& d) { return xsin(d); }
int64_t ulps32(double a, double b) {
  float fa = static_cast<float>(a), fb = static_cast<float>(b);
  if (std::isnan(fa) || std::isnan(fb)) return std::isnan(fa) == std::isnan(fb) ? 0 : INT64_MAX;
  if (fa == fb) return 0;
  int32_t ia, ib;
  std::memcpy(&ia, &fa, 4);
  std::memcpy(&ib, &fb, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}
float f32(double v) { return static_cast<float>(v); }
}  // namespace

TEST(Transcendental, Exp2Float32) {
  int64_t worst = 0;
  for (double x = -140; x <= 127; x += 0.173) worst = std::max(worst, ulps32(approx(xexp2, dtypes::float32, f32(x)), std::exp2(double(f32(x)))));
  EXPECT_LE(worst, 2);
  EXPECT_EQ(approx(xexp2, dtypes::float32, 0.0), 1.0);
  EXPECT_EQ(approx(xexp2, dtypes::float32, 10.0), 1024.0);
  EXPECT_EQ(approx(xexp2, dtypes::float32, INFINITY), INFINITY);
  EXPECT_EQ(approx(xexp2, dtypes::float32, -INFINITY), 0.0);
  EXPECT_EQ(approx(xexp2, dtypes::float32, 200.0), INFINITY);
  EXPECT_EQ(approx(xexp2, dtypes::float32, -200.0), 0.0);
  EXPECT_TRUE(std::isnan(approx(xexp2, dtypes::float32, NAN)));
}

// The ends of the range, where the inputs are clamped before the polynomial: denormal results,
// the exact bounds, huge finite values and the specials (float16 is checked on the device: constant
// folding does not evaluate half ALUs).
TEST(Transcendental, Exp2Ends) {
  for (double x : {-149.9, -149.5, -149.0, -140.3, -126.5, -126.0, -125.7, 126.9, 127.0, 127.5, 127.99})
    EXPECT_LE(ulps32(approx(xexp2, dtypes::float32, f32(x)), std::exp2(double(f32(x)))), 2) << x;
  for (double x : {128.0, 1e30, 3e38, double(INFINITY)}) EXPECT_EQ(approx(xexp2, dtypes::float32, x), INFINITY) << x;
  for (double x : {-150.0, -150.5, -1e30, -3e38, -double(INFINITY)}) EXPECT_EQ(approx(xexp2, dtypes::float32, x), 0.0) << x;
  EXPECT_TRUE(std::isnan(approx(xexp2, dtypes::float32, -NAN)));
  EXPECT_EQ(approx(xexp2, dtypes::float64, 1024.0), INFINITY);
  EXPECT_EQ(approx(xexp2, dtypes::float64, 1e300), INFINITY);
  EXPECT_EQ(approx(xexp2, dtypes::float64, -2000.0), 0.0);
  EXPECT_EQ(approx(xexp2, dtypes::float64, -INFINITY), 0.0);
  EXPECT_NEAR(approx(xexp2, dtypes::float64, -1060.25) / std::exp2(-1060.25), 1.0, 1e-3);   // denormal
  EXPECT_TRUE(std::isnan(approx(xexp2, dtypes::float64, NAN)));
}

TEST(Transcendental, Log2Float32) {
  int64_t worst = 0;
  for (double x = 1e-30; x < 1e30; x *= 1.37) worst = std::max(worst, ulps32(approx(xlog2, dtypes::float32, f32(x)), std::log2(double(f32(x)))));
  for (double x = 0.01; x < 4; x += 0.0137) worst = std::max(worst, ulps32(approx(xlog2, dtypes::float32, f32(x)), std::log2(double(f32(x)))));
  EXPECT_LE(worst, 2);
  EXPECT_EQ(approx(xlog2, dtypes::float32, 8.0), 3.0);
  EXPECT_EQ(approx(xlog2, dtypes::float32, 0.0), -INFINITY);
  EXPECT_EQ(approx(xlog2, dtypes::float32, INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(approx(xlog2, dtypes::float32, -1.0)));
  EXPECT_TRUE(std::isnan(approx(xlog2, dtypes::float32, NAN)));
}

TEST(Transcendental, SinFloat32) {
  // |x| < 30: Cody-Waite reduction, within 2 ULP wherever sin is not tiny
  int64_t worst_ulp = 0;
  double worst_abs = 0;
  for (double x = -30; x <= 30; x += 0.0317) {
    double a = approx(xsin1, dtypes::float32, f32(x)), r = std::sin(double(f32(x)));
    if (std::fabs(r) > 0.01) worst_ulp = std::max(worst_ulp, ulps32(a, r));
    worst_abs = std::max(worst_abs, std::fabs(a - r));
  }
  EXPECT_LE(worst_ulp, 2);
  EXPECT_LT(worst_abs, 1e-7);
  // larger arguments go through Payne-Hanek reduction; with C's 32-bit truncation (which
  // exec_alu follows) its float32 result is good to about 2e-7 absolute
  worst_abs = 0;
  for (double x = 30; x < 1e7; x *= 1.0371)
    for (double sx : {x, -x}) worst_abs = std::max(worst_abs, std::fabs(approx(xsin1, dtypes::float32, f32(sx)) - std::sin(double(f32(sx)))));
  EXPECT_LT(worst_abs, 2e-7);
  EXPECT_EQ(approx(xsin1, dtypes::float32, 0.0), 0.0);
  EXPECT_TRUE(std::isnan(approx(xsin1, dtypes::float32, INFINITY)));
  EXPECT_TRUE(std::isnan(approx(xsin1, dtypes::float32, NAN)));
}

TEST(Transcendental, Float64) {
  double worst = 0;
  for (double x = -29.5; x < 30; x += 0.731) {
    worst = std::max(worst, std::fabs(approx(xexp2, dtypes::float64, x) / std::exp2(x) - 1));
    worst = std::max(worst, std::fabs(approx(xsin1, dtypes::float64, x) - std::sin(x)));
    if (x > 0) worst = std::max(worst, std::fabs(approx(xlog2, dtypes::float64, x) - std::log2(x)));
  }
  for (double x = 1e-300; x < 1e300; x *= 1e7) worst = std::max(worst, std::fabs(approx(xlog2, dtypes::float64, x) / std::log2(x) - 1));
  EXPECT_LT(worst, 1e-14);
  // tinygrad 0.9.2's Payne-Hanek keeps 32 bits of the mantissa: float64 sin past 30 has an
  // error growing with x (about x * 2^-32)
  double big = 0;
  for (double x = 30; x < 1e6; x *= 1.9) big = std::max(big, std::fabs(approx(xsin1, dtypes::float64, x) - std::sin(x)) / x);
  EXPECT_LT(big, 1e-9);
}

TEST(Transcendental, AppliedOnlyWhereTheBackendLacksTheOp) {
  UOp v = load(buf(1), ci(0));
  UOp g = sink({store(buf(0), ci(0), v.alu(UnaryOps::EXP2) + v.alu(UnaryOps::SIN))});
  auto count = [](const UOp& u, UnaryOps op) {
    int n = 0;
    for (const UOp& x : u.toposort()) n += x->op == Ops::ALU && x->arg == Arg(op);
    return n;
  };
  UOp native = full_graph_rewrite(g, RendererOpts{});
  EXPECT_EQ(count(native, UnaryOps::EXP2), 1);
  RendererOpts no_exp;
  no_exp.has_exp2 = false;
  UOp approx_g = full_graph_rewrite(g, no_exp);
  EXPECT_EQ(count(approx_g, UnaryOps::EXP2), 0);
  EXPECT_EQ(count(approx_g, UnaryOps::SIN), 1);
  EXPECT_GT(approx_g.toposort().size(), native.toposort().size() + 20);
}
