// Binary and ternary elementwise ops against torch: arithmetic with broadcasting and scalar
// operands (both sides), pow, maximum/minimum, comparisons, where, masked_fill, lerp, clip,
// integer and bitwise ops, bool logic, nan/inf propagation.
#include <gtest/gtest.h>

#include <cmath>

#include "harness.hpp"

using namespace conf;

namespace {

constexpr double inf = INFINITY, nan = NAN;

// x op y over the broadcasting / non-contiguous / 0-d / zero-size shapes; y away from 0 for div
template <class Fn>
void arith(std::vector<Case>& cs, const std::string& name, Fn fn, double ylo = -2, double yhi = 2) {
  auto c = [&](const std::string& tag, std::vector<int64_t> a, std::vector<int64_t> b) {
    cs.push_back(same(name + "/" + tag, {F(a), F(b, ylo, yhi)}, fn));
  };
  c("same", {4, 5}, {4, 5});
  c("0d", {}, {});
  c("bcast_col", {4, 5}, {4, 1});
  c("bcast_row", {4, 5}, {5});
  c("bcast_0d", {4, 5}, {});
  c("bcast_both", {3, 1, 5}, {1, 4, 1});
  c("zero_size", {2, 0}, {2, 0});
  c("size1", {1, 1}, {1, 1});
  cs.push_back(same(name + "/permuted", {F({5, 4}), F({4, 5}, ylo, yhi)},
                    [fn](const auto& x) { return fn(std::vector{op::permute(x[0], {1, 0}), x[1]}); }));
  cs.push_back(same(name + "/shrunk_padded", {F({6, 5}), F({4, 3}, ylo, yhi)}, [fn](const auto& x) {
    return fn(std::vector{op::shrink(x[0], {{1, 5}, {0, 5}}), op::pad(x[1], {{0, 0}, {1, 1}}, 1.5)});
  }));
}

std::vector<Case> binary_cases() {
  std::vector<Case> cs;
  arith(cs, "add", FN(x[0] + x[1]));
  arith(cs, "sub", FN(x[0] - x[1]));
  arith(cs, "mul", FN(x[0] * x[1]));
  arith(cs, "div", FN(x[0] / x[1]), 0.5, 2);
  arith(cs, "maximum", FN(x[0].maximum(x[1])));
  arith(cs, "minimum", FN(x[0].minimum(x[1])));
  cs.push_back(same("add3", {F({4, 5}), F({4, 5}), F({4, 5})}, FN(x[0] + x[1] + x[2])));
  cs.push_back(same("topo/(x+x)*x", {F({4, 5})}, FN((x[0] + x[0]) * x[0])));
  cs.push_back(same("method/add", {F({4, 5}), F({4, 5})}, FN(x[0].add(x[1]))));
  cs.push_back(same("method/sub", {F({4, 5}), F({4, 5})}, FN(x[0].sub(x[1]))));
  cs.push_back(same("method/mul", {F({4, 5}), F({4, 5})}, FN(x[0].mul(x[1]))));
  cs.push_back(same("method/div", {F({4, 5}), F({4, 5}, 0.5, 2)}, FN(x[0].div(x[1]))));

  // scalar operands on either side
  cs.push_back(same("scalar/x+2", {F({4, 5})}, FN(x[0] + 2)));
  cs.push_back(same("scalar/2+x", {F({4, 5})}, FN(2 + x[0])));
  cs.push_back(same("scalar/x-2", {F({4, 5})}, FN(x[0] - 2)));
  cs.push_back(same("scalar/2-x", {F({4, 5})}, FN(2 - x[0])));
  cs.push_back(same("scalar/2-x/0d", {F({})}, FN(2 - x[0])));
  cs.push_back(same("scalar/x*2", {F({4, 5})}, FN(x[0] * 2)));
  cs.push_back(same("scalar/x*-1", {F({4, 5})}, FN(x[0] * -1)));
  cs.push_back(same("scalar/255*x", {F({4, 5})}, FN(255 * x[0])));
  cs.push_back(same("scalar/x/255", {F({4, 5})}, FN(x[0] / 255)));
  cs.push_back(same("scalar/x/2.5", {F({4, 5})}, FN(x[0] / 2.5)));
  cs.push_back(same("scalar/2/x", {F({4, 5}, 0.5, 2)}, FN(2 / x[0])));
  cs.push_back(same("scalar/1/x/0d", {F({}, 0.5, 2)}, FN(1.0 / x[0])));
  cs.push_back(same("naninf/x*inf", {F({4, 5})}, FN(x[0] * inf)).fwd());
  cs.push_back(same("naninf/x*-inf", {F({4, 5})}, FN(x[0] * -inf)).fwd());
  cs.push_back(same("naninf/x*nan", {F({4, 5})}, FN(x[0] * nan)).fwd());
  cs.push_back(same("naninf/x/inf", {F({4, 5})}, FN(x[0] / inf)).fwd());
  cs.push_back(same("naninf/inf/x", {F({4, 5})}, FN(inf / x[0])).fwd());
  cs.push_back(same("naninf/nan/x", {F({4, 5})}, FN(nan / x[0])).fwd());
  cs.push_back(same("naninf/x/0", {V({3}, {-1, 0, 1})}, FN(x[0] / 0.0)).fwd());

  // pow
  cs.push_back(same("pow/tensor", {F({4, 5}, 0.5, 2), F({4, 5})}, FN(x[0].pow(x[1]))));
  cs.push_back(same("pow/0", {F({4, 5})}, FN(x[0].pow(0))));
  cs.push_back(same("pow/1", {F({4, 5})}, FN(x[0].pow(1))));
  cs.push_back(same("pow/2", {F({4, 5})}, FN(x[0].pow(2))));
  cs.push_back(same("pow/3", {F({4, 5})}, FN(x[0].pow(3))));
  cs.push_back(same("pow/-2", {F({4, 5}, 0.5, 2)}, FN(x[0].pow(-2))));
  cs.push_back(same("pow/0.5", {F({4, 5}, 0.1, 2)}, FN(x[0].pow(0.5))));
  cs.push_back(same("pow/3/negative_base", {F({4, 5}, -3, -1)}, FN(x[0].pow(3))).tol(1e-5));
  cs.push_back(same("pow/2/0d", {F({})}, FN(x[0].pow(2))));
  cs.push_back(pair("pow/2^x", {F({4, 5})}, TG(x[0].pow(2.0, true)), TH(torch::pow(2.0, x[0]))));
  cs.push_back(pair("pow/(-2)^x", {V({6}, {-2, -1, 0, 1, 2, 3})}, TG(x[0].pow(-2.0, true)), TH(torch::pow(-2.0, x[0]))).fwd());
  cs.push_back(pair("pow/0^x", {V({6}, {-2, -1, 0, 1, 2, 3})}, TG(x[0].pow(0.0, true)), TH(torch::pow(0.0, x[0]))).fwd());

  // maximum / minimum with scalars and ties (tie gradients split in half in both)
  cs.push_back(pair("maximum/scalar", {F({4, 5})}, TG(x[0].maximum(0.5)), TH(torch::clamp_min(x[0], 0.5))));
  cs.push_back(pair("minimum/scalar", {F({4, 5})}, TG(x[0].minimum(0.5)), TH(torch::clamp_max(x[0], 0.5))));
  cs.push_back(same("maximum/ties", {V({4}, {1, 0, 3, -4}), V({4}, {-1, 0, 3, 0})}, FN(x[0].maximum(x[1]))));
  cs.push_back(same("minimum/ties", {V({4}, {1, 0, 3, -4}), V({4}, {-1, 0, 3, 0})}, FN(x[0].minimum(x[1]))));
  cs.push_back(same("maximum/bool", {B({5}), B({5})}, FN(x[0].maximum(x[1]))));
  cs.push_back(same("maximum/int", {I({4, 5}), I({4, 5})}, FN(x[0].maximum(x[1]))));

  // comparisons (bool outputs; values with exact ties)
  std::vector<double> a{0, 1, 2, -1, 3.5, 2}, b{2, 1, 0, -1, 3.5, 2.5};
  cs.push_back(same("cmp/lt", {V({6}, a), V({6}, b)}, FN(x[0] < x[1])));
  cs.push_back(same("cmp/le", {V({6}, a), V({6}, b)}, FN(x[0] <= x[1])));
  cs.push_back(same("cmp/gt", {V({6}, a), V({6}, b)}, FN(x[0] > x[1])));
  cs.push_back(same("cmp/ge", {V({6}, a), V({6}, b)}, FN(x[0] >= x[1])));
  cs.push_back(same("cmp/eq", {V({6}, a), V({6}, b)}, FN(x[0] == x[1])));
  cs.push_back(same("cmp/ne", {V({6}, a), V({6}, b)}, FN(x[0] != x[1])));
  cs.push_back(same("cmp/lt/int", {I({4, 5}, -3, 3), I({4, 5}, -3, 3)}, FN(x[0] < x[1])));
  cs.push_back(same("cmp/eq/int_scalar", {I({4, 5}, -3, 3)}, FN(x[0] == 2)));
  cs.push_back(same("cmp/gt/scalar", {F({4, 5})}, FN(x[0] > 0.5)));
  cs.push_back(same("cmp/lt/scalar_left", {F({4, 5})}, FN(0.5 < x[0])));
  cs.push_back(same("cmp/ge/bcast", {F({4, 5}), F({5})}, FN(x[0] >= x[1])));
  cs.push_back(same("cmp/eq/bool", {B({6}), B({6})}, FN(x[0] == x[1])));
  cs.push_back(same("cmp/ne/nan", {V({3}, {nan, 1, inf}), V({3}, {nan, 1, inf})}, FN(x[0] != x[1])));
  // a comparison used as a 0/1 factor: gradients flow through the other operand (test_cmp_lt_backwards)
  cs.push_back(same("cmp/lt_mul_backward", {F({4, 5})}, FN(x[0] * (x[0] < 0))));
  cs.push_back(same("cmp/ne_mul_backward", {V({5}, {0, 1, -2, 0, 3})}, FN(x[0] * (x[0] != 0))));
  cs.push_back(pair("cmp/where_backward", {F({4, 5}), F({4, 5})}, TG((x[0] < x[1]).where(x[0], x[1])),
                    TH(torch::where(x[0] < x[1], x[0], x[1]))));
  // (tinygrad v0.9.2 raised here, tensor.py:767 'tensor has no grad' for the Less node; we follow torch:
  // a comparison's result requires no grad)

  // where / masked_fill / lerp / clip
  cs.push_back(same("where", {B({4, 5}), F({4, 5}), F({4, 5})}, FN(op::where(x[0], x[1], x[2]))));
  cs.push_back(same("where/bcast", {B({4, 1}), F({5}), F({4, 5})}, FN(op::where(x[0], x[1], x[2]))));
  cs.push_back(same("where/permuted", {B({5, 4}), F({4, 5}), F({5, 4})},
                    FN(op::where(op::permute(x[0], {1, 0}), x[1], op::permute(x[2], {1, 0})))));
  // the condition comes from a graded tensor (see cmp/where_backward)
  cs.push_back(pair("where/scalars", {F({4, 5})}, TG((x[0] > 0).where(x[0], 0.0)),
                    TH(torch::where(x[0] > 0, x[0], torch::zeros({})))));
  cs.push_back(pair("where/scalar_branches", {B({4, 5})}, TG(x[0].where(1.5, -2.0)),
                    TH(torch::where(x[0], torch::full({}, 1.5), torch::full({}, -2.0)))));
  cs.push_back(pair("where/int", {B({4, 5}), I({4, 5}), I({4, 5})}, TG(x[0].where(x[1], x[2])),
                    TH(torch::where(x[0], x[1], x[2]))));
  cs.push_back(same("masked_fill", {F({4, 5}), B({4, 5})}, FN(x[0].masked_fill(x[1], 3.5))));
  cs.push_back(same("masked_fill/bcast", {F({4, 5}), B({1, 5})}, FN(x[0].masked_fill(x[1], -1.0))));
  cs.push_back(same("masked_fill/-inf", {F({4, 5}), B({4, 5})}, FN(x[0].masked_fill(x[1], -inf))).fwd());
  cs.push_back(same("lerp/scalar", {F({4, 5}), F({4, 5})}, FN(x[0].lerp(x[1], 0.3))));
  cs.push_back(same("lerp/tensor", {F({4, 5}), F({4, 5}), F({4, 5}, 0, 1)}, FN(x[0].lerp(x[1], x[2]))));
  cs.push_back(same("lerp/bcast", {F({4, 5}), F({5}), F({4, 1}, 0, 1)}, FN(x[0].lerp(x[1], x[2]))));
  cs.push_back(same("clip", {F({4, 5})}, FN(x[0].clip(-0.5, 0.5))));
  cs.push_back(same("clip/0d", {F({})}, FN(x[0].clip(-0.5, 0.5))));
  cs.push_back(pair("clip/min_only", {F({4, 5})}, TG(x[0].clip(0.25, std::nullopt)), TH(x[0].clip(0.25))));
  cs.push_back(pair("clip/max_only", {F({4, 5})}, TG(x[0].clip(std::nullopt, 0.25)),
                    TH(x[0].clip(c10::nullopt, 0.25))));
  cs.push_back(same("clamp", {F({4, 5})}, FN(x[0].clamp(-1, 1))));
  return cs;
}

std::vector<Case> int_cases() {
  std::vector<Case> cs;
  cs.push_back(same("int/add", {I({4, 5}), I({4, 5})}, FN(x[0] + x[1])));
  cs.push_back(same("int/sub_scalar", {I({4, 5})}, FN(x[0] - 3)));
  cs.push_back(same("int/mul", {I({4, 5}), I({4, 5})}, FN(x[0] * x[1])));
  cs.push_back(same("int/neg", {I({4, 5})}, FN(-x[0])));
  cs.push_back(same("int/truediv", {I({2, 3}, -10, 10), I({2, 3}, 1, 5)}, FN(x[0] / x[1])));
  cs.push_back(same("int/truediv_scalar", {I({2, 3})}, FN(x[0] / 2)));
  cs.push_back(pair("int/idiv_trunc", {V({6}, {5, -6, 7, -7, 0, 9}, Kind::I32), V({6}, {2, 4, -3, -2, 3, 3}, Kind::I32)},
                    TG(x[0].div(x[1], false)), TH(torch::div(x[0], x[1], "trunc"))));
  cs.push_back(same("int/float_promotion", {I({4, 5}), F({4, 5})}, FN(x[0] + x[1])));
  cs.push_back(same("int/float_scalar", {I({4, 5})}, FN(x[0] * 2.5)));
  cs.push_back(same("int/bcast", {I({4, 5}), I({5})}, FN(x[0] * x[1])));
  cs.push_back(same("bitwise/and", {I({4, 5}, -100, 100), I({4, 5}, -100, 100)}, FN(x[0] & x[1])));
  cs.push_back(same("bitwise/or", {I({4, 5}, -100, 100), I({4, 5}, -100, 100)}, FN(x[0] | x[1])));
  cs.push_back(same("bitwise/xor", {I({4, 5}, -100, 100), I({4, 5}, -100, 100)}, FN(x[0] ^ x[1])));
  cs.push_back(same("bitwise/and_scalar", {I({4, 5}, 0, 10000)}, FN(x[0] & 0x1337)));
  cs.push_back(same("bitwise/or_scalar", {I({4, 5}, 0, 10000)}, FN(x[0] | 0x1337)));
  cs.push_back(same("bitwise/xor_scalar", {I({4, 5}, 0, 10000)}, FN(x[0] ^ 0x1337)));
  cs.push_back(same("bitwise/scalar_xor", {I({4, 5}, 0, 10000)}, FN(0x1337 ^ x[0])));
  cs.push_back(same("bitwise/u8_and", {U8({4, 5}), U8({4, 5})}, FN(x[0] & x[1])));
  cs.push_back(pair("bitwise/method_and", {I({6}, 0, 255), I({6}, 0, 255)}, TG(x[0].bitwise_and(x[1])),
                    TH(torch::bitwise_and(x[0], x[1]))));
  cs.push_back(pair("shift/lshift_u8", {U8({4, 5}, 0, 63)}, TG(x[0] << 2), TH(x[0].__lshift__(2))));
  cs.push_back(pair("shift/lshift_u8_overflow", {U8({4, 5})}, TG(x[0].lshift(3)), TH(x[0].__lshift__(3))));
  cs.push_back(pair("shift/rshift_u8", {U8({4, 5})}, TG(x[0] >> 2), TH(x[0].__rshift__(2))));
  cs.push_back(pair("shift/rshift_u8_0", {U8({4, 5})}, TG(x[0].rshift(0)), TH(x[0].__rshift__(0))));
  cs.push_back(pair("shift/lshift_int32", {I({4, 5}, 0, 100)}, TG(x[0] << 2), TH(x[0].__lshift__(2)))
                   .skipped("tinygrad v0.9.2 rejects it: tensor.py:2636 asserts dtypes.is_unsigned in lshift (2648 in rshift)"));

  cs.push_back(same("bool/xor", {B({6}), B({6})}, FN(x[0] ^ x[1])));
  cs.push_back(same("bool/and", {B({6}), B({6})}, FN(x[0] & x[1]))
                   .skipped("tinygrad v0.9.2 rejects it: tensor.py:2609 asserts dtypes.is_int in bitwise_and, which excludes bool"));
  cs.push_back(same("bool/or", {B({6}), B({6})}, FN(x[0] | x[1]))
                   .skipped("tinygrad v0.9.2 rejects it: tensor.py:2624 asserts dtypes.is_int in bitwise_or, which excludes bool"));
  cs.push_back(same("bool/logical_not", {B({6})}, FN(x[0].logical_not())));
  cs.push_back(same("bool/logical_not_float", {V({4}, {1, 2, 0, 0.5})}, FN(x[0].logical_not())));
  cs.push_back(pair("bool/neg", {B({6})}, TG(-x[0]), TH(x[0].logical_not())));
  cs.push_back(same("bool/add_int", {B({6}), I({6})}, FN(x[0] + x[1])));
  cs.push_back(same("bool/mul_float", {B({6}), F({6})}, FN(x[0] * x[1])));
  return cs;
}

}  // namespace

TEST(Conformance, Binary) { EXPECT_EQ(run_cases("binary", binary_cases()), 0); }
TEST(Conformance, IntBitwiseBool) { EXPECT_EQ(run_cases("int", int_cases()), 0); }
