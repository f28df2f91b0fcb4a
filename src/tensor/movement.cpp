// Movement ops (zero-copy views) and the high-level ones built on them: cat, stack, repeat,
// split, chunk, gather.
#include <algorithm>
#include <numeric>

#include "tensor/function.hpp"
#include "lazy/metadata.hpp"

namespace tg {
using detail::lb;
using detail::resolve_dim;
using detail::resolve_existing_dim;
using Pairs = std::vector<std::pair<int64_t, int64_t>>;

Tensor Tensor::reshape(Shape new_shape) const {
  TG_OP("reshape");
  int minus = 0;
  int64_t known = 1;
  for (int64_t s : new_shape) {
    if (s == -1) minus++;
    else if (s < 0) throw Error("reshape: negative dimension " + std::to_string(s) + " in " + to_str(new_shape));
    else known *= s;
  }
  if (minus > 1) throw Error("reshape: only one dimension can be inferred with -1, got " + to_str(new_shape));
  if (minus) {
    if (known == 0 || numel() % known != 0)
      throw Error("reshape: can't infer the -1 in " + to_str(new_shape) + " for a tensor of shape " + to_str(shape()));
    for (auto& s : new_shape)
      if (s == -1) s = numel() / known;
  }
  if (detail::sym_dims(*this)) {   // symbolic dims to the ints of their bound values: a view of this value only
    if (tg::prod(new_shape) != numel())
      throw Error("reshape: can't reshape " + detail::sym_str(sym_shape()) + " (" + std::to_string(numel()) + " elements at the bound values) to " +
                  to_str(new_shape) + " (" + std::to_string(tg::prod(new_shape)) + " elements)");
    return reshape_sym(std::vector<sint>(new_shape.begin(), new_shape.end()));
  }
  if (tg::prod(new_shape) != numel())
    throw Error("reshape: can't reshape " + to_str(shape()) + " (" + std::to_string(numel()) + " elements) to " +
                to_str(new_shape) + " (" + std::to_string(tg::prod(new_shape)) + " elements)");
  return new_shape == shape() ? *this : apply<F::Reshape>({*this}, new_shape);
}
Tensor Tensor::view(Shape s) const { TG_OP("view"); return reshape(std::move(s)); }

Tensor Tensor::expand(Shape new_shape) const {
  TG_OP("expand");
  if (new_shape.size() < shape().size())
    throw Error("expand: can't expand shape " + to_str(shape()) + " to fewer dimensions " + to_str(new_shape));
  size_t off = new_shape.size() - shape().size();
  for (size_t i = 0; i < new_shape.size(); i++) {
    int64_t from = i >= off ? shape()[i - off] : 1;
    if (new_shape[i] == -1) new_shape[i] = from;
  }
  return detail::broadcast_to(*this, new_shape, "expand");
}

Tensor Tensor::permute(std::vector<int> order) const {
  TG_OP("permute");
  for (auto& o : order) o = resolve_dim(*this, o, "permute");
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  bool ok = sorted.size() == static_cast<size_t>(ndim());
  for (size_t i = 0; ok && i < sorted.size(); i++) ok = sorted[i] == static_cast<int>(i);
  if (!ok) throw Error("permute: " + to_str(order) + " is not a permutation of the dims of shape " + to_str(shape()));
  return apply<F::Permute>({*this}, order);
}

Tensor Tensor::flip(Axes axis) const {
  TG_OP("flip");
  std::vector<int> ax = detail::resolve_axes(*this, axis, "flip");
  return apply<F::Flip>({*this}, ax);
}

Tensor Tensor::shrink(Pairs arg) const {
  TG_OP("shrink");
  if (arg.size() != shape().size())
    throw Error("shrink: needs one (start, end) pair per dim of shape " + to_str(shape()) + ", got " + std::to_string(arg.size()));
  bool noop = true;
  for (size_t i = 0; i < arg.size(); i++) {
    auto [b, e] = arg[i];
    if (b < 0 || e < b || e > shape()[i])
      throw Error("shrink: (" + std::to_string(b) + ", " + std::to_string(e) + ") is out of range for dim " + std::to_string(i) +
                  " of shape " + to_str(shape()) + "; need 0 <= start <= end <= size");
    noop &= b == 0 && e == shape()[i];
  }
  return noop ? *this : apply<F::Shrink>({*this}, arg);
}

Tensor Tensor::pad(Pairs arg, double value) const {
  TG_OP("pad");
  if (arg.size() != shape().size())
    throw Error("pad: needs one (before, after) pair per dim of shape " + to_str(shape()) + ", got " + std::to_string(arg.size()));
  bool noop = true;
  for (auto [b, e] : arg) {
    if (b < 0 || e < 0) throw Error("pad: negative padding (" + std::to_string(b) + ", " + std::to_string(e) + "); use shrink to cut");
    noop &= b == 0 && e == 0;
  }
  if (noop) return *this;
  Tensor ret = apply<F::Pad>({*this}, arg);
  if (value == 0) return ret;
  return ret + apply<F::Pad>({ones_like()}, arg).where(0, value);
}

namespace detail {
// tinygrad's _slice: a window that may reach outside the tensor (filled with value)
Tensor slice_pad(const Tensor& x, const std::vector<std::optional<std::pair<int64_t, int64_t>>>& arg, double value) {
  Pairs a, padding, sh;
  for (size_t i = 0; i < x.shape().size(); i++) {
    int64_t s = x.shape()[i];
    auto p = i < arg.size() && arg[i] ? *arg[i] : std::pair<int64_t, int64_t>{0, s};
    a.push_back(p);
    padding.push_back({std::max<int64_t>(0, -p.first), std::max<int64_t>(0, p.second - s)});
  }
  for (size_t i = 0; i < a.size(); i++) sh.push_back({a[i].first + padding[i].first, a[i].second + padding[i].first});
  return x.pad(padding, value).shrink(sh);
}
}  // namespace detail

Tensor Tensor::pad2d(std::vector<int64_t> p, double value) const {
  TG_OP("pad2d");
  if (p.size() % 2 != 0 || p.size() / 2 > shape().size())
    throw Error("pad2d: padding " + to_str(p) + " needs an even length of at most 2*ndim for shape " + to_str(shape()));
  size_t k = p.size() / 2, n = shape().size();
  std::vector<std::optional<std::pair<int64_t, int64_t>>> arg(n);
  for (size_t j = 0; j < k; j++) {
    size_t dim = n - 1 - j;   // pairs go from the last dim backwards
    arg[dim] = std::pair<int64_t, int64_t>{-p[2 * j], shape()[dim] + p[2 * j + 1]};
    if (arg[dim]->second < arg[dim]->first)
      throw Error("pad2d: padding " + to_str(p) + " removes more than dim " + std::to_string(dim) + " of shape " + to_str(shape()));
  }
  return detail::slice_pad(*this, arg, value);
}

Tensor Tensor::transpose(int dim0, int dim1) const {
  TG_OP("transpose");
  std::vector<int> order(ndim());
  std::iota(order.begin(), order.end(), 0);
  int d0 = resolve_dim(*this, dim0, "transpose"), d1 = resolve_dim(*this, dim1, "transpose");
  if (ndim() == 0) return *this;   // torch: transposing a 0-d tensor (dims 0/-1) is the identity
  std::swap(order[d0], order[d1]);
  return permute(order);
}
Tensor Tensor::T() const { TG_OP("T"); return transpose(); }

Tensor Tensor::flatten(int start_dim, int end_dim) const {
  TG_OP("flatten");
  int s = resolve_dim(*this, start_dim, "flatten"), e = resolve_dim(*this, end_dim, "flatten");
  if (ndim() == 0) return reshape({1});
  if (e < s) throw Error("flatten: start_dim " + std::to_string(start_dim) + " comes after end_dim " + std::to_string(end_dim));
  Shape ns(shape().begin(), shape().begin() + s);
  ns.push_back(tg::prod(Shape(shape().begin() + s, shape().begin() + e + 1)));
  ns.insert(ns.end(), shape().begin() + e + 1, shape().end());
  return reshape(ns);
}
Tensor Tensor::unflatten(int dim, Shape sizes) const {
  TG_OP("unflatten");
  int d = resolve_existing_dim(*this, dim, "unflatten");
  Shape ns(shape().begin(), shape().begin() + d);
  ns.insert(ns.end(), sizes.begin(), sizes.end());
  ns.insert(ns.end(), shape().begin() + d + 1, shape().end());
  return reshape(ns);
}
Tensor Tensor::squeeze(std::optional<int> dim) const {
  TG_OP("squeeze");
  if (!dim) {
    Shape ns;
    for (int64_t s : shape())
      if (s != 1) ns.push_back(s);
    return reshape(ns);
  }
  int d = resolve_dim(*this, *dim, "squeeze");
  if (ndim() == 0 || shape()[d] != 1) return *this;
  Shape ns = shape();
  ns.erase(ns.begin() + d);
  return reshape(ns);
}
Tensor Tensor::unsqueeze(int dim) const {
  TG_OP("unsqueeze");
  int d = resolve_dim(*this, dim, "unsqueeze", true);
  if (is_symbolic()) {   // by position: a symbolic dim at value 1 looks like the new unit dim
    std::vector<sint> ss = sym_shape();
    ss.insert(ss.begin() + d, sint(1));
    return reshape_sym(ss);
  }
  Shape ns = shape();
  ns.insert(ns.begin() + d, 1);
  return reshape(ns);
}

Tensor Tensor::cat(const std::vector<Tensor>& ts, int dim) {
  TG_OP("cat");
  if (ts.empty()) throw Error("cat: needs at least one tensor");
  const Tensor& first = ts[0];
  int d = resolve_existing_dim(first, dim, "cat");
  for (const Tensor& t : ts)
    if (detail::sym_dims(t)) return detail::cat_sym(ts, d);
  for (const Tensor& t : ts) {
    bool ok = t.ndim() == first.ndim();
    for (int i = 0; ok && i < first.ndim(); i++) ok = i == d || t.shape()[i] == first.shape()[i];
    if (!ok)
      throw Error("cat: shapes " + to_str(first.shape()) + " and " + to_str(t.shape()) + " must match in every dim but dim " +
                  std::to_string(d));
  }
  int64_t total = 0;
  for (const Tensor& t : ts) total += t.shape()[d];
  std::optional<Tensor> ret;
  int64_t k = 0;
  for (const Tensor& t : ts) {
    Pairs p(t.ndim(), {0, 0});
    p[d] = {k, total - k - t.shape()[d]};
    k += t.shape()[d];
    Tensor padded = t.pad(p);
    ret = ret ? *ret + padded : padded;
  }
  return *ret;
}
Tensor Tensor::stack(const std::vector<Tensor>& ts, int dim) {
  TG_OP("stack");
  if (ts.empty()) throw Error("stack: needs at least one tensor");
  int d = resolve_dim(ts[0], dim, "stack", true);
  std::vector<Tensor> us;
  for (const Tensor& t : ts) us.push_back(t.unsqueeze(d));
  return cat(us, d);
}

Tensor Tensor::repeat(Shape repeats) const {
  TG_OP("repeat");
  if (repeats.size() < shape().size())
    throw Error("repeat: " + to_str(repeats) + " needs at least as many entries as the dims of shape " + to_str(shape()));
  for (int64_t r : repeats)
    if (r < 0) throw Error("repeat: negative repeat count in " + to_str(repeats));
  Shape base(repeats.size() - shape().size(), 1);
  base.insert(base.end(), shape().begin(), shape().end());
  Shape new_shape, expand_shape, final_shape;
  for (size_t i = 0; i < base.size(); i++) {
    new_shape.insert(new_shape.end(), {1, base[i]});
    expand_shape.insert(expand_shape.end(), {repeats[i], base[i]});
    final_shape.push_back(repeats[i] * base[i]);
  }
  return reshape(new_shape).expand(expand_shape).reshape(final_shape);
}
Tensor Tensor::repeat_interleave(int64_t repeats, std::optional<int> dim) const {
  TG_OP("repeat_interleave");
  if (repeats < 0) throw Error("repeat_interleave: negative repeats " + std::to_string(repeats));
  Tensor x = dim ? *this : flatten();
  int d = dim ? resolve_existing_dim(*this, *dim, "repeat_interleave") : 0;
  Shape shp = x.shape(), r(shp.begin(), shp.begin() + d + 1), e, f(shp.begin(), shp.begin() + d);
  e = r;
  r.push_back(1), e.push_back(repeats), f.push_back(shp[d] * repeats);
  for (size_t i = d + 1; i < shp.size(); i++) r.push_back(shp[i]), e.push_back(shp[i]), f.push_back(shp[i]);
  return x.reshape(r).expand(e).reshape(f);
}

std::vector<Tensor> Tensor::split(std::vector<int64_t> sizes, int dim) const {
  TG_OP("split");
  int d = resolve_existing_dim(*this, dim, "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw Error("split: negative size in " + to_str(sizes));
    total += s;
  }
  if (total != shape()[d])
    throw Error("split: sizes " + to_str(sizes) + " sum to " + std::to_string(total) + " but dim " + std::to_string(d) +
                " of shape " + to_str(shape()) + " has " + std::to_string(shape()[d]));
  std::vector<Tensor> out;
  int64_t k = 0;
  for (int64_t s : sizes) {
    Pairs p;
    for (int i = 0; i < ndim(); i++) p.push_back(i == d ? std::pair<int64_t, int64_t>{k, k + s} : std::pair<int64_t, int64_t>{0, shape()[i]});
    out.push_back(shrink(p));
    k += s;
  }
  return out;
}
std::vector<Tensor> Tensor::split(int64_t size, int dim) const {
  TG_OP("split");
  if (size <= 0) throw Error("split: size must be positive, got " + std::to_string(size));
  int d = resolve_existing_dim(*this, dim, "split");
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < std::max<int64_t>(1, shape()[d]); i += size) sizes.push_back(std::min(size, shape()[d] - i));
  return split(sizes, d);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int dim) const {
  TG_OP("chunk");
  if (chunks <= 0) throw Error("chunk: chunks must be positive, got " + std::to_string(chunks));
  int d = resolve_existing_dim(*this, dim, "chunk");
  if (shape()[d] == 0) return split(std::vector<int64_t>(chunks, 0), d);
  return split((shape()[d] + chunks - 1) / chunks, d);
}

Tensor Tensor::gather(int dim, const Tensor& index) const {
  TG_OP("gather");
  if (index.ndim() != ndim())
    throw Error("gather: index of shape " + to_str(index.shape()) + " needs the same number of dims as " + to_str(shape()));
  if (!index.dtype().is_int()) throw Error("gather: index must be an int tensor, got " + index.dtype().str());
  int d = resolve_existing_dim(*this, dim, "gather");
  Pairs p;
  for (int i = 0; i < ndim(); i++) {
    if (i != d && index.shape()[i] > shape()[i])
      throw Error("gather: index shape " + to_str(index.shape()) + " exceeds input shape " + to_str(shape()) + " in dim " + std::to_string(i));
    p.push_back(i == d ? std::pair<int64_t, int64_t>{0, shape()[i]} : std::pair<int64_t, int64_t>{0, index.shape()[i]});
  }
  Tensor x = shrink(p).unsqueeze(-1).transpose(-1, d);
  Tensor ar = Tensor::arange(shape()[d], Opts{{}, device(), false});
  return ((index.to(device()).unsqueeze(-1) == ar) * x).sum(-1, false, dtype());
}

}  // namespace tg
