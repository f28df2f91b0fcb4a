// The harness itself must fail cases that differ: in values, shape, dtype class, nan positions or
// gradients (these cases are checked directly and don't count in the suite's totals).
#include <gtest/gtest.h>

#include <cmath>

#include "harness.hpp"

using namespace conf;

TEST(ConformanceHarness, PassesAgreeingCase) {
  EXPECT_EQ(check_case(same("ok", {F({3, 4}), F({4})}, FN((x[0] * x[1]).relu()))), "");
}

TEST(ConformanceHarness, CatchesWrongValues) {
  std::string err = check_case(pair("bad", {F({3, 4})}, TG(x[0] * 2), TH(x[0] * 2.01)));
  EXPECT_NE(err.find("forward"), std::string::npos) << err;
  EXPECT_NE(err.find("max abs err"), std::string::npos) << err;
}

TEST(ConformanceHarness, CatchesWrongShapeAndDtypeClass) {
  EXPECT_NE(check_case(pair("shape", {F({3, 4})}, TG(x[0]), TH(x[0].t()))).find("shape mismatch"), std::string::npos);
  EXPECT_NE(check_case(pair("dtype", {F({3, 4})}, TG(x[0] > 0), TH(x[0]))).find("dtype class"), std::string::npos);
}

TEST(ConformanceHarness, CatchesNanPositions) {
  std::string err = check_case(pair("nan", {V({2}, {1, 2})}, TG(x[0] * NAN), TH(x[0] * 1.0)).fwd());
  EXPECT_NE(err.find("differ"), std::string::npos) << err;
}

TEST(ConformanceHarness, CatchesWrongGradient) {
  // same forward values, gradient 1 instead of 2
  std::string err = check_case(pair("grad", {F({3, 4})}, TG(x[0] + x[0].detach()), TH(x[0] * 2)));
  EXPECT_NE(err.find("grad of input 0"), std::string::npos) << err;
}

TEST(ConformanceHarness, ReportsTgExceptions) {
  std::string err = check_case(pair("throws", {F({3, 4})}, TG(x[0].reshape({5})), TH(x[0])));
  EXPECT_NE(err.find("tg forward threw"), std::string::npos) << err;
}
