// Settings, counters and errors shared by every stage (tinygrad's helpers.py).
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace tg {

// Every user-facing failure: the message names the op, the shapes and the fix.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Environment-driven settings read like tinygrad's ContextVar: getenv("DEBUG") is the
// process environment unless a tg::Context in scope overrides it.
int64_t getenv(const std::string& key, int64_t default_value = 0);
std::string getenv_str(const std::string& key, const std::string& default_value = "");
// a real-valued setting (BEAM_BUDGET=2.5); a value that is not a number raises tg::Error
double getenv_float(const std::string& key, double default_value);

// RAII override: { tg::Context ctx({{"DEBUG", 4}}); ... }   restores on scope exit.
class Context {
 public:
  Context(std::initializer_list<std::pair<std::string, int64_t>> vars);
  Context(const std::map<std::string, std::string>& vars);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
 private:
  std::map<std::string, std::pair<bool, std::string>> saved_;
};

// Bumped by every tg::Context change: a setting cached with this number stays valid while it is equal.
uint64_t context_generation();

// DEBUG, read again only after a tg::Context change: it is checked on every kernel launch
inline int debug() {
  thread_local uint64_t seen = 0;
  thread_local int level = 0;
  if (const uint64_t g = context_generation(); g != seen) level = static_cast<int>(getenv("DEBUG")), seen = g;
  return level;
}

// Global counters (tinygrad's GlobalCounters): ops, memory traffic, kernels, time.
struct GlobalCounters {
  static inline int64_t global_ops = 0;
  static inline int64_t global_mem = 0;
  static inline double time_sum_s = 0;
  static inline int64_t kernel_count = 0;
  static inline int64_t mem_used = 0;
  static void reset() { global_ops = global_mem = kernel_count = 0; time_sum_s = 0; }
};

// Timing: prints "<prefix>N.NN ms" on scope exit when enabled.
class Timing {
 public:
  explicit Timing(std::string prefix = "", bool enabled = true);
  ~Timing();
  double elapsed_ms() const;
 private:
  std::string prefix_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

int64_t prod(const std::vector<int64_t>& v);
std::string to_str(const std::vector<int64_t>& v);   // "(3, 4)" like a Python tuple
std::string to_str(const std::vector<int>& v);
std::string colored(const std::string& s, const std::string& color);   // only on a terminal

}  // namespace tg
