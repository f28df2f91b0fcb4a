// Schedules a small reduction, prints every ScheduleItem, then checks the values: what a user of the
// installed headers and library does first. Exits non-zero on a wrong result.
#include <cstdio>
#include <tg/tg.hpp>

int main() {
  tg::Tensor t = (tg::Tensor::arange(6).reshape({2, 3}) + 1).sum(1);
  int kernels = 0;
  for (const tg::ScheduleItem& si : t.schedule()) {
    std::printf("%s\n", si.str().c_str());
    kernels += si.kind == tg::MetaOps::KERNEL;
  }
  std::vector<int32_t> v = t.tolist<int32_t>();
  std::printf("%s\n", t.str().c_str());
  bool ok = kernels > 0 && v == std::vector<int32_t>{6, 15};
  std::printf("consumer: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
