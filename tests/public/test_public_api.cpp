// The public API as a user's project sees it: this file is built without the private src/ include
// path, so it compiles only against include/tg/ (what `cmake --install` ships).
#include <gtest/gtest.h>

#include <sstream>
#include <tg/tg.hpp>

using namespace tg;

// Tensor::schedule() returns printable items (ast and buffers) from the public headers alone
TEST(PublicApi, ScheduleIsPrintable) {
  Tensor t = (Tensor::arange(6).reshape({2, 3}) + 1).sum(1);
  std::vector<ScheduleItem> items = t.schedule();
  ASSERT_FALSE(items.empty());
  std::ostringstream os;
  for (const ScheduleItem& si : items) {
    os << si.str() << "\n";
    if (si.kind == MetaOps::KERNEL) {
      EXPECT_TRUE(si.ast);
      EXPECT_NE(si.ast.str().find("UOps.SINK"), std::string::npos) << si.ast.str();
    }
    EXPECT_FALSE(si.bufs.empty());
  }
  EXPECT_NE(os.str().find("ScheduleItem(ast="), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("REDUCE_AXIS"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("device:CPU"), std::string::npos) << os.str();
}

// Printing a schedule leaves the tensor computable: its items stay queued for the next realize()
// (they were dropped before, and the tensor read uninitialized memory)
TEST(PublicApi, ScheduleThenRealize) {
  Tensor t = (Tensor::arange(6).reshape({2, 3}) + 1).sum(1);
  EXPECT_FALSE(t.schedule().empty());
  EXPECT_EQ(t.tolist<int32_t>(), (std::vector<int32_t>{6, 15}));
  Tensor u = Tensor::ones({4}) * 2, v = u + 1;
  (void)u.schedule();
  (void)v.schedule({u});
  EXPECT_EQ(v.tolist<float>(), (std::vector<float>{3, 3, 3, 3}));
  EXPECT_EQ(u.tolist<float>(), (std::vector<float>{2, 2, 2, 2}));
}

// Symbolic expressions and shape trackers print as the seeds show them
TEST(PublicApi, Introspection) {
  Variable a("a", 0, 10), b("b", 0, 10);
  EXPECT_EQ(((a + b * 10) % 10).render(), "(a%10)");
  ShapeTracker st = ShapeTracker::from_shape({10, 10}).permute({1, 0}).reshape({5, 2, 5, 2}).reshape({100});
  EXPECT_EQ(st.expr_idxs().first.render(), "(((idx0%10)*10)+(idx0//10))");
}
