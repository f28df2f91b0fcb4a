// op:: spellings for both tensor types (tinygrad's meaning; the torch overload reproduces it).
#include <algorithm>

#include "harness.hpp"

namespace conf::op {
namespace {
tg::Axes tg_axes(const Ax& ax) {
  if (!ax) return tg::Axes();
  return tg::Axes(std::vector<int>(ax->begin(), ax->end()));
}
std::vector<int64_t> all_dims(const torch::Tensor& x) {
  std::vector<int64_t> d(static_cast<size_t>(x.dim()));
  for (size_t i = 0; i < d.size(); i++) d[i] = static_cast<int64_t>(i);
  return d;
}
// torch 1.13 reduces prod/any/all over one dim at a time: reduce the highest axis first so the
// lower axis numbers stay valid when keepdim is false
template <class F>
torch::Tensor per_dim(const torch::Tensor& x, const Ax& ax, bool keepdim, F f) {
  std::vector<int64_t> dims = ax ? *ax : all_dims(x);
  for (auto& d : dims) d = d < 0 ? d + x.dim() : d;
  std::sort(dims.rbegin(), dims.rend());
  torch::Tensor r = x;
  for (int64_t d : dims) r = f(r, d, keepdim);
  return r;
}
// torch has no max/argmax kernels for bool: reduce as uint8 (bools stay bools)
torch::Tensor nobool(const torch::Tensor& x) { return x.scalar_type() == torch::kBool ? x.to(torch::kUInt8) : x; }
torch::Tensor rebool(const torch::Tensor& r, const torch::Tensor& x) {
  return x.scalar_type() == torch::kBool ? r.to(torch::kBool) : r;
}
}  // namespace

tg::Tensor sum(const tg::Tensor& x, Ax ax, bool keepdim) { return x.sum(tg_axes(ax), keepdim); }
torch::Tensor sum(const torch::Tensor& x, Ax ax, bool keepdim) { return x.sum(ax ? *ax : all_dims(x), keepdim); }
tg::Tensor mean(const tg::Tensor& x, Ax ax, bool keepdim) { return x.mean(tg_axes(ax), keepdim); }
torch::Tensor mean(const torch::Tensor& x, Ax ax, bool keepdim) { return x.mean(ax ? *ax : all_dims(x), keepdim); }
tg::Tensor max(const tg::Tensor& x, Ax ax, bool keepdim) { return x.max(tg_axes(ax), keepdim); }
torch::Tensor max(const torch::Tensor& x, Ax ax, bool keepdim) {
  if (!ax && !keepdim) return rebool(nobool(x).max(), x);   // evenly distributes the gradient over ties, as tinygrad
  return rebool(torch::amax(nobool(x), ax ? *ax : all_dims(x), keepdim), x);
}
tg::Tensor min(const tg::Tensor& x, Ax ax, bool keepdim) { return x.min(tg_axes(ax), keepdim); }
torch::Tensor min(const torch::Tensor& x, Ax ax, bool keepdim) {
  if (!ax && !keepdim) return rebool(nobool(x).min(), x);
  return rebool(torch::amin(nobool(x), ax ? *ax : all_dims(x), keepdim), x);
}
tg::Tensor prod(const tg::Tensor& x, Ax ax, bool keepdim) { return x.prod(tg_axes(ax), keepdim); }
torch::Tensor prod(const torch::Tensor& x, Ax ax, bool keepdim) {
  if (x.dim() == 0) return x.prod();
  return per_dim(x, ax, keepdim, [](const torch::Tensor& t, int64_t d, bool k) { return t.prod(d, k); });
}
tg::Tensor any(const tg::Tensor& x, Ax ax, bool keepdim) { return x.any(tg_axes(ax), keepdim); }
torch::Tensor any(const torch::Tensor& x, Ax ax, bool keepdim) {
  if (x.dim() == 0) return x.to(torch::kBool).any();
  return per_dim(x.to(torch::kBool), ax, keepdim, [](const torch::Tensor& t, int64_t d, bool k) { return t.any(d, k); });
}
tg::Tensor all(const tg::Tensor& x, Ax ax, bool keepdim) { return x.all(tg_axes(ax), keepdim); }
torch::Tensor all(const torch::Tensor& x, Ax ax, bool keepdim) {
  if (x.dim() == 0) return x.to(torch::kBool).all();
  return per_dim(x.to(torch::kBool), ax, keepdim, [](const torch::Tensor& t, int64_t d, bool k) { return t.all(d, k); });
}
tg::Tensor var(const tg::Tensor& x, Ax ax, bool keepdim, int64_t correction) { return x.var(tg_axes(ax), keepdim, correction); }
torch::Tensor var(const torch::Tensor& x, Ax ax, bool keepdim, int64_t correction) {
  // an explicit optional: a plain integer would pick the (dims, bool unbiased, keepdim) overload
  return x.var(at::OptionalIntArrayRef(ax ? *ax : all_dims(x)), c10::optional<int64_t>(correction), keepdim);
}
tg::Tensor std(const tg::Tensor& x, Ax ax, bool keepdim, int64_t correction) { return x.std(tg_axes(ax), keepdim, correction); }
torch::Tensor std(const torch::Tensor& x, Ax ax, bool keepdim, int64_t correction) {
  return x.std(at::OptionalIntArrayRef(ax ? *ax : all_dims(x)), c10::optional<int64_t>(correction), keepdim);
}
tg::Tensor logsumexp(const tg::Tensor& x, int axis, bool keepdim) { return x.logsumexp(axis, keepdim); }
torch::Tensor logsumexp(const torch::Tensor& x, int axis, bool keepdim) { return x.logsumexp({axis}, keepdim); }
tg::Tensor argmax(const tg::Tensor& x, std::optional<int> axis, bool keepdim) { return x.argmax(axis, keepdim); }
torch::Tensor argmax(const torch::Tensor& x, std::optional<int> axis, bool keepdim) {
  return axis ? nobool(x).argmax(int64_t{*axis}, keepdim) : nobool(x).argmax();
}
tg::Tensor argmin(const tg::Tensor& x, std::optional<int> axis, bool keepdim) { return x.argmin(axis, keepdim); }
torch::Tensor argmin(const torch::Tensor& x, std::optional<int> axis, bool keepdim) {
  return axis ? nobool(x).argmin(int64_t{*axis}, keepdim) : nobool(x).argmin();
}

tg::Tensor shrink(const tg::Tensor& x, const Pairs& arg) { return x.shrink(arg); }
torch::Tensor shrink(const torch::Tensor& x, const Pairs& arg) {
  torch::Tensor r = x;
  for (size_t d = 0; d < arg.size(); d++) r = r.slice(static_cast<int64_t>(d), arg[d].first, arg[d].second);
  return r;
}
tg::Tensor pad(const tg::Tensor& x, const Pairs& arg, double value) { return x.pad(arg, value); }
torch::Tensor pad(const torch::Tensor& x, const Pairs& arg, double value) {
  std::vector<int64_t> p;   // torch order: last dim first
  for (auto it = arg.rbegin(); it != arg.rend(); ++it) {
    p.push_back(it->first);
    p.push_back(it->second);
  }
  return torch::constant_pad_nd(x, p, value);
}
tg::Tensor flip(const tg::Tensor& x, std::vector<int64_t> axes) { return x.flip(tg::Axes(std::vector<int>(axes.begin(), axes.end()))); }
torch::Tensor flip(const torch::Tensor& x, std::vector<int64_t> axes) { return x.flip(axes); }
tg::Tensor permute(const tg::Tensor& x, std::vector<int64_t> order) { return x.permute(std::vector<int>(order.begin(), order.end())); }
torch::Tensor permute(const torch::Tensor& x, std::vector<int64_t> order) { return x.permute(order); }
tg::Tensor where(const tg::Tensor& c, const tg::Tensor& x, const tg::Tensor& y) { return c.where(x, y); }
torch::Tensor where(const torch::Tensor& c, const torch::Tensor& x, const torch::Tensor& y) { return torch::where(c, x, y); }
tg::Tensor cat(const std::vector<tg::Tensor>& xs, int dim) { return tg::Tensor::cat(xs, dim); }
torch::Tensor cat(const std::vector<torch::Tensor>& xs, int dim) { return torch::cat(xs, dim); }
tg::Tensor stack(const std::vector<tg::Tensor>& xs, int dim) { return tg::Tensor::stack(xs, dim); }
torch::Tensor stack(const std::vector<torch::Tensor>& xs, int dim) { return torch::stack(xs, dim); }
tg::Tensor linear(const tg::Tensor& x, const tg::Tensor& w, std::optional<tg::Tensor> b) { return x.linear(w, b); }
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, std::optional<torch::Tensor> b) {
  return torch::linear(x, w.t(), b ? *b : torch::Tensor());
}

}  // namespace conf::op
