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

}  // namespace tgbench
