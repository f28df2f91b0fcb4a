// CUDA backend: skipped where no GPU/driver/NVRTC is present; there get_device("CUDA") must throw.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "runtime/buffer.hpp"
#include "runtime/device.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {
bool have_cuda() { return cuda_device_count() > 0; }

const char* kAdd = R"(
extern "C" __global__ void add(float* out, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i] * 2.0f;
}
)";
}  // namespace

TEST(Cuda, AbsentMeansError) {
  if (have_cuda()) GTEST_SKIP() << "CUDA is present";
  EXPECT_THROW(get_device("CUDA"), Error);
  for (auto& d : Device::available()) EXPECT_EQ(d.find("CUDA"), std::string::npos);
}

TEST(Cuda, CompileAndRun) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  Context off({{"CACHELEVEL", 0}});
  Compiled& cuda = get_device("cuda:0");
  EXPECT_EQ(cuda.name, "CUDA");
  EXPECT_EQ(cuda.renderer_kind(), "CUDA");
  EXPECT_EQ(cuda.arch().rfind("sm_", 0), 0u);
  auto prg = cuda.runtime("add", cuda.compiler().compile_cached(kAdd));
  const int n = 1000;
  std::vector<float> a(n), b(n), r(n);
  std::iota(a.begin(), a.end(), 0.0f);
  for (int i = 0; i < n; i++) b[i] = static_cast<float>(i % 5);
  auto A = std::make_shared<Buffer>("CUDA", n, dtypes::float32), B = std::make_shared<Buffer>("CUDA", n, dtypes::float32);
  A->copyin(a.data(), n * 4);
  B->copyin(b.data(), n * 4);
  Buffer out("CUDA", n, dtypes::float32);
  out.ensure_allocated();
  double t = (*prg)({out.ptr(), A->ptr(), B->ptr()}, {(n + 255) / 256, 1, 1}, {256, 1, 1}, {n}, true);
  EXPECT_GT(t, 0.0);
  out.copyout(r.data(), n * 4);
  for (int i = 0; i < n; i++) ASSERT_EQ(r[i], a[i] + 2 * b[i]) << i;

  // views and cross-device copies
  auto tail = A->view(10, dtypes::float32, 40);
  Buffer host("CPU", 10, dtypes::float32);
  copy_buffer(host, tail->ensure_allocated());
  std::vector<float> h(10);
  host.copyout(h.data(), 40);
  for (int i = 0; i < 10; i++) EXPECT_EQ(h[i], a[10 + i]);
  Device::synchronize("CUDA");
}

TEST(Cuda, CompileErrorAndAllocatorReuse) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  Context off({{"CACHELEVEL", 0}});
  Compiled& cuda = get_device("CUDA");
  try {
    cuda.compiler().compile("extern \"C\" __global__ void bad() { undeclared_thing = 1; }");
    FAIL() << "expected a compile error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("undeclared_thing"), std::string::npos) << e.what();
  }
  Allocator& al = cuda.allocator();
  void* p = al.alloc(1 << 20);
  al.free(p, 1 << 20);
  EXPECT_EQ(al.alloc(1 << 20), p);
  al.free(p, 1 << 20);
  al.free_cache();
  EXPECT_EQ(al.cached_bytes(), 0u);
}

// a fused kernel reading 12 buffers: the runtime passes them as data0..data12 in index order
TEST(Cuda, KernelWithManyBuffers) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA here";
  auto weighted_sum = [](const std::string& d) {
    Tensor acc = Tensor::zeros({64}, Opts{dtypes::float32, d, {}});
    for (int i = 1; i <= 12; i++) acc = acc + Tensor::full({64}, double(i), Opts{dtypes::float32, d, {}}).contiguous().realize() * std::pow(2.0, i);
    return acc.to("CPU").tolist<float>();
  };
  std::vector<float> got = weighted_sum("CUDA");
  float want = 0;
  for (int i = 1; i <= 12; i++) want += float(i) * std::pow(2.f, float(i));
  for (float v : got) ASSERT_EQ(v, want);
}
