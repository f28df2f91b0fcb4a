// Autograd Functions (tinygrad 0.9.2 function.py): forward on LazyBuffers, backward returns one
// gradient LazyBuffer per parent (nullptr where no gradient flows).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lazy/metadata.hpp"
#include "tensor/tensor_impl.hpp"

namespace tg {

using LBs = std::vector<LazyBufferPtr>;
using PadArg = std::vector<std::pair<int64_t, int64_t>>;

// conv2d's settings after validation (padding in pad2d's order: last spatial dim first)
struct ConvArgs {
  int groups = 1;
  Shape pad, stride, dilation;   // stride/dilation: one value per spatial dim
  std::optional<DType> acc_dtype;
};

struct Function {
  std::string device;
  std::vector<bool> needs_input_grad;
  std::optional<bool> requires_grad;
  std::vector<Tensor> parents;   // kept only when a gradient can flow
  const Metadata* metadata = nullptr;   // the Tensor op that applied it: backward's kernels name it too
  virtual ~Function() = default;
  virtual const char* name() const = 0;
  virtual LBs backward(const LazyBufferPtr& grad_output);   // default: tg::Error (not differentiable)
};

namespace F {
#define TG_FN(NAME, FWD_ARGS, MEMBERS)                    \
  struct NAME : Function {                                \
    const char* name() const override { return #NAME; }   \
    LazyBufferPtr forward FWD_ARGS;                       \
    LBs backward(const LazyBufferPtr& g) override;        \
    MEMBERS                                               \
  };
#define TG_FN_NOGRAD(NAME, FWD_ARGS)                      \
  struct NAME : Function {                                \
    const char* name() const override { return #NAME; }   \
    LazyBufferPtr forward FWD_ARGS;                       \
  };
TG_FN(Contiguous, (const LBs& x), )
TG_FN(ContiguousBackward, (const LBs& x), )
TG_FN(Cast, (const LBs& x, DType dtype, bool bitcast), DType input_dtype; bool bitcast_ = false;)
TG_FN(Neg, (const LBs& x), )
TG_FN(Reciprocal, (const LBs& x), LazyBufferPtr ret;)
TG_FN(Sin, (const LBs& x), LazyBufferPtr x_;)
TG_FN(Relu, (const LBs& x), LazyBufferPtr ret;)
TG_FN(Log, (const LBs& x), LazyBufferPtr x_;)
TG_FN(Exp, (const LBs& x), LazyBufferPtr ret;)
TG_FN(Sqrt, (const LBs& x), LazyBufferPtr ret;)
TG_FN(Sigmoid, (const LBs& x), LazyBufferPtr ret;)
TG_FN(Sign, (const LBs& x), )
TG_FN(Less, (const LBs& x), )
TG_FN(Neq, (const LBs& x), )
TG_FN_NOGRAD(Xor, (const LBs& x))
TG_FN_NOGRAD(BitwiseAnd, (const LBs& x))
TG_FN_NOGRAD(BitwiseOr, (const LBs& x))
TG_FN_NOGRAD(Threefry, (const LBs& x))
TG_FN(Add, (const LBs& x), )
TG_FN(Mul, (const LBs& x), LazyBufferPtr x_; LazyBufferPtr y_;)
TG_FN(Div, (const LBs& x), LazyBufferPtr x_; LazyBufferPtr y_;)
TG_FN(Where, (const LBs& x), LazyBufferPtr x_;)
TG_FN(Sum, (const LBs& x, const std::vector<int64_t>& axis), std::vector<sint> input_shape;)
TG_FN(Max, (const LBs& x, const std::vector<int64_t>& axis), LazyBufferPtr x_; LazyBufferPtr ret; std::vector<int64_t> axis_;)
TG_FN(Expand, (const LBs& x, const Shape& shape), std::vector<int64_t> expanded_axis;)
TG_FN(Reshape, (const LBs& x, const Shape& shape), Shape input_shape;)
TG_FN(Permute, (const LBs& x, const std::vector<int>& order), std::vector<int> input_order;)
TG_FN(Pad, (const LBs& x, const PadArg& arg), PadArg narg;)
TG_FN(Shrink, (const LBs& x, const PadArg& arg), PadArg narg;)
TG_FN(Flip, (const LBs& x, const std::vector<int>& axis), std::vector<int64_t> arg;)
// the movement ops with symbolic (sint) arguments, as tinygrad's Reshape/Expand/Pad/Shrink take sints
TG_FN(ReshapeSym, (const LBs& x, const std::vector<sint>& shape), std::vector<sint> input_shape;)
TG_FN(ExpandSym, (const LBs& x, const std::vector<sint>& shape), std::vector<int64_t> expanded_axis;)
TG_FN(PadSym, (const LBs& x, const SMask& arg), SMask narg;)
TG_FN(ShrinkSym, (const LBs& x, const SMask& arg), SMask narg;)
// conv2d (tensor/conv.cpp): backward as two convolutions instead of through the window view
// (xs_: the input's row-shifted copy when the forward took it, which the weight gradient reads too)
TG_FN(Conv2d, (const LBs& x, const ConvArgs& args), LazyBufferPtr x_; LazyBufferPtr w_; LazyBufferPtr xs_; ConvArgs args_;)
#undef TG_FN
#undef TG_FN_NOGRAD
}  // namespace F

// Function.apply: run forward on the inputs' LazyBuffers and record the ctx for backward.
template <class Fn, class... Args>
Tensor apply(const std::vector<Tensor>& xs, Args&&... args) {
  auto ctx = std::make_shared<Fn>();
  ctx->device = xs[0].device();
  ctx->metadata = current_metadata();
  bool any_true = false, any_none = false;
  LBs lbs;
  for (const Tensor& t : xs) {
    auto rg = t.requires_grad_opt();
    ctx->needs_input_grad.push_back(rg.value_or(false));
    any_true |= rg.value_or(false);
    any_none |= !rg.has_value();
    lbs.push_back(detail::lb(t));
  }
  ctx->requires_grad = any_true ? std::optional<bool>(true) : any_none ? std::nullopt : std::optional<bool>(false);
  if (any_true) ctx->parents = xs;
  LazyBufferPtr out = ctx->forward(lbs, std::forward<Args>(args)...);
  Tensor ret = detail::make_tensor(out, ctx->requires_grad);
  if (any_true && !Tensor::no_grad) Access::impl(ret)->ctx = ctx;
  return ret;
}

}  // namespace tg
