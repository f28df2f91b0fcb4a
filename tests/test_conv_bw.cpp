// conv2d's backward as two convolutions (tensor/conv.cpp) against the op-by-op gradient through the
// window view (FUSE_CONV_BW=0), for every argument conv2d takes; and the property it exists for: no
// (n, cin, *out, *kernel) buffer in the backward's schedule. Gradients against libtorch are in
// tests/conformance (conv2d/* cases).
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "access.hpp"
#include "avx512_kernels.hpp"
#include "codegen/kernel.hpp"
#include "codegen/pack.hpp"
#include "engine/search.hpp"
#include "renderer/cstyle.hpp"
#include "runtime/buffer.hpp"
#include "shape/shapetracker_arg.hpp"
#include "tensor_test_util.hpp"

using namespace tg;
using namespace tgt;

namespace {

std::vector<float> data(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; i++) v[i] = static_cast<float>(((i + seed) * 2654435761u) % 2001) / 1000.0f - 1.0f;
  return v;
}

// Runs fn on each packed CPU GEMM of t's schedule, hand-coded for ren; returns how many there were.
int for_each_packed_gemm(const Tensor& t, const ClangRenderer& ren, const std::function<void(Kernel&)>& fn) {
  int gemms = 0;
  for (const ScheduleItem& si : t.schedule()) {
    const auto plan = si.kind == MetaOps::KERNEL ? cpu_gemm_pack(Access::uop(si.ast), ren) : std::nullopt;
    if (!plan) continue;
    gemms++;
    Kernel k(plan->gemm_ast, ren);
    k.hand_coded_optimizations();
    fn(k);
  }
  return gemms;
}

// The register tile's rows run along columns: an upcast axis of n along which an input is read at stride 1.
bool column_rows(const Kernel& k, int64_t n) {
  for (int64_t a = k.first_upcast(); a < k.shape_len(); a++)
    for (size_t i = 1; i < k.bufs.size(); i++)
      if (k.full_shape()[a] == n && k.sts[i].real_strides()[a] == 1) return true;
  return false;
}

struct Conv {
  const char* name;
  Shape x, w;
  int groups = 1;
  Shape stride{1}, dilation{1}, padding{0};
  bool bias = false;
};

// the output, grad input, grad weight (and grad bias) of sum(conv(x, w) * r) for a fixed r
std::vector<std::vector<float>> grads(const Conv& c) {
  Tensor x = F(data(prod(c.x), 1), c.x).requires_grad_(), w = F(data(prod(c.w), 7), c.w).requires_grad_();
  std::optional<Tensor> b;
  if (c.bias) b = F(data(c.w[0], 3), {c.w[0]}).requires_grad_();
  Tensor out = x.conv2d(w, b, c.groups, c.stride, c.dilation, c.padding);
  Tensor r = F(data(prod(out.shape()), 11), out.shape());
  (out * r).sum().backward();
  std::vector<std::vector<float>> ret{vals(out), vals(*x.grad()), vals(*w.grad())};
  if (b) ret.push_back(vals(*b->grad()));
  return ret;
}

const std::vector<Conv> kCases = {
    {"simple", {2, 3, 7, 7}, {4, 3, 3, 3}},
    {"batch1_odd", {1, 5, 9, 11}, {7, 5, 5, 3}, 1, {1}, {1}, {0}, true},
    {"kernel_is_input", {2, 2, 4, 5}, {3, 2, 4, 5}},
    {"1x1", {2, 4, 5, 5}, {6, 4, 1, 1}},
    {"stride2", {2, 3, 9, 9}, {4, 3, 3, 3}, 1, {2}},
    {"stride2_rows_rounded", {2, 3, 28, 27}, {4, 3, 3, 3}, 1, {2}, {1}, {1}},   // 15-wide phases computed as 16
    {"stride2_phase_in_padding", {1, 2, 1, 5}, {3, 2, 3, 3}, 1, {2}, {1}, {1}},   // the even rows' phase is all padding
    // 32 output channels per group: the phases' weight gradients read grad_output as one shared panel copy
    {"stride2_panels", {2, 3, 9, 9}, {32, 3, 3, 3}, 1, {2}, {1}, {1}, true},
    {"stride2_groups_panels", {1, 4, 10, 9}, {64, 2, 3, 3}, 2, {2}, {1}, {1}},
    // 32 input channels and 32 images: the input gradient's phases pack their weights and read grad_output's
    // channels-last copy, taps outermost (tensor/conv.cpp exact_phase_input_grad)
    {"stride2_packed_channels_last", {32, 32, 10, 12}, {32, 32, 3, 3}, 1, {2}, {1}, {1}},
    {"stride2_unread_rows", {1, 2, 10, 8}, {3, 2, 3, 3}, 1, {2, 3}},   // 10 rows: the last is in no window
    {"stride_past_kernel", {1, 2, 11, 11}, {2, 2, 2, 2}, 1, {3}},
    {"padding1", {2, 3, 6, 6}, {4, 3, 3, 3}, 1, {1}, {1}, {1}},
    {"padding_asym", {1, 2, 7, 6}, {3, 2, 3, 3}, 1, {1}, {1}, {2, 0, 1, 3}},
    {"padding_past_span", {1, 2, 5, 5}, {2, 2, 2, 2}, 1, {1}, {1}, {3}},   // padding > d*(k-1): the input gradient cuts
    {"dilation2", {1, 3, 9, 8}, {2, 3, 3, 3}, 1, {1}, {2}},
    {"stride_dilation_padding", {2, 4, 10, 9}, {4, 2, 3, 3}, 2, {2}, {2}, {1}, true},
    {"groups3", {2, 6, 7, 7}, {9, 2, 3, 3}, 3, {1}, {1}, {1}},
    {"depthwise", {2, 4, 6, 6}, {4, 1, 3, 3}, 4, {1}, {1}, {0}, true},
    {"conv1d", {2, 3, 13}, {5, 3, 4}, 1, {2}, {1}, {1}},
    {"conv3d", {1, 2, 5, 4, 6}, {3, 2, 2, 3, 2}, 1, {1}, {1}, {1}},
    {"batch_blocks", {10, 2, 26, 26}, {3, 2, 3, 3}},   // weight gradient reduced in 2 blocks of 5 images
    {"batch_blocks_prime", {7, 2, 26, 26}, {3, 2, 3, 3}, 1, {1}, {1}, {1}},   // 7 blocks of 1
    // one input channel (beautiful_mnist's conv1): the weight gradient's tile takes the kernel's columns
    {"cin1_5x5", {3, 1, 28, 28}, {32, 1, 5, 5}},
    {"cin1_3x3_padded", {2, 1, 14, 14}, {12, 1, 3, 3}, 1, {1}, {1}, {1}},
    {"cin1_5x5_odd_width", {2, 1, 20, 21}, {8, 1, 5, 5}},   // 17 output columns: no vector accumulators
    {"cin2_6x6", {2, 2, 21, 21}, {8, 2, 6, 6}},
    // the input gradient over grad_output's columns padded in its copy, its rows a view (tensor/conv.cpp
    // padded_columns), and the forward tiled along 10 output columns (20 wide)
    {"dx_columns_24", {32, 16, 8, 24}, {16, 16, 5, 5}},
    {"dx_columns_padded", {32, 16, 8, 10}, {16, 16, 3, 3}, 1, {1}, {1}, {1}, true},
    // shapes the input gradient's split at the taps takes (tensor/conv.cpp split_columns_input_grad, CONV_DX_SPLIT=1;
    // InputGradientSplitsColumnsAtTheTaps compares it with these): both borders; padding 1; one border, batch 1
    {"dx_split_columns", {32, 16, 24, 24}, {16, 16, 5, 5}, 1, {1}, {1}, {0}, true},
    {"dx_split_padded", {32, 16, 16, 18}, {16, 16, 3, 3}, 1, {1}, {1}, {1}},
    {"dx_split_one_border_batch1", {1, 16, 16, 34}, {32, 16, 3, 3}, 1, {1}, {1}, {2, 0, 1, 3}, true},
    // 64 output channels: the weight gradient's GEMM packs grad_output into two 32-channel panels (codegen/pack.cpp)
    // with the plain copy (beautiful_mnist's conv3 and conv4 at batch 3; 6x6 rows: 36, not a multiple of 8)
    {"dw_panels_8x8", {3, 32, 10, 10}, {64, 32, 3, 3}, 1, {1}, {1}, {0}, true},
    {"dw_panels_6x6", {3, 64, 8, 8}, {64, 64, 3, 3}},
};

}  // namespace

// grads() of one conv two ways: output, grad input, grad weight (and grad bias) agree. The weight and bias gradients
// sum over the batch and the output positions (12800 terms for dx_split_columns): the two paths' fp32 summation orders
// differ by ~sqrt(terms) roundings (1.2e-4 on CUDA for dx_split_columns), so their tolerance grows with that root
void expect_same_grads(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b, int64_t cout) {
  ASSERT_EQ(a.size(), b.size());
  const float summed = static_cast<float>(a[0].size() / cout);   // the weight gradient's terms per element
  for (size_t i = 0; i < a.size(); i++) {
    SCOPED_TRACE(i == 0 ? "output" : i == 1 ? "grad input" : i == 2 ? "grad weight" : "grad bias");
    expect_close(a[i], b[i], i < 2 ? 1e-4f : 1e-4f * std::max(1.0f, std::sqrt(summed / 1024)));
  }
}

TEST(ConvBackward, MatchesTheWindowViewGradient) {
  for (const Conv& c : kCases) {
    SCOPED_TRACE(c.name);
    auto fused = grads(c);
    std::vector<std::vector<float>> old;
    {
      Context ctx({{"FUSE_CONV_BW", 0}});
      old = grads(c);
    }
    expect_same_grads(fused, old, c.w[0]);
  }
}

TEST(ConvBackward, OnlyTheInputOrOnlyTheWeight) {
  Conv c{"stride_dilation_padding", {2, 4, 10, 9}, {4, 2, 3, 3}, 2, {2}, {2}, {1}};
  auto all = grads(c);
  Tensor x = F(data(prod(c.x), 1), c.x).requires_grad_(), w = F(data(prod(c.w), 7), c.w);
  Tensor out = x.conv2d(w, std::nullopt, c.groups, c.stride, c.dilation, c.padding);
  (out * F(data(prod(out.shape()), 11), out.shape())).sum().backward();
  expect_close(vals(*x.grad()), all[1], 1e-5f);
  EXPECT_FALSE(w.grad().has_value());
  Tensor x2 = F(data(prod(c.x), 1), c.x), w2 = F(data(prod(c.w), 7), c.w).requires_grad_();
  Tensor out2 = x2.conv2d(w2, std::nullopt, c.groups, c.stride, c.dilation, c.padding);
  (out2 * F(data(prod(out2.shape()), 11), out2.shape())).sum().backward();
  expect_close(vals(*w2.grad()), all[2], 1e-5f);
  EXPECT_FALSE(x2.grad().has_value());
}

// The point of the fused backward: the input gradient never materializes the windows. beautiful_mnist's
// second conv at batch 512 wrote 655 MB there; here (8, 4, 14, 14) x (4, 4, 5, 5) -> a 100x (n, ci, 10, 10, 5, 5).
TEST(ConvBackward, NoWindowSizedBuffer) {
  auto largest = [](bool fused) {
    Context ctx({{"FUSE_CONV_BW", fused ? 1 : 0}});
    Tensor x = F(data(8 * 4 * 14 * 14, 1), {8, 4, 14, 14}).requires_grad_(), w = F(data(4 * 4 * 25, 7), {4, 4, 5, 5}).requires_grad_();
    x.conv2d(w).square().sum().backward();
    int64_t big = 0;
    for (const ScheduleItem& si : x.grad()->schedule({*w.grad()}))
      for (const auto& b : si.bufs) big = std::max(big, b->size);
    return big;
  };
  const int64_t windows = 8 * 4 * 10 * 10 * 25;
  EXPECT_GE(largest(false), windows);   // the op-by-op gradient writes them
  EXPECT_LT(largest(true), windows / 4);
}

// The small-cin cases again with NOOPT=1: the heuristics' tiles (a kernel column axis upcast whole next
// to 4 output channels) against the plain loops.
TEST(ConvBackward, SmallCinMatchesNoopt) {
  for (const Conv& c : kCases) {
    if (std::string(c.name).rfind("cin", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    auto opt = grads(c);
    std::vector<std::vector<float>> plain;
    {
      Context ctx({{"NOOPT", 1}});
      plain = grads(c);
    }
    for (size_t i = 0; i < opt.size(); i++) expect_close(opt[i], plain[i], 1e-4f);
  }
}

// beautiful_mnist's conv1 weight gradient (batch 8): the kernel reading x and grad_output (the other sums its blocks).
// The tile tests pin THREADS=2 (their caller holds the Context): with more threads the 8 images split into blocks of
// one (tensor/conv.cpp weight_grad), a different kernel.
std::optional<ScheduleItem> conv1_weight_gemm() {
  const Opts o{dtypes::float32, "CPU", false};
  Tensor x = Tensor::empty({8, 1, 28, 28}, o), w = Tensor::empty({32, 1, 5, 5}, o), r = Tensor::empty({8, 32, 24, 24}, o);
  w.requires_grad_();
  (x.conv2d(w) * r).sum().backward();
  std::optional<ScheduleItem> gemm;
  for (const ScheduleItem& si : w.grad()->schedule())
    if (si.kind == MetaOps::KERNEL && si.bufs.size() == 3) gemm = si;
  return gemm;
}

// the CPU kernel of `ast` with the hand-coded opts, linearized
std::vector<UOp> hand_coded_uops(const UOp& ast) {
  static const ClangRenderer ren;
  Kernel k(ast, ren);
  k.hand_coded_optimizations();
  return k.linearize();
}

// beautiful_mnist's conv1 weight gradient (grad_output's channels are strided: no vector axis in the
// output): 4 output channels x 5 kernel taps in registers, 20 vector accumulators, where the
// old tile (8 channels x 1) loaded 9 vectors per 8 FMAs.
TEST(ConvBackward, SmallCinWeightGradientTilesKernelColumns) {
  Context two({{"THREADS", 2}});
  const std::optional<ScheduleItem> gemm = conv1_weight_gemm();
  ASSERT_TRUE(gemm);
  int accs = 0, lanes = 0;
  for (const UOp& u : hand_coded_uops(Access::uop(gemm->ast)))
    if (u->op == Ops::DEFINE_ACC) accs++, lanes = std::max<int>(lanes, u->dtype.count);
  EXPECT_EQ(accs, 20) << "4 output channels x 5 kernel taps";
  // the reduce runs over the 24x24 positions as one contiguous axis (x's rows shifted per kx,
  // tensor/conv.cpp row_shifted_weight_grad): a vector's full 16 lanes, not 8 of a 24-wide row
  EXPECT_EQ(lanes, 16);
}

// The same kernel streams grad_output (4 channels x the images of a batch block): its loop prefetches the next
// image's line of each of the tile's 4 channel rows (codegen/lowerer.cpp prefetch_next_outer), and nothing of
// x's shifted rows, which stay in L1 across the output-channel loop.
TEST(ConvBackward, SmallCinWeightGradientPrefetchesTheNextImage) {
  Context two({{"THREADS", 2}});
  const std::optional<ScheduleItem> gemm = conv1_weight_gemm();
  ASSERT_TRUE(gemm);
  std::set<int64_t> bufs;
  int prefetches = 0;
  for (const UOp& u : hand_coded_uops(Access::uop(gemm->ast)))
    if (u->op == Ops::PREFETCH) prefetches++, bufs.insert(u->src[0]->as<int64_t>());
  EXPECT_EQ(prefetches, 4) << "one per output channel of the tile";
  ASSERT_EQ(bufs.size(), 1u);
  EXPECT_EQ(gemm->bufs[static_cast<size_t>(*bufs.begin())]->size, int64_t{8} * 32 * 24 * 24) << "grad_output's";
  Context off({{"GEMM_PREFETCH", 0}});
  for (const UOp& u : hand_coded_uops(Access::uop(gemm->ast))) EXPECT_NE(u->op, Ops::PREFETCH);
}

// A strided conv's weight gradient by phases: the phases read grad_output from one copy laid out as the CPU GEMM's
// panels (tensor/conv.cpp panel_copy), so none of their GEMMs packs it again (before: one pack per phase).
TEST(ConvBackward, StridedWeightGradientPhasesShareOnePanelCopy) {
  Context ctx({{"CONV_DW_STRIDED_PANEL", 0}});   // (the default reads x in one GEMM: StridedWeightGradientReadsXOnce)
  const Opts o{dtypes::float32, "CPU", false};
  Tensor x = Tensor::empty({32, 64, 28, 28}, o), w = Tensor::empty({64, 64, 3, 3}, o), r = Tensor::empty({32, 64, 14, 14}, o);
  w.requires_grad_();
  (x.conv2d(w, std::nullopt, 1, {2}, {1}, {1}) * r).sum().backward();
  ClangRenderer ren;
  int gemms = 0, packed = 0;
  for (const ScheduleItem& si : w.grad()->schedule()) {
    if (si.kind != MetaOps::KERNEL) continue;
    Kernel k(Access::uop(si.ast), ren);
    if (!k.reduceop() || si.bufs.size() != 3) continue;
    bool mul = false;   // the phase GEMMs: a SUM of a product of two buffers
    for (const UOp& u : Access::uop(si.ast).toposort()) mul = mul || is_alu(u, BinaryOps::MUL);
    if (!mul) continue;
    gemms++;
    packed += cpu_gemm_pack(Access::uop(si.ast), ren).has_value();
  }
  EXPECT_EQ(gemms, 4);
  EXPECT_EQ(packed, 0);
}

// A ResNet-style stride-2 conv (28x28, padding 1): its input gradient's phases (tensor/conv.cpp exact_phase_input_grad)
// are 14 positions per dim; with 16 input channels every phase is rounded to 16 wide, so its register tile is one
// 16-lane vector of positions x 8 input channels x 2 images: 16 float16 accumulators, not float2 ones along unrolled
// kernel taps (a 2-tap phase) nor 8 images' scattered windows as the rows. With 64 input channels (packed weights,
// grad_output's copy channels-last) the tile is 7 or 8 rows x 2 vectors of input channels (14 or 16 float16
// accumulators): positions, or images, whose broadcasts then come from one line of channels each.
// CONV_DX_PHASE_EXACT=0 (strided_input_grad: 15 rows, 16 columns) tiles the 16-channel case the same way.
TEST(ConvBackward, StridedInputGradientPhasesTileWholeRows) {
  for (const auto& [cin, exact] : {std::pair{16, 1}, std::pair{16, 0}, std::pair{64, 1}}) {
    SCOPED_TRACE("cin " + std::to_string(cin) + " exact phases " + std::to_string(exact));
    Context ctx({{"CONV_DX_PHASE_EXACT", exact}});
    const Opts o{dtypes::float32, "CPU", false};
    const int64_t bs = cin == 64 ? 32 : 4;
    Tensor x = Tensor::empty({bs, cin, 28, 28}, o), w = Tensor::empty({cin, cin, 3, 3}, o), r = Tensor::empty({bs, cin, 14, 14}, o);
    x.requires_grad_();
    (x.conv2d(w, std::nullopt, 1, {2}, {1}, {1}) * r).sum().backward();
    ClangRenderer ren;
    int phases = 0;
    for (const ScheduleItem& si : x.grad()->schedule()) {
      if (si.kind != MetaOps::KERNEL) continue;
      const auto plan = cpu_gemm_pack(Access::uop(si.ast), ren);
      Kernel k(plan ? plan->gemm_ast : Access::uop(si.ast), ren);
      if (!k.reduceop()) continue;
      k.hand_coded_optimizations();
      int accs = 0, lanes = 0;
      for (const UOp& u : k.linearize())
        if (u->op == Ops::DEFINE_ACC) accs++, lanes = std::max<int>(lanes, u->dtype.count);
      SCOPED_TRACE(k.name());
      EXPECT_EQ(lanes, 16);
      if (cin == 16) EXPECT_EQ(accs, 16) << "8 input channels x 2 images";
      else EXPECT_TRUE(accs == 14 || accs == 16) << accs << " accumulators: 7 or 8 positions x 2 vectors";
      phases++;
    }
    EXPECT_EQ(phases, 4);
  }
}

// A stride-1 input gradient 24 columns wide (beautiful_mnist's conv2 at 20x20 -> 24x24): grad_output's columns are
// padded in its copy, so the register tile runs along 8 of dx's columns (grad_output read at stride 1 along the
// tile's rows: one row of one image per reduce step) x 2 vectors of input channels, where the column gates kept
// 8 images as the rows; the row taps are still narrowed (a gated load's loop bounds, no gate left).
TEST(ConvBackward, InputGradientTilesColumns) {
  for (int columns : {1, 0}) {
    Context ctx({{"CONV_DX_COLUMNS", columns}});
    const Opts o{dtypes::float32, "CPU", false};
    Tensor x = Tensor::empty({32, 32, 12, 24}, o), w = Tensor::empty({32, 32, 5, 5}, o);
    x.requires_grad_();
    Tensor out = x.conv2d(w);
    (out * Tensor::empty(out.shape(), o)).sum().backward();
    const int gemms = for_each_packed_gemm(*x.grad(), ClangRenderer(), [&](Kernel& k) {
      int accs = 0;
      for (const UOp& u : k.linearize()) accs += u->op == Ops::DEFINE_ACC && u->dtype.count == 16;
      EXPECT_EQ(column_rows(k, 8), columns == 1) << k.name();
      EXPECT_EQ(accs, 16) << k.name();
    });
    EXPECT_EQ(gemms, 1);
  }
}

// A 28-wide input gradient (a ResNet 3x3's) pads grad_output's columns too (tensor/conv.cpp padded_columns): its tile
// runs along 4 of dx's columns x 2 vectors on AVX2 (5 or 4 column tiles there), 7 with AVX-512; its values equal the
// unpadded path's.
TEST(ConvBackward, InputGradientTilesColumnsOf28Wide) {
  const Opts o{dtypes::float32, "CPU", false};
  for (const auto& [bytes, tile] : {std::pair{32, 4}, std::pair{64, 7}}) {
    SCOPED_TRACE("register bytes " + std::to_string(bytes));
    auto dx = [&](int columns) {
      Context ctx({{"CPU_REGISTER_BYTES", bytes}, {"CONV_DX_COLUMNS", columns}});
      Tensor x = Tensor::from(data(32 * 32 * 8 * 28, 3), {32, 32, 8, 28}, o), w = Tensor::from(data(32 * 32 * 9, 5), {32, 32, 3, 3}, o);
      x.requires_grad_();
      Tensor out = x.conv2d(w, std::nullopt, 1, {1}, {1}, {1});
      (out * Tensor::from(data(prod(out.shape()), 7), out.shape(), o)).sum().backward();
      ClangRenderer ren;
      ren.register_bytes = bytes, ren.vector_registers = bytes == 64 ? 32 : 16;   // (as cpu_register_bytes() builds it)
      const int gemms = for_each_packed_gemm(*x.grad(), ren, [&](Kernel& k) { EXPECT_EQ(column_rows(k, tile), columns == 1) << k.name(); });
      EXPECT_EQ(gemms, 1);
      return vals(*x.grad());
    };
    const std::vector<float> padded = dx(1), view = dx(0);
    ASSERT_EQ(padded.size(), view.size());
    for (size_t i = 0; i < padded.size(); i++) ASSERT_NEAR(padded[i], view[i], 1e-3f * (1 + std::fabs(view[i]))) << i;
  }
}

// A strided conv's input gradient by phases (tensor/conv.cpp exact_phase_input_grad; strided_input_grad with
// CONV_DX_PHASE_EXACT=0): the multiply-adds of its schedule are about the forward's (here 26x26/(24x24) of them: per dim
// 9 positions x 2 taps + 8 x 1 against 8 outputs x 3 taps; the padded input's phases: 9 x 3), where the conv over the
// dilated grad_output did 17x17 positions of every tap (4.5x).
TEST(ConvBackward, StridedInputGradientSkipsTheZeros) {
  const Opts o{dtypes::float32, "CPU", false};
  Tensor x = Tensor::empty({2, 8, 17, 17}, o), w = Tensor::empty({8, 8, 3, 3}, o), r = Tensor::empty({2, 8, 8, 8}, o);
  x.requires_grad_();
  (x.conv2d(w, std::nullopt, 1, {2}) * r).sum().backward();
  int64_t macs = 0;
  for (const ScheduleItem& si : x.grad()->schedule()) {
    if (si.kind != MetaOps::KERNEL) continue;
    for (const UOp& u : Access::uop(si.ast).toposort()) {
      if (u->op != Ops::REDUCE_AXIS || !is_alu(u->src[0], BinaryOps::MUL)) continue;
      int64_t n = 0;   // the reduce's full shape: its biggest tracker's
      for (const UOp& t : u->src[0].toposort())
        if (t->op == Ops::SHAPETRACKER) n = std::max(n, prod(st_of(t).shape()));
      macs += n;
    }
  }
  const int64_t forward = int64_t{2} * 8 * 8 * 8 * 8 * 9;
  EXPECT_LE(macs, forward * 3 / 2) << "multiply-adds " << macs << " vs the forward's " << forward;
  EXPECT_GE(macs, forward);
}

// The channels-last conv (CONV_NHWC=2 takes it on the CPU; by default only CUDA fp16/bf16 convs with cin % 8 == 0
// do): the same output and gradients as the channels-first one, for every groups-1 case. Its input gradient is
// itself a channels-last conv (conv_pooled), so the backward runs the new forward twice more.
TEST(ConvBackward, ChannelsLastMatches) {
  for (const Conv& c : kCases) {
    if (c.groups != 1) continue;
    SCOPED_TRACE(c.name);
    std::vector<std::vector<float>> nhwc, nchw;
    {
      Context ctx({{"CONV_NHWC", 2}});
      nhwc = grads(c);
    }
    {
      Context ctx({{"CONV_NHWC", 0}});
      nchw = grads(c);
    }
    expect_same_grads(nhwc, nchw, c.w[0]);
  }
}

namespace {
// The multiply-adds a linearized CPU kernel runs: its loops executed (the integer index math evaluated,
// so loops whose bounds depend on outer loops run as they would), and per iteration of an innermost loop
// the lanes of the float MULs and MULACCs in its body.
int64_t executed_macs(const std::vector<UOp>& uops) {
  std::map<const UOpNode*, int64_t> val;
  std::map<const UOpNode*, size_t> end_of;   // RANGE -> its ENDRANGE's position
  for (size_t i = 0; i < uops.size(); i++)
    if (uops[i]->op == Ops::ENDRANGE) end_of[uops[i]->src[0].get()] = i;
  auto macs_in = [&](size_t r) {   // the MAC lanes of an innermost loop's body, -1 when a loop is nested in it
    int64_t m = 0;
    for (size_t i = r + 1; i < end_of.at(uops[r].get()); i++) {
      const UOp& u = uops[i];
      if (u->op == Ops::RANGE) return int64_t{-1};
      if (u->op == Ops::ALU && u->dtype.is_float() && (is_alu(u, BinaryOps::MUL) || is_alu(u, TernaryOps::MULACC))) m += u->dtype.count;
    }
    return m;
  };
  auto eval = [&](const UOp& u) -> std::optional<int64_t> {
    std::vector<int64_t> s;
    for (const UOp& x : u->src) {
      auto it = val.find(x.get());
      if (it == val.end()) return std::nullopt;
      s.push_back(it->second);
    }
    if (u->op == Ops::CAST) return s[0];
    if (is_alu(u, UnaryOps::NEG)) return u->dtype.is_bool() ? !s[0] : -s[0];
    if (is_alu(u, BinaryOps::ADD)) return s[0] + s[1];
    if (is_alu(u, BinaryOps::MUL)) return s[0] * s[1];
    if (is_alu(u, BinaryOps::MAX)) return std::max(s[0], s[1]);
    if (is_alu(u, BinaryOps::IDIV)) return s[0] / s[1];
    if (is_alu(u, BinaryOps::MOD)) return s[0] % s[1];
    if (is_alu(u, BinaryOps::CMPLT)) return s[0] < s[1];
    if (is_alu(u, BinaryOps::CMPNE)) return s[0] != s[1];
    if (is_alu(u, BinaryOps::AND)) return s[0] & s[1];
    if (is_alu(u, TernaryOps::WHERE)) return s[0] ? s[1] : s[2];
    return std::nullopt;
  };
  std::vector<std::pair<size_t, int64_t>> loops;   // (RANGE position, end) of the open loops
  int64_t macs = 0;
  for (size_t pc = 0; pc < uops.size(); pc++) {
    const UOp& u = uops[pc];
    if (u->op == Ops::CONST && u->dtype.count == 1 && !u->dtype.is_float()) val[u.get()] = const_to_int(u.const_value());
    if (u->op == Ops::RANGE) {
      const int64_t lo = val.at(u->src[0].get()), hi = val.at(u->src[1].get());
      if (lo >= hi) { pc = end_of.at(u.get()); continue; }
      val[u.get()] = lo;
      loops.push_back({pc, hi});
      if (int64_t m = macs_in(pc); m > 0) macs += m;
    } else if (u->op == Ops::ENDRANGE) {
      auto& [r, hi] = loops.back();
      if (++val[uops[r].get()] < hi) {
        if (int64_t m = macs_in(r); m > 0) macs += m;
        pc = r;
      } else {
        loops.pop_back();
      }
    } else if (u->op == Ops::ALU && u->dtype.count == 1 && !u->dtype.is_float()) {
      if (auto v = eval(u)) val[u.get()] = *v;
    }
  }
  return macs;
}

// the multiply-adds of every kernel of t's schedule, as the CPU runs them (a GEMM's B operand packed)
int64_t schedule_macs(const Tensor& t) {
  ClangRenderer ren;
  int64_t macs = 0;
  for (const ScheduleItem& si : t.schedule()) {
    if (si.kind != MetaOps::KERNEL) continue;
    const auto plan = cpu_gemm_pack(Access::uop(si.ast), ren);
    macs += executed_macs(hand_coded_uops(plan ? plan->gemm_ast : Access::uop(si.ast)));
  }
  return macs;
}
}  // namespace

// A stride-1 conv's input gradient runs only the useful multiply-adds: the (input position, tap) pairs
// that meet grad_output, not the taps over its padding (tensor/conv.cpp reads the padding as a view,
// codegen/narrow_reduce.cpp narrows the tap loops). beautiful_mnist's conv2 shape (5x5 taps, 24x24 inputs
// from 20x20 outputs) did 1.44x the useful ones; here 10x10 from 6x6: 2.8x. CONV_DX_NARROW=0 keeps that.
// Where dx's rows are a multiple of 8 or 10 wide, grad_output's columns are padded in its copy (the CPU tile runs
// along dx's columns: tensor/conv.cpp padded_columns), so only the rows' taps are narrowed; CONV_DX_COLUMNS=0
// narrows both.
TEST(ConvBackward, InputGradientSkipsThePaddingsTaps) {
  // (narrowed: where the GEMM path still packs the weights; 8 input channels, 8 images or rows of whole
  // vectors keep the padded copy, whose tiles the masks would make worse)
  struct Case { Shape x, w, pad; bool narrowed = true; };
  for (const Case& c : {Case{{32, 32, 12, 12}, {32, 32, 5, 5}, {0}}, Case{{32, 16, 10, 10}, {16, 16, 3, 3}, {0}},
                         Case{{32, 32, 9, 14}, {32, 32, 3, 3}, {1}}, Case{{32, 32, 9, 11}, {32, 32, 3, 3}, {2, 0, 1, 3}},
                         Case{{32, 8, 12, 12}, {16, 8, 3, 3}, {1}, false}, Case{{8, 32, 12, 12}, {32, 32, 5, 5}, {0}, false},
                         Case{{32, 32, 16, 16}, {32, 32, 3, 3}, {1}, false}}) {
    SCOPED_TRACE(to_str(c.x) + " pad " + to_str(c.pad));
    auto macs = [&](bool narrow, bool columns = true) {
      Context ctx({{"CONV_DX_NARROW", narrow ? 1 : 0}, {"CONV_DX_COLUMNS", columns ? 1 : 0}});
      const Opts o{dtypes::float32, "CPU", false};
      Tensor x = Tensor::empty(c.x, o), w = Tensor::empty(c.w, o);
      x.requires_grad_();
      Tensor out = x.conv2d(w, std::nullopt, 1, {1}, {1}, c.pad);
      (out * Tensor::empty(out.shape(), o)).sum().backward();
      return std::pair{schedule_macs(*x.grad()), out.shape()};
    };
    const auto [narrowed, oshape] = macs(true);
    // per spatial dim: the (input position, tap) pairs whose grad_output position lies in it
    int64_t useful = c.x[0] * c.x[1] * c.w[0], rows_only = useful;
    for (size_t j = 0; j < 2; j++) {
      const int64_t pl = c.pad.size() == 1 ? c.pad[0] : c.pad[2 * (1 - j)], k = c.w[2 + j], O = oshape[2 + j];
      int64_t pairs = 0;
      for (int64_t y = 0; y < c.x[2 + j]; y++)
        for (int64_t t = 0; t < k; t++) pairs += y + pl - t >= 0 && y + pl - t < O;
      useful *= pairs;
      rows_only *= j == 0 ? pairs : c.x[2 + j] * k;
    }
    const bool columns = c.narrowed && (c.x[3] % 8 == 0 || c.x[3] % 10 == 0);
    const int64_t padded = c.x[0] * c.x[1] * c.w[0] * prod(c.x) / (c.x[0] * c.x[1]) * c.w[2] * c.w[3];
    EXPECT_EQ(narrowed, columns ? rows_only : c.narrowed ? useful : padded);
    if (columns) EXPECT_EQ(macs(true, false).first, useful) << "CONV_DX_COLUMNS=0: the columns' taps narrowed too";
    EXPECT_EQ(macs(false).first, padded) << "every tap at every position";
  }
}

// Where the interior columns (every tap in grad_output) tile by 8 or 10 and so do dx's rows, the input gradient splits
// at the taps (tensor/conv.cpp split_columns_input_grad): the interior without column padding, the border columns with
// their column taps narrowed and their rows padded. Multiply-adds: the useful ones plus the border's row padding (conv2's
// 24x24 from 20x20: 1.04x), where the padded columns (CONV_DX_SPLIT=0, the default) ran 1.2x; three GEMMs, no copy of
// grad_output padded along its columns; values equal the unsplit gradient's and NOOPT's.
TEST(ConvBackward, InputGradientSplitsColumnsAtTheTaps) {
  struct Case { Shape x, w, pad; int gemms; };
  for (const Case& c : {Case{{32, 16, 24, 24}, {16, 16, 5, 5}, {0}, 3}, Case{{32, 16, 16, 18}, {16, 16, 3, 3}, {1}, 3},
                         Case{{1, 16, 16, 34}, {32, 16, 3, 3}, {2, 0, 1, 3}, 2}}) {
    SCOPED_TRACE(to_str(c.x) + " pad " + to_str(c.pad));
    const Opts o{dtypes::float32, "CPU", false};   // the split is the CPU's (the default device may be CUDA)
    auto Fc = [&](std::vector<float> v, Shape s) { return Tensor::from<float>(v, s, o); };
    auto run = [&](bool split) {
      Context ctx({{"CONV_DX_SPLIT", split ? 1 : 0}});
      Tensor x = Fc(data(prod(c.x), 1), c.x).requires_grad_(), w = Fc(data(prod(c.w), 7), c.w);
      Tensor out = x.conv2d(w, std::nullopt, 1, {1}, {1}, c.pad);
      (out * Fc(data(prod(out.shape()), 11), out.shape())).sum().backward();
      ClangRenderer ren;
      int gemms = 0;   // kernels with multiply-adds
      int64_t padded_copy = 0, macs = 0;   // padded_copy: kernels writing grad_output with its columns padded (k - 1 wider)
      for (const ScheduleItem& si : x.grad()->schedule()) {
        if (si.kind != MetaOps::KERNEL) continue;
        const auto plan = cpu_gemm_pack(Access::uop(si.ast), ren);
        const int64_t m = executed_macs(hand_coded_uops(plan ? plan->gemm_ast : Access::uop(si.ast)));
        macs += m, gemms += m > 0;
        if (si.bufs[0]->size == prod(out.shape()) / out.shape()[3] * (c.x[3] + c.w[3] - 1)) padded_copy++;
      }
      return std::tuple{macs, vals(*x.grad()), out.shape(), gemms, padded_copy};
    };
    const auto [macs, dx, oshape, gemms, copies] = run(true);
    const auto [old_macs, old_dx, oshape0, old_gemms, old_copies] = run(false);
    // per spatial dim: (input position, tap) pairs whose grad_output position lies in it, and the interior's
    int64_t pairs[2] = {0, 0}, interior = 0;
    for (size_t j = 0; j < 2; j++) {
      const int64_t pl = c.pad.size() == 1 ? c.pad[0] : c.pad[2 * (1 - j)], k = c.w[2 + j], O = oshape[2 + j];
      for (int64_t y = 0; y < c.x[2 + j]; y++) {
        int64_t taps = 0;
        for (int64_t t = 0; t < k; t++) taps += y + pl - t >= 0 && y + pl - t < O;
        pairs[j] += taps;
        if (j == 1 && taps == k) interior += k;
      }
    }
    const int64_t nck = c.x[0] * c.x[1] * c.w[0], rows_padded = c.x[2] * c.w[2], cols_padded = c.x[3] * c.w[3];
    const bool columns = c.x[3] % 8 == 0 || c.x[3] % 10 == 0;
    (void)oshape0;
    // (batch 1: its tiles leave some taps unnarrowed either way, old and new: values only)
    if (c.x[0] > 1) {
      EXPECT_EQ(macs, nck * (pairs[0] * interior + rows_padded * (pairs[1] - interior)));
      // CONV_DX_SPLIT=0: 8 or 10 dividing dx's width, the columns padded in a copy and their zeros multiplied; else
      // both dims narrowed, grad_output's columns as a view (an 8-image tile)
      EXPECT_EQ(old_macs, nck * pairs[0] * (columns ? cols_padded : pairs[1]));
    }
    EXPECT_EQ(gemms, c.gemms);
    EXPECT_EQ(old_gemms, 1);
    EXPECT_EQ(copies, 0);
    EXPECT_EQ(old_copies, columns ? 1 : 0);
    expect_close(dx, old_dx, 1e-4f);
    Context noopt({{"NOOPT", 1}, {"CONV_DX_SPLIT", 1}});
    Tensor x = Fc(data(prod(c.x), 1), c.x).requires_grad_(), w = Fc(data(prod(c.w), 7), c.w);
    Tensor out = x.conv2d(w, std::nullopt, 1, {1}, {1}, c.pad);
    (out * Fc(data(prod(out.shape()), 11), out.shape())).sum().backward();
    expect_close(dx, vals(*x.grad()), 1e-4f);
  }
}

// A strided conv's input gradient by the phases of the input itself (tensor/conv.cpp exact_phase_input_grad): each
// phase computes ceil((in - q) / s) positions, not the padded input's ceil(P / s) that strided_input_grad computed
// (CONV_DX_PHASE_EXACT=0; resnet_s2_bw's 28-wide pad-1 phases: 15 rows, 14 kept), and along the last dim only a phase
// with one tap there (or a short reduce, or under 32 input channels) is rounded up to 16 (14 -> 16). Multiply-adds of the schedule as
// the CPU runs it, exactly: per dim and phase (positions computed x taps), where the old path ran every phase L wide
// (L = ceil(P / s), the last dim's rounded to 16 within 1/8). Values against the old path and NOOPT.
TEST(ConvBackward, StridedInputGradientPhasesAreExact) {
  struct Case { Shape x, w, stride, pad; };
  for (const Case& c : {Case{{32, 32, 4, 28}, {64, 32, 3, 3}, {2}, {1, 1}}, Case{{2, 32, 28, 28}, {64, 32, 3, 3}, {2}, {1, 1}},
                         Case{{4, 16, 28, 28}, {16, 16, 3, 3}, {2}, {1, 1}}, Case{{2, 16, 13, 9}, {32, 16, 3, 3}, {2}, {0, 0}},
                         Case{{3, 16, 10, 11}, {16, 16, 5, 4}, {3, 2}, {2, 1, 0, 3}}, Case{{1, 16, 8, 1}, {16, 16, 3, 1}, {2, 1}, {1, 0}}}) {
    SCOPED_TRACE(to_str(c.x) + " stride " + to_str(c.stride) + " pad " + to_str(c.pad));
    const Opts o{dtypes::float32, "CPU", false};
    auto Fc = [&](std::vector<float> v, Shape s) { return Tensor::from<float>(v, s, o); };
    auto run = [&](bool exact_phases, bool noopt = false) {
      Context ctx({{"CONV_DX_PHASE_EXACT", exact_phases ? 1 : 0}, {"NOOPT", noopt ? 1 : 0}});
      Tensor x = Fc(data(prod(c.x), 1), c.x).requires_grad_(), w = Fc(data(prod(c.w), 7), c.w);
      Tensor out = x.conv2d(w, std::nullopt, 1, c.stride, {1}, c.pad);
      (out * Fc(data(prod(out.shape()), 11), out.shape())).sum().backward();
      return std::pair{schedule_macs(*x.grad()), vals(*x.grad())};
    };
    const auto [macs, dx] = run(true);
    const auto [old_macs, old_dx] = run(false);
    int64_t old = c.x[0] * c.x[1] * c.w[0], exact = 0;
    std::vector<std::pair<int64_t, int64_t>> ph[2];   // per dim and input phase: (positions, taps)
    for (size_t j = 0; j < 2; j++) {
      const int64_t in = c.x[2 + j], k = c.w[2 + j], st = c.stride[c.stride.size() == 1 ? 0 : j];
      const size_t np = c.pad.size();   // 2 values: per dim; 4: pad2d's order, the last dim's pair first
      const int64_t pl = np == 2 ? c.pad[j] : c.pad[2 * (1 - j)], pr = np == 2 ? c.pad[j] : c.pad[2 * (1 - j) + 1];
      int64_t L = (in + pl + pr + st - 1) / st, sum_old = 0;
      if (j == 1 && L % 16 != 0 && (L / 16 + 1) * 16 * 8 <= L * 9) L = (L / 16 + 1) * 16;
      for (int64_t q = 0; q < st && q < in; q++) {
        const int64_t r = (q + pl) % st;
        ph[j].push_back({(in - q + st - 1) / st, r < k ? (k - r + st - 1) / st : 0});
      }
      for (int64_t r = 0; r < st && r < k; r++) sum_old += (k - r + st - 1) / st * L;
      old *= sum_old;
    }
    // the last dim rounded to 16 within 1/7, but for a phase with 2+ taps there, 32+ input channels, a reduce of 128+ and a
    // batch (or phase) of 32+
    for (const auto& [My, ty] : ph[0])
      for (const auto& [Mx, tx] : ph[1]) {
        const bool exact_cols = tx > 1 && c.x[1] % 32 == 0 && c.w[0] * ty * tx >= 128 && std::max({c.x[0], ph[0][0].first, ph[1][0].first}) >= 32;
        const bool round = !exact_cols && Mx % 16 != 0 && (Mx / 16 + 1) * 16 * 7 <= Mx * 8;
        exact += c.x[0] * c.x[1] * c.w[0] * My * ty * tx * (round ? (Mx / 16 + 1) * 16 : Mx);
      }
    EXPECT_EQ(macs, exact);
    EXPECT_EQ(old_macs, old);
    EXPECT_LT(macs, old_macs);
    expect_close(dx, old_dx, 1e-4f);
    expect_close(dx, run(true, true).second, 1e-4f);
  }
}

// A strided conv's weight gradient on the CPU, where grad_output takes the panel copy, is one GEMM over x's strided
// window view (tensor/conv.cpp strided_panel_weight_grad): its schedule copies only grad_output (the panels), where the
// phases (CONV_DW_STRIDED_PANEL=0, strided_weight_grad) also copied x split by phase and ran a GEMM per phase. The gradient
// equals the phases' and NOOPT's: a ResNet-style 3x3 stride 2 pad 1, batch 1 with odd sizes, stride (3, 2) with
// asymmetric padding, a 1-row input whose taps 0 and 2 read only padding, groups with 32-channel panels; and where the
// phases stay: 3 output channels (no panel copy), a stem-like 3-channel 7x7 (the phases' GEMMs tile kernel columns), and
// a panel (32 channels x 784 positions, 100 KB) over half of a 128 KB L2 (CPU_L2).
TEST(ConvBackward, StridedWeightGradientReadsXOnce) {
  struct Case { Shape x, w, stride, pad; int groups; int gemms; int64_t l2 = 0; };
  for (const Case& c : {Case{{4, 64, 28, 28}, {64, 64, 3, 3}, {2}, {1, 1}, 1, 1}, Case{{1, 16, 13, 9}, {32, 16, 3, 3}, {2}, {1, 1}, 1, 1},
                         Case{{3, 8, 10, 11}, {32, 8, 5, 4}, {3, 2}, {2, 1, 0, 3}, 1, 1}, Case{{1, 4, 1, 5}, {32, 4, 3, 3}, {2}, {1, 1}, 1, 1},
                         Case{{2, 8, 9, 10}, {64, 4, 3, 3}, {2}, {1, 1}, 2, 1}, Case{{2, 4, 7, 6}, {3, 4, 3, 3}, {2}, {2, 2}, 1, 4},
                         Case{{2, 3, 19, 17}, {32, 3, 7, 7}, {2}, {3, 3}, 1, 4}, Case{{4, 64, 28, 28}, {64, 64, 3, 3}, {2}, {1, 1}, 1, 4, 128 << 10}}) {
    SCOPED_TRACE(to_str(c.x) + " stride " + to_str(c.stride) + " pad " + to_str(c.pad) + " groups " + std::to_string(c.groups));
    const Context l2(c.l2 ? std::map<std::string, std::string>{{"CPU_L2", std::to_string(c.l2)}} : std::map<std::string, std::string>{});
    const Opts o{dtypes::float32, "CPU", false};
    auto Fc = [&](std::vector<float> v, Shape s) { return Tensor::from<float>(v, s, o); };
    // (the weight gradient's GEMMs, its copies: kernels of one input and no reduce, its values)
    auto run = [&](bool panel, bool noopt = false) {
      Context ctx({{"CONV_DW_STRIDED_PANEL", panel ? 1 : 0}, {"NOOPT", noopt ? 1 : 0}});
      Tensor x = Fc(data(prod(c.x), 1), c.x), w = Fc(data(prod(c.w), 7), c.w).requires_grad_();
      Tensor out = x.conv2d(w, std::nullopt, c.groups, c.stride, {1}, c.pad);
      (out * Fc(data(prod(out.shape()), 11), out.shape())).sum().backward();
      ClangRenderer ren;
      int gemms = 0, copies = 0;
      for (const ScheduleItem& si : w.grad()->schedule()) {
        if (si.kind != MetaOps::KERNEL) continue;
        bool mul = false;
        for (const UOp& u : Access::uop(si.ast).toposort()) mul = mul || is_alu(u, BinaryOps::MUL);
        const bool reduce = Kernel(Access::uop(si.ast), ren).reduceop().has_value();
        gemms += mul && si.bufs.size() == 3 && reduce;
        copies += !reduce && si.bufs.size() == 2;
      }
      return std::tuple{gemms, copies, vals(*w.grad())};
    };
    const auto [gemms, copies, dw] = run(true);
    const auto [old_gemms, old_copies, old_dw] = run(false);
    EXPECT_EQ(gemms, c.gemms);
    EXPECT_EQ(copies, c.gemms == 1 ? 1 : old_copies);
    int64_t phases = 1;   // one GEMM per phase with taps
    for (size_t j = 0; j < 2; j++) phases *= std::min(c.w[2 + j], c.stride[c.stride.size() == 1 ? 0 : j]);
    EXPECT_EQ(old_gemms, phases);
    EXPECT_EQ(old_copies, 1 + (c.w[0] / c.groups % 32 == 0));   // the phases' copy of x (and the panels where they take them)
    expect_close(dw, old_dw, 2e-4f);
    expect_close(dw, std::get<2>(run(true, true)), 2e-4f);
  }
}

// An integer input (beautiful_mnist's uint8 images) is cast to grad_output's dtype before the weight gradient's window
// view: cast after it, the cast was an elementwise of the expanded windows' shape, realized whole (conv1 at batch 512:
// E_2560_576_5, 29 MB) and read by a worse GEMM (10 GFLOPS against 100). Each weight-gradient path: rows shifted
// (cin * K <= 64), the plain GEMM, a strided conv's phases. The gradient equals the float input's, and its schedule
// writes at most one float copy of x more than the float input's.
TEST(ConvBackward, IntegerInputWeightGradientReadsNoWindowCopy) {
  struct Case { Shape x, w, stride; };
  for (const Case& c : {Case{{8, 1, 28, 28}, {32, 1, 5, 5}, {1}}, Case{{4, 8, 12, 12}, {16, 8, 3, 3}, {1}},
                        Case{{4, 3, 13, 13}, {8, 3, 3, 3}, {2}}}) {
    SCOPED_TRACE(to_str(c.x) + " stride " + to_str(c.stride));
    std::vector<float> xs(static_cast<size_t>(prod(c.x)));
    for (size_t i = 0; i < xs.size(); i++) xs[i] = static_cast<float>((i * 2654435761u) % 16);
    auto weight_grad = [&](bool u8) {
      Tensor x = F(xs, c.x);
      if (u8) x = x.cast(dtypes::uint8).realize();
      Tensor w = F(data(prod(c.w), 7), c.w).requires_grad_(), b = F(data(c.w[0], 3), {c.w[0]}).requires_grad_();
      Tensor out = x.conv2d(w, b, 1, c.stride);
      (out * F(data(prod(out.shape()), 11), out.shape())).sum().backward();
      int64_t written = 0;
      for (const ScheduleItem& si : w.grad()->schedule())
        if (si.kind == MetaOps::KERNEL) written += si.bufs[0]->size;
      return std::pair{vals(*w.grad()), written};
    };
    const auto [u8, u8_written] = weight_grad(true);
    const auto [f32, f32_written] = weight_grad(false);
    expect_close(u8, f32, 1e-4f);
    EXPECT_LE(u8_written, f32_written + prod(c.x)) << "elements written by the kernels";
  }
}

// The weight gradient's reduce runs in blocks of images whose partial sums a second kernel adds; the blocks are the
// GEMM kernel's first loop, the only one a CPU kernel runs on threads, so there are at least THREADS of them where
// the batch allows (8 blocks of a 6x6 conv left 8 of 16 threads idle). Same values with any count.
// The CPU GEMM of a weight gradient packs grad_output (b, co, o) into panels of 32 output channels (b, o, 32): a
// transposed copy whose rows (o = 64 floats for beautiful_mnist's conv3, 400 for conv2) are short, so it copies 4
// lanes at a time along the panel; the 8x8 transpose tile (64 scalar loads and stores, 1.8x slower there) stays
// for rows a multiple of 1 KB apart (256 floats: the 32 rows share 4 of L1's sets) and for transposes whose rows
// are far apart (a 768x3072 matrix).
TEST(ConvBackward, WeightGradientPackIsAPlainCopy) {
  const Opts o{dtypes::float32, "CPU", false};
  const ClangRenderer ren;
  auto opts_of = [&](const UOp& ast) {
    Kernel k(ast, ren);
    k.hand_coded_optimizations();
    return opts_to_string(k.applied_opts);
  };
  // the opts of the packs of the weight gradient of a (bs, 32, h, w) x (cout, 32, 3, 3) conv
  auto pack_opts = [&](int64_t bs, int64_t h, int64_t w, int64_t cout) {
    Tensor x = Tensor::empty({bs, 32, h, w}, o), wt = Tensor::empty({cout, 32, 3, 3}, o), r = Tensor::empty({bs, cout, h - 2, w - 2}, o);
    wt.requires_grad_();
    (x.conv2d(wt) * r).sum().backward();
    std::vector<std::string> ret;
    for (const ScheduleItem& si : wt.grad()->schedule())
      if (si.kind == MetaOps::KERNEL)
        if (auto plan = cpu_gemm_pack(Access::uop(si.ast), ren)) ret.push_back(opts_of(plan->pack_ast));
    return ret;
  };
  EXPECT_EQ(pack_opts(64, 10, 10, 64), std::vector<std::string>{"UPCAST,4,4"}) << "rows of 64: 4 channels a step, no 8x8 tile";
  EXPECT_EQ(pack_opts(8, 22, 22, 32), std::vector<std::string>{"UPCAST,2,4"}) << "rows of 400, 1600 bytes apart";
  EXPECT_EQ(pack_opts(8, 18, 18, 32), std::vector<std::string>{"UPCAST,2,8;UPCAST,1,8"}) << "rows of 256, 1 KB apart: tiled";
  for (const Tensor& t : {Tensor::empty({768, 3072}, o).T().contiguous(), Tensor::empty({3072, 768}, o).T().contiguous()}) {
    int copies = 0;
    for (const ScheduleItem& si : t.schedule())
      if (si.kind == MetaOps::KERNEL) {
        copies++;
        EXPECT_EQ(opts_of(Access::uop(si.ast)), "UPCAST,1,8;UPCAST,0,8") << "the transpose keeps its 8x8 tile";
      }
    EXPECT_EQ(copies, 1);
  }
}

TEST(ConvBackward, WeightGradientBlocksCoverTheThreads) {
  auto run = [](int64_t threads) {
    Context ctx({{"THREADS", threads}});
    const Opts cpu{dtypes::float32, "CPU", false};   // the blocks are the CPU GEMM's (the default device may be CUDA)
    Tensor x = Tensor::from<float>(data(32 * 16 * 6 * 6, 1), {32, 16, 6, 6}, cpu);
    Tensor w = Tensor::from<float>(data(24 * 16 * 9, 7), {24, 16, 3, 3}, cpu).requires_grad_();
    (x.conv2d(w) * Tensor::from<float>(data(32 * 24 * 16, 11), {32, 24, 4, 4}, cpu)).sum().backward();
    int64_t blocks = 0;   // the partial sums: (blocks, cin, 3, 3, cout)
    for (const ScheduleItem& si : w.grad()->schedule())
      for (const auto& b : si.bufs)
        if (b->size % (16 * 9 * 24) == 0 && b->size > 16 * 9 * 24) blocks = std::max(blocks, b->size / (16 * 9 * 24));
    return std::make_pair(blocks, vals(*w.grad()));
  };
  auto [one, g1] = run(1);
  auto [eight, g8] = run(8);
  auto [many, g64] = run(64);
  EXPECT_LE(one, 1) << "one thread: the batch fits one block (32 images x 16 positions)";
  EXPECT_EQ(eight, 8);
  EXPECT_EQ(many, 32) << "no more blocks than images";
  expect_close(g8, g1, 1e-4f);
  expect_close(g64, g1, 1e-4f);
}
