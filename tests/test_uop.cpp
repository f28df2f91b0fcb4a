#include <gtest/gtest.h>

#include "tg/helpers.hpp"
#include "uop/uop.hpp"

using namespace tg;

TEST(UOp, InternedIdentity) {
  UOp a(Ops::DEFINE_VAR, dtypes::int32, {UOp::const_(dtypes::int32, int64_t{0}), UOp::const_(dtypes::int32, int64_t{10})}, std::string("a"));
  UOp x = a + 1, y = a + 1;
  EXPECT_EQ(x, y);
  EXPECT_EQ(x.get(), y.get());
  EXPECT_NE(x, a + 2);
  EXPECT_EQ(std::get<int64_t>(x.vmin()), 1);
  EXPECT_EQ(std::get<int64_t>(x.vmax()), 11);
  EXPECT_EQ((a * 40 + a).render(), "((a*40)+a)");
}

TEST(UOp, FreedWhenUnreferenced) {
  size_t before = uop_live_count();
  {
    UOp v(Ops::DEFINE_VAR, dtypes::int32, {UOp::const_(dtypes::int32, int64_t{0}), UOp::const_(dtypes::int32, int64_t{10})}, std::string("v"));
    std::vector<UOp> keep;
    for (int64_t i = 0; i < 200000; i++) keep.push_back(v * i + (i % 7));
    EXPECT_GT(uop_live_count(), before + 200000);
    UOp chain = v;
    for (int i = 0; i < 1000000; i++) chain = chain + 1;   // deep chain: freed without recursion
  }
  EXPECT_EQ(uop_live_count(), before);
}

TEST(UOp, ExecAlu) {
  EXPECT_EQ(std::get<int64_t>(exec_alu(BinaryOps::ADD, dtypes::int8, int64_t{127}, int64_t{1})), -128);
  EXPECT_EQ(std::get<int64_t>(exec_alu(BinaryOps::IDIV, dtypes::int32, int64_t{-7}, int64_t{2})), -3);
  EXPECT_EQ(std::get<int64_t>(exec_alu(BinaryOps::MOD, dtypes::int32, int64_t{-7}, int64_t{2})), -1);
  EXPECT_TRUE(std::get<bool>(exec_alu(BinaryOps::CMPLT, dtypes::bool_, int64_t{1}, int64_t{2})));
  EXPECT_EQ(std::get<double>(exec_alu(UnaryOps::SQRT, dtypes::float32, 4.0)), 2.0);
  EXPECT_EQ(std::get<int64_t>(exec_alu(BinaryOps::SHR, dtypes::uint8, int64_t{255}, int64_t{4})), 15);
}

TEST(UOp, PrettyPrint) {
  UOp c = UOp::const_(dtypes::int32, int64_t{2});
  UOp s = c + c;
  EXPECT_EQ(s.str(), "UOp(UOps.ALU, dtypes.int, arg=BinaryOps.ADD, src=(\n  x0:=UOp(UOps.CONST, dtypes.int, arg=2, src=()),\n   x0,))");
}

TEST(UOp, Eval) {
  UOp a(Ops::DEFINE_VAR, dtypes::int32, {UOp::const_(dtypes::int32, int64_t{0}), UOp::const_(dtypes::int32, int64_t{10})}, std::string("a"));
  UOp e = (a * 3 + 7) % 5;
  EXPECT_EQ(std::get<int64_t>(eval_uop(e, {{"a", 4}})), 4);
  EXPECT_TRUE(std::get<bool>(eval_uop(a.lt(UOp::const_(dtypes::int32, int64_t{5})), {{"a", 4}})));
  EXPECT_THROW(eval_uop(e, {}), Error);
}
