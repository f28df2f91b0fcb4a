// View and ShapeTracker: tinygrad 0.9.2's printed results for the seed walk-through, view
// merging (with masks), simplify, invert, real_strides, to_indexed_uops and bad input.
#include <gtest/gtest.h>

#include "shape/shapetracker_arg.hpp"
#include "tg/helpers.hpp"
#include "tg/shapetracker.hpp"
#include "uop/symbolic.hpp"
#include "uop/uop.hpp"

using namespace tg;
using Strides = std::vector<std::optional<int64_t>>;
constexpr std::nullopt_t None = std::nullopt;

static int64_t eval_at(const UOp& u, const std::vector<int64_t>& idx) {
  std::unordered_map<std::string, int64_t> vars;
  for (size_t i = 0; i < idx.size(); i++) vars["idx" + std::to_string(i)] = idx[i];
  return const_to_int(eval_uop(u, vars));
}

// ---- seed 003 ----

TEST(ShapeTracker, SeedWalkThrough) {
  auto st = ShapeTracker::from_shape({10, 10}).permute({1, 0});
  EXPECT_EQ(st.str(), "ShapeTracker(views=(View(shape=(10, 10), strides=(1, 10), offset=0, mask=None, contiguous=False),))");
  st = st.reshape({5, 2, 5, 2});
  EXPECT_EQ(st.str(), "ShapeTracker(views=(View(shape=(5, 2, 5, 2), strides=(2, 1, 20, 10), offset=0, mask=None, contiguous=False),))");
  st = st.reshape({100});
  EXPECT_EQ(st.str(),
            "ShapeTracker(views=(View(shape=(5, 2, 5, 2), strides=(2, 1, 20, 10), offset=0, mask=None, contiguous=False), "
            "View(shape=(100,), strides=(1,), offset=0, mask=None, contiguous=True)))");
  EXPECT_EQ(st.simplify(), st);   // a transpose can't be flattened into one view
  // the index is ((idx0%10)*10)+(idx0//10) and always valid
  auto [idx, valid] = to_indexed_uops(st);
  for (int64_t i = 0; i < 100; i++) {
    EXPECT_EQ(eval_at(idx, {i}), (i % 10) * 10 + i / 10);
    EXPECT_EQ(eval_at(valid, {i}), 1);
  }
  EXPECT_EQ(idx->dtype, dtypes::int32);
  EXPECT_EQ(valid->dtype, dtypes::bool_);
  EXPECT_EQ(st.real_strides(), Strides{None});
  EXPECT_EQ(st.size(), 100u);
  EXPECT_FALSE(st.contiguous());
}

TEST(ShapeTracker, ToIndexedUopsTakesIdxs) {
  auto st = ShapeTracker::from_shape({3, 4}).permute({1, 0});
  UOp a(Ops::DEFINE_VAR, dtypes::int32, {UOp::const_(dtypes::int32, int64_t{0}), UOp::const_(dtypes::int32, int64_t{3})}, std::string("a"));
  UOp b(Ops::DEFINE_VAR, dtypes::int32, {UOp::const_(dtypes::int32, int64_t{0}), UOp::const_(dtypes::int32, int64_t{2})}, std::string("b"));
  auto [idx, valid] = to_indexed_uops(st, {a, b});
  EXPECT_EQ(const_to_int(eval_uop(idx, {{"a", 3}, {"b", 2}})), 2 * 4 + 3);
  EXPECT_THROW(to_indexed_uops(st, {a}), Error);
}

// ---- creation and printing ----

TEST(View, CreateCanonicalizes) {
  EXPECT_EQ(View::create({2, 3}, std::vector<int64_t>{3, 1}, 0, Mask{{0, 2}, {1, 2}}).str(),
            "View(shape=(2, 3), strides=(3, 0), offset=1, mask=((0, 2), (1, 2)), contiguous=False)");
  EXPECT_EQ(View::create({2, 3}, std::vector<int64_t>{3, 1}, 0, Mask{{0, 2}, {2, 2}}).str(),
            "View(shape=(2, 3), strides=(0, 0), offset=0, mask=((0, 0), (0, 0)), contiguous=False)");
  EXPECT_EQ(View::create({2, 3}, std::vector<int64_t>{3, 1}, 0, Mask{{0, 2}, {0, 3}}).mask, std::nullopt);
  EXPECT_TRUE(View::create({2, 3}, std::vector<int64_t>{3, 1}).contiguous);
  EXPECT_EQ(View::create({4, 1, 3}).strides, (std::vector<int64_t>{3, 0, 1}));
  EXPECT_EQ(View::create({4, 0, 3}).str(), "View(shape=(4, 0, 3), strides=(0, 0, 0), offset=0, mask=None, contiguous=True)");
  EXPECT_EQ(View::create({}).str(), "View(shape=(), strides=(), offset=0, mask=None, contiguous=True)");
}

TEST(View, EqualityAndHash) {
  View a = View::create({4, 5}).permute({1, 0}), b = View::create({4, 5}).permute({1, 0});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_FALSE(a == View::create({5, 4}));
}

// ---- reshape merging ----

TEST(ShapeTracker, PadThenReshapeKeepsOneView) {
  auto st = ShapeTracker::from_shape({4}).pad({{2, 2}}).reshape({4, 2});
  EXPECT_EQ(st.str(), "ShapeTracker(views=(View(shape=(4, 2), strides=(2, 1), offset=-2, mask=((1, 3), (0, 2)), contiguous=False),))");
  auto big = ShapeTracker::from_shape({1, 3, 1, 5, 3, 1}).pad({{0, 0}, {2, 2}, {0, 0}, {0, 0}, {0, 0}, {0, 0}}).reshape({1, 1, 1, 105, 1, 1});
  EXPECT_EQ(big.str(),
            "ShapeTracker(views=(View(shape=(1, 1, 1, 105, 1, 1), strides=(0, 0, 0, 1, 0, 0), offset=-30, "
            "mask=((0, 1), (0, 1), (0, 1), (30, 75), (0, 1), (0, 1)), contiguous=False),))");
}

TEST(ShapeTracker, SplittingBigMaskedReshape) {
  auto st = ShapeTracker::from_shape({1, 5, 1, 15, 1}).pad({{0, 0}, {0, 5}, {0, 0}, {0, 15}, {0, 0}}).reshape({10, 1, 30});
  st = st.permute({2, 1, 0}).reshape({2, 3, 5, 2, 5});
  ASSERT_EQ(st.views.size(), 1u);
  EXPECT_EQ(st.views[0].strides, (std::vector<int64_t>{0, 5, 1, 0, 15}));
  EXPECT_EQ(st.views[0].mask, (Mask{{0, 1}, {0, 3}, {0, 5}, {0, 1}, {0, 5}}));
}

TEST(ShapeTracker, MaskedReshapesStaySingleView) {
  auto st = ShapeTracker::from_shape({1, 1, 1, 4, 1, 3, 5, 1}).pad({{0, 4}, {0, 0}, {0, 0}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, {0, 0}});
  for (const Shape& s : {Shape{5, 6, 3, 5}, Shape{1, 1, 5, 6, 3, 5, 1, 1}, Shape{1, 5, 6, 1, 3, 1, 5, 1}}) {
    st = st.reshape(s);
    EXPECT_EQ(st.views.size(), 1u) << st.str();
  }
  auto zero = ShapeTracker::from_shape({1, 3, 2}).pad({{0, 0}, {0, 3}, {0, 0}}).shrink({{0, 1}, {3, 6}, {0, 2}}).reshape({3, 2});
  EXPECT_EQ(zero.views.size(), 1u);
  EXPECT_EQ(zero.views[0].mask, (Mask{{0, 0}, {0, 0}}));
}

TEST(ShapeTracker, ReshapeNeedsSecondView) {
  auto st = ShapeTracker::from_shape({3, 4}).pad({{1, 1}, {0, 2}}).reshape({30});
  EXPECT_EQ(st.str(),
            "ShapeTracker(views=(View(shape=(5, 6), strides=(4, 1), offset=-4, mask=((1, 4), (0, 4)), contiguous=False), "
            "View(shape=(30,), strides=(1,), offset=0, mask=None, contiguous=True)))");
  EXPECT_NE(ShapeTracker::from_shape({4, 4, 4}).permute({2, 0, 1}).reshape({16, 4}).views.size(), 1u);
  EXPECT_EQ(ShapeTracker::from_shape({32, 3, 3, 1}).reshape({8, 4, 3, 3}).views.size(), 1u);
}

TEST(ShapeTracker, MergeViewZeroAlwaysAddsAView) {
  Context ctx({{"MERGE_VIEW", 0}});
  EXPECT_EQ(ShapeTracker::from_shape({10, 10}).permute({1, 0}).reshape({5, 2, 5, 2}).views.size(), 2u);
}

TEST(ShapeTracker, Contiguity) {
  auto add_1s = ShapeTracker::from_shape({4, 4}).permute({1, 0}).reshape({1, 4, 1, 4, 1});
  EXPECT_FALSE(add_1s.contiguous());
  EXPECT_TRUE(add_1s.permute({0, 3, 2, 1, 4}).contiguous());
  EXPECT_TRUE(ShapeTracker::from_shape({4, 4, 4}).permute({2, 0, 1}).reshape({4, 16}).permute({1, 0}).contiguous());
  auto work = ShapeTracker::from_shape({64, 1024, 4}).reshape({1, 64, 128, 32}).permute({0, 3, 1, 2});
  work = work.reshape({1, 1, 32, 64, 128}).permute({0, 3, 4, 1, 2}).reshape({64, 1024, 4});
  EXPECT_TRUE(work.contiguous());
  auto sliced = ShapeTracker::from_shape({20}).shrink({{5, 15}});
  EXPECT_TRUE(sliced.consecutive());
  EXPECT_FALSE(sliced.contiguous());
  EXPECT_FALSE(ShapeTracker::from_shape({4, 5}).shrink({{1, 3}, {2, 5}}).consecutive());
}

// ---- simplify and composition ----

TEST(ShapeTracker, Simplify) {
  auto st = ShapeTracker::from_shape({1, 10}).expand({10, 10}).reshape({100});
  EXPECT_EQ(st.views.size(), 2u);
  EXPECT_EQ(st.reshape({10, 10}).simplify().views.size(), 1u);
  EXPECT_EQ(st.reshape({2, 5, 2, 5}).simplify().str(),
            "ShapeTracker(views=(View(shape=(2, 5, 2, 5), strides=(0, 0, 5, 1), offset=0, mask=None, contiguous=False),))");
  EXPECT_EQ(st.reshape({5, 20}).simplify().views.size(), 2u);
}

TEST(ShapeTracker, ComposeAppliesSecondOnTopOfFirst) {
  auto a = ShapeTracker::from_shape({6, 4}).permute({1, 0});
  auto b = ShapeTracker::from_shape({4, 6}).shrink({{1, 3}, {0, 6}}).reshape({12});
  auto c = a + b;
  auto [idx, valid] = to_indexed_uops(c);
  for (int64_t i = 0; i < 12; i++) EXPECT_EQ(eval_at(idx, {i}), (i % 6) * 4 + (1 + i / 6));
}

TEST(View, AddMergesPermuteOfExpand) {
  View vm2 = View::create({10, 10}, std::vector<int64_t>{0, 1});
  auto merged = vm2 + View::create({2, 5, 2, 5});
  ASSERT_TRUE(merged.has_value());
  EXPECT_EQ(merged->str(), "View(shape=(2, 5, 2, 5), strides=(0, 0, 5, 1), offset=0, mask=None, contiguous=False)");
  EXPECT_FALSE((vm2 + View::create({5, 20})).has_value());
}

// ---- invert ----

TEST(ShapeTracker, Invert) {
  auto st = ShapeTracker::from_shape({3, 4}).permute({1, 0});
  EXPECT_EQ(st.invert({3, 4})->str(), "ShapeTracker(views=(View(shape=(3, 4), strides=(1, 3), offset=0, mask=None, contiguous=False),))");
  auto flipped = ShapeTracker::from_shape({3, 4}).stride({-1, 1}).permute({1, 0});
  EXPECT_EQ(flipped.invert({3, 4})->str(),
            "ShapeTracker(views=(View(shape=(3, 4), strides=(-1, 3), offset=2, mask=None, contiguous=False),))");
  EXPECT_FALSE(ShapeTracker::from_shape({3, 4}).shrink({{0, 2}, {0, 4}}).invert({3, 4}).has_value());
  EXPECT_FALSE(ShapeTracker::from_shape({3, 1}).expand({3, 4}).invert({3, 1}).has_value());
  // a pad inverts to the positions inside the mask
  auto padded = ShapeTracker::from_shape({2, 3}).pad({{1, 0}, {0, 0}});
  EXPECT_EQ(padded.invert({2, 3})->str(), "ShapeTracker(views=(View(shape=(2, 3), strides=(3, 1), offset=3, mask=None, contiguous=False),))");
  // shrink then expand keeps the element count by coincidence but reads elements twice: not
  // invertible (tinygrad 0.9.2 only compares the counts and returns a wrong inverse here)
  EXPECT_FALSE(ShapeTracker::from_shape({4}).reshape({4, 1}).shrink({{0, 2}, {0, 1}}).expand({2, 2}).invert({4}).has_value());
}

// ---- real_strides, unit_stride_axes, real_size, axis_is_masked ----

TEST(ShapeTracker, RealStridesSingleView) {
  auto flipped = ShapeTracker::from_shape({3, 4}).stride({-1, 1}).permute({1, 0});
  EXPECT_EQ(flipped.real_strides(), (Strides{1, -4}));
  EXPECT_EQ(flipped.unit_stride_axes(), (std::vector<int>{0}));
  auto padded = ShapeTracker::from_shape({3, 4}).pad({{1, 1}, {0, 2}});
  EXPECT_EQ(padded.real_strides(), (Strides{None, None}));
  EXPECT_EQ(padded.real_strides(true), (Strides{4, 1}));
  EXPECT_EQ(padded.unit_stride_axes(), std::vector<int>{});
  EXPECT_EQ(padded.unit_stride_axes(true), (std::vector<int>{1}));
  EXPECT_EQ(padded.real_size(), 18);
  EXPECT_TRUE(padded.axis_is_masked(0));
  EXPECT_TRUE(padded.axis_is_masked(1));
  EXPECT_FALSE(ShapeTracker::from_shape({3, 4}).pad({{1, 1}, {0, 0}}).axis_is_masked(1));
  EXPECT_EQ(ShapeTracker::from_shape({8}).stride({2}).real_size(), 7);
  EXPECT_EQ(ShapeTracker::from_shape({4, 5}).shrink({{1, 3}, {2, 5}}).real_size(), 15);
}

TEST(ShapeTracker, RealStridesMultiView) {
  ShapeTracker a({View::create({8, 3, 1, 2, 11, 1}, std::vector<int64_t>{33, 11, 0, 0, 1, 0}), View::create({8, 6, 11})});
  EXPECT_EQ(a.real_strides(), (Strides{33, None, 1}));
  EXPECT_NE(a.simplify().views.size(), 1u);
  ShapeTracker b({View::create({2, 2, 4, 3, 3}, std::vector<int64_t>{72, 9, 18, -3, -1}, 8), View::create({4, 4, 3, 3})});
  EXPECT_EQ(b.real_strides(), (Strides{None, 18, -3, -1}));
  EXPECT_EQ(b.unit_stride_axes(), std::vector<int>{});
  // the validity of a masked lower view only depends on the first axis
  ShapeTracker c({View::create({2048}, std::nullopt, 0, Mask{{0, 512}}), View::create({16, 32, 4})});
  EXPECT_EQ(c.real_strides(), (Strides{None, 4, 1}));
  EXPECT_EQ(c.unit_stride_axes(), (std::vector<int>{2}));
  EXPECT_TRUE(c.axis_is_masked(0));
  EXPECT_FALSE(c.axis_is_masked(1));
}

// IndexForm (shape/index_form) folds Python floor div/mod exactly where the kernel's UOp index, simplified,
// keeps an IDIV or MOD (UOp division is C's, folded only for operands proven non-negative): these strides
// are lost if real_strides reads the simplified UOps instead (uop/affine + symbolic). On fuzz_shapetracker's
// 1291 multi-view or masked trackers that reading loses a stride on 15 and is never more precise.
TEST(ShapeTracker, RealStridesThroughFloorDivMod) {
  const std::vector<std::pair<ShapeTracker, Strides>> cases = {
      {ShapeTracker({View::create({2, 5, 4}, std::vector<int64_t>{1, 8, 2}), View::create({4, 5, 2})}), {None, 4, 2}},
      {ShapeTracker({View::create({3, 2, 2}, std::vector<int64_t>{12, -4, -1}, 5), View::create({2, 1, 2}, std::vector<int64_t>{-8, 0, 3}, 8)}),
       {-24, 0, -5}},
      {ShapeTracker({View::create({7, 12}, std::vector<int64_t>{1, 5}, 0, Mask{{0, 5}, {0, 12}}), View::create({2, 7, 3, 2})}),
       {None, None, 10, 5}}};
  for (auto& [st, expect] : cases) {
    SCOPED_TRACE(st.str());
    EXPECT_EQ(st.real_strides(), expect);
    auto [idx, valid] = to_indexed_uops(st);
    bool divides = false;
    for (const UOp& u : simplify(idx).toposort()) divides |= is_alu(u, BinaryOps::IDIV) || is_alu(u, BinaryOps::MOD);
    EXPECT_TRUE(divides) << "the simplified UOp index folded this one too: " << simplify(idx).str();
    // each stride is the index step along its axis wherever both elements are valid
    const Shape sh = st.shape();
    std::vector<int64_t> x(sh.size(), 0);
    std::unordered_map<std::string, int64_t> vars;
    auto at = [&](const std::vector<int64_t>& p) -> std::optional<int64_t> {
      for (size_t d = 0; d < p.size(); d++) vars["idx" + std::to_string(d)] = p[d];
      if (!const_to_int(eval_uop(valid, vars))) return std::nullopt;
      return const_to_int(eval_uop(idx, vars));
    };
    for (int64_t n = 0; n < prod(sh); n++) {
      for (int64_t r = n, d = int64_t(sh.size()) - 1; d >= 0; r /= sh[d], d--) x[d] = r % sh[d];
      for (size_t ax = 0; ax < sh.size(); ax++) {
        if (!expect[ax] || x[ax] + 1 >= sh[ax]) continue;
        auto y = x;
        y[ax]++;
        auto a = at(x), b = at(y);
        if (a && b) EXPECT_EQ(*b - *a, *expect[ax]) << "axis " << ax;
      }
    }
  }
}

TEST(ShapeTracker, RealStridesMatchSimplifiedView) {
  std::vector<ShapeTracker> sts = {
      ShapeTracker({View::create({1, 3, 2, 11, 4, 28}, std::vector<int64_t>{0, 308, 0, 28, 0, 1}),
                    View::create({1, 3, 2, 11, 26, 1, 1, 3}, std::vector<int64_t>{0, 2464, 0, 112, 1, 0, 0, 29})}),
      ShapeTracker({View::create({8, 3, 3, 11, 2, 28}, std::vector<int64_t>{924, 308, 0, 28, 0, 1}),
                    View::create({8, 1, 6, 10, 28, 3, 2, 1}, std::vector<int64_t>{5544, 0, 0, 56, 1, 1848, 672, 0})})};
  for (auto& st : sts) {
    auto rs = st.real_strides();
    auto simple = st.simplify();
    ASSERT_EQ(simple.views.size(), 1u);
    EXPECT_EQ(Strides(simple.views[0].strides.begin(), simple.views[0].strides.end()), rs);
  }
}

// ---- the SHAPETRACKER uop ----

TEST(ShapeTracker, AsUopArg) {
  auto st = ShapeTracker::from_shape({4, 4}).permute({1, 0});
  UOp u = st_uop(st), v = st_uop(ShapeTracker::from_shape({4, 4}).permute({1, 0}));
  EXPECT_EQ(u, v);   // interned by value
  EXPECT_NE(u, st_uop(ShapeTracker::from_shape({4, 4})));
  EXPECT_EQ(st_of(u), st);
  EXPECT_EQ(u->op, Ops::SHAPETRACKER);
}

// ---- bad input ----

static std::string error_of(const std::function<void()>& f) {
  try { f(); } catch (const Error& e) { return e.what(); }
  return "no error";
}

TEST(ShapeTracker, BadInputThrows) {
  auto st = ShapeTracker::from_shape({100});
  auto sq = ShapeTracker::from_shape({2, 3});
  EXPECT_EQ(error_of([&] { st.permute({1, 0}); }).rfind("invalid permute (1, 0) for (100,)", 0), 0u);
  EXPECT_NE(error_of([&] { sq.permute({0, 0}); }).find("invalid permute (0, 0) for (2, 3)"), std::string::npos);
  EXPECT_NE(error_of([&] { sq.reshape({4, 2}); }).find("invalid reshape (4, 2) for (2, 3)"), std::string::npos);
  EXPECT_NE(error_of([&] { sq.reshape({-1, 6}); }).find("invalid reshape (-1, 6) for (2, 3)"), std::string::npos);
  EXPECT_NE(error_of([&] { sq.expand({4, 3}); }).find("invalid expand (4, 3) for (2, 3)"), std::string::npos);
  EXPECT_NE(error_of([&] { sq.expand({2, 3, 1}); }).find("invalid expand (2, 3, 1) for (2, 3)"), std::string::npos);
  EXPECT_NE(error_of([&] { sq.pad({{-1, 0}, {0, 0}}); }).find("invalid pad ((-1, 0), (0, 0)) for (2, 3)"), std::string::npos);
  EXPECT_NE(error_of([&] { sq.pad({{1, 1}}); }).find("invalid pad ((1, 1),) for (2, 3)"), std::string::npos);
  EXPECT_NE(error_of([&] { sq.shrink({{0, 3}, {0, 3}}); }).find("invalid shrink ((0, 3), (0, 3)) for (2, 3)"), std::string::npos);
  EXPECT_NE(error_of([&] { sq.shrink({{1, 0}, {0, 3}}); }).find("invalid shrink"), std::string::npos);
  EXPECT_NE(error_of([&] { sq.stride({0, 1}); }).find("invalid stride (0, 1) for (2, 3)"), std::string::npos);
  EXPECT_NE(error_of([&] { sq.stride({1}); }).find("invalid stride (1,) for (2, 3)"), std::string::npos);
  EXPECT_THROW(View::create({2, -1}), Error);
  EXPECT_THROW(sq.axis_is_masked(2), Error);
}

// Seed 003's walk-through, through the public API: the index of the two-view tracker renders as tinygrad's.
TEST(ShapeTrackerSeed, ExprIdxsRender) {
  auto st = tg::ShapeTracker::from_shape({10, 10}).permute({1, 0}).reshape({5, 2, 5, 2}).reshape({100});
  EXPECT_EQ(st.views.size(), 2u);
  auto [idx, valid] = st.expr_idxs();
  EXPECT_EQ(idx.render(), "(((idx0%10)*10)+(idx0//10))");
  EXPECT_TRUE(valid.is_const());
  EXPECT_EQ(valid.const_value(), 1);
}
