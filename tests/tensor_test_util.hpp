// Shared helpers for the Tensor tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "access.hpp"
#include "codegen/kernel.hpp"
#include "engine/realize.hpp"
#include "engine/schedule.hpp"
#include "renderer/cstyle.hpp"
#include "tg/tg.hpp"

namespace tgt {
using tg::Tensor;
inline Tensor F(std::vector<float> v, tg::Shape s) { return Tensor::from<float>(v, s); }
inline Tensor I(std::vector<int32_t> v, tg::Shape s) { return Tensor::from<int32_t>(v, s); }
inline std::vector<float> vals(const Tensor& t) { return t.tolist<float>(); }
inline std::vector<int32_t> ivals(const Tensor& t) { return t.tolist<int32_t>(); }
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
    else EXPECT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "at " << i;
  }
}

// The ast of the last kernel that computes t. The schedule is run: scheduling marks its inputs' buffers realized,
// so they must be filled.
inline tg::UOp last_ast(const Tensor& t) {
  tg::UOp ast;
  std::vector<tg::ScheduleItem> sched = tg::create_schedule({tg::Access::lazydata(t)});
  for (const tg::ScheduleItem& si : sched)
    if (si.kind == tg::MetaOps::KERNEL) ast = tg::Access::uop(si.ast);
  tg::run_schedule(sched);
  return ast;
}

// The one CPU kernel of f(x) for an unrealized x of shape s (a row kernel: softmax, layernorm), with
// the hand-coded opts applied; linearize() or to_program() it to look at its loops or its C.
inline std::unique_ptr<tg::Kernel> cpu_kernel_of(const tg::Shape& s, const std::function<Tensor(const Tensor&)>& f) {
  static const tg::ClangRenderer ren;
  Tensor x = Tensor::empty(s, tg::Opts{tg::dtypes::float32, "CPU", false});
  std::vector<tg::ScheduleItem> sched = f(x).schedule();
  std::erase_if(sched, [](const tg::ScheduleItem& si) { return si.kind != tg::MetaOps::KERNEL; });
  if (sched.size() != 1) {
    ADD_FAILURE() << "expected one kernel, got " << sched.size();
    return nullptr;
  }
  auto k = std::make_unique<tg::Kernel>(tg::Access::uop(sched[0].ast), ren);
  k->hand_coded_optimizations();
  return k;
}
}  // namespace tgt
