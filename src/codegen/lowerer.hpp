// Lowerer: an optimized kernel AST -> the UOp graph a linearizer can order (tinygrad 0.9.2 codegen/lowerer.py).
//
// The iteration space is the AST's full shape, laid out as the Kernel left it:
//   global dims | local dims | group-for-reduce dims | reduce loops | upcasted dims   (counts in the SINK's KernelInfo)
// GPU: global dims become SPECIAL gidx (reversed, merged to fit global_max), local dims SPECIAL lidx.
// CPU: global dims become RANGE {axis, 0}; the first one is {axis, 0, 1} (run on threads) when the kernel is big.
// Reduce loops are RANGE {axis, 1}, upcasted dims EXPAND {axis, size} of the constants 0..size-1.
// A split symbolic dim (KernelInfo::sym_splits) runs tiles of amt lanes and a tail loop; a split global
// dim on a GPU runs ceil(N/amt) threads with every load and store masked to < N.
// Each LOAD/STORE/CONST gets its index and validity from to_indexed_uops (shape/shapetracker_arg.hpp):
//   LOAD(buf, idx[, alt 0, valid][, BARRIER])   STORE(buf, idx, val[, valid])   CONST -> where(valid, c, 0)
// REDUCE_AXIS becomes REDUCE(val, ranges...) arg BinaryOps ADD/MAX, with upcasted reduce axes CONTRACTed.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "renderer/renderer.hpp"
#include "uop/uop.hpp"

namespace tg {

UOp lower_ast(const UOp& ast, const Renderer& opts);

// Work at least this large (elements of the full shape) makes the CPU's first global loop parallel.
constexpr int64_t kCpuParallelMinWork = int64_t{1} << 15;
// A big kernel's parallel loop spans global dims until each thread has cpu_units_per_thread iterations, each of at
// least kCpuUnitWork elements of the full shape (lowerer.cpp parallel_dims): the pool's chunks can then balance
// threads that start or run unevenly to a small part of a share. The others wait for the last thread's last
// iteration, and the latest of many threads runs later than the later of 2 (a wake-up, a descheduled core): 16
// iterations a thread up to 4 threads, 4 x threads above (64 at 16 threads; there the mnist step's five
// biggest convs, 32 images a thread, waited 1.3 ms a step for their last iterations, 0.5 ms with 64 or more).
constexpr int64_t kCpuUnitsPerThread = 16;
constexpr int64_t kCpuUnitWork = int64_t{1} << 14;
constexpr int64_t cpu_units_per_thread(int64_t threads) { return std::max(kCpuUnitsPerThread, 4 * threads); }

// tinygrad's get_grouped_dims: SPECIALs named prefix<i> for dims, merged until they fit max_sizes
// (empty: no limit), then split back with % and / so there is one index per dim.
// sym_dims (optional, one per dim, empty UOp where concrete): a symbolic dim's size expression
// (dims then holds its max); symbolic dims are never merged.
std::vector<UOp> get_grouped_dims(const std::string& prefix, const std::vector<int64_t>& dims,
                                  const std::vector<int64_t>& max_sizes, bool reverse = false,
                                  const std::vector<UOp>& sym_dims = {});

}  // namespace tg
