// Prints this machine's limits as JSON lines (bench/limits.hpp): what the other benchmarks' ratios
// are taken against. THREADS=n measures with n threads (default: all cores).
#include <cstdio>
#include <cstdlib>

#include "limits.hpp"

int main() {
  const char* t = std::getenv("THREADS");
  for (const auto& [key, l] : tgbench::measure_limits(t ? std::atoi(t) : 0)) std::printf("%s\n", tgbench::limit_json(key, l).c_str());
  return 0;
}
