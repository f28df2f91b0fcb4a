// bench_profile: what PROFILE=1 costs on jitted training steps (the goal: at most 10%), as JSON
// lines. Each step is timed with PROFILE off and on in alternating blocks within the same run,
// so the machine's load affects both alike; the ratio on/off is the figure.
//   mlp:   a tiny MLP + SGD step (4-8-3, bs 4): per-kernel overhead dominates, the worst case
//   mnist: beautiful_mnist's CNN + Adam step at batch BS (default 32)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "engine/profile.hpp"
#include "mnist_model.hpp"
#include "tg/tg.hpp"

using namespace tg;
using clk = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// per-call seconds with PROFILE off and on: blocks of n calls, alternating, median of the blocks
std::pair<double, double> time_off_on(const std::function<void()>& step, int n, int blocks) {
  for (int i = 0; i < 3; i++) step();   // capture and warm up
  std::vector<double> off, on;
  for (int b = 0; b < 2 * blocks; b++) {
    const bool prof = b % 2 == 1;
    Context ctx({{"PROFILE", prof ? 1 : 0}});
    auto t = clk::now();
    for (int i = 0; i < n; i++) step();
    (prof ? on : off).push_back(std::chrono::duration<double>(clk::now() - t).count() / n);
    profile::clear();   // events would pile up (and be written at exit)
  }
  return {median(off), median(on)};
}

void report(const char* what, int64_t kernels, std::pair<double, double> r) {
  std::printf("{\"bench\":\"profile_overhead\",\"what\":\"%s\",\"kernels_per_step\":%lld,\"off_us\":%.1f,\"on_us\":%.1f,"
              "\"ratio\":%.3f,\"limit_ratio\":1.10}\n",
              what, (long long)kernels, r.first * 1e6, r.second * 1e6, r.second / r.first);
  std::fflush(stdout);
}

}  // namespace

int main() {
  try {
    {
      Tensor::manual_seed(2);
      nn::Linear l1(4, 8), l2(8, 3);
      auto opt = nn::optim::SGD({l1.weight, *l1.bias, l2.weight, *l2.bias}, 0.01, 0.9);
      TinyJit jit([&](const std::vector<Tensor>& in) {
        Tensor::Train train;
        opt->zero_grad();
        Tensor loss = l2(l1(in[0]).relu()).sparse_categorical_crossentropy(in[1]);
        loss.backward();
        opt->step();
        return std::vector<Tensor>{loss};
      });
      Tensor x = Tensor::randn({4, 4}).realize(), y = Tensor::from<int32_t>({0, 1, 2, 1}, {4}).realize();
      auto r = time_off_on([&] { jit({x, y}); }, 200, 7);
      report("tiny MLP (4-8-3) + SGD momentum step, TinyJit replay", static_cast<int64_t>(jit.captured_kernels()), r);
    }
    {
      const int64_t bs = getenv("BS", 32);
      Tensor::manual_seed(1);
      MnistModel model;
      auto opt = nn::optim::Adam(nn::state::get_parameters(model));
      TinyJit jit([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{train_step(model, *opt, in[0], in[1])}; });
      Tensor x = Tensor::randn({bs, 1, 28, 28}).realize(), y = Tensor::randint({bs}, 0, 10).realize();
      auto r = time_off_on([&] { jit({x, y}); }, 3, 5);
      report("beautiful_mnist CNN + Adam step, TinyJit replay", static_cast<int64_t>(jit.captured_kernels()), r);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_profile: %s\n", e.what());
    return 1;
  }
  return 0;
}
