// TinyJit replay cost and symbolic decode steps (JSON lines).
//   replay: a captured function of N tiny kernels, replayed; us per kernel, against the same
//           function run eagerly (schedule + lookup + run) in the same process.
//   decode: a KV-cache attention step over cache[:, :, 0:start_pos+1], jitted once with a
//           symbolic start_pos, against the same step captured separately for each fixed length.
// Usage: bench_jit [kernels=100] [reps=200]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tg/tg.hpp"

using namespace tg;
using clk = std::chrono::steady_clock;

namespace {
double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::vector<Tensor> chain(const std::vector<Tensor>& in, int n) {
  Tensor x = in[0];
  for (int i = 0; i < n; i++) x = (x * 1.0001 + 1).realize();   // one kernel each
  return {x};
}

// the decode step of bench/tests: write k/v at sp, attend over the first sp+1 positions
Tensor kv_step(Tensor& ck, Tensor& cv, const Tensor& q, const Tensor& k, const Tensor& v, const sint& sp, int64_t H, int64_t D) {
  ck.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sp, sp + 1}, {sint(0), sint(D)}}).assign(k).realize();
  cv.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sp, sp + 1}, {sint(0), sint(D)}}).assign(v).realize();
  Tensor keys = ck.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), sp + 1}, {sint(0), sint(D)}});
  Tensor values = cv.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), sp + 1}, {sint(0), sint(D)}});
  return q.scaled_dot_product_attention(keys, values);
}
}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100, reps = argc > 2 ? std::atoi(argv[2]) : 200;
  const std::string dev = Device::default_device();

  // ---- replay cost per kernel
  {
    Tensor x = Tensor::rand({16}).realize();
    TinyJit jf([n](const std::vector<Tensor>& in) { return chain(in, n); });
    for (int i = 0; i < 3; i++) jf({x});
    Device::synchronize(dev);
    auto t0 = clk::now();
    for (int r = 0; r < reps; r++) jf({x});
    Device::synchronize(dev);
    double replay = secs(t0, clk::now()) / reps;
    chain({x}, n);   // warm the method cache for the eager run
    auto t1 = clk::now();
    for (int r = 0; r < reps / 10 + 1; r++) chain({x}, n);
    Device::synchronize(dev);
    double eager = secs(t1, clk::now()) / (reps / 10 + 1);
    std::printf("{\"bench\": \"jit_replay\", \"device\": \"%s\", \"kernels\": %zu, \"replay_us_per_kernel\": %.3f, "
                "\"eager_us_per_kernel\": %.3f, \"eager_over_replay\": %.2f, \"jit_mode\": %ld}\n",
                dev.c_str(), jf.captured_kernels(), replay / n * 1e6, eager / n * 1e6, eager / replay, static_cast<long>(getenv("JIT", 1)));
    std::fflush(stdout);
  }

  // ---- symbolic decode step vs fixed-shape steps
  {
    const int64_t H = 12, D = 64, MAX = 256;
    Tensor ck = Tensor::zeros({1, H, MAX, D}).contiguous().realize(), cv = Tensor::zeros({1, H, MAX, D}).contiguous().realize();
    Tensor q = Tensor::rand({1, H, 1, D}).realize(), k = Tensor::rand({1, H, 1, D}).realize(), v = Tensor::rand({1, H, 1, D}).realize();
    Variable start_pos("start_pos", 1, MAX - 1);
    TinyJit sym([&](const std::vector<Tensor>& in, const std::vector<Variable>& vars) {
      return std::vector<Tensor>{kv_step(ck, cv, in[0], in[1], in[2], vars[0], H, D)};
    });
    for (int64_t p = 1; p < 4; p++) sym({q, k, v}, {start_pos.bind(p)});
    for (int64_t len : {32, 128, 255}) {
      const int64_t p = len - 1;
      for (int i = 0; i < 3; i++) sym({q, k, v}, {start_pos.bind(p)});
      Device::synchronize(dev);
      auto t0 = clk::now();
      for (int r = 0; r < reps; r++) sym({q, k, v}, {start_pos.bind(p)});
      Device::synchronize(dev);
      double ts = secs(t0, clk::now()) / reps;
      TinyJit fixed([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{kv_step(ck, cv, in[0], in[1], in[2], sint(p), H, D)}; });
      for (int i = 0; i < 3; i++) fixed({q, k, v});
      Device::synchronize(dev);
      auto t1 = clk::now();
      for (int r = 0; r < reps; r++) fixed({q, k, v});
      Device::synchronize(dev);
      double tf = secs(t1, clk::now()) / reps;
      std::printf("{\"bench\": \"decode_step\", \"device\": \"%s\", \"len\": %ld, \"symbolic_us\": %.2f, \"fixed_us\": %.2f, "
                  "\"symbolic_over_fixed\": %.3f, \"symbolic_kernels\": %zu, \"fixed_kernels\": %zu}\n",
                  dev.c_str(), static_cast<long>(len), ts * 1e6, tf * 1e6, ts / tf, sym.captured_kernels(), fixed.captured_kernels());
      std::fflush(stdout);
    }
  }
  return 0;
}
