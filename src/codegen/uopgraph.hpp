// The codegen rewrite passes of tinygrad 0.9.2 (codegen/uopgraph.py) as rule tables:
//   constant_folder  symbolic() + vector/GEP, cast, gated LOAD/STORE and NOOP cleanups
//   expander         EXPAND/CONTRACT -> vectors (upcast/unrolled axes become explicit copies)
//   reducer          REDUCE -> DEFINE_ACC + PHI over its RANGE loops, scalarized vector ALUs
//   transcendental   EXP2/LOG2/SIN approximations for backends without them
//
// Graph forms (as the lowerer builds them, tinygrad 0.9.2):
//   LOAD(buf, idx[, alt, gate][, barrier])    STORE(buf, idx, val[, gate])
//   REDUCE(val, ranges...) arg ReduceOps (SUM/MAX) or BinaryOps (ADD/MAX)
//   EXPAND(srcs...) / CONTRACT(src) arg std::vector<int64_t>{axis0, size0, axis1, size1, ...}
//   DEFINE_ACC(dtype, (init CONST, ranges...)) arg std::vector<int64_t>{acc_number};  PHI(acc, new value)
#pragma once
#include "renderer/renderer.hpp"
#include "uop/pattern.hpp"

namespace tg {

const PatternMatcher& constant_folder();
const PatternMatcher& expander();
// The reducer's context (graph_rewrite's ctx): DEFINE_ACCs are numbered in the order they are
// made, from 0 in each kernel.
struct ReduceContext {
  int64_t acc_number = 0;
};
const PatternMatcher& reducer();   // needs a ReduceContext
// EXP2/LOG2/SIN on float16/32/64 replaced by xexp2/xlog2/xsin where the backend lacks them.
// TRANSCENDENTAL>=2 replaces all three everywhere.
PatternMatcher transcendental_folding(const DeviceCaps& caps);

// The three rewrite tables for one set of device caps, built once: folder, folder+expander and
// folder+expander+reducer (tinygrad's UOpGraph.linearize rewrites).
struct RewritePasses {
  PatternMatcher folder, expand, reduce;
};
const RewritePasses& rewrite_passes(const DeviceCaps& caps);

// The rewrite passes in order on a lowered kernel (codegen/pipeline.cpp lists them).
UOp full_graph_rewrite(const UOp& sink, const DeviceCaps& caps = {});

// transcendental.cpp: 1 ULP approximations built from +, *, where, casts and bitcasts.
UOp xexp2(const UOp& d);
UOp xlog2(const UOp& d);
UOp xsin(const UOp& d, bool fast = false, double switch_over = 30.0);

// vectorizer.cpp: consecutive scalar stores -> vector stores, their values vectorized lane by lane
// (vector ALU, loads, accumulators); exact by construction. For C targets with vector extensions.
UOp vectorize_stores(const UOp& sink, int64_t max_bytes);
// GPU: four scalar loads of consecutive float/int elements from base + 4k (base a multiple of 4) become
// one 16-byte vector load and its GEPs (the renderer falls back to scalar loads on an unaligned buffer).
UOp vectorize_gpu_loads(const UOp& sink);

// EXPAND/CONTRACT args as (axis, size) pairs.
std::vector<std::pair<int64_t, int64_t>> expand_args(const Arg& a);
Arg expand_arg(const std::vector<std::pair<int64_t, int64_t>>& pairs);

}  // namespace tg
