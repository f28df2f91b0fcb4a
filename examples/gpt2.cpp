// GPT-2 text generation (tinygrad 0.9.2 examples/gpt2.py in C++).
//   gpt2 --model DIR|FILE [--prompt TEXT] [--count N] [--temperature T] [--seed S] [--batch B] [--half]
//        [--device CPU|CUDA] [--timing] [--benchmark N] [--max-context N] [--vocab DIR]
//   gpt2 --random-weights [--size gpt2|gpt2-medium|gpt2-large|gpt2-xl] ...   (no checkpoint needed)
// A Hugging Face checkpoint directory holds config.json and model.safetensors or pytorch_model.bin.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <tg/tg.hpp>

#include "gpt2/generate.hpp"
#include "gpt2/model.hpp"
#include "gpt2/tokenizer.hpp"

namespace {

struct Args {
  std::string model, size = "gpt2", prompt = "What is the answer to life, the universe, and everything?", device, vocab;
  int64_t count = 100, batch = 1, benchmark = 0, max_context = 0, seed = -1;
  double temperature = 0.8;
  bool half = false, timing = false, random_weights = false, no_jit = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "gpt2: %s\n"
               "usage: gpt2 (--model DIR|FILE | --random-weights [--size gpt2|gpt2-medium|gpt2-large|gpt2-xl])\n"
               "            [--prompt TEXT] [--count N] [--temperature T (0 = greedy)] [--seed S] [--batch B] [--half]\n"
               "            [--device CPU|CUDA] [--timing] [--benchmark N] [--max-context N] [--vocab DIR] [--no-jit]\n",
               why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i++) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage(k + " needs a value");
      return argv[++i];
    };
    auto num = [&]() -> int64_t {
      std::string v = val();
      try { size_t used; int64_t x = std::stoll(v, &used); if (used == v.size()) return x; } catch (...) {}
      usage(k + " needs an integer, got '" + v + "'");
    };
    if (k == "--model") a.model = val();
    else if (k == "--size") a.size = val();
    else if (k == "--prompt") a.prompt = val();
    else if (k == "--count") a.count = num();
    else if (k == "--temperature") { std::string v = val(); try { a.temperature = std::stod(v); } catch (...) { usage("--temperature needs a number"); } }
    else if (k == "--seed") a.seed = num();
    else if (k == "--batch") a.batch = num();
    else if (k == "--benchmark") a.benchmark = num();
    else if (k == "--max-context") a.max_context = num();
    else if (k == "--device") a.device = val();
    else if (k == "--vocab") a.vocab = val();
    else if (k == "--half") a.half = true;
    else if (k == "--timing") a.timing = true;
    else if (k == "--random-weights") a.random_weights = true;
    else if (k == "--no-jit") a.no_jit = true;
    else if (k == "--help" || k == "-h") usage("GPT-2 text generation");
    else usage("unknown argument '" + k + "'");
  }
  if (a.model.empty() == !a.random_weights) usage("pass exactly one of --model PATH and --random-weights");
  if (a.count < 0 || a.batch < 1 || a.benchmark < 0) usage("--count, --batch and --benchmark must not be negative (batch >= 1)");
  return a;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  try {
    std::string device = a.device.empty() ? tg::Device::default_device() : a.device;
    if (a.seed >= 0) tg::Tensor::manual_seed(uint64_t(a.seed));
    double t0 = now();
    gpt2::Tokenizer tok(a.vocab.empty() ? gpt2::Tokenizer::default_dir() : a.vocab);
    gpt2::Config cfg = gpt2::Config::named(a.size);
    std::string file;
    if (!a.model.empty()) {
      gpt2::Loaded l = gpt2::load_checkpoint_config(a.model, cfg);
      cfg = l.cfg, file = l.file;
    }
    gpt2::Transformer model(cfg);
    if (!file.empty()) {
      std::printf("loading %s (%lld layers, %lld dim, %lld heads, vocab %lld) to %s\n", file.c_str(), (long long)cfg.n_layer,
                  (long long)cfg.n_embd, (long long)cfg.n_head, (long long)cfg.vocab_size, device.c_str());
      std::fflush(stdout);
      gpt2::load_checkpoint(model, file, device);
    } else {
      std::printf("NO CHECKPOINT: %s-sized model (%.1fM parameters) with random weights (seed %lld); the text is gibberish\n", a.size.c_str(),
                  cfg.n_params() / 1e6, (long long)std::max<int64_t>(a.seed, 0));
      std::fflush(stdout);
      gpt2::randomize(model, uint64_t(std::max<int64_t>(a.seed, 0)), device);
    }
    if (a.half && device == "CPU") std::printf("note: --half on the CPU computes in fp16 through conversions; fp32 decodes faster there\n");
    model.to(device, a.half ? tg::dtypes::float16 : tg::dtypes::float32);
    if (size_t(cfg.vocab_size) < tok.vocab_size())
      std::printf("warning: the model's vocabulary (%lld) is smaller than the tokenizer's (%zu)\n", (long long)cfg.vocab_size, tok.vocab_size());
    double t_load = now() - t0;

    std::vector<int> ids = tok.encode(a.prompt);
    if (ids.empty()) ids.push_back(tok.eot());
    int64_t steps = a.benchmark > 0 ? a.benchmark + 3 : a.count;
    int64_t ctx = a.max_context > 0 ? a.max_context : std::min<int64_t>(cfg.n_positions, int64_t(ids.size()) + std::max<int64_t>(steps, 1));
    if (int64_t(ids.size()) + steps > ctx)
      throw tg::Error("gpt2: prompt (" + std::to_string(ids.size()) + " tokens) + " + std::to_string(steps) + " tokens exceed the context of " +
                      std::to_string(ctx));
    gpt2::Generator gen(model, ctx, a.temperature, !a.no_jit);
    std::vector<std::vector<int>> out(size_t(a.batch), ids);
    double t1 = now();
    std::vector<int> next = gen.prompt(out);
    double t_first = now() - t1;
    std::vector<double> ms;
    double t_bench = 0;
    for (int64_t i = 0; i < steps; i++) {
      for (size_t b = 0; b < out.size(); b++) out[b].push_back(next[b]);
      if (i + 1 == steps) break;
      if (a.benchmark > 0 && i == 2) t_bench = now();
      double ts = now();
      next = gen.step(next);
      ms.push_back((now() - ts) * 1e3);
      if (a.timing) std::fprintf(stderr, "token %lld: %.2f ms\n", (long long)(i + 1), ms.back());
    }
    if (a.benchmark > 0) {
      double dt = now() - t_bench;
      std::printf("benchmark: %lld tokens x batch %lld in %.3f s: %.1f tokens/s (%s, %s, %zu kernels per token)\n", (long long)a.benchmark,
                  (long long)a.batch, dt, double(a.benchmark) * double(a.batch) / dt, device.c_str(), a.half ? "fp16" : "fp32", gen.jit_kernels());
    }
    for (auto& row : out) std::printf("%s\n", tok.decode(row).c_str());
    if (a.timing) {
      double sum = 0;
      for (double m : ms) sum += m;
      std::printf("load %.2f s, prompt (%zu tokens) %.1f ms, %zu decode steps mean %.2f ms\n", t_load, ids.size(), t_first * 1e3, ms.size(),
                  ms.empty() ? 0.0 : sum / double(ms.size()));
    }
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
