// GPT-2 (tinygrad 0.9.2 examples/gpt2.py) on tg's public API, with Hugging Face checkpoint loading.
// Parameter names are Hugging Face's GPT2Model keys ("wte.weight", "h.0.attn.c_attn.weight", ...);
// Conv1D weights keep HF's (in, out) layout, so y = x @ W + b reads the file's bytes as they are.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <tg/tg.hpp>

namespace gpt2 {

using tg::Tensor;

struct Config {
  int64_t n_layer = 12, n_embd = 768, n_head = 12, n_positions = 1024, vocab_size = 50257;
  double layer_norm_epsilon = 1e-5;
  static Config named(const std::string& name);        // gpt2, gpt2-medium, gpt2-large, gpt2-xl
  static Config from_json(const std::string& path);    // a Hugging Face config.json
  int64_t n_params() const;                            // with lm_head tied to wte
};

// HF's Conv1D: weight (in, out), y = x @ weight + bias. On the CPU the weight stays (in, out), as the
// checkpoint stores it (a zero-copy load: no transpose writes 340 MB of fresh pages), and the product is a
// split-K reduce that reads whole rows (see operator()). Elsewhere it is a transposed view of an (out, in)
// contiguous buffer (see place()): a matrix-vector product then reads each output's weights as one row.
struct Conv1D : tg::nn::Module {
  Tensor weight, bias;
  Conv1D(int64_t in, int64_t out);
  Tensor operator()(const Tensor& x) const;
  void collect(const std::string& p, tg::nn::NamedTensors& out) override;
};

struct Attention : tg::nn::Module {
  Conv1D c_attn, c_proj;
  int64_t n_head, head_dim;
  // (B, max_context, 3 * dim): row t holds q, k, v of position t. c_attn's kernel stores straight into
  // it (an assign fused with the matmul), so the cache update costs no kernel of its own; q rides along.
  std::optional<Tensor> cache_qkv;
  Attention(int64_t dim, int64_t n_head);
  // x: (B, T, dim) at positions start_pos..start_pos+T-1. max_context == 0: no cache (causal attention
  // over x alone). Otherwise k, v go to cache rows start_pos.. and the queries attend to rows
  // 0..start_pos+T-1. start_pos may be a bound Variable (then T must be 1: one decode token, no mask),
  // so that one TinyJit capture serves every position.
  Tensor operator()(const Tensor& x, const tg::sint& start_pos, int64_t max_context);
  void collect(const std::string& p, tg::nn::NamedTensors& out) override;
};

struct MLP : tg::nn::Module {
  Conv1D c_fc, c_proj;
  explicit MLP(int64_t dim) : c_fc(dim, 4 * dim), c_proj(4 * dim, dim) {}
  Tensor operator()(const Tensor& x) const { return c_proj(c_fc(x).gelu()); }
  void collect(const std::string& p, tg::nn::NamedTensors& out) override;
};

struct Block : tg::nn::Module {
  tg::nn::LayerNorm ln_1, ln_2;
  Attention attn;
  MLP mlp;
  Block(int64_t dim, int64_t n_head, double eps) : ln_1(dim, eps), ln_2(dim, eps), attn(dim, n_head), mlp(dim) {}
  Tensor operator()(const Tensor& x, const tg::sint& start_pos, int64_t max_context);
  void collect(const std::string& p, tg::nn::NamedTensors& out) override;
};

class Transformer : public tg::nn::Module {
 public:
  Config cfg;
  tg::nn::Embedding wte, wpe;
  std::vector<Block> h;
  tg::nn::LayerNorm ln_f;

  // Parameters start as HF's initialization (normal(0, 0.02) weights, zero biases, unit norms) on the
  // default device, seeded by Tensor::manual_seed; a checkpoint loader overwrites them.
  explicit Transformer(const Config& cfg);
  // tokens: (B, T) int32 at positions start_pos..start_pos+T-1. Returns logits (B, T, vocab_size) in float32,
  // or with last_only those of the last position alone (B, 1, vocab_size): a prompt's next token needs no
  // more, and lm_head over every position was the prompt's largest matmul (T x the vocabulary).
  // max_context > 0 uses the KV cache of that length (allocated on the first call, kept until
  // reset_cache). A symbolic start_pos (a bound Variable) takes one token per row (T == 1).
  Tensor operator()(const Tensor& tokens, const tg::sint& start_pos = 0, int64_t max_context = 0, bool last_only = false);
  // One decode token per row, each a bound Variable in [0, vocab_size): the embedding reads one row of
  // wte per token (tinygrad's gpt2 does this for batch 1) instead of a one-hot product over all of wte.
  // Returns logits (B, 1, vocab_size).
  Tensor operator()(const std::vector<tg::Variable>& tokens, const tg::sint& start_pos, int64_t max_context);
  void reset_cache();
  // The form a parameter is kept in: contiguous, except Conv1D weights off the CPU, (in, out) views of (out, in) buffers.
  static Tensor place(const std::string& key, const Tensor& t);
  // Moves every parameter to `device` and casts floats to `dtype` (fp16 inference).
  void to(const std::string& device, tg::DType dtype);
  void collect(const std::string& p, tg::nn::NamedTensors& out) override;
 private:
  Tensor forward(const Tensor& tok_emb, const tg::sint& start_pos, int64_t max_context, bool last_only = false);
};

// Seeded random weights for runs without a checkpoint: HF's initialization (normal(0, 0.02) matrices and
// embeddings, zero biases, unit LayerNorm weights) drawn on the host (splitmix64 + Box-Muller, ~1 s for
// 124M numbers) and copied to `device`. Tensor::normal on the device would do, but its threefry kernels
// take ~50 s for GPT-2 124M on a 2-core CPU.
void randomize(Transformer& model, uint64_t seed, const std::string& device);

// ---- checkpoints (load.cpp) ----
// A Hugging Face checkpoint: a directory with config.json and model.safetensors or pytorch_model.bin,
// or one of those files (config.json beside it is used when present, else `fallback`).
// Accepts GPT2Model keys with or without the "transformer." prefix; ignores attn.bias/attn.masked_bias
// buffers and lm_head.weight (tied to wte). Missing, unexpected or mis-shaped tensors throw tg::Error
// naming the key and the file. Tensors are read through DISK (mmap) straight to `device`.
struct Loaded {
  Config cfg;
  std::string file;   // the weights file that was read
};
Loaded load_checkpoint_config(const std::string& path, const Config& fallback);
void load_checkpoint(Transformer& model, const std::string& weights_file, const std::string& device);

}  // namespace gpt2
