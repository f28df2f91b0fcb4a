// Closed forms for sums over a RANGE (tinygrad's arange loop_collapse and index_collapse, generalized).
//
// arange and one_hot come from a cumsum: a pooled sum over a padded constant, lowered to
// REDUCE(where(lin(r) < c, v, 0), r). Indexing sums where(r == e, value(r), 0) over the indexed axis.
// Both have a closed form, so the kernel does O(1) work per element instead of a loop over r:
//   sum_{r in [s, e)} where(conds(r), v, 0)    = (#r in the intersection of conds' intervals) * v
//   sum_{r in [s, e)} where(r == x & rest, v(r), 0) = where(s <= x < e & rest(x), v(x), 0)
// where v(x) gates every LOAD it substitutes into, so an out-of-range x reads nothing.
#pragma once
#include <optional>

#include "uop/affine.hpp"
#include "uop/uop.hpp"

namespace tg {

// The variable a sum runs over: a RANGE r, or with an upcast reduce axis (an EXPAND of 0..k-1 lanes,
// the RANGE starting at 0) q = k*r + lane, in [0, k*end).
struct SumVar {
  UOp rng, ex;
  int64_t k = 1;
  UOp start() const;
  UOp end() const;
};

// x as base + mul*rng with base free of rng; nothing when x is not linear in rng (or not integer).
// (affine.hpp's linear_in over the sum's variables.)
struct LinearForm { UOp base; int64_t mul; };
std::optional<LinearForm> linear_in(const UOp& x, const UOp& rng);
std::optional<LinearForm> linear_in(const UOp& x, const SumVar& q);   // in units of q

// Whether q's RANGE or lanes are among x's sources (depends_on(x, rng) for one RANGE is in uop/affine.hpp).
bool depends_on(const UOp& x, const SumVar& q);

// x with every use of `from` replaced by `to`.
UOp substitute(const UOp& x, const UOp& from, const UOp& to);

// floor(a / k) for k > 0, correct under C's truncating IDIV whatever a's sign.
UOp floor_div(const UOp& a, int64_t k);

// The closed form of sum over rng (a RANGE) of term, free of rng; nothing when there is none.
std::optional<UOp> fold_range_sum(const UOp& term, const UOp& rng);
std::optional<UOp> fold_range_sum(const UOp& term, const SumVar& q);

// A REDUCE ADD whose value has add-terms with closed forms over one of its ranges becomes
// REDUCE(folded terms, other ranges) + REDUCE(remaining terms, all ranges).
std::optional<UOp> reduce_collapse(const UOp& reduce);

}  // namespace tg
