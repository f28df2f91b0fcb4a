// The realize engine (tinygrad 0.9.2 engine/realize.py).
#include "engine/realize.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <functional>
#include <map>
#include <mutex>

#include "env_reads.hpp"
#include "codegen/pack.hpp"
#include "engine/graph.hpp"
#include "engine/profile.hpp"
#include "engine/search.hpp"
#include "lazy/metadata.hpp"
#include "renderer/cstyle.hpp"
#include "runtime/device.hpp"
#include "runtime/disasm.hpp"
#include "runtime/tools.hpp"

namespace tg {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}
std::string fmt(const char* f, const std::string& s) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, s.c_str());
  return buf;
}

// visible length of a string with ANSI color codes (tinygrad's ansilen)
size_t ansilen(const std::string& s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\033') {
      while (i < s.size() && s[i] != 'm') i++;
      continue;
    }
    n++;
  }
  return n;
}

// what an error raised while lowering or running an item adds: the user's ops that made it
std::string origin_note(const char* doing, const std::string& what, const std::vector<std::string>& md) {
  std::string n = std::string("\n  while ") + doing + " " + what;
  if (!md.empty()) n += " made by " + format_metadata(md);
  return n;
}

// a display name without ANSI colors and padding
std::string trimmed(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\033') {
      while (i < s.size() && s[i] != 'm') i++;
      continue;
    }
    o += s[i];
  }
  const size_t b = o.find_first_not_of(' '), e = o.find_last_not_of(' ');
  return b == std::string::npos ? o : o.substr(b, e - b + 1);
}

// The in-process program cache: binaries by compiler and source. Kernels of different ASTs can render one source
// (tc_gemm.cpp's shape-generic GEMM takes its shape in arg_vals) while the method cache keys on the AST; with the
// disk cache off (CACHELEVEL=0) each source still compiles once per process. clear_method_cache() empties it.
std::mutex program_mu;
std::unordered_map<std::string, std::string> program_libs;
std::string compiled_lib(Compiler& c, const std::string& src) {
  const std::string key = c.cachekey() + "\n" + src;
  {
    std::lock_guard<std::mutex> lock(program_mu);
    if (auto it = program_libs.find(key); it != program_libs.end()) return it->second;
  }
  std::string lib = c.compile_cached(src);
  std::lock_guard<std::mutex> lock(program_mu);
  program_libs.emplace(key, lib);
  return lib;
}

}  // namespace

// ******************** runners ********************

CompiledRunner::CompiledRunner(RenderedProgram p_, std::optional<std::string> precompiled)
    : Runner(p_.name, p_.device, p_.op_estimate, p_.mem_estimate), p(std::move(p_)) {
  if (debug() >= 4) std::cout << p.src << std::endl;
  Compiled& dev = get_device(p.device);
  if (precompiled) {
    lib = *precompiled;
  } else {
    profile::Span span("compile", p.function_name);
    try {
      lib = compiled_lib(dev.compiler(), p.src);
    } catch (const Error& e) {
      // the source the compiler rejected, kept for the user (the message names the file)
      const std::string path = write_temp("tg_" + p.function_name, dev.renderer_kind() == "CUDA" ? ".cu" : ".c", p.src);
      throw Error(std::string(e.what()) + "\n  the generated source is saved to " + path);
    }
  }
  if (debug() >= 6) std::cout << disassemble(dev.renderer_kind(), lib, p.function_name) << std::endl;
  clprg = dev.runtime(p.function_name, lib);
  // p.mem_estimate is what the uops load and store (tinygrad's lds_estimate); get_runner sets the
  // buffers' bytes as mem_estimate
}

std::optional<double> CompiledRunner::operator()(const std::vector<Buffer*>& bufs, const VarVals& var_vals, bool wait) {
  auto [global_size, local_size] = p.launch_dims(var_vals);
  if (local_size.empty()) local_size = {1, 1, 1};   // "runtime chooses": one thread per block is always valid
  std::vector<void*> ptrs;
  for (Buffer* b : bufs) ptrs.push_back(b->ptr());
  std::vector<int> vals;
  for (const std::string& v : p.vars) {
    auto it = var_vals.find(v);
    if (it == var_vals.end()) throw Error("kernel " + p.function_name + " needs a value for variable '" + v + "'; bind it before realizing");
    // its buffers hold the variable's max: a value outside the compiled range would read past them
    if (size_t i = vals.size(); i < p.var_ranges.size() && (it->second < p.var_ranges[i].first || it->second > p.var_ranges[i].second))
      throw Error("kernel " + p.function_name + ": variable '" + v + "' = " + std::to_string(it->second) + " is outside the range [" +
                  std::to_string(p.var_ranges[i].first) + ", " + std::to_string(p.var_ranges[i].second) +
                  "] it was compiled for; use the same Variable (name and range) on every call");
    vals.push_back(static_cast<int>(it->second));
  }
  for (int64_t a : p.arg_vals) vals.push_back(static_cast<int>(a));
  TG_ASSERT(static_cast<int>(ptrs.size()) >= p.n_bufs, "kernel " + p.function_name + " needs " + std::to_string(p.n_bufs) + " buffers");
  double et = (*clprg)(ptrs, global_size, local_size, vals, wait);
  if (wait) return et;
  return std::nullopt;
}

PackedRunner::PackedRunner(std::shared_ptr<CompiledRunner> pack_, std::shared_ptr<CompiledRunner> gemm_, int64_t b_index,
                           int64_t scratch_index, int64_t scratch_size, DType dtype)
    : Runner(gemm_->display_name, gemm_->device, gemm_->op_estimate, pack_->mem_estimate + gemm_->mem_estimate),
      pack(std::move(pack_)), gemm(std::move(gemm_)), b_index_(b_index), scratch_index_(scratch_index),
      scratch_(std::make_shared<Buffer>(gemm->device, scratch_size, dtype)) {}

std::optional<double> PackedRunner::operator()(const std::vector<Buffer*>& bufs, const VarVals& var_vals, bool wait) {
  TG_ASSERT(static_cast<int64_t>(bufs.size()) > b_index_, "packed kernel " + gemm->p.function_name + " is missing its b buffer");
  Buffer* scratch = &scratch_->ensure_allocated();
  std::vector<Buffer*> gb(bufs);
  gb.resize(std::max<size_t>(gb.size(), scratch_index_ + 1), scratch);
  gb[scratch_index_] = scratch;
  std::optional<double> t1 = (*pack)({scratch, bufs[b_index_]}, var_vals, wait), t2 = (*gemm)(gb, var_vals, wait);
  if (t1 && t2) return *t1 + *t2;
  return std::nullopt;
}

BufferCopy::BufferCopy(int64_t total_sz, const std::string& dest_device, const std::string& src_device, bool symbolic)
    : Runner("", dest_device, 0, total_sz), symbolic_(symbolic) {
  const std::string d = dest_device.substr(0, 7), s = src_device.substr(0, 7);
  std::string n = total_sz >= 1000000 ? "copy " + fmt("%7.2f", total_sz / 1e6) + "M, " : "copy " + fmt("%8.0f", double(total_sz)) + ", ";
  display_name = colored(n + fmt("%7s", d) + " <- " + fmt("%-7s", s), "yellow");
}

std::optional<double> BufferCopy::operator()(const std::vector<Buffer*>& bufs, const VarVals&, bool wait) {
  Buffer &dest = *bufs.at(0), &src = *bufs.at(1);
  if (dest.dtype != src.dtype || (dest.size != src.size && !symbolic_))
    throw Error("buffer copy mismatch: " + dest.str() + " <- " + src.str() + "; a COPY needs the same size and dtype");
  auto st = std::chrono::steady_clock::now();
  // a whole file range to an unallocated CPU buffer: mapped, not copied
  if (!symbolic_ && dest.map_from_disk(src)) return wait ? std::optional<double>(std::chrono::duration<double>(std::chrono::steady_clock::now() - st).count()) : std::nullopt;
  // a symbolic buffer is allocated for the variables' max while its source may hold only the bound
  // elements: the live elements are a prefix of both, so the shorter one is copied
  copy_buffer(dest, src, std::min(dest.nbytes(), src.nbytes()));
  if (!wait) return std::nullopt;
  dest.dev().synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - st).count();
}

EmptyOp::EmptyOp(const Buffer& buf)
    : Runner(colored("empty " + fmt("%10.0f", double(buf.size)) + " " + buf.dtype.str(), "yellow"), buf.device) {}
std::optional<double> EmptyOp::operator()(const std::vector<Buffer*>&, const VarVals&, bool) { return std::nullopt; }

ViewOp::ViewOp(const Buffer& buf)
    : Runner(colored("view " + fmt("%8.0f", double(buf.nbytes())) + " @ " + fmt("%-10.0f", double(buf.offset)), "yellow"), buf.device) {}
std::optional<double> ViewOp::operator()(const std::vector<Buffer*>& bufs, const VarVals&, bool) {
  TG_ASSERT(bufs.size() >= 2 && bufs[0]->is_view() && &bufs[0]->base() == &bufs[1]->base(), "a VIEW's buffer must be a view of its source");
  return std::nullopt;
}

// ******************** kernels and the method cache ********************

const Renderer& get_renderer(const std::string& device) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Renderer>> renderers;
  std::lock_guard<std::mutex> lock(mu);
  const std::string dname = canonicalize_device(device);
  auto& r = renderers[dname];
  if (!r) {
    Compiled& dev = get_device(dname);
    const std::string kind = dev.renderer_kind();
    if (kind == "C") r = std::make_unique<ClangRenderer>(dev.c_half_type());
    else if (kind == "CUDA") {
      auto cr = std::make_unique<CUDARenderer>(dev.arch().empty() ? "sm_80" : dev.arch());
      cr->sms = dev.multiprocessors();
      r = std::move(cr);
    }
    else throw Error("device " + dname + " can't run kernels (no renderer); compute on CPU or CUDA and copy the result");
  }
  return *r;
}

std::unique_ptr<Kernel> get_kernel(const Renderer& renderer, const UOp& ast) {
  if (debug() >= 5) std::cout << ast.str() << std::endl;
  auto k = std::make_unique<Kernel>(ast, renderer);
  k->required_optimizations();
  if (getenv("NOOPT")) return k;
  // the heuristics read symbolic dims at their max: an opt they can't apply there is skipped, the rest stay
  k->skip_failed_opts = !k->vars.empty();
  k->hand_coded_optimizations();
  k->skip_failed_opts = false;
  if (const int64_t beam = getenv("BEAM"); beam >= 1) {
    Kernel kb(ast, renderer);
    kb.required_optimizations();
    auto rawbufs = bufs_from_lin(kb, false);   // allocated only when the search runs (not on a cache hit)
    auto kbeam = beam_search(kb, rawbufs, static_cast<int>(beam), getenv("BEAM_ESTIMATE", 1) != 0);
    // with BEAM_HAND_CODED the search's final compare already timed the hand-coded kernel against its best at full
    // size (engine/search.hpp) and returned the faster: this comparison is then optional
    if (getenv("BEAM_COMPARE", getenv("BEAM_HAND_CODED", 1) ? 0 : 1)) {
      // the search's pick against the hand-coded one, timed in full with cold caches
      const double tb = time_linearizer(*kbeam, rawbufs, false, 0, 3, true), th = time_linearizer(*k, rawbufs, false, 0, 3, true);
      if (debug() >= 1)
        std::cout << "beam" << beam << " : " << kbeam->colored_shape(30, true) << " : " << tb * 1e3 << " ms  vs  hc : "
                  << k->colored_shape(30, true) << " : " << th * 1e3 << " ms" << std::endl;
      if (tb <= th) k = std::move(kbeam);
    } else {
      k = std::move(kbeam);
    }
  }
  return k;
}

namespace {
struct CacheKey {
  std::string device;
  UOp ast;
  int64_t beam, noopt;
  bool base;
  bool operator==(const CacheKey& o) const = default;
};
struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const {
    return std::hash<std::string>()(k.device) ^ (k.ast.hash() * 31) ^ (size_t(k.beam) << 8) ^ (size_t(k.noopt) << 16) ^ k.base;
  }
};
// A kernel and the settings its codegen read (ALLOW_TF32, TC_*, SIMT_*, CPU_*, ...): it is reused only while they
// read the same. They are read again only after a tg::Context change.
struct CacheEntry {
  std::shared_ptr<CompiledRunner> runner;
  std::vector<EnvRead> settings;
  uint64_t checked = 0;   // the context_generation() they were last found equal at
};
std::mutex cache_mu;
std::unordered_map<CacheKey, CacheEntry, CacheKeyHash> method_cache;
std::shared_ptr<CompiledRunner> cached(const CacheKey& key) {
  auto it = method_cache.find(key);
  if (it == method_cache.end()) return nullptr;
  const uint64_t gen = context_generation();
  if (it->second.checked != gen) {
    if (!env_unchanged(it->second.settings)) return method_cache.erase(it), nullptr;
    it->second.checked = gen;
  }
  return it->second.runner;
}
}  // namespace

namespace {
// Kernel replay (scripts/replay): with REPLAY_DIR set, each kernel generated is saved as
// <function>_<hash of its AST>.c holding its device, opts and source. A refactor that should change no
// kernel shows no diff between two such trees.
void save_replay(const std::string& dir, const UOp& ast, const Kernel& k, const RenderedProgram& p) {
  char h[32];
  std::snprintf(h, sizeof(h), "%016zx", std::hash<std::string>()(ast.str()));
  std::filesystem::create_directories(dir);
  std::ofstream f(std::filesystem::path(dir) / (p.function_name + "_" + h + ".c"));
  f << "// device: " << p.device.substr(0, p.device.find(':')) << "\n// opts: " << opts_to_string(k.applied_opts) << "\n" << p.src;
  if (!f) throw Error("REPLAY_DIR: can't write a kernel into " + dir + "; give a writable directory");
}
}  // namespace

std::shared_ptr<CompiledRunner> get_runner(const std::string& device, const UOp& ast) {
  const std::string dname = canonicalize_device(device);
  const int64_t beam = getenv("BEAM"), noopt = getenv("NOOPT");
  const CacheKey ckey{dname, ast, beam, noopt, false};
  std::lock_guard<std::mutex> lock(cache_mu);
  if (auto hit = cached(ckey)) return hit;
  // another device of the same kind (CUDA:1 after CUDA) reuses the compiled program
  const CacheKey bkey{dname.substr(0, dname.find(':')), ast, beam, noopt, true};
  std::shared_ptr<CompiledRunner> ret;
  if (auto base = cached(bkey)) {
    RenderedProgram p = base->p;
    p.device = dname;
    ret = std::make_shared<CompiledRunner>(p, base->lib);
    ret->mem_estimate = base->mem_estimate;
  } else {
    std::unique_ptr<Kernel> k;
    RenderedProgram p;
    EnvReads settings;
    {
      profile::Span span("codegen");   // opts, lowering, rendering; the compile is its own span
      k = get_kernel(get_renderer(dname), ast);
      p = k->to_program();
      span.arg("kernel", profile::jstr(p.function_name));
    }
    p.device = dname;
    if (std::string dir = getenv_str("REPLAY_DIR"); !dir.empty()) save_replay(dir, ast, *k, p);
    ret = std::make_shared<CompiledRunner>(p);
    ret->mem_estimate = k->mem_estimate();
    method_cache[bkey] = {ret, settings.take(), context_generation()};
  }
  method_cache[ckey] = {ret, method_cache[bkey].settings, context_generation()};
  return ret;
}

std::shared_ptr<Runner> get_kernel_runner(const std::string& device, const UOp& ast) {
  if (!getenv("NOOPT"))
    if (auto plan = cpu_gemm_pack(ast, get_renderer(device))) {
      std::shared_ptr<CompiledRunner> pack;
      {
        Context no_beam({{"BEAM", 0}});   // a copy at memory speed: nothing for BEAM to find
        pack = get_runner(device, plan->pack_ast);
      }
      return std::make_shared<PackedRunner>(pack, get_runner(device, plan->gemm_ast), plan->b_index, plan->scratch_index,
                                            plan->scratch_size, plan->dtype);
    }
  return get_runner(device, ast);
}

void clear_method_cache() {
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    method_cache.clear();
  }
  std::lock_guard<std::mutex> lock(program_mu);
  program_libs.clear();
}
size_t method_cache_size() {
  std::lock_guard<std::mutex> lock(cache_mu);
  return method_cache.size();
}

// ******************** running ********************

namespace {
std::vector<ExecItem>* g_capturing = nullptr;
}
CaptureScope::CaptureScope(std::vector<ExecItem>* out) : prev_(g_capturing) { g_capturing = out; }
CaptureScope::~CaptureScope() { g_capturing = prev_; }

std::optional<double> ExecItem::run(const VarVals& var_vals, bool wait, bool jit, bool do_update_stats) {
  if (g_capturing && !jit) g_capturing->push_back(*this);
  std::vector<Buffer*> raw;
  for (size_t i = 0; i < bufs.size(); i++) {
    if (!jit && (i > 0 || !prg->allocates_output())) bufs[i]->ensure_allocated();
    raw.push_back(bufs[i].get());
  }
  const bool prof = profile::enabled();
  std::optional<double> et = (*prg)(raw, var_vals, wait || prof || debug() >= 2);
  if (prof && et) profile::kernel_event(prg, *et, jit, metadata);
  if (!do_update_stats) return et;
  GlobalCounters::kernel_count += 1;
  GlobalCounters::global_ops += prg->op_estimate;
  GlobalCounters::global_mem += prg->mem_estimate;
  if (et) GlobalCounters::time_sum_s += *et;
  if (debug() >= 2) {
    const int64_t lds_est = prg->lds_estimate, mem_est = std::min(prg->mem_estimate, lds_est ? lds_est : prg->mem_estimate);
    std::string head = "*** " + fmt("%-7s", prg->device.substr(0, 7)) + " " + fmt("%4.0f", double(GlobalCounters::kernel_count));
    head = colored(head, jit ? "magenta" : (prg->first_run ? "green" : ""));
    std::string name = prg->display_name;
    if (ansilen(name) < 40) name += std::string(40 - ansilen(name), ' ');
    std::string line = head + " " + name + " arg " + fmt("%3.0f", double(bufs.size())) + " mem " +
                       fmt("%5.2f", GlobalCounters::mem_used / 1e9) + " GB";
    if (et) {
      const double t = *et, d = (t > 0 ? t : 1e-20) * 1e9;
      const std::string ptm = t > 0.01 ? colored(fmt("%9.2f", t * 1e3) + "ms", "yellow") : fmt("%9.2f", t * 1e6) + "us";
      line += " tm " + ptm + "/" + fmt("%9.2f", GlobalCounters::time_sum_s * 1e3) + "ms (" + fmt("%9.2f", prg->op_estimate / d) +
              " GFLOPS " + fmt("%6.1f", mem_est / d) + "|" + fmt("%-7.1f", lds_est / d) + " GB/s)";
    }
    if (!metadata.empty()) line += " " + format_metadata(metadata);
    std::cout << line << std::endl;
  }
  prg->first_run = false;
  return et;
}

ExecItem lower_schedule_item(const ScheduleItem& si) {
  TG_ASSERT(!si.bufs.empty(), "a schedule item without buffers: " + si.str());
  const std::string out_device = si.bufs[0]->device;
  if (si.kind != MetaOps::COPY)
    for (const auto& b : si.bufs)
      TG_ASSERT(b->device == out_device, "all buffers of a kernel must be on one device: " + si.str());
  switch (si.kind) {
    case MetaOps::KERNEL: return ExecItem{get_kernel_runner(out_device, Access::uop(si.ast)), si.bufs, si.metadata};
    case MetaOps::COPY:
      TG_ASSERT(si.bufs.size() == 2, "a COPY has a destination and a source: " + si.str());
      return ExecItem{std::make_shared<BufferCopy>(si.bufs[0]->nbytes(), out_device, si.bufs[1]->device, !si.var_vals.empty()), si.bufs, si.metadata};
    case MetaOps::EMPTY: return ExecItem{std::make_shared<EmptyOp>(*si.bufs[0]), si.bufs, si.metadata};
    case MetaOps::VIEW: return ExecItem{std::make_shared<ViewOp>(*si.bufs[0]), si.bufs, si.metadata};
    default: throw Error("don't know how to run a " + to_string(si.kind) + " schedule item: " + si.str());
  }
}

void run_schedule(std::vector<ScheduleItem> schedule, const VarVals& var_vals, bool do_update_stats) {
  const bool graph = graph::enabled();
  for (const ScheduleItem& si : schedule) {
    ExecItem ei = [&] {
      try {
        return lower_schedule_item(si);
      } catch (const Error& e) {
        throw Error(e.what() + origin_note("compiling the", si.kind == MetaOps::KERNEL ? "kernel" : to_string(si.kind), si.metadata));
      }
    }();
    if (graph) graph::log_exec(ei, si.n_outputs);
    VarVals vv = var_vals;
    for (auto& [k, v] : si.var_vals) vv.emplace(k, v);   // the caller's values win (TinyJit)
    try {
      ei.run(si.var_vals.empty() ? var_vals : vv, false, false, do_update_stats);
    } catch (const Error& e) {
      throw Error(e.what() + origin_note("running", trimmed(ei.prg->display_name), si.metadata));
    }
  }
}

}  // namespace tg
