// Symbolic decode step against fixed shapes (JSON lines): a KV-cache attention step over
// cache[:, :, 0:start_pos+1] (GPT-2 small's heads: H=12, D=64), jitted once with a symbolic
// start_pos, against the same step captured for each fixed length, at several lengths. Both run
// in the same process, interleaved in rounds; each figure is the best round's mean per step.
// Goal (issue 11): symbolic_over_fixed <= 1.1. THREADS=1 gives steadier figures on a shared machine.
// Usage: bench_symbolic [reps=50] [rounds=5] [max=1024]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kv_step.hpp"
#include "tg/tg.hpp"

using namespace tg;
using clk = std::chrono::steady_clock;

namespace {
double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }


template <class F>
double time_per_call(F&& f, int reps, const std::string& dev) {
  Device::synchronize(dev);
  auto t0 = clk::now();
  for (int r = 0; r < reps; r++) f();
  Device::synchronize(dev);
  return secs(t0, clk::now()) / reps;
}
}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50, rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const int64_t MAX = argc > 3 ? std::atoll(argv[3]) : 1024, H = 12, D = 64;
  const std::string dev = Device::default_device();
  Tensor ck = Tensor::zeros({1, H, MAX, D}).contiguous().realize(), cv = Tensor::zeros({1, H, MAX, D}).contiguous().realize();
  Tensor q = Tensor::rand({1, H, 1, D}).realize(), k = Tensor::rand({1, H, 1, D}).realize(), v = Tensor::rand({1, H, 1, D}).realize();
  Variable start_pos("start_pos", 1, MAX - 1);
  TinyJit sym([&](const std::vector<Tensor>& in, const std::vector<Variable>& vars) {
    return std::vector<Tensor>{kv_step(ck, cv, in[0], in[1], in[2], vars[0], H, D)};
  });
  for (int64_t p = 1; p < 4; p++) sym({q, k, v}, {start_pos.bind(p)});   // run, capture, replay
  for (int64_t len : {16, 64, 256, 1024}) {
    if (len > MAX) break;
    const int64_t p = len - 1;
    TinyJit fixed([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{kv_step(ck, cv, in[0], in[1], in[2], sint(p), H, D)}; });
    for (int i = 0; i < 3; i++) fixed({q, k, v}), sym({q, k, v}, {start_pos.bind(p)});
    double ts = 1e30, tf = 1e30;
    for (int r = 0; r < rounds; r++) {
      ts = std::min(ts, time_per_call([&] { sym({q, k, v}, {start_pos.bind(p)}); }, reps, dev));
      tf = std::min(tf, time_per_call([&] { fixed({q, k, v}); }, reps, dev));
    }
    std::printf("{\"bench\": \"symbolic_decode_step\", \"device\": \"%s\", \"len\": %ld, \"heads\": %ld, \"head_dim\": %ld, "
                "\"symbolic_us\": %.2f, \"fixed_us\": %.2f, \"symbolic_over_fixed\": %.3f, \"goal\": 1.1, "
                "\"symbolic_kernels\": %zu, \"fixed_kernels\": %zu}\n",
                dev.c_str(), static_cast<long>(len), static_cast<long>(H), static_cast<long>(D), ts * 1e6, tf * 1e6, ts / tf,
                sym.captured_kernels(), fixed.captured_kernels());
    std::fflush(stdout);
  }
  return 0;
}
