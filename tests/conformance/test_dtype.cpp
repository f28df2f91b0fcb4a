// dtypes and creation against torch: casts between float/int/bool (gradients through float
// casts), bitcast, half-precision compute (torch computes in float32 on the same half-rounded
// inputs), and the deterministic creation functions (arange, eye, zeros/ones/full, *_like).
#include <gtest/gtest.h>

#include "harness.hpp"

using namespace conf;
using tg::Tensor;
namespace dt = tg::dtypes;

namespace {

std::vector<Case> cast_cases() {
  std::vector<Case> cs;
  cs.push_back(pair("cast/float_to_int", {F({4, 5}, -5, 5)}, TG(x[0].cast(dt::int32)), TH(x[0].to(torch::kInt32))));
  cs.push_back(pair("cast/float_to_uint8", {F({4, 5}, 0, 200)}, TG(x[0].cast(dt::uint8)), TH(x[0].to(torch::kUInt8))));
  cs.push_back(pair("cast/int_to_float", {I({4, 5})}, TG(x[0].cast(dt::float32)), TH(x[0].to(torch::kFloat32))));
  cs.push_back(pair("cast/float_to_bool", {V({5}, {0, 0.5, -1, 0, 2})}, TG(x[0].cast(dt::bool_)), TH(x[0].to(torch::kBool))));
  cs.push_back(pair("cast/int_to_bool", {I({4, 5}, -2, 2)}, TG(x[0].cast(dt::bool_)), TH(x[0].to(torch::kBool))));
  cs.push_back(pair("cast/bool_to_float", {B({4, 5})}, TG(x[0].cast(dt::float32)), TH(x[0].to(torch::kFloat32))));
  cs.push_back(pair("cast/bool_to_int", {B({4, 5})}, TG(x[0].cast(dt::int32)), TH(x[0].to(torch::kInt32))));
  cs.push_back(pair("cast/int_to_int64", {I({4, 5})}, TG(x[0].cast(dt::int64)), TH(x[0].to(torch::kInt64))));
  cs.push_back(pair("cast/float_to_float64_grad", {F({4, 5})}, TG(x[0].cast(dt::float64) * 3), TH(x[0].to(torch::kFloat64) * 3)));
  cs.push_back(pair("cast/float_to_half_to_float_grad", {F({4, 5})}, TG(x[0].half().float_() * 2),
                    TH(x[0].to(torch::kHalf).to(torch::kFloat32) * 2)).tol(1e-6, 2e-3));
  cs.push_back(pair("cast/methods_int_", {F({4, 5}, -5, 5)}, TG(x[0].int_()), TH(x[0].to(torch::kInt32))));
  cs.push_back(pair("cast/methods_bool_", {I({4, 5}, -1, 1)}, TG(x[0].bool_()), TH(x[0].to(torch::kBool))));
  cs.push_back(pair("cast/methods_float_", {I({4, 5})}, TG(x[0].float_()), TH(x[0].to(torch::kFloat32))));
  cs.push_back(pair("cast/of_permuted", {F({3, 4}, -5, 5)}, TG(op::permute(x[0], {1, 0}).cast(dt::int32)),
                    TH(x[0].permute({1, 0}).to(torch::kInt32))));
  // NG: tinygrad refuses to bitcast a tensor that requires grad
  cs.push_back(pair("bitcast/float_to_int32", {NG(F({4, 5}))}, TG(x[0].bitcast(dt::int32)), TH(x[0].view(torch::kInt32))));
  cs.push_back(pair("bitcast/int32_to_float", {I({6}, 0, 1 << 20)}, TG(x[0].bitcast(dt::float32)), TH(x[0].view(torch::kFloat32))));
  cs.push_back(pair("bitcast/uint8_to_bool", {U8({6}, 0, 1)}, TG(x[0].bitcast(dt::bool_)), TH(x[0].view(torch::kBool))));
  return cs;
}

// half inputs against torch float32 math on the same (half-rounded) values
std::vector<Case> half_cases() {
  std::vector<Case> cs;
  cs.push_back(same("half/add", {H({4, 5}), H({4, 5})}, FN(x[0] + x[1])).tol(1e-3, 1e-3));
  cs.push_back(same("half/mul_scalar", {H({4, 5})}, FN(x[0] * 3)).tol(1e-3, 1e-3));
  cs.push_back(same("half/div", {H({4, 5}), H({4, 5}, 0.5, 2)}, FN(x[0] / x[1])).tol(1e-3, 2e-3));
  cs.push_back(same("half/exp", {H({4, 5})}, FN(x[0].exp())).tol(1e-2, 2e-3));
  cs.push_back(same("half/log", {H({4, 5}, 0.1, 3)}, FN(x[0].log())).tol(1e-2, 2e-3));
  cs.push_back(same("half/sqrt", {H({4, 5}, 0.1, 3)}, FN(x[0].sqrt())).tol(1e-3, 2e-3));
  cs.push_back(same("half/sum", {H({4, 5})}, FN(op::sum(x[0], axes({1})))).tol(1e-2, 5e-3));
  cs.push_back(same("half/max", {H({4, 5})}, FN(op::max(x[0], axes({0})))).tol(1e-3, 1e-3));
  cs.push_back(same("half/softmax", {H({4, 5})}, FN(x[0].softmax(-1))).tol(2e-3, 5e-3));
  cs.push_back(same("half/matmul", {H({8, 8}), H({8, 8})}, FN(x[0].matmul(x[1]))).tol(2e-2, 1e-2));
  cs.push_back(same("half/relu_cmp", {H({4, 5})}, FN(x[0].relu() > 0.5)));
  cs.push_back(same("half/mixed_with_float", {H({4, 5}), F({4, 5})}, FN(x[0] + x[1])).tol(1e-3, 1e-3).fwd());
  return cs;
}

Case creation(std::string name, std::function<tg::Tensor()> t, std::function<torch::Tensor()> th) {
  return pair(std::move(name), {}, [t](const std::vector<tg::Tensor>&) { return t(); },
              [th](const std::vector<torch::Tensor>&) { return th(); });
}

std::vector<Case> creation_cases() {
  std::vector<Case> cs;
  auto i32 = torch::TensorOptions().dtype(torch::kInt32);
  cs.push_back(creation("arange/10", [] { return Tensor::arange(10); }, [=] { return torch::arange(10, i32); }));
  cs.push_back(creation("arange/5_10_3", [] { return Tensor::arange(int64_t{5}, int64_t{10}, int64_t{3}); }, [=] { return torch::arange(5, 10, 3, i32); }));
  cs.push_back(creation("arange/10_5_-3", [] { return Tensor::arange(int64_t{10}, int64_t{5}, int64_t{-3}); }, [=] { return torch::arange(10, 5, -3, i32); }));
  cs.push_back(creation("arange/11_5_-3", [] { return Tensor::arange(int64_t{11}, int64_t{5}, int64_t{-3}); }, [=] { return torch::arange(11, 5, -3, i32); }));
  cs.push_back(creation("arange/empty", [] { return Tensor::arange(0); }, [=] { return torch::arange(0, i32); }));
  cs.push_back(creation("arange/float", [] { return Tensor::arange(5.5, 175.5, 2.5); }, [] { return torch::arange(5.5, 175.5, 2.5); }));
  cs.push_back(creation("arange/float_negative_step", [] { return Tensor::arange(-50.3, -380.2, -2.25); },
                        [] { return torch::arange(-50.3, -380.2, -2.25); }).tol(1e-4));
  cs.push_back(creation("eye/3", [] { return Tensor::eye(3); }, [] { return torch::eye(3); }));
  cs.push_back(creation("eye/3x5", [] { return Tensor::eye(3, 5); }, [] { return torch::eye(3, 5); }));
  cs.push_back(creation("eye/5x3", [] { return Tensor::eye(5, 3); }, [] { return torch::eye(5, 3); }));
  cs.push_back(creation("eye/0", [] { return Tensor::eye(0); }, [] { return torch::eye(0); }));
  cs.push_back(creation("zeros", [] { return Tensor::zeros({4, 5}); }, [] { return torch::zeros({4, 5}); }));
  cs.push_back(creation("zeros/0d", [] { return Tensor::zeros({}); }, [] { return torch::zeros({}); }));
  cs.push_back(creation("ones", [] { return Tensor::ones({4, 5}); }, [] { return torch::ones({4, 5}); }));
  cs.push_back(creation("full/float", [] { return Tensor::full({4, 5}, 2.5); }, [] { return torch::full({4, 5}, 2.5); }));
  cs.push_back(creation("full/int", [] { return Tensor::full({4, 5}, 4); }, [=] { return torch::full({4, 5}, 4, i32); }));
  cs.push_back(creation("full/bool", [] { return Tensor::full({2, 2}, true); }, [] { return torch::full({2, 2}, true); }));
  cs.push_back(creation("zeros/int_dtype", [] { return Tensor::zeros({3}, {.dtype = dt::int32}); }, [=] { return torch::zeros({3}, i32); }));
  cs.push_back(pair("full_like", {F({2, 3})}, TG(x[0].full_like(4.0)), TH(torch::full_like(x[0], 4.0))));
  cs.push_back(pair("zeros_like", {F({2, 3})}, TG(x[0].zeros_like()), TH(torch::zeros_like(x[0]))));
  cs.push_back(pair("ones_like", {F({2, 3})}, TG(x[0].ones_like()), TH(torch::ones_like(x[0]))));
  cs.push_back(pair("full_like/int", {I({2, 3})}, TG(x[0].full_like(4)), TH(torch::full_like(x[0], 4))));
  cs.push_back(pair("ones_like/grad_flows_through_mul", {F({2, 3})}, TG(x[0] * x[0].ones_like() * 2),
                    TH(x[0] * torch::ones_like(x[0]) * 2)));
  cs.push_back(pair("eye_flip_matmul", {}, TG(Tensor::eye(5).matmul(Tensor::eye(5).flip(0))),
                    TH(torch::eye(5).matmul(torch::eye(5).flip(0)))));
  cs.push_back(pair("arange_sum_collapse", {}, TG(Tensor::ones({64, 64}).sum(1)), TH(torch::ones({64, 64}).sum(1))));
  cs.push_back(pair("const_pad_sum", {}, TG(Tensor::ones({16, 16}).pad({{0, 0}, {0, 4}}).sum(1)),
                    TH(torch::constant_pad_nd(torch::ones({16, 16}), {0, 4}).sum(1))));
  return cs;
}

}  // namespace

TEST(Conformance, Casts) { EXPECT_EQ(run_cases("cast", cast_cases()), 0); }
TEST(Conformance, Half) { EXPECT_EQ(run_cases("half", half_cases()), 0); }
TEST(Conformance, Creation) { EXPECT_EQ(run_cases("creation", creation_cases()), 0); }
