// Training speed (JSON lines): the beautiful_mnist model (examples/beautiful_mnist.cpp) with Adam under
// TinyJit, seconds per step after warm-up, next to libtorch running the same model and optimizer in the
// same process (when built with it), and the step's FLOPs against OpenBLAS sgemm measured here (when
// libopenblas can be loaded). Then the per-step overhead of a JIT replay vs a plain step on a tiny model.
//   BS=512 STEPS=5 THREADS=n bench_train       (data: Debian's Fashion-MNIST if present, else random)
// IMPL=tg or IMPL=torch runs one side only: its line's peak_rss_mb (the process's peak resident memory)
// is then that side's alone. cpu_s_per_step is the process CPU time of a step (all threads): on a
// machine shared with other work, tg's and libtorch's CPU seconds compare where wall time doesn't.
// s_min / s_max: the fastest and slowest of the timed steps (the spread within one process).
// PROFILE_STEPS=n (IMPL=tg): n more steps with the batch passed in, each kernel timed (PROFILE=1) with the thread
// pool's record of it (POOL_STATS=1): a "train_profile" line (the step's wall time, its kernels' sum, the host
// time between them, the pool's wake-up and tail waits) and a "train_kernel" line per kernel of the step, medians
// over the n steps, in the step's order (THREADS=2 and 16 listings join by "k").

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "engine/profile.hpp"
#include "limits.hpp"
#include "mnist_model.hpp"
#include "runtime/threadpool.hpp"
#include "tg/tg.hpp"
#ifdef TG_HAVE_TORCH
#include <torch/torch.h>
#endif

using namespace tg;
using clk = std::chrono::steady_clock;

namespace {

double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }
double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;   // KiB on Linux
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

// PROFILE_STEPS: n steps with every kernel timed and the pool's record of each (see the top of the file)
struct KernelRun {
  std::string name;
  double us = 0, late_us = 0, wait_us = 0;
  int64_t g = 0;    // the largest parallel extent of its pool calls (a kernel of several programs makes several)
  int tasks = 0, joined = 0, calls = 0;
};
// the step's kernels (profile events) with the pool's records of the calls that ended inside each
std::vector<KernelRun> kernel_runs(const std::vector<ThreadPool::CallStats>& pool) {
  const double off_us = std::chrono::duration<double, std::micro>(clk::now().time_since_epoch()).count() - profile::now_us();
  std::vector<KernelRun> ks;
  std::vector<double> starts;
  for (auto& e : profile::events())
    if (e.track != "HOST") ks.push_back(KernelRun{e.name, e.dur_us}), starts.push_back(e.ts_us);
  for (auto& c : pool) {
    const double t = static_cast<double>(c.end_ns) * 1e-3 - off_us;
    const auto it = std::upper_bound(starts.begin(), starts.end(), t);
    if (it == starts.begin()) continue;
    KernelRun& k = ks[static_cast<size_t>(it - starts.begin() - 1)];
    k.g = std::max(k.g, c.g), k.tasks = std::max(k.tasks, c.tasks), k.joined = std::max(k.joined, c.joined);
    k.late_us += c.late_us, k.wait_us += c.wait_us, k.calls++;
  }
  return ks;
}

void profile_steps(TinyJit& step, const std::vector<Tensor>& in, int n, int threads) {
  Context ctx({{"PROFILE", 1}, {"POOL_STATS", 1}, {"JIT", 2}});   // JIT=2: kernel by kernel, not in CPU graphs
  step(in)[0].item<float>();
  profile::clear(), ThreadPool::global().take_stats();
  std::vector<double> walls, sums, lates, waits;
  std::vector<std::vector<KernelRun>> steps;
  for (int i = 0; i < n; i++) {
    auto t = clk::now();
    step(in)[0].item<float>();
    walls.push_back(secs(t));
    steps.push_back(kernel_runs(ThreadPool::global().take_stats()));
    profile::clear();
    double sum = 0, late = 0, wait = 0;
    for (auto& k : steps.back()) sum += k.us * 1e-6, late += k.late_us * 1e-6, wait += k.wait_us * 1e-6;
    sums.push_back(sum), lates.push_back(late), waits.push_back(wait);
  }
  const size_t nk = steps[0].size();
  bool same = true;   // every step the same kernels
  for (auto& s : steps) same = same && s.size() == nk;
  std::printf("{\"bench\":\"train_profile\",\"threads\":%d,\"steps\":%d,\"step_s\":%.4f,\"step_min_s\":%.4f,\"kernel_s\":%.4f,\"host_s\":%.4f,"
              "\"late_s\":%.4f,\"wait_s\":%.4f,\"kernels\":%zu,\"same_kernels\":%s}\n",
              threads, n, median(walls), min_of(walls), median(sums), median(walls) - median(sums), median(lates), median(waits), nk,
              same ? "true" : "false");
  for (size_t k = 0; k < nk && same; k++) {
    std::vector<double> us, late, wait, joined;
    for (auto& s : steps) us.push_back(s[k].us), late.push_back(s[k].late_us), wait.push_back(s[k].wait_us), joined.push_back(s[k].joined);
    const KernelRun& r = steps[0][k];
    std::printf("{\"bench\":\"train_kernel\",\"threads\":%d,\"k\":%zu,\"name\":\"%s\",\"us\":%.1f,\"us_min\":%.1f,\"us_max\":%.1f,\"g\":%lld,"
                "\"tasks\":%d,\"joined\":%.0f,\"calls\":%d,\"late_us\":%.1f,\"wait_us\":%.1f}\n",
                threads, k, r.name.c_str(), median(us), min_of(us), max_of(us), (long long)r.g, r.tasks, median(joined), r.calls, median(late),
                median(wait));
  }
}

// multiply-adds x2 of the convs and the linear layer for one step: forward, grad of the input (all but
// c1, whose input needs none) and grad of the weights. Normalization/elementwise work is left out.
double gemm_flops(int64_t bs) {
  struct L { double cin, cout, k, oh; bool first; };
  // 28 -c1-> 24 -c2-> 20 -pool-> 10 -c3-> 8 -c4-> 6 -pool-> 3
  const L convs[] = {{1, 32, 5, 24, true}, {32, 32, 5, 20, false}, {32, 64, 3, 8, false}, {64, 64, 3, 6, false}};
  double f = 0;
  for (auto& l : convs) f += 2.0 * bs * l.cout * l.oh * l.oh * l.cin * l.k * l.k * (l.first ? 2 : 3);
  f += 2.0 * bs * 576 * 10 * 3;
  return f;
}

nn::datasets::Dataset load_data() {
  const std::string dir = nn::datasets::default_dir("fashion-mnist");
  if (std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz") || std::filesystem::exists(dir + "/train-images-idx3-ubyte"))
    return nn::datasets::fashion_mnist(dir);
  Tensor::manual_seed(0);
  Opts u8{dtypes::uint8, {}, false};
  return {Tensor::randint({60000, 1, 28, 28}, 0, 256, Opts{dtypes::int32}).cast(dtypes::uint8).realize(),
          Tensor::randint({60000}, 0, 10, Opts{dtypes::int32}).cast(dtypes::uint8).realize(), Tensor::zeros({1, 1, 28, 28}, u8),
          Tensor::zeros({1}, u8)};
}

void bench_tg(int64_t bs, int steps, int threads) {
  auto ds = load_data();
  Tensor::manual_seed(1);
  MnistModel model;
  auto opt = nn::optim::Adam(nn::state::get_parameters(model));
  Tensor X = ds.X_train, Y = ds.Y_train;
  // as the example: the batch is gathered inside the step (tinygrad's arange-compare indexing)
  auto gather_step = TinyJit([&](const std::vector<Tensor>&) {
    Tensor samples = Tensor::randint({bs}, 0, X.shape()[0]);
    return std::vector<Tensor>{train_step(model, *opt, X[{samples}], Y[{samples}])};
  });
  // the same step with the batch passed in (gathered outside, not timed): the model's own cost
  auto model_step = TinyJit([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{train_step(model, *opt, in[0], in[1])}; });
  auto t0 = clk::now();
  float loss0 = gather_step({})[0].item<float>();
  double first_s = secs(t0);
  for (int i = 0; i < 2; i++) gather_step({})[0].item<float>();   // capture, first replay
  std::vector<double> ts, cs;
  float loss = 0;
  int64_t ops = 0, kernels = 0;
  for (int i = 0; i < steps; i++) {
    GlobalCounters::reset();
    auto t = clk::now();
    const double c = cpu_now();
    loss = gather_step({})[0].item<float>();
    ts.push_back(secs(t)), cs.push_back(cpu_now() - c);
    ops = GlobalCounters::global_ops;
    kernels = GlobalCounters::kernel_count;
  }
  double step_s = median(ts);
  std::printf("{\"bench\":\"train_step\",\"impl\":\"tg\",\"what\":\"beautiful_mnist step, Adam, TinyJit replay, batch gathered in the step\","
              "\"bs\":%lld,\"threads\":%d,\"s_per_step\":%.4f,\"s_min\":%.4f,\"s_max\":%.4f,\"cpu_s_per_step\":%.4f,\"first_step_s\":%.2f,\"kernels\":%lld,\"counted_gflop\":%.3f,"
              "\"counted_gflops\":%.2f,\"loss_first\":%.3f,\"loss_last\":%.3f,\"device\":\"%s\"}\n",
              (long long)bs, threads, step_s, min_of(ts), max_of(ts), median(cs), first_s, (long long)kernels, ops / 1e9, ops / 1e9 / step_s, loss0, loss,
              Device::default_device().c_str());

  Tensor samples = Tensor::randint({bs}, 0, X.shape()[0]).realize();
  Tensor xb = X[{samples}].contiguous().realize(), yb = Y[{samples}].contiguous().realize();
  for (int i = 0; i < 3; i++) model_step({xb, yb})[0].item<float>();
  ts.clear(), cs.clear();
  for (int i = 0; i < steps; i++) {
    GlobalCounters::reset();
    auto t = clk::now();
    const double c = cpu_now();
    loss = model_step({xb, yb})[0].item<float>();
    ts.push_back(secs(t)), cs.push_back(cpu_now() - c);
    ops = GlobalCounters::global_ops;
    kernels = GlobalCounters::kernel_count;
  }
  step_s = median(ts);
  double flops = gemm_flops(bs);
  std::printf("{\"bench\":\"train_step\",\"impl\":\"tg\",\"what\":\"beautiful_mnist step, Adam, TinyJit replay, batch passed in\","
              "\"bs\":%lld,\"threads\":%d,\"s_per_step\":%.4f,\"s_min\":%.4f,\"s_max\":%.4f,\"cpu_s_per_step\":%.4f,\"kernels\":%lld,\"counted_gflop\":%.3f,\"conv_linear_gflop\":%.3f,"
              "\"conv_linear_gflops\":%.2f,\"peak_rss_mb\":%.0f}\n",
              (long long)bs, threads, step_s, min_of(ts), max_of(ts), median(cs), (long long)kernels, ops / 1e9, flops / 1e9, flops / 1e9 / step_s, peak_rss_mb());
  std::fflush(stdout);
  if (const int n = static_cast<int>(getenv("PROFILE_STEPS", 0)); n > 0) profile_steps(model_step, {xb, yb}, n, threads);
}

#ifdef TG_HAVE_TORCH
struct TorchModelImpl : torch::nn::Module {
  torch::nn::Conv2d c1{torch::nn::Conv2dOptions(1, 32, 5)}, c2{torch::nn::Conv2dOptions(32, 32, 5)};
  torch::nn::BatchNorm2d bn1{32};
  torch::nn::Conv2d c3{torch::nn::Conv2dOptions(32, 64, 3)}, c4{torch::nn::Conv2dOptions(64, 64, 3)};
  torch::nn::BatchNorm2d bn2{64};
  torch::nn::Linear l1{576, 10};
  TorchModelImpl() {
    register_module("c1", c1); register_module("c2", c2); register_module("bn1", bn1);
    register_module("c3", c3); register_module("c4", c4); register_module("bn2", bn2); register_module("l1", l1);
  }
  torch::Tensor forward(torch::Tensor x) {
    auto h = torch::max_pool2d(bn1(torch::relu(c2(torch::relu(c1(x))))), 2);
    h = torch::max_pool2d(bn2(torch::relu(c4(torch::relu(c3(h))))), 2);
    return l1(h.flatten(1));
  }
};

void bench_torch(int64_t bs, int steps, int threads) {
  torch::set_num_threads(threads);
  torch::manual_seed(1);
  TorchModelImpl model;
  model.train();
  torch::optim::Adam opt(model.parameters(), torch::optim::AdamOptions(0.001));
  auto X = torch::randint(0, 256, {60000, 1, 28, 28}, torch::kUInt8), Y = torch::randint(0, 10, {60000}, torch::kInt64);
  auto step = [&] {
    auto samples = torch::randint(0, 60000, {bs}, torch::kInt64);
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model.forward(X.index_select(0, samples).to(torch::kFloat32)), Y.index_select(0, samples));
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  for (int i = 0; i < 2; i++) step();
  std::vector<double> ts, cs;
  for (int i = 0; i < steps; i++) {
    auto t = clk::now();
    const double c = cpu_now();
    step();
    ts.push_back(secs(t)), cs.push_back(cpu_now() - c);
  }
  double step_s = median(ts), flops = gemm_flops(bs);
  std::printf("{\"bench\":\"train_step\",\"impl\":\"libtorch\",\"what\":\"same model and Adam, eager, index_select batch\",\"bs\":%lld,"
              "\"threads\":%d,\"s_per_step\":%.4f,\"cpu_s_per_step\":%.4f,\"conv_linear_gflops\":%.2f,\"peak_rss_mb\":%.0f,\"version\":\"%s\"}\n",
              (long long)bs, threads, step_s, median(cs), flops / 1e9 / step_s, peak_rss_mb(), TORCH_VERSION);
}
#endif

// per-step overhead: a tiny MLP + SGD step, jitted vs plain (kernels cached in both)
void bench_jit_overhead() {
  Tensor::manual_seed(2);
  nn::Linear l1(4, 8), l2(8, 3);
  auto opt = nn::optim::SGD({l1.weight, *l1.bias, l2.weight, *l2.bias}, 0.01, 0.9);
  auto step = [&](const std::vector<Tensor>& in) {
    Tensor::Train train;
    opt->zero_grad();
    Tensor loss = l2(l1(in[0]).relu()).sparse_categorical_crossentropy(in[1]);
    loss.backward();
    opt->step();
    return std::vector<Tensor>{loss};
  };
  TinyJit jit(step);
  Tensor x = Tensor::randn({4, 4}).realize(), y = Tensor::from<int32_t>({0, 1, 2, 1}, {4}).realize();
  auto time_per_call = [&](auto&& f, int n) {
    for (int i = 0; i < 5; i++) f();
    std::vector<double> best;
    for (int r = 0; r < 5; r++) {
      auto t = clk::now();
      for (int i = 0; i < n; i++) f();
      best.push_back(secs(t) / n);
    }
    return *std::min_element(best.begin(), best.end());
  };
  double plain = time_per_call([&] { step({x, y})[0].realize(); }, 50);
  double jitted = time_per_call([&] { jit({x, y})[0].realize(); }, 500);
  GlobalCounters::reset();
  jit({x, y});
  int64_t kernels = GlobalCounters::kernel_count;
  double kernel_only = time_per_call([&] { jit({x, y}); }, 500);
  std::printf("{\"bench\":\"jit_overhead\",\"what\":\"tiny MLP (4-8-3) + SGD momentum step, bs 4, kernels cached\",\"plain_us\":%.1f,"
              "\"jit_us\":%.1f,\"speedup\":%.1f,\"kernels_per_step\":%lld,\"jit_us_per_kernel\":%.2f}\n",
              plain * 1e6, jitted * 1e6, plain / jitted, (long long)kernels, kernel_only * 1e6 / double(std::max<int64_t>(1, kernels)));
}

}  // namespace

int main() {
  try {
    int64_t bs = getenv("BS", 512);
    int steps = int(getenv("STEPS", 5));
    int threads = int(getenv("THREADS", 0));
    if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
    double gf = tgbench::gemm_gflops(1024).value;
    if (gf > 0)
      std::printf("{\"limit\":\"gemm1024_gflops\",\"value\":%.1f,\"what\":\"OpenBLAS sgemm fp32, measured in this run\",\"step_limit_s\":%.4f,"
                  "\"conv_linear_gflop\":%.3f}\n",
                  gf, gemm_flops(bs) / 1e9 / gf, gemm_flops(bs) / 1e9);
    else
      std::printf("{\"limit\":\"gemm\",\"value\":null,\"what\":\"libopenblas not found\",\"conv_linear_gflop\":%.3f}\n", gemm_flops(bs) / 1e9);
    std::fflush(stdout);
    if (getenv("SKIP_JIT_OVERHEAD", 0) == 0) bench_jit_overhead();
    std::fflush(stdout);
    const std::string impl = getenv_str("IMPL", "both");
    if (impl != "torch") bench_tg(bs, steps, threads);
    std::fflush(stdout);
#ifdef TG_HAVE_TORCH
    if (impl != "tg") bench_torch(bs, steps, threads);
#else
    std::printf("{\"bench\":\"train_step\",\"impl\":\"libtorch\",\"value\":null,\"what\":\"built without libtorch\"}\n");
#endif
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
