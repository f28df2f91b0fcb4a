// TinyJit replay cost and symbolic decode steps (JSON lines).
//   jit_replay: a captured function of N tiny kernels (16 floats each), replayed with its input
//     alternating between two buffers (so each replay updates an argument); one line per device
//     (CPU, and CUDA when present) and mode: JIT=2 (kernel by kernel) and JIT=1 (device graphs:
//     CUDA graphs, the CPU's call list). In the same run:
//       replay_us_per_kernel   wall time of a replay / N (steady state, device synchronized; the
//                              fastest of 5 chunks, as the machine may be shared)
//       host_us_per_kernel     the host's time in the replay calls / N (before the synchronize)
//       device_us_per_kernel   the kernels' own time / N: the smaller median of PROFILE=1 replays
//                              kernel by kernel (each kernel timed alone: the call on CPU, device
//                              events on CUDA, which there include the GPU's wait for the launch)
//                              and by graph (each graph's calls on CPU, events around each CUDA
//                              graph: its kernels back to back on the GPU); the same for both modes
//       overhead_us_per_kernel replay - device: what the replay adds to the kernels
//       eager_us_per_kernel    the same function run eagerly (schedule + method cache + run)
//   decode: a KV-cache attention step over cache[:, :, 0:start_pos+1], jitted once with a
//           symbolic start_pos, against the same step captured separately for each fixed length.
// Usage: bench_jit [kernels=100] [reps=200] [replay|decode|all=all]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/profile.hpp"
#include "engine/replay.hpp"
#include "runtime/device.hpp"
#include "kv_step.hpp"
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


// replay cost per kernel on one device, JIT=2 then JIT=1
void bench_replay(const std::string& dev, int n, int reps) {
  Tensor x0 = Tensor::rand({16}, {.device = dev}).realize(), x1 = Tensor::rand({16}, {.device = dev}).realize();
  TinyJit jf([n](const std::vector<Tensor>& in) { return chain(in, n); });
  bool match = false;
  {
    Context m{{"JIT", 2}};   // graphs are built in the JIT=1 pass below
    for (int i = 0; i < 3; i++) jf({i % 2 ? x1 : x0});
    // the replay computes what the function computes
    match = jf({x1})[0].tolist<float>() == chain({x1}, n)[0].tolist<float>();
  }
  Device::synchronize(dev);
  auto t1 = clk::now();
  const int eager_reps = reps / 10 + 1;
  for (int r = 0; r < eager_reps; r++) chain({x0}, n);
  Device::synchronize(dev);
  const double eager = secs(t1, clk::now()) / eager_reps;
  struct Mode { int64_t jit, graphs; double replay, host, profiled; };
  std::vector<Mode> modes;
  for (int64_t mode : {2, 1}) {
    Context m{{"JIT", mode}};
    const int64_t built0 = GraphStats::built;
    for (int i = 0; i < 4; i++) jf({i % 2 ? x1 : x0});   // warm; JIT=1 builds its graphs here
    double replay = 1e30, host = 1e30;
    for (int chunk = 0; chunk < 5; chunk++) {
      Device::synchronize(dev);
      auto t0 = clk::now();
      for (int r = 0; r < reps / 5 + 1; r++) jf({r % 2 ? x1 : x0});
      auto th = clk::now();
      Device::synchronize(dev);
      replay = std::min(replay, secs(t0, clk::now()) / (reps / 5 + 1));
      host = std::min(host, secs(t0, th) / (reps / 5 + 1));
    }
    double profiled = 0;
    {
      Context p{{"PROFILE", 1}};
      std::vector<double> per;
      for (int r = 0; r < reps / 4 + 1; r++) {
        const double s0 = GlobalCounters::time_sum_s;
        jf({r % 2 ? x1 : x0});
        per.push_back(GlobalCounters::time_sum_s - s0);
      }
      std::nth_element(per.begin(), per.begin() + static_cast<long>(per.size() / 2), per.end());
      profiled = per[per.size() / 2];
      profile::clear();   // no trace file at exit
    }
    modes.push_back({mode, GraphStats::built - built0, replay, host, profiled});
  }
  double kernels = 1e30;
  for (const Mode& m : modes) kernels = std::min(kernels, m.profiled);
  for (const Mode& m : modes) {
    std::printf("{\"bench\": \"jit_replay\", \"device\": \"%s\", \"jit_mode\": %ld, \"graphs\": %ld, \"kernels\": %zu, "
                "\"replay_us_per_kernel\": %.3f, \"host_us_per_kernel\": %.3f, \"device_us_per_kernel\": %.3f, "
                "\"overhead_us_per_kernel\": %.3f, \"eager_us_per_kernel\": %.3f, \"eager_over_replay\": %.1f, \"match_eager\": %s}\n",
                dev.c_str(), static_cast<long>(m.jit), static_cast<long>(m.graphs), jf.captured_kernels(), m.replay / n * 1e6,
                m.host / n * 1e6, kernels / n * 1e6, (m.replay - kernels) / n * 1e6, eager / n * 1e6, eager / m.replay, match ? "true" : "false");
    std::fflush(stdout);
  }
}
}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100, reps = argc > 2 ? std::atoi(argv[2]) : 200;
  const std::string what = argc > 3 ? argv[3] : "all";
  const std::string dev = Device::default_device();

  if (what == "all" || what == "replay") {
    bench_replay("CPU", n, reps);
    if (cuda_device_count() > 0) bench_replay("CUDA", n, reps);
  }
  if (what != "all" && what != "decode") return 0;

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
