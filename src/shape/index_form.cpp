// IndexForm arithmetic: exact folding of div/mod on linear forms (see index_form.hpp).
#include "shape/index_form.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include "shape/shape_helpers.hpp"
#include "uop/uop.hpp"

namespace tg {

int cmp(const IndexAtom& a, const IndexAtom& b) {
  if (a.kind != b.kind) return a.kind < b.kind ? -1 : 1;
  if (a.kind == IndexAtom::VAR) return a.id == b.id ? 0 : (a.id < b.id ? -1 : 1);
  if (a.b != b.b) return a.b < b.b ? -1 : 1;
  return cmp(a.x, b.x);
}

int cmp(const IndexForm& a, const IndexForm& b) {
  if (a.c != b.c) return a.c < b.c ? -1 : 1;
  if (a.terms.size() != b.terms.size()) return a.terms.size() < b.terms.size() ? -1 : 1;
  for (size_t i = 0; i < a.terms.size(); i++) {
    if (int r = cmp(*a.terms[i].first, *b.terms[i].first)) return r;
    if (a.terms[i].second != b.terms[i].second) return a.terms[i].second < b.terms[i].second ? -1 : 1;
  }
  return 0;
}

IndexForm IndexForm::constant(int64_t v) { return IndexForm{v, {}}; }

static IndexForm from_atom(IndexAtom a) {
  if (a.lo == a.hi) return IndexForm::constant(a.lo);
  return IndexForm{0, {{std::make_shared<const IndexAtom>(std::move(a)), 1}}};
}

IndexForm IndexForm::var(int id, int64_t max) {
  IndexAtom a(IndexAtom::VAR);
  a.id = id, a.lo = 0, a.hi = std::max<int64_t>(0, max);
  return from_atom(std::move(a));
}

int64_t IndexForm::min() const {
  int64_t r = c;
  for (auto& [a, k] : terms) r += k > 0 ? k * a->lo : k * a->hi;
  return r;
}

int64_t IndexForm::max() const {
  int64_t r = c;
  for (auto& [a, k] : terms) r += k > 0 ? k * a->hi : k * a->lo;
  return r;
}

void IndexForm::vars(std::set<int>& out) const {
  for (auto& [a, k] : terms) {
    if (a->kind == IndexAtom::VAR) out.insert(a->id);
    else a->x.vars(out);
  }
}

IndexForm IndexForm::operator+(const IndexForm& o) const {
  IndexForm r{c + o.c, {}};
  size_t i = 0, j = 0;
  while (i < terms.size() || j < o.terms.size()) {
    int d = i == terms.size() ? 1 : j == o.terms.size() ? -1 : cmp(*terms[i].first, *o.terms[j].first);
    if (d < 0) r.terms.push_back(terms[i++]);
    else if (d > 0) r.terms.push_back(o.terms[j++]);
    else {
      if (int64_t k = terms[i].second + o.terms[j].second) r.terms.emplace_back(terms[i].first, k);
      i++, j++;
    }
  }
  return r;
}

IndexForm IndexForm::operator*(int64_t k) const {
  if (k == 0) return constant(0);
  IndexForm r{c * k, terms};
  for (auto& t : r.terms) t.second *= k;
  return r;
}

// Split into b*q + r with every coefficient of r in [0, b): floor and mod then only look at r.
static std::pair<IndexForm, IndexForm> split(const IndexForm& f, int64_t b) {
  IndexForm q = IndexForm::constant(tg::floordiv(f.c, b)), r = IndexForm::constant(tg::floormod(f.c, b));
  for (auto& [a, k] : f.terms) {
    if (int64_t qk = tg::floordiv(k, b)) q.terms.emplace_back(a, qk);
    if (int64_t rk = tg::floormod(k, b)) r.terms.emplace_back(a, rk);
  }
  return {q, r};
}

static int64_t coef_gcd(const IndexForm& f, int64_t b) {
  int64_t g = b;
  for (auto& [a, k] : f.terms) g = std::gcd(g, k);
  return g;
}

static IndexForm div_exact_coefs(const IndexForm& f, int64_t g) {   // f's coefficients / g, const floored
  IndexForm r = IndexForm::constant(tg::floordiv(f.c, g));
  for (auto& [a, k] : f.terms) r.terms.emplace_back(a, k / g);
  return r;
}

// f = g*big + small with g dividing b and small in [0, g): floor and mod by b then ignore small.
struct Factored { int64_t g; IndexForm big, small; };
static std::optional<Factored> factor_small(const IndexForm& f, int64_t b) {
  std::vector<size_t> order(f.terms.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return std::abs(f.terms[x].second) > std::abs(f.terms[y].second); });
  for (size_t k = order.size(); k > 0; k--) {   // the k largest terms are big
    int64_t g = b;
    for (size_t i = 0; i < k; i++) g = std::gcd(g, f.terms[order[i]].second);
    if (g <= 1) continue;
    Factored r{g, IndexForm::constant(tg::floordiv(f.c, g)), IndexForm::constant(tg::floormod(f.c, g))};
    for (size_t i = 0; i < order.size(); i++) {
      auto& [a, c] = f.terms[order[i]];
      if (i < k) r.big = r.big + IndexForm{0, {{a, c / g}}};
      else r.small = r.small + IndexForm{0, {{a, c}}};
    }
    if (r.small.min() >= 0 && r.small.max() < g) return r;
  }
  return std::nullopt;
}

static IndexForm div_atom(const IndexForm& x, int64_t b) {   // x >= 0
  IndexAtom a(IndexAtom::DIV);
  a.x = x, a.b = b, a.lo = tg::floordiv(x.min(), b), a.hi = tg::floordiv(x.max(), b);
  return from_atom(std::move(a));
}

// whether every div/mod atom of res already occurs in src
static bool no_new_atoms(const IndexForm& res, const IndexForm& src) {
  for (auto& [a, k] : res.terms) {
    if (a->kind == IndexAtom::VAR) continue;
    bool found = false;
    for (auto& [sa, sk] : src.terms) found |= cmp(*a, *sa) == 0;
    if (!found) return false;
  }
  return true;
}

// floor(r / b) for r >= 0 with coefficients in [0, b)
static IndexForm div_residue(const IndexForm& r, int64_t b) {
  int64_t lo = r.min(), hi = r.max();
  if (tg::floordiv(lo, b) == tg::floordiv(hi, b)) return IndexForm::constant(tg::floordiv(lo, b));
  if (int64_t g = coef_gcd(r, b); g > 1) return div_exact_coefs(r, g).floordiv(b / g);   // const % g < g drops out
  if (r.terms.size() == 1 && r.terms[0].second == 1) {
    const IndexAtom& a = *r.terms[0].first;
    if (a.kind == IndexAtom::DIV) return (a.x + IndexForm::constant(r.c * a.b)).floordiv(a.b * b);   // two divs are one
    if (a.kind == IndexAtom::MOD && r.c == 0 && a.b % b == 0) return a.x.floordiv(b).mod(a.b / b);
  }
  // floor(r/b) = floor(floor(r/d) / (b/d)) through a coefficient d dividing b: the inner div often folds
  int64_t d = 1;
  for (auto& [a, k] : r.terms) if (k > d && k < b && b % k == 0) d = k;
  if (d > 1) return r.floordiv(d).floordiv(b / d);
  return div_atom(r, b);
}

IndexForm IndexForm::floordiv(int64_t b) const {
  TG_ASSERT(b > 0, "IndexForm::floordiv by " + std::to_string(b));
  if (b == 1) return *this;
  int64_t lo = min(), hi = max();
  if (tg::floordiv(lo, b) == tg::floordiv(hi, b)) return constant(tg::floordiv(lo, b));
  // pull out the terms b divides; the rest, signs kept, may have a constant floor by its bounds
  IndexForm q = constant(tg::floordiv(c, b)), rest = constant(tg::floormod(c, b));
  for (auto& [a, k] : terms) (k % b == 0 ? q : rest).terms.emplace_back(a, k % b == 0 ? k / b : k);
  if (tg::floordiv(rest.min(), b) == tg::floordiv(rest.max(), b)) return q + constant(tg::floordiv(rest.min(), b));
  if (auto fs = factor_small(rest, b)) return q + fs->big.floordiv(b / fs->g);
  // split the rest into b*q2 + r with r's coefficients in [0, b): exact and often linear
  auto [q2, r] = split(rest, b);
  IndexForm res = q2 + div_residue(r, b);
  bool is_signed = std::any_of(rest.terms.begin(), rest.terms.end(), [](auto& t) { return t.second < 0; });
  if (!is_signed || no_new_atoms(res, rest)) return q + res;
  // with negative terms the residues widen the bounds: keep one div of the shifted rest instead
  int64_t off = tg::floordiv(rest.min(), b);
  return q + constant(off) + div_atom(rest + constant(-off * b), b);
}

IndexForm IndexForm::mod(int64_t b) const {
  TG_ASSERT(b > 0, "IndexForm::mod by " + std::to_string(b));
  if (b == 1) return constant(0);
  if (tg::floordiv(min(), b) == tg::floordiv(max(), b)) return *this + constant(-b * tg::floordiv(min(), b));
  // (x % m) is x modulo b when b divides m
  IndexForm f = constant(c);
  for (auto& [a, k] : terms) {
    if (a->kind == IndexAtom::MOD && a->b % b == 0) f = f + a->x * k;
    else f = f + IndexForm{0, {{a, k}}};
  }
  if (auto fs = factor_small(f, b)) return fs->big.mod(b / fs->g) * fs->g + fs->small;
  IndexForm r = split(f, b).second;
  int64_t lo = r.min(), hi = r.max();
  if (tg::floordiv(lo, b) == tg::floordiv(hi, b)) return r + constant(-b * tg::floordiv(lo, b));
  if (int64_t g = coef_gcd(r, b); g > 1) return div_exact_coefs(r, g).mod(b / g) * g + constant(tg::floormod(r.c, g));
  IndexAtom a(IndexAtom::MOD);
  a.x = r, a.b = b, a.lo = 0, a.hi = b - 1;
  return from_atom(std::move(a));
}

void ValidInfo::add_lt(const IndexForm& lhs, int64_t b) {
  if (is_false) return;
  IndexForm l = lhs;
  b -= l.c;
  l.c = 0;
  if (l.terms.size() > 1) {
    // tinygrad's create_lt_node: scaled terms that can reach b share a gcd g; if the rest stays in
    // [0, g) it can't change the outcome, so the condition only involves the scaled terms
    IndexForm muls, others;
    int64_t g = b;
    for (auto& t : l.terms) {
      bool big = t.second > 1 && t.second * t.first->hi >= b;
      (big ? muls : others).terms.push_back(t);
      if (big) g = std::gcd(g, t.second);
    }
    if (!muls.terms.empty() && others.min() >= 0 && others.max() < g) {
      l = div_exact_coefs(muls, g);
      b = tg::floordiv(b, g);
    }
  }
  if (l.max() < b) return;                                  // always true
  if (l.min() >= b) { is_false = true; vars.clear(); return; }   // never true
  l.vars(vars);
}

}  // namespace tg
