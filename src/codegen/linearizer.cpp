// Block-structured toposort of a kernel graph (see linearizer.hpp for the contract).
#include "codegen/linearizer.hpp"

#include <algorithm>
#include <queue>
#include <set>
#include <unordered_map>

namespace tg {
namespace {

bool is_reduce_range(const UOp& u) {
  return u->op == Ops::RANGE && u->as<std::vector<int64_t>>().size() >= 2 && u->as<std::vector<int64_t>>()[1] != 0;
}
int64_t range_axis(const UOp& u) { return u->as<std::vector<int64_t>>().at(0); }

// The op that closes a scope's dependency walk, and the op that ends the block (tinygrad's END_FOR_UOP).
Ops scope_stop(Ops op) { return op == Ops::RANGE ? Ops::PHI : Ops::STORE; }
Ops scope_end_op(Ops op) { return op == Ops::RANGE ? Ops::ENDRANGE : Ops::ENDIF; }

// The graph below the sink, numbered in DFS post-order (tinygrad's in_degree insertion order).
struct Graph {
  std::vector<UOp> nodes;
  std::unordered_map<const UOpNode*, int> id;
  std::vector<std::vector<int>> srcs;         // sources of each node by id
  std::vector<std::vector<int>> children;     // users of each node, one entry per use
  std::vector<int> in_degree;                 // number of sources, one per use
  std::vector<std::vector<int>> range_srcs;   // reduce RANGEs each node depends on (sorted ids)
};

Graph build_graph(const UOp& sink) {
  Graph g;
  // iterative DFS: deep index chains must not overflow the stack
  std::vector<std::pair<UOp, size_t>> stack{{sink, 0}};
  g.id.reserve(1024);
  g.id[sink.get()] = -1;   // -1: entered, not finished
  while (!stack.empty()) {
    auto& [u, next] = stack.back();
    if (next < u->src.size()) {
      const UOp& s = u->src[next++];
      if (g.id.try_emplace(s.get(), -1).second) stack.emplace_back(s, 0);
      continue;
    }
    int uid = static_cast<int>(g.nodes.size());
    g.id[u.get()] = uid;
    g.nodes.push_back(u);
    g.children.emplace_back();
    g.in_degree.push_back(static_cast<int>(u->src.size()));
    std::vector<int> rs, sids;
    for (const UOp& s : u->src) {
      int sid = g.id.at(s.get());
      sids.push_back(sid);
      g.children[sid].push_back(uid);
      rs.insert(rs.end(), g.range_srcs[sid].begin(), g.range_srcs[sid].end());
      if (is_reduce_range(s)) rs.push_back(sid);
    }
    std::sort(rs.begin(), rs.end());
    rs.erase(std::unique(rs.begin(), rs.end()), rs.end());
    g.range_srcs.push_back(std::move(rs));
    g.srcs.push_back(std::move(sids));
    stack.pop_back();
  }
  return g;
}

// A RANGE or IF and everything that depends on it, up to and including the first PHI (RANGE)
// or STORE (IF) on each path; the SINK never belongs to a scope.
struct Scope {
  int node;
  std::vector<char> member;
  int remaining = 0;
  std::vector<int> phis;   // PHIs in a RANGE's scope, sorted
};

Scope make_scope(const Graph& g, int p) {
  Scope s{p, std::vector<char>(g.nodes.size(), 0), 0, {}};
  Ops stop = scope_stop(g.nodes[p]->op);
  std::vector<int> work{p};
  while (!work.empty()) {
    int y = work.back();
    work.pop_back();
    if (y != p && g.nodes[y]->op == stop) continue;
    for (int c : g.children[y]) {
      if (s.member[c] || g.nodes[c]->op == Ops::SINK) continue;
      s.member[c] = 1;
      s.remaining++;
      if (g.nodes[c]->op == Ops::PHI) s.phis.push_back(c);
      work.push_back(c);
    }
  }
  std::sort(s.phis.begin(), s.phis.end());
  return s;
}

bool share_any(const std::vector<int>& a, const std::vector<int>& b) {
  for (int x : a)
    if (std::binary_search(b.begin(), b.end(), x)) return true;
  return false;
}

class Linearizer {
 public:
  explicit Linearizer(const UOp& sink) : g_(build_graph(sink)), scope_of_(g_.nodes.size(), -1) {
    arg_strs_.reserve(g_.nodes.size());
    for (const UOp& u : g_.nodes) arg_strs_.push_back(arg_str(u->arg));
    for (int i = static_cast<int>(g_.nodes.size()) - 1; i >= 0; i--) {
      Ops op = g_.nodes[i]->op;
      if (op != Ops::RANGE && op != Ops::IF) continue;
      scope_of_[i] = static_cast<int>(scopes_.size());
      scopes_.push_back(make_scope(g_, i));
      member0_.push_back(scopes_.back().member);
    }
  }

  std::vector<UOp> run() {
    for (size_t i = 0; i < g_.nodes.size(); i++)
      if (g_.in_degree[i] == 0) push(static_cast<int>(i));
    while (!queue_.empty()) {
      int x = queue_.top().second;
      queue_.pop();
      place(x);
    }
    TG_ASSERT(order_.size() == g_.nodes.size(), "linearize placed " + std::to_string(order_.size()) + " of " +
                                                    std::to_string(g_.nodes.size()) + " uops");
    std::vector<UOp> out;
    out.reserve(order_.size() + scope_end_.size());
    for (int i : order_) out.push_back(g_.nodes[i]);
    // close scopes in the order they were opened; a later (inner) scope ending at the same node
    // is inserted first, so blocks nest
    for (auto& [s, last] : scope_end_) {
      const UOp& scope = g_.nodes[scopes_[s].node];
      auto it = std::find(out.begin(), out.end(), g_.nodes[last]);
      out.insert(it + 1, UOp(scope_end_op(scope->op), dtypes::void_, {scope}));
    }
    return hoist(out);
  }

  // A value placed inside a block it doesn't depend on (an index math of thread ids popped while a
  // reduce's loop was open) would be out of scope for its users after the block; a kernel with
  // several reduces in a row meets this. Such pure values move to just before the outermost block
  // they don't belong to. DEFINE_ACC stays: it is placed to reset per iteration of its outer loops.
  std::vector<UOp> hoist(const std::vector<UOp>& out) const {
    std::vector<UOp> res;
    res.reserve(out.size());
    std::vector<std::pair<int, size_t>> open;   // (scope, position of its opener in res)
    std::unordered_map<const UOpNode*, size_t> level;   // how many blocks were open where a node went
    for (const UOp& u : out) {
      if (u->op == Ops::ENDRANGE || u->op == Ops::ENDIF) {
        open.pop_back();
        res.push_back(u);
        continue;
      }
      const int id = g_.id.at(u.get());
      size_t keep = open.size();
      const bool pure = u->op == Ops::ALU || u->op == Ops::LOAD || u->op == Ops::CONST || u->op == Ops::SPECIAL || u->op == Ops::CAST ||
                        u->op == Ops::BITCAST || u->op == Ops::GEP || u->op == Ops::VECTORIZE || u->op == Ops::DEFINE_VAR;
      if (pure) {
        size_t src_level = 0;   // its sources must all be outside the block it leaves
        for (const UOp& s : u->src)
          if (auto it = level.find(s.get()); it != level.end()) src_level = std::max(src_level, it->second);
        while (keep > src_level && !member0_[open[keep - 1].first][id]) keep--;
      }
      if (keep < open.size()) {
        res.insert(res.begin() + static_cast<int64_t>(open[keep].second), u);
        for (size_t j = keep; j < open.size(); j++) open[j].second++;
      } else {
        res.push_back(u);
      }
      level[u.get()] = keep;
      if (scope_of_[id] >= 0) open.emplace_back(scope_of_[id], res.size() - 1);
    }
    return res;
  }

  // tinygrad's priorities: reduce RANGEs open late (by axis, and after ranges their PHIs don't
  // share), every other node prefers to run inside the loops it belongs to
  int64_t priority(int u) const {
    const UOp& x = g_.nodes[u];
    int64_t prio = 0;
    if (is_reduce_range(x)) {
      prio += range_axis(x);
      const Scope& su = scopes_[scope_of_[u]];
      for (int p : su.phis) {
        int64_t independent = 0;
        for (int r : g_.range_srcs[p])
          if (!share_any(scopes_[scope_of_[r]].phis, su.phis)) independent++;
        prio += 10000 * independent;
      }
      return prio + kDepthPrio * reduce_depth(u);
    }
    for (const Scope& s : scopes_) {
      const UOp& l = g_.nodes[s.node];
      if (l->op == Ops::RANGE && s.member[u]) prio -= (range_axis(l) + 1) + 1000 * (is_reduce_range(l) ? 1 : 0);
    }
    return prio;
  }

  // How many reduces feed this reduce range's loop body one after another (softmax's sum reads the
  // max: depth 1). A range opens only after the reduces it reads have closed, whatever its lanes'
  // accumulator count adds above; a kernel with one reduce has depth 0 (a GROUP's second stage 1).
  static constexpr int64_t kDepthPrio = 1000000000;
  int64_t reduce_depth(int u) const {
    if (auto it = depth_.find(u); it != depth_.end()) return it->second;
    depth_[u] = 0;   // (no cycles in a DAG; guards re-entry)
    const Scope& su = scopes_[scope_of_[u]];
    int64_t d = 0;
    for (int p : su.phis)
      for (int r : g_.range_srcs[p])
        if (r != u && !share_any(scopes_[scope_of_[r]].phis, su.phis)) d = std::max(d, 1 + reduce_depth(r));
    return depth_[u] = d;
  }

  void push(int u) { queue_.emplace(priority(u), u); }

  void place(int x) {
    const UOp& u = g_.nodes[x];

    if (scope_of_[x] >= 0) { end_pos_[scope_of_[x]] = scope_end_.size(); scope_end_.emplace_back(scope_of_[x], x); }
    if (u->op == Ops::DEFINE_ACC) {
      // the accumulator is declared before the outermost loop it reduces over
      auto first = order_.end();
      for (const UOp& s : u->src)
        if (s->op == Ops::RANGE) first = std::min(first, std::find(order_.begin(), order_.end(), g_.id.at(s.get())));
      TG_ASSERT(first != order_.end(), "DEFINE_ACC without a placed RANGE source: " + u.str());
      order_.insert(first, x);
    } else {
      order_.push_back(x);
    }
    for (size_t si = 0; si < scopes_.size(); si++) {
      Scope& s = scopes_[si];
      if (!s.member[x]) continue;
      s.member[x] = 0;
      if (--s.remaining == 0) scope_end_[end_pos_.at(si)].second = x;
    }
    for (int c : g_.children[x])
      if (--g_.in_degree[c] == 0) push(c);
  }

  // UOp::cmp_lt over node ids with each arg's string computed once (the heap compares often)
  bool node_lt(int a, int b) const {
    if (a == b) return false;
    const UOpNode &x = *g_.nodes[a], &y = *g_.nodes[b];
    if (x.op != y.op) return x.op < y.op;
    if (x.arg.index() != y.arg.index()) return x.arg.index() < y.arg.index();
    if (int c = arg_strs_[a].compare(arg_strs_[b]); c != 0) return c < 0;
    if (x.dtype != y.dtype) return x.dtype < y.dtype;
    const auto &xs = g_.srcs[a], &ys = g_.srcs[b];
    for (size_t i = 0; i < std::min(xs.size(), ys.size()); i++)
      if (xs[i] != ys[i]) return node_lt(xs[i], ys[i]);
    return x.src.size() < y.src.size();
  }

  struct Cmp {
    const Linearizer* l;
    // std::priority_queue pops the largest: "a after b" is a > b
    bool operator()(const std::pair<int64_t, int>& a, const std::pair<int64_t, int>& b) const {
      if (a.first != b.first) return a.first > b.first;
      return l->node_lt(b.second, a.second);
    }
  };

  Graph g_;
  std::vector<int> scope_of_;                         // node id -> scope index or -1
  std::vector<Scope> scopes_;
  std::vector<std::vector<char>> member0_;
  mutable std::unordered_map<int, int64_t> depth_;   // each scope's members before placing empties them
  std::vector<std::string> arg_strs_;
  std::priority_queue<std::pair<int64_t, int>, std::vector<std::pair<int64_t, int>>, Cmp> queue_{Cmp{this}};
  std::vector<int> order_;
  std::vector<std::pair<int, int>> scope_end_;        // (scope, last node), in the order scopes opened
  std::unordered_map<size_t, size_t> end_pos_;        // scope -> index in scope_end_
};

void verify_stores(const std::vector<UOp>& uops) {
  // two identical stores (ignoring the value) to a global means the graph was expanded wrongly
  std::set<std::vector<const UOpNode*>> seen;
  for (const UOp& u : uops) {
    if (u->op != Ops::STORE || u->src[0]->op == Ops::DEFINE_LOCAL) continue;
    std::vector<const UOpNode*> key;
    for (size_t i = 0; i < u->src.size(); i++)
      if (i != 2) key.push_back(u->src[i].get());
    TG_ASSERT(seen.insert(key).second, "repeated stores in uops: " + u.str());
  }
}

}  // namespace

void type_verify(const std::vector<UOp>& uops) {
  for (const UOp& u : uops) {
    const auto& src = u->src;
    DType dt = u->dtype;
    switch (u->op) {
      case Ops::CONST:
        TG_ASSERT(dt.count == 1, "consts should be scalar, got " + dt.str());
        TG_ASSERT((dt.is_float() && u->is<double>()) || (dt.is_int() && u->is<int64_t>()) || (dt.is_bool() && u->is<bool>()),
                  "type of CONST arg " + arg_str(u->arg) + " does not match " + dt.str());
        break;
      case Ops::DEFINE_ACC:
        TG_ASSERT(!src.empty() && src[0]->dtype == dt, "DEFINE_ACC dtype mismatch: " + u.str());
        break;
      // vector casts come only from the CPU vectorizer, lane for lane
      case Ops::CAST: TG_ASSERT(src.size() == 1 && dt.count == src[0]->dtype.count, "CAST must keep its source's lane count: " + u.str()); break;
      case Ops::BITCAST: TG_ASSERT(src.size() == 1, "BITCAST takes one source: " + u.str()); break;
      case Ops::VECTORIZE:
        TG_ASSERT(dt.count > 1 && src.size() == dt.count, "VECTORIZE size mismatch: " + u.str());
        for (const UOp& s : src) TG_ASSERT(s->dtype.vec(dt.count) == dt, "VECTORIZE source dtype mismatch: " + u.str());
        break;
      case Ops::GEP: TG_ASSERT(dt == src.at(0)->dtype.scalar(), "GEP dtype must be its source's scalar: " + u.str()); break;
      case Ops::LOAD:
        if (src.size() > 3 && src[3]->dtype.kind == ScalarKind::bool_)
          TG_ASSERT(src[3]->dtype == dtypes::bool_ && src[2]->dtype == dt, "gated LOAD needs a bool gate and an alt of its dtype: " + u.str());
        break;
      case Ops::STORE:
        TG_ASSERT(dt == dtypes::void_, "STORE dtype must be void: " + u.str());
        TG_ASSERT(src.size() >= 3, "STORE needs (buf, idx, val): " + u.str());
        if (src.size() == 4) TG_ASSERT(src[3]->dtype == dtypes::bool_, "STORE gate must be bool: " + u.str());
        break;
      case Ops::ALU: {
        DType boolv = dt.count > 1 ? dtypes::bool_.vec(dt.count) : dtypes::bool_;
        if (u->is<UnaryOps>()) {
          TG_ASSERT(dt == src.at(0)->dtype, "unary ALU dtype mismatch: " + u.str());
        } else if (u->is<BinaryOps>()) {
          BinaryOps op = u->as<BinaryOps>();
          TG_ASSERT(src.size() == 2, "binary ALU needs two sources: " + u.str());
          if (op == BinaryOps::CMPLT || op == BinaryOps::CMPNE) {
            TG_ASSERT(dt == boolv && src[0]->dtype == src[1]->dtype, "comparison dtype mismatch: " + u.str());
          } else if (op == BinaryOps::IDIV) {
            TG_ASSERT(src[0]->dtype.is_int() && src[1]->dtype.is_int() && dt.is_int(), "IDIV needs ints: " + u.str());
          } else if (op == BinaryOps::SHL || op == BinaryOps::SHR || op == BinaryOps::SHFL_XOR) {   // an int shift/lane mask
            TG_ASSERT(dt == src[0]->dtype, "shift dtype mismatch: " + u.str());
          } else {
            TG_ASSERT(dt == src[0]->dtype && dt == src[1]->dtype, "binary ALU dtype mismatch: " + u.str());
          }
        } else if (u->is<TernaryOps>() && u->as<TernaryOps>() == TernaryOps::WHERE) {
          TG_ASSERT(src.size() == 3 && src[0]->dtype == boolv, "WHERE selector must be bool: " + u.str());
          TG_ASSERT(dt == src[1]->dtype && dt == src[2]->dtype, "WHERE choice dtype mismatch: " + u.str());
        }
        break;
      }
      default: break;
    }
  }
}

std::vector<UOp> linearize(const UOp& sink) {
  TG_ASSERT(sink && sink->op == Ops::SINK, "linearize needs a SINK, got " + (sink ? to_string(sink->op) : std::string("null")));
  std::vector<UOp> uops = Linearizer(sink).run();
  TG_ASSERT(uops.back()->op == Ops::SINK, "didn't end with SINK, ended with " + uops.back().str());
  for (const UOp& u : uops)
    TG_ASSERT(u->op != Ops::EXPAND && u->op != Ops::CONTRACT && u->op != Ops::REDUCE && u->op != Ops::SHAPETRACKER &&
                  u->op != Ops::REDUCE_AXIS && u->op != Ops::BIND,
              "bad UOp left for the linearizer (run the uopgraph rewrites first): " + to_string(u->op));
  type_verify(uops);
  verify_stores(uops);
  uops.pop_back();   // the SINK only marked the kernel
  return uops;
}

}  // namespace tg
