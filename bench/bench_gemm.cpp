// GEMM and conv2d on the GPU (JSON lines): tinygrad.cpp's kernels for the cases of issue 12 (all kernels of the output from realized inputs: the conv's channels-last copies too), timed
// with device events (median of REPS runs after a warm-up), plus the first-call time of a new GEMM
// (schedule + codegen + compile + load + first run, with the disk cache off; see first_call). bench/gemm_vs_torch.sh runs
// torch on the same cases in the same call and prints ratios. CASES=gemm_fp16_4096,... picks cases; REPS (default 20).
// gemm_fp32_tf32_4096 runs with ALLOW_TF32=1. beam_gemm_fp16_4096 (only when named in CASES: it takes a while) is the
// BEAM=2 search time of the 4096^3 fp16 GEMM with the disk cache off, and the found kernel's speed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "codegen/kernel.hpp"
#include "engine/profile.hpp"
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
  bool tf32 = false;  // ALLOW_TF32=1 (fp32 on TF32 tensor cores)
};

// in CASES (or CASES unset and not `only_named`)
bool wanted(const std::string& name, bool only_named = false) {
  const std::string sel = getenv_str("CASES");
  if (sel.empty()) return !only_named;
  std::stringstream ss(sel);
  for (std::string s; std::getline(ss, s, ',');)
    if (s == name) return true;
  return false;
}

// every kernel that computes t from its realized inputs, lowered: the GEMM, and for the conv its channels-last
// copies of the input and the weight (tensor/conv.cpp) too, all timed: torch's conv includes its own relayouts
std::vector<ExecItem> lower_kernels(const Tensor& t) {
  std::vector<ExecItem> out;
  for (const ScheduleItem& si : t.schedule()) {
    if (si.kind != MetaOps::KERNEL) throw Error("bench_gemm: a non-kernel item in the timed schedule");
    out.push_back(lower_schedule_item(si));
  }
  if (out.empty()) throw Error("bench_gemm: no kernel scheduled");
  return out;
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
  Context tf32({{"ALLOW_TF32", c.tf32 ? 1 : 0}});
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
  std::vector<ExecItem> eis = lower_kernels(*out);
  // per rep the kernels' device times add up; the median of the sums, and each kernel's median
  std::vector<double> ts;
  std::vector<std::vector<double>> parts(eis.size());
  for (ExecItem& ei : eis) ei.run({}, true);   // warm-up
  for (int i = 0; i < reps; i++) {
    double sum = 0;
    for (size_t j = 0; j < eis.size(); j++) {
      const double t = *eis[j].run({}, true, false, false);
      parts[j].push_back(t), sum += t;
    }
    ts.push_back(sum);
  }
  std::sort(ts.begin(), ts.end());
  const double med = ts[ts.size() / 2];
  std::string opts, part_ms;
  if (auto* cr = dynamic_cast<CompiledRunner*>(eis.back().prg.get())) opts = cr->p.name;
  for (auto& p : parts) {
    std::sort(p.begin(), p.end());
    part_ms += (part_ms.empty() ? "" : ",") + std::to_string(p[p.size() / 2] * 1e3);
  }
  std::printf("{\"bench\":\"%s\",\"impl\":\"tinygrad.cpp\",\"kind\":\"%s\",\"dtype\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld,"
              "\"median_ms\":%.4f,\"min_ms\":%.4f,\"tflops\":%.2f,\"kernels\":%zu,\"kernel_ms\":[%s],\"kernel\":\"%s\"}\n",
              c.name.c_str(), c.kind.c_str(), c.dt.name().c_str(), (long long)c.m, (long long)c.k, (long long)c.n, med * 1e3,
              ts[0] * 1e3, flops / med / 1e12, eis.size(), part_ms.c_str(), to_function_name(opts).c_str());
  std::fflush(stdout);
}

// a new n^3 fp16 GEMM from realized inputs to its synchronized result: schedule + codegen + NVRTC + module load +
// first run (milliseconds). profiled: PROFILE spans on for that part only (the inputs' kernels stay out of them).
// compiled: set to whether that part compiled anything (the inputs' kernels, compiled before it, don't count).
double new_gemm_ms(int64_t n, bool profiled = false, bool* compiled = nullptr) {
  Tensor a = host_rand({n, n}, dtypes::half, "CUDA"), b = host_rand({n, n}, dtypes::half, "CUDA");
  Device::synchronize("CUDA");
  std::optional<Context> prof;
  if (profiled) prof.emplace(std::initializer_list<std::pair<std::string, int64_t>>{{"PROFILE", 1}}), profile::clear();
  const int64_t compiles = get_device("CUDA").compiler().compile_count;
  const auto t0 = clk::now();
  Tensor c = a.matmul(b).realize();
  Device::synchronize("CUDA");
  const double ms = std::chrono::duration<double>(clk::now() - t0).count() * 1e3;
  if (compiled) *compiled = get_device("CUDA").compiler().compile_count != compiles;
  return ms;
}

// The first call of a new GEMM (disk cache off, and the driver's compute cache, which NVRTC 13 also keys its output
// by, off for the process: main), in a warm process: the CUDA context is up and a first GEMM (1024^3, reported as
// first_call_cold) has loaded NVRTC's builtins and the driver's module machinery. The TMA kernel is shape-generic
// (codegen/tc_gemm.cpp): a shape whose config (dtypes, layouts, tile config, epilogue) was compiled already in the
// process reuses that binary, so each of five shapes never seen before (1536,1408,1664,1792,1920 ^3) is reported
// apart as (a) a full compile (its config new to the process: 1792^3, the first of the 128x256-tile shapes) or (b) a
// new shape of a compiled config (the 64x128-tile ones after 1024^3, and 1920^3 after 1792^3): codegen + load +
// the first run. first_call_new_gemm_fp16 is the median of (b) (the common case: a model's next shape);
// first_call_new_config_gemm_fp16 the full compiles of (a), with the process's first GEMM. The host's speed varies
// between runs, hence a median.
// A full compile is ptxas alone where the TMA kernel is rendered as PTX (codegen/tc_gemm_ptx.cpp; PTX_COMPILER picks
// ptxas, nvjitlink or the driver's JIT, runtime/cuda.cpp), NVRTC (front end, NVVM, ptxas) for the CUDA C kernel (TC_PTX=0).
// A sixth shape (1280^3, a compiled config) runs under PROFILE: its host spans by kind (schedule, codegen, compile,
// module_load, launch_info, first_launch, tensor_map_encode) show where the time goes.
void first_call() {
  Context ctx({{"CACHELEVEL", 0}});
  bool cold_compiled = false;
  const double cold = new_gemm_ms(1024, false, &cold_compiled);
  std::vector<double> reused, full;
  std::string reused_js, full_js, each_js;
  for (int64_t n : {1536, 1408, 1664, 1792, 1920}) {
    bool compiled = false;
    const double ms = new_gemm_ms(n, false, &compiled);
    (compiled ? full : reused).push_back(ms);
    std::string& js = compiled ? full_js : reused_js;
    js += std::string(js.empty() ? "" : ",") + "{\"n\":" + std::to_string(n) + ",\"ms\":" + std::to_string(ms) + "}";
    each_js += (each_js.empty() ? "" : ",") + std::to_string(ms);
  }
  auto median = [](std::vector<double> v) { return v.empty() ? 0.0 : (std::sort(v.begin(), v.end()), v[v.size() / 2]); };
  std::vector<double> all = reused;
  all.insert(all.end(), full.begin(), full.end());
  std::printf("{\"bench\":\"first_call_cold_gemm_fp16_1024\",\"impl\":\"tinygrad.cpp\",\"ms\":%.1f,\"compiled\":%s,\"what\":\"the process's "
              "first GEMM (CUDA context already up): a full compile\"}\n", cold, cold_compiled ? "true" : "false");
  std::printf("{\"bench\":\"first_call_new_config_gemm_fp16\",\"impl\":\"tinygrad.cpp\",\"ms\":%.1f,\"shapes\":[%s],\"what\":\"(a) a new "
              "shape whose config was never compiled in the process: codegen+compile (ptxas or NVRTC)+load+first run (median of these; the 1024^3 "
              "cold one above is one too)\"}\n", median(full), full_js.c_str());
  std::printf("{\"bench\":\"first_call_new_gemm_fp16\",\"impl\":\"tinygrad.cpp\",\"ms\":%.1f,\"shapes\":[%s],\"each_ms\":[%s],"
              "\"median_all5_ms\":%.1f,\"what\":\"(b) median of new GEMM shapes (of 1536,1408,1664,1792,1920 ^3) whose config was "
              "compiled already in the process: schedule+codegen+load+first run, the binary reused; disk and compute caches off. "
              "each_ms: all five in order, (a) included\"}\n", median(reused), reused_js.c_str(), each_js.c_str(), median(all));
  std::map<std::string, double> spans;
  double total = 0;
  total = new_gemm_ms(1280, true);
  for (const profile::Event& e : profile::events())
    if (e.track == "HOST") spans[e.name.substr(0, e.name.find(' '))] += e.dur_us / 1e3;
  profile::clear();   // no trace file at exit
  std::string js;
  for (auto& [k, v] : spans) js += (js.empty() ? "" : ",") + ("\"" + k + "\":" + std::to_string(v));
  std::printf("{\"bench\":\"first_call_spans_gemm_fp16_1280\",\"impl\":\"tinygrad.cpp\",\"ms\":%.1f,\"spans_ms\":{%s}}\n", total, js.c_str());
  std::fflush(stdout);
}

// BEAM=2 on the 4096^3 fp16 GEMM with the disk cache off: the search's wall time (the realize of a GEMM no kernel
// exists for at BEAM=2) and the kernel it found, timed as the cases are
void beam_case(int reps) {
  Context ctx({{"BEAM", 2}, {"CACHELEVEL", 0}});
  const double ms = new_gemm_ms(4096);
  std::printf("{\"bench\":\"beam_search_gemm_fp16_4096\",\"impl\":\"tinygrad.cpp\",\"ms\":%.1f,\"what\":\"BEAM=2 realize of a new "
              "4096^3 fp16 GEMM, disk cache off (search + compiles + the run)\"}\n", ms);
  std::fflush(stdout);
  run_case({"beam_gemm_fp16_4096", "gemm", 4096, 4096, 4096, dtypes::half}, reps);
}

}  // namespace

int main() {
  // before the driver starts: NVRTC 13 reuses output from the driver's compute cache, where an earlier process (a test)
  // may have compiled the same kernel; a first call must compile
  if (wanted("first_call")) setenv("CUDA_CACHE_DISABLE", "1", 0);
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
      {"gemm_fp32_tf32_4096", "gemm", 4096, 4096, 4096, dtypes::float32, true},
  };
  for (const Case& c : cases) {
    if (!wanted(c.name)) continue;
    try {
      run_case(c, reps);
    } catch (const std::exception& e) {
      std::printf("{\"bench\":\"%s\",\"impl\":\"tinygrad.cpp\",\"error\":\"%s\"}\n", c.name.c_str(), to_function_name(e.what()).substr(0, 200).c_str());
    }
  }
  if (wanted("beam_gemm_fp16_4096", true)) beam_case(reps);
  return 0;
}
