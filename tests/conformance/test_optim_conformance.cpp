// Optimizers against libtorch: the same two-layer model, initial weights and data in tg and torch, five
// steps, weights compared after every step. SGD (plain, momentum, nesterov, weight decay), Adam, AdamW
// and an OptimizerGroup against torch::optim; LAMB and LARS (no torch equivalent) against their formulas
// on the host in double, fed with libtorch's gradients at the same weights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tg/tg.hpp"

namespace {

namespace optim = tg::nn::optim;
using Weights = std::vector<std::vector<float>>;   // w1 (4,3), b1 (4), w2 (2,4), b2 (2)

const std::vector<std::vector<int64_t>> kShapes{{4, 3}, {4}, {2, 4}, {2}};
constexpr int kSteps = 5;

std::vector<float> wave(size_t n, double f, double phase, double amp) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = float(amp * std::sin(f * double(i) + phase));
  return v;
}
Weights initial_weights() { return {wave(12, 1.1, 0.3, 0.5), wave(4, 0.7, 1.0, 0.2), wave(8, 1.9, 0.5, 0.5), wave(2, 0.9, 2.0, 0.1)}; }
std::vector<float> data_x() { return wave(18, 0.37, 0.1, 1.0); }   // (6, 3)
std::vector<float> data_y() { return wave(12, 0.53, 0.9, 1.0); }   // (6, 2)

// ---- libtorch side
struct TorchModel {
  std::vector<torch::Tensor> params;
  torch::Tensor x = torch::tensor(data_x()).reshape({6, 3}), y = torch::tensor(data_y()).reshape({6, 2});
  explicit TorchModel(const Weights& w) {
    for (size_t i = 0; i < w.size(); i++) params.push_back(torch::tensor(w[i]).reshape(kShapes[i]).requires_grad_(true));
  }
  torch::Tensor loss() const {
    auto h = torch::relu(torch::matmul(x, params[0].t()) + params[1]);
    return (torch::matmul(h, params[2].t()) + params[3] - y).square().mean();
  }
  Weights weights() const {
    Weights out;
    for (auto& p : params) {
      auto c = p.detach().contiguous();
      out.emplace_back(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    }
    return out;
  }
  // the loss gradients at the current weights
  Weights grads() {
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    loss().backward();
    Weights out;
    for (auto& p : params) {
      auto g = p.grad().contiguous();
      out.emplace_back(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
    }
    return out;
  }
};

// ---- tg side
struct TgModel {
  std::vector<tg::Tensor> params;
  tg::Tensor x = tg::Tensor::from<float>(data_x(), {6, 3}), y = tg::Tensor::from<float>(data_y(), {6, 2});
  explicit TgModel(const Weights& w) {
    for (size_t i = 0; i < w.size(); i++) params.push_back(tg::Tensor::from<float>(w[i], kShapes[i]));
  }
  tg::Tensor loss() const {
    auto h = x.matmul(params[0].T()).add(params[1]).relu();
    return (h.matmul(params[2].T()) + params[3] - y).square().mean();
  }
  Weights weights() const {
    Weights out;
    for (auto& p : params) out.push_back(p.tolist<float>());
    return out;
  }
};

void step_tg(TgModel& m, optim::Optimizer& opt) {
  tg::Tensor::Train train;
  opt.zero_grad();
  m.loss().backward();
  opt.step();
}

void expect_close(const Weights& got, const Weights& want, int step, double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t p = 0; p < got.size(); p++) {
    ASSERT_EQ(got[p].size(), want[p].size());
    for (size_t i = 0; i < got[p].size(); i++)
      EXPECT_NEAR(got[p][i], want[p][i], atol + rtol * std::fabs(want[p][i])) << "step " << step << " param " << p << " element " << i;
  }
}

bool moved(const Weights& a, const Weights& b) {
  for (size_t p = 0; p < a.size(); p++)
    for (size_t i = 0; i < a[p].size(); i++)
      if (a[p][i] != b[p][i]) return true;
  return false;
}

using MakeTg = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<tg::Tensor>&)>;
using MakeTorch = std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<torch::Tensor>&)>;

void run_against_torch(const MakeTg& make_tg, const MakeTorch& make_torch) {
  Weights w0 = initial_weights();
  TorchModel tm(w0);
  TgModel gm(w0);
  auto topt = make_torch(tm.params);
  auto gopt = make_tg(gm.params);
  for (int s = 1; s <= kSteps; s++) {
    topt->zero_grad();
    tm.loss().backward();
    topt->step();
    step_tg(gm, *gopt);
    expect_close(gm.weights(), tm.weights(), s);
  }
  EXPECT_TRUE(moved(gm.weights(), w0));
}

}  // namespace

TEST(OptimConformance, SGDPlain) {
  run_against_torch([](auto& p) { return optim::SGD(p, 0.1); },
                    [](auto& p) { return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1)); });
}

TEST(OptimConformance, SGDMomentum) {
  // tinygrad's default (classic=false) momentum is torch's: b = m*b + g; p -= lr*b
  run_against_torch([](auto& p) { return optim::SGD(p, 0.05, 0.9); },
                    [](auto& p) { return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.05).momentum(0.9)); });
}

TEST(OptimConformance, SGDNesterov) {
  run_against_torch([](auto& p) { return optim::SGD(p, 0.05, 0.8, 0.0, true); },
                    [](auto& p) {
                      return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.05).momentum(0.8).nesterov(true));
                    });
}

TEST(OptimConformance, SGDWeightDecay) {
  run_against_torch([](auto& p) { return optim::SGD(p, 0.1, 0.0, 0.05); },
                    [](auto& p) { return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).weight_decay(0.05)); });
}

TEST(OptimConformance, SGDMomentumNesterovWeightDecay) {
  run_against_torch([](auto& p) { return optim::SGD(p, 0.05, 0.9, 0.01, true); },
                    [](auto& p) {
                      return std::make_unique<torch::optim::SGD>(
                          p, torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0.01));
                    });
}

TEST(OptimConformance, Adam) {
  run_against_torch([](auto& p) { return optim::Adam(p, 0.01); },
                    [](auto& p) { return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01)); });
}

TEST(OptimConformance, AdamBetasEps) {
  run_against_torch([](auto& p) { return optim::Adam(p, 0.02, 0.8, 0.99, 1e-3); },
                    [](auto& p) {
                      return std::make_unique<torch::optim::Adam>(
                          p, torch::optim::AdamOptions(0.02).betas(std::make_tuple(0.8, 0.99)).eps(1e-3));
                    });
}

TEST(OptimConformance, AdamW) {
  run_against_torch([](auto& p) { return optim::AdamW(p, 0.01, 0.9, 0.999, 1e-8, 0.1); },
                    [](auto& p) {
                      return std::make_unique<torch::optim::AdamW>(p, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
                    });
}

TEST(OptimConformance, OptimizerGroupSGDAndAdam) {
  // first layer with SGD + momentum, second with Adam, stepped together
  run_against_torch(
      [](auto& p) {
        std::vector<std::shared_ptr<optim::Optimizer>> os;
        os.push_back(optim::SGD({p[0], p[1]}, 0.05, 0.9));
        os.push_back(optim::Adam({p[2], p[3]}, 0.01));
        return std::make_unique<optim::OptimizerGroup>(os);
      },
      [](auto& p) {
        // torch: one optimizer can't mix kinds, so a tiny wrapper steps two
        struct Two : torch::optim::Optimizer {
          std::unique_ptr<torch::optim::SGD> a;
          std::unique_ptr<torch::optim::Adam> b;
          // the base holds every parameter, so its zero_grad clears them all
          Two(std::vector<torch::Tensor> pa, std::vector<torch::Tensor> pb, std::vector<torch::Tensor> all)
              : torch::optim::Optimizer({torch::optim::OptimizerParamGroup(all)}, std::make_unique<torch::optim::SGDOptions>(0.05)),
                a(std::make_unique<torch::optim::SGD>(pa, torch::optim::SGDOptions(0.05).momentum(0.9))),
                b(std::make_unique<torch::optim::Adam>(pb, torch::optim::AdamOptions(0.01))) {}
          torch::Tensor step(LossClosure) override {
            a->step();
            b->step();
            return {};
          }
        };
        return std::make_unique<Two>(std::vector<torch::Tensor>{p[0], p[1]}, std::vector<torch::Tensor>{p[2], p[3]}, p);
      });
}

// ---- formulas on the host (double), tinygrad's definitions
namespace {

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

struct HostLAMB {
  double lr, b1, b2, eps, wd;
  bool adam;
  int t = 0;
  std::vector<std::vector<double>> m, v;
  void step(std::vector<std::vector<double>>& w, const Weights& g) {
    if (m.empty())
      for (auto& p : w) m.emplace_back(p.size(), 0.0), v.emplace_back(p.size(), 0.0);
    t++;
    for (size_t p = 0; p < w.size(); p++) {
      std::vector<double> up(w[p].size());
      for (size_t i = 0; i < w[p].size(); i++) {
        m[p][i] = b1 * m[p][i] + (1 - b1) * g[p][i];
        v[p][i] = b2 * v[p][i] + (1 - b2) * double(g[p][i]) * g[p][i];
        double mh = m[p][i] / (1 - std::pow(b1, t)), vh = v[p][i] / (1 - std::pow(b2, t));
        up[i] = mh / (std::sqrt(vh) + eps) + wd * w[p][i];
      }
      double r1 = norm(w[p]), r2 = norm(up), r = adam ? 1.0 : (r1 > 0 ? (r2 > 0 ? r1 / r2 : 1.0) : 1.0);
      for (size_t i = 0; i < w[p].size(); i++) w[p][i] -= lr * r * up[i];
    }
  }
};

struct HostLARS {
  double lr, momentum, wd, tcoef;
  bool nesterov, classic;
  std::vector<std::vector<double>> b;
  void step(std::vector<std::vector<double>>& w, const Weights& grad) {
    if (b.empty())
      for (auto& p : w) b.emplace_back(p.size(), 0.0);
    for (size_t p = 0; p < w.size(); p++) {
      std::vector<double> g(grad[p].begin(), grad[p].end());
      double r1 = norm(w[p]), r2 = norm(g);
      double r = tcoef == 0 ? 1.0 : (r1 > 0 ? (r2 > 0 ? tcoef * r1 / (r2 + wd * r1) : 1.0) : 1.0);
      for (size_t i = 0; i < g.size(); i++) {
        double gi = g[i] + wd * w[p][i];
        if (classic) gi *= r * lr;
        if (momentum != 0) {
          b[p][i] = momentum * b[p][i] + gi;
          gi = nesterov ? gi + momentum * b[p][i] : b[p][i];
        }
        if (!classic) gi *= r * lr;
        w[p][i] -= gi;
      }
    }
  }
};

template <class Host>
void run_against_host(optim::Optimizer& gopt, TgModel& gm, Host host, double rtol) {
  Weights w0 = initial_weights();
  std::vector<std::vector<double>> w;
  for (auto& p : w0) w.emplace_back(p.begin(), p.end());
  for (int s = 1; s <= kSteps; s++) {
    // gradients at the host weights, from libtorch
    Weights wf;
    for (auto& p : w) wf.emplace_back(p.begin(), p.end());
    TorchModel tm(wf);
    host.step(w, tm.grads());
    step_tg(gm, gopt);
    Weights want;
    for (auto& p : w) want.emplace_back(p.begin(), p.end());
    expect_close(gm.weights(), want, s, rtol);
  }
  EXPECT_TRUE(moved(gm.weights(), w0));
}

}  // namespace

TEST(OptimConformance, LAMBMatchesFormula) {
  TgModel gm(initial_weights());
  auto opt = std::make_unique<optim::LAMB>(gm.params, 0.01, 0.9, 0.999, 1e-6, 0.01);
  run_against_host(*opt, gm, HostLAMB{0.01, 0.9, 0.999, 1e-6, 0.01, false}, 2e-5);
}

TEST(OptimConformance, LAMBNoWeightDecay) {
  TgModel gm(initial_weights());
  auto opt = std::make_unique<optim::LAMB>(gm.params, 0.05, 0.85, 0.99);
  run_against_host(*opt, gm, HostLAMB{0.05, 0.85, 0.99, 1e-6, 0.0, false}, 2e-5);
}

TEST(OptimConformance, LARSClassicMatchesFormula) {
  TgModel gm(initial_weights());
  auto opt = std::make_unique<optim::LARS>(gm.params, 0.5, 0.9, 1e-4);   // classic, tcoef 0.001
  run_against_host(*opt, gm, HostLARS{0.5, 0.9, 1e-4, 0.001, false, true}, 2e-5);
}

TEST(OptimConformance, LARSNesterovNonClassic) {
  TgModel gm(initial_weights());
  auto opt = std::make_unique<optim::LARS>(gm.params, 20.0, 0.8, 1e-3, true, false, 0.01);
  run_against_host(*opt, gm, HostLARS{20.0, 0.8, 1e-3, 0.01, true, false}, 2e-5);
}

TEST(OptimConformance, LearningRateTensorChangesWithoutNewOptimizer) {
  // lr lives in a tensor: changing it changes the next step like torch's param_groups lr
  Weights w0 = initial_weights();
  TorchModel tm(w0);
  TgModel gm(w0);
  torch::optim::SGD topt(tm.params, torch::optim::SGDOptions(0.1).momentum(0.5));
  auto gopt = optim::SGD(gm.params, 0.1, 0.5);
  for (int s = 1; s <= kSteps; s++) {
    double lr = 0.1 / s;
    static_cast<torch::optim::SGDOptions&>(topt.param_groups()[0].options()).lr(lr);
    gopt->lr->assign(tg::Tensor::full({1}, lr)).realize();
    topt.zero_grad();
    tm.loss().backward();
    topt.step();
    step_tg(gm, *gopt);
    expect_close(gm.weights(), tm.weights(), s);
  }
}
