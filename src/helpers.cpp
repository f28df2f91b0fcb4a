#include "tg/helpers.hpp"

#include "env_reads.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <mutex>
#include <set>

namespace tg {

namespace {
// Context overrides live here; the process environment is the fallback.
std::mutex& ctx_mutex() { static std::mutex m; return m; }
std::map<std::string, std::string>& overrides() { static std::map<std::string, std::string> m; return m; }
std::atomic<uint64_t> generation{1};
}  // namespace

uint64_t context_generation() { return generation.load(std::memory_order_acquire); }

namespace {
thread_local std::vector<EnvRead>* env_log = nullptr;
// Settings that change what is printed, profiled or where files go, never what a kernel is
bool observes_only(const std::string& key) {
  static const std::set<std::string> keys = {"DEBUG", "PROFILE", "PROFILEPATH", "GRAPH", "GRAPHPATH", "GRAPH_MAX", "REPLAY_DIR",
                                             "CACHELEVEL", "CACHEDB", "TRACK_MATCH_STATS", "BEAM_DEBUG", "HOME", "TMPDIR",
                                             "XDG_CACHE_HOME", "PATH"};
  return keys.count(key) != 0;
}
std::pair<bool, std::string> lookup(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(ctx_mutex());
    auto it = overrides().find(key);
    if (it != overrides().end()) return {true, it->second};
  }
  const char* v = std::getenv(key.c_str());
  return {v != nullptr, v ? std::string(v) : std::string()};
}
}  // namespace

std::string getenv_str(const std::string& key, const std::string& default_value) {
  auto [set, value] = lookup(key);
  if (env_log && !observes_only(key)) env_log->push_back({key, set, value});
  return set ? value : default_value;
}

EnvReads::EnvReads() : outer_(env_log) { env_log = &reads_; }
EnvReads::~EnvReads() {
  env_log = outer_;
  if (outer_) outer_->insert(outer_->end(), reads_.begin(), reads_.end());
}
std::vector<EnvRead> EnvReads::take() {
  std::vector<EnvRead> r = reads_;
  std::stable_sort(r.begin(), r.end(), [](const EnvRead& a, const EnvRead& b) { return a.key < b.key; });
  r.erase(std::unique(r.begin(), r.end(), [](const EnvRead& a, const EnvRead& b) { return a.key == b.key; }), r.end());
  return r;
}

bool env_unchanged(const std::vector<EnvRead>& reads) {
  return std::all_of(reads.begin(), reads.end(), [](const EnvRead& r) { return lookup(r.key) == std::pair{r.set, r.value}; });
}

namespace {
// key's value read by parse (std::stoll, std::stod) to its last character, or the default where unset
template <class T, class Parse> T getenv_parsed(const std::string& key, T default_value, Parse parse, const char* kind, const char* example) {
  std::string s = getenv_str(key, "");
  if (s.empty()) return default_value;
  try {
    size_t pos = 0;
    T v = parse(s, &pos);
    if (pos == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error("getenv: " + key + "=" + s + " is not " + kind + "; set it to a value like " + key + "=" + example);
}
}  // namespace

int64_t getenv(const std::string& key, int64_t default_value) {
  return getenv_parsed<int64_t>(key, default_value, [](const std::string& s, size_t* pos) { return std::stoll(s, pos); }, "an integer", "1");
}

double getenv_float(const std::string& key, double default_value) {
  return getenv_parsed<double>(key, default_value, [](const std::string& s, size_t* pos) { return std::stod(s, pos); }, "a number", "0.5");
}

Context::Context(std::initializer_list<std::pair<std::string, int64_t>> vars) {
  std::map<std::string, std::string> m;
  for (auto& [k, v] : vars) m[k] = std::to_string(v);
  std::lock_guard<std::mutex> lock(ctx_mutex());
  for (auto& [k, v] : m) {
    auto it = overrides().find(k);
    saved_[k] = it == overrides().end() ? std::pair<bool, std::string>{false, ""} : std::pair<bool, std::string>{true, it->second};
    overrides()[k] = v;
  }
  generation.fetch_add(1, std::memory_order_acq_rel);
}

Context::Context(const std::map<std::string, std::string>& vars) {
  std::lock_guard<std::mutex> lock(ctx_mutex());
  for (auto& [k, v] : vars) {
    auto it = overrides().find(k);
    saved_[k] = it == overrides().end() ? std::pair<bool, std::string>{false, ""} : std::pair<bool, std::string>{true, it->second};
    overrides()[k] = v;
  }
  generation.fetch_add(1, std::memory_order_acq_rel);
}

Context::~Context() {
  std::lock_guard<std::mutex> lock(ctx_mutex());
  for (auto& [k, s] : saved_) {
    if (s.first) overrides()[k] = s.second;
    else overrides().erase(k);
  }
  generation.fetch_add(1, std::memory_order_acq_rel);
}

Timing::Timing(std::string prefix, bool enabled)
    : prefix_(std::move(prefix)), enabled_(enabled), start_(std::chrono::steady_clock::now()) {}
double Timing::elapsed_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
}
Timing::~Timing() {
  if (enabled_) std::fprintf(stderr, "%s%6.2f ms\n", prefix_.c_str(), elapsed_ms());
}

int64_t prod(const std::vector<int64_t>& v) {
  int64_t r = 1;
  for (auto x : v) r *= x;
  return r;
}

template <class T>
static std::string tuple_str(const std::vector<T>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}
std::string to_str(const std::vector<int64_t>& v) { return tuple_str(v); }
std::string to_str(const std::vector<int>& v) { return tuple_str(v); }

std::string colored(const std::string& s, const std::string& color) {
  static const bool tty = isatty(STDOUT_FILENO) && isatty(STDERR_FILENO);
  if (!tty || color.empty()) return s;
  static const char* names[] = {"black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"};
  for (int i = 0; i < 8; i++)
    if (color == names[i]) return "\033[" + std::to_string(90 + i) + "m" + s + "\033[0m";
  return s;
}

}  // namespace tg
