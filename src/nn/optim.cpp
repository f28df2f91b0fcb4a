#include "tg/optim.hpp"

#include <algorithm>

#include "access.hpp"

namespace tg::nn::optim {

namespace {
Opts state_opts(const Tensor& like, std::optional<DType> dt = {}) {
  Opts o;
  o.dtype = dt ? *dt : like.dtype();
  o.device = like.device();
  o.requires_grad = false;
  return o;
}
void dedup_push(std::vector<Tensor>& v, const Tensor& t) {
  for (auto& x : v)
    if (Access::impl(x) == Access::impl(t)) return;
  v.push_back(t);
}
}  // namespace

Optimizer::Optimizer(const std::vector<Tensor>& ps, double lr_) {
  for (auto p : ps) {
    if (!p.requires_grad_opt().has_value()) p.requires_grad_(true);
    if (p.requires_grad()) dedup_push(params, p);
    else dedup_push(buffers, p);
  }
  if (params.empty()) throw Error("optim: an optimizer needs at least one parameter with requires_grad");
  // lr lives in a buffer (at least float32) so it can change without recompiling the step; a const
  // would be folded into the kernels, and a TinyJit replay would keep the captured value
  lr = Tensor::full({1}, lr_, state_opts(params[0], least_upper_dtype(dtypes::default_float(), dtypes::float32))).contiguous().realize();
}

void Optimizer::zero_grad() {
  for (auto& p : params) p.set_grad(std::nullopt);
}

std::vector<Tensor> Optimizer::schedule_step() {
  if (!Tensor::training)
    throw Error("optim.step: Tensor::training is false; wrap the training loop in a Tensor::Train scope");
  std::vector<Tensor> out = step_();
  out.insert(out.end(), params.begin(), params.end());
  out.insert(out.end(), buffers.begin(), buffers.end());
  return out;
}

void Optimizer::step() {
  std::vector<Tensor> ts = schedule_step();
  Tensor first = ts[0];
  first.realize(std::vector<Tensor>(ts.begin() + 1, ts.end()));
}

// ---------------------------------------------------------------- LARS / SGD
LARS::LARS(const std::vector<Tensor>& ps, double lr_, double momentum_, double wd_, bool nesterov_, bool classic_, double tcoef_)
    : Optimizer(ps, lr_), momentum(momentum_), wd(wd_), tcoef(tcoef_), nesterov(nesterov_), classic(classic_) {
  if (momentum != 0)
    for (auto& t : params) b.push_back(Tensor::zeros(t.shape(), state_opts(t)).contiguous());
}

std::vector<Tensor> LARS::step_() {
  for (size_t i = 0; i < params.size(); i++) {
    Tensor& t = params[i];
    auto grad = t.grad();
    if (!grad) throw Error("optim.step: parameter " + std::to_string(i) + " of shape " + to_str(t.shape()) + " has no grad; call backward() first");
    Tensor g = grad->contiguous();
    Tensor r = Tensor(1.0, Opts{{}, t.device(), false});   // on the parameter's device, not the default one
    if (tcoef != 0) {
      Tensor r1 = t.detach().square().sum().sqrt();
      Tensor r2 = g.square().sum().sqrt();
      r = (r1 > 0).where((r2 > 0).where(tcoef * r1 / (r2 + wd * r1), 1.0), 1.0);
    }
    g = g + wd * t.detach();
    if (classic) g = g * r * *lr;
    if (momentum != 0) {
      b[i].assign(momentum * b[i] + g);
      g = nesterov ? g + momentum * b[i] : b[i];
    }
    if (!classic) g = g * r * *lr;
    t.assign((t.detach() - g).cast(t.dtype()));
  }
  return b;
}

// ---------------------------------------------------------------- LAMB / Adam / AdamW
LAMB::LAMB(const std::vector<Tensor>& ps, double lr_, double b1_, double b2_, double eps_, double wd_, bool adam_)
    : Optimizer(ps, lr_), b1(b1_), b2(b2_), eps(eps_), wd(wd_), adam(adam_),
      b1_t(Tensor::ones({1}, state_opts(params[0], dtypes::float32)).contiguous().realize()),
      b2_t(Tensor::ones({1}, state_opts(params[0], dtypes::float32)).contiguous().realize()) {
  for (auto& t : params) {
    m.push_back(Tensor::zeros(t.shape(), state_opts(t, dtypes::float32)).contiguous());
    v.push_back(Tensor::zeros(t.shape(), state_opts(t, dtypes::float32)).contiguous());
  }
}

std::vector<Tensor> LAMB::step_() {
  b1_t.assign(b1_t * b1);
  b2_t.assign(b2_t * b2);
  for (size_t i = 0; i < params.size(); i++) {
    Tensor& t = params[i];
    auto grad = t.grad();
    if (!grad) throw Error("optim.step: parameter " + std::to_string(i) + " of shape " + to_str(t.shape()) + " has no grad; call backward() first");
    m[i].assign(b1 * m[i] + (1.0 - b1) * *grad);
    v[i].assign(b2 * v[i] + (1.0 - b2) * (*grad * *grad));
    Tensor m_hat = m[i] / (1.0 - b1_t);
    Tensor v_hat = v[i] / (1.0 - b2_t);
    Tensor up = (m_hat / (v_hat.sqrt() + eps)) + wd * t.detach();
    Tensor r = Tensor(1.0, Opts{{}, t.device(), false});   // on the parameter's device, not the default one
    if (!adam) {
      Tensor r1 = t.detach().square().sum().sqrt();
      Tensor r2 = up.square().sum().sqrt();
      r = (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0);
    }
    t.assign((t.detach() - *lr * r * up).cast(t.dtype()));
  }
  std::vector<Tensor> out{b1_t, b2_t};
  out.insert(out.end(), m.begin(), m.end());
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

// ---------------------------------------------------------------- group
OptimizerGroup::OptimizerGroup(std::vector<std::shared_ptr<Optimizer>> opts) : optimizers(std::move(opts)) {
  for (auto& o : optimizers) {
    params.insert(params.end(), o->params.begin(), o->params.end());
    buffers.insert(buffers.end(), o->buffers.begin(), o->buffers.end());
  }
}
std::vector<Tensor> OptimizerGroup::step_() {
  std::vector<Tensor> out;
  for (auto& o : optimizers) {
    auto s = o->step_();
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

std::unique_ptr<LARS> SGD(const std::vector<Tensor>& ps, double lr, double momentum, double wd, bool nesterov, bool classic) {
  return std::make_unique<LARS>(ps, lr, momentum, wd, nesterov, classic, 0.0);
}
std::unique_ptr<LAMB> Adam(const std::vector<Tensor>& ps, double lr, double b1, double b2, double eps) {
  return std::make_unique<LAMB>(ps, lr, b1, b2, eps, 0.0, true);
}
std::unique_ptr<LAMB> AdamW(const std::vector<Tensor>& ps, double lr, double b1, double b2, double eps, double wd) {
  return std::make_unique<LAMB>(ps, lr, b1, b2, eps, wd, true);
}

}  // namespace tg::nn::optim
