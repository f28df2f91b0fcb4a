// Affine views of integer index math: x = c + sum(coeff_i * term_i), where a term is whatever the
// view doesn't look into (a RANGE, SPECIAL, DEFINE_VAR, LOAD, IDIV, MOD, ...), kept as the UOp it is.
// One module for the index questions codegen asks, instead of one walker per pass:
//   symbolic's div/mod folding   the ADD chain of x, split into terms and summed again
//   the vectorizer               lanes that share a base and differ in their constant (split_const)
//   reduce_fold                  sums over an index (affine) and conditions linear in a loop (linear_in)
// Nothing here simplifies: the parts are the UOps of x, so a pass that rebuilds x from them gets the
// same nodes back (the generated kernels don't change when a pass moves onto this module).
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "uop/uop.hpp"

namespace tg {

// The operands of x's chain of ADDs, left to right (x itself when it is no ADD).
void add_terms(const UOp& x, std::vector<UOp>& out);
// v[0] + v[1] + ... (v not empty), the inverse of add_terms.
UOp sum_terms(const std::vector<UOp>& v);

// x as c + sum(coeff * term) over its ADD chain: a CONST adds to c, a MUL by a CONST (either side) is
// a term with that coefficient, anything else a term with coefficient 1. Terms stay as written, in
// order, a repeated term repeated: callers that need distinct terms check.
struct AffineTerm {
  UOp term;
  int64_t coeff;
};
struct Affine {
  int64_t c = 0;
  std::vector<AffineTerm> terms;
};
Affine affine(const UOp& x);

// x = base + off where x's top ADD has a CONST operand (off = 0 otherwise); base is null when x is a CONST.
std::pair<UOp, int64_t> split_const(const UOp& x);

// Whether v is among x's sources (transitively).
bool depends_on(const UOp& x, const UOp& v);

// x = base + sum(coeffs[i] * vars[i]) with base free of every var, through ADD, NEG and MUL by a CONST;
// nothing when x is not integer or not linear in the vars.
struct Linear {
  UOp base;
  std::vector<int64_t> coeffs;   // one per var
};
std::optional<Linear> linear_in(const UOp& x, const std::vector<UOp>& vars);

}  // namespace tg
