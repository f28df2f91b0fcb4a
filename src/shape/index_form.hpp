// IndexForm: a tiny integer expression, const + sum(coef * atom), where an atom is an index
// variable or a floor div / mod of another form. It plays the part of tinygrad 0.9.2's
// shape/symbolic.py for ShapeTracker's own questions (real_strides, axis_is_masked,
// real_size): which idx variables enter the index linearly, with which coefficient, and
// which ones the validity depends on. Div and mod fold exactly whenever bounds allow.
//
// Why not uop/affine: affine reads a UOp sum as written and simplifies nothing; read after symbolic's
// simplify, the index of a multi-view tracker often still holds an IDIV or MOD, because UOp division is
// C's (truncating) and symbolic folds it only for operands proven non-negative, while view math is
// Python's floor division, exact for negative strides and offsets too. Measured on fuzz_shapetracker's
// 1291 multi-view or masked trackers: that reading loses a stride on 15 (40 with ignore_valid), finds a
// masked axis IndexForm proves unmasked on 3, a looser real_size on 15, and is never more precise
// (ShapeTracker.RealStridesThroughFloorDivMod pins three). real_strides drives the opts, so a port
// would change kernels; the floor helpers (tg::floordiv/floormod) are the shared part.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <utility>
#include <vector>

namespace tg {

struct IndexAtom;
using AtomPtr = std::shared_ptr<const IndexAtom>;

struct IndexForm {
  int64_t c = 0;
  std::vector<std::pair<AtomPtr, int64_t>> terms;   // sorted by atom, no zero coefficients

  static IndexForm constant(int64_t v);
  static IndexForm var(int id, int64_t max);        // id in [0, max]; the constant 0 when max == 0
  int64_t min() const;
  int64_t max() const;
  void vars(std::set<int>& out) const;

  IndexForm operator+(const IndexForm& o) const;
  IndexForm operator*(int64_t k) const;
  IndexForm floordiv(int64_t b) const;   // b > 0, Python floor semantics
  IndexForm mod(int64_t b) const;        // b > 0, result in [0, b)
};

struct IndexAtom {
  enum Kind { VAR, DIV, MOD } kind;
  explicit IndexAtom(Kind k) : kind(k) {}
  int id = -1;          // VAR
  IndexForm x;          // DIV / MOD operand (never negative)
  int64_t b = 1;        // DIV / MOD divisor
  int64_t lo = 0, hi = 0;
};

int cmp(const IndexAtom& a, const IndexAtom& b);
int cmp(const IndexForm& a, const IndexForm& b);

// The conjunction of index conditions, reduced like tinygrad's create_lt_node/ands: conditions
// that bounds prove true vanish, one proven false makes the whole validity false.
struct ValidInfo {
  bool is_false = false;
  std::set<int> vars;                           // variables of the conditions that remain
  void add_lt(const IndexForm& lhs, int64_t b); // lhs < b
  void add_ge(const IndexForm& lhs, int64_t b) { add_lt(lhs * -1, 1 - b); }
};

}  // namespace tg
