// Kernels of symbolic shapes: the heuristics apply their opts to the fixed axes (a symbolic axis
// keeps its loop), a split of a fixed axis next to a symbolic one keeps one view, and the kernels of
// a decode step render for CPU and CUDA (NVRTC compiles them here; no GPU needed).
#include <gtest/gtest.h>

#include "access.hpp"
#include "codegen/kernel.hpp"
#include "renderer/cstyle.hpp"
#include "runtime/device.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {
// the kernels of one attention step over a cache shrunk to start_pos+1 (unbound ASTs, as the JIT keeps them)
std::vector<ScheduleItem> decode_step_kernels(int64_t H, int64_t D, int64_t MAX, int64_t pos) {
  Variable sp("start_pos", 1, MAX - 1);
  Tensor cache = Tensor::empty({1, H, MAX, D}, Opts{dtypes::float32, "CPU", false});
  Tensor q = Tensor::empty({1, H, 1, D}, Opts{dtypes::float32, "CPU", false});
  sint end = sp.bind(pos) + 1;
  Tensor keys = cache.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), end}, {sint(0), sint(D)}});
  std::vector<ScheduleItem> out;
  for (const ScheduleItem& si : q.scaled_dot_product_attention(keys, keys).schedule())
    if (si.kind == MetaOps::KERNEL) out.push_back(si);
  return out;
}
Kernel optimized(const ScheduleItem& si, const Renderer& ren) {
  Kernel k(Access::uop(si.ast), ren);
  k.skip_failed_opts = !k.vars.empty();   // as get_kernel does
  k.hand_coded_optimizations();
  k.skip_failed_opts = false;
  return k;
}
}  // namespace

// Before: one opt that touched a symbolic axis dropped all of them, so every symbolic kernel ran
// unoptimized; the q.k kernel (reduce over the fixed head dim) gets its unroll now, in one view.
TEST(SymbolicKernel, HeuristicsOptimizeFixedAxes) {
  ClangRenderer ren;
  auto items = decode_step_kernels(12, 64, 256, 37);
  ASSERT_EQ(items.size(), 3u) << "q.k, the softmax over the symbolic keys as one row kernel, then .v";
  size_t optimized_kernels = 0;
  for (const ScheduleItem& si : items) {
    Kernel k = optimized(si, ren);
    ASSERT_FALSE(k.vars.empty()) << "every kernel of the step reads the symbolic length";
    EXPECT_EQ(si.var_vals.at("start_pos"), 37);
    if (!k.applied_opts.empty()) optimized_kernels++;
    for (const ShapeTracker& st : k.sts) EXPECT_EQ(st.views.size(), 1u) << st.str();   // index math stays linear
    RenderedProgram p = k.to_program();
    EXPECT_EQ(p.vars, std::vector<std::string>{"start_pos"});
    EXPECT_EQ(p.var_ranges.at(0), (std::pair<int64_t, int64_t>{1, 255}));
  }
  EXPECT_GE(optimized_kernels, 2u) << "q.k and .v (the row kernel loops to the symbolic length unrolled by nothing yet)";
}

TEST(SymbolicKernel, SplitFixedDimNextToSymbolicKeepsOneView) {
  Variable L("L", 1, 100);
  ShapeTracker st = ShapeTracker::from_sym_shape({sint(12), sint(L), sint(64)});
  ShapeTracker r = st.reshape_sym({sint(12), sint(L), sint(4), sint(16)});
  ASSERT_EQ(r.views.size(), 1u) << r.str();
  EXPECT_EQ(r.expr_idxs().first.render(), "((idx0*(64*L))+(idx1*64)+(idx2*16)+idx3)");
  EXPECT_EQ(r.views[0].sym->strides[2].const_value(), 16);
  EXPECT_EQ(r.views[0].sym->strides[3].const_value(), 1);
  EXPECT_EQ(r.views[0].sym->strides[0].eval({{"L", 7}}), 7 * 64);
  // merging back, and a split of a dim whose stride isn't contiguous with its neighbour, stay one view
  EXPECT_EQ(r.reshape_sym({sint(12), sint(L), sint(64)}), st);
  ShapeTracker p = st.permute({0, 2, 1}).reshape_sym({sint(12), sint(8), sint(8), sint(L)});
  EXPECT_EQ(p.views.size(), 1u) << p.str();
}

TEST(SymbolicKernel, DecodeStepCompilesForCuda) {
  CUDARenderer ren("sm_90");
  for (const ScheduleItem& si : decode_step_kernels(12, 64, 1024, 100)) {
    Kernel k = optimized(si, ren);
    RenderedProgram p = k.to_program();
    EXPECT_EQ(p.vars, std::vector<std::string>{"start_pos"}) << p.src;
    if (nvrtc_available()) EXPECT_FALSE(nvrtc_compile(p.src, "sm_90").empty()) << p.src;
    // launch sizes that depend on the length are computed from the value at run time
    auto [g, l] = p.launch_dims({{"start_pos", 100}});
    auto [g2, l2] = p.launch_dims({{"start_pos", 500}});
    EXPECT_EQ(l, l2);
    (void)g, (void)g2;
  }
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not installed: rendered only";
}
