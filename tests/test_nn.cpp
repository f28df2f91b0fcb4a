// tg::nn layers: forward passes against host formulas computed from each layer's own weights
// (read back with tolist), parameter names as tinygrad's, default init ranges, bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tensor_test_util.hpp"
#include "tg/tg.hpp"

using namespace tg;
using tgt::expect_close;
using tgt::F;
using tgt::vals;

namespace {

std::vector<float> seq(size_t n, float scale = 0.1f, float shift = 0.f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = float(std::sin(double(i) * 1.3 + 0.2)) * scale * 10 + shift;
  return v;
}

std::vector<std::string> names(nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [k, t] : m.named_tensors()) out.push_back(k);
  return out;
}

// x: (N, C, H, W), w: (O, C/g, KH, KW); stride/padding/dilation per axis
std::vector<float> conv2d_ref(const std::vector<float>& x, Shape xs, const std::vector<float>& w, Shape ws, const std::vector<float>* b,
                              int g, int64_t s, int64_t p, int64_t d, Shape& out_shape) {
  int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], O = ws[0], Cg = ws[1], KH = ws[2], KW = ws[3];
  int64_t OH = (H + 2 * p - d * (KH - 1) - 1) / s + 1, OW = (W + 2 * p - d * (KW - 1) - 1) / s + 1;
  out_shape = {N, O, OH, OW};
  std::vector<float> out(size_t(N * O * OH * OW));
  int64_t Og = O / g;
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t oy = 0; oy < OH; oy++)
        for (int64_t ox = 0; ox < OW; ox++) {
          double acc = b ? (*b)[size_t(o)] : 0.0;
          for (int64_t c = 0; c < Cg; c++)
            for (int64_t ky = 0; ky < KH; ky++)
              for (int64_t kx = 0; kx < KW; kx++) {
                int64_t iy = oy * s - p + ky * d, ix = ox * s - p + kx * d, ic = (o / Og) * Cg + c;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                acc += double(x[size_t(((n * C + ic) * H + iy) * W + ix)]) * w[size_t(((o * Cg + c) * KH + ky) * KW + kx)];
              }
          out[size_t(((n * O + o) * OH + oy) * OW + ox)] = float(acc);
        }
  (void)C;
  return out;
}

// x: (N, C, H, W), w: (C, O/g, KH, KW): scatter each input pixel through the kernel
std::vector<float> conv_transpose2d_ref(const std::vector<float>& x, Shape xs, const std::vector<float>& w, Shape ws,
                                        const std::vector<float>& b, int g, int64_t s, int64_t p, int64_t op, int64_t d,
                                        Shape& out_shape) {
  int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], Og = ws[1], KH = ws[2], KW = ws[3], O = Og * g, Cg = C / g;
  int64_t OH = (H - 1) * s - 2 * p + d * (KH - 1) + op + 1, OW = (W - 1) * s - 2 * p + d * (KW - 1) + op + 1;
  out_shape = {N, O, OH, OW};
  std::vector<double> acc(size_t(N * O * OH * OW));
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t i = 0; i < OH * OW; i++) acc[size_t((n * O + o) * OH * OW + i)] = b[size_t(o)];
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t iy = 0; iy < H; iy++)
        for (int64_t ix = 0; ix < W; ix++)
          for (int64_t oo = 0; oo < Og; oo++)
            for (int64_t ky = 0; ky < KH; ky++)
              for (int64_t kx = 0; kx < KW; kx++) {
                int64_t oy = iy * s - p + ky * d, ox = ix * s - p + kx * d, o = (c / Cg) * Og + oo;
                if (oy < 0 || oy >= OH || ox < 0 || ox >= OW) continue;
                acc[size_t(((n * O + o) * OH + oy) * OW + ox)] +=
                    double(x[size_t(((n * C + c) * H + iy) * W + ix)]) * w[size_t(((c * Og + oo) * KH + ky) * KW + kx)];
              }
  return std::vector<float>(acc.begin(), acc.end());
}

// normalizes each of `groups` contiguous runs of `x` (biased variance)
std::vector<float> normalize_runs(const std::vector<float>& x, size_t run, double eps) {
  std::vector<float> out(x.size());
  for (size_t r0 = 0; r0 < x.size(); r0 += run) {
    double mean = 0, var = 0;
    for (size_t i = 0; i < run; i++) mean += x[r0 + i];
    mean /= double(run);
    for (size_t i = 0; i < run; i++) var += (x[r0 + i] - mean) * (x[r0 + i] - mean);
    var /= double(run);
    for (size_t i = 0; i < run; i++) out[r0 + i] = float((x[r0 + i] - mean) / std::sqrt(var + eps));
  }
  return out;
}

void expect_in_bounds(const Tensor& t, double bound) {
  auto v = vals(t);
  float lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  // uses most of the range, on both sides (a wrong scale or a constant init fails this); with >= 32
  // draws, missing half of a side by chance has probability < 2 * 0.75^32 ~ 1e-4
  if (v.size() < 32) return;
  EXPECT_LT(lo, -0.5 * bound);
  EXPECT_GT(hi, 0.5 * bound);
}

}  // namespace

// ---------------------------------------------------------------- Linear
TEST(NN, LinearForwardMatchesFormula) {
  Tensor::manual_seed(1);
  nn::Linear lin(3, 4);
  auto w = vals(lin.weight), b = vals(*lin.bias);
  auto xv = seq(6);
  auto y = vals(lin(F(xv, {2, 3})));
  std::vector<float> want(8);
  for (int n = 0; n < 2; n++)
    for (int o = 0; o < 4; o++) {
      double acc = b[o];
      for (int i = 0; i < 3; i++) acc += double(xv[n * 3 + i]) * w[o * 3 + i];
      want[n * 4 + o] = float(acc);
    }
  expect_close(y, want);
  EXPECT_EQ(lin(F(xv, {2, 3})).shape(), (Shape{2, 4}));
}

TEST(NN, LinearNoBiasAndNames) {
  nn::Linear lin(3, 2, false);
  EXPECT_FALSE(lin.bias.has_value());
  EXPECT_EQ(names(lin), (std::vector<std::string>{"weight"}));
  nn::Linear lb(3, 2);
  EXPECT_EQ(names(lb), (std::vector<std::string>{"weight", "bias"}));
  // named_tensors points at the layer's own tensors, so loaders update the layer
  auto nt = lb.named_tensors("fc.");
  EXPECT_EQ(nt[0].first, "fc.weight");
  EXPECT_EQ(nt[0].second, &lb.weight);
  EXPECT_EQ(nt[1].second, &*lb.bias);
  auto xv = seq(3);
  auto y = vals(lin(F(xv, {1, 3})));
  auto w = vals(lin.weight);
  expect_close(y, {xv[0] * w[0] + xv[1] * w[1] + xv[2] * w[2], xv[0] * w[3] + xv[1] * w[4] + xv[2] * w[5]});
}

TEST(NN, LinearInitRange) {
  Tensor::manual_seed(2);
  nn::Linear lin(16, 32);
  EXPECT_EQ(lin.weight.shape(), (Shape{32, 16}));
  EXPECT_EQ(lin.bias->shape(), (Shape{32}));
  expect_in_bounds(lin.weight, 0.25);
  expect_in_bounds(*lin.bias, 0.25);
}

TEST(NN, LinearBadInputThrows) {
  nn::Linear lin(3, 2);
  EXPECT_THROW(lin(Tensor::ones({2, 4})).realize(), Error);
}

// ---------------------------------------------------------------- Conv2d
TEST(NN, Conv2dForwardMatchesFormula) {
  Tensor::manual_seed(3);
  struct Case { int64_t cin, cout, k, s, p, d; int g; };
  for (Case c : {Case{2, 3, 3, 1, 0, 1, 1}, Case{4, 4, 3, 2, 1, 1, 2}, Case{2, 2, 2, 1, 1, 2, 1}}) {
    nn::Conv2d conv(c.cin, c.cout, c.k, c.s, c.p, c.d, c.g);
    Shape xs{2, c.cin, 5, 5};
    auto xv = seq(size_t(prod(xs)));
    auto w = vals(conv.weight), b = vals(*conv.bias);
    Shape want_shape;
    auto want = conv2d_ref(xv, xs, w, conv.weight.shape(), &b, c.g, c.s, c.p, c.d, want_shape);
    Tensor y = conv(F(xv, xs));
    EXPECT_EQ(y.shape(), want_shape) << c.cin << "," << c.cout << " k" << c.k;
    expect_close(vals(y), want, 1e-4f);
  }
}

TEST(NN, Conv2dInitNamesAndErrors) {
  Tensor::manual_seed(4);
  nn::Conv2d conv(4, 32, 3, 1, 0, 1, 2);
  EXPECT_EQ(conv.weight.shape(), (Shape{32, 2, 3, 3}));
  EXPECT_EQ(conv.kernel_size, (Shape{3, 3}));
  double scale = 1.0 / std::sqrt(4.0 * 9.0);
  expect_in_bounds(conv.weight, scale);
  expect_in_bounds(*conv.bias, scale);
  EXPECT_EQ(names(conv), (std::vector<std::string>{"weight", "bias"}));
  nn::Conv2d nb(1, 2, Shape{2, 3}, {1}, {0}, {1}, 1, false);
  EXPECT_EQ(nb.weight.shape(), (Shape{2, 1, 2, 3}));
  EXPECT_EQ(names(nb), (std::vector<std::string>{"weight"}));
  EXPECT_THROW(nn::Conv2d(3, 4, 3, 1, 0, 1, 2), Error);   // 3 channels in 2 groups
  EXPECT_THROW(nn::Conv2d(4, 3, 3, 1, 0, 1, 2), Error);
  EXPECT_THROW(nn::Conv2d(4, 4, 3, 1, 0, 1, 0), Error);
  nn::Conv2d c2(2, 2, 3);
  EXPECT_THROW(c2(Tensor::ones({1, 3, 5, 5})).realize(), Error);   // wrong input channels
}

TEST(NN, ConvTranspose2dForwardMatchesFormula) {
  Tensor::manual_seed(5);
  struct Case { int64_t cin, cout, k, s, p, op, d; int g; };
  for (Case c : {Case{2, 3, 3, 1, 0, 0, 1, 1}, Case{2, 2, 3, 2, 1, 1, 1, 1}, Case{4, 2, 2, 2, 0, 0, 1, 2}, Case{1, 2, 2, 1, 0, 0, 2, 1}}) {
    nn::ConvTranspose2d conv(c.cin, c.cout, c.k, c.s, c.p, c.op, c.d, c.g);
    EXPECT_EQ(conv.weight.shape(), (Shape{c.cin, c.cout / c.g, c.k, c.k}));
    Shape xs{1, c.cin, 3, 3};
    auto xv = seq(size_t(prod(xs)));
    Shape want_shape;
    auto want = conv_transpose2d_ref(xv, xs, vals(conv.weight), conv.weight.shape(), vals(*conv.bias), c.g, c.s, c.p, c.op, c.d, want_shape);
    Tensor y = conv(F(xv, xs));
    EXPECT_EQ(y.shape(), want_shape) << "case cin=" << c.cin << " s=" << c.s << " g=" << c.g;
    expect_close(vals(y), want, 1e-4f);
  }
}

TEST(NN, ConvTranspose2dInitRange) {
  Tensor::manual_seed(6);
  nn::ConvTranspose2d conv(4, 32, 3);
  EXPECT_EQ(conv.weight.shape(), (Shape{4, 32, 3, 3}));
  EXPECT_EQ(conv.bias->shape(), (Shape{32}));
  expect_in_bounds(conv.weight, 1.0 / 6.0);
  expect_in_bounds(*conv.bias, 1.0 / 6.0);
  EXPECT_THROW(nn::ConvTranspose2d(4, 3, 3, 1, 0, 0, 1, 2), Error);
}

// ---------------------------------------------------------------- BatchNorm
TEST(NN, BatchNormTrainNormalizesAndUpdatesRunningStats) {
  nn::BatchNorm bn(3);
  bn.weight = F({1.0f, 2.0f, 0.5f}, {3});
  bn.bias = F({0.0f, -1.0f, 3.0f}, {3});
  Shape xs{2, 3, 2, 2};
  auto xv = seq(24, 0.3f, 0.5f);
  std::vector<float> y, rm, rv;
  {
    Tensor::Train train;
    Tensor out = bn(F(xv, xs));
    out.realize({bn.running_mean, bn.running_var, bn.num_batches_tracked});
    y = vals(out);
  }
  const double eps = 1e-5;
  std::vector<float> want_y(24), want_rm(3), want_rv(3);
  const float w[3] = {1, 2, 0.5f}, b[3] = {0, -1, 3};
  for (int c = 0; c < 3; c++) {
    double mean = 0, var = 0;
    for (int n = 0; n < 2; n++)
      for (int i = 0; i < 4; i++) mean += xv[size_t((n * 3 + c) * 4 + i)];
    mean /= 8;
    for (int n = 0; n < 2; n++)
      for (int i = 0; i < 4; i++) var += std::pow(xv[size_t((n * 3 + c) * 4 + i)] - mean, 2);
    for (int n = 0; n < 2; n++)
      for (int i = 0; i < 4; i++) {
        size_t k = size_t((n * 3 + c) * 4 + i);
        want_y[k] = float((xv[k] - mean) / std::sqrt(var / 8 + eps) * w[c] + b[c]);
      }
    want_rm[size_t(c)] = float(0.1 * mean);
    want_rv[size_t(c)] = float(0.9 + 0.1 * var / 7);   // unbiased variance in the running stat
  }
  expect_close(y, want_y, 1e-4f);
  expect_close(vals(bn.running_mean), want_rm);
  expect_close(vals(bn.running_var), want_rv);
  expect_close(vals(bn.num_batches_tracked), {1.0f});
  // a second step moves the stats again
  {
    Tensor::Train train;
    bn(F(xv, xs)).realize({bn.running_mean, bn.running_var, bn.num_batches_tracked});
  }
  expect_close(vals(bn.running_mean), {float(0.9 * want_rm[0] + want_rm[0]), float(0.9 * want_rm[1] + want_rm[1]),
                                       float(0.9 * want_rm[2] + want_rm[2])});
  expect_close(vals(bn.num_batches_tracked), {2.0f});
}

TEST(NN, BatchNormEvalUsesRunningStats) {
  nn::BatchNorm bn(2, 1e-3);
  bn.running_mean = F({0.5f, -1.0f}, {2});
  bn.running_var = F({4.0f, 0.25f}, {2});
  bn.weight = F({2.0f, 1.0f}, {2});
  bn.bias = F({0.1f, 0.2f}, {2});
  ASSERT_FALSE(Tensor::training);
  auto xv = seq(8);
  auto y = vals(bn(F(xv, {2, 2, 2})));
  std::vector<float> want(8);
  const float m[2] = {0.5f, -1.0f}, v[2] = {4.0f, 0.25f}, w[2] = {2, 1}, b[2] = {0.1f, 0.2f};
  for (int n = 0; n < 2; n++)
    for (int c = 0; c < 2; c++)
      for (int i = 0; i < 2; i++) {
        size_t k = size_t((n * 2 + c) * 2 + i);
        want[k] = float((xv[k] - m[c]) / std::sqrt(v[c] + 1e-3) * w[c] + b[c]);
      }
  expect_close(y, want);
  // eval leaves the stats alone
  expect_close(vals(bn.running_mean), {0.5f, -1.0f});
  expect_close(vals(bn.num_batches_tracked), {0.0f});
}

TEST(NN, BatchNormNamesInitAndErrors) {
  nn::BatchNorm bn(4);
  EXPECT_EQ(names(bn), (std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
  expect_close(vals(*bn.weight), {1, 1, 1, 1});
  expect_close(vals(*bn.bias), {0, 0, 0, 0});
  expect_close(vals(bn.running_mean), {0, 0, 0, 0});
  expect_close(vals(bn.running_var), {1, 1, 1, 1});
  EXPECT_EQ(bn.num_batches_tracked.shape(), (Shape{1}));
  EXPECT_FALSE(bn.running_mean.requires_grad());
  nn::BatchNorm na(4, 1e-5, false);
  EXPECT_EQ(names(na), (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_THROW(bn(Tensor::ones({2, 3, 2, 2})), Error);
  EXPECT_THROW(bn(Tensor::ones({4})), Error);
}

TEST(NN, BatchNormWithoutAffineOrTracking) {
  nn::BatchNorm bn(2, 1e-5, false, false);
  auto xv = seq(8);
  std::vector<float> y;
  {
    Tensor::Train train;
    y = vals(bn(F(xv, {2, 2, 2})));
  }
  // per channel: elements (n, c, i) for n, i
  std::vector<float> want(8);
  for (int c = 0; c < 2; c++) {
    std::vector<float> ch;
    for (int n = 0; n < 2; n++)
      for (int i = 0; i < 2; i++) ch.push_back(xv[size_t((n * 2 + c) * 2 + i)]);
    auto nc = normalize_runs(ch, 4, 1e-5);
    for (int n = 0; n < 2; n++)
      for (int i = 0; i < 2; i++) want[size_t((n * 2 + c) * 2 + i)] = nc[size_t(n * 2 + i)];
  }
  expect_close(y, want, 1e-4f);
  expect_close(vals(bn.running_mean), {0, 0});   // not tracked
}

// ---------------------------------------------------------------- norms
TEST(NN, LayerNormMatchesFormula) {
  nn::LayerNorm ln(4);
  ln.weight = F({1, 2, 3, 4}, {4});
  ln.bias = F({0.5f, 0, -0.5f, 1}, {4});
  auto xv = seq(12);
  auto y = vals(ln(F(xv, {3, 4})));
  auto nx = normalize_runs(xv, 4, 1e-5);
  std::vector<float> want(12);
  for (size_t i = 0; i < 12; i++) want[i] = nx[i] * float(1 + i % 4) + std::vector<float>{0.5f, 0, -0.5f, 1}[i % 4];
  expect_close(y, want, 1e-4f);
  EXPECT_EQ(names(ln), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_THROW(ln(Tensor::ones({3, 5})), Error);
}

TEST(NN, LayerNormMultiAxisNoAffine) {
  nn::LayerNorm ln(Shape{2, 3}, 1e-5, false);
  EXPECT_TRUE(names(ln).empty());
  auto xv = seq(12);
  expect_close(vals(ln(F(xv, {2, 2, 3}))), normalize_runs(xv, 6, 1e-5), 1e-4f);
  EXPECT_THROW(ln(Tensor::ones({2, 3, 2})), Error);
}

TEST(NN, LayerNorm2dNormalizesChannels) {
  nn::LayerNorm2d ln(3);
  ln.weight = F({1, 2, 3}, {3});
  Shape xs{1, 3, 2, 2};
  auto xv = seq(12);
  auto y = vals(ln(F(xv, xs)));
  // each pixel's 3 channel values are normalized together
  std::vector<float> want(12);
  for (int px = 0; px < 4; px++) {
    std::vector<float> ch{xv[size_t(px)], xv[size_t(4 + px)], xv[size_t(8 + px)]};
    auto nc = normalize_runs(ch, 3, 1e-5);
    for (int c = 0; c < 3; c++) want[size_t(c * 4 + px)] = nc[size_t(c)] * float(c + 1);
  }
  expect_close(y, want, 1e-4f);
  EXPECT_EQ(ln(F(xv, xs)).shape(), xs);
}

TEST(NN, GroupNormMatchesFormula) {
  nn::GroupNorm gn(2, 4);
  gn.weight = F({1, 2, 3, 4}, {4});
  gn.bias = F({0, 1, 0, 1}, {4});
  Shape xs{2, 4, 3};
  auto xv = seq(24);
  auto y = vals(gn(F(xv, xs)));
  auto nx = normalize_runs(xv, 6, 1e-5);   // a group is 2 channels x 3 values, contiguous
  std::vector<float> want(24);
  for (size_t i = 0; i < 24; i++) {
    size_t c = (i / 3) % 4;
    want[i] = nx[i] * float(c + 1) + float(c % 2);
  }
  expect_close(y, want, 1e-4f);
  EXPECT_EQ(names(gn), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_THROW(nn::GroupNorm(3, 4), Error);
  EXPECT_THROW(nn::GroupNorm(0, 4), Error);
  EXPECT_THROW(gn(Tensor::ones({2, 6, 3})), Error);
}

TEST(NN, InstanceNormMatchesFormula) {
  nn::InstanceNorm in(3);
  in.weight = F({2, 1, 0.5f}, {3});
  in.bias = F({0, 0, 1}, {3});
  Shape xs{2, 3, 2, 2};
  auto xv = seq(24);
  auto y = vals(in(F(xv, xs)));
  auto nx = normalize_runs(xv, 4, 1e-5);
  std::vector<float> want(24);
  const float w[3] = {2, 1, 0.5f}, b[3] = {0, 0, 1};
  for (size_t i = 0; i < 24; i++) want[i] = nx[i] * w[(i / 4) % 3] + b[(i / 4) % 3];
  expect_close(y, want, 1e-4f);
  EXPECT_THROW(in(Tensor::ones({2, 2, 2, 2})), Error);
  nn::InstanceNorm na(3, 1e-5, false);
  EXPECT_TRUE(names(na).empty());
  expect_close(vals(na(F(xv, xs))), nx, 1e-4f);
}

TEST(NN, RMSNormMatchesFormula) {
  nn::RMSNorm rms(4);
  rms.weight = F({1, 0.5f, 2, -1}, {4});
  auto xv = seq(8);
  auto y = vals(rms(F(xv, {2, 4})));
  std::vector<float> want(8);
  for (int r = 0; r < 2; r++) {
    double ms = 0;
    for (int i = 0; i < 4; i++) ms += double(xv[size_t(r * 4 + i)]) * xv[size_t(r * 4 + i)];
    double inv = 1.0 / std::sqrt(ms / 4 + 1e-6);
    for (int i = 0; i < 4; i++) want[size_t(r * 4 + i)] = float(xv[size_t(r * 4 + i)] * inv) * std::vector<float>{1, 0.5f, 2, -1}[size_t(i)];
  }
  expect_close(y, want, 1e-5f);
  EXPECT_EQ(names(rms), (std::vector<std::string>{"weight"}));
  expect_close(vals(nn::RMSNorm(3).weight), {1, 1, 1});
  // half input: computed in float, returned as half
  Tensor yh = rms(F(xv, {2, 4}).half());
  EXPECT_EQ(yh.dtype(), dtypes::float32);   // half * float32 weight promotes, as tinygrad
  expect_close(vals(yh), want, 2e-3f);
}

// ---------------------------------------------------------------- Embedding
TEST(NN, EmbeddingLooksUpRows) {
  Tensor::manual_seed(7);
  nn::Embedding emb(5, 3);
  EXPECT_EQ(emb.weight.shape(), (Shape{5, 3}));
  EXPECT_EQ(names(emb), (std::vector<std::string>{"weight"}));
  auto w = vals(emb.weight);
  std::vector<int32_t> ids{4, 0, 2, 2, 1, 3};
  Tensor y = emb(Tensor::from<int32_t>(ids, {2, 3}));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
  std::vector<float> want;
  for (int32_t i : ids)
    for (int e = 0; e < 3; e++) want.push_back(w[size_t(i * 3 + e)]);
  expect_close(vals(y), want);
  // 1-d indices
  Tensor y1 = emb(Tensor::from<int32_t>({3, 1}, {2}));
  EXPECT_EQ(y1.shape(), (Shape{2, 3}));
  expect_close(vals(y1), {w[9], w[10], w[11], w[3], w[4], w[5]});
  // empty index tensor
  EXPECT_EQ(emb(Tensor::from<int32_t>(std::vector<int32_t>{}, {0})).shape(), (Shape{0, 3}));
}

TEST(NN, EmbeddingInitRangeAndGradient) {
  Tensor::manual_seed(8);
  nn::Embedding emb(20, 30);
  expect_in_bounds(emb.weight, std::sqrt(6.0 / 50.0));
  // d(sum of looked-up rows)/d(weight) counts each row's uses
  nn::Embedding e2(4, 2);
  e2.weight.requires_grad_(true);
  e2(Tensor::from<int32_t>({1, 3, 1}, {3})).sum().backward();
  expect_close(vals(*e2.weight.grad()), {0, 0, 2, 2, 0, 0, 1, 1});
}

// ---------------------------------------------------------------- a composite model
struct Tiny : nn::Module {
  nn::Conv2d conv{1, 2, 3};
  nn::BatchNorm bn{2};
  nn::Linear fc{8, 3};
  void collect(const std::string& p, nn::NamedTensors& out) override {
    conv.collect(p + "conv.", out);
    bn.collect(p + "bn.", out);
    fc.collect(p + "fc.", out);
  }
};

TEST(NN, ModuleCollectsDottedNames) {
  Tiny m;
  EXPECT_EQ(names(m), (std::vector<std::string>{"conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
                                                "bn.num_batches_tracked", "fc.weight", "fc.bias"}));
  auto nt = m.named_tensors("model.");
  EXPECT_EQ(nt.front().first, "model.conv.weight");
  EXPECT_EQ(nt.back().second, &*m.fc.bias);
}
