// View and ShapeTracker (tinygrad 0.9.2 shape/view.py, shape/shapetracker.py).
// A View maps an index in its shape to an offset in a buffer: offset + sum(idx[i]*strides[i]),
// valid only inside the mask. A ShapeTracker is a stack of views: views[0] addresses the
// buffer, each later view addresses the flat index space of the view below it. Movement ops
// (reshape/permute/expand/pad/shrink/stride) only rewrite the last view, so they never copy data.
// Shapes are concrete int64 (symbolic shapes are not supported yet).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tg/symbolic.hpp"

namespace tg {

using Shape = std::vector<int64_t>;
using Mask = std::vector<std::pair<int64_t, int64_t>>;   // per axis [begin, end)

struct View {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  std::optional<Mask> mask;
  bool contiguous = false;

  // Canonical constructor: size-1 dims get stride 0, full masks are dropped, dims masked to a
  // single element get stride 0, an empty mask zeroes everything, contiguity is detected.
  static View create(const Shape& shape, std::optional<std::vector<int64_t>> strides = {}, int64_t offset = 0,
                     std::optional<Mask> mask = {});

  int64_t size() const;                                  // prod(shape)
  std::optional<View> reshape(const Shape& new_shape) const;   // nullopt when one view can't express it
  View permute(const std::vector<int>& axis) const;
  View expand(const Shape& new_shape) const;
  View pad(const Mask& arg) const;                       // (before, after) per axis, >= 0
  View shrink(const Mask& arg) const;                    // [begin, end) per axis
  View stride(const std::vector<int64_t>& mul) const;    // negative = flip
  View minify() const;                                   // fewest dims with the same indexing
  std::optional<View> invert(const Shape& out_shape) const;
  std::optional<View> operator+(const View& vm1) const;  // self then vm1 as one view (View.__add__)

  std::string str() const;   // "View(shape=(10, 10), strides=(1, 10), offset=0, mask=None, contiguous=False)"
  bool operator==(const View& o) const;
  size_t hash() const;
};

class ShapeTracker {
 public:
  std::vector<View> views;

  ShapeTracker() = default;
  explicit ShapeTracker(std::vector<View> v) : views(std::move(v)) {}
  static ShapeTracker from_shape(const Shape& shape);

  // movement ops (each returns a new tracker; bad arguments throw tg::Error)
  ShapeTracker reshape(const Shape& new_shape) const;
  ShapeTracker permute(const std::vector<int>& axis) const;
  ShapeTracker expand(const Shape& new_shape) const;
  ShapeTracker pad(const Mask& arg) const;
  ShapeTracker shrink(const Mask& arg) const;
  ShapeTracker stride(const std::vector<int64_t>& mul) const;

  ShapeTracker operator+(const ShapeTracker& st) const;   // self's views then st's, simplified one at a time
  ShapeTracker simplify() const;                           // merge the last views while they merge
  std::optional<ShapeTracker> invert(const Shape& out_shape) const;

  bool contiguous() const;    // one view, the identity
  bool consecutive() const;   // one view, unmasked, row-major strides (offset may be nonzero)
  const Shape& shape() const { return views.back().shape; }
  size_t size() const;        // prod(shape), tinygrad's st.size

  // Strides of the full index per output axis as a linear function: None where the axis enters
  // non-linearly (through div/mod of merged views) or, unless ignore_valid, the validity.
  std::vector<std::optional<int64_t>> real_strides(bool ignore_valid = false) const;
  std::vector<int> unit_stride_axes(bool ignore_valid = false) const;
  int64_t real_size() const;            // 1 + the largest buffer index reached (0 if nothing valid)
  bool axis_is_masked(int axis) const;  // whether the validity depends on this axis

  // (index, valid) over variables idx0, idx1, ..., simplified: what the seeds print
  std::pair<Expr, Expr> expr_idxs() const;

  std::string str() const;   // "ShapeTracker(views=(View(...),))"
  bool operator==(const ShapeTracker& o) const { return views == o.views; }
  size_t hash() const;
};

}  // namespace tg

template <> struct std::hash<tg::View> { size_t operator()(const tg::View& v) const { return v.hash(); } };
template <> struct std::hash<tg::ShapeTracker> { size_t operator()(const tg::ShapeTracker& s) const { return s.hash(); } };
