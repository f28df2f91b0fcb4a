// IDX, the MNIST file format: magic 00 00 TT NN (TT the element type, NN the number of dims),
// NN big-endian uint32 dims, then the big-endian data. gzip-compressed files read the same way:
// zlib's gzread passes plain files through untouched.
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <filesystem>

#include "nn/formats.hpp"

namespace tg::formats {

namespace {

struct IdxType {
  uint8_t code;
  DType dtype;
  const char* name;
};
constexpr IdxType kIdxTypes[] = {{0x08, dtypes::uint8, "ubyte"},   {0x09, dtypes::int8, "byte"},
                                 {0x0B, dtypes::int16, "short"},   {0x0C, dtypes::int32, "int"},
                                 {0x0D, dtypes::float32, "float"}, {0x0E, dtypes::float64, "double"}};

// gzFile owner whose reads throw on corrupt or truncated data.
class GzReader {
 public:
  explicit GzReader(const File& f) : f_(f), gz_(gzopen(f.path().c_str(), "rb")) {
    if (!gz_) f_.fail("cannot open for reading");
  }
  ~GzReader() { gzclose(gz_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the (decompressed) stream.
  size_t read(uint8_t* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      int got = gzread(gz_, dst + done, static_cast<unsigned>(std::min<size_t>(n - done, 1u << 20)));
      if (got < 0) check();
      if (got <= 0) break;
      done += size_t(got);
    }
    check();
    return done;
  }
  void exact(uint8_t* dst, size_t n, const std::string& what) {
    if (read(dst, n) != n) f_.fail("truncated: the file ends inside the " + what);
  }

 private:
  const File& f_;
  gzFile gz_;
  void check() {
    int err = Z_OK;
    const char* msg = gzerror(gz_, &err);
    if (err != Z_OK && err != Z_STREAM_END) f_.fail(std::string("bad gzip data (") + (msg ? msg : "zlib error") + ")");
  }
};

void to_host_order(std::vector<uint8_t>& data, int itemsize) {
  if (itemsize == 1 || std::endian::native == std::endian::big) return;
  for (size_t k = 0; k + size_t(itemsize) <= data.size(); k += size_t(itemsize)) std::reverse(&data[k], &data[k] + itemsize);
}

}  // namespace

IdxArray idx_read(const std::string& path) {
  File f(path);
  GzReader gz(f);
  uint8_t magic[4];
  gz.exact(magic, 4, "magic number");
  if (magic[0] != 0 || magic[1] != 0)
    f.fail("not an IDX file: magic starts with " + std::to_string(magic[0]) + " " + std::to_string(magic[1]) + ", expected 0 0");
  const IdxType* type = nullptr;
  for (auto& t : kIdxTypes)
    if (t.code == magic[2]) type = &t;
  if (!type)
    f.fail("unknown IDX element type 0x" + std::string(1, "0123456789abcdef"[magic[2] >> 4]) +
           "0123456789abcdef"[magic[2] & 15] + " (known: 08 ubyte, 09 byte, 0B short, 0C int, 0D float, 0E double)");
  IdxArray out;
  out.dtype = type->dtype;
  std::vector<uint8_t> dims(size_t(magic[3]) * 4);
  gz.exact(dims.data(), dims.size(), "dimensions");
  for (size_t k = 0; k < dims.size(); k += 4)
    out.shape.push_back(int64_t(dims[k]) << 24 | int64_t(dims[k + 1]) << 16 | int64_t(dims[k + 2]) << 8 | int64_t(dims[k + 3]));
  const int64_t nbytes = checked_mul(f, checked_numel(f, out.shape, "IDX"), type->dtype.itemsize(), "IDX");
  // Grow with the data actually read, so a corrupt header cannot make us allocate its claimed size.
  while (int64_t(out.data.size()) < nbytes) {
    size_t have = out.data.size(), want = size_t(std::min<int64_t>(nbytes - int64_t(have), 1 << 22));
    out.data.resize(have + want);
    size_t got = gz.read(out.data.data() + have, want);
    if (got < want)
      f.fail("truncated: shape " + to_str(out.shape) + " of " + type->name + " needs " + std::to_string(nbytes) +
             " data bytes, the file has " + std::to_string(have + got));
  }
  uint8_t extra;
  if (gz.read(&extra, 1) != 0) f.fail("trailing bytes after the " + std::to_string(nbytes) + " data bytes of shape " + to_str(out.shape));
  to_host_order(out.data, type->dtype.itemsize());
  return out;
}

std::string find_idx_file(const std::string& dir, const std::string& stem) {
  std::filesystem::path plain = std::filesystem::path(dir) / stem, gz = std::filesystem::path(dir) / (stem + ".gz");
  std::error_code ec;
  if (std::filesystem::is_regular_file(plain, ec)) return plain.string();
  if (std::filesystem::is_regular_file(gz, ec)) return gz.string();
  throw Error("dataset file not found: neither " + plain.string() + " nor " + gz.string() + " exists");
}

}  // namespace tg::formats
