// tg::TinyJit: run a function of Tensors once normally, capture its kernels on the second call,
// and replay them on later calls with the new input buffers (no scheduling, no codegen).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tg/tensor.hpp"

namespace tg {

class TinyJit {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  explicit TinyJit(Fn fn);
  // Inputs must keep their shapes, dtypes and devices across calls: a change throws tg::Error.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs = {});
  void reset();                      // forget the capture; the next call runs normally again
  int cnt() const;                   // calls so far (0: none, 1: ran once, 2+: captured)
  size_t captured_kernels() const;   // ExecItems replayed per call
 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace tg
