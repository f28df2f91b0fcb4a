// A small conv net trained for a few Adam steps on CUDA and on the CPU from the same seed: the initial
// weights, the losses, every gradient and the updated weights must agree. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "runtime/device.hpp"
#include "tg/tg.hpp"
#include "mnist_model.hpp"

using namespace tg;

namespace {

struct Cfg {
  bool bn = true, pool = true, adam = true, two_convs = true;
  std::string str() const {
    return std::string(bn ? "bn" : "no-bn") + (pool ? ",pool" : ",no-pool") + (adam ? ",adam" : ",sgd") + (two_convs ? ",2conv" : ",1conv");
  }
};

struct SmallNet : nn::Module {
  Cfg cfg;
  nn::Conv2d c1{1, 8, 3}, c2{8, 8, 3};
  nn::BatchNorm bn{8};
  nn::Linear l1;
  explicit SmallNet(Cfg c) : cfg(c), l1(8 * (c.two_convs ? 8 : 10) * (c.two_convs ? 8 : 10) / (c.pool ? 4 : 1), 10) {}
  Tensor operator()(const Tensor& x) {
    Tensor h = c1(x).relu();
    if (cfg.two_convs) h = c2(h).relu();
    if (cfg.bn) h = bn(h);
    if (cfg.pool) h = h.max_pool2d();
    return l1(h.flatten(1));
  }
  void collect(const std::string& p, nn::NamedTensors& out) override {
    c1.collect(p + "c1.", out);
    if (cfg.two_convs) c2.collect(p + "c2.", out);
    if (cfg.bn) bn.collect(p + "bn.", out);
    l1.collect(p + "l1.", out);
  }
};

// "" when CUDA's values are within atol + rtol*|cpu| of the CPU's, else where and how they first differ
std::string differs(const std::vector<float>& gpu, const std::vector<float>& cpu, double atol, double rtol) {
  if (gpu.size() != cpu.size()) return "size " + std::to_string(gpu.size()) + " vs " + std::to_string(cpu.size());
  for (size_t i = 0; i < cpu.size(); i++)
    if (!(std::fabs(gpu[i] - cpu[i]) <= atol + rtol * std::fabs(cpu[i])))
      return "[" + std::to_string(i) + "]: CUDA " + std::to_string(gpu[i]) + ", CPU " + std::to_string(cpu[i]);
  return "";
}

using Trace = std::vector<std::pair<std::string, std::vector<float>>>;   // in the order computed

// what one device computes: initial weights, per step the loss and the gradients, final weights
Trace train_on(const std::string& device, int steps, Cfg cfg = {}) {
  setenv("DEVICE", device.c_str(), 1);
  Tensor::manual_seed(7);
  SmallNet net(cfg);
  auto params = nn::state::get_parameters(net);
  std::unique_ptr<nn::optim::Optimizer> opt;
  // eps 1e-4, not 1e-8: a conv bias whose channel stays positive through relu into BatchNorm has a
  // gradient that is zero up to rounding noise, and a tiny eps turns the noise's sign into a +-lr step
  if (cfg.adam) opt = nn::optim::Adam(params, 0.001, 0.9, 0.999, 1e-4);
  else opt = nn::optim::SGD(params, 0.01f, 0.9f);
  Trace t;
  for (auto& [k, v] : nn::state::get_state_dict(net)) t.emplace_back("init." + k, v.to("CPU").cast(dtypes::float32).tolist<float>());
  std::vector<float> xs(32 * 12 * 12);
  std::vector<int32_t> ys(32);
  for (size_t i = 0; i < xs.size(); i++) xs[i] = float(std::sin(0.37 * double(i)));
  for (size_t i = 0; i < ys.size(); i++) ys[i] = int32_t((i * 7) % 10);
  Tensor X = Tensor::from<float>(xs, {32, 1, 12, 12}), Y = Tensor::from<int32_t>(ys, {32});
  for (int s = 0; s < steps; s++) {
    Tensor::Train train;
    opt->zero_grad();
    Tensor loss = net(X).sparse_categorical_crossentropy(Y);
    loss.backward();
    // read before the step: afterwards the unrealized gradients would be recomputed from updated weights
    t.emplace_back("loss." + std::to_string(s), loss.to("CPU").tolist<float>());
    for (auto& [k, v] : nn::state::get_state_dict(net))
      if (auto g = v.grad()) t.emplace_back("grad." + std::to_string(s) + "." + k, g->to("CPU").tolist<float>());
    opt->step();
    for (auto& [k, v] : nn::state::get_state_dict(net))
      t.emplace_back("after." + std::to_string(s) + "." + k, v.to("CPU").cast(dtypes::float32).tolist<float>());
  }
  for (auto& [k, v] : nn::state::get_state_dict(net)) t.emplace_back("final." + k, v.to("CPU").cast(dtypes::float32).tolist<float>());
  unsetenv("DEVICE");
  return t;
}

}  // namespace

TEST(CudaTrain, StepsOfAConvNetMatchTheCPU) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA here";
  for (Cfg cfg : {Cfg{}, Cfg{false}, Cfg{true, false}, Cfg{true, true, false}, Cfg{true, true, true, false}}) {
    Trace cpu = train_on("CPU", 3, cfg), gpu = train_on("CUDA", 3, cfg);
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t n = 0; n < cpu.size(); n++) {
      const auto& [k, want] = cpu[n];
      ASSERT_EQ(gpu[n].first, k);
      const double tol = k.rfind("grad.", 0) == 0 || k.rfind("loss.", 0) == 0 ? 1e-3 : 2e-5;   // weights move by ~lr=1e-3 a step
      std::string m = differs(gpu[n].second, want, tol, tol);
      ASSERT_EQ(m, "") << cfg.str() << " " << k;
    }
  }
}

// reduces over the axis sets a conv net's backward uses, on shapes big enough for grouped/local reduces
TEST(CudaTrain, ReducesMatchTheCPU) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA here";
  const Shape shape{32, 8, 8, 8};
  std::vector<float> xs(32 * 8 * 8 * 8);
  for (size_t i = 0; i < xs.size(); i++) xs[i] = float(std::cos(0.11 * double(i)));
  const std::vector<std::vector<int>> axes{{0}, {1}, {3}, {0, 2, 3}, {1, 2, 3}, {2, 3}, {0, 1, 2, 3}};
  for (const auto& ax : axes) {
    auto on = [&](const std::string& d) {
      Tensor x = Tensor::from<float>(xs, shape, Opts{{}, d, {}});
      return std::make_pair(x.sum(Axes(ax)).to("CPU").template tolist<float>(), x.max(Axes(ax)).to("CPU").template tolist<float>());
    };
    auto [s_cpu, m_cpu] = on("CPU");
    auto [s_gpu, m_gpu] = on("CUDA");
    EXPECT_EQ(differs(s_gpu, s_cpu, 1e-3, 1e-4), "") << "sum over axes " << ax.size() << "," << ax[0];
    EXPECT_EQ(differs(m_gpu, m_cpu, 0, 0), "") << "max over axes " << ax.size() << "," << ax[0];
  }
}

// the gradients each layer of the net above passes down, to its input and to a per-channel bias
TEST(CudaTrain, LayerGradientsMatchTheCPU) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA here";
  const Shape shape{8, 4, 10, 10};
  std::vector<float> xs(8 * 4 * 10 * 10), ws(xs.size()), bs{0.1f, -0.2f, 0.3f, 0.05f};
  for (size_t i = 0; i < xs.size(); i++) xs[i] = float(std::sin(0.29 * double(i))), ws[i] = float(std::cos(0.13 * double(i)));
  using F = Tensor (*)(const Tensor&);
  const std::vector<std::pair<std::string, F>> fns{
      {"relu", [](const Tensor& x) { return x.relu(); }},
      {"max_pool2d", [](const Tensor& x) { return x.max_pool2d().pad({{0, 0}, {0, 0}, {0, 5}, {0, 5}}); }},
      {"max", [](const Tensor& x) { return x.max(Axes{2, 3}, true).expand({8, 4, 10, 10}); }},
      {"flatten", [](const Tensor& x) { return x.flatten(1).reshape({8, 4, 10, 10}); }},
      {"batchnorm", [](const Tensor& x) {
         Tensor m = x.mean(Axes{0, 2, 3}, true), v = (x - m).square().mean(Axes{0, 2, 3}, true);
         return (x - m) * (v + 1e-5).rsqrt();
       }},
      {"logsoftmax", [](const Tensor& x) { return x.log_softmax(1); }},
      {"batchnorm_scaled", [](const Tensor& x) {
         Tensor w = Tensor::arange(4, Opts{dtypes::float32, x.device(), {}}).reshape({1, 4, 1, 1}) * 0.5f + 0.25f;
         Tensor m = x.mean(Axes{0, 2, 3}, true), v = (x - m).square().mean(Axes{0, 2, 3}, true);
         return (x - m) * (v + 1e-5).rsqrt() * w;
       }},
  };
  for (auto& [name, f] : fns) {
    auto on = [&, f = f](const std::string& d) {
      Tensor x = Tensor::from<float>(xs, shape, Opts{{}, d, true}), w = Tensor::from<float>(ws, shape, Opts{{}, d, {}});
      Tensor b = Tensor::from<float>(bs, {1, 4, 1, 1}, Opts{{}, d, true});
      (f(x + b) * w).sum().backward();
      return std::make_pair(x.grad()->to("CPU").tolist<float>(), b.grad()->to("CPU").tolist<float>());
    };
    auto cpu = on("CPU"), gpu = on("CUDA");
    EXPECT_EQ(differs(gpu.first, cpu.first, 1e-3, 1e-3), "") << name << " grad of x";
    EXPECT_EQ(differs(gpu.second, cpu.second, 1e-3, 1e-3), "") << name << " grad of bias";
  }
}

// a per-axis vector broadcast over 4-d and 5-d tensors (more dims than the GPU's launch dims), with reduces
TEST(CudaTrain, BroadcastsMatchTheCPU) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA here";
  for (const Shape& shape : {Shape{32, 8, 8, 8}, Shape{4, 3, 5, 7, 2}, Shape{64, 32, 12, 12}}) {
    std::vector<float> xs(size_t(prod(shape)));
    for (size_t i = 0; i < xs.size(); i++) xs[i] = float(std::sin(0.17 * double(i)));
    for (size_t a = 0; a < shape.size(); a++) {
      Shape vs(shape.size(), 1);
      vs[a] = shape[a];
      auto on = [&](const std::string& d) {
        Tensor x = Tensor::from<float>(xs, shape, Opts{{}, d, {}});
        Tensor s = Tensor::arange(shape[a], Opts{dtypes::float32, d, {}}).reshape(vs) * 0.25f + 1;
        Tensor y = x * s + s;
        return std::make_pair(y.to("CPU").tolist<float>(), (y * s).sum(Axes{0, 2}).to("CPU").tolist<float>());
      };
      auto cpu = on("CPU"), gpu = on("CUDA");
      EXPECT_EQ(differs(gpu.first, cpu.first, 1e-4, 0), "") << to_str(shape) << " axis " << a;
      EXPECT_EQ(differs(gpu.second, cpu.second, 1e-2, 1e-4), "") << to_str(shape) << " axis " << a << " sum";
    }
  }
}

// the batch sampling of beautiful_mnist: randint draws and the uint8 row gather they index
TEST(CudaTrain, RandintAndGatherMatchTheCPU) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA here";
  const int64_t rows = 6000, cols = 784;
  std::vector<uint8_t> h(size_t(rows * cols));
  for (size_t i = 0; i < h.size(); i++) h[i] = uint8_t((i * 2654435761u) >> 24);
  auto on = [&](const std::string& d) {
    Tensor::manual_seed(5);
    Tensor X = Tensor::from<uint8_t>(h, {rows, cols}, Opts{{}, d, {}}).realize();
    std::vector<std::vector<int32_t>> draws;
    std::vector<std::vector<uint8_t>> batches;
    for (int i = 0; i < 3; i++) {
      Tensor s = Tensor::randint({512}, 0, rows, Opts{dtypes::int32, d, {}}).realize();
      draws.push_back(s.to("CPU").tolist<int32_t>());
      batches.push_back(X[{s}].to("CPU").tolist<uint8_t>());
    }
    return std::make_pair(draws, batches);
  };
  auto cpu = on("CPU"), gpu = on("CUDA");
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(gpu.first[i], cpu.first[i]) << "draw " << i;
    for (int32_t v : cpu.first[i]) ASSERT_TRUE(v >= 0 && v < rows) << v;
    EXPECT_EQ(gpu.second[i], cpu.second[i]) << "batch " << i;
  }
}

// Adam alone, and the example's model on a uint8 batch with uint8 labels as beautiful_mnist feeds it
TEST(CudaTrain, AdamAndTheMnistModelMatchTheCPU) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA here";
  auto adam_on = [](const std::string& d) {
    Tensor p = Tensor::arange(1000, Opts{dtypes::float32, d, true}) * 0.001f;
    p.realize();
    auto opt = nn::optim::Adam({p});
    Tensor c = Tensor::arange(1000, Opts{dtypes::float32, d, {}}).sin() * 100;
    c.realize();
    for (int i = 0; i < 3; i++) {
      opt->zero_grad();
      (p * p * c).sum().backward();
      opt->step();
    }
    return p.to("CPU").tolist<float>();
  };
  Tensor::Train train;
  auto a_cpu = adam_on("CPU"), a_gpu = adam_on("CUDA");
  EXPECT_EQ(differs(a_gpu, a_cpu, 1e-5, 0), "") << "adam param";

  std::vector<uint8_t> xs(32 * 28 * 28), ys(32);
  for (size_t i = 0; i < xs.size(); i++) xs[i] = uint8_t((i * 2654435761u) >> 24);
  for (size_t i = 0; i < ys.size(); i++) ys[i] = uint8_t(i % 10);
  auto model_on = [&](const std::string& d) {
    setenv("DEVICE", d.c_str(), 1);
    Tensor::manual_seed(9);
    MnistModel m;
    auto opt = nn::optim::SGD(nn::state::get_parameters(m), 0.01);
    Tensor X = Tensor::from<uint8_t>(xs, {32, 1, 28, 28}), Y = Tensor::from<uint8_t>(ys, {32});
    std::vector<float> losses;
    for (int i = 0; i < 3; i++) losses.push_back(train_step(m, *opt, X, Y).to("CPU").item<float>());
    unsetenv("DEVICE");
    return std::make_pair(losses, m.l1.weight.to("CPU").tolist<float>());
  };
  auto m_cpu = model_on("CPU"), m_gpu = model_on("CUDA");
  EXPECT_EQ(differs(m_gpu.first, m_cpu.first, 1e-3, 0), "") << "losses";
  EXPECT_EQ(differs(m_gpu.second, m_cpu.second, 1e-4, 0), "") << "l1.weight";
}

// nn::BatchNorm in training with loaded (non-uniform) weight and bias, behind relu and before max_pool2d
TEST(CudaTrain, BatchNormModuleGradientsMatchTheCPU) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA here";
  std::vector<float> xs(8 * 4 * 10 * 10), ws(8 * 4 * 5 * 5);
  for (size_t i = 0; i < xs.size(); i++) xs[i] = float(std::sin(0.29 * double(i)));
  for (size_t i = 0; i < ws.size(); i++) ws[i] = float(std::cos(0.13 * double(i)));
  auto on = [&](const std::string& d) {
    setenv("DEVICE", d.c_str(), 1);
    nn::BatchNorm bn(4);
    bn.weight->assign(Tensor::from<float>({0.5f, 1.5f, 2.f, 0.7f}, {4})).realize();
    bn.bias->assign(Tensor::from<float>({0.1f, -0.2f, 0.f, 0.3f}, {4})).realize();
    bn.weight->requires_grad_(true), bn.bias->requires_grad_(true);
    Tensor x = Tensor::from<float>(xs, {8, 4, 10, 10}, Opts{{}, {}, true});
    Tensor::Train train;
    (bn(x.relu()).max_pool2d() * Tensor::from<float>(ws, {8, 4, 5, 5})).sum().backward();
    auto r = std::make_tuple(x.grad()->to("CPU").tolist<float>(), bn.weight->grad()->to("CPU").tolist<float>(),
                             bn.bias->grad()->to("CPU").tolist<float>());
    unsetenv("DEVICE");
    return r;
  };
  auto [xc, wc, bc] = on("CPU");
  auto [xg, wg, bg] = on("CUDA");
  EXPECT_EQ(differs(wg, wc, 1e-3, 1e-3), "") << "weight grad";
  EXPECT_EQ(differs(bg, bc, 1e-3, 1e-3), "") << "bias grad";
  EXPECT_EQ(differs(xg, xc, 1e-3, 1e-3), "") << "x grad";
}
