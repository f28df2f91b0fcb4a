// UPat / PatternMatcher / graph_rewrite: rewrite rules as data (tinygrad 0.9.2 codegen/uops.py).
//
// A rule is (pattern, callback). Patterns are built with operators, LLVM/Halide style:
//     const UPat x = UPat::var(0), c0 = UPat::cvar(1);
//     PatternMatcher pm({ {x + 0, [](const Match& m) -> std::optional<UOp> { return m[x]; }} });
// Captures are integer slots: the first node bound to a slot fixes it, later uses must be the
// same node (so `x - x` only matches equal operands). A callback returning std::nullopt declines
// and the next rule is tried. Commutative ALU operands built by the operators match in every order.
//
// Construction flattens every pattern once, expands commutative permutations into separate
// variants and buckets the rules by root op (and ALU arg), keeping table order. Matching walks a
// flat array and allocates nothing.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "uop/uop.hpp"

namespace tg {

class UPat {
 public:
  enum class SrcKind : uint8_t { None, Tuple, List, Repeat };   // tinygrad: None, tuple, list, UPat

  UPat() = default;                                // matches any node
  explicit UPat(Ops op);                           // one op
  UPat(std::initializer_list<Ops> ops);            // any of these ops
  static UPat var(int slot, std::optional<DType> dt = std::nullopt);    // any node, captured
  static UPat cvar(int slot, std::optional<DType> dt = std::nullopt);   // any CONST, captured
  static UPat cnst(ConstType v);                   // a CONST equal to v (numerically, any dtype)
  static UPat alu(UnaryOps op, const UPat& a);
  static UPat alu(BinaryOps op, const UPat& a, const UPat& b);   // commutative ops: either order
  static UPat alu(TernaryOps op, const UPat& a, const UPat& b, const UPat& c);

  // fluent modifiers, each returns a copy
  UPat cap(int slot) const;                        // capture this node in slot
  UPat dtype(DType dt) const;
  UPat dtypes(std::initializer_list<DType> dts) const;
  UPat arg(Arg a) const;
  UPat src(std::vector<UPat> s) const;             // sources in this order, exactly this many
  UPat src_any_order(std::vector<UPat> s) const;   // sources in every order (commutative)
  UPat src_each(const UPat& p) const;              // every source matches p, any count
  UPat any_len() const;                            // a tuple/list may be a prefix of the sources

  // sugar, like UOp's builders
  UPat lt(const UPat& b) const;
  UPat ne(const UPat& b) const;
  UPat eq(const UPat& b) const;                    // NEG(CMPNE), as UOp::eq
  UPat max(const UPat& b) const;
  UPat where(const UPat& t, const UPat& f) const;
  UPat cast(std::optional<DType> dt = std::nullopt) const;
  UPat gep(int64_t i) const;

  int slot() const { return slot_; }
  std::string str() const;

  // the pattern tree (read by the flattener)
  uint64_t ops_mask_ = 0;                          // bit per Ops; 0 = any op
  std::vector<DType> dtypes_;                      // empty = any dtype
  std::optional<Arg> arg_;
  std::optional<ConstType> const_;                 // CONST value, compared numerically
  int slot_ = -1;
  SrcKind kind_ = SrcKind::None;
  bool any_len_ = false;
  std::vector<UPat> src_;
};

UPat operator+(const UPat& a, const UPat& b);
UPat operator-(const UPat& a, const UPat& b);   // a + (-b), as UOp
UPat operator*(const UPat& a, const UPat& b);
UPat operator/(const UPat& a, const UPat& b);   // IDIV
UPat operator%(const UPat& a, const UPat& b);
UPat operator-(const UPat& a);                  // NEG
UPat operator&(const UPat& a, const UPat& b);
UPat operator|(const UPat& a, const UPat& b);
UPat operator+(const UPat& a, int64_t b);
UPat operator*(const UPat& a, int64_t b);
UPat operator/(const UPat& a, int64_t b);
UPat operator%(const UPat& a, int64_t b);

constexpr int kMaxSlots = 32;

// What a callback sees: the matched root, the captured nodes (pointers into the matched
// graph, valid while it lives) and the rewrite's context (tinygrad's ctx argument): state a
// pass keeps across its rules, such as the reducer's accumulator count, given to graph_rewrite
// instead of living in a global.
struct Match {
  const UOp* root = nullptr;
  std::array<const UOp*, kMaxSlots> caps{};
  void* ctx = nullptr;
  template <class T> T& context() const {
    TG_ASSERT(ctx, "a rule that needs a context ran without one: pass it to graph_rewrite");
    return *static_cast<T*>(ctx);
  }
  const UOp& operator[](const UPat& p) const { return *caps[p.slot()]; }
  const UOp& operator[](int slot) const { return *caps[slot]; }
  bool has(const UPat& p) const { return caps[p.slot()] != nullptr; }
  int64_t i(const UPat& p) const { return const_to_int(caps[p.slot()]->const_value()); }   // a captured CONST's int
};

using RewriteFn = std::function<std::optional<UOp>(const Match&)>;

struct Rule {
  UPat pat;
  RewriteFn fn;
  std::string where;   // source location, for TRACK_MATCH_STATS
  Rule(UPat p, RewriteFn f, std::source_location loc = std::source_location::current());
};

class PatternMatcher {
 public:
  PatternMatcher() = default;
  PatternMatcher(std::vector<Rule> rules);
  PatternMatcher operator+(const PatternMatcher& more) const;   // this table's rules first

  // First rule (in table order) whose pattern matches and whose callback accepts.
  std::optional<UOp> rewrite(const UOp& u, void* ctx = nullptr) const;
  size_t size() const;
  std::string stats() const;   // hits/matches/time per rule (filled when TRACK_MATCH_STATS=1)

  struct Compiled;
 private:
  std::shared_ptr<const Compiled> c_;
};

// Rewrites bottom-up until no rule applies, memoized per node. Throws an internal error when
// rules loop (a node rewrites back into itself). ctx reaches every callback as Match::ctx.
UOp graph_rewrite(const UOp& sink, const PatternMatcher& pm, void* ctx = nullptr);

// Whether p matches u; fills m on success (first match in pattern order). For tests and callers
// that want matching without rewriting.
bool upat_match(const UPat& p, const UOp& u, Match& m);

}  // namespace tg
