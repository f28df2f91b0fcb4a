// Generates tests/data/libtorch_state.pt, the torch_load fixture, with libtorch's torch::pickle_save.
// Not part of the library or the test build; compile by hand when the fixture must change:
//   g++ -std=c++17 -O1 tests/data/make_torch_fixture.cpp -I/usr/include/torch/csrc/api/include \
//       -ltorch -ltorch_cpu -lc10 -o /tmp/make_torch_fixture && /tmp/make_torch_fixture tests/data/libtorch_state.pt
// tests/test_formats.cpp checks the values written here; keep the two in sync.
#include <torch/torch.h>
#include <fstream>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) { std::cerr << "usage: make_torch_fixture OUT.pt\n"; return 1; }
  using torch::indexing::Slice;
  c10::Dict<std::string, at::Tensor> d;
  d.insert("weight", torch::arange(6, torch::kFloat32).reshape({2, 3}) * 0.5);   // 0 .. 2.5
  d.insert("bias", torch::tensor({-1.0, 2.5, 3.25}, torch::kFloat64));
  d.insert("ids", torch::arange(4, torch::kInt64) - 2);                         // -2 .. 1
  d.insert("i32", torch::tensor({-7, 0, 70000}, torch::kInt32));
  d.insert("half", torch::tensor({1.5, -2.0}, torch::kFloat16));
  d.insert("bf16", torch::tensor({1.0, -0.5}, torch::kBFloat16));
  d.insert("mask", torch::tensor({true, false, true}));
  d.insert("u8", torch::tensor({0, 200, 255}, torch::kUInt8));
  d.insert("i8", torch::tensor({-128, 5}, torch::kInt8));
  d.insert("i16", torch::tensor({-300, 300}, torch::kInt16));
  auto base = torch::arange(12, torch::kFloat32).reshape({3, 4});
  d.insert("transposed", base.t());                                           // strides (1, 4)
  d.insert("row", base[1]);                                                   // storage offset 4
  d.insert("every_other", base.index({Slice(), Slice(0, torch::indexing::None, 2)}));  // strides (4, 2)
  d.insert("scalar", torch::tensor(7.0f).reshape({}));
  auto bytes = torch::pickle_save(c10::IValue(d));
  std::ofstream(argv[1], std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return 0;
}
