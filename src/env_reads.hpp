// Which settings a piece of code read, so that what it made can be thrown away when one of them changes.
// The kernel cache records the settings its codegen reads (TC_*, SIMT_*, ALLOW_TF32, CPU_*, ...): a kernel cached
// under other values of them is compiled again instead of being reused (engine/realize.cpp).
#pragma once
#include <string>
#include <vector>

namespace tg {

struct EnvRead {
  std::string key;
  bool set = false;    // unset and set-to-"" differ: a default applies only to the first
  std::string value;
  bool operator==(const EnvRead&) const = default;
};

// RAII: while alive, every getenv/getenv_str of this thread is recorded (settings that only observe, like DEBUG or
// PROFILE, are left out). Nested recorders pass their reads on to the enclosing one.
class EnvReads {
 public:
  EnvReads();
  ~EnvReads();
  EnvReads(const EnvReads&) = delete;
  EnvReads& operator=(const EnvReads&) = delete;
  std::vector<EnvRead> take();   // the distinct reads so far, sorted by key
 private:
  std::vector<EnvRead> reads_;
  std::vector<EnvRead>* outer_;
};

// Whether each recorded setting still reads the same.
bool env_unchanged(const std::vector<EnvRead>& reads);

}  // namespace tg
