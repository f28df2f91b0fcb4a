// Device registry, the LRU allocator and the cached compile path shared by every backend.
#include "runtime/device.hpp"

#include <chrono>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <new>

#include "runtime/cache.hpp"
#include "tg/device.hpp"
#include "tg/helpers.hpp"

namespace tg {

// ---- Allocator ----

void* Allocator::alloc(size_t nbytes) {
  if (nbytes == 0) throw Error("Allocator.alloc: size must be positive, got 0 bytes");
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(nbytes);
    if (it != cache_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
  }
  try {
    return _alloc(nbytes);
  } catch (const std::bad_alloc&) {
  } catch (const Error&) {
  }
  free_cache();   // out of memory: give the cached buffers back and try once more
  return _alloc(nbytes);
}

void Allocator::free(void* p, size_t nbytes) {
  if (lru() && getenv("LRU", 1)) {
    std::lock_guard<std::mutex> lock(mu_);
    cache_[nbytes].push_back(p);
    return;
  }
  _free(p, nbytes);
}

void Allocator::free_cache() {
  std::map<size_t, std::vector<void*>> cache;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cache.swap(cache_);
  }
  for (auto& [sz, ps] : cache)
    for (void* p : ps) _free(p, sz);
}

size_t Allocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto& [sz, ps] : cache_) n += sz * ps.size();
  return n;
}

void* Allocator::offset(void* base, size_t nbytes, size_t byte_offset) { return static_cast<char*>(base) + byte_offset; }

// ---- Compiler ----

std::string Compiler::compile_cached(const std::string& src) {
  std::string key = cachekey() + "\n" + src;
  if (auto lib = diskcache_get("compile", key)) return *lib;
  auto t0 = std::chrono::steady_clock::now();
  std::string lib = compile(src);
  compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  compile_count++;
  diskcache_put("compile", key, lib);
  return lib;
}

// ---- Compiled defaults: a device that can't run kernels (DISK) ----

Compiler& Compiled::compiler() {
  throw Error("device " + name + " has no compiler: it stores data only; run kernels on " + default_device());
}
std::unique_ptr<RuntimeProgram> Compiled::runtime(const std::string& fn_name, const std::string&) {
  throw Error("device " + name + " can't run programs (asked for " + fn_name + "); run kernels on " + default_device());
}

// ---- registry ----

namespace {
std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
const char* kKnown = "CPU (alias CLANG), CUDA, CUDA:<n>, DISK:<path>";
}  // namespace

std::string canonicalize_device(const std::string& name) {
  if (name.empty()) return default_device();
  size_t colon = name.find(':');
  std::string kind = upper(name.substr(0, colon)), rest = colon == std::string::npos ? "" : name.substr(colon + 1);
  if (kind == "CLANG") kind = "CPU";
  if (kind == "DISK") return "DISK:" + rest;   // the path keeps its case and colons
  if (rest == "0" || colon == std::string::npos) return kind;
  return kind + ":" + rest;
}

int cuda_device_count_cached() {
  static const int n = cuda_device_count();
  return n;
}

std::vector<std::string> available_devices() {
  std::vector<std::string> r{"CPU"};
  int n = cuda_device_count_cached();
  for (int i = 0; i < n; i++) r.push_back(i == 0 ? "CUDA" : "CUDA:" + std::to_string(i));
  return r;
}

std::string default_device() {
  std::string d = getenv_str("DEVICE", "");
  if (!d.empty()) return canonicalize_device(d);
  for (const char* k : {"CUDA", "CPU", "CLANG"})
    if (getenv_str(k, "") == "1") return canonicalize_device(k);
  return cuda_device_count_cached() > 0 ? "CUDA" : "CPU";
}

Compiled& get_device(const std::string& name) {
  static std::mutex mu;
  // never destroyed: Buffers in static objects may outlive any static registry at exit
  static auto& devices = *new std::map<std::string, std::unique_ptr<Compiled>>();
  std::string c = canonicalize_device(name);
  std::lock_guard<std::mutex> lock(mu);
  auto it = devices.find(c);
  if (it != devices.end()) return *it->second;
  std::string kind = c.substr(0, c.find(':'));
  std::unique_ptr<Compiled> dev;
  if (kind == "CPU" && c == "CPU") dev = make_cpu_device(c);
  else if (kind == "CUDA") dev = make_cuda_device(c);
  else if (kind == "DISK" && c.size() > 5) dev = make_disk_device(c);
  else throw Error("get_device: unknown device '" + name + "'; known devices: " + kKnown + "; available here: " + [] {
      std::string s;
      for (auto& d : available_devices()) s += (s.empty() ? "" : ", ") + d;
      return s;
    }());
  if (debug() >= 1) std::fprintf(stderr, "opened device %s from pid:%d\n", c.c_str(), static_cast<int>(getpid()));
  return *devices.emplace(c, std::move(dev)).first->second;
}

// ---- public tg::Device ----

std::string Device::default_device() { return tg::default_device(); }
std::string Device::canonicalize(const std::string& name) { return canonicalize_device(name); }
std::vector<std::string> Device::available() { return available_devices(); }
void Device::synchronize(const std::string& name) { get_device(name).synchronize(); }

}  // namespace tg
