// TinyJit replays through device graphs (JIT=1: CUDA graphs on a GPU, the CPU's call-list graph
// elsewhere) against replays without graphs (JIT=2) and eager runs: new input buffers and new
// Variable values (symbolic launch dims) on every call, over several batches (JIT_BATCH_SIZE=4),
// batches split by copies, modes switched between replays of one capture. Each test runs on CPU and
// on CUDA; the CUDA ones skip without a GPU.
#include <gtest/gtest.h>

#include "engine/profile.hpp"
#include "engine/realize.hpp"
#include "engine/replay.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {

std::vector<float> vals(const Tensor& t) { return t.contiguous().realize().tolist<float>(); }

void expect_close(const std::vector<float>& a, const std::vector<float>& b, const std::string& what, float tol = 1e-5f) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); i++) ASSERT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << what << " at " << i;
}

// n realized kernels of two kinds over x, y and a third kind every 5th step (few compiles, order
// and inputs matter); the outputs: x, y and a reduce of x
std::vector<Tensor> chain(Tensor x, Tensor y, int n) {
  for (int i = 0; i < n; i++) {
    x = (i % 2 ? x * 0.5 + y : x - y * 0.25).realize();
    if (i % 5 == 4) y = (y * x + 1).realize();
  }
  return {x, y, x.sum()};
}

struct Snapshot {
  int64_t built = GraphStats::built, launches = GraphStats::launches, updates = GraphStats::node_updates;
};

class JitGraph : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "CUDA" && cuda_device_count() == 0) GTEST_SKIP() << "no CUDA here";
  }
  Tensor rand(const Shape& s) const { return Tensor::rand(s, {.device = GetParam()}).realize(); }
};

}  // namespace

// 16 kernels in batches of 4, 8, 4: graph replay equals plain replay and the eager function, with
// new input buffers every call; graphs are built once and updated in place
TEST_P(JitGraph, ReplayEqualsPlainReplayAndEager) {
  Context ctx{{"JIT_BATCH_SIZE", 4}};
  const int steps = 13;   // 13 + 2 (y updates) + 1 (sum) = 16 kernels
  std::vector<std::vector<Tensor>> inputs;   // kept alive: every call's buffers are new memory
  for (int c = 0; c < 7; c++) inputs.push_back({rand({33}), rand({33})});
  std::vector<std::vector<std::vector<float>>> got(3);   // [mode][call] -> outputs, flattened
  for (int64_t mode : {1, 2}) {
    Context m{{"JIT", mode}};
    TinyJit jit([&](const std::vector<Tensor>& in) { return chain(in[0], in[1], steps); });
    Snapshot s0;
    for (size_t c = 0; c < inputs.size(); c++) {
      Snapshot before;
      const int64_t k0 = GlobalCounters::kernel_count;
      std::vector<Tensor> out = jit(inputs[c]);
      const int64_t ran = GlobalCounters::kernel_count - k0;
      std::vector<float> flat;
      for (auto& t : out)
        for (float v : vals(t)) flat.push_back(v);
      got[static_cast<size_t>(mode)].push_back(flat);
      if (c < 2) continue;   // call 1 runs, call 2 captures
      EXPECT_EQ(jit.captured_kernels(), 16u);
      EXPECT_EQ(ran, 16) << "a replay counts every kernel";
      if (mode == 2) {
        EXPECT_EQ(GraphStats::launches, before.launches) << "JIT=2 launched a graph";
      } else {
        EXPECT_EQ(GraphStats::launches - before.launches, 3) << "16 kernels in batches of 4, 8, 4: three graph launches";
        if (c > 2) EXPECT_EQ(GraphStats::built, before.built) << "a replay rebuilt its graphs";
        if (c > 2) EXPECT_GT(GraphStats::node_updates, before.updates) << "new input buffers must reach the graphs";
      }
    }
    EXPECT_EQ(GraphStats::built - s0.built, mode == 1 ? 3 : 0);
  }
  for (size_t c = 0; c < inputs.size(); c++) {
    std::vector<Tensor> want = chain(inputs[c][0], inputs[c][1], steps);
    std::vector<float> flat;
    for (auto& t : want)
      for (float v : vals(t)) flat.push_back(v);
    expect_close(got[1][c], flat, "JIT=1 vs eager, call " + std::to_string(c));
    EXPECT_EQ(got[1][c], got[2][c]) << "JIT=1 vs JIT=2 (the same kernels), call " << c;
  }
}

// A Variable changes every call: kernel arguments and launch dims in graph nodes of every batch
TEST_P(JitGraph, SymbolicVariableAcrossBatches) {
  Context ctx{{"JIT_BATCH_SIZE", 4}};
  const int64_t MAX = 48;
  const int steps = 9;
  Variable n("n", 1, MAX);
  auto fn = [&](const std::vector<Tensor>& in, const sint& len) {
    Tensor x = in[0].shrink({{sint(0), len}}), y = in[1].shrink({{sint(0), len}});
    std::vector<Tensor> r = chain(x, y, steps);
    return std::vector<Tensor>{r[0], r[2]};
  };
  const std::vector<int64_t> lens{5, 17, 3, 48, 1, 33, 17, 48, 2};
  std::vector<std::vector<Tensor>> inputs;
  for (size_t c = 0; c < lens.size(); c++) inputs.push_back({rand({MAX}), rand({MAX})});
  std::vector<std::vector<std::vector<float>>> got(3);
  for (int64_t mode : {1, 2}) {
    Context m{{"JIT", mode}};
    TinyJit jit([&](const std::vector<Tensor>& in, const std::vector<Variable>& vars) { return fn(in, vars[0]); });
    Snapshot s0;
    for (size_t c = 0; c < lens.size(); c++) {
      std::vector<Tensor> out = jit(inputs[c], {n.bind(lens[c])});
      ASSERT_EQ(out[0].sym_shape()[0].value(), lens[c]) << "call " << c;   // shape() throws on a symbolic dim (API.md)
      std::vector<float> flat = vals(out[0]);
      flat.push_back(vals(out[1])[0]);
      got[static_cast<size_t>(mode)].push_back(flat);
    }
    if (mode == 1) EXPECT_GE(GraphStats::built - s0.built, 2) << "the capture should span several graphs";
    else EXPECT_EQ(GraphStats::built, s0.built);
  }
  for (size_t c = 0; c < lens.size(); c++) {
    std::vector<Tensor> want = fn(inputs[c], sint(lens[c]));
    std::vector<float> flat = vals(want[0]);
    flat.push_back(vals(want[1])[0]);
    expect_close(got[1][c], flat, "JIT=1 vs eager, len " + std::to_string(lens[c]), 1e-4f);
    EXPECT_EQ(got[1][c], got[2][c]) << "JIT=1 vs JIT=2, len " << lens[c];
  }
}

// One capture replayed with JIT=1, 2, 1, 2, ...: a plain replay changes the bound arguments, and the
// next graph replay must still see this call's inputs (the graphs hold their own copies)
TEST_P(JitGraph, ModesSwitchBetweenReplays) {
  Context ctx{{"JIT_BATCH_SIZE", 4}};
  TinyJit jit([&](const std::vector<Tensor>& in) { return chain(in[0], in[1], 11); });
  std::vector<std::vector<Tensor>> inputs;
  for (int c = 0; c < 8; c++) inputs.push_back({rand({20}), rand({20})});
  for (size_t c = 0; c < inputs.size(); c++) {
    Context m{{"JIT", static_cast<int64_t>(1 + c % 2)}};
    std::vector<Tensor> out = jit(inputs[c]);
    std::vector<Tensor> want = chain(inputs[c][0], inputs[c][1], 11);
    for (size_t o = 0; o < out.size(); o++) expect_close(vals(out[o]), vals(want[o]), "call " + std::to_string(c) + " output " + std::to_string(o));
  }
}

// PROFILE (and DEBUG>=2) replays go item by item: a graph is one "<batched N>" item with its time,
// and the kernel counter still counts kernels
TEST_P(JitGraph, ProfiledReplayShowsBatches) {
  Context ctx{{"JIT_BATCH_SIZE", 4}, {"PROFILE", 1}};
  TinyJit jit([&](const std::vector<Tensor>& in) { return chain(in[0], in[1], 6); });   // 8 kernels: batches of 4, 4
  for (int c = 0; c < 3; c++) jit({rand({16}), rand({16})});
  profile::clear();
  Tensor x = rand({16}), y = rand({16});
  const int64_t k0 = GlobalCounters::kernel_count;
  std::vector<Tensor> out = jit({x, y});
  EXPECT_EQ(GlobalCounters::kernel_count - k0, 8);
  int batched = 0;
  for (auto& e : profile::events()) batched += e.name.find("<batched 4>") != std::string::npos;
  EXPECT_EQ(batched, 2);
  expect_close(vals(out[0]), vals(chain(x, y, 6)[0]), "profiled replay");
  profile::clear();
}

// A copy between devices splits the batches; the kernels on both sides are graphed
TEST_P(JitGraph, CopiesSplitBatches) {
  if (GetParam() != "CUDA") GTEST_SKIP() << "needs a second device";
  Context ctx{{"JIT_BATCH_SIZE", 4}};
  auto fn = [](const std::vector<Tensor>& in) {
    std::vector<Tensor> a = chain(in[0], in[1], 3);
    std::vector<Tensor> b = chain(a[0].to("CPU"), a[1].to("CPU"), 3);   // copies, then CPU kernels
    std::vector<Tensor> c = chain(b[0].to("CUDA"), b[1].to("CUDA"), 3);
    return std::vector<Tensor>{c[0], c[2]};
  };
  TinyJit jit(fn);
  Snapshot s0;
  for (int c = 0; c < 5; c++) {
    Tensor x = rand({24}), y = rand({24});
    std::vector<Tensor> out = jit({x, y});
    std::vector<Tensor> want = fn({x, y});
    for (size_t o = 0; o < out.size(); o++) expect_close(vals(out[o]), vals(want[o]), "call " + std::to_string(c));
  }
  EXPECT_GE(GraphStats::built - s0.built, 3) << "CUDA before the copy, CPU, CUDA after";
}

INSTANTIATE_TEST_SUITE_P(Devices, JitGraph, ::testing::Values("CPU", "CUDA"), [](const auto& info) { return info.param; });

// JIT=2 captures and replays like JIT=1 but builds no graph; JIT=0 runs the function each call;
// other values are an error
TEST(JitModes, PlainReplayAndDisabledAndInvalid) {
  int fn_calls = 0;
  auto f = [&](const std::vector<Tensor>& in) {
    fn_calls++;
    return chain(in[0], in[1], 4);
  };
  {
    Context m{{"JIT", 2}};
    TinyJit jit(f);
    Snapshot s0;
    for (int c = 0; c < 5; c++) {
      Tensor x = Tensor::rand({8}, {.device = "CPU"}).realize(), y = Tensor::rand({8}, {.device = "CPU"}).realize();
      expect_close(vals(jit({x, y})[0]), vals(chain(x, y, 4)[0]), "JIT=2 call " + std::to_string(c));
    }
    EXPECT_EQ(fn_calls, 2);
    EXPECT_EQ(jit.cnt(), 5);
    EXPECT_EQ(GraphStats::built, s0.built);
  }
  fn_calls = 0;
  {
    Context m{{"JIT", 0}};
    TinyJit jit(f);
    for (int c = 0; c < 4; c++) jit({Tensor::rand({8}).realize(), Tensor::rand({8}).realize()});
    EXPECT_EQ(fn_calls, 4);
    EXPECT_EQ(jit.captured_kernels(), 0u);
  }
  {
    Context m{{"JIT", 3}};
    TinyJit jit(f);
    EXPECT_THROW(jit({Tensor::rand({8}).realize(), Tensor::rand({8}).realize()}), Error);
  }
}
