// The scheduler: LazyBuffers -> ScheduleItems (tinygrad 0.9.2 engine/schedule.py).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "access.hpp"
#include "lazy/lazy.hpp"
#include "tg/schedule.hpp"
#include "uop/uop.hpp"

namespace tg {

// A kernel's AST is a UOp graph:
//   SINK(STORE...)                                   one STORE per output
//   STORE(DEFINE_GLOBAL(ptr, arg=i), SHAPETRACKER(st), value)
//   LOAD(DEFINE_GLOBAL(ptr, arg=i), SHAPETRACKER(st))   dtype = element dtype
//   CONST(SHAPETRACKER(st)) arg = value               a broadcast constant
//   ALU(srcs) arg = Unary/Binary/TernaryOps; CAST(x); BITCAST(x)
//   REDUCE_AXIS(x) arg = ReduceArg{op, axes}
// Buffer indices: outputs first, then inputs in order of first use; bufs follows the same order.
// ScheduleItem itself is public (include/tg/schedule.hpp); src/access.hpp reaches its ast as a UOp.

// Schedules every unrealized LazyBuffer the outs depend on. Afterwards each scheduled base holds its
// Buffer (not allocated yet: running the items does that) and has dropped its srcs, so it counts as
// realized and the graph above it is freed. Non-kernel items: COPY bufs = (dest, src), VIEW
// (view, base), EMPTY (buf). Throws tg::Error for an assign that reads its target through a
// non-contiguous view and for a cycle (an assign target needed after it is overwritten).
std::vector<ScheduleItem> create_schedule(const std::vector<LazyBufferPtr>& outs);
// The memory planner: reuse intermediate buffers within a schedule (tinygrad's memory_planner).
// A buffer that is unallocated, held by no live LazyBuffer and used only by kernels takes the storage
// (or an offset-0 view of it) of a same-device, same-dtype buffer whose uses are over. Run it after
// create_schedule's LazyBuffers are dropped; NO_MEMORY_PLANNER=1 disables it.
std::vector<ScheduleItem> memory_planner(std::vector<ScheduleItem> schedule);

// A test seam for the retry policy: when set, it is called as each kernel group starts lowering,
// inside the same try as the lowering itself, with whether the group computes a fused arange and
// whether it is a row kernel. Whatever it throws meets the scheduler's catch clauses as a lowering
// failure would: only the expected conditions are retried, an internal assertion must surface.
inline std::function<void(bool fused_arange, bool row)> schedule_lower_hook;

}  // namespace tg
