// Elementwise ops: broadcasting with dtype promotion (tinygrad's _broadcasted), unary math,
// activations, binary arithmetic, comparisons and where.
#include <cmath>
#include <numbers>

#include "tensor/function.hpp"
#include "lazy/metadata.hpp"

namespace tg {
using detail::lb;

namespace detail {
Shape broadcast_shape(const std::vector<Shape>& shapes, const char* op) {
  size_t n = 0;
  for (auto& s : shapes) n = std::max(n, s.size());
  Shape out(n, 1);
  for (size_t i = 0; i < n; i++) {
    bool zero = false;
    int64_t mx = 1;
    for (auto& s : shapes) {
      int64_t d = i + s.size() >= n ? s[i + s.size() - n] : 1;
      zero |= d == 0;
      if (d != 1 && mx != 1 && d != mx) {
        std::string all;
        for (auto& t : shapes) all += (all.empty() ? "" : " and ") + to_str(t);
        throw Error(std::string(op) + ": shapes " + all + " can't be broadcast together (dim " + std::to_string(i) +
                    ": " + std::to_string(mx) + " vs " + std::to_string(d) + ")");
      }
      mx = std::max(mx, d);
    }
    out[i] = zero ? 0 : mx;
  }
  return out;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape, const char* op) {
  if (x.shape() == shape) return x;
  if (x.ndim() > static_cast<int64_t>(shape.size()))
    throw Error(std::string(op) + ": can't broadcast shape " + to_str(x.shape()) + " to fewer dimensions " + to_str(shape));
  Shape padded(shape.size() - x.shape().size(), 1);
  padded.insert(padded.end(), x.shape().begin(), x.shape().end());
  for (size_t i = 0; i < shape.size(); i++)
    if (padded[i] != 1 && padded[i] != shape[i])
      throw Error(std::string(op) + ": can't broadcast shape " + to_str(x.shape()) + " to " + to_str(shape));
  return apply<F::Expand>({x.reshape(padded)}, shape);
}

// python scalars are weak: they take the tensor's dtype when it is float, or when both are ints
Tensor scalar_like(const Tensor& x, const ConstType& y) {
  DType xd = x.dtype();
  bool y_int = !std::holds_alternative<double>(y);   // python bool is an int
  DType yd = xd.is_float() || (xd.is_int() && y_int) ? xd
             : std::holds_alternative<double>(y)     ? dtypes::default_float()
             : std::holds_alternative<int64_t>(y)    ? dtypes::default_int()
                                                     : dtypes::bool_;
  return Tensor(dtypes::as_const(y, yd), Opts{yd, x.device(), false});
}

Tensor operand_tensor(const Tensor& x, const Operand& y) {
  if (y.is_tensor()) return Access::tensor(std::get<0>(y.v));
  return scalar_like(x, std::get<1>(y.v));
}

std::pair<Tensor, Tensor> broadcasted(const Tensor& x0, const Operand& y0, bool reverse, bool match_dtype, const char* op) {
  Tensor x = x0, y = operand_tensor(x0, y0);
  if (y.device() != x.device())
    throw Error(std::string(op) + ": tensors are on different devices " + x.device() + " and " + y.device() + "; move one with to()");
  if (match_dtype && x.dtype() != y.dtype()) {
    DType out = least_upper_dtype(x.dtype(), y.dtype());
    x = x.cast(out), y = y.cast(out);
  }
  if (reverse) std::swap(x, y);
  Shape out = broadcast_shape({x.shape(), y.shape()}, op);
  return {broadcast_to(x, out, op), broadcast_to(y, out, op)};
}
}  // namespace detail

using detail::broadcasted;

namespace {
constexpr double kLn2 = std::numbers::ln2;
constexpr double kPi = std::numbers::pi;
Tensor as_tensor(const Operand& o) { return Access::tensor(std::get<0>(o.v)); }
Operand negate(const Operand& o) {
  if (o.is_tensor()) return as_tensor(o).neg();
  const ConstType& c = std::get<1>(o.v);
  if (auto d = std::get_if<double>(&c)) return -*d;
  return -const_to_int(c);
}
// Comparisons are not differentiable: as in torch, the result requires no grad and joins no autograd
// graph, so a comparison used as where's condition (or summed) takes no part in backward.
template <class Fn>
Tensor compare(const Tensor& a, const Tensor& b) { return apply<Fn>({a, b}).detach(); }
}  // namespace

// ---- unary
Tensor Tensor::logical_not() const {
  TG_OP("logical_not");
  auto [a, b] = broadcasted(cast(dtypes::bool_), true);
  return compare<F::Neq>(a, b);
}
Tensor Tensor::neg() const { TG_OP("neg"); return dtype() == dtypes::bool_ ? logical_not() : apply<F::Neg>({*this}); }
Tensor Tensor::log() const { TG_OP("log"); return apply<F::Log>({cast(least_upper_float(dtype()))}); }
Tensor Tensor::log2() const { TG_OP("log2"); return log() / kLn2; }
Tensor Tensor::exp() const { TG_OP("exp"); return apply<F::Exp>({cast(least_upper_float(dtype()))}); }
Tensor Tensor::exp2() const { TG_OP("exp2"); return apply<F::Exp>({*this * kLn2}); }
Tensor Tensor::relu() const { TG_OP("relu"); return apply<F::Relu>({*this}); }
Tensor Tensor::sigmoid() const { TG_OP("sigmoid"); return apply<F::Sigmoid>({cast(least_upper_float(dtype()))}); }
Tensor Tensor::sqrt() const { TG_OP("sqrt"); return apply<F::Sqrt>({cast(least_upper_float(dtype()))}); }
Tensor Tensor::rsqrt() const { TG_OP("rsqrt"); return reciprocal().sqrt(); }
Tensor Tensor::sin() const { TG_OP("sin"); return apply<F::Sin>({cast(least_upper_float(dtype()))}); }
Tensor Tensor::cos() const { TG_OP("cos"); return (kPi / 2 - *this).sin(); }
Tensor Tensor::tan() const { TG_OP("tan"); return sin() / cos(); }
Tensor Tensor::trunc() const { TG_OP("trunc"); return cast(dtypes::int32).cast(dtype()); }
Tensor Tensor::ceil() const {
  TG_OP("ceil");
  Tensor b = trunc();
  return (*this > b).where(b + 1, b);
}
Tensor Tensor::floor() const {
  TG_OP("floor");
  Tensor b = trunc();
  return (*this < b).where(b - 1, b);
}
// half to even: x.5 rounds up when the integer part is odd (for positives), down when even
Tensor Tensor::round() const {
  TG_OP("round");
  Tensor b = cast(dtypes::int32) / 2.0;
  return ((*this > 0) == (b.cast(dtypes::int32) == b)).where((*this - 0.5).ceil(), (*this + 0.5).floor());
}
Tensor Tensor::square() const { TG_OP("square"); return *this * *this; }
Tensor Tensor::sign() const { TG_OP("sign"); return apply<F::Sign>({*this}); }
Tensor Tensor::abs() const { TG_OP("abs"); return *this * sign(); }
Tensor Tensor::reciprocal() const { TG_OP("reciprocal"); return apply<F::Reciprocal>({cast(least_upper_float(dtype()))}); }

// ---- activations
Tensor Tensor::elu(double alpha) const { TG_OP("elu"); return relu() - alpha * (1 - exp()).relu(); }
Tensor Tensor::celu(double alpha) const { TG_OP("celu"); return maximum(0) + (alpha * ((*this / alpha).exp() - 1)).minimum(0); }
Tensor Tensor::swish() const { TG_OP("swish"); return *this * sigmoid(); }
Tensor Tensor::silu() const { TG_OP("silu"); return swish(); }
Tensor Tensor::relu6() const { TG_OP("relu6"); return relu() - (*this - 6).relu(); }
Tensor Tensor::hardswish() const { TG_OP("hardswish"); return *this * (*this + 3).relu6() * (1.0 / 6); }
Tensor Tensor::tanh() const { TG_OP("tanh"); return 2.0 * (2.0 * *this).sigmoid() - 1.0; }
Tensor Tensor::sinh() const { TG_OP("sinh"); return (exp() - neg().exp()) / 2; }
Tensor Tensor::cosh() const { TG_OP("cosh"); return (exp() + neg().exp()) / 2; }
Tensor Tensor::atanh() const { TG_OP("atanh"); return ((1 + *this) / (1 - *this)).log() / 2; }
Tensor Tensor::asinh() const { TG_OP("asinh"); return (*this + (square() + 1).sqrt()).log(); }
Tensor Tensor::acosh() const { TG_OP("acosh"); return (*this + (square() - 1).sqrt()).log(); }
Tensor Tensor::hardtanh(double min_val, double max_val) const { TG_OP("hardtanh"); return clip(min_val, max_val); }
Tensor Tensor::gelu() const {
  TG_OP("gelu");
  return 0.5 * *this * (1 + (std::sqrt(2 / kPi) * (*this + 0.044715 * pow(3))).tanh());
}
Tensor Tensor::quick_gelu() const { TG_OP("quick_gelu"); return *this * (*this * 1.702).sigmoid(); }
Tensor Tensor::leakyrelu(double neg_slope) const { TG_OP("leakyrelu"); return relu() - (-neg_slope * *this).relu(); }
Tensor Tensor::mish() const { TG_OP("mish"); return *this * softplus().tanh(); }
Tensor Tensor::softplus(double beta) const { TG_OP("softplus"); return (1 / beta) * (1 + (*this * beta).exp()).log(); }
Tensor Tensor::softsign() const { TG_OP("softsign"); return *this / (1 + abs()); }
Tensor Tensor::hardsigmoid(double alpha, double beta) const {
  TG_OP("hardsigmoid");
  return (alpha * *this + beta).relu() - (alpha * *this + beta - 1).relu();
}

// ---- binary
Tensor Tensor::add(const Operand& x, bool reverse) const {
  TG_OP("add");
  auto [a, b] = broadcasted(*this, x, reverse, true, "add");
  return apply<F::Add>({a, b});
}
Tensor Tensor::sub(const Operand& x, bool reverse) const {
  TG_OP("sub");
  auto [a, b] = broadcasted(*this, x, reverse, true, "sub");
  return a + (-b);
}
Tensor Tensor::mul(const Operand& x, bool reverse) const {
  TG_OP("mul");
  auto [a, b] = broadcasted(*this, x, reverse, true, "mul");
  return apply<F::Mul>({a, b});
}
Tensor Tensor::div(const Operand& x, bool upcast, bool reverse) const {
  TG_OP("div");
  auto [n, d] = broadcasted(*this, x, reverse, true, "div");
  if (upcast) n = n.cast(least_upper_float(n.dtype())), d = d.cast(least_upper_float(d.dtype()));
  return apply<F::Div>({n, d});
}
Tensor Tensor::xor_(const Operand& x, bool reverse) const {
  TG_OP("xor");
  if (dtype().is_float()) throw Error("xor: needs an int or bool tensor, got " + dtype().str());
  auto [a, b] = broadcasted(*this, x, reverse, true, "xor");
  return apply<F::Xor>({a, b});
}
Tensor Tensor::bitwise_and(const Operand& x, bool reverse) const {
  TG_OP("bitwise_and");
  if (dtype().is_float()) throw Error("bitwise_and: needs an int or bool tensor, got " + dtype().str());
  auto [a, b] = broadcasted(*this, x, reverse, true, "bitwise_and");
  return apply<F::BitwiseAnd>({a, b});
}
Tensor Tensor::bitwise_or(const Operand& x, bool reverse) const {
  TG_OP("bitwise_or");
  if (dtype().is_float()) throw Error("bitwise_or: needs an int or bool tensor, got " + dtype().str());
  auto [a, b] = broadcasted(*this, x, reverse, true, "bitwise_or");
  return apply<F::BitwiseOr>({a, b});
}
Tensor Tensor::lshift(int64_t x) const {
  TG_OP("lshift");
  if (!dtype().is_unsigned() || x < 0 || x >= 64)
    throw Error("lshift: needs an unsigned tensor and a shift in [0, 64), got " + dtype().str() + " << " + std::to_string(x));
  return mul(static_cast<int64_t>(uint64_t{1} << x));
}
Tensor Tensor::rshift(int64_t x) const {
  TG_OP("rshift");
  if (!dtype().is_unsigned() || x < 0 || x >= 64)
    throw Error("rshift: needs an unsigned tensor and a shift in [0, 64), got " + dtype().str() + " >> " + std::to_string(x));
  return div(static_cast<int64_t>(uint64_t{1} << x), false);
}

namespace {
// an operand that is really a constant (unrealized, unmasked, no grad, doesn't change x's shape)
std::optional<ConstType> to_const_val(const Tensor& x, const Operand& o) {
  if (!o.is_tensor()) return std::get<1>(o.v);
  Tensor t = as_tensor(o);
  if (t.requires_grad() || !lb(t)->is_unrealized_unmasked_const()) return std::nullopt;
  if (detail::broadcast_shape({x.shape(), t.shape()}, "pow") != x.shape()) return std::nullopt;
  return std::get<ConstType>(lb(t)->base()->arg);
}
}  // namespace

Tensor Tensor::pow(const Operand& x0, bool reverse) const {
  TG_OP("pow");
  std::optional<ConstType> c = to_const_val(*this, x0);
  Operand x = c ? Operand(const_to_double(*c)) : x0;
  if (c && std::holds_alternative<int64_t>(*c)) x = Operand(const_to_int(*c));
  if (c && !reverse) {
    double v = const_to_double(*c);
    // simple pow identities
    if (v < 0) return reciprocal().pow(negate(x));
    if (v == 0) return 1 + *this * 0;
    if (static_cast<double>(static_cast<int64_t>(v - 0.5)) + 0.5 == v) return pow(static_cast<int64_t>(v - 0.5)) * sqrt();
    if (static_cast<double>(static_cast<int64_t>(v)) == v) {
      int64_t n = static_cast<int64_t>(v);
      Tensor half = pow(n / 2).square();
      return n % 2 == 0 ? half * 1 : half * *this;
    }
  }
  if (c && reverse && const_to_double(*c) > 0) return mul(std::log(const_to_double(*c))).exp();
  auto [base, exponent] = broadcasted(*this, x, reverse, true, "pow");
  // b ** e = exp(e * log|b|), then fix the sign for negative bases with odd exponents
  Tensor ret = base.abs().log().mul(exponent).exp();
  Tensor negative_base = (base < 0).detach().where(1, 0);
  Tensor correct_sign = 1 + negative_base * ((exponent * kPi).cos() - 1);
  Tensor inject_nan = (negative_base * (exponent != exponent.trunc())).detach().where(NAN, 1);
  return ((base == 0) * (exponent == 0)).detach().where(1, ret * correct_sign * inject_nan);
}

Tensor Tensor::maximum(const Operand& x) const {
  TG_OP("maximum");
  Tensor mid = x.is_tensor() ? (*this * 0.5 + as_tensor(x) * 0.5) : (*this * 0.5 + const_to_double(std::get<1>(x.v)) * 0.5);
  return lt(x).detach().where(x, eq(x).detach().where(mid.cast(dtype()), *this));
}
Tensor Tensor::minimum(const Operand& x) const { TG_OP("minimum"); return -((-*this).maximum(negate(x))); }

Tensor Tensor::lerp(const Tensor& end, const Operand& weight) const { TG_OP("lerp"); return *this + (end - *this).mul(weight); }
Tensor Tensor::clip(std::optional<Operand> min_, std::optional<Operand> max_) const {
  TG_OP("clip");
  if (!min_ && !max_) throw Error("clip: at least one of min and max must be given");
  Tensor ret = min_ ? maximum(*min_) : *this;
  return max_ ? ret.minimum(*max_) : ret;
}

Tensor Tensor::where(const Operand& x0, const Operand& y0) const {
  TG_OP("where");
  Operand x = x0, y = y0;
  if (x.is_tensor()) {
    auto [a, b] = broadcasted(as_tensor(x), y, false, true, "where");
    x = a, y = b;
  } else if (y.is_tensor()) {
    auto [b, a] = broadcasted(as_tensor(y), x, false, true, "where");
    x = a, y = b;
  }
  auto [cond0, xt] = broadcasted(*this, x, false, false, "where");
  auto [cond, yt] = broadcasted(cond0, y, false, false, "where");
  auto [xb, yb] = broadcasted(xt, yt, false, true, "where");
  return apply<F::Where>({cond.cast(dtypes::bool_), xb, yb});
}
Tensor Tensor::masked_fill(const Tensor& mask, const Operand& value) const { TG_OP("masked_fill"); return mask.where(value, *this); }

// ---- comparisons (bool results)
Tensor Tensor::lt(const Operand& x) const {
  TG_OP("lt");
  auto [a, b] = broadcasted(*this, x, false, true, "lt");
  return compare<F::Less>(a, b);
}
Tensor Tensor::gt(const Operand& x) const {
  TG_OP("gt");
  auto [a, b] = broadcasted(*this, x, true, true, "gt");
  return compare<F::Less>(a, b);
}
Tensor Tensor::ge(const Operand& x) const { TG_OP("ge"); return lt(x).logical_not(); }
Tensor Tensor::le(const Operand& x) const { TG_OP("le"); return gt(x).logical_not(); }
Tensor Tensor::ne(const Operand& x) const {
  TG_OP("ne");
  auto [a, b] = broadcasted(*this, x, false, true, "ne");
  return compare<F::Neq>(a, b);
}
Tensor Tensor::eq(const Operand& x) const { TG_OP("eq"); return ne(x).logical_not(); }

}  // namespace tg
