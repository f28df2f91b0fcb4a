// bench_rows: the CPU row kernels (softmax, log_softmax, layernorm, cross-entropy) and Tensor::rand
// against the memory bound measured in the same run, with THREADS=1 and with all cores. JSON lines.
//   bound: one pass that reads the input once and writes the output once (y = 2*x, bench/limits),
//     only reads it for a reduction to a scalar (cross-entropy), or only writes the output (rand),
//     on the same thread count.
//   ms / cpu_ms: the median wall time of a realize() and the process CPU time it took (all threads);
//     on a machine shared with other work the CPU time ratio (x_bound_cpu) is the steadier figure.
// BENCH_ITERS sets the iterations per round (default 5); the best round of BENCH_ROUNDS (default 2)
// is kept, for the bound and the kernels alike.
#include <tg/tg.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "limits.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double cpu_now_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

struct Timed { double ms = 1e30, cpu_ms = 1e30, cold_ms = 0; };

// median wall time and mean CPU time of `iters` calls after a first (compiling) one
Timed time_it(int iters, const std::function<void()>& fn) {
  Timed r;
  auto t0 = Clock::now();
  fn();
  r.cold_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::vector<double> ts;
  const double c0 = cpu_now_ms();
  for (int i = 0; i < iters; i++) {
    t0 = Clock::now();
    fn();
    ts.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  r.cpu_ms = (cpu_now_ms() - c0) / iters;
  std::sort(ts.begin(), ts.end());
  r.ms = ts[ts.size() / 2];
  return r;
}

struct Workload {
  std::string name;
  std::vector<int64_t> shape;
  tgbench::Pass pass;   // the memory traffic at the least
  std::function<tg::Tensor()> run;
};

std::string shape_json(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

int main() {
  const int iters = std::max<int>(1, static_cast<int>(tg::getenv("BENCH_ITERS", 5)));
  const int rounds = std::max<int>(1, static_cast<int>(tg::getenv("BENCH_ROUNDS", 2)));
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));

  tg::Tensor sq = tg::Tensor::rand({4096, 4096}).realize();
  tg::Tensor ln = tg::Tensor::rand({8192, 1024}).realize();
  tg::Tensor labels = (tg::Tensor::rand({4096}) * 4095.f).cast(tg::dtypes::int32).realize();
  std::vector<Workload> ws = {
      {"softmax", {4096, 4096}, tgbench::Pass::read_write, [&] { return sq.softmax(-1); }},
      {"log_softmax", {4096, 4096}, tgbench::Pass::read_write, [&] { return sq.log_softmax(-1); }},
      {"layernorm", {8192, 1024}, tgbench::Pass::read_write, [&] { return ln.layernorm(); }},
      {"cross_entropy", {4096, 4096}, tgbench::Pass::read, [&] { return sq.sparse_categorical_crossentropy(labels); }},
      {"rand", {int64_t{1} << 24}, tgbench::Pass::write, [] { return tg::Tensor::rand({int64_t{1} << 24}); }},
  };

  for (int threads : {1, cores}) {
    tg::Context ctx({{"THREADS", threads}});
    for (const Workload& w : ws) {
      size_t bytes = sizeof(float);
      for (int64_t d : w.shape) bytes *= size_t(d);
      tgbench::PassTime bound{1e30, 1e30};
      Timed t;
      for (int r = 0; r < rounds; r++) {   // alternate the bound and the kernel: both see the same load
        tgbench::PassTime b = tgbench::stream_pass(bytes, w.pass, threads, iters);
        bound.wall_ms = std::min(bound.wall_ms, b.wall_ms);
        bound.cpu_ms = std::min(bound.cpu_ms, b.cpu_ms);
        Timed tr = time_it(iters, [&] { w.run().realize(); });
        if (r == 0) t.cold_ms = tr.cold_ms;
        t.ms = std::min(t.ms, tr.ms);
        t.cpu_ms = std::min(t.cpu_ms, tr.cpu_ms);
      }
      std::printf("{\"bench\": \"%s\", \"shape\": %s, \"threads\": %d, \"ms\": %.3f, \"cpu_ms\": %.3f, \"cold_ms\": %.1f, "
                  "\"bound\": \"%s\", \"bound_ms\": %.3f, \"bound_cpu_ms\": %.3f, \"x_bound\": %.2f, \"x_bound_cpu\": %.2f}\n",
                  w.name.c_str(), shape_json(w.shape).c_str(), threads, t.ms, t.cpu_ms, t.cold_ms,
                  w.pass == tgbench::Pass::read_write ? "read+write once (y=2x)" : w.pass == tgbench::Pass::read ? "read once (sum)" : "write once (fill)", bound.wall_ms, bound.cpu_ms,
                  t.ms / bound.wall_ms, t.cpu_ms / bound.cpu_ms);
      std::fflush(stdout);
    }
  }
  return 0;
}
