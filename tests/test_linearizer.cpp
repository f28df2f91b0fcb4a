// Linearizer: block structure, hoisting, deterministic order, END placement, rejection of bad graphs.
#include <gtest/gtest.h>

#include <algorithm>

#include "codegen/linearizer.hpp"

using namespace tg;

namespace {
UOp ci(int64_t v) { return UOp::const_(dtypes::int32, v); }
UOp cf(double v) { return UOp::const_(dtypes::float32, v); }
UOp glob(int64_t i, DType dt) { return UOp(Ops::DEFINE_GLOBAL, dt.ptr_to(), {}, i); }
UOp range(int64_t end, int64_t axis, bool reduce = false) {
  return UOp(Ops::RANGE, dtypes::int32, {ci(0), ci(end)}, std::vector<int64_t>{axis, reduce ? 1 : 0});
}
UOp load(DType dt, const UOp& buf, const UOp& idx) { return UOp(Ops::LOAD, dt, {buf, idx}); }
UOp store(const UOp& buf, const UOp& idx, const UOp& val) { return UOp(Ops::STORE, dtypes::void_, {buf, idx, val}); }
UOp sink(std::vector<UOp> s) { return UOp(Ops::SINK, dtypes::void_, std::move(s)); }

size_t pos(const std::vector<UOp>& l, const UOp& u) {
  auto it = std::find(l.begin(), l.end(), u);
  EXPECT_NE(it, l.end()) << "missing " << u.str();
  return static_cast<size_t>(it - l.begin());
}
size_t pos_end(const std::vector<UOp>& l, Ops end, const UOp& scope) { return pos(l, UOp(end, dtypes::void_, {scope})); }
std::vector<Ops> ops_of(const std::vector<UOp>& l) {
  std::vector<Ops> o;
  for (auto& u : l) o.push_back(u->op);
  return o;
}
}  // namespace

// seed 000: Tensor([1,2,3]) + 2, the exact list tinygrad 0.9.2 prints
TEST(Linearizer, Seed000Order) {
  UOp g0 = glob(0, dtypes::int32), g1 = glob(1, dtypes::int32), r = range(3, 0);
  UOp ld = load(dtypes::int32, g1, r), add = ld.alu(BinaryOps::ADD, ci(2)), st = store(g0, r, add);
  std::vector<UOp> l = linearize(sink({st}));
  std::vector<UOp> want = {g0, g1, ci(0), ci(2), ci(3), r, ld, add, st, UOp(Ops::ENDRANGE, dtypes::void_, {r})};
  ASSERT_EQ(l.size(), want.size());
  for (size_t i = 0; i < want.size(); i++) EXPECT_EQ(l[i], want[i]) << i << ": " << l[i].str();
}

// the accumulator is declared before its loop, updated inside, stored after ENDRANGE
TEST(Linearizer, ReduceBlock) {
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32), r = range(16, 0, true);
  UOp acc = UOp(Ops::DEFINE_ACC, dtypes::float32, {cf(0.0), r}, std::vector<int64_t>{0});
  UOp ld = load(dtypes::float32, g1, r), phi = UOp(Ops::PHI, dtypes::float32, {acc, acc.alu(BinaryOps::ADD, ld)});
  UOp st = store(g0, ci(0), phi);
  std::vector<UOp> l = linearize(sink({st}));
  EXPECT_EQ(ops_of(l), (std::vector<Ops>{Ops::DEFINE_GLOBAL, Ops::DEFINE_GLOBAL, Ops::CONST, Ops::CONST, Ops::CONST, Ops::DEFINE_ACC,
                                         Ops::RANGE, Ops::LOAD, Ops::ALU, Ops::PHI, Ops::ENDRANGE, Ops::STORE}));
  EXPECT_EQ(l[10]->src[0], r);
}

// a load that doesn't depend on the loop runs before it; the outer index math runs before the inner loop
TEST(Linearizer, HoistsLoopInvariant) {
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32), g2 = glob(2, dtypes::float32);
  UOp r0 = range(3, 0), r1 = range(4, 1);
  UOp scale = load(dtypes::float32, g2, ci(0)).alu(BinaryOps::ADD, cf(1.0));
  UOp outer = r0.alu(BinaryOps::MUL, ci(4));
  UOp a = load(dtypes::float32, g1, r0);
  UOp val = a.alu(BinaryOps::MUL, scale);
  UOp st = store(g0, outer.alu(BinaryOps::ADD, r1), val);
  std::vector<UOp> l = linearize(sink({st}));
  EXPECT_LT(pos(l, scale), pos(l, r0));
  EXPECT_LT(pos(l, r0), pos(l, a));
  EXPECT_LT(pos(l, a), pos(l, r1));       // depends on r0 only: outside the inner loop
  EXPECT_LT(pos(l, outer), pos(l, r1));
  EXPECT_LT(pos(l, val), pos(l, r1));
  EXPECT_LT(pos(l, r1), pos(l, st));
  // blocks nest: inner ENDRANGE first, both after the store, nothing after them
  size_t e1 = pos_end(l, Ops::ENDRANGE, r1), e0 = pos_end(l, Ops::ENDRANGE, r0);
  EXPECT_EQ(e1, pos(l, st) + 1);
  EXPECT_EQ(e0, e1 + 1);
  EXPECT_EQ(e0, l.size() - 1);
}

// two independent loops in one kernel: each closes right after its own last user
TEST(Linearizer, SiblingLoopsCloseSeparately) {
  UOp g0 = glob(0, dtypes::int32), g1 = glob(1, dtypes::int32);
  UOp r0 = range(3, 0), r1 = range(5, 1);
  UOp st0 = store(g0, r0, r0), st1 = store(g1, r1, r1);
  std::vector<UOp> l = linearize(sink({st0, st1}));
  size_t e0 = pos_end(l, Ops::ENDRANGE, r0), e1 = pos_end(l, Ops::ENDRANGE, r1);
  EXPECT_EQ(e0, pos(l, st0) + 1);
  EXPECT_EQ(e1, pos(l, st1) + 1);
  EXPECT_TRUE(pos(l, r1) > e0 || pos(l, r0) > e1) << "loops must not interleave";
}

// the result depends on the graph only, not on the order sources were listed or nodes were built
TEST(Linearizer, DeterministicOrder) {
  auto build = [](bool flip) {
    UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32), g2 = glob(2, dtypes::float32);
    UOp r = range(8, 0);
    UOp a = load(dtypes::float32, g1, r), b = load(dtypes::float32, g2, r);
    UOp st0 = store(g0, r, a.alu(BinaryOps::MUL, b)), st1 = store(g0, r.alu(BinaryOps::ADD, ci(8)), a.alu(BinaryOps::ADD, b));
    return linearize(flip ? sink({st1, st0}) : sink({st0, st1}));
  };
  std::vector<UOp> x = build(false), y = build(true), z = build(false);
  EXPECT_EQ(x, y);
  EXPECT_EQ(x, z);
  // the two loads sort by buffer: data1 before data2
  size_t la = 0, lb = 0;
  for (size_t i = 0; i < x.size(); i++)
    if (x[i]->op == Ops::LOAD) (x[i]->src[0]->as<int64_t>() == 1 ? la : lb) = i;
  EXPECT_LT(la, lb);
}

// IF .. ENDIF wraps the gated load and the store behind a barrier
TEST(Linearizer, IfBlock) {
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32);
  UOp lidx = UOp(Ops::SPECIAL, dtypes::int32, {ci(16)}, std::string("lidx0"));
  UOp loc = UOp(Ops::DEFINE_LOCAL, dtypes::float32.ptr_to(true), {ci(16)}, std::string("temp0"));
  UOp st_local = store(loc, lidx, load(dtypes::float32, g1, lidx));
  UOp bar = UOp(Ops::BARRIER, dtypes::void_, {st_local});
  UOp gate = lidx.alu(BinaryOps::CMPLT, ci(1));
  UOp iff = UOp(Ops::IF, dtypes::void_, {gate, bar});
  UOp ld = UOp(Ops::LOAD, dtypes::float32, {loc, ci(3), iff});
  UOp st = store(g0, ci(0), ld);
  std::vector<UOp> l = linearize(sink({st}));
  size_t i_if = pos(l, iff), i_end = pos_end(l, Ops::ENDIF, iff);
  EXPECT_LT(pos(l, bar), i_if);
  EXPECT_LT(pos(l, st_local), pos(l, bar));
  EXPECT_LT(i_if, pos(l, ld));
  EXPECT_EQ(i_end, pos(l, st) + 1);
  EXPECT_EQ(i_end, l.size() - 1);
}

// DEFINE_GLOBAL, DEFINE_VAR and constants come before everything else
TEST(Linearizer, DefinesFirst) {
  UOp n = UOp(Ops::DEFINE_VAR, dtypes::int32, {ci(1), ci(64)}, std::string("n"));
  UOp g0 = glob(0, dtypes::int32), g1 = glob(1, dtypes::int32);
  UOp r = UOp(Ops::RANGE, dtypes::int32, {ci(0), n}, std::vector<int64_t>{0, 0});
  UOp st = store(g0, r, load(dtypes::int32, g1, r).alu(BinaryOps::MUL, n));
  std::vector<UOp> l = linearize(sink({st}));
  size_t first_other = 0;
  while (first_other < l.size() &&
         (l[first_other]->op == Ops::DEFINE_GLOBAL || l[first_other]->op == Ops::DEFINE_VAR || l[first_other]->op == Ops::CONST))
    first_other++;
  for (size_t i = first_other; i < l.size(); i++)
    EXPECT_TRUE(l[i]->op != Ops::DEFINE_GLOBAL && l[i]->op != Ops::DEFINE_VAR && l[i]->op != Ops::CONST) << l[i].str();
  EXPECT_EQ(l[0], g0);
  EXPECT_EQ(l[1], g1);
  EXPECT_LT(pos(l, n), pos(l, r));
}

// deeper reduce axes open inside shallower ones
TEST(Linearizer, NestedReduceRanges) {
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32);
  UOp r0 = range(4, 1, true), r1 = range(8, 2, true);
  UOp acc = UOp(Ops::DEFINE_ACC, dtypes::float32, {cf(0.0), r0, r1}, std::vector<int64_t>{0});
  UOp ld = load(dtypes::float32, g1, r0.alu(BinaryOps::MUL, ci(8)).alu(BinaryOps::ADD, r1));
  UOp phi = UOp(Ops::PHI, dtypes::float32, {acc, acc.alu(BinaryOps::ADD, ld)});
  std::vector<UOp> l = linearize(sink({store(g0, ci(0), phi)}));
  EXPECT_EQ(pos(l, acc) + 1, pos(l, r0));
  EXPECT_LT(pos(l, r0), pos(l, r1));
  EXPECT_EQ(pos_end(l, Ops::ENDRANGE, r1), pos(l, phi) + 1);
  EXPECT_EQ(pos_end(l, Ops::ENDRANGE, r0), pos(l, phi) + 2);
}

TEST(Linearizer, RejectsUnplaceableGraphs) {
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32), r = range(4, 0, true);
  // a REDUCE the uopgraph pass should have removed
  UOp red = UOp(Ops::REDUCE, dtypes::float32, {load(dtypes::float32, g1, r), r}, BinaryOps::ADD);
  EXPECT_THROW(linearize(sink({store(g0, ci(0), red)})), std::logic_error);
  // an accumulator with no loop to live in
  UOp acc = UOp(Ops::DEFINE_ACC, dtypes::float32, {cf(0.0)}, std::vector<int64_t>{0});
  EXPECT_THROW(linearize(sink({store(g0, ci(0), UOp(Ops::PHI, dtypes::float32, {acc, cf(1.0)}))})), std::logic_error);
  // dtype mismatch in an ALU
  UOp bad = UOp(Ops::ALU, dtypes::float32, {cf(1.0), ci(1)}, BinaryOps::ADD);
  EXPECT_THROW(linearize(sink({store(g0, ci(0), bad)})), std::logic_error);
  // not a sink
  EXPECT_THROW(linearize(store(g0, ci(0), cf(1.0))), std::logic_error);
  // the same store twice (ignoring the value)
  EXPECT_THROW(linearize(sink({store(g0, ci(0), cf(1.0)), store(g0, ci(0), cf(2.0))})), std::logic_error);
}
