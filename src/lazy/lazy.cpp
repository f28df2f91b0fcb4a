// LazyBuffer (tinygrad 0.9.2 lazy.py): graph construction with const folding, views, copies.
#include "lazy/lazy.hpp"

#include <algorithm>
#include <set>

#include "lazy/metadata.hpp"
#include "runtime/buffer.hpp"
#include "shape/shape_helpers.hpp"
#include "tg/helpers.hpp"
#include "uop/uop.hpp"

namespace tg {

namespace {

// devices whose buffers can be sub-views of another buffer (tinygrad's view_supported_devices)
bool view_supported(const std::string& device) {
  std::string d = device.substr(0, device.find(':'));
  for (auto& c : d) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::set<std::string> ok = {"CPU", "CLANG", "LLVM", "CUDA", "NV", "AMD", "METAL", "DISK"};
  return ok.count(d) > 0;
}

bool is_disk(const std::string& device) { return device.rfind("DISK", 0) == 0 || device.rfind("disk", 0) == 0; }

std::string op_str(const LBOp& op) {
  return std::visit([](auto v) -> std::string {
    if constexpr (std::is_same_v<decltype(v), std::monostate>) return "None";
    else return to_string(v);
  }, op);
}

// ops with a constant-folding rule (tinygrad's python_alu)
bool foldable(const LBOp& op) {
  if (auto u = std::get_if<UnaryOps>(&op)) return *u != UnaryOps::CAST && *u != UnaryOps::BITCAST;
  if (auto b = std::get_if<BinaryOps>(&op)) return *b != BinaryOps::THREEFRY;
  return std::holds_alternative<TernaryOps>(op);
}

// evaluate op on constants; nothing when the op is undefined there (e.g. integer division by zero)
std::optional<ConstType> fold(const LBOp& op, DType dt, const std::vector<ConstType>& v) {
  try {
    if (auto u = std::get_if<UnaryOps>(&op)) return exec_alu(*u, dt, v[0]);
    if (auto b = std::get_if<BinaryOps>(&op)) return exec_alu(*b, dt, v[0], v[1]);
    if (auto t = std::get_if<TernaryOps>(&op)) return exec_alu(*t, dt, v[0], v[1], v[2]);
  } catch (const Error&) {}
  return std::nullopt;
}

// the value of an unrealized, unmasked const as a double (for the x+0, x*1 rules)
std::optional<double> const_val(LazyBuffer& x) {
  if (!x.is_unrealized_unmasked_const()) return std::nullopt;
  return const_to_double(std::get<ConstType>(x.base()->arg));
}

}  // namespace

// ---------------------------------------------------------------- creation and lifetime

LazyBufferPtr LazyBuffer::create(const std::string& device, const ShapeTracker& st, DType dtype, LBOp op, LBArg arg,
                                 std::vector<LazyBufferPtr> srcs, LazyBufferPtr base) {
  if (prod(st.shape()) == 0) { op = MetaOps::CONST; arg = ConstType{int64_t{0}}; srcs.clear(); base = nullptr; }
  if (std::holds_alternative<MetaOps>(op) && std::get<MetaOps>(op) == MetaOps::CONST && std::holds_alternative<ConstType>(arg))
    arg = dtypes::as_const(std::get<ConstType>(arg), dtype);
  auto ret = std::make_shared<LazyBuffer>();
  ret->device = device;
  ret->st = st;
  ret->dtype = dtype;
  if (base) {
    TG_ASSERT(base->is_base(), "a view's base must be a base itself");
    ret->base_ = std::move(base);
    return ret;
  }
  ret->op = op;
  ret->arg = std::move(arg);
  ret->metadata = current_metadata();
  ret->srcs = std::move(srcs);
  if (ret->op_is(MetaOps::ASSIGN) && !ret->srcs[1]->base()->realized())
    throw Error("assign: the target " + ret->srcs[1]->str() + " must be realized; realize() it before assigning to it");
  return ret;
}

LazyBufferPtr LazyBuffer::metaop(MetaOps op, const Shape& shape, DType dtype, const std::string& device, LBArg arg,
                                 std::vector<LazyBufferPtr> srcs) {
  return create(device, ShapeTracker::from_shape(shape), dtype, op, std::move(arg), std::move(srcs));
}

LazyBufferPtr LazyBuffer::from_buffer(std::shared_ptr<Buffer> buf, const Shape& shape) {
  if (prod(shape) != buf->size)
    throw Error("LazyBuffer.from_buffer: shape " + to_str(shape) + " has " + std::to_string(prod(shape)) +
                " elements but the buffer " + buf->str() + " has " + std::to_string(buf->size));
  auto ret = metaop(MetaOps::EMPTY, shape, buf->dtype, buf->device);
  if (prod(shape) == 0) return ret;   // an empty tensor is a const; it needs no memory
  ret->buffer = std::move(buf);
  ret->buffer->ref(1);
  return ret;
}

LazyBuffer::~LazyBuffer() {
  if (buffer) buffer->ref(-1);
  // Release sources through a queue: dropping a long unrealized chain must not recurse once per node.
  // The outermost destructor owns the queue on its stack; a thread_local vector would be destroyed
  // before LazyBuffers held by statics (use-after-free at exit, found by ASan).
  thread_local std::vector<LazyBufferPtr>* draining = nullptr;
  std::vector<LazyBufferPtr> queue;
  std::vector<LazyBufferPtr>& pending = draining ? *draining : queue;
  for (auto& s : srcs) pending.push_back(std::move(s));
  if (base_) pending.push_back(std::move(base_));
  if (draining) return;
  draining = &queue;
  while (!queue.empty()) {
    LazyBufferPtr p = std::move(queue.back());
    queue.pop_back();
    p.reset();
  }
  draining = nullptr;
}

const std::shared_ptr<Buffer>& LazyBuffer::ensure_buffer() {
  TG_ASSERT(is_base(), "only a base has a buffer: " + str());
  if (buffer) return buffer;
  if (op_is(MetaOps::ASSIGN)) {
    buffer = srcs[1]->base()->buffer;
    TG_ASSERT(buffer != nullptr, "assign target has no buffer");
  } else if (op_is(MetaOps::VIEW)) {
    LazyBuffer& src = *srcs[0];
    const auto& sbuf = src.base()->ensure_buffer();
    buffer = sbuf->view(size(), dtype, src.st.views[0].offset * src.dtype.itemsize());
  } else {
    buffer = std::make_shared<Buffer>(device, st.symbolic() ? st.max_size() : size(), dtype);   // room for every value
  }
  buffer->ref(1);
  return buffer;
}

// ---------------------------------------------------------------- properties

int64_t LazyBuffer::size() const { return prod(st.shape()); }
ShapeTracker LazyBuffer::fresh_st() const { return st.symbolic() ? ShapeTracker::from_sym_shape(st.sym_shape()) : ShapeTracker::from_shape(shape()); }
LazyBufferPtr LazyBuffer::base() { return base_ ? base_ : shared_from_this(); }
bool LazyBuffer::realized() const { return base_ == nullptr && buffer != nullptr && srcs.empty(); }
bool LazyBuffer::is_realized() { return base()->realized(); }

bool LazyBuffer::is_unrealized_const() {
  LazyBufferPtr b = base();
  return !b->realized() && b->op_is(MetaOps::CONST) && std::holds_alternative<ConstType>(b->arg);
}
bool LazyBuffer::is_symbolic_const() {
  LazyBufferPtr b = base();
  return !b->realized() && b->op_is(MetaOps::CONST) && std::holds_alternative<sint>(b->arg);
}

bool LazyBuffer::is_unrealized_unmasked_const() {
  if (!is_unrealized_const()) return false;
  return std::all_of(st.views.begin(), st.views.end(), [](const View& v) { return !v.mask.has_value(); });
}

bool LazyBuffer::can_view() { return st.consecutive() && !is_unrealized_const() && view_supported(device); }

std::string LazyBuffer::str() const {
  std::string dt = dtype.str();
  if (dt.rfind("dtypes.", 0) == 0) dt = dt.substr(7);
  std::string tail = base_ ? st.str() : "(" + op_str(op) + ", " + (realized() ? buffer->str() : "None") + ")";
  return "<LB " + device + " " + to_str(st.shape()) + " " + dt + " " + tail + ">";
}

// ---------------------------------------------------------------- consts, assign, contiguous, cast, copy

LazyBufferPtr LazyBuffer::const_(ConstType val, std::optional<Shape> shape) {
  if (!shape && st.symbolic()) {
    std::vector<sint> ss = st.sym_shape();
    return metaop(MetaOps::CONST, {}, dtype, device, val)->reshape(Shape(ss.size(), 1))->expand_sym(ss);
  }
  Shape s = shape.value_or(this->shape());
  return metaop(MetaOps::CONST, {}, dtype, device, val)->reshape(Shape(s.size(), 1))->expand(s);
}

LazyBufferPtr LazyBuffer::assign(const LazyBufferPtr& x) {
  if (x->size() != size())
    throw Error("assign: the value has shape " + to_str(x->shape()) + " but the target has shape " + to_str(shape()) +
                "; assign needs the same number of elements");
  if (!base()->realized())
    throw Error("assign: the target " + str() + " must be realized; realize() it before assigning to it");
  LBArg arg = st.contiguous() ? LBArg{} : LBArg{st};
  return metaop(MetaOps::ASSIGN, shape(), dtype, device, arg, {x, base()});
}

LazyBufferPtr LazyBuffer::contiguous(bool allow_buffer_view) {
  LazyBufferPtr b = base();
  if (!st.contiguous() || size() != b->size() || is_unrealized_const()) {
    LazyBufferPtr ret = allow_buffer_view && can_view() ? e(MetaOps::VIEW) : e(MetaOps::CONTIGUOUS);
    // later users of the base read the contiguous copy through the inverted view instead
    if (auto sti = st.invert(b->shape())) { b->contiguous_child = ret; b->contiguous_child_st = *sti; }
    return ret;
  }
  b->forced_realize = true;
  return shared_from_this();
}

LazyBufferPtr LazyBuffer::cast(DType to, bool bitcast, bool allow_buffer_view) {
  if (dtype == to) return shared_from_this();
  if (is_disk(device) && !bitcast)
    throw Error("cast: can't cast a DISK buffer from " + dtype.str() + " to " + to.str() + "; bitcast it or copy it to a device first");
  if (is_unrealized_unmasked_const() && !bitcast)
    return create(device, st, to, MetaOps::CONST, dtypes::as_const(std::get<ConstType>(base()->arg), to));
  if (is_symbolic_const() && !bitcast && std::all_of(st.views.begin(), st.views.end(), [](const View& v) { return !v.mask; }))
    return create(device, st, to, MetaOps::CONST, base()->arg);   // the kernel casts the Variable's value
  Shape new_shape = shape();
  if (bitcast && dtype.itemsize() != to.itemsize()) {
    if (!is_disk(device))
      throw Error("bitcast: changing the item size (" + dtype.str() + " -> " + to.str() + ") is only supported on DISK");
    if (new_shape.empty() || (new_shape.back() * dtype.itemsize()) % to.itemsize() != 0)
      throw Error("bitcast: the last dimension of " + to_str(new_shape) + " doesn't divide into " + to.str());
    new_shape.back() = new_shape.back() * dtype.itemsize() / to.itemsize();
  } else if (getenv("CAST_BEFORE_VIEW", 1) && to.itemsize() <= dtype.itemsize() && !is_base()) {
    return base()->cast(to, bitcast)->view_(st);   // casting the smaller base is cheaper
  }
  LBOp cast_op = UnaryOps::CAST;
  if (bitcast) cast_op = can_view() && allow_buffer_view ? LBOp{MetaOps::VIEW} : LBOp{UnaryOps::BITCAST};
  return create(device, new_shape == shape() ? fresh_st() : ShapeTracker::from_shape(new_shape), to, cast_op, to, {shared_from_this()});
}

LazyBufferPtr LazyBuffer::copy_(const std::string& to) {
  return create(to, fresh_st(), dtype, MetaOps::COPY, int64_t{size() * dtype.itemsize()},
                {shared_from_this()});
}

LazyBufferPtr LazyBuffer::copy_to_device(const std::string& to, bool force) {
  if (device == to) return shared_from_this();
  LazyBufferPtr b = base();
  // a copy of a pending copy copies the original once
  if (!force && st.contiguous() && size() == b->size() && !b->realized() && b->op_is(MetaOps::COPY))
    return b->srcs[0]->copy_to_device(to)->reshape(shape());
  // a const is made on the new device
  if (is_unrealized_const() || is_symbolic_const()) return metaop(MetaOps::CONST, {}, dtype, to, b->arg)->view_(st);
  // a shrink is made contiguous first so only the needed elements move
  if (prod(shape()) < prod(b->shape())) return contiguous()->copy_(to);
  return b->copy_(to)->view_(st);
}

// ---------------------------------------------------------------- elementwise

LazyBufferPtr LazyBuffer::e(UnaryOps op) { return alu_(op, {shared_from_this()}); }
LazyBufferPtr LazyBuffer::e(BinaryOps op, const LazyBufferPtr& y) { return alu_(op, {shared_from_this(), y}); }
LazyBufferPtr LazyBuffer::e(TernaryOps op, const LazyBufferPtr& y, const LazyBufferPtr& z) {
  return alu_(op, {shared_from_this(), y, z});
}
LazyBufferPtr LazyBuffer::e(MetaOps op) { return alu_(op, {shared_from_this()}); }

LazyBufferPtr LazyBuffer::alu_(LBOp op, const std::vector<LazyBufferPtr>& in_srcs) {
  std::vector<LazyBufferPtr> srcs;
  for (const auto& s : in_srcs) {
    LazyBufferPtr root = s->is_base() ? s->contiguous_child.lock() : nullptr;
    srcs.push_back(root ? root->view_(*s->contiguous_child_st) : s);
  }
  bool is_where = std::holds_alternative<TernaryOps>(op) && std::get<TernaryOps>(op) == TernaryOps::WHERE;
  for (size_t i = is_where ? 2 : 1; i < srcs.size(); i++) {
    if (srcs[i]->dtype.scalar() != srcs[is_where ? 1 : 0]->dtype.scalar())
      throw Error("e(" + op_str(op) + "): all dtypes must match, got " + srcs[is_where ? 1 : 0]->dtype.str() + " and " +
                  srcs[i]->dtype.str() + "; cast one side first");
  }
  for (const auto& s : srcs) {
    if (s->shape() != srcs[0]->shape())
      throw Error("e(" + op_str(op) + "): all shapes must be the same, got " + to_str(srcs[0]->shape()) + " and " +
                  to_str(s->shape()) + "; reshape/expand them to one shape first");
  }
  if (is_where && srcs[0]->dtype != dtypes::bool_)
    throw Error("e(TernaryOps.WHERE): the condition must be bool, got " + srcs[0]->dtype.str());
  if (op == LBOp{UnaryOps::NEG} && srcs[0]->dtype == dtypes::bool_)
    throw Error("e(UnaryOps.NEG): not defined on bool; use logical_not");

  bool cmp = op == LBOp{BinaryOps::CMPLT} || op == LBOp{BinaryOps::CMPNE};
  DType out_dtype = cmp ? dtypes::bool_ : srcs.back()->dtype;

  // const folding
  if (foldable(op) && std::all_of(srcs.begin(), srcs.end(), [](auto& s) { return s->is_unrealized_unmasked_const(); })) {
    std::vector<ConstType> vals;
    for (auto& s : srcs) vals.push_back(std::get<ConstType>(s->base()->arg));
    if (auto v = fold(op, out_dtype, vals)) return cast(out_dtype)->const_(*v);
  }
  // -(-x) is x (only on a base: a view of the NEG would need its view re-applied)
  if (op == LBOp{UnaryOps::NEG} && is_base() && op_is(UnaryOps::NEG) && !realized()) return this->srcs[0];
  if (std::holds_alternative<BinaryOps>(op)) {
    const LazyBufferPtr &x = in_srcs[0], &y = in_srcs[1];
    if (op == LBOp{BinaryOps::ADD}) {
      if (auto v = const_val(*y); v && *v == 0) return x;
      if (auto v = const_val(*x); v && *v == 0) return y;
    }
    if (op == LBOp{BinaryOps::MUL}) {
      for (auto [c, other] : {std::pair{x, y}, std::pair{y, x}}) {
        auto v = const_val(*c);
        if (!v) continue;
        if (*v == 1) return other;
        if (*v == 0) return other->const_(int64_t{0});
        if (*v == -1) return other->e(UnaryOps::NEG);
      }
    }
  }
  ShapeTracker out_st = srcs[0]->fresh_st();   // before srcs is moved from
  return create(device, out_st, out_dtype, op, {}, std::move(srcs));
}

// ---------------------------------------------------------------- reduce

LazyBufferPtr LazyBuffer::reduce_op_(ReduceOps op, const std::vector<int64_t>& axis) {
  std::vector<int64_t> ax;
  // a symbolic dim is reduced even at the value 1: the kernel must serve every value
  std::vector<sint> ss = st.sym_shape();
  for (int64_t a : axis) if (shape()[a] != 1 || !ss[a].is_const()) ax.push_back(a);
  std::sort(ax.begin(), ax.end());
  ax.erase(std::unique(ax.begin(), ax.end()), ax.end());
  if (ax.empty()) return shared_from_this();
  if (st.symbolic()) {
    for (int64_t a : ax) ss[a] = 1;
    return create(device, ShapeTracker::from_sym_shape(ss), dtype, op, ax, {shared_from_this()});
  }
  return create(device, ShapeTracker::from_shape(reduce_shape(shape(), ax)), dtype, op, ax, {shared_from_this()});
}

LazyBufferPtr LazyBuffer::r(ReduceOps op, const std::vector<int64_t>& axis) {
  for (int64_t a : axis) {
    if (a < 0 || a >= static_cast<int64_t>(shape().size()))
      throw Error("r(" + to_string(op) + "): axis " + std::to_string(a) + " is out of range for shape " + to_str(shape()) +
                  "; axes must be in [0, " + std::to_string(shape().size()) + ")");
  }
  Shape new_shape = reduce_shape(shape(), axis);
  if (prod(shape()) == 0 && prod(new_shape) != 0)
    return const_(op == ReduceOps::SUM ? ConstType{0.0} : dtypes::min(dtype), new_shape);

  if (is_unrealized_unmasked_const() && !st.symbolic()) {
    ConstType v = std::get<ConstType>(base()->arg);
    if (op == ReduceOps::SUM) {
      int64_t n = 1;
      for (int64_t a : axis) n *= shape()[a];
      v = dtype.is_float() ? ConstType{const_to_double(v) * static_cast<double>(n)} : ConstType{const_to_int(v) * n};
    }
    return const_(v, new_shape);
  }

  int64_t ratio = prod(new_shape) == 0 ? 0 : prod(shape()) / prod(new_shape);
  if (!getenv("SPLIT_REDUCEOP", 1) || st.symbolic() || prod(shape()) == 0 || ratio < getenv("REDUCEOP_SPLIT_THRESHOLD", 32768))
    return reduce_op_(op, axis);

  // Few outputs and a long reduce: split the reduce dim into (divisor, rest), reduce rest first (many
  // outputs keep the machine busy), then the divisor. The split dim moves last for locality.
  auto strides = st.real_strides(true);
  // a GPU reduces each part in a block of its own: 2048 parts fill 132 SMs with 15 blocks each
  const int64_t parts = getenv("REDUCEOP_SPLIT_PARTS", device.rfind("CUDA", 0) == 0 ? 2048 : 256);
  int64_t top = std::min<int64_t>(parts, (int64_t{1} << getenv("REDUCEOP_SPLIT_SIZE", 22)) / prod(new_shape));
  std::optional<std::pair<int64_t, int64_t>> pick;
  for (int64_t i : axis) {
    for (int64_t x = top; x >= 8 && !pick; x--)
      if (shape()[i] % x == 0 && strides[i] != std::optional<int64_t>{0}) pick = {i, x};
    if (pick) break;
  }
  if (!pick) return reduce_op_(op, axis);
  auto [dim, divisor] = *pick;
  Shape split = shape();
  split[dim] = divisor;
  split.insert(split.begin() + dim + 1, shape()[dim] / divisor);
  std::vector<int> perm;
  for (int i = 0; i < static_cast<int>(split.size()); i++) if (i != dim) perm.push_back(i);
  perm.push_back(static_cast<int>(dim));
  if (debug() >= 3) printf("split %ld: %s -> %s -> %s\n", static_cast<long>(divisor), to_str(shape()).c_str(), to_str(split).c_str(), to_str(new_shape).c_str());
  return reshape(split)->permute(perm)->reduce_op_(op, axis)->reduce_op_(op, {static_cast<int64_t>(new_shape.size())})
      ->reshape(new_shape);
}

// ---------------------------------------------------------------- movement

LazyBufferPtr LazyBuffer::view_(const ShapeTracker& new_st) {
  const auto& mask = new_st.views.back().mask;
  bool empty_mask = mask && std::any_of(mask->begin(), mask->end(), [](auto& m) { return m.second - m.first == 0; });
  if (size() == 0 || empty_mask) return const_(int64_t{0}, new_st.shape());
  LazyBufferPtr b = base();
  if (new_st.contiguous() && b->st.same_shape(new_st)) return b;
  return create(device, new_st, dtype, {}, {}, {}, b);
}

LazyBufferPtr LazyBuffer::reshape(const Shape& arg) { return view_(st.reshape(arg)); }
LazyBufferPtr LazyBuffer::reshape_sym(const std::vector<sint>& arg) { return view_(st.reshape_sym(arg)); }
LazyBufferPtr LazyBuffer::expand_sym(const std::vector<sint>& arg) { return view_(st.expand_sym(arg)); }
LazyBufferPtr LazyBuffer::pad_sym(const SMask& arg) { return view_(st.pad_sym(arg)); }
LazyBufferPtr LazyBuffer::shrink_sym(const SMask& arg) { return view_(st.shrink_sym(arg)); }
LazyBufferPtr LazyBuffer::pad(const std::vector<std::pair<int64_t, int64_t>>& arg) { return view_(st.pad(arg)); }
LazyBufferPtr LazyBuffer::expand(const Shape& arg) { return view_(st.expand(arg)); }
LazyBufferPtr LazyBuffer::permute(const std::vector<int>& arg) { return view_(st.permute(arg)); }
LazyBufferPtr LazyBuffer::shrink(const std::vector<std::pair<int64_t, int64_t>>& arg) { return view_(st.shrink(arg)); }
LazyBufferPtr LazyBuffer::stride(const std::vector<int64_t>& arg) { return view_(st.stride(arg)); }

}  // namespace tg
