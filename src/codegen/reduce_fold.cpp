#include "codegen/reduce_fold.hpp"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "uop/symbolic.hpp"

namespace tg {

namespace {
using O = std::optional<UOp>;

bool is_zero(const UOp& u) { return u->op == Ops::CONST && const_to_double(u.const_value()) == 0.0; }

// the operands of a chain of one associative op
void flatten(const UOp& x, BinaryOps op, std::vector<UOp>& out) {
  bool bool_and = op == BinaryOps::AND && x->dtype.is_bool() && is_alu(x, BinaryOps::MUL);   // the lowerer's valid & valid
  if (is_alu(x, op) || bool_and) for (const UOp& s : x->src) flatten(s, op, out);
  else out.push_back(x);
}

// r in [lo, hi), either bound may be absent (unbounded)
struct Interval { O lo, hi; };
UOp join_max(const O& a, const UOp& b) { return a ? a->max(b) : b; }
UOp join_min(const O& a, const UOp& b) { return a ? a->min(b) : b; }

// m*q < d, m != 0
Interval lt_interval(int64_t m, const UOp& d) {
  if (m > 0) return {std::nullopt, floor_div(d + (m - 1), m)};   // q < ceil(d/m)
  return {floor_div(-d, -m) + 1, std::nullopt};                    // q > floor(-d/-m)
}

// The interval of q where cond holds, intersected into iv; false when cond is not an interval in q.
bool add_interval(const UOp& cond, const SumVar& q, Interval& iv) {
  bool negated = is_alu(cond, UnaryOps::NEG);
  const UOp& cmp = negated ? cond->src[0] : cond;
  bool lt = is_alu(cmp, BinaryOps::CMPLT), ne = is_alu(cmp, BinaryOps::CMPNE);
  if (!lt && !(ne && negated)) return false;   // a lone != is two intervals
  auto a = linear_in(cmp->src[0], q), b = linear_in(cmp->src[1], q);
  if (!a || !b || a->mul == b->mul) return false;
  int64_t m = a->mul - b->mul;
  UOp d = b->base - a->base;   // cmp is m*q (op) d
  Interval got;
  if (ne) {   // m*q == d: one point when |m| is 1
    if (m != 1 && m != -1) return false;
    UOp r0 = m == 1 ? d : -d;
    got = {r0, r0 + 1};
  } else if (!negated) {
    got = lt_interval(m, d);
  } else {   // m*q >= d is the complement of m*q < d
    Interval c = lt_interval(m, d);
    got = c.lo ? Interval{std::nullopt, c.lo} : Interval{c.hi, std::nullopt};
  }
  if (got.lo) iv.lo = join_max(iv.lo, *got.lo);
  if (got.hi) iv.hi = join_min(iv.hi, *got.hi);
  return true;
}

int64_t floor_div_int(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
int64_t ceil_div_int(int64_t a, int64_t b) { return -floor_div_int(-a, b); }

// x as base + sum of a_i * index_i with a_i > 0 and each index a RANGE with constant bounds or a SPECIAL
struct IndexSum { int64_t base = 0; std::vector<std::pair<UOp, int64_t>> terms; };
std::optional<IndexSum> index_sum(const UOp& x) {
  Affine a = affine(x);
  IndexSum r{a.c, {}};
  for (const auto& [v, k] : a.terms) {
    bool index = v->op == Ops::SPECIAL ? v->src[0]->op == Ops::CONST
                                        : v->op == Ops::RANGE && v->src[0]->op == Ops::CONST && v->src[1]->op == Ops::CONST;
    if (!index || k <= 0) return std::nullopt;
    for (auto& [w, _] : r.terms)
      if (w == v) return std::nullopt;
    r.terms.emplace_back(v, k);
  }
  if (r.terms.empty()) return std::nullopt;
  return r;
}

UOp and_all(const std::vector<UOp>& xs) {
  UOp r = xs[0];
  for (size_t i = 1; i < xs.size(); i++) r = r & xs[i];
  return r;
}

// sum over q of where(conds, v, 0) with v free of q: the count of q where all conds hold, times v
O fold_count(const std::vector<UOp>& conds, const UOp& v, const SumVar& q) {
  Interval iv;
  std::vector<UOp> gates;
  for (const UOp& c : conds) {
    if (!depends_on(c, q)) gates.push_back(c);
    else if (!add_interval(c, q, iv)) return std::nullopt;
  }
  UOp count = (join_min(iv.hi, q.end()) - join_max(iv.lo, q.start())).max(q.rng.const_like(int64_t{0}));
  UOp ret = count.cast(v->dtype) * v;
  return gates.empty() ? ret : and_all(gates).where(ret, v.const_like(int64_t{0}));
}

// a CONTRACT over the axis of EXPAND ex (its arg: (axis, size) pairs)
bool binds(const UOp& contract, const UOp& ex) {
  const auto& c = contract->as<std::vector<int64_t>>();
  const int64_t axis = ex->as<std::vector<int64_t>>()[0];
  for (size_t i = 0; i + 1 < c.size(); i += 2)
    if (c[i] == axis) return true;
  return false;
}

// v at q = x, every LOAD that now reads at x gated by valid (alt 0)
O substitute_gated(const UOp& v, const SumVar& q, const UOp& x, const UOp& valid) {
  std::unordered_map<const UOpNode*, UOp> memo;
  bool ok = true;
  UOp r_at = q.ex ? x / q.k : x, e_at = q.ex ? x % q.k : x;
  std::function<UOp(const UOp&)> go = [&](const UOp& u) -> UOp {
    if (u == q.rng) return r_at;
    if (q.ex && u == q.ex) return e_at;
    if (auto it = memo.find(u.get()); it != memo.end()) return it->second;
    if (!depends_on(u, q)) return memo[u.get()] = u;
    if (u->op == Ops::DEFINE_ACC || u->op == Ops::PHI || u->op == Ops::BARRIER) ok = false;
    // A nested reduce over the same upcast axis (a row kernel: cross-entropy's gather sums x - max - lse,
    // and max and lse unroll the row by the same lanes) contracts q.ex's lanes itself: there they are
    // its own, not q's. Its lanes stay; a use of q's RANGE in it as well can't be told apart: no fold.
    if (q.ex && u->op == Ops::CONTRACT && binds(u, q.ex)) {
      if (depends_on(u, q.rng)) ok = false;
      return memo[u.get()] = u;
    }
    std::vector<UOp> src;
    for (const UOp& s : u->src) src.push_back(go(s));
    if (u->op == Ops::LOAD) {
      if (src.size() == 2) src.insert(src.end(), {UOp::const_(u->dtype, int64_t{0}), valid});
      else if (src.size() == 4) src[3] = src[3] & valid;
      else ok = false;   // a LOAD behind a BARRIER (local memory) is left alone
    }
    return memo[u.get()] = UOp(u->op, u->dtype, src, u->arg);
  };
  UOp r = go(v);
  return ok ? O(r) : std::nullopt;
}

// sum over q of where(q == x & rest, v(q), 0) = where(start <= x < end & rest(x), v(x), 0)
O fold_index(const std::vector<UOp>& conds, const UOp& v, const SumVar& q) {
  for (size_t i = 0; i < conds.size(); i++) {
    const UOp& c = conds[i];
    if (!is_alu(c, UnaryOps::NEG) || !is_alu(c->src[0], BinaryOps::CMPNE)) continue;
    auto a = linear_in(c->src[0]->src[0], q), b = linear_in(c->src[0]->src[1], q);
    if (!a || !b) continue;
    int64_t m = a->mul - b->mul;
    if (m != 1 && m != -1) continue;
    UOp x = m == 1 ? b->base - a->base : a->base - b->base;
    std::vector<UOp> valid{x.ge(q.start()), x.lt(q.end())};
    std::vector<UOp> rest;
    for (size_t j = 0; j < conds.size(); j++)
      if (j != i) rest.push_back(conds[j]);
    if (!rest.empty()) {   // the other conditions, evaluated at x like the value
      O r = substitute_gated(and_all(rest), q, x, and_all(valid));
      if (!r) return std::nullopt;
      valid.push_back(*r);
    }
    UOp gate = and_all(valid);
    O nv = substitute_gated(v, q, x, gate);
    if (!nv) return std::nullopt;
    return gate.where(*nv, v.const_like(int64_t{0}));
  }
  return std::nullopt;
}

// the k lanes of an upcast reduce: GEP(CONTRACT(x), 0) + ... + GEP(CONTRACT(x), k-1), and its EXPAND in x
struct Unrolled { UOp x, ex; int64_t k; };
std::optional<Unrolled> match_unrolled(const UOp& value) {
  std::vector<UOp> terms;
  add_terms(value, terms);
  if (terms.empty() || terms[0]->op != Ops::GEP || terms[0]->src[0]->op != Ops::CONTRACT) return std::nullopt;
  const UOp& con = terms[0]->src[0];
  auto args = con->as<std::vector<int64_t>>();
  if (args.size() != 2 || static_cast<int64_t>(terms.size()) != args[1]) return std::nullopt;
  std::vector<bool> seen(terms.size());
  for (const UOp& t : terms) {
    if (t->op != Ops::GEP || t->src[0] != con) return std::nullopt;
    int64_t i = t->as<int64_t>();
    if (i < 0 || i >= args[1] || seen[i]) return std::nullopt;
    seen[i] = true;
  }
  for (const UOp& u : con->src[0].toposort()) {
    if (u->op != Ops::EXPAND || u->arg != Arg(args) || static_cast<int64_t>(u->src.size()) != args[1]) continue;
    bool iota = true;
    for (int64_t i = 0; i < args[1]; i++) iota &= u->src[i]->op == Ops::CONST && const_to_int(u->src[i].const_value()) == i;
    if (iota) return Unrolled{con->src[0], u, args[1]};
  }
  return std::nullopt;
}
}  // namespace

UOp SumVar::start() const { return ex ? rng->src[0].const_like(int64_t{0}) : rng->src[0]; }
UOp SumVar::end() const { return ex ? rng->src[1] * k : rng->src[1]; }

bool depends_on(const UOp& x, const SumVar& q) { return depends_on(x, q.rng) || (q.ex && depends_on(x, q.ex)); }

std::optional<LinearForm> linear_in(const UOp& x, const SumVar& q) {
  if (!q.ex) {
    auto l = linear_in(x, std::vector<UOp>{q.rng});
    if (!l) return std::nullopt;
    return LinearForm{l->base, l->coeffs[0]};
  }
  auto l = linear_in(x, std::vector<UOp>{q.rng, q.ex});
  if (!l || l->coeffs[0] != q.k * l->coeffs[1]) return std::nullopt;   // k*r + e is q only in this ratio
  return LinearForm{l->base, l->coeffs[1]};
}
std::optional<LinearForm> linear_in(const UOp& x, const UOp& rng) { return linear_in(x, SumVar{rng}); }

UOp substitute(const UOp& x, const UOp& from, const UOp& to) {
  std::unordered_map<const UOpNode*, UOp> memo;
  std::function<UOp(const UOp&)> go = [&](const UOp& u) -> UOp {
    if (u == from) return to;
    if (auto it = memo.find(u.get()); it != memo.end()) return it->second;
    std::vector<UOp> src;
    bool changed = false;
    for (const UOp& s : u->src) {
      src.push_back(go(s));
      changed |= src.back() != s;
    }
    return memo[u.get()] = changed ? UOp(u->op, u->dtype, src, u->arg) : u;
  };
  return go(x);
}

UOp floor_div(const UOp& a, int64_t k) {
  TG_ASSERT(k > 0, "floor_div by " + std::to_string(k));
  if (k == 1) return a;
  const int64_t lo = const_to_int(a.vmin()), hi = const_to_int(a.vmax());
  const int64_t dmin = const_to_int(dtypes::min(a->dtype)), dmax = const_to_int(dtypes::max(a->dtype));
  if (lo >= 0) return a / k;
  // shift into the non-negative range where truncation is floor, when that can't overflow
  const int64_t shift = (-lo + k - 1) / k;
  if (lo > dmin / 2 && hi < dmax / 2 && shift <= (dmax / 2) / k) return (a + shift * k) / k - shift;
  // truncation rounds a negative quotient up: one lower when there is a remainder
  return a / k - (a % k).lt(a.const_like(int64_t{0})).cast(a->dtype);
}

std::optional<UOp> fold_range_sum(const UOp& term, const SumVar& q) {
  if (!is_alu(term, TernaryOps::WHERE) || !is_zero(term->src[2]) || term->dtype.count != 1) return std::nullopt;
  if (q.ex && !(q.rng->src[0]->op == Ops::CONST && const_to_int(q.rng->src[0].const_value()) == 0)) return std::nullopt;
  std::vector<UOp> conds;
  flatten(term->src[0], BinaryOps::AND, conds);
  const UOp& v = term->src[1];
  O ret = depends_on(v, q) ? fold_index(conds, v, q) : fold_count(conds, v, q);
  if (ret) return ret;
  // A gate on other loop or thread indices (a pad: ridx < c; on a GPU gidx*128+lidx*4+j < c) bounds each
  // of them wherever the term counts; with the tighter bounds the index math often loses its MODs and
  // becomes linear in q.
  std::vector<std::pair<UOp, UOp>> narrowed;   // (index, the index with its gated bounds)
  std::vector<UOp> used;   // the gates narrowed by: the narrowed term is only right under them
  for (const UOp& c : conds) {
    if (depends_on(c, q)) continue;
    bool neg = is_alu(c, UnaryOps::NEG);
    const UOp& cmp = neg ? c->src[0] : c;
    if (!is_alu(cmp, BinaryOps::CMPLT) || cmp->src[1]->op != Ops::CONST) continue;
    auto lin = index_sum(cmp->src[0]);
    if (!lin) continue;
    auto current = [&](const UOp& v) {
      for (auto& [old, now] : narrowed)
        if (old == v) return now;
      return v;
    };
    std::vector<std::pair<int64_t, int64_t>> bounds;   // per term: [min, max] of the index as narrowed so far
    for (auto& [v, a] : lin->terms) bounds.emplace_back(const_to_int(current(v).vmin()), const_to_int(current(v).vmax()));
    const int64_t C = const_to_int(cmp->src[1].const_value());
    bool changed = false;
    for (size_t i = 0; i < lin->terms.size(); i++) {
      auto& [v, a] = lin->terms[i];
      int64_t others_min = lin->base, others_max = lin->base;   // the rest of the sum at its extremes
      for (size_t j = 0; j < lin->terms.size(); j++)
        if (j != i) others_min += lin->terms[j].second * bounds[j].first, others_max += lin->terms[j].second * bounds[j].second;
      int64_t lo = bounds[i].first, hi = bounds[i].second;   // inclusive
      if (!neg) hi = std::min(hi, floor_div_int(C - 1 - others_min, a));      // a*v < C - others
      else if (v->op == Ops::RANGE) lo = std::max(lo, ceil_div_int(C - others_max, a));   // a*v >= C - others
      if (lo == bounds[i].first && hi == bounds[i].second) continue;
      if (lo > hi) return std::nullopt;   // the gate never holds: left to the simplifier
      UOp now = v->op == Ops::SPECIAL ? UOp(Ops::SPECIAL, v->dtype, {v->src[0].const_like(hi + 1)}, v->arg)
                                      : UOp(Ops::RANGE, v->dtype, {v->src[0].const_like(lo), v->src[1].const_like(hi + 1)}, v->arg);
      std::erase_if(narrowed, [&](auto& p) { return p.first == v; });
      narrowed.push_back({v, now});
      bounds[i] = {lo, hi};
      changed = true;
    }
    if (changed) used.push_back(c);
  }
  if (narrowed.empty()) return std::nullopt;
  UOp t = term;
  for (auto& [old, now] : narrowed) t = substitute(t, old, now);
  t = simplify(t);
  if (t == term) return std::nullopt;
  std::vector<UOp> tconds;
  if (!is_alu(t, TernaryOps::WHERE) || !is_zero(t->src[2])) return std::nullopt;
  flatten(t->src[0], BinaryOps::AND, tconds);
  const UOp& tv = t->src[1];
  ret = depends_on(tv, q) ? fold_index(tconds, tv, q) : fold_count(tconds, tv, q);
  if (!ret) return std::nullopt;
  for (auto& [old, now] : narrowed) ret = substitute(*ret, now, old);
  return and_all(used).where(*ret, ret->const_like(int64_t{0}));
}
std::optional<UOp> fold_range_sum(const UOp& term, const UOp& rng) { return fold_range_sum(term, SumVar{rng}); }

std::optional<UOp> reduce_collapse(const UOp& reduce) {
  const Arg& a = reduce->arg;
  bool sum = (a == Arg(BinaryOps::ADD)) || (a == Arg(ReduceOps::SUM));
  if (!sum || reduce->dtype.count != 1) return std::nullopt;
  std::vector<UOp> terms;
  add_terms(reduce->src[0], terms);
  std::vector<UOp> ranges(reduce->src.begin() + 1, reduce->src.end());
  auto others_than = [&](const UOp& rng) {
    std::vector<UOp> others;
    for (const UOp& r : ranges)
      if (r != rng) others.push_back(r);
    return others;
  };
  auto make = [&](const std::vector<UOp>& ts, const std::vector<UOp>& rs) {
    UOp v = ts[0];
    for (size_t i = 1; i < ts.size(); i++) v = v + ts[i];
    std::vector<UOp> src{v};
    src.insert(src.end(), rs.begin(), rs.end());
    return rs.empty() ? v : UOp(Ops::REDUCE, reduce->dtype, src, reduce->arg);
  };
  // an upcast reduce axis: its lanes and a RANGE together walk q = k*r + lane
  if (auto u = match_unrolled(reduce->src[0]))
    for (const UOp& rng : ranges)
      if (rng->op == Ops::RANGE)
        if (O f = fold_range_sum(u->x, SumVar{rng, u->ex, u->k})) return make({*f}, others_than(rng));
  for (const UOp& rng : ranges) {
    if (rng->op != Ops::RANGE) continue;
    std::vector<UOp> folded, rest;
    for (const UOp& t : terms) {
      O f = depends_on(t, rng) ? fold_range_sum(t, rng) : std::nullopt;
      (f ? folded : rest).push_back(f ? *f : t);
    }
    if (folded.empty()) continue;
    UOp ret = make(folded, others_than(rng));
    return rest.empty() ? ret : ret + make(rest, ranges);
  }
  return std::nullopt;
}

}  // namespace tg
