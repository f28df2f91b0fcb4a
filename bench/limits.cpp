// Machine limits (bench/limits.hpp). Built with -O3 -march=native (bench/CMakeLists.txt) so the FMA
// loop uses the widest vectors this CPU has; the bandwidth loops are plain and vectorize on their own.
#include "limits.hpp"

#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

extern char** environ;

namespace tgbench {

namespace {
using clk = std::chrono::steady_clock;
double secs_since(clk::time_point t) { return std::chrono::duration<double>(clk::now() - t).count(); }

// run fn(thread index) on n threads, best wall time of reps
double best_parallel(int n, int reps, const std::function<void(int)>& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    auto t = clk::now();
    std::vector<std::thread> ts;
    for (int i = 0; i < n; i++) ts.emplace_back(fn, i);
    for (auto& th : ts) th.join();
    best = std::min(best, secs_since(t));
  }
  return best;
}

// 12 independent chains of FMAs on the widest native vector (16 lanes with AVX-512, 8 with AVX2): enough in
// flight to hide the FMA latency on every x86 core, and 12 registers of either file. (64-byte vectors on an AVX2
// core are two registers each: 24 chains of its 16 registers spilled, and a Zen 3 read 12-14 GFLOPS for 2 cores.)
#ifdef __AVX512F__
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;
#endif
using vnative = float __attribute__((vector_size(4 * kLanes)));
constexpr int kChains = 12;
float fma_chains(long iters, float seed) {
  vnative acc[kChains], m, a;
  for (int i = 0; i < kLanes; i++) m[i] = 0.9999f, a[i] = seed * 1e-7f;
  for (int c = 0; c < kChains; c++)
    for (int i = 0; i < kLanes; i++) acc[c][i] = seed + c;
  for (long it = 0; it < iters; it++)
    for (int c = 0; c < kChains; c++) acc[c] = acc[c] * m + a;
  float s = 0;
  for (int c = 0; c < kChains; c++)
    for (int i = 0; i < kLanes; i++) s += acc[c][i];
  return s;
}

Limit fma_peak(int threads) {
  const long iters = 20'000'000 / kLanes;
  std::vector<float> sink(threads);
  double t = best_parallel(threads, 3, [&](int i) { sink[i] = fma_chains(iters, 1.0f + i); });
  double flops = 2.0 * kLanes * kChains * double(iters) * threads;
  return {flops / t / 1e9, "fp32 FMA, " + std::to_string(kLanes) + " lanes x " + std::to_string(kChains) + " chains, " +
                               std::to_string(threads) + " threads"};
}

Limit elementwise_bw(int threads) {
  const size_t n = size_t{1} << 24;
  std::vector<float> a(n, 1.5f), b(n, 0.5f), c(n);
  auto part = [&](int i, size_t& lo, size_t& hi) { lo = n * i / threads, hi = n * (i + 1) / threads; };
  best_parallel(threads, 1, [&](int i) { size_t lo, hi; part(i, lo, hi); std::fill(c.begin() + lo, c.begin() + hi, 0.f); });
  double t = best_parallel(threads, 5, [&](int i) {
    size_t lo, hi;
    part(i, lo, hi);
    for (size_t k = lo; k < hi; k++) c[k] = a[k] * b[k] + 1.0f;
  });
  return {3.0 * 4 * n / t / 1e9, "c=a*b+1 fp32, 2^24 elements, 3 streams, " + std::to_string(threads) + " threads"};
}

Limit sum_bw(int threads) {
  const size_t n = size_t{1} << 24;
  std::vector<float> a(n, 0.25f);
  std::vector<double> part_sum(threads);
  double t = best_parallel(threads, 5, [&](int i) {
    size_t lo = n * i / threads, hi = n * (i + 1) / threads;
    float s[16] = {};
    for (size_t k = lo; k + 16 <= hi; k += 16)
      for (int j = 0; j < 16; j++) s[j] += a[k + j];
    double total = 0;
    for (int j = 0; j < 16; j++) total += s[j];
    part_sum[i] = total;
  });
  return {4.0 * n / t / 1e9, "sum of fp32 array, 2^24 elements, " + std::to_string(threads) + " threads"};
}

}  // namespace

Limit gemm_gflops(int n) {
  void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) return {0, "libopenblas not found (apt install libopenblas0)"};
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  auto sgemm = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
  if (!sgemm) return {0, "libopenblas has no cblas_sgemm"};
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    auto t = clk::now();
    sgemm(101 /*RowMajor*/, 111 /*NoTrans*/, 111, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    best = std::min(best, secs_since(t));
  }
  return {2.0 * n * n * n / best / 1e9, "OpenBLAS sgemm fp32 " + std::to_string(n) + "^3"};
}

std::map<std::string, Limit> measure_limits(int threads) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  return {{"fma_peak_gflops", fma_peak(threads)},
          {"elementwise_GBps", elementwise_bw(threads)},
          {"sum_GBps", sum_bw(threads)},
          {"gemm1024_gflops", gemm_gflops(1024)}};
}

Limit gemm_gflops_avx512(int n) {
  if (!__builtin_cpu_supports("avx512f")) return {0, "no AVX-512 on this CPU"};
  int fds[2];
  if (pipe(fds) != 0) return {0, "pipe failed"};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  std::vector<std::string> env_s = {"OPENBLAS_CORETYPE=SkylakeX", "TG_LIMITS_CHILD_GEMM=" + std::to_string(n)};
  for (char** e = environ; *e; e++)
    if (std::strncmp(*e, "OPENBLAS_CORETYPE=", 18) && std::strncmp(*e, "TG_LIMITS_CHILD_GEMM=", 21)) env_s.push_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  char self[] = "/proc/self/exe";
  char* argv[] = {self, nullptr};
  pid_t pid;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t r; rc == 0 && (r = read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, r);
  close(fds[0]);
  int status = 0;
  if (rc != 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return {0, "the OpenBLAS child failed"};
  return {std::atof(out.c_str()), "OpenBLAS sgemm fp32 " + std::to_string(n) + "^3, AVX-512 kernels (OPENBLAS_CORETYPE=SkylakeX)"};
}

bool limits_child_main() {
  const char* n = std::getenv("TG_LIMITS_CHILD_GEMM");
  if (!n) return false;
  std::printf("%.3f\n", gemm_gflops(std::atoi(n)).value);
  return true;
}

double fma_peak_burst(int threads) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  const long iters = 4'000'000 / kLanes;
  std::vector<float> sink(threads);
  double t = best_parallel(threads, 1, [&](int i) { sink[i] = fma_chains(iters, 1.0f + i); });
  return 2.0 * kLanes * kChains * double(iters) * threads / t / 1e9;
}

double fma_peak_core_cputime() {
  const long iters = 4'000'000 / kLanes;
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    volatile float sink = fma_chains(iters, 1.0f + r);
    (void)sink;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    best = std::min(best, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
  }
  return 2.0 * kLanes * kChains * double(iters) / best / 1e9;
}

PassTime stream_pass(size_t bytes, Pass pass, int threads, int reps) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  const size_t n = bytes / sizeof(float);
  std::vector<float> x(pass == Pass::write ? 0 : n, 0.25f), y(pass == Pass::read ? 0 : n, 0.f);
  std::vector<double> sums(threads);
  auto cpu_ms = [] {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
  };
  PassTime best{1e30, 1e30};
  for (int r = 0; r < reps + 1; r++) {   // the first pass faults the pages in
    const double c0 = cpu_ms();
    const double wall = 1e3 * best_parallel(threads, 1, [&](int i) {
      size_t lo = n * i / threads, hi = n * (i + 1) / threads;
      if (pass == Pass::read_write) {
        for (size_t k = lo; k < hi; k++) y[k] = 2.0f * x[k];
      } else if (pass == Pass::write) {
        for (size_t k = lo; k < hi; k++) y[k] = float(k);
      } else {
        float s[16] = {};
        for (size_t k = lo; k + 16 <= hi; k += 16)
          for (int j = 0; j < 16; j++) s[j] += x[k + j];
        for (int j = 0; j < 16; j++) sums[i] += s[j];
      }
    });
    const double cpu = cpu_ms() - c0;
    if (r == 0) continue;
    best.wall_ms = std::min(best.wall_ms, wall);
    best.cpu_ms = std::min(best.cpu_ms, cpu);
  }
  return best;
}

std::string limit_json(const std::string& key, const Limit& l) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.1f", l.value);
  return "{\"limit\":\"" + key + "\",\"value\":" + (l.value > 0 ? std::string(buf) : "null") + ",\"what\":\"" + l.what + "\"}";
}

}  // namespace tgbench
