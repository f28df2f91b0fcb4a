// GPT-2 124M decode speed (JSON lines): tokens/s at batch 1 after a 20-token prompt, random weights
// (the same numbers in both implementations), next to libtorch (Debian's 1.13: generic BLAS, addmm as HF's Conv1D) running the same model with a KV cache in
// the same process (when built with it), and the memory bound: weight bytes per token over the elementwise
// bandwidth (c = a*b+1, fp32, 3 streams, as limits.c) measured in the same run. Also time to first token.
//   DEVICE=CPU|CUDA TOKENS=32 HALF=0|1 THREADS=n TORCH_THREADS=n bench_gpt2
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include <tg/tg.hpp>

#include "gpt2/generate.hpp"
#include "gpt2/model.hpp"
#ifdef TG_HAVE_TORCH
#include <torch/torch.h>
#endif

using clk = std::chrono::steady_clock;

namespace {

double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }

// c = a*b + 1 over three 128 MiB fp32 arrays on every thread; best of 10 (a shared machine preempts), in GB/s
double elementwise_gbps(int threads) {
  const size_t n = size_t(1) << 25;
  std::vector<float> a(n, 1.f), b(n, 2.f), c(n, 0.f);
  double best = 1e9;
  for (int r = 0; r < 10; r++) {
    auto t = clk::now();
    std::vector<std::thread> ts;
    for (int k = 0; k < threads; k++)
      ts.emplace_back([&, k] {
        size_t lo = n * size_t(k) / size_t(threads), hi = n * size_t(k + 1) / size_t(threads);
        for (size_t i = lo; i < hi; i++) c[i] = a[i] * b[i] + 1.f;
      });
    for (auto& th : ts) th.join();
    best = std::min(best, secs(t));
  }
  return 3.0 * 4 * double(n) / best / 1e9;
}

// The tg model's weights read back to the host, (in, out) as HF stores them, for libtorch
struct HostWeights {
  std::vector<std::pair<std::string, std::vector<float>>> w;
  std::vector<tg::Shape> shapes;
};
HostWeights read_weights(gpt2::Transformer& m) {
  HostWeights h;
  for (auto& [k, t] : m.named_tensors()) {
    h.w.push_back({k, t->to("CPU").float_().tolist<float>()});
    h.shapes.push_back(t->shape());
  }
  return h;
}

struct Result { double tok_s, first_token_s; size_t kernels; };

Result bench_tg(gpt2::Transformer& m, const std::vector<int>& prompt, int tokens) {
  auto t0 = clk::now();
  gpt2::Generator g(m, int64_t(prompt.size()) + tokens + 4, 0);
  std::vector<int> next = g.prompt({prompt});
  double first = secs(t0);
  for (int i = 0; i < 3; i++) next = g.step(next);   // run, capture, first replay
  auto t = clk::now();
  for (int i = 0; i < tokens; i++) next = g.step(next);
  return {tokens / secs(t), first, g.jit_kernels()};
}

#ifdef TG_HAVE_TORCH
// The same GPT-2 in libtorch eager: Conv1D weights (in, out) through addmm, a preallocated KV cache.
struct TorchGPT2 {
  gpt2::Config c;
  std::map<std::string, torch::Tensor> w;
  std::vector<torch::Tensor> kc, vc;
  int64_t pos = 0;
  TorchGPT2(const gpt2::Config& cfg, const HostWeights& h, int64_t ctx, torch::Dtype dt) : c(cfg) {
    for (size_t i = 0; i < h.w.size(); i++)
      w[h.w[i].first] = torch::from_blob(const_cast<float*>(h.w[i].second.data()), h.shapes[i], torch::kFloat32).to(dt).clone();
    for (int64_t l = 0; l < c.n_layer; l++) {
      kc.push_back(torch::zeros({1, c.n_head, ctx, c.n_embd / c.n_head}, dt));
      vc.push_back(torch::zeros({1, c.n_head, ctx, c.n_embd / c.n_head}, dt));
    }
  }
  torch::Tensor lin(const torch::Tensor& x, const std::string& p) { return torch::addmm(w[p + "bias"], x, w[p + "weight"]); }
  torch::Tensor ln(const torch::Tensor& x, const std::string& p) {
    return torch::layer_norm(x, {c.n_embd}, w[p + "weight"], w[p + "bias"], c.layer_norm_epsilon);
  }
  // tokens at positions pos.. ; returns the greedy next token
  int64_t forward(const std::vector<int64_t>& toks) {
    torch::NoGradGuard ng;
    int64_t T = int64_t(toks.size()), H = c.n_head, D = c.n_embd / H;
    torch::Tensor ids = torch::tensor(toks, torch::kLong);
    torch::Tensor x = w["wte.weight"].index_select(0, ids) + w["wpe.weight"].narrow(0, pos, T);
    for (int64_t l = 0; l < c.n_layer; l++) {
      std::string p = "h." + std::to_string(l) + ".";
      auto qkv = lin(ln(x, p + "ln_1."), p + "attn.c_attn.").view({T, 3, H, D}).permute({1, 2, 0, 3});   // (3, H, T, D)
      kc[size_t(l)].narrow(2, pos, T).copy_(qkv[1].unsqueeze(0));
      vc[size_t(l)].narrow(2, pos, T).copy_(qkv[2].unsqueeze(0));
      auto k = kc[size_t(l)].narrow(2, 0, pos + T), v = vc[size_t(l)].narrow(2, 0, pos + T);
      auto att = torch::matmul(qkv[0].unsqueeze(0), k.transpose(-2, -1)) / std::sqrt(double(D));
      if (T > 1) att = att.masked_fill(torch::ones({T, pos + T}, torch::kBool).tril(pos).logical_not(), -INFINITY);
      auto y = torch::matmul(att.softmax(-1), v).squeeze(0).transpose(0, 1).reshape({T, c.n_embd});
      x = x + lin(y, p + "attn.c_proj.");
      x = x + lin(torch::gelu(lin(ln(x, p + "ln_2."), p + "mlp.c_fc."), "tanh"), p + "mlp.c_proj.");
    }
    auto logits = torch::matmul(ln(x.narrow(0, T - 1, 1), "ln_f."), w["wte.weight"].t());
    pos += T;
    return logits.argmax(-1).item<int64_t>();
  }
};

Result bench_torch(const gpt2::Config& cfg, const HostWeights& h, const std::vector<int>& prompt, int tokens, bool half) {
  auto t0 = clk::now();
  TorchGPT2 m(cfg, h, int64_t(prompt.size()) + tokens + 4, half ? torch::kBFloat16 : torch::kFloat32);
  int64_t next = m.forward(std::vector<int64_t>(prompt.begin(), prompt.end()));
  double first = secs(t0);
  for (int i = 0; i < 3; i++) next = m.forward({next});
  auto t = clk::now();
  for (int i = 0; i < tokens; i++) next = m.forward({next});
  return {tokens / secs(t), first, 0};
}
#endif

}  // namespace

int main() {
  try {
    const std::string device = tg::Device::default_device();
    const int tokens = int(tg::getenv("TOKENS", 32));
    const bool half = tg::getenv("HALF", 0) != 0;
    const int threads = int(tg::getenv("THREADS", int64_t(std::max(1u, std::thread::hardware_concurrency()))));
    gpt2::Config cfg = gpt2::Config::named("gpt2");
    gpt2::Transformer m(cfg);
    gpt2::randomize(m, 1234, device);
    HostWeights h = read_weights(m);
    if (half) m.to(device, tg::dtypes::float16);
    std::vector<int> prompt;
    for (int k = 0; k < 20; k++) prompt.push_back((k * 7919 + 11) % int(cfg.vocab_size));
    const double weight_bytes = double(cfg.n_params()) * (half ? 2 : 4);
    const char* dt = half ? "fp16" : "fp32";

    Result r = bench_tg(m, prompt, tokens);
    double bound = 0;
    if (device == "CPU") {
      double gbps = elementwise_gbps(threads);
      bound = gbps * 1e9 / weight_bytes;
      std::printf("{\"limit\":\"elementwise_GBps\",\"value\":%.1f,\"what\":\"c=a*b+1 fp32, 3 streams, %d threads, measured in this run\","
                  "\"weight_MB_per_token\":%.1f,\"decode_tok_s_bound\":%.1f}\n", gbps, threads, weight_bytes / 1e6, bound);
    }
    std::printf("{\"bench\":\"gpt2_decode\",\"impl\":\"tg\",\"device\":\"%s\",\"dtype\":\"%s\",\"what\":\"GPT-2 124M random weights, batch 1, "
                "greedy, after a 20-token prompt, TinyJit replay\",\"tokens\":%d,\"tok_s\":%.2f,\"kernels_per_token\":%zu,"
                "\"first_token_s\":%.3f,\"vs_bound\":%s}\n", device.c_str(), dt, tokens, r.tok_s, r.kernels, r.first_token_s,
                bound > 0 ? std::to_string(r.tok_s / bound).c_str() : "null");
#ifdef TG_HAVE_TORCH
    if (device == "CPU") {
      const int tthreads = int(tg::getenv("TORCH_THREADS", threads));
      torch::set_num_threads(tthreads);
      Result t = bench_torch(cfg, h, prompt, tokens, half);
      std::printf("{\"bench\":\"gpt2_decode\",\"impl\":\"libtorch\",\"device\":\"CPU\",\"dtype\":\"%s\",\"what\":\"same model and weights, "
                  "eager, addmm, preallocated KV cache, %d threads; Debian's libtorch 1.13 has BLAS_INFO=generic\",\"tokens\":%d,\"tok_s\":%.2f,\"first_token_s\":%.3f,\"tg_over_torch\":%.3f}\n",
                  half ? "bf16" : "fp32", tthreads, tokens, t.tok_s, t.first_token_s, r.tok_s / t.tok_s);
    }
#else
    std::printf("{\"bench\":\"gpt2_decode\",\"impl\":\"libtorch\",\"value\":null,\"what\":\"built without libtorch\"}\n");
#endif
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "bench_gpt2: %s\n", e.what());
    return 1;
  }
  return 0;
}
