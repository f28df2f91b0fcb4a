// CPU GEMMs with a packed b operand (codegen/pack.hpp): when the plan applies, what it builds, and
// that every packed shape computes what the unoptimized (NOOPT) kernel and a host loop compute.
// Inputs are small integers, so every sum is exact in float32 whatever the order, and results are
// compared exactly.
#include <gtest/gtest.h>

#include <random>

#include "avx512_kernels.hpp"
#include "codegen/kernel.hpp"
#include "codegen/pack.hpp"
#include "cpu_threads.hpp"
#include "engine/realize.hpp"
#include "engine/schedule.hpp"
#include "engine/search.hpp"
#include "shape/shapetracker_arg.hpp"
#include "tensor_test_util.hpp"
#include "tg/tg.hpp"

using namespace tg;
using tgt::last_ast;

namespace {

const Renderer& cpu() { return get_renderer("CPU"); }

Tensor ints(Shape s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(prod(s));
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 7) - 3);
  return Tensor::from<float>(v, s, Opts{dtypes::float32, "CPU", false}).realize();   // (the CPU whatever DEVICE says)
}


// out[..., m, n] = sum_k a[..., m, k] * b[..., k, n] on the host; a and b broadcast over a leading batch
std::vector<float> host_matmul(const Tensor& a, const Tensor& b) {
  const Shape &sa = a.shape(), &sb = b.shape();
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  const int64_t ba = prod(Shape(sa.begin(), sa.end() - 2)), bb = prod(Shape(sb.begin(), sb.end() - 2)), B = std::max(ba, bb);
  const auto va = a.contiguous().tolist<float>(), vb = b.contiguous().tolist<float>();
  std::vector<float> out(B * M * N);
  for (int64_t z = 0; z < B; z++)
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        float s = 0;
        for (int64_t k = 0; k < K; k++) s += va[(z % ba) * M * K + m * K + k] * vb[(z % bb) * K * N + k * N + n];
        out[(z * M + m) * N + n] = s;
      }
  return out;
}

// a @ b three ways: default (packed when the plan applies), NOOPT, the host loop; all must agree
void check_matmul(const Tensor& a, const Tensor& b, bool expect_packed) {
  const Tensor out = a.matmul(b);
  EXPECT_EQ(cpu_gemm_pack(last_ast(out), cpu()).has_value(), expect_packed) << last_ast(out).str();
  const auto got = a.matmul(b).tolist<float>();
  std::vector<float> noopt;
  {
    Context ctx({{"NOOPT", 1}});
    noopt = a.matmul(b).tolist<float>();
  }
  EXPECT_EQ(got, noopt);
  EXPECT_EQ(got, host_matmul(a, b));
}

}  // namespace

TEST(CpuGemmPack, PlanSplitsNAndPacksBIntoPanels) {
  Context ctx({{"CPU_L2", 1 << 20}, {"THREADS", 2}});
  const Tensor a = ints({256, 128}, 1), b = ints({128, 256}, 2);
  auto plan = cpu_gemm_pack(last_ast(a.matmul(b)), cpu());
  ASSERT_TRUE(plan);
  // 256 columns in 4 panels of 64 (two 32-wide tiles each: 128 x 64 x 4 bytes fits half the L2), K inside; each
  // tile's 128 x 32 floats contiguous, the panels a line (16 floats) further apart than their tiles fill
  EXPECT_EQ(plan->nc, 64);
  EXPECT_EQ(plan->scratch_size, 128 * 256 + 4 * 16);
  EXPECT_EQ(plan->b_index, 2);
  EXPECT_EQ(plan->scratch_index, 2) << "the scratch takes b's place";
  Kernel pk(plan->pack_ast, cpu());
  EXPECT_EQ(pk.output_shape(), (Shape{4, 2, 128, 32}));
  EXPECT_EQ(pk.sts[0].real_strides(), (std::vector<std::optional<int64_t>>{2 * 128 * 32 + 16, 128 * 32, 32, 1}));
  // the GEMM: b's lanes contiguous in the scratch, a vector tile of 2 x 16 over 8 rows, panels and tiles two axes
  Kernel k(plan->gemm_ast, cpu());
  k.hand_coded_optimizations();
  EXPECT_EQ(opts_to_string(k.applied_opts), "UPCAST,3,16;UPCAST,3,0;UPCAST,0,8") << "b (128 KB) fits in the L2: rows stay outermost";
  const std::string src = k.to_program().src;
  EXPECT_NE(src.find("__builtin_memcpy(&v_, data2+"), std::string::npos) << "vector loads of the scratch\n" << src;
}

// The loop order comes from the L2's size: 1024^3 packs B as 8 panels of 4 tiles (32 x 1024 floats each, 4 MB in
// all). A 1 MB or 2 MB L2 (Zen 5, Sapphire Rapids) can't hold all of B but holds one panel's 4 tiles (512 KB) in
// its half: the panels go outermost (SWAP) and the rows stream past each panel. With 16 MB B fits whole and the
// rows stay outermost. (The 2 MB case failed before: B was counted as its 8 panels' first tile, 1 MB.)
TEST(CpuGemmPack, L2OrderFromTheCacheSize) {
  const Tensor a = ints({1024, 1024}, 1), b = ints({1024, 1024}, 2);
  for (int64_t l2 : {int64_t{1} << 20, int64_t{2} << 20, int64_t{16} << 20}) {
    SCOPED_TRACE("L2 " + std::to_string(l2));
    Context ctx({{"CPU_L2", l2}, {"THREADS", 2}});
    EXPECT_EQ(cpu_caches().l2, l2);
    auto plan = cpu_gemm_pack(last_ast(a.matmul(b)), cpu());
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->nc, 128) << "4 tiles of 32 columns a panel: 1024 x 128 x 4 bytes fits half the L2";
    Kernel k(plan->gemm_ast, cpu());
    k.hand_coded_optimizations();
    const std::string opts = opts_to_string(k.applied_opts);
    EXPECT_EQ(opts.find("SWAP,0,1") != std::string::npos, l2 < (int64_t{8} << 20)) << opts;
  }
}

// Panels of several tiles (N a multiple of 64 or 128 with two threads: [panel][tile][K][32] scratch, the GEMM with
// panel, tile and tile columns as three axes): odd M and K, a batch, a transposed and a strided b, 1-long axes.
// Exact against NOOPT and a host loop.
TEST(CpuGemmPack, PanelsOfTilesOddSizesBatchTransposedStrided) {
  Context ctx({{"CPU_L2", 2 << 20}, {"THREADS", 2}});
  auto nc_of = [](const Tensor& out) { return cpu_gemm_pack(last_ast(out), cpu())->nc; };
  const Tensor a = ints({67, 129}, 1), b = ints({129, 512}, 2);
  EXPECT_EQ(nc_of(a.matmul(b)), 128);
  EXPECT_EQ(cpu_gemm_pack(last_ast(a.matmul(b)), cpu())->scratch_size, 129 * 512 + 4 * 16);
  check_matmul(a, b, true);
  const Tensor ba = ints({2, 64, 72}, 3), bb = ints({2, 72, 256}, 4);
  EXPECT_EQ(nc_of(ba.matmul(bb)), 64) << "256 columns: two tiles a panel leave two panels to each thread";
  check_matmul(ba, bb, true);
  const Tensor x = ints({96, 130}, 5), w = ints({512, 130}, 6);
  EXPECT_EQ(nc_of(x.matmul(w.T())), 128);
  check_matmul(x, w.T(), true);   // a linear layer: b transposed
  const Tensor wide = ints({96, 1024}, 7);
  const Tensor every_other = wide.reshape({96, 512, 2}).shrink({{0, 96}, {0, 512}, {1, 2}}).reshape({96, 512});
  check_matmul(x.shrink({{0, 96}, {0, 96}}), every_other, true);
  check_matmul(ints({1, 1, 65, 64}, 8), ints({1, 64, 512}, 9), true);
}

// At 2 and 3 threads the packed GEMM's parallel loop spans panels and 8-row groups (codegen/lowerer.cpp
// parallel_dims: a few panels are too few iterations for the pool to balance), and the shares and guided chunks
// cut it anywhere inside a panel: odd K, a batch, b transposed, exact against NOOPT and the host loop. Rows that
// are no whole number of 8-row groups (67) keep the panels' loop alone.
TEST(CpuGemmPack, SplitInsidePanelsOddSizesBatchTransposed) {
  for (int64_t threads : {2, 3}) {
    SCOPED_TRACE("THREADS " + std::to_string(threads));
    Context ctx({{"CPU_L2", 2 << 20}, {"THREADS", threads}});
    auto collapsed = [](const Tensor& out) {
      auto plan = cpu_gemm_pack(last_ast(out), cpu());
      if (!plan) return false;
      Kernel k(plan->gemm_ast, cpu());
      k.hand_coded_optimizations();
      return k.to_program().global_size.at(0) > k.full_shape()[0];
    };
    const Tensor a = ints({200, 129}, 11), b = ints({129, 512}, 12);
    EXPECT_TRUE(collapsed(a.matmul(b))) << "4 panels of 128 columns, 25 groups of 8 rows";
    check_matmul(a, b, true);
    const Tensor c = ints({67, 129}, 17);
    EXPECT_FALSE(collapsed(c.matmul(b))) << "67 rows are no whole number of 8-row groups: the panels stay the loop";
    check_matmul(c, b, true);
    const Tensor ba = ints({2, 64, 72}, 13), bb = ints({2, 72, 256}, 14);
    EXPECT_TRUE(collapsed(ba.matmul(bb)));
    check_matmul(ba, bb, true);
    const Tensor x = ints({96, 130}, 15), w = ints({512, 130}, 16);
    EXPECT_TRUE(collapsed(x.matmul(w.T())));
    check_matmul(x, w.T(), true);
  }
}

// K blocks (codegen/pack.cpp k_blocks): where a row tile's 8 rows of A overflow 2/3 of the L1 (CPU_L1 small here,
// 2048^3 on a 48 KB L1), the reduce runs in blocks, each adding the stored sum of those before; the loops run panel,
// row group, block, tile, k. At 1 to 3 threads: odd M, K = 512 in 8 blocks of 64, b transposed, 1-long axes; exact
// against NOOPT and the host loop. A batch, an epilogue after the reduce, too few row groups for the threads, BEAM
// and CPU_KBLOCK=0 keep one pass over K.
TEST(CpuGemmPack, KBlocksWhenARowTileOverflowsTheL1) {
  const auto blocks = [](const Tensor& out) {
    auto plan = cpu_gemm_pack(last_ast(out), cpu());
    return plan ? plan->k_blocks : int64_t{0};
  };
  for (int64_t threads : {1, 2, 3}) {
    SCOPED_TRACE("THREADS " + std::to_string(threads));
    Context ctx({{"CPU_L2", 2 << 20}, {"CPU_L1", 4096}, {"THREADS", threads}});
    const Tensor a = ints({200, 512}, 21), b = ints({512, 512}, 22);
    EXPECT_EQ(blocks(a.matmul(b)), 8) << "8 rows x 64 floats: 2 KB, within 2/3 of a 4 KB L1";
    check_matmul(a, b, true);
    const Tensor x = ints({136, 512}, 23), w = ints({256, 512}, 24);
    EXPECT_EQ(blocks(x.matmul(w.T())), 8);
    check_matmul(x, w.T(), true);
    const Tensor a1 = ints({1, 256, 512}, 25);
    EXPECT_EQ(blocks(a1.matmul(b)), 8);
    check_matmul(a1, b, true);
    const Tensor ba = ints({2, 128, 512}, 26), bb = ints({2, 512, 256}, 27);
    EXPECT_EQ(blocks(ba.matmul(bb)), 1) << "a batch keeps one pass";
    check_matmul(ba, bb, true);
    const Tensor relu = a.matmul(b).relu();
    EXPECT_EQ(blocks(relu), 1) << "an epilogue keeps one pass";
    const auto got = relu.tolist<float>();
    std::vector<float> want = host_matmul(a, b);
    for (float& v : want) v = std::max(v, 0.0f);
    EXPECT_EQ(got, want);
  }
  Context ctx({{"CPU_L2", 2 << 20}, {"CPU_L1", 4096}, {"THREADS", 2}});
  const Tensor a = ints({200, 512}, 21), b = ints({512, 512}, 22);
  // the kernel: the block axis (8, stride 0 in the output) between the row groups and the tiles
  auto plan = cpu_gemm_pack(last_ast(a.matmul(b)), cpu());
  ASSERT_TRUE(plan);
  Kernel k(plan->gemm_ast, cpu());
  k.hand_coded_optimizations();
  EXPECT_EQ(k.full_shape()[2], 8) << to_str(k.full_shape());
  EXPECT_EQ(k.sts[0].real_strides()[2], 0);
  EXPECT_EQ(k.full_shape()[k.first_reduce()], 64);
  EXPECT_EQ(k.to_program().global_size.at(0), k.full_shape()[0] * k.full_shape()[1]) << "the threads split panels and row groups, never the blocks";
  EXPECT_EQ(blocks(ints({64, 512}, 28).matmul(ints({512, 64}, 29))), 1) << "2 panels x 8 row groups: under 16 a thread";
  {   // the lowerer keeps an axis the store doesn't move along out of the parallel loop, wherever it sits
    Kernel swapped(plan->gemm_ast, cpu());
    swapped.hand_coded_optimizations();
    swapped.apply_opt(Opt{OptOps::SWAP, 0, 2});
    EXPECT_EQ(swapped.full_shape()[0], 8);
    const auto p = swapped.to_program();
    EXPECT_TRUE(p.global_size.empty() || p.global_size.at(0) == 1) << to_str(p.global_size) << "\n" << p.src;
  }
  {   // at 16 threads the parallel loop takes 64 iterations a thread (codegen/lowerer.hpp): 200 rows are too few
    Context many({{"THREADS", 16}});
    EXPECT_EQ(blocks(a.matmul(b)), 1);
    check_matmul(a, b, true);
  }
  {
    Context off({{"CPU_KBLOCK", 0}});
    EXPECT_EQ(blocks(a.matmul(b)), 1);
  }
  {
    Context kc({{"CPU_KBLOCK", 128}});
    EXPECT_EQ(blocks(a.matmul(b)), 4);
    check_matmul(a, b, true);
  }
  {   // no opt but SWAP takes the block axis: lanes of it would read a block's sum before the one before stored it
    Kernel upcast(plan->gemm_ast, cpu());
    EXPECT_THROW(upcast.apply_opt(Opt{OptOps::UPCAST, 2, 2}), KernelOptError);
    EXPECT_THROW(upcast.apply_opt(Opt{OptOps::PADTO, 2, 16}), KernelOptError);
  }
  Context beam({{"BEAM", 2}, {"BEAM_ESTIMATE", 0}});
  EXPECT_EQ(blocks(a.matmul(b)), 8) << "BEAM searches the blocked kernel";
  check_matmul(a, b, true);
}

TEST(CpuGemmPack, NotForSmallOrWhenOff) {
  const Tensor a = ints({64, 64}, 1), b = ints({64, 64}, 2);
  EXPECT_FALSE(cpu_gemm_pack(last_ast(a.matmul(b)), cpu())) << "64^3: the copy would cost more than it saves";
  // a conv of batch 1 has 8-row output tiles of at most 20 rows (oy, ox): too few to pay for the copy
  const Tensor x = ints({1, 32, 24, 24}, 3), w = ints({64, 32, 5, 5}, 4);
  EXPECT_FALSE(cpu_gemm_pack(last_ast(x.conv2d(w)), cpu()));
  const Tensor c = ints({256, 256}, 5), d = ints({256, 256}, 6);
  EXPECT_TRUE(cpu_gemm_pack(last_ast(c.matmul(d)), cpu()));
  Context off({{"CPU_PACK", 0}});
  EXPECT_FALSE(cpu_gemm_pack(last_ast(c.matmul(d)), cpu()));
}

TEST(CpuGemmPack, RealizeRunsThePackedKernels) {
  const Tensor a = ints({128, 128}, 1), b = ints({128, 128}, 2);
  std::vector<ScheduleItem> sched = create_schedule({Access::lazydata(a.matmul(b))});
  ASSERT_FALSE(sched.empty());
  run_schedule({sched.begin(), sched.end() - 1});
  ExecItem ei = lower_schedule_item(sched.back());
  auto* packed = dynamic_cast<PackedRunner*>(ei.prg.get());
  ASSERT_NE(packed, nullptr);
  EXPECT_EQ(packed->op_estimate, 2 * 128 * 128 * 128);
  ei.run();
  std::vector<float> got(128 * 128);
  ei.bufs[0]->copyout(got.data(), got.size() * sizeof(float));
  EXPECT_EQ(got, host_matmul(a, b));
}

TEST(CpuGemmPack, SquareAndOddSizes) {
  check_matmul(ints({128, 128}, 1), ints({128, 128}, 2), true);
  check_matmul(ints({131, 130}, 3), ints({130, 160}, 4), true);    // odd M and K, N of 5 tiles
  check_matmul(ints({67, 129}, 5), ints({129, 48}, 6), false);      // N of 3 vectors: too little work
  check_matmul(ints({97, 257}, 7), ints({257, 112}, 8), true);      // N = 7 vectors: one-vector panels
}

TEST(CpuGemmPack, TransposedAndStridedB) {
  const Tensor a = ints({160, 96}, 1), w = ints({192, 96}, 2);
  check_matmul(a, w.T(), true);   // a linear layer: b is w transposed, K contiguous
  const Tensor wide = ints({96, 384}, 3);
  const Tensor strided = wide.reshape({96, 192, 2}).shrink({{0, 96}, {0, 192}, {0, 1}}).reshape({96, 192});
  check_matmul(a, strided, true);
  check_matmul(a.T().contiguous().T(), wide.shrink({{0, 96}, {64, 256}}), true);   // a transposed twice, b an offset window
}

TEST(CpuGemmPack, BatchAndOneLengthAxes) {
  check_matmul(ints({3, 64, 96}, 1), ints({3, 96, 128}, 2), true);   // batch in a and b
  check_matmul(ints({4, 64, 64}, 3), ints({64, 128}, 4), true);      // b broadcast over the batch
  check_matmul(ints({1, 200, 64}, 5), ints({1, 64, 256}, 6), true);  // batch of one
  check_matmul(ints({1, 64}, 7), ints({64, 4096}, 8), false);        // one row: a matrix-vector product
}

TEST(CpuGemmPack, SameBufferOnBothSides) {
  const Tensor x = ints({160, 160}, 9);
  auto plan = cpu_gemm_pack(last_ast(x.matmul(x)), cpu());
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->b_index, 1);
  EXPECT_EQ(plan->scratch_index, 2) << "x is still read as a: the scratch is one more buffer";
  check_matmul(x, x, true);
  check_matmul(x, x.T(), true);
}

TEST(CpuGemmPack, ConvWeightsPackedOverOutputChannels) {
  // out[n, co, oy, ox] = sum_{ci, ky, kx} x[n, ci, oy + ky, ox + kx] * w[co, ci, ky, kx]: w is packed as
  // [ci, ky, kx][co] panels and the output channels become the vector axis (stored strided)
  const Tensor x = ints({64, 8, 12, 12}, 1), w = ints({32, 8, 3, 3}, 2);
  auto plan = cpu_gemm_pack(last_ast(x.conv2d(w)), cpu());
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->nc, 32);
  // the output channels are the vector axis: vector accumulators, each lane stored on its own (400 apart)
  Kernel k(plan->gemm_ast, cpu());
  k.hand_coded_optimizations();
  const std::string src = k.to_program().src;
  EXPECT_NE(src.find("float16 acc0 = "), std::string::npos) << src;
  EXPECT_NE(src.find("__builtin_memcpy(&v_, data2+"), std::string::npos) << "vector loads of the packed weights\n" << src;
  const auto got = x.conv2d(w).tolist<float>();
  Context ctx({{"NOOPT", 1}});
  EXPECT_EQ(got, x.conv2d(w).tolist<float>());
}

// A conv whose output rows are 20 or 10 wide (unpadded: x's columns are contiguous and unmasked along the output's)
// tiles 10 output columns x 2 vectors of output channels: 20 float16 accumulators (the vectorizer keeps the
// vectors along the channels, not 8 + 2 lanes along the columns), every broadcast of a reduce step from one row of
// one image. A padded conv (x's columns masked) keeps the images as the rows: 8 x 2.
TEST(CpuGemmPack, ConvTileRowsAlongOutputColumns) {
  struct Case { Shape x, w; int64_t pad; int accs; };
  for (const Case& c : {Case{{32, 8, 24, 24}, {32, 8, 5, 5}, 0, 20}, Case{{32, 16, 12, 12}, {32, 16, 3, 3}, 0, 20},
                        Case{{32, 8, 12, 12}, {32, 8, 3, 3}, 1, 16}}) {
    SCOPED_TRACE("x " + std::to_string(c.x[3]) + " wide, kernel " + std::to_string(c.w[3]) + ", pad " + std::to_string(c.pad));
    const Tensor x = ints(c.x, 1), w = ints(c.w, 2);
    const Tensor out = x.conv2d(w, std::nullopt, 1, {1}, {1}, {c.pad});
    auto plan = cpu_gemm_pack(last_ast(out), cpu());
    ASSERT_TRUE(plan);
    Kernel k(plan->gemm_ast, cpu());
    k.hand_coded_optimizations();
    int accs = 0, lanes16 = 0;
    for (const UOp& u : k.linearize())
      if (u->op == Ops::DEFINE_ACC) accs++, lanes16 += u->dtype.count == 16;
    EXPECT_EQ(accs, c.accs) << k.to_program().src;
    EXPECT_EQ(lanes16, c.accs) << "vector accumulators along the output channels";
    // under vector accumulators the loops and address math are 64-bit (renderer/cstyle.cpp index_only_uops): clang
    // folds each broadcast's offset into its load, where int32 sign-extended every index
    const std::string src = k.to_program().src;
    EXPECT_NE(src.find("for (long ridx"), std::string::npos) << src;
    EXPECT_EQ(src.find("for (int ridx"), std::string::npos) << src;
    const auto got = x.conv2d(w, std::nullopt, 1, {1}, {1}, {c.pad}).tolist<float>();
    Context ctx({{"NOOPT", 1}});
    EXPECT_EQ(got, x.conv2d(w, std::nullopt, 1, {1}, {1}, {c.pad}).tolist<float>());
  }
}

TEST(CpuGemmPack, TinyJitReplaysThePackedKernels) {
  // calls 3+ replay the pack and the GEMM on new inputs (the runner keeps its scratch)
  TinyJit jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].matmul(in[1])}; });
  for (uint32_t call = 1; call <= 4; call++) {
    const Tensor a = ints({128, 128}, 10 + call), b = ints({128, 128}, 20 + call);
    EXPECT_EQ(jit({a, b})[0].tolist<float>(), host_matmul(a, b)) << "call " << call;
  }
}

TEST(CpuGemmPack, ElementwiseEpilogueAfterTheReduce) {
  // a conv with bias and relu fused after its reduce (the forward of every conv layer), and a matmul
  // times a mask (a relu's backward fused into the conv input gradient) still pack
  const Tensor x = ints({64, 8, 12, 12}, 1), w = ints({32, 8, 3, 3}, 2), bias = ints({32}, 3);
  const Tensor conv = x.conv2d(w, bias).relu();
  const UOp conv_ast = last_ast(conv);
  ASSERT_TRUE(cpu_gemm_pack(conv_ast, cpu())) << conv_ast.str();
  const Tensor a = ints({128, 128}, 4), b = ints({128, 128}, 5), mask = ints({128, 128}, 6) > 0;
  const Tensor masked = mask.where(a.matmul(b), 0.0f);
  const UOp masked_ast = last_ast(masked);
  ASSERT_TRUE(cpu_gemm_pack(masked_ast, cpu())) << masked_ast.str();
  // a conv masked by a full-size tensor after its reduce (a relu backward on a conv input gradient):
  // the output channels over the packed weights stay the vector axis, the mask is read strided like the store
  const Tensor relu_out = ints({64, 32, 10, 10}, 7), masked_conv = (relu_out > 0).where(x.conv2d(w), 0.0f);
  auto plan = cpu_gemm_pack(last_ast(masked_conv), cpu());
  ASSERT_TRUE(plan);
  Kernel k(plan->gemm_ast, cpu());
  k.hand_coded_optimizations();
  EXPECT_NE(k.to_program().src.find("float16 acc0 = "), std::string::npos) << k.to_program().src;
  const auto got_conv = conv.tolist<float>(), got_masked = masked.tolist<float>();
  Context ctx({{"NOOPT", 1}});
  EXPECT_EQ(got_conv, x.conv2d(w, bias).relu().tolist<float>());
  EXPECT_EQ(got_masked, mask.where(a.matmul(b), 0.0f).tolist<float>());
}

// A copy that pads its rows (conv.cpp padded_columns' grad_output copy, C_327680_7_4 in the mnist step): each
// upcast group of 4 columns lies wholly in the padding or wholly in the data, so its 4 gated loads share one gate
// and become one float4 load under it (codegen/vectorizer.cpp), where they were 4 scalar gated loads. Odd row
// counts, 1-long axes and a strided (transposed) source; exact against a host loop and the NOOPT kernel.
TEST(CpuGemmPack, PaddedCopyLoadsVectorsUnderTheirGate) {
  for (const Shape& s : {Shape{37, 20}, Shape{1, 3, 1, 20}, Shape{5, 7, 20}}) {
    SCOPED_TRACE("rows of 20, shape size " + std::to_string(s.size()));
    const Tensor x = ints(s, 3);
    std::vector<std::pair<int64_t, int64_t>> lr(s.size(), {0, 0});
    lr.back() = {4, 4};
    const Tensor y = x.pad(lr).contiguous();
    Kernel k(last_ast(y), cpu());
    k.hand_coded_optimizations();
    const std::string src = k.to_program().src;
    EXPECT_NE(src.find("?({float4 v_; __builtin_memcpy(&v_, data1+"), std::string::npos) << src;
    EXPECT_EQ(src.find("?data1["), std::string::npos) << "a scalar gated load left:\n" << src;
    const std::vector<float> xs = x.tolist<float>(), got = y.tolist<float>();
    std::vector<float> want;
    for (size_t r = 0; r < xs.size() / 20; r++) {
      want.insert(want.end(), 4, 0.0f);
      want.insert(want.end(), xs.begin() + static_cast<int64_t>(r * 20), xs.begin() + static_cast<int64_t>(r * 20 + 20));
      want.insert(want.end(), 4, 0.0f);
    }
    EXPECT_EQ(got, want);
    Context ctx({{"NOOPT", 1}});
    EXPECT_EQ(x.pad(lr).tolist<float>(), want);
  }
  // a transposed source: the copy's loads along the padded axis are strided, no vector load, same values
  const Tensor xt = ints({20, 12}, 4).transpose(0, 1);
  const std::vector<float> gt = xt.pad({{0, 0}, {4, 4}}).tolist<float>();
  Context ctx({{"NOOPT", 1}});
  EXPECT_EQ(gt, xt.pad({{0, 0}, {4, 4}}).tolist<float>());
}
