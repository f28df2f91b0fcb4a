// Writes the GPT-2 test fixture in tests/data/gpt2_tiny/: a 2-layer, 64-dim GPT-2 (4 heads, 32 positions,
// vocab 128) in the Hugging Face layout as both pytorch_model.bin (torch::pickle_save, GPT2LMHeadModel keys:
// "transformer." prefix, attn.bias / attn.masked_bias buffers, lm_head.weight) and model.safetensors
// (GPT2Model keys, attn.bias buffers), its config.json, and reference.safetensors: token ids (2, 10) and the
// logits (2, 10, 128) that an independent GPT-2 forward pass in libtorch (float64, no cache) computes.
// Not part of the build; compile by hand when the fixture must change:
//   g++ -std=c++17 -O1 tests/data/gpt2_tiny/make_gpt2_fixture.cpp -I/usr/include/torch/csrc/api/include \
//       -ltorch -ltorch_cpu -lc10 -o /tmp/make_gpt2_fixture && /tmp/make_gpt2_fixture tests/data/gpt2_tiny
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int64_t kLayers = 2, kEmbd = 64, kHeads = 4, kPositions = 32, kVocab = 128;
constexpr double kEps = 1e-5;

// safetensors: u64 header length, JSON header (padded with spaces to 8 bytes), raw little-endian data
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& ts) {
  std::string header = "{";
  int64_t off = 0;
  for (auto& [k, t] : ts) {
    std::string dt = t.scalar_type() == at::kFloat ? "F32" : t.scalar_type() == at::kInt ? "I32" : "U8";
    std::string shape;
    for (int64_t d : t.sizes()) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    int64_t n = t.numel() * int64_t(t.element_size());
    header += (header.size() > 1 ? "," : "") + std::string("\"") + k + "\":{\"dtype\":\"" + dt + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + n) + "]}";
    off += n;
  }
  header += "}";
  while ((header.size() + 8) % 8) header += ' ';
  std::ofstream f(path, std::ios::binary);
  uint64_t len = header.size();
  f.write(reinterpret_cast<const char*>(&len), 8);
  f.write(header.data(), std::streamsize(header.size()));
  for (auto& [k, t] : ts) {
    at::Tensor c = t.contiguous();
    f.write(static_cast<const char*>(c.data_ptr()), std::streamsize(c.numel() * int64_t(c.element_size())));
  }
}

at::Tensor ln(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return torch::layer_norm(x, {kEmbd}, w.to(at::kDouble), b.to(at::kDouble), kEps);
}

// GPT-2 forward (Hugging Face GPT2LMHeadModel) in float64: tokens (B, T) -> logits (B, T, vocab)
at::Tensor reference_logits(std::map<std::string, at::Tensor>& w, const at::Tensor& tokens) {
  auto W = [&](const std::string& k) { return w.at(k).to(at::kDouble); };
  int64_t B = tokens.size(0), T = tokens.size(1), D = kEmbd / kHeads;
  at::Tensor x = W("wte.weight").index_select(0, tokens.flatten()).view({B, T, kEmbd}) + W("wpe.weight").slice(0, 0, T);
  at::Tensor causal = torch::ones({T, T}, torch::kBool).tril();
  for (int64_t l = 0; l < kLayers; l++) {
    std::string p = "h." + std::to_string(l) + ".";
    at::Tensor a = ln(x, w.at(p + "ln_1.weight"), w.at(p + "ln_1.bias"));
    at::Tensor qkv = torch::matmul(a, W(p + "attn.c_attn.weight")) + W(p + "attn.c_attn.bias");
    auto parts = qkv.split(kEmbd, -1);
    auto heads = [&](const at::Tensor& t) { return t.reshape({B, T, kHeads, D}).transpose(1, 2); };
    at::Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
    at::Tensor att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(D));
    att = att.masked_fill(causal.logical_not(), -INFINITY).softmax(-1);
    at::Tensor y = torch::matmul(att, v).transpose(1, 2).reshape({B, T, kEmbd});
    x = x + torch::matmul(y, W(p + "attn.c_proj.weight")) + W(p + "attn.c_proj.bias");
    at::Tensor m = ln(x, w.at(p + "ln_2.weight"), w.at(p + "ln_2.bias"));
    m = torch::gelu(torch::matmul(m, W(p + "mlp.c_fc.weight")) + W(p + "mlp.c_fc.bias"), "tanh");
    x = x + torch::matmul(m, W(p + "mlp.c_proj.weight")) + W(p + "mlp.c_proj.bias");
  }
  x = ln(x, w.at("ln_f.weight"), w.at("ln_f.bias"));
  return torch::matmul(x, W("wte.weight").t());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) { std::cerr << "usage: make_gpt2_fixture OUT_DIR\n"; return 1; }
  std::string dir = argv[1];
  torch::manual_seed(1234);
  // GPT2Model parameters in HF order; Conv1D weights are (in, out). Scales are larger than HF's 0.02 so
  // attention and the MLP change the logits visibly.
  std::vector<std::pair<std::string, at::Tensor>> params;
  auto add = [&](const std::string& k, at::Tensor t) { params.push_back({k, t.to(at::kFloat).contiguous()}); };
  add("wte.weight", torch::randn({kVocab, kEmbd}) * 0.3);
  add("wpe.weight", torch::randn({kPositions, kEmbd}) * 0.1);
  for (int64_t l = 0; l < kLayers; l++) {
    std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", 1 + 0.1 * torch::randn({kEmbd}));
    add(p + "ln_1.bias", 0.05 * torch::randn({kEmbd}));
    add(p + "attn.c_attn.weight", torch::randn({kEmbd, 3 * kEmbd}) * 0.2);
    add(p + "attn.c_attn.bias", torch::randn({3 * kEmbd}) * 0.05);
    add(p + "attn.c_proj.weight", torch::randn({kEmbd, kEmbd}) * 0.1);
    add(p + "attn.c_proj.bias", torch::randn({kEmbd}) * 0.05);
    add(p + "ln_2.weight", 1 + 0.1 * torch::randn({kEmbd}));
    add(p + "ln_2.bias", 0.05 * torch::randn({kEmbd}));
    add(p + "mlp.c_fc.weight", torch::randn({kEmbd, 4 * kEmbd}) * 0.15);
    add(p + "mlp.c_fc.bias", torch::randn({4 * kEmbd}) * 0.05);
    add(p + "mlp.c_proj.weight", torch::randn({4 * kEmbd, kEmbd}) * 0.08);
    add(p + "mlp.c_proj.bias", torch::randn({kEmbd}) * 0.05);
  }
  add("ln_f.weight", 1 + 0.1 * torch::randn({kEmbd}));
  add("ln_f.bias", 0.05 * torch::randn({kEmbd}));
  std::map<std::string, at::Tensor> w(params.begin(), params.end());
  at::Tensor mask = torch::ones({kPositions, kPositions}).tril().view({1, 1, kPositions, kPositions});

  // pytorch_model.bin as GPT2LMHeadModel.state_dict() (older transformers: mask buffers included)
  c10::Dict<std::string, at::Tensor> bin;
  for (auto& [k, t] : params) {
    bin.insert("transformer." + k, t);
    if (k.find(".ln_1.bias") != std::string::npos) {
      std::string p = "transformer." + k.substr(0, k.find("ln_1.bias"));
      bin.insert(p + "attn.bias", mask);
      bin.insert(p + "attn.masked_bias", torch::tensor(-1e4f));
    }
  }
  bin.insert("lm_head.weight", w.at("wte.weight"));
  auto bytes = torch::pickle_save(c10::IValue(bin));
  std::ofstream(dir + "/pytorch_model.bin", std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));

  // model.safetensors as GPT2Model (the Hub's layout: no prefix, attn.bias buffers)
  std::vector<std::pair<std::string, at::Tensor>> st = params;
  for (int64_t l = 0; l < kLayers; l++) st.push_back({"h." + std::to_string(l) + ".attn.bias", mask});
  write_safetensors(dir + "/model.safetensors", st);

  std::ofstream(dir + "/config.json") << "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n  \"activation_function\": \"gelu_new\",\n"
                                      << "  \"n_layer\": " << kLayers << ",\n  \"n_embd\": " << kEmbd << ",\n  \"n_head\": " << kHeads
                                      << ",\n  \"n_positions\": " << kPositions << ",\n  \"n_ctx\": " << kPositions << ",\n  \"vocab_size\": " << kVocab
                                      << ",\n  \"layer_norm_epsilon\": 1e-05\n}\n";

  // two rows of 10 tokens: a 6-token prompt, then 4 tokens fed one at a time through the cache
  at::Tensor tokens = torch::tensor({5, 17, 99, 3, 64, 120, 7, 42, 77, 1, 88, 2, 31, 31, 0, 127, 64, 9, 100, 56}, torch::kInt).view({2, 10});
  at::Tensor logits = reference_logits(w, tokens.to(at::kLong)).to(at::kFloat);
  write_safetensors(dir + "/reference.safetensors", {{"tokens", tokens}, {"logits", logits}});
  std::cout << "wrote " << dir << ": logits range [" << logits.min().item<float>() << ", " << logits.max().item<float>() << "]\n";
  return 0;
}
