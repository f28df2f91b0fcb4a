// Shared helpers for the Tensor tests.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tg/tg.hpp"

namespace tgt {
using tg::Tensor;
inline Tensor F(std::vector<float> v, tg::Shape s) { return Tensor::from<float>(v, s); }
inline Tensor I(std::vector<int32_t> v, tg::Shape s) { return Tensor::from<int32_t>(v, s); }
inline std::vector<float> vals(const Tensor& t) { return t.tolist<float>(); }
inline std::vector<int32_t> ivals(const Tensor& t) { return t.tolist<int32_t>(); }
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
    else EXPECT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "at " << i;
  }
}
}  // namespace tgt
