// BEAM search, the CPU heuristics and the CPU vectorizer: every optimized kernel must compute what
// the unoptimized one computes. Inputs are small integers, so sums are exact in float32 whatever the
// order of the additions, and outputs are compared exactly.
#include <cmath>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <unistd.h>

#include "access.hpp"
#include "avx512_kernels.hpp"
#include "codegen/pack.hpp"
#include "cpu_threads.hpp"
#include "engine/realize.hpp"
#include "engine/search.hpp"
#include "renderer/cstyle.hpp"
#include "runtime/cache.hpp"
#include "shape/shapetracker_arg.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {

UOp gbuf(int64_t i) { return UOp(Ops::DEFINE_GLOBAL, dtypes::float32.ptr_to(), {}, i); }
UOp load(int64_t i, const ShapeTracker& st) { return UOp(Ops::LOAD, dtypes::float32, {gbuf(i), st_uop(st)}); }
UOp store(const ShapeTracker& st, const UOp& v) { return UOp(Ops::STORE, dtypes::void_, {gbuf(0), st_uop(st), v}); }
UOp sink(const UOp& s) { return UOp(Ops::SINK, dtypes::void_, {s}); }
ShapeTracker sh(const Shape& s) { return ShapeTracker::from_shape(s); }
UOp reduce(const UOp& x, ReduceOps op, std::vector<int64_t> axes) { return UOp(Ops::REDUCE_AXIS, dtypes::float32, {x}, ReduceArg{op, axes}); }
const Renderer& cpu() { return get_renderer("CPU"); }

// out = a * b + 1 on (rows, cols)
UOp elementwise_ast(int64_t rows, int64_t cols) {
  UOp one(Ops::CONST, dtypes::float32, {st_uop(sh({1, 1}).expand({rows, cols}))}, 1.0);
  return sink(store(sh({rows, cols}), load(1, sh({rows, cols})) * load(2, sh({rows, cols})) + one));
}
// out[r] = sum_c in[r, c]
UOp sum_ast(int64_t rows, int64_t cols) {
  return sink(store(sh({rows, 1}), reduce(load(1, sh({rows, cols})), ReduceOps::SUM, {1})));
}
// out[m, n] = sum_k a[m, k] * b[k, n], as the scheduler builds it: (M, N, K) with b permuted
UOp matmul_ast(int64_t M, int64_t N, int64_t K) {
  UOp a = load(1, sh({M, 1, K}).expand({M, N, K}));
  UOp b = load(2, sh({1, K, N}).permute({0, 2, 1}).expand({M, N, K}));
  return sink(store(sh({M, N, 1}), reduce(a * b, ReduceOps::SUM, {2})));
}

// Runs k on fresh buffers filled with small integers (the same for the same seed); returns the output.
std::vector<float> run(Kernel& k, uint32_t seed = 1) {
  auto bufs = bufs_from_lin(k);
  std::mt19937 rng(seed);
  for (size_t i = 1; i < bufs.size(); i++) {
    std::vector<float> v(bufs[i]->size);
    for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 7) - 3);
    bufs[i]->copyin(v.data(), v.size() * sizeof(float));
  }
  std::vector<float> zero(bufs[0]->size, -99.0f);
  bufs[0]->copyin(zero.data(), zero.size() * sizeof(float));
  CompiledRunner r(k.to_program());
  std::vector<Buffer*> raw;
  for (auto& b : bufs) raw.push_back(b.get());
  r(raw, {}, true);
  std::vector<float> out(bufs[0]->size);
  bufs[0]->copyout(out.data(), out.size() * sizeof(float));
  return out;
}

std::vector<float> run_noopt(const UOp& ast, uint32_t seed = 1) {
  Kernel k(ast, cpu());
  return run(k, seed);
}

// a fresh sqlite file for the beam cache, removed afterwards
struct TempCache {
  std::string path = "/tmp/tg_test_search_" + std::to_string(getpid()) + ".db";
  Context ctx{std::map<std::string, std::string>{{"CACHEDB", path}, {"CACHELEVEL", "1"}}};
  ~TempCache() { std::remove(path.c_str()); }
};

// a small, fast search: few candidates per step
Context small_beam() { return Context({{"BEAM_UPCAST_MAX", 4}, {"BEAM_MIN_PROGRESS", 0}}); }
// a search from the hand-coded kernel, which starts alone on the CPU: its neighbours upcast as much as it does
Context hand_coded_beam() { return Context({{"BEAM_MIN_PROGRESS", 0}}); }

}  // namespace

TEST(Search, ActionsApplyOnCpuWithinLimits) {
  Context ctx({{"BEAM_UPCAST_MAX", 8}});
  Kernel k(matmul_ast(16, 24, 32), cpu());
  auto acted = get_kernel_actions(k);
  ASSERT_TRUE(acted.count(0));
  EXPECT_GT(acted.size(), 5u);
  for (auto& [i, k2] : acted) {
    if (i == 0) continue;
    const Opt& a = beam_actions()[i - 1];
    EXPECT_NE(a.op, OptOps::LOCAL) << "the CPU has no locals";
    EXPECT_NE(a.op, OptOps::GROUPTOP);
    ASSERT_EQ(k2->applied_opts.size(), 1u);
    EXPECT_EQ(k2->applied_opts[0], a);
    EXPECT_LE(prod(Shape(k2->full_shape().begin() + k2->first_upcast(), k2->full_shape().end())), 8) << a.str();
  }
  EXPECT_TRUE(k.applied_opts.empty()) << "actions work on copies";
}

// A kernel already past BEAM_UPCAST_MAX (the CPU's hand-coded register tiles: a conv's upcasts 320) still has
// neighbours that don't upcast more than it does (reorders), so a search from it has something to time.
TEST(Search, ActionsOfAKernelPastTheUpcastLimitKeepItsUpcast) {
  Context ctx({{"BEAM_UPCAST_MAX", 8}});
  Kernel hc(matmul_ast(32, 64, 32), cpu());
  hc.hand_coded_optimizations();
  auto upcast = [](const Kernel& k) { return prod(Shape(k.full_shape().begin() + k.first_upcast(), k.full_shape().end())); };
  ASSERT_GT(upcast(hc), 8);
  auto acted = get_kernel_actions(hc, false);
  EXPECT_FALSE(acted.empty());
  for (auto& [i, k2] : acted) EXPECT_LE(upcast(*k2), upcast(hc)) << opts_to_string(k2->applied_opts);
}

TEST(Search, OptsRoundTripThroughText) {
  std::vector<Opt> opts = {{OptOps::UPCAST, 0, 4}, {OptOps::UNROLL, 1, 0}, {OptOps::NOLOCALS, std::nullopt, std::nullopt}, {OptOps::SWAP, 0, 2}};
  EXPECT_EQ(opts_to_string(opts), "UPCAST,0,4;UNROLL,1,0;NOLOCALS,-,-;SWAP,0,2");
  EXPECT_EQ(opts_from_string(opts_to_string(opts)), opts);
  EXPECT_TRUE(opts_from_string("").empty());
}

TEST(Search, BeamKeepsResults) {
  TempCache cache;
  auto beam_ctx = small_beam();
  for (const UOp& ast : {elementwise_ast(8, 32), sum_ast(8, 64), matmul_ast(8, 16, 12)}) {
    Kernel k(ast, cpu());
    auto rawbufs = bufs_from_lin(k);
    auto best = beam_search(k, rawbufs, 2, true, true);
    EXPECT_EQ(run(*best), run_noopt(ast)) << opts_to_string(best->applied_opts);
  }
}

TEST(Search, DiskCacheMakesTheSecondSearchFree) {
  TempCache cache;
  auto beam_ctx = small_beam();
  const UOp ast = sum_ast(4, 48);
  Kernel k(ast, cpu());
  auto rawbufs = bufs_from_lin(k, false);
  const int64_t searches = SearchStats::searches, hits = SearchStats::cache_hits;
  auto first = beam_search(k, rawbufs, 2);
  EXPECT_EQ(SearchStats::searches, searches + 1);
  const int64_t timed = SearchStats::candidates_timed;
  auto second = beam_search(k, rawbufs, 2);
  EXPECT_EQ(SearchStats::searches, searches + 1) << "the second search must come from the disk cache";
  EXPECT_EQ(SearchStats::cache_hits, hits + 1);
  EXPECT_EQ(SearchStats::candidates_timed, timed);
  EXPECT_EQ(second->applied_opts, first->applied_opts);
  EXPECT_EQ(run(*second), run_noopt(ast));
  // a different width is a different search
  beam_search(k, rawbufs, 1);
  EXPECT_EQ(SearchStats::searches, searches + 2);
}

TEST(Search, RealizeUsesBeamWhenAsked) {
  TempCache cache;
  auto beam_ctx = small_beam();
  Context ctx({{"BEAM", 1}, {"BEAM_COMPARE", 0}});
  const UOp ast = elementwise_ast(4, 16);
  const int64_t searches = SearchStats::searches, hits = SearchStats::cache_hits;
  auto k = get_kernel(cpu(), ast);
  EXPECT_EQ(SearchStats::searches + SearchStats::cache_hits, searches + hits + 1);
  auto k2 = get_kernel(cpu(), ast);
  EXPECT_EQ(SearchStats::searches, searches + 1);
  EXPECT_EQ(k2->applied_opts, k->applied_opts);
  EXPECT_EQ(run(*k), run_noopt(ast));
}

// a malformed real-valued BEAM setting is a tg::Error naming it (it was std::stod's std::invalid_argument)
TEST(Search, MalformedBudgetIsAnError) {
  TempCache cache;
  auto beam_ctx = hand_coded_beam();
  Kernel k(matmul_ast(32, 64, 32), cpu());
  auto rawbufs = bufs_from_lin(k);
  for (const char* key : {"BEAM_BUDGET", "BEAM_MIN_PROGRESS", "BEAM_FINAL_SEC"}) {
    Context bad(std::map<std::string, std::string>{{key, "8s"}});
    try {
      beam_search(k, rawbufs, 2, true, true);
      ADD_FAILURE() << key << "=8s was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(key) + "=8s"), std::string::npos) << e.what();
    }
  }
}

TEST(Search, BeamStartsFromTheHandCodedKernel) {
  TempCache cache;
  auto beam_ctx = hand_coded_beam();
  const UOp ast = matmul_ast(32, 64, 32);
  Kernel hc(ast, cpu());
  hc.hand_coded_optimizations();
  ASSERT_FALSE(hc.applied_opts.empty());
  Kernel k(ast, cpu());
  auto rawbufs = bufs_from_lin(k);
  {
    // no time left after the hand-coded kernel: nothing else is compiled, it is the answer
    Context budget(std::map<std::string, std::string>{{"BEAM_BUDGET", "0.000001"}});
    const int64_t timed = SearchStats::candidates_timed;
    auto best = beam_search(k, rawbufs, 2, true, true);
    EXPECT_EQ(best->applied_opts, hc.applied_opts);
    EXPECT_EQ(SearchStats::candidates_timed, timed);
  }
  // with time, the hand-coded kernel's neighbours are timed (it starts alone on the CPU) and the result is right
  Context no_cut({{"BEAM_BUDGET", 3600}});   // a busy machine mustn't cut the search short
  int64_t timed = SearchStats::candidates_timed;
  auto best = beam_search(k, rawbufs, 2, true, true);
  EXPECT_GT(SearchStats::candidates_timed, timed);
  EXPECT_EQ(run(*best), run_noopt(ast)) << opts_to_string(best->applied_opts);
  // 0.9.2's start (the unoptimized kernel only) still works, its candidates compiled in batches of 3 and one by one
  auto small = small_beam();
  Context off({{"BEAM_HAND_CODED", 0}});
  for (int64_t batch : {3, 1}) {
    Context b({{"BEAM_BATCH", batch}});
    timed = SearchStats::candidates_timed;
    const int64_t failures = SearchStats::compile_failures;
    best = beam_search(k, rawbufs, 2, true, true);
    EXPECT_GT(SearchStats::candidates_timed, timed + 3);
    EXPECT_EQ(SearchStats::compile_failures, failures);
    EXPECT_EQ(run(*best), run_noopt(ast)) << opts_to_string(best->applied_opts);
  }
}

// A fake clock for the search (SearchHooks::fake_time), reset when the test ends: the hand-coded kernel takes 1 ms,
// the first other kernel timed ("lucky") takes `lucky_search` in the search's runs and `lucky_full` at full size,
// every other kernel 3 ms.
struct FakeClock {
  std::vector<Opt> hand_coded;
  std::string lucky;
  std::string hc() const { return opts_to_string(hand_coded); }
  FakeClock(const UOp& ast, double lucky_search, double lucky_full) {
    Kernel hc(ast, cpu());
    hc.hand_coded_optimizations();
    hand_coded = hc.applied_opts;
    SearchHooks::fake_time = [this, lucky_search, lucky_full](const Kernel& k, bool full_size) {
      const std::string opts = opts_to_string(k.applied_opts);
      if (k.applied_opts == hand_coded) return 1e-3;
      if (lucky.empty()) lucky = opts;
      if (opts == lucky) return full_size ? lucky_full : lucky_search;
      return 3e-3;
    };
  }
  ~FakeClock() { SearchHooks::fake_time = nullptr; }
};

// The search times candidates with a few runs on a slice: on a shared machine one can time fast by noise. The
// final compare times the hand-coded kernel and the search's best few again at full size and keeps the hand-coded
// one unless a challenger is really faster; the disk cache and realize get the decided kernel.
TEST(Search, FinalCompareKeepsTheHandCodedKernelAgainstALuckyCandidate) {
  TempCache cache;
  auto beam_ctx = hand_coded_beam();
  Context budget({{"BEAM_BUDGET", 3600}});   // the fake clock decides, not how busy the machine is
  const UOp ast = matmul_ast(32, 64, 32);
  Kernel k(ast, cpu());
  auto rawbufs = bufs_from_lin(k);
  FakeClock clock(ast, 0.5e-3, 2e-3);
  ASSERT_FALSE(clock.hand_coded.empty());
  {
    // the search alone (no final compare, as before) is fooled by the lucky run
    Context off({{"BEAM_FINAL_ROUNDS", 0}});
    auto best = beam_search(k, rawbufs, 2, true, true);
    ASSERT_FALSE(clock.lucky.empty());
    EXPECT_EQ(opts_to_string(best->applied_opts), clock.lucky);
  }
  const int64_t compares = SearchStats::final_compares, upsets = SearchStats::final_upsets;
  auto best = beam_search(k, rawbufs, 2);   // searches (nothing cached yet) and caches the decision
  EXPECT_EQ(opts_to_string(best->applied_opts), clock.hc());
  EXPECT_EQ(SearchStats::final_compares, compares + 1);
  EXPECT_EQ(SearchStats::final_upsets, upsets);
  // the disk cache holds the decided kernel: a clock under which the lucky kernel wins everywhere changes nothing
  FakeClock always_lucky(ast, 0.1e-3, 0.1e-3);
  const int64_t hits = SearchStats::cache_hits, timed = SearchStats::candidates_timed;
  EXPECT_EQ(opts_to_string(beam_search(k, rawbufs, 2)->applied_opts), clock.hc());
  Context beam2({{"BEAM", 2}});
  EXPECT_EQ(opts_to_string(get_kernel(cpu(), ast)->applied_opts), clock.hc()) << "realize runs the cached decision";
  EXPECT_EQ(SearchStats::cache_hits, hits + 2);
  EXPECT_EQ(SearchStats::candidates_timed, timed);
}

// A challenger that is faster at full size too wins; one only 1% faster doesn't (BEAM_FINAL_MARGIN, 3%).
TEST(Search, FinalCompareTakesAReallyFasterCandidate) {
  auto beam_ctx = hand_coded_beam();
  Context budget({{"BEAM_BUDGET", 3600}});
  const UOp ast = matmul_ast(32, 64, 32);
  Kernel k(ast, cpu());
  auto rawbufs = bufs_from_lin(k);
  {
    FakeClock clock(ast, 0.5e-3, 0.5e-3);
    const int64_t upsets = SearchStats::final_upsets;
    auto best = beam_search(k, rawbufs, 2, true, true);
    EXPECT_EQ(opts_to_string(best->applied_opts), clock.lucky);
    EXPECT_EQ(SearchStats::final_upsets, upsets + 1);
    EXPECT_EQ(run(*best), run_noopt(ast));
  }
  FakeClock clock(ast, 0.5e-3, 0.99e-3);
  EXPECT_EQ(opts_to_string(beam_search(k, rawbufs, 2, true, true)->applied_opts), clock.hc());
}

TEST(Search, BufsFromLinFillsAnUnusedIndex) {
  // a packed GEMM reads global 2 (the scratch) and not global 1's old neighbour: indices may have gaps
  UOp a = load(1, sh({8, 1, 16}).expand({8, 16, 16}));
  UOp b = load(3, sh({1, 16, 16}).permute({0, 2, 1}).expand({8, 16, 16}));
  const UOp ast = sink(store(sh({8, 16, 1}), reduce(a * b, ReduceOps::SUM, {2})));
  Kernel k(ast, cpu());
  auto bufs = bufs_from_lin(k);
  ASSERT_EQ(bufs.size(), 4u);
  EXPECT_EQ(bufs[2]->size, 1);
  EXPECT_EQ(bufs[3]->size, 256);
}

TEST(Search, TimeLinearizerTimesAKernel) {
  Kernel k(sum_ast(16, 256), cpu());
  auto rawbufs = bufs_from_lin(k);
  const double t = time_linearizer(k, rawbufs);
  EXPECT_GT(t, 0);   // a time was measured; how fast is bench/bench_kernels' business, not a test's
  EXPECT_TRUE(std::isfinite(t));
}

// ---- the CPU heuristics

TEST(CpuHeuristics, MatmulGetsAVectorAxisAndARegisterTile) {
  Kernel k(matmul_ast(64, 64, 64), cpu());
  k.hand_coded_optimizations();
  // N (unit stride in b and out) by two vectors of 16 lanes, M (b is broadcast along it) by 8
  EXPECT_EQ(k.applied_opts, (std::vector<Opt>{{OptOps::UPCAST, 1, 16}, {OptOps::UPCAST, 1, 2}, {OptOps::UPCAST, 0, 8}}));
  RenderedProgram p = k.to_program();
  EXPECT_NE(p.src.find("float16 acc0 = "), std::string::npos) << "vector accumulators\n" << p.src;
  EXPECT_NE(p.src.find("__builtin_memcpy(&v_, data2+"), std::string::npos) << "vector loads of b\n" << p.src;
  EXPECT_EQ(run(k), run_noopt(matmul_ast(64, 64, 64)));
}

TEST(CpuHeuristics, LongContiguousReduceKeepsAVectorAccumulator) {
  Kernel k(sum_ast(8, 1024), cpu());
  k.hand_coded_optimizations();
  EXPECT_EQ(k.applied_opts, (std::vector<Opt>{{OptOps::UNROLL, 0, 16}}));
  RenderedProgram p = k.to_program();
  EXPECT_NE(p.src.find("float16 acc0"), std::string::npos) << p.src;
  EXPECT_NE(p.src.find("acc0[15]"), std::string::npos) << "lanes are summed after the loop\n" << p.src;
  EXPECT_EQ(run(k), run_noopt(sum_ast(8, 1024)));
}

TEST(CpuHeuristics, ElementwiseStoresVectors) {
  Kernel k(elementwise_ast(32, 64), cpu());
  k.hand_coded_optimizations();
  EXPECT_EQ(k.applied_opts, (std::vector<Opt>{{OptOps::UPCAST, 0, 16}}));
  RenderedProgram p = k.to_program();
  EXPECT_NE(p.src.find("__builtin_memcpy(data0+"), std::string::npos) << p.src;
  EXPECT_EQ(run(k), run_noopt(elementwise_ast(32, 64)));
}

// AVX2's register file (16 registers of 8 lanes): a renderer built as cpu_register_bytes() builds it there
ClangRenderer avx2() {
  ClangRenderer r;
  r.register_bytes = 32;
  r.vector_registers = 16;
  return r;
}

TEST(CpuHeuristics, Avx2MatmulTileFitsSixteenRegisters) {
  const ClangRenderer r = avx2();
  // M of 64: 4 rows x 2 vectors of 8 lanes (8 accumulators; AVX-512's 8 x 2 x 16 lanes is 32 AVX2 registers)
  Kernel k(matmul_ast(64, 64, 64), r);
  k.hand_coded_optimizations();
  EXPECT_EQ(k.applied_opts, (std::vector<Opt>{{OptOps::UPCAST, 1, 8}, {OptOps::UPCAST, 1, 2}, {OptOps::UPCAST, 0, 4}}));
  EXPECT_EQ(run(k), run_noopt(matmul_ast(64, 64, 64)));
  // M of 40: 5 rows x 2 vectors, 10 accumulators (AVX-512 takes 8 rows)
  Kernel k5(matmul_ast(40, 32, 40), r);
  k5.hand_coded_optimizations();
  EXPECT_EQ(k5.applied_opts, (std::vector<Opt>{{OptOps::UPCAST, 1, 8}, {OptOps::UPCAST, 1, 2}, {OptOps::UPCAST, 0, 5}}));
  EXPECT_EQ(run(k5), run_noopt(matmul_ast(40, 32, 40)));
  // a kernel without a register tile keeps 16 lanes, two registers a vector (a sum's accumulator: two chains)
  Kernel ks(sum_ast(8, 1024), r);
  ks.hand_coded_optimizations();
  EXPECT_EQ(ks.applied_opts, (std::vector<Opt>{{OptOps::UNROLL, 0, 16}}));
}

TEST(CpuHeuristics, Avx2KernelsMatchNoopt) {
  const ClangRenderer r = avx2();
  for (const UOp& ast : {matmul_ast(24, 40, 33), matmul_ast(7, 16, 100), matmul_ast(30, 8, 5), sum_ast(8, 1000), sum_ast(3, 24),
                         elementwise_ast(32, 64), elementwise_ast(5, 7)}) {
    Kernel k(ast, r);
    k.hand_coded_optimizations();
    EXPECT_EQ(run(k), run_noopt(ast)) << opts_to_string(k.applied_opts);
  }
}

// A ResNet-style 3x3 padded conv forward 28 columns wide on AVX2: 7 tiles of 4 columns x 2 vectors of output channels,
// the input's broadcasts from neighbouring floats (AVX-512 takes 7 columns; 4 images x 2 vectors broadcast from 4
// images' lines, more than the L1 holds)
TEST(CpuHeuristics, Avx2ConvForwardTilesFourColumns) {
  const ClangRenderer r = avx2();
  const Opts o{dtypes::float32, "CPU", false};
  Tensor x = Tensor::empty({32, 16, 4, 28}, o), w = Tensor::empty({32, 16, 3, 3}, o);   // (32 images: packed)
  std::optional<UOp> conv;
  for (const ScheduleItem& si : x.conv2d(w, std::nullopt, 1, {1}, {1}, {1}).schedule())
    if (si.kind == MetaOps::KERNEL && Kernel(Access::uop(si.ast), r).reduceop()) conv = Access::uop(si.ast);
  ASSERT_TRUE(conv);
  const auto plan = cpu_gemm_pack(*conv, r);
  const UOp ast = plan ? plan->gemm_ast : *conv;
  Kernel k(ast, r);
  k.hand_coded_optimizations();
  int64_t columns = 0;   // an upcast axis along which the scalar-read input is contiguous
  for (int64_t a = k.first_upcast(); a < k.shape_len(); a++)
    for (size_t i = 1; i < k.bufs.size(); i++)
      if (k.sts[i].real_strides()[a] == 1 && k.full_shape()[a] < 8) columns = k.full_shape()[a];
  int accs = 0, lanes = 0;   // (a C vector holds both registers of a row: float16 on AVX2 too)
  for (const UOp& u : k.linearize())
    if (u->op == Ops::DEFINE_ACC) accs++, lanes += u->dtype.count;
  EXPECT_EQ(columns, 4) << k.name();
  EXPECT_EQ(accs, 4) << k.name();
  EXPECT_EQ(lanes, 4 * 16) << k.name();
  EXPECT_EQ(run(k), run_noopt(ast)) << k.name();
}

TEST(CpuHeuristics, RegisterBytesOutsideItsValuesIsAnError) {
  Context ctx({{"CPU_REGISTER_BYTES", 48}});
  try {
    cpu_register_bytes();
    FAIL() << "CPU_REGISTER_BYTES=48 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CPU_REGISTER_BYTES=48"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16, 32 or 64"), std::string::npos) << e.what();
  }
}

TEST(CpuHeuristics, VectorizeOffGivesScalarCode) {
  Context ctx({{"VECTORIZE", 0}});
  Kernel k(matmul_ast(16, 16, 8), cpu());
  k.hand_coded_optimizations();
  RenderedProgram p = k.to_program();
  EXPECT_EQ(p.src.find("float16"), std::string::npos) << p.src;
  EXPECT_EQ(run(k), run_noopt(matmul_ast(16, 16, 8)));
}

// ---- kernel-opts fuzzer: random small ASTs, random opts, same output as NOOPT

namespace {

struct RandomAst {
  UOp ast;
  std::string desc;
};

RandomAst random_ast(std::mt19937& rng) {
  const int64_t sizes[] = {1, 2, 3, 4, 5, 6, 8, 12, 16, 20, 32};
  const int rank = 2 + static_cast<int>(rng() % 2);
  Shape full;
  for (int i = 0; i < rank; i++) full.push_back(sizes[rng() % std::size(sizes)]);
  std::string desc = "shape " + to_str(full);
  // inputs: contiguous, permuted, or broadcast along one axis
  auto input = [&](int64_t idx) {
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 1) {
      std::vector<int> perm(rank);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      Shape base(rank);
      std::vector<int> inv(rank);
      for (int i = 0; i < rank; i++) inv[perm[i]] = i;
      for (int i = 0; i < rank; i++) base[i] = full[perm[i]];
      desc += " in" + std::to_string(idx) + ":permute" + to_str(std::vector<int64_t>(perm.begin(), perm.end()));
      return load(idx, sh(base).permute(inv));
    }
    if (kind == 2) {
      Shape base = full;
      const int ax = static_cast<int>(rng() % rank);
      base[ax] = 1;
      desc += " in" + std::to_string(idx) + ":expand" + std::to_string(ax);
      return load(idx, sh(base).expand(full));
    }
    return load(idx, sh(full));
  };
  UOp x = input(1);
  const int n_in = 1 + static_cast<int>(rng() % 3);
  for (int i = 2; i <= n_in; i++) {
    const BinaryOps ops[] = {BinaryOps::ADD, BinaryOps::MUL, BinaryOps::MAX};
    x = x.alu(ops[rng() % 3], input(i));
  }
  Shape out = full;
  if (rng() % 4 != 0) {   // mostly reduces
    std::vector<int64_t> axes;
    for (int i = 0; i < rank; i++)
      if (rng() % 2) axes.push_back(i), out[i] = 1;
    if (axes.empty()) axes.push_back(rank - 1), out[rank - 1] = 1;
    const ReduceOps op = rng() % 3 ? ReduceOps::SUM : ReduceOps::MAX;
    desc += std::string(op == ReduceOps::SUM ? " SUM" : " MAX") + to_str(axes);
    x = reduce(x, op, axes);
  }
  return {sink(store(sh(out), x)), desc};
}

}  // namespace

TEST(KernelOptsFuzz, RandomOptsKeepResults) {
  std::mt19937 rng(1234);
  const auto& actions = beam_actions();
  int tested = 0, with_opts = 0;
  for (int i = 0; i < 24; i++) {
    RandomAst ra = random_ast(rng);
    const std::vector<float> want = run_noopt(ra.ast, i);
    // the hand-coded opts
    Kernel hc(ra.ast, cpu());
    hc.hand_coded_optimizations();
    EXPECT_EQ(run(hc, i), want) << ra.desc << " hand-coded " << opts_to_string(hc.applied_opts);
    // up to 3 random actions that apply
    Kernel k(ra.ast, cpu());
    for (int tries = 0, applied = 0; tries < 30 && applied < 3; tries++) {
      try {
        k.apply_opt(actions[rng() % actions.size()]);
        applied++;
      } catch (const KernelOptError&) {
      }
    }
    with_opts += !k.applied_opts.empty();
    EXPECT_EQ(run(k, i), want) << ra.desc << " opts " << opts_to_string(k.applied_opts);
    tested++;
  }
  EXPECT_EQ(tested, 24);
  EXPECT_GT(with_opts, 12) << "most random kernels must get some opts";
}

// Upcast reduce lanes whose updates differ in shape (a folded per-lane constant of 1 drops a multiply)
// must not share a vector accumulator: their scalar updates would leave it stale.
TEST(CpuVectorizer, AccumulatorLanesWithDifferentUpdates) {
  const Shape shape{4, 3, 5, 7, 2};
  std::vector<float> xs(size_t(prod(shape)));
  for (size_t i = 0; i < xs.size(); i++) xs[i] = float(int(i % 7) - 3);
  Tensor x = Tensor::from<float>(xs, shape);
  Tensor s = Tensor::arange(3, Opts{dtypes::float32, {}, {}}).reshape({1, 3, 1, 1, 1}) * 0.25f + 1;
  auto got = ((x * s + s) * s).sum(Axes{0, 2}).tolist<float>();
  ASSERT_EQ(got.size(), 3u * 7 * 2);
  for (int c = 0; c < 3; c++)
    for (int r = 0; r < 14; r++) {
      const double sc = 1 + 0.25 * c;
      double want = 0;
      for (int a = 0; a < 4; a++)
        for (int k = 0; k < 5; k++) want += (xs[size_t(((a * 3 + c) * 5 + k) * 14 + r)] * sc + sc) * sc;
      ASSERT_NEAR(got[size_t(c * 14 + r)], want, 1e-3) << "channel " << c << " at " << r;
    }
}

// ---- the CPU vectorizer: compares, selects, casts and bit casts (the transcendental rewrites)

namespace {
UOp unary_ast(int64_t rows, int64_t cols, UnaryOps op) { return sink(store(sh({rows, cols}), load(1, sh({rows, cols})).alu(op))); }
}  // namespace

TEST(CpuVectorizer, Exp2IsVectorCodeAndMatchesNoopt) {
  const UOp ast = unary_ast(8, 64, UnaryOps::EXP2);
  Kernel k(ast, cpu());
  k.hand_coded_optimizations();
  RenderedProgram p = k.to_program();
  EXPECT_EQ(p.src.find("exp2f"), std::string::npos) << "no libm call per lane\n" << p.src;
  EXPECT_NE(p.src.find("__builtin_convertvector("), std::string::npos) << "vector float->int cast\n" << p.src;
  EXPECT_NE(p.src.find("union { __typeof__(precast"), std::string::npos) << "vector bit cast\n" << p.src;
  EXPECT_NE(p.src.find("& (int16)("), std::string::npos) << "vector select\n" << p.src;
  EXPECT_EQ(run(k), run_noopt(ast));
}

TEST(CpuVectorizer, Log2IsVectorCodeAndMatchesNoopt) {
  // log2 of small ints (negatives give nan, 0 gives -inf): the same in the vector and scalar code
  const UOp ast = unary_ast(4, 128, UnaryOps::LOG2);
  Kernel k(ast, cpu());
  k.hand_coded_optimizations();
  RenderedProgram p = k.to_program();
  EXPECT_EQ(p.src.find("log2f"), std::string::npos) << p.src;
  EXPECT_NE(p.src.find("__builtin_convertvector("), std::string::npos) << p.src;
  std::vector<float> got = run(k), want = run_noopt(ast);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++)
    if (!(std::isnan(got[i]) && std::isnan(want[i]))) EXPECT_EQ(got[i], want[i]) << i;
}

TEST(CpuVectorizer, MaxReduceAndWhereAreVectorSelects) {
  const UOp mx = sink(store(sh({8, 1}), reduce(load(1, sh({8, 1024})), ReduceOps::MAX, {1})));
  Kernel k(mx, cpu());
  k.hand_coded_optimizations();
  RenderedProgram p = k.to_program();
  EXPECT_NE(p.src.find("float16 acc0"), std::string::npos) << p.src;
  EXPECT_NE(p.src.find("& (int16)(acc0)"), std::string::npos) << "max as a vector select\n" << p.src;
  EXPECT_EQ(run(k), run_noopt(mx));
  // where(a < b, a, b * 2) elementwise
  const ShapeTracker s = sh({4, 64});
  const UOp a = load(1, s), b = load(2, s);
  UOp two(Ops::CONST, dtypes::float32, {st_uop(sh({1, 1}).expand({4, 64}))}, 2.0);
  const UOp wh = sink(store(s, a.lt(b).where(a, b * two)));
  Kernel k2(wh, cpu());
  k2.hand_coded_optimizations();
  RenderedProgram p2 = k2.to_program();
  EXPECT_NE(p2.src.find("((val0<val1) & (int16)(val0))"), std::string::npos) << "a vector compare and select\n" << p2.src;
  EXPECT_EQ(run(k2), run_noopt(wh));
}

TEST(CpuVectorizer, ExpOfSpecialValuesInVectors) {
  // 64 lanes through the vector code: nan, +-inf, overflow, underflow, denormal results and ordinary values
  std::vector<float> x;
  for (int i = 0; i < 64; i++) x.push_back(static_cast<float>(i - 32) * 0.37f);
  x[1] = NAN, x[2] = INFINITY, x[3] = -INFINITY, x[4] = 200, x[5] = -200, x[6] = 127.9f, x[7] = -140.5f, x[8] = 0;
  std::vector<float> got = Tensor::from(x, {64}).exp2().realize().tolist<float>();
  for (size_t i = 0; i < x.size(); i++) {
    const float want = std::exp2(x[i]);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got[i])) << x[i];
    else if (std::isinf(want) || want == 0) EXPECT_EQ(got[i], want) << x[i];
    else EXPECT_NEAR(got[i], want, 2e-7 * want) << x[i];
  }
}

TEST(CpuHeuristics, LargeMatmulPutsTheVectorAxisOutermostForL2) {
  // b (64x256 floats, 64 KiB) is more than half of a 64 KiB L2; one tile's panel of it (64x32) is not
  Context ctx({{"CPU_L2", 65536}, {"THREADS", 2}});
  const UOp ast = matmul_ast(32, 256, 64);
  Kernel k(ast, cpu());
  k.hand_coded_optimizations();
  EXPECT_EQ(k.applied_opts,
            (std::vector<Opt>{{OptOps::UPCAST, 1, 16}, {OptOps::UPCAST, 1, 2}, {OptOps::UPCAST, 0, 8}, {OptOps::SWAP, 0, 1}}));
  EXPECT_EQ(run(k), run_noopt(ast));
  Context big({{"CPU_L2", 1 << 30}});
  Kernel k2(ast, cpu());
  k2.hand_coded_optimizations();
  EXPECT_EQ(k2.applied_opts.size(), 3u) << "b fits in the L2: rows stay outermost";
}
