// UPat / PatternMatcher / graph_rewrite semantics (tinygrad 0.9.2 codegen/uops.py).
#include <gtest/gtest.h>

#include "uop/pattern.hpp"

using namespace tg;

namespace {
using O = std::optional<UOp>;
UOp var(const char* name, int64_t lo = 0, int64_t hi = 10) {
  return UOp(Ops::DEFINE_VAR, dtypes::int32, {UOp::const_(dtypes::int32, lo), UOp::const_(dtypes::int32, hi)}, std::string(name));
}
UOp ci(int64_t v) { return UOp::const_(dtypes::int32, v); }
const UPat x = UPat::var(0), y = UPat::var(1), c = UPat::cvar(2);
}  // namespace

TEST(UPat, CaptureAndSameSlot) {
  UOp a = var("a"), b = var("b");
  Match m;   // captures point into the matched graph: keep it alive while reading them
  UOp e = a + ci(3);
  ASSERT_TRUE(upat_match(x + c, e, m));
  EXPECT_EQ(m[x], a);
  EXPECT_EQ(m[c], ci(3));
  EXPECT_EQ(*m.root, e);
  // the same slot twice must be the same node
  EXPECT_TRUE(upat_match(x * x, a * a, m));
  EXPECT_FALSE(upat_match(x * x, a * b, m));
  EXPECT_FALSE(upat_match(x + c, a + b, m));   // b is not a CONST
}

TEST(UPat, CommutativeEveryOrder) {
  UOp a = var("a"), b = var("b");
  Match m;
  UOp e0 = ci(3) + a;
  ASSERT_TRUE(upat_match(x + c, e0, m));
  EXPECT_EQ(m[x], a);
  // nested lists: (x*c) + y in all four orders
  UPat p = x * c + y;
  for (UOp e : {a * ci(2) + b, ci(2) * a + b, b + a * ci(2), b + ci(2) * a}) {
    ASSERT_TRUE(upat_match(p, e, m)) << e.render();
    EXPECT_EQ(m[x], a);
    EXPECT_EQ(m[y], b);
    EXPECT_EQ(const_to_int(m[c].const_value()), 2);
  }
  // the capture conflict in one order is resolved by another order
  UOp e1 = (a * b) + b;
  EXPECT_TRUE(upat_match(x * y + x, e1, m));
  EXPECT_EQ(m[x], b);
  EXPECT_EQ(m[y], a);
  // IDIV is not commutative: only the written order
  EXPECT_TRUE(upat_match(x / c, a.alu(BinaryOps::IDIV, ci(2)), m));
  EXPECT_FALSE(upat_match(x / c, ci(2).alu(BinaryOps::IDIV, a), m));
}

TEST(UPat, ListOfThree) {
  UOp a = var("a"), b = var("b"), d = var("d");
  UOp w = a.where(b, d);
  UPat p = UPat(Ops::ALU).src_any_order({UPat(Ops::DEFINE_VAR).arg(std::string("d")).cap(0), UPat::var(1), UPat::var(2)});
  Match m;
  ASSERT_TRUE(upat_match(p, w, m));
  EXPECT_EQ(m[0], d);
  EXPECT_EQ(m[1], a);   // first permutation that fits keeps the others in order
  EXPECT_EQ(m[2], b);
}

TEST(UPat, RepeatedSource) {
  UOp a = var("a"), b = var("b");
  UOp sink(Ops::SINK, dtypes::void_, {a, b, var("e")});
  Match m;
  EXPECT_TRUE(upat_match(UPat(Ops::SINK).src_each(UPat(Ops::DEFINE_VAR)), sink, m));
  EXPECT_FALSE(upat_match(UPat(Ops::SINK).src_each(UPat(Ops::CONST)), sink, m));
  UOp sink2(Ops::SINK, dtypes::void_, {a, a, a});
  EXPECT_TRUE(upat_match(UPat(Ops::SINK).src_each(x), sink2, m));   // same slot: all equal
  EXPECT_FALSE(upat_match(UPat(Ops::SINK).src_each(x), sink, m));
  EXPECT_TRUE(upat_match(UPat(Ops::SINK).src_each(x), UOp(Ops::SINK), m));   // zero sources
}

TEST(UPat, AllowAnyLen) {
  UOp a = var("a"), b = var("b"), d = var("d");
  UOp s3(Ops::SINK, dtypes::void_, {a, b, d});
  Match m;
  EXPECT_FALSE(upat_match(UPat(Ops::SINK).src({x, y}), s3, m));
  ASSERT_TRUE(upat_match(UPat(Ops::SINK).src({x, y}).any_len(), s3, m));
  EXPECT_EQ(m[x], a);
  EXPECT_EQ(m[y], b);
  EXPECT_FALSE(upat_match(UPat(Ops::SINK).src({x, y}).any_len(), UOp(Ops::SINK, dtypes::void_, {a}), m));
}

TEST(UPat, DtypeArgAndOpSets) {
  UOp a = var("a");
  UOp f = UOp::const_(dtypes::float32, 2.0);
  Match m;
  EXPECT_TRUE(upat_match(UPat::cvar(0, dtypes::float32), f, m));
  EXPECT_FALSE(upat_match(UPat::cvar(0, dtypes::int32), f, m));
  EXPECT_TRUE(upat_match(UPat(Ops::CONST).dtypes({dtypes::int32, dtypes::float32}), f, m));
  EXPECT_TRUE(upat_match(UPat({Ops::DEFINE_VAR, Ops::RANGE}), a, m));
  EXPECT_FALSE(upat_match(UPat({Ops::CONST, Ops::RANGE}), a, m));
  EXPECT_TRUE(upat_match(UPat(Ops::DEFINE_VAR).arg(std::string("a")), a, m));
  EXPECT_FALSE(upat_match(UPat(Ops::DEFINE_VAR).arg(std::string("b")), a, m));
  // const patterns compare numerically across dtypes, as Python's 0 == 0.0
  EXPECT_TRUE(upat_match(UPat::cnst(int64_t{2}), f, m));
  EXPECT_FALSE(upat_match(UPat::cnst(int64_t{3}), f, m));
  EXPECT_TRUE(upat_match(UPat::cnst(true), ci(1), m));
}

TEST(PatternMatcher, FirstRuleInTableOrderAndDecline) {
  UOp a = var("a");
  std::vector<std::string> calls;
  PatternMatcher pm({
      {x + c, [&](const Match&) -> O { calls.push_back("decline"); return std::nullopt; }},
      {UPat(Ops::ALU), [&](const Match& m) -> O { calls.push_back("generic"); return m.root->get()->src[0]; }},
      {x + c, [&](const Match&) -> O { calls.push_back("late"); return ci(0); }},
  });
  auto r = pm.rewrite(a + ci(1));
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, a);
  // the declining rule ran, then the next rule in table order took over
  EXPECT_EQ(calls, (std::vector<std::string>{"decline", "generic"}));
  EXPECT_FALSE(pm.rewrite(a).has_value());   // no rule for DEFINE_VAR
  EXPECT_EQ(pm.size(), 3u);
}

TEST(PatternMatcher, BucketsByAluArg) {
  UOp a = var("a");
  int hits = 0;
  PatternMatcher pm({{x * c, [&](const Match& m) -> O { hits++; return m[x]; }}});
  EXPECT_FALSE(pm.rewrite(a + ci(2)).has_value());
  EXPECT_EQ(hits, 0);
  EXPECT_EQ(*pm.rewrite(a * ci(2)), a);
  EXPECT_EQ(hits, 1);
}

TEST(PatternMatcher, Combine) {
  UOp a = var("a");
  PatternMatcher p1({{x + 0, [](const Match& m) -> O { return m[x]; }}});
  PatternMatcher p2({{x * 1, [](const Match& m) -> O { return m[x]; }}});
  PatternMatcher both = p1 + p2;
  EXPECT_EQ(both.size(), 2u);
  EXPECT_EQ(*both.rewrite(a + ci(0)), a);
  EXPECT_EQ(*both.rewrite(a * ci(1)), a);
  EXPECT_FALSE(p1.rewrite(a * ci(1)).has_value());
}

// A rule table is shared (static); per-rewrite state reaches the callbacks through graph_rewrite's
// ctx, one per call, never a global: two rewrites with their own counters don't see each other's.
TEST(GraphRewrite, CallbacksGetTheContext) {
  struct Counter { int64_t n = 0; };
  static const PatternMatcher pm({{UPat(Ops::DEFINE_VAR), [](const Match& m) -> O {
    if ((*m.root)->src.size() == 1) return std::nullopt;   // already numbered
    return UOp(Ops::DEFINE_VAR, (*m.root)->dtype, {ci(m.context<Counter>().n++)}, (*m.root)->arg);
  }}});
  UOp a = var("a"), b = var("b");
  Counter c1, c2;
  UOp r1 = graph_rewrite(a + b, pm, &c1);
  EXPECT_EQ(c1.n, 2);
  EXPECT_EQ(r1->src[0]->src[0], ci(0));
  EXPECT_EQ(r1->src[1]->src[0], ci(1));
  EXPECT_EQ(graph_rewrite(a * b, pm, &c2)->src[1]->src[0], ci(1));   // c2 counts from 0 again
  EXPECT_EQ(c2.n, 2);
  EXPECT_THROW(graph_rewrite(a, pm), std::logic_error);   // a rule that needs a context and got none
}

TEST(GraphRewrite, BottomUpToFixedPoint) {
  UOp a = var("a");
  PatternMatcher pm({
      {x + 0, [](const Match& m) -> O { return m[x]; }},
      {x * 1, [](const Match& m) -> O { return m[x]; }},
      {(x + c) + UPat::cvar(3), [](const Match& m) -> O {
         return m[x] + ci(const_to_int(m[c].const_value()) + const_to_int(m[3].const_value())); }},
  });
  // ((a*1)+0)+2)+3 -> (a+2)+3 -> a+5: the result of one rewrite is rewritten again
  UOp e = (((a * ci(1)) + ci(0)) + ci(2)) + ci(3);
  EXPECT_EQ(graph_rewrite(e, pm), a + ci(5));
  // deep chains rewrite without recursion
  UOp chain = a;
  for (int i = 0; i < 20000; i++) chain = (chain + ci(0)) * ci(1);
  EXPECT_EQ(graph_rewrite(chain, pm), a);
  // nothing to do: same node back
  UOp n = a * ci(3);
  EXPECT_EQ(graph_rewrite(n, pm), n);
}

TEST(GraphRewrite, SharedNodesRewrittenOnce) {
  UOp a = var("a");
  int calls = 0;
  PatternMatcher pm({{UPat(Ops::DEFINE_VAR).cap(0), [&](const Match&) -> O { calls++; return ci(7); }}});
  UOp e = (a + a) * (a + ci(1));
  EXPECT_EQ(graph_rewrite(e, pm), (ci(7) + ci(7)) * (ci(7) + ci(1)));
  EXPECT_EQ(calls, 1);
}

TEST(GraphRewrite, LoopingRulesAreReported) {
  UOp a = var("a"), b = var("b");
  PatternMatcher pm({{x + y, [](const Match& m) -> O { return m[y] + m[x]; }}});   // swaps forever
  EXPECT_THROW(graph_rewrite(a + b, pm), std::logic_error);
}
