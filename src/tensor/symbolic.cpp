// Tensors with symbolic dims (tinygrad's sint shapes): the movement-op overloads that take
// Variable expressions, sym_shape(), arange(sint), and the symbolic forms of broadcasting and
// cat. A symbolic dim's bound value is what shape() reports; kernels keep the expression, so one
// compiled kernel serves every value. Gradients flow through them as through the fixed-shape ops
// (F::ReshapeSym, ExpandSym, PadSym, ShrinkSym).
#include "access.hpp"
#include <algorithm>

#include "shape/shape_helpers.hpp"
#include "tensor/function.hpp"

namespace tg {

namespace {
bool is_c(const sint& x, int64_t v) { return x.is_const() && x.const_value() == v; }
bool same_dim(const sint& a, const sint& b) { return sym_same(a, b); }
std::string sstr(const std::vector<sint>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + (v[i].is_const() ? std::to_string(v[i].const_value()) : v[i].render());
  return s + (v.size() == 1 ? ",)" : ")");
}
bool any_sym(const std::vector<sint>& v) {
  return std::any_of(v.begin(), v.end(), [](const sint& x) { return !x.is_const(); });
}
// a bound value for every variable the dims use, or a tg::Error naming the op
void check_bound(const std::vector<sint>& v, const char* op) {
  for (const sint& x : v)
    if (!x.is_const()) {
      try {
        (void)x.value();
      } catch (const Error& e) {
        throw Error(std::string(op) + ": dim " + x.render() + " uses an unbound Variable; pass Variable(...).bind(value)");
      }
    }
}
}  // namespace

std::vector<sint> Tensor::sym_shape() const { return Access::lazydata(*this)->sym_shape(); }
bool Tensor::is_symbolic() const { return Access::lazydata(*this)->st.symbolic(); }

Tensor Tensor::reshape_sym(const std::vector<sint>& shape) const {
  check_bound(shape, "reshape");
  if (!any_sym(shape) && !is_symbolic()) {
    Shape s;
    for (auto& x : shape) s.push_back(x.const_value());
    return reshape(s);
  }
  int64_t n = 1;
  for (auto& x : shape) {
    int64_t v = x.value();
    if (v < 0) throw Error("reshape: dim " + x.render() + " is negative (" + std::to_string(v) + "); -1 isn't inferred in a symbolic shape");
    n *= v;
  }
  if (n != numel())
    throw Error("reshape: can't reshape " + sstr(sym_shape()) + " (" + std::to_string(numel()) + " elements) to " + sstr(shape) + " (" +
                std::to_string(n) + " elements at the bound values)");
  return apply<F::ReshapeSym>({*this}, shape);
}

Tensor Tensor::expand_sym(const std::vector<sint>& shape_in) const {
  check_bound(shape_in, "expand");
  std::vector<sint> cur = sym_shape();
  if (shape_in.size() < cur.size())
    throw Error("expand: can't expand shape " + sstr(cur) + " to fewer dimensions " + sstr(shape_in));
  std::vector<sint> padded(shape_in.size() - cur.size(), sint(1));
  padded.insert(padded.end(), cur.begin(), cur.end());
  std::vector<sint> target = shape_in;
  for (size_t i = 0; i < target.size(); i++) {
    if (is_c(target[i], -1)) target[i] = padded[i];
    if (!is_c(padded[i], 1) && !same_dim(padded[i], target[i]))
      throw Error("expand: can't expand shape " + sstr(cur) + " to " + sstr(shape_in) + " (dim " + std::to_string(i) + ")");
  }
  Tensor x = padded.size() == cur.size() ? *this : reshape_sym(padded);
  return apply<F::ExpandSym>({x}, target);
}

Tensor Tensor::shrink_sym(const std::vector<std::pair<sint, sint>>& arg) const {
  std::vector<sint> flat;
  for (auto& [b, e] : arg) flat.push_back(b), flat.push_back(e);
  check_bound(flat, "shrink");
  if (static_cast<int64_t>(arg.size()) != ndim())
    throw Error("shrink: needs one (start, end) pair per dim of shape " + sstr(sym_shape()) + ", got " + std::to_string(arg.size()));
  std::vector<sint> cur = sym_shape();
  bool noop = true;
  for (size_t i = 0; i < arg.size(); i++) noop &= is_c(arg[i].first, 0) && same_dim(arg[i].second, cur[i]);
  if (noop) return *this;
  return apply<F::ShrinkSym>({*this}, SMask(arg.begin(), arg.end()));
}

Tensor Tensor::pad_sym(const std::vector<std::pair<sint, sint>>& arg, double value) const {
  std::vector<sint> flat;
  for (auto& [b, e] : arg) flat.push_back(b), flat.push_back(e);
  check_bound(flat, "pad");
  if (static_cast<int64_t>(arg.size()) != ndim())
    throw Error("pad: needs one (before, after) pair per dim of shape " + sstr(sym_shape()) + ", got " + std::to_string(arg.size()));
  Tensor ret = apply<F::PadSym>({*this}, SMask(arg.begin(), arg.end()));
  if (value == 0) return ret;
  return ret + Access::from_lazydata(Access::lazydata(ones_like())->pad_sym(SMask(arg.begin(), arg.end())), false).where(0, value);
}

Tensor Tensor::arange_sym(const sint& stop, Opts opts) {
  if (stop.is_const()) return arange(stop.const_value(), std::move(opts));
  check_bound({stop}, "arange");
  if (stop.vmin() < 0) throw Error("arange: stop " + stop.render() + " may be negative; give the Variable a min >= 0");
  // the positions up to the largest value, cut to the symbolic length: one kernel for every value
  return arange(stop.vmax(), std::move(opts)).shrink_sym({{sint(0), stop}});
}

namespace detail {

std::string sym_str(const std::vector<sint>& shape) { return sstr(shape); }

Tensor sint_tensor(const sint& v, DType dtype, const std::string& device) {
  std::string dev = resolve_device(device);
  if (v.is_const()) return Tensor::full({}, static_cast<double>(v.const_value()), Opts{dtype, dev, false});
  check_bound({v}, "sint_tensor");
  return Access::from_lazydata(LazyBuffer::metaop(MetaOps::CONST, {}, dtype, dev, v), false);
}

Tensor tril_mask_sym(const sint& r, const sint& c, int64_t diagonal, const std::string& device) {
  Opts o{dtypes::int32, device, false};
  Tensor rows = Tensor::arange_sym(r, o).reshape_sym({r, sint(1)}), cols = Tensor::arange_sym(c, o).reshape_sym({sint(1), c});
  return cols.expand_sym({r, c}) <= (rows + diagonal).expand_sym({r, c});
}

// _broadcasted with symbolic dims: a symbolic dim matches only the same expression; 1 expands to it
std::pair<Tensor, Tensor> broadcast_sym(const Tensor& x, const Tensor& y, const char* op) {
  std::vector<sint> xs = x.sym_shape(), ys = y.sym_shape();
  size_t n = std::max(xs.size(), ys.size());
  xs.insert(xs.begin(), n - xs.size(), sint(1));
  ys.insert(ys.begin(), n - ys.size(), sint(1));
  std::vector<sint> out;
  for (size_t i = 0; i < n; i++) {
    if (is_c(xs[i], 1)) out.push_back(ys[i]);
    else if (is_c(ys[i], 1) || same_dim(xs[i], ys[i])) out.push_back(xs[i]);
    else
      throw Error(std::string(op) + ": shapes " + sstr(x.sym_shape()) + " and " + sstr(y.sym_shape()) + " can't be broadcast together (dim " +
                  std::to_string(i) + "); a symbolic dim only matches the same expression or 1");
  }
  return {x.expand_sym(out), y.expand_sym(out)};
}

// cat along a dim where some sizes are symbolic: pad each piece to the symbolic total and add
Tensor cat_sym(const std::vector<Tensor>& ts, int d) {
  std::vector<sint> fs = ts[0].sym_shape();
  for (const Tensor& t : ts) {
    std::vector<sint> s = t.sym_shape();
    bool ok = s.size() == fs.size();
    for (size_t i = 0; ok && i < s.size(); i++) ok = static_cast<int>(i) == d || same_dim(s[i], fs[i]);
    if (!ok) throw Error("cat: shapes " + sstr(fs) + " and " + sstr(s) + " must match in every dim but dim " + std::to_string(d));
  }
  // before/after pads as sums of the other pieces' sizes (no subtraction: ranges stay exact)
  std::vector<sint> after(ts.size(), sint(0));
  for (size_t i = ts.size() - 1; i-- > 0;) after[i] = after[i + 1] + ts[i + 1].sym_shape()[d];
  std::optional<Tensor> ret;
  sint k = 0;
  for (size_t i = 0; i < ts.size(); i++) {
    const Tensor& t = ts[i];
    std::vector<sint> s = t.sym_shape();
    std::vector<std::pair<sint, sint>> p(s.size(), {sint(0), sint(0)});
    p[d] = {k, after[i]};
    k = k + s[d];
    Tensor padded = t.pad_sym(p);
    ret = ret ? *ret + padded : padded;
  }
  return *ret;
}

// matmul with symbolic dims: the same reshapes as dot(), built from the symbolic shapes
Tensor dot_sym(const Tensor& a, const Tensor& w, std::optional<DType> acc_dtype) {
  std::vector<sint> as = a.sym_shape(), wsh = w.sym_shape();
  const size_t n1 = as.size(), n2 = wsh.size(), k2 = std::min<size_t>(n2, 2);
  if (n1 == 0 || n2 == 0) throw Error("matmul: both arguments need at least 1 dim");
  if (!same_dim(as.back(), wsh[n2 - k2]))
    throw Error("matmul: shapes " + sstr(as) + " and " + sstr(wsh) + " don't match in the inner dim");
  const size_t ones = std::min<size_t>({n1 - 1, n2 - 1, 1});
  std::vector<sint> xs(as.begin(), as.end() - 1), ws(wsh.begin(), wsh.end() - static_cast<int64_t>(k2));
  xs.insert(xs.end(), ones, sint(1)), xs.push_back(as.back());
  ws.insert(ws.end(), ones, sint(1)), ws.insert(ws.end(), wsh.end() - static_cast<int64_t>(k2), wsh.end());
  Tensor x = a.reshape_sym(xs), y = w.reshape_sym(ws).transpose(-1, -static_cast<int>(k2));
  return (x * y).sum(-1, false, acc_dtype).cast(acc_dtype.value_or(least_upper_dtype(x.dtype(), y.dtype())));
}

}  // namespace detail
}  // namespace tg
