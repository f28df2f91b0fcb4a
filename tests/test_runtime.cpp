// Runtime stage: CPU compile + thread pool, allocator LRU, Buffer views, disk cache, DISK files, errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>

#include "runtime/buffer.hpp"
#include "runtime/cache.hpp"
#include "runtime/device.hpp"
#include "runtime/program.hpp"
#include "runtime/threadpool.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {

std::string temp_path(const std::string& tag) {
  return "/tmp/tg_test_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(rand());
}

// Each test gets its own cache database so runs don't see each other's entries.
class Runtime : public ::testing::Test {
 protected:
  std::string db = temp_path("cache") + ".db";
  Context ctx{std::map<std::string, std::string>{{"CACHEDB", db}}};
  void TearDown() override {
    for (const char* ext : {"", "-wal", "-shm"}) unlink((db + ext).c_str());
  }
};

// out[i] += a[i] + b[i] * vals[0] over [core_lo, core_hi): "+=" on a zeroed out makes a
// double-visited index show up as a wrong value.
const char* kAddSrc = R"(
void add(float* restrict out, const float* restrict a, const float* restrict b, int scale, int lo, int hi) {
  for (int i = lo; i < hi; i++) out[i] += a[i] + b[i] * (float)scale;
}
void add_call(void** bufs, const int* vals, int core_lo, int core_hi) {
  add((float*)bufs[0], (const float*)bufs[1], (const float*)bufs[2], vals[0], core_lo, core_hi);
}
)";

// Records the range each call saw: out[2*k], out[2*k+1] for the k-th chunk (chunks are contiguous).
const char* kRangeSrc = R"(
void ranges_call(void** bufs, const int* vals, int core_lo, int core_hi) {
  int* out = (int*)bufs[0];
  out[2 * core_lo] = core_lo;
  out[2 * core_lo + 1] = core_hi;
}
)";

std::shared_ptr<Buffer> cpu_floats(const std::vector<float>& v) {
  auto b = std::make_shared<Buffer>("CPU", static_cast<int64_t>(v.size()), dtypes::float32);
  b->copyin(v.data(), v.size() * sizeof(float));
  return b;
}

std::vector<float> read_floats(Buffer& b) {
  std::vector<float> r(b.size);
  b.copyout(r.data(), r.size() * sizeof(float));
  return r;
}

}  // namespace

TEST_F(Runtime, CpuCompileAndRunOnThreadPool) {
  Compiled& cpu = get_device("CPU");
  EXPECT_EQ(cpu.renderer_kind(), "C");
  auto prg = cpu.runtime("add", cpu.compiler().compile_cached(kAddSrc));
  const int n = 1003;
  std::vector<float> a(n), b(n);
  std::iota(a.begin(), a.end(), 0.0f);
  for (int i = 0; i < n; i++) b[i] = static_cast<float>(i % 7);
  auto A = cpu_floats(a), B = cpu_floats(b);
  for (int threads : {1, 2, 3, 7, 16}) {
    Context c({{"THREADS", threads}});
    auto out = cpu_floats(std::vector<float>(n, 0.0f));
    double t = (*prg)({out->ptr(), A->ptr(), B->ptr()}, {n, 1, 1}, {1, 1, 1}, {3}, true);
    EXPECT_GT(t, 0.0);
    auto r = read_floats(*out);
    for (int i = 0; i < n; i++) ASSERT_EQ(r[i], a[i] + 3 * b[i]) << "index " << i << " with THREADS=" << threads;
  }
  EXPECT_GE(ThreadPool::global().workers(), 2);
}

TEST_F(Runtime, CpuChunksAreContiguousAndCoverTheRange) {
  Compiled& cpu = get_device("CPU");
  auto prg = cpu.runtime("ranges", cpu.compiler().compile_cached(kRangeSrc));
  auto run = [&](int64_t g, int threads, int slices = 1, int steal = 0) {
    Context c({{"THREADS", threads}, {"CPU_SLICES", slices}, {"CPU_STEAL", steal}});
    Buffer out("CPU", 64, dtypes::int32);
    std::vector<int> init(64, -1), r(64);
    out.copyin(init.data(), init.size() * 4);
    (*prg)({out.ptr()}, {g, 1, 1}, {1, 1, 1}, {}, false);
    out.copyout(r.data(), r.size() * 4);
    std::vector<std::pair<int, int>> chunks;
    for (int i = 0; i < 32; i++)
      if (r[2 * i] != -1) chunks.emplace_back(r[2 * i], r[2 * i + 1]);
    return chunks;
  };
  using C = std::vector<std::pair<int, int>>;
  // CPU_STEAL=0: one static share a thread
  EXPECT_EQ(run(1, 4), (C{{0, 1}}));
  EXPECT_EQ(run(0, 4), (C{{0, 1}}));
  EXPECT_EQ(run(10, 1), (C{{0, 10}}));
  EXPECT_EQ(run(10, 3), (C{{0, 3}, {3, 6}, {6, 10}}));
  EXPECT_EQ(run(3, 8), (C{{0, 1}, {1, 2}, {2, 3}}));   // never more chunks than indices
  // CPU_SLICES=4: 4 slices a thread, taken by whichever thread is free (threadpool.hpp parallel_range)
  EXPECT_EQ(run(20, 2, 4), (C{{0, 2}, {2, 5}, {5, 7}, {7, 10}, {10, 12}, {12, 15}, {15, 17}, {17, 20}}));
  EXPECT_EQ(run(10, 3, 4).size(), 10u);
  // the default (CPU_STEAL=8): each share runs in chunks of ceil(share / 8), from its front by its owner and from
  // its back by a thread done with its own; together they cover the range once, whoever ran them
  EXPECT_EQ(run(10, 3, 1, 8), (C{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 8}, {8, 9}, {9, 10}}));
  EXPECT_EQ(run(10, 1, 1, 8), (C{{0, 10}})) << "one thread: one call";
  for (int steal : {1, 3, 8}) {
    const C chunks = run(32, 2, 1, steal);
    int next = 0;
    for (const auto& [lo, hi] : chunks) {
      EXPECT_EQ(lo, next) << "CPU_STEAL=" << steal << ": a gap or an overlap";
      EXPECT_GT(hi, lo);
      EXPECT_LE(hi - lo, (16 + steal - 1) / steal) << "CPU_STEAL=" << steal;
      next = hi;
    }
    EXPECT_EQ(next, 32) << "CPU_STEAL=" << steal;
  }
}

TEST_F(Runtime, AllocatorReusesFreedBuffers) {
  Allocator& a = get_device("CPU").allocator();
  a.free_cache();
  void* p = a.alloc(4096);
  a.free(p, 4096);
  EXPECT_EQ(a.cached_bytes(), 4096u);
  EXPECT_EQ(a.alloc(4096), p);           // the cached pointer comes back
  EXPECT_EQ(a.cached_bytes(), 0u);
  void* q = a.alloc(8192);               // a different size is a fresh allocation
  EXPECT_NE(q, p);
  a.free(p, 4096);
  a.free(q, 8192);
  EXPECT_EQ(a.cached_bytes(), 4096u + 8192u);
  a.free_cache();
  EXPECT_EQ(a.cached_bytes(), 0u);
  {
    Context c({{"LRU", 0}});
    void* r = a.alloc(100);
    a.free(r, 100);
    EXPECT_EQ(a.cached_bytes(), 0u);
  }
  EXPECT_THROW(a.alloc(0), Error);
}

TEST_F(Runtime, BufferLazyAllocationCopyAndViews) {
  int64_t mem0 = GlobalCounters::mem_used;
  auto buf = std::make_shared<Buffer>("cpu", 6, dtypes::int32);
  EXPECT_FALSE(buf->is_allocated());
  EXPECT_EQ(buf->str(), "<buf real:False device:CPU size:6 dtype:dtypes.int offset:0>");
  EXPECT_EQ(buf->nbytes(), 24);
  EXPECT_THROW(buf->copyout(nullptr, 24), Error);   // nothing to read yet
  std::vector<int> v{1, 2, 3, 4, 5, 6};
  buf->copyin(v.data(), 24);                         // allocates on first copyin
  EXPECT_TRUE(buf->is_allocated());
  EXPECT_EQ(GlobalCounters::mem_used, mem0 + 24);
  EXPECT_THROW(buf->copyin(v.data(), 20), Error);    // size mismatch

  auto view = buf->view(3, dtypes::int32, 8);        // elements 2..4
  EXPECT_EQ(view->str(), "<buf real:False device:CPU size:3 dtype:dtypes.int offset:8>");
  view->ensure_allocated();
  EXPECT_EQ(static_cast<char*>(view->ptr()), static_cast<char*>(buf->ptr()) + 8);
  std::vector<int> r(3);
  view->copyout(r.data(), 12);
  EXPECT_EQ(r, (std::vector<int>{3, 4, 5}));
  std::vector<int> w{30, 40, 50};
  view->copyin(w.data(), 12);                        // writes through to the base
  std::vector<int> all(6);
  buf->copyout(all.data(), 24);
  EXPECT_EQ(all, (std::vector<int>{1, 2, 30, 40, 50, 6}));

  auto vv = view->view(1, dtypes::int32, 4);         // a view of a view shares the same base
  EXPECT_EQ(vv->offset, 12);
  EXPECT_EQ(&vv->base(), buf.get());
  int x = 0;
  vv->ensure_allocated().copyout(&x, 4);
  EXPECT_EQ(x, 40);
  auto bytes = buf->view(4, dtypes::uint8, 0);       // reinterpret as bytes
  EXPECT_EQ(bytes->ensure_allocated().as_bytes(), std::string("\x01\x00\x00\x00", 4));

  EXPECT_THROW(buf->view(4, dtypes::int32, 12), Error);   // runs past the end
  EXPECT_THROW(buf->view(1, dtypes::int32, 24), Error);
  EXPECT_THROW(buf->allocate(), Error);

  buf->ref(2);
  EXPECT_EQ(view->lb_refcount(), 2);
  buf.reset(); view.reset(); vv.reset(); bytes.reset();   // the last holder frees the memory
  EXPECT_EQ(GlobalCounters::mem_used, mem0);
}

TEST_F(Runtime, CopyBufferBetweenDevices) {
  auto src = cpu_floats({1.5f, 2.5f, 3.5f});
  Buffer dst("CPU", 3, dtypes::float32);
  copy_buffer(dst, *src);
  EXPECT_EQ(read_floats(dst), (std::vector<float>{1.5f, 2.5f, 3.5f}));
  Buffer wrong("CPU", 2, dtypes::float32);
  EXPECT_THROW(copy_buffer(wrong, *src), Error);
}

TEST_F(Runtime, DiskCacheHitOnSecondCompile) {
  Compiler& c = get_device("CPU").compiler();
  std::string src = std::string(kAddSrc) + "// cache test " + db + "\n";
  int64_t compiles = c.compile_count, hits = DiskCacheStats::hits;
  std::string lib1 = c.compile_cached(src);
  EXPECT_EQ(c.compile_count, compiles + 1);
  std::string lib2 = c.compile_cached(src);
  EXPECT_EQ(c.compile_count, compiles + 1);   // the second came from sqlite
  EXPECT_EQ(DiskCacheStats::hits, hits + 1);
  EXPECT_EQ(lib1, lib2);
  EXPECT_EQ(access(db.c_str(), F_OK), 0);
  {
    // another database file knows nothing of it
    std::string db2 = temp_path("cache2") + ".db";
    Context c2(std::map<std::string, std::string>{{"CACHEDB", db2}});
    c.compile_cached(src);
    EXPECT_EQ(c.compile_count, compiles + 2);
    for (const char* ext : {"", "-wal", "-shm"}) unlink((db2 + ext).c_str());
  }
}

TEST_F(Runtime, CacheLevelZeroBypassesTheCache) {
  Context off({{"CACHELEVEL", 0}});
  Compiler& c = get_device("CPU").compiler();
  std::string src = std::string(kRangeSrc) + "// nocache " + db + "\n";
  int64_t compiles = c.compile_count;
  c.compile_cached(src);
  c.compile_cached(src);
  EXPECT_EQ(c.compile_count, compiles + 2);
  EXPECT_NE(access(db.c_str(), F_OK), 0);   // never even created
}

TEST_F(Runtime, DiskCacheTables) {
  EXPECT_FALSE(diskcache_get("beam", "k1").has_value());
  diskcache_put("beam", "k1", std::string("\x00\x01opts", 6));
  diskcache_put("beam", "k2", "other");
  EXPECT_EQ(diskcache_get("beam", "k1"), std::string("\x00\x01opts", 6));
  EXPECT_EQ(diskcache_get("beam", "k2"), "other");
  diskcache_put("beam", "k1", "replaced");
  EXPECT_EQ(diskcache_get("beam", "k1"), "replaced");
  EXPECT_THROW(diskcache_put("bad name'; --", "k", "v"), Error);
  diskcache_clear();
  EXPECT_FALSE(diskcache_get("beam", "k2").has_value());
}

TEST_F(Runtime, CompileErrorCarriesCompilerMessageAndSource) {
  Context off({{"CACHELEVEL", 0}});
  std::string bad = "void broken_call(void** bufs, const int* vals, int lo, int hi) { undeclared_thing = 1; }\n";
  try {
    get_device("CPU").compiler().compile(bad);
    FAIL() << "expected a compile error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("CPU compile failed"), std::string::npos) << m;
    EXPECT_NE(m.find("undeclared_thing"), std::string::npos) << m;   // the compiler's message and the source
    EXPECT_NE(m.find("error"), std::string::npos) << m;
  }
}

TEST_F(Runtime, MissingCompilerSaysWhatToInstall) {
  Context cc(std::map<std::string, std::string>{{"CC", "/nonexistent/clang"}});
  try {
    get_device("CPU").compiler().compile_cached(kAddSrc);
    FAIL() << "expected a missing-compiler error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("/nonexistent/clang"), std::string::npos) << m;
    EXPECT_NE(m.find("install clang"), std::string::npos) << m;
  }
}

TEST_F(Runtime, MissingEntryPoint) {
  Compiled& cpu = get_device("CPU");
  std::string lib = cpu.compiler().compile_cached("void lonely(void) {}\n");
  EXPECT_THROW(cpu.runtime("lonely", lib), Error);
}

TEST_F(Runtime, DeviceNames) {
  EXPECT_EQ(canonicalize_device("cpu"), "CPU");
  EXPECT_EQ(canonicalize_device("CLANG"), "CPU");
  EXPECT_EQ(canonicalize_device("cuda:0"), "CUDA");
  EXPECT_EQ(canonicalize_device("cuda:1"), "CUDA:1");
  EXPECT_EQ(canonicalize_device("disk:/tmp/Some:0"), "DISK:/tmp/Some:0");
  EXPECT_EQ(&get_device("clang"), &get_device("CPU"));   // one device object per name
  auto avail = Device::available();
  ASSERT_FALSE(avail.empty());
  EXPECT_EQ(avail[0], "CPU");
  {
    Context c(std::map<std::string, std::string>{{"DEVICE", "clang"}});
    EXPECT_EQ(Device::default_device(), "CPU");
    EXPECT_EQ(canonicalize_device(""), "CPU");
  }
  {
    Context c(std::map<std::string, std::string>{{"CPU", "1"}});
    EXPECT_EQ(default_device(), "CPU");
  }
  Device::synchronize("CPU");
}

TEST_F(Runtime, UnknownDeviceListsKnownOnes) {
  try {
    get_device("TPU");
    FAIL() << "expected an unknown-device error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("TPU"), std::string::npos) << m;
    EXPECT_NE(m.find("CPU"), std::string::npos) << m;
    EXPECT_NE(m.find("CUDA"), std::string::npos) << m;
  }
  EXPECT_THROW(get_device("CPU:3"), Error);
  EXPECT_THROW(get_device("DISK:"), Error);
}

TEST_F(Runtime, DiskBufferReadsAFile) {
  std::string path = temp_path("disk") + ".bin";
  std::string content;
  for (int i = 0; i < 1000; i++) content += static_cast<char>(i * 7);
  { std::ofstream(path, std::ios::binary) << content; }
  {
    auto file = std::make_shared<Buffer>("disk:" + path, 1000, dtypes::uint8);
    EXPECT_EQ(file->device, "DISK:" + path);
    file->ensure_allocated();
    EXPECT_EQ(file->as_bytes(), content);
    auto part = file->view(10, dtypes::uint8, 500);   // like a tensor inside a safetensors file
    part->ensure_allocated();
    EXPECT_EQ(part->as_bytes(), content.substr(500, 10));
    Buffer cpu("CPU", 10, dtypes::uint8);
    copy_buffer(cpu, *part);                        // DISK -> CPU
    EXPECT_EQ(cpu.as_bytes(), content.substr(500, 10));
    EXPECT_THROW(get_device("DISK:" + path).compiler(), Error);
  }
  unlink(path.c_str());
}

TEST_F(Runtime, DiskBufferWritesANewFile) {
  std::string path = temp_path("diskw") + ".bin";
  {
    auto file = std::make_shared<Buffer>("DISK:" + path, 4, dtypes::float32);
    std::vector<float> v{1, 2, 3, 4};
    file->copyin(v.data(), 16);                      // creates the file and writes through
    auto tail = file->view(2, dtypes::float32, 8);
    auto src = cpu_floats({30, 40});
    copy_buffer(*tail, *src);                        // CPU -> DISK
    std::vector<float> back(4);
    file->copyout(back.data(), 16);                  // the read-only mapping sees the writes
    EXPECT_EQ(back, (std::vector<float>{1, 2, 30, 40}));
  }
  std::ifstream f(path, std::ios::binary);
  std::vector<float> disk(4);
  f.read(reinterpret_cast<char*>(disk.data()), 16);
  EXPECT_EQ(disk, (std::vector<float>{1, 2, 30, 40}));
  unlink(path.c_str());
}

// the C renderer's half type follows the compiler: gcc has no __fp16 on x86 ("unknown type name")
TEST(CpuDevice, HalfTypeFollowsTheCompiler) {
  Compiled& cpu = get_device("CPU");
  const char* old = std::getenv("CC");
  std::string saved = old ? old : "";
  setenv("CC", "ccache clang", 1);
  EXPECT_EQ(cpu.c_half_type(), "__fp16");
  setenv("CC", "gcc", 1);
  EXPECT_EQ(cpu.c_half_type(), "_Float16");
  if (old) setenv("CC", saved.c_str(), 1);
  else unsetenv("CC");
}
