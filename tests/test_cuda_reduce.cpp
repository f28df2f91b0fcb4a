// Reductions on the GPU against the CPU: every reduction shape class the GPU heuristics tell apart
// (full reductions, long and short rows, columns, 1-length and non-power-of-two axes, keepdim, int
// and half inputs, the softmax family) and first-occurrence ties for argmax/argmin over every axis.
// Skipped without a GPU. The same host data goes to both devices.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <regex>

#include "access.hpp"
#include "codegen/kernel.hpp"
#include "cuda_emulator.hpp"
#include "engine/schedule.hpp"
#include "engine/search.hpp"
#include "renderer/cstyle.hpp"
#include "runtime/device.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {
bool have_cuda() { return cuda_device_count() > 0; }

std::vector<float> host_data(int64_t n, uint32_t seed, float lo = -2, float hi = 2) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

std::vector<double> as_doubles(const Tensor& t) {
  Tensor c = t.to("CPU");
  std::vector<double> r;
  if (c.dtype() == dtypes::int32) for (int32_t v : c.tolist<int32_t>()) r.push_back(v);
  else for (float v : c.cast(dtypes::float32).tolist<float>()) r.push_back(v);
  return r;
}

using Fn = std::function<Tensor(const Tensor&)>;
// fn on CPU and on CUDA over the same data of dtype dt; |gpu - cpu| <= atol + rtol*|cpu| element-wise
void expect_same(const Shape& shape, DType dt, const Fn& fn, double atol, double rtol, const std::string& what) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> h = host_data(n, static_cast<uint32_t>(n * 7 + shape.size()));
  Tensor cpu = Tensor::from<float>(h, shape, Opts{dtypes::float32, "CPU", false});
  if (dt == dtypes::int32) cpu = (cpu * 50).cast(dtypes::int32);
  else cpu = cpu.cast(dt);
  cpu = cpu.realize();
  Tensor gpu = cpu.to("CUDA").realize();
  Tensor rc = fn(cpu), rg = fn(gpu);
  ASSERT_EQ(rc.shape(), rg.shape()) << what;
  ASSERT_EQ(rc.dtype(), rg.dtype()) << what;
  std::vector<double> a = as_doubles(rc), b = as_doubles(rg);
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); i++)
    if (!(std::isnan(a[i]) && std::isnan(b[i])))   // var of one element is nan on both
      ASSERT_LE(std::abs(a[i] - b[i]), atol + rtol * std::abs(a[i])) << what << " shape " << to_str(shape) << " at " << i << ": cpu " << a[i] << " gpu " << b[i];
}
}  // namespace

// No GPU needed: the CUDA a long-row softmax renders to reduces each row in a block of threads that
// meet in shared memory after combining each warp through shuffles, and NVRTC compiles it for sm_90.
// Before: 256 threads looped over 125 elements each, once per reduce and once for the store (3 reads
// of each 128 KB row, 0.84x torch on an H100).
TEST(CudaReduceCodegen, LongRowSoftmaxUsesSharedMemoryAndWarpShuffles) {
  CUDARenderer ren("sm_90");
  Tensor x = Tensor::empty({4096, 32000}, Opts{dtypes::float32, "CPU", false});
  std::vector<std::string> reduces;
  for (const ScheduleItem& si : x.softmax(-1).schedule()) {
    if (si.kind != MetaOps::KERNEL) continue;
    Kernel k(Access::uop(si.ast), ren);
    k.hand_coded_optimizations();
    RenderedProgram p = k.to_program();
    if (!k.reduceop()) continue;
    reduces.push_back(p.src);
    EXPECT_NE(p.src.find("__shared__"), std::string::npos) << p.src;
    EXPECT_NE(p.src.find("__shfl_xor_sync(0xffffffffu"), std::string::npos) << p.src;
    EXPECT_NE(p.src.find("__syncthreads();"), std::string::npos) << p.src;
    EXPECT_EQ(p.global_size[0], 4096) << "a block per row";
    EXPECT_EQ(p.local_size[0], 800) << "800 threads per row, 40 elements each";
    // the row is read once, into registers, for the max, the sum of exps and the store
    size_t loads = 0;
    for (size_t at = p.src.find("= data1["); at != std::string::npos; at = p.src.find("= data1[", at + 1)) loads++;
    EXPECT_EQ(loads, 40u) << p.src;
    EXPECT_EQ(p.src.find("for (int ridx0 = 0; ridx0 < 40"), std::string::npos) << "no loop over the row\n" << p.src;
    if (nvrtc_available()) EXPECT_FALSE(nvrtc_compile(p.src, "sm_90").empty());
  }
  ASSERT_EQ(reduces.size(), 1u);   // the max, the sum of exps and the normalized store: one row kernel
  EXPECT_NE(reduces[0].find("__shared__ float temp2"), std::string::npos) << "a shared buffer per reduce";
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not installed: rendered only";
}

// No GPU needed: an fp32 matmul reads each input element for many outputs, so it keeps the
// upcast/local register tiles; the row reduction's GROUP (a block of threads per output element)
// made a 4096^3 fp32 GEMM 28x slower on an H100 (0.25 TFLOP/s).
TEST(CudaReduceCodegen, MatmulIsNotARowReduction) {
  CUDARenderer ren("sm_90");
  Opts o{dtypes::float32, "CPU", false};
  for (auto [m, kk, n] : {std::tuple{4096, 4096, 4096}, std::tuple{1024, 512, 2048}}) {
    Tensor c = Tensor::empty({m, kk}, o).matmul(Tensor::empty({kk, n}, o));
    int kernels = 0;
    for (const ScheduleItem& si : c.schedule()) {
      if (si.kind != MetaOps::KERNEL) continue;
      Kernel k(Access::uop(si.ast), ren);
      k.hand_coded_optimizations();
      kernels++;
      EXPECT_EQ(k.group_for_reduces, 0) << m << "x" << kk << "x" << n;
      EXPECT_GT(k.upcasted, 0) << m << "x" << kk << "x" << n;
    }
    EXPECT_EQ(kernels, 1);
  }
  // a row reduction over the same sizes still groups
  Tensor s = Tensor::empty({4096, 4096}, o).sum(1);
  for (const ScheduleItem& si : s.schedule()) {
    if (si.kind != MetaOps::KERNEL) continue;
    Kernel k(Access::uop(si.ast), ren);
    k.hand_coded_optimizations();
    EXPECT_GT(k.group_for_reduces, 0);
  }
}

TEST(CudaReduce, SumMaxMeanEveryShapeClass) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  const std::vector<Shape> shapes{{1}, {3}, {1000003}, {1 << 22}, {1, 1, 1}, {7, 1, 5}, {8192, 64}, {64, 8192}, {333, 4097},
                                  {3, 1000, 1}, {2, 3, 5000}, {1, 17}, {17, 1}, {4096, 3}, {3, 4096}};
  for (const Shape& s : shapes) {
    for (int axis = -1; axis < static_cast<int>(s.size()); axis++) {
      for (bool keep : {false, true}) {
        Axes ax = axis < 0 ? Axes{} : Axes{axis};
        const std::string w = "axis " + std::to_string(axis) + (keep ? " keepdim" : "");
        expect_same(s, dtypes::float32, [&](const Tensor& t) { return t.sum(ax, keep); }, 1e-3, 1e-4, "sum " + w);
        expect_same(s, dtypes::float32, [&](const Tensor& t) { return t.max(ax, keep); }, 0, 0, "max " + w);
        expect_same(s, dtypes::float32, [&](const Tensor& t) { return t.mean(ax, keep); }, 1e-5, 1e-4, "mean " + w);
        expect_same(s, dtypes::int32, [&](const Tensor& t) { return t.sum(ax, keep); }, 0, 0, "int sum " + w);
        expect_same(s, dtypes::int32, [&](const Tensor& t) { return t.max(ax, keep); }, 0, 0, "int max " + w);
        expect_same(s, dtypes::float16, [&](const Tensor& t) { return t.sum(ax, keep); }, 0.5, 2e-2, "half sum " + w);
        expect_same(s, dtypes::float16, [&](const Tensor& t) { return t.max(ax, keep); }, 0, 0, "half max " + w);
      }
    }
  }
}

TEST(CudaReduce, VarStdAndTheSoftmaxFamily) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  for (const Shape& s : std::vector<Shape>{{8192, 64}, {64, 8192}, {333, 4097}, {5, 32000}, {3, 1}, {1, 100003}}) {
    for (int axis : {0, 1}) {
      expect_same(s, dtypes::float32, [&](const Tensor& t) { return t.var(Axes{axis}); }, 1e-4, 1e-3, "var");
      expect_same(s, dtypes::float32, [&](const Tensor& t) { return t.std(Axes{axis}); }, 1e-4, 1e-3, "std");
      expect_same(s, dtypes::float32, [&](const Tensor& t) { return t.softmax(axis); }, 1e-6, 1e-3, "softmax");
      expect_same(s, dtypes::float32, [&](const Tensor& t) { return t.log_softmax(axis); }, 1e-4, 1e-4, "log_softmax");
    }
    expect_same(s, dtypes::float32, [&](const Tensor& t) { return t.layernorm(-1); }, 1e-3, 1e-3, "layernorm");
    expect_same(s, dtypes::float16, [&](const Tensor& t) { return t.softmax(-1); }, 1e-3, 1e-2, "half softmax");
    const int64_t classes = s[1];
    expect_same(s, dtypes::float32, [&](const Tensor& t) {
      std::vector<int32_t> labels(s[0]);
      for (int64_t i = 0; i < s[0]; i++) labels[i] = static_cast<int32_t>(i * 7 % classes);
      Tensor y = Tensor::from<int32_t>(labels, {s[0]}, Opts{dtypes::int32, t.device(), false});
      return t.sparse_categorical_crossentropy(y);
    }, 1e-4, 1e-4, "cross_entropy");
  }
}

// the conformance suite's int case that failed on CUDA (argmin over rows of a (4, 5) int32 tensor)
TEST(CudaReduce, ArgminIntRows) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  const std::vector<int32_t> v{-2, -2, -5, 1, 7, 10, 9, -4, 5, -1, 8, 3, -7, -5, 7, 8, 0, -1, -9, 1};
  Tensor x = Tensor::from<int32_t>(v, {4, 5}, Opts{{}, "CUDA", false});
  EXPECT_EQ(x.argmin(1).to("CPU").tolist<int32_t>(), (std::vector<int32_t>{2, 2, 2, 3}));
  EXPECT_EQ(x.argmax(1).to("CPU").tolist<int32_t>(), (std::vector<int32_t>{4, 0, 0, 0}));
}

// rand on CUDA gives the CPU's numbers (one stream, tinygrad's), for even and odd sizes, a second call
// (the counter advanced) and a size whose indices pass 2^24 (a flattened (2, n/2) view indexed n^2/2
// elements: the counter's arange lost the block index past int32)
TEST(CudaReduce, RandMatchesTheCpu) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  for (int64_t n : {int64_t{1001}, int64_t{1} << 20, (int64_t{1} << 25) + 8}) {
    std::vector<std::vector<float>> got[2];
    for (int d = 0; d < 2; d++) {
      Tensor::manual_seed(3);
      for (int call = 0; call < 2; call++)
        got[d].push_back(Tensor::rand({n}, Opts{dtypes::float32, d ? "CUDA" : "CPU", false}).to("CPU").tolist<float>());
    }
    EXPECT_TRUE(got[0] == got[1]) << "rand of " << n;
  }
}

// argmax/argmin return the first of equal values, on every axis, for float and int inputs
TEST(CudaReduce, ArgmaxArgminFirstOccurrenceTies) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  // the issue's case
  EXPECT_EQ(Tensor::from<int32_t>({3, 2, 2}, {3}, Opts{{}, "CUDA", false}).argmin().item<int32_t>(), 1);
  EXPECT_EQ(Tensor::from<int32_t>({1, 3, 3}, {3}, Opts{{}, "CUDA", false}).argmax().item<int32_t>(), 1);
  EXPECT_EQ(Tensor::from<float>({3, 2, 2}, {3}, Opts{{}, "CUDA", false}).argmin().item<int32_t>(), 1);
  for (const Shape& s : std::vector<Shape>{{5, 6, 7}, {3, 4097}, {4097, 3}, {1, 1000}, {1000, 1}, {64, 8192}, {8192, 64}, {1 << 20}}) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    std::vector<float> h(n);
    std::mt19937 g(static_cast<uint32_t>(n));
    for (auto& v : h) v = static_cast<float>(g() % 4);   // four values: many ties everywhere
    for (int axis = -1; axis < static_cast<int>(s.size()); axis++) {
      std::optional<int> ax = axis < 0 ? std::nullopt : std::optional<int>(axis);
      for (DType dt : {dtypes::float32, dtypes::int32}) {
        Tensor cpu = Tensor::from<float>(h, s, Opts{dtypes::float32, "CPU", false}).cast(dt).realize();
        Tensor gpu = cpu.to("CUDA").realize();
        for (bool mx : {true, false}) {
          auto f = [&](const Tensor& t) { return mx ? t.argmax(ax) : t.argmin(ax); };
          EXPECT_EQ(f(gpu).to("CPU").tolist<int32_t>(), f(cpu).tolist<int32_t>())
              << (mx ? "argmax" : "argmin") << " " << dt.str() << " shape " << to_str(s) << " axis " << axis;
        }
      }
    }
  }
}

// No GPU needed: the CUDA of a short-row cross-entropy, run on CPU threads (tests/cuda_emulator.hpp),
// equals the CPU. Its row kernel unrolls each 64-long row by 4 lanes for the max, the log-sum-exp and
// the label gather; folding the gather (sum_j where(j == label, x[j] - max - lse)) put label % 4 for
// the lanes of the max and log-sum-exp reduces inside it too (they contract the same lanes): the loss
// was off by 1% on an H100 (4.6916 for 4.7178).
TEST(CudaReduceEmulated, CrossEntropyShortRows) {
  CUDARenderer ren("sm_90");
  for (const Shape& s : std::vector<Shape>{{1024, 64}, {256, 96}}) {
    std::vector<float> h = host_data(prod(s), 3);
    Tensor x = Tensor::from<float>(h, s, Opts{dtypes::float32, "CPU", false}).realize();
    std::vector<int32_t> lab(s[0]);
    for (int64_t i = 0; i < s[0]; i++) lab[i] = static_cast<int32_t>((i * 7) % s[1]);
    Tensor y = Tensor::from<int32_t>(lab, {s[0]}, Opts{dtypes::int32, "CPU", false}).realize();
    cuda_emu::Run r = cuda_emu::run(x.sparse_categorical_crossentropy(y), ren);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    double want = 0;
    for (int64_t i = 0; i < s[0]; i++) {
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j < s[1]; j++) m = std::max<double>(m, h[i * s[1] + j]);
      for (int64_t j = 0; j < s[1]; j++) z += std::exp(h[i * s[1] + j] - m);
      want -= h[i * s[1] + lab[i]] - m - std::log(z);
    }
    EXPECT_NEAR(cuda_emu::values<float>(r)[0], want / s[0], 1e-4) << to_str(s);
  }
}

// No GPU needed: long rows held in registers (800 threads x 40 elements for 32000), run on CPU threads:
// softmax and log_softmax equal plain C++ (every lane's element, the block's max and sum).
TEST(CudaReduceEmulated, LongRowsOnChip) {
  CUDARenderer ren("sm_90");
  const Shape s{3, 32000};
  std::vector<float> h = host_data(prod(s), 5, -8, 8);
  Tensor x = Tensor::from<float>(h, s, Opts{dtypes::float32, "CPU", false}).realize();
  for (bool log : {false, true}) {
    cuda_emu::Run r = cuda_emu::run(log ? x.log_softmax(-1) : x.softmax(-1), ren);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    ASSERT_EQ(r.programs.size(), 1u);
    EXPECT_EQ(r.programs[0].local_size[0], 800);
    std::vector<float> got = cuda_emu::values<float>(r);
    for (int64_t i = 0; i < s[0]; i++) {
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j < s[1]; j++) m = std::max<double>(m, h[i * s[1] + j]);
      for (int64_t j = 0; j < s[1]; j++) z += std::exp(h[i * s[1] + j] - m);
      for (int64_t j = 0; j < s[1]; j++) {
        const double want = log ? h[i * s[1] + j] - m - std::log(z) : std::exp(h[i * s[1] + j] - m) / z;
        ASSERT_NEAR(got[i * s[1] + j], want, 1e-5 * std::max(1.0, std::abs(want))) << (log ? "log_softmax" : "softmax") << " at " << i << "," << j;
      }
    }
  }
}

// No GPU needed: rows no block size divides (4097, 1031 long: not a whole number of 16-byte vectors
// or of 32 threads) get a block of threads per row with a masked tail (a GROUP that doesn't divide:
// a block-stride loop), run on CPU threads: sum, max, softmax and layernorm equal plain C++. Before,
// one thread walked each whole row (no GROUP in the opts).
TEST(CudaReduceEmulated, OddRowsTakeABlockPerRow) {
  CUDARenderer ren("sm_90");
  for (const Shape& s : std::vector<Shape>{{3, 4097}, {2, 1031}}) {
    std::vector<float> h = host_data(prod(s), 11, -8, 8);
    Tensor x = Tensor::from<float>(h, s, Opts{dtypes::float32, "CPU", false}).realize();
    std::vector<double> mx(s[0], -INFINITY), sum(s[0], 0), z(s[0], 0);
    for (int64_t i = 0; i < s[0]; i++) {
      for (int64_t j = 0; j < s[1]; j++) mx[i] = std::max<double>(mx[i], h[i * s[1] + j]), sum[i] += h[i * s[1] + j];
      for (int64_t j = 0; j < s[1]; j++) z[i] += std::exp(h[i * s[1] + j] - mx[i]);
    }
    auto grouped = [&](const cuda_emu::Run& r, const std::string& what) {
      ASSERT_TRUE(r.errors.empty()) << what << ": " << r.errors[0];
      ASSERT_EQ(r.programs.size(), 1u) << what;
      bool group = false;
      for (const Opt& o : r.opts[0]) group = group || o.op == OptOps::GROUP;
      EXPECT_TRUE(group) << what << " " << to_str(s) << "\n" << r.programs[0].src;
      EXPECT_GE(r.programs[0].local_size[0], 32) << what;
    };
    cuda_emu::Run rs = cuda_emu::run(x.sum(1), ren), rm = cuda_emu::run(x.max(1), ren), rx = cuda_emu::run(x.softmax(-1), ren);
    grouped(rs, "sum"), grouped(rm, "max"), grouped(rx, "softmax");
    std::vector<float> gs = cuda_emu::values<float>(rs), gm = cuda_emu::values<float>(rm), gx = cuda_emu::values<float>(rx);
    for (int64_t i = 0; i < s[0]; i++) {
      EXPECT_NEAR(gs[i], sum[i], 1e-3) << "sum row " << i;
      EXPECT_EQ(gm[i], static_cast<float>(mx[i])) << "max row " << i;
      for (int64_t j = 0; j < s[1]; j++)
        ASSERT_NEAR(gx[i * s[1] + j], std::exp(h[i * s[1] + j] - mx[i]) / z[i], 1e-6) << "softmax at " << i << "," << j;
    }
    // argmax (a max, then the first index holding it: a fused arange) and cross-entropy (the label gather)
    std::vector<float> tied = h;
    for (int64_t i = 0; i < s[0]; i++) tied[i * s[1] + s[1] - 1 - i] = tied[i * s[1] + 7 + i] = 9;   // two maxima a row
    Tensor xt = Tensor::from<float>(tied, s, Opts{dtypes::float32, "CPU", false}).realize();
    cuda_emu::Run ra = cuda_emu::run(xt.argmax(1), ren);
    grouped(ra, "argmax");
    EXPECT_EQ(cuda_emu::values<int32_t>(ra), xt.argmax(1).tolist<int32_t>());
    std::vector<int32_t> lab(s[0]);
    for (int64_t i = 0; i < s[0]; i++) lab[i] = static_cast<int32_t>((i * 1013) % s[1]);
    Tensor y = Tensor::from<int32_t>(lab, {s[0]}, Opts{dtypes::int32, "CPU", false}).realize();
    cuda_emu::Run rc = cuda_emu::run(x.sparse_categorical_crossentropy(y), ren);
    ASSERT_TRUE(rc.errors.empty()) << rc.errors[0];
    bool ce_group = false;   // (its row kernel: max, log-sum-exp and the label gather; then the mean)
    for (const Opt& o : rc.opts[0]) ce_group = ce_group || o.op == OptOps::GROUP;
    EXPECT_TRUE(ce_group) << rc.programs[0].src;
    double loss = 0;
    for (int64_t i = 0; i < s[0]; i++) loss -= h[i * s[1] + lab[i]] - mx[i] - std::log(z[i]);
    EXPECT_NEAR(cuda_emu::values<float>(rc)[0], loss / s[0], 1e-4);
    cuda_emu::Run rl = cuda_emu::run(x.layernorm(-1), ren);
    ASSERT_TRUE(rl.errors.empty()) << rl.errors[0];
    std::vector<float> gl = cuda_emu::values<float>(rl);
    for (int64_t i = 0; i < s[0]; i++) {
      const double mean = sum[i] / s[1];
      double var = 0;
      for (int64_t j = 0; j < s[1]; j++) var += (h[i * s[1] + j] - mean) * (h[i * s[1] + j] - mean);
      const double inv = 1 / std::sqrt(var / s[1] + 1e-5);
      for (int64_t j = 0; j < s[1]; j++) ASSERT_NEAR(gl[i * s[1] + j], (h[i * s[1] + j] - mean) * inv, 1e-4) << "layernorm at " << i << "," << j;
    }
  }
}

// No GPU needed: rand is one kernel on CUDA that evaluates threefry once per pair of words and stores
// each row's 4 consecutive floats as one float4 (the 2 rows of words upcast: 2 float4 stores, 4 threefry
// chains per thread), run on CPU threads: the same numbers as the CPU's rand. Before: threefry's pairs
// stored to a buffer (8 bytes each) and read back by a second kernel, 0.19 of the copy bandwidth.
TEST(CudaReduceEmulated, RandIsOneKernelWithVectorStores) {
  // (the rng counter lives on the default device: with a GPU, rand on the CPU copies it over first;
  // CudaReduce.RandMatchesTheCpu checks the GPU's numbers there)
  if (Device::default_device() != "CPU") GTEST_SKIP() << "the default device is " << Device::default_device();
  CUDARenderer ren("sm_90");
  for (int64_t n : {int64_t{1} << 14, int64_t{2 * 4 * 257}}) {
    Tensor::manual_seed(5);
    std::vector<float> want = Tensor::rand({n}, Opts{dtypes::float32, "CPU", false}).tolist<float>();
    Tensor::manual_seed(5);
    cuda_emu::Run r = cuda_emu::run(Tensor::rand({n}, Opts{dtypes::float32, "CPU", false}), ren);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    ASSERT_EQ(r.programs.size(), 1u) << "rand of " << n;
    const std::string& src = r.programs[0].src;
    EXPECT_EQ(cuda_emu::values<float>(r), want) << src;
    // each thread: 2 float4 stores, 4 threefry chains of 20 rounds (an xor a round): 80 xors
    size_t stores = 0, xors = 0;
    for (size_t p = src.find("*((float4*)(data0+"); p != std::string::npos; p = src.find("*((float4*)(data0+", p + 1)) stores++;
    for (char c : src) xors += c == '^';
    EXPECT_EQ(stores, 2u) << src;
    EXPECT_EQ(xors, 80u) << src;
    if (nvrtc_available()) EXPECT_FALSE(nvrtc_compile(src, "sm_90").empty());
  }
}

// No GPU needed: a wide streaming elementwise kernel (a*b+1 over 2^22) renders with 16-byte loads and
// stores and 128-thread blocks. tinygrad's 32-thread first local capped an H100 SM at half its threads
// and launched 2^21 one-float4 blocks for 2^28: 0.92x torch's addcmul.
TEST(CudaReduceCodegen, StreamingElementwiseBlocks) {
  CUDARenderer ren("sm_90");
  Opts o{dtypes::float32, "CPU", false};
  Tensor a = Tensor::empty({1 << 22}, o), b = Tensor::empty({1 << 22}, o);
  int kernels = 0;
  for (const ScheduleItem& si : (a * b + 1).schedule()) {
    if (si.kind != MetaOps::KERNEL) continue;
    kernels++;
    Kernel k(Access::uop(si.ast), ren);
    k.hand_coded_optimizations();
    RenderedProgram p = k.to_program();
    EXPECT_EQ(p.local_size[0], 128) << p.src;
    EXPECT_EQ(p.global_size[0] * p.local_size[0] * 4, 1 << 22) << "a float4 a thread\n" << p.src;
    EXPECT_NE(p.src.find("*((float4*)(data1+"), std::string::npos) << p.src;
    EXPECT_NE(p.src.find("*((float4*)(data0+"), std::string::npos) << p.src;
    if (nvrtc_available()) EXPECT_FALSE(nvrtc_compile(p.src, "sm_90").empty());
  }
  EXPECT_EQ(kernels, 1);
}

// A GROUP that doesn't divide its axis (a block-stride loop) is for a kernel's one reduce axis: inside loops
// over other reduce axes the partial sums went wrong (per-channel sums over 8x10x10, batchnorm's: its
// gradients differed from the CPU on an H200). Refused there; the heuristic's kernels equal the CPU (emulated).
TEST(CudaReduceEmulated, StridedGroupOnlyOnTheOneReduceAxis) {
  CUDARenderer ren("sm_90");
  const Shape s{8, 4, 10, 10};
  std::vector<float> h = host_data(prod(s), 13);
  Tensor x = Tensor::from<float>(h, s, Opts{dtypes::float32, "CPU", false}).realize();
  Tensor sums = x.sum(Axes{0, 2, 3});
  for (const ScheduleItem& si : sums.schedule()) {
    Kernel k(Access::uop(si.ast), ren);
    ASSERT_LT(k.first_reduce(), k.shape_len() - 1) << "several reduce axes: " << to_str(k.full_shape());
    EXPECT_THROW(k.apply_opt({OptOps::GROUP, k.shape_len() - 1 - k.first_reduce(), 128}), KernelOptError) << to_str(k.full_shape());
  }
  Tensor row = Tensor::from<float>(h, {8, 400}, Opts{dtypes::float32, "CPU", false}).realize();
  for (const ScheduleItem& si : row.sum(1).schedule()) {
    Kernel k(Access::uop(si.ast), ren);
    EXPECT_NO_THROW(k.apply_opt({OptOps::GROUP, 0, 128})) << "one reduce axis of 400: a block-stride loop";
  }
  cuda_emu::Run r = cuda_emu::run(x.sum(Axes{0, 2, 3}), ren);   // (a fresh graph: the one above was scheduled)
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  std::vector<float> got = cuda_emu::values<float>(r), want = x.sum(Axes{0, 2, 3}).tolist<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t c = 0; c < want.size(); c++) EXPECT_NEAR(got[c], want[c], 1e-3) << "channel " << c;
}

// No GPU needed: an arange expanded over 2 rows and flattened (2 * 2^23 int32 elements; 128-thread blocks
// of 4 lanes) equals the CPU's, emulated. The arange's view under the kernel indexes up to 2^48: gidx0's
// stride there, 2^32, was made an int32 constant (0): every block stored block 0's numbers. Index math
// that can pass int32 is built in int64 now and narrowed back where range analysis shows it fits: the
// kernel renders without 64-bit math.
TEST(CudaReduceEmulated, IndexMathPastInt32) {
  CUDARenderer ren("sm_90");
  for (int64_t half : {int64_t{1} << 23}) {
    const Opts o{dtypes::int32, "CPU", false};
    auto make = [&] { return Tensor::arange(half, o).reshape({1, half}).expand({2, half}).reshape({2 * half}).contiguous(); };
    cuda_emu::Run r = cuda_emu::run(make(), ren);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    ASSERT_EQ(r.programs.size(), 1u);
    EXPECT_EQ(r.programs[0].src.find("(long)"), std::string::npos) << r.programs[0].src;
    const std::vector<int32_t> gpu = cuda_emu::values<int32_t>(r), cpu = make().tolist<int32_t>();
    ASSERT_EQ(gpu.size(), static_cast<size_t>(2 * half));
    for (int64_t i = 0; i < 2 * half; i++) {
      ASSERT_EQ(gpu[i], i % half) << "emulated CUDA at " << i << "\n" << r.programs[0].src;
      ASSERT_EQ(cpu[i], i % half) << "CPU at " << i;
    }
  }
}


// No GPU needed: argmax and argmin over every axis of odd shapes with ties everywhere (4 values) equal the
// CPU's first occurrences, emulated. A long row (4097, 1031; 8192, whose max is a kernel of its own) takes
// a block per row: its arange, nested in the reduce (the largest n - i where x == max), folds inside each
// thread's loop, and the threads' candidates meet through shuffles and shared memory (MAX of n - i: the
// first index wins). Before, one thread walked each row (2048 threads for 8192 rows).
TEST(CudaReduceEmulated, ArgmaxArgminTiesEveryAxis) {
  CUDARenderer ren("sm_90");
  for (const Shape& s : std::vector<Shape>{{3, 4097}, {2, 1031}, {2, 8192}, {5, 7, 33}, {129, 3}}) {
    std::vector<float> h = host_data(prod(s), 17, 0, 4);
    for (float& v : h) v = std::floor(v);
    Tensor x = Tensor::from<float>(h, s, Opts{dtypes::float32, "CPU", false}).realize();
    for (int64_t ax = 0; ax < static_cast<int64_t>(s.size()); ax++)
      for (bool mx : {true, false}) {
        const std::string what = std::string(mx ? "argmax" : "argmin") + " axis " + std::to_string(ax) + " of " + to_str(s);
        cuda_emu::Run r = cuda_emu::run(mx ? x.argmax(ax) : x.argmin(ax), ren);
        ASSERT_TRUE(r.errors.empty()) << what << ": " << r.errors[0];
        EXPECT_EQ(cuda_emu::values<int32_t>(r), (mx ? x.argmax(ax) : x.argmin(ax)).tolist<int32_t>()) << what << "\n" << r.programs.back().src;
        if (s[ax] < 1000 || ax + 1 != static_cast<int64_t>(s.size())) continue;
        bool group = false;
        for (const Opt& o : r.opts.back()) group = group || o.op == OptOps::GROUP;
        EXPECT_TRUE(group) << what << ": a block per row\n" << r.programs.back().src;
      }
  }
}

// BEAM on the GPU times each candidate from a cold L2 (a 256 MB write queued before each timed run), as
// tinygrad invalidates a GPU's caches between timings: a 1 MB input stays in an H100's 50 MB L2 from
// one run to the next, and warm candidates were timed against each other.
TEST(CudaReduce, BeamTimesEachCandidateFromAColdL2) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  CUDARenderer ren(get_device("CUDA").arch());
  Tensor x = Tensor::empty({256, 1024}, Opts{dtypes::float32, "CUDA", false});
  int kernels = 0;
  for (const ScheduleItem& si : x.sum(1).schedule()) {
    if (si.kind != MetaOps::KERNEL) continue;
    kernels++;
    Kernel k(Access::uop(si.ast), ren);
    const int64_t flushes = SearchStats::gpu_l2_flushes, timed = SearchStats::candidates_timed;
    setenv("BEAM_BUDGET", "5", 1);   // (seconds: a few steps are enough here)
    std::unique_ptr<Kernel> best = beam_search(k, bufs_from_lin(k), 2, true, true);
    unsetenv("BEAM_BUDGET");
    ASSERT_TRUE(best);
    EXPECT_GT(SearchStats::candidates_timed, timed);
    EXPECT_GE(SearchStats::gpu_l2_flushes - flushes, SearchStats::candidates_timed - timed) << "a flush before each timed run";
  }
  EXPECT_EQ(kernels, 1);
}

// No GPU needed: kernels over more than 2^31 elements (a sum of 2^31 + 64 floats, a + 1 over them, row sums
// of 65536^2) compute their buffer indexes in 64 bits, and kernels that fit keep int32 index math. Before,
// every index was int32: gidx0*8555712 + lidx0 + ridx0*64 passes 2^31 in the sum's first kernel.
TEST(CudaReduceCodegen, IndexesPastInt32AreLong) {
  CUDARenderer ren("sm_90");
  const Opts o{dtypes::float32, "CPU", false};
  auto sources = [&](const Tensor& t) {
    std::string all;
    // create_schedule, not Tensor::schedule(): nothing left pending for a later test's realize to run
    // (it would allocate these 8 and 17 GB buffers)
    for (const ScheduleItem& si : create_schedule({Access::lazydata(t)})) {
      if (si.kind != MetaOps::KERNEL) continue;
      Kernel k(Access::uop(si.ast), ren);
      k.hand_coded_optimizations();
      const std::string src = k.to_program().src;
      if (nvrtc_available()) EXPECT_FALSE(nvrtc_compile(src, "sm_90").empty()) << src;
      all += src;
    }
    return all;
  };
  for (int64_t n : {(int64_t{1} << 31) + 64, int64_t{1} << 20}) {
    const bool big = n > (int64_t{1} << 31);
    Tensor a = Tensor::empty({n}, o);
    Tensor m = Tensor::empty({big ? 65536 : 1024, big ? 65536 : 1024}, o);
    for (const auto& [what, src] : {std::pair{"sum", sources(a.sum())}, std::pair{"a+1", sources(a + 1)}, std::pair{"row sums", sources(m.sum(1))}}) {
      const bool is_long = std::regex_search(src, std::regex(R"(\(long\)|\blong alu)"));
      EXPECT_EQ(is_long, big) << what << " over " << n << " elements\n" << src;
    }
  }
}

// No GPU needed: the gradient of a cross-entropy over 1000 classes (an odd row of several reduces, with the
// label's one-hot arange fused): its CUDA compiles and equals (softmax - one_hot) / batch on CPU threads.
// The block-stride GROUP of such rows once rendered an index that used an ALU defined inside the loop
// after it ("identifier alu30 is undefined" from NVRTC on an H100).
TEST(CudaReduceEmulated, CrossEntropyBackwardOddRows) {
  Context fuse({{"FUSE_ARANGE", 1}});
  CUDARenderer ren("sm_90");
  const int64_t batch = 4, classes = 1000;
  const std::vector<int32_t> labels{3, 999, 0, 512};
  std::vector<float> logits(batch * classes);
  for (size_t i = 0; i < logits.size(); i++) logits[i] = static_cast<float>((i * 37) % 101) / 50.0f;
  Tensor L = Tensor::from<float>(logits, {batch, classes}, Opts{dtypes::float32, "CPU", true});
  Tensor y = Tensor::from<int32_t>(labels, {batch}, Opts{dtypes::int32, "CPU", false});
  L.sparse_categorical_crossentropy(y).backward();
  cuda_emu::Run r = cuda_emu::run(*L.grad(), ren);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  std::vector<float> got = cuda_emu::values<float>(r);
  ASSERT_EQ(got.size(), logits.size());
  for (int64_t i = 0; i < batch; i++) {
    double mx = -1e30, z = 0;
    for (int64_t c = 0; c < classes; c++) mx = std::max(mx, double(logits[i * classes + c]));
    for (int64_t c = 0; c < classes; c++) z += std::exp(logits[i * classes + c] - mx);
    for (int64_t c = 0; c < classes; c++) {
      const double want = (std::exp(logits[i * classes + c] - mx) / z - (c == labels[i] ? 1.0 : 0.0)) / batch;
      ASSERT_NEAR(got[i * classes + c], want, 1e-6) << i << "," << c << "\n" << r.programs.back().src;
    }
  }
}
