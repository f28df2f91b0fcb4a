// Symbolic Views: shapes, strides, offsets and masks that are expressions of Variables (tinygrad
// 0.9.2 view.py with sint). A View's int fields hold the values of its expressions (bound variables
// at their value, unbound ones at their max); `sym` keeps the expressions themselves. Decisions that
// tinygrad makes by comparing sints are made here only when range analysis proves them for every
// value (a mask is dropped only when it can never cut), so one kernel serves every value.
#include "access.hpp"
#include <algorithm>
#include <set>
#include <numeric>
#include <unordered_map>

#include "shape/shape_helpers.hpp"
#include "tg/helpers.hpp"
#include "uop/uop.hpp"

namespace tg {

namespace {

bool is_c(const sint& x, int64_t v) { return x.is_const() && x.const_value() == v; }
// equal expressions: structurally, or (sums built in another order) equal at a few points of the range
bool same(const sint& a, const sint& b) {
  if (a.is_const() && b.is_const()) return a.const_value() == b.const_value();
  if (a.is_const() != b.is_const()) return false;
  if (a.same(b)) return true;
  std::vector<UOp> va = Access::uop(a).vars(), vb = Access::uop(b).vars();
  // structural order, not addresses: the points probed below follow this order and must be the same every run
  std::sort(va.begin(), va.end(), [](const UOp& x, const UOp& y) { return x.cmp_lt(y); });
  std::sort(vb.begin(), vb.end(), [](const UOp& x, const UOp& y) { return x.cmp_lt(y); });
  if (va != vb) return false;
  for (int k = 0; k < 5; k++) {
    std::unordered_map<std::string, int64_t> m;
    int idx = 0;
    for (const UOp& v : va) {
      int64_t lo = const_to_int(v->src[0].const_value()), hi = const_to_int(v->src[1].const_value());
      int64_t span = hi - lo + 1, pick = k == 0 ? lo : k == 1 ? hi : lo + (k * 7919 + idx * 104729) % span;
      m[v->as<std::string>()] = pick, idx++;
    }
    if (a.eval(m) != b.eval(m)) return false;
  }
  return true;
}
bool same(const std::vector<sint>& a, const std::vector<sint>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++)
    if (!same(a[i], b[i])) return false;
  return true;
}
sint smax(const sint& a, const sint& b) {
  if (a.is_const() && b.is_const()) return std::max(a.const_value(), b.const_value());
  if (a.vmin() >= b.vmax()) return a;
  if (b.vmin() >= a.vmax()) return b;
  return a.max(b);
}
sint smin(const sint& a, const sint& b) {
  if (a.is_const() && b.is_const()) return std::min(a.const_value(), b.const_value());
  if (a.vmax() <= b.vmin()) return a;
  if (b.vmax() <= a.vmin()) return b;
  return a.min(b);
}
sint sprod(const std::vector<sint>& v) {
  sint r = 1;
  for (const sint& x : v) r = r * x;
  return r;
}

// the value of e: bound variables from vals, unbound ones at their max
int64_t proxy(const sint& e, const VarBindings& vals) {
  if (e.is_const()) return e.const_value();
  std::unordered_map<std::string, int64_t> m;
  for (const UOp& v : Access::uop(e).vars()) {
    const std::string& nm = v->as<std::string>();
    auto it = vals.find(nm);
    m[nm] = it != vals.end() ? it->second : const_to_int(v->src[1].const_value());
  }
  return e.eval(m);
}

bool bound(const sint& e, const VarBindings& vals) {
  if (e.is_const()) return true;
  for (const UOp& v : Access::uop(e).vars())
    if (!vals.count(v->as<std::string>())) return false;
  return true;
}

bool all_const(const SymView& s) {
  auto c = [](const sint& x) { return x.is_const(); };
  if (!std::all_of(s.shape.begin(), s.shape.end(), c) || !std::all_of(s.strides.begin(), s.strides.end(), c) || !s.offset.is_const())
    return false;
  if (s.mask)
    for (auto& [b, e] : *s.mask)
      if (!b.is_const() || !e.is_const()) return false;
  return true;
}

// Values travel separately from the (unbound) expressions; a variable with two values is an error.
void merge_vals(VarBindings& into, const VarBindings& from, const char* op) {
  for (auto& [k, v] : from) {
    auto [it, fresh] = into.emplace(k, v);
    if (!fresh && it->second != v)
      throw Error(std::string(op) + ": variable '" + k + "' is bound to both " + std::to_string(it->second) + " and " +
                  std::to_string(v) + "; bind each variable to one value");
  }
}
sint take(const sint& x, VarBindings& vals, const char* op) {
  merge_vals(vals, x.bindings(), op);
  return x.unbind();
}

std::vector<sint> strides_for(const std::vector<sint>& shape) {
  std::vector<sint> ret(shape.size(), 0);
  sint acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    ret[i] = is_c(shape[i], 1) ? sint(0) : acc;
    acc = acc * shape[i];
  }
  return ret;
}

std::string sstr(const sint& x) { return x.is_const() ? std::to_string(x.const_value()) : x.render(); }
std::string sstr(const std::vector<sint>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + sstr(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

[[noreturn]] void bad(const std::string& op, const std::string& arg, const std::vector<sint>& shape, const std::string& why) {
  throw Error("invalid " + op + " " + arg + " for " + sstr(shape) + ": " + why);
}

// A View from expressions: the int fields are their values; `sym` only when something is symbolic.
// only the values of variables the view's fields still name: a reshape or shrink that drops a
// symbolic dim must give the same view (==, hash: the scheduler's keys) as one that never had it
void drop_unused_vals(SymView& s) {
  if (s.vals.empty()) return;
  std::set<std::string> used;
  auto add = [&](const sint& x) {
    if (!x.is_const())
      for (const UOp& d : Access::uop(x).vars()) used.insert(d->as<std::string>());
  };
  for (auto& x : s.shape) add(x);
  for (auto& x : s.strides) add(x);
  add(s.offset);
  if (s.mask) for (auto& [b, e] : *s.mask) add(b), add(e);
  for (auto it = s.vals.begin(); it != s.vals.end();) it = used.count(it->first) ? std::next(it) : s.vals.erase(it);
}

View finish(SymView s, bool contiguous) {
  drop_unused_vals(s);
  View v;
  for (auto& x : s.shape) v.shape.push_back(proxy(x, s.vals));
  for (auto& x : s.strides) v.strides.push_back(proxy(x, s.vals));
  v.offset = proxy(s.offset, s.vals);
  if (s.mask) {
    v.mask = Mask{};
    for (auto& [b, e] : *s.mask) v.mask->emplace_back(proxy(b, s.vals), proxy(e, s.vals));
  }
  v.contiguous = contiguous;
  if (!all_const(s)) v.sym = std::make_shared<const SymView>(std::move(s));
  return v;
}

View resize(const View& self, const SMask& arg, std::optional<SMask> mask, VarBindings vals) {
  SymView v = self.as_sym();
  merge_vals(vals, v.vals, "shrink/pad");
  sint offset = 0;
  for (size_t i = 0; i < arg.size(); i++) offset = offset + v.strides[i] * arg[i].first;
  if (v.mask) {
    SMask nmask;
    for (size_t i = 0; i < arg.size(); i++) {
      auto& [mx, my] = (*v.mask)[i];
      auto& [ax, ay] = arg[i];
      nmask.emplace_back(smax(0, smin(mx - ax, ay - ax)), smax(0, smin(my - ax, ay - ax)));
    }
    if (mask)
      for (size_t i = 0; i < arg.size(); i++)
        nmask[i] = {smax(nmask[i].first, (*mask)[i].first), smin(nmask[i].second, (*mask)[i].second)};
    mask = nmask;
  }
  std::vector<sint> shape;
  for (auto& [x, y] : arg) shape.push_back(y - x);
  return View::create_sym(shape, v.strides, v.offset + offset, mask, vals);
}

// ---- int args on a symbolic view: an int that equals a symbolic dim's value at its place means that dim
std::vector<sint> lift_dims(const View& v, const Shape& s) {
  std::vector<sint> r(s.begin(), s.end());
  if (!v.sym) return r;
  for (size_t i = 0; i < s.size() && i < v.shape.size(); i++)
    if (!v.sym->shape[i].is_const() && s[i] == v.shape[i]) r[i] = v.sym->shape[i];
  return r;
}

// reshape by ints: symbolic dims must come through whole (matched by value), concrete ones may merge or
// split. A symbolic dim whose value is 1 can't be told from a unit dim by its value, so every alignment
// is tried and the one that keeps symbolic dims in place (same index, else same index from the right)
// wins.
struct Lift {
  const std::vector<sint>& S;
  const Shape& P;
  const Shape& ns;
  std::vector<sint> R;
  std::vector<std::pair<size_t, size_t>> pos;   // (old index, new index) of each symbolic dim
  std::optional<std::vector<sint>> best;
  int best_score = -1;
  int score() const {
    int sc = 0;
    for (auto [o, n] : pos) {
      if (S.size() == ns.size() && o == n) sc += 4;
      if (o == n) sc += 2;
      if (S.size() - o == ns.size() - n) sc += 1;
    }
    return sc;
  }
  void go(size_t i, size_t j) {
    while (i < S.size() && is_c(S[i], 1)) i++;
    if (j == ns.size()) {
      for (; i < S.size(); i++)
        if (!is_c(S[i], 1)) return;
      if (int sc = score(); sc > best_score) best_score = sc, best = R;
      return;
    }
    const bool sym = i < S.size() && !S[i].is_const();
    if (ns[j] == 1) {
      R.push_back(1);
      go(i, j + 1);
      R.pop_back();
    }
    if (sym) {
      if (ns[j] != P[i]) return;
      R.push_back(S[i]);
      pos.emplace_back(i, j);
      go(i + 1, j + 1);
      pos.pop_back();
      R.pop_back();
      return;
    }
    if (i >= S.size() || ns[j] == 1) return;
    // a run of concrete old dims and new dims with the same product
    size_t mark = R.size();
    int64_t po = S[i++].const_value(), pn = ns[j];
    R.push_back(ns[j++]);
    bool ok = true;
    while (ok && po != pn) {
      if (po < pn) {
        if (i >= S.size() || !S[i].is_const()) ok = false;
        else po *= S[i++].const_value();
      } else {
        if (j >= ns.size()) ok = false;
        else pn *= ns[j], R.push_back(ns[j++]);
      }
    }
    if (ok) go(i, j);
    R.erase(R.begin() + static_cast<int64_t>(mark), R.end());
  }
};
std::optional<std::vector<sint>> lift_reshape(const View& v, const Shape& ns) {
  Lift l{v.sym->shape, v.shape, ns, {}, {}, std::nullopt, -1};
  l.go(0, 0);
  return l.best;
}

SMask lift_mask(const View& v, const Mask& m, bool ends_are_dims) {
  SMask r;
  for (size_t i = 0; i < m.size(); i++) {
    sint b = m[i].first, e = m[i].second;
    if (ends_are_dims && v.sym && i < v.shape.size() && !v.sym->shape[i].is_const() && m[i].second == v.shape[i]) e = v.sym->shape[i];
    r.emplace_back(b, e);
  }
  return r;
}


// A reshape that splits or merges concrete dims of a symbolic view (a kernel's shift_to of a fixed axis
// next to a symbolic one). The dims pair up in groups of equal size; a symbolic dim must be alone in its
// group on both sides, with the same expression. The old dims of a group must be contiguous among
// themselves (stride[a] == stride[a+1] * shape[a+1]), the new ones get strides from the group's
// innermost stride; a mask may only cover a group that stays one dim. Unit dims come and go freely.
// nullopt where one view can't say it (the ShapeTracker then adds a view).
std::optional<View> reshape_groups(const SymView& s, const std::vector<sint>& ns, const VarBindings& vals) {
  std::vector<size_t> od, nd;   // the non-unit dims
  for (size_t i = 0; i < s.shape.size(); i++) {
    if (!is_c(s.shape[i], 1)) od.push_back(i);
    else if (s.mask && !(is_c((*s.mask)[i].first, 0) && is_c((*s.mask)[i].second, 1))) return std::nullopt;
  }
  for (size_t i = 0; i < ns.size(); i++)
    if (!is_c(ns[i], 1)) nd.push_back(i);
  std::vector<sint> st(ns.size(), 0);
  std::optional<SMask> m;
  if (s.mask) m = SMask(ns.size(), {sint(0), sint(1)});
  size_t i = 0, k = 0;
  while (i < od.size() && k < nd.size()) {
    const sint &a = s.shape[od[i]], &b = ns[nd[k]];
    if (!a.is_const() || !b.is_const()) {   // a symbolic dim maps to itself
      if (!same(a, b)) return std::nullopt;
      st[nd[k]] = s.strides[od[i]];
      if (m) (*m)[nd[k]] = (*s.mask)[od[i]];
      i++, k++;
      continue;
    }
    size_t i1 = i, k1 = k;
    int64_t po = a.const_value(), pn = b.const_value();
    while (po != pn) {
      if (po < pn) {
        if (++i1 >= od.size() || !s.shape[od[i1]].is_const()) return std::nullopt;
        po *= s.shape[od[i1]].const_value();
      } else {
        if (++k1 >= nd.size() || !ns[nd[k1]].is_const()) return std::nullopt;
        pn *= ns[nd[k1]].const_value();
      }
    }
    for (size_t a2 = i; a2 < i1; a2++)
      if (!same(s.strides[od[a2]], s.strides[od[a2 + 1]] * s.shape[od[a2 + 1]])) return std::nullopt;
    const bool one_to_one = i == i1 && k == k1;
    if (m && !one_to_one)
      for (size_t a2 = i; a2 <= i1; a2++)
        if (!(is_c((*s.mask)[od[a2]].first, 0) && same((*s.mask)[od[a2]].second, s.shape[od[a2]]))) return std::nullopt;
    sint acc = s.strides[od[i1]];
    for (size_t b2 = k1 + 1; b2-- > k;) {
      st[nd[b2]] = acc;
      if (m) (*m)[nd[b2]] = one_to_one ? (*s.mask)[od[i]] : std::pair<sint, sint>{0, ns[nd[b2]]};
      acc = acc * ns[nd[b2]];
    }
    i = i1 + 1, k = k1 + 1;
  }
  if (i != od.size() || k != nd.size()) return std::nullopt;
  return View::create_sym(ns, st, s.offset, m, vals);
}

}  // namespace

// ---- View: symbolic forms ----

SymView View::as_sym() const {
  if (sym) return *sym;
  SymView s;
  s.shape.assign(shape.begin(), shape.end());
  s.strides.assign(strides.begin(), strides.end());
  s.offset = offset;
  if (mask) {
    s.mask = SMask{};
    for (auto& [b, e] : *mask) s.mask->emplace_back(b, e);
  }
  return s;
}

std::vector<sint> View::sym_shape() const {
  if (!sym) return std::vector<sint>(shape.begin(), shape.end());
  std::vector<sint> r;
  for (const sint& x : sym->shape) r.push_back(x.with_bindings(sym->vals));
  return r;
}

View View::create_sym(const std::vector<sint>& shape_in, std::optional<std::vector<sint>> strides_in, sint offset_in,
                      std::optional<SMask> mask_in, VarBindings vals) {
  SymView s;
  for (auto& x : shape_in) s.shape.push_back(take(x, vals, "View.create"));
  s.offset = take(offset_in, vals, "View.create");
  if (strides_in && !strides_in->empty()) {
    if (strides_in->size() != shape_in.size()) throw Error("View.create: strides " + sstr(*strides_in) + " don't match shape " + sstr(shape_in));
    for (size_t i = 0; i < shape_in.size(); i++) s.strides.push_back(is_c(s.shape[i], 1) ? sint(0) : take((*strides_in)[i], vals, "View.create"));
  } else {
    s.strides = strides_for(s.shape);
  }
  if (mask_in) {
    if (mask_in->size() != shape_in.size()) throw Error("View.create: mask doesn't match shape " + sstr(shape_in));
    s.mask = SMask{};
    for (auto& [b, e] : *mask_in) s.mask->emplace_back(take(b, vals, "View.create"), take(e, vals, "View.create"));
  }
  s.vals = std::move(vals);
  for (auto& x : s.shape)
    if (proxy(x, s.vals) < 0 || x.vmax() < 0) throw Error("View.create: negative dimension in shape " + sstr(shape_in) + "; dims must be >= 0");
  for (auto& x : s.shape)
    if (is_c(x, 0)) {
      s.strides.assign(s.shape.size(), 0), s.offset = 0, s.mask.reset();
      return finish(std::move(s), true);
    }
  if (s.mask) {
    bool full = true;
    for (size_t i = 0; i < s.shape.size(); i++) full &= is_c((*s.mask)[i].first, 0) && same((*s.mask)[i].second, s.shape[i]);
    if (full) s.mask.reset();
  }
  if (s.mask) {
    // a dim that can never hold more than one valid element folds into the offset (proven for every value)
    std::vector<bool> elim;
    bool any_elim = false, any_empty = false;
    for (auto& [b, e] : *s.mask) {
      sint ext = e - b;
      elim.push_back(ext.vmax() <= 1);
      any_elim |= elim.back();
      any_empty |= ext.vmax() <= 0;
    }
    if (any_elim) {
      if (any_empty) {
        s.strides.assign(s.shape.size(), 0), s.offset = 0;
        s.mask = SMask(s.shape.size(), {sint(0), sint(0)});
      }
      for (size_t i = 0; i < s.shape.size(); i++)
        if (elim[i]) { s.offset = s.offset + s.strides[i] * (*s.mask)[i].first; s.strides[i] = 0; }
    }
  }
  bool contiguous = is_c(s.offset, 0) && !s.mask && same(s.strides, strides_for(s.shape));
  return finish(std::move(s), contiguous);
}

View View::unbind(VarBindings* vals) const {
  if (!sym) return *this;
  if (vals) merge_vals(*vals, sym->vals, "unbind");
  SymView s = *sym;
  s.vals.clear();
  return finish(std::move(s), contiguous);
}

View View::bind(const VarBindings& vals) const {
  if (!sym) return *this;
  SymView s = *sym;
  std::vector<UOp> vs;
  auto add = [&](const sint& x) { if (!x.is_const()) for (const UOp& v : Access::uop(x).vars()) vs.push_back(v); };
  for (auto& x : s.shape) add(x);
  for (auto& x : s.strides) add(x);
  add(s.offset);
  if (s.mask) for (auto& [b, e] : *s.mask) add(b), add(e);
  s.vals.clear();
  for (const UOp& v : vs) {
    const std::string& nm = v->as<std::string>();
    auto it = vals.find(nm);
    if (it != vals.end()) s.vals[nm] = it->second;
  }
  return finish(std::move(s), contiguous);
}

int64_t View::max_size() const {
  if (!sym) return size();
  int64_t r = 1;
  for (const sint& x : sym->shape) r *= x.vmax();
  return r;
}

std::optional<View> View::reshape_sym(const std::vector<sint>& ns_in) const {
  VarBindings vals = sym ? sym->vals : VarBindings{};
  std::vector<sint> ns;
  for (auto& x : ns_in) ns.push_back(take(x, vals, "reshape"));
  SymView s = as_sym();
  if (same(s.shape, ns)) return bind(vals).sym ? bind(vals) : *this;
  for (auto& x : ns)
    if (proxy(x, vals) < 0) bad("reshape", sstr(ns_in), sym_shape(), "dims must be >= 0");
  int64_t old_n = 1, new_n = 1;
  for (auto& x : s.shape) old_n *= proxy(x, vals);
  for (auto& x : ns) new_n *= proxy(x, vals);
  if (old_n != new_n) bad("reshape", sstr(ns_in), sym_shape(), "the number of elements must stay " + std::to_string(old_n));
  for (auto& x : s.shape)
    if (is_c(x, 0)) return View::create_sym(ns, std::nullopt, 0, std::nullopt, vals);
  if (contiguous) return View::create_sym(ns, std::nullopt, 0, std::nullopt, vals);
  // same rank, every dim the same value: the new dims replace the old ones directly (0.9.2)
  if (s.shape.size() == ns.size()) {
    bool ok = true;
    for (size_t i = 0; i < ns.size() && ok; i++) ok = proxy(s.shape[i], vals) == proxy(ns[i], vals);
    if (ok) return View::create_sym(ns, s.strides, s.offset, s.mask, vals);
  }
  // only unit dims come and go: the other dims keep their strides and masks
  std::vector<size_t> keep_old, keep_new;
  for (size_t i = 0; i < s.shape.size(); i++)
    if (!is_c(s.shape[i], 1)) keep_old.push_back(i);
    else if (s.mask && !(is_c((*s.mask)[i].first, 0) && is_c((*s.mask)[i].second, 1))) return std::nullopt;
  for (size_t i = 0; i < ns.size(); i++)
    if (!is_c(ns[i], 1)) keep_new.push_back(i);
  if (keep_old.size() == keep_new.size()) {
    bool ok = true;
    for (size_t k = 0; k < keep_old.size() && ok; k++) ok = same(s.shape[keep_old[k]], ns[keep_new[k]]);
    if (ok) {
      std::vector<sint> st(ns.size(), 0);
      std::optional<SMask> m;
      if (s.mask) m = SMask(ns.size(), {sint(0), sint(1)});
      for (size_t k = 0; k < keep_old.size(); k++) {
        st[keep_new[k]] = s.strides[keep_old[k]];
        if (m) (*m)[keep_new[k]] = (*s.mask)[keep_old[k]];
      }
      return View::create_sym(ns, st, s.offset, m, vals);
    }
  }
  if (auto r = reshape_groups(s, ns, vals)) return r;
  if (!sym && std::all_of(ns.begin(), ns.end(), [](const sint& x) { return x.is_const(); })) {
    Shape ints;
    for (auto& x : ns) ints.push_back(x.const_value());
    return reshape(ints);
  }
  return std::nullopt;   // the ShapeTracker adds a view
}

View View::expand_sym(const std::vector<sint>& ns_in) const {
  VarBindings vals = sym ? sym->vals : VarBindings{};
  std::vector<sint> ns;
  for (auto& x : ns_in) ns.push_back(take(x, vals, "expand"));
  SymView s = as_sym();
  if (ns.size() != s.shape.size()) bad("expand", sstr(ns_in), sym_shape(), "need the same number of dims");
  for (auto& x : s.shape)
    if (is_c(x, 0)) return View::create_sym(ns, std::nullopt, 0, std::nullopt, vals);
  for (size_t i = 0; i < ns.size(); i++)
    if (!(same(s.shape[i], ns[i]) || (is_c(s.shape[i], 1) && is_c(s.strides[i], 0))))
      bad("expand", sstr(ns_in), sym_shape(), "only size-1 dims can expand; reshape first to add them");
  std::optional<SMask> nm;
  if (s.mask) {
    nm = SMask{};
    for (size_t i = 0; i < ns.size(); i++) {
      auto m = (*s.mask)[i];
      if (!same(s.shape[i], ns[i])) m = is_c(m.first, 0) && is_c(m.second, 1) ? std::pair<sint, sint>{0, ns[i]} : std::pair<sint, sint>{0, 0};
      nm->push_back(m);
    }
  }
  return View::create_sym(ns, s.strides, s.offset, nm, vals);
}

View View::pad_sym(const SMask& arg_in) const {
  VarBindings vals = sym ? sym->vals : VarBindings{};
  SMask arg;
  for (auto& [b, e] : arg_in) arg.emplace_back(take(b, vals, "pad"), take(e, vals, "pad"));
  std::vector<sint> shp = as_sym().shape;
  if (arg.size() != shp.size()) bad("pad", "", sym_shape(), "need one (before, after) pair per axis");
  bool any = false;
  for (auto& [b, e] : arg) {
    if (b.vmin() < 0 || e.vmin() < 0) bad("pad", "", sym_shape(), "pads must be >= 0 (use shrink to cut)");
    any |= !is_c(b, 0) || !is_c(e, 0);
  }
  if (!any) return *this;
  SMask window, mask;
  for (size_t i = 0; i < shp.size(); i++) {
    window.emplace_back(-arg[i].first, shp[i] + arg[i].second);
    mask.emplace_back(arg[i].first, shp[i] + arg[i].first);
  }
  return resize(*this, window, mask, vals);
}

View View::shrink_sym(const SMask& arg_in) const {
  VarBindings vals = sym ? sym->vals : VarBindings{};
  SMask arg;
  for (auto& [b, e] : arg_in) arg.emplace_back(take(b, vals, "shrink"), take(e, vals, "shrink"));
  std::vector<sint> shp = as_sym().shape;
  if (arg.size() != shp.size()) bad("shrink", "", sym_shape(), "need one (begin, end) pair per axis");
  for (size_t i = 0; i < shp.size(); i++) {
    if (!bound(arg[i].first, vals) || !bound(arg[i].second, vals) || !bound(shp[i], vals)) continue;   // checked when bound
    int64_t b = proxy(arg[i].first, vals), e = proxy(arg[i].second, vals), s = proxy(shp[i], vals);
    if (!(0 <= b && b <= e && e <= s) || arg[i].first.vmin() < 0)
      bad("shrink", "", sym_shape(), "need 0 <= begin <= end <= size on every axis (dim " + std::to_string(i) + " got (" +
          sstr(arg[i].first) + ", " + sstr(arg[i].second) + "))");
  }
  return resize(*this, arg, std::nullopt, vals);
}

// ---- int-argument ops on a symbolic view (called from view.cpp) ----

std::vector<sint> sym_lift_reshape(const View& v, const Shape& ns) {
  auto lifted = lift_reshape(v, ns);
  if (!lifted) throw Error("reshape: can't reshape " + sstr(v.sym_shape()) + " to " + to_str(ns) +
                           ": a symbolic dim must stay whole; reshape with the Variable in the new shape");
  for (auto& x : *lifted) x = x.with_bindings(v.sym->vals);
  return *lifted;
}
std::optional<View> sym_reshape_ints(const View& v, const Shape& ns) { return v.reshape_sym(sym_lift_reshape(v, ns)); }
View sym_expand_ints(const View& v, const Shape& ns) { return v.expand_sym(lift_dims(v, ns)); }
View sym_pad_ints(const View& v, const Mask& arg) { return v.pad_sym(lift_mask(v, arg, false)); }
View sym_shrink_ints(const View& v, const Mask& arg) { return v.shrink_sym(lift_mask(v, arg, true)); }

View sym_permute(const View& v, const std::vector<int>& axis) {
  SymView s = *v.sym;
  SymView n;
  std::optional<SMask> nm;
  if (s.mask) nm = SMask{};
  std::vector<sint> ns, nst;
  for (int a : axis) {
    ns.push_back(s.shape[a]);
    nst.push_back(s.strides[a]);
    if (s.mask) nm->push_back((*s.mask)[a]);
  }
  return View::create_sym(ns, nst, s.offset, nm, s.vals);
}

View sym_stride(const View& v, const std::vector<int64_t>& mul) {
  SymView s = *v.sym;
  std::vector<sint> ns, nst;
  sint off = s.offset;
  std::optional<SMask> nm;
  if (s.mask) nm = SMask{};
  for (size_t i = 0; i < mul.size(); i++) {
    int64_t m = mul[i], am = std::abs(m);
    const sint& sz = s.shape[i];
    if (am != 1 && !sz.is_const()) throw Error("stride: a step of " + std::to_string(m) + " on the symbolic dim " + sz.render() + " is not supported; only flips (-1)");
    nst.push_back(s.strides[i] * m);
    ns.push_back(am == 1 ? sz : sint((sz.const_value() + am - 1) / am));
    if (m < 0) off = off + (sz - 1) * s.strides[i];
    if (s.mask) {
      auto& [mx, my] = (*s.mask)[i];
      if (am == 1) nm->emplace_back(m > 0 ? mx : sz - my, m > 0 ? my : sz - mx);
      else {
        if (!mx.is_const() || !my.is_const()) throw Error("stride: a step on a symbolically masked dim is not supported");
        int64_t a = mx.const_value(), b = my.const_value(), z = sz.const_value();
        nm->emplace_back(floordiv((m > 0 ? a : z - b) + am - 1, am), floordiv((m > 0 ? b : z - a) + am - 1, am));
      }
    }
  }
  return View::create_sym(ns, nst, off, nm, s.vals);
}

// View.__add__ for symbolic views: the cases that need no index algebra
std::optional<View> sym_add(const View& vm2, const View& vm1) {
  VarBindings vals = vm2.sym ? vm2.sym->vals : VarBindings{};
  if (vm1.sym) merge_vals(vals, vm1.sym->vals, "View.__add__");
  if (vm2.contiguous) return vm1.bind(vals);
  if (vm1.contiguous) {
    auto s1 = vm1.sym_shape(), s2 = vm2.sym_shape();
    std::vector<sint> u1, u2;
    for (auto& x : s1) u1.push_back(x.unbind());
    for (auto& x : s2) u2.push_back(x.unbind());
    if (same(u1, u2)) return vm2.bind(vals);
    if (same(sprod(u1), sprod(u2)))
      if (auto r = vm2.bind(vals).reshape_sym(s1)) return r;
  }
  return std::nullopt;
}

bool sym_same(const sint& a, const sint& b) { return same(a.unbind(), b.unbind()); }

std::string sym_view_str(const View& v) {
  const SymView& s = *v.sym;
  std::string m = "None";
  if (s.mask) {
    m = "(";
    for (size_t i = 0; i < s.mask->size(); i++) m += (i ? ", (" : "(") + sstr((*s.mask)[i].first) + ", " + sstr((*s.mask)[i].second) + ")";
    m += s.mask->size() == 1 ? ",)" : ")";
  }
  return "View(shape=" + sstr(s.shape) + ", strides=" + sstr(s.strides) + ", offset=" + sstr(s.offset) + ", mask=" + m +
         ", contiguous=" + (v.contiguous ? "True" : "False") + ")";
}

bool sym_equal(const SymView& a, const SymView& b) {
  if (!same(a.shape, b.shape) || !same(a.strides, b.strides) || !same(a.offset, b.offset) || a.vals != b.vals) return false;
  if (a.mask.has_value() != b.mask.has_value()) return false;
  if (a.mask)
    for (size_t i = 0; i < a.mask->size(); i++)
      if (!same((*a.mask)[i].first, (*b.mask)[i].first) || !same((*a.mask)[i].second, (*b.mask)[i].second)) return false;
  return true;
}

size_t sym_hash(const SymView& s) {
  size_t h = 0x51u;
  auto mix = [&](const sint& x) { h ^= (x.is_const() ? std::hash<int64_t>()(x.const_value()) : Access::uop(x).hash()) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (auto& x : s.shape) mix(x);
  for (auto& x : s.strides) mix(x);
  mix(s.offset);
  if (s.mask) for (auto& [b, e] : *s.mask) mix(b), mix(e);
  for (auto& [k, v] : s.vals) h ^= std::hash<std::string>()(k) + std::hash<int64_t>()(v) + (h << 6);
  return h;
}

}  // namespace tg
