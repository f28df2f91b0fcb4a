// Lowerer (tinygrad 0.9.2 codegen/lowerer.py): AST + ShapeTrackers -> RANGE/SPECIAL/LOAD/STORE/REDUCE graph.
#include "access.hpp"
#include "codegen/lowerer.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "codegen/kernel.hpp"
#include "codegen/uopgraph.hpp"
#include "cpu_threads.hpp"
#include "shape/shapetracker_arg.hpp"
#include "tg/helpers.hpp"

namespace tg {

namespace {

UOp iconst(int64_t v) { return UOp::const_(dtypes::int32, v); }

// which old dims make up each new dim (tinygrad's get_contraction); empty when it isn't a merge
std::vector<std::vector<int64_t>> get_contraction(const std::vector<int64_t>& old_shape, const std::vector<int64_t>& new_shape) {
  std::vector<int64_t> acc_old, acc_new;
  int64_t a = 1;
  for (int64_t s : old_shape) acc_old.push_back(a *= s);
  a = 1;
  for (int64_t s : new_shape) acc_new.push_back(a *= s);
  std::vector<int64_t> split;
  for (int64_t acc : acc_new) {
    if (acc == 1) { split.push_back(0); continue; }
    auto it = std::find(acc_old.begin(), acc_old.end(), acc);
    if (it == acc_old.end()) return {};
    split.push_back(it - acc_old.begin() + 1);
  }
  std::vector<std::vector<int64_t>> ret;
  for (size_t i = 0; i < split.size(); i++) {
    int64_t st = i == 0 ? 0 : split[i - 1], ed = i + 1 < split.size() ? split[i] : static_cast<int64_t>(old_shape.size());
    std::vector<int64_t> r;
    for (int64_t j = st; j < ed; j++) r.push_back(j);
    ret.push_back(r);
  }
  return ret;
}

std::vector<int64_t> limit_dims(std::vector<int64_t> dims, const std::vector<int64_t>& max_sizes) {
  auto too_big = [&] {
    if (dims.size() > max_sizes.size()) return true;
    for (size_t i = 0; i < dims.size(); i++)
      if (dims[i] > max_sizes[i]) return true;
    return false;
  };
  while (too_big()) {
    bool merged = false;
    for (size_t i = 0; i + 1 < dims.size() && i < max_sizes.size(); i++) {
      if (dims[i] * dims[i + 1] <= max_sizes[i]) {
        dims[i] *= dims[i + 1];
        dims.erase(dims.begin() + i + 1);
        merged = true;
        break;
      }
    }
    if (!merged) throw Error("cannot fit launch dims " + to_str(dims) + " into the device's maximum " + to_str(max_sizes));
  }
  return dims;
}

// the value of an AST CONST (its arg; the node has a SHAPETRACKER source)
ConstType ast_const(const UOp& x) {
  if (x->is<bool>()) return x->as<bool>();
  if (x->is<int64_t>()) return x->as<int64_t>();
  TG_ASSERT(x->is<double>(), "AST CONST without a value: " + x.str());
  return x->as<double>();
}

// dtypes C vector extensions take (no bool vectors; half is computed in float)
bool vector_acc_ok(DType dt) {
  return dt.count == 1 && dt != dtypes::bool_ && dt.kind != ScalarKind::float16 && dt.kind != ScalarKind::bfloat16;
}

bool is_true(const UOp& v) { return v->op == Ops::CONST && v->dtype == dtypes::bool_ && const_to_int(v.const_value()) == 1; }

// a transcendental op (exp2, log2, sin): costly enough on the CPU that storing its result and
// reading it back from L1 beats computing it again
bool has_transcendental(const UOp& root) {
  std::vector<UOp> work{root};
  std::unordered_map<const UOpNode*, bool> seen;
  while (!work.empty()) {
    UOp u = work.back();
    work.pop_back();
    if (!seen.emplace(u.get(), true).second || u->op == Ops::REDUCE_AXIS) continue;
    if (u->op == Ops::ALU && u->is<UnaryOps>() &&
        (u->as<UnaryOps>() == UnaryOps::EXP2 || u->as<UnaryOps>() == UnaryOps::LOG2 || u->as<UnaryOps>() == UnaryOps::SIN))
      return true;
    for (const UOp& x : u->src) work.push_back(x);
  }
  return false;
}

// root with every use of `from` outside a REDUCE_AXIS replaced by `to` (nullopt: none)
std::optional<UOp> replace_outside_reduces(const UOp& root, const UOp& from, const UOp& to) {
  std::unordered_map<const UOpNode*, UOp> memo;
  bool found = false;
  auto go = [&](auto&& self, const UOp& u) -> UOp {
    if (u.get() == from.get()) return found = true, to;
    if (u->op == Ops::REDUCE_AXIS || u->src.empty()) return u;
    if (auto it = memo.find(u.get()); it != memo.end()) return it->second;
    std::vector<UOp> src;
    bool changed = false;
    for (const UOp& x : u->src) changed |= (src.push_back(self(self, x)), src.back().get() != x.get());
    return memo[u.get()] = changed ? UOp(u->op, u->dtype, src, u->arg) : u;
  };
  UOp ret = go(go, root);
  return found ? std::optional<UOp>(ret) : std::nullopt;
}

class Lowerer {
 public:
  Lowerer(const UOp& ast, const Renderer& opts) : opts_(opts) {
    const KernelInfo ki = KernelInfo::from_arg(ast->arg);
    std::vector<UOp> nodes = ast.toposort();
    Shape full_shape;
    std::vector<Shape> local_load_shapes;
    for (const UOp& u : nodes) {
      if (u->op != Ops::SHAPETRACKER) continue;
      const Shape& s = st_of(u).shape();
      if (full_shape.empty()) full_shape = s;
      TG_ASSERT(s.size() == full_shape.size(), "shapes of one kernel differ in rank: " + to_str(s) + " vs " + to_str(full_shape));
      for (size_t i = 0; i < s.size(); i++) full_shape[i] = std::max(full_shape[i], s[i]);
    }
    // symbolic dims: the size expression of the tracker that reaches the full (max) size
    std::vector<UOp> full_sym(full_shape.size());
    for (const UOp& u : nodes) {
      if (u->op != Ops::SHAPETRACKER || !st_of(u).views.back().sym) continue;
      const View& v = st_of(u).views.back();
      for (size_t i = 0; i < full_shape.size(); i++)
        if (!full_sym[i] && !v.sym->shape[i].is_const() && v.shape[i] == full_shape[i]) {
          const UOp& e = Access::uop(v.sym->shape[i]);
          full_sym[i] = e->dtype == dtypes::int32 ? e : e.cast(dtypes::int32);
        }
    }
    auto dim = [&](int64_t i) { return full_sym[i] ? full_sym[i] : iconst(full_shape[i]); };
    auto sym_slice = [&](int64_t lo, int64_t hi) { return std::vector<UOp>(full_sym.begin() + lo, full_sym.begin() + hi); };
    for (const UOp& u : nodes)
      if (u->op == Ops::LOAD && u->src[0]->op == Ops::DEFINE_LOCAL) local_load_shapes.push_back(st_of(u->src[1]).shape());
    const int64_t n = static_cast<int64_t>(full_shape.size());
    const int64_t first_upcasted = n - ki.upcasted;
    // The reduce axes: where the first store's shape is 1 (one reduce), and every axis a REDUCE_AXIS
    // reduces (several reduces over the rows of a full-shape output: softmax, layernorm)
    Shape out_shape = st_of(ast->src[0]->src[1]).shape();
    for (const UOp& u : nodes)
      if (u->op == Ops::REDUCE_AXIS)
        for (int64_t a : u->as<ReduceArg>().axes) out_shape[a] = 1;
    int64_t first_reduce = first_upcasted;
    for (int64_t i = 0; i < first_upcasted; i++)
      if (out_shape[i] != full_shape[i]) { first_reduce = i; break; }
    int64_t group_for_reduces = 0;
    if (!local_load_shapes.empty())
      for (int64_t i = first_reduce; i < first_upcasted; i++) group_for_reduces += local_load_shapes[0][i] != out_shape[i];
    const int64_t global_dims = first_reduce - ki.local_dims;
    auto slice = [&](int64_t lo, int64_t hi) { return std::vector<int64_t>(full_shape.begin() + lo, full_shape.begin() + hi); };
    first_group_ = first_reduce, end_group_ = first_reduce + group_for_reduces;
    full_shape_ = full_shape, full_sym_ = full_sym;
    // a global axis a store writes the same element along (a packed GEMM's K blocks, codegen/pack.cpp: each block
    // adds to what the blocks before it stored) runs in order on one thread: never in the CPU's parallel loop (a
    // grouped reduce's group axis, past first_reduce, is the other kind of such axis: never in that loop either)
    stored_unchanged_.assign(full_shape.size(), false);
    for (const UOp& u : nodes)
      if (u->op == Ops::STORE && u->src[0]->op == Ops::DEFINE_GLOBAL) {
        const ShapeTracker& st = st_of(u->src[1]);
        const auto rs = st.real_strides();
        for (size_t i = 0; i < rs.size(); i++) stored_unchanged_[i] = stored_unchanged_[i] || (st.shape()[i] > 1 && rs[i] == 0);
      }
    sym_splits_ = ki.sym_splits, sym_groups_ = ki.sym_groups;
    for (auto [a, amt] : sym_splits_)
      TG_ASSERT(((a >= first_reduce + group_for_reduces && a < first_upcasted) || a < global_dims) && full_sym[a] && amt > 1,
                "a split axis is a symbolic reduce loop or global dim: axis " + std::to_string(a) + " of " + to_str(full_shape));
    for (auto [a, g] : sym_groups_)
      TG_ASSERT(a >= first_reduce + group_for_reduces && a < first_upcasted && (full_sym[a] || full_shape[a] % full_shape[g] != 0) &&
                    !split_of(a) && g >= first_reduce &&
                    g < first_reduce + group_for_reduces && !full_sym[g],
                "a grouped axis is a symbolic (or not divisible) reduce loop and its group axis a group dim: axes " +
                    std::to_string(a) + ", " + std::to_string(g) + " of " + to_str(full_shape));

    if (opts.has_local) {
      // an upcast symbolic global dim launches ceil(N/amt) threads of amt lanes (masked_tiles)
      std::vector<int64_t> gdims = slice(0, global_dims);
      std::vector<UOp> gsym = sym_slice(0, global_dims);
      for (auto [a, amt] : sym_splits_)
        if (a < global_dims) gdims[a] = (gdims[a] + amt - 1) / amt, gsym[a] = (gsym[a] + iconst(amt - 1)) / iconst(amt);
      if (ki.dont_use_locals) {
        TG_ASSERT(ki.local_dims == 0, "can't use locals if there's no local dims");
        idxs_ = get_grouped_dims("idx", gdims, opts.global_max, true, gsym);
      } else {
        idxs_ = get_grouped_dims("gidx", gdims, opts.global_max, true, gsym);
        for (const UOp& l : get_grouped_dims("lidx", slice(global_dims, first_reduce + group_for_reduces), opts.local_max, false,
                                             sym_slice(global_dims, first_reduce + group_for_reduces)))
          idxs_.push_back(l);
      }
      masked_tiles(global_dims);
    } else {
      // the CPU runs global dims as loops; a big kernel runs its first loop on threads (not a split one:
      // its tail loop follows the tiles' loop), which covers the first few dims where one is short
      const int64_t c = first_reduce > 0 && !split_of(0) && !stored_unchanged_[0] ? parallel_dims(first_reduce) : 0;
      const bool parallel = opts.cpu_threads && c > 0 && prod(slice(0, c)) >= 2 && prod(full_shape) >= kCpuParallelMinWork;
      if (parallel && c > 1) idxs_ = collapsed_loop(c), collapsed_ = c;
      for (int64_t i = static_cast<int64_t>(idxs_.size()); i < first_reduce; i++) {
        std::vector<int64_t> arg{i, 0};
        if (i == 0 && parallel) arg.push_back(1);
        idxs_.push_back(UOp(Ops::RANGE, dtypes::int32, {iconst(0), dim(i)}, arg));
      }
    }
    // Outside the reduces a reduce loop axis is the loop of a full-shape store (a fused softmax's
    // output): a "reduce" range of the linearizer with a high axis so it opens after the reduces' loops.
    for (int64_t i = first_reduce + group_for_reduces; i < first_upcasted; i++) {
      if (auto g = group_of(i)) {   // spread over the group's threads
        idxs_.push_back(block_stride_loop(i, *g, kOutLoopAxis + i).second);
        continue;
      }
      idxs_.push_back(UOp(Ops::RANGE, dtypes::int32, {iconst(0), dim(i)}, std::vector<int64_t>{kOutLoopAxis + i, 1}));
    }
    for (int64_t i = first_upcasted; i < n; i++) {
      TG_ASSERT(!full_sym[i], "a symbolic dim can't be upcast");
      std::vector<UOp> cs;
      for (int64_t j = 0; j < full_shape[i]; j++) cs.push_back(iconst(j));
      idxs_.push_back(UOp(Ops::EXPAND, dtypes::int32, cs, std::vector<int64_t>{i, full_shape[i]}));
    }
    // One group dim on threadIdx.x, a multiple of 32: each warp's 32 partials combine through
    // shuffles, so after the barrier the reduce reads one value per warp (temp[32*w]).
    warp_reduce_ = opts.has_warp_shuffle && group_for_reduces == 1 && ki.local_dims == 0 && !full_sym[first_reduce] &&
                   full_shape[first_reduce] % 32 == 0 && warp_dtype_ok(nodes);
    // a row kernel: several reduces over the loop axes, or a store along the grouped axes
    int64_t stage1 = 0;
    for (const UOp& u : nodes)
      if (u->op == Ops::REDUCE_AXIS)
        stage1 += std::none_of(u->as<ReduceArg>().axes.begin(), u->as<ReduceArg>().axes.end(),
                               [&](int64_t a) { return a >= first_group_ && a < end_group_; });
    row_kernel_ = stage1 > 1;
    for (const UOp& u : nodes)
      if (u->op == Ops::STORE && u->src[0]->op == Ops::DEFINE_GLOBAL)
        for (int64_t a = first_group_; a < end_group_; a++) row_kernel_ = row_kernel_ || st_of(u->src[1]).shape()[a] > 1;
    claims_.assign(n, 0);
    std::optional<std::vector<UOp>> tail;
    if (!opts.has_local)
      for (auto [a, amt] : sym_splits_)
        if (a < first_reduce) {
          TG_ASSERT(!tail, "the CPU splits one symbolic global dim at most: " + to_str(full_shape));
          tail = tiles_and_tail(a, amt, first_reduce);
        }
    ctx_id(Ctx{idxs_, std::vector<UOp>(n)});   // context 0: outside every reduce (the tiles of a split global dim)
    if (tail) out_ctxs_.push_back(ctx_id(Ctx{*tail, std::vector<UOp>(n), 1}));   // the kernel's body once more
  }

  // How many leading global dims the CPU's parallel loop covers. The pool splits the loop's n iterations
  // into min(threads, n) slices of floor or ceil(n/threads): a short first dim (8 weight-gradient blocks or
  // 10 classes on 16 threads) leaves threads idle, and one not a multiple of the thread count leaves a tail.
  // While the slices keep under 90% of the threads busy, the next global dim joins the loop (not a symbolic
  // or split one, and not one that would leave an iteration under 64 elements of work: an elementwise
  // kernel's contiguous last dim stays an inner loop). A big kernel's loop also takes the next dims while
  // it has under cpu_units_per_thread iterations a thread and each keeps kCpuUnitWork elements: the pool balances
  // the threads by iterations (runtime/threadpool.hpp), and a 1024^3 GEMM's 8 column panels on 2 threads let one
  // thread wait up to a panel (an eighth of the kernel) for a late or slower other; its 8 x 128 (panel, row
  // group) iterations keep the panel order. One dim is enough at 1 thread, and at 2 for a small kernel unless
  // its extent is odd and short.
  int64_t parallel_dims(int64_t first_reduce) const {
    if (full_sym_[0] || prod(full_shape_) == 0) return 1;
    const int64_t threads = cpu_threads();
    auto busy = [&](int64_t n) { return static_cast<double>(n) / static_cast<double>(threads * ((n + threads - 1) / threads)); };
    auto fits = [&](int64_t c, int64_t inner) { return c < first_reduce && !full_sym_[c] && !split_of(c) && !stored_unchanged_[c] && inner / full_shape_[c] >= 64; };
    int64_t c = 1, n = full_shape_[0], inner = prod(full_shape_) / n;
    while (busy(n) < 0.9 && fits(c, inner)) n *= full_shape_[c], inner /= full_shape_[c++];
    while (threads > 1 && n < threads * cpu_units_per_thread(threads) && fits(c, inner) && inner / full_shape_[c] >= kCpuUnitWork)
      n *= full_shape_[c], inner /= full_shape_[c++];
    return c;
  }
  // One parallel loop r over the first c global dims (idx_i = r / prod(dims after i) % dim_i, computed once per
  // iteration outside the inner loops); the RANGE keeps axis 0, so it opens first.
  std::vector<UOp> collapsed_loop(int64_t c) const {
    int64_t n = 1;
    for (int64_t i = 0; i < c; i++) n *= full_shape_[i];
    UOp r(Ops::RANGE, dtypes::int32, {iconst(0), iconst(n)}, std::vector<int64_t>{0, 0, 1});
    std::vector<UOp> idx(c);
    for (int64_t i = c - 1, inner = 1; i >= 0; inner *= full_shape_[i--]) {
      UOp q = inner > 1 ? r / iconst(inner) : r;
      idx[i] = i > 0 ? q % iconst(full_shape_[i]) : q;
    }
    return idx;
  }

  // UPCAST of a symbolic global dim N by amt on the CPU: the tiles' loop r < N/amt (a plain global
  // loop, index r*amt + amt lanes) replaces the dim's loop in idxs_; the tail's loop t < N%amt, index
  // (N/amt)*amt + t, runs after it: its RANGE arg is past every other, so the linearizer opens it
  // last, and the global loops inside it are loops of its own (opened after it, in axis order).
  // Returns the tail's indexes.
  std::vector<UOp> tiles_and_tail(int64_t a, int64_t amt, int64_t first_reduce) {
    const Loop split = split_loop(a, amt, {a, 0}, {kTailLoopAxis + a, 1});
    std::vector<UOp> tail = idxs_;
    tail[a] = split.tail_idx;
    for (int64_t i = a + 1; i < first_reduce; i++)
      tail[i] = UOp(Ops::RANGE, dtypes::int32, {iconst(0), dim(i)}, std::vector<int64_t>{kTailLoopAxis + i, 1});
    idxs_[a] = split.idx;
    return tail;
  }
  // UPCAST of a symbolic global dim N by amt on a GPU: ceil(N/amt) threads (set in the launch dims),
  // thread g takes g*amt + lanes, and every load and store is masked to < N (the last tile's lanes past N)
  void masked_tiles(int64_t global_dims) {
    for (auto [a, amt] : sym_splits_) {
      if (a >= global_dims) continue;
      idxs_[a] = idxs_[a] * iconst(amt) + lanes(a, amt);
      tile_masks_.emplace_back(a, idxs_[a].lt(dim(a)));
    }
  }
  UOp lanes(int64_t a, int64_t amt) const {
    std::vector<UOp> ls;
    for (int64_t j = 0; j < amt; j++) ls.push_back(iconst(j));
    return UOp(Ops::EXPAND, dtypes::int32, ls, std::vector<int64_t>{kSplitLaneAxis + a, amt});
  }

  // the group reduce's local buffer holds a dtype __shfl_xor_sync takes, and the reduce is SUM or MAX
  static bool warp_dtype_ok(const std::vector<UOp>& nodes) {
    for (const UOp& u : nodes) {
      if (u->op != Ops::DEFINE_LOCAL) continue;
      const DType d = u->dtype.base();
      if (!(d == dtypes::float32 || d == dtypes::int32 || d == dtypes::uint32 || d == dtypes::float16)) return false;
    }
    return true;
  }
  // all lanes of a warp end with op over the warp's 32 values (a butterfly of xor shuffles)
  static UOp warp_allreduce(UOp v, BinaryOps op) {
    for (int64_t m : {16, 8, 4, 2, 1}) v = v.alu(op, UOp(Ops::ALU, v->dtype, {v, UOp::const_(dtypes::int32, m)}, BinaryOps::SHFL_XOR));
    return v;
  }

  UOp to_uop(const UOp& x, int ctx = 0) {
    const std::pair<const UOpNode*, int> key{x.get(), ctx};
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    UOp ret = lower(x, ctx);
    cache_.emplace(key, ret);
    return ret;
  }

  // Exp once (CPU row kernels): a full-shape output whose value reuses a costly sum's input
  // (softmax: e * 1/sum(e), e = exp(x - max)) stores e from the sum's loop and reads it back in the
  // output loop (from L1: the row was just written) instead of computing it again. The output
  // buffer must take e's dtype and be a plain store of the full shape (every element written by
  // the sum's loop before the output loop reads it back). Returns the AST to lower.
  UOp stash_row_values(const UOp& ast) {
    if (opts_.has_local || !row_kernel_ || getenv("ROW_STASH", 1) == 0) return ast;
    std::vector<UOp> stores = ast->src;
    bool changed = false;
    for (UOp& s : stores) {
      const UOp &buf = s->src[0], &st = s->src[1], &val = s->src[2];
      if (buf->op != Ops::DEFINE_GLOBAL || st->op != Ops::SHAPETRACKER || buf->dtype.base() != val->dtype) continue;
      const ShapeTracker& sst = st_of(st);
      if (sst.shape() != full_shape_ || sst.views.size() != 1 || sst.views[0].mask || sst.symbolic()) continue;
      for (const UOp& r : val.toposort()) {
        if (r->op != Ops::REDUCE_AXIS || r->as<ReduceArg>().op != ReduceOps::SUM || stash_.count(r.get())) continue;
        // a sum with no loop (its axes all upcast) computes e at the output's own indexes: nothing to save
        const auto& axes = r->as<ReduceArg>().axes;
        if (std::all_of(axes.begin(), axes.end(), [&](int64_t a) { return idxs_[a]->op == Ops::EXPAND; })) continue;
        const UOp& e = r->src[0];
        if (e->dtype != val->dtype || !has_transcendental(e)) continue;
        auto nv = replace_outside_reduces(val, e, UOp(Ops::LOAD, e->dtype, {buf, st}));
        if (!nv) continue;
        stash_.emplace(r.get(), std::make_pair(buf, st));
        s = UOp(Ops::STORE, s->dtype, {buf, st, *nv}, s->arg);
        changed = true;
        break;
      }
    }
    return changed ? UOp(Ops::SINK, ast->dtype, stores, ast->arg) : ast;
  }

 private:
  // The indexes one part of the kernel sees. Context 0 is outside every reduce; each REDUCE_AXIS
  // lowers its source in a context where its axes are its own loops, so several reduces over the
  // same axis (softmax's max and sum) are separate loops, each re-reading the row, and a
  // full-shape store after them loops over the axis once more. red[a]: the RANGE a reduce over
  // axis a closes (idx[a] is 32*red[a] for a warp reduce's group axis); empty outside reduces.
  struct Ctx {
    std::vector<UOp> idx, red;
    int part = 0;   // 1 in the tail of a split global dim (its reduces get loops of their own)
  };
  struct CtxKeyHash {
    size_t operator()(const std::vector<const UOpNode*>& v) const {
      size_t h = 0;
      for (const UOpNode* p : v) h = h * 31 + std::hash<const void*>()(p);
      return h;
    }
  };
  int ctx_id(Ctx c) {
    std::vector<const UOpNode*> key;
    for (const UOp& u : c.idx) key.push_back(u.get());
    for (const UOp& u : c.red) key.push_back(u.get());
    auto [it, fresh] = ctx_ids_.emplace(std::move(key), static_cast<int>(ctxs_.size()));
    if (fresh) ctxs_.push_back(std::move(c));
    return it->second;
  }
  bool is_group_axis(int64_t a) const { return a >= first_group_ && a < end_group_; }
  UOp dim(int64_t a) const { return full_sym_[a] ? full_sym_[a] : iconst(full_shape_[a]); }

  // The loops of one reduce node over one of its axes. A plain axis: idx (the index the source sees)
  // and the RANGE the reduce closes (none for an upcast axis: contracted). A split symbolic axis
  // (KernelInfo::sym_splits) has two parts: tiles, idx = r*amt + lanes over r < N/amt with the amt
  // lanes an EXPAND (contracted into a vector accumulator), then the tail, idx = (N/amt)*amt + t
  // over t < N%amt. Every value of N is then exact with no mask in the tiles' loop.
  struct Loop {
    UOp idx, range;
    UOp tail_idx, tail_range;   // set for a split axis
    int64_t lane_axis = 0, amt = 0;
  };
  // a split symbolic axis N: the tiles' loop r < N/amt (index r*amt + amt lanes), then the tail's t < N%amt
  // (index (N/amt)*amt + t); a reduce's or a CPU global dim's, by the RANGE args
  Loop split_loop(int64_t a, int64_t amt, std::vector<int64_t> tile_arg, std::vector<int64_t> tail_arg) const {
    const UOp n = dim(a), tiles = n / iconst(amt);
    UOp r(Ops::RANGE, dtypes::int32, {iconst(0), tiles}, std::move(tile_arg));
    UOp t(Ops::RANGE, dtypes::int32, {iconst(0), n % iconst(amt)}, std::move(tail_arg));
    return Loop{r * iconst(amt) + lanes(a, amt), r, tiles * iconst(amt) + t, t, kSplitLaneAxis + a, amt};
  }
  // The first reduce over an axis gets RANGE {axis, 1} (a grouped axis {1000+axis, 1}), as a kernel
  // with one reduce always had; a later reduce over the same axis adds 2000 per reduce before it;
  // a split axis's tail loop adds 500 (it opens after the tiles' loop). In the tail of a split global
  // dim (part 1) they add kTailReduceAxis: they open after that tail's loop, so inside it.
  const std::vector<Loop>& reduce_loops(const UOp& x, int part) {
    auto [it, fresh] = loops_.try_emplace({x.get(), part});
    if (!fresh) return it->second;
    for (int64_t a : x->as<ReduceArg>().axes) {
      if (idxs_[a]->op == Ops::EXPAND) { it->second.push_back(Loop{}); continue; }   // an upcast axis: contracted
      const int64_t arg = (part ? kTailReduceAxis : 0) + (is_group_axis(a) ? 1000 + a : a) + 2000 * claims_[a]++;
      if (is_group_axis(a) && warp_reduce_) {
        UOp r(Ops::RANGE, dtypes::int32, {iconst(0), iconst(full_shape_[a] / 32)}, std::vector<int64_t>{arg, 1});
        it->second.push_back(Loop{r * iconst(32), r});
      } else if (auto g = group_of(a)) {
        auto [r, idx] = block_stride_loop(a, *g, arg);
        it->second.push_back(Loop{idx, r});
      } else if (auto amt = split_of(a)) {
        it->second.push_back(split_loop(a, *amt, {arg, 1}, {arg + 500, 1}));
      } else {
        UOp r(Ops::RANGE, dtypes::int32, {iconst(0), dim(a)}, std::vector<int64_t>{arg, 1});
        it->second.push_back(Loop{r, r});
      }
    }
    return it->second;
  }
  // a global dim with a loop of its own or in the collapsed parallel loop
  bool is_loop(int64_t a) const { return idxs_[a]->op == Ops::RANGE || a < collapsed_; }
  std::optional<int64_t> split_of(int64_t axis) const {
    for (auto [a, amt] : sym_splits_)
      if (a == axis) return amt;
    return std::nullopt;
  }
  std::optional<int64_t> group_of(int64_t axis) const {   // the group axis of a grouped symbolic axis
    for (auto [a, g] : sym_groups_)
      if (a == axis) return g;
    return std::nullopt;
  }
  // A loop over symbolic axis a spread over group axis ga's g threads: thread l runs r < (N-l+g-1)/g,
  // index r*g + l, so it takes l, l+g, .. < N with no mask (consecutive threads read consecutive
  // elements). (N >= 1 and l < g keep the bound's numerator positive.) Returns (RANGE, index).
  std::pair<UOp, UOp> block_stride_loop(int64_t a, int64_t ga, int64_t range_axis) const {
    const UOp g = iconst(full_shape_[ga]), lid = idxs_[ga];
    const UOp bound = (dim(a) + iconst(full_shape_[ga] - 1) - lid) / g;
    UOp r(Ops::RANGE, dtypes::int32, {iconst(0), bound}, std::vector<int64_t>{range_axis, 1});
    return {r, r * g + lid};
  }

  UOp lower_buffer_op(const UOp& x, int ctx) {
    const bool is_const = x->op == Ops::CONST;
    const UOp& st = x->src[is_const ? 0 : 1];
    const bool local = !is_const && x->src[0]->op == Ops::DEFINE_LOCAL;
    const std::vector<UOp>& idxs = ctxs_[ctx].idx;
    auto [idx, valid] = to_indexed_uops(st_of(st), idxs);
    if (!is_const && !local)
      for (const auto& [a, in_n] : tile_masks_)
        if (st_of(st).shape()[a] != 1) valid = valid & in_n;
    if (is_const) {
      // a symbolic CONST carries its value as a second source: an int expression of DEFINE_VARs
      UOp v = x->src.size() > 1 ? to_uop(x->src[1], ctx).cast(x->dtype) : UOp::const_(x->dtype, ast_const(x));
      return valid.where(v, UOp::const_(x->dtype, int64_t{0}));
    }
    const UOp& buf = x->src[0];
    if (x->op == Ops::LOAD) {
      std::vector<UOp> src{buf, idx};
      if (!is_true(valid)) src.insert(src.end(), {UOp::const_(x->dtype, int64_t{0}), valid});
      if (x->src.size() > 2) {
        // the local store before the barrier runs where the grouped axes are the threads again
        Ctx c = ctxs_[ctx];
        for (int64_t a = first_group_; a < end_group_; a++) c.idx[a] = idxs_[a], c.red[a] = UOp();
        src.push_back(UOp(Ops::BARRIER, dtypes::void_, {to_uop(x->src[2], ctx_id(std::move(c)))}));
      }
      return UOp(Ops::LOAD, x->dtype, src);
    }
    // only the first thread of a group stores the grouped reduce's result (a store along the
    // grouped axis, a fused softmax's output, is spread over the threads instead). A row kernel's
    // threads all store it (the same value): a gate's IF block could take in a later reduce's
    // shuffles and barriers, or the full-shape store's loop, that every thread must run.
    if (!local && !row_kernel_) {
      const Shape& ss = st_of(st).shape();
      for (int64_t a = first_group_; a < end_group_; a++)
        if (ss[a] == 1) valid = valid & idxs[a].eq(iconst(0));
    }
    UOp val = to_uop(x->src[2], ctx);
    if (local && warp_reduce_) {
      const UOp& red = x->src[2];   // the partial reduce stored for the group
      TG_ASSERT(red->op == Ops::REDUCE_AXIS, "a group's local store holds a reduce, not " + red.str());
      val = warp_allreduce(val, red->as<ReduceArg>().op == ReduceOps::SUM ? BinaryOps::ADD : BinaryOps::MAX);
    }
    std::vector<UOp> src{buf, idx, val};
    if (!is_true(valid)) src.push_back(valid);
    return UOp(Ops::STORE, dtypes::void_, src);
  }

  UOp lower_reduce(const UOp& x, int ctx) {
    const ReduceArg& ra = x->as<ReduceArg>();
    TG_ASSERT(ra.op == ReduceOps::SUM || ra.op == ReduceOps::MAX, "the lowerer reduces SUM and MAX, not " + to_string(ra.op));
    const BinaryOps alu_op = ra.op == ReduceOps::SUM ? BinaryOps::ADD : BinaryOps::MAX;
    const auto& loops = reduce_loops(x, ctxs_[ctx].part);
    // one part per choice of tiles or tail on each split axis, combined with the reduce's op
    std::vector<size_t> split;
    for (size_t i = 0; i < loops.size(); i++)
      if (loops[i].tail_range) split.push_back(i);
    UOp ret;
    for (size_t part = 0; part < (size_t{1} << split.size()); part++) {
      Ctx c = ctxs_[ctx];
      std::vector<int64_t> lanes;   // the split axes' lanes this part contracts
      for (size_t i = 0; i < ra.axes.size(); i++) {
        if (!loops[i].idx) continue;
        const size_t si = std::find(split.begin(), split.end(), i) - split.begin();
        const bool tail = si < split.size() && ((part >> si) & 1);
        c.idx[ra.axes[i]] = tail ? loops[i].tail_idx : loops[i].idx;
        c.red[ra.axes[i]] = tail ? loops[i].tail_range : loops[i].range;
        if (si < split.size() && !tail) lanes.insert(lanes.end(), {loops[i].lane_axis, loops[i].amt});
      }
      // a reduce nested in an outer one's block-stride loop (a row kernel's arange: argmax, cross-entropy's
      // label gather) sees that loop's index as min(r*g + l, N-1): the same value, with bounds range analysis
      // can use (r*g + l < N is the loop bound's doing), so the arange's (i + j) % (2N-1) drops and it folds
      for (int64_t a = 0; a < static_cast<int64_t>(c.idx.size()); a++)
        if (c.red[a] && group_of(a) && std::find(ra.axes.begin(), ra.axes.end(), a) == ra.axes.end() && !full_sym_[a])
          c.idx[a] = -((-c.idx[a]).max(iconst(1 - full_shape_[a])));
      const UOp r = reduce_part(x, alu_op, ctx_id(std::move(c)), lanes);
      ret = ret ? ret.alu(alu_op, r) : r;
    }
    return ret;
  }

  // the reduce of x's source in context inner: over its loops, its upcast axes and the extra lanes
  UOp reduce_part(const UOp& x, BinaryOps alu_op, int inner, const std::vector<int64_t>& lanes) {
    const ReduceArg& ra = x->as<ReduceArg>();
    const UOp in = to_uop(x->src[0], inner);
    if (auto it = stash_.find(x.get()); it != stash_.end() && stashed_.insert({x.get(), inner}).second) {
      const auto [idx, valid] = to_indexed_uops(st_of(it->second.second), ctxs_[inner].idx);
      TG_ASSERT(is_true(valid), "a stashed row value's store is masked: " + it->second.second.str());
      extra_stores_.push_back(UOp(Ops::STORE, dtypes::void_, {it->second.first, idx, in}));
    }
    if (prefetch_rows() && has_transcendental(x->src[0]) && prefetched_.insert(x.get()).second) prefetch_next_row(x, inner);
    std::vector<UOp> src{in};
    std::vector<int64_t> contract_axis;
    for (int64_t a : ra.axes) {
      const Ctx& ci = ctxs_[inner];
      if (ci.red[a]) src.push_back(ci.red[a]);
      else for (int64_t v : ci.idx[a]->as<std::vector<int64_t>>()) contract_axis.push_back(v);
    }
    contract_axis.insert(contract_axis.end(), lanes.begin(), lanes.end());
    UOp ret = in;
    if (!contract_axis.empty()) {
      int64_t cnt = 1;
      for (size_t i = 1; i < contract_axis.size(); i += 2) cnt *= contract_axis[i];
      UOp c(Ops::CONTRACT, x->dtype.vec(static_cast<int>(cnt)), {in}, contract_axis);
      // (C vector types have a power-of-two number of lanes)
      if (src.size() > 1 && opts_.vector_bytes > 0 && vector_acc_ok(x->dtype) && (cnt & (cnt - 1)) == 0 && cnt <= 64) {
        // a vector accumulator: the unrolled lanes are summed across them only after the loop
        if (prefetch_streams() && prefetched_.insert(x.get()).second) prefetch_next_outer(x, inner);
        src[0] = c;
        UOp r(Ops::REDUCE, c->dtype, src, alu_op);
        ret = r.gep(0);
        for (int64_t i = 1; i < cnt; i++) ret = ret.alu(alu_op, r.gep(i));
        return ret;
      }
      ret = c.gep(0);
      for (int64_t i = 1; i < cnt; i++) ret = ret.alu(alu_op, c.gep(i));
      src[0] = ret;
    }
    return src.size() > 1 ? UOp(Ops::REDUCE, x->dtype, src, alu_op) : ret;
  }

  // Row prefetch (CPU row kernels): a reduce whose loop computes a transcendental (softmax's and
  // log_softmax's sum of exp) runs from L1 and is compute-bound, while the max loop of the next row
  // waits on memory. Its loop prefetches the next row's cache lines of the buffers it reads (one
  // line per iteration), so the next row's reads overlap this row's exp.
  bool prefetch_rows() const { return !opts_.has_local && row_kernel_ && sym_splits_.empty() && getenv("ROW_PREFETCH", 1) != 0; }
  void prefetch_next_row(const UOp& x, int inner) {
    const int64_t g = first_group_ - 1;   // the innermost loop over rows
    if (g < 0 || !is_loop(g)) return;
    std::vector<UOp> idx = ctxs_[inner].idx;
    int64_t lanes = 1, last = -1;   // the upcast lanes the reduce contracts per iteration; its last upcast axis
    for (int64_t a : x->as<ReduceArg>().axes)
      if (idxs_[a]->op == Ops::EXPAND) lanes *= full_shape_[a], last = std::max(last, a);
    for (size_t a = 0; a < idx.size(); a++)
      if (idxs_[a]->op == Ops::EXPAND) idx[a] = iconst(0);
    idx[g] = idx[g] + iconst(1);
    std::set<std::pair<const UOpNode*, const UOpNode*>> done;
    for_each_global_load(x, [&](const UOp& u) {
      const int64_t line = 64 / std::max<int64_t>(1, u->dtype.itemsize());
      if (last < 0 || lanes < line) return;   // under a line per iteration: the hardware prefetcher keeps up
      for (int64_t j = 0; j < (full_shape_[last] >= line ? full_shape_[last] : 1); j += line) {
        idx[last] = iconst(j);
        prefetch(u, to_indexed_uops(st_of(u->src[1]), idx).first, done);
      }
    });
  }

  // every load of a global buffer under the reduce x (a nested reduce has its own loop: not under it)
  void for_each_global_load(const UOp& x, const std::function<void(const UOp&)>& f) const {
    std::vector<UOp> work{x->src[0]};
    std::set<const UOpNode*> seen;
    while (!work.empty()) {
      UOp u = work.back();
      work.pop_back();
      if (!seen.insert(u.get()).second || u->op == Ops::REDUCE_AXIS) continue;
      for (const UOp& s : u->src) work.push_back(s);
      if (u->op == Ops::LOAD && u->src[0]->op == Ops::DEFINE_GLOBAL && u->src[1]->op == Ops::SHAPETRACKER) f(u);
    }
  }
  // one PREFETCH of load u's buffer at index p, once per (buffer, index)
  void prefetch(const UOp& u, const UOp& p, std::set<std::pair<const UOpNode*, const UOpNode*>>& done) {
    if (done.insert({u->src[0].get(), p.get()}).second) extra_stores_.push_back(UOp(Ops::PREFETCH, dtypes::void_, {u->src[0], p}));
  }

  // Stream prefetch (CPU reduces with vector accumulators along the reduce: a conv weight gradient
  // whose vectors run over the batch's positions). The loads that change with the innermost output
  // loop stream from memory (the others stay in L1 across it); their rows for the next iteration of
  // the outermost reduce loop (the next image of a batch block) are prefetched one line per row per
  // iteration, so the next image's data arrives while this one computes. The hardware prefetcher
  // alone left beautiful_mnist's conv1 weight gradient at half its cache-resident speed: 16 streams
  // (4 channels x 4 images) of 36 lines each. GEMM_PREFETCH=0 turns it off.
  bool prefetch_streams() const {
    return !opts_.has_local && !row_kernel_ && sym_splits_.empty() && getenv("GEMM_PREFETCH", 1) != 0;
  }
  void prefetch_next_outer(const UOp& x, int inner) {
    const Ctx& ci = ctxs_[inner];
    int64_t ro = -1, gl = -1;   // the outermost reduce loop; the innermost output loop
    int loops = 0;
    for (int64_t a : x->as<ReduceArg>().axes)
      if (ci.red[a]) loops++, ro = ro < 0 ? a : std::min(ro, a);
    for (int64_t a = 0; a < first_group_; a++)
      if (is_loop(a)) gl = a;
    if (loops < 2 || gl < 0) return;
    const std::vector<int64_t>& raxes = x->as<ReduceArg>().axes;
    std::vector<UOp> idx = ci.idx;
    idx[ro] = idx[ro] + iconst(1);
    std::set<std::pair<const UOpNode*, const UOpNode*>> done;
    for_each_global_load(x, [&](const UOp& u) {
      const ShapeTracker& st = st_of(u->src[1]);
      const auto strides = st.real_strides();
      if (strides[gl] == 0 || strides[ro] == 0) return;
      // one prefetch per row of the register tile: each upcast output axis the load varies along, every value
      std::vector<int64_t> rows;
      for (size_t a = 0; a < idx.size(); a++) {
        if (idxs_[a]->op != Ops::EXPAND && !(ci.idx[a] && ci.idx[a]->op == Ops::EXPAND)) continue;
        const bool red = std::find(raxes.begin(), raxes.end(), static_cast<int64_t>(a)) != raxes.end();
        if (!red && strides[a] != 0) rows.push_back(static_cast<int64_t>(a));
        idx[a] = iconst(0);
      }
      std::function<void(size_t)> emit = [&](size_t r) {
        if (r == rows.size()) return prefetch(u, to_indexed_uops(st, idx).first, done);
        for (int64_t v = 0; v < full_shape_[rows[r]] && done.size() < 16; v++) idx[rows[r]] = iconst(v), emit(r + 1);
      };
      emit(0);
    });
  }

  // WMMA(CONTRACT a, CONTRACT b, 0) over the tensor core's upcast axes; its lanes are EXPANDed back over C's
  UOp lower_wmma(const UOp& x, const std::vector<UOp>& in) {
    auto* w = x->is<ArgObjPtr>() ? dynamic_cast<const WMMAArg*>(x->as<ArgObjPtr>().get()) : nullptr;
    TG_ASSERT(w && in.size() == 2 && w->upcast_axes.size() == 3, "WMMA needs a WMMAArg with upcast axes and (a, b): " + x.str());
    std::array<int, 3> sz{};
    for (int i = 0; i < 3; i++) {
      sz[i] = 1;
      for (auto [ax, n] : w->upcast_axes[i]) sz[i] *= static_cast<int>(n);
    }
    UOp a(Ops::CONTRACT, in[0]->dtype.vec(sz[0]), {in[0]}, expand_arg(w->upcast_axes[0]));
    UOp b(Ops::CONTRACT, in[1]->dtype.vec(sz[1]), {in[1]}, expand_arg(w->upcast_axes[1]));
    UOp ret(Ops::WMMA, x->dtype.vec(sz[2]), {a, b, UOp::const_(x->dtype.vec(sz[2]), 0.0)}, x->arg);
    std::vector<UOp> lanes;
    for (int i = 0; i < sz[2]; i++) lanes.push_back(ret.gep(i));
    return UOp(Ops::EXPAND, x->dtype, lanes, expand_arg(w->upcast_axes[2]));
  }

  UOp lower(const UOp& x, int ctx) {
    if ((x->op == Ops::LOAD || x->op == Ops::STORE || x->op == Ops::CONST) && !x->src.empty() &&
        x->src[x->op == Ops::CONST ? 0 : 1]->op == Ops::SHAPETRACKER)
      return lower_buffer_op(x, ctx);
    if (x->op == Ops::BIND) return x->src[0];
    if (x->op == Ops::DEFINE_VAR || x->op == Ops::DEFINE_GLOBAL || x->op == Ops::DEFINE_LOCAL || x->op == Ops::CONST) return x;
    if (x->op == Ops::REDUCE_AXIS) return lower_reduce(x, ctx);
    std::vector<UOp> in;
    for (const UOp& s : x->src) in.push_back(to_uop(s, ctx));
    switch (x->op) {
      case Ops::SINK:
        for (int c : out_ctxs_)
          for (const UOp& s : x->src) in.push_back(to_uop(s, c));
        return in.insert(in.end(), extra_stores_.begin(), extra_stores_.end()), UOp(Ops::SINK, dtypes::void_, in);
      case Ops::WMMA: return lower_wmma(x, in);
      case Ops::ALU: case Ops::CAST: case Ops::BITCAST: return UOp(x->op, x->dtype, in, x->arg);
      default: TG_ASSERT(false, "the lowerer can't lower " + x.str());
    }
  }

  // a full-shape store's loop over a reduce axis: RANGE {kOutLoopAxis + axis, 1}
  static constexpr int64_t kOutLoopAxis = int64_t{1} << 50;
  // the EXPAND axis of a split symbolic axis's lanes: kSplitLaneAxis + axis (past every shape axis)
  static constexpr int64_t kSplitLaneAxis = 1 << 20;
  // the tail loop of a split global dim: kTailLoopAxis + axis, past every other loop's arg
  static constexpr int64_t kTailLoopAxis = int64_t{1} << 55;
  static constexpr int64_t kTailReduceAxis = kTailLoopAxis + (int64_t{1} << 20);

  const Renderer& opts_;
  std::vector<UOp> idxs_;   // context 0's indexes
  Shape full_shape_;
  std::vector<UOp> full_sym_;
  std::vector<bool> stored_unchanged_;   // per axis: a global store's index doesn't move along it
  int64_t collapsed_ = 0;   // the CPU's leading global dims run by one parallel loop (collapsed_loop) when > 1
  int64_t first_group_ = 0, end_group_ = 0;   // the grouped (GROUP/GROUPTOP) axes
  bool warp_reduce_ = false;
  bool row_kernel_ = false;   // several reduces over the same rows (see lower_buffer_op's store gate)
  std::vector<int64_t> claims_;   // per axis: how many reduce nodes loop over it so far
  std::vector<Ctx> ctxs_;
  std::unordered_map<std::vector<const UOpNode*>, int, CtxKeyHash> ctx_ids_;
  std::map<std::pair<const UOpNode*, int>, std::vector<Loop>> loops_;   // (REDUCE_AXIS, Ctx::part) -> its loop per axis
  std::vector<int> out_ctxs_;   // the contexts the stores run in besides 0: a split global dim's tail
  std::vector<std::pair<int64_t, UOp>> tile_masks_;   // (axis, index < N) of a GPU's upcast symbolic global dims
  std::vector<std::pair<int64_t, int64_t>> sym_splits_;   // KernelInfo::sym_splits
  std::vector<std::pair<int64_t, int64_t>> sym_groups_;   // KernelInfo::sym_groups
  // stash_row_values: a sum's REDUCE_AXIS -> the output (DEFINE_GLOBAL, SHAPETRACKER) its loop also
  // stores its input to; the (reduce, context) pairs already stored; those stores, joined to the SINK
  std::unordered_map<const UOpNode*, std::pair<UOp, UOp>> stash_;
  std::set<std::pair<const UOpNode*, int>> stashed_;
  std::set<const UOpNode*> prefetched_;   // the reduces whose loops prefetch the next row
  std::vector<UOp> extra_stores_;
  struct KeyHash {
    size_t operator()(const std::pair<const UOpNode*, int>& k) const { return std::hash<const void*>()(k.first) * 31 + k.second; }
  };
  std::unordered_map<std::pair<const UOpNode*, int>, UOp, KeyHash> cache_;
};

}  // namespace

std::vector<UOp> get_grouped_dims(const std::string& prefix, const std::vector<int64_t>& dims_in,
                                  const std::vector<int64_t>& max_sizes, bool reverse, const std::vector<UOp>& sym_in) {
  std::vector<int64_t> dims = dims_in;
  std::vector<UOp> sym = sym_in;
  sym.resize(dims.size());
  if (reverse) std::reverse(dims.begin(), dims.end()), std::reverse(sym.begin(), sym.end());
  const std::vector<int64_t> limited = max_sizes.empty() ? dims : limit_dims(dims, max_sizes);
  // a symbolic dim launches its expression (its number here is the Variable's max); merged dims launch
  // their product and index back with % and / of each dim's size, numbers and expressions alike
  auto size = [&](size_t i) { return sym[i] ? sym[i] : iconst(dims[i]); };
  if (limited == dims) {
    std::vector<UOp> ret;
    for (size_t i = 0; i < dims.size(); i++) ret.push_back(UOp(Ops::SPECIAL, dtypes::int32, {size(i)}, prefix + std::to_string(i)));
    if (reverse) std::reverse(ret.begin(), ret.end());
    return ret;
  }
  const auto contraction = get_contraction(dims, limited);
  TG_ASSERT(contraction.size() == limited.size(), "launch dims " + to_str(limited) + " are not a merge of " + to_str(dims));
  std::vector<UOp> ret;
  for (size_t i = 0; i < limited.size(); i++) {
    UOp total = iconst(limited[i]);
    if (std::any_of(contraction[i].begin(), contraction[i].end(), [&](int64_t c) { return static_cast<bool>(sym[c]); })) {
      total = size(contraction[i][0]);
      for (size_t j = 1; j < contraction[i].size(); j++) total = total * size(contraction[i][j]);
    }
    UOp idx(Ops::SPECIAL, dtypes::int32, {total}, prefix + std::to_string(i));
    if (contraction[i].size() == 1) { ret.push_back(idx); continue; }
    for (int64_t c : contraction[i]) {
      ret.push_back(idx % size(c));
      idx = idx / size(c);
    }
  }
  if (reverse) std::reverse(ret.begin(), ret.end());
  return ret;
}

UOp lower_ast(const UOp& ast, const Renderer& opts) {
  TG_ASSERT(ast->op == Ops::SINK, "lower_ast needs a SINK, got " + ast.str());
  Lowerer l(ast, opts);
  return l.to_uop(l.stash_row_values(ast));
}

}  // namespace tg
