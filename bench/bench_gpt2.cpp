// GPT-2 124M decode speed and time to first token (JSON lines). Batch 1, random weights (seeded), greedy,
// a 20-token prompt, then TOKENS decode steps through the KV cache under TinyJit.
//   DEVICE=CPU|CUDA TOKENS=32 HALF=0|1 THREADS=n TORCH_THREADS=n CHECKPOINT=dir bench_gpt2
// The parent writes the weights once as a Hugging Face checkpoint (model.safetensors + config.json) in a
// temporary folder, then runs tg twice in fresh child processes (this binary with --child), each loading the
// checkpoint through DISK and generating:
//   cold: an empty kernel cache (CACHEDB points at a new file), so every kernel is compiled;
//   warm: the same cache again (the disk cache holds every kernel; the file is in the page cache).
// Each child reports load time, time to first token (load + schedule + compile + the prompt), decode tok/s,
// kernels per token and its peak resident memory. In the same run, on the CPU: the memory bound (weight bytes
// per token / bandwidth from bench/limits.hpp: the elementwise c=a*b+1 figure the issue names, and the
// read-only sum figure) and libtorch (when built with it) running the same model on the same weights.
#include <spawn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <tg/tg.hpp>

#include "gpt2/generate.hpp"
#include "gpt2/model.hpp"
#include "limits.hpp"
#ifdef TG_HAVE_TORCH
#include <torch/torch.h>
#endif

extern char** environ;

using clk = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }

std::vector<int> prompt_tokens(int64_t vocab) {
  std::vector<int> p;
  for (int k = 0; k < 20; k++) p.push_back((k * 7919 + 11) % int(vocab));
  return p;
}

// this process's own peak (VmHWM): getrusage's ru_maxrss keeps the parent's peak across posix_spawn's exec,
// so a child spawned after the parent's 1 GB first-touch copy reported 1.1 GB whatever it used itself
double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;   // kB
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;   // KiB on Linux
}

// ---- child: one fresh process loads the checkpoint and generates; writes key=value lines to `out`
int child(const std::string& dir, const std::string& out, int tokens, bool half) {
  auto t0 = clk::now();
  std::string device = tg::Device::default_device();
  gpt2::Loaded l = gpt2::load_checkpoint_config(dir, gpt2::Config{});
  gpt2::Transformer m(l.cfg);
  gpt2::load_checkpoint(m, l.file, device);
  if (half) m.to(device, tg::dtypes::float16);
  tg::Device::synchronize(device);
  double load_s = secs(t0);
  std::vector<int> prompt = prompt_tokens(l.cfg.vocab_size);
  gpt2::Generator g(m, int64_t(prompt.size()) + tokens + 8, 0);
  std::vector<int> next = g.prompt({prompt});
  double first_s = secs(t0);
  auto t1 = clk::now();
  for (int i = 0; i < 3; i++) next = g.step(next);   // run, capture, first replay
  double capture_s = secs(t1);
  auto t = clk::now();
  for (int i = 0; i < tokens; i++) next = g.step(next);
  double tok_s = tokens / secs(t);
  std::ofstream f(out);
  f << "load_s " << load_s << "\nfirst_token_s " << first_s << "\ncapture_s " << capture_s << "\ntok_s " << tok_s << "\nkernels "
    << g.jit_kernels() << "\npeak_rss_mb " << peak_rss_mb() << "\nlast_token " << next[0] << "\n";
  return f ? 0 : 1;
}

std::map<std::string, double> run_child(const std::string& dir, const std::string& cachedb, int tokens, bool half) {
  std::string out = dir + "/result.txt";
  fs::remove(out);
  std::vector<std::string> env;
  for (char** e = environ; *e; e++)
    if (std::string(*e).rfind("CACHEDB=", 0) != 0) env.push_back(*e);
  env.push_back("CACHEDB=" + cachedb);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = fs::read_symlink("/proc/self/exe").string(), n = std::to_string(tokens), h = half ? "1" : "0";
  std::vector<std::string> args = {self, "--child", dir, out, n, h};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) throw tg::Error("bench_gpt2: can't spawn " + self);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw tg::Error("bench_gpt2: the child run failed (status " + std::to_string(status) + ")");
  std::map<std::string, double> r;
  std::ifstream f(out);
  std::string k;
  double v;
  while (f >> k >> v) r[k] = v;
  return r;
}

// The checkpoint every run reads: HF layout, fp32, seeded random weights
void write_checkpoint(const std::string& dir, const gpt2::Config& cfg) {
  gpt2::Transformer m(cfg);
  gpt2::randomize(m, 1234, "CPU");
  tg::nn::state::StateDict sd;
  for (auto& [k, t] : m.named_tensors()) sd.insert_or_assign(k, *t);
  tg::nn::state::safe_save(sd, dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << "{\"n_layer\": " << cfg.n_layer << ", \"n_embd\": " << cfg.n_embd << ", \"n_head\": " << cfg.n_head
                                      << ", \"n_positions\": " << cfg.n_positions << ", \"vocab_size\": " << cfg.vocab_size << "}\n";
}

#ifdef TG_HAVE_TORCH
// The same GPT-2 in libtorch eager: Conv1D weights (in, out) through addmm, a preallocated KV cache.
struct TorchGPT2 {
  gpt2::Config c;
  std::map<std::string, torch::Tensor> w;
  std::vector<torch::Tensor> kc, vc;
  int64_t pos = 0;
  TorchGPT2(const gpt2::Config& cfg, const std::string& file, int64_t ctx, torch::Dtype dt) : c(cfg) {
    for (auto& [k, t] : tg::nn::state::safe_load(file)) {
      std::vector<float> v = t.to("CPU").tolist<float>();
      w[k] = torch::from_blob(v.data(), t.shape(), torch::kFloat32).to(dt).clone();
    }
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

struct TorchResult { double tok_s, first_token_s; int64_t last; };
TorchResult bench_torch(const gpt2::Config& cfg, const std::string& file, const std::vector<int>& prompt, int tokens, bool half) {
  auto t0 = clk::now();
  TorchGPT2 m(cfg, file, int64_t(prompt.size()) + tokens + 8, half ? torch::kBFloat16 : torch::kFloat32);
  int64_t next = m.forward(std::vector<int64_t>(prompt.begin(), prompt.end()));
  double first = secs(t0);
  for (int i = 0; i < 3; i++) next = m.forward({next});
  auto t = clk::now();
  for (int i = 0; i < tokens; i++) next = m.forward({next});
  return {tokens / secs(t), first, next};
}
#endif

std::string num(double v, int prec = 3) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.*f", prec, v);
  return b;
}

int parent() {
  const std::string device = tg::Device::default_device();
  const int tokens = int(tg::getenv("TOKENS", 32));
  const bool half = tg::getenv("HALF", 0) != 0;
  const int threads = int(tg::getenv("THREADS", int64_t(std::max(1u, std::thread::hardware_concurrency()))));
  const gpt2::Config cfg = gpt2::Config::named("gpt2");
  const double weight_bytes = double(cfg.n_params()) * (half ? 2 : 4);
  const char* dt = half ? "fp16" : "fp32";

  // CHECKPOINT=dir keeps the checkpoint there (written once, reused by later runs)
  const std::string keep = tg::getenv_str("CHECKPOINT", "");
  fs::path dir = keep.empty() ? fs::temp_directory_path() / ("tg_bench_gpt2_" + std::to_string(::getpid())) : fs::path(keep);
  fs::create_directories(dir);
  struct Cleanup { fs::path p; ~Cleanup() { std::error_code ec; if (!p.empty()) fs::remove_all(p, ec); } } cleanup{keep.empty() ? dir : fs::path()};
  if (!fs::exists(dir / "model.safetensors")) {
    auto tw = clk::now();
    write_checkpoint(dir.string(), cfg);
    std::printf("{\"note\":\"wrote GPT-2 124M random weights (seed 1234) as %s/model.safetensors in %.1f s; the machine may be shared\"}\n",
                dir.c_str(), secs(tw));
    std::fflush(stdout);
  }
  fs::remove(dir / "kernels.db");
  // the load's floor on this machine: the checkpoint's bytes copied from the mapped file into fresh memory
  // (page faults included), what a load must do once
  {
    std::string f = (dir / "model.safetensors").string();
    size_t n = fs::file_size(f);
    int fd = ::open(f.c_str(), O_RDONLY);
    void* src = fd < 0 ? MAP_FAILED : ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
    if (src != MAP_FAILED) {
      volatile char sink = 0;
      for (size_t i = 0; i < n; i += 4096) sink = sink + static_cast<const char*>(src)[i];   // into the page cache first
      auto t = clk::now();
      std::unique_ptr<char[]> dst(new char[n]);
      std::memcpy(dst.get(), src, n);
      double s = secs(t);
      sink = sink + dst[n / 2];
      std::printf("{\"limit\":\"first_touch_copy_GBps\",\"value\":%.2f,\"what\":\"the %.0f MB checkpoint memcpy'd from its mapping into "
                  "fresh memory (page faults included): a load's floor is %.2f s\"}\n", double(n) / s / 1e9, double(n) / 1e6, s);
      ::munmap(src, n);
    }
    if (fd >= 0) ::close(fd);
  }
  const std::string cachedb = (dir / "kernels.db").string();
  std::map<std::string, double> cold = run_child(dir.string(), cachedb, tokens, half);
  std::map<std::string, double> warm = run_child(dir.string(), cachedb, tokens, half);
  for (auto& [name, r] : {std::pair{"cold", &cold}, std::pair{"warm", &warm}}) {
    std::printf("{\"bench\":\"gpt2_first_token\",\"impl\":\"tg\",\"device\":\"%s\",\"dtype\":\"%s\",\"kernel_cache\":\"%s\",\"what\":\"fresh "
                "process: load the safetensors checkpoint through DISK, schedule, %s, run the 20-token prompt\",\"load_s\":%s,"
                "\"first_token_s\":%s,\"capture_s\":%s,\"peak_rss_MB\":%s}\n",
                device.c_str(), dt, name, name == std::string("cold") ? "compile every kernel" : "kernels from the disk cache",
                num((*r)["load_s"]).c_str(), num((*r)["first_token_s"]).c_str(), num((*r)["capture_s"]).c_str(), num((*r)["peak_rss_mb"], 0).c_str());
  }
  double tok_s = warm["tok_s"];
  std::string vs_elem = "null", vs_sum = "null";
  if (device == "CPU") {
    auto lim = tgbench::measure_limits(threads);
    for (const char* k : {"elementwise_GBps", "sum_GBps"}) std::printf("%s\n", tgbench::limit_json(k, lim[k]).c_str());
    double be = lim["elementwise_GBps"].value * 1e9 / weight_bytes, bs = lim["sum_GBps"].value * 1e9 / weight_bytes;
    std::printf("{\"limit\":\"gpt2_decode_tok_s_bound\",\"weight_MB_per_token\":%.1f,\"by_elementwise\":%.2f,\"by_sum\":%.2f,\"what\":\"weight "
                "bytes per token / bandwidth, same run\"}\n", weight_bytes / 1e6, be, bs);
    vs_elem = num(tok_s / be), vs_sum = num(tok_s / bs);
  }
  std::printf("{\"bench\":\"gpt2_decode\",\"impl\":\"tg\",\"device\":\"%s\",\"dtype\":\"%s\",\"what\":\"GPT-2 124M random weights, batch 1, greedy, "
              "after a 20-token prompt, TinyJit replay with a symbolic start_pos\",\"tokens\":%d,\"tok_s\":%.2f,\"tok_s_cold_process\":%.2f,"
              "\"kernels_per_token\":%d,\"JIT\":\"%s\",\"ROW_BCAST\":\"%s\",\"vs_bound_elementwise\":%s,\"vs_bound_sum\":%s}\n",
              device.c_str(), dt, tokens, tok_s, cold["tok_s"], int(warm["kernels"]), tg::getenv_str("JIT", "default").c_str(),
              tg::getenv_str("ROW_BCAST", "default").c_str(), vs_elem.c_str(), vs_sum.c_str());
  std::fflush(stdout);
#ifdef TG_HAVE_TORCH
  if (device == "CPU") {
    const int tthreads = int(tg::getenv("TORCH_THREADS", threads));
    torch::set_num_threads(tthreads);
    TorchResult t = bench_torch(cfg, (dir / "model.safetensors").string(), prompt_tokens(cfg.vocab_size), tokens, half);
    std::printf("{\"bench\":\"gpt2_decode\",\"impl\":\"libtorch %d.%d\",\"device\":\"CPU\",\"dtype\":\"%s\",\"what\":\"same model and weights in this "
                "process, eager, addmm, preallocated KV cache, %d threads\",\"tokens\":%d,\"tok_s\":%.2f,\"first_token_s_weights_in_memory\":%.3f,"
                "\"tg_over_torch\":%.3f,\"same_last_token\":%s}\n",
                TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, half ? "bf16" : "fp32", tthreads, tokens, t.tok_s, t.first_token_s, tok_s / t.tok_s,
                half ? "null" : (t.last == int64_t(warm["last_token"]) ? "true" : "false"));
  }
#else
  std::printf("{\"bench\":\"gpt2_decode\",\"impl\":\"libtorch\",\"value\":null,\"what\":\"built without libtorch\"}\n");
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 6 && std::string(argv[1]) == "--child") return child(argv[2], argv[3], std::stoi(argv[4]), std::string(argv[5]) == "1");
    return parent();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpt2: %s\n", e.what());
    return 1;
  }
}
