// Kernel over hand-built ASTs: buffers and shapes, names, shape merging, OptOps, lowering.
#include <gtest/gtest.h>

#include <algorithm>

#include "codegen/kernel.hpp"
#include "codegen/lowerer.hpp"
#include "renderer/cstyle.hpp"
#include "shape/shapetracker_arg.hpp"

using namespace tg;

namespace {

UOp gbuf(int64_t i, DType dt) { return UOp(Ops::DEFINE_GLOBAL, dt.ptr_to(), {}, i); }
UOp load(int64_t i, DType dt, const ShapeTracker& st) { return UOp(Ops::LOAD, dt, {gbuf(i, dt), st_uop(st)}); }
UOp store(int64_t i, DType dt, const ShapeTracker& st, const UOp& v) { return UOp(Ops::STORE, dtypes::void_, {gbuf(i, dt), st_uop(st), v}); }
UOp cnst(int64_t v, DType dt, const ShapeTracker& st) { return UOp(Ops::CONST, dt, {st_uop(st)}, v); }
UOp sink(const UOp& s) { return UOp(Ops::SINK, dtypes::void_, {s}); }
ShapeTracker sh(const Shape& s) { return ShapeTracker::from_shape(s); }

// out[i] = in[i] + 2 over int32[n] (seed 000's kernel)
UOp add2_ast(int64_t n) {
  auto st = sh({n});
  auto c = cnst(2, dtypes::int32, sh({1}).expand({n}));
  return sink(store(0, dtypes::int32, st, load(1, dtypes::int32, st).alu(BinaryOps::ADD, c)));
}
// out[r] = sum_c in[r, c] over float32[rows, cols]
UOp sum_rows_ast(int64_t rows, int64_t cols) {
  UOp red(Ops::REDUCE_AXIS, dtypes::float32, {load(1, dtypes::float32, sh({rows, cols}))}, ReduceArg{ReduceOps::SUM, {1}});
  return sink(store(0, dtypes::float32, sh({rows, 1}), red));
}
// elementwise float copy-times-two over a contiguous shape
UOp mul2_ast(const Shape& s) {
  UOp v = load(1, dtypes::float32, sh(s));
  return sink(store(0, dtypes::float32, sh(s), v.alu(BinaryOps::ADD, v)));
}

const ClangRenderer& clang() { static ClangRenderer r; return r; }
const CUDARenderer& cuda() { static CUDARenderer r("sm_80"); return r; }

}  // namespace

TEST(Kernel, ElementwiseBufsAndName) {
  Kernel k(add2_ast(3), clang());
  ASSERT_EQ(k.bufs.size(), 3u);   // STORE, LOAD, CONST in AST order
  EXPECT_EQ(k.bufs[0]->op, Ops::STORE);
  EXPECT_EQ(k.bufs[1]->op, Ops::LOAD);
  EXPECT_EQ(k.bufs[2]->op, Ops::CONST);
  EXPECT_EQ(k.full_shape(), Shape({3}));
  EXPECT_EQ(k.first_reduce(), 1);
  EXPECT_FALSE(k.reduceop());
  EXPECT_EQ(k.name(), "E_3");
}

TEST(Kernel, ReduceName) {
  Kernel k(sum_rows_ast(16, 4), clang());
  EXPECT_EQ(k.full_shape(), Shape({16, 4}));
  EXPECT_EQ(k.output_shape(), Shape({16, 1}));
  EXPECT_EQ(k.first_reduce(), 1);
  ASSERT_TRUE(k.reduceop());
  // one ShapeTracker per buffer, then the reduce's output and input
  EXPECT_EQ(k.sts.size(), k.bufs.size() + 2);
  EXPECT_EQ(k.name().substr(0, 6), "r_16_4");
}

TEST(Kernel, ReduceAxesMoveToTheEnd) {
  // sum over axis 0 of [4, 8]: the reduce dim is permuted behind the output dim
  UOp red(Ops::REDUCE_AXIS, dtypes::float32, {load(1, dtypes::float32, sh({4, 8}))}, ReduceArg{ReduceOps::SUM, {0}});
  Kernel k(sink(store(0, dtypes::float32, sh({1, 8}), red)), clang());
  EXPECT_EQ(k.full_shape(), Shape({8, 4}));
  EXPECT_EQ(k.output_shape(), Shape({8, 1}));
  const UOp opt = k.get_optimized_ast();
  UOp r;
  for (const UOp& u : opt.toposort())
    if (u->op == Ops::REDUCE_AXIS) r = u;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->as<ReduceArg>().axes, std::vector<int64_t>({1}));
}

TEST(Kernel, MergesContiguousDims) {
  Kernel k(mul2_ast({4, 8, 2}), clang());
  EXPECT_EQ(k.full_shape(), Shape({64}));
  EXPECT_EQ(k.name(), "E_64");
}

TEST(Kernel, DoesNotMergeAcrossAPermute) {
  // out[i, j] = in[j, i]: no two dims are adjacent in both buffers
  UOp v = load(1, dtypes::float32, sh({8, 4}).permute({1, 0}));
  Kernel k(sink(store(0, dtypes::float32, sh({4, 8}), v.alu(BinaryOps::ADD, v))), clang());
  EXPECT_EQ(k.full_shape(), Shape({4, 8}));
}

TEST(Kernel, DropsOnes) {
  Kernel k(mul2_ast({1, 5, 1}), clang());
  EXPECT_EQ(k.full_shape(), Shape({5}));
}

TEST(Kernel, UpcastSplitsTheAxis) {
  Kernel k(mul2_ast({64}), clang());
  k.apply_opt({OptOps::UPCAST, 0, 4});
  EXPECT_EQ(k.full_shape(), Shape({16, 4}));
  EXPECT_EQ(k.upcasted, 1);
  EXPECT_EQ(k.first_upcast(), 1);
  EXPECT_EQ(k.colors(), std::vector<std::string>({"blue", "yellow"}));
  ASSERT_EQ(k.applied_opts.size(), 1u);
  EXPECT_EQ(k.applied_opts[0].str(), "Opt(op=OptOps.UPCAST, axis=0, amt=4)");
}

TEST(Kernel, InvalidOptsThrowKernelOptError) {
  Kernel k(mul2_ast({64}), clang());
  EXPECT_THROW(k.apply_opt({OptOps::UPCAST, 0, 5}), KernelOptError);    // doesn't divide
  EXPECT_THROW(k.apply_opt({OptOps::UPCAST, 3, 4}), KernelOptError);    // no axis 3
  EXPECT_THROW(k.apply_opt({OptOps::LOCAL, 0, 4}), KernelOptError);     // the CPU has no locals
  EXPECT_THROW(k.apply_opt({OptOps::UNROLL, 0, 4}), KernelOptError);    // nothing to unroll
  EXPECT_THROW(k.apply_opt({OptOps::UPCAST, 0, 32}), KernelOptError);   // too big
  EXPECT_TRUE(k.applied_opts.empty());
  EXPECT_EQ(k.full_shape(), Shape({64}));
}

TEST(Kernel, UnrollTheReduce) {
  Kernel k(sum_rows_ast(16, 4), clang());
  k.apply_opt({OptOps::UNROLL, 0, 0});   // 0: the whole axis
  EXPECT_EQ(k.full_shape(), Shape({16, 4}));
  EXPECT_EQ(k.upcasted, 1);
  EXPECT_EQ(k.first_reduce(), 1);
  EXPECT_EQ(k.colors(), std::vector<std::string>({"blue", "magenta"}));
}

TEST(Kernel, LocalAndGroupOnGPU) {
  Kernel k(sum_rows_ast(64, 256), cuda());
  k.apply_opt({OptOps::LOCAL, 0, 16});
  EXPECT_EQ(k.local_dims, 1);
  EXPECT_EQ(k.full_shape(), Shape({4, 16, 256}));
  k.apply_opt({OptOps::GROUPTOP, 0, 16});
  EXPECT_EQ(k.group_for_reduces, 1);
  EXPECT_EQ(k.full_shape(), Shape({4, 16, 16, 16}));
  EXPECT_EQ(k.colors(), std::vector<std::string>({"blue", "cyan", "green", "red"}));
  // the grouped reduce goes through a local buffer
  bool has_local = false;
  for (const UOp& u : k.get_optimized_ast().toposort()) has_local = has_local || u->op == Ops::DEFINE_LOCAL;
  EXPECT_TRUE(has_local);
  EXPECT_THROW(k.apply_opt({OptOps::NOLOCALS, std::nullopt, std::nullopt}), KernelOptError);
}

TEST(Kernel, PadtoPadsEveryBuffer) {
  Kernel k(add2_ast(3), clang());
  k.apply_opt({OptOps::PADTO, 0, 4});
  EXPECT_EQ(k.full_shape(), Shape({4}));
  for (const ShapeTracker& st : k.sts) EXPECT_EQ(st.shape(), Shape({4}));
  EXPECT_THROW(k.apply_opt({OptOps::PADTO, 0, 4}), KernelOptError);   // nothing left to pad
}

TEST(Kernel, HandCodedUpcastsALastAxisOfFour) {
  Context ctx({{"CPU_HEURISTIC", 0}});   // 0.9.2's rules (the CPU's own are tested in test_search)
  Kernel k(mul2_ast({64}), clang());
  k.hand_coded_optimizations();
  EXPECT_EQ(k.full_shape(), Shape({16, 4}));
  EXPECT_EQ(k.upcasted, 1);
  Kernel e3(add2_ast(3), clang());
  e3.hand_coded_optimizations();
  EXPECT_TRUE(e3.applied_opts.empty());
}

TEST(Kernel, RepeatedNamesGetASuffix) {
  Kernel a(mul2_ast({7, 3}), clang()), b(mul2_ast({7, 3}), clang());
  EXPECT_EQ(a.name(), "E_21");
  EXPECT_EQ(b.name(), "E_21n1");
}

TEST(Lowerer, CpuLoopsAndParallelRange) {
  auto ranges = [](const UOp& g) {
    std::vector<UOp> r;
    for (const UOp& u : g.toposort())
      if (u->op == Ops::RANGE) r.push_back(u);
    return r;
  };
  // small: a plain loop
  Kernel small(mul2_ast({64}), clang());
  auto rs = ranges(lower_ast(small.get_optimized_ast(), clang()));
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0]->as<std::vector<int64_t>>(), std::vector<int64_t>({0, 0}));
  // big: the first loop runs on threads
  Kernel big(mul2_ast({1 << 16}), clang());
  rs = ranges(lower_ast(big.get_optimized_ast(), clang()));
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0]->as<std::vector<int64_t>>(), std::vector<int64_t>({0, 0, 1}));
  // a reduce: REDUCE over a reduce RANGE {axis, 1}
  Kernel r(sum_rows_ast(16, 4), clang());
  UOp g = lower_ast(r.get_optimized_ast(), clang());
  rs = ranges(g);
  ASSERT_EQ(rs.size(), 2u);
  bool has_reduce = false;
  for (const UOp& u : g.toposort()) has_reduce = has_reduce || u->op == Ops::REDUCE;
  EXPECT_TRUE(has_reduce);
}

TEST(Lowerer, GpuUsesSpecials) {
  Kernel k(mul2_ast({64, 3}), cuda());
  k.apply_opt({OptOps::LOCAL, 0, 16});
  std::vector<std::string> names;
  for (const UOp& u : lower_ast(k.get_optimized_ast(), cuda()).toposort())
    if (u->op == Ops::SPECIAL) names.push_back(u->as<std::string>());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, std::vector<std::string>({"gidx0", "lidx0"}));
}

TEST(Lowerer, GroupedDimsFitTheMaximum) {
  auto idxs = get_grouped_dims("gidx", {2, 3, 4, 5}, {100, 100, 100});
  ASSERT_EQ(idxs.size(), 4u);   // one index per dim, even though only 3 SPECIALs exist
  int n_special = 0;
  for (const UOp& i : idxs)
    for (const UOp& u : i.toposort()) n_special += u->op == Ops::SPECIAL && u->as<std::string>() == "gidx0";
  EXPECT_GE(n_special, 2);   // the first two dims share gidx0
  EXPECT_THROW(get_grouped_dims("gidx", {1000, 1000}, {10, 10}), Error);
}

// GPU launch dims over a symbolic axis (a KV cache's key length) that must merge to fit the grid: the merged
// SPECIAL launches the product of the expressions and indexes each dim back (SymbolicJit.CausalAttention
// on CUDA threw "don't fit the device's maximum" before)
TEST(Lowerer, GroupedDimsMergeASymbolicDim) {
  UOp i(Ops::DEFINE_VAR, dtypes::int32, {UOp::const_(dtypes::int32, int64_t{1}), UOp::const_(dtypes::int32, int64_t{12})}, std::string("i"));
  auto idxs = get_grouped_dims("gidx", {12, 4, 3}, {48, 3}, false, {i, UOp(), UOp()});
  ASSERT_EQ(idxs.size(), 3u);
  UOp launch;
  for (const UOp& u : idxs[0].toposort())
    if (u->op == Ops::SPECIAL) launch = u->src[0];
  ASSERT_TRUE(launch);
  for (int64_t iv : {1, 5, 12}) {
    EXPECT_EQ(std::get<int64_t>(eval_uop(launch, {{"i", iv}})), iv * 4);
    std::vector<std::pair<int64_t, int64_t>> seen;
    for (int64_t g = 0; g < iv * 4; g++) {
      std::unordered_map<std::string, int64_t> env{{"i", iv}, {"gidx0", g}, {"gidx1", 0}};
      seen.emplace_back(std::get<int64_t>(eval_uop(idxs[0], env)), std::get<int64_t>(eval_uop(idxs[1], env)));
    }
    std::sort(seen.begin(), seen.end());
    for (int64_t a = 0, n = 0; a < iv; a++)
      for (int64_t b = 0; b < 4; b++, n++) EXPECT_EQ(seen[size_t(n)], std::make_pair(a, b)) << "i=" << iv;
  }
}

TEST(Kernel, LinearizeGivesAFlatList) {
  Kernel k(sum_rows_ast(16, 4), clang());
  k.hand_coded_optimizations();
  const auto& uops = k.linearize();
  ASSERT_FALSE(uops.empty());
  for (const UOp& u : uops) {
    EXPECT_NE(u->op, Ops::REDUCE);
    EXPECT_NE(u->op, Ops::EXPAND);
    EXPECT_NE(u->op, Ops::SHAPETRACKER);
  }
}

// Codegen runs as one list of passes (codegen/pipeline.cpp); DEBUG>=6 names each with its UOp count,
// in order: lower, the rewrite passes, the CPU vectorizer, linearize.
TEST(Pipeline, PassesRunInOrderAndLogAtDebug6) {
  Kernel k(sum_rows_ast(16, 4), clang());
  k.hand_coded_optimizations();
  Context dbg({{"DEBUG", 6}});
  testing::internal::CaptureStdout();
  k.linearize();
  const std::string out = testing::internal::GetCapturedStdout();
  size_t at = 0;
  for (const char* p : {"pass lower_ast: ", "pass folder: ", "pass expander: ", "pass reducer: ", "pass vectorize_stores: ",
                        "pass linearize: "}) {
    size_t i = out.find(p, at);
    ASSERT_NE(i, std::string::npos) << p << " missing or out of order in\n" << out;
    at = i + 1;
  }
  EXPECT_EQ(out.find("pass gpu_vector_loads"), std::string::npos);   // a GPU pass, not on the CPU
}
