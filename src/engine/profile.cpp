// PROFILE=1 trace recording and the Chrome trace-event JSON writer.
#include "engine/profile.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "engine/realize.hpp"
#include "lazy/metadata.hpp"
#include "tg/helpers.hpp"
#include "tg/json.hpp"

namespace tg::profile {

namespace {
// a kernel as recorded: formatting waits for save(), so recording costs a copy and a lock
using MD = std::vector<std::string>;
struct KernelRec {
  std::shared_ptr<Runner> prg;
  double ts_us, dur_us;
  bool jit;
  const MD* metadata;   // interned
};
struct Store {
  std::mutex mu;
  std::vector<Event> host;
  std::vector<KernelRec> kernels;
  std::set<MD> metadata;                                 // each distinct list once
  std::unordered_map<const std::string*, const MD*> by_address;   // a replayed item's list: no compare of contents
  bool hook = false;
};

// the interned copy of md; a JIT replay passes the same vector every step, found by its address
const MD* intern(Store& s, const MD& md) {
  if (md.empty()) return nullptr;
  auto it = s.by_address.find(md.data());
  if (it != s.by_address.end() && *it->second == md) return it->second;
  const MD* p = &*s.metadata.insert(md).first;
  s.by_address[md.data()] = p;
  return p;
}
Store& store() {
  static auto* s = new Store();   // leaked: the exit hook may run after static destructors
  return *s;
}
const auto t0 = std::chrono::steady_clock::now();

std::string trimmed(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\033') {   // ANSI colors of DEBUG names
      while (i < s.size() && s[i] != 'm') i++;
      continue;
    }
    o += s[i];
  }
  const size_t b = o.find_first_not_of(' '), e = o.find_last_not_of(' ');
  return b == std::string::npos ? o : o.substr(b, e - b + 1);
}

Event format_kernel(const KernelRec& k) {
  const double d = std::max(k.dur_us, 1e-6) * 1e3;   // ns
  Event e{trimmed(k.prg->display_name), k.prg->device, k.ts_us, k.dur_us, {}};
  e.args = {{"time_us", jnum(k.dur_us)}, {"GFLOPS", jnum(k.prg->op_estimate / d)}, {"GB/s", jnum(k.prg->mem_estimate / d)},
            {"jit", k.jit ? "true" : "false"}};
  if (k.metadata) e.args.emplace_back("metadata", jstr(format_metadata(*k.metadata)));
  return e;
}

void ensure_hook(Store& s);
void at_exit() {
  {
    Store& s = store();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.host.empty() && s.kernels.empty()) return;
  }
  try {
    const std::string path = save();
    std::fprintf(stderr, "PROFILE: trace saved to %s (open it in ui.perfetto.dev or chrome://tracing)\n", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
}
void ensure_hook(Store& s) {
  if (!s.hook) s.hook = true, std::atexit(at_exit);
}
}  // namespace

bool enabled() {
  thread_local uint64_t gen = 0;
  thread_local bool on = false;
  if (const uint64_t g = context_generation(); g != gen) on = getenv("PROFILE") >= 1, gen = g;
  return on;
}

double now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count(); }

void add(Event e) {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  ensure_hook(s);
  s.host.push_back(std::move(e));
}

void kernel_event(std::shared_ptr<Runner> prg, double seconds, bool jit, const std::vector<std::string>& metadata) {
  const double end = now_us(), dur = seconds * 1e6;
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  ensure_hook(s);
  s.kernels.push_back(KernelRec{std::move(prg), end - dur, dur, jit, intern(s, metadata)});
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
  std::string plain;   // without the ANSI color codes of DEBUG names
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] != '\033') plain += s[i];
    else while (i < s.size() && s[i] != 'm') i++;
  }
  return json_quote(plain);
}
std::string jnum(double v) {
  if (!std::isfinite(v)) return "0";
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f", v);
  return b;
}

std::vector<Event> events() {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<Event> ev = s.host;
  for (const KernelRec& k : s.kernels) ev.push_back(format_kernel(k));
  return ev;
}
void clear() {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  s.host.clear();
  s.kernels.clear();
  s.by_address.clear();   // the interned lists stay: nothing points at them after this
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
