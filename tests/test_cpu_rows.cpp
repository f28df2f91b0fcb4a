// CPU row kernels with the vector exp (codegen/transcendental.cpp xexp2 through the C vectorizer):
// softmax, log_softmax, layernorm, cross-entropy and exp over odd row lengths (1, 3, 4, 17, 4097),
// against the unoptimized kernels (NOOPT=1, scalar loops) and a float64 host reference, with inputs
// that reach exp's ends (-inf entries, rows of large magnitude); and the C of a softmax row kernel:
// its exp is vector code with three selects.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "access.hpp"
#include "avx512_kernels.hpp"
#include "codegen/kernel.hpp"
#include "engine/schedule.hpp"
#include "renderer/cstyle.hpp"
#include "tensor_test_util.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {

// rows x cols in [-scale, scale]; every third row of more than 2 entries holds a -inf (a masked logit)
std::vector<float> data(int64_t rows, int64_t cols, float scale, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(rows * cols);
  for (auto& x : v) x = u(g);
  for (int64_t r = 0; r < rows; r += 3)
    if (cols > 2) v[r * cols + (r % cols)] = -INFINITY;
  return v;
}

using Rows = std::vector<std::vector<double>>;
// float64 references, row by row
Rows ref_softmax(const std::vector<float>& v, int64_t rows, int64_t cols, bool log) {
  Rows out(rows, std::vector<double>(cols));
  for (int64_t r = 0; r < rows; r++) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; c++) m = std::max(m, double(v[r * cols + c]));
    for (int64_t c = 0; c < cols; c++) s += std::exp(double(v[r * cols + c]) - m);
    for (int64_t c = 0; c < cols; c++) {
      double x = double(v[r * cols + c]) - m;
      out[r][c] = log ? x - std::log(s) : std::exp(x) / s;
    }
  }
  return out;
}
Rows ref_layernorm(const std::vector<float>& v, int64_t rows, int64_t cols) {
  Rows out(rows, std::vector<double>(cols));
  for (int64_t r = 0; r < rows; r++) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; c++) mean += v[r * cols + c];
    mean /= cols;
    for (int64_t c = 0; c < cols; c++) var += (v[r * cols + c] - mean) * (v[r * cols + c] - mean);
    var /= cols;
    for (int64_t c = 0; c < cols; c++) out[r][c] = (v[r * cols + c] - mean) / std::sqrt(var + 1e-5);
  }
  return out;
}

std::vector<float> run(const std::vector<float>& v, const Shape& shape, int noopt, const std::function<Tensor(const Tensor&)>& fn) {
  Context ctx{{"NOOPT", noopt}};
  return fn(Tensor::from<float>(v, shape, Opts{dtypes::float32, "CPU", false})).tolist<float>();
}

// |a - b| <= atol + rtol * |b|, with equal infinities and -inf logs of masked entries
void expect_close(const std::vector<float>& got, const Rows& want, double atol, double rtol, const std::string& what) {
  size_t i = 0, bad = 0;
  for (const auto& row : want)
    for (double w : row) {
      double g = got[i++];
      bool ok = (std::isinf(w) && g == w) || std::fabs(g - w) <= atol + rtol * std::fabs(w);
      if (!ok && bad++ < 3) ADD_FAILURE() << what << " at " << i - 1 << ": " << g << " vs " << w;
    }
  EXPECT_EQ(bad, 0u) << what;
}

const std::vector<Shape> kShapes = {{7, 1}, {5, 3}, {9, 4}, {6, 17}, {3, 4097}, {33, 256}};

}  // namespace

TEST(CpuRows, SoftmaxAndLogSoftmaxMatchNooptAndFloat64) {
  for (const Shape& s : kShapes)
    for (float scale : {3.f, 60.f}) {
      std::vector<float> v = data(s[0], s[1], scale, uint32_t(s[1] * 7 + s[0]));
      const std::string n = to_str(s) + " scale " + std::to_string(scale);
      for (bool log : {false, true}) {
        auto fn = [log](const Tensor& x) { return log ? x.log_softmax(-1) : x.softmax(-1); };
        std::vector<float> opt = run(v, s, 0, fn), ref = run(v, s, 1, fn);
        Rows want = ref_softmax(v, s[0], s[1], log);
        expect_close(opt, want, log ? 1e-5 : 1e-7, 1e-5, (log ? "log_softmax " : "softmax ") + n);
        expect_close(ref, want, log ? 1e-5 : 1e-7, 1e-5, (log ? "NOOPT log_softmax " : "NOOPT softmax ") + n);
      }
    }
}

// Exp once: the fused softmax stores exp(x - max) from its sum loop and rescales it in the store
// loop. Against the same kernel computing the exp twice (ROW_STASH=0, bit for bit up to the C
// compiler's contraction) and against the unfused kernels (FUSE_ROWS=0), over odd rows, rows with
// no loop (all upcast), 1-long axes, transposed and strided inputs, a middle axis, an epilogue.
TEST(CpuRows, StashedExpMatchesRecomputed) {
  struct Case {
    std::string name;
    Shape shape;
    std::function<Tensor(const Tensor&)> fn;
  };
  const std::vector<Case> cases = {
      {"rows of 3 (upcast, no loop)", {5, 3}, [](const Tensor& x) { return x.softmax(-1); }},
      {"rows of 17", {6, 17}, [](const Tensor& x) { return x.softmax(-1); }},
      {"rows of 4097", {3, 4097}, [](const Tensor& x) { return x.softmax(-1); }},
      {"1-long axes", {2, 1, 3, 1, 33}, [](const Tensor& x) { return x.softmax(-1); }},
      {"transposed", {40, 9}, [](const Tensor& x) { return x.T().softmax(-1); }},
      {"axis 0 (strided rows)", {37, 5}, [](const Tensor& x) { return x.softmax(0); }},
      {"middle axis", {4, 13, 6}, [](const Tensor& x) { return x.softmax(1); }},
      {"strided slice", {8, 70}, [](const Tensor& x) { return x.shrink({{1, 7}, {3, 67}}).softmax(-1); }},
      {"epilogue", {9, 130}, [](const Tensor& x) { return x.softmax(-1) * 3.f + 1.f; }},
      {"exp over sum of exp", {9, 130}, [](const Tensor& x) { Tensor e = (x - x.max(-1, true)).exp(); return e / e.sum(-1, true); }},
  };
  for (const Case& c : cases) {
    int64_t n = 1;
    for (int64_t d : c.shape) n *= d;
    std::vector<float> v = data(1, n, 20.f, uint32_t(n));
    for (float& x : v) x = std::isinf(x) ? -5.f : x;
    auto go = [&](const std::string& var, int64_t val) {
      Context ctx{{var, val}};
      return c.fn(Tensor::from<float>(v, c.shape, Opts{dtypes::float32, "CPU", false})).tolist<float>();
    };
    const std::vector<float> once = go("ROW_STASH", 1), twice = go("ROW_STASH", 0), unfused = go("FUSE_ROWS", 0),
                             noopt = go("NOOPT", 1);
    ASSERT_EQ(once.size(), unfused.size()) << c.name;
    for (size_t i = 0; i < once.size(); i++) {
      EXPECT_NEAR(once[i], twice[i], 1e-7f * std::fabs(twice[i])) << c.name << " at " << i;
      EXPECT_NEAR(once[i], unfused[i], 1e-9f + 2e-6f * std::fabs(unfused[i])) << c.name << " at " << i;
      EXPECT_NEAR(once[i], noopt[i], 1e-9f + 2e-6f * std::fabs(noopt[i])) << c.name << " at " << i;
    }
  }
}

TEST(CpuRows, LayernormMatchesNooptAndFloat64) {
  for (const Shape& s : kShapes) {
    if (s[1] == 1) continue;   // a 1-long row normalizes to 0/sqrt(eps): covered by the conformance suite
    std::vector<float> v = data(s[0], s[1], 3, uint32_t(s[1] + 11));
    for (float& x : v) x = std::isinf(x) ? 1.f : x;
    auto fn = [](const Tensor& x) { return x.layernorm(); };
    Rows want = ref_layernorm(v, s[0], s[1]);
    expect_close(run(v, s, 0, fn), want, 1e-4, 1e-4, "layernorm " + to_str(s));
    expect_close(run(v, s, 1, fn), want, 1e-4, 1e-4, "NOOPT layernorm " + to_str(s));
  }
}

TEST(CpuRows, CrossEntropyMatchesNooptAndFloat64) {
  for (const Shape& s : std::vector<Shape>{{7, 1}, {6, 17}, {3, 4097}}) {
    std::vector<float> v = data(s[0], s[1], 20, uint32_t(s[1] + 5));
    for (float& x : v) x = std::isinf(x) ? -30.f : x;
    std::vector<int32_t> y(s[0]);
    for (int64_t r = 0; r < s[0]; r++) y[r] = int32_t((r * 7919) % s[1]);
    Rows logp = ref_softmax(v, s[0], s[1], true);
    double want = 0;
    for (int64_t r = 0; r < s[0]; r++) want -= logp[r][y[r]] / double(s[0]);
    for (int noopt : {0, 1}) {
      Context ctx{{"NOOPT", noopt}};
      Tensor x = Tensor::from<float>(v, s, Opts{dtypes::float32, "CPU", false});
      Tensor t = Tensor::from<int32_t>(y, {s[0]}, Opts{dtypes::int32, "CPU", false});
      EXPECT_NEAR(x.sparse_categorical_crossentropy(t).item<float>(), want, 1e-4 + 1e-5 * std::fabs(want)) << to_str(s) << " NOOPT=" << noopt;
    }
  }
}

// exp over the whole float range, row-shaped so the kernel vectorizes: denormal results, the
// clamped ends, infinities and NaN
TEST(CpuRows, ExpOverTheRangeMatchesNoopt) {
  std::vector<float> v;
  for (float x = -110; x < 95; x += 0.37f) v.push_back(x);
  for (float x : {-1e30f, 1e30f, -INFINITY, INFINITY, NAN, 88.72f, 88.73f, -103.2f, -87.3f, 0.f, -0.f}) v.push_back(x);
  while (v.size() % 64) v.push_back(1.5f);
  const Shape s = {int64_t(v.size() / 64), 64};
  auto fn = [](const Tensor& x) { return x.exp(); };
  std::vector<float> opt = run(v, s, 0, fn), ref = run(v, s, 1, fn);
  for (size_t i = 0; i < v.size(); i++) {
    double w = std::exp(double(v[i]));
    if (std::isnan(v[i])) {
      EXPECT_TRUE(std::isnan(opt[i]) && std::isnan(ref[i])) << i;
      continue;
    }
    EXPECT_EQ(opt[i], ref[i]) << "exp(" << v[i] << ") vector vs scalar";
    // exp(x) is exp2(x * log2(e)): the product's rounding gives a relative error growing with |x|
    // (about 6e-8 |x|); denormals add half their spacing (7e-46)
    if (w > 3.4028234663852886e38) EXPECT_EQ(opt[i], INFINITY) << "exp(" << v[i] << ")";
    else if (w < 7e-46) EXPECT_EQ(opt[i], 0.f) << "exp(" << v[i] << ")";
    else EXPECT_NEAR(opt[i], w, 1.5e-45 + 2e-7 * (1 + std::fabs(v[i])) * w) << "exp(" << v[i] << ")";
  }
}

// The C of a softmax row kernel: the exp is vector code (its int conversion and its selects have
// vector dtypes) and takes three selects (two clamps and the NaN pass-through; tinygrad's masking
// of the specials took twelve). It is computed once: the sum loop stores exp(x - max) to the output
// and the store loop rescales it from there (the old code computed it again in the store loop).
// The sum loop also prefetches the next row (ROW_PREFETCH).
TEST(CpuRows, SoftmaxExpRendersAsVectorCode) {
  std::unique_ptr<Kernel> k = tgt::cpu_kernel_of({512, 4096}, [](const Tensor& x) { return x.softmax(-1); });
  ASSERT_TRUE(k);
  const std::vector<UOp>& uops = k->linearize();
  int depth = 0, vector_wheres = 0, scalar_wheres = 0, vector_f2i = 0, scalar_f2i = 0;
  for (const UOp& u : uops) {
    if (u->op == Ops::RANGE) depth++;
    if (u->op == Ops::ENDRANGE) depth--;
    if (depth < 2) continue;   // inside a row loop
    if (is_alu(u, TernaryOps::WHERE)) (u->dtype.count > 1 ? vector_wheres : scalar_wheres)++;
    if (u->op == Ops::CAST && u->src[0]->dtype.scalar() == dtypes::float32 && u->dtype.scalar() == dtypes::int32)
      (u->dtype.count > 1 ? vector_f2i : scalar_f2i)++;
  }
  EXPECT_EQ(scalar_wheres, 0);
  EXPECT_EQ(scalar_f2i, 0);
  EXPECT_EQ(vector_f2i, 1) << "one exp, in the sum loop";
  EXPECT_LE(vector_wheres, 3 + 1) << "three selects per exp (the max reduce may add one)";
  // the store loop (the last loop) loads the output buffer: the exp stored by the sum loop
  auto last_range = std::find_if(uops.rbegin(), uops.rend(), [](const UOp& u) { return u->op == Ops::RANGE; });
  ASSERT_NE(last_range, uops.rend());
  bool reads_out = false;
  for (auto it = last_range.base(); it != uops.end(); ++it)
    reads_out |= (*it)->op == Ops::LOAD && (*it)->src[0]->op == Ops::DEFINE_GLOBAL && (*it)->src[0]->as<int64_t>() == 0;
  EXPECT_TRUE(reads_out) << "the store loop rescales the stored exp";
  RenderedProgram p = k->to_program();
  EXPECT_NE(p.src.find("__builtin_convertvector"), std::string::npos) << p.src;
  // the exp loop (compute-bound, from L1) prefetches the next row for the max loop (memory-bound)
  EXPECT_NE(p.src.find("__builtin_prefetch(data1+"), std::string::npos) << p.src;
}
