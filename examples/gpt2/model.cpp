#include "gpt2/model.hpp"

#include <cmath>

namespace gpt2 {

using tg::Opts;

Config Config::named(const std::string& name) {
  Config c;
  if (name == "gpt2") c.n_layer = 12, c.n_embd = 768, c.n_head = 12;
  else if (name == "gpt2-medium") c.n_layer = 24, c.n_embd = 1024, c.n_head = 16;
  else if (name == "gpt2-large") c.n_layer = 36, c.n_embd = 1280, c.n_head = 20;
  else if (name == "gpt2-xl") c.n_layer = 48, c.n_embd = 1600, c.n_head = 25;
  else throw tg::Error("gpt2: unknown model size '" + name + "'; use gpt2, gpt2-medium, gpt2-large or gpt2-xl, or a checkpoint's config.json");
  return c;
}

int64_t Config::n_params() const {
  int64_t e = n_embd, per_layer = 4 * e + (3 * e * e + 3 * e) + (e * e + e) + (4 * e * e + 4 * e) + (4 * e * e + e);
  return vocab_size * e + n_positions * e + n_layer * per_layer + 2 * e;
}

Conv1D::Conv1D(int64_t in, int64_t out)
    : weight(Tensor::normal({in, out}, 0, 0.02)), bias(Tensor::zeros({out})) {}

namespace {
// rows of the (in, out) weight per split-K chunk: each thread's chunks read their rows front to back.
// Only weights of kSplitMinRows rows or more (GPT-2 124M's 768 and 3072): smaller ones sit in cache,
// and stay one reduce (the decode step's layernorm joins, ROW_BCAST, need it). GPT2_SPLIT_K=0 keeps the
// transposed (out, in) rows on the CPU too (for comparison).
constexpr int64_t kSplitRows = 32, kSplitMinRows = 512;
bool split_k(const Tensor& w) {
  return w.device() == "CPU" && w.shape()[0] % kSplitRows == 0 && w.shape()[0] >= kSplitMinRows && tg::getenv("GPT2_SPLIT_K", 1);
}
}  // namespace

Tensor Conv1D::operator()(const Tensor& x) const {
  if (!split_k(weight)) return x.matmul(weight) + bias;
  // y = x @ W over HF's (in, out) layout as it lies in the file: the reduce is cut into chunks of kSplitRows
  // rows, whose partial sums (..., in / kSplitRows, out) a second kernel adds. Each chunk streams its rows
  // (kSplitRows streams of whole rows), where one reduce over `in` read a column panel row after row,
  // 12 KB apart (3x slower on the CPU). A decode step's GEMV then runs as fast as over (out, in) rows,
  // and the prompt's 20-row products 3-6x faster.
  const int64_t in = weight.shape()[0], out = weight.shape()[1], chunks = in / kSplitRows;
  std::vector<int64_t> xs(x.shape().begin(), x.shape().end() - 1);
  xs.insert(xs.end(), {chunks, kSplitRows, 1});
  Tensor part = (x.reshape(xs) * weight.reshape({chunks, kSplitRows, out})).sum(-2).contiguous();
  return part.sum(-2) + bias;
}
void Conv1D::collect(const std::string& p, tg::nn::NamedTensors& out) {
  out.push_back({p + "weight", &weight});
  out.push_back({p + "bias", &bias});
}

Attention::Attention(int64_t dim, int64_t n_head_) : c_attn(dim, 3 * dim), c_proj(dim, dim), n_head(n_head_), head_dim(dim / n_head_) {
  if (dim % n_head_ != 0) throw tg::Error("gpt2: n_embd " + std::to_string(dim) + " is not a multiple of n_head " + std::to_string(n_head_));
}
void Attention::collect(const std::string& p, tg::nn::NamedTensors& out) {
  c_attn.collect(p + "c_attn.", out);
  c_proj.collect(p + "c_proj.", out);
}

namespace {
using SRange = std::pair<tg::sint, tg::sint>;
std::string str(const tg::sint& s) { return s.is_const() ? std::to_string(s.const_value()) : s.render(); }
}  // namespace

Tensor Attention::operator()(const Tensor& x, const tg::sint& start_pos, int64_t max_context) {
  int64_t B = x.shape()[0], T = x.shape()[1], dim = n_head * head_dim;
  bool symbolic = !start_pos.is_const();
  int64_t s = symbolic ? -1 : start_pos.const_value();
  if (symbolic && T != 1)
    throw tg::Error("gpt2: a symbolic start_pos (" + start_pos.render() + ") takes one token per row, got " + std::to_string(T) +
                    "; run the prompt with a concrete start_pos");
  // q, k, v of the new tokens, and the keys and values they attend to: (B, len, 3*dim) -> (B, H, len, Dh) each
  Tensor xqkv = c_attn(x);
  auto heads = [&](const Tensor& t, int64_t i, const tg::sint& from, const tg::sint& to) {
    return t.shrink(std::vector<SRange>{{0, B}, {from, to}, {i * dim, (i + 1) * dim}})
        .reshape(std::vector<tg::sint>{B, to - from, n_head, head_dim})
        .transpose(1, 2);
  };
  Tensor q = heads(xqkv, 0, 0, T), keys = heads(xqkv, 1, 0, T), vals = heads(xqkv, 2, 0, T);
  if (max_context > 0) {
    if (start_pos.vmin() < 0 || start_pos.vmax() + T > max_context)
      throw tg::Error("gpt2: tokens at " + str(start_pos) + ".." + str(start_pos + T) + " don't fit the context of " +
                      std::to_string(max_context) + "; raise max_context (n_positions is the limit)");
    if (!cache_qkv || cache_qkv->shape()[0] != B || cache_qkv->shape()[1] != max_context || cache_qkv->dtype() != xqkv.dtype())
      cache_qkv = Tensor::zeros({B, max_context, 3 * dim}, Opts{xqkv.dtype(), x.device(), false}).contiguous().realize();
    // this call's rows of the cache, written in place by c_attn's kernel (tinygrad: cache.shrink(...).assign(...))
    cache_qkv->shrink(std::vector<SRange>{{0, B}, {start_pos, start_pos + T}, {0, 3 * dim}}).assign(xqkv).realize();
    q = heads(*cache_qkv, 0, start_pos, start_pos + T);
    keys = heads(*cache_qkv, 1, 0, start_pos + T);
    vals = heads(*cache_qkv, 2, 0, start_pos + T);
  } else if (s != 0) {
    throw tg::Error("gpt2: start_pos " + str(start_pos) + " needs the KV cache (max_context > 0)");
  }
  // causal mask over the T new queries; a single query sees every key, so decode steps need none
  std::optional<Tensor> mask;
  if (T > 1) mask = Tensor::ones({T, s + T}, Opts{tg::dtypes::bool_, x.device(), false}).tril(int(s));
  Tensor a = q.scaled_dot_product_attention(keys, vals, mask);
  return c_proj(a.transpose(1, 2).reshape({B, T, dim}));
}

Tensor Block::operator()(const Tensor& x, const tg::sint& start_pos, int64_t max_context) {
  Tensor hcur = x + attn(ln_1(x), start_pos, max_context);
  return hcur + mlp(ln_2(hcur));
}
void MLP::collect(const std::string& p, tg::nn::NamedTensors& out) {
  c_fc.collect(p + "c_fc.", out);
  c_proj.collect(p + "c_proj.", out);
}
void Block::collect(const std::string& p, tg::nn::NamedTensors& out) {
  ln_1.collect(p + "ln_1.", out);
  attn.collect(p + "attn.", out);
  ln_2.collect(p + "ln_2.", out);
  mlp.collect(p + "mlp.", out);
}

Transformer::Transformer(const Config& c)
    : cfg(c), wte(c.vocab_size, c.n_embd), wpe(c.n_positions, c.n_embd), ln_f(c.n_embd, c.layer_norm_epsilon) {
  if (c.n_layer < 1 || c.n_embd < 1 || c.n_head < 1 || c.n_positions < 1 || c.vocab_size < 1)
    throw tg::Error("gpt2: bad config (n_layer, n_embd, n_head, n_positions and vocab_size must be positive)");
  wte.weight = Tensor::normal({c.vocab_size, c.n_embd}, 0, 0.02);
  wpe.weight = Tensor::normal({c.n_positions, c.n_embd}, 0, 0.02);
  h.reserve(size_t(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; i++) h.emplace_back(c.n_embd, c.n_head, c.layer_norm_epsilon);
}

void Transformer::collect(const std::string& p, tg::nn::NamedTensors& out) {
  wte.collect(p + "wte.", out);
  wpe.collect(p + "wpe.", out);
  for (size_t i = 0; i < h.size(); i++) h[i].collect(p + "h." + std::to_string(i) + ".", out);
  ln_f.collect(p + "ln_f.", out);
}

void Transformer::reset_cache() {
  for (auto& b : h) b.attn.cache_qkv.reset();
}

Tensor Transformer::place(const std::string& key, const Tensor& t) {
  auto ends = [&](const std::string& s) { return key.size() >= s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0; };
  const bool conv1d = ends(".c_attn.weight") || ends(".c_proj.weight") || ends(".c_fc.weight");
  if (conv1d && !split_k(t)) return t.T().contiguous().T();
  return t.contiguous();
}

void Transformer::to(const std::string& device, tg::DType dtype) {
  std::vector<Tensor> all;
  for (auto& [k, t] : named_tensors()) {
    Tensor m = t->to(device);
    if (m.dtype() != dtype) m = m.cast(dtype);
    *t = place(k, m);
    all.push_back(*t);
  }
  Tensor first = all[0];
  first.realize(std::vector<Tensor>(all.begin() + 1, all.end()));
  reset_cache();
}

void randomize(Transformer& model, uint64_t seed, const std::string& device) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 1;
  auto next = [&] {   // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  auto uniform = [&] { return (double(next() >> 11) + 0.5) * 0x1.0p-53; };   // (0, 1)
  std::vector<Tensor> all;
  for (auto& [k, t] : model.named_tensors()) {
    std::vector<float> v(size_t(t->numel()), 0.f);
    bool bias = k.size() >= 4 && k.compare(k.size() - 4, 4, "bias") == 0;
    if (k.find("ln_") != std::string::npos && !bias) std::fill(v.begin(), v.end(), 1.f);
    else if (!bias)
      for (size_t i = 0; i < v.size(); i += 2) {
        double r = std::sqrt(-2 * std::log(uniform())) * 0.02, a = 2 * M_PI * uniform();
        v[i] = float(r * std::cos(a));
        if (i + 1 < v.size()) v[i + 1] = float(r * std::sin(a));
      }
    *t = Transformer::place(k, Tensor::from(v, t->shape(), Opts{tg::dtypes::float32, device, false}));
    all.push_back(*t);
  }
  Tensor first = all[0];
  first.realize(std::vector<Tensor>(all.begin() + 1, all.end()));
  model.reset_cache();
}

Tensor Transformer::operator()(const Tensor& tokens, const tg::sint& start_pos, int64_t max_context, bool last_only) {
  if (tokens.ndim() != 2) throw tg::Error("gpt2: tokens must be (batch, seq), got " + tg::to_str(tokens.shape()));
  return forward(wte(tokens), start_pos, max_context, last_only);
}

Tensor Transformer::operator()(const std::vector<tg::Variable>& tokens, const tg::sint& start_pos, int64_t max_context) {
  if (tokens.empty()) throw tg::Error("gpt2: decode needs one token Variable per batch row, got none");
  std::vector<Tensor> rows;
  for (const tg::Variable& t : tokens) {
    if (!t.val() || t.min() < 0 || t.max() >= cfg.vocab_size)
      throw tg::Error("gpt2: token Variable '" + t.name() + "' must be bound, with a range inside 0.." + std::to_string(cfg.vocab_size - 1));
    rows.push_back(wte.weight.shrink(std::vector<SRange>{{t, t + 1}, {0, cfg.n_embd}}));
  }
  Tensor emb = rows.size() == 1 ? rows[0] : Tensor::cat(rows, 0);
  return forward(emb.reshape({int64_t(rows.size()), 1, cfg.n_embd}), start_pos, max_context);
}

Tensor Transformer::forward(const Tensor& tok_emb, const tg::sint& start_pos, int64_t max_context, bool last_only) {
  int64_t T = tok_emb.shape()[1];
  if (start_pos.vmin() < 0 || start_pos.vmax() + T > cfg.n_positions)
    throw tg::Error("gpt2: positions " + str(start_pos) + ".." + str(start_pos + T) + " (up to " + std::to_string(start_pos.vmax() + T) +
                    ") exceed n_positions " + std::to_string(cfg.n_positions));
  Tensor pos_emb = wpe.weight.shrink(std::vector<SRange>{{start_pos, start_pos + T}, {0, cfg.n_embd}}).reshape({1, T, cfg.n_embd});
  Tensor x = tok_emb + pos_emb;
  for (auto& b : h) x = b(x, start_pos, max_context);
  if (last_only && T > 1) x = x.shrink({{0, x.shape()[0]}, {T - 1, T}, {0, cfg.n_embd}});
  // lm_head is tied to wte
  return ln_f(x).matmul(wte.weight.T()).float_();
}

}  // namespace gpt2
