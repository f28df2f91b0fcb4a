// File formats under tg::nn::state / datasets: safetensors, PyTorch checkpoints, IDX.
// Fixtures in tests/data come from libtorch (make_torch_fixture.cpp) and a torch.save stand-in
// (make_torch_py_fixture.py); malformed inputs must throw tg::Error naming the file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "nn/formats.hpp"
#include "tg/json.hpp"
#include "tg/state.hpp"

using namespace tg;
using namespace tg::formats;
namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(TG_SOURCE_DIR) / "tests" / "data";

class TmpDir {
 public:
  TmpDir() : dir_(fs::temp_directory_path() / ("tg_formats_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    fs::create_directories(dir_);
  }
  ~TmpDir() { fs::remove_all(dir_); }
  std::string file(const std::string& name, const std::string& bytes) const {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return p;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
};

template <typename T>
std::vector<T> values(const RawTensor& t) {
  std::vector<uint8_t> b = raw_bytes(t);
  EXPECT_EQ(int64_t(b.size()), t.nbytes);
  EXPECT_EQ(b.size() % sizeof(T), 0u);
  std::vector<T> out(b.size() / sizeof(T));
  std::memcpy(out.data(), b.data(), out.size() * sizeof(T));
  return out;
}

const RawTensor& get(const RawDict& d, const std::string& name) {
  for (auto& [k, v] : d)
    if (k == name) return v;
  throw std::runtime_error("no tensor " + name);
}

std::vector<std::string> names(const RawDict& d) {
  std::vector<std::string> out;
  for (auto& [k, v] : d) out.push_back(k);
  return out;
}

// Expects `fn` to throw tg::Error whose message names `path` and contains `what`.
template <typename F>
void expect_error(F fn, const std::string& path, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no error for " << path << " (expected \"" << what << "\")";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "expected \"" << what << "\" in: " << msg;
  }
}

void le(std::string& s, uint64_t v, int n) {
  for (int k = 0; k < n; k++) s += char(v >> (8 * k));
}

// safetensors bytes from a header text and a data blob
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out;
  le(out, header.size(), 8);
  return out + header + data;
}

// A zip of stored entries, optionally with zip64 records (as a >4 GB archive has them).
std::string zip_bytes(const std::vector<std::pair<std::string, std::string>>& entries, bool zip64 = false) {
  std::string out, cd;
  for (auto& [name, data] : entries) {
    uint64_t lho = out.size();
    le(out, 0x04034b50, 4), le(out, 20, 2), le(out, 0, 2), le(out, 0, 2), le(out, 0, 4), le(out, 0, 4);
    le(out, data.size(), 4), le(out, data.size(), 4), le(out, name.size(), 2), le(out, 0, 2);
    out += name + data;
    std::string extra;
    if (zip64) le(extra, 1, 2), le(extra, 24, 2), le(extra, data.size(), 8), le(extra, data.size(), 8), le(extra, lho, 8);
    le(cd, 0x02014b50, 4), le(cd, 45, 2), le(cd, 45, 2), le(cd, 0, 2), le(cd, 0, 2), le(cd, 0, 4), le(cd, 0, 4);
    le(cd, zip64 ? 0xFFFFFFFF : data.size(), 4), le(cd, zip64 ? 0xFFFFFFFF : data.size(), 4);
    le(cd, name.size(), 2), le(cd, extra.size(), 2), le(cd, 0, 2), le(cd, 0, 2), le(cd, 0, 2), le(cd, 0, 4);
    le(cd, zip64 ? 0xFFFFFFFF : lho, 4);
    cd += name + extra;
  }
  uint64_t cd_off = out.size(), n = entries.size();
  out += cd;
  if (zip64) {
    uint64_t rec = out.size();
    le(out, 0x06064b50, 4), le(out, 44, 8), le(out, 45, 2), le(out, 45, 2), le(out, 0, 4), le(out, 0, 4);
    le(out, n, 8), le(out, n, 8), le(out, cd.size(), 8), le(out, cd_off, 8);
    le(out, 0x07064b50, 4), le(out, 0, 4), le(out, rec, 8), le(out, 1, 4);
  }
  le(out, 0x06054b50, 4), le(out, 0, 2), le(out, 0, 2), le(out, zip64 ? 0xFFFF : n, 2), le(out, zip64 ? 0xFFFF : n, 2);
  le(out, zip64 ? 0xFFFFFFFF : cd.size(), 4), le(out, zip64 ? 0xFFFFFFFF : cd_off, 4), le(out, 0, 2);
  return out;
}

// Pickle pieces as torch.save writes them (protocol 2).
namespace pk {
std::string uni(const std::string& s) { std::string o = "X"; le(o, s.size(), 4); return o + s; }
std::string int1(int v) { return std::string("K") + char(v); }
std::string glob(const std::string& m, const std::string& n) { return "c" + m + "\n" + n + "\n"; }
std::string ints(const std::vector<int>& v) {
  std::string o = "(";
  for (int x : v) o += int1(x);
  return o + "t";
}
std::string tensor(const std::string& storage_type, const std::string& key, int numel, int offset, const std::vector<int>& size,
                   const std::vector<int>& stride) {
  return glob("torch._utils", "_rebuild_tensor_v2") + "((" + uni("storage") + glob("torch", storage_type) + uni(key) + uni("cpu") +
         int1(numel) + "tQ" + int1(offset) + ints(size) + ints(stride) + "\x89" + glob("collections", "OrderedDict") + ")Rt" + "R";
}
// {name: tensor, ...} as a full pickle
std::string state_dict(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string o = "\x80\x02}(";
  for (auto& [k, v] : items) o += uni(k) + v;
  return o + "u.";
}
}  // namespace pk

std::string f32_bytes(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

}  // namespace

// ======================= safetensors =======================

TEST(Safetensors, RoundTripsEveryDtype) {
  TmpDir tmp;
  std::vector<std::vector<uint8_t>> blobs;
  std::vector<std::pair<std::string, formats::TensorData>> tensors;
  const char* expect_names[] = {"BOOL", "I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "BF16", "F32", "F64"};
  for (int k = 0; k < dtypes::num_dtypes; k++) {
    DType dt = dtypes::all()[k];
    std::vector<int64_t> shape = {2, k % 3 + 1};
    blobs.emplace_back(size_t(prod(shape) * dt.itemsize()));
    for (size_t b = 0; b < blobs.back().size(); b++) blobs.back()[b] = uint8_t(b * 7 + k);
    tensors.push_back({"t." + dt.name(), formats::TensorData{dt, shape, blobs.back().data()}});
  }
  float scalar = 3.5f;
  tensors.push_back({"scalar", formats::TensorData{dtypes::float32, {}, &scalar}});
  tensors.push_back({"empty", formats::TensorData{dtypes::int64, {0, 4}, nullptr}});
  std::string path = tmp.path("all.safetensors");
  safetensors_write(path, tensors, {{"format", "pt"}, {"note", "quote\" and \\ and \n"}});

  // the data starts 8-byte aligned, as the reference pads the header with spaces
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u);

  RawDict d = safetensors_read(path);
  ASSERT_EQ(d.size(), tensors.size());
  for (size_t k = 0; k < tensors.size(); k++) {
    EXPECT_EQ(d[k].first, tensors[k].first);   // file order kept
    EXPECT_EQ(d[k].second.dtype, tensors[k].second.dtype);
    EXPECT_EQ(d[k].second.shape, tensors[k].second.shape);
    EXPECT_EQ(d[k].second.file, path);
    EXPECT_EQ(d[k].second.bytes, nullptr);   // a file slice, no copy
    EXPECT_EQ((d[k].second.offset - int64_t(8 + n)) >= 0, true);
    if (k < blobs.size()) {
      EXPECT_EQ(raw_bytes(d[k].second), blobs[k]) << d[k].first;
      EXPECT_EQ(safe_dtype_name(d[k].second.dtype), expect_names[k]);
      EXPECT_EQ(safe_dtype(expect_names[k]), d[k].second.dtype);
    }
  }
  EXPECT_EQ(values<float>(get(d, "scalar")), std::vector<float>{3.5f});
  EXPECT_EQ(get(d, "empty").nbytes, 0);
  auto meta = safetensors_metadata(path);
  ASSERT_EQ(meta.size(), 2u);
  EXPECT_EQ(meta[1].second, "quote\" and \\ and \n");
}

TEST(Safetensors, ReadsHandWrittenHeaderInFileOrder) {
  TmpDir tmp;
  // keys out of alphabetical order, an escaped name, whitespace, metadata in the middle
  std::string header = R"( { "zeta" : {"dtype":"F32","shape":[2],"data_offsets":[8,16]},
    "__metadata__": {"a": "b"},
    "al\u00e9\"pha": {"data_offsets":[0,8],"shape":[1,2],"dtype":"I32"} } )";
  std::string data = f32_bytes({0, 0}) + f32_bytes({1.5f, -2.0f});
  int32_t ints[2] = {7, -9};
  std::memcpy(data.data(), ints, 8);
  std::string path = tmp.file("h.safetensors", safetensors_bytes(header, data));
  RawDict d = safetensors_read(path);
  ASSERT_EQ(names(d), (std::vector<std::string>{"zeta", "al\xc3\xa9\"pha"}));
  EXPECT_EQ(values<float>(d[0].second), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(values<int32_t>(d[1].second), (std::vector<int32_t>{7, -9}));
  EXPECT_EQ(d[1].second.shape, (std::vector<int64_t>{1, 2}));
}

TEST(Safetensors, MalformedFilesThrow) {
  TmpDir tmp;
  auto entry = [](const std::string& dt, const std::string& shape, const std::string& offs) {
    return "{\"dtype\":\"" + dt + "\",\"shape\":" + shape + ",\"data_offsets\":" + offs + "}";
  };
  std::string data(16, '\0');
  struct Case {
    std::string bytes, what;
  };
  std::vector<Case> cases = {
      {"abc", "need at least 8"},
      {safetensors_bytes("{}", "").substr(0, 8), "goes beyond the file"},
      {safetensors_bytes("{\"a\":", ""), "bad JSON"},
      {safetensors_bytes("[1,2]", ""), "not an object"},
      {safetensors_bytes("{\"a\":1}", ""), "is not an object"},
      {safetensors_bytes("{\"a\":{\"dtype\":\"F32\"}}", data), "no \"shape\""},
      {safetensors_bytes("{\"a\":" + entry("F33", "[1]", "[0,4]") + "}", data), "unknown dtype \"F33\""},
      {safetensors_bytes("{\"a\":" + entry("F32", "[1]", "[0,40]") + "}", data), "beyond the data"},
      {safetensors_bytes("{\"a\":" + entry("F32", "[2]", "[0,4]") + "}", data), "needs 8"},
      {safetensors_bytes("{\"a\":" + entry("F32", "[1]", "[8,4]") + "}", data), "end before begin"},
      {safetensors_bytes("{\"a\":" + entry("F32", "[-1]", "[0,4]") + "}", data), "non-negative integer"},
      {safetensors_bytes("{\"a\":" + entry("F32", "[1]", "[0]") + "}", data), "[begin, end] pair"},
      {safetensors_bytes("{\"a\":" + entry("F32", "[2]", "[0,8]") + ",\"b\":" + entry("F32", "[2]", "[4,12]") + "}", data), "overlap"},
      {safetensors_bytes("{\"a\":" + entry("F32", "[1]", "[0,4]") + ",\"a\":" + entry("F32", "[1]", "[4,8]") + "}", data), "duplicate key"},
      {safetensors_bytes("{\"a\":" + entry("F32", "[4294967296,4294967296,4294967296]", "[0,4]") + "}", data), "overflows"},
      {safetensors_bytes("{\"a\\q\":1}", ""), "bad escape"},
      {safetensors_bytes("{\"a\":tru}", ""), "unexpected character"},
      {safetensors_bytes("{} x", ""), "trailing characters"},
      {safetensors_bytes(std::string(100, '[') + std::string(100, ']'), ""), "nesting deeper"},
  };
  for (size_t k = 0; k < cases.size(); k++) {
    std::string path = tmp.file("bad" + std::to_string(k) + ".safetensors", cases[k].bytes);
    expect_error([&] { safetensors_read(path); }, path, cases[k].what);
  }
  expect_error([&] { safetensors_read(tmp.path("missing.safetensors")); }, tmp.path("missing.safetensors"), "cannot open");
}

TEST(Safetensors, WriteRejectsBadInput) {
  TmpDir tmp;
  float x = 1;
  std::string p = tmp.path("w.safetensors");
  expect_error([&] { safetensors_write(p, {{"a", {dtypes::float32, {1}, &x}}, {"a", {dtypes::float32, {1}, &x}}}); }, p, "duplicate tensor name");
  expect_error([&] { safetensors_write(p, {{"a", {dtypes::float32.vec(4), {1}, &x}}}); }, p, "cannot be stored");
  expect_error([&] { safetensors_write(p, {{"a", {dtypes::float32, {2}, nullptr}}}); }, p, "no data pointer");
  expect_error([&] { safetensors_write(p, {{"__metadata__", {dtypes::float32, {1}, &x}}}); }, p, "reserved");
  expect_error([&] { safetensors_write(tmp.path("no/such/dir/x.safetensors"), {}); }, "no/such/dir", "cannot open");
}

// ======================= the JSON reader (tg/json.hpp) =======================

// The one reader behind safetensors headers, GPT-2's config/encoder files and the PROFILE trace checks.
TEST(Json, ValuesAndTheirKinds) {
  Json j = json_parse(R"( {"i": -42, "f": 2.5e-1, "big": 99999999999999999999, "s": "a\u00e9\ud83d\ude00\n",
                          "l": [true, false, null], "o": {}} )", "t.json");
  ASSERT_EQ(j.kind, Json::Kind::Object);
  EXPECT_EQ(j.obj.front().first, "i");   // file order
  EXPECT_TRUE(j.find("i")->is_int);
  EXPECT_EQ(j.find("i")->i, -42);
  EXPECT_FALSE(j.find("f")->is_int);
  EXPECT_DOUBLE_EQ(j.find("f")->num, 0.25);
  EXPECT_FALSE(j.find("big")->is_int);   // past int64: a double, never a wrapped int
  EXPECT_DOUBLE_EQ(j.find("big")->num, 1e20);
  EXPECT_EQ(j.find("s")->str, "a\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_EQ(j.find("l")->arr.size(), 3u);
  EXPECT_EQ(j.find("l")->arr[2].kind, Json::Kind::Null);
  EXPECT_EQ(j.find("missing"), nullptr);
  EXPECT_EQ(json_quote("a\"b\\\n\x01"), "\"a\\\"b\\\\\\n\\u0001\"");
  EXPECT_EQ(json_parse(json_quote("x\ty\xc3\xa9"), "q").str, "x\ty\xc3\xa9");   // quote and parse round-trip
}

TEST(Json, MalformedNamesTheSourceAndByte) {
  expect_error([] { json_parse("[1, 2", "cfg.json"); }, "cfg.json", "unexpected end at byte 5");
  expect_error([] { json_parse("{\"a\": 01}", "cfg.json"); }, "cfg.json", "leading zero");
  expect_error([] { json_parse("\"\\udc00\"", "cfg.json"); }, "cfg.json", "lone low surrogate");
  // a duplicate among many keys (encoder.json has 50k) is found without comparing every pair
  std::string big = "{";
  for (int k = 0; k < 20000; k++) big += "\"k" + std::to_string(k) + "\":" + std::to_string(k) + ",";
  EXPECT_EQ(json_parse(big + "\"end\":0}", "big.json").obj.size(), 20001u);
  expect_error([&] { json_parse(big + "\"k123\":0}", "big.json"); }, "big.json", "duplicate key \"k123\"");
}

// ======================= PyTorch checkpoints =======================

TEST(TorchLoad, LibtorchPickleSave) {
  std::string path = (kData / "libtorch_state.pt").string();
  RawDict d = torch_load(path);
  EXPECT_EQ(names(d), (std::vector<std::string>{"weight", "bias", "ids", "i32", "half", "bf16", "mask", "u8", "i8", "i16",
                                               "transposed", "row", "every_other", "scalar"}));
  EXPECT_EQ(get(d, "weight").dtype, dtypes::float32);
  EXPECT_EQ(get(d, "weight").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(get(d, "weight").bytes, nullptr);   // contiguous: stays in the file
  EXPECT_EQ(get(d, "weight").file, path);
  EXPECT_EQ(values<float>(get(d, "weight")), (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}));
  EXPECT_EQ(values<double>(get(d, "bias")), (std::vector<double>{-1.0, 2.5, 3.25}));
  EXPECT_EQ(values<int64_t>(get(d, "ids")), (std::vector<int64_t>{-2, -1, 0, 1}));
  EXPECT_EQ(values<int32_t>(get(d, "i32")), (std::vector<int32_t>{-7, 0, 70000}));
  EXPECT_EQ(get(d, "half").dtype, dtypes::float16);
  EXPECT_EQ(values<uint16_t>(get(d, "half")), (std::vector<uint16_t>{0x3E00, 0xC000}));   // 1.5, -2.0
  EXPECT_EQ(get(d, "bf16").dtype, dtypes::bfloat16);
  EXPECT_EQ(values<uint16_t>(get(d, "bf16")), (std::vector<uint16_t>{0x3F80, 0xBF00}));   // 1.0, -0.5
  EXPECT_EQ(get(d, "mask").dtype, dtypes::bool_);
  EXPECT_EQ(values<uint8_t>(get(d, "mask")), (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(values<uint8_t>(get(d, "u8")), (std::vector<uint8_t>{0, 200, 255}));
  EXPECT_EQ(values<int8_t>(get(d, "i8")), (std::vector<int8_t>{-128, 5}));
  EXPECT_EQ(values<int16_t>(get(d, "i16")), (std::vector<int16_t>{-300, 300}));
  // views of one 3x4 storage [0..11]
  const RawTensor& tr = get(d, "transposed");
  EXPECT_EQ(tr.shape, (std::vector<int64_t>{4, 3}));
  EXPECT_NE(tr.bytes, nullptr);   // strided: materialized
  EXPECT_EQ(values<float>(tr), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(get(d, "row").bytes, nullptr);
  EXPECT_EQ(values<float>(get(d, "row")), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(get(d, "every_other").shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(values<float>(get(d, "every_other")), (std::vector<float>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(get(d, "scalar").shape, std::vector<int64_t>{});
  EXPECT_EQ(values<float>(get(d, "scalar")), std::vector<float>{7});
}

void check_torchsave_fixture(const RawDict& d) {
  EXPECT_EQ(names(d), (std::vector<std::string>{"model.fc.weight", "model.fc.bias", "model.bn.running_mean", "model.bn.num_batches_tracked",
                                               "permuted", "layers.0", "layers.1"}));
  EXPECT_EQ(get(d, "model.fc.weight").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values<float>(get(d, "model.fc.weight")), (std::vector<float>{0.5f, -1, 2, 3.5f, -4.25f, 8}));
  EXPECT_EQ(values<float>(get(d, "model.fc.bias")), (std::vector<float>{0.25f, -0.75f}));
  EXPECT_EQ(get(d, "model.bn.running_mean").dtype, dtypes::float64);
  EXPECT_EQ(values<double>(get(d, "model.bn.running_mean")), (std::vector<double>{2.5, -3.5}));
  EXPECT_EQ(get(d, "model.bn.num_batches_tracked").shape, std::vector<int64_t>{});
  EXPECT_EQ(values<int64_t>(get(d, "model.bn.num_batches_tracked")), std::vector<int64_t>{123456789012});
  EXPECT_EQ(get(d, "permuted").dtype, dtypes::int32);
  EXPECT_EQ(values<int32_t>(get(d, "permuted")), (std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(values<float>(get(d, "layers.0")), (std::vector<float>{3.5f, -4.25f, 8}));
  EXPECT_EQ(values<float>(get(d, "layers.1")), (std::vector<float>{0.25f, -0.75f}));
}

TEST(TorchLoad, TorchSaveZip) {
  RawDict d = torch_load((kData / "torchsave_zip.pt").string());
  check_torchsave_fixture(d);
  EXPECT_NE(get(d, "model.bn.running_mean").bytes, nullptr);   // its zip entry is deflated
  EXPECT_EQ(get(d, "model.fc.bias").bytes, nullptr);
}

TEST(TorchLoad, LegacyFormat) {
  std::string path = (kData / "torchsave_legacy.pt").string();
  RawDict d = torch_load(path);
  check_torchsave_fixture(d);
  EXPECT_EQ(get(d, "model.fc.weight").file, path);
}

TEST(TorchLoad, Zip64AndGeneralStrides) {
  TmpDir tmp;
  std::vector<float> v(24);
  for (int k = 0; k < 24; k++) v[size_t(k)] = float(k);
  // size (2,3,4) with strides (1,2,6): a permutation of a (4,3,2) storage, plus a tensor used as a top-level scalar
  std::string pkl = pk::state_dict({{"p", pk::tensor("FloatStorage", "0", 24, 0, {2, 3, 4}, {1, 2, 6})},
                                    {"s", pk::tensor("FloatStorage", "0", 24, 23, {}, {})}});
  std::string path = tmp.file("z64.pt", zip_bytes({{"a/data.pkl", pkl}, {"a/data/0", f32_bytes(v)}}, true));
  RawDict d = torch_load(path);
  ASSERT_EQ(names(d), (std::vector<std::string>{"p", "s"}));
  std::vector<float> want;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) want.push_back(float(i + 2 * j + 6 * k));
  EXPECT_EQ(values<float>(get(d, "p")), want);
  EXPECT_EQ(values<float>(get(d, "s")), std::vector<float>{23});
}

TEST(TorchLoad, MalformedCheckpointsThrow) {
  TmpDir tmp;
  std::string good_t = pk::tensor("FloatStorage", "0", 4, 0, {4}, {1});
  std::string data = f32_bytes({1, 2, 3, 4});
  auto ckpt = [&](const std::string& pkl, const std::string& storage = "") {
    return zip_bytes({{"a/data.pkl", pkl}, {"a/data/0", storage.empty() ? data : storage}});
  };
  struct Case {
    std::string bytes, what;
  };
  std::vector<Case> cases = {
      {"hello world", "not a PyTorch checkpoint"},
      {"PK\x03\x04 truncated", "no end of central directory"},
      {zip_bytes({{"data.pkl", "."}}), "has no archive folder"},
      {zip_bytes({{"a/other", "x"}}), "no \"a/data.pkl\""},
      {ckpt("\x80\x02\xff."), "unknown or unsupported opcode 0xff"},
      {ckpt("\x80\x02."), "stack underflow"},
      {ckpt("\x80\x02(u."), "stack underflow"},
      {ckpt("\x80\x02}u."), "without a MARK"},
      {ckpt("\x80\x02h\x05."), "memo key 5"},
      {ckpt("\x80\x02}(" + pk::uni("w")), "truncated pickle"},
      {ckpt("\x80\x02X\xff\xff\xff\x7f."), "truncated pickle"},
      {ckpt(pk::state_dict({{"w", good_t}}), f32_bytes({1, 2})), "claims 16 bytes but holds 8"},
      {ckpt(pk::state_dict({{"w", pk::tensor("FloatStorage", "0", 4, 2, {4}, {1})}})), "reach element 5"},
      {ckpt(pk::state_dict({{"w", pk::tensor("FloatStorage", "7", 4, 0, {4}, {1})}})), "no entry a/data/7"},
      {ckpt(pk::state_dict({{"w", pk::tensor("ComplexFloatStorage", "0", 4, 0, {4}, {1})}})), "unsupported storage type"},
      {ckpt(pk::state_dict({{"w", pk::tensor("FloatStorage", "0", 4, 0, {2, 2}, {1})}})), "differ in length"},
      {ckpt("\x80\x02" + pk::glob("torch._utils", "_rebuild_tensor_v2") + pk::ints({1, 2, 3, 4}) + "R."), "first argument is not a storage"},
      {ckpt("\x80\x02" + pk::ints({1}) + "Q."), "persistent id"},
      {ckpt("\x80\x02K\x01)R."), "not a class or function"},
  };
  for (size_t k = 0; k < cases.size(); k++) {
    std::string path = tmp.file("bad" + std::to_string(k) + ".pt", cases[k].bytes);
    expect_error([&] { torch_load(path); }, path, cases[k].what);
  }
  // every truncation of a real checkpoint throws cleanly
  std::ifstream in(kData / "libtorch_state.pt", std::ios::binary);
  std::string full((std::istreambuf_iterator<char>(in)), {});
  for (size_t n : {size_t(0), size_t(3), full.size() / 2, full.size() - 1}) {
    std::string path = tmp.file("cut.pt", full.substr(0, n));
    EXPECT_THROW(torch_load(path), Error) << n;
  }
}

// ======================= IDX =======================

namespace {
std::string idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const std::string& be_data) {
  std::string out = {0, 0, char(type), char(dims.size())};
  for (uint32_t d : dims) out += {char(d >> 24), char(d >> 16), char(d >> 8), char(d)};
  return out + be_data;
}
void write_gz(const std::string& path, const std::string& bytes) {
  gzFile g = gzopen(path.c_str(), "wb");
  ASSERT_NE(g, nullptr);
  gzwrite(g, bytes.data(), unsigned(bytes.size()));
  gzclose(g);
}
}  // namespace

TEST(Idx, ReadsEveryTypePlainAndGzip) {
  TmpDir tmp;
  struct Case {
    uint8_t type;
    DType dt;
    std::string be;   // big-endian bytes of two values
    std::vector<uint8_t> host;
  };
  double dv = -2.5;
  uint64_t dbits = std::bit_cast<uint64_t>(dv);
  std::string dbe;
  for (int k = 7; k >= 0; k--) dbe += char(dbits >> (8 * k));
  std::vector<uint8_t> dhost(8);
  std::memcpy(dhost.data(), &dv, 8);
  std::vector<Case> cases = {
      {0x08, dtypes::uint8, "\xff\x01", {0xff, 0x01}},
      {0x09, dtypes::int8, "\xfe\x01", {0xfe, 0x01}},
      {0x0B, dtypes::int16, std::string("\x01\x02\xff\xfe", 4), {0x02, 0x01, 0xfe, 0xff}},
      {0x0C, dtypes::int32, std::string("\x00\x00\x01\x00\xff\xff\xff\xff", 8), {0, 1, 0, 0, 0xff, 0xff, 0xff, 0xff}},
      {0x0D, dtypes::float32, std::string("\x3f\xc0\x00\x00\xc0\x00\x00\x00", 8), {0, 0, 0xc0, 0x3f, 0, 0, 0, 0xc0}},   // 1.5, -2
      {0x0E, dtypes::float64, dbe + dbe, {}},
  };
  cases.back().host = dhost, cases.back().host.insert(cases.back().host.end(), dhost.begin(), dhost.end());
  for (auto& c : cases) {
    for (bool gz : {false, true}) {
      std::string bytes = idx_bytes(c.type, {2, 1}, c.be), path = tmp.path("x.idx" + std::string(gz ? ".gz" : ""));
      if (gz) write_gz(path, bytes);
      else tmp.file("x.idx", bytes);
      IdxArray a = idx_read(path);
      EXPECT_EQ(a.dtype, c.dt);
      EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 1}));
      EXPECT_EQ(a.data, c.host) << c.dt.str() << (gz ? " gz" : "");
    }
  }
}

TEST(Idx, MalformedFilesThrow) {
  TmpDir tmp;
  struct Case {
    std::string bytes, what;
  };
  std::vector<Case> cases = {
      {"", "ends inside the magic"},
      {std::string("\x01\x00\x08\x01", 4), "not an IDX file"},
      {std::string("\x00\x00\x07\x01", 4), "unknown IDX element type 0x07"},
      {idx_bytes(0x08, {3}, "ab").substr(0, 6), "ends inside the dimensions"},
      {idx_bytes(0x08, {3}, "ab"), "needs 3 data bytes, the file has 2"},
      {idx_bytes(0x0C, {2}, "abcdefg"), "needs 8 data bytes"},
      {idx_bytes(0x08, {2}, "abc"), "trailing bytes"},
      {idx_bytes(0x0E, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, ""), "overflows"},
  };
  for (size_t k = 0; k < cases.size(); k++) {
    std::string path = tmp.file("bad" + std::to_string(k), cases[k].bytes);
    expect_error([&] { idx_read(path); }, path, cases[k].what);
  }
  // a gzip stream cut short
  std::string gz_path = tmp.path("full.gz");
  write_gz(gz_path, idx_bytes(0x08, {1000}, std::string(1000, 'x')));
  std::ifstream in(gz_path, std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), {});
  std::string cut = tmp.file("cut.gz", gz.substr(0, gz.size() - 12));
  EXPECT_THROW(idx_read(cut), Error);
  expect_error([&] { idx_read(tmp.path("nope")); }, tmp.path("nope"), "cannot open");
}

TEST(Idx, FindsPlainOrGzip) {
  TmpDir tmp;
  std::string gz = tmp.file("a-images.gz", "x"), plain = tmp.file("b-images", "y");
  tmp.file("b-images.gz", "z");
  EXPECT_EQ(find_idx_file(tmp.path(""), "a-images"), gz);
  EXPECT_EQ(find_idx_file(tmp.path(""), "b-images"), plain);   // the uncompressed copy wins
  expect_error([&] { find_idx_file(tmp.path(""), "c-images"); }, "c-images.gz", "not found");
}

TEST(Idx, FashionMnistFromDebian) {
  const std::string dir = nn::datasets::default_dir("fashion-mnist");
  if (!fs::exists(dir + "/train-images-idx3-ubyte.gz")) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  IdxArray x = idx_read(find_idx_file(dir, "train-images-idx3-ubyte"));
  EXPECT_EQ(x.shape, (std::vector<int64_t>{60000, 28, 28}));
  EXPECT_EQ(x.dtype, dtypes::uint8);
  EXPECT_EQ(x.data.size(), 60000u * 28 * 28);
  IdxArray y = idx_read(find_idx_file(dir, "train-labels-idx1-ubyte"));
  EXPECT_EQ(y.shape, std::vector<int64_t>{60000});
  EXPECT_EQ(y.dtype, dtypes::uint8);
  std::vector<int> counts(10, 0);
  for (uint8_t l : y.data) {
    ASSERT_LT(l, 10);
    counts[l]++;
  }
  for (int c : counts) EXPECT_EQ(c, 6000);   // Fashion-MNIST's training set is balanced
  IdxArray t = idx_read(find_idx_file(dir, "t10k-images-idx3-ubyte"));
  EXPECT_EQ(t.shape, (std::vector<int64_t>{10000, 28, 28}));
}
