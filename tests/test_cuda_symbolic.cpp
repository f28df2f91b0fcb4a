// Reductions over symbolic axes on the GPU: a KV-cache decode step's attention (key length
// start_pos+1, a bound Variable) gets cooperative kernels: a block of threads per row with a
// block-stride loop (codegen KernelInfo::sym_groups), a warp per key for q @ keys^T, warp lanes on
// the head dim for scores @ values. Checked three ways: the rendered CUDA (no GPU), the CUDA run
// on CPU threads (tests/cuda_emulator.hpp, no GPU), and on a GPU (skipped without one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "access.hpp"
#include "codegen/kernel.hpp"
#include "cuda_emulator.hpp"
#include "engine/realize.hpp"
#include "engine/schedule.hpp"
#include "renderer/cstyle.hpp"
#include "runtime/device.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {

const Opts kCpu{dtypes::float32, "CPU", false};

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) n++;
  return n;
}

// GPT-2's decode attention (examples/gpt2/model.cpp): q, keys and values are heads of one
// (1, max_context, 3*dim) cache, the keys and values its first `end` rows
struct Attn {
  int64_t H, D, maxc;
  Tensor cache;
  Tensor step(const sint& sp) const {
    const int64_t dim = H * D;
    auto heads = [&](int64_t i, const sint& from, const sint& to) {
      return cache.shrink({{sint(0), sint(1)}, {from, to}, {sint(i * dim), sint((i + 1) * dim)}})
          .reshape(std::vector<sint>{sint(1), to - from, sint(H), sint(D)})
          .transpose(1, 2);
    };
    return heads(0, sp, sp + 1).scaled_dot_product_attention(heads(1, sint(0), sp + 1), heads(2, sint(0), sp + 1));
  }
};

// plain C++ attention of the query at row sp over rows 0..sp
std::vector<float> attention_ref(const std::vector<float>& c, int64_t H, int64_t D, int64_t sp) {
  const int64_t dim = H * D, row = 3 * dim, len = sp + 1;
  std::vector<float> out;
  for (int64_t h = 0; h < H; h++) {
    std::vector<double> s(len);
    double mx = -INFINITY, z = 0;
    for (int64_t j = 0; j < len; j++) {
      double acc = 0;
      for (int64_t d = 0; d < D; d++) acc += static_cast<double>(c[sp * row + h * D + d]) * c[j * row + dim + h * D + d];
      s[j] = acc / std::sqrt(static_cast<double>(D));
      mx = std::max(mx, s[j]);
    }
    for (double& x : s) z += (x = std::exp(x - mx));
    for (int64_t d = 0; d < D; d++) {
      double acc = 0;
      for (int64_t j = 0; j < len; j++) acc += s[j] / z * c[j * row + 2 * dim + h * D + d];
      out.push_back(static_cast<float>(acc));
    }
  }
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); i++) ASSERT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << what << " at " << i;
}

std::vector<float> rand_host(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (auto& x : v) x = static_cast<float>((s = s * 1664525u + 1013904223u) >> 8) / static_cast<float>(1 << 24) * 2 - 1;
  return v;
}

}  // namespace

// No GPU needed. Before: a kernel with a Variable got no opts on the GPU (the tensor-core attempt
// was "skipped" as a failed opt and counted as applied), so each of the three attention kernels ran
// one thread per block: the softmax one thread per head, looping over all keys three times.
TEST(CudaSymbolicCodegen, DecodeAttentionKernelsCooperate) {
  CUDARenderer ren("sm_90");
  Variable sp("start_pos", 1, 1023);
  Attn a{12, 64, 1024, Tensor::empty({1, 1024, 3 * 12 * 64}, kCpu)};
  int kernels = 0, rows = 0;
  for (const ScheduleItem& si : a.step(sint(sp.bind(37))).schedule()) {
    if (si.kind != MetaOps::KERNEL) continue;
    Kernel k(Access::uop(si.ast), ren);
    k.skip_failed_opts = !k.vars.empty();
    k.hand_coded_optimizations();
    k.skip_failed_opts = false;
    RenderedProgram p = k.to_program();
    kernels++;
    EXPECT_GE(p.local_size[0] * p.local_size[1] * p.local_size[2], 32) << "a warp or more per block\n" << p.src;
    EXPECT_NE(p.src.find("__shared__"), std::string::npos) << "a group reduction\n" << p.src;
    if (k.reduceops.size() == 2) {
      // the softmax: max and sum of exps of each row in a block of 256 threads (max 1024 keys), each
      // thread taking every 256th key up to the runtime length; partials meet through shuffles and
      // shared memory; the normalized store is spread over the threads the same way
      rows++;
      ASSERT_EQ(k.sym_groups.size(), 1u);
      EXPECT_EQ(p.local_size[0], 256);
      EXPECT_EQ(count(p.src, "__shfl_xor_sync(0xffffffffu"), 10u) << p.src;
      EXPECT_EQ(count(p.src, "__syncthreads();"), 2u) << p.src;
      EXPECT_NE(p.src.find("(start_pos+(-lidx0)+256)/256"), std::string::npos) << "the block-stride bound\n" << p.src;
      EXPECT_NE(p.src.find("(ridx0*256)+lidx0"), std::string::npos) << p.src;
    }
    if (nvrtc_available()) EXPECT_FALSE(nvrtc_compile(p.src, "sm_90").empty()) << p.src;
  }
  EXPECT_EQ(kernels, 3);
  EXPECT_EQ(rows, 1);
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not installed: rendered only";
}

TEST(CudaSymbolicCodegen, SymbolicGroupOptChecks) {
  CUDARenderer ren("sm_90");
  Variable n("n", 1, 600);
  Tensor x = Tensor::empty({4, 600}, kCpu).shrink({{sint(0), sint(4)}, {sint(0), sint(n.bind(7))}});
  Kernel k(Access::uop(x.sum(1).schedule().back().ast), ren);
  ASSERT_EQ(k.first_reduce(), 1);
  EXPECT_THROW(k.apply_opt({OptOps::GROUPTOP, 0, 32}), KernelOptError);   // only block-stride groups
  k.apply_opt({OptOps::GROUP, 0, 64});
  ASSERT_EQ(k.sym_groups.size(), 1u);
  EXPECT_EQ(k.group_for_reduces, 1);
  EXPECT_EQ(k.full_shape(), (Shape{4, 64, 600}));
  EXPECT_TRUE(k.symbolic_axis(k.sym_groups[0].first));
  EXPECT_EQ(k.sym_groups[0].second, 1);
  EXPECT_THROW(k.apply_opt({OptOps::GROUP, 0, 4}), KernelOptError);    // already grouped
  EXPECT_THROW(k.apply_opt({OptOps::UNROLL, 0, 4}), KernelOptError);   // the group axis itself
  EXPECT_THROW(k.apply_opt({OptOps::UNROLL, 1, 4}), KernelOptError);   // grouped: no tiles too
  // a later opt on a fixed axis moves both axes with the shape
  k.apply_opt({OptOps::UPCAST, 0, 4});
  ASSERT_EQ(k.sym_groups.size(), 1u);
  EXPECT_TRUE(k.symbolic_axis(k.sym_groups[0].first));
  EXPECT_EQ(k.full_shape()[k.sym_groups[0].second], 64);
}

// The generated CUDA run on CPU threads: sum, max (of negatives: the identity is -inf), mean and
// softmax over a symbolic row at lengths around the block's thread count, against plain C++.
TEST(CudaSymbolicEmulated, RowsAtEveryEdgeLength) {
  CUDARenderer ren("sm_90");
  const int64_t R = 3, M = 600;
  Variable n("n", 1, M);
  const std::vector<float> h = rand_host(R * M, 7);
  Tensor base = Tensor::from<float>(h, {R, M}, kCpu).realize();
  int64_t group = 0;
  for (int64_t l : {1, 2, 3, 31, 32, 33, 127, 128, 129, 255, 256, 257, 300, 599, 600}) {
    Tensor x = base.shrink({{sint(0), sint(R)}, {sint(0), sint(n.bind(l))}});
    for (const std::string op : {"sum", "max", "negmax", "mean", "softmax"}) {
      Tensor t = op == "sum" ? x.sum(1) : op == "max" ? x.max(1) : op == "negmax" ? (-x).max(1) : op == "mean" ? x.mean(1) : x.softmax(-1);
      cuda_emu::Run r = cuda_emu::run(t.contiguous(), ren);
      ASSERT_TRUE(r.errors.empty()) << r.errors[0];
      std::vector<float> want;
      for (int64_t i = 0; i < R; i++) {
        double s = 0, mx = -INFINITY, nmx = -INFINITY;
        for (int64_t j = 0; j < l; j++) s += h[i * M + j], mx = std::max<double>(mx, h[i * M + j]), nmx = std::max<double>(nmx, -h[i * M + j]);
        if (op == "sum") want.push_back(static_cast<float>(s));
        if (op == "max") want.push_back(static_cast<float>(mx));
        if (op == "negmax") want.push_back(static_cast<float>(nmx));
        if (op == "mean") want.push_back(static_cast<float>(s / l));
        if (op == "softmax") {
          double z = 0;
          for (int64_t j = 0; j < l; j++) z += std::exp(h[i * M + j] - mx);
          for (int64_t j = 0; j < l; j++) want.push_back(static_cast<float>(std::exp(h[i * M + j] - mx) / z));
        }
      }
      std::vector<float> got = cuda_emu::values<float>(r);
      got.resize(want.size());   // (a symbolic output's buffer is sized for the max)
      expect_close(got, want, 1e-5f, op + " n=" + std::to_string(l));
      for (const RenderedProgram& p : r.programs) group = std::max(group, p.local_size[0]);
    }
  }
  EXPECT_EQ(group, 128) << "a max of 600: 128 threads per row";
}

namespace {
// the attention step at each start_pos, run by the emulator, against plain C++
void emulated_attention(int64_t H, int64_t D, int64_t maxc, const std::vector<int64_t>& positions) {
  CUDARenderer ren("sm_90");
  const std::vector<float> c = rand_host(maxc * 3 * H * D, 11);
  Attn a{H, D, maxc, Tensor::from<float>(c, {1, maxc, 3 * H * D}, kCpu).realize()};
  Variable sp("start_pos", 1, maxc - 1);
  for (int64_t p : positions) {
    cuda_emu::Run r = cuda_emu::run(a.step(sint(sp.bind(p))), ren);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    ASSERT_EQ(r.programs.size(), 3u);
    expect_close(cuda_emu::values<float>(r), attention_ref(c, H, D, p), 1e-5f, "start_pos " + std::to_string(p));
  }
}
}  // namespace

// UPCAST of a symbolic global dim on a GPU: ceil(L/amt) threads of amt lanes, the last tile's lanes
// past L masked. q @ keys^T's shape (a dot over D per key) and an elementwise map, run as CUDA on
// CPU threads for every length 1..3*amt+5 and the max, against plain C++.
TEST(CudaSymbolicEmulated, UpcastSymbolicGlobalDimEveryLength) {
  const int64_t R = 3, D = 8, L = 64;
  CUDARenderer ren("sm_90");
  const std::vector<float> xv = rand_host(R * L * D, 5), qv = rand_host(R * D, 6);
  Tensor x = Tensor::from<float>(xv, {R, L, D}, kCpu).realize(), q = Tensor::from<float>(qv, {R, 1, D}, kCpu).realize();
  Variable n("n", 1, L);
  for (int64_t amt : {3, 4, 8}) {
    std::vector<int64_t> ls;
    for (int64_t l = 1; l <= 3 * amt + 5; l++) ls.push_back(l);
    ls.push_back(L);
    for (int64_t l : ls) {
      Tensor keys = x.shrink({{sint(0), sint(R)}, {sint(0), sint(n.bind(l))}, {sint(0), sint(D)}});
      std::vector<float> dot, map;
      for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < l; j++) {
          double acc = 0;
          for (int64_t d = 0; d < D; d++) acc += static_cast<double>(qv[r * D + d]) * xv[(r * L + j) * D + d];
          dot.push_back(static_cast<float>(acc));
          map.push_back(xv[(r * L + j) * D] * 2 + 1);
        }
      const std::string what = "amt " + std::to_string(amt) + " length " + std::to_string(l);
      // (R, L) with the dot's reduce after: L is global axis 1 of both kernels
      cuda_emu::Run r = cuda_emu::run((q * keys).sum(-1), ren, std::vector<Opt>{{OptOps::UPCAST, 1, amt}});
      ASSERT_TRUE(r.errors.empty()) << r.errors[0];
      ASSERT_EQ(r.programs.size(), 1u);
      std::vector<float> got = cuda_emu::values<float>(r);
      got.resize(dot.size());
      expect_close(got, dot, 1e-5f, "dot " + what);
      // forced, then as the GPU heuristics pick (they upcast the symbolic dim by 4 and LOCAL the rows);
      // a fresh tensor each time (a scheduled one has no kernel left to schedule)
      for (bool heuristics : {false, true}) {
        const Tensor mapped =
            keys.shrink({{sint(0), sint(R)}, {sint(0), sint(n.bind(l))}, {sint(0), sint(1)}}).reshape({sint(R), sint(n.bind(l))}) * 2 + 1;
        r = heuristics ? cuda_emu::run(mapped, ren) : cuda_emu::run(mapped, ren, std::vector<Opt>{{OptOps::UPCAST, 1, amt}});
        ASSERT_TRUE(r.errors.empty()) << r.errors[0];
        ASSERT_EQ(r.programs.size(), 1u);
        got = cuda_emu::values<float>(r);
        got.resize(map.size());
        expect_close(got, map, 1e-6f, (heuristics ? "map, heuristics' opts, " : "map ") + what);
      }
    }
  }
}

TEST(CudaSymbolicEmulated, AttentionEveryStartPos1To64) {
  std::vector<int64_t> ps;
  for (int64_t p = 1; p <= 64; p++) ps.push_back(p);
  emulated_attention(2, 64, 128, ps);
}

TEST(CudaSymbolicEmulated, AttentionLongCache) {
  emulated_attention(2, 64, 1024, {1, 254, 255, 256, 511, 1023});
}

// On the GPU: GPT-2's decode attention under TinyJit for every start_pos 1..64, against the CPU;
// captured once, no kernel compiled after the capture.
TEST(CudaSymbolic, AttentionUnderJitEveryStartPos1To64) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA here";
  const int64_t H = 12, D = 64, maxc = 1024;
  const std::vector<float> c = rand_host(maxc * 3 * H * D, 5);
  Attn gpu{H, D, maxc, Tensor::from<float>(c, {1, maxc, 3 * H * D}, kCpu).to("CUDA").realize()};
  Variable sp("start_pos", 1, maxc - 1);
  TinyJit jit([&](const std::vector<Tensor>& in, const std::vector<Variable>& vars) {
    return std::vector<Tensor>{Attn{H, D, maxc, in[0]}.step(sint(vars[0])).contiguous()};
  });
  size_t cache_after_capture = 0, kernels = 0;
  for (int64_t p = 1; p <= 64; p++) {
    std::vector<Tensor> got = jit({gpu.cache}, {sp.bind(p)});
    if (p == 2) cache_after_capture = method_cache_size(), kernels = jit.captured_kernels();
    if (p > 2) {
      EXPECT_EQ(method_cache_size(), cache_after_capture) << "start_pos " << p << " compiled a kernel";
      EXPECT_EQ(jit.captured_kernels(), kernels);
    }
    expect_close(got[0].to("CPU").tolist<float>(), attention_ref(c, H, D, p), 1e-4f, "start_pos " + std::to_string(p));
    // and eagerly
    expect_close(gpu.step(sint(sp.bind(p))).to("CPU").tolist<float>(), attention_ref(c, H, D, p), 1e-4f,
                 "eager start_pos " + std::to_string(p));
  }
}

// On the GPU: symbolic rows at edge lengths (the emulated test's cases), one kernel for all lengths
TEST(CudaSymbolic, RowsAtEveryEdgeLength) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA here";
  const int64_t R = 3, M = 1000;
  Variable n("n", 1, M);
  const std::vector<float> h = rand_host(R * M, 9);
  Tensor base = Tensor::from<float>(h, {R, M}, kCpu).to("CUDA").realize();
  size_t cache_after_first = 0;
  for (int64_t l = 1; l <= M; l += (l < 300 ? 1 : 37)) {
    Tensor x = base.shrink({{sint(0), sint(R)}, {sint(0), sint(n.bind(l))}});
    std::vector<float> sum, mx, sm;
    for (int64_t i = 0; i < R; i++) {
      double s = 0, top = -INFINITY, neg = -INFINITY, z = 0;
      for (int64_t j = 0; j < l; j++) s += h[i * M + j], top = std::max<double>(top, h[i * M + j]), neg = std::max<double>(neg, -h[i * M + j]);
      for (int64_t j = 0; j < l; j++) z += std::exp(h[i * M + j] - top);
      sum.push_back(static_cast<float>(s)), mx.push_back(static_cast<float>(neg));
      for (int64_t j = 0; j < l; j++) sm.push_back(static_cast<float>(std::exp(h[i * M + j] - top) / z));
    }
    const std::string at = " n=" + std::to_string(l);
    expect_close(x.sum(1).to("CPU").tolist<float>(), sum, 1e-4f, "sum" + at);   // (another summation order)
    expect_close((-x).max(1).to("CPU").tolist<float>(), mx, 0, "max" + at);
    std::vector<float> got = x.softmax(-1).contiguous().to("CPU").tolist<float>();
    expect_close(got, sm, 1e-5f, "softmax" + at);
    if (!cache_after_first) cache_after_first = method_cache_size();
    else EXPECT_EQ(method_cache_size(), cache_after_first) << "a new length compiled a kernel:" << at;
  }
}

// test_symbolic_jit's KVCacheAttentionStep layout (separate (1, H, MAX, D) caches, head dim 8, a max of 64
// keys) under the GPU heuristics, emulated, against the CPU's fixed-length result at every start_pos
TEST(CudaSymbolicEmulated, SeparateCachesHeadDim8EveryStartPos) {
  CUDARenderer ren("sm_90");
  const int64_t H = 2, D = 8, MAX = 64;
  Tensor ck = Tensor::from<float>(rand_host(H * MAX * D, 5), {1, H, MAX, D}, kCpu).realize();
  Tensor cv = Tensor::from<float>(rand_host(H * MAX * D, 6), {1, H, MAX, D}, kCpu).realize();
  Tensor q = Tensor::from<float>(rand_host(H * D, 7), {1, H, 1, D}, kCpu).realize();
  Variable sp("start_pos", 1, MAX - 1);
  auto step = [&](const sint& len) {
    Tensor keys = ck.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), len}, {sint(0), sint(D)}});
    Tensor values = cv.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), len}, {sint(0), sint(D)}});
    return q.scaled_dot_product_attention(keys, values);
  };
  for (int64_t p = 1; p < MAX; p++) {
    cuda_emu::Run r = cuda_emu::run(step(sp.bind(p) + 1), ren);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    std::vector<float> want = step(sint(p + 1)).realize().tolist<float>();
    std::vector<float> got = cuda_emu::values<float>(r);
    got.resize(want.size());
    expect_close(got, want, 1e-5f, "start_pos " + std::to_string(p));
  }
}
