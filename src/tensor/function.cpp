#include "tensor/function.hpp"
#include "shape/shape_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tg {

LBs Function::backward(const LazyBufferPtr&) {
  throw Error(std::string("backward: ") + name() + " is not differentiable; detach() its inputs or don't set requires_grad on them");
}

namespace F {
namespace {
using U = UnaryOps;
using B = BinaryOps;
LazyBufferPtr cst(const LazyBufferPtr& x, double v) { return x->const_(ConstType(v)); }
LazyBufferPtr cst(const LazyBufferPtr& x, int64_t v) { return x->const_(ConstType(v)); }
// x expanded to shape: symbolic dims through expand_sym, so the expression (not the bound value) is kept
LazyBufferPtr expand_to(const LazyBufferPtr& x, const std::vector<sint>& shape) {
  if (std::all_of(shape.begin(), shape.end(), [](const sint& d) { return d.is_const(); }) && !x->st.symbolic()) {
    Shape s;
    for (const sint& d : shape) s.push_back(d.const_value());
    return x->expand(s);
  }
  return x->expand_sym(shape);
}
std::vector<int> argsort(const std::vector<int>& v) {
  std::vector<int> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[v[i]] = static_cast<int>(i);
  return r;
}
}  // namespace

LazyBufferPtr Contiguous::forward(const LBs& x) { return x[0]->contiguous(); }
LBs Contiguous::backward(const LazyBufferPtr& g) { return {g}; }

LazyBufferPtr ContiguousBackward::forward(const LBs& x) { return x[0]; }
LBs ContiguousBackward::backward(const LazyBufferPtr& g) { return {g->contiguous()}; }

LazyBufferPtr Cast::forward(const LBs& x, DType dtype, bool bitcast) {
  input_dtype = x[0]->dtype, bitcast_ = bitcast;
  return x[0]->cast(dtype, bitcast);
}
LBs Cast::backward(const LazyBufferPtr& g) { return {g->cast(input_dtype, bitcast_)}; }

// ---- unary
LazyBufferPtr Neg::forward(const LBs& x) { return x[0]->e(U::NEG); }
LBs Neg::backward(const LazyBufferPtr& g) { return {g->e(U::NEG)}; }

LazyBufferPtr Reciprocal::forward(const LBs& x) { return ret = x[0]->e(U::RECIP); }
LBs Reciprocal::backward(const LazyBufferPtr& g) { return {g->e(U::NEG)->e(B::MUL, ret)->e(B::MUL, ret)}; }

LazyBufferPtr Sin::forward(const LBs& x) { x_ = x[0]; return x_->e(U::SIN); }
// d/dx sin(x) = sin(pi/2 - x)
LBs Sin::backward(const LazyBufferPtr& g) {
  return {cst(x_, std::numbers::pi / 2)->e(B::ADD, x_->e(U::NEG))->e(U::SIN)->e(B::MUL, g)};
}

LazyBufferPtr Relu::forward(const LBs& x) { return ret = x[0]->e(B::MAX, cst(x[0], int64_t{0})); }
LBs Relu::backward(const LazyBufferPtr& g) {
  return {cst(ret, int64_t{0})->e(B::CMPLT, ret)->cast(g->dtype)->e(B::MUL, g)};
}

LazyBufferPtr Log::forward(const LBs& x) { x_ = x[0]; return x_->e(U::LOG2)->e(B::MUL, cst(x_, std::log(2.0))); }
LBs Log::backward(const LazyBufferPtr& g) { return {g->e(B::MUL, x_->e(U::RECIP))}; }

LazyBufferPtr Exp::forward(const LBs& x) { return ret = x[0]->e(B::MUL, cst(x[0], 1 / std::log(2.0)))->e(U::EXP2); }
LBs Exp::backward(const LazyBufferPtr& g) { return {ret->e(B::MUL, g)}; }

LazyBufferPtr Sqrt::forward(const LBs& x) { return ret = x[0]->e(U::SQRT); }
LBs Sqrt::backward(const LazyBufferPtr& g) { return {g->e(B::MUL, ret->e(B::MUL, cst(ret, 2.0))->e(U::RECIP))}; }

// sigmoid(x) = 1 / (1 + 2^(-x/ln2)); backward uses the output, which is stable
LazyBufferPtr Sigmoid::forward(const LBs& x) {
  return ret = cst(x[0], 1.0)->e(B::ADD, x[0]->e(B::MUL, cst(x[0], -1 / std::log(2.0)))->e(U::EXP2))->e(U::RECIP);
}
LBs Sigmoid::backward(const LazyBufferPtr& g) {
  return {ret->e(B::MUL, cst(ret, 1.0)->e(B::ADD, ret->e(U::NEG)))->e(B::MUL, g)};
}

LazyBufferPtr Sign::forward(const LBs& x) {
  const auto& a = x[0];
  auto zero = cst(a, int64_t{0});
  auto neg_or_pos = a->e(B::CMPLT, zero)->e(TernaryOps::WHERE, cst(a, int64_t{-1}), cst(a, int64_t{1}));
  return a->e(B::CMPNE, zero)->e(TernaryOps::WHERE, neg_or_pos, zero);
}
// zero gradient, matching torch
LBs Sign::backward(const LazyBufferPtr& g) { return {cst(g, int64_t{0})}; }

// ---- binary
LazyBufferPtr Less::forward(const LBs& x) { return x[0]->e(B::CMPLT, x[1]); }
LBs Less::backward(const LazyBufferPtr&) { return {nullptr, nullptr}; }
LazyBufferPtr Neq::forward(const LBs& x) { return x[0]->e(B::CMPNE, x[1]); }
LBs Neq::backward(const LazyBufferPtr&) { return {nullptr, nullptr}; }
LazyBufferPtr Xor::forward(const LBs& x) { return x[0]->e(B::XOR, x[1]); }
LazyBufferPtr BitwiseAnd::forward(const LBs& x) { return x[0]->e(B::AND, x[1]); }
LazyBufferPtr BitwiseOr::forward(const LBs& x) { return x[0]->e(B::OR, x[1]); }
LazyBufferPtr Threefry::forward(const LBs& x) { return x[0]->e(B::THREEFRY, x[1]); }

LazyBufferPtr Add::forward(const LBs& x) { return x[0]->e(B::ADD, x[1]); }
LBs Add::backward(const LazyBufferPtr& g) {
  return {needs_input_grad[0] ? g : nullptr, needs_input_grad[1] ? g : nullptr};
}

LazyBufferPtr Mul::forward(const LBs& x) { x_ = x[0], y_ = x[1]; return x_->e(B::MUL, y_); }
LBs Mul::backward(const LazyBufferPtr& g) {
  return {needs_input_grad[0] ? y_->e(B::MUL, g) : nullptr, needs_input_grad[1] ? x_->e(B::MUL, g) : nullptr};
}

// float: x * (1/y); int: truncating IDIV
LazyBufferPtr Div::forward(const LBs& x) {
  x_ = x[0], y_ = x[1];
  return x_->dtype.is_int() ? x_->e(B::IDIV, y_) : x_->e(B::MUL, y_->e(U::RECIP));
}
LBs Div::backward(const LazyBufferPtr& g) {
  return {needs_input_grad[0] ? g->e(B::MUL, y_->e(U::RECIP)) : nullptr,
          needs_input_grad[1] ? g->e(U::NEG)->e(B::MUL, x_)->e(B::MUL, y_->e(B::MUL, y_)->e(U::RECIP)) : nullptr};
}

// ---- ternary
LazyBufferPtr Where::forward(const LBs& x) { x_ = x[0]; return x_->e(TernaryOps::WHERE, x[1], x[2]); }
LBs Where::backward(const LazyBufferPtr& g) {
  auto zero = cst(g, int64_t{0});
  return {nullptr, needs_input_grad[1] ? x_->e(TernaryOps::WHERE, g, zero) : nullptr,
          needs_input_grad[2] ? x_->e(TernaryOps::WHERE, zero, g) : nullptr};
}

// ---- reduce
LazyBufferPtr Sum::forward(const LBs& x, const std::vector<int64_t>& axis) {
  input_shape = x[0]->sym_shape();
  return x[0]->r(ReduceOps::SUM, axis);
}
LBs Sum::backward(const LazyBufferPtr& g) { return {expand_to(g, input_shape)}; }

LazyBufferPtr Max::forward(const LBs& x, const std::vector<int64_t>& axis) {
  x_ = x[0], axis_ = axis;
  return ret = x_->r(ReduceOps::MAX, axis);
}
// the gradient is split evenly between the positions that hold the max
LBs Max::backward(const LazyBufferPtr& g) {
  const std::vector<sint> shp = x_->sym_shape();
  // 1 where x holds the max, else 0, as a select: the same values as tinygrad's 1 - (x != max).cast(float),
  // but a vector compare and blend on the CPU, where a bool vector's cast to float went lane by lane
  auto f32 = [&](double v) { return cst(x_, v)->cast(dtypes::float32); };
  auto max_is_1s = x_->e(B::CMPNE, expand_to(ret, shp))->e(TernaryOps::WHERE, f32(0.0), f32(1.0));
  auto div = expand_to(max_is_1s->r(ReduceOps::SUM, axis_), shp);
  return {max_is_1s->e(B::MUL, div->e(U::RECIP))->cast(g->dtype)->e(B::MUL, expand_to(g, shp))};
}

// ---- movement
LazyBufferPtr Expand::forward(const LBs& x, const Shape& shape) {
  for (size_t i = 0; i < shape.size(); i++)
    if (x[0]->shape()[i] != shape[i]) expanded_axis.push_back(static_cast<int64_t>(i));
  return x[0]->expand(shape);
}
LBs Expand::backward(const LazyBufferPtr& g) {
  return {g->cast(sum_acc_dtype(g->dtype))->r(ReduceOps::SUM, expanded_axis)->cast(g->dtype)};
}

LazyBufferPtr Reshape::forward(const LBs& x, const Shape& shape) { input_shape = x[0]->shape(); return x[0]->reshape(shape); }
LBs Reshape::backward(const LazyBufferPtr& g) { return {g->reshape(input_shape)}; }

LazyBufferPtr Permute::forward(const LBs& x, const std::vector<int>& order) { input_order = order; return x[0]->permute(order); }
LBs Permute::backward(const LazyBufferPtr& g) { return {g->permute(argsort(input_order))}; }

LazyBufferPtr Pad::forward(const LBs& x, const std::vector<std::pair<int64_t, int64_t>>& arg) {
  const Shape& s = x[0]->shape();
  for (size_t i = 0; i < s.size(); i++) narg.push_back({arg[i].first, s[i] + arg[i].first});
  return x[0]->pad(arg);
}
LBs Pad::backward(const LazyBufferPtr& g) { return {g->shrink(narg)}; }

LazyBufferPtr Shrink::forward(const LBs& x, const std::vector<std::pair<int64_t, int64_t>>& arg) {
  const Shape& s = x[0]->shape();
  for (size_t i = 0; i < s.size(); i++) narg.push_back({arg[i].first, s[i] - arg[i].second});
  return x[0]->shrink(arg);
}
LBs Shrink::backward(const LazyBufferPtr& g) { return {g->pad(narg)}; }

LazyBufferPtr Flip::forward(const LBs& x, const std::vector<int>& axis) {
  for (size_t i = 0; i < x[0]->shape().size(); i++)
    arg.push_back(std::find(axis.begin(), axis.end(), static_cast<int>(i)) != axis.end() ? -1 : 1);
  return x[0]->stride(arg);
}
LBs Flip::backward(const LazyBufferPtr& g) { return {g->stride(arg)}; }

// ---- movement with symbolic arguments: the same backward rules, in sints
LazyBufferPtr ReshapeSym::forward(const LBs& x, const std::vector<sint>& shape) {
  input_shape = x[0]->sym_shape();
  return x[0]->reshape_sym(shape);
}
LBs ReshapeSym::backward(const LazyBufferPtr& g) { return {g->reshape_sym(input_shape)}; }

LazyBufferPtr ExpandSym::forward(const LBs& x, const std::vector<sint>& shape) {
  const std::vector<sint> in = x[0]->sym_shape();
  for (size_t i = 0; i < shape.size(); i++)
    if (!sym_same(in[i], shape[i])) expanded_axis.push_back(static_cast<int64_t>(i));
  return x[0]->expand_sym(shape);
}
LBs ExpandSym::backward(const LazyBufferPtr& g) {
  return {g->cast(sum_acc_dtype(g->dtype))->r(ReduceOps::SUM, expanded_axis)->cast(g->dtype)};
}

LazyBufferPtr PadSym::forward(const LBs& x, const SMask& arg) {
  const std::vector<sint> s = x[0]->sym_shape();
  for (size_t i = 0; i < s.size(); i++) narg.emplace_back(arg[i].first, s[i] + arg[i].first);
  return x[0]->pad_sym(arg);
}
LBs PadSym::backward(const LazyBufferPtr& g) { return {g->shrink_sym(narg)}; }

LazyBufferPtr ShrinkSym::forward(const LBs& x, const SMask& arg) {
  const std::vector<sint> s = x[0]->sym_shape();
  for (size_t i = 0; i < s.size(); i++) narg.emplace_back(arg[i].first, s[i] - arg[i].second);
  return x[0]->shrink_sym(arg);
}
LBs ShrinkSym::backward(const LazyBufferPtr& g) { return {g->pad_sym(narg)}; }

}  // namespace F
}  // namespace tg
