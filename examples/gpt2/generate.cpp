#include "gpt2/generate.hpp"

#include <algorithm>
#include <cmath>

namespace gpt2 {

using tg::Opts;

constexpr int64_t kChunk = 1024;

Tensor reversed_positions(int64_t vocab, const std::string& device) {
  int64_t n = (vocab + kChunk - 1) / kChunk * kChunk;
  return Tensor::arange(double(n - 1), -1.0, -1.0, Opts{tg::dtypes::int32, device, false}).reshape({n / kChunk, kChunk}).contiguous().realize();
}

Tensor argmax_rows(const Tensor& logits, const Tensor& positions) {
  int64_t B = logits.shape()[0], V = logits.shape()[1], C = positions.shape()[0];
  if (C * kChunk < V || (C - 1) * kChunk >= V) throw tg::Error("gpt2: argmax_rows: positions " + tg::to_str(positions.shape()) + " don't fit " + std::to_string(V) + " logits");
  Tensor x = logits.pad({{0, 0}, {0, C * kChunk - V}}, -INFINITY).reshape({B, C, kChunk});
  Tensor m = x.max(2).max(1).reshape({B, 1, 1});
  Tensor last = (x == m).where(positions.reshape({1, C, kChunk}), 0).max(2).max(1);   // the largest reversed position
  return (C * kChunk - 1 - last).cast(tg::dtypes::int32);
}

Tensor sample(const Tensor& logits, double temperature, const std::optional<Tensor>& positions) {
  if (temperature <= 0) return argmax_rows(logits, positions ? *positions : reversed_positions(logits.shape()[1], logits.device()));
  return (logits / temperature).softmax(-1).multinomial(1).reshape({logits.shape()[0]}).cast(tg::dtypes::int32);
}

namespace {
Tensor last_logits(const Tensor& logits) {   // (B, T, V) -> (B, V)
  int64_t B = logits.shape()[0], T = logits.shape()[1], V = logits.shape()[2];
  return logits.shrink({{0, B}, {T - 1, T}, {0, V}}).reshape({B, V});
}
// an id outside the vocabulary would embed as zeros (one-hot lookup), so it is refused here
Tensor token_tensor(const std::vector<std::vector<int>>& rows, const std::string& device, int64_t vocab) {
  std::vector<int32_t> flat;
  for (auto& r : rows) {
    if (r.size() != rows[0].size()) throw tg::Error("gpt2: every batch row must have the same number of tokens");
    for (int t : r)
      if (t < 0 || t >= vocab)
        throw tg::Error("gpt2: token id " + std::to_string(t) + " is outside the model's vocabulary (0.." + std::to_string(vocab - 1) + ")");
    flat.insert(flat.end(), r.begin(), r.end());
  }
  return Tensor::from(flat, {int64_t(rows.size()), int64_t(rows[0].size())}, Opts{tg::dtypes::int32, device, false});
}
}  // namespace

Generator::Generator(Transformer& model, int64_t max_context, double temperature, bool use_jit)
    : model_(model), max_context_(max_context), temperature_(temperature), use_jit_(use_jit), device_(model.wte.weight.device()),
      start_pos_("start_pos", 1, std::max<int64_t>(1, max_context - 1)),
      positions_(reversed_positions(model.cfg.vocab_size, device_)),
      jit_([this](const std::vector<Tensor>&, const std::vector<tg::Variable>& vars) { return std::vector<Tensor>{decode(vars)}; }) {
  if (max_context < 1 || max_context > model.cfg.n_positions)
    throw tg::Error("gpt2: max_context " + std::to_string(max_context) + " must be in 1.." + std::to_string(model.cfg.n_positions));
}

Tensor Generator::decode(const std::vector<tg::Variable>& vars) {
  std::vector<tg::Variable> toks(vars.begin() + 1, vars.end());
  return sample(last_logits(model_(toks, vars[0], max_context_)), temperature_, positions_);
}

std::vector<int> Generator::prompt(const std::vector<std::vector<int>>& rows) {
  if (rows.empty() || rows[0].empty()) throw tg::Error("gpt2: the prompt needs at least one token");
  model_.reset_cache();
  jit_.reset();
  pos_ = 0;
  Tensor logits = model_(token_tensor(rows, device_, model_.cfg.vocab_size), 0, max_context_, true);
  pos_ = int64_t(rows[0].size());
  token_vars_.clear();
  for (size_t b = 0; b < rows.size(); b++) token_vars_.emplace_back("tok" + std::to_string(b), 0, model_.cfg.vocab_size - 1);
  return sample(last_logits(logits), temperature_, positions_).tolist<int32_t>();
}

std::vector<int> Generator::step(const std::vector<int>& tokens) {
  if (pos_ >= max_context_)
    throw tg::Error("gpt2: the context of " + std::to_string(max_context_) + " tokens is full; raise max_context");
  if (tokens.size() != token_vars_.size())
    throw tg::Error("gpt2: step got " + std::to_string(tokens.size()) + " tokens for " + std::to_string(token_vars_.size()) +
                    " batch rows (call prompt() first)");
  std::vector<tg::Variable> vars = {start_pos_.bind(pos_)};
  for (size_t b = 0; b < tokens.size(); b++) {
    if (tokens[b] < 0 || tokens[b] >= model_.cfg.vocab_size)
      throw tg::Error("gpt2: token id " + std::to_string(tokens[b]) + " is outside the model's vocabulary (0.." +
                      std::to_string(model_.cfg.vocab_size - 1) + ")");
    vars.push_back(token_vars_[b].bind(tokens[b]));
  }
  Tensor next = use_jit_ ? jit_({}, vars)[0] : decode(vars);
  pos_++;
  return next.tolist<int32_t>();
}

std::vector<std::vector<int>> generate_uncached(Transformer& model, std::vector<std::vector<int>> rows, int64_t count, double temperature) {
  std::string dev = model.wte.weight.device();
  for (int64_t i = 0; i < count; i++) {
    Tensor logits = model(token_tensor(rows, dev, model.cfg.vocab_size));
    std::vector<int> next = sample(last_logits(logits), temperature).tolist<int32_t>();
    for (size_t b = 0; b < rows.size(); b++) rows[b].push_back(next[b]);
  }
  return rows;
}

}  // namespace gpt2
