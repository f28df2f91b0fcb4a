#include "codegen/narrow_reduce.hpp"

#include <algorithm>

#include "codegen/reduce_fold.hpp"
#include "tg/helpers.hpp"
#include "uop/affine.hpp"

namespace tg {
namespace {

bool is_zero_const(const UOp& u) { return u->op == Ops::CONST && const_to_double(u.const_value()) == 0.0; }

// the gates g of x's factors: x is 0 wherever some g is false (a gated LOAD with 0 as its alternative,
// through MULs and the casts and lane moves that keep a 0 a 0)
void zero_gates(const UOp& x, std::vector<UOp>& out) {
  switch (x->op) {
    case Ops::LOAD:
      if (x->src.size() == 4 && is_zero_const(x->src[2])) out.push_back(x->src[3]);
      return;
    case Ops::CONTRACT: case Ops::CAST: case Ops::GEP: return zero_gates(x->src[0], out);
    case Ops::ALU:
      if (is_alu(x, BinaryOps::MUL) && !x->dtype.is_bool()) {
        for (const UOp& s : x->src) zero_gates(s, out);
      } else if (is_alu(x, BinaryOps::ADD) && !x->dtype.is_bool()) {   // a sum of lanes: the gates every term has
        std::vector<UOp> a, b;
        zero_gates(x->src[0], a), zero_gates(x->src[1], b);
        for (const UOp& g : a)
          if (std::find(b.begin(), b.end(), g) != b.end()) out.push_back(g);
      }
      return;
    default: return;
  }
}

// the conjuncts of a gate
void conjuncts(const UOp& g, std::vector<UOp>& out) {
  if ((is_alu(g, BinaryOps::AND) || is_alu(g, BinaryOps::MUL)) && g->dtype.is_bool()) {
    for (const UOp& s : g->src) conjuncts(s, out);
    return;
  }
  out.push_back(g);
}

// an index expression of loops and variables only (no lanes, no loads): it can bound a loop
bool scalar_index(const UOp& x) {
  for (const UOp& u : x.toposort())
    if (u->dtype.count != 1 || !(u->op == Ops::ALU || u->op == Ops::CONST || u->op == Ops::RANGE || u->op == Ops::SPECIAL ||
                                 u->op == Ops::DEFINE_VAR || u->op == Ops::BIND))
      return false;
  return true;
}

// A bound of one of ranges from conjunct c: (index of the range, start or end, the bound). c must be
// lhs < rhs or !(lhs < rhs) with lhs - rhs = base + a*r, a = +-1, base free of the reduce's ranges.
struct Bound {
  size_t range;
  bool end;   // r < bound (else r >= bound)
  UOp value;
};
std::optional<Bound> bound_of(const UOp& c, const std::vector<UOp>& ranges) {
  const bool neg = is_alu(c, UnaryOps::NEG);
  const UOp& cmp = neg ? c->src[0] : c;
  if (!is_alu(cmp, BinaryOps::CMPLT) || !cmp->src[0]->dtype.is_int()) return std::nullopt;
  auto lin = linear_in(cmp->src[0] - cmp->src[1], ranges);
  if (!lin || !scalar_index(lin->base)) return std::nullopt;
  std::optional<size_t> at;
  for (size_t i = 0; i < ranges.size(); i++) {
    if (lin->coeffs[i] == 0) continue;
    if (at || (lin->coeffs[i] != 1 && lin->coeffs[i] != -1)) return std::nullopt;
    at = i;
  }
  if (!at) return std::nullopt;
  // base + a*r < 0 (neg: >= 0)
  const UOp& b = lin->base;
  if (lin->coeffs[*at] == 1) return neg ? Bound{*at, false, -b} : Bound{*at, true, -b};   // r >= -b / r < -b
  return neg ? Bound{*at, true, b + 1} : Bound{*at, false, b + 1};                        // r <= b / r > b
}

// REDUCE x with its constant-bounded ranges narrowed to where its factors' gates hold; nothing when no
// gate bounds one of them
std::optional<UOp> narrow(const UOp& x) {
  if (x->op != Ops::REDUCE || !(x->arg == Arg(BinaryOps::ADD))) return std::nullopt;
  std::vector<UOp> ranges;
  for (size_t i = 1; i < x->src.size(); i++)
    if (x->src[i]->op == Ops::RANGE && x->src[i]->src[0]->op == Ops::CONST && x->src[i]->src[1]->op == Ops::CONST)
      ranges.push_back(x->src[i]);
  if (ranges.empty()) return std::nullopt;
  std::vector<UOp> gates, conds;
  zero_gates(x->src[0], gates);
  for (const UOp& g : gates) conjuncts(g, conds);
  std::vector<UOp> lo, hi, used;
  for (const UOp& r : ranges) lo.push_back(r->src[0]), hi.push_back(r->src[1]);
  for (const UOp& c : conds) {
    if (std::find(used.begin(), used.end(), c) != used.end()) continue;
    auto b = bound_of(c, ranges);
    if (!b) continue;
    UOp& cur = b->end ? hi[b->range] : lo[b->range];
    cur = b->end ? cur.min(b->value) : cur.max(b->value);
    used.push_back(c);
  }
  if (used.empty()) return std::nullopt;
  // inside the narrowed loops every used bound holds: the gates lose them, then the ranges get their bounds
  UOp ret = x;
  const UOp yes = UOp::const_(dtypes::bool_, int64_t{1});
  for (const UOp& c : used) ret = substitute(ret, c, yes);
  for (size_t i = 0; i < ranges.size(); i++) {
    if (lo[i] == ranges[i]->src[0] && hi[i] == ranges[i]->src[1]) continue;
    ret = substitute(ret, ranges[i], UOp(Ops::RANGE, ranges[i]->dtype, {lo[i], hi[i]}, ranges[i]->arg));
  }
  return ret;
}

}  // namespace

UOp narrow_reduce_ranges(const UOp& sink) {
  if (!getenv("NARROW_REDUCE", 1)) return sink;
  // innermost first; a narrowed REDUCE has no constant-bounded range left to narrow, so this ends
  UOp s = sink;
  for (bool changed = true; changed;) {
    changed = false;
    for (const UOp& u : s.toposort())
      if (auto n = narrow(u)) {
        s = substitute(s, u, *n);
        changed = true;
        break;
      }
  }
  return s;
}

}  // namespace tg
