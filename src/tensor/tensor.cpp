// Tensor core: construction from data, properties, realize and data readback, autograd engine.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "engine/realize.hpp"
#include "engine/schedule.hpp"
#include "runtime/buffer.hpp"
#include "tensor/function.hpp"
#include "shape/shape_helpers.hpp"
#include "tg/device.hpp"
#include "lazy/metadata.hpp"

namespace tg {

bool Tensor::training = false;
bool Tensor::no_grad = false;

namespace detail {
Tensor make_tensor(LazyBufferPtr lb, std::optional<bool> requires_grad) {
  auto d = std::make_shared<TensorData>();
  d->lazydata = std::move(lb);
  d->requires_grad = requires_grad;
  return Access::tensor(std::move(d));
}
std::string resolve_device(const std::string& device) {
  if (device.empty()) return Device::default_device();
  std::string c = Device::canonicalize(device), kind = c.substr(0, c.find(':'));
  if (kind != "CPU" && kind != "CUDA" && kind != "DISK")
    throw Error("device: unknown device '" + device + "'; use CPU (CLANG), CUDA, CUDA:n or DISK:/path");
  return c;
}
DType opts_dtype(const Opts& o, DType fallback) { return o.dtype.value_or(fallback); }
void check_shape(const Shape& shape, const char* op) {
  for (int64_t s : shape)
    if (s < 0) throw Error(std::string(op) + ": negative dimension in shape " + to_str(shape));
}

int resolve_dim(const Tensor& t, int dim, const char* op, bool outer) {
  int n = static_cast<int>(t.ndim()) + (outer ? 1 : 0), hi = std::max(1, n);
  if (dim < -hi || dim >= hi)
    throw Error(std::string(op) + ": dim " + std::to_string(dim) + " is out of range [" + std::to_string(-hi) + ", " +
                std::to_string(hi - 1) + "] for a tensor of shape " + to_str(t.shape()));
  return dim < 0 ? dim + n : dim;
}
int resolve_existing_dim(const Tensor& t, int dim, const char* op) {
  int d = resolve_dim(t, dim, op);
  if (t.ndim() == 0)
    throw Error(std::string(op) + ": dim " + std::to_string(dim) + " of a 0-d tensor (shape ()): it has no dims; "
                "reshape it to (1,) first (unsqueeze(0))");
  return d;
}
std::vector<int> resolve_axes(const Tensor& t, const Axes& axis, const char* op) {
  std::vector<int> r;
  if (!axis.axes) {
    for (int i = 0; i < t.ndim(); i++) r.push_back(i);
    return r;
  }
  for (int a : *axis.axes) {
    int d = resolve_dim(t, a, op);
    if (std::find(r.begin(), r.end(), d) != r.end())
      throw Error(std::string(op) + ": dim " + std::to_string(a) + " appears more than once in " + to_str(*axis.axes));
    r.push_back(d);
  }
  return r;
}
}  // namespace detail

using detail::lb;
using detail::make_tensor;

// ---- construction
Operand::Operand(const Tensor& t) : v(Access::impl(t)) {}
Tensor::Tensor(ConstType x, Opts opts) {
  DType dt = opts.dtype.value_or(std::holds_alternative<double>(x) ? dtypes::default_float()
                                 : std::holds_alternative<int64_t>(x) ? dtypes::default_int() : dtypes::bool_);
  d_ = std::make_shared<TensorData>();
  d_->lazydata = LazyBuffer::metaop(MetaOps::CONST, {}, dt, detail::resolve_device(opts.device), dtypes::as_const(x, dt));
  d_->requires_grad = opts.requires_grad;
}
Tensor::Tensor(double x) : Tensor(ConstType(x), Opts{}) {}
Tensor::Tensor(int64_t x) : Tensor(ConstType(x), Opts{}) {}
Tensor::Tensor(int x) : Tensor(ConstType(int64_t{x}), Opts{}) {}
Tensor::Tensor(bool x) : Tensor(ConstType(x), Opts{}) {}

std::shared_ptr<LazyBuffer> Access::lazydata(const Tensor& t) { return t.d_->lazydata; }
Tensor Access::from_lazydata(std::shared_ptr<LazyBuffer> l, std::optional<bool> requires_grad) {
  TG_ASSERT(l != nullptr, "from_lazydata: null LazyBuffer");
  return detail::make_tensor(std::move(l), requires_grad);
}


namespace {
template <class T> constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, bool>) return dtypes::bool_;
  else if constexpr (std::is_same_v<T, int8_t>) return dtypes::int8;
  else if constexpr (std::is_same_v<T, uint8_t>) return dtypes::uint8;
  else if constexpr (std::is_same_v<T, int16_t>) return dtypes::int16;
  else if constexpr (std::is_same_v<T, uint16_t>) return dtypes::uint16;
  else if constexpr (std::is_same_v<T, int32_t>) return dtypes::int32;
  else if constexpr (std::is_same_v<T, uint32_t>) return dtypes::uint32;
  else if constexpr (std::is_same_v<T, int64_t>) return dtypes::int64;
  else if constexpr (std::is_same_v<T, uint64_t>) return dtypes::uint64;
  else if constexpr (std::is_same_v<T, float>) return dtypes::float32;
  else return dtypes::float64;
}

Tensor from_bytes(const void* data, int64_t n, const Shape& shape, DType dt, const Opts& opts) {
  for (int64_t s : shape)
    if (s < 0) throw Error("Tensor::from: negative dimension in shape " + to_str(shape));
  if (n != tg::prod(shape))
    throw Error("Tensor::from: " + std::to_string(n) + " values don't fill shape " + to_str(shape) + " (" +
                std::to_string(tg::prod(shape)) + " elements)");
  std::string device = detail::resolve_device(opts.device);
  LazyBufferPtr l;
  if (n == 0) {
    l = LazyBuffer::metaop(MetaOps::EMPTY, shape, dt, device);
  } else {
    auto buf = std::make_shared<Buffer>(device, n, dt);
    buf->ensure_allocated();
    buf->copyin(data, static_cast<size_t>(n * dt.itemsize()));
    l = LazyBuffer::from_buffer(buf, shape);
  }
  Tensor t = make_tensor(l, opts.requires_grad);
  return opts.dtype && *opts.dtype != dt ? t.cast(*opts.dtype) : t;
}
}  // namespace

template <class E>
Tensor Tensor::from(const std::vector<E>& data, Shape shape, Opts opts) {
  if constexpr (std::is_same_v<E, bool>) {
    std::vector<uint8_t> bytes(data.begin(), data.end());
    return from_bytes(bytes.data(), static_cast<int64_t>(bytes.size()), shape, dtypes::bool_, opts);
  } else {
    return from_bytes(data.data(), static_cast<int64_t>(data.size()), shape, dtype_of<E>(), opts);
  }
}

// ---- properties
// A symbolic dim has no single int value (a kernel built from it would keep the value it had then),
// so shape() refuses it and names the op that asked; sym_shape() gives the expressions.
[[noreturn]] static void symbolic_shape_error(const Tensor& t) {
  const Metadata* md = current_metadata();
  std::string op = md ? md->name : "shape";
  std::string dims = "(";
  auto ss = t.sym_shape();
  for (size_t i = 0; i < ss.size(); i++) dims += (i ? ", " : "") + (ss[i].is_const() ? std::to_string(ss[i].const_value()) : ss[i].render());
  throw Error(op + ": shape() of a tensor with symbolic dims " + dims + (ss.size() == 1 ? ",)" : ")") +
              (md ? " (this op needs concrete dims here)" : "") + "; use sym_shape() for the dims as expressions, or reshape to concrete dims");
}
const Shape& Tensor::shape() const {
  const LazyBuffer& lb = *d_->lazydata;
  if (const auto& sym = lb.st.views.back().sym)
    for (const sint& d : sym->shape)
      if (!d.is_const()) symbolic_shape_error(*this);
  return lb.shape();
}
DType Tensor::dtype() const { return d_->lazydata->dtype; }
std::string Tensor::device() const { return d_->lazydata->device; }
int64_t Tensor::ndim() const { return static_cast<int64_t>(d_->lazydata->shape().size()); }
int64_t Tensor::numel() const { return tg::prod(d_->lazydata->shape()); }   // symbolic dims at their bound values
int64_t Tensor::element_size() const { return dtype().itemsize(); }
int64_t Tensor::nbytes() const { return numel() * element_size(); }
bool Tensor::is_floating_point() const { return dtype().is_float(); }

// ---- realization
namespace {
// Items handed out by Tensor::schedule() and not run yet. Scheduling marks their graph as scheduled, so
// a later schedule would skip it: the next realize() runs these first, and a tensor whose schedule was
// printed still gets its data. Never destroyed: the Buffers must not outlive the device allocators.
std::vector<ScheduleItem>& pending() {
  static auto* p = new std::vector<ScheduleItem>();
  return *p;
}
std::vector<ScheduleItem> schedule_of(const Tensor& t, const std::vector<Tensor>& others) {
  std::vector<LazyBufferPtr> outs{lb(t)};
  for (auto& o : others) outs.push_back(lb(o));
  return memory_planner(create_schedule(outs));
}
}  // namespace

std::vector<ScheduleItem> Tensor::schedule(std::vector<Tensor> others) const {
  std::vector<ScheduleItem> s = schedule_of(*this, others);
  pending().insert(pending().end(), s.begin(), s.end());
  return s;
}
Tensor& Tensor::realize(std::vector<Tensor> others) {
  std::vector<ScheduleItem> s = std::exchange(pending(), {});
  std::vector<ScheduleItem> more = schedule_of(*this, others);
  s.insert(s.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  run_schedule(std::move(s));
  return *this;
}

namespace {
// realize a contiguous copy on the CPU and copy its bytes out (tinygrad's _data)
std::vector<uint8_t> data_bytes(const Tensor& t) {
  if (t.numel() == 0) return {};
  Tensor cpu = t.cast(t.dtype().scalar()).contiguous().to("CPU").realize();
  LazyBufferPtr base = lb(cpu)->base();
  TG_ASSERT(base->buffer != nullptr, "realized tensor has no buffer");
  std::vector<uint8_t> out(static_cast<size_t>(t.nbytes()));
  const size_t held = static_cast<size_t>(base->buffer->nbytes());
  if (held > out.size()) {   // a symbolic tensor's buffer has room for the max; the values come first
    std::vector<uint8_t> all(held);
    base->buffer->copyout(all.data(), all.size());
    std::copy(all.begin(), all.begin() + static_cast<int64_t>(out.size()), out.begin());
    return out;
  }
  base->buffer->copyout(out.data(), out.size());
  return out;
}
}  // namespace

template <class E>
std::vector<E> Tensor::tolist() const {
  DType want = dtype_of<E>();
  Tensor src = *this;
  // half-precision floats are read as float
  if (want == dtypes::float32 && (dtype() == dtypes::float16 || dtype() == dtypes::bfloat16)) src = cast(dtypes::float32);
  if (src.dtype() != want)
    throw Error("tolist: tensor of dtype " + dtype().str() + " and shape " + to_str(shape()) + " can't be read as " +
                want.str() + "; call cast(" + want.str() + ") first or read it with the matching type");
  std::vector<uint8_t> bytes = data_bytes(src);
  std::vector<E> out(static_cast<size_t>(src.numel()));
  if constexpr (std::is_same_v<E, bool>) {
    for (size_t i = 0; i < out.size(); i++) out[i] = bytes[i] != 0;
  } else {
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());   // (an empty vector's data() may be null)
  }
  return out;
}

template <class E>
E Tensor::item() const {
  if (numel() != 1) throw Error("item: tensor of shape " + to_str(shape()) + " has " + std::to_string(numel()) + " elements, item() needs exactly one");
  return tolist<E>()[0];
}

#define TG_INSTANTIATE(E)                                                   \
  template Tensor Tensor::from<E>(const std::vector<E>&, Shape, Opts);      \
  template std::vector<E> Tensor::tolist<E>() const;                        \
  template E Tensor::item<E>() const;
TG_INSTANTIATE(bool)
TG_INSTANTIATE(int8_t)
TG_INSTANTIATE(uint8_t)
TG_INSTANTIATE(int16_t)
TG_INSTANTIATE(uint16_t)
TG_INSTANTIATE(int32_t)
TG_INSTANTIATE(uint32_t)
TG_INSTANTIATE(int64_t)
TG_INSTANTIATE(uint64_t)
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE

// ---- conversion
Tensor Tensor::contiguous() const { TG_OP("contiguous"); return apply<F::Contiguous>({*this}); }
Tensor Tensor::contiguous_backward() const { TG_OP("contiguous_backward"); return apply<F::ContiguousBackward>({*this}); }
Tensor Tensor::detach() const { return make_tensor(d_->lazydata, false); }

Tensor Tensor::to(const std::string& device) const {
  TG_OP("to");
  std::string dev = detail::resolve_device(device);
  if (dev == this->device()) return *this;
  Tensor ret = make_tensor(d_->lazydata->copy_to_device(dev), d_->requires_grad);
  if (d_->grad) ret.d_->grad = d_->grad->to(dev);
  ret.d_->ctx = d_->ctx;
  return ret;
}
// clang 14 and gcc 12 have no bfloat16 arithmetic on x86 ("__bf16 is not supported on this target"),
// so on the CPU a cast from or to bfloat16 goes through the bits: they are the top half of a float32.
Tensor Tensor::cast(DType dt) const {
  TG_OP("cast");
  if (dtype() == dt) return *this;
  const bool bf16_on_cpu = (dtype() == dtypes::bfloat16 || dt == dtypes::bfloat16) && device() == "CPU" && !requires_grad();
  if (bf16_on_cpu && dtype() == dtypes::bfloat16)
    return bitcast(dtypes::uint16).cast(dtypes::uint32).lshift(16).bitcast(dtypes::float32).cast(dt);
  if (bf16_on_cpu) {
    Tensor u = cast(dtypes::float32).bitcast(dtypes::uint32);
    Tensor nearest_even = (u + ((u.rshift(16) & 1) + 0x7FFF)).rshift(16);   // overflow to inf is the right rounding
    Tensor bits = (u & 0x7FFFFFFF).gt(0x7F800000).where(0x7FC0, nearest_even);   // NaN stays a (quiet) NaN
    return bits.cast(dtypes::uint16).bitcast(dtypes::bfloat16);
  }
  return apply<F::Cast>({*this}, dt, false);
}
Tensor Tensor::bitcast(DType dt) const {
  TG_OP("bitcast");
  if (requires_grad()) throw Error("bitcast: can't backprop through bitcast; detach() the tensor first");
  if (dtype() == dt) return *this;
  if (dt.itemsize() != dtype().itemsize() && device().rfind("DISK", 0) != 0)
    throw Error("bitcast: " + dtype().str() + " -> " + dt.str() + " changes the item size; only DISK tensors support that");
  return apply<F::Cast>({*this}, dt, true);
}
Tensor Tensor::float_() const { TG_OP("float"); return cast(dtypes::float32); }
Tensor Tensor::half() const { TG_OP("half"); return cast(dtypes::float16); }
Tensor Tensor::int_() const { TG_OP("int"); return cast(dtypes::int32); }
Tensor Tensor::bool_() const { TG_OP("bool"); return cast(dtypes::bool_); }

Tensor& Tensor::replace(const Tensor& x) {
  if (x.requires_grad() || d_->ctx) throw Error("replace: neither tensor may be part of an autograd graph; detach() first");
  if (shape() != x.shape()) throw Error("replace: shape mismatch " + to_str(shape()) + " != " + to_str(x.shape()));
  d_->lazydata = lb(x);
  return *this;
}
Tensor& Tensor::assign(const Tensor& x) {
  TG_OP("assign");
  if (d_->lazydata == lb(x)) return *this;   // self assign is a no-op
  if (shape() != x.shape()) throw Error("assign: shape mismatch " + to_str(shape()) + " != " + to_str(x.shape()));
  if (device() != x.device()) throw Error("assign: device mismatch " + device() + " != " + x.device() + "; use x.to(\"" + device() + "\")");
  if (dtype() != x.dtype()) throw Error("assign: dtype mismatch " + dtype().str() + " != " + x.dtype().str() + "; cast the value first");
  if (x.requires_grad()) throw Error("assign: the assigned value requires grad; detach() it first");
  if (!d_->lazydata->is_realized()) {
    d_->lazydata = lb(x);
    return *this;
  }
  d_->lazydata = d_->lazydata->assign(lb(x));
  return *this;
}

// ---- printing
namespace {
template <class T>
void print_nested(std::ostringstream& os, const std::vector<T>& v, const Shape& shape, size_t dim, size_t& pos) {
  if (dim == shape.size()) {
    if constexpr (std::is_same_v<T, bool>) os << (v[pos] ? "True" : "False");
    else if constexpr (std::is_floating_point_v<T>) os << const_str(ConstType(static_cast<double>(v[pos])));
    else os << +v[pos];
    pos++;
    return;
  }
  os << "[";
  for (int64_t i = 0; i < shape[dim]; i++) {
    if (i) os << ", ";
    print_nested(os, v, shape, dim + 1, pos);
  }
  os << "]";
}
template <class T>
void print_values(std::ostringstream& os, const Tensor& t) {
  std::vector<T> v = t.tolist<T>();
  size_t pos = 0;
  print_nested(os, v, t.shape(), 0, pos);
}
}  // namespace

std::string Tensor::str() const {
  std::ostringstream os;
  os << "Tensor(";
  DType dt = dtype();
  if (dt.is_float()) {
    if (dt == dtypes::float64) print_values<double>(os, *this);
    else print_values<float>(os, cast(dtypes::float32));
  } else if (dt.is_bool()) {
    print_values<bool>(os, *this);
  } else if (dt.is_unsigned()) {
    print_values<uint64_t>(os, cast(dtypes::uint64));
  } else {
    print_values<int64_t>(os, cast(dtypes::int64));
  }
  os << ", shape=" << to_str(shape()) << ", dtype=" << dt.str() << ", device=" << device();
  if (requires_grad()) os << ", requires_grad=True";
  os << ")";
  return os.str();
}

// ---- autograd
std::optional<bool> Tensor::requires_grad_opt() const { return d_->requires_grad; }
bool Tensor::requires_grad() const { return d_->requires_grad.value_or(false); }
Tensor& Tensor::requires_grad_(bool rg) {
  d_->requires_grad = rg;
  return *this;
}
std::optional<Tensor> Tensor::grad() const { return d_->grad; }
void Tensor::set_grad(std::optional<Tensor> g) {
  if (g && g->shape() != shape()) throw Error("set_grad: grad shape " + to_str(g->shape()) + " != tensor shape " + to_str(shape()));
  d_->grad = std::move(g);
}

namespace {
// equal dims, symbolic ones by expression
bool same_sym_shape(const Tensor& a, const Tensor& b) {
  const std::vector<sint> x = a.sym_shape(), y = b.sym_shape();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); i++)
    if (!sym_same(x[i], y[i])) return false;
  return true;
}
// tinygrad's _deepwalk: post-order over tensors that were made by a Function (iterative, no recursion limit).
// The order holds strong references: backward drops each ctx, which may hold the only handle to a parent.
std::vector<std::shared_ptr<TensorData>> deepwalk(const std::shared_ptr<TensorData>& root) {
  std::vector<std::shared_ptr<TensorData>> order;
  std::unordered_set<TensorData*> visited;
  std::vector<std::pair<std::shared_ptr<TensorData>, size_t>> stack{{root, 0}};
  visited.insert(root.get());
  while (!stack.empty()) {
    auto& [node, i] = stack.back();
    if (!node->ctx) {
      stack.pop_back();
      continue;
    }
    if (i < node->ctx->parents.size()) {
      std::shared_ptr<TensorData> p = Access::impl(node->ctx->parents[i++]);
      if (visited.insert(p.get()).second) stack.push_back({std::move(p), 0});
      continue;
    }
    order.push_back(std::move(node));
    stack.pop_back();
  }
  return order;
}
}  // namespace

Tensor& Tensor::backward() {
  if (!shape().empty())
    throw Error("backward: called on a tensor of shape " + to_str(shape()) +
                "; without a gradient argument backward needs a scalar (reduce with .sum() or .mean() first)");
  return backward(Tensor(ConstType(1.0), Opts{dtype(), device(), false}));
}

Tensor& Tensor::backward(const Tensor& gradient) {
  if (!same_sym_shape(gradient, *this))
    throw Error("backward: gradient shape " + detail::sym_str(gradient.sym_shape()) + " != tensor shape " + detail::sym_str(sym_shape()));
  std::vector<std::shared_ptr<TensorData>> topo = deepwalk(d_);
  if (topo.empty())
    throw Error("backward: tensor of shape " + to_str(shape()) +
                " has no autograd graph; set requires_grad_() on an input before building the expression");
  d_->grad = gradient;
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    TensorData* t0 = it->get();
    // No gradient reached this node: its only users take no gradient through it (a comparison used
    // as where's condition). Nothing flows to its parents, as in torch; tinygrad 0.9.2 raised here.
    std::shared_ptr<Function> ctx = std::move(t0->ctx);
    if (!t0->grad.has_value()) continue;
    const Metadata* md = ctx->metadata;
    MetadataScope bw(md ? intern_metadata(md->name, md->file, md->line, true) : nullptr, true);
    LBs grads = ctx->backward(lb(*t0->grad));
    TG_ASSERT(grads.size() == ctx->parents.size(), std::string(ctx->name()) + ".backward returned the wrong number of grads");
    for (size_t i = 0; i < grads.size(); i++) {
      Tensor& t = ctx->parents[i];
      if (!grads[i] || !t.requires_grad()) continue;
      Tensor g = make_tensor(grads[i], false);
      TG_ASSERT(same_sym_shape(g, t), std::string(ctx->name()) + ": grad shape " + detail::sym_str(g.sym_shape()) + " != " +
                                          detail::sym_str(t.sym_shape()));
      t.d_->grad = t.d_->grad ? (*t.d_->grad + g) : g;
    }
  }
  return *this;
}

Tensor::Train::Train(bool mode) : prev_(Tensor::training) { Tensor::training = mode; }
Tensor::Train::~Train() { Tensor::training = prev_; }
Tensor::NoGrad::NoGrad(bool mode) : prev_(Tensor::no_grad) { Tensor::no_grad = mode; }
Tensor::NoGrad::~NoGrad() { Tensor::no_grad = prev_; }

}  // namespace tg
