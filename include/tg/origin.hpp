// tg::Origin: tags the Tensor ops made in its scope with the caller's source line, so kernels,
// DEBUG=2 lines, GRAPH, PROFILE and errors say where they came from (tinygrad's Metadata.caller).
//   { tg::Origin here; auto y = (x * w).relu(); }   // DEBUG=2: E_4096_4 ... [mul, relu @ train.cpp:42]
// A wrapper passes its own caller's location on: tg::Origin o(loc). The outermost Origin wins.
#pragma once
#include <source_location>

namespace tg {

class Origin {
 public:
  explicit Origin(std::source_location loc = std::source_location::current());
  ~Origin();
  Origin(const Origin&) = delete;
  Origin& operator=(const Origin&) = delete;
 private:
  bool set_ = false;
};

}  // namespace tg
