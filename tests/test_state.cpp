// tg::nn::state and tg::nn::datasets: state dicts of modules, safetensors round trips, strict loading,
// PyTorch checkpoints (tests/data/libtorch_state.pt, see test_formats.cpp), corrupt files, Fashion-MNIST,
// and that loading checkpoints in a loop does not leak UOps, memory, file descriptors or mappings.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "access.hpp"
#include "lazy/lazy.hpp"
#include "runtime/buffer.hpp"
#include "tensor_test_util.hpp"
#include "tg/tg.hpp"
#include "uop/uop.hpp"

using namespace tg;
using namespace tg::nn::state;
using tgt::expect_close;
using tgt::F;
using tgt::vals;
namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(TG_SOURCE_DIR) / "tests" / "data";

class TmpDir {
 public:
  TmpDir() : dir_(fs::temp_directory_path() / ("tg_state_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    fs::create_directories(dir_);
  }
  ~TmpDir() { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
};

struct Net : nn::Module {
  nn::Conv2d conv{1, 2, 3};
  nn::BatchNorm bn{2};
  nn::Linear fc{8, 3};
  Tensor operator()(const Tensor& x) { return fc(bn(conv(x)).relu().max_pool2d().flatten(1)); }
  void collect(const std::string& p, nn::NamedTensors& out) override {
    conv.collect(p + "conv.", out);
    bn.collect(p + "bn.", out);
    fc.collect(p + "fc.", out);
  }
};

std::vector<std::string> keys(const StateDict& sd) {
  std::vector<std::string> out;
  for (auto& [k, v] : sd) out.push_back(k);
  return out;
}

size_t count_dir(const char* dir) {
  size_t n = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir)) n++;
  return n;
}
size_t count_lines(const char* path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string l; std::getline(in, l);) n++;
  return n;
}

template <typename F>
void expect_error_containing(F fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no tg::Error (expected one containing \"" << what << "\")";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(State, GetStateDictAndParameters) {
  Net net;
  StateDict sd = get_state_dict(net);
  EXPECT_EQ(keys(sd), (std::vector<std::string>{"bn.bias", "bn.num_batches_tracked", "bn.running_mean", "bn.running_var", "bn.weight",
                                               "conv.bias", "conv.weight", "fc.bias", "fc.weight"}));
  // the dict shares the model's tensors
  EXPECT_EQ(Access::impl(sd.at("fc.weight")), Access::impl(net.fc.weight));
  EXPECT_EQ(sd.at("conv.weight").shape(), (Shape{2, 1, 3, 3}));
  std::vector<Tensor> ps = get_parameters(net);
  ASSERT_EQ(ps.size(), 9u);
  size_t i = 0;
  for (auto& [k, t] : sd) EXPECT_EQ(Access::impl(ps[i++]), Access::impl(t)) << k;
}

TEST(State, SafeSaveLoadRoundTripsDtypesShapesValues) {
  TmpDir tmp;
  StateDict sd;
  sd.emplace("f32", F({1.5f, -2.25f, 3e-8f, 1e30f, 0.f, -0.f}, {2, 3}));
  sd.emplace("f16", F({0.5f, -1.0f, 65504.f, 2.0f}, {4}).half());
  sd.emplace("i64", Tensor::from<int64_t>({-(int64_t(1) << 40), 7, 0}, {3, 1}));
  sd.emplace("bool", Tensor::from<bool>({true, false, false, true}, {2, 2}));
  sd.emplace("u8", Tensor::from<uint8_t>({0, 255}, {2}));
  sd.emplace("scalar", Tensor::from<float>({42.f}, {}));
  sd.emplace("lazy", F({1, 2, 3, 4}, {2, 2}).T() * 2);   // unrealized, non-contiguous view
  std::string path = tmp.path("rt.safetensors");
  safe_save(sd, path);
  StateDict back = safe_load(path);
  EXPECT_EQ(keys(back), keys(sd));
  for (auto& [k, t] : sd) {
    EXPECT_EQ(back.at(k).dtype(), t.dtype()) << k;
    EXPECT_EQ(back.at(k).shape(), t.shape()) << k;
  }
  EXPECT_EQ(back.at("f32").tolist<float>(), sd.at("f32").tolist<float>());
  EXPECT_EQ(back.at("f16").bitcast(dtypes::uint16).tolist<uint16_t>(), (std::vector<uint16_t>{0x3800, 0xBC00, 0x7BFF, 0x4000}));
  EXPECT_EQ(back.at("i64").tolist<int64_t>(), (std::vector<int64_t>{-(int64_t(1) << 40), 7, 0}));
  EXPECT_EQ(back.at("bool").tolist<bool>(), (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(back.at("u8").tolist<uint8_t>(), (std::vector<uint8_t>{0, 255}));
  EXPECT_EQ(back.at("scalar").item<float>(), 42.f);
  EXPECT_EQ(back.at("lazy").tolist<float>(), (std::vector<float>{2, 6, 4, 8}));
  // loaded tensors compute like any other
  expect_close(vals(back.at("f16").to(Device::default_device()).float_() + 1), {1.5f, 0.f, 65505.f, 3.f});
}

TEST(State, LoadStateDictGivesIdenticalOutputs) {
  TmpDir tmp;
  Tensor::manual_seed(11);
  Net a;
  {   // move the running stats off their defaults
    Tensor::Train train;
    a(Tensor::randn({4, 1, 6, 6})).realize({a.bn.running_mean, a.bn.running_var, a.bn.num_batches_tracked});
  }
  Tensor x = Tensor::randn({2, 1, 6, 6}).realize();
  std::vector<float> ya = vals(a(x));
  std::string path = tmp.path("net.safetensors");
  safe_save(get_state_dict(a), path);

  Tensor::manual_seed(12);
  Net b;
  EXPECT_NE(vals(b(x)), ya);   // different init
  load_state_dict(b, safe_load(path));
  EXPECT_EQ(vals(b(x)), ya);
  EXPECT_EQ(vals(b.bn.running_var), vals(a.bn.running_var));
  expect_close(vals(b.bn.num_batches_tracked), {1});
  EXPECT_EQ(b.fc.weight.device(), Device::default_device());   // moved off DISK
  // the module's own tensor objects were updated, so references held elsewhere see the new values
  Tensor held = b.fc.weight;
  load_state_dict(b, get_state_dict(a));
  EXPECT_EQ(vals(held), vals(a.fc.weight));
  // a copy, not a shared buffer: training b leaves a alone
  std::vector<float> a_w = vals(a.fc.weight);
  auto opt = nn::optim::SGD(get_parameters(b), 0.5);
  {
    Tensor::Train train;
    opt->zero_grad();
    b(x).sum().backward();
    opt->step();
  }
  EXPECT_NE(vals(b.fc.weight), a_w);
  EXPECT_EQ(vals(a.fc.weight), a_w);
}

TEST(State, LoadStateDictStrictErrors) {
  Net net;
  StateDict good = get_state_dict(net);
  {
    StateDict sd = good;
    sd.erase("bn.running_var");
    expect_error_containing([&] { load_state_dict(net, sd); }, "bn.running_var");
    load_state_dict(net, sd, false);   // non-strict skips it
  }
  {
    StateDict sd = good;
    sd.emplace("extra.weight", Tensor::zeros({1}));
    expect_error_containing([&] { load_state_dict(net, sd); }, "extra.weight");
    load_state_dict(net, sd, false);
  }
  {
    StateDict sd = good;
    sd.insert_or_assign("fc.weight", Tensor::zeros({8, 3}));
    expect_error_containing([&] { load_state_dict(net, sd); }, "fc.weight");
    expect_error_containing([&] { load_state_dict(net, sd, false); }, "(3, 8)");   // shape is checked even when not strict
  }
  {
    StateDict sd = good;
    sd.insert_or_assign("fc.bias", Tensor::zeros({3}, Opts{dtypes::float16}));
    expect_error_containing([&] { load_state_dict(net, sd); }, "dtype");
  }
  // a failed load changed nothing that was checked before it
  EXPECT_EQ(net.fc.weight.shape(), (Shape{3, 8}));
  EXPECT_EQ(net.fc.bias->dtype(), dtypes::float32);
}

TEST(State, TorchLoadLibtorchCheckpoint) {
  StateDict d = torch_load((kData / "libtorch_state.pt").string());
  EXPECT_EQ(keys(d), (std::vector<std::string>{"bf16", "bias", "every_other", "half", "i16", "i32", "i8", "ids", "mask", "row", "scalar",
                                              "transposed", "u8", "weight"}));
  EXPECT_EQ(d.at("weight").shape(), (Shape{2, 3}));
  EXPECT_EQ(d.at("weight").tolist<float>(), (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}));
  EXPECT_EQ(d.at("bias").dtype(), dtypes::float64);
  EXPECT_EQ(d.at("bias").tolist<double>(), (std::vector<double>{-1.0, 2.5, 3.25}));
  EXPECT_EQ(d.at("ids").dtype(), dtypes::int64);
  EXPECT_EQ(d.at("ids").tolist<int64_t>(), (std::vector<int64_t>{-2, -1, 0, 1}));
  EXPECT_EQ(d.at("i32").tolist<int32_t>(), (std::vector<int32_t>{-7, 0, 70000}));
  EXPECT_EQ(d.at("half").dtype(), dtypes::float16);
  // half/bfloat16 read as float after moving off DISK (DISK tensors can't run a cast kernel)
  std::string dev = Device::default_device();
  EXPECT_EQ(d.at("half").bitcast(dtypes::uint16).tolist<uint16_t>(), (std::vector<uint16_t>{0x3E00, 0xC000}));
  EXPECT_EQ(d.at("half").to(dev).tolist<float>(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(d.at("bf16").dtype(), dtypes::bfloat16);
  // bfloat16 -> float by bits (the CPU renderer's clang may lack __bf16)
  Tensor bf = d.at("bf16").bitcast(dtypes::uint16).to(dev).cast(dtypes::uint32).lshift(16).bitcast(dtypes::float32);
  EXPECT_EQ(bf.tolist<float>(), (std::vector<float>{1.0f, -0.5f}));
  EXPECT_EQ(d.at("mask").dtype(), dtypes::bool_);
  EXPECT_EQ(d.at("mask").tolist<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(d.at("u8").tolist<uint8_t>(), (std::vector<uint8_t>{0, 200, 255}));
  EXPECT_EQ(d.at("i8").tolist<int8_t>(), (std::vector<int8_t>{-128, 5}));
  EXPECT_EQ(d.at("i16").tolist<int16_t>(), (std::vector<int16_t>{-300, 300}));
  EXPECT_EQ(d.at("transposed").shape(), (Shape{4, 3}));
  EXPECT_EQ(d.at("transposed").tolist<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(d.at("row").tolist<float>(), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(d.at("every_other").shape(), (Shape{3, 2}));
  EXPECT_EQ(d.at("every_other").tolist<float>(), (std::vector<float>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(d.at("scalar").shape(), Shape{});
  EXPECT_EQ(d.at("scalar").item<float>(), 7.f);
  // usable in computation (on the default device)
  expect_close(vals(d.at("weight").to(Device::default_device()).sum(1)), {1.5f, 6.0f});
  expect_close(vals(d.at("weight").to(dev).matmul(d.at("row").to(dev).shrink({{0, 3}}))), {8.5f, 31.0f});
}

TEST(State, CorruptFilesThrow) {
  TmpDir tmp;
  EXPECT_THROW(safe_load(tmp.path("missing.safetensors")), Error);
  EXPECT_THROW(torch_load(tmp.path("missing.pt")), Error);
  std::string junk = tmp.path("junk.safetensors");
  std::ofstream(junk, std::ios::binary) << "this is not a safetensors file at all";
  EXPECT_THROW(safe_load(junk), Error);
  EXPECT_THROW(torch_load(junk), Error);
  // a valid file cut short
  std::string good = tmp.path("good.safetensors");
  safe_save({{"w", Tensor::ones({16, 16})}}, good);
  std::ifstream in(good, std::ios::binary);
  std::string full((std::istreambuf_iterator<char>(in)), {});
  std::string cut = tmp.path("cut.safetensors");
  std::ofstream(cut, std::ios::binary).write(full.data(), std::streamsize(full.size() - 100));
  EXPECT_THROW(safe_load(cut), Error);
  // saving into a folder that does not exist
  EXPECT_THROW(safe_save({{"w", Tensor::ones({2})}}, tmp.path("no/such/dir/x.safetensors")), Error);
}

TEST(State, FashionMnist) {
  const std::string dir = nn::datasets::default_dir("fashion-mnist");
  if (!fs::exists(fs::path(dir) / "train-labels-idx1-ubyte.gz") && !fs::exists(fs::path(dir) / "train-labels-idx1-ubyte"))
    GTEST_SKIP() << "Debian's fashion-mnist data set is not installed in " << dir;
  auto ds = nn::datasets::fashion_mnist(dir);
  EXPECT_EQ(ds.X_train.shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(ds.Y_train.shape(), (Shape{60000}));
  EXPECT_EQ(ds.X_test.shape(), (Shape{10000, 1, 28, 28}));
  EXPECT_EQ(ds.Y_test.shape(), (Shape{10000}));
  EXPECT_EQ(ds.X_train.dtype(), dtypes::uint8);
  EXPECT_EQ(ds.Y_train.dtype(), dtypes::uint8);
  // the data set's first labels (train: ankle boot, t-shirt, t-shirt, dress, ...)
  EXPECT_EQ(ds.Y_train.shrink({{0, 10}}).tolist<uint8_t>(), (std::vector<uint8_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  EXPECT_EQ(ds.Y_test.shrink({{0, 10}}).tolist<uint8_t>(), (std::vector<uint8_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
  auto img = ds.X_train[{0}].cast(dtypes::int32);
  EXPECT_EQ(img.sum().item<int32_t>(), 76247);
  EXPECT_EQ(img.max().item<int32_t>(), 255);
  EXPECT_EQ(ds.Y_train.max().cast(dtypes::int32).item<int32_t>(), 9);
  EXPECT_THROW(nn::datasets::mnist("/nonexistent/dir"), Error);
}

TEST(State, LoadLoopDoesNotLeak) {
  TmpDir tmp;
  Net net;
  std::string path = tmp.path("leak.safetensors");
  safe_save(get_state_dict(net), path);
  std::string pt = (kData / "libtorch_state.pt").string();
  int round = 0;
  auto one_round = [&] {
    load_state_dict(net, safe_load(path));
    StateDict d = torch_load(pt);
    (void)d.at("weight").to(Device::default_device()).sum().item<float>();
    // a new file each time too: its DISK device must let go of the file when the tensors die
    std::string fresh = tmp.path("fresh" + std::to_string(round++) + ".safetensors");
    safe_save({{"w", net.fc.weight}}, fresh);
    (void)safe_load(fresh).at("w").to(Device::default_device()).realize();
    fs::remove(fresh);
  };
  for (int i = 0; i < 3; i++) one_round();   // warm caches
  size_t uops0 = uop_live_count(), fds0 = count_dir("/proc/self/fd"), maps0 = count_lines("/proc/self/maps");
  int64_t mem0 = GlobalCounters::mem_used;
  for (int i = 0; i < 40; i++) one_round();
  // 40 rounds: any per-round leak exceeds the slack
  EXPECT_LE(uop_live_count(), uops0 + 8) << "live UOps grow with each load";
  EXPECT_LE(GlobalCounters::mem_used, mem0) << "allocator usage grows with each load";
  EXPECT_LE(count_dir("/proc/self/fd"), fds0) << "file descriptors leak";
  EXPECT_LE(count_lines("/proc/self/maps"), maps0 + 2) << "mappings leak";
}

namespace {
// the /proc/self/maps line of the mapping holding p ("" when none)
std::string mapping_of(const void* p) {
  std::ifstream f("/proc/self/maps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(f, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && lo <= a && a < hi) return line;
  }
  return "";
}
}  // namespace

// A file's tensor moved to the CPU maps the file's bytes (a private copy-on-write mapping: no copy, no
// fresh pages): the buffer lies in a mapping of the file itself. Writing to it leaves the file as it was,
// and a new save over the same path leaves the loaded tensor as it was.
TEST(State, CpuLoadMapsTheFile) {
  if (Device::default_device() != "CPU") GTEST_SKIP() << "zero-copy loads are the CPU's";
  TmpDir tmp;
  const std::string path = tmp.path("map.safetensors");
  std::vector<float> v(5000);
  for (size_t i = 0; i < v.size(); i++) v[i] = float(i) * 0.5f;
  safe_save({{"a", Tensor::from(std::vector<float>{1, 2, 3}, {3})}, {"w", Tensor::from(v, {50, 100})}}, path);
  Tensor w = safe_load(path).at("w").to("CPU").realize();
  void* p = Access::lazydata(w)->base()->buffer->ptr();
  const std::string line = mapping_of(p);
  EXPECT_NE(line.find(fs::path(path).filename().string()), std::string::npos) << "the buffer is not in the file's mapping: " << line;
  EXPECT_EQ(w.tolist<float>(), v);
  w.assign(w * 2).realize();   // copy on write: the file keeps its bytes
  EXPECT_EQ(safe_load(path).at("w").to("CPU").tolist<float>(), v);
  std::vector<float> doubled(v);
  for (float& x : doubled) x *= 2;
  EXPECT_EQ(w.tolist<float>(), doubled);
  Tensor r = safe_load(path).at("w").to("CPU").realize();
  safe_save({{"w", Tensor::zeros({3})}}, path);   // a smaller file over the same path
  EXPECT_EQ(r.tolist<float>(), v) << "the loaded tensor changed with the file saved over it";
  {
    Context ctx({{"DISK_ZERO_COPY", 0}});
    Tensor c = safe_load(path).at("w").to("CPU").realize();
    EXPECT_EQ(mapping_of(Access::lazydata(c)->base()->buffer->ptr()).find("map.safetensors"), std::string::npos);
  }
}
