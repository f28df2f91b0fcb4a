// Conformance harness: tg::Tensor against libtorch, in the spirit of tinygrad's helper_test_op.
// A Case names its inputs (shape, kind, value range or fixed values), one function over tg
// tensors and one over torch tensors. The same host data goes into both; the harness compares
// the forward outputs (shape, dtype class, nan/inf positions, values within atol + rtol*|ref|),
// then runs ((out+1)^2).mean().backward() on both and compares every input's gradient.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tg/tensor.hpp"

namespace conf {

// Input kinds. Idx is an integer index tensor: int32 in tg (tinygrad's default int), int64 in
// torch (which requires Long indices for gather/one_hot/cross_entropy/indexing).
enum class Kind { F32, F16, I32, Idx, Bool, U8 };

struct In {
  tg::Shape shape;
  Kind kind = Kind::F32;
  double lo = -2, hi = 2;          // random range: uniform for floats, [lo, hi] integers for ints
  std::vector<double> vals;        // fixed values instead of random ones
  bool grad = true;                // float inputs only: compare this input's gradient
};
inline In F(tg::Shape s, double lo = -2, double hi = 2) { return In{std::move(s), Kind::F32, lo, hi}; }
inline In I(tg::Shape s, double lo = -10, double hi = 10) { return In{std::move(s), Kind::I32, lo, hi}; }
inline In Ix(tg::Shape s, int64_t lo, int64_t hi) { return In{std::move(s), Kind::Idx, double(lo), double(hi)}; }
inline In U8(tg::Shape s, double lo = 0, double hi = 255) { return In{std::move(s), Kind::U8, lo, hi}; }
inline In B(tg::Shape s) { return In{std::move(s), Kind::Bool, 0, 1}; }
inline In H(tg::Shape s, double lo = -2, double hi = 2) { return In{std::move(s), Kind::F16, lo, hi}; }
inline In V(tg::Shape s, std::vector<double> vals, Kind k = Kind::F32) { return In{std::move(s), k, 0, 0, std::move(vals)}; }
inline In NG(In in) { in.grad = false; return in; }   // a float input whose gradient isn't compared

using TgFn = std::function<tg::Tensor(const std::vector<tg::Tensor>&)>;
using ThFn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

struct Case {
  std::string name;
  std::vector<In> ins;
  TgFn tg;
  ThFn th;
  double atol = 1e-6, rtol = 1e-3, grad_atol = 1e-4, grad_rtol = 1e-3;
  bool forward_only = false;
  std::string skip;                // non-empty: not run, with this reason

  Case& tol(double a, double r = 1e-3) { atol = a; rtol = r; return *this; }
  Case& gtol(double a, double r = 1e-3) { grad_atol = a; grad_rtol = r; return *this; }
  Case& fwd() { forward_only = true; return *this; }
  Case& skipped(std::string why) { skip = std::move(why); return *this; }
};

// One case from a generic lambda whose body is valid for both tensor types.
template <class Fn>
Case same(std::string name, std::vector<In> ins, Fn fn) {
  return Case{std::move(name), std::move(ins), [fn](const std::vector<tg::Tensor>& x) { return tg::Tensor(fn(x)); },
              [fn](const std::vector<torch::Tensor>& x) { return torch::Tensor(fn(x)); }};
}
// The body of a generic lambda over the inputs x (a vector of either tensor type): same("add", {...}, FN(x[0] + x[1]))
#define FN(...) [](const auto& x) { return __VA_ARGS__; }
// One case with a separate tg and torch function: pair("max", {...}, TG(x[0].max(1)), TH(x[0].amax(1)))
#define TG(...) [](const std::vector<tg::Tensor>& x) -> tg::Tensor { return __VA_ARGS__; }
#define TH(...) [](const std::vector<torch::Tensor>& x) -> torch::Tensor { return __VA_ARGS__; }

// One case with a separate tg and torch function.
inline Case pair(std::string name, std::vector<In> ins, TgFn t, ThFn th) {
  return Case{std::move(name), std::move(ins), std::move(t), std::move(th)};
}

// Runs the cases, prints each failure (op, shapes, what differed, max abs error) and returns the
// number of failures. Updates the suite-wide pass/fail/skip counters printed at exit as
// "conformance: N passed, M failed, K skipped". CONFORMANCE_FILTER=substr runs only matching cases.
int run_cases(const std::string& family, const std::vector<Case>& cases);
// Runs one case without counting it: "" when tg and torch agree, else what differed.
std::string check_case(const Case& c);

// ---- spellings that differ between tg and torch, overloaded for both tensor types so that one
// generic lambda serves both (see same()). Axes: nullopt = all axes.
using Ax = std::optional<std::vector<int64_t>>;
using Pairs = std::vector<std::pair<int64_t, int64_t>>;
inline Ax axes(std::initializer_list<int64_t> a) { return std::vector<int64_t>(a); }
namespace op {
tg::Tensor sum(const tg::Tensor& x, Ax ax = {}, bool keepdim = false);
torch::Tensor sum(const torch::Tensor& x, Ax ax = {}, bool keepdim = false);
tg::Tensor mean(const tg::Tensor& x, Ax ax = {}, bool keepdim = false);
torch::Tensor mean(const torch::Tensor& x, Ax ax = {}, bool keepdim = false);
tg::Tensor max(const tg::Tensor& x, Ax ax = {}, bool keepdim = false);
torch::Tensor max(const torch::Tensor& x, Ax ax = {}, bool keepdim = false);
tg::Tensor min(const tg::Tensor& x, Ax ax = {}, bool keepdim = false);
torch::Tensor min(const torch::Tensor& x, Ax ax = {}, bool keepdim = false);
tg::Tensor prod(const tg::Tensor& x, Ax ax = {}, bool keepdim = false);
torch::Tensor prod(const torch::Tensor& x, Ax ax = {}, bool keepdim = false);
tg::Tensor any(const tg::Tensor& x, Ax ax = {}, bool keepdim = false);
torch::Tensor any(const torch::Tensor& x, Ax ax = {}, bool keepdim = false);
tg::Tensor all(const tg::Tensor& x, Ax ax = {}, bool keepdim = false);
torch::Tensor all(const torch::Tensor& x, Ax ax = {}, bool keepdim = false);
tg::Tensor var(const tg::Tensor& x, Ax ax = {}, bool keepdim = false, int64_t correction = 1);
torch::Tensor var(const torch::Tensor& x, Ax ax = {}, bool keepdim = false, int64_t correction = 1);
tg::Tensor std(const tg::Tensor& x, Ax ax = {}, bool keepdim = false, int64_t correction = 1);
torch::Tensor std(const torch::Tensor& x, Ax ax = {}, bool keepdim = false, int64_t correction = 1);
tg::Tensor logsumexp(const tg::Tensor& x, int axis, bool keepdim = false);
torch::Tensor logsumexp(const torch::Tensor& x, int axis, bool keepdim = false);
tg::Tensor argmax(const tg::Tensor& x, std::optional<int> axis = {}, bool keepdim = false);
torch::Tensor argmax(const torch::Tensor& x, std::optional<int> axis = {}, bool keepdim = false);
tg::Tensor argmin(const tg::Tensor& x, std::optional<int> axis = {}, bool keepdim = false);
torch::Tensor argmin(const torch::Tensor& x, std::optional<int> axis = {}, bool keepdim = false);

tg::Tensor shrink(const tg::Tensor& x, const Pairs& arg);
torch::Tensor shrink(const torch::Tensor& x, const Pairs& arg);
tg::Tensor pad(const tg::Tensor& x, const Pairs& arg, double value = 0);   // tinygrad order: first dim first
torch::Tensor pad(const torch::Tensor& x, const Pairs& arg, double value = 0);
tg::Tensor flip(const tg::Tensor& x, std::vector<int64_t> axes);
torch::Tensor flip(const torch::Tensor& x, std::vector<int64_t> axes);
tg::Tensor permute(const tg::Tensor& x, std::vector<int64_t> order);
torch::Tensor permute(const torch::Tensor& x, std::vector<int64_t> order);
tg::Tensor where(const tg::Tensor& c, const tg::Tensor& x, const tg::Tensor& y);
torch::Tensor where(const torch::Tensor& c, const torch::Tensor& x, const torch::Tensor& y);
tg::Tensor cat(const std::vector<tg::Tensor>& xs, int dim);
torch::Tensor cat(const std::vector<torch::Tensor>& xs, int dim);
tg::Tensor stack(const std::vector<tg::Tensor>& xs, int dim);
torch::Tensor stack(const std::vector<torch::Tensor>& xs, int dim);
tg::Tensor linear(const tg::Tensor& x, const tg::Tensor& w, std::optional<tg::Tensor> b = {});   // w: (in, out) as tinygrad
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, std::optional<torch::Tensor> b = {});
}  // namespace op

// Host-side helpers used by the harness and by cases that build constants.
std::vector<double> tg_values(const tg::Tensor& t);      // realized, row-major, as doubles
std::vector<double> torch_values(const torch::Tensor& t);
std::string shape_str(const std::vector<int64_t>& s);

}  // namespace conf
