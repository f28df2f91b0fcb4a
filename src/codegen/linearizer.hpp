// Linearizer: turns a lowered kernel graph (a SINK of STOREs) into the flat, block-structured
// list of UOps that a renderer walks top to bottom (tinygrad 0.9.2's UOpGraph.linearize).
//
// Contract of the result:
// - every node below the SINK appears once, sources before users; the SINK itself is dropped;
// - RANGE .. ENDRANGE and IF .. ENDIF bracket blocks: ENDRANGE(src: the RANGE) follows the last
//   node that depends on the RANGE (stopping at PHI), ENDIF(src: the IF) the last dependent STORE;
// - a node sits in the innermost block it depends on; loop-invariant work is placed before the
//   loop; DEFINE_ACC is moved in front of its outermost reduce RANGE;
// - the order is deterministic: a min-heap on (priority, UOp::cmp_lt) as tinygrad, where loop
//   children are preferred and reduce RANGEs are opened as late as possible.
// A graph that can't be placed (leftover EXPAND/CONTRACT/REDUCE, DEFINE_ACC without a RANGE,
// dtype mismatches, repeated stores) fails a TG_ASSERT.
#pragma once
#include <vector>

#include "uop/uop.hpp"

namespace tg {

std::vector<UOp> linearize(const UOp& sink);

// tinygrad's type_verify over a linearized list (called by linearize; exposed for tests).
void type_verify(const std::vector<UOp>& uops);

}  // namespace tg
