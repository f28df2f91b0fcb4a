#include "tg/nn.hpp"

#include <cmath>

namespace tg::nn {

namespace {
Opts no_grad_opts() { Opts o; o.requires_grad = false; return o; }
void add(NamedTensors& out, const std::string& name, Tensor& t) { out.emplace_back(name, &t); }
void add(NamedTensors& out, const std::string& name, std::optional<Tensor>& t) {
  if (t) out.emplace_back(name, &*t);
}
// (1, C, 1, 1...) so a per-channel vector broadcasts over NC... input
Tensor per_channel(const Tensor& v, int64_t ndim) {
  Shape s(ndim, 1);
  s[1] = -1;
  return v.reshape(s);
}
Shape pair_of(Shape s) { return s.size() == 1 ? Shape{s[0], s[0]} : s; }
}  // namespace

// ---------------------------------------------------------------- Linear
Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias)
    : weight(Tensor::uniform({out_features, in_features}, -1.0 / std::sqrt(double(in_features)), 1.0 / std::sqrt(double(in_features)))) {
  double bound = 1.0 / std::sqrt(double(in_features));
  if (has_bias) bias = Tensor::uniform({out_features}, -bound, bound);
}
Tensor Linear::operator()(const Tensor& x) const { return x.linear(weight.transpose(), bias); }
void Linear::collect(const std::string& p, NamedTensors& out) { add(out, p + "weight", weight); add(out, p + "bias", bias); }

// ---------------------------------------------------------------- Conv2d
static Tensor conv_weight(int64_t a, int64_t b, const Shape& k, int64_t in_channels) {
  Shape ks = pair_of(k);
  double scale = 1.0 / std::sqrt(double(in_channels * prod(ks)));
  Shape s{a, b};
  s.insert(s.end(), ks.begin(), ks.end());
  return Tensor::uniform(s, -scale, scale);
}

// checked before any division by groups (groups=0 would be a SIGFPE, not an error)
static int checked_groups(int64_t in_channels, int64_t out_channels, int groups) {
  if (groups <= 0 || in_channels <= 0 || out_channels <= 0 || in_channels % groups != 0 || out_channels % groups != 0)
    throw Error("nn.Conv2d: in_channels " + std::to_string(in_channels) + " and out_channels " + std::to_string(out_channels) +
                " must be positive and divisible by groups " + std::to_string(groups));
  return groups;
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Shape k, Shape stride_, Shape padding_, Shape dilation_, int groups_,
               bool has_bias)
    : weight(conv_weight(out_channels, in_channels / checked_groups(in_channels, out_channels, groups_), k, in_channels)),
      kernel_size(pair_of(k)), stride(std::move(stride_)), padding(std::move(padding_)), dilation(std::move(dilation_)), groups(groups_) {
  if (has_bias) {
    double scale = 1.0 / std::sqrt(double(in_channels * prod(kernel_size)));
    bias = Tensor::uniform({out_channels}, -scale, scale);
  }
}
Tensor Conv2d::operator()(const Tensor& x) const { return x.conv2d(weight, bias, groups, stride, dilation, padding); }
void Conv2d::collect(const std::string& p, NamedTensors& out) { add(out, p + "weight", weight); add(out, p + "bias", bias); }

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Shape k, Shape stride_, Shape padding_, Shape output_padding_,
                                 Shape dilation_, int groups_, bool has_bias)
    : Conv2d(in_channels, out_channels, k, std::move(stride_), std::move(padding_), std::move(dilation_), groups_, has_bias),
      output_padding(std::move(output_padding_)) {
  weight = conv_weight(in_channels, out_channels / groups_, k, in_channels);
}
Tensor ConvTranspose2d::operator()(const Tensor& x) const {
  return x.conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding);
}

// ---------------------------------------------------------------- BatchNorm
BatchNorm::BatchNorm(int64_t sz, double eps_, bool affine, bool track, double momentum_)
    : eps(eps_), momentum(momentum_), track_running_stats(track),
      running_mean(Tensor::zeros({sz}, no_grad_opts())), running_var(Tensor::ones({sz}, no_grad_opts())),
      num_batches_tracked(Tensor::zeros({1}, no_grad_opts())) {
  if (affine) {
    weight = Tensor::ones({sz});
    bias = Tensor::zeros({sz});
  }
}

Tensor BatchNorm::operator()(const Tensor& x) {
  if (x.ndim() < 2) throw Error("nn.BatchNorm: input must have a channel axis 1, got shape " + to_str(x.shape()));
  if (x.shape()[1] != running_mean.shape()[0])
    throw Error("nn.BatchNorm: input shape " + to_str(x.shape()) + " has " + std::to_string(x.shape()[1]) +
                " channels but the layer was built for " + std::to_string(running_mean.shape()[0]));
  std::vector<int> reduce_axes;
  for (int i = 0; i < x.ndim(); i++)
    if (i != 1) reduce_axes.push_back(i);
  if (!Tensor::training) {
    // expanded so it fuses into the consumer
    Tensor invstd = per_channel(running_var, x.ndim()).expand(x.shape()).add(eps).rsqrt();
    return x.batchnorm(weight, bias, running_mean, invstd);
  }
  Tensor mean = x.mean(reduce_axes);
  Tensor y = x - per_channel(mean.detach(), x.ndim());   // d(var)/d(mean) = 0
  Tensor var = (y * y).mean(reduce_axes);
  if (track_running_stats) {
    double n = double(y.numel()), c = double(y.shape()[1]);
    running_mean.assign((1 - momentum) * running_mean + momentum * mean.detach());
    running_var.assign((1 - momentum) * running_var + momentum * n / (n - c) * var.detach());
    num_batches_tracked.assign(num_batches_tracked + 1);
  }
  return x.batchnorm(weight, bias, mean, (var + eps).rsqrt());
}
void BatchNorm::collect(const std::string& p, NamedTensors& out) {
  add(out, p + "weight", weight);
  add(out, p + "bias", bias);
  add(out, p + "running_mean", running_mean);
  add(out, p + "running_var", running_var);
  add(out, p + "num_batches_tracked", num_batches_tracked);
}

// ---------------------------------------------------------------- norms
LayerNorm::LayerNorm(Shape ns, double eps_, bool affine) : normalized_shape(std::move(ns)), eps(eps_), elementwise_affine(affine) {
  if (affine) {
    weight = Tensor::ones(normalized_shape);
    bias = Tensor::zeros(normalized_shape);
  }
}
Tensor LayerNorm::operator()(const Tensor& x) const {
  size_t n = normalized_shape.size();
  if (size_t(x.ndim()) < n || !std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - n))
    throw Error("nn.LayerNorm: last dimensions of " + to_str(x.shape()) + " must match " + to_str(normalized_shape));
  std::vector<int> axes;
  for (size_t i = 0; i < n; i++) axes.push_back(-1 - int(i));
  Tensor y = x.layernorm(axes, eps);
  return elementwise_affine ? y * *weight + *bias : y;
}
void LayerNorm::collect(const std::string& p, NamedTensors& out) { add(out, p + "weight", weight); add(out, p + "bias", bias); }
Tensor LayerNorm2d::operator()(const Tensor& x) const {
  return LayerNorm::operator()(x.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
}

GroupNorm::GroupNorm(int64_t g, int64_t c, double eps_, bool affine) : num_groups(g), num_channels(c), eps(eps_) {
  if (g <= 0 || c % g != 0)
    throw Error("nn.GroupNorm: num_channels " + std::to_string(c) + " must be divisible by num_groups " + std::to_string(g));
  if (affine) {
    weight = Tensor::ones({c});
    bias = Tensor::zeros({c});
  }
}
// GroupNorm and InstanceNorm: layernorm over each group of channels, then a per-channel affine
static Tensor group_norm(const char* op, const Tensor& x, int64_t channels, int64_t groups, double eps,
                         const std::optional<Tensor>& weight, const std::optional<Tensor>& bias) {
  if (x.ndim() < 2 || x.shape()[1] != channels)
    throw Error(std::string(op) + ": input shape " + to_str(x.shape()) + " must have " + std::to_string(channels) + " channels on axis 1");
  Tensor y = x.reshape({x.shape()[0], groups, -1}).layernorm(-1, eps).reshape(x.shape());
  if (!weight) return y;
  return y * per_channel(*weight, x.ndim()) + per_channel(*bias, x.ndim());
}

Tensor GroupNorm::operator()(const Tensor& x) const {
  return group_norm("nn.GroupNorm", x, num_channels, num_groups, eps, weight, bias);
}
void GroupNorm::collect(const std::string& p, NamedTensors& out) { add(out, p + "weight", weight); add(out, p + "bias", bias); }

InstanceNorm::InstanceNorm(int64_t n, double eps_, bool affine) : num_features(n), eps(eps_) {
  if (affine) {
    weight = Tensor::ones({n});
    bias = Tensor::zeros({n});
  }
}
Tensor InstanceNorm::operator()(const Tensor& x) const {
  return group_norm("nn.InstanceNorm", x, num_features, num_features, eps, weight, bias);
}
void InstanceNorm::collect(const std::string& p, NamedTensors& out) { add(out, p + "weight", weight); add(out, p + "bias", bias); }

RMSNorm::RMSNorm(int64_t dim, double eps_) : eps(eps_), weight(Tensor::ones({dim})) {}
Tensor RMSNorm::operator()(const Tensor& x) const {
  Tensor xf = x.float_();
  return (xf * (xf.square().mean(-1, true) + eps).rsqrt()).cast(x.dtype()) * weight;
}
void RMSNorm::collect(const std::string& p, NamedTensors& out) { add(out, p + "weight", weight); }

// ---------------------------------------------------------------- Embedding
Embedding::Embedding(int64_t v, int64_t e) : vocab_size(v), embed_size(e), weight(Tensor::glorot_uniform({v, e})) {}
Tensor Embedding::operator()(const Tensor& idx) const {
  Shape out = idx.shape();
  out.push_back(embed_size);
  if (idx.numel() == 0) return Tensor::empty(out, Opts{weight.dtype(), weight.device(), {}});
  Shape big = idx.shape();
  big.push_back(vocab_size);
  big.push_back(embed_size);
  Shape ishape = idx.shape();
  ishape.push_back(1);
  ishape.push_back(1);
  Tensor arange = Tensor::arange(vocab_size, Opts{{}, weight.device(), false}).reshape({1, 1, vocab_size, 1});
  Shape ar_shape(idx.ndim(), 1);
  ar_shape.push_back(vocab_size);
  ar_shape.push_back(1);
  Shape w_shape(idx.ndim(), 1);
  w_shape.push_back(vocab_size);
  w_shape.push_back(embed_size);
  Tensor hit = arange.reshape(ar_shape).expand(big) == idx.reshape(ishape).expand(big);
  return (hit * weight.reshape(w_shape).expand(big)).sum(int(idx.ndim()));
}
void Embedding::collect(const std::string& p, NamedTensors& out) { add(out, p + "weight", weight); }

}  // namespace tg::nn
