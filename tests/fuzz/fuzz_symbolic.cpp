// Random integer expressions over a few variables: simplify() must not change their value.
// Deterministic seed; several thousand expressions, each evaluated on many assignments.
#include <gtest/gtest.h>

#include <random>

#include "tg/helpers.hpp"
#include "uop/symbolic.hpp"

using namespace tg;

namespace {
struct Gen {
  std::mt19937_64 rng;
  std::vector<UOp> vars;
  std::vector<std::pair<int64_t, int64_t>> ranges;

  explicit Gen(uint64_t seed) : rng(seed) {}
  int64_t rand(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
  UOp ci(int64_t v) { return UOp::const_(dtypes::int32, v); }

  void new_vars() {
    vars.clear();
    ranges.clear();
    const char* names[] = {"a", "b", "c"};
    for (const char* n : names) {
      int64_t lo = rand(0, 4) == 0 ? rand(-12, 0) : rand(0, 6);   // mostly non-negative, like indices
      int64_t hi = lo + rand(0, 24);
      vars.push_back(UOp(Ops::DEFINE_VAR, dtypes::int32, {ci(lo), ci(hi)}, std::string(n)));
      ranges.push_back({lo, hi});
    }
  }
  UOp leaf() { return rand(0, 2) ? vars[rand(0, vars.size() - 1)] : ci(rand(-8, 12)); }
  UOp ie(int d) {
    if (d == 0) return leaf();
    switch (rand(0, 10)) {
      case 0: case 1: return ie(d - 1) + ie(d - 1);
      case 2: return ie(d - 1) * ci(rand(-4, 12));
      case 3: return ie(d - 1) * ie(d - 1);
      case 4: return ie(d - 1) - ie(d - 1);
      case 5: { UOp dv = positive(d - 1); return ie(d - 1).alu(BinaryOps::IDIV, dv); }
      case 6: return ie(d - 1) % ci(rand(1, 12));
      case 7: return ie(d - 1).max(ie(d - 1));
      case 8: return be(d - 1).where(ie(d - 1), ie(d - 1));
      case 9: return -ie(d - 1);
      default: return ie(d - 1) + ci(rand(-10, 10));
    }
  }
  // a divisor: a positive constant, or an expression whose range is positive
  UOp positive(int d) {
    if (rand(0, 3)) return ci(rand(1, 16));
    UOp e = ie(d);
    return const_to_int(e.vmin()) > 0 ? e : ci(rand(1, 16));
  }
  UOp be(int d) {
    switch (rand(0, 5)) {
      case 0: case 1: case 2: return ie(d).lt(ie(d));
      case 3: return ie(d).ne(ie(d));
      case 4: return be(d > 0 ? d - 1 : 0) & be(d > 0 ? d - 1 : 0);
      default: return be(d > 0 ? d - 1 : 0) | UOp::const_(dtypes::bool_, rand(0, 1) == 1);
    }
  }
};

bool small(const UOp& e) {   // keep clear of int32 wrap-around, where C and the rules disagree
  for (const UOp& u : e.toposort()) {
    if (u->dtype != dtypes::int32) continue;
    int64_t lo = const_to_int(u.vmin()), hi = const_to_int(u.vmax());
    if (lo < -(int64_t{1} << 24) || hi > (int64_t{1} << 24)) return false;
  }
  return true;
}
}  // namespace

TEST(FuzzSymbolic, SimplifyKeepsValues) {
  Gen g(20240807);
  int tested = 0, changed = 0;
  while (tested < 4000) {
    if (tested % 50 == 0) g.new_vars();
    UOp e = g.rand(0, 4) ? g.ie(g.rand(1, 4)) : g.be(g.rand(1, 3));
    if (!small(e)) continue;
    UOp s = simplify(e);
    tested++;
    changed += s != e;
    // the simplified bounds must contain every value
    int64_t smin = const_to_int(s.vmin()), smax = const_to_int(s.vmax());
    for (int k = 0; k < 24; k++) {
      std::unordered_map<std::string, int64_t> vals;
      for (size_t i = 0; i < g.vars.size(); i++)
        vals[std::get<std::string>(g.vars[i]->arg)] = g.rand(g.ranges[i].first, g.ranges[i].second);
      ConstType before, after;
      try {
        before = eval_uop(e, vals);
      } catch (const Error&) {
        continue;   // a division by zero in the original: nothing to compare
      }
      after = eval_uop(s, vals);
      ASSERT_EQ(const_to_int(before), const_to_int(after))
          << "expr " << e.render() << "\nsimplified " << s.render() << "\nat a=" << vals["a"] << " b=" << vals["b"]
          << " c=" << vals["c"];
      ASSERT_LE(smin, const_to_int(after)) << s.render();
      ASSERT_GE(smax, const_to_int(after)) << s.render();
    }
  }
  EXPECT_GT(changed, tested / 4);   // the rules do fire
}
