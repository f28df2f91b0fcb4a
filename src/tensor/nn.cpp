// Functional nn: linear, normalizations, dropout, one_hot, attention and losses.
#include <algorithm>
#include <cmath>

#include "shape/shape_helpers.hpp"
#include "tensor/function.hpp"
#include "lazy/metadata.hpp"

namespace tg {
using detail::sym_str;

Tensor Tensor::linear(const Tensor& weight, std::optional<Tensor> bias) const {
  TG_OP("linear");
  Tensor x = weight.ndim() == 1 ? mul(weight) : dot(weight);
  return bias ? x.add(*bias) : x;
}

Tensor Tensor::layernorm(Axes axis, double eps) const {
  TG_OP("layernorm");
  Tensor y = *this - mean(axis, true);
  return y.mul((y * y).mean(axis, true).add(eps).rsqrt());
}

Tensor Tensor::batchnorm(std::optional<Tensor> weight, std::optional<Tensor> bias, const Tensor& mean, const Tensor& invstd,
                         Axes axis) const {
  TG_OP("batchnorm");
  std::vector<int> ax = detail::resolve_axes(*this, axis, "batchnorm");
  Shape shp;
  for (int i = 0; i < ndim(); i++) shp.push_back(std::find(ax.begin(), ax.end(), i) != ax.end() ? shape()[i] : 1);
  auto fit = [&](const Tensor& t, const char* what) {
    if (t.numel() != tg::prod(shp))
      throw Error(std::string("batchnorm: ") + what + " of shape " + to_str(t.shape()) + " doesn't match input " + to_str(shape()) +
                  " on axes " + to_str(ax) + " (expected " + std::to_string(tg::prod(shp)) + " elements)");
    return t.reshape(shp);
  };
  // x * scale + shift with the per-channel scale = weight * invstd and shift = bias - mean * scale (as
  // torch's CPU kernel): the same values as ((x - mean) * weight * invstd) + bias up to rounding, and a
  // backward with two reduces over x's size, sum(dy * x) and sum(dy), where the op-by-op form made four
  // (the gradients of mean and invstd each reduced dy against x again): beautiful_mnist's bn1 backward
  // ran 4 split reduces of 512x20x20 per channel.
  Tensor scale = invstd.ndim() == static_cast<int64_t>(ax.size()) ? fit(invstd, "invstd") : invstd;
  if (weight) scale = scale * fit(*weight, "weight");
  Tensor shift = -fit(mean, "mean") * scale;
  if (bias) shift = shift + fit(*bias, "bias");
  return mul(scale) + shift;
}

Tensor Tensor::dropout(double p) const {
  TG_OP("dropout");
  if (p < 0 || p > 1) throw Error("dropout: p must be in [0, 1], got " + std::to_string(p));
  if (!Tensor::training || p == 0) return *this;
  Tensor keep = Tensor::rand(shape(), Opts{dtypes::default_float(), device(), false}) >= p;
  return *this * keep * (1 / (1.0 - p));
}

Tensor Tensor::one_hot(int64_t num_classes) const {
  TG_OP("one_hot");
  if (num_classes <= 0) throw Error("one_hot: num_classes must be positive, got " + std::to_string(num_classes));
  if (!dtype().is_int()) throw Error("one_hot: needs an int tensor of class indices, got " + dtype().str());
  return ((*this)[{Ellipsis, None}] == Tensor::arange(num_classes, Opts{{}, device(), false})).where(1, 0);
}

Tensor Tensor::scaled_dot_product_attention(const Tensor& key, const Tensor& value, std::optional<Tensor> attn_mask, double dropout_p,
                                            bool is_causal) const {
  TG_OP("scaled_dot_product_attention");
  if (ndim() < 2 || key.ndim() < 2 || value.ndim() < 2)
    throw Error("scaled_dot_product_attention: query " + sym_str(sym_shape()) + ", key " + sym_str(key.sym_shape()) + " and value " +
                sym_str(value.sym_shape()) + " need at least 2 dims (..., seq, dim)");
  if (!sym_same(key.sym_shape().back(), sym_shape().back()))
    throw Error("scaled_dot_product_attention: query " + sym_str(sym_shape()) + " and key " + sym_str(key.sym_shape()) + " differ in the last dim");
  if (is_causal) {
    sint lq = sym_shape()[ndim() - 2], lk = key.sym_shape()[key.ndim() - 2];
    if (lq.is_const() && lk.is_const())
      attn_mask = Tensor::ones({lq.const_value(), lk.const_value()}, Opts{{}, device(), false}).tril(0).cast(dtypes::bool_);
    else   // a symbolic key length: the mask follows the Variable (one kernel for every length)
      attn_mask = detail::tril_mask_sym(lq, lk, 0, device());
  }
  if (attn_mask && attn_mask->dtype() == dtypes::bool_) attn_mask = (*attn_mask == 0).where(-INFINITY, 0);
  DType acc = least_upper_dtype({dtype(), key.dtype(), dtypes::float32});
  const sint head = sym_shape().back();
  if (!head.is_const())
    throw Error("scaled_dot_product_attention: the head dim " + head.render() + " of query " + sym_str(sym_shape()) +
                " is symbolic; only the sequence dims may be");
  Tensor qk = matmul(key.transpose(-2, -1), false, acc) / std::sqrt(static_cast<double>(head.const_value()));
  return (attn_mask ? qk + *attn_mask : qk).softmax(-1).cast(dtype()).dropout(dropout_p).matmul(value);
}

Tensor Tensor::binary_crossentropy(const Tensor& y) const {
  TG_OP("binary_crossentropy");
  return (-y * log() - (1 - y) * (1 - *this).log()).mean();
}
Tensor Tensor::binary_crossentropy_logits(const Tensor& y) const {
  TG_OP("binary_crossentropy_logits");
  return (maximum(0) - y * *this + (1 + abs().neg().exp()).log()).mean();
}

Tensor Tensor::sparse_categorical_crossentropy(const Tensor& Y, int64_t ignore_index, double label_smoothing) const {
  TG_OP("sparse_categorical_crossentropy");
  if (label_smoothing < 0 || label_smoothing > 1) throw Error("sparse_categorical_crossentropy: label_smoothing must be in [0, 1]");
  if (ndim() < 1 || Y.numel() * shape().back() != numel())
    throw Error("sparse_categorical_crossentropy: logits " + to_str(shape()) + " and labels " + to_str(Y.shape()) +
                " don't match; logits need shape (*labels.shape, num_classes)");
  // As tinygrad master: a loss per row (its picked log-probability and, with smoothing, its mean),
  // so the row max, log-sum-exp and picked logit are reduces over the same rows (one row kernel, see
  // engine/schedule.cpp), then one kernel sums the rows. The mask applies per row: a mask expanded
  // over the classes would be realized as a kernel of its own.
  Tensor log_probs = log_softmax(), loss_mask = Y != ignore_index;
  int64_t nc = shape().back();
  Tensor y_counter = Tensor::arange(nc, Opts{{}, device(), false}).unsqueeze(0).expand({Y.numel(), nc});
  Shape ys = Y.shape();
  ys.push_back(nc);
  Tensor y = (y_counter == Y.flatten().reshape({-1, 1})).reshape(ys);
  Tensor unreduced = (1 - label_smoothing) * (log_probs * y).sum(-1) + label_smoothing * log_probs.mean(-1);
  return -(loss_mask.where(unreduced, 0).sum() / loss_mask.sum());
}

}  // namespace tg
