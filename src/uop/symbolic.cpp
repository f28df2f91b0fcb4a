#include "uop/symbolic.hpp"

#include <cmath>
#include <numeric>

#include "tg/helpers.hpp"
#include "uop/affine.hpp"

namespace tg {

namespace {
using O = std::optional<UOp>;

bool is_sint(const UOp& u) { return u->dtype.count == 1 && u->dtype.is_int() && !u->dtype.is_unsigned(); }
bool is_iint(const UOp& u) { return u->dtype.count == 1 && u->dtype.is_int(); }
int64_t lo(const UOp& u) { return const_to_int(u.vmin()); }
int64_t hi(const UOp& u) { return const_to_int(u.vmax()); }
int64_t ival(const UOp& u) { return const_to_int(u.const_value()); }

// All-const ALU: evaluate, unless the op is undefined there (division by zero, float XOR).
O fold_consts(const UOp& root) {
  const UOpNode& n = *root;
  std::vector<ConstType> a;
  for (const UOp& s : n.src) a.push_back(s.const_value());
  if (auto b = std::get_if<BinaryOps>(&n.arg)) {
    if (a.size() != 2) return std::nullopt;
    if ((*b == BinaryOps::IDIV || *b == BinaryOps::MOD) && !n.dtype.is_float() && const_to_int(a[1]) == 0) return std::nullopt;
  }
  try {
    if (auto u = std::get_if<UnaryOps>(&n.arg)) return a.size() == 1 ? O(UOp::const_(n.dtype, exec_alu(*u, n.dtype, a[0]))) : std::nullopt;
    if (auto b = std::get_if<BinaryOps>(&n.arg)) return UOp::const_(n.dtype, exec_alu(*b, n.src[0]->dtype == n.dtype ? n.dtype : n.src[0]->dtype, a[0], a[1]));
    if (auto t = std::get_if<TernaryOps>(&n.arg)) return a.size() == 3 ? O(UOp::const_(n.dtype, exec_alu(*t, n.dtype, a[0], a[1], a[2]))) : std::nullopt;
  } catch (const Error&) {
  }
  return std::nullopt;
}

// (c0*x + x2) // c1 -> x*(c0/g) // (c1/g) when 0 <= x2 < g = gcd(c0, c1)
O mul_add_div(const UOp& x, const UOp& x2, int64_t c0, int64_t c1) {
  if (c0 <= 0 || c1 <= 0 || !is_sint(x) || lo(x) < 0 || lo(x2) < 0) return std::nullopt;
  int64_t g = std::gcd(c0, c1);
  if (g <= 1 || g <= hi(x2)) return std::nullopt;
  return x * (c0 / g) / (c1 / g);
}

// x < c with x//c folding to (a//k): x < c exactly when a < k (x >= 0 is checked by div_folding)
O lt_fold(const UOp& x, int64_t c) {
  if (c <= 0 || !is_sint(x)) return std::nullopt;
  auto nx = div_folding(x, c);
  if (!nx || (*nx)->op != Ops::ALU || (*nx)->arg != Arg(BinaryOps::IDIV)) return std::nullopt;
  return (*nx)->src[0].lt((*nx)->src[1]);
}

// x % c -> x - k*c when all of x lies in [k*c, (k+1)*c)
O remove_mod(const UOp& x, int64_t c) {
  if (c <= 0 || !is_iint(x) || lo(x) < 0 || lo(x) / c != hi(x) / c) return std::nullopt;
  int64_t k = lo(x) / c;
  return k == 0 ? x : x - k * c;
}

// ** index narrowing ** to_indexed_uops builds a view's index math in int64 where it can pass int32
// (int64 ops over the int32 idxs cast up). Whatever range analysis shows fits in int32 goes back to
// int32, so a kernel keeps 64-bit math only where the values need it (its vmin/vmax never wrap: the
// bounds are computed in int64).
bool fits32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }
// the int32 value of an int64 operand: a cast up of an int32, or a constant that fits
O as_int32(const UOp& u) {
  if (u->op == Ops::CAST && u->dtype == dtypes::int64 && u->src[0]->dtype == dtypes::int32) return u->src[0];
  if (u->op == Ops::CONST && u->dtype == dtypes::int64 && fits32(ival(u))) return UOp::const_(dtypes::int32, ival(u));
  return std::nullopt;
}
// op(cast(a), cast(b)) -> cast(op(a, b)) when the result fits int32 (a compare: op(a, b) as it is)
O narrow_index(const UOp& r) {
  const UOpNode& n = *r;
  // (every ALU of every kernel passes here: the dtype first, the op after)
  if (n.src.empty() || n.src.back()->dtype != dtypes::int64) return std::nullopt;
  const bool cmp = n.arg == Arg(BinaryOps::CMPLT) || n.arg == Arg(BinaryOps::CMPNE);
  const bool ok_op = cmp || n.arg == Arg(BinaryOps::ADD) || n.arg == Arg(BinaryOps::MUL) || n.arg == Arg(BinaryOps::IDIV) ||
                     n.arg == Arg(BinaryOps::MOD) || n.arg == Arg(BinaryOps::MAX) || n.arg == Arg(UnaryOps::NEG) ||
                     n.arg == Arg(TernaryOps::WHERE);
  if (!ok_op) return std::nullopt;
  if (!cmp && (n.dtype != dtypes::int64 || !fits32(lo(r)) || !fits32(hi(r)))) return std::nullopt;
  std::vector<UOp> src;
  bool cast = false;
  for (size_t i = 0; i < n.src.size(); i++) {
    if (n.arg == Arg(TernaryOps::WHERE) && i == 0) { src.push_back(n.src[0]); continue; }
    O v = as_int32(n.src[i]);
    if (!v) return std::nullopt;
    cast = cast || n.src[i]->op == Ops::CAST;
    src.push_back(*v);
  }
  if (!cast) return std::nullopt;   // all constants: constant folding's
  UOp x(Ops::ALU, cmp ? n.dtype : dtypes::int32, src, n.arg);
  return cmp ? x : x.cast(dtypes::int64);
}
// cast(cast(a int32) to int64) to t: a's value, cast to t once
O narrow_cast(const UOp& r) {
  const UOp& in = r->src[0];
  if (in->op != Ops::CAST || in->dtype != dtypes::int64 || in->src[0]->dtype != dtypes::int32 || r->dtype.count != 1) return std::nullopt;
  return r->dtype == dtypes::int32 ? in->src[0] : in->src[0].cast(r->dtype);
}
// a LOAD or STORE at cast(a int32) to int64: at a
O narrow_address(const UOp& r) {
  if (r->src.size() < 2) return std::nullopt;
  O a = as_int32(r->src[1]);
  if (!a || r->src[1]->op != Ops::CAST) return std::nullopt;
  std::vector<UOp> src = r->src;
  src[1] = *a;
  return UOp(r->op, r->dtype, src, r->arg);
}
}  // namespace

std::optional<UOp> mod_folding(const UOp& x, int64_t c) {
  if (c <= 0 || !is_sint(x) || lo(x) < 0) return std::nullopt;
  std::vector<UOp> terms, rem;
  add_terms(x, terms);
  bool changed = false;
  for (const UOp& u : terms) {
    int64_t f = u.const_factor();
    int64_t fm = f == 0 ? 0 : floormod(f, c);
    if (fm == f) { rem.push_back(u); continue; }
    auto d = u.divides(f);
    if (!d) { rem.push_back(u); continue; }
    if (fm != 0) rem.push_back(*d * fm);
    changed = true;
  }
  if (!changed) return std::nullopt;
  UOp r = rem.empty() ? x.const_like(int64_t{0}) : sum_terms(rem);
  if (lo(r) < 0) return std::nullopt;   // C's % differs from Python's for negative values
  return r;
}

std::optional<UOp> div_folding(const UOp& x, int64_t c) {
  if (c <= 0 || !is_sint(x) || lo(x) < 0) return std::nullopt;
  if (hi(x) < c) return x.const_like(int64_t{0});
  std::vector<UOp> terms, quotient, remainder;
  add_terms(x, terms);
  int64_t rem_const = 0, g = c, divisor = 1;
  bool changed = false;
  for (const UOp& u : terms) {
    if (u->op == Ops::CONST) {
      if (rem_const != 0) changed = true;
      rem_const += ival(u);
      continue;
    }
    int64_t f = u.const_factor();
    if (f % c == 0) {
      if (f != 0) {
        auto d = u.divides(c);
        if (!d) return std::nullopt;
        quotient.push_back(*d);
      }
      changed = true;
      continue;
    }
    // divisor: the smallest constant factor of a MUL that divides c
    if (u->op == Ops::ALU && u->arg == Arg(BinaryOps::MUL) && f > 1 && c % f == 0 && (divisor == 1 || divisor > f)) divisor = f;
    remainder.push_back(u);
    g = std::gcd(g, f);
  }
  if (floormod(rem_const, c) != rem_const) {
    changed = true;
    quotient.push_back(x.const_like(floordiv(rem_const, c)));
    rem_const = floormod(rem_const, c);
  }
  if (rem_const != 0) remainder.push_back(x.const_like(rem_const));
  int64_t div = g > 1 ? g : divisor;
  if (!changed) {
    if (div > 1 && div < c)
      if (auto nx = div_folding(x, div)) return *nx / (c / div);
    return std::nullopt;
  }
  std::optional<UOp> rem_div;   // remainder // c, through div when possible
  if (!remainder.empty()) {
    UOp rem = sum_terms(remainder);
    if (lo(rem) < 0) return std::nullopt;   // x//c == q + r//c needs r >= 0 with C division
    auto inner = div_folding(rem, div);
    rem_div = inner ? *inner / (c / div) : rem / c;
  }
  if (quotient.empty()) return rem_div ? *rem_div : x.const_like(int64_t{0});
  return rem_div ? *rem_div + sum_terms(quotient) : sum_terms(quotient);
}

const PatternMatcher& symbolic() {
  static const UPat x = UPat::var(0), y = UPat::var(1), x2 = UPat::var(2), val = UPat::var(3);
  static const UPat c0 = UPat::cvar(4), c1 = UPat::cvar(5), c2 = UPat::cvar(6), c = UPat::cvar(7);
  static const UPat b = UPat::var(8, dtypes::bool_), any;
  static const UPat T = UPat::cnst(true), F = UPat::cnst(false);
  static const PatternMatcher pm({
    // ** constant folding **
    {UPat(Ops::ALU).src_each(UPat(Ops::CONST)), [](const Match& m) { return fold_consts(*m.root); }},
    // ** index narrowing: int64 index math back to int32 where it fits **
    {UPat(Ops::ALU), [](const Match& m) { return narrow_index(*m.root); }},
    {UPat(Ops::CAST), [](const Match& m) { return narrow_cast(*m.root); }},
    {UPat(Ops::LOAD), [](const Match& m) { return narrow_address(*m.root); }},
    {UPat(Ops::STORE), [](const Match& m) { return narrow_address(*m.root); }},
    // ** max folding: one side always wins **
    {x.max(y), [](const Match& m) -> O {
      if (const_to_double(m[x].vmin()) >= const_to_double(m[y].vmax())) return m[x];
      if (const_to_double(m[x].vmax()) <= const_to_double(m[y].vmin())) return m[y];
      return std::nullopt; }},
    // ** where: equal arms, const condition **
    {any.where(val, val), [](const Match& m) -> O { return m[val]; }},
    {c0.where(x, y), [](const Match& m) -> O { return const_to_double(m[c0].const_value()) != 0 ? m[x] : m[y]; }},
    // ** self folding **
    {-(-x), [](const Match& m) -> O { return m[x]; }},
    {x + 0, [](const Match& m) -> O { return m[x]; }},
    {x * 1, [](const Match& m) -> O { return m[x]; }},
    {x * -1, [](const Match& m) -> O { return -m[x]; }},
    {x / x, [](const Match& m) -> O { return m[x].const_like(int64_t{1}); }},
    {x / 1, [](const Match& m) -> O { return is_iint(m[x]) ? O(m[x]) : std::nullopt; }},
    {x / -1, [](const Match& m) -> O { return is_iint(m[x]) ? O(-m[x]) : std::nullopt; }},
    {x * UPat::alu(UnaryOps::RECIP, x), [](const Match& m) -> O { return m[x].const_like(1.0); }},   // x/x for floats
    {x % 1, [](const Match& m) -> O { return is_iint(m[x]) ? O(m[x].const_like(int64_t{0})) : std::nullopt; }},
    // ** zero folding ** (x*0 is nan when x is a nan/inf constant; a loaded nan is not seen)
    {x * 0, [](const Match& m) -> O {
      const UOp& v = m[x];
      if (v.is_const() && v->dtype.is_float() && !std::isfinite(const_to_double(v.const_value()))) return v.const_like(NAN);
      return v.const_like(int64_t{0}); }},
    {x - x, [](const Match& m) -> O { return m[x].const_like(int64_t{0}); }},
    {x.lt(x), [](const Match& m) -> O { return UOp::const_((*m.root)->dtype, false); }},
    {UPat(Ops::ALU), [](const Match& m) -> O {
      const UOp& r = *m.root;
      if (r->dtype.count != 1 || r->dtype.is_float() || r->dtype.kind == ScalarKind::void_) return std::nullopt;
      return r.vmin() == r.vmax() ? O(UOp::const_(r->dtype, r.vmin())) : std::nullopt; }},
    // ** bool folding **
    {b & T, [](const Match& m) -> O { return m[b]; }},
    {b & F, [](const Match& m) -> O { return m[b].const_like(false); }},
    {b | T, [](const Match& m) -> O { return m[b].const_like(true); }},
    {b | F, [](const Match& m) -> O { return m[b]; }},
    {b & b, [](const Match& m) -> O { return m[b]; }},
    {b | b, [](const Match& m) -> O { return m[b]; }},
    {b.ne(T), [](const Match& m) -> O { return -m[b]; }},
    {b.ne(F), [](const Match& m) -> O { return m[b]; }},
    // ** two stage add/mul folding **
    {(x + c1) + c2, [](const Match& m) -> O { return m[x] + UOp::const_(m[x]->dtype, exec_alu(BinaryOps::ADD, m[x]->dtype, m[c1].const_value(), m[c2].const_value())); }},
    {(x * c1) * c2, [](const Match& m) -> O { return m[x] * UOp::const_(m[x]->dtype, exec_alu(BinaryOps::MUL, m[x]->dtype, m[c1].const_value(), m[c2].const_value())); }},
    // ** lt **
    {(c0 * x).lt(c1), [](const Match& m) -> O {   // c0*x < c1 -> x < ceil(c1/c0) for positive c0, c1
      int64_t a = ival(m[c0]), d = ival(m[c1]);
      if (!is_iint(m[x]) || a <= 0 || d <= 0) return std::nullopt;
      return m[x].lt(m[x].const_like((d + a - 1) / a)); }},
    {((c0 * x) + x2).lt(c1), [](const Match& m) -> O {   // x2 in [0, c0) does not change the comparison
      int64_t a = ival(m[c0]), d = ival(m[c1]);
      if (!is_iint(m[x]) || a <= 0 || d % a != 0 || a <= hi(m[x2]) || lo(m[x2]) < 0) return std::nullopt;
      return m[x].lt(m[x].const_like(d / a)); }},
    {x.lt(c), [](const Match& m) -> O { return lt_fold(m[x], ival(m[c])); }},
    // ** div **
    {x / c, [](const Match& m) -> O { return div_folding(m[x], ival(m[c])); }},
    {((c0 * x) + x2) / c1, [](const Match& m) -> O { return mul_add_div(m[x], m[x2], ival(m[c0]), ival(m[c1])); }},
    {(x * c0) / c1, [](const Match& m) -> O {   // exact: c1 divides c0
      int64_t a = ival(m[c0]), d = ival(m[c1]);
      if (!is_iint(m[x]) || d == 0 || a % d != 0) return std::nullopt;
      return m[x] * (a / d); }},
    // ** mod **
    {x % c, [](const Match& m) -> O { auto nx = mod_folding(m[x], ival(m[c])); return nx ? O(*nx % m[c]) : std::nullopt; }},
    {x % c, [](const Match& m) -> O { return remove_mod(m[x], ival(m[c])); }},
    {(c0 * x) % c1, [](const Match& m) -> O {   // (c0*x)%(k*c0) -> (x%k)*c0
      int64_t a = ival(m[c0]), d = ival(m[c1]);
      if (!is_iint(m[x]) || a == 0 || d == 0 || d % a != 0) return std::nullopt;
      return (m[x] % (d / a)) * m[c0]; }},
    {(x % c0) % c1, [](const Match& m) -> O {
      int64_t a = ival(m[c0]), d = ival(m[c1]);
      return d != 0 && a % d == 0 ? O(m[x] % m[c1]) : std::nullopt; }},
    {(x % c) + (x / c) * c, [](const Match& m) -> O { return m[x]; }},
    // ** combine terms **
    {-(x + y), [](const Match& m) -> O { return (-m[x]) + (-m[y]); }},
    {(x + c0) * c1, [](const Match& m) -> O {   // signed ints only: floats have inf*0 = nan
      if (!is_sint(m[x])) return std::nullopt;
      return m[x] * m[c1] + UOp::const_(m[x]->dtype, exec_alu(BinaryOps::MUL, m[x]->dtype, m[c0].const_value(), m[c1].const_value())); }},
    {x * c0 + x * c1, [](const Match& m) -> O { return m[x] * UOp::const_(m[x]->dtype, exec_alu(BinaryOps::ADD, m[x]->dtype, m[c0].const_value(), m[c1].const_value())); }},
    {(x / c0) / c1, [](const Match& m) -> O {
      int64_t a = ival(m[c0]), d = ival(m[c1]), p;
      if (!is_iint(m[x]) || __builtin_mul_overflow(a, d, &p) || p == 0) return std::nullopt;
      return m[x] / p; }},
    {(c0 + x).lt(c1), [](const Match& m) -> O { return m[x].lt(UOp::const_(m[x]->dtype, exec_alu(BinaryOps::ADD, m[x]->dtype, m[c1].const_value(), exec_alu(UnaryOps::NEG, m[x]->dtype, m[c0].const_value())))); }},
    {x + x * c0, [](const Match& m) -> O { return m[x] * UOp::const_(m[x]->dtype, exec_alu(BinaryOps::ADD, m[x]->dtype, m[c0].const_value(), int64_t{1})); }},
    // ** other arange folders **
    {-(x * c1), [](const Match& m) -> O { return m[x] * UOp::const_(m[x]->dtype, exec_alu(UnaryOps::NEG, m[x]->dtype, m[c1].const_value())); }},
    // ** move add consts to the end **
    {UPat(Ops::ALU).arg(BinaryOps::ADD).src({c1, x}), [](const Match& m) -> O { return m[x]->op != Ops::CONST ? O(m[x] + m[c1]) : std::nullopt; }},
    {(x + c1) + y, [](const Match& m) -> O { return m[y]->op != Ops::CONST ? O((m[x] + m[y]) + m[c1]) : std::nullopt; }},
  });
  return pm;
}

UOp simplify(const UOp& u) { return graph_rewrite(u, symbolic()); }

}  // namespace tg
