// One persistent pool of worker threads for CPU kernels. parallel_for(n, fn) runs fn(0..n-1),
// task 0 on the calling thread, the rest on workers, and returns when all are done.
// Workers are started on first need and kept; calls are serialized (one kernel at a time).
#pragma once
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
  int workers() const { return static_cast<int>(threads_.size()); }
  ~ThreadPool();

 private:
  void grow(int n);
  void worker_loop();
  std::mutex call_mu_;   // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* fn_ = nullptr;
  int n_tasks_ = 0, next_ = 0, done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace tg
