#pragma once
// The CPU runtime's thread count (THREADS, else all cores) as the stages above the runtime see it: the tensor
// layer and codegen size their parallel loops by it without reaching into the runtime's thread pool.
#include <algorithm>
#include <cstdint>
#include <thread>

#include "tg/helpers.hpp"

namespace tg {
inline int64_t cpu_threads() {
  const int64_t n = getenv("THREADS", 0);
  return n > 0 ? n : std::max<int64_t>(1, std::thread::hardware_concurrency());
}
}  // namespace tg
