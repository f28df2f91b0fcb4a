// Reduce folding: arange (loop_collapse) and indexing (index_collapse) rules, on hand-built graphs and end to end.
#include <gtest/gtest.h>

#include "tg/tg.hpp"

using namespace tg;

TEST(FoldScratch, Arange) { std::vector<int32_t> v = Tensor::arange(1000).tolist<int32_t>(); EXPECT_EQ(v[3], 3); EXPECT_EQ(v[999], 999); }
TEST(FoldScratch, Index) {
  std::vector<float> h(600 * 8);
  for (size_t k = 0; k < h.size(); k++) h[k] = float(k);
  Tensor x = Tensor::from<float>(h, {600, 8});
  Tensor i = Tensor::from<int32_t>({2, 0, 599, 300, 7}, {5});
  auto v = x[{i}].tolist<float>();
  EXPECT_EQ(v[0], 16);
  EXPECT_EQ(v[16], 599*8);
}
TEST(FoldScratch, OneHot) { auto v = Tensor::from<int32_t>({2, 0}, {2}).one_hot(4).tolist<int32_t>(); EXPECT_EQ(v[2], 1); }
TEST(FoldScratch, Rand) { auto v = Tensor::rand({1000}).tolist<float>(); EXPECT_EQ(v.size(), 1000u); }
