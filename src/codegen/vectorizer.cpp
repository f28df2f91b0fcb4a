// CPU vectorizer: after the expander has made every upcast lane a scalar copy, rebuild vectors from
// the stores down (superword-level parallelism). Stores to consecutive addresses become one vector
// store; their values are vectorized lane by lane: same-op float ADD/MUL/NEG become one vector ALU,
// loads of consecutive addresses one vector load, a value shared by all lanes a broadcast, and a
// group of reduce accumulators (PHI of DEFINE_ACC) one vector accumulator. Anything else is built
// from its scalar lanes (VECTORIZE), so the result is always exact. The C compiler then keeps the
// accumulators of a register-tiled matmul in vector registers, which its own SLP pass fails to do.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "codegen/uopgraph.hpp"
#include "tg/helpers.hpp"
#include "uop/affine.hpp"
#include "uop/pattern.hpp"

namespace tg {

namespace {

struct Vec {
  UOp u;
  bool real;   // a vector op, not a VECTORIZE of scalar lanes
};

// split_const with the base's sum flattened and its terms in a fixed order: the lanes of a split
// symbolic loop's tile (r*16 + lane + row*N) come out of the simplifier with their terms in
// different orders ((row*N + r*16) for lane 0, ((r*16 + row*N) + 1) for lane 1). Only a fallback,
// so the indexes of kernels that vectorize without it keep their form.
std::pair<UOp, int64_t> sorted_split_const(const UOp& idx) {
  std::vector<UOp> terms, work{idx}, flat;
  int64_t off = 0;
  while (!work.empty()) {
    UOp u = work.back();
    work.pop_back();
    flat.clear();
    add_terms(u, flat);
    if (flat.size() > 1) work.insert(work.end(), flat.begin(), flat.end());
    else if (u->op == Ops::CONST) off += const_to_int(u.const_value());
    else terms.push_back(u);
  }
  if (terms.empty()) return {UOp(), off};
  std::sort(terms.begin(), terms.end(), [](const UOp& a, const UOp& b) { return a.cmp_lt(b); });
  return {sum_terms(terms), off};
}

UOp make_index(const UOp& base, int64_t off) {
  if (!base) return UOp::const_(dtypes::int32, off);
  return off == 0 ? base : UOp(Ops::ALU, base->dtype, {base, UOp::const_(base->dtype, off)}, BinaryOps::ADD);
}

// which lane sources look alike: commutative operands are put in the order of lane 0's
std::string sig(const UOp& u) {
  std::string s = to_string(u->op);
  if (u->op == Ops::ALU || u->op == Ops::LOAD) s += arg_str(u->arg);
  if (u->op == Ops::LOAD) s += std::to_string(reinterpret_cast<uintptr_t>(u->src[0].get()));
  return s;
}

// C vector extensions have no bool vectors; half is computed in float
bool vector_dtype_ok(DType dt) {
  return dt.count == 1 && dt != dtypes::bool_ && dt.kind != ScalarKind::float16 && dt.kind != ScalarKind::bfloat16 &&
         dt.kind != ScalarKind::void_;
}

// ops C applies lane-wise to vector operands (MAX through a compare and a bitwise select, in the
// renderer); compares and WHERE go through lane masks (Vectorizer::where)
bool vector_alu_ok(const UOp& u) {
  if (u->op != Ops::ALU || !vector_dtype_ok(u->dtype)) return false;
  const bool fl = u->dtype.is_float();
  if (u->is<UnaryOps>()) return u->as<UnaryOps>() == UnaryOps::NEG || (fl && u->as<UnaryOps>() == UnaryOps::RECIP);
  if (!u->is<BinaryOps>()) return false;
  switch (u->as<BinaryOps>()) {
    case BinaryOps::ADD: case BinaryOps::MUL: case BinaryOps::MAX: return true;
    case BinaryOps::IDIV: case BinaryOps::MOD: case BinaryOps::AND: case BinaryOps::OR: case BinaryOps::XOR:
    case BinaryOps::SHL: case BinaryOps::SHR: return !fl;
    default: return false;
  }
}

bool is_cmp(const UOp& u) { return is_alu(u, BinaryOps::CMPLT) || is_alu(u, BinaryOps::CMPNE); }
bool is_where(const UOp& u) { return u->op == Ops::ALU && u->is<TernaryOps>() && u->as<TernaryOps>() == TernaryOps::WHERE; }

class Vectorizer {
 public:
  Vec vec(const std::vector<UOp>& lanes) {
    std::vector<const UOpNode*> key;
    for (const UOp& l : lanes) key.push_back(l.get());
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    Vec v = build(lanes);
    journal_.push_back(key);
    memo_.emplace(std::move(key), v);
    return v;
  }

 private:
  DType vdt(const std::vector<UOp>& lanes) const { return lanes[0]->dtype.vec(static_cast<int>(lanes.size())); }
  Vec gather(const std::vector<UOp>& lanes) {
    if (lanes[0]->op == Ops::LOAD) load_gathers_++;
    return {UOp(Ops::VECTORIZE, vdt(lanes), lanes), false};
  }

  Vec build(const std::vector<UOp>& lanes) {
    const UOp& l0 = lanes[0];
    const size_t n = lanes.size();
    auto all = [&](auto pred) { return std::all_of(lanes.begin(), lanes.end(), pred); };
    TG_ASSERT(vector_dtype_ok(l0->dtype), "can't vectorize lanes of " + l0->dtype.str());
    if (all([&](const UOp& u) { return u == l0; })) return {UOp(Ops::VECTORIZE, vdt(lanes), lanes), l0->op != Ops::CONST};
    if (l0->op == Ops::ALU && all([&](const UOp& u) { return u->op == Ops::ALU && u->arg == l0->arg && u->dtype == l0->dtype; }))
      return is_where(l0) ? where(lanes) : alu(lanes);
    // value casts and bitcasts between vectorizable types (the transcendental approximations' float <-> int steps)
    if ((l0->op == Ops::CAST || l0->op == Ops::BITCAST) && vector_dtype_ok(l0->src[0]->dtype) &&
        all([&](const UOp& u) { return u->op == l0->op && u->dtype == l0->dtype && u->src[0]->dtype == l0->src[0]->dtype; })) {
      std::vector<UOp> srcs;
      for (const UOp& u : lanes) srcs.push_back(u->src[0]);
      Vec s = vec(srcs);
      if (s.real) return {UOp(l0->op, vdt(lanes), {s.u}), true};
    }
    // loads of consecutive addresses; gated ones (buf, idx, alt, gate) where every lane has the same gate: one
    // vector load under that gate (a padded copy's groups of 4 columns: conv.cpp padded_columns' C_..._7_4)
    const size_t nsrc = l0->src.size();
    const auto same_load = [&](const UOp& u) {
      return u->op == Ops::LOAD && u->src.size() == nsrc && u->src[0] == l0->src[0] && u->dtype == l0->dtype &&
             (nsrc == 2 || (u->src[3] == l0->src[3] && u->src[3]->dtype == dtypes::bool_));
    };
    if (l0->op == Ops::LOAD && (nsrc == 2 || nsrc == 4) && all(same_load)) {
      for (auto* split : {&split_const, &sorted_split_const}) {
        auto [base, off] = split(l0->src[1]);
        bool consecutive = true;
        for (size_t j = 1; j < n && consecutive; j++) {
          auto [b, o] = split(lanes[j]->src[1]);
          consecutive = b == base && o == off + static_cast<int64_t>(j);
        }
        if (!consecutive) continue;
        if (nsrc == 2) return {UOp(Ops::LOAD, vdt(lanes), {l0->src[0], make_index(base, off)}), true};
        std::vector<UOp> alts;
        for (const UOp& u : lanes) alts.push_back(u->src[2]);
        return {UOp(Ops::LOAD, vdt(lanes), {l0->src[0], make_index(base, off), vec(alts).u, l0->src[3]}), true};
      }
    }
    if (l0->op == Ops::PHI && all([&](const UOp& u) { return u->op == Ops::PHI && u->dtype == l0->dtype; })) return phi(lanes);
    if (l0->op == Ops::GEP && l0->src[0]->dtype.count == static_cast<int>(n)) {
      bool identity = true;
      for (size_t j = 0; j < n && identity; j++)
        identity = lanes[j]->op == Ops::GEP && lanes[j]->src[0] == l0->src[0] && lanes[j]->as<int64_t>() == static_cast<int64_t>(j);
      if (identity) return {l0->src[0], true};
    }
    return gather(lanes);
  }

  Vec alu(const std::vector<UOp>& lanes) {
    const UOp& l0 = lanes[0];
    std::vector<std::vector<UOp>> cols(l0->src.size());
    const bool commutative = is_alu(l0, BinaryOps::ADD) || is_alu(l0, BinaryOps::MUL);
    for (const UOp& u : lanes) {
      std::vector<UOp> s = u->src;
      if (commutative && sig(s[0]) != sig(l0->src[0]) && sig(s[1]) == sig(l0->src[0])) std::swap(s[0], s[1]);
      for (size_t k = 0; k < s.size(); k++) cols[k].push_back(s[k]);
    }
    std::vector<Vec> vsrc;
    bool any_real = false;
    for (auto& c : cols) {
      if (!vector_dtype_ok(c[0]->dtype)) return gather(lanes);
      vsrc.push_back(vec(c));
      any_real = any_real || vsrc.back().real;
    }
    if (!any_real) return gather(lanes);
    std::vector<UOp> srcs;
    for (const Vec& v : vsrc) srcs.push_back(v.u);
    // C's vector ops need operands of one type (a shift by a wider int is done per lane)
    const bool same_types = std::all_of(l0->src.begin(), l0->src.end(), [&](const UOp& s) { return s->dtype == l0->dtype; });
    if (vector_alu_ok(l0) && same_types) return {UOp(Ops::ALU, vdt(lanes), srcs, l0->arg), true};
    // an op C can't apply to vectors: per lane on the vectorized sources
    std::vector<UOp> outs;
    for (size_t j = 0; j < lanes.size(); j++) {
      std::vector<UOp> s;
      for (const UOp& v : srcs) s.push_back(v.gep(static_cast<int64_t>(j)));
      outs.push_back(UOp(Ops::ALU, l0->dtype, s, l0->arg));
    }
    return {UOp(Ops::VECTORIZE, vdt(lanes), outs), true};
  }

  // WHERE(cmp_j, x_j, y_j): one vector compare (C gives a lane mask, all ones where true, of the
  // operands' width) and a vector select; the mask's width must be the values' (renderer's bitwise select)
  Vec where(const std::vector<UOp>& lanes) {
    const UOp& c0 = lanes[0]->src[0];
    if (!is_cmp(c0) || !vector_dtype_ok(c0->src[0]->dtype) || c0->src[0]->dtype.itemsize() != lanes[0]->dtype.itemsize())
      return gather(lanes);
    std::vector<std::vector<UOp>> cols(4);
    for (const UOp& u : lanes) {
      const UOp& c = u->src[0];
      if (!(c->op == Ops::ALU && c->arg == c0->arg && c->src[0]->dtype == c0->src[0]->dtype)) return gather(lanes);
      cols[0].push_back(c->src[0]), cols[1].push_back(c->src[1]), cols[2].push_back(u->src[1]), cols[3].push_back(u->src[2]);
    }
    std::vector<Vec> v;
    bool any_real = false;
    for (auto& c : cols) v.push_back(vec(c)), any_real = any_real || v.back().real;
    if (!any_real) return gather(lanes);
    UOp mask(Ops::ALU, dtypes::bool_.vec(static_cast<int>(lanes.size())), {v[0].u, v[1].u}, c0->arg);
    return {UOp(Ops::ALU, vdt(lanes), {mask, v[2].u, v[3].u}, lanes[0]->arg), true};
  }

  // PHI(DEFINE_ACC_j, value_j) for all lanes -> one vector accumulator over the same loops
  Vec phi(const std::vector<UOp>& lanes) {
    std::vector<UOp> accs, inits, vals;
    for (const UOp& u : lanes) {
      const UOp& acc = u->src[0];
      if (acc->op != Ops::DEFINE_ACC || acc->src.size() != lanes[0]->src[0]->src.size()) return gather(lanes);
      for (size_t k = 1; k < acc->src.size(); k++)
        if (acc->src[k] != lanes[0]->src[0]->src[k]) return gather(lanes);
      accs.push_back(acc), inits.push_back(acc->src[0]), vals.push_back(u->src[1]);
    }
    const int64_t gathers_before = load_gathers_;
    std::vector<UOp> src{vec(inits).u};
    src.insert(src.end(), accs[0]->src.begin() + 1, accs[0]->src.end());
    UOp vacc(Ops::DEFINE_ACC, vdt(lanes), src, accs[0]->arg);
    std::vector<const UOpNode*> key;
    for (const UOp& a : accs) key.push_back(a.get());
    const size_t mark = journal_.size();
    journal_.push_back(key);
    memo_[key] = {vacc, true};
    Vec v = vec(vals);
    // lanes that read scattered memory keep scalar accumulators: the C compiler vectorizes each
    // reduce loop by itself then (a vector of gathers in the loop would be slower). Lanes whose updates
    // didn't line up still read the scalar accumulators, which the vector one would leave stale.
    if (load_gathers_ > gathers_before || reads_any(v.u, accs)) {
      while (journal_.size() > mark) memo_.erase(journal_.back()), journal_.pop_back();
      return gather(lanes);
    }
    return {UOp(Ops::PHI, vdt(lanes), {vacc, v.u}), true};
  }

  static bool reads_any(const UOp& root, const std::vector<UOp>& nodes) {
    for (const UOp& u : root.toposort())
      if (std::find(nodes.begin(), nodes.end(), u) != nodes.end()) return true;
    return false;
  }

  std::map<std::vector<const UOpNode*>, Vec> memo_;
  std::vector<std::vector<const UOpNode*>> journal_;   // memo keys in insertion order, to undo a failed accumulator
  int64_t load_gathers_ = 0;
};

}  // namespace

// Stores in equal contiguous runs shorter than a vector, max_lanes or more runs a constant stride apart (a conv
// tile of 10 output columns x 32 output channels 400 apart): the stride between the runs, so each vector runs
// across them (16 channels, the tile's vector accumulators over packed weights) where the runs would give
// vectors of 8 + 2 columns (and accumulators along the columns, a broadcast weight per FMA). 0 otherwise.
static int64_t runs_stride(const std::map<int64_t, UOp>& by_off, int64_t max_lanes) {
  std::vector<std::pair<int64_t, int64_t>> runs;   // (start, length)
  for (const auto& [off, _] : by_off) {
    if (!runs.empty() && off == runs.back().first + runs.back().second) runs.back().second++;
    else runs.push_back({off, 1});
  }
  if (static_cast<int64_t>(runs.size()) < max_lanes || runs[0].second < 2 || runs[0].second >= max_lanes) return 0;
  const int64_t d = runs[1].first - runs[0].first;
  for (size_t i = 1; i < runs.size(); i++)
    if (runs[i].second != runs[0].second || runs[i].first - runs[i - 1].first != d) return 0;
  return d;
}

UOp vectorize_stores(const UOp& sink_in, int64_t max_bytes) {
  TG_ASSERT(sink_in->op == Ops::SINK, "vectorize_stores needs a SINK");
  Vectorizer v;
  // vector accumulators (from unrolled reduces) get their per-lane update rebuilt as vector ops
  const PatternMatcher phis({{UPat(Ops::PHI), [&v](const Match& m) -> std::optional<UOp> {
    const UOp& phi = *m.root;
    if (phi->dtype.count == 1 || phi->src[1]->op != Ops::VECTORIZE || !vector_dtype_ok(phi->dtype.scalar())) return std::nullopt;
    Vec val = v.vec(phi->src[1]->src);
    if (!val.real) return std::nullopt;
    return UOp(Ops::PHI, phi->dtype, {phi->src[0], val.u}, phi->arg);
  }}});
  const UOp sink = graph_rewrite(sink_in, phis);
  // ungated scalar stores grouped by (buffer, base index), by offset
  std::map<std::pair<const UOpNode*, const UOpNode*>, std::map<int64_t, UOp>> groups;
  std::vector<UOp> keep;
  for (const UOp& s : sink->src) {
    if (s->op != Ops::STORE || s->src.size() != 3 || !vector_dtype_ok(s->src[2]->dtype) || s->src[0]->op != Ops::DEFINE_GLOBAL) {
      keep.push_back(s);
      continue;
    }
    auto [base, off] = split_const(s->src[1]);
    if (!groups[{s->src[0].get(), base.get()}].emplace(off, s).second) keep.push_back(s);
  }
  bool changed = sink != sink_in;
  for (auto& [_, by_off] : groups) {
    std::map<int64_t, UOp> left;   // stores no contiguous run took: tried as strided lanes below
    std::vector<UOp> run;
    // one buffer's stores: one dtype
    const int64_t max_lanes = std::max<int64_t>(1, max_bytes / std::max<int64_t>(1, by_off.begin()->second->src[2]->dtype.itemsize()));
    auto flush = [&] {
      size_t i = 0;
      while (i < run.size()) {
        size_t w = 1;
        while (w * 2 <= run.size() - i && static_cast<int64_t>(w * 2) <= max_lanes) w *= 2;
        std::vector<UOp> lanes;
        for (size_t j = i; j < i + w; j++) lanes.push_back(run[j]->src[2]);
        Vec val = w > 1 ? v.vec(lanes) : Vec{UOp(), false};
        if (val.real) {
          auto [base, off] = split_const(run[i]->src[1]);
          keep.push_back(UOp(Ops::STORE, dtypes::void_, {run[i]->src[0], make_index(base, off), val.u}));
          changed = true;
        } else {
          for (size_t j = i; j < i + w; j++) left.emplace(split_const(run[j]->src[1]).second, run[j]);
        }
        i += w;
      }
      run.clear();
    };
    // Lanes stored a constant stride apart (a conv's output channels, vectorized over packed weights):
    // the value is still one vector (its accumulator a vector register); each lane is stored alone. The
    // stride: across short equal runs (runs_stride), else the smallest gap between the stores no run took.
    int64_t stride = runs_stride(by_off, max_lanes);
    if (stride > 0) {
      left = by_off;
    } else {
      int64_t prev = 0;
      for (auto& [off, st] : by_off) {
        if (!run.empty() && off != prev + 1) flush();
        run.push_back(st), prev = off;
      }
      flush();
      for (auto it = left.begin(); it != left.end() && std::next(it) != left.end(); ++it) {
        const int64_t d = std::next(it)->first - it->first;
        if (stride == 0 || d < stride) stride = d;
      }
    }
    while (!left.empty()) {
      std::vector<UOp> lanes_st;
      for (int64_t off = left.begin()->first; stride > 1 && static_cast<int64_t>(lanes_st.size()) < max_lanes && left.count(off); off += stride)
        lanes_st.push_back(left.at(off));
      size_t w = 1;
      while (w * 2 <= lanes_st.size()) w *= 2;
      std::vector<UOp> lanes;
      for (size_t j = 0; w > 1 && j < w; j++) lanes.push_back(lanes_st[j]->src[2]);
      Vec val = w > 1 ? v.vec(lanes) : Vec{UOp(), false};
      for (size_t j = 0; j < std::max<size_t>(w, 1); j++) {
        const UOp st = w > 1 ? lanes_st[j] : left.begin()->second;
        if (val.real) keep.push_back(UOp(Ops::STORE, dtypes::void_, {st->src[0], st->src[1], val.u.gep(static_cast<int64_t>(j))}));
        else keep.push_back(st);
        left.erase(split_const(st->src[1]).second);
      }
      changed = changed || val.real;
    }
  }
  return changed ? UOp(Ops::SINK, sink->dtype, keep, sink->arg) : sink;
}

}  // namespace tg

// ---- GPU: 16-byte loads
namespace tg {

namespace {
// the lanes of one vector load: (global buffer, base index) -> offset -> scalar LOAD
struct LoadKey {
  const UOpNode* buf;
  const UOpNode* base;
  bool operator<(const LoadKey& o) const { return std::tie(buf, base) < std::tie(o.buf, o.base); }
};
}  // namespace

// node with its sources replaced through memo (vector loads under a vector store's lanes)
static UOp rebuild(const UOp& u, const std::unordered_map<const UOpNode*, UOp>& memo) {
  if (auto it = memo.find(u.get()); it != memo.end()) return it->second;
  std::vector<UOp> src;
  bool changed = false;
  for (const UOp& s : u->src) {
    src.push_back(rebuild(s, memo));
    changed |= src.back() != s;
  }
  return changed ? UOp(u->op, u->dtype, src, u->arg) : u;
}

UOp vectorize_gpu_loads(const UOp& sink) {
  std::vector<UOp> nodes = sink.toposort();
  std::set<const UOpNode*> stored;   // a buffer the kernel also writes keeps its scalar loads
  for (const UOp& u : nodes)
    if (u->op == Ops::STORE) stored.insert(u->src[0].get());
  std::map<LoadKey, std::map<int64_t, UOp>> groups;
  std::map<LoadKey, UOp> bases;
  for (const UOp& u : nodes) {
    if (u->op != Ops::LOAD || u->src.size() != 2 || u->src[0]->op != Ops::DEFINE_GLOBAL || stored.count(u->src[0].get())) continue;
    if (!(u->dtype == dtypes::float32 || u->dtype == dtypes::int32)) continue;
    auto [base, off] = split_const(u->src[1]);
    LoadKey key{u->src[0].get(), base.get()};
    groups[key][off] = u;
    bases[key] = base;
  }
  std::unordered_map<const UOpNode*, UOp> repl;
  for (auto& [key, lanes] : groups) {
    const UOp& base = bases[key];
    if (base && !base.divides(4)) continue;   // the vector's first lane must sit on a 16-byte boundary
    for (auto& [off, first] : lanes) {
      if (off % 4 != 0 || repl.count(first.get())) continue;
      bool all = true;
      for (int64_t i = 1; i < 4 && all; i++) all = lanes.count(off + i) > 0;
      if (!all) continue;
      UOp v(Ops::LOAD, first->dtype.vec(4), {first->src[0], make_index(base, off)});
      for (int64_t i = 0; i < 4; i++) repl[lanes.at(off + i).get()] = v.gep(i);
    }
  }
  // the sink's ungated float/int stores of 4 consecutive lanes at a 16-byte boundary become one
  // float4 store (a row kernel's full-shape output; the renderer checks the buffer's alignment)
  std::map<LoadKey, std::map<int64_t, UOp>> sgroups;
  std::map<LoadKey, UOp> sbases;
  for (const UOp& s : sink->src) {
    if (s->op != Ops::STORE || s->src.size() != 3 || s->src[0]->op != Ops::DEFINE_GLOBAL) continue;
    if (!(s->src[2]->dtype == dtypes::float32 || s->src[2]->dtype == dtypes::int32)) continue;
    auto [base, off] = split_const(s->src[1]);
    LoadKey key{s->src[0].get(), base.get()};
    sgroups[key].emplace(off, s);
    sbases[key] = base;
  }
  std::unordered_map<const UOpNode*, UOp> srepl;   // first lane -> vector store; other lanes -> null
  for (auto& [key, lanes] : sgroups) {
    const UOp& base = sbases[key];
    if (base && !base.divides(4)) continue;
    for (auto& [off, first] : lanes) {
      if (off % 4 != 0 || srepl.count(first.get())) continue;
      bool all = true;
      for (int64_t i = 1; i < 4 && all; i++) all = lanes.count(off + i) > 0;
      if (!all) continue;
      std::vector<UOp> vals;
      for (int64_t i = 0; i < 4; i++) vals.push_back(lanes.at(off + i)->src[2]);
      UOp vec(Ops::VECTORIZE, first->src[2]->dtype.vec(4), vals);
      srepl[first.get()] = UOp(Ops::STORE, dtypes::void_, {first->src[0], make_index(base, off), vec});
      for (int64_t i = 1; i < 4; i++) srepl[lanes.at(off + i).get()] = UOp();
    }
  }
  if (repl.empty() && srepl.empty()) return sink;
  std::unordered_map<const UOpNode*, UOp> memo;
  for (const UOp& u : nodes) {
    if (auto it = repl.find(u.get()); it != repl.end()) { memo[u.get()] = it->second; continue; }
    std::vector<UOp> src;
    bool changed = false;
    for (const UOp& s : u->src) {
      auto it = memo.find(s.get());
      src.push_back(it != memo.end() ? it->second : s);
      changed |= src.back() != s;
    }
    if (u.get() == sink.get() && !srepl.empty()) {
      std::vector<UOp> keep;
      for (size_t i = 0; i < src.size(); i++) {
        auto it = srepl.find(u->src[i].get());
        if (it == srepl.end()) keep.push_back(src[i]);
        else if (it->second) keep.push_back(rebuild(it->second, memo));
      }
      return UOp(Ops::SINK, u->dtype, keep, u->arg);
    }
    memo[u.get()] = changed ? UOp(u->op, u->dtype, src, u->arg) : u;
  }
  return memo.at(sink.get());
}

}  // namespace tg
