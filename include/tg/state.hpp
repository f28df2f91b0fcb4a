// tg::nn::state and tg::nn::datasets: checkpoints (safetensors, PyTorch zip) and IDX data sets.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tg/nn.hpp"
#include "tg/tensor.hpp"

namespace tg::nn::state {

using StateDict = std::map<std::string, Tensor>;

StateDict get_state_dict(Module& model);                 // parameters and buffers by dotted name
std::vector<Tensor> get_parameters(Module& model);       // every tensor of get_state_dict, in name order
// Assigns each model tensor from the dict. strict: every model key must be present and no extra key.
// Shape mismatch or a missing key (strict) throws tg::Error naming the key.
void load_state_dict(Module& model, const StateDict& state_dict, bool strict = true);

StateDict safe_load(const std::string& path);            // tensors on DISK (mmap); .to() or load_state_dict moves them
void safe_save(const StateDict& tensors, const std::string& path);
StateDict torch_load(const std::string& path);           // PyTorch zip checkpoints (state dicts)

}  // namespace tg::nn::state

namespace tg::nn::datasets {

struct Dataset { Tensor X_train, Y_train, X_test, Y_test; };   // X: (N,1,28,28) uint8, Y: (N,) uint8, as tinygrad

// IDX files (gzip or not): train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-...
// An empty dir means default_dir(name): $DATASETS/<name>, DATASETS defaulting to Debian's
// /usr/share/datasets (the dataset-fashion-mnist package).
Dataset mnist(const std::string& dir = "");
Dataset fashion_mnist(const std::string& dir = "");
std::string default_dir(const std::string& name);   // name: "mnist" or "fashion-mnist"

}  // namespace tg::nn::datasets
