// batchnorm (training statistics) then max_pool2d, forward and backward, as beautiful_mnist runs them
// (relu before the batchnorm makes ties in the pool windows): values against a reference computed here
// in double, with and without the Kernel's opts, and the shape of the schedule (the pooled gradient is
// computed once, not in every consumer; the batchnorm backward reduces its input-sized data twice).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "access.hpp"
#include "mnist_model.hpp"
#include "runtime/buffer.hpp"
#include "tg/tg.hpp"
#include "uop/uop.hpp"

using namespace tg;

namespace {

struct Grads {
  std::vector<float> y, dx, dw, db;
};

// bn(relu(x)).max_pool2d(2) and its gradients for the upstream gradient g, in double: batch statistics
// (biased variance), weight w and bias b per channel; a window's gradient is split evenly between the
// positions that hold its max (tinygrad's rule); odd H or W drop the last row or column.
Grads reference(const std::vector<float>& x, const std::vector<float>& g, const std::vector<float>& w, const std::vector<float>& b,
                int64_t N, int64_t C, int64_t H, int64_t W) {
  const int64_t H2 = H / 2, W2 = W / 2, M = N * H * W;
  auto at = [&](int64_t n, int64_t c, int64_t h, int64_t ww) { return ((n * C + c) * H + h) * W + ww; };
  std::vector<double> r(x.size()), xhat(x.size()), dy(x.size(), 0.0);
  for (size_t i = 0; i < x.size(); i++) r[i] = std::max(0.0, double(x[i]));
  Grads out{std::vector<float>(N * C * H2 * W2), std::vector<float>(x.size()), std::vector<float>(C), std::vector<float>(C)};
  for (int64_t c = 0; c < C; c++) {
    double mean = 0, var = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < H * W; i++) mean += r[at(n, c, 0, 0) + i];
    mean /= double(M);
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < H * W; i++) var += (r[at(n, c, 0, 0) + i] - mean) * (r[at(n, c, 0, 0) + i] - mean);
    const double invstd = 1.0 / std::sqrt(var / double(M) + 1e-5);
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < H * W; i++) xhat[at(n, c, 0, 0) + i] = (r[at(n, c, 0, 0) + i] - mean) * invstd;
    // the pool: max of each window, its gradient to every position holding it
    for (int64_t n = 0; n < N; n++)
      for (int64_t h2 = 0; h2 < H2; h2++)
        for (int64_t w2 = 0; w2 < W2; w2++) {
          double m = -INFINITY;
          for (int64_t k = 0; k < 4; k++) m = std::max(m, xhat[at(n, c, 2 * h2 + k / 2, 2 * w2 + k % 2)]);
          int count = 0;
          for (int64_t k = 0; k < 4; k++) count += xhat[at(n, c, 2 * h2 + k / 2, 2 * w2 + k % 2)] == m;
          const int64_t o = ((n * C + c) * H2 + h2) * W2 + w2;
          out.y[o] = float(m * w[c] + b[c]);
          for (int64_t k = 0; k < 4; k++)
            if (xhat[at(n, c, 2 * h2 + k / 2, 2 * w2 + k % 2)] == m) dy[at(n, c, 2 * h2 + k / 2, 2 * w2 + k % 2)] = g[o] / count;
        }
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < H * W; i++) sdy += dy[at(n, c, 0, 0) + i], sdyx += dy[at(n, c, 0, 0) + i] * xhat[at(n, c, 0, 0) + i];
    out.db[c] = float(sdy), out.dw[c] = float(sdyx);
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < H * W; i++) {
        const int64_t j = at(n, c, 0, 0) + i;
        const double d = w[c] * invstd / double(M) * (double(M) * dy[j] - sdy - xhat[j] * sdyx);
        out.dx[j] = float(x[j] > 0 ? d : 0.0);
      }
  }
  return out;
}

std::vector<float> randoms(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) seed = seed * 1664525u + 1013904223u, x = float(int32_t(seed >> 8) % 2000 - 1000) / 500.0f;
  return v;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; i++)
    if (!(std::fabs(got[i] - want[i]) <= 2e-4 + 2e-3 * std::fabs(want[i]))) ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i], bad++;
}

// tg's forward output and gradients for the same inputs
Grads run_tg(const std::vector<float>& x, const std::vector<float>& g, const std::vector<float>& w, const std::vector<float>& b,
             int64_t N, int64_t C, int64_t H, int64_t W) {
  nn::BatchNorm bn(C);
  bn.weight = Tensor::from<float>(w, {C}).requires_grad_();
  bn.bias = Tensor::from<float>(b, {C}).requires_grad_();
  Tensor xt = Tensor::from<float>(x, {N, C, H, W}).requires_grad_();
  Tensor::Train train;
  Tensor y = bn(xt.relu()).max_pool2d();
  (y * Tensor::from<float>(g, y.shape())).sum().backward();
  Tensor dx = *xt.grad(), dw = *bn.weight->grad(), db = *bn.bias->grad();
  y.realize({dx, dw, db});
  return {y.tolist<float>(), dx.tolist<float>(), dw.tolist<float>(), db.tolist<float>()};
}

void check_shape(int64_t N, int64_t C, int64_t H, int64_t W) {
  SCOPED_TRACE("shape " + std::to_string(N) + "x" + std::to_string(C) + "x" + std::to_string(H) + "x" + std::to_string(W));
  std::vector<float> x = randoms(N * C * H * W, 1), g = randoms(N * C * (H / 2) * (W / 2), 2), w = randoms(C, 3), b = randoms(C, 4);
  for (auto& v : w) v = std::fabs(v) + 0.5f;   // (the reference finds ties before the affine: a positive weight keeps them)
  const Grads want = reference(x, g, w, b, N, C, H, W);
  for (int noopt : {0, 1}) {
    Context ctx({{"NOOPT", noopt}});
    const Grads got = run_tg(x, g, w, b, N, C, H, W);
    expect_near(got.y, want.y, noopt ? "y (NOOPT)" : "y");
    expect_near(got.dx, want.dx, noopt ? "dx (NOOPT)" : "dx");
    expect_near(got.dw, want.dw, noopt ? "dweight (NOOPT)" : "dweight");
    expect_near(got.db, want.db, noopt ? "dbias (NOOPT)" : "dbias");
  }
}

}  // namespace

TEST(BnPool, ForwardAndGradientsMatchTheReference) {
  check_shape(4, 3, 6, 10);    // even: the pool is a reshape
  check_shape(3, 5, 7, 9);     // odd H and W: the last row and column are dropped
  check_shape(2, 2, 2, 2);     // one window per channel
  check_shape(40, 4, 20, 20);  // beautiful_mnist's layout, long enough for the split per-channel reduce
}

// The pooled gradient (1 where a window's max is, over the tie count, times the upstream gradient) is
// computed once, in the input's layout, instead of in each of the batchnorm backward's kernels (its two
// per-channel sums and its elementwise input gradient): the compare against the max is in two kernels,
// the forward's tie count and that gradient.
// (128x16x16 per channel: the per-channel reduces are split in two kernels, as beautiful_mnist's are; a
// small batch is one kernel, with or without the realized gradient)
TEST(BnPool, PooledGradientIsComputedOnce) {
  nn::BatchNorm bn(2);
  Tensor x = Tensor::randn({128, 2, 16, 16}).realize().requires_grad_();
  Tensor::Train train;
  (bn(x.relu()).max_pool2d() * Tensor::randn({128, 2, 8, 8}).realize()).sum().backward();
  Tensor dx = *x.grad(), dw = *bn.weight->grad(), db = *bn.bias->grad();
  int compares = 0;
  for (const ScheduleItem& si : dx.schedule({dw, db})) {
    if (si.kind != MetaOps::KERNEL) continue;
    bool cmp = false;
    for (const UOp& u : Access::uop(si.ast).toposort()) cmp = cmp || is_alu(u, BinaryOps::CMPNE);
    compares += cmp;
  }
  EXPECT_EQ(compares, 2);
}

// beautiful_mnist's bn1 backward reduces its 512x32x20x20 input-sized data in two kernels, sum(dy * x)
// and sum(dy) per channel (batchnorm as x * scale + shift); the op-by-op form took four (the gradients
// of mean and invstd each reduced dy against x again). Scheduled only, not run.
TEST(BnPool, BatchnormBackwardReducesTheInputTwice) {
  MnistModel model;
  for (Tensor p : nn::state::get_parameters(model))
    if (p.requires_grad_opt() != false) p.requires_grad_();
  Tensor x = Tensor::empty({512, 1, 28, 28}), y = Tensor::empty({512}, Opts{dtypes::int32, "", false});
  Tensor::Train train;
  model(x).sparse_categorical_crossentropy(y).backward();
  Tensor g1 = *model.c1.weight.grad(), gw = *model.bn1.weight->grad(), gb = *model.bn1.bias->grad();
  int reduces = 0;
  for (const ScheduleItem& si : g1.schedule({gw, gb})) {
    if (si.kind != MetaOps::KERNEL || std::find(si.metadata.begin(), si.metadata.end(), "batchnorm bw") == si.metadata.end()) continue;
    bool reduce = false, input_sized = false;
    for (const UOp& u : Access::uop(si.ast).toposort()) reduce = reduce || u->op == Ops::REDUCE_AXIS;
    for (auto& b : si.bufs) input_sized = input_sized || b->size == 512 * 32 * 20 * 20;
    reduces += reduce && input_sized;
  }
  EXPECT_EQ(reduces, 2);
}
