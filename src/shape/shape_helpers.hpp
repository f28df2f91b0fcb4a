// Shape helpers shared by view.cpp, shapetracker.cpp, the lazy graph and the scheduler
// (tinygrad's module-level functions in view.py).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tg/shapetracker.hpp"
#include "uop/symbolic.hpp"

namespace tg {


std::vector<int64_t> canonicalize_strides(const Shape& shape, const std::vector<int64_t>& strides);
std::vector<int64_t> strides_for_shape(const Shape& shape);   // row-major, size-1 dims stride 0
Shape reduce_shape(const Shape& shape, const std::vector<int64_t>& axis);   // the axes set to 1

// Contiguous or zero-strided runs merged: (merged size, stride, merged size without the expanded part).
struct MergedDim { int64_t size, stride, real; };
std::vector<MergedDim> merge_dims(const Shape& shape, const std::vector<int64_t>& strides, const std::optional<Mask>& mask);

// The mask of a reshape, or nothing when the reshape cuts across the mask.
std::optional<Mask> reshape_mask(const std::optional<Mask>& mask, const Shape& old_shape, const Shape& new_shape);

// Flat offset -> multi-index in shape (row-major).
std::vector<int64_t> un1d(const Shape& shape, int64_t offs);

std::string mask_str(const Mask& m);   // "((0, 2), (1, 3))"

// symview.cpp: the int-argument movement ops and merging on a View with `sym` set
std::vector<sint> sym_lift_reshape(const View& v, const Shape& ns);   // ints -> dims, symbolic ones kept (bound)
std::optional<View> sym_reshape_ints(const View& v, const Shape& ns);
View sym_expand_ints(const View& v, const Shape& ns);
View sym_pad_ints(const View& v, const Mask& arg);
View sym_shrink_ints(const View& v, const Mask& arg);
View sym_permute(const View& v, const std::vector<int>& axis);
View sym_stride(const View& v, const std::vector<int64_t>& mul);
std::optional<View> sym_add(const View& vm2, const View& vm1);
std::string sym_view_str(const View& v);
bool sym_same(const sint& a, const sint& b);   // the same dim: structurally, or equal across the variables' ranges
bool sym_equal(const SymView& a, const SymView& b);
size_t sym_hash(const SymView& s);

}  // namespace tg
