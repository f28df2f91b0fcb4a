// This machine's limits, measured in the same process as the benchmark they judge: the fp32 FMA
// peak, the memory bandwidth of an elementwise a*b+1 and of a sum, and OpenBLAS sgemm when the
// library is installed. Each is one JSON line {"limit": key, "value": v, "what": ...}.
#pragma once
#include <map>
#include <string>

namespace tgbench {

struct Limit {
  double value = 0;   // GFLOPS or GB/s; 0 when it couldn't be measured (OpenBLAS missing)
  std::string what;
};

// keys: fma_peak_gflops, elementwise_GBps, sum_GBps, gemm1024_gflops; threads <= 0: all cores
std::map<std::string, Limit> measure_limits(int threads = 0);
// OpenBLAS sgemm at n^3 (dlopen, so no link dependency); value 0 when the library is missing
Limit gemm_gflops(int n);
std::string limit_json(const std::string& key, const Limit& l);

// The floor of a memory-bound pass over `bytes` of fp32 on `threads` threads: y = 2*x (reads and
// writes `bytes` each), a sum (reads only) or a fill y = i (writes only). Best of reps, as wall time
// and as the process CPU time of that same pass (all threads together), so a kernel's CPU time can
// be judged against it on a machine shared with other work.
struct PassTime { double wall_ms = 0, cpu_ms = 0; };
enum class Pass { read_write, read, write };
PassTime stream_pass(size_t bytes, Pass pass, int threads, int reps = 5);

// OpenBLAS with its AVX-512 (SkylakeX) kernels: OPENBLAS_CORETYPE is read when the library loads, so
// this runs the benchmark's own binary again (/proc/self/exe) as a child that only measures sgemm.
// value 0 on a CPU without AVX-512 or when the child fails.
Limit gemm_gflops_avx512(int n);
// Call first in main(): in that child it measures, prints the value and returns true (main returns).
bool limits_child_main();
// The FMA peak of one short burst on all cores (about 10 ms): interleaved with a benchmark's own
// repeats on a shared machine, the best of each is measured under the same load.
double fma_peak_burst(int threads = 0);
// One core's FMA peak in GFLOPS per second of CPU time the thread received (CLOCK_THREAD_CPUTIME_ID,
// best of 5): with a benchmark's GFLOPS per CPU-second of the process, a per-core efficiency that a
// busy machine's waiting doesn't enter (the cache sharing with other processes still does).
double fma_peak_core_cputime();

}  // namespace tgbench
