// Kernel speed against this machine's limits (JSON lines): elementwise a*b+1 and sum on 2^24 fp32
// (GB/s), a 1024^3 fp32 matmul and a conv2d forward (GFLOPS), each with default opts, NOOPT=1 and
// BEAM=2 (what realize runs: the kernel the search's final compare decided on; beam_search_s includes that compare).
// Limits: measured in the same run by bench/limits.cpp. BENCH=matmul,conv picks cases; MODES=default,noopt,beam picks modes;
// CONV_BATCH sets the conv's batch (default 64; the brief's full size is 512). BENCH=conv1_dw (beautiful_mnist's
// conv1 weight gradient; conv1_dw_step: as the training step takes it; conv1_fw: its forward, uint8 images), BENCH=resnet_s2_bw (a 3x3 stride-2 conv's gradients), BENCH=resnet_fw (a 3x3 padded forward) and
// BENCH=conv_dx (one stride-1 input gradient, its shape from CONV_DX; conv_fw and conv_dw: that conv's forward and
// weight gradient) are named exactly too. BENCH=matmul2048 and
// BENCH=matmul4096x4096x512 (named exactly) add the bigger GEMMs. GFLOPS lines carry their ratio to
// fma_peak_gflops and gemm1024_gflops of the same run (OpenBLAS's AVX-512 kernels: OPENBLAS_CORETYPE=SkylakeX).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "codegen/pack.hpp"
#include "engine/realize.hpp"
#include "runtime/threadpool.hpp"
#include "engine/schedule.hpp"
#include "limits.hpp"
#include "engine/search.hpp"
#include "tg/tg.hpp"

using namespace tg;
using clk = std::chrono::steady_clock;

namespace {

// The threads the limits run on: THREADS where set (a 2-thread case on a 16-core host is measured against two
// cores' peak and OpenBLAS on two threads), else every core.
int limit_threads() {
  static const int n = [] {
    const int t = static_cast<int>(getenv("THREADS", 0));
    if (t > 0 && !std::getenv("OPENBLAS_NUM_THREADS")) setenv("OPENBLAS_NUM_THREADS", std::to_string(t).c_str(), 1);
    return t;
  }();
  return n;
}

// limits measured in this run (bench/limits.hpp), printed as JSON lines before the results
std::map<std::string, double> read_limits() {
  std::map<std::string, double> ret;
  auto limits = tgbench::measure_limits(limit_threads());
  limits["gemm1024_gflops_avx512"] = tgbench::gemm_gflops_avx512(1024);
  for (const auto& [key, l] : limits) {
    std::printf("%s\n", tgbench::limit_json(key, l).c_str());
    ret[key] = l.value;
  }
  return ret;
}

// The FMA peak measured in short bursts between a GFLOPS case's runs (best of them): on a machine
// shared with compiles, the kernel's best run and the peak's best burst come from the same minutes.
double g_window_peak = 0, g_cpu_seconds = 0;   // g_cpu_seconds: the process CPU time of the best runs, summed
bool g_measure_window = false;
double g_last_cpu = 0;   // the last time_runner's best process CPU time

double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// Minimum time of one kernel: at least REPEATS runs (default 10), more while under ~1 s in total (up to 3x).
double time_runner(CompiledRunner& r, const std::vector<Buffer*>& bufs) {
  double best = 1e30, total = 0, best_cpu = 1e30;
  const int reps = static_cast<int>(getenv("REPEATS", 10));
  for (int i = 0; i < 3 * reps && (i < reps || total < 1.0); i++) {
    if (g_measure_window) {
      // the pool's workers spin a while after the last run (runtime/threadpool.cpp): a burst then would share their cores
      std::this_thread::sleep_for(std::chrono::microseconds(ThreadPool::spin_us() + 100));
      g_window_peak = std::max(g_window_peak, tgbench::fma_peak_burst(limit_threads()));
    }
    const double c0 = process_cpu_seconds();
    double t = *r(bufs, {}, true);
    best_cpu = std::min(best_cpu, process_cpu_seconds() - c0);
    best = std::min(best, t), total += t;
  }
  g_cpu_seconds += best_cpu, g_last_cpu = best_cpu;
  return best;
}

// the 1-minute load average: how shared the machine was during the run
double loadavg() {
  std::ifstream f("/proc/loadavg");
  double l = 0;
  f >> l;
  return l;
}

struct Result {
  double seconds = 0, search_s = 0;   // kernel time; time spent building the kernels (BEAM's search)
  std::string opts, names, kernel_ms, kernel_cpu_ms;   // each kernel's best time and CPU time, in the order of names
  std::vector<float> out;   // the last kernel's output, to check the modes agree
};

// largest |a - b| / (1 + |b|)
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double m = 0;
  for (size_t i = 0; i < a.size(); i++) m = std::max(m, std::abs(double(a[i]) - b[i]) / (1 + std::abs(double(b[i]))));
  return m;
}

// One kernel's optimized Kernel in a mode: hand-coded opts, none, or BEAM=2 (realize's kernel: the search's
// final compare against the hand-coded one included; CACHELEVEL=0 makes every run search)
std::unique_ptr<Kernel> mode_kernel(const Renderer& ren, const UOp& ast, const std::string& mode) {
  Context ctx({{"NOOPT", mode == "noopt" ? 1 : 0}, {"BEAM", mode == "beam" ? 2 : 0}});
  return get_kernel(ren, ast);
}

// Builds, compiles and times every kernel of the schedule in one mode; returns their summed time.
// A CPU GEMM with a packed operand (codegen/pack.hpp) is two kernels here, as in realize.
Result run_mode(const std::vector<ScheduleItem>& sched, const std::string& mode) {
  Result res;
  for (const ScheduleItem& si : sched) {
    if (si.kind != MetaOps::KERNEL) continue;
    const Renderer& ren = get_renderer(si.bufs[0]->device);
    std::vector<Buffer*> bufs;
    for (auto& b : si.bufs) bufs.push_back(&b->ensure_allocated());
    std::vector<std::pair<UOp, std::vector<Buffer*>>> jobs;
    std::shared_ptr<Buffer> scratch;
    std::optional<PackPlan> plan = mode == "noopt" ? std::nullopt : cpu_gemm_pack(Access::uop(si.ast), ren);
    if (plan) {
      scratch = std::make_shared<Buffer>(si.bufs[0]->device, plan->scratch_size, plan->dtype);
      scratch->ensure_allocated();
      std::vector<Buffer*> gb = bufs;
      gb.resize(std::max<size_t>(gb.size(), plan->scratch_index + 1), scratch.get());
      gb[plan->scratch_index] = scratch.get();
      jobs.push_back({plan->pack_ast, {scratch.get(), bufs[plan->b_index]}});
      jobs.push_back({plan->gemm_ast, gb});
    } else {
      jobs.push_back({Access::uop(si.ast), bufs});
    }
    for (auto& [ast, jb] : jobs) {
      // realize doesn't search the pack kernel (a copy) either
      const auto t0 = clk::now();
      std::unique_ptr<Kernel> k = mode_kernel(ren, ast, plan && ast == plan->pack_ast && mode == "beam" ? "default" : mode);
      res.search_s += std::chrono::duration<double>(clk::now() - t0).count();
      CompiledRunner r(k->to_program());
      const double t = time_runner(r, jb);
      res.seconds += t;
      res.kernel_ms += (res.kernel_ms.empty() ? "" : " ") + std::to_string(t * 1e3);
      res.kernel_cpu_ms += (res.kernel_cpu_ms.empty() ? "" : " ") + std::to_string(g_last_cpu * 1e3);
      res.opts += (res.opts.empty() ? "" : " | ") + opts_to_string(k->applied_opts);
      res.names += (res.names.empty() ? "" : " ") + to_function_name(k->name());
    }
    res.out.assign(si.bufs[0]->size, 0.0f);
    si.bufs[0]->copyout(res.out.data(), res.out.size() * sizeof(float));
  }
  return res;
}

// CONV_DX="n,cin,h,w,cout,k,pad" (BENCH=conv_dx)
std::vector<int64_t> conv_dx_args() {
  std::vector<int64_t> d;
  std::stringstream ss(getenv_str("CONV_DX", "64,32,16,16,32,3,1"));
  for (std::string v; std::getline(ss, v, ',');) d.push_back(std::stoll(v));
  if (d.size() != 7) throw Error("CONV_DX needs 7 numbers n,cin,h,w,cout,k,pad, got " + getenv_str("CONV_DX"));
  return d;
}
// the (input position, tap) pairs that meet grad_output, times n * cin * cout, 2 flops each
double conv_dx_flops() {
  const std::vector<int64_t> d = conv_dx_args();
  double pairs = 2.0 * d[0] * d[1] * d[4];
  for (int64_t in : {d[2], d[3]}) {
    const int64_t o = in + 2 * d[6] - d[5] + 1;
    int64_t p = 0;
    for (int64_t y = 0; y < in; y++)
      for (int64_t t = 0; t < d[5]; t++) p += y + d[6] - t >= 0 && y + d[6] - t < o;
    pairs *= static_cast<double>(p);
  }
  return pairs;
}

// n * cin * cout * k * k * the output positions of CONV_DX's conv
double conv_macs() {
  const std::vector<int64_t> d = conv_dx_args();
  const double o = static_cast<double>(d[2] + 2 * d[6] - d[5] + 1) * static_cast<double>(d[3] + 2 * d[6] - d[5] + 1);
  return static_cast<double>(d[0] * d[1] * d[4] * d[5] * d[5]) * o;
}

struct Case {
  std::string name, unit, limit_key;
  double work;   // bytes or flops
  std::function<Tensor()> build;
  std::function<std::vector<Tensor>()> build_many = nullptr;   // several outputs (a backward's gradients)
  double min_bytes = 0;   // the bytes any kernel must move (inputs read once, outputs written once): a memory bound
};

}  // namespace

int main() {
  if (tgbench::limits_child_main()) return 0;   // the OpenBLAS AVX-512 child (bench/limits.hpp)
  auto limits = read_limits();
  const double core_peak = tgbench::fma_peak_core_cputime();
  std::printf("{\"limit\":\"fma_peak_core_cputime_gflops\",\"value\":%.1f,\"what\":\"one core, GFLOPS per second of thread CPU time\"}\n", core_peak);
  const int64_t N = int64_t{1} << 24, conv_b = getenv("CONV_BATCH", 64);
  // host-made data: Tensor::rand's arange is a quadratic reduce until loop collapse lands in uopgraph
  auto data = [](Shape s) {
    std::vector<float> v(prod(s));
    for (size_t i = 0; i < v.size(); i++) v[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
    return Tensor::from(v, s).realize();
  };
  Tensor a = data({N}), b = data({N}), ma = data({1024, 1024}), mb = data({1024, 1024});
  Tensor cx = data({conv_b, 32, 24, 24}), cw = data({32, 32, 5, 5});
  // bigger GEMMs only when asked for (BENCH=matmul2048 / matmul4096): their NOOPT and BEAM modes take minutes
  auto mat = [&](int64_t m, int64_t k) { return data({m, k}); };
  std::vector<Case> cases = {
      {"elementwise", "GBps", "elementwise_GBps", 3.0 * 4 * N, [&] { return a * b + 1; }},
      {"sum", "GBps", "sum_GBps", 4.0 * N, [&] { return a.sum(); }},
      {"rand", "GBps", "elementwise_GBps", 4.0 * N, [&] { return Tensor::rand({N}); }},   // threefry, counter folded
      {"matmul", "GFLOPS", "gemm1024_gflops", 2.0 * 1024 * 1024 * 1024, [&] { return ma.matmul(mb); }},
      {"conv2d", "GFLOPS", "gemm1024_gflops", 2.0 * conv_b * 32 * 20 * 20 * 32 * 25, [&] { return cx.conv2d(cw); }},
      // conv2d backward of the same layer: the input and weight gradients for a fixed output gradient
      // (twice the forward's flops), all their kernels
      {"conv2d_bw", "GFLOPS", "gemm1024_gflops", 2 * 2.0 * conv_b * 32 * 20 * 20 * 32 * 25, nullptr, [&] {
         Tensor x = cx.detach().requires_grad_(), w = cw.detach().requires_grad_();
         (x.conv2d(w) * data({conv_b, 32, 20, 20})).sum().backward();
         return std::vector<Tensor>{*x.grad(), *w.grad()};
       }, 4.0 * (2 * conv_b * 32 * 24 * 24 + conv_b * 32 * 20 * 20 + 2 * 32 * 32 * 25)},
      // beautiful_mnist's conv1 weight gradient (one input channel, batch 512): useful flops
      {"conv1_dw", "GFLOPS", "gemm1024_gflops", 2.0 * 512 * 24 * 24 * 32 * 25, nullptr, [&] {
         Tensor w = data({32, 1, 5, 5}).detach().requires_grad_();
         (data({512, 1, 28, 28}).conv2d(w) * data({512, 32, 24, 24})).sum().backward();
         return std::vector<Tensor>{*w.grad()};
       }, 4.0 * (512 * 28 * 28 + 512 * 32 * 24 * 24 + 32 * 25)},
      // the same gradient in the form the training step takes it (bench_train): uint8 images (cast to float
      // inside the conv) and a bias; grad_output is a buffer there too (conv2's input gradient, relu bw fused)
      {"conv1_dw_step", "GFLOPS", "gemm1024_gflops", 2.0 * 512 * 24 * 24 * 32 * 25, nullptr, [&] {
         Tensor w = data({32, 1, 5, 5}).detach().requires_grad_(), b = data({32}).detach().requires_grad_();
         Tensor x = (data({512, 1, 28, 28}) * 255).cast(dtypes::uint8).realize();
         (x.conv2d(w, b) * data({512, 32, 24, 24})).sum().backward();
         return std::vector<Tensor>{*w.grad()};
       }, 1.0 * 512 * 28 * 28 + 4.0 * (512 * 32 * 24 * 24 + 32 * 25)},
      // beautiful_mnist's conv1 forward as the training step runs it: uint8 images, bias and relu fused
      {"conv1_fw", "GFLOPS", "gemm1024_gflops", 2.0 * 512 * 24 * 24 * 32 * 25, [&] {
         Tensor x = (data({512, 1, 28, 28}) * 255).cast(dtypes::uint8).realize();
         return x.conv2d(data({32, 1, 5, 5}), data({32})).relu();
       }},
      // a ResNet-style 3x3 stride-2 conv (padding 1), input and weight gradients: useful flops (twice the forward's)
      {"resnet_s2_bw", "GFLOPS", "gemm1024_gflops", 2 * 2.0 * 32 * 64 * 14 * 14 * 64 * 9, nullptr, [&] {
         Tensor x = data({32, 64, 28, 28}).detach().requires_grad_(), w = data({64, 64, 3, 3}).detach().requires_grad_();
         (x.conv2d(w, std::nullopt, 1, {2}, {1}, {1}) * data({32, 64, 14, 14})).sum().backward();
         return std::vector<Tensor>{*x.grad(), *w.grad()};
       }, 4.0 * (2 * 32 * 64 * 28 * 28 + 32 * 64 * 14 * 14 + 2 * 64 * 64 * 9)},
      // a ResNet-style 3x3 conv forward, stride 1, padding 1: useful flops, the taps inside the input (per dim
      // 26 outputs x 3 taps + 2 edge outputs x 2 = 82; codegen/narrow_reduce skips the others)
      {"resnet_fw", "GFLOPS", "gemm1024_gflops", 2.0 * 32 * 64 * 64 * 82 * 82, [&] {
         return data({32, 64, 28, 28}).conv2d(data({64, 64, 3, 3}), std::nullopt, 1, {1}, {1}, {1});
       }},
      // the input gradient alone of a stride-1 conv given by CONV_DX="n,cin,h,w,cout,k,pad" (default: a ResNet
      // 3x3 padded conv on 16x16, whose output rows are one vector): useful flops, the taps that meet grad_output
      {"conv_dx", "GFLOPS", "gemm1024_gflops", conv_dx_flops(), nullptr, [&] {
         const std::vector<int64_t> d = conv_dx_args();
         Tensor x = data({d[0], d[1], d[2], d[3]}).detach().requires_grad_(), w = data({d[4], d[1], d[5], d[5]});
         Tensor out = x.conv2d(w, std::nullopt, 1, {1}, {1}, {d[6]});
         (out * data(out.shape())).sum().backward();
         return std::vector<Tensor>{*x.grad()};
       }},
      // the forward and the weight gradient of the same conv (CONV_DX's shape): all multiply-adds, padding's included
      {"conv_fw", "GFLOPS", "gemm1024_gflops", conv_macs() * 2, [&] {
         const std::vector<int64_t> d = conv_dx_args();
         return data({d[0], d[1], d[2], d[3]}).conv2d(data({d[4], d[1], d[5], d[5]}), std::nullopt, 1, {1}, {1}, {d[6]});
       }},
      {"conv_dw", "GFLOPS", "gemm1024_gflops", conv_macs() * 2, nullptr, [&] {
         const std::vector<int64_t> d = conv_dx_args();
         Tensor w = data({d[4], d[1], d[5], d[5]}).detach().requires_grad_();
         Tensor out = data({d[0], d[1], d[2], d[3]}).conv2d(w, std::nullopt, 1, {1}, {1}, {d[6]});
         (out * data(out.shape())).sum().backward();
         return std::vector<Tensor>{*w.grad()};
       }},
      {"matmul2048", "GFLOPS", "gemm2048_gflops", 2.0 * 2048 * 2048 * 2048, [&] { return mat(2048, 2048).matmul(mat(2048, 2048)); }},
      {"matmul4096x4096x512", "GFLOPS", "gemm1024_gflops", 2.0 * 4096 * 4096 * 512, [&] { return mat(4096, 512).matmul(mat(512, 4096)); }},
  };
  const std::set<std::string> explicit_only = {"matmul2048", "matmul4096x4096x512", "conv2d_bw", "conv1_dw", "conv1_dw_step", "conv1_fw", "resnet_s2_bw", "conv_dx", "conv_fw", "conv_dw", "resnet_fw"};
  const std::string only = getenv_str("BENCH"), modes = getenv_str("MODES", "default,noopt,beam");
  if (only.find("matmul2048") != std::string::npos) {
    tgbench::Limit l = tgbench::gemm_gflops(2048), l512 = tgbench::gemm_gflops_avx512(2048);
    std::printf("%s\n%s\n", tgbench::limit_json("gemm2048_gflops", l).c_str(), tgbench::limit_json("gemm2048_gflops_avx512", l512).c_str());
    limits["gemm2048_gflops"] = l.value;
    limits["gemm2048_gflops_avx512"] = l512.value;
  }
  for (const Case& c : cases) {
    bool wanted = only.empty() && !explicit_only.count(c.name);
    std::stringstream os(only);
    for (std::string item; std::getline(os, item, ',');)
      wanted = wanted || (!item.empty() && (explicit_only.count(c.name) ? c.name == item : c.name.find(item) != std::string::npos));
    if (!wanted) continue;
    std::vector<Tensor> outs = c.build_many ? c.build_many() : std::vector<Tensor>{c.build()};
    std::vector<LazyBufferPtr> lbs;
    for (const Tensor& o : outs) lbs.push_back(Access::lazydata(o));
    // scheduled here and run by hand: Tensor::schedule() would also queue them for the next realize
    std::vector<ScheduleItem> sched = memory_planner(create_schedule(lbs));
    for (const ScheduleItem& si : sched) lower_schedule_item(si).run();   // allocates and fills every buffer once
    std::stringstream ms(modes);
    std::vector<float> reference;
    for (std::string mode; std::getline(ms, mode, ',');) {
      auto t0 = clk::now();
      g_window_peak = 0, g_cpu_seconds = 0, g_measure_window = c.unit == "GFLOPS";
      const double load0 = loadavg();
      Result r = run_mode(sched, mode);
      double build_s = std::chrono::duration<double>(clk::now() - t0).count();
      double value = c.work / r.seconds / 1e9, limit = limits.count(c.limit_key) ? limits[c.limit_key] : 0;
      if (reference.empty()) reference = r.out;
      // GFLOPS also as a fraction of the FMA peak and of OpenBLAS's AVX-512 kernels, both from this run
      std::string extra;
      for (const char* key : {"fma_peak_gflops", "gemm1024_gflops", "gemm1024_gflops_avx512"})
        if (c.unit == "GFLOPS" && limits.count(key) && limits[key] > 0)
          extra += ",\"ratio_" + std::string(key) + "\":" + std::to_string(value / limits[key]);
      if (c.name == "matmul2048" && limits["gemm2048_gflops_avx512"] > 0)
        extra += ",\"ratio_gemm2048_gflops_avx512\":" + std::to_string(value / limits["gemm2048_gflops_avx512"]);
      // the peak of the bursts between this mode's runs (same load as the kernel's best run)
      if (g_measure_window && g_window_peak > 0)
        extra += ",\"fma_peak_window_gflops\":" + std::to_string(g_window_peak) + ",\"ratio_fma_peak_window\":" + std::to_string(value / g_window_peak);
      // per core: flops per CPU-second the process received, against one core's FMA peak per CPU-second
      if (g_measure_window && g_cpu_seconds > 0)
        extra += ",\"gflops_per_cpu_s\":" + std::to_string(c.work / g_cpu_seconds / 1e9) + ",\"ratio_fma_peak_core_cputime\":" +
                 std::to_string(c.work / g_cpu_seconds / 1e9 / core_peak);
      // the time to move min_bytes at the sum bound of this run (2 threads): a floor the flops can't beat
      // when it exceeds their time at the peak (conv1_dw: grad_output is 38 MB for 0.47 GFLOP)
      if (c.min_bytes > 0 && limits.count("sum_GBps") && limits["sum_GBps"] > 0) {
        const double mem_ms = c.min_bytes / limits["sum_GBps"] / 1e6;
        extra += ",\"mem_bound_ms\":" + std::to_string(mem_ms) + ",\"ratio_mem_bound\":" + std::to_string(mem_ms / (r.seconds * 1e3));
      }
      extra += ",\"loadavg\":" + std::to_string(std::max(load0, loadavg()));
      if (mode == "beam") extra += ",\"beam_search_s\":" + std::to_string(r.search_s);
      std::printf("{\"bench\":\"%s\",\"mode\":\"%s\",\"%s\":%.2f,\"ms\":%.3f,\"limit\":%.1f,\"ratio\":%.3f%s,\"kernels\":\"%s\",\"kernel_ms\":\"%s\",\"kernel_cpu_ms\":\"%s\",\"opts\":\"%s\",\"setup_s\":%.1f,\"maxdiff_vs_first_mode\":%.2g}\n",
                  c.name.c_str(), mode.c_str(), c.unit.c_str(), value, r.seconds * 1e3, limit, limit > 0 ? value / limit : 0.0,
                  extra.c_str(), r.names.c_str(), r.kernel_ms.c_str(), r.kernel_cpu_ms.c_str(), r.opts.c_str(), build_s, max_rel_diff(r.out, reference));
      std::fflush(stdout);
    }
  }
  return 0;
}
