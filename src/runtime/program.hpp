// What the renderer hands the runtime: one kernel's source and how to launch it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

struct ProgramSpec {
  std::string name, src, device;
  std::vector<int64_t> global_size{1, 1, 1}, local_size{1, 1, 1};
  std::vector<std::string> vars;   // symbolic variable names, in the order their values are passed
  int n_bufs = 0;
  int64_t op_estimate = 0, mem_estimate = 0;
};

}  // namespace tg
