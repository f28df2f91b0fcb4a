// Autograd: gradients against hand-derived formulas and central finite differences.
#include <functional>

#include "tensor_test_util.hpp"

using namespace tg;
using namespace tgt;

namespace {
Tensor param(std::vector<float> v, Shape s) { return F(v, s).requires_grad_(); }
std::vector<float> grad_of(const Tensor& t) {
  auto g = t.grad();
  EXPECT_TRUE(g.has_value());
  return g ? vals(*g) : std::vector<float>{};
}
// d f / d x by central differences, f maps x to a scalar
std::vector<float> numeric_grad(const std::function<Tensor(const Tensor&)>& f, std::vector<float> x, const Shape& shape,
                                float eps = 1e-2f) {
  std::vector<float> g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    std::vector<float> xp = x, xm = x;
    xp[i] += eps, xm[i] -= eps;
    g[i] = (f(F(xp, shape)).item<float>() - f(F(xm, shape)).item<float>()) / (2 * eps);
  }
  return g;
}
void check_fd(const std::function<Tensor(const Tensor&)>& f, std::vector<float> x, const Shape& shape, float tol = 2e-2f) {
  Tensor p = param(x, shape);
  f(p).backward();
  expect_close(grad_of(p), numeric_grad(f, x, shape), tol);
}
}  // namespace

TEST(Autograd, HandDerivedUnary) {
  Tensor x = param({1, 2, 3}, {3});
  (x * x).sum().backward();
  expect_close(grad_of(x), {2, 4, 6});

  Tensor y = param({-1, 0.5, 2}, {3});
  y.relu().sum().backward();
  expect_close(grad_of(y), {0, 1, 1});

  Tensor e = param({0, 1}, {2});
  e.exp().sum().backward();
  expect_close(grad_of(e), {1, 2.7182818f});

  Tensor l = param({1, 4}, {2});
  l.log().sum().backward();
  expect_close(grad_of(l), {1, 0.25});

  Tensor s = param({4, 16}, {2});
  s.sqrt().sum().backward();
  expect_close(grad_of(s), {0.25, 0.125});

  Tensor sg = param({0}, {1});
  sg.sigmoid().sum().backward();
  expect_close(grad_of(sg), {0.25});

  Tensor sn = param({0, 1}, {2});
  sn.sin().sum().backward();
  expect_close(grad_of(sn), {1, 0.5403023f});

  Tensor r = param({2, 4}, {2});
  r.reciprocal().sum().backward();
  expect_close(grad_of(r), {-0.25, -0.0625});

  Tensor n = param({1, 2}, {2});
  (-n).sum().backward();
  expect_close(grad_of(n), {-1, -1});

  Tensor ab = param({-3, 2}, {2});
  ab.abs().sum().backward();
  expect_close(grad_of(ab), {-1, 1});
}

TEST(Autograd, BinaryAndBroadcast) {
  Tensor a = param({1, 2, 3, 4, 5, 6}, {2, 3}), b = param({10, 20, 30}, {3});
  (a * b).sum().backward();
  expect_close(grad_of(a), {10, 20, 30, 10, 20, 30});
  expect_close(grad_of(b), {5, 7, 9});

  Tensor c = param({1, 2}, {2, 1}), d = param({1, 2, 3}, {3});
  (c + d).sum().backward();
  expect_close(grad_of(c), {3, 3});
  expect_close(grad_of(d), {2, 2, 2});

  Tensor x = param({2, 4}, {2}), y = param({1, 2}, {2});
  (x / y).sum().backward();
  expect_close(grad_of(x), {1, 0.5});
  expect_close(grad_of(y), {-2, -1});

  Tensor p = param({1, 2}, {2}), q = param({3, 5}, {2});
  (p - q).sum().backward();
  expect_close(grad_of(p), {1, 1});
  expect_close(grad_of(q), {-1, -1});
}

TEST(Autograd, Matmul) {
  Tensor a = param({1, 2, 3, 4, 5, 6}, {2, 3}), b = param({1, 2, 3, 4, 5, 6}, {3, 2});
  a.matmul(b).sum().backward();
  // dL/da = 1 @ b^T: each row is b's row sums; dL/db = a^T @ 1: each row is a's column sums
  expect_close(grad_of(a), {3, 7, 11, 3, 7, 11});
  expect_close(grad_of(b), {5, 5, 7, 7, 9, 9});
}

TEST(Autograd, ReduceAndMovement) {
  Tensor m = param({1, 3, 3}, {3});
  m.max().backward();
  expect_close(grad_of(m), {0, 0.5, 0.5});

  Tensor mean = param({1, 2, 3, 4}, {4});
  mean.mean().backward();
  expect_close(grad_of(mean), {0.25, 0.25, 0.25, 0.25});

  Tensor t = param({1, 2, 3, 4, 5, 6}, {2, 3});
  (t.permute({1, 0}).reshape({6}) * F({1, 2, 3, 4, 5, 6}, {6})).sum().backward();
  // permuted order is t00 t10 t01 t11 t02 t12
  expect_close(grad_of(t), {1, 3, 5, 2, 4, 6});

  Tensor f = param({1, 2, 3}, {3});
  (f.flip(0) * F({1, 2, 3}, {3})).sum().backward();
  expect_close(grad_of(f), {3, 2, 1});

  Tensor s = param({1, 2, 3, 4}, {4});
  (s.shrink({{1, 3}}).pad({{0, 1}}) * F({5, 6, 7}, {3})).sum().backward();
  expect_close(grad_of(s), {0, 5, 6, 0});

  Tensor e = param({1, 2}, {2, 1});
  e.expand({2, 3}).sum().backward();
  expect_close(grad_of(e), {3, 3});

  Tensor w = param({1, 2, 3}, {3});
  Tensor::from<bool>({true, false, true}, {3}).where(w, 0.0).sum().backward();
  expect_close(grad_of(w), {1, 0, 1});

  Tensor c = param({1, 2}, {2});
  (c.cast(dtypes::float64) * 3).sum().backward();
  expect_close(grad_of(c), {3, 3});

  Tensor idx = param({1, 2, 3, 4}, {2, 2});
  idx[{1}].sum().backward();
  expect_close(grad_of(idx), {0, 0, 1, 1});

  Tensor g = param({1, 2, 3, 4}, {2, 2});
  g.gather(1, I({1, 1, 0, 1}, {2, 2})).sum().backward();
  expect_close(grad_of(g), {0, 2, 1, 1});
}

TEST(Autograd, FiniteDifferences) {
  check_fd([](const Tensor& x) { return x.tanh().sum(); }, {-0.5, 0.1, 0.7}, {3});
  check_fd([](const Tensor& x) { return x.softmax().mul(F({1, 2, 3}, {3})).sum(); }, {0.1, 0.5, -0.3}, {3});
  check_fd([](const Tensor& x) { return x.log_softmax().mul(F({0, 1, 0}, {3})).sum(); }, {0.2, -0.4, 0.9}, {3});
  check_fd([](const Tensor& x) { return x.pow(F({2, 3}, {2})).sum(); }, {1.5, 0.7}, {2});
  check_fd([](const Tensor& x) { return (x.square() + 1).sqrt().mean(); }, {1, -2, 3, 0.5}, {2, 2});
  check_fd([](const Tensor& x) { return x.layernorm().mul(F({1, 2, 3, 4}, {4})).sum(); }, {0.3, 1.2, -0.5, 2.0}, {4});
  check_fd([](const Tensor& x) { return x.conv2d(F({1, -1, 0.5, 2}, {1, 1, 2, 2})).square().sum(); },
           {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}, {1, 1, 3, 3});
  check_fd([](const Tensor& x) { return x.sparse_categorical_crossentropy(I({1, 0}, {2})); }, {0.5, 1.0, -1.0, 0.2}, {2, 2});
  check_fd([](const Tensor& x) { return x.cumsum().mul(F({1, -1, 2}, {3})).sum(); }, {1, 2, 3}, {3});
  check_fd([](const Tensor& x) { return x.avg_pool2d().sum() + x.max_pool2d().sum(); }, {1, 5, 2, 3, 4, 8, 7, 6, 0, 9, 11, 10, 13, 12, 15, 14},
           {1, 1, 4, 4});
}

TEST(Autograd, AccumulationDetachScopes) {
  Tensor x = param({1, 2}, {2});
  (x * 2).sum().backward();
  (x * 3).sum().backward();
  expect_close(grad_of(x), {5, 5});

  Tensor d = param({2, 3}, {2});
  (d * d.detach()).sum().backward();
  expect_close(grad_of(d), {2, 3});

  Tensor r = param({1}, {1});
  EXPECT_TRUE((r * 2).requires_grad());
  EXPECT_FALSE((F({1}, {1}) * 2).requires_grad());
  EXPECT_FALSE(r.detach().requires_grad());
  {
    Tensor::NoGrad ng;
    EXPECT_TRUE(Tensor::no_grad);
    EXPECT_THROW((r * 2).sum().backward(), Error);
  }
  EXPECT_FALSE(Tensor::no_grad);
  {
    Tensor::Train t;
    EXPECT_TRUE(Tensor::training);
    {
      Tensor::Train off(false);
      EXPECT_FALSE(Tensor::training);
    }
    EXPECT_TRUE(Tensor::training);
  }
  EXPECT_FALSE(Tensor::training);

  Tensor v = param({1, 2}, {2});
  (v * 2).backward(F({1, 10}, {2}));
  expect_close(grad_of(v), {2, 20});
}

// A comparison as where's condition gets no gradient, and the walk passes it by: x and y get theirs as in
// torch (d/dx where(x > y, x, y) = [x > y], d/dy = [x <= y]). It threw "got no gradient" before.
TEST(Autograd, WhereWithComparisonCondition) {
  Tensor x = param({1, -2, 3, -4}, {4}), y = param({0, 0, 5, -5}, {4});
  (x > y).where(x, y).sum().backward();
  expect_close(grad_of(x), {1, 0, 0, 1});
  expect_close(grad_of(y), {0, 1, 1, 0});
  Tensor r = param({-1, 2}, {2});
  ((r > 0).where(r, 0.0) * F({3, 4}, {2})).sum().backward();   // a relu written with where
  expect_close(grad_of(r), {0, 4});
  // a comparison's result requires no grad (torch), so a graph of comparisons alone has nothing to differentiate
  Tensor a = param({1, 2}, {2});
  EXPECT_FALSE((a < 1.5).requires_grad());
  EXPECT_THROW((a < 1.5).where(1.0, 2.0).sum().backward(), Error);
  EXPECT_THROW((a != a).sum().backward(), Error);   // tinygrad's test_cmp_ne_backwards
}
