// Random numbers as tinygrad 0.9.2: threefry over a counter (so a seed gives the same numbers on
// every device), then Box-Muller for normals and affine maps for the initializers.
#include <chrono>
#include <cmath>
#include <numbers>

#include "tensor/function.hpp"
#include "lazy/metadata.hpp"
#include "tg/helpers.hpp"

namespace tg {
using detail::lb;

namespace {
// The seed until manual_seed: SEED from the environment when set, else the time in seconds (tinygrad's
// Tensor._seed). The seed is a constant of every threefry kernel, so kernel replay (scripts/replay) sets
// SEED: with the time, two runs a second apart generate different kernels.
uint64_t& g_seed() {
  static uint64_t seed = !getenv_str("SEED").empty()
                             ? static_cast<uint64_t>(getenv("SEED"))
                             : static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                                         std::chrono::system_clock::now().time_since_epoch())
                                                         .count());
  return seed;
}
std::optional<Tensor> g_rng_counter;

// the result as a fresh leaf with the requested requires_grad (the graph that made it is not a parameter's history)
Tensor leaf(const Tensor& t, std::optional<bool> requires_grad) { return detail::make_tensor(lb(t), requires_grad); }
Opts no_grad_opts(const Opts& o, std::optional<DType> dt) { return Opts{dt, o.device, std::nullopt}; }
Shape tail(const Shape& s) { return s.empty() ? Shape{} : Shape(s.begin() + 1, s.end()); }
}  // namespace

void Tensor::manual_seed(uint64_t seed) {
  g_seed() = seed;
  g_rng_counter.reset();
}

Tensor Tensor::rand(Shape shape, Opts opts) {
  TG_OP("rand");
  detail::check_shape(shape, "rand");
  bool fresh = !g_rng_counter;
  if (fresh) g_rng_counter = Tensor::from<uint32_t>({0}, {1}, Opts{{}, "", false});
  int64_t num = tg::prod(shape);
  DType dt = opts.dtype.value_or(dtypes::default_float());
  if (num == 0) return Tensor::zeros(shape, Opts{dt, opts.device, opts.requires_grad});
  if (!fresh) g_rng_counter->assign(*g_rng_counter + num);
  std::string device = detail::resolve_device(opts.device);
  int64_t half = (num + 1) / 2;
  Tensor counts1 = Tensor::arange(half, Opts{dtypes::uint32, device, false}) + g_rng_counter->to(device);
  Tensor counts2 = counts1 + half;
  Tensor x = (counts2.cast(dtypes::uint64) << 32) | counts1.cast(dtypes::uint64);
  auto [a, b] = detail::broadcasted(x, static_cast<int64_t>(g_seed()), false, true, "rand");
  x = apply<F::Threefry>({a, b});
  // cat(lo words, hi words) as one (2, half) kernel: row k holds word k of every pair, picked by a
  // pad-masked const (true on row 0), so x (and the arange under it, folded into index math) is fused
  // and never stored. The GPU heuristic upcasts the 2 rows (upcast_masked_axes), so a thread evaluates
  // threefry once per pair and stores both words' floats, 4 pairs per thread as two float4 stores.
  // (Before: x realized (8 bytes a pair) and read back by a second kernel; rand 2^28 on an H100 wrote
  // 566 GB/s. A cat pads >> 32, an unsafe pad op: it realized the hi words in a kernel of their own.)
  Tensor xx = x.reshape({1, half}).expand({2, half});
  Tensor first = Tensor::full({1, 1}, true, Opts{dtypes::bool_, device, false}).pad({{0, 1}, {0, 0}}).expand({2, half});
  Tensor words = first.where(xx & int64_t{0xffffffff}, (xx >> 32) & int64_t{0xffffffff}).cast(dtypes::uint32);
  // the top 24 bits of each word give a float in [0, 1); stored as (2, half), then flattened as a view:
  // a reshape to 2*half before the store merged the rows into one axis (no rows to upcast), and the
  // arange's view under it then indexed n*half elements (2^51 for 2^28), past int32
  Tensor f = words.rshift(8).cast(dtypes::float32).div(static_cast<int64_t>(1) << 24).cast(dt).contiguous();
  Tensor out = f.reshape({2 * half});
  if (num != 2 * half) out = out[{Slice{{}, num}}];
  return leaf(out.reshape(shape).contiguous(), opts.requires_grad);
}

Tensor Tensor::randn(Shape shape, Opts opts) {
  TG_OP("randn");
  Shape s2{2};
  s2.insert(s2.end(), shape.begin(), shape.end());
  Tensor src = rand(s2, no_grad_opts(opts, dtypes::float32));
  Tensor r = src[{0}].mul(2 * std::numbers::pi).cos().mul((1 - src[{1}]).log().mul(-2).sqrt());
  return leaf(r.cast(opts.dtype.value_or(dtypes::default_float())), opts.requires_grad);
}

Tensor Tensor::randint(Shape shape, int64_t low, int64_t high, Opts opts) {
  TG_OP("randint");
  DType dt = opts.dtype.value_or(dtypes::int32);
  if (!dt.is_int()) throw Error("randint: dtype " + dt.str() + " must be an int dtype");
  if (low >= high) throw Error("randint: low " + std::to_string(low) + " must be below high " + std::to_string(high));
  Tensor r = (static_cast<double>(high - low) * rand(shape, no_grad_opts(opts, std::nullopt))).cast(dt) + low;
  return leaf(r, opts.requires_grad);
}

Tensor Tensor::uniform(Shape shape, double low, double high, Opts opts) {
  TG_OP("uniform");
  DType dt = opts.dtype.value_or(dtypes::default_float());
  Tensor r = ((high - low) * rand(shape, no_grad_opts(opts, std::nullopt))).cast(dt) + low;
  return leaf(r, opts.requires_grad);
}

Tensor Tensor::normal(Shape shape, double mean, double std, Opts opts) {
  TG_OP("normal");
  return leaf(std * randn(shape, no_grad_opts(opts, opts.dtype)) + mean, opts.requires_grad);
}

Tensor Tensor::scaled_uniform(Shape shape, Opts opts) {
  TG_OP("scaled_uniform");
  double scale = std::pow(static_cast<double>(tg::prod(shape)), -0.5);
  return leaf(uniform(shape, -1.0, 1.0, no_grad_opts(opts, opts.dtype)).mul(scale), opts.requires_grad);
}

Tensor Tensor::glorot_uniform(Shape shape, Opts opts) {
  TG_OP("glorot_uniform");
  if (shape.empty()) throw Error("glorot_uniform: needs at least 1 dim");
  double scale = std::sqrt(6.0 / static_cast<double>(shape[0] + tg::prod(tail(shape))));
  return leaf(uniform(shape, -1.0, 1.0, no_grad_opts(opts, opts.dtype)).mul(scale), opts.requires_grad);
}

Tensor Tensor::kaiming_uniform(Shape shape, double a, Opts opts) {
  TG_OP("kaiming_uniform");
  if (shape.empty()) throw Error("kaiming_uniform: needs at least 1 dim");
  double bound = std::sqrt(3.0) * std::sqrt(2.0 / (1 + a * a)) / std::sqrt(static_cast<double>(tg::prod(tail(shape))));
  return uniform(shape, -bound, bound, opts);
}

Tensor Tensor::kaiming_normal(Shape shape, double a, Opts opts) {
  TG_OP("kaiming_normal");
  if (shape.empty()) throw Error("kaiming_normal: needs at least 1 dim");
  double std = std::sqrt(2.0 / (1 + a * a)) / std::sqrt(static_cast<double>(tg::prod(tail(shape))));
  return normal(shape, 0.0, std, opts);
}

Tensor Tensor::multinomial(int64_t num_samples, bool replacement) const {
  TG_OP("multinomial");
  if (ndim() < 1 || ndim() > 2 || num_samples <= 0)
    throw Error("multinomial: needs a 1-d or 2-d tensor of weights and num_samples > 0, got shape " + to_str(shape()) +
                " and num_samples " + std::to_string(num_samples));
  if (!replacement && num_samples != 1) throw Error("multinomial: without replacement only num_samples = 1 is supported");
  Tensor weight = ndim() == 1 ? unsqueeze(0) : *this;
  Tensor cw = weight.cumsum(1).float_();
  Tensor cdf = cw / cw[{Slice{}, -1}].unsqueeze(1);
  Tensor unif = Tensor::rand({num_samples, cdf.shape()[0], 1}, Opts{{}, device(), std::nullopt});
  Tensor indices = (unif.expand({-1, -1, cdf.shape()[1]}) >= cdf).sum(2).permute({1, 0});
  return (ndim() == 1 ? indices.squeeze(0) : indices).cast(dtypes::int32);
}

}  // namespace tg
