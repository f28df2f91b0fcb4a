#include "codegen/uopgraph.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "tg/helpers.hpp"
#include "codegen/reduce_fold.hpp"
#include "renderer/renderer.hpp"
#include "uop/symbolic.hpp"

namespace tg {

namespace {
using O = std::optional<UOp>;
using Pairs = std::vector<std::pair<int64_t, int64_t>>;
using Choice = std::map<int64_t, int64_t>;   // axis -> index along it

bool is_op(const UOp& u, Ops op) { return u->op == op; }
UOp noop() { return UOp(Ops::NOOP); }

// ---------------------------------------------------------------- constant folding extras
// The bits of a constant reinterpreted as another dtype of the same size (float16 is left alone).
O bitcast_const(const UOp& root, const UOp& c) {
  DType from = c->dtype, to = root->dtype;
  if (from.count != 1 || to.count != 1 || from.scalar_size() != to.scalar_size()) return std::nullopt;
  if (from.kind == ScalarKind::float16 || from.kind == ScalarKind::bfloat16 || to.kind == ScalarKind::float16 ||
      to.kind == ScalarKind::bfloat16)
    return std::nullopt;
  uint64_t bits = 0;
  ConstType v = c.const_value();
  if (from == dtypes::float32) { float f = static_cast<float>(const_to_double(v)); std::memcpy(&bits, &f, 4); }
  else if (from == dtypes::float64) { double f = const_to_double(v); std::memcpy(&bits, &f, 8); }
  else bits = static_cast<uint64_t>(const_to_int(v));
  if (to == dtypes::float32) { float f; uint32_t b = static_cast<uint32_t>(bits); std::memcpy(&f, &b, 4); return UOp::const_(to, double(f)); }
  if (to == dtypes::float64) { double f; std::memcpy(&f, &bits, 8); return UOp::const_(to, f); }
  return UOp::const_(to, static_cast<int64_t>(bits));   // as_const wraps to the width
}

// VECTORIZE(GEP(x,0), ..., GEP(x,n-1)) with x of n lanes is x
O vectorize_of_geps(const UOp& root) {
  const auto& s = root->src;
  if (s.empty() || !is_op(s[0], Ops::GEP)) return std::nullopt;
  UOp x = s[0]->src[0];
  if (x->dtype != root->dtype) return std::nullopt;
  for (size_t i = 0; i < s.size(); i++)
    if (!is_op(s[i], Ops::GEP) || s[i]->src[0] != x || s[i]->arg != Arg(static_cast<int64_t>(i))) return std::nullopt;
  return x;
}

O sink_without_noops(const UOp& root) {
  std::vector<UOp> keep;
  for (const UOp& s : root->src)
    if (!is_op(s, Ops::NOOP)) keep.push_back(s);
  if (keep.size() == root->src.size()) return std::nullopt;
  return UOp(Ops::SINK, root->dtype, keep, root->arg);
}

// ---------------------------------------------------------------- expander
Pairs sorted_union(const std::vector<const UOp*>& expands) {
  Pairs all;
  for (const UOp* e : expands)
    for (auto& p : expand_args((*e)->arg))
      if (std::find(all.begin(), all.end(), p) == all.end()) all.push_back(p);
  std::sort(all.begin(), all.end());
  return all;
}

// position of a choice in an EXPAND with these args (last axis fastest)
int64_t expand_arg_to_idx(const Pairs& args, const Choice& rpk) {
  int64_t idx = 0, mul = 1;
  for (auto it = args.rbegin(); it != args.rend(); ++it) {
    idx += rpk.at(it->first) * mul;
    mul *= it->second;
  }
  return idx;
}

// every combination of indices, in itertools.product order
std::vector<Choice> choices_from_args(const Pairs& args) {
  std::vector<Choice> out{Choice{}};
  for (auto& [axis, m] : args) {
    std::vector<Choice> next;
    for (auto& c : out)
      for (int64_t i = 0; i < m; i++) {
        Choice d = c;
        d[axis] = i;
        next.push_back(std::move(d));
      }
    out = std::move(next);
  }
  return out;
}

const WMMAArg* wmma_arg(const UOp& u) {
  auto* w = u->is<ArgObjPtr>() ? dynamic_cast<const WMMAArg*>(u->as<ArgObjPtr>().get()) : nullptr;
  TG_ASSERT(w, "WMMA needs a WMMAArg: " + u.str());
  return w;
}

O do_expand(const UOp& root) {
  std::vector<const UOp*> expands;
  for (const UOp& s : root->src)
    if (is_op(s, Ops::EXPAND)) expands.push_back(&s);
  if (expands.empty()) return std::nullopt;
  Pairs args = sorted_union(expands);
  // a WMMA is not expanded over its own upcast and reduce axes: the instruction consumes those lanes
  // (after fix_st its operands hold the same lanes for every value of them, so lane 0 is taken)
  Choice dont_expand;
  if (is_op(root, Ops::WMMA)) {
    const WMMAArg* w = wmma_arg(root);
    auto own = [&](int64_t ax) {
      if (std::find(w->reduce_axes.begin(), w->reduce_axes.end(), ax) != w->reduce_axes.end()) return true;
      for (const auto& up : w->upcast_axes)
        for (auto [a, _] : up)
          if (a == ax) return true;
      return false;
    };
    Pairs keep;
    for (auto& p : args) (own(p.first) ? static_cast<void>(dont_expand[p.first] = 0) : keep.push_back(p));
    args = keep;
  }
  std::vector<UOp> new_srcs;
  for (const Choice& rpk0 : choices_from_args(args)) {
    Choice rpk = rpk0;
    rpk.insert(dont_expand.begin(), dont_expand.end());
    std::vector<UOp> src;
    for (const UOp& s : root->src)
      src.push_back(is_op(s, Ops::EXPAND) ? s->src[expand_arg_to_idx(expand_args(s->arg), rpk)] : s);
    new_srcs.push_back(UOp(root->op, root->dtype, std::move(src), root->arg));
  }
  if (is_op(root, Ops::EXPAND)) {   // merge two expands
    Pairs old_args = args, root_args = expand_args(root->arg);
    args.insert(args.end(), root_args.begin(), root_args.end());
    std::sort(args.begin(), args.end());
    std::vector<UOp> merged;
    for (const Choice& rpk : choices_from_args(args))
      merged.push_back(new_srcs[expand_arg_to_idx(old_args, rpk)]->src[expand_arg_to_idx(root_args, rpk)]);
    new_srcs = std::move(merged);
  }
  if (is_op(root, Ops::IF)) {   // one IF for all copies: the OR of their conditions
    std::vector<UOp> conds, barriers;
    for (const UOp& x : new_srcs) {
      if (!is_op(x->src[0], Ops::CONST) && std::find(conds.begin(), conds.end(), x->src[0]) == conds.end()) conds.push_back(x->src[0]);
      for (size_t i = 1; i < x->src.size(); i++)
        if (std::find(barriers.begin(), barriers.end(), x->src[i]) == barriers.end()) barriers.push_back(x->src[i]);
    }
    TG_ASSERT(!conds.empty(), "expanded IF with only constant conditions");
    UOp c = conds[0];
    for (size_t i = 1; i < conds.size(); i++) c = c | conds[i];
    std::vector<UOp> src{c};
    src.insert(src.end(), barriers.begin(), barriers.end());
    UOp iff(Ops::IF, dtypes::void_, src);
    new_srcs.assign(new_srcs.size(), iff);
  }
  return UOp(Ops::EXPAND, root->dtype, new_srcs, expand_arg(args));
}

O do_contract(const UOp& con) {
  const UOp& ex = con->src[0];
  int n = con->dtype.count;
  if (!is_op(ex, Ops::EXPAND)) return UOp(Ops::VECTORIZE, con->dtype, std::vector<UOp>(n, ex));   // repeat the element
  Pairs ex_args = expand_args(ex->arg), con_args = expand_args(con->arg), keep;
  int64_t cnt = 1;
  for (auto& p : con_args) cnt *= p.second;
  TG_ASSERT(cnt == n, "CONTRACT dtype " + con->dtype.str() + " does not match its axes");
  for (auto& p : ex_args)
    if (std::find(con_args.begin(), con_args.end(), p) == con_args.end()) keep.push_back(p);
  std::vector<UOp> srcs;
  for (const Choice& rpk : choices_from_args(keep)) {
    std::vector<UOp> lanes;
    for (const Choice& lrpk : choices_from_args(con_args)) {
      Choice all = rpk;
      all.insert(lrpk.begin(), lrpk.end());
      lanes.push_back(ex->src[expand_arg_to_idx(ex_args, all)]);
    }
    srcs.push_back(UOp(Ops::VECTORIZE, con->dtype, lanes));
  }
  return srcs.size() == 1 ? srcs[0] : UOp(Ops::EXPAND, con->dtype, srcs, expand_arg(keep));
}

// A gated STORE puts the loads behind a BARRIER under an IF on its gate.
O create_gate(const UOp& root) {
  if (root->src.size() != 4) return std::nullopt;
  const UOp& gate = root->src[3];
  std::unordered_map<UOp, UOp, UOp::Hash> memo;
  std::function<UOp(const UOp&)> gate_srcs = [&](const UOp& u) -> UOp {
    if (auto it = memo.find(u); it != memo.end()) return it->second;
    UOp out;
    if (is_op(u, Ops::LOAD) && is_op(u->src.back(), Ops::BARRIER)) {
      std::vector<UOp> src(u->src.begin(), u->src.end() - 1);
      src.push_back(UOp(Ops::IF, dtypes::void_, {gate, u->src.back()}));
      out = UOp(u->op, u->dtype, src, u->arg);
    } else {
      std::vector<UOp> src;
      bool changed = false;
      for (const UOp& s : u->src) {
        src.push_back(gate_srcs(s));
        changed |= src.back() != s;
      }
      out = changed ? UOp(u->op, u->dtype, src, u->arg) : u;
    }
    return memo[u] = out;
  };
  UOp r = gate_srcs(root);
  return r == root ? std::nullopt : O(r);
}

O sink_flatten_expands(const UOp& root) {
  std::vector<UOp> out;
  bool any = false;
  for (const UOp& s : root->src) {
    if (is_op(s, Ops::EXPAND)) { any = true; out.insert(out.end(), s->src.begin(), s->src.end()); }
    else out.push_back(s);
  }
  return any ? O(UOp(Ops::SINK, root->dtype, out, root->arg)) : std::nullopt;
}

// REDUCE(EXPAND(GEP(x, 0..n-1)), ranges) -> EXPAND(GEP(REDUCE(x, ranges), i)): a tensor core's lanes are
// accumulated as one vector (unless the reduce is over one of the EXPAND's axes)
O reduce_before_expand(const UOp& reduce) {
  const UOp& ex = reduce->src[0];
  if (!is_op(ex, Ops::EXPAND) || ex->src.empty() || !is_op(ex->src[0], Ops::GEP)) return std::nullopt;
  const UOp x = ex->src[0]->src[0];
  if (x->dtype.count != static_cast<int>(ex->src.size())) return std::nullopt;
  for (size_t i = 0; i < ex->src.size(); i++)
    if (!is_op(ex->src[i], Ops::GEP) || ex->src[i]->src[0] != x || ex->src[i]->arg != Arg(static_cast<int64_t>(i))) return std::nullopt;
  const Pairs ex_args = expand_args(ex->arg);
  for (size_t i = 1; i < reduce->src.size(); i++)
    if (is_op(reduce->src[i], Ops::EXPAND))
      for (auto& p : expand_args(reduce->src[i]->arg))
        if (std::find(ex_args.begin(), ex_args.end(), p) != ex_args.end()) return std::nullopt;
  std::vector<UOp> src{x};
  src.insert(src.end(), reduce->src.begin() + 1, reduce->src.end());
  UOp red(Ops::REDUCE, x->dtype, src, reduce->arg);
  std::vector<UOp> lanes;
  for (int i = 0; i < x->dtype.count; i++) lanes.push_back(red.gep(i));
  return UOp(Ops::EXPAND, reduce->dtype, lanes, ex->arg);
}

// A tensor core operand gathered from global memory: two lanes at consecutive, even element offsets of one
// buffer become one 4-byte (half2 / nv_bfloat162) load. The A fragment's lane pairs are consecutive along K.
// Off unless TC_PAIR_LOADS=1: a buffer view at an odd element offset (a realized shrink) would make the
// 4-byte load misaligned, and the kernel can't see the offset.
std::pair<UOp, int64_t> base_and_offset(const UOp& idx) {
  if (is_op(idx, Ops::ALU) && idx->is<BinaryOps>() && idx->as<BinaryOps>() == BinaryOps::ADD && is_op(idx->src[1], Ops::CONST))
    return {idx->src[0], const_to_int(idx->src[1].const_value())};
  if (is_op(idx, Ops::CONST)) return {UOp::const_(idx->dtype, int64_t{0}), const_to_int(idx.const_value())};
  return {idx, 0};
}
O pair_operand_loads(const UOp& v) {
  if (!is_op(v, Ops::VECTORIZE) || v->dtype.count % 2 != 0) return std::nullopt;
  const DType sc = v->dtype.scalar();
  if (sc != dtypes::half && sc != dtypes::bfloat16) return std::nullopt;
  std::vector<UOp> lanes = v->src;
  bool changed = false;
  for (size_t i = 0; i + 1 < lanes.size(); i += 2) {
    const UOp &l0 = lanes[i], &l1 = lanes[i + 1];
    if (!is_op(l0, Ops::LOAD) || !is_op(l1, Ops::LOAD) || l0->src.size() != 2 || l1->src.size() != 2 || l0->src[0] != l1->src[0])
      continue;
    auto [b0, c0] = base_and_offset(l0->src[1]);
    auto [b1, c1] = base_and_offset(l1->src[1]);
    if (b0 != b1 || c1 != c0 + 1 || c0 % 2 != 0 || b0.const_factor() % 2 != 0) continue;
    UOp pair(Ops::LOAD, sc.vec(2), {l0->src[0], l0->src[1]});
    lanes[i] = pair.gep(0), lanes[i + 1] = pair.gep(1), changed = true;
  }
  return changed ? O(UOp(Ops::VECTORIZE, v->dtype, lanes)) : std::nullopt;
}
O wmma_pair_loads(const UOp& w) {
  if (getenv("TC_PAIR_LOADS", 0) == 0) return std::nullopt;
  O a = pair_operand_loads(w->src[0]), b = pair_operand_loads(w->src[1]);
  if (!a && !b) return std::nullopt;
  return UOp(Ops::WMMA, w->dtype, {a ? *a : w->src[0], b ? *b : w->src[1], w->src[2]}, w->arg);
}

// ---------------------------------------------------------------- reducer
BinaryOps reduce_alu(const Arg& a) {
  if (auto r = std::get_if<ReduceOps>(&a)) {
    TG_ASSERT(*r != ReduceOps::WMMA, "REDUCE with ReduceOps.WMMA");
    return *r == ReduceOps::SUM ? BinaryOps::ADD : BinaryOps::MAX;
  }
  return std::get<BinaryOps>(a);
}

O do_reduce(const UOp& root, ReduceContext& ctx) {
  BinaryOps op = reduce_alu(root->arg);
  std::unordered_set<const UOpNode*> parents;
  for (const UOp& u : root->src[0].toposort()) parents.insert(u.get());
  std::vector<UOp> parented, unparented;
  for (size_t i = 1; i < root->src.size(); i++)
    (parents.count(root->src[i].get()) ? parented : unparented).push_back(root->src[i]);
  UOp ret = root->src[0];
  if (!parented.empty()) {
    UOp init = UOp::const_(root->dtype, op == BinaryOps::ADD ? ConstType(int64_t{0}) : dtypes::min(root->dtype.scalar()));
    std::vector<UOp> src{init};
    src.insert(src.end(), parented.begin(), parented.end());
    UOp acc(Ops::DEFINE_ACC, root->dtype, src, std::vector<int64_t>{ctx.acc_number++});
    ret = UOp(Ops::PHI, root->dtype, {acc, acc.alu(op, ret)});
  }
  // a sum over a loop the value does not depend on is a multiply; a max ignores it
  if (op == BinaryOps::ADD)
    for (const UOp& r : unparented) {
      // (a vector accumulator, a split symbolic loop's tile lanes, multiplies each lane by the count)
      UOp n = (r->src[1] - r->src[0]).cast(ret->dtype.scalar());
      if (ret->dtype.count > 1) n = UOp(Ops::VECTORIZE, ret->dtype, std::vector<UOp>(ret->dtype.count, n));
      ret = ret * n;
    }
  return ret;
}

O no_vectorized_alu(const UOp& alu) {
  if (alu->dtype.count == 1) return std::nullopt;
  std::vector<UOp> lanes;
  for (int i = 0; i < alu->dtype.count; i++) {
    std::vector<UOp> src;
    for (const UOp& s : alu->src) src.push_back(s.gep(i));
    lanes.push_back(UOp(alu->op, alu->dtype.scalar(), src, alu->arg));
  }
  return UOp(Ops::VECTORIZE, alu->dtype, lanes);
}

// A STORE whose value already sits under an IF on the same gate needs no gate of its own.
O delete_redundant_gates(const UOp& root) {
  if (root->src.size() != 4) return std::nullopt;
  std::unordered_set<const UOpNode*> seen;
  std::function<const UOp*(const UOp&)> find_gate = [&](const UOp& x) -> const UOp* {
    if (is_op(x, Ops::IF)) return &x;
    if (!seen.insert(x.get()).second) return nullptr;
    for (const UOp& s : x->src)
      if (const UOp* g = find_gate(s)) return g;
    return nullptr;
  };
  const UOp* gate = find_gate(root);
  if (!gate || (*gate)->src[0] != root->src[3]) return std::nullopt;
  return UOp(Ops::STORE, root->dtype, {root->src[0], root->src[1], root->src[2]}, root->arg);
}
}  // namespace

Pairs expand_args(const Arg& a) {
  Pairs out;
  if (auto v = std::get_if<std::vector<int64_t>>(&a)) {
    TG_ASSERT(v->size() % 2 == 0, "EXPAND/CONTRACT arg must be (axis, size) pairs, got " + to_str(*v));
    for (size_t i = 0; i < v->size(); i += 2) out.push_back({(*v)[i], (*v)[i + 1]});
  }
  return out;
}
Arg expand_arg(const Pairs& pairs) {
  std::vector<int64_t> v;
  for (auto& [a, s] : pairs) v.insert(v.end(), {a, s});
  return v;
}

// THREEFRY on a uint64 counter: threefry2x32 with 32-bit adds, xors and rotations (tinygrad 0.9.2)
static UOp threefry2x32(const UOp& x, const UOp& seed0) {
  UOp m32 = UOp::const_(dtypes::uint64, int64_t{0xffffffff});
  UOp x0 = (x & m32).cast(dtypes::uint32), x1 = ((x / (int64_t{1} << 32)) & m32).cast(dtypes::uint32);
  int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  UOp seed = seed0.cast(dtypes::uint32);
  UOp ks[3] = {UOp::const_(dtypes::uint32, int64_t{0}), seed ^ UOp::const_(dtypes::uint32, int64_t{0x1BD11BDA}), seed};
  UOp a = x0 + ks[2], b = x1 + ks[0];
  for (int i = 0; i < 5; i++) {
    for (int r : rot[i % 2]) { UOp na = a + b; b = na ^ ((b * (int64_t{1} << r)) + (b / (int64_t{1} << (32 - r)))); a = na; }
    a = a + ks[i % 3]; b = b + ks[(i + 1) % 3] + (i + 1);
  }
  return (b.cast(dtypes::uint64) * (int64_t{1} << 32)) | a.cast(dtypes::uint64);
}
const PatternMatcher& constant_folder() {
  static const UPat x = UPat::var(0), buf = UPat::var(1), idx = UPat::var(2), var = UPat::var(3), gate = UPat::var(4);
  static const UPat c = UPat::cvar(5), any, T = UPat::cnst(true), F = UPat::cnst(false);
  static const UPat ld = UPat(Ops::LOAD).src({buf, idx});
  static const UPat b = UPat::var(6, dtypes::bool_), b2 = UPat::var(7, dtypes::bool_), y = UPat::var(8), z = UPat::var(9);
  static const UPat zero = UPat::cnst(int64_t{0}).cap(10);
  static const auto scalar = [](const UOp& u) { return u->dtype.count == 1; };
  static const PatternMatcher extra({
    {UPat(Ops::ALU).arg(BinaryOps::THREEFRY).src({x, buf}), [](const Match& m) -> O { return threefry2x32(m[x], m[buf]); }},
    // VECTORIZE / GEP
    {UPat(Ops::GEP).src({UPat(Ops::VECTORIZE).cap(0)}), [](const Match& m) -> O {
      return m[0]->src.at(static_cast<size_t>((*m.root)->as<int64_t>())); }},
    {UPat(Ops::VECTORIZE).src_each(UPat(Ops::GEP)), [](const Match& m) { return vectorize_of_geps(*m.root); }},
    // const rules
    {UPat(Ops::GEP).src({c}), [](const Match& m) -> O { return UOp::const_((*m.root)->dtype, m[c].const_value()); }},
    {UPat(Ops::CAST).src({c}), [](const Match& m) -> O { return UOp::const_((*m.root)->dtype, m[c].const_value()); }},
    {UPat(Ops::BITCAST).src({c}), [](const Match& m) { return bitcast_const(*m.root, m[c]); }},
    {UPat(Ops::VECTORIZE).src_each(c), [](const Match& m) -> O { return UOp::const_((*m.root)->dtype, m[c].const_value()); }},
    // tensor cores: the lanes of a WMMA are summed as a vector; an accumulator add goes into its C operand
    {UPat(Ops::REDUCE), [](const Match& m) { return reduce_before_expand(*m.root); }},
    {UPat::alu(BinaryOps::ADD, x, UPat(Ops::WMMA).cap(11)), [](const Match& m) -> O {
      const UOp& w = m[11];
      return UOp(Ops::WMMA, w->dtype, {w->src[0], w->src[1], w->src[2] + m[x]}, w->arg); }},
    // sums over a RANGE with a closed form (arange, one_hot, indexing); this table runs before the reducer
    {UPat(Ops::REDUCE), [](const Match& m) { return reduce_collapse(*m.root); }},
    // canonical forms for it: a bool cast times y is a where; a where's 0 arm absorbs multiplies and nested wheres
    {b.cast() * y, [](const Match& m) -> O { return scalar(*m.root) ? O(m[b].where(m[y], m[y].const_like(int64_t{0}))) : std::nullopt; }},
    {b.where(y, zero) * z, [](const Match& m) -> O { return scalar(*m.root) ? O(m[b].where(m[y] * m[z], m[zero])) : std::nullopt; }},
    {b.where(b2.where(y, zero), zero), [](const Match& m) -> O { return (m[b] & m[b2]).where(m[y], m[zero]); }},
    // a REDUCE without ranges is its value
    {UPat(Ops::REDUCE).src({x}), [](const Match& m) -> O { return m[x]; }},
    // x != 0 -> (bool)x
    {x.ne(UPat::cnst(int64_t{0})), [](const Match& m) -> O { return m[x]->dtype.count == 1 ? O(m[x].cast(dtypes::bool_)) : std::nullopt; }},
    // load/store folding
    {UPat(Ops::STORE).src({buf, idx, ld}), [](const Match&) -> O { return noop(); }},
    {UPat(Ops::STORE).src({buf, idx, gate.where(var, ld)}), [](const Match& m) -> O {
      return UOp(Ops::STORE, dtypes::void_, {m[buf], m[idx], m[var], m[gate]}); }},
    // cast/vectorize NOOPs
    {UPat(Ops::CAST).src({x}), [](const Match& m) -> O { return (*m.root)->dtype == m[x]->dtype ? O(m[x]) : std::nullopt; }},
    {UPat(Ops::VECTORIZE).src({x}), [](const Match& m) -> O { return (*m.root)->dtype == m[x]->dtype ? O(m[x]) : std::nullopt; }},
    // gated LOAD/STORE with a constant gate
    {UPat(Ops::LOAD).src({buf, idx, var, T}), [](const Match& m) -> O { return UOp(Ops::LOAD, m[var]->dtype, {m[buf], m[idx]}); }},
    {UPat(Ops::LOAD).src({buf, idx, var, T, gate}), [](const Match& m) -> O { return UOp(Ops::LOAD, m[var]->dtype, {m[buf], m[idx], m[gate]}); }},
    {UPat(Ops::LOAD).src({any, any, var, F}), [](const Match& m) -> O { return m[var]; }},
    {UPat(Ops::LOAD).src({any, any, var, F, any}), [](const Match& m) -> O { return m[var]; }},
    {UPat(Ops::STORE).src({buf, idx, var, T}), [](const Match& m) -> O { return UOp(Ops::STORE, dtypes::void_, {m[buf], m[idx], m[var]}); }},
    {UPat(Ops::STORE).src({any, any, any, F}), [](const Match&) -> O { return noop(); }},
    // remove NOOPs from SINK
    {UPat(Ops::SINK), [](const Match& m) { return sink_without_noops(*m.root); }},
  });
  static const PatternMatcher pm = symbolic() + extra;
  return pm;
}

const PatternMatcher& expander() {
  static const UPat x = UPat::var(0);
  static const PatternMatcher pm({
    {UPat(Ops::STORE), [](const Match& m) { return create_gate(*m.root); }},   // must come before expanding
    {UPat({Ops::ALU, Ops::CAST, Ops::BITCAST, Ops::GEP, Ops::WMMA, Ops::LOAD, Ops::STORE, Ops::VECTORIZE, Ops::REDUCE,
           Ops::EXPAND, Ops::IF, Ops::PREFETCH}), [](const Match& m) { return do_expand(*m.root); }},
    {UPat(Ops::CONTRACT), [](const Match& m) { return do_contract(*m.root); }},
    {UPat(Ops::SINK), [](const Match& m) { return sink_flatten_expands(*m.root); }},
    // BARRIERs are not expanded
    {UPat(Ops::BARRIER).src({UPat(Ops::EXPAND).cap(1)}), [](const Match& m) -> O {
      const UOp& ex = m[1];
      UOp b(Ops::BARRIER, dtypes::void_, ex->src);
      return UOp(Ops::EXPAND, dtypes::void_, std::vector<UOp>(ex->src.size(), b), ex->arg); }},
    // an EXPAND over no axes is its source
    {UPat(Ops::EXPAND).arg(std::vector<int64_t>{}).src({x}), [](const Match& m) -> O { return m[x]; }},
  });
  return pm;
}

const PatternMatcher& reducer() {
  static const PatternMatcher pm({
    {UPat(Ops::REDUCE), [](const Match& m) { return do_reduce(*m.root, m.context<ReduceContext>()); }},
    {UPat({Ops::ALU, Ops::CAST, Ops::BITCAST}), [](const Match& m) { return no_vectorized_alu(*m.root); }},   // no vector ALU
    {UPat(Ops::STORE), [](const Match& m) { return delete_redundant_gates(*m.root); }},
    {UPat(Ops::WMMA), [](const Match& m) { return wmma_pair_loads(*m.root); }},
  });
  return pm;
}

PatternMatcher transcendental_folding(const DeviceCaps& opts) {
  bool all = getenv("TRANSCENDENTAL", 1) >= 2;
  static const UPat d = UPat::var(0);
  auto fl = [](UnaryOps op) {
    return UPat(Ops::ALU).arg(op).dtypes({dtypes::float16, dtypes::float32, dtypes::float64}).src({d});
  };
  std::vector<Rule> rules;
  if (all || !opts.has_exp2) rules.push_back({fl(UnaryOps::EXP2), [](const Match& m) -> O { return xexp2(m[d]); }});
  if (all || !opts.has_log2) rules.push_back({fl(UnaryOps::LOG2), [](const Match& m) -> O { return xlog2(m[d]); }});
  if (all || !opts.has_sin) rules.push_back({fl(UnaryOps::SIN), [](const Match& m) -> O { return xsin(m[d]); }});
  return PatternMatcher(std::move(rules));
}

const RewritePasses& rewrite_passes(const DeviceCaps& opts) {
  static std::mutex mu;
  static std::map<int, RewritePasses> cache;
  int key = opts.has_exp2 | opts.has_log2 << 1 | opts.has_sin << 2 | (getenv("TRANSCENDENTAL", 1) >= 2) << 3;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    PatternMatcher folder = constant_folder() + transcendental_folding(opts);
    it = cache.emplace(key, RewritePasses{folder, folder + expander(), folder + expander() + reducer()}).first;
  }
  return it->second;
}

}  // namespace tg
