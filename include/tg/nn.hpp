// tg::nn: layers with tinygrad's default initializations (tinygrad/nn/__init__.py).
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tg/tensor.hpp"

namespace tg::nn {

// A named tensor of a module: a parameter or a buffer (running statistics), by address so that
// loaders and optimizers update the module's own tensor.
using NamedTensors = std::vector<std::pair<std::string, Tensor*>>;

// Anything with state. A user model lists its children in collect():
//   void collect(const std::string& p, NamedTensors& out) override { c1.collect(p + "c1.", out); l1.collect(p + "l1.", out); }
class Module {
 public:
  virtual ~Module() = default;
  virtual void collect(const std::string& prefix, NamedTensors& out) = 0;
  NamedTensors named_tensors(const std::string& prefix = "") { NamedTensors out; collect(prefix, out); return out; }
};

class Linear : public Module {
 public:
  Tensor weight;
  std::optional<Tensor> bias;
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor operator()(const Tensor& x) const;
  void collect(const std::string& prefix, NamedTensors& out) override;
};

class Conv2d : public Module {
 public:
  Tensor weight;
  std::optional<Tensor> bias;
  Shape kernel_size, stride, padding, dilation;
  int groups;
  Conv2d(int64_t in_channels, int64_t out_channels, Shape kernel_size, Shape stride = {1}, Shape padding = {0},
         Shape dilation = {1}, int groups = 1, bool bias = true);
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1, int groups = 1, bool bias = true)
      : Conv2d(in_channels, out_channels, Shape{kernel_size, kernel_size}, Shape{stride}, Shape{padding}, Shape{dilation}, groups, bias) {}
  Tensor operator()(const Tensor& x) const;
  void collect(const std::string& prefix, NamedTensors& out) override;
};

class ConvTranspose2d : public Conv2d {
 public:
  Shape output_padding;
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Shape kernel_size, Shape stride = {1}, Shape padding = {0},
                  Shape output_padding = {0}, Shape dilation = {1}, int groups = 1, bool bias = true);
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
                  int64_t output_padding = 0, int64_t dilation = 1, int groups = 1, bool bias = true)
      : ConvTranspose2d(in_channels, out_channels, Shape{kernel_size, kernel_size}, Shape{stride}, Shape{padding},
                        Shape{output_padding}, Shape{dilation}, groups, bias) {}
  Tensor operator()(const Tensor& x) const;
};

// BatchNorm over axis 1 of a 2d/3d/4d/5d input; running statistics update under Tensor::Train.
class BatchNorm : public Module {
 public:
  double eps, momentum;
  bool track_running_stats;
  std::optional<Tensor> weight, bias;
  Tensor running_mean, running_var, num_batches_tracked;
  explicit BatchNorm(int64_t sz, double eps = 1e-5, bool affine = true, bool track_running_stats = true, double momentum = 0.1);
  Tensor operator()(const Tensor& x);
  void collect(const std::string& prefix, NamedTensors& out) override;
};
using BatchNorm2d = BatchNorm;
using BatchNorm3d = BatchNorm;

class LayerNorm : public Module {
 public:
  Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  std::optional<Tensor> weight, bias;
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true)
      : LayerNorm(Shape{normalized_shape}, eps, elementwise_affine) {}
  Tensor operator()(const Tensor& x) const;
  void collect(const std::string& prefix, NamedTensors& out) override;
};

// LayerNorm over the channels of NCHW input.
class LayerNorm2d : public LayerNorm {
 public:
  using LayerNorm::LayerNorm;
  Tensor operator()(const Tensor& x) const;
};

class GroupNorm : public Module {
 public:
  int64_t num_groups, num_channels;
  double eps;
  std::optional<Tensor> weight, bias;
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor operator()(const Tensor& x) const;
  void collect(const std::string& prefix, NamedTensors& out) override;
};

class InstanceNorm : public Module {
 public:
  int64_t num_features;
  double eps;
  std::optional<Tensor> weight, bias;
  explicit InstanceNorm(int64_t num_features, double eps = 1e-5, bool affine = true);
  Tensor operator()(const Tensor& x) const;
  void collect(const std::string& prefix, NamedTensors& out) override;
};

class RMSNorm : public Module {
 public:
  double eps;
  Tensor weight;
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  Tensor operator()(const Tensor& x) const;
  void collect(const std::string& prefix, NamedTensors& out) override;
};

class Embedding : public Module {
 public:
  int64_t vocab_size, embed_size;
  Tensor weight;
  Embedding(int64_t vocab_size, int64_t embed_size);
  Tensor operator()(const Tensor& idx) const;
  void collect(const std::string& prefix, NamedTensors& out) override;
};

}  // namespace tg::nn
