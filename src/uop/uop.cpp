#include "uop/uop.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "tg/helpers.hpp"

namespace tg {

[[noreturn]] void internal_error(const char* file, int line, const std::string& msg) {
  throw std::logic_error(std::string("tinygrad.cpp internal error at ") + file + ":" + std::to_string(line) + ": " + msg);
}

// ---------------------------------------------------------------- names
std::string to_string(Ops op) {
  static const char* n[] = {"SINK", "EXPAND", "CONTRACT", "DEFINE_GLOBAL", "DEFINE_VAR", "DEFINE_LOCAL", "DEFINE_ACC",
                            "CONST", "SPECIAL", "NOOP", "GEP", "CAST", "BITCAST", "VECTORIZE", "ALU", "REDUCE", "WMMA",
                            "LOAD", "STORE", "PHI", "BARRIER", "IF", "RANGE", "ENDRANGE", "ENDIF", "PREFETCH", "SHAPETRACKER",
                            "REDUCE_AXIS", "BIND"};
  return std::string("UOps.") + n[static_cast<int>(op)];
}
std::string to_string(UnaryOps op) {
  static const char* n[] = {"EXP2", "LOG2", "CAST", "BITCAST", "SIN", "SQRT", "NEG", "RECIP"};
  return std::string("UnaryOps.") + n[static_cast<int>(op)];
}
std::string to_string(BinaryOps op) {
  static const char* n[] = {"ADD", "MUL", "IDIV", "MAX", "MOD", "CMPLT", "CMPNE", "XOR", "SHL", "SHR", "OR", "AND", "THREEFRY", "SHFL_XOR"};
  return std::string("BinaryOps.") + n[static_cast<int>(op)];
}
std::string to_string(TernaryOps op) { return op == TernaryOps::WHERE ? "TernaryOps.WHERE" : "TernaryOps.MULACC"; }
std::string to_string(ReduceOps op) {
  static const char* n[] = {"SUM", "MAX", "WMMA"};
  return std::string("ReduceOps.") + n[static_cast<int>(op)];
}
std::string to_string(MetaOps op) {
  static const char* n[] = {"EMPTY", "CONST", "COPY", "CONTIGUOUS", "CUSTOM", "ASSIGN", "VIEW", "KERNEL", "EXT"};
  return std::string("MetaOps.") + n[static_cast<int>(op)];
}

// ---------------------------------------------------------------- args
bool arg_equal(const Arg& a, const Arg& b) {
  if (a.index() != b.index()) return false;
  if (auto pa = std::get_if<ArgObjPtr>(&a)) {
    auto pb = std::get<ArgObjPtr>(b);
    if (*pa == pb) return true;
    if (!*pa || !pb) return false;
    return (*pa)->equals(*pb);
  }
  if (auto da = std::get_if<double>(&a)) {   // nan == nan for interning, and -0.0 != 0.0
    double db = std::get<double>(b);
    return std::memcmp(da, &db, sizeof(double)) == 0 || (std::isnan(*da) && std::isnan(db));
  }
  return a == b;
}

static size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); }

size_t arg_hash(const Arg& a) {
  size_t h = a.index();
  return std::visit([h](const auto& x) -> size_t {
    using T = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<T, std::monostate>) return h;
    else if constexpr (std::is_same_v<T, ArgObjPtr>) return mix(h, x ? x->hash() : 0);
    else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      size_t r = h;
      for (auto v : x) r = mix(r, std::hash<int64_t>()(v));
      return r;
    } else if constexpr (std::is_same_v<T, ReduceArg>) {
      size_t r = mix(h, static_cast<size_t>(x.op));
      for (auto v : x.axes) r = mix(r, std::hash<int64_t>()(v));
      return r;
    } else if constexpr (std::is_same_v<T, double>) {
      return std::isnan(x) ? mix(h, 0x7ff8) : mix(h, std::hash<double>()(x));
    } else if constexpr (std::is_enum_v<T>) return mix(h, static_cast<size_t>(x));
    else return mix(h, std::hash<T>()(x));
  }, a);
}

std::string arg_str(const Arg& a) {
  return std::visit([](const auto& x) -> std::string {
    using T = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<T, std::monostate>) return "None";
    else if constexpr (std::is_same_v<T, bool>) return x ? "True" : "False";
    else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(x);
    else if constexpr (std::is_same_v<T, double>) return const_str(ConstType(x));
    else if constexpr (std::is_same_v<T, std::string>) return "'" + x + "'";
    else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return to_str(x);
    else if constexpr (std::is_same_v<T, ReduceArg>) return "(" + to_string(x.op) + ", " + to_str(x.axes) + ")";
    else if constexpr (std::is_same_v<T, ArgObjPtr>) return x ? x->str() : "None";
    else return to_string(x);
  }, a);
}

// ---------------------------------------------------------------- interning
// A set of raw node pointers hashed by content. Entries are erased by the node's deleter; a
// node whose count already hit zero (weak_from_this expired) is treated as absent.
class UOpTable {
 public:
  struct H { size_t operator()(const UOpNode* n) const { return n->content_hash; } };
  struct E {
    bool operator()(const UOpNode* a, const UOpNode* b) const {
      if (a->op != b->op || a->dtype != b->dtype || a->src.size() != b->src.size()) return false;
      for (size_t i = 0; i < a->src.size(); i++)
        if (a->src[i] != b->src[i]) return false;
      return arg_equal(a->arg, b->arg);
    }
  };
  std::mutex mu;
  std::unordered_set<UOpNode*, H, E> set;

  static UOpTable& get() {
    static UOpTable* t = new UOpTable();   // never destroyed: nodes may outlive static teardown
    return *t;
  }

  static void release(UOpNode* n);
  UOp intern(std::unique_ptr<UOpNode> n);
};

namespace {
thread_local bool t_releasing = false;
// never destroyed: static objects (caches holding UOps) release nodes after thread_locals are gone
thread_local std::vector<UOpNode*>* t_pending_ptr = nullptr;
std::vector<UOpNode*>& pending() {
  if (!t_pending_ptr) t_pending_ptr = new std::vector<UOpNode*>();
  return *t_pending_ptr;
}
}  // namespace

// Freed iteratively: dropping a long chain must not recurse through every source.
void UOpTable::release(UOpNode* n) {
  auto& t_pending = pending();
  t_pending.push_back(n);
  if (t_releasing) return;
  t_releasing = true;
  auto& t = get();
  while (!t_pending.empty()) {
    UOpNode* x = t_pending.back();
    t_pending.pop_back();
    {
      std::lock_guard<std::mutex> lock(t.mu);
      auto it = t.set.find(x);
      if (it != t.set.end() && *it == x) t.set.erase(it);
    }
    std::vector<UOp> srcs = std::move(x->src);
    delete x;
    srcs.clear();   // may push more onto t_pending
  }
  t_releasing = false;
}

UOp UOpTable::intern(std::unique_ptr<UOpNode> n) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = set.find(n.get());
  if (it != set.end()) {
    if (auto sp = (*it)->weak_from_this().lock()) return UOp(std::static_pointer_cast<const UOpNode>(sp));
    set.erase(it);   // dying node: its deleter will not find itself and skip the erase
  }
  UOpNode* raw = n.release();
  std::shared_ptr<UOpNode> sp(raw, &UOpTable::release);
  set.insert(raw);
  return UOp(std::shared_ptr<const UOpNode>(std::move(sp)));
}

size_t uop_live_count() {
  auto& t = UOpTable::get();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.set.size();
}

// ---------------------------------------------------------------- range analysis
static bool is_index_like(DType d) { return d.count == 1 && !d.ptr && (d.is_int() || d.is_bool()); }

static std::pair<ConstType, ConstType> dtype_bounds(DType d) {
  if (d.kind == ScalarKind::void_) return {int64_t{0}, int64_t{0}};
  return {dtypes::min(d.scalar()), dtypes::max(d.scalar())};
}

// Bounds as int64 pairs for integer math; falls back to the dtype's range.
static void compute_min_max(UOpNode& n) {
  auto [dmin, dmax] = dtype_bounds(n.dtype);
  n.min_ = dmin;
  n.max_ = dmax;
  if (n.op == Ops::CONST) {
    if (auto b = std::get_if<bool>(&n.arg)) n.min_ = *b;
    else if (auto i = std::get_if<int64_t>(&n.arg)) n.min_ = *i;
    else if (auto d = std::get_if<double>(&n.arg)) n.min_ = *d;
    n.max_ = n.min_;
    return;
  }
  if (!is_index_like(n.dtype)) return;
  auto lo = [](const UOp& u) { return const_to_int(u->min_); };
  auto hi = [](const UOp& u) { return const_to_int(u->max_); };
  auto set = [&](int64_t a, int64_t b) {
    if (n.dtype.is_bool()) { n.min_ = a != 0; n.max_ = b != 0; }
    else { n.min_ = a; n.max_ = b; }
  };
  const auto& s = n.src;
  switch (n.op) {
    case Ops::DEFINE_VAR:
      if (s.size() == 2) set(lo(s[0]), hi(s[1]));
      return;
    case Ops::RANGE:
      if (s.size() == 2) set(lo(s[0]), hi(s[1]) - 1);
      return;
    case Ops::SPECIAL:
      if (s.size() == 1) set(0, hi(s[0]) - 1);
      return;
    case Ops::EXPAND: {   // one of its sources in each lane
      if (s.empty() || n.dtype.count != 1) return;
      int64_t a = lo(s[0]), c = hi(s[0]);
      for (const UOp& x : s) a = std::min(a, lo(x)), c = std::max(c, hi(x));
      set(a, c);
      return;
    }
    case Ops::BIND:
      if (s.size() == 2) set(lo(s[1]), hi(s[1]));
      return;
    case Ops::CAST:
      if (s.size() == 1 && is_index_like(s[0]->dtype) && n.dtype.scalar_size() >= s[0]->dtype.scalar_size() &&
          !(n.dtype.is_unsigned() && lo(s[0]) < 0))
        set(lo(s[0]), hi(s[0]));
      return;
    default: break;
  }
  if (n.op != Ops::ALU || n.dtype.is_unsigned()) return;
  for (const UOp& x : n.src)   // a comparison of floats has no integer bounds to reason with
    if (!is_index_like(x->dtype)) return;
  const bool b = n.dtype.is_bool();
  // overflow-safe products and sums: give up (dtype range) if they would overflow
  auto add_ok = [](int64_t a, int64_t c, int64_t& r) { return !__builtin_add_overflow(a, c, &r); };
  auto mul_ok = [](int64_t a, int64_t c, int64_t& r) { return !__builtin_mul_overflow(a, c, &r); };
  if (auto u = std::get_if<UnaryOps>(&n.arg)) {
    if (*u == UnaryOps::NEG && !b && lo(s[0]) != INT64_MIN) set(-hi(s[0]), -lo(s[0]));
    return;
  }
  if (auto t = std::get_if<TernaryOps>(&n.arg)) {
    if (*t == TernaryOps::WHERE && !b) set(std::min(lo(s[1]), lo(s[2])), std::max(hi(s[1]), hi(s[2])));
    return;
  }
  auto op = std::get<BinaryOps>(n.arg);
  int64_t a0 = lo(s[0]), a1 = hi(s[0]), b0 = lo(s[1]), b1 = hi(s[1]);
  switch (op) {
    case BinaryOps::ADD: {
      int64_t r0, r1;
      if (!b && add_ok(a0, b0, r0) && add_ok(a1, b1, r1)) set(r0, r1);
      break;
    }
    case BinaryOps::MUL: {
      if (b) break;
      int64_t c[4];
      if (mul_ok(a0, b0, c[0]) && mul_ok(a0, b1, c[1]) && mul_ok(a1, b0, c[2]) && mul_ok(a1, b1, c[3]))
        set(*std::min_element(c, c + 4), *std::max_element(c, c + 4));
      break;
    }
    case BinaryOps::MOD:
      if (s[1]->op == Ops::CONST && b0 > 0) {
        if (a0 >= 0) set(0, std::min(a1, b0 - 1));
        else set(-(b0 - 1), b0 - 1);   // C semantics: sign follows the dividend
      }
      break;
    case BinaryOps::IDIV:
      if (s[1]->op == Ops::CONST && b0 != 0) {
        // C truncation is monotonic in the dividend for a fixed divisor
        int64_t x = a0 / b0, y = a1 / b0;
        set(std::min(x, y), std::max(x, y));
      }
      break;
    case BinaryOps::MAX:
      if (!b) set(std::max(a0, b0), std::max(a1, b1));
      break;
    case BinaryOps::CMPLT:
      if (a1 < b0) set(1, 1);
      else if (a0 >= b1) set(0, 0);
      else set(0, 1);
      break;
    case BinaryOps::CMPNE:
      if (a1 < b0 || b1 < a0) set(1, 1);
      else if (a0 == a1 && b0 == b1 && a0 == b0) set(0, 0);
      else set(0, 1);
      break;
    case BinaryOps::AND:
      if (b) set(std::min(a0, b0), std::min(a1, b1));
      else if (a0 >= 0 && b0 >= 0) set(0, std::min(a1, b1));
      break;
    case BinaryOps::OR:
      if (b) set(std::max(a0, b0), std::max(a1, b1));
      break;
    default: break;
  }
}

// ---------------------------------------------------------------- UOp
UOp::UOp(Ops op, DType dtype, std::vector<UOp> src, Arg arg) {
  auto n = std::make_unique<UOpNode>();
  n->op = op;
  n->dtype = dtype;
  n->src = std::move(src);
  n->arg = std::move(arg);
  size_t h = mix(static_cast<size_t>(op), dtype.hash());
  for (auto& s : n->src) h = mix(h, s.hash());
  n->content_hash = mix(h, arg_hash(n->arg));
  compute_min_max(*n);
  *this = UOpTable::get().intern(std::move(n));
}

bool UOpNode::commutative() const {
  auto b = std::get_if<BinaryOps>(&arg);
  return op == Ops::ALU && b && is_commutative(*b);
}

static Arg const_arg(DType dt, const ConstType& v) {
  if (dt.kind == ScalarKind::void_) return std::visit([](auto x) { return Arg(x); }, v);
  ConstType c = dtypes::as_const(v, dt.scalar());
  return std::visit([](auto x) { return Arg(x); }, c);
}

UOp UOp::const_(DType dt, ConstType v) {
  if (dt.count > 1) {
    UOp s(Ops::CONST, dt.scalar(), {}, const_arg(dt, v));
    return UOp(Ops::VECTORIZE, dt, std::vector<UOp>(dt.count, s));
  }
  return UOp(Ops::CONST, dt, {}, const_arg(dt, v));
}
UOp UOp::const_like(ConstType v) const { return const_(p_->dtype, v); }
UOp UOp::sconst_like(ConstType v) const { return const_(p_->dtype.scalar(), v); }
bool UOp::is_const() const { return p_ && p_->op == Ops::CONST; }
ConstType UOp::const_value() const {
  TG_ASSERT(is_const(), "const_value of " + to_string(p_->op));
  return p_->min_;
}

UOp UOp::cast(DType dt) const { return UOp(Ops::CAST, dt, {*this}); }
UOp UOp::bitcast(DType dt) const { return UOp(Ops::BITCAST, dt, {*this}); }
UOp UOp::gep(int64_t i) const { return UOp(Ops::GEP, p_->dtype.scalar(), {*this}, i); }
UOp UOp::alu(UnaryOps op) const { return UOp(Ops::ALU, p_->dtype, {*this}, op); }
DType alu_dtype(BinaryOps op, DType a, DType b) {
  return (op == BinaryOps::CMPLT || op == BinaryOps::CMPNE) ? (a.count > 1 ? dtypes::bool_.vec(a.count) : dtypes::bool_) : b;
}
UOp UOp::alu(BinaryOps op, const UOp& x) const { return UOp(Ops::ALU, alu_dtype(op, p_->dtype, x->dtype), {*this, x}, op); }
UOp UOp::alu(TernaryOps op, const UOp& x, const UOp& y) const { return UOp(Ops::ALU, y->dtype, {*this, x, y}, op); }
UOp UOp::ne(const UOp& x) const { return alu(BinaryOps::CMPNE, x); }
UOp UOp::eq(const UOp& x) const { return ne(x).alu(UnaryOps::NEG); }
UOp UOp::lt(const UOp& x) const { return alu(BinaryOps::CMPLT, x); }
UOp UOp::ge(const UOp& x) const { return lt(x).alu(UnaryOps::NEG); }
UOp UOp::max(const UOp& x) const { return alu(BinaryOps::MAX, x); }
UOp UOp::min(const UOp& x) const { return -((-*this).max(-x)); }
UOp UOp::where(const UOp& x, const UOp& y) const { return alu(TernaryOps::WHERE, x, y); }
UOp UOp::recip() const { return alu(UnaryOps::RECIP); }

UOp operator+(const UOp& a, const UOp& b) { return a.alu(BinaryOps::ADD, b); }
UOp operator-(const UOp& a) { return a.alu(UnaryOps::NEG); }
UOp operator-(const UOp& a, const UOp& b) { return a.alu(BinaryOps::ADD, -b); }
UOp operator*(const UOp& a, const UOp& b) { return a.alu(BinaryOps::MUL, b); }
UOp operator/(const UOp& a, const UOp& b) {
  if (a->dtype.is_float()) return a * b.recip();
  return a.alu(BinaryOps::IDIV, b);
}
UOp operator%(const UOp& a, const UOp& b) { return a.alu(BinaryOps::MOD, b); }
UOp operator^(const UOp& a, const UOp& b) { return a.alu(BinaryOps::XOR, b); }
UOp operator&(const UOp& a, const UOp& b) { return a.alu(BinaryOps::AND, b); }
UOp operator|(const UOp& a, const UOp& b) { return a.alu(BinaryOps::OR, b); }
UOp operator+(const UOp& a, int64_t b) { return a + a.const_like(b); }
UOp operator+(int64_t a, const UOp& b) { return b.const_like(a) + b; }
UOp operator-(const UOp& a, int64_t b) { return a + a.const_like(-b); }
UOp operator-(int64_t a, const UOp& b) { return b.const_like(a) + (-b); }
UOp operator*(const UOp& a, int64_t b) { return a * a.const_like(b); }
UOp operator*(int64_t a, const UOp& b) { return b.const_like(a) * b; }
UOp operator/(const UOp& a, int64_t b) { return a / a.const_like(b); }
UOp operator%(const UOp& a, int64_t b) { return a % a.const_like(b); }

ConstType UOp::vmin() const { return p_->min_; }
ConstType UOp::vmax() const { return p_->max_; }

int64_t UOp::const_factor() const {
  if (p_->op == Ops::CONST) return const_to_int(p_->min_);
  if (p_->op == Ops::ALU) {
    if (auto b = std::get_if<BinaryOps>(&p_->arg)) {
      if (*b == BinaryOps::ADD) return std::gcd(p_->src[0].const_factor(), p_->src[1].const_factor());
      if (*b == BinaryOps::MUL) {
        if (p_->src[0].is_const()) return const_to_int(p_->src[0].const_value());
        if (p_->src[1].is_const()) return const_to_int(p_->src[1].const_value());
      }
    }
  }
  return 1;
}

std::optional<UOp> UOp::divides(int64_t v) const {
  if (v == 1) return *this;
  if (p_->op == Ops::CONST) {
    int64_t c = const_to_int(const_value());
    if (c % v == 0) return const_like(c / v);
    return std::nullopt;
  }
  if (p_->op == Ops::ALU) {
    if (auto b = std::get_if<BinaryOps>(&p_->arg)) {
      if (*b == BinaryOps::ADD) {
        auto d0 = p_->src[0].divides(v);
        auto d1 = d0 ? p_->src[1].divides(v) : std::nullopt;
        if (d0 && d1) return *d0 + *d1;
      }
      if (*b == BinaryOps::MUL) {
        if (auto d0 = p_->src[0].divides(v)) return *d0 * p_->src[1];
        if (auto d1 = p_->src[1].divides(v)) return p_->src[0] * *d1;
      }
    }
  }
  return std::nullopt;
}

std::vector<UOp> UOp::toposort() const {
  std::vector<UOp> out;
  std::unordered_set<const UOpNode*> seen;
  // iterative DFS: graphs can be deep
  std::vector<std::pair<UOp, size_t>> stack{{*this, 0}};
  seen.insert(p_.get());
  while (!stack.empty()) {
    auto& [u, i] = stack.back();
    if (i < u->src.size()) {
      const UOp& s = u->src[i++];
      if (seen.insert(s.get()).second) stack.push_back({s, 0});
    } else {
      out.push_back(u);
      stack.pop_back();
    }
  }
  return out;
}

std::vector<UOp> UOp::vars() const {
  std::vector<UOp> out;
  for (auto& u : toposort())
    if (u->op == Ops::DEFINE_VAR) out.push_back(u);
  return out;
}

bool UOp::cmp_lt(const UOp& o) const {
  const UOpNode &a = *p_, &b = *o.p_;
  if (a.op != b.op) return a.op < b.op;
  if (a.arg.index() != b.arg.index()) return a.arg.index() < b.arg.index();
  std::string sa = arg_str(a.arg), sb = arg_str(b.arg);
  if (sa != sb) return sa < sb;
  if (a.dtype != b.dtype) return a.dtype < b.dtype;
  for (size_t i = 0; i < std::min(a.src.size(), b.src.size()); i++)
    if (a.src[i] != b.src[i]) return a.src[i].cmp_lt(b.src[i]);
  return a.src.size() < b.src.size();
}

// tinygrad's pretty_print: shared nodes print once as "x<N>:=" and are referenced as " x<N>"
std::string UOp::str() const {
  struct Info { int id; int refs; bool printed; };
  std::unordered_map<const UOpNode*, Info> cache;
  std::function<void(const UOp&)> dfs = [&](const UOp& x) {
    for (auto& s : x->src) {
      auto [it, fresh] = cache.try_emplace(s.get(), Info{static_cast<int>(cache.size()), 0, false});
      if (++it->second.refs == 1) dfs(s);
    }
  };
  dfs(*this);
  std::function<std::string(const UOp&, int)> pp = [&](const UOp& x, int d) -> std::string {
    auto [it, fresh] = cache.try_emplace(x.get(), Info{0, 0, false});
    Info& cx = it->second;
    std::string pad(d, ' ');
    if (cx.printed) return pad + " x" + std::to_string(cx.id);
    cx.printed = true;
    std::string srcs;
    for (auto& s : x->src) srcs += "\n" + pp(s, d + 2) + ",";
    std::string dt = x->dtype.kind == ScalarKind::void_ ? "None" : x->dtype.str();
    std::string head = cx.refs > 1 ? "x" + std::to_string(cx.id) + ":=" : "";
    return pad + head + "UOp(" + to_string(x->op) + ", " + dt + ", arg=" + arg_str(x->arg) + ", src=(" + srcs + "))";
  };
  return pp(*this, 0);
}

std::string UOp::render() const {
  const UOpNode& n = *p_;
  switch (n.op) {
    case Ops::CONST: return const_str(n.min_);
    case Ops::DEFINE_VAR: case Ops::SPECIAL: return std::get<std::string>(n.arg);
    case Ops::RANGE: return "ridx" + std::to_string(std::get<std::vector<int64_t>>(n.arg)[0]);
    case Ops::BIND: return n.src[0].render();
    case Ops::CAST: return n.src[0].render();
    case Ops::ALU: break;
    default: return "<" + to_string(n.op) + ">";
  }
  auto r = [&](int i) { return n.src[i].render(); };
  if (auto u = std::get_if<UnaryOps>(&n.arg)) {
    if (*u == UnaryOps::NEG) return n.dtype.is_bool() ? "(not " + r(0) + ")" : "(" + r(0) + "*-1)";
    return to_string(*u) + "(" + r(0) + ")";
  }
  if (std::holds_alternative<TernaryOps>(n.arg)) return "(" + r(1) + " if " + r(0) + " else " + r(2) + ")";
  switch (std::get<BinaryOps>(n.arg)) {
    case BinaryOps::ADD: {
      // a sum renders flat with its terms sorted, like tinygrad's symbolic SumNode
      std::vector<std::string> terms;
      std::vector<UOp> stack{*this};
      while (!stack.empty()) {
        UOp x = stack.back();
        stack.pop_back();
        auto b = std::get_if<BinaryOps>(&x->arg);
        if (x->op == Ops::ALU && b && *b == BinaryOps::ADD) stack.insert(stack.end(), x->src.begin(), x->src.end());
        else terms.push_back(x.render());
      }
      std::sort(terms.begin(), terms.end());
      std::string out = "(";
      for (size_t i = 0; i < terms.size(); i++) out += (i ? "+" : "") + terms[i];
      return out + ")";
    }
    case BinaryOps::MUL: return "(" + r(0) + "*" + r(1) + ")";
    case BinaryOps::IDIV: return "(" + r(0) + "//" + r(1) + ")";
    case BinaryOps::MOD: return "(" + r(0) + "%" + r(1) + ")";
    case BinaryOps::CMPLT: return "(" + r(0) + "<" + r(1) + ")";
    case BinaryOps::CMPNE: return "(" + r(0) + "!=" + r(1) + ")";
    case BinaryOps::MAX: return "max(" + r(0) + ", " + r(1) + ")";
    case BinaryOps::AND: return "(" + r(0) + (n.dtype.is_bool() ? " and " : "&") + r(1) + ")";
    case BinaryOps::OR: return "(" + r(0) + (n.dtype.is_bool() ? " or " : "|") + r(1) + ")";
    case BinaryOps::XOR: return "(" + r(0) + "^" + r(1) + ")";
    case BinaryOps::SHL: return "(" + r(0) + "<<" + r(1) + ")";
    case BinaryOps::SHR: return "(" + r(0) + ">>" + r(1) + ")";
    default: return to_string(std::get<BinaryOps>(n.arg)) + "(" + r(0) + ", " + r(1) + ")";
  }
}

// ---------------------------------------------------------------- exec_alu
static ConstType trunc_to(DType dt, const ConstType& v) { return dtypes::as_const(v, dt.scalar()); }

ConstType exec_alu(UnaryOps op, DType dt, const ConstType& a) {
  if (dt.is_float()) {
    double x = const_to_double(a);
    switch (op) {
      case UnaryOps::EXP2: return trunc_to(dt, std::exp2(x));
      case UnaryOps::LOG2: return trunc_to(dt, x > 0 ? std::log2(x) : x == 0 ? -INFINITY : NAN);
      case UnaryOps::SIN: return trunc_to(dt, std::sin(x));
      case UnaryOps::SQRT: return trunc_to(dt, x >= 0 ? std::sqrt(x) : NAN);
      case UnaryOps::NEG: return trunc_to(dt, -x);
      case UnaryOps::RECIP: return trunc_to(dt, x != 0 ? 1.0 / x : std::copysign(INFINITY, x));
      default: break;
    }
  } else if (dt.is_bool()) {
    if (op == UnaryOps::NEG) return !std::get<bool>(trunc_to(dt, a));
  } else {
    int64_t x = const_to_int(a);
    if (op == UnaryOps::NEG) return trunc_to(dt, static_cast<int64_t>(0 - static_cast<uint64_t>(x)));
  }
  throw Error("exec_alu: " + to_string(op) + " is not defined on " + dt.str());
}

ConstType exec_alu(BinaryOps op, DType dt, const ConstType& a, const ConstType& b) {
  if (op == BinaryOps::CMPLT || op == BinaryOps::CMPNE) {
    bool fl = std::holds_alternative<double>(a) || std::holds_alternative<double>(b);
    if (fl) {
      double x = const_to_double(a), y = const_to_double(b);
      return op == BinaryOps::CMPLT ? x < y : x != y;
    }
    int64_t x = const_to_int(a), y = const_to_int(b);
    return op == BinaryOps::CMPLT ? x < y : x != y;
  }
  if (dt.is_float()) {
    double x = const_to_double(a), y = const_to_double(b);
    switch (op) {
      case BinaryOps::ADD: return trunc_to(dt, x + y);
      case BinaryOps::MUL: return trunc_to(dt, x * y);
      case BinaryOps::MAX: return trunc_to(dt, std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y));
      case BinaryOps::IDIV: return trunc_to(dt, y != 0 ? std::trunc(x / y) : x * INFINITY);
      case BinaryOps::MOD: return trunc_to(dt, std::fmod(x, y));
      default: break;
    }
    throw Error("exec_alu: " + to_string(op) + " is not defined on " + dt.str());
  }
  uint64_t x = static_cast<uint64_t>(const_to_int(a)), y = static_cast<uint64_t>(const_to_int(b));
  int64_t sx = static_cast<int64_t>(x), sy = static_cast<int64_t>(y);
  bool u = dt.is_unsigned();
  switch (op) {
    case BinaryOps::ADD: return trunc_to(dt, static_cast<int64_t>(x + y));
    case BinaryOps::MUL: return trunc_to(dt, static_cast<int64_t>(x * y));
    case BinaryOps::MAX: return trunc_to(dt, u ? static_cast<int64_t>(std::max(x, y)) : std::max(sx, sy));
    case BinaryOps::IDIV:
      if (y == 0) throw Error("exec_alu: integer division by zero");
      if (!u && sx == INT64_MIN && sy == -1) return trunc_to(dt, sx);
      return trunc_to(dt, u ? static_cast<int64_t>(x / y) : sx / sy);
    case BinaryOps::MOD:
      if (y == 0) throw Error("exec_alu: integer modulo by zero");
      if (!u && sy == -1) return trunc_to(dt, int64_t{0});
      return trunc_to(dt, u ? static_cast<int64_t>(x % y) : sx % sy);
    case BinaryOps::XOR: return trunc_to(dt, static_cast<int64_t>(x ^ y));
    case BinaryOps::AND: return trunc_to(dt, static_cast<int64_t>(x & y));
    case BinaryOps::OR: return trunc_to(dt, static_cast<int64_t>(x | y));
    case BinaryOps::SHL: return trunc_to(dt, static_cast<int64_t>(y >= 64 ? 0 : x << y));
    case BinaryOps::SHR: {
      if (u) {
        uint64_t mask = dt.scalar_size() == 8 ? ~uint64_t{0} : ((uint64_t{1} << (dt.scalar_size() * 8)) - 1);
        return trunc_to(dt, static_cast<int64_t>(y >= 64 ? 0 : (x & mask) >> y));
      }
      return trunc_to(dt, y >= 64 ? (sx < 0 ? -1 : 0) : sx >> y);
    }
    default: break;
  }
  throw Error("exec_alu: " + to_string(op) + " is not defined on " + dt.str());
}

ConstType exec_alu(TernaryOps op, DType dt, const ConstType& a, const ConstType& b, const ConstType& c) {
  if (op == TernaryOps::WHERE) return trunc_to(dt, const_to_double(a) != 0 ? b : c);
  // MULACC: a*b+c
  return exec_alu(BinaryOps::ADD, dt, exec_alu(BinaryOps::MUL, dt, a, b), c);
}

ConstType eval_uop(const UOp& root, const std::unordered_map<std::string, int64_t>& vars) {
  std::unordered_map<const UOpNode*, ConstType> val;
  for (const UOp& u : root.toposort()) {
    const UOpNode& n = *u;
    auto get = [&](int i) { return val.at(n.src[i].get()); };
    auto lookup = [&](const std::string& name) -> ConstType {
      auto it = vars.find(name);
      if (it == vars.end()) throw Error("eval_uop: no value for variable '" + name + "'");
      return dtypes::as_const(it->second, n.dtype);
    };
    ConstType r;
    switch (n.op) {
      case Ops::CONST: r = n.min_; break;
      case Ops::DEFINE_VAR: case Ops::SPECIAL: r = lookup(std::get<std::string>(n.arg)); break;
      case Ops::RANGE: r = lookup("ridx" + std::to_string(std::get<std::vector<int64_t>>(n.arg)[0])); break;
      case Ops::BIND: r = get(1); break;
      case Ops::CAST: r = dtypes::as_const(get(0), n.dtype); break;
      case Ops::ALU:
        if (auto o = std::get_if<UnaryOps>(&n.arg)) r = exec_alu(*o, n.dtype, get(0));
        else if (auto b = std::get_if<BinaryOps>(&n.arg)) r = exec_alu(*b, n.dtype, get(0), get(1));
        else r = exec_alu(std::get<TernaryOps>(n.arg), n.dtype, get(0), get(1), get(2));
        break;
      default: r = int64_t{0}; break;   // non-value nodes (SINK, DEFINE_GLOBAL, ...) carry no number
    }
    val[u.get()] = r;
  }
  return val.at(root.get());
}

}  // namespace tg
