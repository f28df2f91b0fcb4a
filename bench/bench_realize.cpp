// Framework overhead, the cold compile path, and elementwise/reduce bandwidth (JSON lines).
// Compare the GB/s figures with bench_limits run in the same session (scripts/bench runs it first).
#include <chrono>
#include <cstdio>
#include <vector>

#include "runtime/device.hpp"
#include "tg/tg.hpp"

using namespace tg;
using clk = std::chrono::steady_clock;

static double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }

int main() {
  std::string dev = Device::default_device();
  // 1. overhead: a tiny graph whose kernels are cached; everything else is our own work
  {
    Tensor a = Tensor::from(std::vector<float>(16, 1.5f), {16}).realize();
    for (int i = 0; i < 20; i++) ((a + 1) * 2).sum().item<float>();
    int n = 2000;
    auto t = clk::now();
    float acc = 0;
    for (int i = 0; i < n; i++) acc += ((a + 1) * 2).sum().item<float>();
    double us = secs(t) / n * 1e6;
    std::printf("{\"bench\":\"overhead\",\"what\":\"((a+1)*2).sum().item() on 16 floats, kernels cached\",\"us_per_iter\":%.2f,\"device\":\"%s\",\"check\":%g}\n",
                us, dev.c_str(), acc / n);
  }
  // 2. cold path: a new elementwise kernel each time (a fresh constant), no disk cache
  {
    Context ctx({{"CACHELEVEL", 0}});
    Tensor a = Tensor::from(std::vector<float>(1024, 1.0f), {1024}).realize();
    auto& compiler = get_device(dev).compiler();
    int n = 10;
    double total = 0, compile = 0;
    for (int i = 0; i < n; i++) {
      double c0 = compiler.compile_seconds;
      auto t = clk::now();
      (a * (3.0 + i * 0.001) + 7).realize();
      total += secs(t);
      compile += compiler.compile_seconds - c0;
    }
    std::printf("{\"bench\":\"cold_kernel\",\"what\":\"schedule+codegen+compile+run of a new elementwise kernel\",\"ms\":%.2f,\"ours_ms\":%.2f,\"cc_ms\":%.2f}\n",
                total / n * 1e3, (total - compile) / n * 1e3, compile / n * 1e3);
  }
  // 3. bandwidth: a*b+1 and sum on 2^24 float32
  {
    int64_t N = int64_t{1} << 24;
    Tensor a = Tensor::rand({N}).realize(), b = Tensor::rand({N}).realize();
    auto best = [&](auto fn) {
      double bt = 1e9;
      for (int r = 0; r < 6; r++) {
        auto t = clk::now();
        fn();
        Device::synchronize(dev);
        bt = std::min(bt, secs(t));
      }
      return bt;
    };
    double te = best([&] { (a * b + 1).realize(); });
    std::printf("{\"bench\":\"elementwise\",\"what\":\"a*b+1, 2^24 fp32 (3 streams)\",\"GBps\":%.2f,\"ms\":%.3f}\n", 3.0 * 4 * N / te / 1e9, te * 1e3);
    double ts = best([&] { a.sum().realize(); });
    std::printf("{\"bench\":\"sum\",\"what\":\"sum of 2^24 fp32\",\"GBps\":%.2f,\"ms\":%.3f}\n", 4.0 * N / ts / 1e9, ts * 1e3);
  }
  return 0;
}
