// bench_ops: op-level timings against libtorch in the same run, printed as JSON lines.
//   softmax over the last axis of a 4096x4096 float32 tensor (tg, torch, and the memory bound:
//     2 passes over 64 MiB, one read and one write, measured with a threaded memcpy loop);
//     log_softmax and layernorm over the same tensor against the same bound
//   conv2d forward + backward, input (512,32,24,24), weight (32,32,5,5) (tg, torch)
// Times are the median of warm iterations; cold_ms is the first tg iteration (kernel compiles).
// BENCH_ITERS sets the warm iteration count (default 5). Without libtorch the torch lines are absent.
#include <tg/tg.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#ifdef TG_BENCH_TORCH
#include <torch/torch.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Timed { double cold_ms, ms; };

// first call separately (compilation, allocation), then the median of `iters` calls
Timed time_it(int iters, const std::function<void()>& fn) {
  auto t0 = Clock::now();
  fn();
  double cold = ms_since(t0);
  std::vector<double> ts;
  for (int i = 0; i < iters; i++) {
    t0 = Clock::now();
    fn();
    ts.push_back(ms_since(t0));
  }
  std::sort(ts.begin(), ts.end());
  return {cold, ts[ts.size() / 2]};
}

void line(const std::string& bench, const std::string& impl, const std::string& extra, double ms) {
  std::printf("{\"bench\": \"%s\", \"impl\": \"%s\", %s\"ms\": %.3f}\n", bench.c_str(), impl.c_str(), extra.c_str(), ms);
  std::fflush(stdout);
}

// Best time to read `bytes` and write `bytes` once with all hardware threads: the floor for any
// op that must read its input and write its output once.
double memcpy_bound_ms(size_t bytes, int iters) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  auto pass = [&] {
    std::vector<std::thread> th;
    size_t chunk = (bytes + nt - 1) / nt;
    for (unsigned t = 0; t < nt; t++) {
      size_t lo = t * chunk, hi = std::min(bytes, lo + chunk);
      if (lo < hi) th.emplace_back([&, lo, hi] { std::memcpy(dst.data() + lo, src.data() + lo, hi - lo); });
    }
    for (auto& x : th) x.join();
  };
  pass();   // fault in both buffers
  double best = 1e30;
  for (int i = 0; i < iters; i++) {
    auto t0 = Clock::now();
    pass();
    best = std::min(best, ms_since(t0));
  }
  if (dst[bytes / 2] != 1) std::printf("memcpy check failed\n");
  return best;
}

// host-generated uniform [0, 1) data: the same numbers go to tg and torch
std::vector<float> host_rand(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(s >> 40) / static_cast<float>(1 << 24);
  }
  return v;
}

void bench_softmax(int iters) {
  const int64_t n = 4096;
  const size_t bytes = n * n * sizeof(float);
  const std::string dims = "\"shape\": [4096, 4096], ";
  double bound = memcpy_bound_ms(bytes, 2 * iters);
  line("softmax", "membw_bound", dims + "\"bytes_moved\": " + std::to_string(2 * bytes) + ", \"gbps\": " +
       std::to_string(2.0 * bytes / (bound * 1e6)) + ", ", bound);

  std::vector<float> data = host_rand(n * n, 1);
  tg::Tensor x = tg::Tensor::from(data, {n, n}).realize();
  Timed t = time_it(iters, [&] { x.softmax(-1).realize(); });
  line("softmax", "tg", dims + "\"device\": \"" + x.device() + "\", \"cold_ms\": " + std::to_string(t.cold_ms) +
       ", \"x_bound\": " + std::to_string(t.ms / bound) + ", ", t.ms);
  // the same row reductions over the same data, each against the same read-once/write-once bound
  for (const std::string op : {"log_softmax", "layernorm"}) {
    Timed to = time_it(iters, [&] { (op == "log_softmax" ? x.log_softmax(-1) : x.layernorm()).realize(); });
    line(op, "tg", dims + "\"device\": \"" + x.device() + "\", \"cold_ms\": " + std::to_string(to.cold_ms) +
         ", \"x_bound\": " + std::to_string(to.ms / bound) + ", ", to.ms);
  }

#ifdef TG_BENCH_TORCH
  torch::Tensor tx = torch::from_blob(data.data(), {n, n}).clone();
  Timed tt = time_it(iters, [&] { torch::Tensor y = torch::softmax(tx, -1); });
  line("softmax", "torch", dims + "\"threads\": " + std::to_string(torch::get_num_threads()) + ", \"x_bound\": " +
       std::to_string(tt.ms / bound) + ", ", tt.ms);
#endif
}

void bench_conv(int iters) {
  const std::string dims = "\"input\": [512, 32, 24, 24], \"weight\": [32, 32, 5, 5], ";
  // forward 2*N*Cout*OH*OW*Cin*KH*KW flops; backward computes two such products (dx, dw)
  const double gflop = 3 * 2.0 * 512 * 32 * 20 * 20 * 32 * 25 / 1e9;
  std::vector<float> xd = host_rand(512 * 32 * 24 * 24, 2), wd = host_rand(32 * 32 * 5 * 5, 3);
  tg::Tensor x = tg::Tensor::from(xd, {512, 32, 24, 24}, {.requires_grad = true}).realize();
  tg::Tensor w = tg::Tensor::from(wd, {32, 32, 5, 5}, {.requires_grad = true}).realize();
  Timed t = time_it(iters, [&] {
    x.set_grad(std::nullopt);
    w.set_grad(std::nullopt);
    x.conv2d(w).sum().backward();
    x.grad()->realize({*w.grad()});
  });
  line("conv2d_fwd_bwd", "tg", dims + "\"device\": \"" + x.device() + "\", \"cold_ms\": " + std::to_string(t.cold_ms) +
       ", \"gflops\": " + std::to_string(gflop / (t.ms / 1e3)) + ", ", t.ms);

#ifdef TG_BENCH_TORCH
  torch::Tensor tx = torch::from_blob(xd.data(), {512, 32, 24, 24}).clone().requires_grad_(true);
  torch::Tensor tw = torch::from_blob(wd.data(), {32, 32, 5, 5}).clone().requires_grad_(true);
  Timed tt = time_it(iters, [&] {
    tx.mutable_grad() = torch::Tensor();
    tw.mutable_grad() = torch::Tensor();
    torch::conv2d(tx, tw).sum().backward();
  });
  line("conv2d_fwd_bwd", "torch", dims + "\"threads\": " + std::to_string(torch::get_num_threads()) + ", \"gflops\": " +
       std::to_string(gflop / (tt.ms / 1e3)) + ", ", tt.ms);
#endif
}

}  // namespace

int main() {
  int iters = std::max<int>(1, static_cast<int>(tg::getenv("BENCH_ITERS", 5)));
  bench_softmax(iters);
  bench_conv(iters);
  return 0;
}
