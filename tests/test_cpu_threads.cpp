// The CPU's parallel loop (codegen/lowerer.cpp parallel_dims): where a kernel's first global dim is too short for
// the threads (or its split leaves a tail), the loop run on threads covers the first two or more global dims
// collapsed into one range. Checked: the rendered kernel's parallel extent at THREADS=16 (and that THREADS=2
// keeps an even first dim alone), and results at THREADS=16 on odd sizes, 1-length dims, reduces and upcast
// kernels equal to THREADS=1's (inputs are small integers, so every sum is exact whatever the kernel's order);
// and that the pool (runtime/threadpool.cpp) runs every task of back-to-back calls once.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <functional>
#include <random>

#include "access.hpp"
#include "avx512_kernels.hpp"
#include "codegen/kernel.hpp"
#include "codegen/lowerer.hpp"
#include "codegen/pack.hpp"
#include "engine/realize.hpp"
#include "engine/schedule.hpp"
#include "runtime/threadpool.hpp"
#include "tensor_test_util.hpp"
#include "tg/tg.hpp"

using namespace tg;
using tgt::last_ast;

namespace {

const Renderer& cpu() { return get_renderer("CPU"); }

std::vector<float> ints(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 7) - 3);
  return v;
}
Tensor input(const Shape& s, uint32_t seed) { return Tensor::from(ints(prod(s), seed), s).realize(); }


// the default-optimized kernel of ast at THREADS=threads: its full shape and its parallel loop's extent
struct Parallel {
  Shape full_shape;
  int64_t global_dims = 0, extent = 1;
  std::string src;   // its function name as KERNEL
};
Parallel parallel_of(const UOp& ast, int64_t threads) {
  Context ctx({{"THREADS", threads}});
  Kernel k(ast, cpu());
  k.hand_coded_optimizations();
  RenderedProgram p = k.to_program();
  for (size_t at; (at = p.src.find(p.function_name)) != std::string::npos;) p.src.replace(at, p.function_name.size(), "KERNEL");
  return {k.full_shape(), k.global_dims(), p.global_size.at(0), p.src};
}

using Fn = std::function<Tensor()>;
// fn's result at THREADS=16 (and 3: a tail on every split) equals THREADS=1's, exactly
void expect_same_as_one_thread(const Fn& fn, const std::string& what) {
  std::vector<float> one;
  {
    Context ctx({{"THREADS", 1}});
    one = fn().tolist<float>();
  }
  for (int64_t threads : {16, 3}) {
    Context ctx({{"THREADS", threads}});
    EXPECT_EQ(fn().tolist<float>(), one) << what << " at THREADS=" << threads;
  }
}

}  // namespace

// the sum over the last axis of (10, 36, 512) read transposed (its dims don't merge): 10 rows on 16 threads
// left 6 idle; 10 x 36 = 360 rows (16 slices of 22 or 23) keep them all busy
Tensor transposed(uint32_t seed) { return input({36, 10, 512}, seed).permute({1, 0, 2}); }
TEST(CpuThreads, ShortFirstDimCollapsesWithTheNext) {
  const UOp ast = last_ast(transposed(1).sum({2}));
  const Parallel p = parallel_of(ast, 16);
  ASSERT_GE(p.global_dims, 2) << to_str(p.full_shape);
  EXPECT_LT(p.full_shape[0], 16) << to_str(p.full_shape);
  EXPECT_EQ(p.extent, p.full_shape[0] * p.full_shape[1]) << "the first two global dims in one parallel loop\n" << p.src;
  EXPECT_NE(p.src.find("core_hi"), std::string::npos) << p.src;
}

// 8 images x 72 rows of an elementwise kernel (b broadcast over the rows): 8 slices on 16 threads, 576 collapsed
TEST(CpuThreads, ElementwiseEightRowsOnSixteenThreads) {
  const Tensor a = input({8, 72, 64}, 2), b = input({8, 1, 64}, 3).expand({8, 72, 64});
  const Parallel p = parallel_of(last_ast(a * b + a), 16);
  ASSERT_GE(p.global_dims, 2) << to_str(p.full_shape);
  EXPECT_GT(p.extent, p.full_shape[0]) << to_str(p.full_shape) << "\n" << p.src;
}

// a first dim that fills the threads (512 on 16) or splits evenly over 2 threads stays the parallel loop alone
TEST(CpuThreads, FirstDimThatSufficesStaysAlone) {
  const Tensor x = input({10, 512, 36}, 4).permute({1, 0, 2});
  const Parallel p16 = parallel_of(last_ast(x.sum({2})), 16);
  ASSERT_GE(p16.global_dims, 2) << to_str(p16.full_shape);
  EXPECT_EQ(p16.extent, 512) << to_str(p16.full_shape);
  const UOp ast = last_ast(transposed(5).sum({2}));
  const Parallel p2 = parallel_of(ast, 2);
  EXPECT_EQ(p2.extent, p2.full_shape[0]) << "10 rows on 2 threads: 5 each\n" << to_str(p2.full_shape);
  EXPECT_EQ(p2.src, parallel_of(ast, 1).src) << "THREADS=1 and 2 render the same kernel";
}

// A big kernel whose first dim fills 16 threads (a conv over 512 images: 32 a thread) still takes the next global
// dim at 16 threads: the others wait for the last thread's last iteration, so many threads want a finer loop
// (cpu_units_per_thread: 64 iterations a thread at 16). At 2 threads 512 images are 256 a thread: unchanged.
TEST(CpuThreads, ManyThreadsSplitABigKernelFiner) {
  const Tensor x = input({512, 8, 12, 12}, 30), w = input({16, 8, 3, 3}, 31);
  const UOp ast = last_ast(x.conv2d(w));
  const Parallel p16 = parallel_of(ast, 16), p2 = parallel_of(ast, 2);
  ASSERT_GE(p16.global_dims, 2) << to_str(p16.full_shape);
  ASSERT_EQ(p16.full_shape[0], 512) << to_str(p16.full_shape);
  EXPECT_EQ(p16.extent, 512 * p16.full_shape[1]) << "512 images x the next global dim\n" << to_str(p16.full_shape) << "\n" << p16.src;
  EXPECT_EQ(p2.extent, 512) << to_str(p2.full_shape) << "\n" << p2.src;
  EXPECT_EQ(cpu_units_per_thread(2), kCpuUnitsPerThread);
  EXPECT_EQ(cpu_units_per_thread(16), 64);
  expect_same_as_one_thread([&] { return x.conv2d(w); }, "conv2d (512, 8, 12, 12) * (16, 8, 3, 3)");
}

// results at 16 threads on a 2-core machine (correctness needs no real cores)
TEST(CpuThreads, ElementwiseOddSizesEqualOneThread) {
  const Tensor a = input({5, 7, 1001}, 6), b = input({5, 1, 1001}, 7).expand({5, 7, 1001});
  expect_same_as_one_thread([&] { return a * b - a; }, "(5, 7, 1001)");
  const Tensor c = input({3, 1, 11, 1, 1031}, 8);
  expect_same_as_one_thread([&] { return c * c; }, "(3, 1, 11, 1, 1031)");
  const Tensor d = input({1, 13, 2521}, 9);
  expect_same_as_one_thread([&] { return d + d.exp2().maximum(d); }, "(1, 13, 2521)");
}

TEST(CpuThreads, ReducesEqualOneThread) {
  const Tensor x = input({36, 10, 513}, 10).permute({1, 0, 2});
  expect_same_as_one_thread([&] { return x.sum({2}); }, "sum of (10, 36, 513) over the last axis");
  expect_same_as_one_thread([&] { return x.max({2}); }, "max of (10, 36, 513) over the last axis");
  const Tensor w = input({513, 10, 36}, 11);
  expect_same_as_one_thread([&] { return w.sum({0}); }, "sum of (513, 10, 36) over the first axis");
  const Tensor r = input({7, 3, 9, 200}, 12);
  expect_same_as_one_thread([&] { return r.sum({1, 3}); }, "sum of (7, 3, 9, 200) over axes 1 and 3");
  // rows whose leading dims don't merge (7 x 27 rows: collapsed at 16 threads), a softmax-like row kernel with
  // a full-shape store and the next row's prefetch
  const Tensor q = input({3, 7, 9, 200}, 23).permute({1, 0, 2, 3});
  expect_same_as_one_thread([&] {
    const Tensor e = (q - q.max({3}, true)).exp2();
    return e / e.sum({3}, true);
  }, "a row kernel over (7, 3, 9, 200) read transposed");
}

// upcast kernels (register tiles): a batched matmul with a short batch and a small conv
TEST(CpuThreads, UpcastKernelsEqualOneThread) {
  const Tensor a = input({3, 37, 65}, 13), b = input({3, 65, 41}, 14);
  expect_same_as_one_thread([&] { return a.matmul(b); }, "(3, 37, 65) @ (3, 65, 41)");
  const Tensor x = input({2, 5, 19, 23}, 15), k = input({9, 5, 3, 3}, 16);
  expect_same_as_one_thread([&] { return x.conv2d(k); }, "conv2d (2, 5, 19, 23) * (9, 5, 3, 3)");
  const Tensor c = input({3, 64, 96}, 19), d = input({3, 96, 48}, 20);
  expect_same_as_one_thread([&] { return c.matmul(d); }, "(3, 64, 96) @ (3, 96, 48)");
  const Tensor y = input({2, 8, 18, 34}, 21), j = input({16, 8, 3, 3}, 22);
  expect_same_as_one_thread([&] { return y.conv2d(j); }, "conv2d (2, 8, 18, 34) * (16, 8, 3, 3)");
  const Tensor m = input({10, 512}, 17), n = input({512, 36}, 18);
  expect_same_as_one_thread([&] { return m.matmul(n); }, "(10, 512) @ (512, 36)");
}

// the pool (runtime/threadpool.cpp): back-to-back calls of fewer and more tasks than threads, with workers
// spinning between calls and sleeping (POOL_SPIN_US=0), and oversubscribed (16 threads on this machine's cores):
// every task of every call runs once, and the call returns after all of them
TEST(CpuThreads, PoolRunsEveryTaskOnceAcrossCalls) {
  for (int64_t threads : {2, 16})
    for (int64_t spin : {0, 100}) {
      Context ctx({{"THREADS", threads}, {"POOL_SPIN_US", spin}});
      const int n = ThreadPool::default_threads();
      for (int call = 0; call < 500; call++) {
        const int tasks = 2 + call % (n + 3);
        std::vector<std::atomic<int>> hits(tasks);
        ThreadPool::global().parallel_for(tasks, [&](int i) { hits[i].fetch_add(1); });
        for (int i = 0; i < tasks; i++)
          ASSERT_EQ(hits[i].load(), 1) << "task " << i << " of " << tasks << ", call " << call << ", THREADS=" << threads << " POOL_SPIN_US=" << spin;
      }
    }
}

// Workers spin between kernels by default (a step's kernels follow each other within microseconds; a sleeping
// worker joins the next one late), but only where each thread has a core: not oversubscribed, not under a taskset
// that leaves fewer cores than THREADS (this thread's affinity, which the workers inherit)
TEST(CpuThreads, PoolSpinsByDefaultWhereEachThreadHasACore) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  const int64_t cores = CPU_COUNT(&all);
  {
    Context ctx({{"THREADS", std::min<int64_t>(cores, 2)}});
    EXPECT_EQ(ThreadPool::spin_us(), 200);
  }
  {
    Context ctx({{"THREADS", cores + 1}});
    EXPECT_EQ(ThreadPool::spin_us(), 0) << "more threads than cores";
  }
  {
    Context ctx({{"THREADS", 1}, {"POOL_SPIN_US", 0}});
    EXPECT_EQ(ThreadPool::spin_us(), 0) << "POOL_SPIN_US=0 turns it off";
  }
  if (cores >= 2) {
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &all)) { CPU_SET(c, &one); break; }
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    int64_t spin = -1;
    {
      Context ctx({{"THREADS", 2}});
      spin = ThreadPool::spin_us();
    }
    ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
    EXPECT_EQ(spin, 0) << "2 threads on the one core a taskset left";
  }
}

TEST(CpuThreads, PoolSpinMustNotBeNegative) {
  Context ctx({{"POOL_SPIN_US", -1}});
  EXPECT_THROW(ThreadPool::default_threads(), Error);
}

// parallel_range (what every CPU kernel launch runs): each iteration of [0, g) once, for slice counts above and
// below g, one thread and more threads than cores
TEST(CpuThreads, RangeRunsEveryIterationOnce) {
  for (int64_t threads : {1, 2, 16})
    for (int64_t slices : {1, 4})
      for (int64_t g : {1, 2, 3, 7, 8, 9, 100}) {
        Context ctx({{"THREADS", threads}, {"CPU_SLICES", slices}});
        std::vector<std::atomic<int>> hits(g);
        ThreadPool::global().parallel_range(g, [&](int64_t lo, int64_t hi) {
          ASSERT_LT(lo, hi);
          for (int64_t i = lo; i < hi; i++) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < g; i++) ASSERT_EQ(hits[i].load(), 1) << "iteration " << i << " of " << g << ", THREADS=" << threads << " CPU_SLICES=" << slices;
      }
}

// A thread held up inside its slice (another process took its core: this 2-vCPU VM is shared) holds back only
// that slice; the other thread runs the rest meanwhile. 1024^3's 8 panels on 2 threads: the stalled thread
// holds 1 panel (it held 4 of 8, half the matmul, in the old static halves). The stalled slice waits for all
// the others (a deadline instead of a hang if they never come).
TEST(CpuThreads, StalledThreadHoldsOneSliceOfItsShare) {
  Context ctx({{"THREADS", 2}, {"CPU_SLICES", 4}});
  const int64_t g = 8;
  std::atomic<int64_t> done{0}, held{0};
  std::atomic<bool> others_finished{false};
  ThreadPool::global().parallel_range(g, [&](int64_t lo, int64_t hi) {
    if (lo == 0) {
      held = hi - lo;
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (done.load() < g - (hi - lo) && std::chrono::steady_clock::now() < end) std::this_thread::yield();
      others_finished = done.load() == g - (hi - lo);
    }
    done.fetch_add(hi - lo);
  });
  EXPECT_TRUE(others_finished.load()) << "the other thread didn't run the slices outside the stalled one";
  EXPECT_LE(held.load(), g / 8) << "the stalled thread held " << held.load() << " of " << g << " iterations";
}

// The default split (one share a thread, CPU_STEAL=8 chunks each): when the thread holding a share's first chunk
// stalls (another process holds its core), the other thread runs its own share and then the stalled share's
// chunks but the one after the stalled (the owner keeps its last chunk). The static split (CPU_STEAL=0, the old
// default) held the whole half: 8 of 16 iterations.
TEST(CpuThreads, StalledShareIsTakenOverChunkByChunk) {
  for (int64_t steal : {8, 0}) {
    SCOPED_TRACE("CPU_STEAL " + std::to_string(steal));
    Context ctx({{"THREADS", 2}, {"CPU_STEAL", steal}});
    const int64_t g = 16;
    std::atomic<int64_t> done{0}, held{0};
    std::atomic<bool> others_finished{false};
    // (the static split can't finish the others while the first call waits: a short deadline there)
    const auto wait = std::chrono::seconds(steal ? 20 : 1);
    ThreadPool::global().parallel_range(g, [&](int64_t lo, int64_t hi) {
      if (lo == 0) {
        held = hi - lo;
        const auto end = std::chrono::steady_clock::now() + wait;
        // everything but this call and the chunk its owner keeps
        while (done.load() < g - 2 * (hi - lo) && std::chrono::steady_clock::now() < end) std::this_thread::yield();
        others_finished = done.load() >= g - 2 * (hi - lo);   // (more where one thread ran both tasks: no stall)
      }
      done.fetch_add(hi - lo);
    });
    EXPECT_EQ(done.load(), g);
    if (steal) {
      EXPECT_TRUE(others_finished.load()) << "the other thread didn't take the stalled share's chunks";
      EXPECT_EQ(held.load(), 1) << "the stalled call held " << held.load() << " of " << g << " iterations";
    } else {
      EXPECT_EQ(held.load(), g / 2) << "CPU_STEAL=0 keeps the static halves";
    }
  }
}

// A share runs in guided chunks (1/CPU_STEAL of what is left): when its owner is held up in its first chunk, the
// other thread runs its own share and then the stalled share's chunks down to a single iteration, not down to a
// chunk of 1/CPU_STEAL of the share. 1024 iterations on 2 threads: the stalled call holds its first 64 (fewer where
// its thread started late and the other took its share's tail first) and at most 1 more is left for it; with fixed
// chunks of 64 (the old split) 64 more were left.
TEST(CpuThreads, StalledShareIsTakenOverToItsLastIteration) {
  Context ctx({{"THREADS", 2}, {"CPU_STEAL", 8}});
  const int64_t g = 1024;
  std::atomic<int64_t> done{0}, held{0}, left{0};
  std::atomic<bool> others_finished{false};
  ThreadPool::global().parallel_range(g, [&](int64_t lo, int64_t hi) {
    if (lo == 0) {
      held = hi - lo;
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (done.load() < g - (hi - lo) - 1 && std::chrono::steady_clock::now() < end) std::this_thread::yield();
      others_finished = done.load() >= g - (hi - lo) - 1;
      left = g - (hi - lo) - done.load();
    }
    done.fetch_add(hi - lo);
  });
  EXPECT_EQ(done.load(), g);
  EXPECT_LE(held.load(), g / 2 / 8) << "the owner's first chunk: at most 1/8 of its share (less where it started late)";
  EXPECT_TRUE(others_finished.load()) << "the other thread left " << left.load() << " iterations besides the stalled chunk (1 expected)";
}

// A big kernel's parallel loop spans dims until each thread has kCpuUnitsPerThread iterations: 1024^3's packed GEMM
// (8 column panels, then 128 groups of 8 rows) runs 8 x 128 iterations in the panel order at THREADS=2 (8 panels
// alone let a thread wait up to an eighth of the kernel for the other); THREADS=1 keeps the panels' loop; a small
// kernel's even first dim stays alone (FirstDimThatSufficesStaysAlone).
TEST(CpuThreads, BigGemmLoopSpansPanelsAndRowGroups) {
  Context ctx({{"CPU_L2", int64_t{2} << 20}, {"THREADS", 2}});   // this VM's L2: the panels go outermost
  const auto plan = cpu_gemm_pack(last_ast(input({1024, 1024}, 21).matmul(input({1024, 1024}, 22))), cpu());
  ASSERT_TRUE(plan);
  const UOp ast = plan->gemm_ast;
  const Parallel p2 = parallel_of(ast, 2);
  ASSERT_GE(p2.global_dims, 2) << to_str(p2.full_shape);
  EXPECT_EQ(p2.full_shape[0], 8) << "8 column panels outermost\n" << to_str(p2.full_shape);
  EXPECT_EQ(p2.extent, p2.full_shape[0] * p2.full_shape[1]) << to_str(p2.full_shape) << "\n" << p2.src;
  EXPECT_GE(p2.extent, 2 * kCpuUnitsPerThread);
  const Parallel p1 = parallel_of(ast, 1);
  EXPECT_EQ(p1.extent, p1.full_shape[0]) << "one thread: no reason to collapse\n" << to_str(p1.full_shape);
}

// Each share goes to the same thread in every call: the caller runs share 0 from its front, worker 1 share 1, so a
// kernel's share finds its data in the cache its thread filled in the kernel before. A worker spinning for the next
// call (POOL_SPIN_US) often draws the first task before the caller; the old split gave it share 0 then. Calls where
// one thread ran both tasks (the other late for the whole call) say nothing and are skipped.
TEST(CpuThreads, EachShareRunsOnTheSameThreadEveryCall) {
  Context ctx({{"THREADS", 2}, {"CPU_STEAL", 8}, {"POOL_SPIN_US", 1000}});
  const int64_t g = 16;
  int both = 0;
  for (int call = 0; call < 30; call++) {
    std::thread::id first0, first1;
    ThreadPool::global().parallel_range(g, [&](int64_t lo, int64_t) {
      if (lo == 0) first0 = std::this_thread::get_id();
      if (lo == g / 2) first1 = std::this_thread::get_id();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    });
    if (first0 == first1) continue;
    both++;
    EXPECT_EQ(first0, std::this_thread::get_id()) << "call " << call << ": share 0 ran on the worker";
  }
  EXPECT_GT(both, 0) << "no call had both threads running";
}

TEST(CpuThreads, StealMustBeNonNegative) {
  Context ctx({{"CPU_STEAL", -1}});
  EXPECT_THROW(ThreadPool::default_threads(), Error);
}

TEST(CpuThreads, SlicesMustBePositive) {
  Context ctx({{"CPU_SLICES", 0}});
  EXPECT_THROW(ThreadPool::slices_per_thread(), Error);
}
