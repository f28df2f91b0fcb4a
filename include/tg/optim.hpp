// tg::nn::optim: optimizers whose step runs as fused kernels assigning into the parameters' buffers.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "tg/tensor.hpp"

namespace tg::nn::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  void zero_grad();
  void step();                                   // realizes schedule_step() in one schedule
  std::vector<Tensor> schedule_step();           // the tensors to realize; requires Tensor::training
  std::vector<Tensor> params, buffers;
  std::optional<Tensor> lr;                      // a 1-element tensor, so changing it needs no recompile
 protected:
  Optimizer() = default;
  Optimizer(const std::vector<Tensor>& params, double lr);
  virtual std::vector<Tensor> step_() = 0;
  friend class OptimizerGroup;
};

// LARS with tcoef=0 is SGD (tinygrad).
class LARS : public Optimizer {
 public:
  LARS(const std::vector<Tensor>& params, double lr = 0.001, double momentum = 0.9, double weight_decay = 1e-4,
       bool nesterov = false, bool classic = true, double tcoef = 0.001);
  double momentum, wd, tcoef;
  bool nesterov, classic;
  std::vector<Tensor> b;
 protected:
  std::vector<Tensor> step_() override;
};

// LAMB with adam=true is Adam/AdamW (tinygrad).
class LAMB : public Optimizer {
 public:
  LAMB(const std::vector<Tensor>& params, double lr = 0.001, double b1 = 0.9, double b2 = 0.999, double eps = 1e-6,
       double weight_decay = 0.0, bool adam = false);
  double b1, b2, eps, wd;
  bool adam;
  Tensor b1_t, b2_t;
  std::vector<Tensor> m, v;
 protected:
  std::vector<Tensor> step_() override;
};

class OptimizerGroup : public Optimizer {
 public:
  explicit OptimizerGroup(std::vector<std::shared_ptr<Optimizer>> optimizers);
  std::vector<std::shared_ptr<Optimizer>> optimizers;
 protected:
  std::vector<Tensor> step_() override;
};

std::unique_ptr<LARS> SGD(const std::vector<Tensor>& params, double lr = 0.001, double momentum = 0.0,
                          double weight_decay = 0.0, bool nesterov = false, bool classic = false);
std::unique_ptr<LAMB> Adam(const std::vector<Tensor>& params, double lr = 0.001, double b1 = 0.9, double b2 = 0.999,
                           double eps = 1e-8);
std::unique_ptr<LAMB> AdamW(const std::vector<Tensor>& params, double lr = 0.001, double b1 = 0.9, double b2 = 0.999,
                            double eps = 1e-8, double weight_decay = 0.01);

}  // namespace tg::nn::optim
