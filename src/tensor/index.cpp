// operator[]: ints, slices (any step), None, Ellipsis and integer Tensors, as tinygrad 0.9.2's
// __getitem__: basic indexing is shrink/flip/pad/reshape (no copy); tensor indices become
// one-hot masks (index == arange) multiplied in and summed away.
#include <functional>
#include <map>

#include "tensor/function.hpp"
#include "lazy/metadata.hpp"

namespace tg {
using Pairs = std::vector<std::pair<int64_t, int64_t>>;

namespace {
// Python's slice.indices(size)
std::tuple<int64_t, int64_t, int64_t> slice_indices(const Slice& s, int64_t len) {
  int64_t step = s.step.value_or(1);
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  return {adjust(s.start, step < 0 ? len - 1 : 0), adjust(s.stop, step < 0 ? -1 : len), step};
}
std::string index_str(const Index& i) {
  if (auto p = std::get_if<int64_t>(&i.v)) return std::to_string(*p);
  if (std::holds_alternative<NoneT>(i.v)) return "None";
  if (std::holds_alternative<EllipsisT>(i.v)) return "...";
  if (std::holds_alternative<Tensor>(i.v)) return "Tensor";
  return "slice";
}
}  // namespace

Tensor Tensor::operator[](std::initializer_list<Index> il) const { TG_OP("getitem"); return (*this)[std::vector<Index>(il)]; }

Tensor Tensor::operator[](const std::vector<Index>& in) const {
  TG_OP("getitem");
  std::vector<Index> indices;
  // 0-d constant int tensors act as ints
  for (const Index& i : in) {
    if (auto t = std::get_if<Tensor>(&i.v); t && t->ndim() == 0 && t->dtype().is_int() && !t->requires_grad() &&
                                              detail::lb(*t)->is_unrealized_unmasked_const())
      indices.push_back(Index(static_cast<long long>(const_to_int(std::get<ConstType>(detail::lb(*t)->base()->arg)))));
    else if (auto t2 = std::get_if<Tensor>(&i.v)) indices.push_back(Index(t2->to(device())));
    else indices.push_back(i);
  }
  int n_ellipsis = 0, n_none = 0;
  size_t fill_idx = indices.size();
  for (size_t k = 0; k < indices.size(); k++) {
    if (std::holds_alternative<EllipsisT>(indices[k].v)) n_ellipsis++, fill_idx = std::min(fill_idx, k);
    if (std::holds_alternative<NoneT>(indices[k].v)) n_none++;
  }
  if (n_ellipsis > 1) throw Error("getitem: indices can only have a single ellipsis (...)");
  int64_t num_indices = static_cast<int64_t>(indices.size()) - n_ellipsis - n_none;
  if (num_indices > ndim())
    throw Error("getitem: too many indices (" + std::to_string(num_indices) + ") for a tensor of shape " + to_str(shape()));
  std::vector<Index> fill(ndim() - num_indices, Index(Slice{}));
  if (n_ellipsis) indices.erase(indices.begin() + fill_idx);
  indices.insert(indices.begin() + fill_idx, fill.begin(), fill.end());

  std::vector<int> none_dims, int_dims, tensor_dims;   // none/tensor: positions among all indices; int: among non-None
  std::vector<Index> filtered;
  for (size_t k = 0; k < indices.size(); k++) {
    if (std::holds_alternative<NoneT>(indices[k].v)) none_dims.push_back(static_cast<int>(k));
    else filtered.push_back(indices[k]);
    if (std::holds_alternative<Tensor>(indices[k].v)) tensor_dims.push_back(static_cast<int>(k));
  }
  Pairs new_slice;
  std::vector<int64_t> strides;
  std::vector<Tensor> tensor_index;
  for (size_t dim = 0; dim < filtered.size(); dim++) {
    int64_t size = shape()[dim];
    const Index& ix = filtered[dim];
    if (auto p = std::get_if<int64_t>(&ix.v)) {
      int64_t i = *p;
      if (i >= size || i < -size)
        throw Error("getitem: index " + std::to_string(i) + " is out of bounds for dim " + std::to_string(dim) + " with size " +
                    std::to_string(size) + " (shape " + to_str(shape()) + ")");
      if (i < 0) i += size;
      new_slice.push_back({i, i + 1}), strides.push_back(1), int_dims.push_back(static_cast<int>(dim));
    } else if (auto s = std::get_if<Slice>(&ix.v)) {
      if (s->step && *s->step == 0) throw Error("getitem: slice step can't be 0 (dim " + std::to_string(dim) + ")");
      auto [b, e, st] = slice_indices(*s, size);
      new_slice.push_back(st * (e - b) < 0 ? std::pair<int64_t, int64_t>{0, 0}
                          : st > 0         ? std::pair<int64_t, int64_t>{b, e}
                                           : std::pair<int64_t, int64_t>{e + 1, b + 1});
      strides.push_back(st);
    } else if (auto t = std::get_if<Tensor>(&ix.v)) {
      if (!t->dtype().is_int())
        throw Error("getitem: index tensor of dtype " + t->dtype().str() + " on dim " + std::to_string(dim) + " is not supported; use an int tensor");
      tensor_index.push_back(*t);
      new_slice.push_back({0, size}), strides.push_back(1);
    } else {
      throw Error("getitem: unsupported index " + index_str(ix));
    }
  }
  Tensor ret = filtered.empty() ? *this : shrink(new_slice);
  std::vector<int> flips;
  bool any_stride = false;
  for (size_t k = 0; k < strides.size(); k++) flips.insert(flips.end(), strides[k] < 0 ? 1 : 0, static_cast<int>(k)), any_stride |= std::abs(strides[k]) != 1;
  if (!flips.empty()) ret = ret.flip(flips);
  if (any_stride) {
    // pad each dim to a multiple of its stride, fold (n*st) -> (n, st) and keep the first of each group
    Pairs pad, sh;
    Shape rs, keep;
    for (size_t k = 0; k < strides.size(); k++) {
      int64_t st = std::abs(strides[k]), s = ret.shape()[k], up = (s + st - 1) / st * st;
      pad.push_back({0, up - s});
      rs.insert(rs.end(), {up / st, st});
      sh.insert(sh.end(), {{0, up / st}, {0, 1}});
      keep.push_back(up / st);
    }
    ret = ret.pad(pad).reshape(rs).shrink(sh).reshape(keep);
  }
  Shape new_shape = ret.shape();
  for (int d : none_dims) new_shape.insert(new_shape.begin() + d, 1);
  std::vector<int> dims_collapsed;
  for (auto it = int_dims.rbegin(); it != int_dims.rend(); ++it) {
    int dim = *it, add = 0;
    for (int d : none_dims) add += dim >= d;
    dims_collapsed.push_back(dim + add);
  }
  for (int d : dims_collapsed) new_shape.erase(new_shape.begin() + d);
  ret = ret.reshape(new_shape);
  if (tensor_dims.empty()) return ret;

  // advanced indexing
  std::map<int, Tensor> idx;
  std::vector<int> idx_order;
  for (size_t k = 0; k < tensor_dims.size(); k++) {
    int td = tensor_dims[k], dim = td;
    for (int d : dims_collapsed) dim -= td >= d;
    const Tensor& t = tensor_index[k];
    idx.insert_or_assign(dim, (t < 0).where(ret.shape()[dim], 0) + t);
    idx_order.push_back(dim);
  }
  int first_dim = idx.begin()->first, last_dim = idx.rbegin()->first;
  std::vector<Shape> ishapes;
  for (auto& [d, t] : idx) ishapes.push_back(t.shape());
  Shape big_shape = detail::broadcast_shape(ishapes, "getitem");
  Shape pre(ret.shape().begin(), ret.shape().begin() + first_dim);
  pre.insert(pre.end(), big_shape.begin(), big_shape.end());
  pre.insert(pre.end(), ret.shape().begin() + first_dim, ret.shape().end());
  std::optional<Tensor> mask;
  for (auto& [dim, i] : idx) {
    Shape is = i.shape();
    is.insert(is.end(), ret.ndim() - first_dim, 1);
    Shape ar_shape{ret.shape()[dim]};
    ar_shape.insert(ar_shape.end(), ret.ndim() - dim - 1, 1);
    Tensor a = Tensor::arange(ret.shape()[dim], Opts{{}, device(), false}).reshape(ar_shape);
    Tensor m = i.reshape(is).expand(pre) == a;
    mask = mask ? *mask * m : m;
  }
  Shape reshape_arg(ret.shape().begin(), ret.shape().begin() + first_dim);
  reshape_arg.insert(reshape_arg.end(), big_shape.size(), 1);
  reshape_arg.insert(reshape_arg.end(), ret.shape().begin() + first_dim, ret.shape().end());
  std::vector<int> red;
  for (auto& [d, t] : idx) red.push_back(d + static_cast<int>(big_shape.size()));
  ret = (ret.reshape(reshape_arg) * *mask).sum(red, false, ret.dtype());
  bool consecutive = last_dim - first_dim + 1 == static_cast<int>(idx.size());
  if (first_dim != 0 && idx.size() != 1 && !consecutive) {
    std::vector<int> perm;
    int nb = static_cast<int>(big_shape.size());
    for (int k = first_dim; k < first_dim + nb; k++) perm.push_back(k);
    for (int k = 0; k < first_dim; k++) perm.push_back(k);
    for (int k = first_dim + nb; k < ret.ndim(); k++) perm.push_back(k);
    ret = ret.permute(perm);
  }
  return ret;
}

}  // namespace tg
