// File formats behind tg::nn::state and tg::nn::datasets: safetensors, PyTorch checkpoints
// (zip + pickle, and the legacy pre-1.6 stream) and IDX (MNIST), as raw bytes. No Tensor here:
// each reader says where each tensor's bytes live (a slice of the file, for DISK/mmap loading
// without a copy, or an in-memory buffer when the data had to be converted) and the Tensor layer
// wraps that. Every malformed input throws tg::Error naming the file and what is wrong.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tg/dtype.hpp"
#include "tg/helpers.hpp"

namespace tg::formats {

// One tensor of a file. Exactly one of two places holds its contiguous row-major data:
//   bytes != nullptr: in memory, `*bytes` (nbytes == bytes->size(), offset 0, file empty);
//   bytes == nullptr: the file `file`, bytes [offset, offset + nbytes).
// nbytes == prod(shape) * dtype.itemsize() always.
struct RawTensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::string file;
  int64_t offset = 0;
  int64_t nbytes = 0;
  std::shared_ptr<std::vector<uint8_t>> bytes;
};
using RawDict = std::vector<std::pair<std::string, RawTensor>>;   // keeps file order

// The tensor's bytes, read from its file when they are not in memory already.
std::vector<uint8_t> raw_bytes(const RawTensor& t);

// ---- safetensors ----
// safetensors dtype names ("F32", "BF16", ...); throws tg::Error for names/dtypes the format lacks.
DType safe_dtype(const std::string& name);
std::string safe_dtype_name(DType dt);

// Header order is kept; "__metadata__" is skipped. Data stays in the file (no copy).
RawDict safetensors_read(const std::string& path);
// The "__metadata__" string map of a file (empty when it has none).
std::vector<std::pair<std::string, std::string>> safetensors_metadata(const std::string& path);

// A tensor to write: `data` points at prod(shape) * dtype.itemsize() contiguous bytes.
struct TensorData {
  DType dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};
// Writes tensors in the given order, header padded with spaces so the data starts 8-byte aligned.
void safetensors_write(const std::string& path, const std::vector<std::pair<std::string, TensorData>>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata = {});

// ---- PyTorch checkpoints ----
// torch.save / torch::pickle_save zip files and the legacy (pre-1.6, non-zip) pickle stream.
// Nested dicts/lists are flattened with "." joined keys ("layer.weight", "model.0.bias");
// non-tensor leaves (epoch numbers, _metadata) are dropped. Contiguous tensors stay file slices;
// tensors with other strides are materialized contiguous into `bytes`.
RawDict torch_load(const std::string& path);

// ---- IDX (MNIST) ----
struct IdxArray {
  std::vector<int64_t> shape;
  DType dtype;
  std::vector<uint8_t> data;   // host (little-endian) order, row-major
};
// Plain or gzip-compressed IDX file.
IdxArray idx_read(const std::string& path);
// `dir/stem` or `dir/stem.gz`, whichever exists; throws naming both when neither does.
std::string find_idx_file(const std::string& dir, const std::string& stem);

// ---- shared by the readers ----
// A read-only file with bounds-checked reads; every failure throws tg::Error naming the file.
class File {
 public:
  explicit File(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  void read(int64_t offset, void* dst, int64_t n) const;   // throws when [offset, offset+n) leaves the file
  std::vector<uint8_t> read(int64_t offset, int64_t n) const;
  [[noreturn]] void fail(const std::string& what) const;   // throws tg::Error("<path>: <what>")
 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// Checked arithmetic for sizes taken from files: throws via `f.fail` on overflow or negatives.
int64_t checked_numel(const File& f, const std::vector<int64_t>& shape, const std::string& what);
int64_t checked_mul(const File& f, int64_t a, int64_t b, const std::string& what);

}  // namespace tg::formats
