// Reductions: sum (with tinygrad's accumulation dtypes), max/min, any/all, prod, mean/var/std,
// softmax family, argmax/argmin.
#include <algorithm>

#include "tensor/function.hpp"
#include "lazy/metadata.hpp"

namespace tg {
using detail::resolve_dim;

namespace {
std::vector<int> reduce_axes(const Tensor& t, const Axes& axis, const char* op) {
  if (t.ndim() == 0) {
    if (axis.axes)
      for (int a : *axis.axes)
        if (a != 0 && a != -1) throw Error(std::string(op) + ": dim " + std::to_string(a) + " is out of range [-1, 0] for a 0-d tensor");
    return {};
  }
  return detail::resolve_axes(t, axis, op);
}
Shape drop_axes(const Shape& s, const std::vector<int>& axes) {
  Shape out;
  for (size_t i = 0; i < s.size(); i++)
    if (std::find(axes.begin(), axes.end(), static_cast<int>(i)) == axes.end()) out.push_back(s[i]);
  return out;
}
template <class Fn>
Tensor reduce(const Tensor& t, const Axes& axis, bool keepdim, const char* op) {
  std::vector<int> ax = reduce_axes(t, axis, op);
  Tensor ret = apply<Fn>({t}, std::vector<int64_t>(ax.begin(), ax.end()));
  if (keepdim) return ret;
  if (detail::sym_dims(t)) {   // drop the reduced axes by position: symbolic dims can't be matched by value
    std::vector<sint> ss = ret.sym_shape(), out;
    for (size_t i = 0; i < ss.size(); i++)
      if (std::find(ax.begin(), ax.end(), static_cast<int>(i)) == ax.end()) out.push_back(ss[i]);
    return ret.reshape_sym(out);
  }
  return ret.reshape(drop_axes(t.shape(), ax));
}
// elements folded into each output by a reduction over axis: a sint of the Variables when an axis is
// symbolic, so a kernel divides by the Variable's value rather than the value it was built with
sint reduced_count(const Tensor& t, const Axes& axis, const char* op) {
  std::vector<sint> ss = t.sym_shape();
  sint n = 1;
  for (int a : reduce_axes(t, axis, op)) n = n * ss[a];
  return n;
}
// x / n for a count n (a number, or a sint held in a const tensor of x's dtype)
Tensor div_count(const Tensor& x, const sint& n) {
  if (n.is_const()) return x.div(n.const_value());
  return x.div(detail::sint_tensor(n, x.dtype(), x.device()));
}
}  // namespace

Tensor Tensor::sum(Axes axis, bool keepdim, std::optional<DType> acc_dtype) const {
  TG_OP("sum");
  Tensor ret = reduce<F::Sum>(cast(acc_dtype.value_or(sum_acc_dtype(dtype()))), axis, keepdim, "sum");
  return !acc_dtype && (dtype() == dtypes::float16 || dtype() == dtypes::bfloat16) ? ret.cast(dtype()) : ret;
}
Tensor Tensor::max(Axes axis, bool keepdim) const { TG_OP("max"); return reduce<F::Max>(*this, axis, keepdim, "max"); }
Tensor Tensor::min(Axes axis, bool keepdim) const { TG_OP("min"); return -((-*this).max(axis, keepdim)); }
Tensor Tensor::any(Axes axis, bool keepdim) const { TG_OP("any"); return bool_().max(axis, keepdim); }
Tensor Tensor::all(Axes axis, bool keepdim) const { TG_OP("all"); return logical_not().any(axis, keepdim).logical_not(); }

// product as a tree of pairwise multiplies over the flattened reduce axes (exact, differentiable)
Tensor Tensor::prod(Axes axis, bool keepdim) const {
  TG_OP("prod");
  std::vector<int> ax = reduce_axes(*this, axis, "prod");
  Shape kept = drop_axes(shape(), ax), ks = shape();
  std::vector<int> order;
  int64_t count = 1;
  for (int i = 0; i < ndim(); i++)
    if (std::find(ax.begin(), ax.end(), i) == ax.end()) order.push_back(i);
  for (int a : ax) order.push_back(a), ks[a] = 1, count *= shape()[a];
  Shape out_shape = keepdim ? ks : kept;
  if (count == 0) return Tensor::ones(out_shape, Opts{dtype(), device(), false});
  Shape flat = kept;
  flat.push_back(count);
  Tensor x = (ndim() ? permute(order) : *this).reshape(flat);
  while (x.shape().back() > 1) {
    int64_t n = x.shape().back(), h = (n + 1) / 2;
    std::vector<std::pair<int64_t, int64_t>> pad(x.ndim(), {0, 0});
    pad.back() = {0, 2 * h - n};
    auto halves = x.pad(pad, 1.0).split(h, -1);
    x = halves[0] * halves[1];
  }
  return x.reshape(out_shape);
}

Tensor Tensor::mean(Axes axis, bool keepdim) const {
  TG_OP("mean");
  DType out = dtype().is_float() ? dtype() : dtypes::float32;
  Tensor num = cast(sum_acc_dtype(dtype())).sum(axis, keepdim);
  return div_count(num, reduced_count(*this, axis, "mean")).cast(out);
}
Tensor Tensor::var(Axes axis, bool keepdim, int64_t correction) const {
  TG_OP("var");
  Tensor squares = (*this - mean(axis, true)).square();
  sint n = reduced_count(*this, axis, "var");
  return div_count(squares.sum(axis, keepdim), (n - correction).max(0));
}
Tensor Tensor::std(Axes axis, bool keepdim, int64_t correction) const { TG_OP("std"); return var(axis, keepdim, correction).sqrt(); }

Tensor Tensor::softmax(int axis) const {
  TG_OP("softmax");
  Tensor m = *this - max(axis, true), e = m.exp();
  return e.div(e.sum(axis, true));
}
Tensor Tensor::log_softmax(int axis) const {
  TG_OP("log_softmax");
  Tensor m = *this - max(axis, true);
  return m - m.exp().sum(axis, true).log();
}
Tensor Tensor::logsumexp(std::optional<int> axis, bool keepdim) const {
  TG_OP("logsumexp");
  Axes ax = axis ? Axes(*axis) : Axes();
  Tensor m = max(ax, true);
  Tensor s = (*this - m).exp().sum(ax, keepdim).log();
  return s + (keepdim ? m : m.reshape(s.shape()));
}

// first index of the max: idx counts down from n-1, so the max of idx picks the earliest tie
Tensor Tensor::argmax(std::optional<int> axis, bool keepdim) const {
  TG_OP("argmax");
  if (!axis) return flatten().argmax(0);
  int a = resolve_dim(*this, *axis, "argmax");
  if (ndim() == 0) return flatten().argmax(0);   // torch: the one element is at index 0
  int64_t n = shape()[a];
  Tensor m = *this == max(a, true);
  Shape rs{n};
  for (int64_t i = a + 1; i < ndim(); i++) rs.push_back(1);
  Tensor ar = Tensor::arange(n - 1, -1, -1, Opts{{}, device(), false});
  // on a GPU the arange is a buffer of its own: fused, its folded reduce is a second reduce in the
  // kernel and keeps the row max from a block of cooperating threads (GROUP takes one reduce)
  if (device().rfind("CUDA", 0) == 0) ar = ar.contiguous();
  Tensor idx = m * ar.reshape(rs);
  return (n - idx.max(a, keepdim) - 1).cast(dtypes::int32);
}
// The order-reversing inverse (tinygrad's _inverse): ~x for ints (-x overflows at the minimum and
// reverses no unsigned order; on CUDA sm_90, NVRTC 13.0 compiled max(-a, -b, ...) over int32 with
// some negations dropped, so argmin picked wrong indices), logical not for bools, -x for floats.
Tensor Tensor::argmin(std::optional<int> axis, bool keepdim) const {
  TG_OP("argmin");
  const Tensor inv = dtype().is_int() ? *this ^ int64_t{-1} : -*this;
  return inv.argmax(axis, keepdim);
}

}  // namespace tg
