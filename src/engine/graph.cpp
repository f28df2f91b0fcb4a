// GRAPH=1: the lazy graph and the schedule as Graphviz dot files.
#include "engine/graph.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <unordered_map>

#include "engine/realize.hpp"
#include "lazy/metadata.hpp"
#include "runtime/buffer.hpp"
#include "runtime/tools.hpp"

namespace tg::graph {

namespace {

// tinygrad's graph.py colors: meta ops yellow, elementwise grey, reduces red, buffers blue
const char* kMetaColor = "#FFFFa0";
const char* kAluColor = "#c0c0c0";
const char* kReduceColor = "#FFA0A0";
const char* kBufferColor = "#a0a0ff";
const char* kKernelColor = "#e0e0ff";
const char* kCopyColor = "#FFFFa0";

struct State {
  std::mutex mu;
  // lazy graph: a node per base, kept while the LazyBuffer lives (an address may be reused later)
  std::unordered_map<const LazyBuffer*, std::pair<std::weak_ptr<LazyBuffer>, int>> lb_ids;
  std::vector<std::string> lazy_lines;
  std::set<std::string> lazy_edges;
  // schedule graph: a node per run item; edges from the last item that wrote each buffer
  std::unordered_map<const Buffer*, std::pair<std::weak_ptr<Buffer>, int>> writers;
  std::vector<std::string> sched_lines;
  int next_id = 0, sched_nodes = 0, lazy_nodes = 0;
  bool warned = false, hook = false;
};
State& state() {
  static auto* s = new State();   // leaked: the exit hook may run after static destructors
  return *s;
}

std::string esc(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\033') {   // ANSI colors in display names
      while (i < s.size() && s[i] != 'm') i++;
      continue;
    }
    if (s[i] == '"' || s[i] == '\\') o += '\\';
    if (s[i] == '\n') { o += "\\n"; continue; }
    o += s[i];
  }
  return o;
}

std::string after_dot(const std::string& s) { return s.substr(s.find('.') + 1); }

std::string const_str(const ConstType& c) {
  if (auto d = std::get_if<double>(&c)) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", *d);
    return buf;
  }
  if (auto b = std::get_if<bool>(&c)) return *b ? "True" : "False";
  return std::to_string(const_to_int(c));
}

std::pair<std::string, const char*> op_text(const LazyBuffer& b) {
  if (b.realized()) return {"BUFFER", kBufferColor};
  return std::visit(
      [&](auto op) -> std::pair<std::string, const char*> {
        using T = decltype(op);
        if constexpr (std::is_same_v<T, std::monostate>) return {"BUFFER", kBufferColor};
        else if constexpr (std::is_same_v<T, ReduceOps>) return {after_dot(to_string(op)), kReduceColor};
        else if constexpr (std::is_same_v<T, MetaOps>) {
          std::string t = after_dot(to_string(op));
          if (op == MetaOps::CONST) t += " " + (std::holds_alternative<sint>(b.arg) ? std::get<sint>(b.arg).render() : const_str(std::get<ConstType>(b.arg)));
          return {t, kMetaColor};
        } else return {after_dot(to_string(op)), kAluColor};
      },
      b.op);
}

size_t max_nodes() { return static_cast<size_t>(getenv("GRAPH_MAX", 5000)); }

bool room(State& s, int& count) {
  if (static_cast<size_t>(count) < max_nodes()) return true;
  if (!s.warned) std::fprintf(stderr, "GRAPH: more than %zu nodes, the rest is not drawn (GRAPH_MAX raises it)\n", max_nodes());
  s.warned = true;
  return false;
}

void at_exit() {
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.lazy_lines.empty() && s.sched_lines.empty()) return;
  }
  if (!find_tool("dot")) std::fprintf(stderr, "GRAPH: Graphviz dot is not installed, only .dot files are written (Debian: graphviz)\n");
  try {
    for (auto& p : save()) std::fprintf(stderr, "GRAPH: saved %s\n", p.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
}
void ensure_hook(State& s) {
  if (!s.hook) s.hook = true, std::atexit(at_exit);
}

// the node id of base b, emitting its node the first time
int lb_node(State& s, LazyBuffer* b, bool is_out) {
  auto it = s.lb_ids.find(b);
  if (it != s.lb_ids.end() && !it->second.first.expired()) return it->second.second;
  const int id = s.next_id++;
  s.lb_ids[b] = {b->weak_from_this(), id};
  s.lazy_nodes++;
  auto [text, color] = op_text(*b);
  std::string label = text + "\n" + to_str(b->shape()) + " " + b->dtype.str();
  if (b->device != "CPU") label += " " + b->device;
  if (b->metadata) label += "\n" + b->metadata->str();
  s.lazy_lines.push_back("  n" + std::to_string(id) + " [label=\"" + esc(label) + "\", fillcolor=\"" + color + "\"" +
                         (b->realized() ? ", shape=box3d" : "") + (is_out ? ", penwidth=3" : "") + "];");
  return id;
}

}  // namespace

// read again only after a tg::Context changed something: off costs a compare per call
bool enabled() {
  thread_local uint64_t gen = 0;
  thread_local bool on = false;
  if (const uint64_t g = context_generation(); g != gen) on = getenv("GRAPH") >= 1, gen = g;
  return on;
}

void log_lazy(const std::vector<LazyBufferPtr>& outs) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  ensure_hook(s);
  std::vector<LazyBuffer*> stack;
  std::set<LazyBuffer*> seen;
  for (auto& o : outs) {
    LazyBuffer* b = o->base().get();
    if (!room(s, s.lazy_nodes)) return;
    lb_node(s, b, true);
    stack.push_back(b);
  }
  while (!stack.empty()) {
    LazyBuffer* b = stack.back();
    stack.pop_back();
    if (!seen.insert(b).second) continue;
    const int id = lb_node(s, b, false);
    for (auto& src : b->srcs) {
      LazyBuffer* sb = src->base().get();
      if (!room(s, s.lazy_nodes)) return;
      const int sid = lb_node(s, sb, false);
      // a view that moves data (not just the base read whole) is dashed
      const bool moved = !src->is_base() && !(src->st.contiguous() && src->size() == sb->size());
      std::string e = "  n" + std::to_string(sid) + " -> n" + std::to_string(id) + " [label=\"" + esc(to_str(src->shape())) + "\"" +
                      (moved ? ", style=dashed" : "") + "];";
      if (s.lazy_edges.insert(e).second) s.lazy_lines.push_back(e);
      stack.push_back(sb);
    }
  }
}

void log_exec(const ExecItem& ei, int n_outputs) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  ensure_hook(s);
  if (!room(s, s.sched_nodes)) return;
  const int id = s.next_id++;
  s.sched_nodes++;
  const bool kernel = dynamic_cast<const CompiledRunner*>(ei.prg.get()) != nullptr;
  std::string label = ei.prg->display_name;
  if (!ei.metadata.empty()) label += "\n" + format_metadata(ei.metadata);
  s.sched_lines.push_back("  n" + std::to_string(id) + " [label=\"" + esc(label) + "\", fillcolor=\"" + (kernel ? kKernelColor : kCopyColor) + "\"];");
  for (size_t i = static_cast<size_t>(n_outputs); i < ei.bufs.size(); i++) {
    auto it = s.writers.find(ei.bufs[i].get());
    if (it == s.writers.end() || it->second.first.expired()) continue;
    s.sched_lines.push_back("  n" + std::to_string(it->second.second) + " -> n" + std::to_string(id) + " [label=\"" +
                            esc(to_str(Shape{ei.bufs[i]->size}) + " " + ei.bufs[i]->dtype.str()) + "\"];");
  }
  for (int i = 0; i < n_outputs && i < static_cast<int>(ei.bufs.size()); i++) s.writers[ei.bufs[i].get()] = {ei.bufs[i], id};
}

namespace {
std::string dot_of(const std::vector<std::string>& lines, const char* name) {
  std::string out = std::string("digraph ") + name + " {\n  node [shape=box, style=filled, fontname=\"monospace\"];\n";
  for (auto& l : lines) out += l + "\n";
  return out + "}\n";
}
}  // namespace

std::string lazy_dot() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return dot_of(s.lazy_lines, "net");
}
std::string schedule_dot() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return dot_of(s.sched_lines, "schedule");
}

void clear() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.lb_ids.clear(), s.lazy_lines.clear(), s.lazy_edges.clear(), s.writers.clear(), s.sched_lines.clear();
  s.sched_nodes = s.lazy_nodes = 0;
  s.warned = false;
}

std::string graph_path() { return getenv_str("GRAPHPATH", temp_dir() + "/tg_graph"); }

std::vector<std::string> save() {
  const std::string dir = graph_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("GRAPH: can't create the folder " + dir + " (" + ec.message() + "); set GRAPHPATH to a writable folder");
  std::vector<std::string> written;
  const auto dot = find_tool("dot");
  for (auto [name, text] : {std::pair<const char*, std::string>{"net", lazy_dot()}, {"schedule", schedule_dot()}}) {
    const std::string path = dir + "/" + name + ".dot";
    std::ofstream f(path, std::ios::trunc);
    f << text;
    f.close();
    if (!f) throw Error("GRAPH: can't write " + path + "; set GRAPHPATH to a writable folder");
    written.push_back(path);
    if (!dot) continue;
    std::string out;
    const std::string svg = dir + "/" + name + ".svg";
    if (run_tool({*dot, "-Tsvg", path, "-o", svg}, &out) == 0) written.push_back(svg);
    else std::fprintf(stderr, "GRAPH: dot -Tsvg %s failed: %s\n", path.c_str(), out.c_str());
  }
  return written;
}

}  // namespace tg::graph
