// Symbolic simplification of integer (index) math: tinygrad 0.9.2's constant_folder rules for
// integers plus div/mod folding by range analysis (vmin/vmax).
//
// IDIV and MOD follow C (truncate toward zero), as the generated kernels do. Rules that are only
// true for floor division check that the operands are non-negative first, which index math is.
#pragma once
#include <cstdint>
#include <optional>

#include "uop/pattern.hpp"

namespace tg {

// Python's // and % for possibly negative ints (view math and constant folding follow Python).
inline int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int64_t floormod(int64_t a, int64_t b) { return a - floordiv(a, b) * b; }
inline int64_t ceildiv(int64_t a, int64_t b) { return -floordiv(-a, b); }

// The rule table: constant folding, x+0, x*1, x*0, x//1, x//x, (x*c)//c, (x//c0)//c1, x%1,
// (c*x)%c, term combining, lt/max/where/bool folds, div/mod folding by range.
const PatternMatcher& symbolic();

// graph_rewrite(u, symbolic()).
UOp simplify(const UOp& u);

// x//c rewritten by splitting x's sum into multiples of c and a remainder (c > 0);
// nullopt when nothing simplifies or x may be negative.
std::optional<UOp> div_folding(const UOp& x, int64_t c);
// x with each term's constant factor reduced mod c, so that x%c == result%c (c > 0);
// nullopt when nothing changes or a side may be negative.
std::optional<UOp> mod_folding(const UOp& x, int64_t c);

}  // namespace tg
