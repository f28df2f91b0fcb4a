// Reduce loops narrowed to where a zero-padded operand is in bounds (CPU).
//
// A conv over a padded view (a stride-1 conv's input gradient: grad_output padded by k-1; a padded forward)
// lowers to REDUCE(a * where(gate, load, 0), ranges) with gate an AND of bounds like 0 <= y + ky < H: at the
// image's edges most taps multiply the padding's zeros (beautiful_mnist's conv2 input gradient: 24x24 outputs
// from 20x20, 1.44x the useful multiply-adds). Each bound of the gate that is linear in exactly one of the
// reduce's ranges (coefficient +-1) and otherwise in loops outside it moves into that range's start or end:
//   sum_{ky in [0, 5)} where(4 <= y + ky < 24, v, 0) = sum_{ky in [max(0, 4 - y), min(5, 24 - y))} v
// and leaves the gate (true inside the narrowed loop), so the loop skips exactly the terms that were zero.
// Only SUM reduces, and only bounds of a gate whose load is a factor of the reduced value (zero when the
// gate fails, whatever the other factors are).
#pragma once
#include "uop/uop.hpp"

namespace tg {

// sink with every REDUCE's ranges narrowed by the gates of its zero-padded factors (NARROW_REDUCE=0: unchanged)
UOp narrow_reduce_ranges(const UOp& sink);

}  // namespace tg
