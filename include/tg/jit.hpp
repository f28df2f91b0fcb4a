// tg::TinyJit: run a function of Tensors once normally, capture its kernels on the second call,
// and replay them on later calls with the new input buffers (no scheduling, no codegen).
// Bound Variables (passed in `vars`, or held in the inputs' symbolic dims) may take a new value on
// every call: the replay passes the values to the same kernels, and outputs get the new shapes.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tg/tensor.hpp"

namespace tg {

class TinyJit {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  using FnV = std::function<std::vector<Tensor>(const std::vector<Tensor>&, const std::vector<Variable>&)>;
  explicit TinyJit(Fn fn);
  explicit TinyJit(FnV fn);
  // Inputs must keep their shapes (symbolic dims: the same expressions), dtypes and devices across
  // calls, and the same set of variables: a change throws tg::Error.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs = {});
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs, const std::vector<Variable>& vars);
  void reset();                      // forget the capture; the next call runs normally again
  int cnt() const;                   // calls so far (0: none, 1: ran once, 2+: captured)
  size_t captured_kernels() const;   // ExecItems replayed per call
 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace tg
