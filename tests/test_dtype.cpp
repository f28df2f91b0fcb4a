#include <gtest/gtest.h>

#include <sstream>
#include <cmath>
#include <cstring>

#include "tg/tg.hpp"

using namespace tg;

TEST(DType, Basics) {
  EXPECT_EQ(dtypes::float32.itemsize(), 4);
  EXPECT_EQ(dtypes::float32.vec(4).itemsize(), 16);
  EXPECT_EQ(dtypes::float32.vec(4).name(), "float4");
  EXPECT_EQ(dtypes::float32.str(), "dtypes.float");
  EXPECT_EQ(dtypes::uint8.name(), "unsigned char");
  EXPECT_EQ(dtypes::float32.ptr_to().str(), "PtrDType(dtypes.float)");
  EXPECT_TRUE(dtypes::bfloat16.is_float());
  EXPECT_TRUE(dtypes::uint64.is_unsigned());
  EXPECT_TRUE(dtypes::int8.is_int());
  EXPECT_FALSE(dtypes::bool_.is_int());
  EXPECT_THROW(dtypes::float32.vec(4).vec(2), Error);
  EXPECT_THROW(dtypes::from_name("float33"), Error);
  EXPECT_EQ(dtypes::from_name("half"), dtypes::float16);
}

TEST(DType, MinMaxAsConst) {
  EXPECT_EQ(std::get<int64_t>(dtypes::min(dtypes::int8)), -128);
  EXPECT_EQ(std::get<int64_t>(dtypes::max(dtypes::int8)), 127);
  EXPECT_EQ(std::get<int64_t>(dtypes::max(dtypes::uint16)), 65535);
  EXPECT_EQ(std::get<int64_t>(dtypes::min(dtypes::int64)), INT64_MIN);
  EXPECT_EQ(std::get<int64_t>(dtypes::max(dtypes::int32)), 2147483647);
  EXPECT_TRUE(std::get<bool>(dtypes::max(dtypes::bool_)));
  EXPECT_TRUE(std::isinf(std::get<double>(dtypes::min(dtypes::float32))));
  EXPECT_EQ(std::get<int64_t>(dtypes::as_const(int64_t{300}, dtypes::uint8)), 44);
  EXPECT_EQ(std::get<int64_t>(dtypes::as_const(int64_t{200}, dtypes::int8)), -56);
  EXPECT_EQ(std::get<int64_t>(dtypes::as_const(2.7, dtypes::int32)), 2);
  EXPECT_EQ(std::get<double>(dtypes::as_const(int64_t{3}, dtypes::float32)), 3.0);
  EXPECT_TRUE(std::get<bool>(dtypes::as_const(0.5, dtypes::bool_)));
  EXPECT_EQ(const_str(ConstType(2.0)), "2.0");
  EXPECT_EQ(const_str(ConstType(0.1)), "0.1");
}

// Every promotion pair against tinygrad 0.9.2's lattice, written out as its result table.
TEST(DType, PromotionEveryPair) {
  // rows/cols in priority order: bool i8 u8 i16 u16 i32 u32 i64 u64 f16 bf16 f32 f64
  const char* table[13] = {
      "b i8 u8 i16 u16 i32 u32 i64 u64 f16 bf16 f32 f64",
      "i8 i8 i16 i16 i32 i32 i64 i64 f16 f16 bf16 f32 f64",
      "u8 i16 u8 i16 u16 i32 u32 i64 u64 f16 bf16 f32 f64",
      "i16 i16 i16 i16 i32 i32 i64 i64 f16 f16 bf16 f32 f64",
      "u16 i32 u16 i32 u16 i32 u32 i64 u64 f16 bf16 f32 f64",
      "i32 i32 i32 i32 i32 i32 i64 i64 f16 f16 bf16 f32 f64",
      "u32 i64 u32 i64 u32 i64 u32 i64 u64 f16 bf16 f32 f64",
      "i64 i64 i64 i64 i64 i64 i64 i64 f16 f16 bf16 f32 f64",
      "u64 f16 u64 f16 u64 f16 u64 f16 u64 f16 bf16 f32 f64",
      "f16 f16 f16 f16 f16 f16 f16 f16 f16 f16 f32 f32 f64",
      "bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16 f32 bf16 f32 f64",
      "f32 f32 f32 f32 f32 f32 f32 f32 f32 f32 f32 f32 f64",
      "f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 f64"};
  auto parse = [](const std::string& s) {
    static const std::pair<const char*, DType> m[] = {{"b", dtypes::bool_}, {"i8", dtypes::int8}, {"u8", dtypes::uint8},
        {"i16", dtypes::int16}, {"u16", dtypes::uint16}, {"i32", dtypes::int32}, {"u32", dtypes::uint32},
        {"i64", dtypes::int64}, {"u64", dtypes::uint64}, {"f16", dtypes::float16}, {"bf16", dtypes::bfloat16},
        {"f32", dtypes::float32}, {"f64", dtypes::float64}};
    for (auto& [k, v] : m) if (s == k) return v;
    return dtypes::void_;
  };
  // the table's row 0 is bool's row; entries are least_upper_dtype(row, col)
  for (int i = 0; i < 13; i++) {
    std::istringstream in(table[i]);
    std::string tok;
    for (int j = 0; j < 13; j++) {
      in >> tok;
      DType a = dtypes::all()[i], b = dtypes::all()[j];
      EXPECT_EQ(least_upper_dtype(a, b), parse(tok)) << a.str() << " " << b.str();
      EXPECT_EQ(least_upper_dtype(a, b), least_upper_dtype(b, a));
    }
  }
  EXPECT_EQ(least_upper_float(dtypes::int32), dtypes::float32);
  EXPECT_EQ(least_upper_float(dtypes::float16), dtypes::float16);
  EXPECT_EQ(sum_acc_dtype(dtypes::uint8), dtypes::uint32);
  EXPECT_EQ(sum_acc_dtype(dtypes::bool_), dtypes::int32);
  EXPECT_EQ(sum_acc_dtype(dtypes::int8), dtypes::int32);
  EXPECT_EQ(sum_acc_dtype(dtypes::int64), dtypes::int64);
  EXPECT_EQ(sum_acc_dtype(dtypes::float16), dtypes::float32);
  EXPECT_EQ(sum_acc_dtype(dtypes::float64), dtypes::float64);
}

TEST(Helpers, ContextOverridesEnv) {
  EXPECT_EQ(tg::getenv("TG_TEST_VAR_XYZ", 7), 7);
  {
    Context ctx({{"TG_TEST_VAR_XYZ", 3}});
    EXPECT_EQ(tg::getenv("TG_TEST_VAR_XYZ"), 3);
    {
      Context inner({{"TG_TEST_VAR_XYZ", 5}});
      EXPECT_EQ(tg::getenv("TG_TEST_VAR_XYZ"), 5);
    }
    EXPECT_EQ(tg::getenv("TG_TEST_VAR_XYZ"), 3);
  }
  EXPECT_EQ(tg::getenv("TG_TEST_VAR_XYZ", 7), 7);
  Context bad(std::map<std::string, std::string>{{"TG_TEST_VAR_XYZ", "abc"}});
  EXPECT_THROW(tg::getenv("TG_TEST_VAR_XYZ"), Error);
}

// real-valued settings (BEAM_BUDGET, BEAM_FINAL_MARGIN): a number or the default; anything else a tg::Error naming it
TEST(Helpers, GetenvFloatParsesOrNamesTheSetting) {
  EXPECT_EQ(tg::getenv_float("TG_TEST_FLOAT_XYZ", 0.75), 0.75);
  {
    Context ctx(std::map<std::string, std::string>{{"TG_TEST_FLOAT_XYZ", "2.5e-1"}});
    EXPECT_EQ(tg::getenv_float("TG_TEST_FLOAT_XYZ", 0.75), 0.25);
  }
  for (const char* bad : {"fast", "0.5s", "1,5"}) {
    Context ctx(std::map<std::string, std::string>{{"TG_TEST_FLOAT_XYZ", bad}});
    try {
      tg::getenv_float("TG_TEST_FLOAT_XYZ", 0.75);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("TG_TEST_FLOAT_XYZ=" + std::string(bad)), std::string::npos) << e.what();
    }
  }
}

// bfloat16 on the CPU (no __bf16 arithmetic in clang 14 / gcc 12 on x86): casts go through the bits,
// float -> bfloat16 rounds to nearest even, keeps inf and NaN; bfloat16 -> float is exact
TEST(DType, BFloat16CastsOnTheCpu) {
  std::vector<float> xs{1.5f, 2.25f, -3.f, 1.00390625f, 1.01171875f, INFINITY, -INFINITY, NAN, 3.4e38f, 1e-40f, 0.1f};
  Tensor b = Tensor::from<float>(xs, {11}, Opts{{}, "CPU", {}}).cast(dtypes::bfloat16);
  EXPECT_EQ(b.dtype(), dtypes::bfloat16);
  std::vector<uint16_t> want{0x3fc0, 0x4010, 0xc040, 0x3f80, 0x3f82, 0x7f80, 0xff80, 0x7fc0, 0x7f80, 0x0001, 0x3dcd};
  EXPECT_EQ(b.bitcast(dtypes::uint16).tolist<uint16_t>(), want);
  std::vector<float> back = (b.cast(dtypes::float32) * 2).tolist<float>();
  for (size_t i = 0; i < want.size(); i++) {
    uint32_t bits = uint32_t(want[i]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) EXPECT_TRUE(std::isnan(back[i]));
    else EXPECT_EQ(back[i], f * 2) << i;
  }
  // to other dtypes as well, through float32
  EXPECT_EQ(b.shrink({{0, 3}}).cast(dtypes::int32).tolist<int32_t>(), (std::vector<int32_t>{1, 2, -3}));
}

// float16 exp on the CPU is computed in float (clang's __fp16), so 2^23 and 2^-23 don't round to
// inf and 0 by themselves: the transcendental rewrite must map the ends explicitly (tinygrad's
// bounds: below -22 is 0, from 23 up is inf).
TEST(DType, HalfExp2EndsOnTheCpu) {
  std::vector<float> v = {-40, -23, -22, -14.5f, 0, 3, 16, 23, 30, INFINITY, -INFINITY, NAN};
  // on the CPU (the default device is CUDA on a GPU machine, whose fp16 exp2 has its own ends)
  std::vector<float> y = (Tensor::from(v, {int64_t(v.size())}, Opts{{}, "CPU", {}}).half() * float(M_LN2)).exp().cast(dtypes::float32).tolist<float>();
  EXPECT_EQ(y[0], 0.f);
  EXPECT_EQ(y[1], 0.f);
  EXPECT_NEAR(y[2], std::exp2(-22.f), 1e-9);
  EXPECT_NEAR(y[3], std::exp2(-14.5f), 1e-7);
  EXPECT_NEAR(y[4], 1.f, 1e-3);
  EXPECT_NEAR(y[5], 8.f, 8e-3);
  EXPECT_NEAR(y[6], 65536.f, 66.f);
  for (int i : {7, 8, 9}) EXPECT_EQ(y[i], INFINITY) << v[i];
  EXPECT_EQ(y[10], 0.f);
  EXPECT_TRUE(std::isnan(y[11]));
}
