// Symbolic decode step against fixed shapes (JSON lines): a KV-cache attention step over
// cache[:, :, 0:start_pos+1] (GPT-2 small's heads: H=12, D=64), jitted once with a symbolic
// start_pos, against the same step captured for each fixed length, at several lengths. Both run
// in the same process, interleaved in rounds; each figure is the best round's mean per step, in wall
// time and in process CPU time (steadier on a loaded machine: leaves out waiting for a core).
// Goal (issue 11): symbolic_over_fixed <= 1.1. THREADS=1 gives steadier figures on a shared machine.
// Usage: bench_symbolic [reps=50] [rounds=5] [max=1024]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <ctime>
#include <utility>
#include <string>

#include "kv_step.hpp"
#include "tg/tg.hpp"

using namespace tg;
using clk = std::chrono::steady_clock;

namespace {
double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }


double cpu_secs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// (wall, process CPU) seconds per call: on a loaded machine the CPU time leaves out the time the
// process waits for a core
template <class F>
std::pair<double, double> time_per_call(F&& f, int reps, const std::string& dev) {
  Device::synchronize(dev);
  auto t0 = clk::now();
  const double c0 = cpu_secs();
  for (int r = 0; r < reps; r++) f();
  Device::synchronize(dev);
  return {secs(t0, clk::now()) / reps, (cpu_secs() - c0) / reps};
}

// A step of `fn` at start_pos len-1: the symbolic capture (replayed with the value) against the same
// step captured at that fixed position, interleaved in rounds. One JSON line.
using StepFn = std::function<Tensor(const std::vector<Tensor>&, const sint&)>;
void compare(const char* bench, TinyJit& sym, const StepFn& fn, const std::vector<Tensor>& in, const Variable& start_pos, int64_t len,
             int reps, int rounds, const std::string& dev, int64_t H, int64_t D) {
  const int64_t p = len - 1;
  TinyJit fixed([&](const std::vector<Tensor>& x) { return std::vector<Tensor>{fn(x, sint(p))}; });
  for (int i = 0; i < 3; i++) fixed(in), sym(in, {start_pos.bind(p)});
  double ts = 1e30, tf = 1e30, cs = 1e30, cf = 1e30;
  for (int r = 0; r < rounds; r++) {
    auto [ws, c_s] = time_per_call([&] { sym(in, {start_pos.bind(p)}); }, reps, dev);
    auto [wf, c_f] = time_per_call([&] { fixed(in); }, reps, dev);
    ts = std::min(ts, ws), tf = std::min(tf, wf), cs = std::min(cs, c_s), cf = std::min(cf, c_f);
  }
  std::printf("{\"bench\": \"%s\", \"device\": \"%s\", \"len\": %ld, \"heads\": %ld, \"head_dim\": %ld, "
              "\"symbolic_us\": %.2f, \"fixed_us\": %.2f, \"symbolic_over_fixed\": %.3f, \"symbolic_cpu_us\": %.2f, "
              "\"fixed_cpu_us\": %.2f, \"cpu_symbolic_over_fixed\": %.3f, \"goal\": 1.1, \"symbolic_kernels\": %zu, \"fixed_kernels\": %zu}\n",
              bench, dev.c_str(), static_cast<long>(len), static_cast<long>(H), static_cast<long>(D), ts * 1e6, tf * 1e6, ts / tf, cs * 1e6,
              cf * 1e6, cs / cf, sym.captured_kernels(), fixed.captured_kernels());
  std::fflush(stdout);
}
}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50, rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const int64_t MAX = argc > 3 ? std::atoll(argv[3]) : 1024, H = 12, D = 64;
  const std::string dev = Device::default_device();
  Tensor ck = Tensor::zeros({1, H, MAX, D}).contiguous().realize(), cv = Tensor::zeros({1, H, MAX, D}).contiguous().realize();
  Tensor q = Tensor::rand({1, H, 1, D}).realize(), k = Tensor::rand({1, H, 1, D}).realize(), v = Tensor::rand({1, H, 1, D}).realize();
  Variable start_pos("start_pos", 1, MAX - 1);
  // the whole step (2 cache writes, attention), and its q @ keys^T alone (the kernel with a symbolic output axis)
  const StepFn step = [&](const std::vector<Tensor>& in, const sint& sp) { return kv_step(ck, cv, in[0], in[1], in[2], sp, H, D); };
  const StepFn scores = [&](const std::vector<Tensor>& in, const sint& sp) {
    return in[0].matmul(ck.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), sp + 1}, {sint(0), sint(D)}}).transpose(-1, -2));
  };
  for (auto [name, fn] : {std::pair<const char*, const StepFn*>{"symbolic_decode_step", &step}, {"symbolic_decode_scores", &scores}}) {
    const StepFn& f = *fn;
    TinyJit sym([&](const std::vector<Tensor>& in, const std::vector<Variable>& vars) { return std::vector<Tensor>{f(in, vars[0])}; });
    for (int64_t p = 1; p < 4; p++) sym({q, k, v}, {start_pos.bind(p)});   // run, capture, replay
    for (int64_t len : {16, 64, 256, 1024})
      if (len <= MAX) compare(name, sym, f, {q, k, v}, start_pos, len, reps, rounds, dev, H, D);
  }
  return 0;
}
