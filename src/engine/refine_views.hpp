// A kernel AST's shape split so that the views of its loads merge (see refine_views.cpp).
#pragma once
#include "uop/uop.hpp"

namespace tg {

// The AST with every ShapeTracker reshaped to a finer shape (dims split, never merged) under which
// loads that read through a reshape of a broadcast (max_pool2d's backward: the pooled values at
// each element of their windows) are one view with plain strides; REDUCE_AXIS axes follow the split.
// The AST as it is when no load gains from it or a view would get worse. REFINE_VIEWS=0 turns it off.
UOp refine_views(const UOp& sink);

}  // namespace tg
