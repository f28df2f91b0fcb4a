// Kernel origin metadata: interning, the per-thread current op and tg::Origin.
#include "lazy/metadata.hpp"

#include <mutex>
#include <unordered_map>

#include "tg/origin.hpp"

namespace tg {

namespace {
struct Loc {
  std::string file;
  uint32_t line = 0;
};
thread_local const Metadata* t_current = nullptr;
thread_local const Loc* t_origin = nullptr;

std::string basename_of(const char* path) {
  std::string p = path ? path : "";
  size_t s = p.find_last_of("/\\");
  return s == std::string::npos ? p : p.substr(s + 1);
}
}  // namespace

std::string Metadata::str() const {
  std::string s = name + (backward ? " bw" : "");
  if (!file.empty()) s += " @ " + file + ":" + std::to_string(line);
  return s;
}

const Metadata* intern_metadata(const std::string& name, const std::string& file, uint32_t line, bool backward) {
  static std::mutex mu;
  // never freed, the table included: its pointers outlive every LazyBuffer (a static map would be destroyed at
  // exit, leaving the Metadata unreachable: LeakSanitizer reported them)
  static auto* table = new std::unordered_map<std::string, const Metadata*>();
  const std::string key = name + '\0' + file + '\0' + std::to_string(line) + (backward ? "b" : "f");
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = table->emplace(key, nullptr);
  if (fresh) it->second = new Metadata{name, file, line, backward};
  return it->second;
}

const Metadata* current_metadata() { return t_current; }

MetadataScope::MetadataScope(const Metadata* md) {
  if (t_current != nullptr || md == nullptr) return;
  t_current = t_origin ? intern_metadata(md->name, t_origin->file, t_origin->line, md->backward) : md;
  set_ = true;
}
MetadataScope::MetadataScope(const Metadata* md, bool) {
  if (t_current != nullptr || md == nullptr) return;
  t_current = md;
  set_ = true;
}
MetadataScope::~MetadataScope() {
  if (set_) t_current = nullptr;
}

Origin::Origin(std::source_location loc) {
  if (t_origin != nullptr) return;
  t_origin = new Loc{basename_of(loc.file_name()), static_cast<uint32_t>(loc.line())};
  set_ = true;
}
Origin::~Origin() {
  if (!set_) return;
  delete t_origin;
  t_origin = nullptr;
}

std::string format_metadata(const std::vector<std::string>& md) {
  if (md.empty()) return "";
  // "relu @ a.cpp:3", "add @ a.cpp:3", "mul" -> "relu, add @ a.cpp:3, mul"
  std::string out = "[";
  for (size_t i = 0; i < md.size(); i++) {
    const size_t at = md[i].find(" @ ");
    const std::string name = md[i].substr(0, at), loc = at == std::string::npos ? "" : md[i].substr(at);
    const size_t nat = i + 1 < md.size() ? md[i + 1].find(" @ ") : std::string::npos;
    const std::string next_loc = i + 1 < md.size() && nat != std::string::npos ? md[i + 1].substr(nat) : "";
    out += name;
    if (!loc.empty() && (i + 1 == md.size() || next_loc != loc)) out += loc;
    if (i + 1 < md.size()) out += ", ";
  }
  return out + "]";
}

}  // namespace tg
