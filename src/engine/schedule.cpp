// The scheduler (tinygrad 0.9.2 engine/schedule.py): decide which LazyBuffers realize, group them
// into kernels, lower each group to a UOp AST and order the kernels.
//   1. _recurse_lb walks the graph: realizes metaops, forced realizes, expanded bases, copy sources.
//   2. pads through unsafe ops realize; each reduce pairs with the elementwise children it can fuse.
//   3. each output group lowers to SINK(STORE...) (_lower_lazybuffer), then a BFS orders the items.
#include "engine/schedule.hpp"

#include <algorithm>
#include <deque>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "engine/graph.hpp"
#include "engine/profile.hpp"
#include "engine/realize.hpp"
#include "engine/refine_views.hpp"
#include "lazy/metadata.hpp"
#include "runtime/buffer.hpp"
#include "shape/shape_helpers.hpp"
#include "shape/shapetracker_arg.hpp"
#include "tg/helpers.hpp"

namespace tg {

namespace {

using LB = LazyBuffer*;

// An insertion-ordered set of LazyBuffers (tinygrad keeps these in dicts; order decides grouping).
class LBSet {
 public:
  bool insert(LB k) {
    if (!idx_.emplace(k, items_.size()).second) return false;
    items_.push_back(k);
    return true;
  }
  bool contains(LB k) const { return idx_.count(k) > 0; }
  void erase(LB k) {
    auto it = idx_.find(k);
    if (it == idx_.end()) return;
    items_[it->second] = nullptr;
    idx_.erase(it);
  }
  size_t size() const { return idx_.size(); }
  bool empty() const { return idx_.empty(); }
  // live items in order; safe against inserts during the walk
  template <class F> void each(F&& f) const {
    for (size_t i = 0; i < items_.size(); i++) if (LB k = items_[i]) f(k);
  }
  std::vector<LB> list() const {
    std::vector<LB> ret;
    each([&](LB k) { ret.push_back(k); });
    return ret;
  }
 private:
  std::vector<LB> items_;
  std::unordered_map<LB, size_t> idx_;
};

// (buffer, view) keys of the lowering caches
struct StKey {
  LB lb;
  ShapeTracker st;
  bool operator==(const StKey& o) const { return lb == o.lb && st == o.st; }
};
struct StKeyHash {
  size_t operator()(const StKey& k) const { return std::hash<const void*>()(k.lb) * 31 + k.st.hash(); }
};

struct ReduceInfo {
  ShapeTracker input_st;
  std::vector<int64_t> axis;
};

// move the reduce axes last: (permuted tracker, reduced dims)
std::pair<ShapeTracker, Shape> permute_reduce(const ShapeTracker& input_st, const std::vector<int64_t>& axis) {
  std::vector<int> perm;
  for (int i = 0; i < static_cast<int>(input_st.shape().size()); i++)
    if (std::find(axis.begin(), axis.end(), i) == axis.end()) perm.push_back(i);
  for (int64_t a : axis) perm.push_back(static_cast<int>(a));
  ShapeTracker tmp = input_st.permute(perm);
  return {tmp, Shape(tmp.shape().end() - static_cast<int64_t>(axis.size()), tmp.shape().end())};
}

bool is_unsafe_pad(const LazyBuffer& b) {
  if (auto u = std::get_if<UnaryOps>(&b.op)) return is_unsafe_pad_op(*u);
  if (auto o = std::get_if<BinaryOps>(&b.op)) return is_unsafe_pad_op(*o);
  return false;
}

UOp define_global(DType dt, size_t idx) { return UOp(Ops::DEFINE_GLOBAL, dt.ptr_to(), {}, static_cast<int64_t>(idx)); }

Arg const_arg(const ConstType& v) {
  return std::visit([](auto x) -> Arg { return x; }, v);
}

// The symbolic form of the view-after-reduce rewrite below: st's views get the (permuted) reduce dims appended.
ShapeTracker sym_reduce_view(const ShapeTracker& input_st, const ShapeTracker& st, const std::vector<int64_t>& axis) {
  auto [tmp, unused] = permute_reduce(input_st, axis);
  (void)unused;
  std::vector<sint> full = tmp.sym_shape();
  std::vector<sint> rshape(full.end() - static_cast<int64_t>(axis.size()), full.end());
  sint prshape = 1;
  for (auto& x : rshape) prshape = prshape * x;
  std::vector<sint> rstrides(rshape.size(), 0);
  sint acc = 1;
  for (size_t i = rshape.size(); i-- > 0;) {
    rstrides[i] = rshape[i].is_const() && rshape[i].const_value() == 1 ? sint(0) : acc;
    acc = acc * rshape[i];
  }
  std::vector<View> nv;
  for (const View& v : st.views) {
    SymView s = v.as_sym();
    VarBindings vals = s.vals;
    for (auto& [k, x] : tmp.var_vals()) vals.emplace(k, x);
    std::vector<sint> shape = s.shape, strides;
    for (auto& x : rshape) shape.push_back(x.unbind());
    for (auto& x : s.strides) strides.push_back(x * prshape.unbind());
    for (auto& x : rstrides) strides.push_back(x.unbind());
    std::optional<SMask> mask;
    if (s.mask) {
      mask = *s.mask;
      for (auto& x : rshape) mask->emplace_back(0, x.unbind());
    }
    nv.push_back(View::create_sym(shape, strides, s.offset * prshape.unbind(), mask, vals));
  }
  return tmp + ShapeTracker(nv);
}

// The view st after a reduce (over `axis` of input_st) as a view of the reduce's input: st's views
// get the permuted reduce dims appended, which are the new reduce axes (the last ones).
std::pair<ShapeTracker, std::vector<int64_t>> view_into_reduce(const ShapeTracker& input_st, const ShapeTracker& st,
                                                              const std::vector<int64_t>& axis) {
  ShapeTracker in;
  if (st.symbolic() || input_st.symbolic()) {
    in = sym_reduce_view(input_st, st, axis);
  } else {
    auto [tmp, rshape] = permute_reduce(input_st, axis);
    int64_t prshape = prod(rshape);
    std::vector<int64_t> rstrides = strides_for_shape(rshape);
    std::vector<View> nv;
    for (const View& v : st.views) {
      Shape shape = v.shape;
      shape.insert(shape.end(), rshape.begin(), rshape.end());
      std::vector<int64_t> strides;
      for (int64_t s : v.strides) strides.push_back(s * prshape);
      strides.insert(strides.end(), rstrides.begin(), rstrides.end());
      std::optional<Mask> mask;
      if (v.mask) {
        mask = *v.mask;
        for (int64_t s : rshape) mask->emplace_back(0, s);
      }
      nv.push_back(View::create(shape, strides, v.offset * prshape, mask));
    }
    in = tmp + ShapeTracker(nv);
  }
  std::vector<int64_t> raxis;
  const size_t nd = in.shape().size();
  for (size_t i = nd - axis.size(); i < nd; i++) raxis.push_back(static_cast<int64_t>(i));
  return {in, raxis};
}

// The last two views as one where the last only inserts and expands dims of the one before it (each of
// its strided dims is a dim of the same size there, at that dim's row-major stride; offset 0, no mask):
// symbolic views don't merge in View::operator+ (a softmax's probabilities over a KV cache's keys read
// by .v with the head dim broadcast). Otherwise st as it is.
bool same_dims(const std::vector<sint>& a, const std::vector<sint>& b);
ShapeTracker fold_broadcast_view(const ShapeTracker& st) {
  if (st.views.size() < 2 || st.views.back().mask) return st;
  const SymView v0 = st.views[st.views.size() - 2].as_sym(), v1 = st.views.back().as_sym();
  auto is = [](const sint& x, int64_t v) { return x.is_const() && x.const_value() == v; };
  if (!is(v1.offset, 0)) return st;
  const size_t n0 = v0.shape.size();
  std::vector<sint> c(n0, 1);   // row-major strides of v0's shape
  for (size_t m = n0; m-- > 1;) c[m - 1] = c[m] * v0.shape[m];
  std::vector<char> used(n0, 0);
  std::vector<sint> strides;
  SMask mask;
  for (size_t j = 0; j < v1.shape.size(); j++) {
    if (is(v1.strides[j], 0) || is(v1.shape[j], 1)) {
      strides.push_back(0), mask.emplace_back(sint(0), v1.shape[j]);
      continue;
    }
    std::optional<size_t> hit;
    for (size_t m = 0; m < n0 && !hit; m++)
      if (!used[m] && same_dims({v0.shape[m]}, {v1.shape[j]}) && same_dims({c[m]}, {v1.strides[j]})) hit = m;
    if (!hit) return st;
    used[*hit] = 1;
    strides.push_back(v0.strides[*hit]);
    mask.push_back(v0.mask ? (*v0.mask)[*hit] : std::pair<sint, sint>{sint(0), v1.shape[j]});
  }
  // the dims of v0 it doesn't index stay at 0, which their mask must hold
  for (size_t m = 0; m < n0; m++)
    if (!used[m] && v0.mask && !is((*v0.mask)[m].first, 0)) return st;
  VarBindings vals = v0.vals;
  for (auto& [k, x] : v1.vals) vals.emplace(k, x);
  std::vector<View> views(st.views.begin(), st.views.end() - 2);
  views.push_back(View::create_sym(v1.shape, strides, v0.offset, v0.mask ? std::optional<SMask>(mask) : std::nullopt, vals));
  return ShapeTracker(views);
}

// A group of LazyBuffers realized by one ScheduleItem, before buffers are attached.
struct LBScheduleItem {
  MetaOps kind = MetaOps::KERNEL;
  UOp ast;
  std::vector<LazyBufferPtr> outputs, inputs;
  VarBindings var_vals;   // values of the Variables in the (unbound) ast
  std::vector<const Metadata*> metadata;   // every op it fuses, in order of first use
};

// ---------------------------------------------------------------- lowering one group (_lower_lazybuffer)

// A fused arange (FUSE_ARANGE) that can't be expressed in its consumer's kernel: the views don't fit
// the reduces (reduce views of another rank: a tg::Error from the ShapeTracker) or the reduces don't
// merge. Only then does the scheduler realize the arange on its own and lower the group again; internal
// assertions and errors in groups without a fused arange surface as they are.
struct UnfusableArange : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A row group (several reduces over the same rows in one kernel, see merge_row_groups) whose
// reads of a reduce don't broadcast it along its own rows: the scheduler splits the group again.
struct UnfusableRow : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// dims equal as expressions (a symbolic dim only matches the same expression)
bool same_dims(const std::vector<sint>& a, const std::vector<sint>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++) {
    if (a[i].is_const() != b[i].is_const()) return false;
    if (a[i].is_const() ? a[i].const_value() != b[i].const_value() : !a[i].same(b[i])) return false;
  }
  return true;
}

// The rows of a row group: every reduce in it reads full shape `full` and reduces `axis`. Dims may be
// symbolic (a KV-cache decode step's key length): the kernel loops to the bound expression.
struct RowSig {
  std::vector<sint> full;
  std::vector<int64_t> axis;
  bool embedding = false;   // the group took in reduces of rows it embeds (lowered by embedded_source_view)
  bool operator==(const RowSig& o) const { return axis == o.axis && same_dims(full, o.full); }
  std::vector<sint> reduced() const {
    std::vector<sint> r = full;
    for (int64_t a : axis) r[a] = 1;
    return r;
  }
  bool symbolic() const { return std::any_of(full.begin(), full.end(), [](const sint& d) { return !d.is_const(); }); }
  // whether a buffer of this shape is the full rows or one value per row (any shape of as many elements)
  bool is_full(const std::vector<sint>& s) const { return same_dims(s, full); }
  bool is_reduced(const std::vector<sint>& s) const {
    const std::vector<sint> r = reduced();
    if (same_dims(s, r)) return true;
    auto all_const = [](const std::vector<sint>& v) { return std::all_of(v.begin(), v.end(), [](const sint& d) { return d.is_const(); }); };
    if (!all_const(s) || !all_const(r)) return false;
    int64_t ns = 1, nr = 1;
    for (auto& d : s) ns *= d.const_value();
    for (auto& d : r) nr *= d.const_value();
    return ns == nr;
  }
  std::vector<sint> lengths() const {   // the rows' dims, in axis order
    std::vector<sint> l;
    for (int64_t a : axis) l.push_back(full[a]);
    return l;
  }
  int64_t rows() const {   // how many rows (at their largest)
    int64_t n = 1;
    for (auto& d : reduced()) n *= d.vmax();
    return n;
  }
  // rows of `a` fit in these rows with dims of their own broadcast (a layernorm's rows in its matmul's,
  // whose rows add the output column; a softmax's in its .v's, which add the head dim): same row lengths
  bool embeds(const RowSig& a) const {
    return a.axis.size() == axis.size() && full.size() >= a.full.size() && rows() > a.rows() && same_dims(a.lengths(), lengths());
  }
  int64_t max_row() const {   // the row's length at its largest
    int64_t n = 1;
    for (int64_t a : axis) n *= full[a].vmax();
    return n;
  }
};

class GroupLowerer {
 public:
  GroupLowerer(const std::vector<LB>& outs, const LBSet& realizes, bool reads_fused_arange, std::optional<RowSig> row = std::nullopt)
      : outs_(outs), realizes_(realizes), reads_fused_arange_(reads_fused_arange), row_(std::move(row)) {}

  LBScheduleItem lower() {
    LB out = outs_[0];
    LBScheduleItem si;
    for (LB o : outs_) si.outputs.push_back(o->shared_from_this());
    if (out->op_is(MetaOps::COPY) && getenv("USE_COPY_KERNEL") && dev_kind(out->device) == dev_kind(out->srcs[0]->device)) {
      ShapeTracker st = ShapeTracker::from_shape({std::get<int64_t>(out->arg)});
      UOp rd(Ops::LOAD, dtypes::uint8, {define_global(dtypes::uint8, 1), sst(st)});
      si.ast = UOp(Ops::SINK, dtypes::void_, {UOp(Ops::STORE, dtypes::void_, {define_global(dtypes::uint8, 0), sst(st), rd})});
      si.inputs.push_back(out->srcs[0]->base());
      add_metadata(out);
      si.metadata = std::move(metadata_);
      return si;
    }
    for (MetaOps m : {MetaOps::CUSTOM, MetaOps::COPY, MetaOps::EMPTY, MetaOps::VIEW}) {
      if (!out->op_is(m)) continue;
      si.kind = m;
      for (auto& x : out->srcs) si.inputs.push_back(x->base());
      if (m == MetaOps::COPY && out->st.symbolic()) (void)out->st.unbind(&si.var_vals);   // the copy sees the values
      add_metadata(out);
      si.metadata = std::move(metadata_);
      return si;
    }
    try {
      if (schedule_lower_hook) schedule_lower_hook(reads_fused_arange_, row_.has_value());
      si.ast = refine_views(lower_kernel());
    } catch (const Error& e) {   // a view that doesn't fit the reduces; internal assertions are not caught
      if (reads_fused_arange_) throw UnfusableArange(e.what());
      throw;
    }
    si.var_vals = var_vals_;
    for (LB x : inputs_) si.inputs.push_back(x->shared_from_this());
    si.metadata = std::move(metadata_);
    return si;
  }

 private:
  UOp lower_kernel() {
    if (row_) return lower_row_kernel();
    for (LB o : outs_) recurse_reduceops(o, o->st);
    pad_reduces();
    for (size_t i = 0; i < outs_.size(); i++)
      if (outs_[i]->op_is(MetaOps::ASSIGN)) assign_targets_[outs_[i]->srcs[1].get()] = i;
    std::vector<UOp> stores;
    for (size_t i = 0; i < outs_.size(); i++) {
      LB o = outs_[i];
      ShapeTracker output_st = o->fresh_st();
      if (!rinfo_.empty()) {
        std::vector<sint> oshape = rinfo_.back().second.input_st.sym_shape();
        for (int64_t a : rinfo_.back().second.axis) oshape[a] = 1;
        output_st = ShapeTracker::from_sym_shape(oshape);
      }
      UOp val = lazyop(o, output_st);
      if (o->op_is(MetaOps::ASSIGN)) {
        if (auto target_st = std::get_if<ShapeTracker>(&o->arg)) {
          if (target_st->shape() != o->shape())
            throw Error("assign: the target view " + to_str(target_st->shape()) + " must keep the output shape " + to_str(o->shape()));
          output_st = target_st->reshape(output_st.shape());
        }
      }
      output_st = output_st.simplify();
      stores.push_back(UOp(Ops::STORE, dtypes::void_, {define_global(o->dtype, i), sst(output_st), val}));
    }
    return UOp(Ops::SINK, dtypes::void_, stores);
  }

  // A row kernel: each output is stored at the full shape or the reduced one (any shape of as many
  // elements: a row sum without keepdim); every reduce reads its input at the full shape and is
  // broadcast back along the rows (lazyop checks the views). A fused arange (cross-entropy's one-hot)
  // is a reduce of its own nested in the rows' loops: its reduce dims follow the rows' (ext_ of them).
  UOp lower_row_kernel() {
    ext_ = row_arange_dims();
    for (size_t i = 0; i < outs_.size(); i++)
      if (outs_[i]->op_is(MetaOps::ASSIGN)) assign_targets_[outs_[i]->srcs[1].get()] = i;
    std::vector<UOp> stores;
    for (size_t i = 0; i < outs_.size(); i++) {
      LB o = outs_[i];
      const std::vector<sint> os = o->sym_shape();
      const bool full = row_->is_full(os);
      if (!full && !row_->is_reduced(os)) throw UnfusableRow("row kernel output " + o->str());
      const std::vector<sint> at = row_ext(full ? row_->full : row_->reduced());
      ShapeTracker out = ShapeTracker::from_sym_shape(at);
      UOp val = lazyop(o, same_dims(os, at) ? out : o->fresh_st().reshape_sym(at));
      // an assign stores through its target's view (a KV cache's rows), as lower_kernel does
      if (auto target_st = o->op_is(MetaOps::ASSIGN) ? std::get_if<ShapeTracker>(&o->arg) : nullptr) {
        if (!same_dims(target_st->sym_shape(), os)) throw UnfusableRow("row kernel assign through " + target_st->str());
        out = target_st->reshape_sym(at).simplify();
      }
      stores.push_back(UOp(Ops::STORE, dtypes::void_, {define_global(o->dtype, i), sst(out), val}));
    }
    return UOp(Ops::SINK, dtypes::void_, stores);
  }
  std::vector<sint> row_ext(std::vector<sint> s) const { return s.insert(s.end(), ext_, sint(1)), s; }
  static bool is_arange(LB b) { return b->op_is(ReduceOps::SUM) && b->srcs[0]->base()->op_is(MetaOps::CONST); }
  bool is_row_reduce(LB r) const { return std::get<std::vector<int64_t>>(r->arg) == row_->axis && row_->is_full(r->srcs[0]->sym_shape()); }
  // a reduce of rows that fit in the kernel's with dims of their own broadcast (RowSig::embeds)
  bool is_embedded_reduce(LB r) const {
    if (!row_->embedding || (!r->op_is(ReduceOps::SUM) && !r->op_is(ReduceOps::MAX))) return false;
    return row_->embeds(RowSig{r->srcs[0]->sym_shape(), std::get<std::vector<int64_t>>(r->arg)});
  }
  // The source view of an embedded reduce r read through st (the kernel's full or reduced shape, the
  // value broadcast along the kernel's rows): r's rows laid along the kernel's row axes, so a reduce
  // over them gives r at every index of the kernel, recomputed for each index of the dims r lacks.
  ShapeTracker embedded_source_view(LB r, const ShapeTracker& st_in) const {
    const ShapeTracker st = fold_broadcast_view(st_in.simplify());
    const std::vector<sint> ss = st.sym_shape(), full = row_->full, red = row_->reduced();
    if (ext_ != 0 || (!same_dims(ss, full) && !same_dims(ss, red))) throw UnfusableRow("row kernel reads " + r->str() + " through " + st.str());
    ShapeTracker one = st;
    if (same_dims(ss, full)) {
      SMask m;
      for (size_t i = 0; i < full.size(); i++) m.emplace_back(sint(0), std::find(row_->axis.begin(), row_->axis.end(), int64_t(i)) != row_->axis.end() ? sint(1) : full[i]);
      one = st.shrink_sym(m);
      // the value must not change along the kernel's rows
      if (one.expand_sym(full).simplify().unbind() != st.simplify().unbind()) throw UnfusableRow("row kernel reads " + r->str() + " along its rows through " + st.str());
    }
    auto [in, raxis] = view_into_reduce(r->srcs[0]->fresh_st(), one, std::get<std::vector<int64_t>>(r->arg));
    // in: the reduced shape and r's row dims after it; move those into the kernel's row axes
    const int nd = static_cast<int>(full.size());
    std::vector<int> perm;
    for (int i = 0; i < nd; i++) {
      auto it = std::find(row_->axis.begin(), row_->axis.end(), int64_t(i));
      perm.push_back(it == row_->axis.end() ? i : nd + static_cast<int>(it - row_->axis.begin()));
    }
    for (int64_t a : row_->axis) perm.push_back(static_cast<int>(a));
    return in.permute(perm).reshape_sym(full);
  }
  // the reduce dims of the fused aranges the row kernel computes (all alike), 0 when there are none
  size_t row_arange_dims() const {
    // the aranges' reduce dims share the kernel's trailing dims: they must have the same sizes, not only
    // the same count (interpolate's aranges over 4x5 and 9x15 gave zeros)
    std::optional<Shape> dims;
    bool has_max = false;
    std::vector<LB> stack(outs_.begin(), outs_.end());
    std::unordered_set<LB> seen;
    while (!stack.empty()) {
      LB b = stack.back();
      stack.pop_back();
      if (!seen.insert(b).second || b->realized() || (realizes_.contains(b) && !is_output(b))) continue;
      has_max = has_max || (b->op_is(ReduceOps::MAX) && is_row_reduce(b));
      if (b->is_reduce() && !is_row_reduce(b) && !is_embedded_reduce(b)) {
        Shape rshape;
        for (int64_t a : std::get<std::vector<int64_t>>(b->arg)) rshape.push_back(b->srcs[0]->shape()[a]);
        if (!is_arange(b) || (dims && *dims != rshape)) throw UnfusableRow("row kernel reduce " + b->str());
        dims = rshape;
        continue;
      }
      for (auto& x : b->srcs) stack.push_back(x->base().get());
    }
    // only a (log-)softmax row takes in an arange (cross-entropy's one-hot); other gathers
    // (interpolate's) keep their kernels, whose nested reduces the row kernel's codegen doesn't cover
    if (dims && !has_max) throw UnfusableRow("row kernel with an arange and no row max");
    return dims ? dims->size() : 0;
  }
  // st reads a reduce of the row kernel as its result broadcast along the rows (or as it is)
  bool row_view_ok(LB r, const ShapeTracker& st) const {
    if (!is_row_reduce(r)) return false;
    const ShapeTracker red = ShapeTracker::from_sym_shape(row_ext(row_->reduced()));
    const std::vector<sint> ss = st.sym_shape(), full = row_ext(row_->full);
    if (same_dims(ss, red.sym_shape())) return st.simplify().unbind() == red.unbind();
    return same_dims(ss, full) && st.simplify().unbind() == red.expand_sym(full).simplify().unbind();
  }
  // a fused arange read through st (the kernel's shape): its reduce dims take the place of the ext_ 1s
  UOp row_arange(LB buf, const ShapeTracker& st) {
    std::vector<sint> s = st.sym_shape();
    if (s.size() < ext_ || std::any_of(s.end() - static_cast<int64_t>(ext_), s.end(), [](const sint& d) { return !d.is_const() || d.const_value() != 1; }))
      throw UnfusableRow("row kernel reads the arange " + buf->str() + " through " + st.str());
    s.erase(s.end() - static_cast<int64_t>(ext_), s.end());
    auto [in, axis] = view_into_reduce(buf->srcs[0]->fresh_st(), ext_ ? st.reshape_sym(s) : st, std::get<std::vector<int64_t>>(buf->arg));
    return UOp(Ops::REDUCE_AXIS, buf->dtype, {lazyop(buf->srcs[0].get(), in)}, ReduceArg{ReduceOps::SUM, axis});
  }

  VarBindings var_vals_;
  // kernel ASTs hold unbound trackers (one kernel per expression); the values go with the item
  UOp sst(const ShapeTracker& st) { return st_uop(st.unbind(&var_vals_)); }
  // a symbolic CONST's value: the unbound expression (int32, over DEFINE_VARs); its values join the item's
  UOp unbind_value(const sint& v) {
    for (auto& [k, x] : v.bindings()) {
      auto [it, fresh] = var_vals_.emplace(k, x);
      if (!fresh && it->second != x)
        throw Error("schedule: Variable " + k + " is bound to both " + std::to_string(it->second) + " and " + std::to_string(x) +
                    " in one kernel; bind it to one value");
    }
    const UOp& u = Access::uop(v.unbind());
    return u->dtype == dtypes::int32 ? u : u.cast(dtypes::int32);
  }

  const std::vector<LB>& outs_;
  const LBSet& realizes_;
  const bool reads_fused_arange_;   // the group computes a fused arange (FUSE_ARANGE) in its kernel
  const std::optional<RowSig> row_;   // a row kernel (merge_row_groups)
  size_t ext_ = 0;                     // a row kernel's trailing dims for its fused aranges' reduces
  // reduce_info is ordered: the last entry gives the kernel's output shape
  std::vector<std::pair<StKey, ReduceInfo>> rinfo_;
  std::unordered_map<StKey, size_t, StKeyHash> rinfo_idx_;
  std::unordered_map<StKey, std::optional<StKey>, StKeyHash> seen_ops_;
  std::unordered_map<StKey, UOp, StKeyHash> cache_;
  std::unordered_map<LB, size_t> assign_targets_;   // target base -> output index of its ASSIGN
  std::vector<LB> inputs_;
  std::unordered_map<LB, size_t> input_idx_;
  std::vector<const Metadata*> metadata_;

  void add_metadata(LB b) {
    if (b->metadata && std::find(metadata_.begin(), metadata_.end(), b->metadata) == metadata_.end()) metadata_.push_back(b->metadata);
  }

  static std::string dev_kind(const std::string& d) { return d.substr(0, d.find(':')); }
  bool is_output(LB b) const { return std::find(outs_.begin(), outs_.end(), b) != outs_.end(); }

  ReduceInfo* find_rinfo(const StKey& k) {
    auto it = rinfo_idx_.find(k);
    return it == rinfo_idx_.end() ? nullptr : &rinfo_[it->second].second;
  }
  void set_rinfo(const StKey& k, ReduceInfo v) {
    if (auto p = find_rinfo(k)) { *p = std::move(v); return; }
    rinfo_idx_.emplace(k, rinfo_.size());
    rinfo_.emplace_back(k, std::move(v));
  }

  // Push the movement ops between reduces into the reduce inputs (_recurse_reduceops).
  std::optional<StKey> recurse_reduceops(LB buf, ShapeTracker st) {
    StKey key{buf, st};
    if (auto it = seen_ops_.find(key); it != seen_ops_.end()) return it->second;
    LB base = buf->base().get();
    if (base->realized() || (realizes_.contains(base) && !is_output(base))) return std::nullopt;
    if (!buf->is_base()) { st = buf->st + st; buf = base; }
    ShapeTracker input_st = buf->is_reduce() ? buf->srcs[0]->fresh_st() : st;
    std::optional<StKey> top_reduce;
    for (auto& x : buf->srcs)
      if (auto r = recurse_reduceops(x.get(), input_st)) top_reduce = r;
    if (!buf->is_reduce()) return seen_ops_.emplace(StKey{buf, st}, top_reduce).first->second;

    std::vector<int64_t> axis = std::get<std::vector<int64_t>>(buf->arg);
    if (!st.contiguous()) {
      std::tie(input_st, axis) = view_into_reduce(input_st, st, axis);
    } else if (top_reduce) {
      ReduceInfo top = *find_rinfo(*top_reduce);
      LazyBuffer& src = *buf->srcs[0];
      // (symbolic trackers don't take part: their keys wouldn't line up after the merge)
      if (!src.is_base() && src.base().get() == top_reduce->lb && buf->op == top_reduce->lb->op && !st.symbolic() &&
          !top.input_st.symbolic() && !top_reduce->st.symbolic()) {
        // merge this reduce into its parent reduce
        std::vector<int64_t> new_axis = axis;
        new_axis.insert(new_axis.end(), top.axis.begin(), top.axis.end());
        ShapeTracker new_st = (top_reduce->st + st).reshape(reduce_shape(top.input_st.shape(), new_axis));
        set_rinfo(StKey{top_reduce->lb, new_st}, ReduceInfo{top.input_st, new_axis});
        return std::nullopt;
      }
      Shape rs = top.input_st.shape();
      for (int64_t a : top.axis) rs[a] = 1;
      input_st = input_st.reshape(rs);
    }
    st = st.reshape(reduce_shape(input_st.shape(), axis));
    set_rinfo(StKey{buf, st}, ReduceInfo{input_st, axis});
    return StKey{buf, st};
  }

  // pad all reduce inputs to the largest size of each dim
  void pad_reduces() {
    if (rinfo_.empty()) return;
    size_t nd = SIZE_MAX;
    for (auto& [k, ri] : rinfo_) nd = std::min(nd, ri.input_st.shape().size());
    for (size_t i = 0; i < nd; i++) {
      std::vector<int64_t> dims;
      for (auto& [k, ri] : rinfo_) dims.push_back(ri.input_st.shape()[i]);
      std::sort(dims.begin(), dims.end());
      dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
      if (dims.size() == 1 || (dims.size() == 2 && dims[0] == 1)) continue;
      for (auto& [k, ri] : rinfo_) {
        int64_t dim = ri.input_st.shape()[i];
        if (dim > 1 && dim != dims.back()) {
          Mask arg(ri.input_st.shape().size(), {0, 0});
          arg[i] = {0, dims.back() - dim};
          ri.input_st = ri.input_st.pad(arg);
        }
      }
    }
  }

  UOp load_or_const(LB buf, const ShapeTracker& st_in) {
    ShapeTracker st = st_in.simplify();
    if (buf->op_is(MetaOps::CONST) && !buf->realized()) {
      if (auto v = std::get_if<sint>(&buf->arg)) return UOp(Ops::CONST, buf->dtype, {sst(st), unbind_value(*v)});
      return UOp(Ops::CONST, buf->dtype, {sst(st)}, const_arg(std::get<ConstType>(buf->arg)));
    }
    if (auto it = assign_targets_.find(buf); it != assign_targets_.end()) {
      // the target is read and written in place: only an unpermuted (possibly shrunk) view is safe
      bool ok = st.contiguous();
      if (!ok && st.views.size() == 1 && st.views[0].mask) {
        const Mask& m = *st.views[0].mask;
        ok = ShapeTracker::from_shape(st.shape()).shrink(m) == st.shrink(m);
      }
      if (!ok)
        throw Error("assign: the self operand of an augmented assign must be contiguous; use a += a.T.contiguous() instead of a += a.T");
      return UOp(Ops::LOAD, buf->dtype, {define_global(buf->dtype, it->second), sst(st)});
    }
    auto [it, fresh] = input_idx_.emplace(buf, inputs_.size());
    if (fresh) inputs_.push_back(buf);
    return UOp(Ops::LOAD, buf->dtype, {define_global(buf->dtype, outs_.size() + it->second), sst(st)});
  }

  // the AST of buf read through st (_recursive_lazyop)
  UOp lazyop(LB buf, ShapeTracker st) {
    if (!buf->is_base()) { st = buf->st + st; buf = buf->base().get(); }
    StKey key{buf, st};
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    UOp ret;
    if (buf->realized() || (realizes_.contains(buf) && !is_output(buf))) {
      ret = load_or_const(buf, st);
    } else if (buf->is_reduce() && row_ && !is_row_reduce(buf) && is_arange(buf)) {
      ret = row_arange(buf, st);
    } else if (buf->is_reduce() && row_ && is_embedded_reduce(buf)) {
      UOp rsrc = lazyop(buf->srcs[0].get(), embedded_source_view(buf, st));
      ret = UOp(Ops::REDUCE_AXIS, buf->dtype, {rsrc}, ReduceArg{std::get<ReduceOps>(buf->op), row_->axis});
    } else if (buf->is_reduce() && row_) {
      if (!row_view_ok(buf, st)) throw UnfusableRow("row kernel reads " + buf->str() + " through " + st.str());
      const std::vector<sint> full = row_ext(row_->full);
      UOp rsrc = lazyop(buf->srcs[0].get(), ext_ ? buf->srcs[0]->fresh_st().reshape_sym(full) : buf->srcs[0]->fresh_st());
      ret = UOp(Ops::REDUCE_AXIS, buf->dtype, {rsrc}, ReduceArg{std::get<ReduceOps>(buf->op), row_->axis});
    } else if (buf->is_reduce()) {
      ReduceInfo* ri = find_rinfo(key);
      UOp rsrc = lazyop(buf->srcs[0].get(), ri ? ri->input_st : st);
      if (!ri) {   // merged into the reduce below it
        bool merged = rsrc->op == Ops::REDUCE_AXIS && rsrc->as<ReduceArg>().op == std::get<ReduceOps>(buf->op);
        if (!merged && reads_fused_arange_) throw UnfusableArange("can't merge reduce " + buf->str());
        TG_ASSERT(merged, "can't merge reduce " + buf->str());
        return rsrc;
      }
      ret = UOp(Ops::REDUCE_AXIS, buf->dtype, {rsrc}, ReduceArg{std::get<ReduceOps>(buf->op), ri->axis});
    } else if (buf->op_is(MetaOps::CONTIGUOUS) || buf->op_is(MetaOps::ASSIGN)) {
      TG_ASSERT(is_output(buf), to_string(std::get<MetaOps>(buf->op)) + " must be an output of its kernel: " + buf->str());
      ret = lazyop(buf->srcs[0].get(), st);
    } else {
      std::vector<UOp> in;
      for (auto& x : buf->srcs) in.push_back(lazyop(x.get(), st));
      if (buf->op_is(UnaryOps::CAST)) ret = UOp(Ops::CAST, buf->dtype, in);
      else if (buf->op_is(UnaryOps::BITCAST)) ret = UOp(Ops::BITCAST, buf->dtype, in);
      else if (auto u = std::get_if<UnaryOps>(&buf->op)) ret = UOp(Ops::ALU, buf->dtype, in, *u);
      else if (auto b = std::get_if<BinaryOps>(&buf->op)) ret = UOp(Ops::ALU, buf->dtype, in, *b);
      else if (auto t = std::get_if<TernaryOps>(&buf->op)) ret = UOp(Ops::ALU, buf->dtype, in, *t);
      else TG_ASSERT(false, "can't lower " + buf->str() + " into a kernel");
    }
    if (ret->op != Ops::LOAD) add_metadata(buf);
    return cache_.emplace(key, ret).first->second;
  }
};

// ---------------------------------------------------------------- grouping (_graph_schedule)

class GraphScheduler {
 public:
  std::vector<LBScheduleItem> prescheduled;
  std::unordered_map<LB, LB> assign_targets;   // target base -> its ASSIGN

  explicit GraphScheduler(const std::vector<LazyBufferPtr>& outs) {
    for (auto& x : outs) if (!x->base()->realized()) realizes_.insert(x->base().get()), user_outs_.insert(x->base().get());
    for (auto& x : outs) recurse_lb(x->base().get());
    // pads that reach an unsafe op (f(0) != 0) can't be fused
    simple_pads_.each([&](LB p) {
      std::unordered_set<LB> okay;
      if (!padding_okay(p, okay)) realizes_.insert(p);
    });
    group_reduces();
    fuse_conv_bw();
    fuse_arange(outs);
    // an arange that can't be lowered into a consumer's kernel (reduce views of another rank) is
    // realized again and the groups are lowered anew; only errors with no fused arange reach the user
    while (!lower_groups()) {}
  }

 private:
  LBSet realizes_, allbufs_, simple_pads_, double_reduces_;
  std::unordered_set<LB> user_outs_;          // the buffers the caller asked for
  std::vector<LB> row_inlined_;               // realized results a row kernel computes inline (merge_row_groups)
  std::unordered_set<LB> no_row_merge_;       // groups that failed to lower as row kernels
  std::unordered_map<LB, LBSet> children_;
  std::unordered_map<LB, LB> reduce_for_op_;
  std::vector<LB> reduce_of_const_, fused_aranges_;
  const LBSet empty_;

  const LBSet& children(LB b) const {
    auto it = children_.find(b);
    return it == children_.end() ? empty_ : it->second;
  }

  std::vector<std::pair<LB, std::vector<LB>>> make_groups() {
    // one item per output group; with MULTIOUTPUT a reduce's fused children share one kernel
    std::vector<std::pair<LB, std::vector<LB>>> groups;
    std::unordered_map<LB, size_t> group_idx;
    bool multi = getenv("MULTIOUTPUT", 1) != 0;
    realizes_.each([&](LB buf) {
      if (buf->realized() || buf->op_is(MetaOps::CONST)) return;
      auto rf = reduce_for_op_.find(buf);
      LB key = rf != reduce_for_op_.end() && multi ? rf->second : buf;
      auto [it, fresh] = group_idx.emplace(key, groups.size());
      if (fresh) groups.push_back({key, {}});
      groups[it->second].second.push_back(buf);
    });
    return groups;
  }

  // the user's ops a failing group holds, for the error message
  static std::string scheduling_note(const std::vector<LB>& g) {
    std::vector<std::string> md;
    for (LB b : g) {
      const Metadata* m = b->metadata;
      if (!m) continue;
      if (std::find(md.begin(), md.end(), m->str()) == md.end()) md.push_back(m->str());
    }
    return md.empty() ? "" : "\n  while scheduling the kernel made by " + format_metadata(md);
  }

  bool lower_groups() {
    prescheduled.clear();
    for (LB b : row_inlined_) realizes_.insert(b);   // a retry starts from the unmerged groups
    row_inlined_.clear();
    std::vector<std::pair<LB, std::vector<LB>>> groups = make_groups();
    std::unordered_map<LB, RowSig> row_sigs = merge_row_groups(groups);
    bool row_failed = false;   // every group that can't be a row kernel is found in one pass
    for (auto& [k, g] : groups) {
      bool arange = unfuse_aranges_above(g, false);
      auto row = row_sigs.find(k);
      try {
        prescheduled.push_back(GroupLowerer(g, realizes_, arange, row == row_sigs.end() ? std::nullopt : std::optional<RowSig>(row->second)).lower());
      } catch (const UnfusableArange&) {
        TG_ASSERT(unfuse_aranges_above(g), "a group reported an unfusable arange but reads none");
        return false;
      } catch (const UnfusableRow&) {
        TG_ASSERT(row != row_sigs.end(), "a group that isn't a row kernel reported an unfusable row");
        no_row_merge_.insert(k);   // lower it unmerged
        row_failed = true;
      } catch (const Error& e) {   // a user error: name the ops that made the kernel
        throw Error(e.what() + scheduling_note(g));
      }
    }
    return !row_failed;
  }

  // ---- row kernels: softmax, log_softmax, layernorm in one kernel

  // What a group computes: the buffers it loads and the reduces it runs (walking down to realized buffers).
  struct GroupReads {
    std::vector<LB> reads, reduces;
  };
  GroupReads group_reads(const std::vector<LB>& outs) const {
    GroupReads ret;
    std::vector<LB> stack(outs.rbegin(), outs.rend());
    std::unordered_set<LB> seen;
    while (!stack.empty()) {
      LB b = stack.back();
      stack.pop_back();
      if (!seen.insert(b).second) continue;
      const bool out = std::find(outs.begin(), outs.end(), b) != outs.end();
      if (b->realized() || (realizes_.contains(b) && !out)) { ret.reads.push_back(b); continue; }
      if (b->is_reduce()) ret.reduces.push_back(b);
      for (auto& x : b->srcs) stack.push_back(x->base().get());
    }
    return ret;
  }
  // the rows a group's reduces share; nullopt when they differ or a reduce can't join a row kernel
  // (allow_embed: one reduce's rows may embed the others', after merges by RowSig::embeds)
  static std::optional<RowSig> row_sig(const GroupReads& gr, bool& ok, bool allow_embed) {
    std::optional<RowSig> sig;
    ok = true;
    for (LB r : gr.reduces) {
      // a fused arange (a sum over a const) is computed in the row kernel's loops (lower_row_kernel)
      if (r->op_is(ReduceOps::SUM) && r->srcs[0]->base()->op_is(MetaOps::CONST) && !r->st.symbolic()) continue;
      RowSig s{r->srcs[0]->sym_shape(), std::get<std::vector<int64_t>>(r->arg)};
      const bool op_ok = r->op_is(ReduceOps::SUM) || r->op_is(ReduceOps::MAX);
      // (the symbolic dim a row may have is its own length, the loop bound, over one axis: rows over two
      // symbolic axes (var over both) rendered an undeclared index in the unrolled tail loop)
      bool sym_ok = true;
      for (size_t i = 0; i < s.full.size(); i++)
        sym_ok = sym_ok && (s.full[i].is_const() || (s.axis.size() == 1 && s.axis[0] == int64_t(i)));
      // the group's rows are those of the reduce that embeds every other one (merge_row_groups)
      if (!op_ok || !sym_ok || r->st.symbolic() || (sig && !(*sig == s) && !(allow_embed && (sig->embeds(s) || s.embeds(*sig))))) {
        ok = false;
        return std::nullopt;
      }
      if (!sig || s.embeds(*sig)) sig = s;
    }
    return sig;
  }
  static bool plain_outputs(const std::vector<LB>& g, bool assign_ok = false) {
    return std::none_of(g.begin(), g.end(), [&](LB b) {
      return std::holds_alternative<MetaOps>(b->op) && !b->op_is(MetaOps::CONTIGUOUS) && !(assign_ok && b->op_is(MetaOps::ASSIGN));
    });
  }

  // A reduce's kernel whose result another kernel reads broadcast along the same rows (softmax:
  // max -> sum of exp -> normalize) joins that kernel: it loops over each row once per reduce
  // (from cache) and once for the output, instead of a kernel and a trip to memory per reduce.
  // Its result stays an output only when a kernel outside reads it. Only rows up to ROW_FUSE_MAX
  // (65536) elements join, so a row stays in cache (CPU) and fits a block of threads (GPU).
  // A few rows (up to ROW_BCAST_MAX, 64) also join a reduce over rows of the same length that adds dims
  // of its own (RowSig::embeds): a layernorm its matmul (the rows add the output column), a softmax its
  // .v (they add the head dim). The joined reduces are recomputed for each index of the added dims, cheap
  // next to a kernel launch when the rows are few (a decode step's one token) and the device runs them in
  // parallel blocks of threads (GPUs). On the CPU each core recomputes them serially and the kernel loses
  // the matmul's register tile (measured: GPT-2 124M decode 77 instead of 114 kernels per token, but
  // 2-3x slower). Opt-in until it is timed on a GPU: ROW_BCAST=1 on every device, -1 on GPUs only, 0 (unset) off.
  std::unordered_map<LB, RowSig> merge_row_groups(std::vector<std::pair<LB, std::vector<LB>>>& groups) {
    std::unordered_map<LB, RowSig> sigs;
    if (!getenv("FUSE_ROWS", 1)) return sigs;
    const int64_t row_max = getenv("ROW_FUSE_MAX", 65536), bcast_mode = getenv("ROW_BCAST", 0);
    auto bcast_max_on = [&](const std::string& device) -> int64_t {
      if (bcast_mode == 0) return 0;
      if (bcast_mode < 0) {
        try {
          if (!get_renderer(device).has_local) return 0;
        } catch (const Error&) {   // a device this machine can't open (a schedule made without its GPU)
          return 0;
        }
      }
      return getenv("ROW_BCAST_MAX", 64);
    };
    std::unordered_map<LB, size_t> group_of;   // output -> group index
    for (size_t i = 0; i < groups.size(); i++) for (LB o : groups[i].second) group_of[o] = i;
    std::vector<char> dead(groups.size(), 0);
    std::unordered_set<LB> embedded;   // outputs merged in by RowSig::embeds
    // what each group reads and its rows, recomputed only for a group that took in another
    std::vector<std::optional<std::pair<GroupReads, std::pair<bool, std::optional<RowSig>>>>> info(groups.size());
    auto get = [&](size_t i) -> const std::pair<GroupReads, std::pair<bool, std::optional<RowSig>>>& {
      if (!info[i]) {
        GroupReads gr = group_reads(groups[i].second);
        bool ok = true;
        // (reduces of other rows only where a group embedded another: a double reduce stays no row kernel)
        const bool emb = std::any_of(groups[i].second.begin(), groups[i].second.end(), [&](LB o) { return embedded.count(o) > 0; });
        std::optional<RowSig> sig = row_sig(gr, ok, emb);
        info[i].emplace(std::move(gr), std::make_pair(ok, sig));
      }
      return *info[i];
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t b = 0; b < groups.size(); b++) {
        if (dead[b] || no_row_merge_.count(groups[b].first) || !plain_outputs(groups[b].second, bcast_mode != 0)) continue;
        const GroupReads gb = get(b).first;
        bool ok_b = get(b).second.first;
        std::optional<RowSig> sig_b = get(b).second.second;
        if (!ok_b) continue;
        // (a group with reduces is a kernel on a device that runs them)
        const int64_t bcast_max = sig_b ? bcast_max_on(groups[b].first->device) : 0;
        const bool b_plain = plain_outputs(groups[b].second);
        for (LB rd : gb.reads) {
          auto ga = group_of.find(rd);
          if (ga == group_of.end() || ga->second == b || dead[ga->second]) continue;
          const size_t a = ga->second;
          if (!plain_outputs(groups[a].second)) continue;
          const bool ok_a = get(a).second.first;
          const std::optional<RowSig> sig_a = get(a).second.second;
          if (!ok_a || !sig_a) continue;
          const bool embed = sig_b && sig_b->embeds(*sig_a);
          if ((sig_b && !(*sig_a == *sig_b) && !embed) || (!embed && !b_plain)) continue;
          const int64_t row = sig_a->max_row();
          if (row > row_max || row <= 1) continue;
          // an embedded group is recomputed in b's kernel only: few rows, and no output another kernel needs
          if (embed && (sig_a->rows() > bcast_max || !only_b_reads(groups, a, b, dead, get))) continue;
          RowSig sig = embed ? *sig_b : *sig_a;
          for (LB k : {groups[a].first, groups[b].first})
            if (auto it = sigs.find(k); it != sigs.end() && it->second.embedding) sig.embedding = true;
          sig.embedding = sig.embedding || embed;
          // every output of either is the full or the reduced shape of the rows
          // (outputs of groups embedded before are computed in the kernel only, not stored: they don't count)
          auto fits = [&](const std::vector<LB>& g) {
            return std::all_of(g.begin(), g.end(), [&](LB o) { return embedded.count(o) || sig.is_full(o->sym_shape()) || sig.is_reduced(o->sym_shape()); });
          };
          if ((!embed && !fits(groups[a].second)) || !fits(groups[b].second) || reaches_other_way(groups, a, b, group_of, gb)) continue;
          for (LB o : groups[a].second) {
            groups[b].second.push_back(o), group_of[o] = b;
            if (embed) embedded.insert(o);
          }
          info[b].reset();
          groups[a].second.clear();
          dead[a] = 1;
          sigs[groups[b].first] = sig;
          sigs.erase(groups[a].first);
          changed = true;
          break;
        }
      }
    }
    std::vector<std::pair<LB, std::vector<LB>>> kept;
    for (size_t i = 0; i < groups.size(); i++) if (!dead[i]) kept.push_back(std::move(groups[i]));
    groups = std::move(kept);
    // a merged-in result no other kernel reads is computed in the row kernel only, not stored (a CONTIGUOUS
    // is stored: the user asked for the buffer)
    std::unordered_map<LB, size_t> readers;
    for (auto& [k, g] : groups)
      for (LB r : group_reads(g).reads) readers[r]++;
    for (auto& [k, g] : groups) {
      if (!sigs.count(k)) continue;
      std::vector<LB> keep;
      for (LB o : g) {
        const bool needed = o == g[0] || o->forced_realize || o->op_is(MetaOps::CONTIGUOUS) || user_outs_.count(o) || readers.count(o) ||
                            !children_.count(o);
        if (needed) keep.push_back(o);
        else realizes_.erase(o), row_inlined_.push_back(o);
      }
      g = std::move(keep);
    }
    return sigs;
  }

  // whether group a's outputs are only intermediate values of group b: no user output, no forced
  // realize, no reader but b (merged into b, they are computed there and not stored)
  template <class Get>
  bool only_b_reads(const std::vector<std::pair<LB, std::vector<LB>>>& groups, size_t a, size_t b, const std::vector<char>& dead, Get& get) const {
    for (LB o : groups[a].second)
      if (o->forced_realize || user_outs_.count(o) || !children_.count(o)) return false;
    for (size_t g = 0; g < groups.size(); g++) {
      if (g == a || g == b || dead[g]) continue;
      for (LB r : get(g).first.reads)
        if (std::find(groups[a].second.begin(), groups[a].second.end(), r) != groups[a].second.end()) return false;
    }
    return true;
  }

  // the longest path from a realized buffer up to b (memoized, iterative: graphs can be deep)
  mutable std::unordered_map<LB, int64_t> depth_;
  int64_t depth(LB root) const {
    if (auto it = depth_.find(root); it != depth_.end()) return it->second;
    std::vector<std::pair<LB, size_t>> stack{{root, 0}};
    while (!stack.empty()) {
      auto& [x, i] = stack.back();
      if (x->realized()) { depth_[x] = 0; stack.pop_back(); continue; }
      if (i < x->srcs.size()) {
        LB s = x->srcs[i++]->base().get();
        if (!depth_.count(s)) stack.emplace_back(s, 0);
        continue;
      }
      int64_t d = 0;
      for (auto& src : x->srcs) d = std::max(d, depth_.at(src->base().get()) + 1);
      depth_[x] = d;
      stack.pop_back();
    }
    return depth_.at(root);
  }

  // whether group b reads group a's outputs through another kernel too (merging them would be a cycle)
  bool reaches_other_way(const std::vector<std::pair<LB, std::vector<LB>>>& groups, size_t a, size_t b,
                         const std::unordered_map<LB, size_t>& group_of, const GroupReads& gb) const {
    (void)b;
    // a path up from b to a only passes buffers deeper than a's outputs
    int64_t min_depth = INT64_MAX;
    for (LB o : groups[a].second) min_depth = std::min(min_depth, depth(o));
    std::vector<LB> stack;
    for (LB r : gb.reads) {
      auto it = group_of.find(r);
      if (it != group_of.end() && it->second != a) stack.push_back(r);
    }
    std::unordered_set<LB> seen;
    while (!stack.empty()) {
      LB x = stack.back();
      stack.pop_back();
      if (x->realized() || depth(x) < min_depth || !seen.insert(x).second) continue;
      auto it = group_of.find(x);
      if (it != group_of.end() && it->second == a) return true;
      for (auto& s : x->srcs) stack.push_back(s->base().get());
    }
    return false;
  }

  // realize the fused aranges a group reads (only look when !unfuse); false when it reads none
  bool unfuse_aranges_above(const std::vector<LB>& group, bool unfuse = true) {
    std::vector<LB> stack(group.begin(), group.end());
    std::unordered_set<LB> seen;
    bool any = false;
    while (!stack.empty()) {
      LB b = stack.back();
      stack.pop_back();
      if (!seen.insert(b).second || b->realized()) continue;
      if (std::find(fused_aranges_.begin(), fused_aranges_.end(), b) != fused_aranges_.end()) {
        any = true;
        if (!unfuse) return true;
        realizes_.insert(b);
        std::erase(fused_aranges_, b);
        continue;
      }
      if (realizes_.contains(b) && std::find(group.begin(), group.end(), b) == group.end()) continue;
      for (auto& x : b->srcs) stack.push_back(x->base().get());
    }
    return any;
  }

  // walk the whole graph, realizing expanded bases and the sources of copies and views
  void recurse_lb(LB buf) {
    if (allbufs_.contains(buf) || buf->base()->realized()) return;
    if (!buf->is_base()) {
      LB base = buf->base().get();
      const View& last = buf->st.views.back();
      int64_t base_size = prod(base->shape());
      int64_t masked = INT64_MAX;
      if (buf->st.views.size() == 1 && last.mask) {
        masked = 1;
        for (auto [lo, hi] : *last.mask) masked *= hi - lo;
      }
      if (base_size >= masked) {
        simple_pads_.insert(base);   // a pad of the whole base: fuse it if it is safe
      } else if (base_size < prod(buf->shape())) {
        realizes_.insert(base);   // expands realize their base
      } else if (std::any_of(buf->st.views.begin(), buf->st.views.end(), [](const View& v) { return v.mask.has_value(); })) {
        simple_pads_.insert(base);
      }
      return recurse_lb(base);
    }
    if (buf->is_reduce() && buf->srcs[0]->base()->op == buf->op && !buf->srcs[0]->is_base()) double_reduces_.insert(buf);
    allbufs_.insert(buf);
    if (buf->forced_realize || std::holds_alternative<MetaOps>(buf->op)) realizes_.insert(buf);
    if (buf->op_is(MetaOps::ASSIGN)) {
      LB target = buf->srcs[1].get();
      TG_ASSERT(target->is_base() && target->realized(), "assign must be to a realized base: " + target->str());
      assign_targets[target] = buf;
    }
    if (buf->op_is(MetaOps::COPY)) {
      LazyBuffer& src = *buf->srcs[0];
      TG_ASSERT(src.st.contiguous() && src.size() == src.base()->size(), "can only copy contiguous buffers");
      realizes_.insert(src.base().get());
    }
    if (buf->op_is(MetaOps::VIEW)) realizes_.insert(buf->srcs[0]->base().get());
    for (auto& x : buf->srcs) {
      if (!x->base()->realized()) children_[x->base().get()].insert(buf);
      recurse_lb(x.get());
    }
  }

  // the distinct views through which child reads base tr (equal views count once: tinygrad's
  // lazycache would have made them one LazyBuffer)
  static std::vector<LB> views_of(LB child, LB tr) {
    std::vector<LB> ret;
    for (auto& s : child->srcs) {
      if (s->base().get() != tr) continue;
      if (std::none_of(ret.begin(), ret.end(), [&](LB v) { return v == s.get() || v->st == s->st; })) ret.push_back(s.get());
    }
    return ret;
  }

  bool padding_okay(LB buf, std::unordered_set<LB>& okay) {
    if (realizes_.contains(buf) || buf->realized() || okay.count(buf)) return true;
    if (is_unsafe_pad(*buf)) return false;
    for (auto& x : buf->srcs) if (!padding_okay(x->base().get(), okay)) return false;
    okay.insert(buf);
    return true;
  }

  // search tr's children for ones that fuse with reduce r; realize r when one can't (_recursive_group)
  void recursive_group(LB tr, const ShapeTracker& st, LB r, LBSet& group, std::unordered_set<StKey, StKeyHash>& cache) {
    if (!cache.insert(StKey{tr, st}).second) return;
    if (realizes_.contains(tr) && tr != r) {
      // only a contiguous, same-size view of one reduce fuses
      if (!st.contiguous() || prod(st.shape()) != prod(r->st.shape()) || reduce_for_op_.count(tr)) group.insert(r);
      group.insert(tr);
      return;
    }
    for (LB tr_next : children(tr).list()) {
      if (tr_next->is_reduce()) { group.insert(r); return; }   // max one reduce per kernel
      std::vector<LB> st_childs = views_of(tr_next, tr);
      if (st_childs.size() > 1) { group.insert(r); return; }
      recursive_group(tr_next, st + st_childs[0]->st, r, group, cache);
    }
  }

  LBSet isolated_children(LB r, LBSet& group) {
    std::vector<LB> rc_parents = group.list();
    std::unordered_set<LB> seen;
    while (!rc_parents.empty()) {
      LB p = rc_parents.back();
      rc_parents.pop_back();
      if (!seen.insert(p).second) continue;
      if (p->is_reduce()) return LBSet();   // another reduce above the group: max one per kernel
      for (auto& x : p->srcs) {
        LB xb = x->base().get();
        if (!xb->realized() && xb != r) rc_parents.push_back(xb);
      }
    }
    LBSet descendants;
    group.each([&](LB tr) {
      std::unordered_set<StKey, StKeyHash> cache;
      recursive_group(tr, tr->st, tr, descendants, cache);
    });
    LBSet ret = group;
    bool overlap = false;
    descendants.each([&](LB tr) { overlap |= group.contains(tr); });
    if (!overlap) descendants.each([&](LB tr) { ret.insert(tr); });
    return ret;
  }

  // the assign rule: a kernel can't read an assign target whose ASSIGN is in another kernel
  bool reads_foreign_assign_target(LB r, const LBSet& group) {
    std::vector<LB> parents{r};
    group.each([&](LB x) { parents.push_back(x); });
    while (!parents.empty()) {
      LB p = parents.back()->base().get();
      parents.pop_back();
      if (p->realized() || realizes_.contains(p)) {
        auto it = assign_targets.find(p);
        if (it != assign_targets.end() && !group.contains(it->second)) return true;
        continue;
      }
      for (auto& x : p->srcs) parents.push_back(x.get());
    }
    return false;
  }

  void group_reduces() {
    allbufs_.each([&](LB r) {
      if (!r->is_reduce() || realizes_.contains(r)) return;
      LBSet group;
      std::unordered_set<StKey, StKeyHash> cache;
      recursive_group(r, r->st, r, group, cache);
      bool can_chase = true;
      group.each([&](LB tr) { can_chase &= reduce_for_op_.count(tr) == 0; });
      bool forced_realize = group.contains(r);
      if (!forced_realize && group.size() > 1) group = isolated_children(r, group);
      if (!forced_realize) {
        bool has_assign = false;
        group.each([&](LB x) { has_assign |= x->op_is(MetaOps::ASSIGN); });
        if (has_assign && reads_foreign_assign_target(r, group)) forced_realize = true, can_chase = false;
      }
      if (forced_realize || group.empty()) {
        LB tr = r;
        if (can_chase) {
          // chase the reduce down to a contiguous child with the same size
          ShapeTracker st = tr->st;
          while (children(tr).size() == 1) {
            LB tr_next = children(tr).list()[0];
            std::vector<LB> st_childs = views_of(tr_next, tr);
            if (st_childs.size() > 1 || prod(st.shape()) != prod(st_childs[0]->shape())) break;
            st = st + st_childs[0]->st;
            if (!st.contiguous() || tr_next->is_reduce()) break;
            tr = tr_next;
          }
          // don't store a widened cast: store its source
          if (tr->op_is(UnaryOps::CAST) && std::get<DType>(tr->arg).itemsize() > tr->srcs[0]->dtype.itemsize())
            tr = tr->srcs[0]->base().get();
          reduce_for_op_[tr] = r;
        }
        realizes_.insert(tr);
      } else {
        group.each([&](LB tr) { reduce_for_op_[tr] = r; });
      }
      if (getenv("FUSE_ARANGE", 1) && r->op_is(ReduceOps::SUM) && r->srcs[0]->base()->op_is(MetaOps::CONST)) reduce_of_const_.push_back(r);
    });
  }

  // FUSE_CONV_BW: a reduce of a reduce with no other child is one kernel
  void fuse_conv_bw() {
    if (!getenv("FUSE_CONV_BW")) return;
    double_reduces_.each([&](LB reduceop) {
      LB top = reduceop->srcs[0]->base().get();
      if (children(top).size() == 1) realizes_.erase(top);
    });
  }

  // FUSE_ARANGE: a sum over a const (arange) is recomputed in its users instead of realized
  void fuse_arange(const std::vector<LazyBufferPtr>& outs) {
    for (LB r : reduce_of_const_) {
      std::vector<LB> group;
      for (auto& [tr, rop] : reduce_for_op_) if (rop == r) group.push_back(tr);
      bool skip = false;
      for (LB tr : group) {
        skip |= tr->forced_realize;
        for (auto& o : outs) skip |= o->base().get() == tr;
      }
      if (skip) continue;
      bool has_kernel_child = false;
      for (LB tr : group)
        children(tr).each([&](LB c) { has_kernel_child |= !c->op_is(MetaOps::COPY) && !c->op_is(MetaOps::VIEW); });
      if (!has_kernel_child) continue;
      for (LB tr : group) realizes_.erase(tr), fused_aranges_.push_back(tr);
    }
  }
};

}  // namespace

// ---------------------------------------------------------------- ordering (create_schedule)

std::vector<ScheduleItem> create_schedule(const std::vector<LazyBufferPtr>& outs) {
  profile::Span span("schedule");
  if (graph::enabled()) graph::log_lazy(outs);   // before scheduling frees the graph
  GraphScheduler gs(outs);
  std::vector<LBScheduleItem>& pre = gs.prescheduled;
  std::unordered_map<LB, size_t> targets;
  for (size_t i = 0; i < pre.size(); i++) for (auto& o : pre[i].outputs) targets[o.get()] = i;

  std::vector<std::vector<size_t>> graph(pre.size());
  std::vector<int> in_degree(pre.size(), 0);
  auto add_edge = [&](size_t from, size_t to) {
    if (std::find(graph[from].begin(), graph[from].end(), to) != graph[from].end()) return;
    graph[from].push_back(to);
    in_degree[to]++;
  };
  for (size_t i = 0; i < pre.size(); i++) {
    for (auto& x : pre[i].inputs) {
      if (auto it = targets.find(x.get()); it != targets.end()) add_edge(it->second, i);   // after its producers
      if (auto at = gs.assign_targets.find(x.get()); at != gs.assign_targets.end()) {
        if (auto it = targets.find(at->second); it != targets.end()) add_edge(i, it->second);   // before the target is overwritten
      }
    }
  }

  // buffers before ordering: a VIEW's buffer is a view of its source's
  for (auto& lsi : pre) for (auto& o : lsi.outputs) o->ensure_buffer();

  std::deque<size_t> queue;
  for (size_t i = 0; i < pre.size(); i++) if (in_degree[i] == 0) queue.push_back(i);
  std::vector<ScheduleItem> schedule;
  while (!queue.empty()) {
    LBScheduleItem& lsi = pre[queue.front()];
    size_t cur = queue.front();
    queue.pop_front();
    ScheduleItem si;
    si.kind = lsi.kind;
    si.ast = Access::ast(lsi.ast);
    si.n_outputs = static_cast<int>(lsi.outputs.size());
    si.var_vals = lsi.var_vals;
    for (const Metadata* m : lsi.metadata) si.metadata.push_back(m->str());
    for (auto* v : {&lsi.outputs, &lsi.inputs})
      for (auto& x : *v) if (x->size() != 0) si.bufs.push_back(x->buffer);
    for (auto& o : lsi.outputs) o->srcs.clear();   // realized: the graph above is freed
    schedule.push_back(std::move(si));
    for (size_t nxt : graph[cur]) if (--in_degree[nxt] == 0) queue.push_back(nxt);
  }
  if (schedule.size() != pre.size())
    throw Error("create_schedule: cycle detected in the graph, prescheduled " + std::to_string(pre.size()) + " but scheduled " +
                std::to_string(schedule.size()) + "; an assign target is probably read after it is overwritten");
  if (debug() >= 1 && schedule.size() >= 10) printf("scheduled %zu kernels\n", schedule.size());
  span.arg("items", std::to_string(schedule.size()));
  return schedule;
}

std::string Ast::str() const { return p_ ? p_->self().str() : "None"; }

std::string ScheduleItem::str() const {
  std::string s = "ScheduleItem(" + (kind == MetaOps::KERNEL ? "ast=" + ast.str() : to_string(kind)) + ", bufs=(";
  for (size_t i = 0; i < bufs.size(); i++) s += (i ? ", " : "") + bufs[i]->str();
  return s + "))";
}

}  // namespace tg
