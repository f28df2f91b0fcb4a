// tg::nn::state and tg::nn::datasets over the file formats in nn/formats.hpp. Tensors from a file
// are views of a DISK buffer (mmap); data held in memory (deflated or restrided) is copied in.
#include "tg/state.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#include "access.hpp"
#include "lazy/lazy.hpp"
#include "nn/formats.hpp"
#include "runtime/buffer.hpp"

namespace tg::nn::state {

namespace {

Tensor from_raw(const formats::RawTensor& r, std::shared_ptr<Buffer>& disk_base, int64_t file_size) {
  int64_t numel = prod(r.shape);
  std::shared_ptr<Buffer> buf;
  if (r.bytes || numel == 0) {
    buf = std::make_shared<Buffer>(default_device(), std::max<int64_t>(numel, 1), r.dtype);
    if (numel > 0) buf->copyin(r.bytes->data(), r.bytes->size());
  } else {
    if (!disk_base) disk_base = std::make_shared<Buffer>("DISK:" + r.file, file_size, dtypes::uint8);
    buf = disk_base->view(numel, r.dtype, r.offset);
  }
  Shape shape = r.shape;
  LazyBufferPtr lb = LazyBuffer::from_buffer(buf, shape);
  if (numel == 0) return Tensor::empty(shape, Opts{r.dtype, {}, false});
  return Access::from_lazydata(lb, false);
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error("nn.state: can't open '" + path + "': no such file");
  return st.st_size;
}

StateDict to_state_dict(const formats::RawDict& raw, const std::string& path) {
  StateDict out;
  std::shared_ptr<Buffer> disk;
  int64_t size = file_size(path);
  for (auto& [k, r] : raw) out.emplace(k, from_raw(r, disk, size));
  return out;
}

}  // namespace

StateDict safe_load(const std::string& path) { return to_state_dict(formats::safetensors_read(path), path); }
StateDict torch_load(const std::string& path) { return to_state_dict(formats::torch_load(path), path); }

void safe_save(const StateDict& tensors, const std::string& path) {
  std::vector<std::pair<std::string, formats::TensorData>> items;
  std::vector<std::string> hold;   // host copies, alive until written
  hold.reserve(tensors.size());
  for (auto& [k, t] : tensors) {
    Tensor c = t.to("CPU").contiguous().realize();
    auto buf = Access::lazydata(c)->base()->buffer;
    hold.push_back(c.numel() ? buf->as_bytes() : std::string());
    items.push_back({k, formats::TensorData{t.dtype(), t.shape(), hold.back().data()}});
  }
  formats::safetensors_write(path, items);
}

StateDict get_state_dict(Module& model) {
  StateDict out;
  for (auto& [k, t] : model.named_tensors()) out.emplace(k, *t);
  return out;
}

std::vector<Tensor> get_parameters(Module& model) {
  std::vector<Tensor> out;
  for (auto& [k, t] : get_state_dict(model)) out.push_back(t);
  return out;
}

void load_state_dict(Module& model, const StateDict& sd, bool strict) {
  auto named = model.named_tensors();
  if (strict) {
    for (auto& [k, v] : sd) {
      bool found = std::any_of(named.begin(), named.end(), [&](auto& p) { return p.first == k; });
      if (!found) throw Error("load_state_dict: unexpected key '" + k + "' in the state dict; pass strict=false to ignore it");
    }
  }
  for (auto& [k, t] : named) {
    auto it = sd.find(k);
    if (it == sd.end()) {
      if (strict) throw Error("load_state_dict: missing key '" + k + "' (shape " + to_str(t->shape()) + "); pass strict=false to skip it");
      continue;
    }
    const Tensor& v = it->second;
    if (v.shape() != t->shape())
      throw Error("load_state_dict: shape mismatch for '" + k + "': model has " + to_str(t->shape()) + ", state dict has " + to_str(v.shape()));
    if (v.dtype() != t->dtype())
      throw Error("load_state_dict: dtype mismatch for '" + k + "': model has " + t->dtype().str() + ", state dict has " + v.dtype().str() +
                  "; cast the state dict first");
    Tensor src = v.to(t->device());
    // same device: .to() is the dict's own tensor; copy it so the model doesn't share (and later train) the
    // dict's buffer, which may be another live model's weight
    if (Access::lazydata(src)->base() == Access::lazydata(v)->base())
      src = Tensor::empty(v.shape(), Opts{v.dtype(), t->device(), false}).realize().assign(src);
    t->replace(src).realize();
  }
}

}  // namespace tg::nn::state

namespace tg::nn::datasets {

namespace {
Tensor idx_tensor(const std::string& dir, const std::string& stem) {
  formats::IdxArray a = formats::idx_read(formats::find_idx_file(dir, stem));
  auto buf = std::make_shared<Buffer>(default_device(), prod(a.shape), a.dtype);
  buf->copyin(a.data.data(), a.data.size());
  return Access::from_lazydata(LazyBuffer::from_buffer(buf, a.shape), false);
}
}  // namespace

std::string default_dir(const std::string& name) {
  const char* root = std::getenv("DATASETS");
  return std::string(root && *root ? root : "/usr/share/datasets") + "/" + name;
}

Dataset mnist(const std::string& dir_arg) {
  const std::string dir = dir_arg.empty() ? default_dir("mnist") : dir_arg;
  Dataset d{idx_tensor(dir, "train-images-idx3-ubyte").reshape({-1, 1, 28, 28}), idx_tensor(dir, "train-labels-idx1-ubyte"),
            idx_tensor(dir, "t10k-images-idx3-ubyte").reshape({-1, 1, 28, 28}), idx_tensor(dir, "t10k-labels-idx1-ubyte")};
  return d;
}
Dataset fashion_mnist(const std::string& dir) { return mnist(dir.empty() ? default_dir("fashion-mnist") : dir); }

}  // namespace tg::nn::datasets
