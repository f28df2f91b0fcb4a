// TinyJit with symbolic Variables: the facts of tinygrad 0.9.2's test_symbolic_jit.py, and a
// KV-cache attention step replayed for every start_pos with one capture and no compiles.
#include <gtest/gtest.h>

#include "engine/realize.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol = 1e-5f) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}
std::vector<float> vals(const Tensor& t) { return t.contiguous().realize().tolist<float>(); }

}  // namespace

TEST(SymbolicJit, Plus1) {
  TinyJit jf([](const std::vector<Tensor>& in) { return std::vector<Tensor>{(in[0] + 1)}; });
  Variable v("i", 1, 10);
  for (int64_t i = 1; i < 8; i++) {
    Tensor a = Tensor::rand({3, i}).realize();
    Tensor out = jf({a.reshape({3, v.bind(i)})})[0];
    EXPECT_TRUE(out.sym_shape()[1].same(v));
    EXPECT_EQ(out.sym_shape()[1].value(), i);   // the bound value of this call
    expect_close(vals(out), vals(a + 1));
  }
  EXPECT_EQ(jf.captured_kernels(), 1u);
}

TEST(SymbolicJit, Add) {
  TinyJit jf([](const std::vector<Tensor>& in) { return std::vector<Tensor>{(in[0] + in[1])}; });
  Variable v("i", 1, 10);
  for (int64_t i = 1; i < 8; i++) {
    Tensor a = Tensor::rand({3, i}).realize(), b = Tensor::rand({3, i}).realize();
    auto out = jf({a.reshape({3, v.bind(i)}), b.reshape({3, v.bind(i)})});
    expect_close(vals(out[0]), vals(a + b));
  }
  EXPECT_EQ(jf.captured_kernels(), 1u);
}

TEST(SymbolicJit, MatmulAndSoftmax) {
  TinyJit jf([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].matmul(in[1]), in[0].softmax(-1)}; });
  Variable v("i", 1, 10);
  for (int64_t i = 1; i < 8; i++) {
    Tensor a = Tensor::rand({3, i}).realize(), b = Tensor::rand({i, 5}).realize();
    auto out = jf({a.reshape({3, v.bind(i)}), b.reshape({v.bind(i), 5})});
    expect_close(vals(out[0]), vals(a.matmul(b)));
    expect_close(vals(out[1]), vals(a.softmax(-1)));
  }
}

TEST(SymbolicJit, VarsArgument) {
  // a Variable passed by value only (no input dim holds it): shrink a realized buffer by it
  Tensor base = Tensor::rand({4, 10}).realize();
  TinyJit jf([&](const std::vector<Tensor>& in, const std::vector<Variable>& vars) {
    return std::vector<Tensor>{(in[0].shrink({{sint(0), sint(4)}, {sint(0), vars[0] + 1}}) * 2).sum(1)};
  });
  Variable sp("start_pos", 0, 9);
  for (int64_t p = 0; p < 10; p++) {
    auto out = jf({base}, {sp.bind(p)});
    expect_close(vals(out[0]), vals((base.shrink({{0, 4}, {0, p + 1}}) * 2).sum(1)));
  }
}

TEST(SymbolicJit, Errors) {
  TinyJit jf([](const std::vector<Tensor>& in, const std::vector<Variable>&) { return std::vector<Tensor>{(in[0] + 1)}; });
  Variable v("i", 1, 10), w("j", 1, 10);
  Tensor a = Tensor::rand({3, 4}).realize();
  for (int k = 0; k < 3; k++) jf({a.reshape({3, v.bind(4)})}, {v.bind(4)});
  EXPECT_THROW(jf({a.reshape({3, v.bind(4)})}, {v.bind(4), w.bind(2)}), Error);          // another variable set
  EXPECT_THROW(jf({a.reshape({3, v.bind(4)}).cast(dtypes::int32)}, {v.bind(4)}), Error);   // another dtype
  EXPECT_THROW(jf({Tensor::rand({2, 4}).reshape({2, v.bind(4)})}, {v.bind(4)}), Error);   // a fixed dim changed
  EXPECT_THROW(jf({a.reshape({3, v.bind(4)})}, {Variable("i", 1, 10)}), Error);            // unbound
  // a Variable of the same name with a wider range: its value would overrun buffers sized for max 10
  Tensor big = Tensor::rand({3, 15}).realize();
  try {
    Variable wide("i", 1, 20);
    jf({big.reshape({3, wide.bind(15)})}, {wide.bind(15)});
    FAIL() << "a value outside the captured range must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 10]"), std::string::npos) << e.what();
  }
}

// The decode step of a transformer with a KV cache (tinygrad's gpt2 Attention): write this
// position's k/v into the cache, attend over cache[:, :, 0:start_pos+1].
TEST(SymbolicJit, KVCacheAttentionStep) {
  const int64_t H = 2, D = 8, MAX = 64;
  Tensor::manual_seed(3);
  Tensor cache_k = Tensor::zeros({1, H, MAX, D}).contiguous().realize(), cache_v = Tensor::zeros({1, H, MAX, D}).contiguous().realize();
  Tensor ref_k = Tensor::zeros({1, H, MAX, D}).contiguous().realize(), ref_v = Tensor::zeros({1, H, MAX, D}).contiguous().realize();
  auto step = [&](Tensor& ck, Tensor& cv, const Tensor& q, const Tensor& k, const Tensor& v, const sint& sp) {
    ck.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sp, sp + 1}, {sint(0), sint(D)}}).assign(k).realize();
    cv.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sp, sp + 1}, {sint(0), sint(D)}}).assign(v).realize();
    Tensor keys = ck.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), sp + 1}, {sint(0), sint(D)}});
    Tensor values = cv.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), sp + 1}, {sint(0), sint(D)}});
    return q.scaled_dot_product_attention(keys, values);
  };
  TinyJit jf([&](const std::vector<Tensor>& in, const std::vector<Variable>& vars) {
    return std::vector<Tensor>{step(cache_k, cache_v, in[0], in[1], in[2], vars[0])};
  });
  Variable start_pos("start_pos", 1, MAX - 1);
  // position 0 fills the first slot outside the JIT (the prompt), like gpt2's first call
  {
    Tensor q = Tensor::rand({1, H, 1, D}), k = Tensor::rand({1, H, 1, D}), v = Tensor::rand({1, H, 1, D});
    for (Tensor* c : {&cache_k, &ref_k}) c->shrink({{0, 1}, {0, H}, {0, 1}, {0, D}}).assign(k).realize();
    for (Tensor* c : {&cache_v, &ref_v}) c->shrink({{0, 1}, {0, H}, {0, 1}, {0, D}}).assign(v).realize();
  }
  size_t compiled_after_capture = 0, kernels = 0;
  for (int64_t p = 1; p < MAX; p++) {
    Tensor q = Tensor::rand({1, H, 1, D}).realize(), k = Tensor::rand({1, H, 1, D}).realize(), v = Tensor::rand({1, H, 1, D}).realize();
    Tensor got = jf({q, k, v}, {start_pos.bind(p)})[0];
    std::vector<float> g = vals(got);
    Tensor want = step(ref_k, ref_v, q, k, v, sint(p));
    expect_close(g, vals(want), 1e-4f);
    if (p == 2) {   // captured on the second call
      compiled_after_capture = method_cache_size();
      kernels = jf.captured_kernels();
      EXPECT_GT(kernels, 0u);
    }
    if (p > 2) EXPECT_EQ(jf.captured_kernels(), kernels);
  }
  EXPECT_EQ(jf.cnt(), MAX - 1);
  // the eager reference compiles one kernel set per position; the jitted step none after capture:
  // compare the cache size growth with a run of only the jitted step
  size_t before = method_cache_size();
  for (int64_t p = 1; p < MAX; p++) {
    Tensor q = Tensor::rand({1, H, 1, D}).realize(), k = Tensor::rand({1, H, 1, D}).realize(), v = Tensor::rand({1, H, 1, D}).realize();
    jf({q, k, v}, {start_pos.bind(p)});
  }
  EXPECT_EQ(method_cache_size(), before);
  EXPECT_GT(compiled_after_capture, 0u);
}

// mean and var divide by the count of the reduced elements: over a symbolic axis that count is
// the Variable, so a replay with a new value must divide by the new value, not the captured one
TEST(SymbolicJit, MeanVarOverSymbolicAxis) {
  TinyJit jf([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].mean(1), in[0].var(1), in[0].mean(), in[0].std(1, false, 0)};
  });
  Variable v("i", 1, 10);
  for (int64_t i = 2; i < 10; i++) {
    Tensor a = Tensor::rand({3, i}).realize();
    auto out = jf({a.reshape({3, v.bind(i)})});
    expect_close(vals(out[0]), vals(a.mean(1)));
    expect_close(vals(out[1]), vals(a.var(1)));
    expect_close(vals(out[2]), vals(a.mean()));
    expect_close(vals(out[3]), vals(a.std(1, false, 0)));
  }
  EXPECT_GT(jf.captured_kernels(), 0u);
}

// a causal mask over a symbolic key length: built from the Variable, not the captured length
TEST(SymbolicJit, CausalAttention) {
  TinyJit jf([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].scaled_dot_product_attention(in[1], in[2], std::nullopt, 0.0, true)};
  });
  Variable v("i", 1, 12);
  for (int64_t i = 2; i < 8; i++) {
    Tensor q = Tensor::rand({2, 3, 4, 8}).realize(), k = Tensor::rand({2, 3, i, 8}).realize(), w = Tensor::rand({2, 3, i, 8}).realize();
    auto out = jf({q, k.reshape({2, 3, v.bind(i), 8}), w.reshape({2, 3, v.bind(i), 8})});
    expect_close(vals(out[0]), vals(q.scaled_dot_product_attention(k, w, std::nullopt, 0.0, true)), 1e-5f);
  }
}

// ---- more of test_symbolic_jit.py (0.9.2)

// a kernel with no symbols after a symbolic one: both captured, 2 kernels
TEST(SymbolicJit, MixedWithNoSymbolKernel) {
  TinyJit jf([](const std::vector<Tensor>& in) {
    Tensor s = in[0].matmul(in[1]).realize();
    return std::vector<Tensor>{(s + s).realize()};
  });
  Variable v("i", 1, 10);
  for (int64_t i = 1; i < 5; i++) {
    Tensor a = Tensor::rand({3, i}).realize(), b = Tensor::rand({i, 5}).realize();
    expect_close(vals(jf({a.reshape({3, v.bind(i)}), b.reshape({v.bind(i), 5})})[0]), vals(a.matmul(b) * 2));
  }
  EXPECT_EQ(jf.captured_kernels(), 2u);
}

TEST(SymbolicJit, CatAndTwoVars) {
  TinyJit cat0([](const std::vector<Tensor>& in) { return std::vector<Tensor>{Tensor::cat({in[0], in[1]}, 0)}; });
  TinyJit mm1([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].matmul(in[1]) + 1}; });
  Variable v("i", 1, 10), w("j", 1, 10);
  for (int64_t i = 1; i < 4; i++)
    for (int64_t j = 1; j < 4; j++) {
      Tensor a = Tensor::rand({i, 3}).realize(), b = Tensor::rand({j, 3}).realize();
      expect_close(vals(cat0({a.reshape({v.bind(i), 3}), b.reshape({w.bind(j), 3})})[0]), vals(Tensor::cat({a, b}, 0)));
      Tensor c = Tensor::rand({i, 3}).realize(), d = Tensor::rand({3, j}).realize();
      expect_close(vals(mm1({c.reshape({v.bind(i), 3}), d.reshape({3, w.bind(j)})})[0]), vals(c.matmul(d) + 1));
    }
  EXPECT_EQ(cat0.captured_kernels(), 1u);
  EXPECT_EQ(mm1.captured_kernels(), 1u);
}

// an input shrunk by a Variable (a symbolic offset, concrete dims) and a sum of ones over a symbolic length
TEST(SymbolicJit, ShrinkInputAndOnesSum) {
  TinyJit jf([](const std::vector<Tensor>& in) { return std::vector<Tensor>{(in[0] + 1)}; });
  TinyJit js([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].sum()}; });
  Tensor a = Tensor::rand({7, 11}).realize();
  Variable v("i", 1, 10);
  for (int64_t i = 1; i < 6; i++) {
    Tensor s = a.shrink({{sint(3), sint(5)}, {sint(v.bind(i)), v.bind(i) + 2}});
    expect_close(vals(jf({s})[0]), vals(a.shrink({{3, 5}, {i, i + 2}}) + 1));
    EXPECT_EQ(js({Tensor::ones({i}).reshape({v.bind(i)})})[0].item<float>(), static_cast<float>(i));
  }
  EXPECT_EQ(jf.captured_kernels(), 1u);
}

TEST(SymbolicJit, AttentionKernelCountConstant) {
  TinyJit jf([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].transpose(1, 2).scaled_dot_product_attention(in[1].transpose(1, 2), in[2].transpose(1, 2))};
  });
  Variable v("i", 1, 10);
  size_t kernels = 0;
  for (int64_t i = 1; i < 6; i++) {
    Tensor q = Tensor::rand({2, 1, 4, 8}).realize(), k = Tensor::rand({2, i, 4, 8}).realize(), w = Tensor::rand({2, i, 4, 8}).realize();
    auto out = jf({q, k.reshape({2, v.bind(i), 4, 8}), w.reshape({2, v.bind(i), 4, 8})});
    expect_close(vals(out[0]), vals(q.transpose(1, 2).scaled_dot_product_attention(k.transpose(1, 2), w.transpose(1, 2))));
    if (i == 2) kernels = jf.captured_kernels();
    if (i > 2) EXPECT_EQ(jf.captured_kernels(), kernels);
  }
  EXPECT_GT(kernels, 0u);
}

// A training step over the first n rows of a dataset (n a Variable): forward, a loss averaged over
// the n rows, backward and an SGD step with momentum, under TinyJit. Captured once; every replay with
// a new n (1 included: size-1 dims fuse differently at fixed shapes) compiles nothing and gives the
// losses, gradients and weights of the same steps run eagerly at fixed shapes.
TEST(SymbolicJit, BackwardAndSgdStepReplayForChangingLengths) {
  const int64_t MAXN = 40, I = 6, O = 3;
  const Tensor data = Tensor::rand({MAXN, I}).realize(), target = Tensor::rand({MAXN, O}).realize();
  const std::vector<int64_t> lengths{5, 9, 1, 40, 17, 2, 33, 8, 8, 24};
  Variable n("n", 1, MAXN);
  auto run = [&](bool jitted) {
    Tensor::manual_seed(3);
    Tensor w = Tensor::rand({I, O}).realize(), b = Tensor::zeros({O}).contiguous().realize();
    w.requires_grad_(), b.requires_grad_();
    auto opt = nn::optim::SGD({w, b}, 0.05, 0.9);
    auto step = [&](const sint& len) {
      Tensor::Train train;
      opt->zero_grad();
      Tensor x = data.shrink({{sint(0), len}, {sint(0), sint(I)}}), y = target.shrink({{sint(0), len}, {sint(0), sint(O)}});
      Tensor loss = (x.matmul(w).relu() + b - y).square().mean();
      loss.backward();
      // (with the step, as tinygrad's training loops: a loss realized after opt->step() would read the
      // parameters' buffers after the step's in-place assign)
      loss.realize(opt->schedule_step());
      return std::vector<Tensor>{loss, *w.grad()};
    };
    TinyJit jit([&](const std::vector<Tensor>&, const std::vector<Variable>& vars) { return step(vars[0]); });
    std::vector<std::vector<float>> out;
    size_t cache_after_capture = 0, kernels = 0;
    for (size_t i = 0; i < lengths.size(); i++) {
      std::vector<Tensor> r = jitted ? jit({}, {n.bind(lengths[i])}) : step(sint(lengths[i]));
      out.push_back(vals(r[0])), out.push_back(vals(r[1])), out.push_back(vals(w)), out.push_back(vals(b));
      if (!jitted) continue;
      if (i == 1) cache_after_capture = method_cache_size(), kernels = jit.captured_kernels();
      if (i > 1) {
        EXPECT_EQ(method_cache_size(), cache_after_capture) << "n=" << lengths[i] << " compiled a kernel";
        EXPECT_EQ(jit.captured_kernels(), kernels) << "n=" << lengths[i];
      }
    }
    if (jitted) EXPECT_GT(kernels, 0u);
    return out;
  };
  const auto eager = run(false), jitted = run(true);
  ASSERT_EQ(eager.size(), jitted.size());
  for (size_t i = 0; i < eager.size(); i++) {
    SCOPED_TRACE("step " + std::to_string(i / 4) + " value " + std::to_string(i % 4) + " (loss, w.grad, w, b)");
    expect_close(jitted[i], eager[i], 1e-5f);
  }
  EXPECT_NE(eager[0], eager[eager.size() - 4]);   // the steps train: the loss changes
}
