// PROFILE=1: a Chrome/Perfetto trace (JSON, "traceEvents") of what ran, one track per device plus
// the host: kernels with name, time, GFLOPS and GB/s, copies, and host spans for scheduling,
// codegen, compiles and TinyJit captures/replays. PROFILEPATH names the file (default: a file in
// the temporary folder); it is written at exit, and its path printed. Off: one flag test per call.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tg {
class Runner;
}

namespace tg::profile {

bool enabled();   // PROFILE >= 1 (the env var or a tg::Context)

struct Event {
  std::string name, track;      // track: "HOST" or a device name
  double ts_us = 0, dur_us = 0; // since the profiler's start
  std::vector<std::pair<std::string, std::string>> args;   // values are JSON already
};

double now_us();
void add(Event e);
// a kernel or copy that ran on its device for `seconds`, ending about now. Recorded raw (the runner
// and the ops' names); names and figures are formatted when the trace is written.
void kernel_event(std::shared_ptr<Runner> prg, double seconds, bool jit, const std::vector<std::string>& metadata);

// RAII host span: { profile::Span s("schedule"); ... }   nothing recorded when disabled
class Span {
 public:
  explicit Span(const char* cat, std::string name = "");
  ~Span();
  void arg(const std::string& key, const std::string& json_value);
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
 private:
  bool on_;
  double start_ = 0;
  Event ev_;
};

// JSON helpers for args
std::string jstr(const std::string& s);   // quoted, escaped, ANSI colors removed
std::string jnum(double v);

std::vector<Event> events();   // everything recorded, formatted (for tests)
void clear();
// Writes the trace; returns the path (PROFILEPATH or the default). Also runs at exit when events exist.
std::string save();
std::string default_path();

}  // namespace tg::profile
