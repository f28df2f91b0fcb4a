// Unary elementwise ops and activations against torch, each on a plain (4,5) input, a 0-d input
// and a non-contiguous view (permute + shrink); a few representative ops also on zero-size,
// size-1, padded, expanded and flipped inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "harness.hpp"

using namespace conf;
using tg::Tensor;
namespace F_ = torch::nn::functional;

namespace {

constexpr double inf = INFINITY, nan = NAN;

struct Unary {
  std::string name;
  std::function<tg::Tensor(const tg::Tensor&)> t;
  std::function<torch::Tensor(const torch::Tensor&)> th;
  double lo = -2, hi = 2;
  double atol = 1e-6, grad_atol = 1e-4;
  bool forward_only = false;   // as tinygrad's own test: its rounding ops pass the gradient through casts
  bool full = false;           // also the zero-size / size-1 / pad / expand / flip variants
  Unary& range(double l, double h) { lo = l; hi = h; return *this; }
  Unary& tol(double a, double ga = 1e-4) { atol = a; grad_atol = ga; return *this; }
  Unary& fwd() { forward_only = true; return *this; }
  Unary& all_variants() { full = true; return *this; }
};
#define U(name, expr) \
  Unary { name, [](const tg::Tensor& x) { return expr; }, [](const torch::Tensor& x) { return expr; } }
#define U2(name, tg_expr, th_expr) \
  Unary { name, [](const tg::Tensor& x) { return tg_expr; }, [](const torch::Tensor& x) { return th_expr; } }

// applies the op after a view of the input, so the op reads through a non-contiguous tracker
template <class View>
Case variant(const Unary& u, const std::string& tag, In in, View view) {
  Case c{u.name + "/" + tag, {in},
         [f = u.t, view](const std::vector<tg::Tensor>& x) { return f(view(x[0])); },
         [f = u.th, view](const std::vector<torch::Tensor>& x) { return f(view(x[0])); }};
  c.atol = u.atol;
  c.grad_atol = u.grad_atol;
  c.forward_only = u.forward_only;
  return c;
}

std::vector<Case> unary_cases(const Unary& u) {
  auto id = [](const auto& x) { return x; };
  std::vector<Case> cs;
  cs.push_back(variant(u, "(4,5)", F({4, 5}, u.lo, u.hi), id));
  cs.push_back(variant(u, "0d", F({}, u.lo, u.hi), id));
  cs.push_back(variant(u, "permute_shrink", F({3, 4, 5}, u.lo, u.hi),
                       [](const auto& x) { return op::shrink(op::permute(x, {2, 0, 1}), {{1, 4}, {0, 3}, {1, 4}}); }));
  if (!u.full) return cs;
  double mid = (u.lo + u.hi) / 2;   // pad with an in-domain value
  cs.push_back(variant(u, "zero_size", F({2, 0, 3}, u.lo, u.hi), id));
  cs.push_back(variant(u, "size1", F({3, 1, 1}, u.lo, u.hi), id));
  cs.push_back(variant(u, "pad", F({3, 4}, u.lo, u.hi), [mid](const auto& x) { return op::pad(x, {{1, 0}, {0, 2}}, mid); }));
  cs.push_back(variant(u, "expand", F({4, 1}, u.lo, u.hi), [](const auto& x) { return x.expand({4, 5}); }));
  cs.push_back(variant(u, "flip", F({4, 5}, u.lo, u.hi), [](const auto& x) { return op::flip(x, {0, 1}); }));
  return cs;
}

std::vector<Unary> unary_ops() {
  return {
      U("neg", -x).all_variants(),
      U("log", x.log()).range(0.1, 3).all_variants(),
      U("log2", x.log2()).range(0.1, 3),
      U("exp", x.exp()).all_variants(),
      U("exp2", x.exp2()),
      U("relu", x.relu()).all_variants(),
      U("sigmoid", x.sigmoid()).all_variants(),
      U("sigmoid/large", x.sigmoid()).range(300, 400),
      U("sigmoid/very_negative", x.sigmoid()).range(-400, -300),
      U("sqrt", x.sqrt()).range(0.1, 3).all_variants(),
      U("rsqrt", x.rsqrt()).range(0.1, 3),
      U("sin", x.sin()),
      U("sin/wide", x.sin()).range(-100, 100).tol(1e-5, 1e-3),
      U("cos", x.cos()),
      U("tan", x.tan()).range(-1.4, 1.4).tol(1e-5, 1e-3),
      U("trunc", x.trunc()).range(-5, 5).fwd(),
      U("ceil", x.ceil()).range(-5, 5).fwd(),
      U("floor", x.floor()).range(-5, 5).fwd(),
      U("round", x.round()).range(-5, 5).fwd(),
      U("square", x.square()),
      U("sign", x.sign()),
      U("abs", x.abs()).all_variants(),
      U("reciprocal", x.reciprocal()).range(0.5, 3),
      U2("elu", x.elu(), F_::elu(x)),
      U2("elu/alpha0.1", x.elu(0.1), F_::elu(x, F_::ELUFuncOptions().alpha(0.1))),
      U2("celu", x.celu(), F_::celu(x)),
      U2("celu/alpha2", x.celu(2.0), F_::celu(x, F_::CELUFuncOptions().alpha(2.0))),
      U2("swish", x.swish(), F_::silu(x)),
      U2("silu", x.silu(), F_::silu(x)),
      U2("relu6", x.relu6(), F_::relu6(x)).range(-3, 9),
      U2("hardswish", x.hardswish(), torch::hardswish(x)).range(-5, 5).tol(1e-6, 1e-6),
      U("tanh", x.tanh()).tol(1e-6, 1e-6),
      U("tanh/large", x.tanh()).range(300, 303),
      U("sinh", x.sinh()),
      U("cosh", x.cosh()),
      U("atanh", x.atanh()).range(-0.9, 0.9),
      U("asinh", x.asinh()),
      U("acosh", x.acosh()).range(1.1, 3),
      U2("hardtanh", x.hardtanh(), F_::hardtanh(x)),
      U2("hardtanh/0.5", x.hardtanh(-0.5, 0.5), F_::hardtanh(x, F_::HardtanhFuncOptions().min_val(-0.5).max_val(0.5))),
      U2("gelu", x.gelu(), torch::gelu(x, "tanh")).all_variants(),
      U2("quick_gelu", x.quick_gelu(), x * torch::sigmoid(1.702 * x)),
      U2("leakyrelu", x.leakyrelu(), F_::leaky_relu(x)),
      U2("leakyrelu/0.2", x.leakyrelu(0.2), F_::leaky_relu(x, F_::LeakyReLUFuncOptions().negative_slope(0.2))),
      U2("mish", x.mish(), F_::mish(x)),
      U2("softplus", x.softplus(), F_::softplus(x)).tol(1e-6, 1e-6),
      U2("softplus/beta2", x.softplus(2), F_::softplus(x, F_::SoftplusFuncOptions().beta(2))),
      U2("softsign", x.softsign(), F_::softsign(x)),
      U2("hardsigmoid", x.hardsigmoid(), torch::hardsigmoid(x)).range(-5, 5),
      // tinygrad's ops are also methods over chains: make sure the fused graph matches too
      U("chain/exp_log_relu", ((x * 2).exp() + 1).log().relu()).all_variants(),
  };
}

std::vector<Case> all_unary_cases() {
  std::vector<Case> cs;
  for (const Unary& u : unary_ops())
    for (Case& c : unary_cases(u)) cs.push_back(std::move(c));
  // exact values where the op has a kink or a tie
  cs.push_back(same("relu/exact", {V({3}, {-1, 0, 1})}, [](const auto& x) { return x[0].relu(); }));
  cs.push_back(same("abs/exact", {V({3}, {-1, 0, 1})}, [](const auto& x) { return x[0].abs(); }));
  cs.push_back(same("sign/exact", {V({3}, {-1, 0, 1})}, [](const auto& x) { return x[0].sign(); }));
  cs.push_back(same("round/half_even", {V({8}, {2.5, -1.5, 0.5, -0.5, 1.5, 3.5, -2.5, 1.499})},
                    [](const auto& x) { return x[0].round(); }).fwd());
  cs.push_back(same("floor_ceil_trunc/exact", {V({6}, {1.5, -1.5, 2.0, -2.0, 0.0, -0.2})},
                    [](const auto& x) { return x[0].floor() + x[0].ceil() * 10 + x[0].trunc() * 100; }).fwd());
  cs.push_back(same("exp/naninf", {V({4}, {nan, inf, -inf, 0})}, [](const auto& x) { return x[0].exp(); }).fwd());
  cs.push_back(same("log/naninf", {V({5}, {nan, inf, -1, 0, 1})}, [](const auto& x) { return x[0].log(); }).fwd());
  cs.push_back(same("sqrt/naninf", {V({4}, {nan, inf, -1, 0})}, [](const auto& x) { return x[0].sqrt(); }).fwd());
  cs.push_back(same("sin/naninf", {V({3}, {nan, inf, -inf})}, [](const auto& x) { return x[0].sin(); }).fwd());
  return cs;
}

}  // namespace

TEST(Conformance, Unary) { EXPECT_EQ(run_cases("unary", all_unary_cases()), 0); }
