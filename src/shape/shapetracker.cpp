// ShapeTracker: a stack of views; movement ops touch only the last (tinygrad 0.9.2 shape/shapetracker.py).
#include <algorithm>
#include <limits>

#include "access.hpp"
#include "shape/index_form.hpp"
#include "shape/shape_helpers.hpp"
#include "shape/shapetracker_arg.hpp"
#include "tg/helpers.hpp"
#include "uop/symbolic.hpp"
#include "uop/uop.hpp"

namespace tg {

ShapeTracker ShapeTracker::from_shape(const Shape& shape) { return ShapeTracker({View::create(shape)}); }
ShapeTracker ShapeTracker::from_sym_shape(const std::vector<sint>& shape) { return ShapeTracker({View::create_sym(shape)}); }

static ShapeTracker with_last(const ShapeTracker& st, View v) {
  ShapeTracker ret = st;
  ret.views.back() = std::move(v);
  return ret;
}

ShapeTracker ShapeTracker::pad(const Mask& arg) const { return with_last(*this, views.back().pad(arg)); }
ShapeTracker ShapeTracker::shrink(const Mask& arg) const { return with_last(*this, views.back().shrink(arg)); }
ShapeTracker ShapeTracker::expand(const Shape& s) const { return with_last(*this, views.back().expand(s)); }
ShapeTracker ShapeTracker::permute(const std::vector<int>& a) const { return with_last(*this, views.back().permute(a)); }
ShapeTracker ShapeTracker::stride(const std::vector<int64_t>& m) const { return with_last(*this, views.back().stride(m)); }

ShapeTracker ShapeTracker::reshape(const Shape& new_shape) const {
  if (views.back().sym) return reshape_sym(sym_lift_reshape(views.back(), new_shape));
  if (getenv("MERGE_VIEW", 1))
    if (auto nv = views.back().reshape(new_shape)) return with_last(*this, *nv);
  ShapeTracker ret = *this;
  ret.views.push_back(View::create(new_shape));
  return ret;
}

ShapeTracker ShapeTracker::reshape_sym(const std::vector<sint>& new_shape) const {
  if (getenv("MERGE_VIEW", 1))
    if (auto nv = views.back().reshape_sym(new_shape)) return with_last(*this, *nv);
  VarBindings vals = views.back().sym ? views.back().sym->vals : VarBindings{};
  ShapeTracker ret = *this;
  ret.views.push_back(View::create_sym(new_shape, std::nullopt, 0, std::nullopt, vals));
  return ret;
}
ShapeTracker ShapeTracker::expand_sym(const std::vector<sint>& s) const { return with_last(*this, views.back().expand_sym(s)); }
ShapeTracker ShapeTracker::pad_sym(const SMask& arg) const { return with_last(*this, views.back().pad_sym(arg)); }
ShapeTracker ShapeTracker::shrink_sym(const SMask& arg) const { return with_last(*this, views.back().shrink_sym(arg)); }

bool ShapeTracker::symbolic() const {
  for (const View& v : views)
    if (v.sym) return true;
  return false;
}
std::vector<sint> ShapeTracker::sym_shape() const { return views.back().sym_shape(); }
VarBindings ShapeTracker::var_vals() const {
  VarBindings out;
  for (const View& v : views) v.unbind(&out);
  return out;
}
ShapeTracker ShapeTracker::unbind(VarBindings* vals) const {
  if (!symbolic()) return *this;
  ShapeTracker ret = *this;
  for (View& v : ret.views) v = v.unbind(vals);
  return ret;
}
ShapeTracker ShapeTracker::bind(const VarBindings& vals) const {
  if (!symbolic()) return *this;
  ShapeTracker ret = *this;
  for (View& v : ret.views) v = v.bind(vals);
  return ret;
}
bool ShapeTracker::same_shape(const ShapeTracker& o) const {
  if (shape() != o.shape()) return false;
  const View &a = views.back(), &b = o.views.back();
  if (!a.sym && !b.sym) return true;
  auto sa = a.as_sym().shape, sb = b.as_sym().shape;
  for (size_t i = 0; i < sa.size(); i++)
    if (sa[i].is_const() != sb[i].is_const() || (!sa[i].is_const() && !sa[i].same(sb[i]))) return false;
  return true;
}
int64_t ShapeTracker::max_size() const { return views.back().max_size(); }

ShapeTracker ShapeTracker::operator+(const ShapeTracker& st) const {
  ShapeTracker ret = *this;
  for (const View& v : st.views) {   // one view at a time simplifies better
    ret.views.push_back(v);
    ret = ret.simplify();
  }
  return ret;
}

ShapeTracker ShapeTracker::simplify() const {
  ShapeTracker ret = *this;
  while (ret.views.size() >= 2) {
    auto merged = ret.views[ret.views.size() - 2] + ret.views.back();
    if (!merged) break;
    ret.views.pop_back();
    ret.views.back() = *merged;
  }
  return ret;
}

std::optional<ShapeTracker> ShapeTracker::invert(const Shape& out_shape) const {
  std::vector<View> inverted;
  for (size_t k = views.size(); k-- > 0;) {
    auto inv = views[k].invert(k > 0 ? views[k - 1].shape : out_shape);
    if (!inv) return std::nullopt;
    inverted.push_back(*inv);
  }
  return ShapeTracker(inverted).reshape(out_shape);
}

bool ShapeTracker::contiguous() const { return views.size() == 1 && views[0].contiguous; }

bool ShapeTracker::consecutive() const {
  return views.size() == 1 && !views[0].mask && views[0].strides == strides_for_shape(views[0].shape);
}

size_t ShapeTracker::size() const { return static_cast<size_t>(views.back().size()); }

// ---- index analysis (tinygrad's expr_idxs, on IndexForm) ----

struct SymIndex {
  IndexForm idx;
  ValidInfo valid;
};

static void view_expr(const View& v, const std::vector<IndexForm>& idxs, SymIndex& out) {
  out.idx = IndexForm::constant(v.offset);
  for (size_t i = 0; i < v.shape.size(); i++) {
    if (v.shape[i] != 1 && v.strides[i] != 0) out.idx = out.idx + idxs[i] * v.strides[i];
    if (v.mask) {
      out.valid.add_ge(idxs[i], (*v.mask)[i].first);
      out.valid.add_lt(idxs[i], (*v.mask)[i].second);
    }
  }
}

// Each lower view sees the flat index of the view above, unflattened into its (minified) shape.
static SymIndex analyze(const ShapeTracker& st) {
  std::vector<IndexForm> idxs;
  for (size_t i = 0; i < st.shape().size(); i++) idxs.push_back(IndexForm::var(static_cast<int>(i), st.shape()[i] - 1));
  SymIndex out;
  view_expr(st.views.back(), idxs, out);
  for (size_t k = st.views.size() - 1; k-- > 0;) {
    if (out.valid.is_false) { out.idx = IndexForm::constant(-1); break; }
    View v = st.views[k].minify();
    std::vector<IndexForm> vidx(v.shape.size());
    int64_t acc = 1;
    for (size_t d = v.shape.size(); d-- > 0;) {
      TG_ASSERT(v.shape[d] > 0, "zero-size view below a non-empty one: " + v.str());
      vidx[d] = out.idx.floordiv(acc).mod(v.shape[d]);
      acc *= v.shape[d];
    }
    view_expr(v, vidx, out);
  }
  return out;
}

static bool has_zero(const Shape& s) { return std::find(s.begin(), s.end(), 0) != s.end(); }

std::vector<std::optional<int64_t>> ShapeTracker::real_strides(bool ignore_valid) const {
  const View& last = views.back();
  if (symbolic()) {   // only a single unmasked view's constant strides are known for every value
    std::vector<std::optional<int64_t>> ret(shape().size());
    if (views.size() == 1 && !last.mask)
      for (size_t i = 0; i < ret.size(); i++)
        if (last.sym->strides[i].is_const()) ret[i] = last.sym->strides[i].const_value();
    return ret;
  }
  if ((views.size() == 1 && !last.mask) || has_zero(shape()))
    return std::vector<std::optional<int64_t>>(last.strides.begin(), last.strides.end());
  SymIndex s = analyze(*this);
  std::vector<std::optional<int64_t>> ret(shape().size());
  std::set<int> bad, idx_vars;
  for (auto& [a, k] : s.idx.terms) {
    if (a->kind == IndexAtom::VAR) ret[a->id] = k;
    else a->x.vars(bad);   // the axis is inside a div or mod: not a stride
  }
  s.idx.vars(idx_vars);
  for (int i = 0; i < static_cast<int>(ret.size()); i++) {
    if (bad.count(i) || (s.valid.vars.count(i) && !ignore_valid)) ret[i] = std::nullopt;
    else if (!idx_vars.count(i)) ret[i] = 0;
  }
  return ret;
}

std::vector<int> ShapeTracker::unit_stride_axes(bool ignore_valid) const {
  std::vector<int> ret;
  auto rs = real_strides(ignore_valid);
  for (size_t i = 0; i < rs.size(); i++) if (rs[i] == 1) ret.push_back(static_cast<int>(i));
  return ret;
}

int64_t ShapeTracker::real_size() const {
  if (has_zero(shape())) return 0;
  if (symbolic()) {   // the largest index at the variables' max
    int64_t hi = views[0].offset;
    const SymView s = views[0].as_sym();
    hi = s.offset.vmax();
    for (size_t i = 0; i < s.shape.size(); i++) hi += std::max<int64_t>(0, ((s.shape[i] - 1) * s.strides[i]).vmax());
    return hi + 1;
  }
  SymIndex s = analyze(*this);
  if (s.valid.is_false) return 0;
  return s.idx.max() + 1;
}

bool ShapeTracker::axis_is_masked(int axis) const {
  if (axis < 0 || axis >= static_cast<int>(shape().size()))
    throw Error("axis_is_masked: axis " + std::to_string(axis) + " out of range for " + to_str(shape()));
  if (has_zero(shape())) return false;
  if (symbolic()) {   // conservative: any view with a mask may mask any axis
    for (const View& v : views)
      if (v.mask) return true;
    return false;
  }
  return analyze(*this).valid.vars.count(axis) > 0;
}

// ---- UOps (the lowerer's st_to_uops_graph) ----

// A sint as an index UOp of dtype dt (Variables are DEFINE_VARs; kernel ASTs hold unbound trackers).
static UOp as_index(const sint& x, DType dt) {
  if (x.is_const()) return UOp::const_(dt, x.const_value());
  const UOp& u = Access::uop(x);
  return u->dtype == dt ? u : u.cast(dt);
}
static int64_t upper(const sint& x) { return x.is_const() ? x.const_value() : x.vmax(); }

// The largest |index| a view's math reaches: |offset| + sum |stride| * (dim - 1), and for an earlier
// view its size (the reshape into it divides by products of its dims; the last view's dims are the
// kernel's loops, each indexed on its own). Saturates instead of overflowing.
static int64_t view_reach(const View& v, bool last) {
  auto sat_add = [](int64_t a, int64_t b) { int64_t r; return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r; };
  auto sat_mul = [](int64_t a, int64_t b) { int64_t r; return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r; };
  int64_t reach = 0, size = 1;
  for (size_t i = 0; i < v.shape.size(); i++) {
    const int64_t dim = v.sym ? upper(v.sym->shape[i]) : v.shape[i];
    const int64_t st = v.sym ? upper(v.sym->strides[i]) : v.strides[i];
    reach = sat_add(reach, sat_mul(std::abs(st), std::max<int64_t>(dim - 1, 0)));
    size = sat_mul(size, dim);
  }
  reach = sat_add(reach, std::abs(v.sym ? upper(v.sym->offset) : v.offset));
  return last ? reach : std::max(reach, size);
}

DType index_dtype(const ShapeTracker& st) {
  for (size_t k = 0; k < st.views.size(); k++)
    if (view_reach(st.views[k], k + 1 == st.views.size()) > std::numeric_limits<int32_t>::max()) return dtypes::int64;
  return dtypes::int32;
}

static void uop_view_sym(const SymView& v, const std::vector<UOp>& idxs, DType dt, UOp& iexpr, UOp& vexpr) {
  auto u = [&](const sint& x) { return as_index(x, dt); };
  iexpr = u(v.offset);
  for (size_t i = 0; i < v.shape.size(); i++) {
    const UOp& idx = idxs[i];
    bool one = v.shape[i].is_const() && v.shape[i].const_value() == 1, zero = v.strides[i].is_const() && v.strides[i].const_value() == 0;
    if (!one && !zero) iexpr = iexpr + idx * u(v.strides[i]);
    if (!v.mask) continue;
    auto& [b, e] = (*v.mask)[i];
    if (!(b.is_const() && b.const_value() == 0)) vexpr = vexpr * idx.ge(u(b));
    if (!(e.is_const() && v.shape[i].is_const() && e.const_value() == v.shape[i].const_value()) && !(!e.is_const() && e.same(v.shape[i])))
      vexpr = vexpr * idx.lt(u(e));
  }
}

static void uop_view(const View& v, const std::vector<UOp>& idxs, DType dt, UOp& iexpr, UOp& vexpr) {
  if (v.sym) return uop_view_sym(*v.sym, idxs, dt, iexpr, vexpr);
  iexpr = UOp::const_(dt, v.offset);
  for (size_t i = 0; i < v.shape.size(); i++) {
    const UOp& idx = idxs[i];
    if (v.shape[i] != 1 && v.strides[i] != 0) iexpr = iexpr + idx * v.strides[i];
    if (!v.mask) continue;
    auto [b, e] = (*v.mask)[i];
    if (b != 0) vexpr = vexpr * idx.ge(idx.const_like(b));
    if (e != v.shape[i]) vexpr = vexpr * idx.lt(idx.const_like(e));
  }
}

std::pair<UOp, UOp> to_indexed_uops(const ShapeTracker& st, const std::vector<UOp>& idxs) {
  // int32 unless a view's index can pass it: then int64 from the leaves up (the int32 idxs cast), so
  // no product or constant wraps (a stride of 2^32 truncated to 0 dropped gidx0); the symbolic pass
  // narrows back to int32 whatever its bounds show fits (uop/symbolic.cpp narrow_index)
  const DType dt = index_dtype(st);
  std::vector<UOp> ids = idxs;
  if (ids.empty()) {
    for (size_t i = 0; i < st.shape().size(); i++) {
      int64_t hi = st.views.back().sym ? st.views.back().sym->shape[i].vmax() : st.shape()[i];
      ids.emplace_back(Ops::DEFINE_VAR, dtypes::int32,
                       std::vector<UOp>{UOp::const_(dtypes::int32, int64_t{0}),
                                        UOp::const_(dtypes::int32, std::max<int64_t>(0, hi - 1))},
                       "idx" + std::to_string(i));
    }
  }
  if (ids.size() != st.shape().size())
    throw Error("to_indexed_uops: got " + std::to_string(ids.size()) + " idxs for shape " + to_str(st.shape()) +
                "; pass one per axis");
  for (UOp& i : ids)
    if (i->dtype != dt) i = i.cast(dt);
  UOp idx, valid = UOp::const_(dtypes::bool_, true);
  uop_view(st.views.back(), ids, dt, idx, valid);
  for (size_t k = st.views.size() - 1; k-- > 0;) {
    View v = st.views[k].minify();
    std::vector<UOp> vidx(v.shape.size());
    if (v.sym) {
      UOp acc = UOp::const_(dt, int64_t{1});
      for (size_t d = v.shape.size(); d-- > 0;) {
        vidx[d] = (idx / acc) % as_index(v.sym->shape[d], dt);
        acc = acc * as_index(v.sym->shape[d], dt);
      }
    } else {
      int64_t acc = 1;
      for (size_t d = v.shape.size(); d-- > 0;) {
        vidx[d] = (idx / acc) % v.shape[d];
        acc *= v.shape[d];
      }
    }
    uop_view(v, vidx, dt, idx, valid);
  }
  return {idx, valid};
}

std::string ShapeTracker::str() const {
  std::string s = "ShapeTracker(views=(";
  for (size_t i = 0; i < views.size(); i++) s += (i ? ", " : "") + views[i].str();
  return s + (views.size() == 1 ? ",))" : "))");
}

size_t ShapeTracker::hash() const {
  size_t h = views.size();
  for (const View& v : views) h ^= v.hash() + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

std::pair<Expr, Expr> ShapeTracker::expr_idxs() const {
  auto [idx, valid] = to_indexed_uops(*this);
  return {Access::expr(tg::simplify(idx)), Access::expr(tg::simplify(valid))};
}

}  // namespace tg
