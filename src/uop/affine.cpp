#include "uop/affine.hpp"

#include <functional>
#include <unordered_set>

namespace tg {

void add_terms(const UOp& x, std::vector<UOp>& out) {
  if (is_alu(x, BinaryOps::ADD)) {
    for (const UOp& s : x->src) add_terms(s, out);
  } else {
    out.push_back(x);
  }
}

UOp sum_terms(const std::vector<UOp>& v) {
  UOp r = v[0];
  for (size_t i = 1; i < v.size(); i++) r = r + v[i];
  return r;
}

Affine affine(const UOp& x) {
  std::vector<UOp> parts;
  add_terms(x, parts);
  Affine r;
  for (const UOp& p : parts) {
    if (p->op == Ops::CONST) {
      r.c += const_to_int(p.const_value());
    } else if (is_alu(p, BinaryOps::MUL) && p->src[1]->op == Ops::CONST) {
      r.terms.push_back({p->src[0], const_to_int(p->src[1].const_value())});
    } else if (is_alu(p, BinaryOps::MUL) && p->src[0]->op == Ops::CONST) {
      r.terms.push_back({p->src[1], const_to_int(p->src[0].const_value())});
    } else {
      r.terms.push_back({p, 1});
    }
  }
  return r;
}

std::pair<UOp, int64_t> split_const(const UOp& x) {
  if (x->op == Ops::CONST) return {UOp(), const_to_int(x.const_value())};
  if (is_alu(x, BinaryOps::ADD)) {
    if (x->src[1]->op == Ops::CONST) return {x->src[0], const_to_int(x->src[1].const_value())};
    if (x->src[0]->op == Ops::CONST) return {x->src[1], const_to_int(x->src[0].const_value())};
  }
  return {x, 0};
}

namespace {
bool depends_on_any(const UOp& x, const std::vector<UOp>& vars) {
  std::unordered_set<const UOpNode*> seen;
  std::function<bool(const UOp&)> go = [&](const UOp& u) {
    for (const UOp& v : vars)
      if (u == v) return true;
    if (!seen.insert(u.get()).second) return false;
    for (const UOp& s : u->src)
      if (go(s)) return true;
    return false;
  };
  return go(x);
}
}  // namespace

bool depends_on(const UOp& x, const UOp& v) { return depends_on_any(x, {v}); }

std::optional<Linear> linear_in(const UOp& x, const std::vector<UOp>& vars) {
  if (!x->dtype.is_int() || x->dtype.count != 1) return std::nullopt;
  for (size_t i = 0; i < vars.size(); i++) {
    if (x != vars[i]) continue;
    Linear r{x.const_like(int64_t{0}), std::vector<int64_t>(vars.size())};
    r.coeffs[i] = 1;
    return r;
  }
  if (!depends_on_any(x, vars)) return Linear{x, std::vector<int64_t>(vars.size())};
  if (is_alu(x, BinaryOps::ADD)) {
    auto a = linear_in(x->src[0], vars), b = linear_in(x->src[1], vars);
    if (!a || !b) return std::nullopt;
    for (size_t i = 0; i < vars.size(); i++) a->coeffs[i] += b->coeffs[i];
    return Linear{a->base + b->base, a->coeffs};
  }
  if (is_alu(x, UnaryOps::NEG)) {
    auto a = linear_in(x->src[0], vars);
    if (!a) return std::nullopt;
    for (int64_t& k : a->coeffs) k = -k;
    return Linear{-a->base, a->coeffs};
  }
  if (is_alu(x, BinaryOps::MUL)) {
    for (int k = 0; k < 2; k++) {
      const UOp &c = x->src[k], &y = x->src[1 - k];
      if (c->op != Ops::CONST) continue;
      auto a = linear_in(y, vars);
      if (!a) return std::nullopt;
      int64_t f = const_to_int(c.const_value());
      for (int64_t& m : a->coeffs) m *= f;
      return Linear{a->base * f, a->coeffs};
    }
  }
  return std::nullopt;
}

}  // namespace tg
