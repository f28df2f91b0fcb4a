// Fuzzes the file-format readers: valid safetensors, PyTorch (libtorch zip, torch.save zip, legacy)
// and IDX (plain, gzip) files are truncated at every length up to a bound, have random bytes
// flipped or set to edge values, and are replaced by random garbage behind the right magic. Every
// read must either succeed with sizes that fit the file, or throw tg::Error; nothing else (another
// exception type, a crash, an out-of-bounds read under the sanitizer build) is allowed.
// FUZZ_SEED and FUZZ_ITERS (mutations per seed file, default 1500) change the run.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "nn/formats.hpp"

using namespace tg;
using namespace tg::formats;
namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(TG_SOURCE_DIR) / "tests" / "data";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}
void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

// A successful read must describe data that exists: sizes match shapes, slices lie inside the file.
void check_raw(const RawDict& d, int64_t file_size) {
  for (auto& [name, t] : d) {
    int64_t numel = 1;
    for (int64_t s : t.shape) {
      ASSERT_GE(s, 0) << name;
      numel *= s;
    }
    ASSERT_EQ(t.nbytes, numel * t.dtype.itemsize()) << name;
    if (t.bytes) {
      ASSERT_EQ(int64_t(t.bytes->size()), t.nbytes) << name;
    } else {
      ASSERT_GE(t.offset, 0) << name;
      ASSERT_LE(t.offset + t.nbytes, file_size) << name;
      ASSERT_EQ(int64_t(raw_bytes(t).size()), t.nbytes) << name;
    }
  }
}

struct Reader {
  const char* name;
  std::function<void(const std::string&, int64_t)> read;   // reads and checks one file
};

const Reader kSafetensors{"safetensors", [](const std::string& p, int64_t n) { check_raw(safetensors_read(p), n); safetensors_metadata(p); }};
const Reader kTorch{"torch_load", [](const std::string& p, int64_t n) { check_raw(torch_load(p), n); }};
const Reader kIdx{"idx_read", [](const std::string& p, int64_t) {
                    IdxArray a = idx_read(p);
                    int64_t numel = 1;
                    for (int64_t s : a.shape) numel *= s;
                    ASSERT_EQ(int64_t(a.data.size()), numel * a.dtype.itemsize());
                  }};

class FormatFuzz : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("tg_fuzz_formats_" + std::to_string(::getpid()));
  std::mt19937_64 rng{uint64_t(getenv("FUZZ_SEED", 20240917))};
  int iters = int(getenv("FUZZ_ITERS", 1500));
  int64_t ok = 0, errors = 0;

  void SetUp() override { fs::create_directories(dir); }
  void TearDown() override { fs::remove_all(dir); }

  // One read of `bytes`; anything but success or tg::Error fails the test with the input saved.
  void attempt(const Reader& r, const std::string& bytes, const std::string& how) {
    std::string path = (dir / "input").string();
    spit(path, bytes);
    try {
      r.read(path, int64_t(bytes.size()));
      ok++;
    } catch (const Error&) {
      errors++;
    } catch (const std::exception& e) {
      std::string keep = (fs::temp_directory_path() / "tg_fuzz_formats_failure").string();
      spit(keep, bytes);
      FAIL() << r.name << " threw " << typeid(e).name() << " (" << e.what() << ") for " << how << "; input kept in " << keep;
    }
  }

  void fuzz(const Reader& r, const std::string& seed) {
    int64_t before = errors;
    attempt(r, seed, "the seed itself");
    ASSERT_EQ(errors, before) << r.name << " rejects its own seed";
    for (size_t n = 0; n < std::min<size_t>(seed.size(), 4096); n++) attempt(r, seed.substr(0, n), "truncation at " + std::to_string(n));
    static const uint8_t edge[] = {0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE};
    for (int it = 0; it < iters && !HasFatalFailure(); it++) {
      std::string m = seed;
      int flips = 1 + int(rng() % 4);
      for (int k = 0; k < flips; k++) {
        size_t at = rng() % m.size();
        m[at] = (rng() & 1) ? char(m[at] ^ (1 << (rng() % 8))) : char(edge[rng() % sizeof(edge)]);
      }
      if (it % 8 == 0) m.resize(rng() % (m.size() + 1));   // and sometimes cut it too
      attempt(r, m, "mutation " + std::to_string(it));
    }
  }

  void garbage(const Reader& r, const std::vector<std::string>& magics) {
    for (int it = 0; it < iters / 4 && !HasFatalFailure(); it++) {
      std::string m = magics[size_t(it) % magics.size()];
      size_t n = rng() % 600;
      for (size_t k = 0; k < n; k++) m += char(rng());
      attempt(r, m, "garbage " + std::to_string(it));
    }
  }
};

std::string safetensors_seed(const fs::path& dir) {
  std::vector<float> f = {1.5f, -2, 3, 4, 5, 6};
  std::vector<int64_t> i = {-1, 7};
  uint16_t h[3] = {0x3C00, 0x4000, 0xC000};
  uint8_t b[2] = {1, 0};
  std::string p = (dir / "seed.safetensors").string();
  safetensors_write(p,
                    {{"layer.weight", {dtypes::float32, {2, 3}, f.data()}},
                     {"layer.bias\u00e9", {dtypes::int64, {2}, i.data()}},
                     {"half", {dtypes::float16, {3}, h}},
                     {"mask", {dtypes::bool_, {2, 1}, b}},
                     {"empty", {dtypes::float64, {0}, nullptr}}},
                    {{"format", "pt"}});
  return slurp(p);
}

std::string idx_seed() {
  std::string out = {0, 0, 0x0B, 2, 0, 0, 0, 3, 0, 0, 0, 5};   // int16, shape (3, 5)
  for (int k = 0; k < 15; k++) out += {char(k >> 8), char(k * 37)};
  return out;
}

std::string gzip(const fs::path& dir, const std::string& bytes) {
  std::string p = (dir / "seed.gz").string();
  gzFile g = gzopen(p.c_str(), "wb");
  gzwrite(g, bytes.data(), unsigned(bytes.size()));
  gzclose(g);
  return slurp(p);
}

}  // namespace

TEST_F(FormatFuzz, Safetensors) {
  fuzz(kSafetensors, safetensors_seed(dir));
  garbage(kSafetensors, {"", std::string("\x10\0\0\0\0\0\0\0{\"", 10), std::string("\x40\0\0\0\0\0\0\0", 8)});
  std::cout << "safetensors: " << ok << " reads ok, " << errors << " rejected\n";
}

TEST_F(FormatFuzz, TorchCheckpoints) {
  for (const char* f : {"libtorch_state.pt", "torchsave_zip.pt", "torchsave_legacy.pt"}) {
    ASSERT_TRUE(fs::exists(kData / f)) << f;
    fuzz(kTorch, slurp((kData / f).string()));
    if (HasFatalFailure()) return;
  }
  garbage(kTorch, {"PK\x03\x04", "\x80\x02", "\x80\x02}(X\x01\0\0\0a"});
  std::cout << "torch_load: " << ok << " reads ok, " << errors << " rejected\n";
}

TEST_F(FormatFuzz, Idx) {
  std::string plain = idx_seed();
  fuzz(kIdx, plain);
  fuzz(kIdx, gzip(dir, plain));
  garbage(kIdx, {std::string("\0\0\x08\x01", 4), std::string("\0\0\x0e\x03", 4), "\x1f\x8b\x08"});
  std::cout << "idx_read: " << ok << " reads ok, " << errors << " rejected\n";
}
