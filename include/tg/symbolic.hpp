// Symbolic integers: the expressions used for shapes and indices (tinygrad's Variable / sint).
//
//   tg::Variable a("a", 0, 10), b("b", 0, 10);
//   ((a + b*10) % 10).render()   == "(a%10)"
//   ((a*40 + b) / 20).render()   == "(a*2)"      vmin() 0, vmax() 20
//
// An Expr is an immutable, simplified UOp graph. `/` and `%` divide like the generated C code
// (toward zero), which is floor division for the non-negative values index math works with.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace tg {

class UOp;        // src/uop/uop.hpp
class Variable;

class Expr {
 public:
  Expr(int64_t v);                    // a constant

  std::string render() const;         // "(a%10)", "((a*2)+1)", "(a//20)"
  int64_t vmin() const;               // bounds from the variables' ranges
  int64_t vmax() const;
  bool is_const() const;              // a plain number
  int64_t const_value() const;        // throws tg::Error unless is_const()
  // The value with every variable given (by name); throws tg::Error for a missing one.
  int64_t eval(const std::unordered_map<std::string, int64_t>& vars) const;
  bool same(const Expr& o) const;     // structurally identical (after simplification)

  Expr lt(const Expr& o) const;       // 1 when this < o, else 0 (a bool expression)
  Expr max(const Expr& o) const;
  Expr min(const Expr& o) const;
  Expr operator-() const;

  friend Expr operator+(const Expr& a, const Expr& b);
  friend Expr operator-(const Expr& a, const Expr& b);
  friend Expr operator*(const Expr& a, const Expr& b);
  friend Expr operator/(const Expr& a, const Expr& b);   // throws tg::Error for a zero divisor
  friend Expr operator%(const Expr& a, const Expr& b);   // throws tg::Error for a zero divisor

 private:
  Expr() = default;
  std::shared_ptr<const UOp> u_;
  friend struct Access;               // src/access.hpp: the UOp behind it
};

// A named integer in [min, max] (a DEFINE_VAR), optionally bound to a value for one run.
class Variable : public Expr {
 public:
  Variable(const std::string& name, int64_t min, int64_t max);   // throws tg::Error if min > max
  Variable bind(int64_t v) const;     // throws tg::Error if v is outside [min, max]
  std::pair<Variable, int64_t> unbind() const;   // throws tg::Error if not bound
  const std::string& name() const { return name_; }
  int64_t min() const { return min_; }   // the range; min(Expr)/max(Expr) build expressions
  int64_t max() const { return max_; }
  using Expr::max;
  using Expr::min;
  std::optional<int64_t> val() const { return val_; }

 private:
  std::string name_;
  int64_t min_, max_;
  std::optional<int64_t> val_;
};

}  // namespace tg
