// safetensors: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data; offsets are relative to the end of the header. Also the File helper every reader uses.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string_view>
#include <unordered_set>

#include "nn/formats.hpp"
#include "tg/json.hpp"

namespace tg::formats {

// ---------------- File ----------------

File::File(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(path + ": not a regular file");
  }
  size_ = st.st_size;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

void File::fail(const std::string& what) const { throw Error(path_ + ": " + what); }

void File::read(int64_t offset, void* dst, int64_t n) const {
  if (offset < 0 || n < 0 || offset > size_ || n > size_ - offset)
    fail("truncated: need bytes [" + std::to_string(offset) + ", " + std::to_string(offset) + "+" + std::to_string(n) +
         ") but the file has " + std::to_string(size_));
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd_, p, static_cast<size_t>(std::min<int64_t>(n, 1 << 30)), offset);
    if (got <= 0) fail("read error at byte " + std::to_string(offset));
    p += got, offset += got, n -= got;
  }
}

std::vector<uint8_t> File::read(int64_t offset, int64_t n) const {
  if (offset < 0 || n < 0 || offset > size_ || n > size_ - offset) read(offset, nullptr, n);   // throws
  std::vector<uint8_t> out(static_cast<size_t>(n));
  read(offset, out.data(), n);
  return out;
}

int64_t checked_mul(const File& f, int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) f.fail(what + ": size overflows");
  return r;
}

int64_t checked_numel(const File& f, const std::vector<int64_t>& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 0) f.fail(what + ": negative dimension in shape " + to_str(shape));
    n = checked_mul(f, n, s, what + " shape " + to_str(shape));
  }
  return n;
}

std::vector<uint8_t> raw_bytes(const RawTensor& t) {
  if (t.bytes) return *t.bytes;
  File f(t.file);
  return f.read(t.offset, t.nbytes);
}

namespace {

constexpr std::pair<const char*, DType> kSafeDtypes[] = {
    {"BOOL", dtypes::bool_}, {"I8", dtypes::int8},   {"U8", dtypes::uint8},     {"I16", dtypes::int16},
    {"U16", dtypes::uint16}, {"I32", dtypes::int32}, {"U32", dtypes::uint32},   {"I64", dtypes::int64},
    {"U64", dtypes::uint64}, {"F16", dtypes::float16}, {"BF16", dtypes::bfloat16}, {"F32", dtypes::float32},
    {"F64", dtypes::float64}};

// Largest header the safetensors reference implementation accepts.
constexpr int64_t kMaxHeader = 100'000'000;

struct Header {
  int64_t data_start = 0;   // file offset of the byte buffer
  Json json;
};

Header read_header(const File& f) {
  if (f.size() < 8) f.fail("not a safetensors file: " + std::to_string(f.size()) + " bytes, need at least 8");
  uint8_t len8[8];
  f.read(0, len8, 8);
  uint64_t n = 0;
  for (int k = 7; k >= 0; k--) n = n << 8 | len8[k];
  if (n > uint64_t(f.size() - 8))
    f.fail("header length " + std::to_string(n) + " goes beyond the file (" + std::to_string(f.size()) + " bytes)");
  if (int64_t(n) > kMaxHeader) f.fail("header length " + std::to_string(n) + " is over the 100 MB limit");
  std::vector<uint8_t> text = f.read(8, int64_t(n));
  Header h;
  h.data_start = 8 + int64_t(n);
  h.json = json_parse(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), f.path() + " header");
  if (h.json.kind != Json::Kind::Object) f.fail("bad JSON header: the top level is not an object");
  return h;
}

int64_t json_uint(const File& f, const Json& v, const std::string& what) {
  if (v.kind != Json::Kind::Number || !v.is_int || v.i < 0) f.fail(what + " is not a non-negative integer");
  return v.i;
}

const Json& field(const File& f, const Json& entry, const std::string& key, const std::string& name) {
  if (const Json* v = entry.find(key)) return *v;
  f.fail("tensor \"" + name + "\" has no \"" + key + "\"");
}

}  // namespace

// ---------------- dtypes ----------------

DType safe_dtype(const std::string& name) {
  for (auto& [n, dt] : kSafeDtypes)
    if (name == n) return dt;
  throw Error("safetensors: unknown dtype \"" + name + "\" (known: BOOL, I8, U8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64)");
}

std::string safe_dtype_name(DType dt) {
  for (auto& [n, d] : kSafeDtypes)
    if (d == dt) return n;
  throw Error("safetensors: dtype " + dt.str() + " cannot be stored (only scalar bool, int and float dtypes)");
}

// ---------------- read ----------------

RawDict safetensors_read(const std::string& path) {
  File f(path);
  Header h = read_header(f);
  const int64_t data_size = f.size() - h.data_start;
  RawDict out;
  std::vector<std::pair<int64_t, int64_t>> ranges;   // [begin, end) of each tensor, to reject overlaps
  for (auto& [name, entry] : h.json.obj) {
    if (name == "__metadata__") continue;
    std::string what = "tensor \"" + name + "\"";
    if (entry.kind != Json::Kind::Object) f.fail(what + " is not an object");
    const Json& dt = field(f, entry, "dtype", name);
    const Json& shape = field(f, entry, "shape", name);
    const Json& offs = field(f, entry, "data_offsets", name);
    if (dt.kind != Json::Kind::String) f.fail(what + ": dtype is not a string");
    RawTensor t;
    try {
      t.dtype = safe_dtype(dt.str);
    } catch (const Error& e) {
      f.fail(what + ": " + e.what());
    }
    if (shape.kind != Json::Kind::Array) f.fail(what + ": shape is not a list");
    for (auto& d : shape.arr) t.shape.push_back(json_uint(f, d, what + " shape entry"));
    if (offs.kind != Json::Kind::Array || offs.arr.size() != 2) f.fail(what + ": data_offsets is not a [begin, end] pair");
    int64_t begin = json_uint(f, offs.arr[0], what + " data_offsets begin");
    int64_t end = json_uint(f, offs.arr[1], what + " data_offsets end");
    if (end < begin) f.fail(what + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] end before begin");
    if (end > data_size)
      f.fail(what + ": data_offsets end " + std::to_string(end) + " is beyond the data (" + std::to_string(data_size) + " bytes)");
    int64_t nbytes = checked_mul(f, checked_numel(f, t.shape, what), t.dtype.itemsize(), what);
    if (end - begin != nbytes)
      f.fail(what + ": data_offsets span " + std::to_string(end - begin) + " bytes but shape " + to_str(t.shape) + " of " +
             dt.str + " needs " + std::to_string(nbytes));
    t.file = path, t.offset = h.data_start + begin, t.nbytes = nbytes;
    ranges.emplace_back(begin, end);
    out.emplace_back(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); k++)
    if (ranges[k].first < ranges[k - 1].second)
      f.fail("tensors overlap: data_offsets [" + std::to_string(ranges[k - 1].first) + ", " + std::to_string(ranges[k - 1].second) +
             "] and [" + std::to_string(ranges[k].first) + ", " + std::to_string(ranges[k].second) + "]");
  return out;
}

std::vector<std::pair<std::string, std::string>> safetensors_metadata(const std::string& path) {
  File f(path);
  Header h = read_header(f);
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& [name, entry] : h.json.obj) {
    if (name != "__metadata__") continue;
    if (entry.kind != Json::Kind::Object) f.fail("__metadata__ is not an object");
    for (auto& [k, v] : entry.obj) {
      if (v.kind != Json::Kind::String) f.fail("__metadata__ value for \"" + k + "\" is not a string");
      out.emplace_back(k, v.str);
    }
  }
  return out;
}

// ---------------- write ----------------

void safetensors_write(const std::string& path, const std::vector<std::pair<std::string, TensorData>>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::string j = "{";
  if (!metadata.empty()) {
    j += "\"__metadata__\":{";
    for (size_t k = 0; k < metadata.size(); k++) {
      if (k) j += ',';
      j += json_quote(metadata[k].first), j += ':', j += json_quote(metadata[k].second);
    }
    j += "}";
  }
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::unordered_set<std::string> seen;
  for (auto& [name, t] : tensors) {
    if (name == "__metadata__") throw Error("safetensors_write " + path + ": \"__metadata__\" is reserved, rename the tensor");
    if (!seen.insert(name).second) throw Error("safetensors_write " + path + ": duplicate tensor name \"" + name + "\"");
    int64_t numel = 1;
    for (int64_t s : t.shape) {
      if (s < 0) throw Error("safetensors_write " + path + ": tensor \"" + name + "\" has negative shape " + to_str(t.shape));
      numel *= s;
    }
    int64_t nbytes = numel * t.dtype.itemsize();
    if (nbytes > 0 && t.data == nullptr) throw Error("safetensors_write " + path + ": tensor \"" + name + "\" has no data pointer");
    std::string dt;
    try {
      dt = safe_dtype_name(t.dtype);
    } catch (const Error& e) {
      throw Error("safetensors_write " + path + ": tensor \"" + name + "\": " + e.what());
    }
    if (j.size() > 1) j += ',';
    j += json_quote(name);
    j += ":{\"dtype\":\"" + dt + "\",\"shape\":[";
    for (size_t k = 0; k < t.shape.size(); k++) j += (k ? "," : "") + std::to_string(t.shape[k]);
    j += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + nbytes) + "]}";
    offset += nbytes;
    sizes.push_back(nbytes);
  }
  j += "}";
  j.append((8 - j.size() % 8) % 8, ' ');   // the data then starts 8-byte aligned, as the reference writes it
  // written beside it and renamed over it: tensors loaded from the old file may still map its bytes
  // (Buffer::map_from_disk), and the old inode stays theirs; truncating it in place would change them
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("safetensors_write: cannot open " + tmp + " for writing (" + std::strerror(errno) + ")");
  uint8_t len8[8];
  for (int k = 0; k < 8; k++) len8[k] = uint8_t(uint64_t(j.size()) >> (8 * k));
  out.write(reinterpret_cast<const char*>(len8), 8);
  out.write(j.data(), std::streamsize(j.size()));
  for (size_t k = 0; k < tensors.size(); k++)
    if (sizes[k] > 0) out.write(static_cast<const char*>(tensors[k].second.data), sizes[k]);
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string e = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error("safetensors_write: writing " + path + " failed (" + e + ")");
  }
}

}  // namespace tg::formats
