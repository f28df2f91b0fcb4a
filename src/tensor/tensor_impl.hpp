// Private side of tg::Tensor: the shared data behind a handle and helpers the op files share.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "access.hpp"
#include "lazy/lazy.hpp"
#include "tg/tensor.hpp"
#include "uop/uop.hpp"

namespace tg {

struct Function;

// tinygrad's Tensor slots: lazydata, requires_grad (None/False/True), grad, _ctx.
struct TensorData {
  LazyBufferPtr lazydata;
  std::optional<bool> requires_grad;
  std::optional<Tensor> grad;
  std::shared_ptr<Function> ctx;   // the Function that made this tensor, while autograd needs it
};

namespace detail {
Tensor make_tensor(LazyBufferPtr lb, std::optional<bool> requires_grad = {});
inline const LazyBufferPtr& lb(const Tensor& t) { return Access::impl(t)->lazydata; }
// some dim is an expression of Variables (then shape() throws; ops work from sym_shape())
inline bool sym_dims(const Tensor& t) {
  const auto& sym = lb(t)->st.views.back().sym;
  if (sym)
    for (const sint& d : sym->shape)
      if (!d.is_const()) return true;
  return false;
}
std::string resolve_device(const std::string& device);          // "" -> default device, canonical name
DType opts_dtype(const Opts& o, DType fallback);
// dim in [-max(1,ndim+outer), max(1,ndim+outer)) else tg::Error naming op and shape
int resolve_dim(const Tensor& t, int dim, const char* op, bool outer = false);
// a negative dim in a shape given to a creation op (empty, full, rand...) -> tg::Error naming op and shape
void check_shape(const Shape& shape, const char* op);
// resolve_dim for ops that index shape()[dim]: a 0-d tensor has no dim to index, so it is a tg::Error
// (resolve_dim accepts 0 and -1 there, as tinygrad's _resolve_dim does)
int resolve_existing_dim(const Tensor& t, int dim, const char* op);
std::vector<int> resolve_axes(const Tensor& t, const Axes& axis, const char* op);
Shape broadcast_shape(const std::vector<Shape>& shapes, const char* op);
// a scalar operand as a 0-d tensor with the weak-type dtype rule of _broadcasted
Tensor scalar_like(const Tensor& x, const ConstType& y);
Tensor operand_tensor(const Tensor& x, const Operand& y);
std::pair<Tensor, Tensor> broadcasted(const Tensor& x, const Operand& y, bool reverse = false, bool match_dtype = true,
                                      const char* op = "broadcast");
Tensor broadcast_to(const Tensor& x, const Shape& shape, const char* op = "expand");
// symbolic.cpp: broadcasting and cat when a dim holds a Variable
std::pair<Tensor, Tensor> broadcast_sym(const Tensor& x, const Tensor& y, const char* op);
Tensor cat_sym(const std::vector<Tensor>& ts, int d);
Tensor dot_sym(const Tensor& a, const Tensor& w, std::optional<DType> acc_dtype);
std::string sym_str(const std::vector<sint>& shape);   // "(3, i)": dims as numbers or expressions
// a 0-d tensor holding a sint (tinygrad's Tensor.from_node): kernels read its Variables' values
Tensor sint_tensor(const sint& v, DType dtype, const std::string& device);
// the causal mask tril(ones(r, c)) as bools (j <= i + diagonal) when r or c is symbolic
Tensor tril_mask_sym(const sint& r, const sint& c, int64_t diagonal, const std::string& device);
std::vector<int64_t> make_pair(const Shape& v, size_t n, const char* op, const char* what);
// tinygrad's _pool: (..., *spatial) -> (..., *out, *kernel)
Tensor pool(const Tensor& x, const Shape& k, const Shape& stride, const Shape& dilation, const char* op);
Tensor slice_pad(const Tensor& x, const std::vector<std::optional<std::pair<int64_t, int64_t>>>& arg, double value = 0);
// conv of an already padded input (tensor/conv.cpp): (bs, groups*cin, *in) x (cout, cin, *k) -> (bs, cout, *out)
// taps_outer: the reduce runs over (*k, cin), the channels innermost, instead of (cin, *k)
Tensor conv_pooled(const Tensor& xp, const Tensor& weight, int groups, const Shape& stride, const Shape& dilation,
                   std::optional<DType> acc_dtype, bool taps_outer = false);
Tensor cumsum_(const Tensor& x, int axis, bool first_zero = false);
Tensor tri(int64_t r, int64_t c, int64_t diagonal, const Opts& opts);
std::vector<int64_t> padding2d(const Shape& padding, size_t dims, const char* op);
}  // namespace detail

}  // namespace tg
