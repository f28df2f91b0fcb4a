// Kernel: AST analysis, shape simplification, OptOps and naming (tinygrad 0.9.2 codegen/kernel.py).
#include "access.hpp"
#include "codegen/kernel.hpp"
#include "codegen/pipeline.hpp"
#include "codegen/tc_gemm.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <iostream>
#include <numeric>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "codegen/linearizer.hpp"
#include "codegen/lowerer.hpp"
#include "codegen/uopgraph.hpp"
#include "shape/shapetracker_arg.hpp"

namespace tg {

std::string to_string(OptOps op) {
  static const char* names[] = {"TC", "UPCAST", "UPCASTMID", "UNROLL", "LOCAL", "GROUP", "GROUPTOP", "NOLOCALS", "PADTO", "SWAP"};
  return std::string("OptOps.") + names[static_cast<int>(op)];
}

void opt_check(bool cond, const std::string& msg) {
  if (!cond) throw KernelOptError(msg);
}

std::string Opt::str() const {
  auto s = [](const std::optional<int64_t>& v) { return v ? std::to_string(*v) : std::string("None"); };
  return "Opt(op=" + to_string(op) + ", axis=" + s(axis) + ", amt=" + s(amt) + ")";
}

int64_t Opt::real_axis(const Kernel& k) const {
  if (!axis) return -1;
  if (op == OptOps::UNROLL) return k.first_reduce() + *axis;
  if (op == OptOps::GROUP || op == OptOps::GROUPTOP) return k.first_reduce() + k.group_for_reduces + *axis;
  return *axis;
}

Arg KernelInfo::to_arg() const {
  std::vector<int64_t> v{local_dims, upcasted, dont_use_locals ? 1 : 0, static_cast<int64_t>(sym_splits.size())};
  for (auto [axis, amt] : sym_splits) v.insert(v.end(), {axis, amt});
  for (auto [axis, group] : sym_groups) v.insert(v.end(), {axis, group});
  return v;
}

KernelInfo KernelInfo::from_arg(const Arg& a) {
  KernelInfo ki;
  if (const auto* v = std::get_if<std::vector<int64_t>>(&a)) {
    TG_ASSERT(v->size() >= 4 && v->size() % 2 == 0 && 4 + 2 * static_cast<size_t>((*v)[3]) <= v->size(),
              "KernelInfo arg needs {local_dims, upcasted, dont_use_locals, n_splits, (axis, amt)..., (axis, group axis)...}");
    ki.local_dims = (*v)[0], ki.upcasted = (*v)[1], ki.dont_use_locals = (*v)[2] != 0;
    const size_t groups = 4 + 2 * static_cast<size_t>((*v)[3]);
    for (size_t i = 4; i < groups; i += 2) ki.sym_splits.emplace_back((*v)[i], (*v)[i + 1]);
    for (size_t i = groups; i < v->size(); i += 2) ki.sym_groups.emplace_back((*v)[i], (*v)[i + 1]);
  }
  return ki;
}

namespace {

bool is_buffer_op(const UOp& u) {
  return (u->op == Ops::LOAD || u->op == Ops::STORE || u->op == Ops::CONST) && !u->src.empty() &&
         u->src[u->op == Ops::CONST ? 0 : 1]->op == Ops::SHAPETRACKER;
}
const UOp& st_src(const UOp& u) { return u->src[u->op == Ops::CONST ? 0 : 1]; }

// tinygrad's LazyOp.lazyops: pre-order, each node once
void lazyops(const UOp& u, std::vector<UOp>& out, std::unordered_set<const UOpNode*>& seen) {
  if (!seen.insert(u.get()).second) return;
  out.push_back(u);
  if (is_buffer_op(u) && u->op != Ops::STORE) return;
  for (const UOp& s : u->src) lazyops(s, out, seen);
}

// the shape every AST node iterates over (tinygrad's verify_lazyop)
const ShapeTracker& node_st(const UOp& u, std::unordered_map<const UOpNode*, ShapeTracker>& memo) {
  if (auto it = memo.find(u.get()); it != memo.end()) return it->second;
  ShapeTracker st = ShapeTracker::from_shape({});
  if (is_buffer_op(u)) {
    st = st_of(st_src(u));
  } else if (u->op == Ops::REDUCE_AXIS) {
    Shape s = node_st(u->src[0], memo).shape();
    for (int64_t a : u->as<ReduceArg>().axes) s[a] = 1;
    st = ShapeTracker::from_shape(s);
  } else {
    TG_ASSERT(!u->src.empty(), "AST node without a shape: " + u.str());
    st = node_st(u->src[0], memo);
    // in a row kernel a reduce's result (1 along the rows) meets full-shape values: the larger shape
    Shape s = st.shape();
    bool wider = false;
    for (size_t i = 1; i < u->src.size(); i++) {
      const Shape& si = node_st(u->src[i], memo).shape();
      if (si.size() != s.size()) continue;
      for (size_t j = 0; j < s.size(); j++)
        if (si[j] > s[j]) s[j] = si[j], wider = true;
    }
    if (wider) st = ShapeTracker::from_shape(s);
  }
  return memo.emplace(u.get(), st).first->second;
}

bool has_ast_op(const UOp& root, const std::function<bool(const UOp&)>& pred) {
  for (const UOp& u : root.toposort())
    if (pred(u)) return true;
  return false;
}

}  // namespace

Kernel::Kernel(const UOp& ast_, const Renderer& opts_) : ast(ast_), opts(&opts_) {
  TG_ASSERT(ast->op == Ops::SINK && !ast->src.empty(), "a kernel AST is a SINK of STOREs: " + ast.str());
  for (const UOp& s : ast->src) TG_ASSERT(s->op == Ops::STORE, "a kernel AST is a SINK of STOREs: " + ast.str());

  std::vector<UOp> ops;
  std::unordered_set<const UOpNode*> seen;
  lazyops(ast, ops, seen);
  for (const UOp& u : ops)
    if (is_buffer_op(u)) bufs.push_back(u);
  for (const UOp& u : ast.toposort()) {
    if (u->op == Ops::REDUCE_AXIS) reduceops.push_back(u);
    if (u->op == Ops::DEFINE_VAR) vars.push_back(u);
  }

  std::unordered_map<const UOpNode*, ShapeTracker> st_memo;
  for (const UOp& b : bufs) sts.push_back(node_st(b, st_memo));
  // a reduce in another's source over axes that one doesn't span (1 in its input) is nested in it
  // (a row reduce read broadcast by the next, softmax's max in its sum, is not)
  inner_reduce.assign(reduceops.size(), false);
  for (size_t j = 0; j < reduceops.size(); j++) {
    const Shape& in_j = node_st(reduceops[j]->src[0], st_memo).shape();
    for (const UOp& u : reduceops[j]->src[0].toposort()) {
      if (u->op != Ops::REDUCE_AXIS) continue;
      const std::vector<int64_t>& ax = u->as<ReduceArg>().axes;
      if (std::all_of(ax.begin(), ax.end(), [&](int64_t a) { return in_j[a] == 1; }))
        inner_reduce[std::find(reduceops.begin(), reduceops.end(), u) - reduceops.begin()] = true;
    }
  }
  // several outer reduces with one nested in them (a row kernel reading a fused arange): the full
  // shape is the nested reduce's input (it adds the arange's dims), the main buffer a row reduce's
  const size_t outer = std::count(inner_reduce.begin(), inner_reduce.end(), false);
  nested_rows = outer >= 2 && outer < reduceops.size();
  if (!reduceops.empty()) {
    const size_t first = nested_rows ? std::find(inner_reduce.begin(), inner_reduce.end(), false) - inner_reduce.begin() : 0;
    std::vector<UOp> early;
    std::unordered_set<const UOpNode*> seen_r;
    lazyops(reduceops[first], early, seen_r);
    for (const UOp& u : early)
      if (is_buffer_op(u) && (!nested_rows || u->op == Ops::LOAD)) {
        full_buf_index = static_cast<int>(std::find(bufs.begin(), bufs.end(), u) - bufs.begin());
        break;
      }
  }
  full_st_index = full_buf_index;
  for (const UOp& r : reduceops) {
    sts.push_back(node_st(r, st_memo));
    sts.push_back(node_st(r->src[0], st_memo));
  }
  if (nested_rows)
    for (size_t i = 0; i < reduceops.size(); i++) {
      const size_t in = bufs.size() + 2 * i + 1;
      if (prod(sts[in].shape()) > prod(sts[full_st_index].shape())) full_st_index = static_cast<int>(in);
    }
  // a row kernel (every reduce over the same axes) may store at the full shape
  if (same_reduce_axes() && sts[0].shape() != sts[first_outer_st()].shape()) out_ref = static_cast<int>(first_outer_st());

  // the Variables of symbolic trackers are kernel arguments too
  for (const ShapeTracker& st : sts)
    for (const View& v : st.views) {
      if (!v.sym) continue;
      auto add = [&](const sint& x) {
        if (x.is_const()) return;
        for (const UOp& d : Access::uop(x).vars())
          if (std::find(vars.begin(), vars.end(), d) == vars.end()) vars.push_back(d);
      };
      for (auto& x : v.sym->shape) add(x);
      for (auto& x : v.sym->strides) add(x);
      add(v.sym->offset);
      if (v.sym->mask) for (auto& [b, e] : *v.sym->mask) add(b), add(e);
    }
  std::sort(vars.begin(), vars.end(), [](const UOp& a, const UOp& b) { return a->as<std::string>() < b->as<std::string>(); });

  // move all reduce axes to the end; a nested reduce's own axes go before the row's, so the row's
  // axes stay last (the heuristics unroll and group the last reduce axis)
  std::vector<int> permute;
  const Shape fs = full_shape(), os = output_shape();
  TG_ASSERT(fs.size() == os.size(), "output and full shape differ in rank: " + to_str(fs) + " vs " + to_str(os));
  // (a nested reduce's row input; without reduces sts holds only the buffers' trackers)
  const Shape row_in = nested_rows ? sts[first_outer_st() + 1].shape() : Shape{};
  for (size_t i = 0; i < fs.size(); i++)
    if (fs[i] == os[i]) permute.push_back(static_cast<int>(i));
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < fs.size(); i++)
      if (fs[i] != os[i] && (pass == 1) == (!nested_rows || row_in[i] == fs[i])) permute.push_back(static_cast<int>(i));
  reshape_and_permute(nullptr, permute);

  simplify_ones();
  simplify_merge_adjacent();
}

size_t Kernel::first_outer_st() const {
  const size_t i = std::find(inner_reduce.begin(), inner_reduce.end(), false) - inner_reduce.begin();
  return bufs.size() + 2 * (i < reduceops.size() ? i : 0);
}

bool Kernel::same_reduce_axes() const {
  if (reduceops.empty()) return false;
  // (a nested reduce is left out only under two or more outer ones: a row kernel reading an arange)
  for (size_t i = 0; i < reduceops.size(); i++)
    if (!(nested_rows && inner_reduce[i]) && sts[bufs.size() + 2 * i].shape() != sts[first_outer_st()].shape()) return false;
  return true;
}

bool Kernel::reduces_only_row(int64_t axis) const {
  const int64_t lo = first_reduce() + group_for_reduces, hi = first_upcast();
  // a store along the row with nested reduces (cross-entropy's gradient: one_hot's arange per element) needs
  // the block-stride loop around the nested reduce as well: the lowerer puts it outside (NVRTC: undefined alu)
  if (nested_rows && sts[0].shape()[axis] > 1) return false;
  for (size_t i = 0; i < reduceops.size(); i++) {
    const Shape &out = sts[bufs.size() + 2 * i].shape(), &in = sts[bufs.size() + 2 * i + 1].shape();
    for (int64_t a = lo; a < hi; a++) {
      const bool reduced = out[a] == 1 && in[a] > 1;
      if (inner_reduce[i] ? a == axis && reduced : reduced != (a == axis)) return false;
    }
  }
  return true;
}

bool Kernel::stored_unchanged(int64_t axis) const {
  // (a global axis only: a grouped reduce's group axis is stored unchanged too, each thread of the group storing the
  // same sum, and keeps the opts it took before)
  if (axis >= first_reduce()) return false;
  for (size_t i = 0; i < bufs.size(); i++)
    if (bufs[i]->op == Ops::STORE && sts[i].shape()[axis] > 1 && sts[i].real_strides()[axis] == 0) return true;
  return false;
}

bool Kernel::symbolic_axis(int64_t axis) const {
  for (const ShapeTracker& st : sts) {
    const View& v = st.views.back();
    if (v.sym && axis >= 0 && axis < static_cast<int64_t>(v.sym->shape.size()) && !v.sym->shape[axis].is_const()) return true;
  }
  return false;
}

std::optional<int64_t> Kernel::sym_split_of(int64_t axis) const {
  for (auto [a, amt] : sym_splits)
    if (a == axis) return amt;
  return std::nullopt;
}

bool Kernel::sym_splits_global() const {
  return std::any_of(sym_splits.begin(), sym_splits.end(), [&](auto& s) { return s.first < first_reduce(); });
}

bool Kernel::sym_group_axis(int64_t axis) const {
  for (auto [a, g] : sym_groups)
    if (a == axis || g == axis) return true;
  return false;
}

Shape Kernel::full_unupcasted_shape() const {
  const Shape& fs = full_shape();
  return Shape(fs.begin(), fs.begin() + first_upcast());
}

int64_t Kernel::first_reduce() const {
  const Shape &s0 = sts[out_ref].shape(), &fs = full_shape();
  for (int64_t i = 0; i < first_upcast(); i++)
    if (s0[i] != fs[i]) return i;
  return first_upcast();
}

std::vector<int64_t> Kernel::upcast_in_mid_reduce_axes() const {
  std::vector<int64_t> ret;
  for (int64_t j = first_reduce(); j < first_reduce() + group_for_reduces; j++)
    if (full_shape()[j] == sts[out_ref].shape()[j]) ret.push_back(j);
  return ret;
}

std::vector<std::tuple<int64_t, std::optional<int64_t>, bool>> Kernel::upcasted_axis(size_t i) const {
  std::vector<std::tuple<int64_t, std::optional<int64_t>, bool>> ret;
  auto strides = sts[i].real_strides();
  for (int64_t a = first_upcast(); a < shape_len(); a++)
    ret.emplace_back(sts[i].shape()[a], strides[a], sts[out_ref].shape()[a] != full_shape()[a]);
  return ret;
}

std::vector<int64_t> Kernel::float4_axis(size_t i) const {
  std::vector<int64_t> ret;
  for (auto x : sts[i].unit_stride_axes())
    if (x >= first_upcast() && sts[i].shape()[x] % 4 == 0) ret.push_back(x - first_upcast());
  return ret;
}

bool Kernel::axis_is_masked(size_t i, int64_t axis) const { return sts[i].axis_is_masked(static_cast<int>(axis)); }

// ******************** shape plumbing ********************

void Kernel::reshape_and_permute(const std::function<Shape(const Shape&)>& new_shape_fxn, const std::vector<int>& axis) {
  for (ShapeTracker& st : sts) {
    if (new_shape_fxn) st = st.reshape(new_shape_fxn(st.shape()));
    if (!axis.empty()) st = st.permute(axis);
  }
}

void Kernel::upcast() {
  opt_check(full_shape().back() != 1, "can't upcast a dimension with size 1");
  upcasted += 1;
}

void Kernel::shift_to(int64_t axis, int64_t amount, bool top, std::optional<int64_t> insert_before_) {
  int64_t insert_before = insert_before_.value_or(shape_len());
  const int64_t move_axis = top ? axis : axis + 1;
  if (move_axis < insert_before) insert_before += 1;
  std::vector<int> perm;
  for (int64_t i = 0; i < insert_before; i++)
    if (i != move_axis) perm.push_back(static_cast<int>(i));
  perm.push_back(static_cast<int>(move_axis));
  for (int64_t i = insert_before; i < shape_len() + 1; i++)
    if (i != move_axis) perm.push_back(static_cast<int>(i));
  // split and grouped symbolic axes (never the one shifted) move with the permutation
  auto moved = [&](int64_t a) -> int64_t {
    TG_ASSERT(a != axis, "a split or grouped symbolic axis can't be shifted");
    const int a1 = static_cast<int>(a < axis ? a : a + 1);
    return std::find(perm.begin(), perm.end(), a1) - perm.begin();
  };
  for (auto& [a, amt] : sym_splits) a = moved(a);
  for (auto& [a, g] : sym_groups) a = moved(a), g = moved(g);
  reshape_and_permute(
      [&](const Shape& x) {
        Shape r(x.begin(), x.begin() + axis);
        if (x[axis] > 1) {
          if (top) r.insert(r.end(), {amount, x[axis] / amount});
          else r.insert(r.end(), {x[axis] / amount, amount});
        } else {
          r.insert(r.end(), {1, 1});
        }
        r.insert(r.end(), x.begin() + axis + 1, x.end());
        return r;
      },
      perm);
}

bool Kernel::simplify_ones() {
  if (shape_len() == 0) return false;
  const Shape fs = full_shape();
  std::vector<bool> all_ones;
  for (size_t i = 0; i < fs.size(); i++) all_ones.push_back(fs[i] == 1 && !symbolic_axis(static_cast<int64_t>(i)));
  auto count = [&](int64_t lo, int64_t hi) {
    int64_t n = 0;
    for (int64_t i = std::max<int64_t>(lo, 0); i < hi; i++) n += all_ones[i];
    return n;
  };
  local_dims -= count(first_reduce() - local_dims, first_reduce());
  upcasted -= count(first_upcast(), shape_len());
  for (auto& [a, amt] : sym_splits) a -= count(0, a);   // (a symbolic axis is never a 1)
  for (auto& [a, g] : sym_groups) a -= count(0, a), g -= count(0, g);   // (nor a group axis)
  reshape_and_permute(
      [&](const Shape& shape) {
        Shape r;
        for (size_t i = 0; i < shape.size(); i++)
          if (!all_ones[i]) r.push_back(shape[i]);
        return r;
      },
      {});
  return std::find(all_ones.begin(), all_ones.end(), true) != all_ones.end();
}

void Kernel::simplify_merge_adjacent() {
  if (shape_len() == 0) return;
  std::vector<Shape> shapes;
  std::vector<std::vector<std::optional<int64_t>>> strides;
  for (const ShapeTracker& st : sts) shapes.push_back(st.shape()), strides.push_back(st.real_strides());
  // per st: (size, stride) of the merged dims so far
  std::vector<std::vector<std::pair<int64_t, std::optional<int64_t>>>> rets;
  for (size_t j = 0; j < sts.size(); j++) rets.push_back({{shapes[j][0], strides[j][0]}});
  const int64_t fr = first_reduce();
  for (int64_t i = 1; i < static_cast<int64_t>(shapes[0].size()); i++) {
    bool mergeable = i != fr && !symbolic_axis(i) && !symbolic_axis(i - 1);
    for (size_t j = 0; j < sts.size() && mergeable; j++) {
      const std::optional<int64_t> sti = strides[j][i], last_st = rets[j].back().second;
      // a dim merges into the previous one when its stride times its size is the previous stride
      mergeable = sti && ((*sti != 0 && last_st && *last_st == shapes[j][i] * *sti) || (*sti == 0 && last_st && *last_st == 0));
    }
    for (size_t j = 0; j < sts.size(); j++) {
      if (mergeable) rets[j].back() = {rets[j].back().first * shapes[j][i], strides[j][i]};
      else rets[j].push_back({shapes[j][i], strides[j][i]});
    }
  }
  for (size_t j = 0; j < sts.size(); j++) {
    Shape ns;
    for (auto& [s, _] : rets[j]) ns.push_back(s);
    sts[j] = sts[j].reshape(ns);
  }
}

// ******************** opts ********************

void Kernel::apply_opt(const Opt& opt, bool append_opt) {
  if (!skip_failed_opts) return apply_opt_(opt, append_opt);
  Kernel saved = *this;
  try {
    apply_opt_(opt, append_opt);
  } catch (const KernelOptError& e) {
    if (debug() >= 4) std::cout << "skipped " << opt.str() << ": " << e.what() << "\n";
    *this = std::move(saved);
  }
}

void Kernel::check_group_smem(int64_t amt) const {
  const int64_t acc_sz = (*reduceop())->dtype.itemsize();
  int64_t upcast_sz = 1, local_sz = 1;
  for (int64_t i = first_upcast(); i < shape_len(); i++)
    if (full_shape()[i] == sts[out_ref].shape()[i]) upcast_sz *= full_shape()[i];
  for (int64_t i = first_reduce() - local_dims; i < first_reduce() + group_for_reduces; i++) local_sz *= full_shape()[i];
  // each reduce of the kernel has its own local buffer
  const int64_t smem_sz = amt * acc_sz * upcast_sz * local_sz * static_cast<int64_t>(reduceops.size());
  opt_check(smem_sz <= opts->shared_max,
            "exceeds maximum shared memory size: needs " + std::to_string(smem_sz) + ", max " + std::to_string(opts->shared_max));
}

// GROUP of a symbolic reduce axis N (or a fixed one g doesn't divide) by g threads: N can't be reshaped
// into N/g x g, so a group axis of size g is inserted before the reduce loops instead, broadcast
// (stride 0) in every tracker whose dim at N isn't reduced (1 where it is, so it is a reduce axis like
// a split one). The lowerer spreads every loop over N across the group's threads (KernelInfo::sym_groups).
void Kernel::apply_sym_group(const Opt& opt, int64_t axis, bool append_opt) {
  opt_check(opts->has_local && opts->has_shared, "target does not support local or shared mem");
  opt_check(opt.amt && *opt.amt > 1, "GROUP of a symbolic dim needs an amount: " + opt.str());
  opt_check(first_reduce() + group_for_reduces <= axis && axis < first_upcast(), "must be reduce axis to group");
  opt_check(!tensor_core, "can't group with tensor cores");
  opt_check(same_reduce_axes(), "can't group with multiple reduces over different axes");
  opt_check(!sym_split_of(axis) && !sym_group_axis(axis), "symbolic axis already unrolled or grouped: " + opt.str());
  check_group_smem(*opt.amt);
  const int64_t g = *opt.amt, at = first_reduce() + group_for_reduces;
  for (ShapeTracker& st : sts) {
    Shape s = st.shape();
    const bool reduced = s[axis] == 1;
    s.insert(s.begin() + at, 1);
    st = st.reshape(s);
    if (!reduced) s[at] = g, st = st.expand(s);
  }
  for (auto& [a, amt] : sym_splits) a += a >= at;
  for (auto& [a, gr] : sym_groups) a += a >= at, gr += gr >= at;
  sym_groups.emplace_back(axis + 1, at);
  group_for_reduces += 1;
  if (append_opt) applied_opts.push_back(opt);
}

// UPCAST of a symbolic global dim N by amt: amt lanes per tile; on the CPU the loop of N/amt tiles
// is followed by a loop over the N%amt left, on a GPU ceil(N/amt) threads take a tile each with the
// last one masked (see KernelInfo and lowerer.cpp). The trackers keep N whole.
namespace {
void apply_sym_upcast(Kernel& k, const Opt& opt, int64_t axis, bool append_opt) {
  opt_check(opt.amt && *opt.amt > 1 && *opt.amt <= 16, "UPCAST of a symbolic dim needs an amount in 2..16: " + opt.str());
  opt_check(axis < k.global_dims(), "UPCAST of a symbolic dim is for global dims (not local or reduce ones): " + opt.str());
  opt_check(!k.sym_split_of(axis), "symbolic axis already upcast: " + opt.str());
  // (as UNROLL: a max under two tiles would fold the tiles' index to 0)
  opt_check(k.full_shape()[axis] >= 2 * *opt.amt, "symbolic dim's max " + std::to_string(k.full_shape()[axis]) + " is under two tiles: " + opt.str());
  opt_check(!k.tensor_core, "can't upcast a symbolic dim with tensor cores");
  // (the masked tiles' lanes and a group's shared-memory reduce gave wrong scores on the GPU: q @ keys^T
  // of head dim 8, GROUP 8 then UPCAST 4 of the keys, test_cuda_symbolic's SeparateCachesHeadDim8EveryStartPos)
  opt_check(!k.group_for_reduces && k.sym_groups.empty(), "can't upcast a symbolic dim of a grouped reduce: " + opt.str());
  // the CPU runs one tail: a second split global dim would need a tail per combination
  opt_check(k.opts->has_local || !k.sym_splits_global(), "the CPU upcasts one symbolic global dim at most: " + opt.str());
  // (a row kernel's full-shape store loops would be shared by the tiles and the tail)
  opt_check(k.opts->has_local || !k.row_kernel(), "the CPU doesn't upcast a symbolic dim of a row kernel: " + opt.str());
  // (the CPU's first loop runs on threads in a big kernel: a split one would run on one)
  opt_check(k.opts->has_local || !k.opts->cpu_threads || axis > 0 || prod(k.full_shape()) < kCpuParallelMinWork,
            "the CPU doesn't upcast the symbolic first dim of a kernel it runs on threads: " + opt.str());
  k.sym_splits.emplace_back(axis, *opt.amt);
  if (append_opt) k.applied_opts.push_back(opt);
}
}  // namespace

// An opt on a symbolic axis: UNROLL of a reduce loop by amt lanes splits it (tiles + tail, see
// KernelInfo); the trackers stay as they are, since N can't be reshaped into N/amt x amt. GROUP
// adds a group axis (apply_sym_group).
void Kernel::apply_sym_opt(const Opt& opt, int64_t axis, bool append_opt) {
  if (opt.op == OptOps::GROUP) return apply_sym_group(opt, axis, append_opt);
  if (opt.op == OptOps::UPCAST) return apply_sym_upcast(*this, opt, axis, append_opt);
  opt_check(opt.op == OptOps::UNROLL, "can't apply " + opt.str() + " to a symbolic dim (UNROLL, UPCAST and GROUP apply)");
  opt_check(opt.amt && *opt.amt > 1 && *opt.amt <= 32, "UNROLL of a symbolic dim needs an amount in 2..32: " + opt.str());
  opt_check(first_reduce() + group_for_reduces <= axis && axis < first_upcast(), "UNROLL is for reduce loops: " + opt.str());
  opt_check(!sym_split_of(axis) && !sym_group_axis(axis), "symbolic axis already unrolled or grouped: " + opt.str());
  // with a max below two tiles the tile loop's index folds to 0 and its loads, hoisted out of a
  // loop that may not run, would read past the end
  opt_check(full_shape()[axis] >= 2 * *opt.amt, "symbolic dim's max " + std::to_string(full_shape()[axis]) + " is under two tiles: " + opt.str());
  opt_check(!tensor_core, "can't unroll a symbolic dim with tensor cores");
  sym_splits.emplace_back(axis, *opt.amt);
  if (append_opt) applied_opts.push_back(opt);
}

void Kernel::apply_opt_(const Opt& opt, bool append_opt) {
  opt_check(!dont_use_locals || (opt.op != OptOps::LOCAL && opt.op != OptOps::GROUP && opt.op != OptOps::GROUPTOP &&
                                 opt.op != OptOps::UPCASTMID),
            "not using locals");
  if (opt.op == OptOps::TC) {
    opt_check(applied_opts.empty(), "tensor core opts must be first");
    opt_check(opt.axis && opt.amt, "tensor core opts must have an axis and amt");
    const int64_t use_tc = getenv("TC", 1);
    opt_check(use_tc == 2 || !opts->tensor_cores.empty(), "must have tensor cores or TC=2");
    opt_check(apply_tc_opt(use_tc, *opt.axis, *opt.amt), "no tensor core available");
    check_tc_index_range();
    applied_opts.push_back(opt);
    return;
  }
  const int64_t axis = opt.real_axis(*this);
  opt_check(axis < static_cast<int64_t>(full_shape().size()), "invalid axis " + opt.str() + " for shape " + to_str(full_shape()));
  opt_check(opt.op == OptOps::NOLOCALS || axis >= 0, "opt needs an axis: " + opt.str());
  opt_check((opt.op != OptOps::GROUP && opt.op != OptOps::GROUPTOP) || !sym_splits_global(), "can't group a reduce under an upcast symbolic dim: " + opt.str());
  if (opt.op != OptOps::NOLOCALS && opt.op != OptOps::SWAP && symbolic_axis(axis)) return apply_sym_opt(opt, axis, append_opt);
  // GROUP of a fixed reduce axis that g doesn't divide (a 4097-long row): a block-stride loop as for a
  // symbolic one, the tail masked by each thread's loop bound
  // (the row's axis only: loops over other reduce axes around it gave wrong sums, batchnorm's 8x10x10. A
  // row kernel's nested reduces over other axes, the aranges of argmax and of cross-entropy's label
  // gather, run inside each thread's loop and fold to index math.)
  if (opt.op == OptOps::GROUP && opt.amt && *opt.amt > 1 && axis >= first_reduce() + group_for_reduces &&
      axis == first_upcast() - 1 && full_shape()[axis] % *opt.amt != 0 && reduces_only_row(axis))
    return apply_sym_group(opt, axis, append_opt);
  opt_check(opt.op == OptOps::NOLOCALS || opt.op == OptOps::SWAP || !sym_group_axis(axis),
            "the group axis of a grouped symbolic dim can't be split: " + opt.str());
  // (an axis a store writes the same element along runs in order: a packed GEMM's K blocks, codegen/pack.cpp, each
  // add to what the blocks before them stored; lanes, threads or padding of it would read a block's sum early)
  opt_check(opt.op == OptOps::NOLOCALS || opt.op == OptOps::SWAP || !stored_unchanged(axis),
            "the store writes the same element along this axis: " + opt.str());

  int64_t amt = -1;
  if (opt.op == OptOps::SWAP) {
    amt = opt.amt.value_or(-1);
  } else if (opt.amt) {
    amt = *opt.amt != 0 ? *opt.amt : full_shape()[axis];
    opt_check(amt > 1, "shift/padto of amt 1 is meaningless: " + opt.str());
    if (opt.op != OptOps::PADTO) opt_check(full_shape()[axis] % amt == 0, "no longer valid shift: " + opt.str() + " on " + to_str(full_shape()));
  }

  if (reduceop() && (opt.op == OptOps::GROUP || opt.op == OptOps::GROUPTOP ||
                     (group_for_reduces && opt.op != OptOps::NOLOCALS && opt.op != OptOps::PADTO)))
    check_group_smem(opt.op == OptOps::UNROLL ? 1 : amt);   // (unrolled reduce lanes are summed before the local store)

  switch (opt.op) {
    case OptOps::LOCAL:   // cyan
      opt_check(opts->has_local, "target does not support local");
      opt_check(axis < global_dims(), "local is for globals");
      shift_to(axis, amt, false, first_reduce());
      local_dims += 1;
      break;
    case OptOps::GROUP: case OptOps::GROUPTOP:   // green
      opt_check(opts->has_local && opts->has_shared, "target does not support local or shared mem");
      opt_check(first_reduce() + group_for_reduces <= axis && axis < first_upcast(), "must be reduce axis to group");
      opt_check(!tensor_core, "can't group with tensor cores");
      // (or the row's axis under nested reduces over others: argmax's arange)
      opt_check(same_reduce_axes() || reduces_only_row(axis), "can't group with multiple reduces over different axes");
      shift_to(axis, amt, opt.op == OptOps::GROUPTOP, first_reduce() + group_for_reduces);
      group_for_reduces += 1;
      break;
    case OptOps::UNROLL:   // purple
      opt_check(axis < first_upcast(), "can't upcasted already upcasted");
      opt_check(amt <= 32, "don't unroll more than 32");
      if (full_shape()[axis] == amt && axis == first_reduce()) local_dims += 1;   // first_reduce moves on; simplify_ones evens it out
      if (full_shape()[axis] == amt && axis < first_reduce() + group_for_reduces) group_for_reduces -= 1;   // fully unrolling a GROUP
      shift_to(axis, amt);
      upcast();
      break;
    case OptOps::UPCAST:   // yellow
      opt_check(axis < first_reduce(), "upcast is for non-reduce");
      opt_check(!(tensor_core && global_dims() <= axis && axis < global_dims() + static_cast<int64_t>(tensor_core->threads.size())),
                "can't upcast TC locals");
      opt_check(amt <= 16, "don't upcast more than 16");
      shift_to(axis, amt);
      upcast();
      break;
    case OptOps::UPCASTMID:
      opt_check(false, "UPCASTMID is for image dtypes, which tinygrad.cpp doesn't have");
      break;
    case OptOps::NOLOCALS:
      opt_check(opts->has_local && !dont_use_locals, "NOLOCALS is meaningless if target does not support local or already not using locals");
      opt_check(local_dims == 0 && group_for_reduces == 0, "can't have no locals with locals");
      dont_use_locals = true;
      break;
    case OptOps::SWAP: {
      opt_check(axis < amt && amt < global_dims(), "swap is only for globals with axis < amt: " + opt.str());
      std::vector<int> perm(shape_len());
      std::iota(perm.begin(), perm.end(), 0);
      std::swap(perm[axis], perm[amt]);
      reshape_and_permute(nullptr, perm);
      break;
    }
    case OptOps::PADTO: {
      opt_check(vars.empty(), "PADTO does not work with symbolic shape");
      opt_check(!row_kernel(), "PADTO of a row kernel would gate its stores");
      opt_check(axis < first_upcast(), "cannot pad upcasted");
      if (first_reduce() <= axis) {
        // padding a reduce axis is only right for SUM of ops with f(0) = 0
        const UOp r = *reduceop();
        opt_check(r->as<ReduceArg>().op == ReduceOps::SUM && !has_ast_op(r->src[0], [](const UOp& u) {
                    if (u->op != Ops::ALU) return false;
                    if (u->is<UnaryOps>()) return is_unsafe_pad_op(u->as<UnaryOps>());
                    return u->is<BinaryOps>() && is_unsafe_pad_op(u->as<BinaryOps>());
                  }),
                  "cannot pad");
      }
      bool padded = false;
      for (ShapeTracker& st : sts) {
        const int64_t s = st.shape()[axis];
        if (s == 1) continue;   // reduced
        opt_check(s > amt / 4, "pad adds more than quadruple the work");
        if (const int64_t ru = (s + amt - 1) / amt * amt - s) {
          std::vector<std::pair<int64_t, int64_t>> arg(st.shape().size(), {0, 0});
          arg[axis] = {0, ru};   // pad right seems to be faster
          st = st.pad(arg);
          padded = true;
        }
      }
      opt_check(padded, "nothing was padded");
      break;
    }
    case OptOps::TC: break;
  }
  if (append_opt) applied_opts.push_back(opt);
  if (simplify_ones() && tensor_core_opts) tensor_core_opts->fix_axes(axis);   // the TC axes move with removed ones
  check_tc_index_range();
}

Kernel& Kernel::required_optimizations() { return *this; }   // only images have required opts

// ******************** names ********************

std::vector<std::string> Kernel::colors() const {
  std::vector<std::string> c(global_dims(), dont_use_locals ? "BLUE" : "blue");
  c.insert(c.end(), local_dims, "cyan");
  const auto mid = upcast_in_mid_reduce_axes();
  for (int64_t i = first_reduce(); i < first_reduce() + group_for_reduces; i++)
    c.push_back(std::find(mid.begin(), mid.end(), i) != mid.end() ? "white" : "green");
  c.insert(c.end(), first_upcast() - (first_reduce() + group_for_reduces), "red");
  for (int64_t i = first_upcast(); i < shape_len(); i++) c.push_back(full_shape()[i] != sts[out_ref].shape()[i] ? "magenta" : "yellow");
  TG_ASSERT(static_cast<int64_t>(c.size()) == shape_len(), "colors size mismatch");
  return c;
}

std::string Kernel::colored_shape(int pad, bool dense) const {
  std::string ret;
  size_t visible = 0;
  const auto c = colors();
  for (size_t i = 0; i < c.size(); i++) {
    std::string s = std::to_string(full_shape()[i]);
    if (!dense && s.size() < 4) s = std::string(4 - s.size(), ' ') + s;
    if (i) ret += " ", visible += 1;
    ret += colored(s, c[i]);
    visible += s.size();
  }
  if (pad > static_cast<int>(visible)) ret += std::string(pad - visible, ' ');
  return ret;
}

const std::string& Kernel::name() {
  if (name_) return *name_;
  const bool only_buffers = !has_ast_op(ast, [](const UOp& u) { return u->op == Ops::ALU || u->op == Ops::CAST || u->op == Ops::BITCAST; });
  std::string n = reduceop() ? "r" : (only_buffers ? "C" : "E");
  n += ast->src.size() > 1 ? std::to_string(ast->src.size()) + "_" : "_";
  const auto c = colors();
  for (size_t i = 0; i < c.size(); i++) n += (i ? colored("_", "BLACK") : "") + colored(std::to_string(full_shape()[i]), c[i]);
  // name the function something unique: the second kernel with this name gets "n1"
  static std::mutex mu;
  static std::map<std::string, int> kernel_cnt;
  std::lock_guard<std::mutex> lock(mu);
  const int cnt = ++kernel_cnt[to_function_name(n)];
  if (cnt > 1) n += colored("n" + std::to_string(cnt - 1), "BLACK");
  name_ = n;
  return *name_;
}

// ******************** to the lowered program ********************

UOp Kernel::get_optimized_ast() const {
  using StFn = std::function<ShapeTracker(const ShapeTracker&)>;
  // memo per (node, ShapeTracker transform): a tensor core's operands are rebuilt with permuted ShapeTrackers
  std::map<std::pair<const UOpNode*, const StFn*>, UOp> memo;
  std::function<UOp(const UOp&, const StFn*)> fixup_st = [&](const UOp& op, const StFn* apply_to_st) -> UOp {
    if (auto it = memo.find({op.get(), apply_to_st}); it != memo.end()) return it->second;
    auto fixup = [&](const UOp& x) { return fixup_st(x, apply_to_st); };
    UOp ret;
    if (is_buffer_op(op)) {
      const size_t idx = std::find(bufs.begin(), bufs.end(), op) - bufs.begin();
      TG_ASSERT(idx < bufs.size(), "buffer op not in the kernel's bufs: " + op.str());
      std::vector<UOp> src;
      for (const UOp& s : op->src)
        src.push_back(s->op == Ops::SHAPETRACKER ? st_uop(apply_to_st ? (*apply_to_st)(sts[idx]) : sts[idx]) : fixup(s));
      ret = UOp(op->op, op->dtype, src, op->arg);
    } else if (op->op == Ops::REDUCE_AXIS) {
      const size_t reduce_idx = bufs.size() + 2 * (std::find(reduceops.begin(), reduceops.end(), op) - reduceops.begin());
      std::vector<int64_t> axes;
      for (int64_t i = first_reduce() + group_for_reduces; i < shape_len(); i++)
        if (sts[reduce_idx].shape()[i] != sts[reduce_idx + 1].shape()[i]) axes.push_back(i);
      const ReduceOps rop = op->as<ReduceArg>().op;
      const bool tc_reduce = std::any_of(bufs_for_tensor_core.begin(), bufs_for_tensor_core.end(), [&](auto& b) { return b.first == op; });
      if (tc_reduce && tensor_core) {
        TG_ASSERT(!apply_to_st, "double tensor core? not supported");
        ret = tensor_core_reduce(op, axes, fixup_st);
        memo.emplace(std::make_pair(op.get(), apply_to_st), ret);
        return ret;
      }
      ret = UOp(Ops::REDUCE_AXIS, op->dtype, {fixup(op->src[0])}, ReduceArg{rop, axes});
      // (a reduce nested in a row kernel's reduce doesn't reduce the grouped axes: each thread has its own)
      bool grouped = false;
      for (int64_t i = first_reduce(); i < first_reduce() + group_for_reduces; i++)
        grouped = grouped || sts[reduce_idx].shape()[i] != sts[reduce_idx + 1].shape()[i];
      if (grouped) {
        // the partial reduces meet in local memory; the grouped dims are reduced after a barrier
        Shape local_shape(global_dims(), 1);
        for (int64_t i = global_dims(); i < global_dims() + local_dims + group_for_reduces; i++) local_shape.push_back(full_shape()[i]);
        local_shape.insert(local_shape.end(), first_upcast() - group_for_reduces - first_reduce(), 1);
        for (auto& [sz, st, r] : upcasted_axis(out_ref)) local_shape.push_back(sz);
        const ShapeTracker lst = ShapeTracker::from_shape(local_shape);
        // one buffer per reduce: a second reduce's partials must not overwrite the first's before all threads read them
        const std::string lname = "temp" + std::to_string(1 + (reduce_idx - bufs.size()) / 2);
        UOp lbuf(Ops::DEFINE_LOCAL, op->dtype.ptr_to(true), {UOp::const_(dtypes::int32, prod(local_shape))}, lname);
        UOp lstore(Ops::STORE, dtypes::void_, {lbuf, st_uop(lst), ret});
        UOp lload(Ops::LOAD, op->dtype, {lbuf, st_uop(lst), lstore});
        std::vector<int64_t> gaxes;
        for (int64_t i = first_reduce(); i < first_reduce() + group_for_reduces; i++) gaxes.push_back(i);
        ret = UOp(Ops::REDUCE_AXIS, op->dtype, {lload}, ReduceArg{rop, gaxes});
      }
    } else {
      std::vector<UOp> src;
      for (const UOp& s : op->src) src.push_back(fixup(s));
      Arg arg = op->op == Ops::SINK ? KernelInfo{local_dims, upcasted, dont_use_locals, sym_splits, sym_groups}.to_arg() : op->arg;
      ret = UOp(op->op, op->dtype, src, arg);
    }
    memo.emplace(std::make_pair(op.get(), apply_to_st), ret);
    return ret;
  };
  return fixup_st(ast, nullptr);
}

const std::vector<UOp>& Kernel::linearize() {
  if (!uops.empty()) return uops;
  const UOp modified_ast = get_optimized_ast();
  if (debug() >= 3) {
    std::cout << name() << "\n";
    if (getenv("RAWAST")) std::cout << ast.str() << "\n";
    std::cout << modified_ast.str() << "\n[";
    for (size_t i = 0; i < applied_opts.size(); i++) std::cout << (i ? ", " : "") << applied_opts[i].str();
    std::cout << "]" << std::endl;
  }
  Lowered l = codegen(modified_ast, *opts);
  lowered = l.rewritten;
  uops = std::move(l.uops);
  return uops;
}

RenderedProgram Kernel::to_program(const std::optional<std::string>& name_override) {
  // a tensor-core GEMM the shared-memory template covers is rendered from it (codegen/tc_gemm.cpp)
  if (auto p = tc_gemm_program(*this, name_override ? *name_override : name())) return *p;
  linearize();
  return render(*opts, name_override ? *name_override : name(), uops);
}

int64_t Kernel::mem_estimate() const {
  // per (LOAD or STORE, buffer) the largest access in bytes, as tinygrad
  std::map<std::pair<int, int64_t>, int64_t> mem;
  for (const UOp& b : bufs) {
    if (b->op == Ops::CONST || b->src[0]->op != Ops::DEFINE_GLOBAL) continue;
    const int64_t bytes = b->src[0]->dtype.base().itemsize() * st_of(b->src[1]).real_size();
    int64_t& m = mem[{b->op == Ops::STORE, b->src[0]->as<int64_t>()}];
    m = std::max(m, bytes);
  }
  int64_t total = 0;
  for (auto& [_, v] : mem) total += v;
  return total;
}

}  // namespace tg
