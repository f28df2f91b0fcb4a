// Creation helpers: empty, full, zeros, ones, arange, eye and the *_like family.
#include <cmath>

#include "tensor/function.hpp"
#include "lazy/metadata.hpp"

namespace tg {
using detail::make_tensor;

namespace {
Tensor arange_impl(double start, double stop, double step, DType dt, const Opts& opts) {
  if (step == 0) throw Error("arange: step must not be 0");
  Opts o{dt, opts.device, opts.requires_grad};
  // numpy semantics: an empty range is an empty tensor, whatever the signs
  if ((stop - start) / step <= 0) return Tensor::full({0}, 0, o);
  int64_t n = static_cast<int64_t>(std::ceil((stop - start) / step));
  ConstType st = dt.is_float() ? ConstType(step) : ConstType(static_cast<int64_t>(step));
  ConstType off = dt.is_float() ? ConstType(start - step) : ConstType(static_cast<int64_t>(start - step));
  Tensor steps = Tensor::full({n}, st, o);
  return detail::cumsum_(steps, 0).add(std::holds_alternative<double>(off) ? Operand(std::get<double>(off))
                                                                          : Operand(std::get<int64_t>(off)))
      .cast(dt);
}
}  // namespace

Tensor Tensor::empty(Shape shape, Opts opts) {
  TG_OP("empty");
  detail::check_shape(shape, "empty");
  DType dt = opts.dtype.value_or(dtypes::default_float());
  return make_tensor(LazyBuffer::metaop(MetaOps::EMPTY, shape, dt, detail::resolve_device(opts.device)), opts.requires_grad);
}
Tensor Tensor::full(Shape shape, ConstType fill, Opts opts) {
  TG_OP("full");
  detail::check_shape(shape, "full");
  return Tensor(fill, opts).reshape(Shape(shape.size(), 1)).expand(shape);
}
Tensor Tensor::zeros(Shape shape, Opts opts) { TG_OP("zeros"); return full(std::move(shape), ConstType(0.0), std::move(opts)); }
Tensor Tensor::ones(Shape shape, Opts opts) { TG_OP("ones"); return full(std::move(shape), ConstType(1.0), std::move(opts)); }

Tensor Tensor::arange(double start, double stop, double step, Opts opts) {
  TG_OP("arange");
  return arange_impl(start, stop, step, opts.dtype.value_or(dtypes::default_float()), opts);
}
Tensor Tensor::arange_int(int64_t start, int64_t stop, int64_t step, Opts opts) {
  TG_OP("arange");
  return arange_impl(static_cast<double>(start), static_cast<double>(stop), static_cast<double>(step),
                     opts.dtype.value_or(dtypes::default_int()), opts);
}
Tensor Tensor::arange(int64_t stop, Opts opts) { TG_OP("arange"); return arange_int(0, stop, 1, std::move(opts)); }

Tensor Tensor::eye(int64_t n, int64_t m, Opts opts) {
  TG_OP("eye");
  if (n < 0 || m < 0) throw Error("eye: negative size n=" + std::to_string(n) + ", m=" + std::to_string(m));
  Tensor t = ones({n, 1}, opts).pad({{0, 0}, {0, n}}).flatten().shrink({{0, n * n}}).reshape({n, n});
  return detail::slice_pad(t, {std::nullopt, std::pair<int64_t, int64_t>{0, m}});
}
Tensor Tensor::eye(int64_t n, Opts opts) { TG_OP("eye"); return eye(n, n, std::move(opts)); }

Tensor Tensor::full_like(ConstType fill, Opts opts) const {
  TG_OP("full_like");
  if (is_symbolic()) {   // keep the symbolic dims: the constant expands to the same expressions
    Opts o{opts.dtype.value_or(dtype()), opts.device.empty() ? device() : opts.device, opts.requires_grad};
    return Tensor(fill, o).reshape(Shape(ndim(), 1)).expand_sym(sym_shape());
  }
  return full(shape(), fill, Opts{opts.dtype.value_or(dtype()), opts.device.empty() ? device() : opts.device, opts.requires_grad});
}
Tensor Tensor::zeros_like(Opts opts) const { TG_OP("zeros_like"); return full_like(ConstType(int64_t{0}), std::move(opts)); }
Tensor Tensor::ones_like(Opts opts) const { TG_OP("ones_like"); return full_like(ConstType(int64_t{1}), std::move(opts)); }

}  // namespace tg
