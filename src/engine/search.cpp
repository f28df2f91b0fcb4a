// BEAM search (tinygrad 0.9.2 engine/search.py): actions, candidate timing, the beam loop, disk cache.
#include "engine/search.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "runtime/cache.hpp"
#include "runtime/device.hpp"
#include "shape/shapetracker_arg.hpp"

namespace tg {

namespace {

using clk = std::chrono::steady_clock;
double secs_since(clk::time_point t) { return std::chrono::duration<double>(clk::now() - t).count(); }

std::vector<Opt> make_actions() {
  std::vector<Opt> a;
  // 8 and 16 are not in 0.9.2's list: a CPU vector register holds 8 or 16 floats
  for (int64_t amt : {0, 2, 3, 4, 5, 7, 8, 16})
    for (int64_t axis = 0; axis < 6; axis++) a.push_back({OptOps::UPCAST, axis, amt});
  for (int64_t amt : {0, 4, 7, 16})
    for (int64_t axis = 0; axis < 5; axis++) a.push_back({OptOps::UNROLL, axis, amt});
  for (int64_t amt : {2, 3, 4, 8, 13, 16, 29})
    for (int64_t axis = 0; axis < 5; axis++) a.push_back({OptOps::LOCAL, axis, amt});
  for (int64_t amt : {13, 16, 28, 29, 32, 49, 64, 256})
    for (int64_t axis = 0; axis < 3; axis++) a.push_back({OptOps::GROUPTOP, axis, amt});
  for (int64_t amt : {0, 4, 8, 16})
    for (int64_t axis = 0; axis < 3; axis++) a.push_back({OptOps::GROUP, axis, amt});
  if (getenv("BEAM_PADTO", 1))
    for (int64_t axis = 0; axis < 7; axis++) a.push_back({OptOps::PADTO, axis, 32});
  a.push_back({OptOps::LOCAL, 0, 32});
  // tensor cores (0.9.2): the default level, and every axis choice with padding (covers 3 global x 3 reduce)
  a.push_back({OptOps::TC, 0, 0});
  for (int64_t axis = 0; axis < 9; axis++) a.push_back({OptOps::TC, axis, getenv("TC_OPT", 2)});
  for (int64_t axis = 0; axis < 5; axis++)
    for (int64_t amt = axis + 1; amt < 5; amt++) a.push_back({OptOps::SWAP, axis, amt});
  if (getenv("NOLOCALS")) a.push_back({OptOps::NOLOCALS, std::nullopt, std::nullopt});
  return a;
}

// DEFINE_VAR values for timing: the middle of each range, in the program's (sorted) var order, then its fixed arg_vals
std::vector<int> var_vals_for(const Kernel& k, const RenderedProgram& p) {
  std::vector<int> vals;
  for (const std::string& name : p.vars) {
    int v = 0;
    for (const UOp& var : k.vars)
      if (var->as<std::string>() == name)
        v = static_cast<int>((const_to_int(var->src[0].const_value()) + const_to_int(var->src[1].const_value())) / 2);
    vals.push_back(v);
  }
  for (int64_t a : p.arg_vals) vals.push_back(static_cast<int>(a));
  return vals;
}

// a smaller launch for timing big kernels; returns the size and the factor to scale the time by
std::pair<std::vector<int64_t>, int64_t> test_global_size(std::vector<int64_t> gs, int64_t max_global_size) {
  int64_t factor = 1;
  while (prod(gs) > max_global_size) {
    bool shrunk = false;
    for (int64_t j = static_cast<int64_t>(gs.size()) - 1; j >= 0; j--)
      if (gs[j] > 16) { gs[j] /= 2, factor *= 2, shrunk = true; break; }
    if (!shrunk) break;
  }
  return {gs, factor};
}

// The CPU's kernels run their first global dim over the threads: a candidate is timed on a slice of it
// that does about BEAM_CPU_TEST_OPS operations (2^27: a millisecond or two) while every thread still
// gets two iterations, and the time is scaled back up. (1024^3 matmul: 8x fewer flops per run.)
std::pair<std::vector<int64_t>, int64_t> cpu_test_size(std::vector<int64_t> gs, int64_t op_estimate) {
  int64_t factor = 1;
  const int64_t target = getenv("BEAM_CPU_TEST_OPS", int64_t{1} << 27), threads = std::max<int64_t>(1, getenv("THREADS", std::thread::hardware_concurrency()));
  while (!gs.empty() && gs[0] % 2 == 0 && gs[0] / 2 >= 2 * threads && op_estimate / factor > target) gs[0] /= 2, factor *= 2;
  return {gs, factor};
}

// writes a buffer bigger than the last-level cache so the next run starts cold: a memset on the CPU, a
// kernel writing 256 MB on a GPU (an H100's L2 is 50 MB, an H200's 60 MB), queued on the device's stream
// before the timed run (tinygrad times BEAM candidates on a GPU after its L2 is invalidated)
void clear_caches(const std::string& device) {
  if (device == "CPU" || device == "CLANG") {
    static std::vector<char> scratch(64 << 20);
    static char v = 0;
    std::memset(scratch.data(), ++v, scratch.size());
    return;
  }
  Compiled& dev = get_device(device);
  if (dev.renderer_kind() != "CUDA") return;
  struct Flush { std::unique_ptr<RuntimeProgram> prg; void* buf = nullptr; };
  static std::mutex mu;
  static std::map<std::string, Flush> flushes;
  constexpr int64_t kInts = int64_t{64} << 20, kBlock = 256;
  std::lock_guard<std::mutex> lock(mu);
  Flush& f = flushes[device];
  if (!f.prg) {
    const std::string src = "extern \"C\" __global__ void tg_flush_l2(int* d) { d[blockIdx.x * 256 + threadIdx.x] = blockIdx.x; }";
    f.prg = dev.runtime("tg_flush_l2", dev.compiler().compile(src));
    f.buf = dev.allocator().alloc(kInts * 4);
  }
  (*f.prg)({f.buf}, {kInts / kBlock, 1, 1}, {kBlock, 1, 1}, {}, false);
  SearchStats::gpu_l2_flushes++;
}

double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// one timed run: wall seconds, and the CPU seconds of the whole process over it (the CPU's kernels run on a pool)
struct RunTime {
  double wall, cpu;
};

// A compiled program ready to run on rawbufs: at full size (max_global_size none), or on a test slice with the
// factor that scales its times back up.
class Launcher {
 public:
  Launcher(const Kernel& k, const RenderedProgram& p, const std::string& lib, const std::vector<std::shared_ptr<Buffer>>& rawbufs,
           std::optional<int64_t> max_global_size)
      : k_(k), device_(p.device), vals_(var_vals_for(k, p)), full_size_(!max_global_size) {
    std::unordered_map<std::string, int64_t> var_vals;
    for (size_t i = 0; i < p.vars.size(); i++) var_vals[p.vars[i]] = vals_[i];
    auto [full_gs, ls] = p.launch_dims(var_vals);
    if (!max_global_size) gs_ = full_gs;
    else if (!k.opts->has_local) std::tie(gs_, factor_) = cpu_test_size(full_gs, p.op_estimate);
    else std::tie(gs_, factor_) = test_global_size(full_gs, *max_global_size);
    ls_ = ls.empty() ? std::vector<int64_t>{1, 1, 1} : ls;
    if (SearchHooks::fake_time) return;
    prg_ = get_device(p.device).runtime(p.function_name, lib);
    for (int i = 0; i < p.n_bufs; i++) ptrs_.push_back(rawbufs.at(i)->ptr());
  }

  RunTime run(bool clear_l2) {
    if (SearchHooks::fake_time) {
      const double t = SearchHooks::fake_time(k_, full_size_);
      return {t, t};
    }
    if (clear_l2) clear_caches(device_);
    const double c0 = process_cpu_seconds(), wall = (*prg_)(ptrs_, gs_, ls_, vals_, true);
    const double f = static_cast<double>(factor_);
    return {wall * f, (process_cpu_seconds() - c0) * f};
  }

 private:
  const Kernel& k_;
  std::string device_;
  std::vector<int> vals_;
  bool full_size_;
  std::vector<int64_t> gs_, ls_;
  int64_t factor_ = 1;
  std::unique_ptr<RuntimeProgram> prg_;
  std::vector<void*> ptrs_;
};

// Run times (seconds) of a compiled candidate; stops early once the best run is slower than early_stop.
std::vector<double> time_program(const Kernel& k, const RenderedProgram& p, const std::string& lib,
                                 const std::vector<std::shared_ptr<Buffer>>& rawbufs, double early_stop,
                                 std::optional<int64_t> max_global_size, bool clear_l2, int cnt) {
  Launcher l(k, p, lib, rawbufs, max_global_size);
  std::vector<double> tms;
  for (int i = 0; i < cnt; i++) {
    tms.push_back(l.run(clear_l2).wall);
    if (*std::min_element(tms.begin(), tms.end()) > early_stop) break;
  }
  return tms;
}

struct Candidate {
  size_t idx;              // into the acted kernels
  RenderedProgram p;
  std::shared_ptr<const std::string> lib;
  double compile_s = 0;
  bool ok = false;
};

// Renders every kernel (here: the UOp graph is not thread safe) and compiles the distinct sources on
// PARALLEL threads until the deadline. A candidate that fails to lower, render or compile, has more than
// BEAM_UOPS_MAX uops or compiles longer than BEAM_TIMEOUT_SEC is dropped; seen_srcs skips sources timed
// before. C kernels (the CPU) compile BEAM_BATCH (16) to a translation unit, each under its own name:
// starting clang and the linker costs more than compiling one kernel (0.5 s of a 0.7 s compile on a
// busy machine), and a batch is still split over the threads. A batch that fails compiles one by one.
std::vector<Candidate> compile_candidates(std::vector<std::unique_ptr<Kernel>>& lins, std::unordered_set<std::string>& seen_srcs,
                                          Compiler& compiler, clk::time_point deadline) {
  const int64_t uops_max = getenv("BEAM_UOPS_MAX", 3000);
  const bool c_source = !lins.empty() && lins[0]->opts->cpu_threads;   // the C renderer of the CPU device
  std::vector<Candidate> cands;
  for (size_t i = 0; i < lins.size(); i++) {
    try {
      RenderedProgram p = lins[i]->to_program(std::string("test"));
      if (uops_max > 0 && static_cast<int64_t>(lins[i]->uops.size()) >= uops_max) continue;
      if (!seen_srcs.insert(p.src).second) continue;
      if (c_source) p = lins[i]->to_program("test" + std::to_string(cands.size()));   // unique within a batch
      cands.push_back({i, std::move(p), nullptr});
    } catch (const std::exception& e) {
      SearchStats::compile_failures++;
      if (getenv("BEAM_STRICT_MODE")) throw;
      if (debug() >= 4) std::cout << "BEAM: candidate failed to render: " << e.what() << "\n";
    }
  }
  const int n_threads = static_cast<int>(std::clamp<int64_t>(getenv("PARALLEL", std::thread::hardware_concurrency()), 1, 32));
  // batches of candidates [lo, hi): enough of them to keep every thread busy
  const size_t batch = c_source ? static_cast<size_t>(std::max<int64_t>(1, getenv("BEAM_BATCH", 16))) : 1;
  // at least two batches a thread: past the first ones, the longest compile so far tells whether another one
  // ends before the deadline (a step's one batch a thread ran 2 s past it on a busy machine)
  const size_t n_batches = std::max((cands.size() + batch - 1) / batch, std::min<size_t>(cands.size(), 2 * n_threads));
  std::vector<std::pair<size_t, size_t>> batches;
  for (size_t b = 0; b < n_batches; b++) batches.emplace_back(cands.size() * b / n_batches, cands.size() * (b + 1) / n_batches);
  const double timeout = static_cast<double>(getenv("BEAM_TIMEOUT_SEC", 10));
  auto compile_one = [&](Candidate& c) {
    auto t0 = clk::now();
    try {
      c.lib = std::make_shared<const std::string>(compiler.compile(c.p.src));
      c.compile_s = secs_since(t0);
      c.ok = c.compile_s <= timeout;
    } catch (const std::exception& e) {
      if (debug() >= 4) std::cout << "BEAM: candidate failed to compile: " << e.what() << "\n";
    }
  };
  std::atomic<size_t> next{0};
  std::atomic<int64_t> longest_us{0};   // the longest batch compile so far: one that can't finish in time isn't started
  auto worker = [&] {
    for (size_t b; (b = next++) < batches.size();) {
      auto [lo, hi] = batches[b];
      auto t0 = clk::now();
      if (t0 + std::chrono::microseconds(longest_us.load()) > deadline) continue;   // out of time: left uncompiled (not ok)
      if (hi - lo == 1) {
        compile_one(cands[lo]);
        continue;
      }
      std::string src;
      for (size_t i = lo; i < hi; i++) src += cands[i].p.src + "\n";
      try {
        auto lib = std::make_shared<const std::string>(compiler.compile(src));
        const int64_t us = static_cast<int64_t>(secs_since(t0) * 1e6);
        for (int64_t cur = longest_us.load(); us > cur && !longest_us.compare_exchange_weak(cur, us);) {}
        const double per = secs_since(t0) / static_cast<double>(hi - lo);
        for (size_t i = lo; i < hi; i++) cands[i].lib = lib, cands[i].compile_s = per, cands[i].ok = per <= timeout;
      } catch (const std::exception&) {
        for (size_t i = lo; i < hi && clk::now() <= deadline; i++) compile_one(cands[i]);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < n_threads && t < static_cast<int>(batches.size()); t++) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  for (const Candidate& c : cands) SearchStats::compile_failures += !c.ok;
  if (getenv("BEAM_STRICT_MODE"))
    for (const Candidate& c : cands) TG_ASSERT(c.ok, "BEAM_STRICT_MODE: a candidate failed to compile:\n" + c.p.src);
  return cands;
}

// (results decided by the final compare don't share entries with the search's unchecked picks of older builds)
std::string search_key(const Kernel& k, int amt, bool allow_test_size) {
  return "ast=" + k.ast.str() + "\namt=" + std::to_string(amt) + "\nallow_test_size=" + std::to_string(allow_test_size) +
         "\ndevice=" + k.opts->device + (getenv("BEAM_HAND_CODED", 1) ? "\nstart=hand_coded" : "") +
         (getenv("BEAM_FINAL_ROUNDS", 5) > 0 ? "\ndecided=final_compare" : "");
}

const char* kOptNames[] = {"TC", "UPCAST", "UPCASTMID", "UNROLL", "LOCAL", "GROUP", "GROUPTOP", "NOLOCALS", "PADTO", "SWAP"};

// the product of k's upcast (and unrolled) axes, and of its local (and grouped) axes
std::pair<int64_t, int64_t> upcast_and_local(const Kernel& k) {
  int64_t up = 1, lcl = 1;
  const auto colors = k.colors();
  for (size_t j = 0; j < colors.size(); j++) {
    if (colors[j] == "magenta" || colors[j] == "yellow") up *= k.full_shape()[j];
    else if (colors[j] == "cyan" || colors[j] == "green" || colors[j] == "white") lcl *= k.full_shape()[j];
  }
  return {up, lcl};
}

// a compiled kernel of the search, kept to time it again in the final compare
struct Built {
  RenderedProgram p;
  std::shared_ptr<const std::string> lib;
};

struct Timed {
  std::unique_ptr<Kernel> k;
  double tm;                           // the search's time (the best of a few runs, maybe on a slice)
  std::shared_ptr<const Built> built;  // none for the unoptimized start, which is never timed
};

Timed copy_timed(const Timed& t) { return {copy_kernel(*t.k), t.tm, t.built}; }

// the hand-coded kernel, compiled and timed like a candidate (its source marked seen); none if it adds no opts
std::optional<Timed> time_hand_coded(const Kernel& lin, const std::vector<std::shared_ptr<Buffer>>& rawbufs, Compiler& compiler,
                                     std::unordered_set<std::string>& seen_srcs, std::optional<int64_t> test_size, bool clear_l2) {
  auto hc = copy_kernel(lin);
  hc->hand_coded_optimizations();
  if (hc->applied_opts.size() <= lin.applied_opts.size()) return std::nullopt;
  RenderedProgram p = hc->to_program(std::string("test"));
  seen_srcs.insert(p.src);
  auto built = std::make_shared<const Built>(Built{p, std::make_shared<const std::string>(compiler.compile(p.src))});
  std::vector<double> tms = time_program(*hc, p, *built->lib, rawbufs, static_cast<double>(getenv("BEAM_TIMEOUT_SEC", 10)), test_size, clear_l2, 3);
  return Timed{std::move(hc), *std::min_element(tms.begin(), tms.end()), built};
}

// The final compare (search.hpp's header tells why): fin[0] is the incumbent (the hand-coded kernel, else the
// search's best), the rest challenge it. Each runs at full size once untimed, then BEAM_FINAL_ROUNDS rounds
// interleaved; past the deadline no round starts after the second. Returns the winner's index; its tm becomes
// its best full-size run.
size_t final_compare(std::vector<Timed*>& fin, const std::vector<std::shared_ptr<Buffer>>& rawbufs, bool clear_l2, clk::time_point deadline) {
  const int64_t rounds = std::max<int64_t>(1, getenv("BEAM_FINAL_ROUNDS", 5));
  const double keep = 1 - getenv_float("BEAM_FINAL_MARGIN", 0.03);
  const bool cpu_time = !fin[0]->k->opts->has_local;   // a GPU's host time says nothing about the kernel
  std::vector<Launcher> ls;
  for (Timed* f : fin) ls.emplace_back(*f->k, f->built->p, *f->built->lib, rawbufs, std::nullopt);
  for (Launcher& l : ls) l.run(clear_l2);   // warm-up: first touches of the output, the pool's threads
  std::vector<std::vector<double>> wall(fin.size()), cpu(fin.size());
  std::vector<bool> alive(fin.size(), true);
  for (int64_t r = 0; r < rounds && (r < 2 || clk::now() < deadline); r++)
    for (size_t i = 0; i < fin.size(); i++) {
      if (!alive[i]) continue;
      const RunTime t = ls[i].run(clear_l2);
      wall[i].push_back(t.wall), cpu[i].push_back(t.cpu);
      alive[i] = i == 0 || t.wall < 2 * wall[0].back();   // twice slower than the incumbent: out
    }
  auto best = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  auto rounds_won = [&](size_t i) {   // rounds in which challenger i ran faster than the incumbent
    size_t n = 0;
    for (size_t r = 0; r < wall[i].size(); r++) n += wall[i][r] < wall[0][r];
    return n;
  };
  // a winner is faster by the margin in its best run (and CPU time), and in at least 3/4 of the rounds
  size_t win = 0;
  for (size_t i = 1; i < fin.size(); i++)
    if (alive[i] && best(wall[i]) < keep * best(wall[0]) && 4 * rounds_won(i) >= 3 * wall[0].size() &&
        (!cpu_time || best(cpu[i]) < keep * best(cpu[0])) && best(wall[i]) < best(wall[win]))
      win = i;
  if (debug() >= 2 || getenv("BEAM_DEBUG"))
    for (size_t i = 0; i < fin.size(); i++)
      std::printf("BEAM final %s %zu runs: best %10.2f us, best cpu %10.2f us, rounds won %zu, search %10.2f us %s %s\n",
                  i == 0 ? "incumbent " : "challenger", wall[i].size(), best(wall[i]) * 1e6, best(cpu[i]) * 1e6, i ? rounds_won(i) : 0,
                  fin[i]->tm * 1e6, i == win ? "WIN " : "    ", opts_to_string(fin[i]->k->applied_opts).c_str());
  SearchStats::final_compares++;
  SearchStats::final_upsets += win != 0;
  fin[win]->tm = best(wall[win]);
  return win;
}

}  // namespace

const std::vector<Opt>& beam_actions() {
  static const std::vector<Opt> actions = make_actions();
  return actions;
}

std::unique_ptr<Kernel> copy_kernel(const Kernel& k) {
  auto ret = std::make_unique<Kernel>(k);
  ret->uops.clear();
  ret->lowered = UOp();
  return ret;
}

std::vector<std::shared_ptr<Buffer>> bufs_from_lin(const Kernel& k, bool allocate) {
  std::map<int64_t, std::pair<int64_t, DType>> sizes;   // arg -> (elements, dtype)
  for (const UOp& b : k.bufs) {
    if (b->op == Ops::CONST || b->src[0]->op != Ops::DEFINE_GLOBAL) continue;
    auto& [sz, dt] = sizes.try_emplace(b->src[0]->as<int64_t>(), 0, b->src[0]->dtype.base()).first->second;
    sz = std::max(sz, st_of(b->src[1]).real_size());
  }
  std::vector<std::shared_ptr<Buffer>> ret;
  for (auto& [idx, sd] : sizes) {
    // an index no LOAD uses (a packed GEMM reads a scratch in place of a buffer) still gets a placeholder
    while (static_cast<int64_t>(ret.size()) < idx) {
      ret.push_back(std::make_shared<Buffer>(k.opts->device, 1, dtypes::uint8));
      if (allocate) ret.back()->allocate();
    }
    // a buffer no element of which is accessed still gets one element
    ret.push_back(std::make_shared<Buffer>(k.opts->device, std::max<int64_t>(sd.first, 1), sd.second));
    if (allocate) ret.back()->allocate();
  }
  return ret;
}

std::map<int, std::unique_ptr<Kernel>> get_kernel_actions(const Kernel& k, bool include_0) {
  std::map<int, std::unique_ptr<Kernel>> acted;
  if (include_0) acted[0] = copy_kernel(k);
  // a kernel past the limits (a CPU conv's hand-coded register tile upcasts 320) may still be reordered
  const auto [up0, lcl0] = upcast_and_local(k);
  const int64_t max_up = std::max(getenv("BEAM_UPCAST_MAX", 256), up0), max_lcl = std::max(getenv("BEAM_LOCAL_MAX", 1024), lcl0);
  const auto& actions = beam_actions();
  for (size_t i = 0; i < actions.size(); i++) {
    const Opt& a = actions[i];
    if (a.axis && a.op != OptOps::TC) {   // a TC axis picks among tensor core layouts, not a shape axis
      const int64_t ax = a.real_axis(k);
      if (ax >= k.shape_len()) continue;
      // amt equal to the axis is the same move as amt 0: keep one of them (0.9.2 compares the real axis)
      if (ax >= 0 && a.amt && k.full_shape()[ax] == *a.amt &&
          std::find(actions.begin(), actions.end(), Opt{a.op, ax, 0}) != actions.end())
        continue;
    }
    auto k2 = copy_kernel(k);
    try {
      k2->apply_opt(a);
    } catch (const KernelOptError&) {
      continue;
    }
    if (const auto [up, lcl] = upcast_and_local(*k2); up > max_up || lcl > max_lcl) continue;
    acted[static_cast<int>(i) + 1] = std::move(k2);
  }
  return acted;
}

std::unique_ptr<Kernel> beam_search(const Kernel& lin, const std::vector<std::shared_ptr<Buffer>>& rawbufs_in, int amt,
                                    bool allow_test_size, bool disable_cache) {
  const std::string key = search_key(lin, amt, allow_test_size);
  const bool use_cache = !disable_cache && getenv("CACHELEVEL", 1) >= 1;
  if (use_cache) {
    if (auto val = diskcache_get("beam_search", key)) {
      std::vector<Opt> opts = opts_from_string(*val);
      auto ret = copy_kernel(lin);
      try {
        for (size_t i = lin.applied_opts.size(); i < opts.size(); i++) ret->apply_opt(opts[i]);
        SearchStats::cache_hits++;
        return ret;
      } catch (const KernelOptError&) {
        if (debug() >= 2) std::cout << "BEAM: cached opts " << *val << " don't apply; searching again\n";
      }
    }
  }
  SearchStats::searches++;

  std::vector<Timed> beam, shortlist;   // shortlist: the best few candidates of every step, for the final compare
  std::optional<Timed> hand_coded;
  std::unordered_set<std::string> seen_srcs;
  const double min_progress = getenv_float("BEAM_MIN_PROGRESS", 0.01) / 1e6;   // in us
  const int64_t beam_debug = getenv("BEAM_DEBUG"), n_finalists = getenv("BEAM_FINALISTS", 2);
  const bool clear_l2 = lin.opts->has_local;   // a GPU's candidates each start from a cold L2 (see clear_caches)
  if (beam_debug) std::cout << "BEAM_SEARCH:\n" << lin.ast.str() << "\n";
  if (debug() >= 2) std::cout << "   0.00s:                 from   1 ->   1 actions " << lin.colored_shape() << std::endl;

  std::vector<std::shared_ptr<Buffer>> rawbufs = rawbufs_in;
  for (auto& b : rawbufs) b->ensure_allocated();
  Compiler& compiler = get_device(lin.opts->device).compiler();
  const auto st = clk::now();
  const double timeout = static_cast<double>(getenv("BEAM_TIMEOUT_SEC", 10));
  const std::optional<int64_t> test_size = allow_test_size ? std::optional<int64_t>(65536) : std::nullopt;
  // BEAM_BUDGET (seconds; default 8 on the CPU, none elsewhere) ends the whole search: its last BEAM_FINAL_SEC (at most
  // a quarter of it) are the final compare's. Past the search's deadline no more candidates are compiled or timed.
  const double budget = getenv_float("BEAM_BUDGET", lin.opts->has_local ? 0 : 8);
  const double final_sec = std::min(getenv_float("BEAM_FINAL_SEC", 0.75), budget / 4);
  auto at = [&](double sec) { return budget > 0 ? st + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(sec)) : clk::time_point::max(); };
  const auto deadline = at(budget - final_sec), final_deadline = at(budget);
  // the hand-coded kernel starts in the beam, timed like every candidate, and is the final compare's incumbent:
  // its neighbours are the first step's candidates (BEAM_HAND_CODED=0: 0.9.2's start). On the CPU it starts
  // alone: the unoptimized kernel's neighbours are scalar kernels tens of times slower, whose single timed runs
  // (4 s each for a 1024^3 matmul's on a busy machine) can't be cut short and ran the search 2.5 s past its budget
  if (getenv("BEAM_HAND_CODED", 1)) {
    try {
      hand_coded = time_hand_coded(lin, rawbufs, compiler, seen_srcs, test_size, clear_l2);
      if (hand_coded) beam.push_back(copy_timed(*hand_coded));
      if (hand_coded && debug() >= 2) std::printf("%7.2fs: %12.2f us hand-coded %s\n", secs_since(st), beam[0].tm * 1e6, beam[0].k->colored_shape().c_str());
    } catch (const std::exception& e) {
      if (debug() >= 2) std::cout << "BEAM: the hand-coded kernel failed: " << e.what() << "\n";
    }
  }
  if (!hand_coded || lin.opts->has_local) beam.push_back({copy_kernel(lin), std::numeric_limits<double>::infinity(), nullptr});
  for (bool exiting = false; !exiting;) {
    std::vector<std::unique_ptr<Kernel>> acted;
    for (const Timed& b : beam)
      for (auto& [_, k2] : get_kernel_actions(*b.k, false)) acted.push_back(std::move(k2));
    std::vector<Candidate> cands = compile_candidates(acted, seen_srcs, compiler, deadline);
    std::vector<Timed> timed;
    double least_compute_ops = std::numeric_limits<double>::infinity();
    for (Candidate& c : cands) {
      if (!c.ok || clk::now() > deadline) continue;
      // a candidate doing 1000x the compute of the cheapest is not worth timing
      least_compute_ops = std::min(least_compute_ops, static_cast<double>(c.p.op_estimate));
      if (least_compute_ops * 1000 < static_cast<double>(c.p.op_estimate)) continue;
      std::vector<double> tms;
      // stop timing a candidate 3x slower than the best so far (this step's best counts too: the
      // first step would otherwise run every slow candidate in full)
      double best = beam.empty() ? 1.0 : beam[0].tm;
      for (const Timed& t : timed) best = std::min(best, t.tm);
      const double early_stop = std::min(best * 3, timeout);   // BEAM_TIMEOUT_SEC caps a candidate's runs too
      try {
        tms = time_program(*acted[c.idx], c.p, *c.lib, rawbufs, early_stop, test_size, clear_l2, 3);
      } catch (const Error& e) {
        if (debug() >= 4) std::cout << "BEAM: candidate failed to run: " << e.what() << "\n";
        continue;
      }
      SearchStats::candidates_timed++;
      timed.push_back({std::move(acted[c.idx]), *std::min_element(tms.begin(), tms.end()), std::make_shared<const Built>(Built{c.p, c.lib})});
      if (beam_debug > 1)
        std::printf("%7.2fs: %5zu %5zu uops %12.2f us compile/%12.2f us run       %4zu/%4zu         %s\n", secs_since(st), c.idx,
                    timed.back().k->uops.size(), c.compile_s * 1e6, timed.back().tm * 1e6, timed.size(), acted.size(),
                    timed.back().k->colored_shape().c_str());
    }
    std::sort(timed.begin(), timed.end(), [](const Timed& a, const Timed& b) { return a.tm < b.tm; });
    for (size_t i = 0; i < timed.size() && static_cast<int64_t>(i) < n_finalists; i++) shortlist.push_back(copy_timed(timed[i]));
    std::stable_sort(shortlist.begin(), shortlist.end(), [](const Timed& a, const Timed& b) { return a.tm < b.tm; });
    if (static_cast<int64_t>(shortlist.size()) > n_finalists) shortlist.resize(std::max<int64_t>(n_finalists, 0));
    exiting = timed.empty() || timed[0].tm < min_progress || beam[0].tm - timed[0].tm < min_progress || clk::now() > deadline;
    if (!exiting) {
      if (static_cast<int>(timed.size()) > amt) timed.resize(amt);
      beam = std::move(timed);
    } else if (!timed.empty() && timed[0].tm < beam[0].tm) {
      beam.clear();
      beam.push_back(std::move(timed[0]));
    }
    if (debug() >= 2)
      std::printf("%7.2fs: %12.2f us from %3zu -> %3zu actions %s\n", secs_since(st), beam[0].tm * 1e6, acted.size(), cands.size(),
                  beam[0].k->colored_shape().c_str());
  }
  // the decision: the search's pick (beam[0]) unless the final compare runs; the incumbent is the hand-coded
  // kernel, else the search's best (shortlist[0] is beam[0] then, unless nothing was timed)
  Timed* pick = &beam[0];
  std::vector<Timed*> fin;
  if (hand_coded) fin.push_back(&*hand_coded);
  for (Timed& t : shortlist) fin.push_back(&t);
  if (getenv("BEAM_FINAL_ROUNDS", 5) > 0 && fin.size() >= 2) pick = fin[final_compare(fin, rawbufs, clear_l2, final_deadline)];
  if (use_cache) diskcache_put("beam_search", key, opts_to_string(pick->k->applied_opts));
  if (beam_debug) std::printf("BEAM_SEARCH: final tm=%0.2f us, applied_opts=%s\n", pick->tm * 1e6, opts_to_string(pick->k->applied_opts).c_str());
  return copy_kernel(*pick->k);
}

double time_linearizer(Kernel& k, const std::vector<std::shared_ptr<Buffer>>& rawbufs, bool allow_test_size, int64_t max_global_size,
                       int cnt, bool clear_l2) {
  for (auto& b : rawbufs) b->ensure_allocated();
  RenderedProgram p = k.to_program(std::string("test"));
  const std::string lib = get_device(p.device).compiler().compile(p.src);
  std::vector<double> tms = time_program(k, p, lib, rawbufs, std::numeric_limits<double>::infinity(),
                                         allow_test_size ? std::optional<int64_t>(max_global_size) : std::nullopt, clear_l2, cnt);
  return *std::min_element(tms.begin(), tms.end());
}

std::string opts_to_string(const std::vector<Opt>& opts) {
  std::string s;
  auto v = [](const std::optional<int64_t>& x) { return x ? std::to_string(*x) : std::string("-"); };
  for (size_t i = 0; i < opts.size(); i++)
    s += (i ? ";" : "") + std::string(kOptNames[static_cast<int>(opts[i].op)]) + "," + v(opts[i].axis) + "," + v(opts[i].amt);
  return s;
}

std::vector<Opt> opts_from_string(const std::string& s) {
  std::vector<Opt> ret;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ';');) {
    std::stringstream is(item);
    std::string op, axis, amt;
    std::getline(is, op, ','), std::getline(is, axis, ','), std::getline(is, amt, ',');
    const auto* it = std::find(std::begin(kOptNames), std::end(kOptNames), op);
    TG_ASSERT(it != std::end(kOptNames) && !axis.empty() && !amt.empty(), "bad opt in the beam_search cache: '" + item + "'");
    auto num = [](const std::string& x) { return x == "-" ? std::nullopt : std::optional<int64_t>(std::stoll(x)); };
    ret.push_back({static_cast<OptOps>(it - std::begin(kOptNames)), num(axis), num(amt)});
  }
  return ret;
}

}  // namespace tg
