// tinygrad's beautiful_mnist CNN, shared by examples/beautiful_mnist and bench/bench_train.
#pragma once
#include <string>

#include "tg/tg.hpp"

struct MnistModel : tg::nn::Module {
  tg::nn::Conv2d c1{1, 32, 5}, c2{32, 32, 5};
  tg::nn::BatchNorm bn1{32};
  tg::nn::Conv2d c3{32, 64, 3}, c4{64, 64, 3};
  tg::nn::BatchNorm bn2{64};
  tg::nn::Linear l1{576, 10};

  tg::Tensor operator()(const tg::Tensor& x) {
    tg::Tensor h = bn1(c2(c1(x).relu()).relu()).max_pool2d();
    h = bn2(c4(c3(h).relu()).relu()).max_pool2d();
    return l1(h.flatten(1));
  }
  void collect(const std::string& p, tg::nn::NamedTensors& out) override {
    c1.collect(p + "c1.", out); c2.collect(p + "c2.", out); bn1.collect(p + "bn1.", out);
    c3.collect(p + "c3.", out); c4.collect(p + "c4.", out); bn2.collect(p + "bn2.", out);
    l1.collect(p + "l1.", out);
  }
};

// one training step as beautiful_mnist takes it: forward, sparse categorical cross-entropy, backward, update
inline tg::Tensor train_step(MnistModel& model, tg::nn::optim::Optimizer& opt, const tg::Tensor& x, const tg::Tensor& y) {
  tg::Tensor::Train train;
  opt.zero_grad();
  tg::Tensor loss = model(x).sparse_categorical_crossentropy(y);
  loss.backward();
  opt.step();
  return loss;
}
