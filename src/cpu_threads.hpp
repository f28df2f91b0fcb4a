#pragma once
// The CPU runtime's thread count (THREADS, else all cores) as the stages above the runtime see it: the tensor
// layer and codegen size their parallel loops by it without reaching into the runtime's thread pool; and the
// core's caches and vector register width, which size the CPU GEMM's panels, blocks and register tiles (codegen/pack.cpp,
// heuristic.cpp, renderer/cstyle.cpp) and the conv paths that feed them.
#include <unistd.h>

#include <algorithm>
#include <string>
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

// The widest vector register the CPU kernels' -march=native gives this CPU: 64 bytes with AVX-512, 32 with AVX2, 16
// otherwise (SSE, NEON). The C vectors stay up to 64 bytes (vector_bytes), which the compiler splits into registers:
// two independent halves help a row kernel's max and sum chains on AVX2 (softmax 4096^2 on a Zen 3, one thread: 12.7 ms
// against 17.6 with 32-byte vectors). A register tile is sized in registers instead: AVX-512's 8 rows x 2 vectors of
// 16 lanes needs 32 of AVX2's 16 registers and spilled (matmul 1024^3: 53-61 GFLOPS). CPU_REGISTER_BYTES=16|32|64.
inline int64_t cpu_register_bytes() {
  int64_t native = 16;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  native = __builtin_cpu_supports("avx512f") ? 64 : __builtin_cpu_supports("avx2") ? 32 : 16;
#endif
  const int64_t v = getenv("CPU_REGISTER_BYTES", native);
  if (v != 16 && v != 32 && v != 64)
    throw Error("CPU_REGISTER_BYTES=" + std::to_string(v) + ": the CPU's vector registers are 16, 32 or 64 bytes");
  return v;
}
}  // namespace tg
