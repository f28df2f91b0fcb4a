// Text generation with the KV cache (tinygrad 0.9.2 examples/gpt2.py): the prompt runs in one call
// with a concrete start_pos, then one token per call through a TinyJit whose single capture serves
// every position: start_pos and the tokens are bound Variables, passed as values on each replay.
#pragma once
#include <functional>
#include <optional>

#include "gpt2/model.hpp"

namespace gpt2 {

// Greedy decoding's argmax: the first maximum of each row of logits (B, V) -> (B,) int32. The rows are padded
// (with -inf) to chunks of 1024, so both levels of the reduction are rows a GPU reduces with a block of
// threads: GPT-2's V = 50257 = 29 * 1733 has no such split, and Tensor::argmax's split reduce ran one
// thread per 1733 logits. positions: reversed_positions(V, device), made once (a realized buffer, so the
// kernels read it instead of computing an arange).
Tensor argmax_rows(const Tensor& logits, const Tensor& positions);
Tensor reversed_positions(int64_t vocab, const std::string& device);
// logits (B, V) -> next tokens (B,) int32: argmax_rows when temperature == 0, else a sample of softmax(logits / t).
Tensor sample(const Tensor& logits, double temperature, const std::optional<Tensor>& positions = {});

class Generator {
 public:
  // max_context: cache length (prompt + generated tokens must fit; <= n_positions). use_jit=false runs
  // every decode step eagerly (same kernels, scheduled each time).
  Generator(Transformer& model, int64_t max_context, double temperature, bool use_jit = true);
  // Runs the prompt (B rows of the same length) and returns the first generated token of each row.
  std::vector<int> prompt(const std::vector<std::vector<int>>& rows);
  // Feeds one token per row at the next position; returns the next token of each row.
  std::vector<int> step(const std::vector<int>& tokens);
  int64_t pos() const { return pos_; }
  size_t jit_kernels() const { return jit_.captured_kernels(); }
  int jit_calls() const { return jit_.cnt(); }

 private:
  Transformer& model_;
  int64_t max_context_;
  double temperature_;
  bool use_jit_;
  int64_t pos_ = 0;
  std::string device_;
  tg::Variable start_pos_;
  std::vector<tg::Variable> token_vars_;   // one per batch row
  Tensor positions_;                       // reversed_positions for greedy picks
  tg::TinyJit jit_;
  Tensor decode(const std::vector<tg::Variable>& vars);   // vars: start_pos, then the row tokens
};

// Greedy or sampled generation with no cache: every step reruns the whole sequence (tests compare it
// with the cached path).
std::vector<std::vector<int>> generate_uncached(Transformer& model, std::vector<std::vector<int>> rows, int64_t count, double temperature);

}  // namespace gpt2
