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
#include <chrono>
#include <random>
TEST(FoldScratch, Timing) {
  auto t0 = std::chrono::steady_clock::now();
  Tensor::rand({getenv("RN", 1 << 24)}).realize();
  auto t1 = std::chrono::steady_clock::now();
  printf("rand 1<<24: %.3f s\n", std::chrono::duration<double>(t1 - t0).count());
  std::vector<uint8_t> h(60000 * 784);
  std::mt19937 g(0);
  for (auto& v : h) v = g() & 255;
  Tensor X = Tensor::from<uint8_t>(h, {60000, 784});
  X.realize();
  std::vector<int32_t> idx(512);
  for (auto& v : idx) v = g() % 60000;
  Tensor I = Tensor::from<int32_t>(idx, {512});
  auto t2 = std::chrono::steady_clock::now();
  auto out = X[{I}].tolist<uint8_t>();
  auto t3 = std::chrono::steady_clock::now();
  printf("gather: %.3f s\n", std::chrono::duration<double>(t3 - t2).count());
  for (int i = 0; i < 512; i++) for (int j = 0; j < 784; j++) ASSERT_EQ(out[i * 784 + j], h[idx[i] * 784 + j]);
}
