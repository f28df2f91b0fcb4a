#include "uop/pattern.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "tg/helpers.hpp"

namespace tg {

// ---------------------------------------------------------------- UPat builders
static uint64_t op_bit(Ops op) { return uint64_t{1} << static_cast<int>(op); }

UPat::UPat(Ops op) : ops_mask_(op_bit(op)) {}
UPat::UPat(std::initializer_list<Ops> ops) {
  for (Ops o : ops) ops_mask_ |= op_bit(o);
}
UPat UPat::var(int slot, std::optional<DType> dt) {
  UPat p;
  p = p.cap(slot);
  if (dt) p.dtypes_ = {*dt};
  return p;
}
UPat UPat::cvar(int slot, std::optional<DType> dt) {
  UPat p = UPat(Ops::CONST).cap(slot);
  if (dt) p.dtypes_ = {*dt};
  return p;
}
UPat UPat::cnst(ConstType v) {
  UPat p(Ops::CONST);
  p.const_ = v;
  return p;
}
UPat UPat::alu(UnaryOps op, const UPat& a) { return UPat(Ops::ALU).arg(op).src({a}); }
UPat UPat::alu(BinaryOps op, const UPat& a, const UPat& b) {
  UPat p = UPat(Ops::ALU).arg(op);
  return is_commutative(op) ? p.src_any_order({a, b}) : p.src({a, b});
}
UPat UPat::alu(TernaryOps op, const UPat& a, const UPat& b, const UPat& c) { return UPat(Ops::ALU).arg(op).src({a, b, c}); }

UPat UPat::cap(int slot) const {
  TG_ASSERT(slot >= 0 && slot < kMaxSlots, "capture slot " + std::to_string(slot) + " out of range");
  UPat p = *this;
  p.slot_ = slot;
  return p;
}
UPat UPat::dtype(DType dt) const { UPat p = *this; p.dtypes_ = {dt}; return p; }
UPat UPat::dtypes(std::initializer_list<DType> dts) const { UPat p = *this; p.dtypes_ = dts; return p; }
UPat UPat::arg(Arg a) const { UPat p = *this; p.arg_ = std::move(a); return p; }
UPat UPat::src(std::vector<UPat> s) const { UPat p = *this; p.src_ = std::move(s); p.kind_ = SrcKind::Tuple; return p; }
UPat UPat::src_any_order(std::vector<UPat> s) const {
  UPat p = *this;
  p.src_ = std::move(s);
  p.kind_ = SrcKind::List;
  return p;
}
UPat UPat::src_each(const UPat& e) const { UPat p = *this; p.src_ = {e}; p.kind_ = SrcKind::Repeat; return p; }
UPat UPat::any_len() const { UPat p = *this; p.any_len_ = true; return p; }

UPat UPat::lt(const UPat& b) const { return alu(BinaryOps::CMPLT, *this, b); }
UPat UPat::ne(const UPat& b) const { return alu(BinaryOps::CMPNE, *this, b); }
UPat UPat::eq(const UPat& b) const { return -ne(b); }
UPat UPat::max(const UPat& b) const { return alu(BinaryOps::MAX, *this, b); }
UPat UPat::where(const UPat& t, const UPat& f) const { return alu(TernaryOps::WHERE, *this, t, f); }
UPat UPat::cast(std::optional<DType> dt) const {
  UPat p = UPat(Ops::CAST).src({*this});
  if (dt) p.dtypes_ = {*dt};
  return p;
}
UPat UPat::gep(int64_t i) const { return UPat(Ops::GEP).arg(i).src({*this}); }

UPat operator+(const UPat& a, const UPat& b) { return UPat::alu(BinaryOps::ADD, a, b); }
UPat operator-(const UPat& a, const UPat& b) { return a + (-b); }
UPat operator*(const UPat& a, const UPat& b) { return UPat::alu(BinaryOps::MUL, a, b); }
UPat operator/(const UPat& a, const UPat& b) { return UPat::alu(BinaryOps::IDIV, a, b); }
UPat operator%(const UPat& a, const UPat& b) { return UPat::alu(BinaryOps::MOD, a, b); }
UPat operator-(const UPat& a) { return UPat::alu(UnaryOps::NEG, a); }
UPat operator&(const UPat& a, const UPat& b) { return UPat::alu(BinaryOps::AND, a, b); }
UPat operator|(const UPat& a, const UPat& b) { return UPat::alu(BinaryOps::OR, a, b); }
UPat operator+(const UPat& a, int64_t b) { return a + UPat::cnst(b); }
UPat operator*(const UPat& a, int64_t b) { return a * UPat::cnst(b); }
UPat operator/(const UPat& a, int64_t b) { return a / UPat::cnst(b); }
UPat operator%(const UPat& a, int64_t b) { return a % UPat::cnst(b); }

std::string UPat::str() const {
  std::string ops;
  for (int i = 0; i < kNumOps; i++)
    if (ops_mask_ >> i & 1) ops += (ops.empty() ? "" : ",") + to_string(static_cast<Ops>(i));
  std::string s = "UPat(" + (ops.empty() ? std::string("None") : ops);
  if (arg_) s += ", arg=" + arg_str(*arg_);
  if (const_) s += ", const=" + const_str(*const_);
  if (slot_ >= 0) s += ", slot=" + std::to_string(slot_);
  if (!src_.empty()) {
    const char* open = kind_ == SrcKind::List ? "[" : "(";
    const char* close = kind_ == SrcKind::List ? "]" : kind_ == SrcKind::Repeat ? ",...)" : ")";
    s += ", src=" + std::string(open);
    for (size_t i = 0; i < src_.size(); i++) s += (i ? ", " : "") + src_[i].str();
    s += close;
  }
  return s + ")";
}

// ---------------------------------------------------------------- flattening
// One pattern variant in preorder: a node's sources follow it, each a contiguous subtree.
namespace {
struct Flat;
struct PNode {
  uint64_t ops_mask = 0;
  std::vector<DType> dts;
  std::optional<Arg> arg;
  std::optional<ConstType> cval;
  int slot = -1;
  UPat::SrcKind kind = UPat::SrcKind::None;
  bool any_len = false;
  uint32_t nsrc = 0;
  uint32_t size = 1;   // nodes in this subtree
  int sub = -1;        // Repeat: index into Flat::subs
};
struct Flat {
  std::vector<PNode> nodes;
  std::vector<std::vector<Flat>> subs;   // alternatives for each Repeat source pattern
};

constexpr size_t kMaxVariants = 4096;

std::vector<Flat> expand(const UPat& p);

PNode head_of(const UPat& p) {
  PNode n;
  n.ops_mask = p.ops_mask_;
  n.dts = p.dtypes_;
  n.arg = p.arg_;
  n.cval = p.const_;
  n.slot = p.slot_;
  n.kind = p.kind_;
  n.any_len = p.any_len_;
  n.nsrc = static_cast<uint32_t>(p.src_.size());
  return n;
}

// Appends child c's subtree to f, shifting its Repeat indices past f's.
void append(Flat& f, const Flat& c) {
  size_t off = f.subs.size();
  for (PNode n : c.nodes) {
    if (n.sub >= 0) n.sub += static_cast<int>(off);
    f.nodes.push_back(std::move(n));
  }
  for (auto& s : c.subs) f.subs.push_back(s);
}

// Every combination of the children's variants, children in the order given by idx.
void product(const PNode& head, const std::vector<std::vector<Flat>>& kids, const std::vector<size_t>& idx,
             std::vector<Flat>& out) {
  std::vector<size_t> pick(idx.size(), 0);
  while (true) {
    Flat f;
    f.nodes.push_back(head);
    for (size_t k = 0; k < idx.size(); k++) append(f, kids[idx[k]][pick[k]]);
    f.nodes[0].size = static_cast<uint32_t>(f.nodes.size());
    out.push_back(std::move(f));
    TG_ASSERT(out.size() <= kMaxVariants, "pattern expands to too many commutative variants");
    size_t k = 0;
    while (k < idx.size() && ++pick[k] == kids[idx[k]].size()) pick[k++] = 0;
    if (k == idx.size()) break;
  }
}

std::vector<Flat> expand(const UPat& p) {
  PNode head = head_of(p);
  std::vector<Flat> out;
  if (p.kind_ == UPat::SrcKind::None || (p.src_.empty() && p.kind_ != UPat::SrcKind::Repeat)) {
    Flat f;
    f.nodes.push_back(head);
    out.push_back(std::move(f));
    return out;
  }
  if (p.kind_ == UPat::SrcKind::Repeat) {
    Flat f;
    head.sub = 0;
    f.nodes.push_back(head);
    f.subs.push_back(expand(p.src_[0]));
    out.push_back(std::move(f));
    return out;
  }
  std::vector<std::vector<Flat>> kids;
  for (auto& s : p.src_) kids.push_back(expand(s));
  std::vector<size_t> idx(kids.size());
  std::iota(idx.begin(), idx.end(), 0);
  if (p.kind_ == UPat::SrcKind::Tuple) {
    product(head, kids, idx, out);
    return out;
  }
  do product(head, kids, idx, out);   // List: itertools.permutations order
  while (std::next_permutation(idx.begin(), idx.end()));
  return out;
}

bool const_equal(const ConstType& a, const ConstType& b) {
  if (std::holds_alternative<double>(a) || std::holds_alternative<double>(b)) return const_to_double(a) == const_to_double(b);
  return const_to_int(a) == const_to_int(b);
}

// Matches the subtree at nodes[i] against u.
bool match_node(const Flat& f, uint32_t i, const UOp& u, Match& m) {
  const PNode& p = f.nodes[i];
  const UOpNode& n = *u;
  if (p.ops_mask && !(p.ops_mask >> static_cast<int>(n.op) & 1)) return false;
  if (!p.dts.empty() && std::find(p.dts.begin(), p.dts.end(), n.dtype) == p.dts.end()) return false;
  if (p.cval && (n.op != Ops::CONST || !const_equal(*p.cval, u.const_value()))) return false;
  if (p.arg && !arg_equal(*p.arg, n.arg)) return false;
  if (p.slot >= 0) {
    const UOp*& c = m.caps[p.slot];
    if (c && *c != u) return false;
    if (!c) c = &u;
  }
  switch (p.kind) {
    case UPat::SrcKind::None: return true;
    case UPat::SrcKind::Repeat: {
      const auto& alts = f.subs[p.sub];
      for (const UOp& s : n.src) {
        if (alts.size() == 1) {
          if (!match_node(alts[0], 0, s, m)) return false;
          continue;
        }
        // several alternatives: restore the captures after a failed one
        bool ok = false;
        for (const Flat& a : alts) {
          auto saved = m.caps;
          if (match_node(a, 0, s, m)) { ok = true; break; }
          m.caps = saved;
        }
        if (!ok) return false;
      }
      return true;
    }
    default: {
      if (p.any_len ? n.src.size() < p.nsrc : n.src.size() != p.nsrc) return false;
      uint32_t j = i + 1;
      for (uint32_t k = 0; k < p.nsrc; k++) {
        if (!match_node(f, j, n.src[k], m)) return false;
        j += f.nodes[j].size;
      }
      return true;
    }
  }
}

// Bucket key: the op, and for ALU the arg (1 + index over Unary/Binary/Ternary ops).
constexpr int kUnary = 8, kBinary = 13, kTernary = 2, kArgCodes = 1 + kUnary + kBinary + kTernary;
int arg_code(const Arg& a) {
  if (auto u = std::get_if<UnaryOps>(&a)) return 1 + static_cast<int>(*u);
  if (auto b = std::get_if<BinaryOps>(&a)) return 1 + kUnary + static_cast<int>(*b);
  if (auto t = std::get_if<TernaryOps>(&a)) return 1 + kUnary + kBinary + static_cast<int>(*t);
  return 0;
}

// ---------------------------------------------------------------- match statistics
struct RuleStat { int64_t tries = 0, matches = 0, hits = 0; double ns = 0; };
struct StatRegistry {
  std::mutex mu;
  std::map<std::string, RuleStat> by_rule;
  static StatRegistry& get() {
    static StatRegistry* r = [] {
      auto* reg = new StatRegistry();
      std::atexit([] {
        auto& s = StatRegistry::get();
        std::vector<std::pair<std::string, RuleStat>> v(s.by_rule.begin(), s.by_rule.end());
        std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second.ns > b.second.ns; });
        for (auto& [k, st] : v)
          std::fprintf(stderr, "%8lld %8lld %8lld %9.2f ms  %s\n", (long long)st.tries, (long long)st.matches,
                       (long long)st.hits, st.ns / 1e6, k.c_str());
      });
      return reg;
    }();
    return *r;
  }
};
bool track_stats() {
  static const bool on = getenv("TRACK_MATCH_STATS") >= 1;
  return on;
}
}  // namespace

Rule::Rule(UPat p, RewriteFn f, std::source_location loc) : pat(std::move(p)), fn(std::move(f)) {
  std::string file = loc.file_name();
  auto slash = file.find_last_of('/');
  where = (slash == std::string::npos ? file : file.substr(slash + 1)) + ":" + std::to_string(loc.line());
}

// ---------------------------------------------------------------- PatternMatcher
struct PatternMatcher::Compiled {
  std::vector<Rule> rules;
  std::vector<std::vector<Flat>> variants;             // per rule
  std::vector<std::vector<uint32_t>> buckets;          // per (op, arg code): rule indices in table order
  mutable std::vector<RuleStat> stats;

  explicit Compiled(std::vector<Rule> rs) : rules(std::move(rs)) {
    if (track_stats()) StatRegistry::get();   // its report must run after static matchers are destroyed
    buckets.assign(static_cast<size_t>(kNumOps) * kArgCodes, {});
    stats.resize(rules.size());
    for (uint32_t r = 0; r < rules.size(); r++) {
      const UPat& p = rules[r].pat;
      variants.push_back(expand(p));
      int code = p.arg_ ? arg_code(*p.arg_) : 0;
      for (int op = 0; op < kNumOps; op++) {
        if (p.ops_mask_ && !(p.ops_mask_ >> op & 1)) continue;
        bool alu = op == static_cast<int>(Ops::ALU);
        for (int c = 0; c < (alu ? kArgCodes : 1); c++)
          if (code == 0 || !alu || c == code) buckets[op * kArgCodes + c].push_back(r);
      }
    }
  }
  const std::vector<uint32_t>& bucket(const UOpNode& n) const {
    int c = n.op == Ops::ALU ? arg_code(n.arg) : 0;
    return buckets[static_cast<int>(n.op) * kArgCodes + c];
  }
  ~Compiled() {
    if (!track_stats()) return;
    auto& reg = StatRegistry::get();
    std::lock_guard<std::mutex> lock(reg.mu);
    for (size_t r = 0; r < rules.size(); r++) {
      auto& d = reg.by_rule[rules[r].where];
      d.tries += stats[r].tries, d.matches += stats[r].matches, d.hits += stats[r].hits, d.ns += stats[r].ns;
    }
  }
};

// Brace-initialized tables share one source line, so a rule is named by its line, its index in
// the table it was written in, and its pattern.
PatternMatcher::PatternMatcher(std::vector<Rule> rules) {
  for (size_t i = 0; i < rules.size(); i++)
    if (rules[i].where.find('#') == std::string::npos)
      rules[i].where += " #" + std::to_string(i) + " " + rules[i].pat.str().substr(0, 100);
  c_ = std::make_shared<Compiled>(std::move(rules));
}

PatternMatcher PatternMatcher::operator+(const PatternMatcher& more) const {
  std::vector<Rule> all;
  if (c_) all = c_->rules;
  if (more.c_) all.insert(all.end(), more.c_->rules.begin(), more.c_->rules.end());
  return PatternMatcher(std::move(all));
}

size_t PatternMatcher::size() const { return c_ ? c_->rules.size() : 0; }

std::optional<UOp> PatternMatcher::rewrite(const UOp& u, void* ctx) const {
  if (!c_) return std::nullopt;
  const bool track = track_stats();
  for (uint32_t r : c_->bucket(*u)) {
    auto t0 = track ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    std::optional<UOp> out;
    bool matched = false;
    for (const Flat& v : c_->variants[r]) {
      Match m;
      m.root = &u;
      m.ctx = ctx;
      if (!match_node(v, 0, u, m)) continue;
      matched = true;
      if ((out = c_->rules[r].fn(m))) break;   // a declining callback lets the next variant try
    }
    if (track) {
      auto& st = c_->stats[r];
      st.tries++, st.matches += matched, st.hits += out.has_value();
      st.ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    }
    if (out) return out;
  }
  return std::nullopt;
}

std::string PatternMatcher::stats() const {
  std::string s;
  if (!c_) return s;
  for (size_t r = 0; r < c_->rules.size(); r++) {
    const auto& st = c_->stats[r];
    s += c_->rules[r].where + " tries=" + std::to_string(st.tries) + " matches=" + std::to_string(st.matches) +
         " hits=" + std::to_string(st.hits) + " ms=" + std::to_string(st.ns / 1e6) + "\n";
  }
  return s;
}

bool upat_match(const UPat& p, const UOp& u, Match& m) {
  for (const Flat& v : expand(p)) {
    Match t;
    t.root = &u;
    if (match_node(v, 0, u, t)) { m = t; return true; }
  }
  return false;
}

// ---------------------------------------------------------------- graph_rewrite
// Iterative post-order walk (graphs can be deep). memo maps every visited node, and every
// rewrite result, to its final form.
UOp graph_rewrite(const UOp& sink, const PatternMatcher& pm, void* ctx) {
  std::unordered_map<UOp, UOp, UOp::Hash> memo;
  std::unordered_set<UOp, UOp::Hash> active;   // rewrite results being processed: seeing one again is a loop
  struct Frame { UOp n; int state; UOp pending, x; };
  std::vector<Frame> stack;
  stack.push_back({sink, 0, {}, {}});
  while (!stack.empty()) {
    size_t top = stack.size() - 1;
    if (stack[top].state == 0) {
      if (memo.count(stack[top].n)) { stack.pop_back(); continue; }
      stack[top].state = 1;
      UOp n = stack[top].n;   // copy: push_back may move the frame
      for (auto it = n->src.rbegin(); it != n->src.rend(); ++it)
        if (!memo.count(*it)) stack.push_back({*it, 0, {}, {}});
      continue;
    }
    Frame& f = stack[top];
    if (f.state == 2) {
      UOp res = memo.at(f.pending);
      active.erase(f.pending);
      memo.emplace(f.n, res);
      memo.emplace(f.x, res);
      stack.pop_back();
      continue;
    }
    // state 1: sources are final
    const UOpNode& n = *f.n;
    bool changed = false;
    std::vector<UOp> src;
    src.reserve(n.src.size());
    for (const UOp& s : n.src) {
      src.push_back(memo.at(s));
      changed |= src.back() != s;
    }
    UOp x = changed ? UOp(n.op, n.dtype, std::move(src), n.arg) : f.n;
    if (changed) {
      if (auto it = memo.find(x); it != memo.end()) {
        memo.emplace(f.n, it->second);
        stack.pop_back();
        continue;
      }
    }
    std::optional<UOp> r = pm.rewrite(x, ctx);
    if (!r || *r == x) {
      memo.emplace(x, x);
      if (changed) memo.emplace(f.n, x);
      stack.pop_back();
      continue;
    }
    if (auto it = memo.find(*r); it != memo.end()) {
      memo.emplace(f.n, it->second);
      if (changed) memo.emplace(x, it->second);
      stack.pop_back();
      continue;
    }
    TG_ASSERT(!active.count(*r), "graph_rewrite: rules loop on\n" + r->str());
    active.insert(*r);
    f.state = 2;
    f.pending = *r;
    f.x = x;
    stack.push_back({*r, 0, {}, {}});
  }
  return memo.at(sink);
}

}  // namespace tg
