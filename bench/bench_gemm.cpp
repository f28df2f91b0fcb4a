// GEMM and conv2d on the GPU (JSON lines): tinygrad.cpp's kernels for the cases of issue 12, timed
// with device events (median of REPS runs after a warm-up), plus the first-call time of a new GEMM
// (schedule + codegen + NVRTC + load, with the disk cache off). bench/gemm_vs_torch.sh runs torch on
// the same cases in the same call and prints ratios. CASES=gemm_fp16_4096,... picks cases; REPS (default 20).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "codegen/kernel.hpp"
#include "engine/realize.hpp"
#include "engine/schedule.hpp"
#include "runtime/device.hpp"
#include "tg/tg.hpp"

using namespace tg;
using clk = std::chrono::steady_clock;

namespace {

struct Case {
  std::string name;
  std::string kind;   // gemm | conv
  int64_t m, k, n;    // gemm sizes; conv: batch, cin, cout
  DType dt;
};

bool wanted(const std::string& name) {
  const std::string sel = getenv_str("CASES");
  if (sel.empty()) return true;
  std::stringstream ss(sel);
  for (std::string s; std::getline(ss, s, ',');)
    if (s == name) return true;
  return false;
}

// the one kernel that computes t (its last KERNEL item), lowered: opts, name and a runner
ExecItem lower_last_kernel(const Tensor& t, std::vector<ScheduleItem>& rest) {
  std::vector<ScheduleItem> sched = t.schedule();
  size_t last = sched.size();
  for (size_t i = 0; i < sched.size(); i++)
    if (sched[i].kind == MetaOps::KERNEL) last = i;
  if (last == sched.size()) throw Error("bench_gemm: no kernel scheduled");
  for (size_t i = 0; i < last; i++) rest.push_back(sched[i]);
  return lower_schedule_item(sched[last]);
}

// random values in [-1, 1) made on the host and copied over (cheap at 4096^2; no zeros: they can time faster)
Tensor host_rand(Shape shape, DType dt, const std::string& dev, double scale = 1.0) {
  static uint64_t state = 0x9E3779B97F4A7C15ull;
  std::vector<float> v(prod(shape));
  for (float& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(scale * (static_cast<double>(state >> 40) / static_cast<double>(1ull << 23) - 1.0));
  }
  return Tensor::from(v, std::move(shape), {.device = dev}).cast(dt).realize();
}

void run_case(const Case& c, int reps) {
  const std::string dev = "CUDA";
  std::optional<Tensor> out;
  double flops = 0;
  if (c.kind == "gemm") {
    Tensor a = host_rand({c.m, c.k}, c.dt, dev), b = host_rand({c.k, c.n}, c.dt, dev);
    out = a.matmul(b);
    flops = 2.0 * c.m * c.n * c.k;
  } else {
    // x: (batch, cin, 14, 14), w: (cout, cin, 3, 3), padding 1
    Tensor x = host_rand({c.m, c.k, 14, 14}, c.dt, dev), w = host_rand({c.n, c.k, 3, 3}, c.dt, dev, 0.05);
    out = x.conv2d(w, std::nullopt, 1, {1}, {1}, {1});
    flops = 2.0 * c.m * c.n * 14 * 14 * c.k * 9;
  }
  std::vector<ScheduleItem> before;
  ExecItem ei = lower_last_kernel(*out, before);
  run_schedule(before);   // any input kernels (conv's padding view is fused; a cast may not be)
  auto* cr = dynamic_cast<CompiledRunner*>(ei.prg.get());
  std::vector<double> ts;
  ei.run({}, true);   // warm-up
  for (int i = 0; i < reps; i++) ts.push_back(*ei.run({}, true, false, false));
  std::sort(ts.begin(), ts.end());
  const double med = ts[ts.size() / 2];
  std::string opts;
  if (cr) opts = cr->p.name;
  std::printf("{\"bench\":\"%s\",\"impl\":\"tinygrad.cpp\",\"kind\":\"%s\",\"dtype\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld,"
              "\"median_ms\":%.4f,\"min_ms\":%.4f,\"tflops\":%.2f,\"kernel\":\"%s\"}\n",
              c.name.c_str(), c.kind.c_str(), c.dt.name().c_str(), (long long)c.m, (long long)c.k, (long long)c.n, med * 1e3,
              ts[0] * 1e3, flops / med / 1e12, to_function_name(opts).c_str());
  std::fflush(stdout);
}

// schedule + codegen + NVRTC + module load of a GEMM never seen before (disk cache off), and its first run
void first_call() {
  Context ctx({{"CACHELEVEL", 0}});
  Tensor a = host_rand({1536, 1536}, dtypes::half, "CUDA"), b = host_rand({1536, 1536}, dtypes::half, "CUDA");
  Device::synchronize("CUDA");
  const auto t0 = clk::now();
  Tensor c = a.matmul(b).realize();
  Device::synchronize("CUDA");
  const double s = std::chrono::duration<double>(clk::now() - t0).count();
  std::printf("{\"bench\":\"first_call_gemm_fp16_1536\",\"impl\":\"tinygrad.cpp\",\"ms\":%.1f}\n", s * 1e3);
  std::fflush(stdout);
}

}  // namespace

int main() {
  if (cuda_device_count() == 0) {
    std::printf("{\"bench\":\"gemm\",\"skipped\":\"no CUDA device\"}\n");
    return 0;
  }
  const int reps = static_cast<int>(getenv("REPS", 20));
  if (wanted("first_call")) first_call();
  const std::vector<Case> cases = {
      {"gemm_fp16_4096", "gemm", 4096, 4096, 4096, dtypes::half},   {"gemm_bf16_4096", "gemm", 4096, 4096, 4096, dtypes::bfloat16},
      {"gemm_fp16_2048", "gemm", 2048, 2048, 2048, dtypes::half},   {"gemm_fp16_1024", "gemm", 1024, 1024, 1024, dtypes::half},
      {"gemm_fp32_4096", "gemm", 4096, 4096, 4096, dtypes::float32}, {"conv2d_fp16_64x256x14", "conv", 64, 256, 256, dtypes::half},
  };
  for (const Case& c : cases) {
    if (!wanted(c.name)) continue;
    try {
      run_case(c, reps);
    } catch (const std::exception& e) {
      std::printf("{\"bench\":\"%s\",\"impl\":\"tinygrad.cpp\",\"error\":\"%s\"}\n", c.name.c_str(), to_function_name(e.what()).substr(0, 200).c_str());
    }
  }
  return 0;
}
