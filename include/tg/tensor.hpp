// tg::Tensor: the user-facing lazy tensor with autograd (tinygrad 0.9.2 tensor.py).
// A Tensor is a shared handle: copies alias the same data (like Python references), and
// ops build a lazy graph that realize()/tolist() compile and run.
#pragma once
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "tg/dtype.hpp"
#include "tg/helpers.hpp"
#include "tg/schedule.hpp"
#include "tg/symbolic.hpp"

namespace tg {

using Shape = std::vector<int64_t>;
struct TensorData;       // src/tensor/tensor_impl.hpp
class Tensor;
struct Index;

// Reduction / flip axes: nothing (all axes), an int, {0, 2} or a std::vector<int>.
struct Axes {
  std::optional<std::vector<int>> axes;   // nullopt: all axes
  Axes() = default;
  Axes(int a) : axes(std::vector<int>{a}) {}
  Axes(std::initializer_list<int> a) : axes(std::vector<int>(a)) {}
  Axes(std::vector<int> a) : axes(std::move(a)) {}
};

// Creation options: Tensor::zeros({2, 3}, {.dtype = dtypes::int32, .device = "CPU"}).
struct Opts {
  std::optional<DType> dtype;
  std::string device;                      // empty: the default device
  std::optional<bool> requires_grad;
};

// Python-style slice for operator[]: Slice{1, 3}, Slice{{}, {}, -1}, Slice{2}.
struct Slice {
  std::optional<int64_t> start{}, stop{}, step{};
};
struct NoneT {};
struct EllipsisT {};
inline constexpr NoneT None{};
inline constexpr EllipsisT Ellipsis{};

template <class S>
concept Scalar = std::is_arithmetic_v<S>;

// A Tensor or a Python-like scalar. Scalars are "weak": an int keeps the tensor's dtype,
// a float on an int tensor promotes to default_float, as in tinygrad's _broadcasted.
struct Operand {
  std::variant<std::shared_ptr<TensorData>, ConstType> v;
  Operand(const Tensor& t);
  template <Scalar S>
  Operand(S s) {
    if constexpr (std::is_same_v<S, bool>) v = ConstType(s);
    else if constexpr (std::is_integral_v<S>) v = ConstType(static_cast<int64_t>(s));
    else v = ConstType(static_cast<double>(s));
  }
  bool is_tensor() const { return v.index() == 0; }
};

class Tensor {
 public:
  // ---- creation
  Tensor(double x);
  Tensor(int64_t x);
  Tensor(int x);
  Tensor(bool x);
  Tensor(ConstType x, Opts opts);          // 0-d constant with dtype/device
  template <class E>
  static Tensor from(const std::vector<E>& data, Shape shape, Opts opts = {});
  static Tensor empty(Shape shape, Opts opts = {});
  static Tensor zeros(Shape shape, Opts opts = {});
  static Tensor ones(Shape shape, Opts opts = {});
  static Tensor full(Shape shape, ConstType fill, Opts opts = {});
  static Tensor full(Shape shape, double fill, Opts opts = {}) { return full(std::move(shape), ConstType(fill), std::move(opts)); }
  static Tensor full(Shape shape, int fill, Opts opts = {}) { return full(std::move(shape), ConstType(int64_t{fill}), std::move(opts)); }
  static Tensor full(Shape shape, bool fill, Opts opts = {}) { return full(std::move(shape), ConstType(fill), std::move(opts)); }
  static Tensor arange(double start, double stop, double step = 1, Opts opts = {});
  template <std::integral A, std::integral B, std::integral C = int64_t>
  static Tensor arange(A start, B stop, C step = 1, Opts opts = {}) {   // ints: default_int dtype
    return arange_int(static_cast<int64_t>(start), static_cast<int64_t>(stop), static_cast<int64_t>(step), std::move(opts));
  }
  static Tensor arange_int(int64_t start, int64_t stop, int64_t step, Opts opts = {});
  static Tensor arange(int64_t stop, Opts opts = {});
  // positions 0..stop-1 for a symbolic stop (a bound Variable expression)
  template <int = 0>
  static Tensor arange(sint stop, Opts opts = {}) { return arange_sym(stop, std::move(opts)); }
  static Tensor arange_sym(const sint& stop, Opts opts = {});
  static Tensor eye(int64_t n, Opts opts = {});
  static Tensor eye(int64_t n, int64_t m, Opts opts = {});
  static void manual_seed(uint64_t seed = 0);
  static Tensor rand(Shape shape, Opts opts = {});
  static Tensor randn(Shape shape, Opts opts = {});
  static Tensor randint(Shape shape, int64_t low = 0, int64_t high = 10, Opts opts = {});
  static Tensor uniform(Shape shape, double low = 0, double high = 1, Opts opts = {});
  static Tensor normal(Shape shape, double mean = 0, double std = 1, Opts opts = {});
  static Tensor scaled_uniform(Shape shape, Opts opts = {});
  static Tensor glorot_uniform(Shape shape, Opts opts = {});
  static Tensor kaiming_uniform(Shape shape, double a = 0.01, Opts opts = {});
  static Tensor kaiming_normal(Shape shape, double a = 0.01, Opts opts = {});
  Tensor multinomial(int64_t num_samples = 1, bool replacement = false) const;
  Tensor full_like(ConstType fill, Opts opts = {}) const;
  Tensor full_like(double fill, Opts opts = {}) const { return full_like(ConstType(fill), std::move(opts)); }
  Tensor full_like(int fill, Opts opts = {}) const { return full_like(ConstType(int64_t{fill}), std::move(opts)); }
  Tensor full_like(bool fill, Opts opts = {}) const { return full_like(ConstType(fill), std::move(opts)); }
  Tensor zeros_like(Opts opts = {}) const;
  Tensor ones_like(Opts opts = {}) const;

  // ---- properties and data
  const Shape& shape() const;            // tg::Error if a dim is symbolic (see sym_shape())
  DType dtype() const;
  std::string device() const;
  int64_t ndim() const;
  int64_t numel() const;
  int64_t element_size() const;
  int64_t nbytes() const;
  bool is_floating_point() const;
  // The kernels and copies realize() would run, printable (tg/schedule.hpp). They stay queued: the next
  // realize() of any tensor runs them first, so scheduling never leaves a tensor without its data.
  std::vector<ScheduleItem> schedule(std::vector<Tensor> others = {}) const;
  Tensor& realize(std::vector<Tensor> others = {});
  Tensor contiguous() const;
  Tensor contiguous_backward() const;
  Tensor detach() const;
  template <class E>
  std::vector<E> tolist() const;           // flattened, row-major; E must match dtype() (else tg::Error)
  template <class E>
  E item() const;                          // one element
  Tensor to(const std::string& device) const;
  Tensor cast(DType dtype) const;
  Tensor bitcast(DType dtype) const;
  Tensor float_() const;
  Tensor half() const;
  Tensor int_() const;
  Tensor bool_() const;
  Tensor& assign(const Tensor& x);
  Tensor& replace(const Tensor& x);
  std::string str() const;                 // Tensor([[1, 2], [3, 4]], dtype=dtypes.int, device=CPU)

  // ---- symbolic shapes: dims may be expressions of bound Variables (tinygrad's sint). The int
  // overloads below win for plain numbers; these take lists that hold a Variable.
  template <int = 0>
  Tensor reshape(std::vector<sint> shape) const { return reshape_sym(shape); }
  template <int = 0>
  Tensor expand(std::vector<sint> shape) const { return expand_sym(shape); }
  template <int = 0>
  Tensor shrink(std::vector<std::pair<sint, sint>> arg) const { return shrink_sym(arg); }
  template <int = 0>
  Tensor pad(std::vector<std::pair<sint, sint>> arg, double value = 0) const { return pad_sym(arg, value); }
  Tensor reshape_sym(const std::vector<sint>& shape) const;
  Tensor expand_sym(const std::vector<sint>& shape) const;
  Tensor shrink_sym(const std::vector<std::pair<sint, sint>>& arg) const;
  Tensor pad_sym(const std::vector<std::pair<sint, sint>>& arg, double value = 0) const;
  std::vector<sint> sym_shape() const;     // dims as expressions (constants when concrete)
  bool is_symbolic() const;                // its view depends on a Variable (a dim, or e.g. a shrink's offset);
                                           // shape() throws tg::Error when a dim does: use sym_shape()

  // ---- movement
  Tensor reshape(Shape shape) const;       // one -1 is inferred
  Tensor view(Shape shape) const;
  Tensor expand(Shape shape) const;        // -1 keeps a dim
  Tensor permute(std::vector<int> order) const;
  Tensor flip(Axes axis) const;
  Tensor shrink(std::vector<std::pair<int64_t, int64_t>> arg) const;
  Tensor pad(std::vector<std::pair<int64_t, int64_t>> arg, double value = 0) const;
  Tensor pad2d(std::vector<int64_t> lrtb, double value = 0) const;
  Tensor transpose(int dim0 = 1, int dim1 = 0) const;
  Tensor T() const;
  Tensor flatten(int start_dim = 0, int end_dim = -1) const;
  Tensor unflatten(int dim, Shape sizes) const;
  Tensor squeeze(std::optional<int> dim = {}) const;
  Tensor unsqueeze(int dim) const;
  Tensor operator[](std::initializer_list<Index> indices) const;
  Tensor operator[](const std::vector<Index>& indices) const;
  Tensor gather(int dim, const Tensor& index) const;
  static Tensor cat(const std::vector<Tensor>& tensors, int dim = 0);
  static Tensor stack(const std::vector<Tensor>& tensors, int dim = 0);
  Tensor repeat(Shape repeats) const;
  Tensor repeat_interleave(int64_t repeats, std::optional<int> dim = {}) const;
  std::vector<Tensor> split(int64_t size, int dim = 0) const;
  std::vector<Tensor> split(std::vector<int64_t> sizes, int dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int dim = 0) const;

  // ---- unary elementwise
  Tensor neg() const;
  Tensor log() const;
  Tensor log2() const;
  Tensor exp() const;
  Tensor exp2() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tan() const;
  Tensor trunc() const;
  Tensor ceil() const;
  Tensor floor() const;
  Tensor round() const;                    // half to even
  Tensor square() const;
  Tensor sign() const;
  Tensor abs() const;
  Tensor reciprocal() const;
  Tensor logical_not() const;
  Tensor elu(double alpha = 1.0) const;
  Tensor celu(double alpha = 1.0) const;
  Tensor swish() const;
  Tensor silu() const;
  Tensor relu6() const;
  Tensor hardswish() const;
  Tensor tanh() const;
  Tensor sinh() const;
  Tensor cosh() const;
  Tensor atanh() const;
  Tensor asinh() const;
  Tensor acosh() const;
  Tensor hardtanh(double min_val = -1, double max_val = 1) const;
  Tensor gelu() const;
  Tensor quick_gelu() const;
  Tensor leakyrelu(double neg_slope = 0.01) const;
  Tensor mish() const;
  Tensor softplus(double beta = 1) const;
  Tensor softsign() const;
  Tensor hardsigmoid(double alpha = 1.0 / 6, double beta = 0.5) const;

  // ---- binary elementwise (broadcasting, dtype promotion)
  Tensor add(const Operand& x, bool reverse = false) const;
  Tensor sub(const Operand& x, bool reverse = false) const;
  Tensor mul(const Operand& x, bool reverse = false) const;
  Tensor div(const Operand& x, bool upcast = true, bool reverse = false) const;   // upcast=false: integer division on ints
  Tensor pow(const Operand& x, bool reverse = false) const;
  Tensor maximum(const Operand& x) const;
  Tensor minimum(const Operand& x) const;
  Tensor xor_(const Operand& x, bool reverse = false) const;
  Tensor bitwise_xor(const Operand& x, bool reverse = false) const { return xor_(x, reverse); }
  Tensor bitwise_and(const Operand& x, bool reverse = false) const;
  Tensor bitwise_or(const Operand& x, bool reverse = false) const;
  Tensor lshift(int64_t x) const;
  Tensor rshift(int64_t x) const;
  Tensor lerp(const Tensor& end, const Operand& weight) const;
  Tensor clip(std::optional<Operand> min, std::optional<Operand> max) const;
  Tensor clamp(std::optional<Operand> min, std::optional<Operand> max) const { return clip(std::move(min), std::move(max)); }
  Tensor where(const Operand& x, const Operand& y) const;
  Tensor masked_fill(const Tensor& mask, const Operand& value) const;
  Tensor lt(const Operand& x) const;
  Tensor gt(const Operand& x) const;
  Tensor le(const Operand& x) const;
  Tensor ge(const Operand& x) const;
  Tensor eq(const Operand& x) const;
  Tensor ne(const Operand& x) const;

  // ---- reduce (Axes default: all; keepdim default false)
  Tensor sum(Axes axis = {}, bool keepdim = false, std::optional<DType> acc_dtype = {}) const;
  Tensor prod(Axes axis = {}, bool keepdim = false) const;
  Tensor max(Axes axis = {}, bool keepdim = false) const;
  Tensor min(Axes axis = {}, bool keepdim = false) const;
  Tensor any(Axes axis = {}, bool keepdim = false) const;
  Tensor all(Axes axis = {}, bool keepdim = false) const;
  Tensor mean(Axes axis = {}, bool keepdim = false) const;
  Tensor var(Axes axis = {}, bool keepdim = false, int64_t correction = 1) const;
  Tensor std(Axes axis = {}, bool keepdim = false, int64_t correction = 1) const;
  Tensor softmax(int axis = -1) const;
  Tensor log_softmax(int axis = -1) const;
  Tensor logsumexp(std::optional<int> axis = {}, bool keepdim = false) const;
  Tensor argmax(std::optional<int> axis = {}, bool keepdim = false) const;
  Tensor argmin(std::optional<int> axis = {}, bool keepdim = false) const;
  Tensor cumsum(int axis = 0) const;

  // ---- processing
  Tensor matmul(const Tensor& x, bool reverse = false, std::optional<DType> acc_dtype = {}) const;
  Tensor dot(const Tensor& w, std::optional<DType> acc_dtype = {}) const;
  Tensor conv2d(const Tensor& weight, std::optional<Tensor> bias = {}, int groups = 1, Shape stride = {1},
                Shape dilation = {1}, Shape padding = {0}, std::optional<DType> acc_dtype = {}) const;
  Tensor conv_transpose2d(const Tensor& weight, std::optional<Tensor> bias = {}, int groups = 1, Shape stride = {1},
                          Shape dilation = {1}, Shape padding = {0}, Shape output_padding = {0}) const;
  Tensor max_pool2d(Shape kernel_size = {2, 2}, Shape stride = {}, Shape dilation = {1}, Shape padding = {0}) const;
  Tensor avg_pool2d(Shape kernel_size = {2, 2}, Shape stride = {}, Shape dilation = {1}, Shape padding = {0},
                    bool count_include_pad = true) const;
  static Tensor einsum(const std::string& formula, const std::vector<Tensor>& xs, std::optional<DType> acc_dtype = {});
  Tensor triu(int diagonal = 0) const;
  Tensor tril(int diagonal = 0) const;
  Tensor interpolate(Shape size, const std::string& mode = "linear", bool align_corners = false) const;

  // ---- functional nn
  Tensor linear(const Tensor& weight, std::optional<Tensor> bias = {}) const;
  Tensor layernorm(Axes axis = -1, double eps = 1e-5) const;
  Tensor batchnorm(std::optional<Tensor> weight, std::optional<Tensor> bias, const Tensor& mean, const Tensor& invstd,
                   Axes axis = 1) const;
  Tensor dropout(double p = 0.5) const;
  Tensor one_hot(int64_t num_classes) const;
  Tensor scaled_dot_product_attention(const Tensor& key, const Tensor& value, std::optional<Tensor> attn_mask = {},
                                      double dropout_p = 0, bool is_causal = false) const;
  Tensor binary_crossentropy(const Tensor& y) const;
  Tensor binary_crossentropy_logits(const Tensor& y) const;
  Tensor sparse_categorical_crossentropy(const Tensor& Y, int64_t ignore_index = -1, double label_smoothing = 0) const;

  // ---- autograd
  std::optional<bool> requires_grad_opt() const;   // None / False / True as tinygrad
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);
  std::optional<Tensor> grad() const;
  void set_grad(std::optional<Tensor> g);
  Tensor& backward();
  Tensor& backward(const Tensor& gradient);

  static bool training;
  static bool no_grad;
  struct Train {                           // RAII: { Tensor::Train t; ... } like Tensor.train()
    explicit Train(bool mode = true);
    ~Train();
    Train(const Train&) = delete;
    Train& operator=(const Train&) = delete;
   private:
    bool prev_;
  };
  struct NoGrad {                          // RAII: no autograd graph is recorded in scope
    explicit NoGrad(bool mode = true);
    ~NoGrad();
    NoGrad(const NoGrad&) = delete;
    NoGrad& operator=(const NoGrad&) = delete;
   private:
    bool prev_;
  };


 private:
  explicit Tensor(std::shared_ptr<TensorData> d) : d_(std::move(d)) {}
  std::shared_ptr<TensorData> d_;
  friend struct Access;   // src/access.hpp: the library reaches the data through it
};

// operator[] argument: an int, Slice, None, Ellipsis or an integer Tensor (fancy indexing).
struct Index {
  std::variant<int64_t, Slice, NoneT, EllipsisT, Tensor> v;
  Index(int i) : v(int64_t{i}) {}
  Index(long i) : v(int64_t{i}) {}
  Index(long long i) : v(int64_t{i}) {}
  Index(Slice s) : v(s) {}
  Index(NoneT n) : v(n) {}
  Index(EllipsisT e) : v(e) {}
  Index(const Tensor& t) : v(t) {}
};

inline Tensor operator-(const Tensor& x) { return x.neg(); }
#define TG_TENSOR_BINOP(OP, EXPR_TT, EXPR_TS, EXPR_ST)                                   \
  inline Tensor operator OP(const Tensor& a, const Tensor& b) { return EXPR_TT; }        \
  template <Scalar S> Tensor operator OP(const Tensor& a, S b) { return EXPR_TS; }       \
  template <Scalar S> Tensor operator OP(S b, const Tensor& a) { return EXPR_ST; }
TG_TENSOR_BINOP(+, a.add(b), a.add(b), a.add(b, true))
TG_TENSOR_BINOP(-, a.sub(b), a.sub(b), a.sub(b, true))
TG_TENSOR_BINOP(*, a.mul(b), a.mul(b), a.mul(b, true))
TG_TENSOR_BINOP(/, a.div(b), a.div(b), a.div(b, true, true))
TG_TENSOR_BINOP(&, a.bitwise_and(b), a.bitwise_and(b), a.bitwise_and(b, true))
TG_TENSOR_BINOP(|, a.bitwise_or(b), a.bitwise_or(b), a.bitwise_or(b, true))
TG_TENSOR_BINOP(^, a.xor_(b), a.xor_(b), a.xor_(b, true))
TG_TENSOR_BINOP(<, a.lt(b), a.lt(b), a.gt(b))
TG_TENSOR_BINOP(>, a.gt(b), a.gt(b), a.lt(b))
TG_TENSOR_BINOP(<=, a.le(b), a.le(b), a.ge(b))
TG_TENSOR_BINOP(>=, a.ge(b), a.ge(b), a.le(b))
TG_TENSOR_BINOP(==, a.eq(b), a.eq(b), a.eq(b))
TG_TENSOR_BINOP(!=, a.ne(b), a.ne(b), a.ne(b))
#undef TG_TENSOR_BINOP
inline Tensor operator<<(const Tensor& a, int64_t b) { return a.lshift(b); }
inline Tensor operator>>(const Tensor& a, int64_t b) { return a.rshift(b); }

}  // namespace tg
