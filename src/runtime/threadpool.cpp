#include "runtime/threadpool.hpp"

#include <algorithm>

#include "tg/helpers.hpp"

namespace tg {

ThreadPool& ThreadPool::global() {
  // never destroyed: workers just stop with the process, no join racing static destructors
  static ThreadPool* pool = new ThreadPool();
  return *pool;
}

int ThreadPool::default_threads() {
  // read per kernel launch: the env lookup (a lock, a map, a string) only when a Context changed
  thread_local uint64_t seen_generation = 0;
  thread_local int cached = 0;
  const uint64_t gen = context_generation();
  if (gen == seen_generation) return cached;
  int64_t n = getenv("THREADS", 0);
  if (n < 0) throw Error("THREADS=" + std::to_string(n) + " must be positive (or unset for all cores)");
  // hardware_concurrency reads sysfs (open/read/close) on every call: once per process, not per kernel
  static const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (n == 0) n = cores;
  cached = static_cast<int>(n);
  seen_generation = gen;
  return cached;
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
  while (static_cast<int>(threads_.size()) < n) threads_.emplace_back([this] { worker_loop(); });
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && next_ < n_tasks_); });
    if (stop_) return;
    seen = generation_;
    while (next_ < n_tasks_) {
      int i = next_++;
      auto* fn = fn_;
      lock.unlock();
      (*fn)(i);   // kernels don't throw: they are generated C
      lock.lock();
      if (++done_ == n_tasks_) done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (n == 1) { fn(0); return; }
  std::lock_guard<std::mutex> call(call_mu_);
  std::unique_lock<std::mutex> lock(mu_);
  grow(n - 1);
  fn_ = &fn;
  n_tasks_ = n;
  next_ = 1;   // task 0 is ours
  done_ = 0;
  generation_++;
  lock.unlock();
  work_cv_.notify_all();
  fn(0);
  lock.lock();
  ++done_;
  // help with tasks no worker has picked up yet
  while (next_ < n_tasks_) {
    int i = next_++;
    lock.unlock();
    fn(i);
    lock.lock();
    ++done_;
  }
  done_cv_.wait(lock, [&] { return done_ == n_tasks_; });
  fn_ = nullptr;
  n_tasks_ = 0;
}

}  // namespace tg
