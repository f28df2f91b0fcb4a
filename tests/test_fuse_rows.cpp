// Row kernels (schedule.cpp merge_row_groups, lowerer contexts): softmax, log_softmax, layernorm and
// cross-entropy run their reduces over the same rows in one kernel. Kernel counts, values against the
// unfused schedule (FUSE_ROWS=0) for odd, 1-length, strided and permuted inputs, keepdim, several
// outputs and gradients, the loop structure of the C and CUDA code, and the guards that keep a
// reduce unfused.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "access.hpp"
#include "codegen/kernel.hpp"
#include "engine/realize.hpp"
#include "engine/schedule.hpp"
#include "renderer/cstyle.hpp"
#include "runtime/device.hpp"
#include "tensor_test_util.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {

Tensor rnd(const Shape& shape, uint32_t seed, float lo = -3, float hi = 3) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(prod(shape));
  for (auto& x : v) x = u(g);
  return Tensor::from<float>(v, shape, Opts{dtypes::float32, "CPU", false});
}

size_t kernels(const std::vector<Tensor>& outs) {
  size_t n = 0;
  for (const ScheduleItem& si : outs[0].schedule(std::vector<Tensor>(outs.begin() + 1, outs.end()))) n += si.kind == MetaOps::KERNEL;
  return n;
}
size_t kernels(const Tensor& t) { return kernels(std::vector<Tensor>{t}); }

// the most reduces any one kernel of the schedule has
size_t max_reduces_per_kernel(const Tensor& t) {
  size_t m = 0;
  for (const ScheduleItem& si : t.schedule()) {
    if (si.kind != MetaOps::KERNEL) continue;
    size_t n = 0;
    for (const UOp& u : Access::uop(si.ast).toposort()) n += u->op == Ops::REDUCE_AXIS;
    m = std::max(m, n);
  }
  return m;
}

using Fn = std::function<std::vector<Tensor>(const Tensor&)>;
// fn's outputs with row kernels and without (FUSE_ROWS=0), on fresh copies of the same data
void expect_same_unfused(const Tensor& x, const Fn& fn, double tol, const std::string& what) {
  std::vector<float> h = x.contiguous().tolist<float>();
  auto run = [&](int fuse) {
    Context c{{"FUSE_ROWS", fuse}};
    Tensor xi = Tensor::from<float>(h, x.shape(), Opts{dtypes::float32, "CPU", false});
    std::vector<std::vector<float>> r;
    for (Tensor& t : fn(xi)) r.push_back(t.cast(dtypes::float32).tolist<float>());
    return r;
  };
  auto fused = run(1), plain = run(0);
  ASSERT_EQ(fused.size(), plain.size());
  for (size_t o = 0; o < fused.size(); o++) {
    ASSERT_EQ(fused[o].size(), plain[o].size()) << what;
    for (size_t i = 0; i < fused[o].size(); i++)
      ASSERT_NEAR(fused[o][i], plain[o][i], tol * std::max(1.0f, std::fabs(plain[o][i]))) << what << " output " << o << " at " << i;
  }
}

Tensor labels(int64_t rows, int64_t classes) {
  std::vector<int32_t> l(rows);
  for (int64_t i = 0; i < rows; i++) l[i] = static_cast<int32_t>((i * 7 + 3) % classes);
  return Tensor::from<int32_t>(l, {rows}, Opts{dtypes::int32, "CPU", false});
}

}  // namespace

TEST(FuseRows, KernelCounts) {
  Tensor x = Tensor::empty({64, 1000}, Opts{dtypes::float32, "CPU", false});
  EXPECT_EQ(kernels(x.softmax(-1)), 1u);
  EXPECT_EQ(kernels(x.log_softmax(-1)), 1u);
  EXPECT_EQ(kernels(x.layernorm(-1)), 1u);
  EXPECT_EQ(kernels(x.softmax(0)), 1u);
  EXPECT_EQ(max_reduces_per_kernel(x.softmax(-1)), 2u);
  EXPECT_EQ(max_reduces_per_kernel(x.layernorm(-1)), 2u);
  Tensor w = Tensor::empty({1000}, Opts{dtypes::float32, "CPU", false});
  EXPECT_EQ(kernels(x.layernorm(-1) * w + w), 1u);
  // cross-entropy: one row kernel (max, log-sum-exp and the picked logit of each row, the label's
  // one-hot arange computed in it), then one kernel sums the rows and divides by the label count
  EXPECT_EQ(kernels(x.sparse_categorical_crossentropy(labels(64, 1000))), 2u);
  EXPECT_EQ(kernels(x.sparse_categorical_crossentropy(labels(64, 1000), 3, 0.1)), 2u);
  Tensor big = Tensor::empty({8192, 32000}, Opts{dtypes::float32, "CPU", false});
  Tensor big_y = Tensor::empty({8192}, Opts{dtypes::int32, "CPU", false});
  EXPECT_EQ(kernels(big.sparse_categorical_crossentropy(big_y)), 2u);
  Context off{{"FUSE_ROWS", 0}};
  EXPECT_EQ(kernels(x.softmax(-1)), 3u);
  EXPECT_GE(kernels(x.sparse_categorical_crossentropy(labels(64, 1000))), 4u);
}

// cross-entropy's loss against a host computation (ignored labels, label smoothing, odd shapes)
TEST(FuseRows, CrossEntropyMatchesHost) {
  struct Case { Shape s; int64_t ignore; double ls; };
  for (const Case& c : std::vector<Case>{{{64, 1000}, -1, 0}, {{33, 4097}, 10, 0}, {{7, 129}, 3, 0.2}, {{2, 3, 17}, -1, 0.1}}) {
    const int64_t nc = c.s.back(), rows = prod(c.s) / nc;
    Tensor x = rnd(c.s, static_cast<uint32_t>(prod(c.s) + 7));
    Tensor y = labels(rows, nc);
    std::vector<float> xv = x.tolist<float>();
    std::vector<int32_t> yv = y.tolist<int32_t>();
    Shape ys(c.s.begin(), c.s.end() - 1);
    Tensor loss = x.sparse_categorical_crossentropy(y.reshape(ys), c.ignore, c.ls);
    EXPECT_EQ(kernels(loss), 2u) << to_str(c.s);
    double total = 0, count = 0;
    for (int64_t r = 0; r < rows; r++) {
      if (yv[r] == c.ignore) continue;
      const float* row = xv.data() + r * nc;
      double mx = -INFINITY, sum = 0, mean = 0;
      for (int64_t j = 0; j < nc; j++) mx = std::max(mx, double(row[j]));
      for (int64_t j = 0; j < nc; j++) sum += std::exp(row[j] - mx), mean += row[j];
      const double lse = mx + std::log(sum);
      total += (1 - c.ls) * (lse - row[yv[r]]) + c.ls * (lse - mean / nc);
      count++;
    }
    const float got = loss.item<float>();
    EXPECT_NEAR(got, total / count, 2e-5 * std::max(1.0, std::fabs(total / count))) << to_str(c.s);
  }
}

// guards: a row longer than ROW_FUSE_MAX, and reduces over other axes, keep the unfused kernels
TEST(FuseRows, Guards) {
  auto count = [](const std::function<Tensor(const Tensor&)>& f, int64_t fuse) {
    Context c{{"FUSE_ROWS", fuse}};
    return kernels(f(Tensor::empty({64, 1000}, Opts{dtypes::float32, "CPU", false})));
  };
  {
    Context c{{"ROW_FUSE_MAX", 512}};
    EXPECT_EQ(count([](const Tensor& x) { return x.softmax(-1); }, 1), 3u);
  }
  // a reduce over all of it, or over the other axis, reads the row max broadcast along rows it doesn't reduce
  for (auto f : std::vector<std::function<Tensor(const Tensor&)>>{[](const Tensor& x) { return (x - x.max(-1, true)).sum(); },
                                                                  [](const Tensor& x) { return (x - x.max(1, true)).sum(0); },
                                                                  [](const Tensor& x) { return x.max(1, true).sum(0) + x.max(0, true).sum(1); }})
    EXPECT_EQ(count(f, 1), count(f, 0));
}

// host references along one axis of a row-major tensor: (outer, n, inner) around the axis
enum class RowOp { softmax, log_softmax, layernorm };
std::vector<float> host_rows(const std::vector<float>& x, const Shape& s, int axis, RowOp op) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= s[i];
  for (size_t i = axis + 1; i < s.size(); i++) inner *= s[i];
  const int64_t n = s[axis];
  std::vector<float> out(x.size());
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + in; };
      double mx = -INFINITY, sum = 0, mean = 0, var = 0;
      for (int64_t j = 0; j < n; j++) mx = std::max(mx, double(x[at(j)])), mean += x[at(j)] / double(n);
      for (int64_t j = 0; j < n; j++) sum += std::exp(x[at(j)] - mx), var += (x[at(j)] - mean) * (x[at(j)] - mean) / double(n);
      for (int64_t j = 0; j < n; j++) {
        const double v = x[at(j)];
        out[at(j)] = static_cast<float>(op == RowOp::softmax       ? std::exp(v - mx) / sum
                                        : op == RowOp::log_softmax ? v - mx - std::log(sum)
                                                                   : (v - mean) / std::sqrt(var + 1e-5));
      }
    }
  return out;
}

TEST(FuseRows, ValuesMatchHost) {
  const std::vector<std::pair<Shape, int>> cases{{{33, 257}, 1}, {{33, 257}, 0}, {{3, 1}, 1}, {{2, 3, 5}, 1}, {{4, 1000}, 1}};
  for (auto& [s, axis] : cases) {
    Tensor x = rnd(s, static_cast<uint32_t>(prod(s)));
    const std::vector<float> h = x.tolist<float>();
    const std::string w = to_str(s) + " axis " + std::to_string(axis);
    std::vector<std::pair<RowOp, Tensor>> outs{{RowOp::softmax, x.softmax(axis)}, {RowOp::log_softmax, x.log_softmax(axis)},
                                               {RowOp::layernorm, x.layernorm(axis)}};
    for (auto& [op, t] : outs) {
      if (s[axis] > 1) EXPECT_EQ(kernels(t), 1u) << w;
      const std::vector<float> got = t.tolist<float>(), want = host_rows(h, s, axis, op);
      for (size_t i = 0; i < got.size(); i++) ASSERT_NEAR(got[i], want[i], 2e-5 * std::max(1.0f, std::fabs(want[i]))) << w << " op " << int(op) << " at " << i;
    }
  }
}

// strided (transposed, sliced, flipped) inputs, several outputs of one graph, keepdim results
TEST(FuseRows, StridedInputsAndSeveralOutputs) {
  Tensor x = rnd({40, 24}, 5);
  expect_same_unfused(x, [](const Tensor& t) { return std::vector<Tensor>{t.transpose().softmax(-1)}; }, 1e-5, "transposed");
  expect_same_unfused(x, [](const Tensor& t) { return std::vector<Tensor>{t.shrink(std::vector<std::pair<int64_t, int64_t>>{{3, 30}, {2, 21}}).log_softmax(-1)}; }, 1e-5, "shrunk");
  expect_same_unfused(x, [](const Tensor& t) { return std::vector<Tensor>{t.flip(1).layernorm(-1)}; }, 1e-4, "flipped");
  expect_same_unfused(x, [](const Tensor& t) {
    Tensor m = t.max(-1, true), e = (t - m).exp(), s = e.sum(-1, true);
    return std::vector<Tensor>{e / s, m, s, t.mean(-1, true)};
  }, 1e-5, "outputs softmax, max, sum, mean");
  Tensor y = rnd({40, 24}, 6);
  expect_same_unfused(x, [&](const Tensor& t) { return std::vector<Tensor>{(t * 2).softmax(-1) + t.layernorm(-1)}; }, 1e-4, "two families");
  std::vector<Tensor> outs{x.softmax(-1), x.max(-1, true)};
  EXPECT_LE(kernels(outs), 2u);
  // gathers through an arange one-hot with no row max (interpolate) keep their own kernels: their
  // row merge gave zeros once
  Tensor z = rnd({1, 2, 5}, 8);
  expect_same_unfused(z, [](const Tensor& t) { return std::vector<Tensor>{t.interpolate({8}, "linear")}; }, 1e-5, "interpolate up");
  expect_same_unfused(z, [](const Tensor& t) { return std::vector<Tensor>{t.interpolate({3}, "linear")}; }, 1e-5, "interpolate down");
}

TEST(FuseRows, CrossEntropyAndGradients) {
  for (const Shape& s : std::vector<Shape>{{8, 10}, {31, 129}}) {
    Tensor x = rnd(s, static_cast<uint32_t>(prod(s) + 1));
    Tensor y = labels(s[0], s[1]);
    expect_same_unfused(x, [&](const Tensor& t) {
      Tensor p = Tensor(t).requires_grad_(true);
      Tensor loss = p.sparse_categorical_crossentropy(y);
      loss.backward();
      return std::vector<Tensor>{loss, p.grad().value()};
    }, 1e-5, "CE grad " + to_str(s));
    if (s[0] < 31) continue;   // the gradients on the larger shape only (each compiles a handful of kernels)
    expect_same_unfused(x, [&](const Tensor& t) {
      Tensor p = Tensor(t).requires_grad_(true);
      Tensor w = rnd(s, 9);
      (p.softmax(-1) * w).sum().backward();
      return std::vector<Tensor>{p.grad().value()};
    }, 1e-5, "softmax grad " + to_str(s));
    expect_same_unfused(x, [&](const Tensor& t) {
      Tensor p = Tensor(t).requires_grad_(true);
      Tensor w = rnd(s, 10);
      (p.layernorm(-1) * w).sum().backward();
      return std::vector<Tensor>{p.grad().value()};
    }, 1e-4, "layernorm grad " + to_str(s));
  }
}

// The C a row kernel renders to: one loop over rows with the reduces' loops and the store's loop
// inside it, one after another (not nested), and vector lanes along the row.
// A row reduce the user made contiguous and that only the row kernel reads is still stored: the merge
// dropped it from the outputs and lowering failed an internal assertion (the mnist step on CUDA, where
// REDUCEOP_SPLIT_PARTS is 2048, hit it in the conv weight gradient)
TEST(FuseRows, ContiguousReduceIsStillStored) {
  Tensor x = rnd({64, 100}, 21);
  expect_same_unfused(x, [](const Tensor& xi) {
    Tensor m = xi.max(-1, true).contiguous();
    return std::vector<Tensor>{(xi - m).exp().sum(-1)};
  }, 1e-5, "exp-sum after a contiguous max");
  Tensor m = x.max(-1, true).contiguous();
  Tensor y = (x - m).exp().sum(-1);
  size_t stores = 0;
  for (const ScheduleItem& si : y.schedule())
    if (si.kind == MetaOps::KERNEL)
      for (const UOp& u : Access::uop(si.ast).toposort()) stores += u->op == Ops::STORE;
  EXPECT_EQ(stores, 2u) << "the contiguous max and the sum";
}

TEST(FuseRows, CpuLoopStructure) {
  std::unique_ptr<Kernel> k = tgt::cpu_kernel_of({256, 1024}, [](const Tensor& x) { return x.softmax(-1); });
  ASSERT_TRUE(k);
  const std::vector<UOp>& uops = k->linearize();
  int depth = 0, max_depth = 0, loops = 0;
  for (const UOp& u : uops) {
    if (u->op == Ops::RANGE) loops++, max_depth = std::max(max_depth, ++depth);
    if (u->op == Ops::ENDRANGE) depth--;
  }
  EXPECT_EQ(loops, 4) << "rows, max, sum, store";
  EXPECT_EQ(max_depth, 2) << "the row loops sit side by side inside the loop over rows";
  bool vector_store = false;
  for (const UOp& u : uops) vector_store |= u->op == Ops::STORE && u->src[2]->dtype.count > 1;
  EXPECT_TRUE(vector_store) << "the normalized row is stored as vectors";
}

// No GPU needed: the fused long-row softmax for CUDA is one kernel, a block per row, each reduce a
// block reduction (warp shuffles, then shared memory) whose result every thread reads for the store.
TEST(FuseRows, CudaLongRowSoftmaxRendersOneBlockPerRow) {
  CUDARenderer ren("sm_90");
  for (const Shape& s : std::vector<Shape>{{4096, 32000}, {8192, 8192}, {8192, 1024}}) {
    Tensor x = Tensor::empty(s, Opts{dtypes::float32, "CPU", false});
    for (bool ln : {false, true}) {
      std::vector<ScheduleItem> sched = (ln ? x.layernorm(-1) : x.softmax(-1)).schedule();
      std::erase_if(sched, [](const ScheduleItem& si) { return si.kind != MetaOps::KERNEL; });
      ASSERT_EQ(sched.size(), 1u) << to_str(s);
      Kernel k(Access::uop(sched[0].ast), ren);
      k.hand_coded_optimizations();
      RenderedProgram p = k.to_program();
      EXPECT_NE(p.src.find("__shared__ float temp1"), std::string::npos) << p.src;
      EXPECT_NE(p.src.find("__shared__ float temp2"), std::string::npos) << p.src;
      EXPECT_NE(p.src.find("__shfl_xor_sync(0xffffffffu"), std::string::npos) << p.src;
      EXPECT_NE(p.src.find("__syncthreads();"), std::string::npos) << p.src;
      EXPECT_EQ(p.global_size[0], s[0]) << "a block per row";
      EXPECT_GE(p.local_size[0], 64) << "threads share each row";
      if (nvrtc_available()) EXPECT_FALSE(nvrtc_compile(p.src, "sm_90").empty());
    }
  }
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not installed: rendered only";
}

// On a GPU (skipped without one): row kernels on CUDA against the CPU, forward and gradients, rows
// that take the block path (long), the thread-per-row path (short) and odd lengths.
TEST(FuseRows, CudaMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA here";
  for (const Shape& s : std::vector<Shape>{{64, 4096}, {31, 129}, {256, 1000}, {8, 32000}}) {
    Tensor xc = rnd(s, static_cast<uint32_t>(prod(s) + 3));
    Tensor w = rnd(s, 11);
    Tensor y = labels(s[0], s[1]);
    auto run = [&](const std::string& dev) {
      std::vector<std::vector<float>> r;
      Tensor x = xc.to(dev).realize(), wd = w.to(dev).realize(), yd = y.to(dev).realize();
      for (int f = 0; f < 3; f++) {
        // a fresh leaf per function: Tensor(x) shares x's handle, and to("CPU") of a CPU tensor is the
        // tensor itself, so the CPU run's gradients accumulated into xc and to() carried them to CUDA
        Tensor p = x.detach().requires_grad_(true);
        Tensor out = f == 0 ? p.softmax(-1) : f == 1 ? p.layernorm(-1) : p.log_softmax(-1);
        Tensor loss = f == 2 ? p.sparse_categorical_crossentropy(yd) : (out * wd).sum();
        loss.backward();
        r.push_back(out.to("CPU").tolist<float>());
        r.push_back(p.grad()->to("CPU").tolist<float>());
        r.push_back(loss.to("CPU").reshape({1}).tolist<float>());
      }
      return r;
    };
    auto c = run("CPU"), g = run("CUDA");
    ASSERT_EQ(c.size(), g.size());
    for (size_t o = 0; o < c.size(); o++)
      for (size_t i = 0; i < c[o].size(); i++)
        ASSERT_NEAR(g[o][i], c[o][i], 2e-4 * std::max(1.0f, std::fabs(c[o][i]))) << to_str(s) << " output " << o << " at " << i;
  }
}

// No GPU needed: a row kernel storing per-row results (cross-entropy's max and log-sum-exp) must not
// put a later reduce's warp shuffles or barrier under a thread gate (`if (lidx0 == 0)`): only some
// threads would reach them and the block hangs (it did on an H100).
TEST(FuseRows, CudaRowKernelHasNoBarrierUnderAGate) {
  CUDARenderer ren("sm_90");
  Tensor x = Tensor::empty({8192, 32000}, Opts{dtypes::float32, "CPU", false});
  Tensor y = Tensor::empty({8192}, Opts{dtypes::int32, "CPU", false});
  int row_kernels = 0;
  for (const ScheduleItem& si : x.sparse_categorical_crossentropy(y).schedule()) {
    if (si.kind != MetaOps::KERNEL) continue;
    Kernel k(Access::uop(si.ast), ren);
    k.hand_coded_optimizations();
    RenderedProgram p = k.to_program();
    row_kernels += k.row_kernel();
    // walk the source's blocks: an `if (` opens a gated block until its brace closes
    std::vector<bool> gated{false};
    size_t line_start = 0;
    while (line_start < p.src.size()) {
      size_t end = p.src.find('\n', line_start);
      if (end == std::string::npos) end = p.src.size();
      const std::string line = p.src.substr(line_start, end - line_start);
      const bool in_gate = std::find(gated.begin(), gated.end(), true) != gated.end();
      if (in_gate) {
        EXPECT_EQ(line.find("__syncthreads"), std::string::npos) << p.src;
        EXPECT_EQ(line.find("__shfl_xor_sync"), std::string::npos) << p.src;
      }
      for (char c : line) {
        if (c == '{') gated.push_back(line.find("if (") != std::string::npos);
        if (c == '}' && gated.size() > 1) gated.pop_back();
      }
      line_start = end + 1;
    }
    if (nvrtc_available()) EXPECT_FALSE(nvrtc_compile(p.src, "sm_90").empty());
  }
  EXPECT_EQ(row_kernels, 2) << "the max, log-sum-exp and picked-logit kernel, and the mean (sum and label count over one row)";
}

// Rows of symbolic length (a KV-cache decode step's softmax over start_pos+1 keys): one row kernel
// that loops to the bound expression, equal to the concrete ops, one compiled kernel for every value,
// and its CUDA form compiles under NVRTC.
TEST(FuseRows, SymbolicRowLength) {
  Variable sp("start_pos", 0, 40);
  size_t compiled = 0;
  for (int64_t pos : {0, 3, 8, 17}) {
    Tensor a = rnd({3, pos + 1}, static_cast<uint32_t>(pos + 21));
    Tensor s = a.reshape({sint(3), sint(sp.bind(pos)) + 1});
    const std::vector<float> h = a.tolist<float>();
    std::vector<std::pair<RowOp, Tensor>> outs{{RowOp::softmax, s.softmax(-1)}, {RowOp::log_softmax, s.log_softmax(-1)},
                                               {RowOp::layernorm, s.layernorm(-1)}};
    for (auto& [op, t] : outs) {
      EXPECT_EQ(kernels(t), 1u) << "pos " << pos << " op " << int(op);
      const std::vector<float> got = t.contiguous().tolist<float>(), want = host_rows(h, {3, pos + 1}, 1, op);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); i++) ASSERT_NEAR(got[i], want[i], 2e-5 * std::max(1.0f, std::fabs(want[i]))) << "pos " << pos << " op " << int(op);
    }
    if (pos == 0) compiled = method_cache_size();
    else EXPECT_EQ(method_cache_size(), compiled) << "a kernel was compiled for start_pos " << pos;
  }
  CUDARenderer ren("sm_90");
  Tensor x = Tensor::empty({1, 12, 1, 41}, Opts{dtypes::float32, "CPU", false});
  Tensor s = x.shrink({{sint(0), sint(1)}, {sint(0), sint(12)}, {sint(0), sint(1)}, {sint(0), sint(sp.bind(9)) + 1}});
  std::vector<ScheduleItem> sched = s.softmax(-1).schedule();
  std::erase_if(sched, [](const ScheduleItem& si) { return si.kind != MetaOps::KERNEL; });
  ASSERT_EQ(sched.size(), 1u);
  Kernel k(Access::uop(sched[0].ast), ren);
  k.skip_failed_opts = true;   // as get_kernel does for a symbolic kernel
  k.hand_coded_optimizations();
  RenderedProgram p = k.to_program();
  EXPECT_EQ(p.vars, std::vector<std::string>{"start_pos"});
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not installed: rendered only";
  EXPECT_FALSE(nvrtc_compile(p.src, "sm_90").empty()) << p.src;
}


// A layernorm over a few rows joins the matmul that reads it (ROW_BCAST=1; -1 on GPUs only; unset, off): the
// matmul's rows (one per output column) embed the layernorm's, whose mean and variance are recomputed
// per column in the one kernel. Values equal the unfused schedule's; many rows, or a layernorm another
// kernel reads too, stay two kernels; a matmul that assigns into a buffer's rows (a KV cache) joins too.
TEST(FuseRows, FewRowLayernormJoinsItsMatmul) {
  auto data = [](const Shape& s, uint32_t seed) { return rnd(s, seed).contiguous().tolist<float>(); };
  const std::vector<float> g = data({96}, 2), b = data({96}, 3), w = data({96, 40}, 4), bias = data({40}, 5);
  auto model = [&](const Tensor& x) {
    auto t = [&](const std::vector<float>& v, const Shape& s) { return Tensor::from<float>(v, s, Opts{dtypes::float32, "CPU", false}); };
    return (x.layernorm(-1) * t(g, {96}) + t(b, {96})).matmul(t(w, {96, 40})) + t(bias, {40});
  };
  for (int64_t rows : {1, 3, 100}) {
    const std::vector<float> h = data({rows, 96}, 1);
    auto run = [&](int bcast, size_t& n) {
      Context c{{"ROW_BCAST", bcast}};
      Tensor y = model(Tensor::from<float>(h, {rows, 96}, Opts{dtypes::float32, "CPU", false}));
      n = kernels(y);
      return y.tolist<float>();
    };
    size_t n_on = 0, n_off = 0;
    std::vector<float> on = run(1, n_on), off = run(0, n_off);
    EXPECT_EQ(n_off, 2u) << rows << " rows";
    EXPECT_EQ(n_on, rows <= 64 ? 1u : 2u) << rows << " rows";
    ASSERT_EQ(on.size(), off.size());
    for (size_t i = 0; i < on.size(); i++) ASSERT_NEAR(on[i], off[i], 1e-4 * std::max(1.0f, std::fabs(off[i]))) << rows << " rows at " << i;
  }
  Context c{{"ROW_BCAST", 1}};
  Tensor x = Tensor::from<float>(data({3, 96}, 1), {3, 96}, Opts{dtypes::float32, "CPU", false});
  Tensor ln = x.layernorm(-1);
  EXPECT_EQ(kernels({ln, ln.matmul(Tensor::from<float>(w, {96, 40}, Opts{dtypes::float32, "CPU", false}))}), 2u) << "the layernorm is an output";
  // into rows 2..4 of a realized buffer, as a KV cache takes a step's keys and values
  Tensor cache = Tensor::zeros({8, 40}, Opts{dtypes::float32, "CPU", false}).contiguous().realize();   // (not the default device: CUDA where present)
  Tensor y = model(x);
  std::vector<float> want = y.tolist<float>();
  Tensor dst = cache.shrink({{2, 5}, {0, 40}}), src = model(x);
  const int64_t before = GlobalCounters::kernel_count;
  dst.assign(src).realize();
  EXPECT_EQ(GlobalCounters::kernel_count - before, 1) << "the layernorm, the matmul and the assign in one kernel";
  std::vector<float> got = cache.tolist<float>();
  for (int64_t r = 0; r < 8; r++)
    for (int64_t j = 0; j < 40; j++) {
      const float e = r >= 2 && r < 5 ? want[size_t((r - 2) * 40 + j)] : 0.f;
      ASSERT_NEAR(got[size_t(r * 40 + j)], e, 1e-4 * std::max(1.0f, std::fabs(e))) << "cache row " << r << " column " << j;
    }
}

// No GPU needed: the joined layernorm + matrix-vector kernel renders for CUDA as a block per output
// column whose threads share the row: three block reductions (mean, variance, dot), and NVRTC compiles it.
TEST(FuseRows, CudaLayernormMatvecRendersOneKernel) {
  Context c{{"ROW_BCAST", 1}};
  CUDARenderer ren("sm_90");
  for (DType dt : {dtypes::float32, dtypes::float16}) {
    Opts o{dt, "CPU", false};
    Tensor x = Tensor::empty({1, 1, 768}, o), w = Tensor::empty({2304, 768}, o), g = Tensor::empty({768}, o);
    std::vector<ScheduleItem> sched = ((x.layernorm(-1) * g + g).matmul(w.T())).schedule();
    std::erase_if(sched, [](const ScheduleItem& si) { return si.kind != MetaOps::KERNEL; });
    ASSERT_EQ(sched.size(), 1u);
    Kernel k(Access::uop(sched[0].ast), ren);
    k.hand_coded_optimizations();
    RenderedProgram p = k.to_program();
    EXPECT_NE(p.src.find("__shared__ float temp3"), std::string::npos) << p.src;
    EXPECT_EQ(p.global_size[0], 2304) << "a block per output column";
    if (nvrtc_available()) EXPECT_FALSE(nvrtc_compile(p.src, "sm_90").empty()) << p.src;
  }
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not installed: rendered only";
}

// A softmax over a few rows joins the product with the values that reads it (ROW_BCAST=1): one query
// per head attending to 10 keys, the softmax recomputed for each of the head's 16 dims; values equal
// the unfused schedule's. (The symbolic key length of a KV cache: Gpt2Cache tests.)
TEST(FuseRows, FewRowSoftmaxJoinsTheValueProduct) {
  auto data = [](const Shape& s, uint32_t seed) { return rnd(s, seed).contiguous().tolist<float>(); };
  const std::vector<float> q = data({1, 4, 1, 16}, 1), k = data({1, 4, 10, 16}, 2), v = data({1, 4, 10, 16}, 3);
  auto run = [&](int bcast, size_t& n) {
    Context c{{"ROW_BCAST", bcast}};
    auto t = [](const std::vector<float>& x, const Shape& s) { return Tensor::from<float>(x, s, Opts{dtypes::float32, "CPU", false}); };
    Tensor y = t(q, {1, 4, 1, 16}).scaled_dot_product_attention(t(k, {1, 4, 10, 16}), t(v, {1, 4, 10, 16}));
    n = kernels(y);
    return y.tolist<float>();
  };
  size_t n_on = 0, n_off = 0;
  std::vector<float> on = run(1, n_on), off = run(0, n_off);
  EXPECT_EQ(n_on + 1, n_off) << "the softmax's kernel joins .v";
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); i++) ASSERT_NEAR(on[i], off[i], 1e-5) << "at " << i;
}
