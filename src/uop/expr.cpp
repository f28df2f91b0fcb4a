// tg::Expr and tg::Variable: the public face of symbolic UOps (include/tg/symbolic.hpp).
#include "tg/symbolic.hpp"

#include "access.hpp"
#include <limits>

#include "tg/helpers.hpp"
#include "uop/symbolic.hpp"

namespace tg {

namespace {
bool fits_int32(int64_t v) { return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(); }
DType int_for(int64_t v) { return fits_int32(v) ? dtypes::int32 : dtypes::int64; }

// Bring x to dtype dt: constants are remade, anything else is cast.
UOp to_dtype(const UOp& x, DType dt) {
  if (x->dtype == dt) return x;
  if (x.is_const()) return UOp::const_(dt, x.const_value());
  return x.cast(dt);
}
// Both operands in one integer dtype (bool results of lt count as 0/1 ints).
std::pair<UOp, UOp> unify(const UOp& a, const UOp& b) {
  DType da = a->dtype.is_bool() ? dtypes::int32 : a->dtype, db = b->dtype.is_bool() ? dtypes::int32 : b->dtype;
  DType dt = da == db ? da : least_upper_dtype(da, db);
  return {to_dtype(a, dt), to_dtype(b, dt)};
}
// Bindings of a result: both sides' values; one variable with two values is a user error.
std::shared_ptr<const VarBindings> merge(const std::shared_ptr<const VarBindings>& a, const std::shared_ptr<const VarBindings>& b) {
  if (!a || a->empty()) return b;
  if (!b || b->empty() || a == b) return a;
  auto out = std::make_shared<VarBindings>(*a);
  for (auto& [k, v] : *b) {
    auto [it, fresh] = out->emplace(k, v);
    if (!fresh && it->second != v)
      throw Error("Expr: variable '" + k + "' is bound to both " + std::to_string(it->second) + " and " + std::to_string(v) +
                  " in one expression; bind each variable to one value");
  }
  return out;
}
}  // namespace

struct ExprAccess {
  static Expr make(const UOp& u, std::shared_ptr<const VarBindings> b) {
    Expr e = Access::expr(simplify(u));
    if (!e.is_const()) e.b_ = std::move(b);
    return e;
  }
  static const std::shared_ptr<const VarBindings>& b(const Expr& e) { return e.b_; }
};

namespace {
Expr make2(const UOp& u, const Expr& x, const Expr& y) { return ExprAccess::make(u, merge(ExprAccess::b(x), ExprAccess::b(y))); }

void check_divisor(const Expr& a, const Expr& b, const char* op) {
  if (b.is_const() && b.const_value() == 0)
    throw Error(std::string("Expr: ") + op + " by zero in (" + a.render() + op + "0); divide by a non-zero value");
}
}  // namespace

Expr::Expr(int64_t v) : u_(std::make_shared<const UOp>(UOp::const_(int_for(v), v))) {}

std::string Expr::render() const { return u_->render(); }
int64_t Expr::vmin() const { return const_to_int(u_->vmin()); }
int64_t Expr::vmax() const { return const_to_int(u_->vmax()); }
bool Expr::is_const() const { return u_->is_const(); }
int64_t Expr::const_value() const {
  if (!is_const()) throw Error("Expr::const_value: " + render() + " is not a number; check is_const() first");
  return const_to_int(u_->const_value());
}
int64_t Expr::eval(const std::unordered_map<std::string, int64_t>& vars) const { return const_to_int(eval_uop(*u_, vars)); }
bool Expr::same(const Expr& o) const { return *u_ == *o.u_; }

Expr Expr::lt(const Expr& o) const { auto [a, b] = unify(*u_, *o.u_); return make2(a.lt(b), *this, o); }
Expr Expr::max(const Expr& o) const { auto [a, b] = unify(*u_, *o.u_); return make2(a.max(b), *this, o); }
Expr Expr::min(const Expr& o) const { auto [a, b] = unify(*u_, *o.u_); return make2(a.min(b), *this, o); }
Expr Expr::operator-() const { auto [a, b] = unify(*u_, *u_); return make2(-a, *this, *this); }

const VarBindings& Expr::bindings() const {
  static const VarBindings none;
  return b_ ? *b_ : none;
}
Expr Expr::unbind() const { Expr r = *this; r.b_.reset(); return r; }
Expr Expr::with_bindings(const VarBindings& b) const {
  Expr r = *this;
  if (!is_const() && !b.empty()) r.b_ = std::make_shared<const VarBindings>(b);
  return r;
}
int64_t Expr::value() const {
  if (is_const()) return const_value();
  std::unordered_map<std::string, int64_t> vals(bindings().begin(), bindings().end());
  for (const UOp& v : u_->vars())
    if (!vals.count(v->as<std::string>()))
      throw Error("Expr " + render() + ": variable '" + v->as<std::string>() + "' has no value; bind it, e.g. Variable(\"" +
                  v->as<std::string>() + "\", lo, hi).bind(v)");
  return eval(vals);
}

Expr operator+(const Expr& x, const Expr& y) { auto [a, b] = unify(*x.u_, *y.u_); return make2(a + b, x, y); }
Expr operator-(const Expr& x, const Expr& y) { auto [a, b] = unify(*x.u_, *y.u_); return make2(a - b, x, y); }
Expr operator*(const Expr& x, const Expr& y) { auto [a, b] = unify(*x.u_, *y.u_); return make2(a * b, x, y); }
Expr operator/(const Expr& x, const Expr& y) {
  check_divisor(x, y, "//");
  auto [a, b] = unify(*x.u_, *y.u_);
  return make2(a.alu(BinaryOps::IDIV, b), x, y);
}
Expr operator%(const Expr& x, const Expr& y) {
  check_divisor(x, y, "%");
  auto [a, b] = unify(*x.u_, *y.u_);
  return make2(a % b, x, y);
}

// ---------------------------------------------------------------- Variable
static UOp define_var(const std::string& name, int64_t mn, int64_t mx) {
  if (name.empty()) throw Error("Variable: a variable needs a name, e.g. Variable(\"i\", 0, 10)");
  if (mn > mx)
    throw Error("Variable('" + name + "', " + std::to_string(mn) + ", " + std::to_string(mx) +
                "): min is greater than max; give the range as (min, max) with min <= max");
  DType dt = fits_int32(mn) && fits_int32(mx) ? dtypes::int32 : dtypes::int64;
  return UOp(Ops::DEFINE_VAR, dt, {UOp::const_(dt, mn), UOp::const_(dt, mx)}, name);
}

Variable::Variable(const std::string& name, int64_t min, int64_t max)
    : Expr(Access::expr(define_var(name, min, max))), name_(name), min_(min), max_(max) {}

Variable Variable::bind(int64_t v) const {
  if (v < min_ || v > max_)
    throw Error("Variable('" + name_ + "', " + std::to_string(min_) + ", " + std::to_string(max_) + ").bind(" +
                std::to_string(v) + "): value is outside [" + std::to_string(min_) + ", " + std::to_string(max_) +
                "]; bind a value in the range or widen the range");
  Variable r = *this;
  r.val_ = v;
  r.b_ = std::make_shared<const VarBindings>(VarBindings{{name_, v}});
  return r;
}

std::pair<Variable, int64_t> Variable::unbind() const {
  if (!val_) throw Error("Variable('" + name_ + "').unbind(): the variable is not bound; call bind(v) first");
  Variable r = *this;
  r.val_.reset();
  r.b_.reset();
  return {r, *val_};
}

UOp bound_uop(const Variable& v) {
  if (!v.val()) throw Error("Variable('" + v.name() + "'): the variable is not bound; call bind(v) first");
  const UOp& u = Access::uop(v);
  return UOp(Ops::BIND, u->dtype, {u, UOp::const_(u->dtype, *v.val())});
}

}  // namespace tg
