// ShapeTracker: a stack of views; movement ops touch only the last (tinygrad 0.9.2 shape/shapetracker.py).
#include <algorithm>

#include "access.hpp"
#include "shape/index_form.hpp"
#include "shape/shape_helpers.hpp"
#include "shape/shapetracker_arg.hpp"
#include "tg/helpers.hpp"
#include "uop/symbolic.hpp"
#include "uop/uop.hpp"

namespace tg {

ShapeTracker ShapeTracker::from_shape(const Shape& shape) { return ShapeTracker({View::create(shape)}); }

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
  if (getenv("MERGE_VIEW", 1))
    if (auto nv = views.back().reshape(new_shape)) return with_last(*this, *nv);
  ShapeTracker ret = *this;
  ret.views.push_back(View::create(new_shape));
  return ret;
}

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
  SymIndex s = analyze(*this);
  if (s.valid.is_false) return 0;
  return s.idx.max() + 1;
}

bool ShapeTracker::axis_is_masked(int axis) const {
  if (axis < 0 || axis >= static_cast<int>(shape().size()))
    throw Error("axis_is_masked: axis " + std::to_string(axis) + " out of range for " + to_str(shape()));
  if (has_zero(shape())) return false;
  return analyze(*this).valid.vars.count(axis) > 0;
}

// ---- UOps (the lowerer's st_to_uops_graph) ----

static void uop_view(const View& v, const std::vector<UOp>& idxs, UOp& iexpr, UOp& vexpr) {
  iexpr = UOp::const_(dtypes::int32, v.offset);
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
  std::vector<UOp> ids = idxs;
  if (ids.empty()) {
    for (size_t i = 0; i < st.shape().size(); i++)
      ids.emplace_back(Ops::DEFINE_VAR, dtypes::int32,
                       std::vector<UOp>{UOp::const_(dtypes::int32, int64_t{0}),
                                        UOp::const_(dtypes::int32, std::max<int64_t>(0, st.shape()[i] - 1))},
                       "idx" + std::to_string(i));
  }
  if (ids.size() != st.shape().size())
    throw Error("to_indexed_uops: got " + std::to_string(ids.size()) + " idxs for shape " + to_str(st.shape()) +
                "; pass one per axis");
  UOp idx, valid = UOp::const_(dtypes::bool_, true);
  uop_view(st.views.back(), ids, idx, valid);
  for (size_t k = st.views.size() - 1; k-- > 0;) {
    View v = st.views[k].minify();
    std::vector<UOp> vidx(v.shape.size());
    int64_t acc = 1;
    for (size_t d = v.shape.size(); d-- > 0;) {
      vidx[d] = (idx / acc) % v.shape[d];
      acc *= v.shape[d];
    }
    uop_view(v, vidx, idx, valid);
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
