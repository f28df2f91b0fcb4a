// Movement ops against torch (gradients flow back through every view): reshape/view/expand/
// permute/flip/shrink/pad/pad2d/transpose/T/flatten/unflatten/squeeze/unsqueeze, cat/stack/
// split/chunk/repeat/repeat_interleave, gather, triu/tril, one_hot, and operator[] with ints,
// slices (incl. negative steps and out-of-range bounds), None, Ellipsis and tensor indices.
#include <gtest/gtest.h>

#include "harness.hpp"

using namespace conf;
namespace ti = torch::indexing;

namespace {

// Python slice semantics (negative steps included, which torch's own slicing rejects)
torch::Tensor py_slice(const torch::Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> stop,
                       int64_t step) {
  int64_t n = x.size(dim);
  auto norm = [n](int64_t v, int64_t lo, int64_t hi) { return std::clamp(v < 0 ? v + n : v, lo, hi); };
  int64_t b, e;
  if (step > 0) {
    b = start ? norm(*start, 0, n) : 0;
    e = stop ? norm(*stop, 0, n) : n;
  } else {
    b = start ? norm(*start, -1, n - 1) : n - 1;
    e = stop ? norm(*stop, -1, n - 1) : -1;
  }
  std::vector<int64_t> idx;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) idx.push_back(i);
  return x.index_select(dim, torch::tensor(idx, torch::kInt64));
}

std::vector<Case> view_cases() {
  std::vector<Case> cs;
  cs.push_back(same("reshape/(3,4)->(4,3)", {F({3, 4})}, FN(x[0].reshape({4, 3}))));
  cs.push_back(same("reshape/infer", {F({2, 3, 4})}, FN(x[0].reshape({6, -1}))));
  cs.push_back(same("reshape/to_0d", {F({1})}, FN(x[0].reshape({}))));
  cs.push_back(same("reshape/from_0d", {F({})}, FN(x[0].reshape({1, 1}))));
  cs.push_back(same("reshape/zero_size", {F({0, 3})}, FN(x[0].reshape({3, 0}))));
  cs.push_back(same("reshape/of_permuted", {F({3, 4, 2})}, FN(op::permute(x[0], {2, 0, 1}).reshape({6, 4}))));
  cs.push_back(same("reshape/of_padded", {F({3, 4})}, FN(op::pad(x[0], {{1, 0}, {0, 2}}).reshape({24}))));
  cs.push_back(same("view", {F({3, 4})}, FN(x[0].view({2, 6}))));
  cs.push_back(same("expand/col", {F({4, 1})}, FN(x[0].expand({4, 5}))));
  cs.push_back(same("expand/new_dims", {F({1, 3})}, FN(x[0].expand({2, 4, 3}))));
  cs.push_back(same("expand/keep_-1", {F({4, 1})}, FN(x[0].expand({-1, 6}))));
  cs.push_back(same("expand/0d", {F({})}, FN(x[0].expand({3, 2}))));
  cs.push_back(same("expand/then_reduce", {F({4, 1, 3})}, FN(op::sum(x[0].expand({4, 5, 3}), axes({0})))));
  cs.push_back(same("permute/(2,0,1)", {F({2, 3, 4})}, FN(op::permute(x[0], {2, 0, 1}))));
  cs.push_back(same("permute/negative", {F({2, 3, 4})}, FN(op::permute(x[0], {-1, 0, -2}))));
  cs.push_back(same("permute/4d", {F({1, 2, 3, 4})}, FN(op::permute(x[0], {3, 0, 2, 1}))));
  cs.push_back(same("permute/0d", {F({})}, FN(op::permute(x[0], {}))));
  cs.push_back(same("flip/0", {F({4, 5})}, FN(op::flip(x[0], {0}))));
  cs.push_back(same("flip/02", {F({2, 3, 4})}, FN(op::flip(x[0], {0, 2}))));
  cs.push_back(same("flip/-1", {F({2, 3, 4})}, FN(op::flip(x[0], {-1}))));
  cs.push_back(same("flip/size1", {F({1, 3})}, FN(op::flip(x[0], {0, 1}))));
  cs.push_back(same("shrink", {F({4, 5})}, FN(op::shrink(x[0], {{1, 3}, {0, 4}}))));
  cs.push_back(same("shrink/to_empty", {F({4, 5})}, FN(op::shrink(x[0], {{1, 1}, {0, 5}}))));
  cs.push_back(same("shrink/of_flip", {F({4, 5})}, FN(op::shrink(op::flip(x[0], {1}), {{0, 2}, {1, 4}}))));
  cs.push_back(same("pad", {F({3, 4})}, FN(op::pad(x[0], {{1, 2}, {0, 3}}))));
  cs.push_back(same("pad/value", {F({3, 4})}, FN(op::pad(x[0], {{0, 1}, {2, 0}}, 2.5))));
  cs.push_back(same("pad/zero_size", {F({0, 3})}, FN(op::pad(x[0], {{1, 1}, {0, 0}}))));
  cs.push_back(same("pad/3d_middle", {F({2, 3, 2})}, FN(op::pad(x[0], {{0, 0}, {2, 1}, {0, 0}}))));
  cs.push_back(same("pad/then_shrink", {F({3, 4})}, FN(op::shrink(op::pad(x[0], {{2, 2}, {2, 2}}), {{1, 6}, {3, 7}}))));
  cs.push_back(pair("pad2d", {F({1, 2, 3, 4})}, TG(x[0].pad2d({1, 2, 0, 1})),
                    TH(torch::constant_pad_nd(x[0], {1, 2, 0, 1}))));
  cs.push_back(pair("pad2d/value", {F({2, 3, 3})}, TG(x[0].pad2d({2, 0, 1, 1}, -1.0)),
                    TH(torch::constant_pad_nd(x[0], {2, 0, 1, 1}, -1.0))));
  cs.push_back(pair("transpose/default", {F({3, 4})}, TG(x[0].transpose()), TH(x[0].transpose(1, 0))));
  cs.push_back(same("transpose/02", {F({2, 3, 4})}, FN(x[0].transpose(0, 2))));
  cs.push_back(same("transpose/negative", {F({2, 3, 4})}, FN(x[0].transpose(-1, -2))));
  cs.push_back(pair("T", {F({3, 4})}, TG(x[0].T()), TH(x[0].t())));
  cs.push_back(same("flatten", {F({2, 3, 4})}, FN(x[0].flatten())));
  cs.push_back(same("flatten/1", {F({2, 3, 4})}, FN(x[0].flatten(1))));
  cs.push_back(same("flatten/0_1", {F({2, 3, 4})}, FN(x[0].flatten(0, 1))));
  cs.push_back(same("flatten/0d", {F({})}, FN(x[0].flatten())));
  cs.push_back(same("unflatten", {F({2, 12})}, FN(x[0].unflatten(1, {3, 4}))));
  cs.push_back(same("unflatten/infer", {F({2, 12})}, FN(x[0].unflatten(-1, {2, -1}))));
  cs.push_back(same("unflatten/dim0", {F({6, 2})}, FN(x[0].unflatten(0, {3, 2}))));
  cs.push_back(same("squeeze/all", {F({1, 3, 1, 4})}, FN(x[0].squeeze())));
  cs.push_back(same("squeeze/dim", {F({1, 3, 1, 4})}, FN(x[0].squeeze(2))));
  cs.push_back(same("squeeze/negative_dim", {F({1, 3, 1})}, FN(x[0].squeeze(-1))));
  cs.push_back(same("squeeze/non_one_dim", {F({2, 3})}, FN(x[0].squeeze(1))));
  cs.push_back(same("squeeze/0d", {F({})}, FN(x[0].squeeze())));
  cs.push_back(same("unsqueeze/0", {F({3, 4})}, FN(x[0].unsqueeze(0))));
  cs.push_back(same("unsqueeze/-1", {F({3, 4})}, FN(x[0].unsqueeze(-1))));
  cs.push_back(same("unsqueeze/middle", {F({3, 4})}, FN(x[0].unsqueeze(1))));
  cs.push_back(same("unsqueeze/0d", {F({})}, FN(x[0].unsqueeze(0))));
  cs.push_back(pair("contiguous_detach_chain", {F({3, 4})}, TG(op::permute(x[0], {1, 0}).contiguous() * 2),
                    TH(x[0].permute({1, 0}).contiguous() * 2)));
  return cs;
}

std::vector<Case> combine_cases() {
  std::vector<Case> cs;
  cs.push_back(same("cat/dim0", {F({2, 3}), F({4, 3})}, FN(op::cat({x[0], x[1]}, 0))));
  cs.push_back(same("cat/dim1_three", {F({2, 3}), F({2, 1}), F({2, 4})}, FN(op::cat({x[0], x[1], x[2]}, 1))));
  cs.push_back(same("cat/dim-1", {F({2, 2, 3}), F({2, 2, 2})}, FN(op::cat({x[0], x[1]}, -1))));
  cs.push_back(same("cat/zero_size", {F({2, 3}), F({0, 3})}, FN(op::cat({x[0], x[1]}, 0))));
  cs.push_back(same("cat/single", {F({2, 3})}, FN(op::cat({x[0]}, 1))));
  cs.push_back(same("cat/same_tensor", {F({2, 3})}, FN(op::cat({x[0], x[0] * 2}, 0))));
  cs.push_back(same("cat/permuted", {F({3, 2}), F({2, 3})}, FN(op::cat({op::permute(x[0], {1, 0}), x[1]}, 0))));
  cs.push_back(same("stack/dim0", {F({2, 3}), F({2, 3})}, FN(op::stack({x[0], x[1]}, 0))));
  cs.push_back(same("stack/dim1", {F({2, 3}), F({2, 3}), F({2, 3})}, FN(op::stack({x[0], x[1], x[2]}, 1))));
  cs.push_back(same("stack/dim-1", {F({2, 3}), F({2, 3})}, FN(op::stack({x[0], x[1]}, -1))));
  cs.push_back(same("stack/0d", {F({}), F({})}, FN(op::stack({x[0], x[1]}, 0))));
  cs.push_back(same("stack/slices", {F({4, 3})}, FN(op::stack({op::shrink(x[0], {{0, 2}, {0, 3}}), op::shrink(x[0], {{2, 4}, {0, 3}})}, 0))));

  // multi-output ops: weight each piece differently so every gradient is checked, and the piece
  // shapes show up in the concatenated shape
  auto pieces = [](const auto& ps, int dim) {
    using T = std::decay_t<decltype(ps[0])>;
    std::vector<T> ws;
    for (size_t i = 0; i < ps.size(); i++) ws.push_back(ps[i] * static_cast<double>(i + 1));
    return op::cat(ws, dim);
  };
  auto count = [](const auto& ps) { return static_cast<double>(ps.size()); };
  cs.push_back(pair("split/int", {F({4, 7})}, [=](const auto& x) { return pieces(x[0].split(int64_t{3}, 1), 1); },
                    [=](const auto& x) { return pieces(x[0].split(3, 1), 1); }));
  cs.push_back(pair("split/int_dim0_count", {F({5, 2})}, [=](const auto& x) { return x[0] * count(x[0].split(int64_t{2}, 0)); },
                    [=](const auto& x) { return x[0] * count(x[0].split(2, 0)); }));
  cs.push_back(pair("split/sizes", {F({6, 3})}, [=](const auto& x) { return pieces(x[0].split(std::vector<int64_t>{1, 3, 2}, 0), 0); },
                    [=](const auto& x) { return pieces(x[0].split_with_sizes({1, 3, 2}, 0), 0); }));
  cs.push_back(pair("chunk/even", {F({6, 4})}, [=](const auto& x) { return pieces(x[0].chunk(3, 0), 0); },
                    [=](const auto& x) { return pieces(x[0].chunk(3, 0), 0); }));
  cs.push_back(pair("chunk/uneven", {F({4, 7})}, [=](const auto& x) { return pieces(x[0].chunk(3, 1), 1); },
                    [=](const auto& x) { return pieces(x[0].chunk(3, 1), 1); }));
  cs.push_back(pair("chunk/fewer_than_asked_count", {F({4, 5})}, [=](const auto& x) { return x[0] * count(x[0].chunk(4, 1)); },
                    [=](const auto& x) { return x[0] * count(x[0].chunk(4, 1)); }));

  cs.push_back(same("repeat/(2,1)", {F({2, 3})}, FN(x[0].repeat({2, 1}))));
  cs.push_back(same("repeat/(2,3)", {F({2, 3})}, FN(x[0].repeat({2, 3}))));
  cs.push_back(same("repeat/new_dim", {F({2, 3})}, FN(x[0].repeat({3, 1, 2}))));
  cs.push_back(same("repeat/0d", {F({})}, FN(x[0].repeat({2, 2}))));
  cs.push_back(pair("repeat_interleave/flat", {F({2, 3})}, TG(x[0].repeat_interleave(2)), TH(x[0].repeat_interleave(2))));
  cs.push_back(pair("repeat_interleave/dim1", {F({2, 3})}, TG(x[0].repeat_interleave(3, 1)),
                    TH(x[0].repeat_interleave(3, 1))));
  cs.push_back(pair("repeat_interleave/dim0", {F({2, 3})}, TG(x[0].repeat_interleave(2, 0)),
                    TH(x[0].repeat_interleave(2, 0))));
  return cs;
}

std::vector<Case> gather_tri_cases() {
  std::vector<Case> cs;
  cs.push_back(same("gather/dim0", {F({4, 5, 6}), Ix({3, 4, 5}, 0, 2)}, FN(x[0].gather(0, x[1]))));
  cs.push_back(same("gather/dim1", {F({4, 5, 6}), Ix({3, 4, 5}, 0, 2)}, FN(x[0].gather(1, x[1]))));
  cs.push_back(same("gather/dim2", {F({4, 5, 6}), Ix({3, 4, 5}, 0, 2)}, FN(x[0].gather(2, x[1]))));
  cs.push_back(same("gather/dim-1", {F({4, 5, 6}), Ix({3, 4, 5}, 0, 5)}, FN(x[0].gather(-1, x[1]))));
  cs.push_back(same("gather/dim-3", {F({4, 5, 6}), Ix({3, 4, 5}, 0, 3)}, FN(x[0].gather(-3, x[1]))));
  cs.push_back(same("gather/1d_repeats", {V({3}, {1, 2, 3}), V({5}, {2, 1, 0, 1, 2}, Kind::Idx)}, FN(x[0].gather(0, x[1]))));
  cs.push_back(same("gather/permuted_src", {F({6, 4}), Ix({4, 3}, 0, 5)}, FN(op::permute(x[0], {1, 0}).gather(1, x[1]))));
  for (int k : {0, 1, 2, -1, -2, 4, 5, 6, -4, -5, -6}) {
    cs.push_back(same("triu/(4,5)/" + std::to_string(k), {F({4, 5})}, [k](const auto& x) { return x[0].triu(k); }));
    cs.push_back(same("tril/(4,5)/" + std::to_string(k), {F({4, 5})}, [k](const auto& x) { return x[0].tril(k); }));
  }
  cs.push_back(same("triu/batched", {F({5, 3, 3})}, FN(x[0].triu(1))));
  cs.push_back(same("tril/batched", {F({5, 3, 3})}, FN(x[0].tril())));
  cs.push_back(same("triu/zero_size", {F({5, 0, 3})}, FN(x[0].triu())));
  cs.push_back(same("tril/bool", {B({3, 3})}, FN(x[0].tril())));
  cs.push_back(same("triu/int", {I({3, 4})}, FN(x[0].triu(-1))));
  cs.push_back(pair("one_hot", {Ix({6}, 0, 3)}, TG(x[0].one_hot(4)), TH(torch::one_hot(x[0], 4))));
  cs.push_back(pair("one_hot/2d", {Ix({2, 3}, 0, 4)}, TG(x[0].one_hot(5)), TH(torch::one_hot(x[0], 5))));
  cs.push_back(pair("one_hot/0d", {Ix({}, 0, 4)}, TG(x[0].one_hot(5)), TH(torch::one_hot(x[0], 5))));
  return cs;
}

std::vector<Case> index_cases() {
  using tg::Slice;
  std::vector<Case> cs;
  using O = std::optional<int64_t>;
  // ints
  cs.push_back(pair("index/int", {F({3})}, TG(x[0][{0}]), TH(x[0].index({0}))));
  cs.push_back(pair("index/int_last", {F({3})}, TG(x[0][{2}]), TH(x[0].index({2}))));
  cs.push_back(pair("index/int_-1", {F({3})}, TG(x[0][{-1}]), TH(x[0].index({-1}))));
  cs.push_back(pair("index/int_-3", {F({3})}, TG(x[0][{-3}]), TH(x[0].index({-3}))));
  cs.push_back(pair("index/row", {F({5, 4})}, TG(x[0][{1}]), TH(x[0].index({1}))));
  cs.push_back(pair("index/3ints_0d", {F({3, 3, 3})}, TG(x[0][{1, 1, 1}]), TH(x[0].index({1, 1, 1}))));
  // slices
  cs.push_back(pair("index/slice_1_3", {F({3})}, TG(x[0][{Slice{1, 3}}]), TH(x[0].index({ti::Slice(1, 3)}))));
  cs.push_back(pair("index/slice_-2_2", {F({3})}, TG(x[0][{Slice{-2, 2}}]), TH(x[0].index({ti::Slice(-2, 2)}))));
  cs.push_back(pair("index/slice_int", {F({3, 3, 3})}, TG(x[0][{Slice{1, 2}, 2}]), TH(x[0].index({ti::Slice(1, 2), 2}))));
  cs.push_back(pair("index/slice_slice_neg", {F({3, 3, 3})}, TG(x[0][{Slice{1, 2}, Slice{1, 2}, Slice{0, -1}}]),
                    TH(x[0].index({ti::Slice(1, 2), ti::Slice(1, 2), ti::Slice(0, -1)}))));
  cs.push_back(pair("index/out_of_bounds", {F({3, 3, 3})}, TG(x[0][{Slice{-6, 4}}]), TH(x[0].index({ti::Slice(-6, 4)}))));
  cs.push_back(pair("index/out_of_bounds2", {F({3, 3, 3})}, TG(x[0][{Slice{1, 50}, Slice{1, 2}, -1}]),
                    TH(x[0].index({ti::Slice(1, 50), ti::Slice(1, 2), -1}))));
  cs.push_back(pair("index/both_out_of_bounds", {F({3, 3, 3})}, TG(x[0][{Slice{5, 10}}]), TH(x[0].index({ti::Slice(5, 10)}))));
  cs.push_back(pair("index/start_gt_end", {F({3, 3, 3})}, TG(x[0][{Slice{-2, -5}}]), TH(x[0].index({ti::Slice(-2, -5)}))));
  cs.push_back(pair("index/empty", {F({10, 10})}, TG(x[0][{Slice{1, 1}}]), TH(x[0].index({ti::Slice(1, 1)}))));
  cs.push_back(pair("index/stride", {F({7, 5, 10})}, TG(x[0][{Slice{O{}, O{}, 2}, Slice{O{}, O{}, 3}, Slice{O{}, O{}, 4}}]),
                    TH(x[0].index({ti::Slice(ti::None, ti::None, 2), ti::Slice(ti::None, ti::None, 3), ti::Slice(ti::None, ti::None, 4)}))));
  cs.push_back(pair("index/stride_start", {F({7, 5, 10})}, TG(x[0][{Slice{1, 5, 2}, 3, Slice{O{}, O{}, 4}}]),
                    TH(x[0].index({ti::Slice(1, 5, 2), 3, ti::Slice(ti::None, ti::None, 4)}))));
  cs.push_back(pair("index/double_slice", {F({4, 4})}, TG(x[0][{Slice{}, Slice{1, 2}}][{Slice{1, 2}}]),
                    TH(x[0].index({ti::Slice(), ti::Slice(1, 2)}).index({ti::Slice(1, 2)}))));
  // negative steps (python semantics; torch reference through index_select)
  cs.push_back(pair("index/neg_step_-1", {F({5, 4})}, TG(x[0][{Slice{O{}, O{}, -1}}]), TH(py_slice(x[0], 0, {}, {}, -1))));
  cs.push_back(pair("index/neg_step_-2", {F({5, 4})}, TG(x[0][{Slice{O{}, O{}, -2}}]), TH(py_slice(x[0], 0, {}, {}, -2))));
  cs.push_back(pair("index/neg_step_2_0", {F({4, 5})}, TG(x[0][{Slice{}, Slice{2, 0, -1}}]), TH(py_slice(x[0], 1, 2, 0, -1))));
  cs.push_back(pair("index/neg_step_multi", {F({6, 5, 6})}, TG(x[0][{Slice{4, 0, -3}, Slice{2, 0, -1}, Slice{-1, -5, -2}}]),
                    TH(py_slice(py_slice(py_slice(x[0], 0, 4, 0, -3), 1, 2, 0, -1), 2, -1, -5, -2))));
  cs.push_back(pair("index/neg_step_empty", {F({4, 5})}, TG(x[0][{Slice{2, 5, -1}}]), TH(py_slice(x[0], 0, 2, 5, -1))));
  // None / Ellipsis
  cs.push_back(pair("index/None", {F({3, 3})}, TG(x[0][{tg::None}]), TH(x[0].index({ti::None}))));
  cs.push_back(pair("index/None_0d", {F({})}, TG(x[0][{tg::None}]), TH(x[0].index({ti::None}))));
  cs.push_back(pair("index/slice_None_slice", {F({3, 3, 3})}, TG(x[0][{Slice{1, 2}, tg::None, Slice{1, 2}}]),
                    TH(x[0].index({ti::Slice(1, 2), ti::None, ti::Slice(1, 2)}))));
  cs.push_back(pair("index/None_mix", {F({3, 3, 3})}, TG(x[0][{tg::None, tg::None, 1, tg::None, 2, Slice{0, 2}}]),
                    TH(x[0].index({ti::None, ti::None, 1, ti::None, 2, ti::Slice(0, 2)}))));
  cs.push_back(pair("index/ellipsis_last", {F({3, 3, 3, 3})}, TG(x[0][{tg::Ellipsis, 0}]), TH(x[0].index({ti::Ellipsis, 0}))));
  cs.push_back(pair("index/ellipsis_first", {F({3, 3, 3, 3})}, TG(x[0][{0, tg::Ellipsis}]), TH(x[0].index({0, ti::Ellipsis}))));
  cs.push_back(pair("index/ellipsis_middle", {F({3, 3, 3, 3})}, TG(x[0][{0, tg::Ellipsis, 0}]),
                    TH(x[0].index({0, ti::Ellipsis, 0}))));
  cs.push_back(pair("index/ellipsis_slices", {F({3, 3, 3, 3})}, TG(x[0][{Slice{0, 3}, tg::Ellipsis, Slice{2, 3}}]),
                    TH(x[0].index({ti::Slice(0, 3), ti::Ellipsis, ti::Slice(2, 3)}))));
  cs.push_back(pair("index/ellipsis_None", {F({3, 3, 3, 3})}, TG(x[0][{tg::None, Slice{0, 3}, tg::Ellipsis, 0, tg::None}]),
                    TH(x[0].index({ti::None, ti::Slice(0, 3), ti::Ellipsis, 0, ti::None}))));
  // tensor indices (gradients scatter back, with repeats accumulating)
  cs.push_back(pair("index/tensor", {F({5, 4}), V({3}, {4, 0, 4}, Kind::Idx)}, TG(x[0][{x[1]}]), TH(x[0].index({x[1]}))));
  cs.push_back(pair("index/tensor_negative", {F({5, 4}), V({4}, {-1, 0, -5, 2}, Kind::Idx)}, TG(x[0][{x[1]}]),
                    TH(x[0].index({x[1]}))));
  cs.push_back(pair("index/tensor_2d", {F({5, 4}), Ix({2, 3}, 0, 4)}, TG(x[0][{x[1]}]), TH(x[0].index({x[1]}))));
  cs.push_back(pair("index/slice_tensor", {F({3, 5}), Ix({4}, 0, 4)}, TG(x[0][{Slice{}, x[1]}]),
                    TH(x[0].index({ti::Slice(), x[1]}))));
  cs.push_back(pair("index/two_tensors_bcast", {F({4, 5}), Ix({2, 1}, 0, 3), Ix({3}, 0, 4)}, TG(x[0][{x[1], x[2]}]),
                    TH(x[0].index({x[1], x[2]}))));
  cs.push_back(pair("index/tensor_int", {F({2, 3}), V({2, 3}, {0, 1, -1, -1, -2, 0}, Kind::Idx)}, TG(x[0][{x[1], 1}]),
                    TH(x[0].index({x[1], 1}))));
  cs.push_back(pair("index/tensor_ellipsis", {F({2, 5, 6}), Ix({3}, 0, 1), Ix({3}, 0, 5)}, TG(x[0][{x[1], tg::Ellipsis, x[2]}]),
                    TH(x[0].index({x[1], ti::Ellipsis, x[2]}))));
  cs.push_back(pair("index/tensors_no_collapse", {F({2, 5, 6, 3}), Ix({2, 1, 1}, -1, 0), Ix({1, 3, 1}, 0, 4), Ix({1, 1, 4}, -5, 4)},
                    TG(x[0][{x[1], x[2], x[3]}]), TH(x[0].index({x[1], x[2], x[3]}))));
  cs.push_back(pair("index/tensor_None", {F({2, 5, 6}), Ix({3}, 0, 4), Ix({3}, 0, 5)}, TG(x[0][{tg::None, 1, x[1], x[2]}]),
                    TH(x[0].index({ti::None, 1, x[1], x[2]}))));
  return cs;
}

}  // namespace

TEST(Conformance, Views) { EXPECT_EQ(run_cases("views", view_cases()), 0); }
TEST(Conformance, CatStackSplitRepeat) { EXPECT_EQ(run_cases("combine", combine_cases()), 0); }
TEST(Conformance, GatherTriOneHot) { EXPECT_EQ(run_cases("gather_tri", gather_tri_cases()), 0); }
TEST(Conformance, Indexing) { EXPECT_EQ(run_cases("index", index_cases()), 0); }
