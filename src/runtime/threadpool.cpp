#include "runtime/threadpool.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "tg/helpers.hpp"

namespace tg {

namespace {
thread_local int tl_thread = 0;   // 0: a caller (any thread not of the pool), w + 1: worker w
constexpr int kFieldBits = 20;   // tasks and next task per ticket field
constexpr uint64_t kFieldMask = (uint64_t{1} << kFieldBits) - 1;
// POOL_SPIN_US's default: a worker done with a kernel spins this long for the next before it sleeps. A training
// step's kernels follow each other within microseconds (the serial ones in between run on the caller), so its
// workers don't sleep inside a step. On the device's 16-core VM (mnist step, 42 parallel kernels) the latest of 15
// sleeping workers joined a kernel 24 us after it was published (median; 3 us spinning), the step's kernels took
// 43.0 ms against 36.9 spinning, and the free-running step ran ~5% faster (3 alternated rounds) for 2-5% more CPU
// time (bench/NOTES_cpu_threads.md, session 16).
constexpr int64_t kDefaultSpinUs = 200;
uint64_t gen_of(uint64_t t) { return t >> (2 * kFieldBits); }
int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
// the cores this thread may run on (taskset, a container's cpuset), else all
int64_t allowed_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, CPU_COUNT(&mask));
}
// spin while pred() is false, reading the clock every 64 rounds; true when pred() held within ns
template <class F> bool spin_until(F&& pred, int64_t ns) {
  if (ns <= 0) return pred();
  const int64_t end = now_ns() + ns;
  for (int i = 1;; i++) {
    if (pred()) return true;
    cpu_relax();
    if (i % 64 == 0 && now_ns() > end) return pred();
  }
}
}  // namespace

ThreadPool& ThreadPool::global() {
  // never destroyed: workers just stop with the process, no join racing static destructors
  static ThreadPool* pool = new ThreadPool();
  return *pool;
}

// THREADS, POOL_SPIN_US and CPU_SLICES, read per kernel launch: the env lookups (a lock, a map, a string) run
// only when a Context changed
const ThreadPool::Settings& ThreadPool::settings() {
  thread_local Settings s;
  thread_local uint64_t seen_generation = 0;
  const uint64_t gen = context_generation();
  if (gen == seen_generation) return s;
  int64_t n = getenv("THREADS", 0);
  if (n < 0) throw Error("THREADS=" + std::to_string(n) + " must be positive (or unset for all cores)");
  // hardware_concurrency reads sysfs (open/read/close) on every call: once per process, not per kernel
  static const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (n == 0) n = cores;
  // workers spin between kernels only where each has a core of the process's own (oversubscribed, or under
  // taskset, a spinner takes a worker's time)
  const int64_t spin_us = getenv("POOL_SPIN_US", kDefaultSpinUs);
  if (spin_us < 0) throw Error("POOL_SPIN_US=" + std::to_string(spin_us) + " must be >= 0 (microseconds a worker waits for the next kernel before it sleeps)");
  const int64_t slices = getenv("CPU_SLICES", 1);
  if (slices < 1) throw Error("CPU_SLICES=" + std::to_string(slices) + " must be >= 1 (slices of a CPU kernel's parallel loop per thread)");
  const bool stats = getenv("POOL_STATS", 0) > 0;
  const int64_t steal = getenv("CPU_STEAL", 8);
  if (steal < 0) throw Error("CPU_STEAL=" + std::to_string(steal) + " must be >= 0 (chunks of a thread's share that another thread may take; 0: none)");
  const int64_t spin = n <= allowed_cores() ? spin_us : 0;
  global().spin_ns_.store(spin * 1000, std::memory_order_relaxed);
  s = Settings{static_cast<int>(n), static_cast<int>(std::min<int64_t>(slices, 64)), static_cast<int>(std::min<int64_t>(steal, 1024)), spin, stats};
  seen_generation = gen;
  return s;
}

int ThreadPool::default_threads() { return settings().threads; }
int ThreadPool::slices_per_thread() { return settings().slices; }
int64_t ThreadPool::spin_us() { return settings().spin_us; }

namespace {
// One task's share of the range, [lo, hi) packed as lo << 32 | hi, run in guided chunks: each take is a
// 1/parts of what is left unstarted (at least 1), so chunks start large and shrink to single iterations at the
// share's end, where a thread done with its own share takes them from the back while more than one is left (the
// owner keeps its last one). A late or slower thread then leaves the other at most a small chunk's wait, not a
// 1/parts of its share. Each share on its own cache line.
struct alignas(64) Share {
  std::atomic<uint64_t> range{0};
  std::atomic<bool> claimed{false};   // by the task that runs it from the front
  int64_t parts = 1;
  // the next chunk from the front (owner) or the back (another task) into [lo, hi); false when none is left to take
  bool take(bool front, int64_t& lo, int64_t& hi) {
    uint64_t cur = range.load(std::memory_order_acquire);
    for (;;) {
      const int64_t l = static_cast<int64_t>(cur >> 32), h = static_cast<int64_t>(cur & 0xffffffffu);
      if (front ? l >= h : h - l <= 1) return false;
      const int64_t chunk = (h - l + parts - 1) / parts;
      lo = front ? l : std::max(l + 1, h - chunk), hi = front ? l + chunk : h;
      const uint64_t next = front ? static_cast<uint64_t>(hi) << 32 | static_cast<uint64_t>(h) : static_cast<uint64_t>(l) << 32 | static_cast<uint64_t>(lo);
      if (range.compare_exchange_weak(cur, next, std::memory_order_acq_rel)) return true;
    }
  }
};
}  // namespace

void ThreadPool::parallel_range(int64_t g, const std::function<void(int64_t, int64_t)>& fn) {
  const Settings& s = settings();
  if (g <= 1 || s.threads <= 1) {
    fn(0, std::max<int64_t>(1, g));
    if (s.stats) record(CallStats{g, 1, 1, 0, 0});
    return;
  }
  if (s.slices > 1 || s.steal == 0 || g >= (int64_t{1} << 31)) {
    const int n = static_cast<int>(std::min<int64_t>(g, int64_t{s.threads} * s.slices));
    parallel_for(n, [&](int i) { fn(g * i / n, g * (i + 1) / n); });
    if (s.stats) record(CallStats{g, n, joined_.load(), late_ns_.load() * 1e-3, wait_us_});
    return;
  }
  // One contiguous share a thread, as the static split (a kernel's share lands on the core whose cache holds it
  // from the kernel before), run in guided chunks of 1/CPU_STEAL of what is left: a thread done with its share
  // takes the chunks another hasn't started, from the back, but not its last one. Threads in step move little (the
  // last chunks are single iterations); where one thread starts late (its wake-up) or runs slower (another tenant
  // on its core), the other takes over the late share's tail instead of waiting for it.
  // Each share goes to the same thread in every call (the caller share 0, worker w share w + 1) whichever task
  // index its thread drew: otherwise a thread woken first would take share 0 and the next kernel's share 0 would
  // find its data in the other core's cache (workers past n, left from a larger THREADS, map onto shares 1..n-1).
  // A task whose thread's share is claimed (a late worker's task run by another) claims the next unclaimed one:
  // n tasks claim the n shares.
  const int n = static_cast<int>(std::min<int64_t>(g, s.threads));
  std::vector<Share> shares(static_cast<size_t>(n));
  for (int i = 0; i < n; i++) {
    const int64_t lo = g * i / n, hi = g * (i + 1) / n;
    shares[i].range.store(static_cast<uint64_t>(lo) << 32 | static_cast<uint64_t>(hi), std::memory_order_relaxed);
    shares[i].parts = s.steal;
  }
  parallel_for(n, [&](int) {
    int own = tl_thread == 0 ? 0 : 1 + (tl_thread - 1) % (n - 1);   // a worker past n (THREADS was larger) not share 0
    while (shares[own].claimed.exchange(true, std::memory_order_acq_rel)) own = (own + 1) % n;
    int64_t lo = 0, hi = 0;
    while (shares[own].take(true, lo, hi)) fn(lo, hi);
    for (int d = 1; d < n; d++)
      while (shares[(own + d) % n].take(false, lo, hi)) fn(lo, hi);
  });
  if (s.stats) record(CallStats{g, n, joined_.load(), late_ns_.load() * 1e-3, wait_us_});
}

void ThreadPool::record(CallStats c) {
  c.end_ns = now_ns();
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.push_back(c);
}

std::vector<ThreadPool::CallStats> ThreadPool::take_stats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return std::exchange(stats_, {});
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::grow(int n) {
  // a new worker takes tasks of the call about to be published (its generation is past this one)
  while (static_cast<int>(threads_.size()) < n)
    threads_.emplace_back([this, seen = generation_, id = static_cast<int>(threads_.size()) + 1] {
      tl_thread = id;
      worker_loop(seen);
    });
}

// A ticket's (generation, tasks, next) come in one fetch_add, so a worker late for a call can't take a task
// of the next one with the wrong count; fn_ is the ticket's: the next call waits for this task to finish.
uint64_t ThreadPool::take_tasks() {
  for (bool first = tl_thread > 0;;) {
    const uint64_t t = ticket_.fetch_add(1, std::memory_order_acq_rel);
    const uint64_t tasks = (t >> kFieldBits) & kFieldMask, i = t & kFieldMask;
    if (i >= tasks) return gen_of(t);
    if (first && stats_on_.load(std::memory_order_relaxed)) {   // a worker's first task of the call: when it joined
      const int64_t late = now_ns() - publish_ns_.load(std::memory_order_relaxed);
      for (int64_t cur = late_ns_.load(); cur < late && !late_ns_.compare_exchange_weak(cur, late);) {}
      joined_.fetch_add(1);
    }
    first = false;
    (*fn_)(static_cast<int>(i));   // kernels don't throw: they are generated C
    // the last task wakes a caller that stopped spinning (seq_cst with its caller_waiting_ store and pending_ load)
    if (pending_.fetch_sub(1) == 1 && caller_waiting_.load()) {
      { std::lock_guard<std::mutex> lock(mu_); }
      done_cv_.notify_one();
    }
  }
}

bool ThreadPool::wait_for_work(uint64_t seen) {
  auto published = [&] { return stop_.load() || gen_of(ticket_.load(std::memory_order_acquire)) != seen; };
  if (!spin_until(published, spin_ns_.load(std::memory_order_relaxed))) {
    std::unique_lock<std::mutex> lock(mu_);
    sleepers_++;   // seq_cst with parallel_for's ticket store and sleepers_ load: no lost wake-up
    work_cv_.wait(lock, published);
    sleepers_--;
  }
  return !stop_.load();
}

// A worker past the call's participants (left from a larger THREADS) sits the call out: THREADS=2 runs on the
// caller and worker 1 only, so each share keeps its thread (parallel_range).
void ThreadPool::worker_loop(uint64_t seen) {
  while (wait_for_work(seen)) seen = tl_thread < participants_.load(std::memory_order_acquire) ? take_tasks() : gen_of(ticket_.load(std::memory_order_acquire));
}

void ThreadPool::parallel_for(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (n == 1) { fn(0); return; }
  if (static_cast<uint64_t>(n) >= kFieldMask / 2)
    throw Error("ThreadPool::parallel_for of " + std::to_string(n) + " tasks: at most " + std::to_string(kFieldMask / 2 - 1) + " (THREADS too large?)");
  std::lock_guard<std::mutex> call(call_mu_);
  const int participants = std::min(n, std::max(1, settings().threads));
  grow(participants - 1);
  participants_.store(participants, std::memory_order_relaxed);
  fn_ = &fn;
  pending_.store(n, std::memory_order_relaxed);
  const bool stats = settings().stats;
  stats_on_.store(stats, std::memory_order_relaxed);
  if (stats) late_ns_ = 0, joined_ = 1, publish_ns_ = now_ns();
  ticket_.store(++generation_ << (2 * kFieldBits) | static_cast<uint64_t>(n) << kFieldBits);   // seq_cst: see wait_for_work
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }   // a worker between its check and its sleep is asleep after this
    work_cv_.notify_all();
  }
  take_tasks();
  const int64_t own_done = stats ? now_ns() : 0;
  // the workers' last tasks: a short spin (a balanced kernel's slices end together), then sleep
  auto done = [&] { return pending_.load() == 0; };
  if (!spin_until(done, std::max<int64_t>(spin_ns_.load(std::memory_order_relaxed), 20000))) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_waiting_ = true;
    done_cv_.wait(lock, done);
    caller_waiting_ = false;
  }
  if (stats) wait_us_ = static_cast<double>(now_ns() - own_done) * 1e-3;
  fn_ = nullptr;
}

}  // namespace tg
