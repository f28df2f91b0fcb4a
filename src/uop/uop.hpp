// UOp: the one IR. Index math, kernel ASTs and lowered programs are all UOp graphs.
// Nodes are immutable and interned: structurally equal nodes are the same object, so
// equality and hashing are pointer operations. A node is freed when its last UOp handle goes.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "tg/dtype.hpp"
#include "uop/ops.hpp"

namespace tg {

// Extension point for structured args (ShapeTracker, WMMA info): deep equality and hashing.
struct ArgObj {
  virtual ~ArgObj() = default;
  virtual size_t hash() const = 0;
  virtual bool equals(const ArgObj& o) const = 0;
  virtual std::string str() const = 0;
};
using ArgObjPtr = std::shared_ptr<const ArgObj>;

struct ReduceArg {
  ReduceOps op;
  std::vector<int64_t> axes;
  bool operator==(const ReduceArg&) const = default;
};

// The arg of a UOp. CONST holds bool/int64_t/double; ALU holds its op enum; RANGE holds
// {axis, is_reduce}; DEFINE_GLOBAL the buffer index; SPECIAL and DEFINE_VAR a name.
using Arg = std::variant<std::monostate, bool, int64_t, double, UnaryOps, BinaryOps, TernaryOps, ReduceOps,
                         std::string, std::vector<int64_t>, ReduceArg, ArgObjPtr>;
bool arg_equal(const Arg& a, const Arg& b);
size_t arg_hash(const Arg& a);
std::string arg_str(const Arg& a);   // Python-like: BinaryOps.ADD, 3, 'gidx0', (0, False)

struct UOpNode;

class UOp {
 public:
  UOp() = default;
  // Interned constructor: returns the existing node when an equal one is alive.
  UOp(Ops op, DType dtype = dtypes::void_, std::vector<UOp> src = {}, Arg arg = {});

  const UOpNode* operator->() const { return p_.get(); }
  const UOpNode& operator*() const { return *p_; }
  const UOpNode* get() const { return p_.get(); }
  explicit operator bool() const { return p_ != nullptr; }
  friend bool operator==(const UOp& a, const UOp& b) { return a.p_ == b.p_; }
  friend bool operator!=(const UOp& a, const UOp& b) { return a.p_ != b.p_; }
  bool cmp_lt(const UOp& o) const;   // tinygrad's cmp_tuple order, deterministic across runs

  // constants
  static UOp const_(DType dtype, ConstType v);   // VECTORIZE of CONSTs for vector dtypes
  UOp const_like(ConstType v) const;              // same dtype as this
  UOp sconst_like(ConstType v) const;             // this dtype's scalar
  bool is_const() const;
  ConstType const_value() const;                  // throws unless CONST

  // builders
  UOp cast(DType dt) const;
  UOp bitcast(DType dt) const;
  UOp gep(int64_t i) const;
  UOp alu(UnaryOps op) const;
  UOp alu(BinaryOps op, const UOp& x) const;
  UOp alu(TernaryOps op, const UOp& x, const UOp& y) const;
  UOp ne(const UOp& x) const;
  UOp eq(const UOp& x) const;
  UOp lt(const UOp& x) const;
  UOp ge(const UOp& x) const;
  UOp max(const UOp& x) const;
  UOp min(const UOp& x) const;
  UOp where(const UOp& x, const UOp& y) const;
  UOp recip() const;
  UOp ufix(ConstType v) const { return const_like(v); }

  // range analysis: bounds of this node's value (dtype min/max when unknown)
  ConstType vmin() const;
  ConstType vmax() const;
  int64_t const_factor() const;                   // largest known int dividing this
  std::optional<UOp> divides(int64_t v) const;    // this / v when exact, else nothing

  // graph
  std::vector<UOp> toposort() const;              // sources before users, this last
  std::vector<UOp> vars() const;                  // DEFINE_VARs below this
  std::string str() const;                        // tinygrad's pretty_print format
  std::string render() const;                     // symbolic form: "((a*2)+1)" (integer math only)
  size_t hash() const { return std::hash<const void*>()(p_.get()); }

  struct Hash { size_t operator()(const UOp& u) const { return u.hash(); } };

 private:
  explicit UOp(std::shared_ptr<const UOpNode> p) : p_(std::move(p)) {}
  std::shared_ptr<const UOpNode> p_;
  friend struct UOpNode;
  friend class UOpTable;
};

struct UOpNode : std::enable_shared_from_this<UOpNode> {
  Ops op;
  DType dtype;
  std::vector<UOp> src;
  Arg arg;
  size_t content_hash;
  ConstType min_, max_;   // range analysis, computed at construction
  bool commutative() const;
  template <class T> const T& as() const { return std::get<T>(arg); }
  template <class T> bool is() const { return std::holds_alternative<T>(arg); }
  UOp self() const { return UOp(shared_from_this()); }
};

// u is the ALU op `op` (a UnaryOps, BinaryOps or TernaryOps)
template <class OpT> bool is_alu(const UOp& u, OpT op) { return u->op == Ops::ALU && u->template is<OpT>() && u->template as<OpT>() == op; }

// integer/boolean index math
UOp operator+(const UOp& a, const UOp& b);
UOp operator-(const UOp& a, const UOp& b);
UOp operator*(const UOp& a, const UOp& b);
UOp operator/(const UOp& a, const UOp& b);   // IDIV on ints (floor semantics for index math), x*recip(y) on floats
UOp operator%(const UOp& a, const UOp& b);
UOp operator-(const UOp& a);
UOp operator^(const UOp& a, const UOp& b);
UOp operator&(const UOp& a, const UOp& b);
UOp operator|(const UOp& a, const UOp& b);
UOp operator+(const UOp& a, int64_t b);
UOp operator+(int64_t a, const UOp& b);
UOp operator-(const UOp& a, int64_t b);
UOp operator-(int64_t a, const UOp& b);
UOp operator*(const UOp& a, int64_t b);
UOp operator*(int64_t a, const UOp& b);
UOp operator/(const UOp& a, int64_t b);
UOp operator%(const UOp& a, int64_t b);

// The result dtype of an ALU op (bool for comparisons, else the last source's).
DType alu_dtype(BinaryOps op, DType a, DType b);

// Evaluate an ALU op on constants with the dtype's truncation (tinygrad's exec_alu).
ConstType exec_alu(UnaryOps op, DType dtype, const ConstType& a);
ConstType exec_alu(BinaryOps op, DType dtype, const ConstType& a, const ConstType& b);
ConstType exec_alu(TernaryOps op, DType dtype, const ConstType& a, const ConstType& b, const ConstType& c);

// Evaluate an integer/bool UOp expression: DEFINE_VAR and SPECIAL by name, RANGE as "ridx<axis>".
// For tests and fuzzers that compare expressions before and after rewriting.
ConstType eval_uop(const UOp& u, const std::unordered_map<std::string, int64_t>& vars);

// Number of live interned nodes (tests check that dropped graphs free their nodes).
size_t uop_live_count();

// Internal invariant check with file and line (user mistakes throw tg::Error instead).
[[noreturn]] void internal_error(const char* file, int line, const std::string& msg);
#define TG_ASSERT(cond, msg) \
  do { if (!(cond)) ::tg::internal_error(__FILE__, __LINE__, std::string("assertion failed: " #cond ": ") + (msg)); } while (0)

}  // namespace tg

template <> struct std::hash<tg::UOp> { size_t operator()(const tg::UOp& u) const { return u.hash(); } };
