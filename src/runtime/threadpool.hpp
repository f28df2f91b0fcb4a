// One persistent pool of worker threads for CPU kernels. parallel_for(n, fn) runs fn(0..n-1) on the calling
// thread and the first min(n, THREADS) - 1 workers, and returns when all are done. Workers are started on first
// need and kept; calls are serialized (one kernel at a time).
// A call publishes one atomic ticket (generation | task count | next task); every thread takes tasks by
// fetch_add on it, with no lock. Between calls a worker spins on the ticket for POOL_SPIN_US (default 200), then
// sleeps; it never spins where the pool has more threads than the process has cores (taskset included). Session 12
// measured spinning as no faster on the step (3 noisy rounds); session 16's per-kernel records (POOL_STATS) show a
// sleeping pool's workers joining each kernel of the mnist step tens of microseconds late at 16 threads, and its
// kernels 14% slower: bench/NOTES_cpu_threads.md.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tg {

class ThreadPool {
 public:
  static ThreadPool& global();
  static int default_threads();   // THREADS env, else all cores
  void parallel_for(int n, const std::function<void(int)>& fn);
  // fn(lo, hi) over slices of [0, g): min(g, threads x CPU_SLICES) slices, taken by whichever thread is free.
  // Default 1 (one contiguous slice a thread): on an idle 2-vCPU VM, 4 a thread ran the mnist step ~8% slower
  // (3 of 3 rounds: a kernel's slice no longer lands on the core whose cache holds it from the kernel before) and
  // matmul no faster. More slices help where another process holds one of the cores: a static half waits for its
  // descheduled thread while the other idles (bench/NOTES_cpu_gemm.md). With one slice a thread, each thread's
  // share runs in guided chunks, each 1/CPU_STEAL of what is left (default 8; 0 = off), and a thread done
  // with its own takes the chunks another hasn't started, from the back, all but the last: the static split's
  // placement when the threads keep pace, and a wait of a small chunk for a late or slower one.
  void parallel_range(int64_t g, const std::function<void(int64_t, int64_t)>& fn);
  static int slices_per_thread();   // CPU_SLICES env, default 1
  // microseconds a worker spins for the next call before it sleeps: POOL_SPIN_US (default 200), 0 where THREADS is
  // more than the cores this thread may run on
  static int64_t spin_us();
  // POOL_STATS=1: one record per parallel_range call (each CPU kernel launch makes one, in order): its parallel
  // extent g, the threads that ran a task of it (the caller included), the latest of those workers' first task
  // after the call was published (a sleeping worker's wake-up), and the caller's wait for the others' last chunks
  // after it ran out of work; end_ns: when the call returned (steady_clock). bench_train's PROFILE_STEPS reads them
  // per kernel (a kernel of several programs makes several calls).
  struct CallStats {
    int64_t g = 0;
    int tasks = 0, joined = 1;
    double late_us = 0, wait_us = 0;
    int64_t end_ns = 0;
  };
  std::vector<CallStats> take_stats();   // the records so far, cleared
  int workers() const { return static_cast<int>(threads_.size()); }
  ~ThreadPool();

 private:
  struct Settings {
    int threads = 0;   // THREADS, else all cores
    int slices = 0;    // CPU_SLICES
    int steal = 0;     // CPU_STEAL
    int64_t spin_us = 0;   // POOL_SPIN_US where each thread has a core
    bool stats = false;    // POOL_STATS
  };
  static const Settings& settings();   // this thread's copy, re-read when a Context changed
  void grow(int n);
  void worker_loop(uint64_t seen);
  uint64_t take_tasks();           // runs tasks of the published call until none is left; returns its generation
  bool wait_for_work(uint64_t seen);   // false when the pool stops
  std::mutex call_mu_;   // one parallel_for at a time
  std::mutex mu_;        // sleeping workers and a sleeping caller
  std::condition_variable work_cv_, done_cv_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* fn_ = nullptr;
  std::atomic<uint64_t> ticket_{0};   // generation << 40 | tasks << 20 | next task
  std::atomic<int> pending_{0};       // tasks of the call not finished
  std::atomic<int> participants_{0};  // the caller and workers 1..participants-1 take the call's tasks
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_waiting_{false};   // parallel_for sleeps on done_cv_ for the last task
  std::atomic<int64_t> spin_ns_{0};
  std::atomic<bool> stop_{false};
  uint64_t generation_ = 0;
  // POOL_STATS (set per call by the caller): when the call was published, its workers' latest first task, how many
  std::atomic<bool> stats_on_{false};
  std::atomic<int64_t> publish_ns_{0}, late_ns_{0};
  std::atomic<int> joined_{0};
  double wait_us_ = 0;
  std::mutex stats_mu_;
  std::vector<CallStats> stats_;
  void record(CallStats c);
};

}  // namespace tg
