// bench_gpu_reduce: memory-bound GPU workloads (reductions, softmax family, elementwise, rand) on
// CUDA, printed as JSON lines. bench/torch_gpu_reduce.py times the same workloads with torch in the
// same call; scripts compare ms per workload. Each workload runs under TinyJit (kernels replayed, no
// scheduling), warm-up first, then the mean of BENCH_ITERS replays between two device syncs.
// Without a GPU it prints one line saying so and exits 0. Figures: bench/NOTES_gpu_reduce.md.
#include <tg/tg.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "engine/schedule.hpp"
#include "runtime/device.hpp"

using namespace tg;

namespace {
using Clock = std::chrono::steady_clock;

struct Work {
  std::string name;
  std::vector<Tensor> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  double bytes;   // fewest bytes moved: inputs read once, output written once
};

int kernels_of(const Work& w) {
  int n = 0;
  for (const ScheduleItem& si : w.fn(w.inputs).schedule()) n += si.kind == MetaOps::KERNEL;
  return n;
}

void run(const Work& w, int iters) {
  TinyJit jit([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{w.fn(in).realize()}; });
  for (int i = 0; i < 3; i++) jit(w.inputs);
  Device::synchronize("CUDA");
  auto t0 = Clock::now();
  for (int i = 0; i < iters; i++) jit(w.inputs);
  Device::synchronize("CUDA");
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / iters;
  std::printf("{\"bench\": \"%s\", \"impl\": \"tg\", \"kernels\": %d, \"ms\": %.4f, \"GBps\": %.1f}\n", w.name.c_str(), kernels_of(w), ms,
              w.bytes / ms * 1e-6);
  std::fflush(stdout);
}
}  // namespace

int main() {
  if (cuda_device_count() == 0) {
    std::printf("{\"bench\": \"gpu_reduce\", \"skipped\": \"no CUDA device\"}\n");
    return 0;
  }
  const int iters = static_cast<int>(getenv("BENCH_ITERS", 20));
  const std::string only = getenv_str("BENCH_ONLY", "");
  Opts cuda{dtypes::float32, "CUDA", false};
  Tensor::manual_seed(0);
  auto R = [&](Shape s) { return Tensor::rand(s, cuda).realize(); };
  const int64_t N = int64_t{1} << 28;
  std::vector<Work> ws;
  ws.push_back({"sum_2^28", {R({N})}, [](auto& in) { return in[0].sum(); }, N * 4.0});
  ws.push_back({"softmax_8192x8192", {R({8192, 8192})}, [](auto& in) { return in[0].softmax(-1); }, 2 * 8192.0 * 8192 * 4});
  ws.push_back({"softmax_4096x32000", {R({4096, 32000})}, [](auto& in) { return in[0].softmax(-1); }, 2 * 4096.0 * 32000 * 4});
  ws.push_back({"log_softmax_4096x32000", {R({4096, 32000})}, [](auto& in) { return in[0].log_softmax(-1); }, 2 * 4096.0 * 32000 * 4});
  // rows not a whole number of 16-byte vectors or thread blocks: a block per row with a masked tail
  ws.push_back({"softmax_8192x4097", {R({8192, 4097})}, [](auto& in) { return in[0].softmax(-1); }, 2 * 8192.0 * 4097 * 4});
  ws.push_back({"layernorm_8192x1024", {R({8192, 1024})}, [](auto& in) { return in[0].layernorm(-1); }, 2 * 8192.0 * 1024 * 4});
  Tensor labels = Tensor::randint({8192}, 0, 32000, Opts{dtypes::int32, "CUDA", false}).realize();
  ws.push_back({"cross_entropy_8192x32000", {R({8192, 32000}), labels},
                [](auto& in) { return in[0].sparse_categorical_crossentropy(in[1]); }, 8192.0 * 32000 * 4});
  ws.push_back({"sum0_8192x8192", {R({8192, 8192})}, [](auto& in) { return in[0].sum(0); }, 8192.0 * 8192 * 4});
  ws.push_back({"sum1_8192x64", {R({8192, 64})}, [](auto& in) { return in[0].sum(1); }, 8192.0 * 64 * 4});
  ws.push_back({"argmax_8192x8192", {R({8192, 8192})}, [](auto& in) { return in[0].argmax(1); }, 8192.0 * 8192 * 4});
  // odd rows under several reduces (argmax: a max, then the first index holding it; cross-entropy's row kernel)
  ws.push_back({"argmax_8192x4097", {R({8192, 4097})}, [](auto& in) { return in[0].argmax(1); }, 8192.0 * 4097 * 4});
  Tensor labels4097 = Tensor::randint({8192}, 0, 4097, Opts{dtypes::int32, "CUDA", false}).realize();
  ws.push_back({"cross_entropy_8192x4097", {R({8192, 4097}), labels4097},
                [](auto& in) { return in[0].sparse_categorical_crossentropy(in[1]); }, 8192.0 * 4097 * 4});
  ws.push_back({"a*b+1_2^28", {R({N}), R({N})}, [](auto& in) { return in[0] * in[1] + 1; }, 3 * N * 4.0});
  ws.push_back({"rand_2^28", {}, [N](auto&) { return Tensor::rand({N}, Opts{dtypes::float32, "CUDA", false}); }, N * 4.0});
  for (const Work& w : ws) {
    if (!only.empty() && w.name.find(only) == std::string::npos) continue;
    try {
      run(w, iters);
    } catch (const std::exception& e) {
      std::printf("{\"bench\": \"%s\", \"impl\": \"tg\", \"error\": \"%s\"}\n", w.name.c_str(), std::string(e.what()).substr(0, 200).c_str());
    }
  }
}
