// Hugging Face GPT-2 checkpoints: config.json + model.safetensors (safe_load) or pytorch_model.bin
// (torch_load, zip or legacy). Both readers leave the tensors as views of the mmap'ed file on DISK;
// each is copied once, straight to the model's device, so the host never holds a second full copy.
#include <filesystem>
#include <map>
#include <set>

#include "gpt2/json.hpp"
#include "gpt2/model.hpp"

namespace gpt2 {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& t) { return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0; }

int64_t json_int(const Json& j, const char* key, int64_t dflt, const std::string& path) {
  const Json* v = j.find(key);
  if (!v || v->kind == Json::Kind::Null) return dflt;
  if (v->kind != Json::Kind::Number || v->num != double(int64_t(v->num)) || v->num < 1)
    throw tg::Error("gpt2: " + path + ": \"" + key + "\" must be a positive integer");
  return int64_t(v->num);
}

// "transformer.h.0.attn.c_attn.weight" -> "h.0.attn.c_attn.weight"; "" for tensors GPT-2 doesn't load:
// the causal-mask buffers older files carry and lm_head (tied to wte).
std::string model_key(const std::string& k) {
  std::string s = k.rfind("transformer.", 0) == 0 ? k.substr(12) : k;
  if (ends_with(s, ".attn.bias") || ends_with(s, ".attn.masked_bias") || s == "lm_head.weight") return "";
  return s;
}

}  // namespace

Config Config::from_json(const std::string& path) {
  Json j = read_json(path);
  if (j.kind != Json::Kind::Object) throw tg::Error("gpt2: " + path + " is not a JSON object");
  Config c;
  c.n_layer = json_int(j, "n_layer", c.n_layer, path);
  c.n_embd = json_int(j, "n_embd", c.n_embd, path);
  c.n_head = json_int(j, "n_head", c.n_head, path);
  c.n_positions = json_int(j, "n_positions", json_int(j, "n_ctx", c.n_positions, path), path);
  c.vocab_size = json_int(j, "vocab_size", c.vocab_size, path);
  if (const Json* e = j.find("layer_norm_epsilon"); e && e->kind == Json::Kind::Number) c.layer_norm_epsilon = e->num;
  if (c.n_embd % c.n_head != 0)
    throw tg::Error("gpt2: " + path + ": n_embd " + std::to_string(c.n_embd) + " is not a multiple of n_head " + std::to_string(c.n_head));
  return c;
}

Loaded load_checkpoint_config(const std::string& path, const Config& fallback) {
  Loaded out{fallback, path};
  fs::path p(path), dir;
  if (fs::is_directory(p)) {
    dir = p;
    if (fs::exists(p / "model.safetensors")) out.file = (p / "model.safetensors").string();
    else if (fs::exists(p / "pytorch_model.bin")) out.file = (p / "pytorch_model.bin").string();
    else throw tg::Error("gpt2: " + path + " has neither model.safetensors nor pytorch_model.bin");
  } else {
    if (!fs::exists(p)) throw tg::Error("gpt2: checkpoint '" + path + "' not found");
    dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  }
  if (fs::exists(dir / "config.json")) out.cfg = Config::from_json((dir / "config.json").string());
  return out;
}

void load_checkpoint(Transformer& model, const std::string& file, const std::string& device) {
  tg::nn::state::StateDict raw = ends_with(file, ".safetensors") ? tg::nn::state::safe_load(file) : tg::nn::state::torch_load(file);
  std::map<std::string, Tensor> sd;
  for (auto& [k, t] : raw) {
    std::string mk = model_key(k);
    if (mk.empty()) continue;
    if (!sd.emplace(mk, t).second) throw tg::Error("gpt2: " + file + " holds '" + mk + "' twice (with and without the 'transformer.' prefix)");
  }
  std::set<std::string> used;
  for (auto& [k, t] : model.named_tensors()) {
    auto it = sd.find(k);
    if (it == sd.end())
      throw tg::Error("gpt2: " + file + " has no tensor '" + k + "' (or 'transformer." + k + "') of shape " + tg::to_str(t->shape()) +
                      "; is it a GPT-2 checkpoint, and does config.json match it?");
    const Tensor& v = it->second;
    if (v.shape() != t->shape())
      throw tg::Error("gpt2: " + file + ": tensor '" + k + "' has shape " + tg::to_str(v.shape()) + ", the model (config.json) expects " +
                      tg::to_str(t->shape()));
    if (!v.dtype().is_float())
      throw tg::Error("gpt2: " + file + ": tensor '" + k + "' has dtype " + v.dtype().str() + ", expected a float dtype");
    used.insert(k);
    Tensor m = v.to(device);
    if (m.dtype() != t->dtype()) m = m.cast(t->dtype());
    *t = Transformer::place(k, m);
    // realized one by one: the copy of the file's bytes that place() transposes is freed to the allocator
    // before the next tensor, which reuses it (one full copy of the weights in memory, not two)
    t->realize();
  }
  for (auto& [k, t] : sd)
    if (!used.count(k)) throw tg::Error("gpt2: " + file + " has an unexpected tensor '" + k + "' " + tg::to_str(t.shape()) + " (not a GPT-2 key)");
  model.reset_cache();
}

}  // namespace gpt2
