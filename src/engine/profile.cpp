// PROFILE=1 trace recording and the Chrome trace-event JSON writer.
#include "engine/profile.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "tg/helpers.hpp"

namespace tg::profile {

namespace {
std::mutex mu;
std::vector<Event>& store() {
  static auto* ev = new std::vector<Event>();   // leaked: the exit hook may run after static destructors
  return *ev;
}
const auto t0 = std::chrono::steady_clock::now();
bool exit_hook = false;

void at_exit() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (store().empty()) return;
  }
  try {
    const std::string path = save();
    std::fprintf(stderr, "PROFILE: trace saved to %s (open it in ui.perfetto.dev or chrome://tracing)\n", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
}
}  // namespace

// read again only after a tg::Context changed something: off costs a compare per call
bool enabled() {
  thread_local uint64_t gen = 0;
  thread_local bool on = false;
  if (const uint64_t g = context_generation(); g != gen) on = getenv("PROFILE") >= 1, gen = g;
  return on;
}

double now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count(); }

void add(Event e) {
  std::lock_guard<std::mutex> lock(mu);
  if (!exit_hook) exit_hook = true, std::atexit(at_exit);
  store().push_back(std::move(e));
}

void device_event(const std::string& device, const std::string& name, double seconds,
                  std::vector<std::pair<std::string, std::string>> args) {
  const double end = now_us(), dur = seconds * 1e6;
  add(Event{name, device, end - dur, dur, std::move(args)});
}

Span::Span(const char* cat, std::string name) : on_(enabled()) {
  if (!on_) return;
  start_ = now_us();
  ev_.name = name.empty() ? cat : std::string(cat) + " " + name;
  ev_.track = "HOST";
}
Span::~Span() {
  if (!on_) return;
  ev_.ts_us = start_;
  ev_.dur_us = now_us() - start_;
  add(std::move(ev_));
}
void Span::arg(const std::string& key, const std::string& json_value) {
  if (on_) ev_.args.emplace_back(key, json_value);
}

std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (size_t i = 0; i < s.size(); i++) {
    const char c = s[i];
    if (c == '\033') {   // ANSI color codes from DEBUG names
      while (i < s.size() && s[i] != 'm') i++;
      continue;
    }
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\u%04x", c);
      o += b;
    } else o += c;
  }
  return o + "\"";
}
std::string jnum(double v) {
  if (!std::isfinite(v)) return "0";
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f", v);
  return b;
}

std::vector<Event> events() {
  std::lock_guard<std::mutex> lock(mu);
  return store();
}
void clear() {
  std::lock_guard<std::mutex> lock(mu);
  store().clear();
}

std::string default_path() {
  std::string d = getenv_str("TMPDIR", "/tmp");
  if (d.empty()) d = "/tmp";
  return d + "/tg_profile_" + std::to_string(getpid()) + ".json";
}

std::string save() {
  const std::string path = getenv_str("PROFILEPATH", default_path());
  std::vector<Event> ev = events();
  // one process (pid) per track: HOST first, then devices in order of first use
  std::map<std::string, int> pids{{"HOST", 0}};
  std::vector<std::string> order{"HOST"};
  for (auto& e : ev)
    if (pids.emplace(e.track, static_cast<int>(order.size())).second) order.push_back(e.track);
  std::string out = "{\"traceEvents\":[\n";
  for (size_t i = 0; i < order.size(); i++)
    out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(i) + ",\"tid\":0,\"args\":{\"name\":" + jstr(order[i]) +
           "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(i) + ",\"tid\":0,\"args\":{\"sort_index\":" +
           std::to_string(i) + "}},\n";
  for (size_t i = 0; i < ev.size(); i++) {
    const Event& e = ev[i];
    out += "{\"name\":" + jstr(e.name) + ",\"ph\":\"X\",\"pid\":" + std::to_string(pids[e.track]) + ",\"tid\":0,\"ts\":" + jnum(e.ts_us) +
           ",\"dur\":" + jnum(e.dur_us) + ",\"args\":{";
    for (size_t a = 0; a < e.args.size(); a++) out += (a ? "," : "") + jstr(e.args[a].first) + ":" + e.args[a].second;
    out += "}}";
    out += i + 1 < ev.size() ? ",\n" : "\n";
  }
  if (ev.empty()) out.erase(out.size() - 2, 1);   // no trailing comma after the last track name
  out += "],\"displayTimeUnit\":\"ms\"}\n";
  std::ofstream f(path, std::ios::trunc);
  f << out;
  if (!f) throw Error("PROFILE: can't write the trace to " + path + "; set PROFILEPATH to a writable file");
  return path;
}

}  // namespace tg::profile
