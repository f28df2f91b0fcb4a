#pragma once
// The CPU runtime's thread count (THREADS, else all cores) as the stages above the runtime see it: the tensor
// layer and codegen size their parallel loops by it without reaching into the runtime's thread pool; and the
// core's caches, which size the CPU GEMM's panels and blocks (codegen/pack.cpp) and the conv paths that feed it.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <thread>

#include "tg/helpers.hpp"

namespace tg {
inline int64_t cpu_threads() {
  const int64_t n = getenv("THREADS", 0);
  return n > 0 ? n : std::max<int64_t>(1, std::thread::hardware_concurrency());
}

// This core's L2 and L1d sizes and cache line, read at runtime (sysconf); CPU_L2 and CPU_L1 override the sizes
// (tests, other machines).
struct CpuCaches {
  int64_t l2 = 0;     // bytes
  int64_t line = 0;   // bytes
  int64_t l1 = 0;     // bytes
};
inline CpuCaches cpu_caches() {
  static const CpuCaches sys = [] {
    auto get = [](int name, int64_t fallback) {
      const long v = sysconf(name);
      return v > 0 ? static_cast<int64_t>(v) : fallback;
    };
    return CpuCaches{get(_SC_LEVEL2_CACHE_SIZE, int64_t{1} << 20), get(_SC_LEVEL1_DCACHE_LINESIZE, 64),
                     get(_SC_LEVEL1_DCACHE_SIZE, int64_t{32} << 10)};
  }();
  return CpuCaches{getenv("CPU_L2", sys.l2), sys.line, getenv("CPU_L1", sys.l1)};
}
}  // namespace tg
