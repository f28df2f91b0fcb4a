// The CPU's conv weight gradients and one-input-channel forward (tensor/conv.cpp, codegen/heuristic.cpp
// kernel_column_rows): the register tiles they get, that the weight gradient reads the forward's row-shifted copy, and
// their values against the NOOPT kernels and the paths they replace. Against libtorch: tests/conformance conv2d/*.
#include <functional>
#include <optional>

#include "access.hpp"
#include "avx512_kernels.hpp"
#include "codegen/kernel.hpp"
#include "codegen/pack.hpp"
#include "renderer/cstyle.hpp"
#include "tensor_test_util.hpp"

using namespace tg;
using namespace tgt;

namespace {

const Opts kCPU{dtypes::float32, "CPU", false};

std::vector<float> data(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; i++) v[i] = static_cast<float>(((i + seed) * 2654435761u) % 2001) / 1000.0f - 1.0f;
  return v;
}

// (accumulators, the fewest lanes of one) of a kernel with the hand-coded opts
std::pair<int, int> accumulators(const UOp& ast) {
  static const ClangRenderer ren;
  Kernel k(ast, ren);
  k.hand_coded_optimizations();
  int accs = 0, lanes = 1 << 20;
  for (const UOp& u : k.linearize())
    if (u->op == Ops::DEFINE_ACC) accs++, lanes = std::min<int>(lanes, u->dtype.count);
  return {accs, lanes};
}

// the accumulators of the packed GEMM (codegen/pack.cpp) of the weight gradient of conv(x, w, padding)
std::optional<std::pair<int, int>> weight_gemm_tile(const Shape& xs, const Shape& ws, int64_t pad = 0) {
  static const ClangRenderer ren;
  Tensor x = Tensor::empty(xs, kCPU), w = Tensor::empty(ws, kCPU);
  w.requires_grad_();
  Tensor out = x.conv2d(w, std::nullopt, 1, {1}, {1}, {pad});
  (out * Tensor::empty(out.shape(), kCPU)).sum().backward();
  for (const ScheduleItem& si : w.grad()->schedule())
    if (si.kind == MetaOps::KERNEL)
      if (auto plan = cpu_gemm_pack(Access::uop(si.ast), ren)) return accumulators(plan->gemm_ast);
  return std::nullopt;
}

// run(grads): the forward's values (and with grads its gradients) on the path under test. They must equal those with
// the path's switch `off` at 0 (the plain conv), and the forward must equal NOOPT's.
// Another summation order's rounding grows with the summed terms, not with the one element: with uint8 images (x100)
// an output of 0.35 next to outputs of 540 differed by 1.1e-4 on a 16-core host's CPU and on CUDA. So the tolerance
// is 1e-4 of the element or of a hundredth of the output's largest magnitude, whichever is larger.
void expect_close_to_scale(const std::vector<float>& got, const std::vector<float>& want) {
  float scale = 1;
  for (float v : want) scale = std::max(scale, std::fabs(v) / 100);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) EXPECT_NEAR(got[i], want[i], 1e-4f * std::max(scale, std::fabs(want[i]))) << "at " << i;
}

void expect_like_plain_and_noopt(const std::function<std::vector<std::vector<float>>(bool)>& run, const char* off) {
  const auto got = run(true);
  std::vector<std::vector<float>> plain, noopt;
  {
    Context ctx({{off, 0}});
    plain = run(true);
  }
  {
    Context ctx({{"NOOPT", 1}});
    noopt = run(false);
  }
  ASSERT_EQ(got.size(), plain.size());
  for (size_t i = 0; i < got.size(); i++) expect_close_to_scale(got[i], plain[i]);
  expect_close_to_scale(got[0], noopt[0]);
}

// run(grads) for expect_like_plain_and_noopt: conv(x, w, bias)'s values and, with grads, x's and w's gradients
std::function<std::vector<std::vector<float>>(bool)> conv_run(const Shape& xs, const Shape& ws, int groups, const Shape& stride,
                                                              const Shape& dilation, const Shape& pad) {
  return [=](bool grads) {
    Tensor x = Tensor::from<float>(data(prod(xs), 1), xs, kCPU), w = Tensor::from<float>(data(prod(ws), 7), ws, kCPU);
    Tensor b = Tensor::from<float>(data(ws[0], 3), {ws[0]}, kCPU);
    if (grads) x.requires_grad_(), w.requires_grad_();
    Tensor out = x.conv2d(w, b, groups, stride, dilation, pad);
    std::vector<std::vector<float>> ret{vals(out)};
    if (!grads) return ret;
    (out * Tensor::from<float>(data(prod(out.shape()), 11), out.shape(), kCPU)).sum().backward();
    ret.push_back(vals(*x.grad())), ret.push_back(vals(*w.grad()));
    return ret;
  };
}

}  // namespace

// The weight gradient's GEMM (output channels as 2 vectors of the packed grad_output) tiles the kernel's columns whole
// times 2 input channels (5x5) or the kernel's 3 rows (3x3): 20 and 18 accumulators where 8 channels held 16. (A padded
// conv's window is masked along its taps: they don't join the tile.)
TEST(ConvWeightGrad, TileTakesTheKernelColumns) {
  Context two({{"THREADS", 2}});
  EXPECT_EQ(weight_gemm_tile({8, 32, 24, 24}, {32, 32, 5, 5}), (std::pair{20, 16})) << "5 kx x 2 channels x 2 vectors";
  EXPECT_EQ(weight_gemm_tile({8, 32, 10, 10}, {64, 32, 3, 3}), (std::pair{18, 16})) << "3 kx x 3 ky x 2 vectors";
  EXPECT_EQ(weight_gemm_tile({8, 32, 9, 12}, {32, 32, 2, 4}), (std::pair{16, 16})) << "4 kx x 2 ky x 2 vectors";
  EXPECT_NE(weight_gemm_tile({8, 32, 10, 10}, {64, 32, 3, 3}, 1), (std::pair{18, 16})) << "padded: masked taps";
  Context off({{"CPU_TILE_TAPS", 0}});
  EXPECT_EQ(weight_gemm_tile({8, 32, 24, 24}, {32, 32, 5, 5}), (std::pair{16, 16})) << "8 channels x 2 vectors";
}

// The same gradients with the new tiles, the old ones and NOOPT: odd sizes, batch 1, 1-long axes, padding, a bias.
TEST(ConvWeightGrad, TilesMatchNoopt) {
  struct Case { Shape x, w; int64_t pad; bool bias; };
  for (const Case& c : {Case{{2, 32, 24, 24}, {32, 32, 5, 5}, 0, true}, Case{{1, 32, 11, 13}, {32, 32, 5, 5}, 0, false},
                        Case{{3, 32, 10, 10}, {64, 32, 3, 3}, 0, false}, Case{{2, 64, 8, 8}, {64, 64, 3, 3}, 0, true},
                        Case{{1, 32, 9, 12}, {32, 32, 2, 4}, 0, false}, Case{{2, 32, 7, 9}, {64, 32, 3, 3}, 1, false},
                        Case{{2, 32, 1, 40}, {32, 32, 1, 5}, 0, false}}) {
    SCOPED_TRACE(to_str(c.x) + " x " + to_str(c.w));
    auto grad = [&]() {
      Tensor x = Tensor::from<float>(data(prod(c.x), 1), c.x, kCPU), w = Tensor::from<float>(data(prod(c.w), 7), c.w, kCPU).requires_grad_();
      std::optional<Tensor> b;
      if (c.bias) b = Tensor::from<float>(data(c.w[0], 3), {c.w[0]}, kCPU).requires_grad_();
      Tensor out = x.conv2d(w, b, 1, {1}, {1}, {c.pad});
      (out * Tensor::from<float>(data(prod(out.shape()), 11), out.shape(), kCPU)).sum().backward();
      return vals(*w.grad());
    };
    const std::vector<float> tiled = grad();
    std::vector<float> old, plain;
    {
      Context ctx({{"CPU_TILE_TAPS", 0}});
      old = grad();
    }
    {
      Context ctx({{"NOOPT", 1}});
      plain = grad();
    }
    expect_close(tiled, plain, 1e-4f);
    expect_close(old, plain, 1e-4f);
  }
}

// The kernel of conv1's forward: the row-shifted copy makes the output's 576 positions one axis, so the tile's vectors
// are 16 lanes (2 of them x 8 output channels); a 24-wide row gave 16 + 8 lanes. CONV_FW_ROWS=0: the plain conv.
TEST(ConvForward, OneInputChannelTilesFullVectors) {
  auto gemm_lanes = [] {
    Tensor x = Tensor::empty({4, 1, 28, 28}, Opts{dtypes::uint8, "CPU", false});
    std::optional<std::pair<int, int>> ret;
    for (const ScheduleItem& si : x.conv2d(Tensor::empty({32, 1, 5, 5}, kCPU), Tensor::empty({32}, kCPU)).relu().schedule()) {
      if (si.kind != MetaOps::KERNEL) continue;
      bool reduce = false;
      for (const UOp& u : Access::uop(si.ast).toposort()) reduce = reduce || u->op == Ops::REDUCE_AXIS;
      if (reduce) ret = accumulators(Access::uop(si.ast));
    }
    return ret;
  };
  EXPECT_EQ(gemm_lanes(), (std::pair{16, 16}));
  Context off({{"CONV_FW_ROWS", 0}});
  const auto old = gemm_lanes();
  ASSERT_TRUE(old);
  EXPECT_EQ(old->second, 8) << "the old tile: 8 channels x a 24-wide row, as 16 + 8 lanes";
}

// The weight gradient reads the forward's row-shifted copy: with the forward realized, the backward writes no copy of x.
TEST(ConvForward, WeightGradientReadsTheForwardsCopy) {
  Tensor x = Tensor::from<float>(data(4 * 28 * 28, 1), {4, 1, 28, 28}, kCPU), w = Tensor::from<float>(data(32 * 25, 7), {32, 1, 5, 5}, kCPU);
  w.requires_grad_();
  Tensor out = x.conv2d(w).realize();
  (out * Tensor::from<float>(data(4 * 32 * 24 * 24, 11), {4, 32, 24, 24}, kCPU)).sum().backward();
  int copies = 0;
  for (const ScheduleItem& si : w.grad()->schedule())
    if (si.kind == MetaOps::KERNEL) copies += si.bufs[0]->size == int64_t{4} * 5 * 28 * 24;
  EXPECT_EQ(copies, 0) << "x's 5 row-shifted copies (4 x 5 x 28 x 24) written again";
}

// The row-shifted forward's values (uint8 and float images, bias, padding, odd sizes, batch 1, 1-long axes, two input
// channels, groups) against the plain conv and NOOPT, and its input and weight gradients against the plain conv's.
TEST(ConvForward, RowShiftedMatchesThePlainConv) {
  struct Case { Shape x, w; Shape pad; int groups; bool u8; };
  for (const Case& c : {Case{{3, 1, 28, 28}, {32, 1, 5, 5}, {0}, 1, true}, Case{{1, 1, 9, 13}, {5, 1, 3, 5}, {1, 2}, 1, false},
                        Case{{2, 2, 11, 7}, {3, 2, 3, 3}, {1}, 1, false}, Case{{1, 1, 1, 7}, {3, 1, 1, 3}, {0}, 1, false},
                        Case{{3, 1, 5, 5}, {4, 1, 5, 5}, {0}, 1, true}, Case{{2, 4, 10, 9}, {6, 2, 3, 3}, {1}, 2, false}}) {
    SCOPED_TRACE(to_str(c.x) + " x " + to_str(c.w));
    auto run = [&](bool grads) {
      Tensor x = Tensor::from<float>(data(prod(c.x), 1), c.x, kCPU);
      if (c.u8) x = (x * 100 + 100).cast(dtypes::uint8).realize();
      else if (grads) x.requires_grad_();
      Tensor w = Tensor::from<float>(data(prod(c.w), 7), c.w, kCPU).requires_grad_(), b = Tensor::from<float>(data(c.w[0], 3), {c.w[0]}, kCPU);
      Tensor out = x.conv2d(w, b, c.groups, {1}, {1}, c.pad).relu();
      std::vector<std::vector<float>> ret{vals(out)};
      if (!grads) return ret;
      (out * Tensor::from<float>(data(prod(out.shape()), 11), out.shape(), kCPU)).sum().backward();
      ret.push_back(vals(*w.grad()));
      if (!c.u8) ret.push_back(vals(*x.grad()));
      return ret;
    };
    expect_like_plain_and_noopt(run, "CONV_FW_ROWS");
  }
}

// A forward whose last dim is padded reads its input from a copy with only the columns padded (tensor/conv.cpp
// pads_columns_forward): the GEMM's tile then runs along 7 output columns (28 wide) read at stride 1, 7 x 2 vectors of
// output channels, where the column gates left 8 images as its rows (8 x 2). CONV_FW_COLUMNS=0: every dim a view.
TEST(ConvForward, PaddedColumnsTileOutputColumns) {
  static const ClangRenderer ren;
  auto gemm = [] {
    Tensor x = Tensor::empty({32, 64, 6, 28}, kCPU), w = Tensor::empty({64, 64, 3, 3}, kCPU);
    std::optional<Kernel> ret;
    for (const ScheduleItem& si : x.conv2d(w, std::nullopt, 1, {1}, {1}, {1}).schedule())
      if (si.kind == MetaOps::KERNEL)
        if (auto plan = cpu_gemm_pack(Access::uop(si.ast), ren)) ret.emplace(plan->gemm_ast, ren);
    return ret;
  };
  // (rows of the register tile read at stride 1 by the input, float16 accumulators)
  auto tile = [](Kernel& k) {
    k.hand_coded_optimizations();
    int64_t column_rows = 0;
    for (int64_t a = k.first_upcast(); a < k.shape_len(); a++)
      if (k.sts[1].real_strides()[a] == 1 || k.sts[2].real_strides()[a] == 1)
        if (k.full_shape()[a] != 16) column_rows = k.full_shape()[a];
    int accs = 0;
    for (const UOp& u : k.linearize()) accs += u->op == Ops::DEFINE_ACC && u->dtype.count == 16;
    return std::pair<int64_t, int>{column_rows, accs};
  };
  auto k = gemm();
  ASSERT_TRUE(k);
  EXPECT_EQ(tile(*k), (std::pair<int64_t, int>{7, 14})) << k->name();
  Context off({{"CONV_FW_COLUMNS", 0}});
  auto old = gemm();
  ASSERT_TRUE(old);
  EXPECT_EQ(tile(*old).second, 16) << "the old tile: 8 images x 2 vectors";
  EXPECT_NE(tile(*old).first, 7) << old->name();
}

// The column-padded forward's values (padding on the columns only, asymmetric, rows strided or dilated, groups, batch
// 1, odd sizes, 1D, bias) against the plain conv and NOOPT, and its input and weight gradients against the plain conv's.
TEST(ConvForward, PaddedColumnsMatchThePlainConv) {
  struct Case { Shape x, w; Shape pad, stride, dilation; int groups; };
  for (const Case& c : {Case{{2, 16, 9, 14}, {16, 16, 3, 3}, {1}, {1}, {1}, 1}, Case{{1, 8, 5, 21}, {32, 8, 3, 3}, {0, 1}, {1}, {1}, 1},
                        Case{{3, 8, 7, 7}, {4, 8, 3, 3}, {2, 0, 1, 1}, {1}, {1}, 1}, Case{{2, 8, 9, 8}, {8, 8, 3, 5}, {3, 2}, {2, 1}, {2, 1}, 1},
                        Case{{2, 16, 6, 14}, {8, 8, 3, 3}, {1}, {1}, {1}, 2}, Case{{2, 32, 14}, {16, 32, 3}, {1}, {1}, {1}, 1}}) {
    SCOPED_TRACE(to_str(c.x) + " x " + to_str(c.w) + " pad " + to_str(c.pad));
    expect_like_plain_and_noopt(conv_run(c.x, c.w, c.groups, c.stride, c.dilation, c.pad), "CONV_FW_COLUMNS");
  }
}

// A forward whose output rows are 6, 9, 5 or 4 wide, where no output axis takes 10, 8 or 7 rows (heuristic.cpp
// contiguous_tile_rows, four_column_rows): its GEMM's register tile runs along the output columns, 6, 9 or 5 of them x 2
// vectors of output channels, or 4 columns x 2 output rows x 2 vectors, where it held 8 images x 2 vectors
// (beautiful_mnist's conv4, 64 -> 64 channels, 8x8 -> 6x6). Odd rows keep the 8 images with 4 columns.
// CPU_TILE_SHORT_ROWS=0: the old tile.
TEST(ConvForward, ShortRowsTileOutputColumns) {
  static const ClangRenderer ren;
  // the GEMM's upcast dims after the hand-coded opts
  auto tile = [](const Shape& xs, const Shape& ws) {
    Tensor x = Tensor::empty(xs, kCPU), w = Tensor::empty(ws, kCPU);
    for (const ScheduleItem& si : x.conv2d(w).schedule())
      if (si.kind == MetaOps::KERNEL)
        if (auto plan = cpu_gemm_pack(Access::uop(si.ast), ren)) {
          Kernel k(plan->gemm_ast, ren);
          k.hand_coded_optimizations();
          return Shape(k.full_shape().begin() + k.first_upcast(), k.full_shape().end());
        }
    return Shape{};
  };
  EXPECT_EQ(tile({32, 64, 8, 8}, {64, 64, 3, 3}), (Shape{16, 2, 6}));
  EXPECT_EQ(tile({32, 32, 11, 11}, {32, 32, 3, 3}), (Shape{16, 2, 9}));
  EXPECT_EQ(tile({32, 32, 7, 7}, {32, 32, 3, 3}), (Shape{16, 2, 5}));
  EXPECT_EQ(tile({32, 32, 6, 6}, {32, 32, 3, 3}), (Shape{16, 2, 4, 2}));
  EXPECT_EQ(tile({32, 32, 7, 6}, {32, 32, 3, 3}), (Shape{16, 2, 8}));   // 5 rows: the images
  EXPECT_EQ(tile({32, 32, 12, 12}, {32, 32, 3, 3}), (Shape{16, 2, 10}));   // unchanged
  Context off({{"CPU_TILE_SHORT_ROWS", 0}});
  EXPECT_EQ(tile({32, 64, 8, 8}, {64, 64, 3, 3}), (Shape{16, 2, 8}));
  EXPECT_EQ(tile({32, 32, 6, 6}, {32, 32, 3, 3}), (Shape{16, 2, 8}));
}

// The short-row tiles' values (6-, 9-, 5- and 4-wide outputs: batch 1 and 3, a 1-row output, rows strided, groups 2, bias, a
// 12-wide output taking 6 columns, 4 columns with odd rows) against the old tile and NOOPT, and their input and weight
// gradients against the old tile's.
TEST(ConvForward, ShortRowsMatchTheOldTile) {
  struct Case { Shape x, w; Shape pad, stride; int groups; };
  for (const Case& c : {Case{{3, 64, 8, 8}, {64, 64, 3, 3}, {0}, {1}, 1}, Case{{1, 16, 11, 13}, {32, 16, 3, 5}, {0}, {1}, 1},
                        Case{{2, 32, 3, 8}, {32, 32, 3, 3}, {0}, {1}, 1}, Case{{2, 16, 13, 8}, {32, 16, 3, 3}, {0}, {2, 1}, 1},
                        Case{{2, 64, 7, 7}, {64, 32, 2, 2}, {0}, {1}, 2}, Case{{1, 32, 6, 14}, {32, 32, 3, 3}, {1, 1, 0, 0}, {1}, 1},
                        Case{{3, 32, 6, 6}, {32, 32, 3, 3}, {0}, {1}, 1}, Case{{2, 16, 7, 6}, {32, 16, 3, 3}, {0}, {1}, 1},
                        Case{{1, 16, 10, 6}, {32, 16, 3, 3}, {0}, {2, 1}, 1}, Case{{2, 16, 7, 7}, {32, 16, 3, 3}, {0}, {1}, 1}}) {
    SCOPED_TRACE(to_str(c.x) + " x " + to_str(c.w) + " stride " + to_str(c.stride));
    expect_like_plain_and_noopt(conv_run(c.x, c.w, c.groups, c.stride, Shape{1}, c.pad), "CPU_TILE_SHORT_ROWS");
  }
}

// The column-padded forward's copy (tensor/conv.cpp aligned_column_copy) pads to whole groups of 4 columns: it loads
// a float4 under one gate per group and no scalar gated float (padded exactly, 28 + 2 columns, every load was a gated
// float). Its values (pads 1/1, 2/3, 0/5, 5/0, 4/4, widths not a multiple of 4, batch 1, groups, bias) against the exact
// padding's (CONV_FW_ALIGNED_COPY=0) and NOOPT.
TEST(ConvForward, AlignedColumnCopyLoadsFloat4) {
  static const ClangRenderer ren;
  auto copy_src = [] {
    Tensor x = Tensor::empty({4, 64, 6, 28}, kCPU), w = Tensor::empty({64, 64, 3, 3}, kCPU);
    for (const ScheduleItem& si : x.conv2d(w, std::nullopt, 1, {1}, {1}, {1}).schedule())
      if (si.kind == MetaOps::KERNEL && !cpu_gemm_pack(Access::uop(si.ast), ren) && Access::uop(si.ast)->src[0]->src.size() >= 3) {
        Kernel k(Access::uop(si.ast), ren);
        if (k.reduceop()) continue;
        k.hand_coded_optimizations();
        const std::string src = k.to_program().src;
        if (src.find("data1") != std::string::npos && prod(k.full_shape()) >= 4 * 64 * 6 * 28) return src;
      }
    return std::string();
  };
  const std::string src = copy_src();
  EXPECT_NE(src.find("?({float4 v_; __builtin_memcpy(&v_, data1+"), std::string::npos) << src;
  EXPECT_EQ(src.find("?data1["), std::string::npos) << "a scalar gated load left:\n" << src;
  struct Case { Shape x, w; Shape pad; int groups; };
  for (const Case& c : {Case{{2, 16, 6, 28}, {16, 16, 3, 3}, {1}, 1}, Case{{1, 8, 5, 13}, {16, 8, 3, 3}, {2, 3, 1, 1}, 1},
                        Case{{2, 8, 4, 11}, {8, 8, 3, 3}, {0, 5, 1, 0}, 1}, Case{{2, 8, 4, 9}, {8, 8, 3, 5}, {5, 0, 0, 2}, 1},
                        Case{{2, 16, 5, 10}, {16, 8, 3, 3}, {4, 4, 1, 1}, 2}}) {
    SCOPED_TRACE(to_str(c.x) + " x " + to_str(c.w) + " pad " + to_str(c.pad));
    expect_like_plain_and_noopt(conv_run(c.x, c.w, c.groups, Shape{1}, Shape{1}, c.pad), "CONV_FW_ALIGNED_COPY");
  }
}
