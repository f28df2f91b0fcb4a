// Processing ops: matmul/dot, pooling (tinygrad's _pool), conv2d, conv_transpose2d, cumsum,
// triangular masks, interpolate and einsum.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "tensor/function.hpp"
#include "lazy/metadata.hpp"

namespace tg {
using detail::resolve_dim;
using Pairs = std::vector<std::pair<int64_t, int64_t>>;

namespace detail {
std::vector<int64_t> make_pair(const Shape& v, size_t n, const char* op, const char* what) {
  if (v.size() == 1) return Shape(n, v[0]);
  if (v.size() == n) return v;
  throw Error(std::string(op) + ": " + what + " " + to_str(v) + " needs 1 or " + std::to_string(n) + " values");
}

std::vector<int64_t> padding2d(const Shape& padding, size_t dims, const char* op) {
  if (padding.size() == 1) return Shape(2 * dims, padding[0]);
  if (padding.size() == 2 * dims) return padding;
  if (padding.size() == dims) {
    Shape out;
    for (auto it = padding.rbegin(); it != padding.rend(); ++it) out.insert(out.end(), {*it, *it});
    return out;
  }
  throw Error(std::string(op) + ": padding " + to_str(padding) + " needs 1, " + std::to_string(dims) + " or " +
              std::to_string(2 * dims) + " values");
}

Tensor pool(const Tensor& x, const Shape& k, const Shape& stride, const Shape& dilation, const char* op) {
  size_t nk = k.size();
  if (static_cast<size_t>(x.ndim()) < nk) throw Error(std::string(op) + ": can't pool shape " + to_str(x.shape()) + " with kernel " + to_str(k));
  Shape s = make_pair(stride, nk, op, "stride"), d = make_pair(dilation, nk, op, "dilation");
  size_t nn = x.ndim() - nk;
  Shape i(x.shape().end() - nk, x.shape().end()), o;
  for (size_t j = 0; j < nk; j++) {
    if (k[j] <= 0 || s[j] <= 0 || d[j] <= 0)
      throw Error(std::string(op) + ": kernel " + to_str(k) + ", stride " + to_str(s) + " and dilation " + to_str(d) + " must be positive");
    int64_t span = d[j] * (k[j] - 1) + 1;
    if (span > i[j])
      throw Error(std::string(op) + ": kernel " + to_str(k) + " with dilation " + to_str(d) + " is larger than the input " +
                  to_str(x.shape()) + " (after padding)");
    o.push_back((i[j] - d[j] * (k[j] - 1) + s[j] - 1) / s[j]);
  }
  Pairs noop;
  for (size_t j = 0; j < nn; j++) noop.push_back({0, x.shape()[j]});
  Shape noop_shape(x.shape().begin(), x.shape().begin() + nn);
  auto with = [&](const Pairs& p) { Pairs r = noop; r.insert(r.end(), p.begin(), p.end()); return r; };
  auto withs = [&](const Shape& p) { Shape r = noop_shape; r.insert(r.end(), p.begin(), p.end()); return r; };
  std::vector<int> perm(nn);
  std::iota(perm.begin(), perm.end(), 0);
  bool overlap = false;
  for (size_t j = 0; j < nk; j++) overlap |= k[j] > s[j] || d[j] != 1;
  if (overlap) {
    // repeat so the windows can be read without padding, then carve out dilation and stride
    Shape rep(nn, 1);
    Pairs sh1, sh2, sh3;
    Shape rs1, rs2, rs3;
    for (size_t j = 0; j < nk; j++) {
      rep.push_back((k[j] * (i[j] + d[j]) + i[j] - 1) / i[j]);
      sh1.push_back({0, k[j] * (i[j] + d[j])});
      rs1.insert(rs1.end(), {k[j], i[j] + d[j]});
      sh2.insert(sh2.end(), {{0, k[j]}, {0, o[j] * s[j]}});
      rs2.insert(rs2.end(), {k[j], o[j], s[j]});
      sh3.insert(sh3.end(), {{0, k[j]}, {0, o[j]}, {0, 1}});
      rs3.insert(rs3.end(), {k[j], o[j]});
    }
    Tensor xup = x.repeat(rep).shrink(with(sh1)).reshape(withs(rs1));
    xup = xup.shrink(with(sh2)).reshape(withs(rs2));
    xup = xup.shrink(with(sh3)).reshape(withs(rs3));
    for (size_t j = 0; j < nk; j++) perm.push_back(static_cast<int>(nn + j * 2 + 1));
    for (size_t j = 0; j < nk; j++) perm.push_back(static_cast<int>(nn + j * 2));
    return xup.permute(perm);
  }
  Pairs pd(nn, {0, 0}), sh1, sh2;
  Shape rs;
  for (size_t j = 0; j < nk; j++) {
    pd.push_back({0, std::max<int64_t>(0, o[j] * s[j] - i[j])});
    sh1.push_back({0, o[j] * s[j]});
    rs.insert(rs.end(), {o[j], s[j]});
    sh2.insert(sh2.end(), {{0, o[j]}, {0, k[j]}});
  }
  Tensor xup = x.pad(pd).shrink(with(sh1)).reshape(withs(rs)).shrink(with(sh2));
  for (size_t j = 0; j < nk; j++) perm.push_back(static_cast<int>(nn + j * 2));
  for (size_t j = 0; j < nk; j++) perm.push_back(static_cast<int>(nn + j * 2 + 1));
  return xup.permute(perm);
}

// inclusive cumsum along axis as a sum over a sliding window of the left-padded input
Tensor cumsum_(const Tensor& x, int axis, bool first_zero) {
  int64_t n = x.shape()[axis];
  TG_ASSERT(n != 0, "cumsum_ of an empty axis");
  int64_t pl = n - (first_zero ? 0 : 1);
  return pool(x.transpose(axis, -1).pad2d({pl, -int64_t(first_zero)}), {n}, {1}, {1}, "cumsum").sum(-1).transpose(axis, -1);
}

Tensor tri(int64_t r, int64_t c, int64_t diagonal, const Opts& opts) {
  if (r == 0 || c == 0 || diagonal >= c) return Tensor::zeros({r, c}, opts);
  if (r + diagonal <= 0) return Tensor::ones({r, c}, opts);
  int64_t s = r + c - 1;
  // a (s, s) upper triangle from a flattened row of ones padded by s zeros, read with row length 2s-1
  Tensor t = Tensor::ones({s, s}, opts).pad({{0, 0}, {0, s}}).flatten().shrink({{0, s * (2 * s - 1)}}).reshape({s, -1}).shrink({{0, s}, {0, s}});
  return diagonal <= 0 ? t.shrink({{0, r}, {-diagonal, c - diagonal}}) : t.shrink({{diagonal, r + diagonal}, {0, c}});
}
}  // namespace detail

// ---- matmul
Tensor Tensor::dot(const Tensor& w, std::optional<DType> acc_dtype) const {
  TG_OP("dot");
  if (is_symbolic() || w.is_symbolic()) return detail::dot_sym(*this, w, acc_dtype);
  int64_t n1 = ndim(), n2 = w.ndim();
  if (n1 == 0 || n2 == 0)
    throw Error("matmul: both arguments need at least 1 dim, got shapes " + to_str(shape()) + " and " + to_str(w.shape()));
  int64_t L = shape().back(), R = w.shape()[n2 - std::min<int64_t>(n2, 2)];
  if (L != R)
    throw Error("matmul: shapes " + to_str(shape()) + " and " + to_str(w.shape()) + " don't match: inner dims " + std::to_string(L) +
                " != " + std::to_string(R));
  int64_t ones = std::min({n1 - 1, n2 - 1, int64_t{1}});
  Shape xs(shape().begin(), shape().end() - 1), ws(w.shape().begin(), w.shape().end() - std::min<int64_t>(n2, 2));
  Shape xb(shape().begin(), shape().end() - std::min<int64_t>(n1, 2)), wb(w.shape().begin(), w.shape().end() - std::min<int64_t>(n2, 2));
  detail::broadcast_shape({xb, wb}, "matmul");   // batch dims must broadcast
  xs.insert(xs.end(), ones, 1), xs.push_back(L);
  ws.insert(ws.end(), ones, 1), ws.insert(ws.end(), w.shape().end() - std::min<int64_t>(n2, 2), w.shape().end());
  Tensor x = reshape(xs), y = w.reshape(ws).transpose(-1, -static_cast<int>(std::min<int64_t>(n2, 2)));
  return (x * y).sum(-1, false, acc_dtype).cast(acc_dtype.value_or(least_upper_dtype(x.dtype(), y.dtype())));
}
Tensor Tensor::matmul(const Tensor& x, bool reverse, std::optional<DType> acc_dtype) const {
  TG_OP("matmul");
  return reverse ? x.dot(*this, acc_dtype) : dot(x, acc_dtype);
}

// ---- pooling and convolution
Tensor Tensor::avg_pool2d(Shape kernel_size, Shape stride, Shape dilation, Shape padding, bool count_include_pad) const {
  TG_OP("avg_pool2d");
  Shape k = detail::make_pair(kernel_size, 2, "avg_pool2d", "kernel_size");
  Shape pad = detail::padding2d(padding, k.size(), "avg_pool2d");
  Shape st = stride.empty() ? k : stride;
  std::vector<int> axis;
  for (int j = -static_cast<int>(k.size()); j < 0; j++) axis.push_back(j);
  auto pool = [&](const Tensor& x) { return detail::pool(x.pad2d(pad), k, st, dilation, "avg_pool2d"); };
  if (count_include_pad) return pool(*this).mean(axis);
  return pool(*this).sum(axis) / pool(ones_like()).sum(axis);
}
Tensor Tensor::max_pool2d(Shape kernel_size, Shape stride, Shape dilation, Shape padding) const {
  TG_OP("max_pool2d");
  Shape k = detail::make_pair(kernel_size, 2, "max_pool2d", "kernel_size");
  Shape pad = detail::padding2d(padding, k.size(), "max_pool2d");
  std::vector<int> axis;
  for (int j = -static_cast<int>(k.size()); j < 0; j++) axis.push_back(j);
  // The input gradient (1 where a window's max is, over the window's tie count, times the pooled
  // gradient) is realized once in the input's layout. Left lazy, every kernel that reads it recomputes
  // the compare against the broadcast max through div/mod views: a batchnorm before the pool read it in
  // 3-5 kernels (its per-channel sums and its input gradient), each at 2-4 GB/s.
  Tensor x = pad2d(pad, -INFINITY).contiguous_backward();
  return detail::pool(x, k, stride.empty() ? k : stride, dilation, "max_pool2d").max(axis);
}

Tensor Tensor::conv2d(const Tensor& weight, std::optional<Tensor> bias, int groups, Shape stride, Shape dilation, Shape padding,
                      std::optional<DType> acc_dtype) const {
  TG_OP("conv2d");
  if (ndim() < 3 || ndim() != weight.ndim())
    throw Error("conv2d: input " + to_str(shape()) + " and weight " + to_str(weight.shape()) +
                " need the same number of dims (N, C, *spatial) and (Cout, Cin/groups, *kernel)");
  if (groups <= 0) throw Error("conv2d: groups must be positive, got " + std::to_string(groups));
  int64_t cin_ = shape()[1], cout = weight.shape()[0], cin = weight.shape()[1];
  Shape HW(weight.shape().begin() + 2, weight.shape().end());
  if (groups * cin != cin_)
    throw Error("conv2d: input shape " + to_str(shape()) + " does not match weight shape " + to_str(weight.shape()) + ": groups*cin = " +
                std::to_string(groups * cin) + " but the input has " + std::to_string(cin_) + " channels");
  if (cout % groups != 0)
    throw Error("conv2d: weight shape " + to_str(weight.shape()) + ": out channels " + std::to_string(cout) + " not divisible by groups " + std::to_string(groups));
  if (bias && (bias->ndim() != 1 || bias->shape()[0] != cout))
    throw Error("conv2d: bias shape " + to_str(bias->shape()) + " must be (" + std::to_string(cout) + ",)");
  Shape pad = detail::padding2d(padding, HW.size(), "conv2d");
  const size_t n = HW.size();
  Shape st = detail::make_pair(stride, n, "conv2d", "stride"), dl = detail::make_pair(dilation, n, "conv2d", "dilation");
  // FUSE_CONV_BW=0: the op-by-op gradient through the window view (tensor/conv.cpp says why not)
  Tensor ret = getenv("FUSE_CONV_BW", 1) ? apply<F::Conv2d>({*this, weight}, ConvArgs{groups, pad, st, dl, acc_dtype})
                                         : detail::conv_pooled(pad2d(pad), weight, groups, st, dl, acc_dtype);
  if (!bias) return ret;
  Shape br{1, -1};
  br.insert(br.end(), n, 1);
  return ret.add(bias->reshape(br));
}

Tensor Tensor::conv_transpose2d(const Tensor& weight, std::optional<Tensor> bias, int groups, Shape stride, Shape dilation,
                                Shape padding, Shape output_padding) const {
  TG_OP("conv_transpose2d");
  if (ndim() < 3 || ndim() != weight.ndim())
    throw Error("conv_transpose2d: input " + to_str(shape()) + " and weight " + to_str(weight.shape()) + " need the same number of dims");
  if (groups <= 0 || weight.shape()[0] % groups != 0 || shape()[1] != weight.shape()[0])
    throw Error("conv_transpose2d: input " + to_str(shape()) + " has " + std::to_string(shape()[1]) + " channels but weight " +
                to_str(weight.shape()) + " expects " + std::to_string(weight.shape()[0]) + " (divisible by groups " + std::to_string(groups) + ")");
  Shape HW(weight.shape().begin() + 2, weight.shape().end());
  size_t n = HW.size();
  std::vector<int> flips;
  for (size_t j = 3; j < weight.shape().size() + 1; j++) flips.push_back(static_cast<int>(j));
  Tensor w = weight.unflatten(0, {groups, -1}).transpose(1, 2).flip(flips);
  Shape st = detail::make_pair(stride, n, "conv_transpose2d", "stride"), dl = detail::make_pair(dilation, n, "conv_transpose2d", "dilation");
  Shape pd = detail::make_pair(padding, n, "conv_transpose2d", "padding");
  Shape op = detail::make_pair(output_padding, n, "conv_transpose2d", "output_padding");
  Tensor x = *this;
  bool strided = false;
  for (int64_t s : st) strided |= s > 1;
  if (strided) {
    // insert s-1 zeros after each input element: (k) -> (k,1) -> pad (k,s) -> (k*s) -> shrink k*s-(s-1)
    Shape r{x.shape()[0], x.shape()[1]}, r2{x.shape()[0], x.shape()[1]};
    Pairs p{{0, 0}, {0, 0}}, sh{{0, x.shape()[0]}, {0, x.shape()[1]}};
    for (size_t j = 0; j < n; j++) {
      int64_t k = x.shape()[2 + j];
      r.insert(r.end(), {k, 1});
      p.insert(p.end(), {{0, 0}, {0, st[j] - 1}});
      r2.push_back(k * st[j]);
      sh.push_back({0, k * st[j] - (st[j] - 1)});
    }
    x = x.reshape(r).pad(p).reshape(r2).shrink(sh);
  }
  Shape padding_;
  for (size_t j = n; j-- > 0;) {
    int64_t a = (HW[j] - 1) * dl[j] - pd[j];
    padding_.insert(padding_.end(), {a, a + op[j]});
  }
  return x.conv2d(w.flatten(0, 1), bias, groups, {1}, dl, padding_);
}

// ---- cumsum, triangles, interpolate
Tensor Tensor::cumsum(int axis) const {
  TG_OP("cumsum");
  int a = resolve_dim(*this, axis, "cumsum");
  if (ndim() == 0 || numel() == 0) return *this;
  constexpr int64_t SPLIT = 256;
  int64_t n = shape()[a];
  if (n <= SPLIT * 2) return detail::cumsum_(*this, a);
  // two stages: cumsum inside blocks of SPLIT, then add the running block totals
  int64_t padded = (n + SPLIT - 1) / SPLIT * SPLIT;
  Tensor ret = transpose(a, -1).pad2d({padded - n, 0});
  ret = ret.unflatten(-1, {-1, SPLIT});
  ret = detail::cumsum_(ret, static_cast<int>(ret.ndim()) - 1);
  Tensor base_add = detail::cumsum_(ret[{Ellipsis, -1}], static_cast<int>(ret.ndim()) - 2, true);
  Shape ex = base_add.shape();
  ex.push_back(ret.shape().back());
  base_add = base_add.unsqueeze(-1).expand(ex);
  auto fix = [&](const Tensor& x) { return x.flatten(static_cast<int>(x.ndim()) - 2)[{Ellipsis, Slice{-n}}].transpose(a, -1); };
  return fix(ret) + fix(base_add);
}

Tensor Tensor::triu(int diagonal) const {
  TG_OP("triu");
  if (ndim() < 2) throw Error("triu: needs at least 2 dims, got shape " + to_str(shape()));
  Opts o{dtypes::bool_, device(), false};
  return detail::tri(shape()[ndim() - 2], shape()[ndim() - 1], diagonal, o).where(*this, 0).cast(dtype());
}
Tensor Tensor::tril(int diagonal) const {
  TG_OP("tril");
  if (ndim() < 2) throw Error("tril: needs at least 2 dims, got shape " + to_str(shape()));
  Opts o{dtypes::bool_, device(), false};
  return detail::tri(shape()[ndim() - 2], shape()[ndim() - 1], diagonal + 1, o).where(0, *this).cast(dtype());
}

Tensor Tensor::interpolate(Shape size, const std::string& mode, bool align_corners) const {
  TG_OP("interpolate");
  if (size.empty() || size.size() > static_cast<size_t>(ndim()))
    throw Error("interpolate: size " + to_str(size) + " needs 1 to " + std::to_string(ndim()) + " values for shape " + to_str(shape()));
  for (int64_t s : size)
    if (s <= 0) throw Error("interpolate: size " + to_str(size) + " must be positive");
  if (mode != "linear") throw Error("interpolate: mode '" + mode + "' is not supported; only 'linear'");
  Tensor x = *this;
  Shape expand = shape();
  int nd = static_cast<int>(ndim());
  for (int i = nd - static_cast<int>(size.size()); i < nd; i++) {
    int64_t out = size[i - (nd - size.size())];
    double scale = double(shape()[i] - align_corners) / double(out - align_corners);
    Tensor arr = Tensor::arange(out, Opts{dtypes::float32, device(), false});
    Tensor index = (align_corners ? scale * arr : (scale * (arr + 0.5)) - 0.5).clip(0, shape()[i] - 1);
    Shape reshape(nd, 1);
    reshape[i] = expand[i] = out;
    auto prep = [&](const Tensor& y) { return y.reshape(reshape).expand(expand); };
    Tensor lo = index.floor(), hi = index.ceil(), perc = index - index.floor();
    x = x.gather(i, prep(lo).cast(dtypes::int32)).lerp(x.gather(i, prep(hi).cast(dtypes::int32)), prep(perc));
  }
  return x;
}

// ---- einsum: permute each operand to sorted letter order, broadcast-multiply, sum the contracted letters
Tensor Tensor::einsum(const std::string& formula0, const std::vector<Tensor>& xs, std::optional<DType> acc_dtype) {
  TG_OP("einsum");
  std::string formula;
  for (char c : formula0)
    if (c != ' ') formula += c;
  std::string inputs_str = formula, output;
  size_t arrow = formula.find("->");
  if (arrow != std::string::npos) {
    inputs_str = formula.substr(0, arrow), output = formula.substr(arrow + 2);
  } else {
    std::map<char, int> cnt;
    for (char c : formula) cnt[c]++;
    for (auto [c, k] : cnt)
      if (k == 1 && std::isalpha(static_cast<unsigned char>(c))) output += c;
  }
  std::vector<std::string> inputs{""};
  for (char c : inputs_str) {
    if (c == ',') inputs.push_back("");
    else if (std::isalpha(static_cast<unsigned char>(c))) inputs.back() += c;
    else throw Error("einsum: bad character '" + std::string(1, c) + "' in formula '" + formula0 + "'");
  }
  if (inputs.size() != xs.size())
    throw Error("einsum: formula '" + formula0 + "' has " + std::to_string(inputs.size()) + " operands but " + std::to_string(xs.size()) + " tensors were given");
  std::map<char, int64_t> letter_val;
  for (size_t t = 0; t < xs.size(); t++) {
    if (inputs[t].size() != static_cast<size_t>(xs[t].ndim()))
      throw Error("einsum: operand " + std::to_string(t) + " '" + inputs[t] + "' names " + std::to_string(inputs[t].size()) +
                  " dims but has shape " + to_str(xs[t].shape()));
    for (size_t j = 0; j < inputs[t].size(); j++) {
      char c = inputs[t][j];
      if (inputs[t].find(c) != j) throw Error("einsum: repeated letter '" + std::string(1, c) + "' within operand '" + inputs[t] + "' is not supported");
      auto [it, fresh] = letter_val.insert({c, xs[t].shape()[j]});
      if (!fresh && it->second != xs[t].shape()[j])
        throw Error("einsum: letter '" + std::string(1, c) + "' is " + std::to_string(it->second) + " in one operand and " +
                    std::to_string(xs[t].shape()[j]) + " in operand " + std::to_string(t) + " " + to_str(xs[t].shape()));
    }
  }
  for (char c : output)
    if (!letter_val.count(c) || output.find(c) != output.rfind(c))
      throw Error("einsum: output letter '" + std::string(1, c) + "' in '" + formula0 + "' must appear once and in an input");
  Shape full;
  for (auto [c, v] : letter_val) full.push_back(v);
  std::optional<Tensor> prod;
  for (size_t t = 0; t < xs.size(); t++) {
    std::vector<int> order(inputs[t].size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return inputs[t][a] < inputs[t][b]; });
    Shape rs;
    for (auto [c, v] : letter_val) rs.push_back(inputs[t].find(c) != std::string::npos ? v : 1);
    Tensor x = xs[t].permute(order).reshape(rs).expand(full);
    prod = prod ? *prod * x : x;
  }
  std::vector<int> red;
  std::string kept;
  int ax = 0;
  for (auto [c, v] : letter_val) {
    if (output.find(c) == std::string::npos) red.push_back(ax);
    else kept += c;
    ax++;
  }
  // kept is sorted; permute it into the output's letter order
  std::vector<int> perm;
  for (char c : output) perm.push_back(static_cast<int>(kept.find(c)));
  return prod->sum(red, false, acc_dtype).permute(perm);
}

}  // namespace tg
