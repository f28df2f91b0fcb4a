// TinyJit: call 1 runs, call 2 captures, calls 3+ replay the captured kernels on the new inputs without
// running the function (no graph, no schedule, no codegen); signature changes throw; JIT=0 runs the
// function every time; a jitted training step matches the plain one; random numbers advance on replay.
#include <gtest/gtest.h>

#include "engine/realize.hpp"
#include "tensor_test_util.hpp"
#include "tg/tg.hpp"

using namespace tg;
using tgt::expect_close;
using tgt::F;
using tgt::vals;

namespace {

std::vector<float> ramp(int n, float a, float b) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; i++) v[size_t(i)] = a * float(i) + b;
  return v;
}

struct Mlp : nn::Module {
  nn::Linear l1{4, 8}, l2{8, 3};
  Tensor operator()(const Tensor& x) const { return l2(l1(x).relu()); }
  void collect(const std::string& p, nn::NamedTensors& out) override {
    l1.collect(p + "l1.", out);
    l2.collect(p + "l2.", out);
  }
};

// a deterministic batch for step i
std::pair<Tensor, Tensor> batch(int i) {
  std::vector<float> x(16);
  std::vector<int32_t> y(4);
  for (int k = 0; k < 16; k++) x[size_t(k)] = float(std::sin(0.7 * k + 1.3 * i));
  for (int k = 0; k < 4; k++) y[size_t(k)] = (k + i) % 3;
  return {F(x, {4, 4}), Tensor::from<int32_t>(y, {4})};
}

}  // namespace

TEST(Jit, CapturesOnSecondCallAndReplaysNewInputs) {
  int fn_calls = 0;
  TinyJit jit([&](const std::vector<Tensor>& in) {
    fn_calls++;
    return std::vector<Tensor>{(in[0] * 2 + in[1]).sum()};
  });
  EXPECT_EQ(jit.cnt(), 0);
  for (int call = 1; call <= 6; call++) {
    auto xv = ramp(8, 0.5f, float(call)), yv = ramp(8, -1.f, 3.f * float(call));
    double want = 0;
    for (int i = 0; i < 8; i++) want += 2.0 * xv[size_t(i)] + yv[size_t(i)];
    Tensor x = F(xv, {8}).realize(), y = F(yv, {8}).realize();
    size_t cache0 = method_cache_size();
    int64_t kernels0 = GlobalCounters::kernel_count;
    std::vector<Tensor> out = jit({x, y});
    int64_t ran = GlobalCounters::kernel_count - kernels0;   // before item(): on a GPU it copies to the host
    float got = out[0].item<float>();
    EXPECT_NEAR(got, want, 1e-4) << "call " << call;
    if (call == 1) EXPECT_EQ(jit.captured_kernels(), 0u);
    if (call >= 2) EXPECT_GT(jit.captured_kernels(), 0u);
    if (call >= 3) {
      // replay: the function did not run, nothing new was compiled, exactly the captured kernels ran
      EXPECT_EQ(fn_calls, 2);
      EXPECT_EQ(method_cache_size(), cache0);
      // the inputs were realized contiguous already, so no copy kernels
      EXPECT_EQ(ran, int64_t(jit.captured_kernels()));
    }
    EXPECT_EQ(jit.cnt(), call);
  }
  EXPECT_EQ(fn_calls, 2);
}

TEST(Jit, UnrealizedAndViewInputsAreMaterialized) {
  TinyJit jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + 1}; });
  for (int call = 0; call < 4; call++) {
    Tensor base = F(ramp(6, 1.f, float(call)), {2, 3});
    Tensor x = base.T() * 1;   // lazy, transposed
    std::vector<float> want;
    for (int c = 0; c < 3; c++)
      for (int r = 0; r < 2; r++) want.push_back(float(r * 3 + c) + float(call) + 1);
    expect_close(vals(jit({x})[0]), want);
  }
}

TEST(Jit, ReturnsSeveralOutputs) {
  TinyJit jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].max(), in[0] * in[0], in[0].sum(0)}; });
  for (int call = 0; call < 4; call++) {
    Tensor x = F(ramp(6, 1.f, float(-call)), {2, 3});
    auto r = jit({x});
    ASSERT_EQ(r.size(), 3u);
    EXPECT_EQ(r[0].item<float>(), 5.f - float(call));
    auto sq = vals(r[1]);
    EXPECT_EQ(sq[5], (5.f - float(call)) * (5.f - float(call)));
    expect_close(vals(r[2]), {3.f - 2 * float(call), 5.f - 2 * float(call), 7.f - 2 * float(call)});
  }
}

TEST(Jit, SignatureChangeAfterCaptureThrows) {
  TinyJit jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].sum()}; });
  for (int i = 0; i < 3; i++) jit({Tensor::ones({4})});
  EXPECT_THROW(jit({Tensor::ones({5})}), Error);
  EXPECT_THROW(jit({Tensor::ones({2, 2})}), Error);
  EXPECT_THROW(jit({Tensor::ones({4}, Opts{dtypes::int32})}), Error);
  EXPECT_THROW(jit({Tensor::ones({4}), Tensor::ones({4})}), Error);
  EXPECT_THROW(jit({}), Error);
  try {
    jit({Tensor::ones({5})});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(5,)"), std::string::npos) << e.what();
  }
  // still works with the captured signature, and reset() allows a new one
  EXPECT_EQ(jit({Tensor::full({4}, 2.0)})[0].item<float>(), 8.f);
  jit.reset();
  EXPECT_EQ(jit.cnt(), 0);
  EXPECT_EQ(jit.captured_kernels(), 0u);
  for (int i = 0; i < 3; i++) EXPECT_EQ(jit({Tensor::full({5}, float(i))})[0].item<float>(), 5.f * float(i));
}

TEST(Jit, DuplicateInputBufferThrows) {
  TinyJit jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] - in[1]}; });
  Tensor x = F({1, 2}, {2}).realize();
  // one buffer as two inputs can't be told apart in the captured kernels
  EXPECT_THROW(jit({x, x}), Error);
}

TEST(Jit, DisabledRunsTheFunctionEveryTime) {
  Context ctx{{"JIT", 0}};
  int fn_calls = 0;
  TinyJit jit([&](const std::vector<Tensor>& in) {
    fn_calls++;
    return std::vector<Tensor>{in[0] * 3};
  });
  for (int i = 0; i < 4; i++) expect_close(vals(jit({F({float(i), 1}, {2})})[0]), {3.f * float(i), 3.f});
  EXPECT_EQ(fn_calls, 4);
  EXPECT_EQ(jit.captured_kernels(), 0u);
}

TEST(Jit, TrainingStepMatchesPlainSteps) {
  const int steps = 6;
  auto run = [&](bool jitted) {
    Tensor::manual_seed(42);
    Mlp model;
    auto opt = nn::optim::SGD(nn::state::get_parameters(model), 0.1, 0.9);
    auto step = [&](const std::vector<Tensor>& in) {
      Tensor::Train train;
      opt->zero_grad();
      Tensor loss = model(in[0]).sparse_categorical_crossentropy(in[1]);
      loss.backward();
      opt->step();
      return std::vector<Tensor>{loss};
    };
    TinyJit jit(step);
    std::vector<float> losses;
    for (int i = 0; i < steps; i++) {
      // a learning-rate schedule: the captured kernels read the lr buffer, so replays see the new value
      opt->lr->assign(Tensor::full({1}, 0.1 * (steps - i) / steps)).realize();
      auto [x, y] = batch(i);
      losses.push_back((jitted ? jit({x, y}) : step({x, y}))[0].item<float>());
    }
    if (jitted) EXPECT_GT(jit.captured_kernels(), 0u);
    losses.push_back(model.l2.weight.sum().item<float>());   // the weights end up the same too
    return losses;
  };
  std::vector<float> plain = run(false), jitted = run(true);
  expect_close(jitted, plain, 1e-6f);
  // training does something: the loss on the repeated pattern changes
  EXPECT_NE(plain[0], plain[steps - 1]);
}

TEST(Jit, RandomNumbersAdvanceOnReplay) {
  auto draw = [](bool jitted) {
    Tensor::manual_seed(7);
    TinyJit jit([](const std::vector<Tensor>&) { return std::vector<Tensor>{Tensor::rand({5})}; });
    std::vector<std::vector<float>> out;
    for (int i = 0; i < 5; i++) out.push_back(vals(jitted ? jit({})[0] : Tensor::rand({5})));
    return out;
  };
  auto plain = draw(false), jitted = draw(true);
  for (size_t i = 0; i < plain.size(); i++) {
    EXPECT_EQ(jitted[i], plain[i]) << "draw " << i;
    for (size_t j = 0; j < i; j++) EXPECT_NE(jitted[i], jitted[j]) << "draws " << i << " and " << j;
  }
}
