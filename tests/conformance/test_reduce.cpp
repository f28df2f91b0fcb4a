// Reductions against torch: sum/prod/max/min/any/all/mean over all axes, single and multiple
// axes, negative axes, keepdim, 0-d, size-1 and zero-size dims; var/std with corrections;
// softmax/log_softmax/logsumexp; argmax/argmin with ties; cumsum.
#include <gtest/gtest.h>

#include "harness.hpp"

using namespace conf;

namespace {

// one reduce over the usual axis patterns of a (3,4,5) input, plus 0-d and a permuted input
template <class Fn>
void axes_cases(std::vector<Case>& cs, const std::string& name, Fn fn, double lo = -2, double hi = 2) {
  auto add = [&](const std::string& tag, In in, Ax ax, bool keepdim) {
    cs.push_back(same(name + "/" + tag, {in}, [fn, ax, keepdim](const auto& x) { return fn(x[0], ax, keepdim); }));
  };
  add("all", F({3, 4, 5}, lo, hi), {}, false);
  add("all_keepdim", F({3, 4, 5}, lo, hi), {}, true);
  add("axis1", F({3, 4, 5}, lo, hi), axes({1}), false);
  add("axis-1_keepdim", F({3, 4, 5}, lo, hi), axes({-1}), true);
  add("axes02", F({3, 4, 5}, lo, hi), axes({0, 2}), false);
  add("axes12_keepdim", F({3, 4, 5}, lo, hi), axes({1, 2}), true);
  add("0d", F({}, lo, hi), {}, false);
  add("size1", F({6, 1}, lo, hi), axes({1}), false);
  cs.push_back(same(name + "/permuted", {F({5, 3, 4}, lo, hi)},
                    [fn](const auto& x) { return fn(op::permute(x[0], {1, 2, 0}), axes({2}), false); }));
  cs.push_back(same(name + "/padded", {F({3, 4}, lo, hi)}, [fn, lo, hi](const auto& x) {
    return fn(op::pad(x[0], {{1, 1}, {0, 2}}, (lo + hi) / 2), axes({1}), false);
  }));
}

std::vector<Case> reduce_cases() {
  std::vector<Case> cs;
  axes_cases(cs, "sum", [](const auto& x, Ax a, bool k) { return op::sum(x, a, k); });
  axes_cases(cs, "mean", [](const auto& x, Ax a, bool k) { return op::mean(x, a, k); });
  axes_cases(cs, "max", [](const auto& x, Ax a, bool k) { return op::max(x, a, k); });
  axes_cases(cs, "min", [](const auto& x, Ax a, bool k) { return op::min(x, a, k); });
  axes_cases(cs, "prod", [](const auto& x, Ax a, bool k) { return op::prod(x, a, k); }, 0.5, 1.5);

  cs.push_back(same("sum/large_1d", {F({2048})}, FN(op::sum(x[0]))).tol(1e-4));
  cs.push_back(same("sum/relu_chain", {F({3, 4, 5})}, FN(op::sum(x[0].relu()).relu())));
  cs.push_back(same("sum/zero_size_axis0", {F({4, 0})}, FN(op::sum(x[0], axes({0})))));
  cs.push_back(same("sum/zero_size_axis1", {F({4, 0})}, FN(op::sum(x[0], axes({1})))));
  cs.push_back(same("sum/zero_size_all", {F({4, 0})}, FN(op::sum(x[0]))));
  cs.push_back(same("sum/int", {I({3, 4})}, FN(op::sum(x[0], axes({1})))));
  cs.push_back(same("sum/bool", {B({3, 4})}, FN(op::sum(x[0]))));
  cs.push_back(same("mean/zero_size_axes", {F({1, 0, 3, 0, 5})}, FN(op::mean(x[0], axes({1, 3})))));
  cs.push_back(pair("mean/int", {I({3, 4})}, TG(x[0].mean()), TH(x[0].to(torch::kFloat32).mean())));
  cs.push_back(same("max/ties", {V({1, 4}, {1, 1, 0, 1})}, FN(op::max(x[0]) * 0.5)));
  cs.push_back(same("max/ties_axis", {V({2, 3}, {2, 2, 1, -1, 0, 0})}, FN(op::max(x[0], axes({1})))));
  cs.push_back(same("min/ties", {V({4}, {0, 3, 0, 1})}, FN(op::min(x[0]))));
  cs.push_back(same("max/int", {I({3, 4})}, FN(op::max(x[0], axes({0})))));
  cs.push_back(same("max/bool", {B({3, 4})}, FN(op::max(x[0], axes({0})))));
  cs.push_back(same("min/-inf", {V({3}, {-INFINITY, 1, 2})}, FN(op::min(x[0]))).fwd());

  for (auto [name, k] : {std::pair{"any", 0}, std::pair{"all", 1}}) {
    auto fn = [k](const auto& x, Ax a, bool kd) { return k ? op::all(x, a, kd) : op::any(x, a, kd); };
    std::string n = name;
    cs.push_back(same(n + "/float", {F({3, 4, 5})}, [fn](const auto& x) { return fn(x[0], Ax{}, false); }));
    cs.push_back(same(n + "/bool", {B({3, 4})}, [fn](const auto& x) { return fn(x[0], Ax{}, false); }));
    cs.push_back(same(n + "/bool_axis", {B({3, 4, 2})}, [fn](const auto& x) { return fn(x[0], axes({1, 2}), false); }));
    cs.push_back(same(n + "/bool_keepdim", {B({3, 4})}, [fn](const auto& x) { return fn(x[0], axes({0}), true); }));
    cs.push_back(same(n + "/true_true", {V({2}, {1, 1}, Kind::Bool)}, [fn](const auto& x) { return fn(x[0], Ax{}, false); }));
    cs.push_back(same(n + "/true_false", {V({2}, {1, 0}, Kind::Bool)}, [fn](const auto& x) { return fn(x[0], Ax{}, false); }));
    cs.push_back(same(n + "/false_false", {V({2}, {0, 0}, Kind::Bool)}, [fn](const auto& x) { return fn(x[0], Ax{}, false); }));
    cs.push_back(same(n + "/0d", {F({})}, [fn](const auto& x) { return fn(x[0], Ax{}, false); }));
    cs.push_back(same(n + "/zero_axes", {F({1, 0, 3, 0, 5})}, [fn](const auto& x) { return fn(x[0], axes({1, 3}), false); }));
  }
  return cs;
}

std::vector<Case> var_std_cases() {
  std::vector<Case> cs;
  for (int s = 0; s < 2; s++) {
    std::string n = s ? "std" : "var";
    auto fn = [s](const auto& x, Ax a, bool k, int64_t c) { return s ? op::std(x, a, k, c) : op::var(x, a, k, c); };
    auto add = [&](const std::string& tag, In in, Ax a, bool k, int64_t c, bool fwd_only = false) {
      Case cs_ = same(n + "/" + tag, {in}, [fn, a, k, c](const auto& x) { return fn(x[0], a, k, c); });
      if (fwd_only) cs_.fwd();
      cs.push_back(cs_);
    };
    add("all", F({5, 6, 7}), {}, false, 1);
    add("all_c0", F({5, 6, 7}), {}, false, 0);
    add("all_c5", F({5, 6, 7}), {}, false, 5);
    add("axis0", F({5, 6, 7}), axes({0}), false, 1);
    add("axis2_c0", F({5, 6, 7}), axes({2}), false, 0);
    add("axes12", F({5, 6, 7}), axes({1, 2}), false, 1);
    add("keepdim", F({5, 6, 7}), {}, true, 1);
    add("axis0_keepdim_c0", F({5, 6, 7}), axes({0}), true, 0);
    add("zero_in_axis", F({1, 0, 3, 0, 5}), axes({1, 3}), false, 1);
    add("zero_in_axis_c0", F({1, 0, 3, 0, 5}), axes({1, 3}), false, 0);
    add("one_in_axis", F({1, 2, 3, 1, 5}), axes({0, 3}), false, 1, true);   // N - correction = 0: inf/nan
    add("one_in_axis_c0", F({1, 2, 3, 1, 5}), axes({0, 3}), false, 0);
    add("one_in_axis_c5", F({1, 2, 3, 1, 5}), axes({0, 4}), false, 5, true);
    add("axes04", F({1, 2, 3, 1, 5}), axes({0, 4}), false, 1);
  }
  return cs;
}

std::vector<Case> softmax_cases() {
  std::vector<Case> cs;
  auto sm = [&](const std::string& n, In in, int axis) {
    cs.push_back(same("softmax/" + n, {in}, [axis](const auto& x) { return x[0].softmax(axis); }).tol(1e-7).gtol(1e-7));
    cs.push_back(same("log_softmax/" + n, {in}, [axis](const auto& x) { return x[0].log_softmax(axis); }).tol(1e-6).gtol(1e-7));
  };
  sm("(4,5)", F({4, 5}), -1);
  sm("(4,5)_axis0", F({4, 5}), 0);
  sm("(3,4,5)_axis1", F({3, 4, 5}), 1);
  sm("1d", F({7}), 0);
  sm("0d", F({}), 0);
  sm("large_values", F({3, 6}, 80, 90), -1);
  sm("permuted", F({5, 4}), 0);
  // CPU vector shapes (16-lane exp and reduces): rows of odd length, a batch, 1-length axes, wide rows
  sm("(33,257)", F({33, 257}, -20, 20), -1);
  sm("(2,3,160)_batch", F({2, 3, 160}, -5, 5), -1);
  sm("(64,1)", F({64, 1}), -1);
  sm("(1,1,2048)", F({1, 1, 2048}, -30, 30), -1);
  sm("(96,48)_axis0", F({96, 48}, -5, 5), 0);
  cs.push_back(same("softmax/transposed_(48,96)", {F({48, 96}, -5, 5)}, FN(op::permute(x[0], {1, 0}).softmax(-1))).tol(1e-7).gtol(1e-7));
  cs.push_back(same("softmax/transposed_input", {F({5, 4})}, FN(op::permute(x[0], {1, 0}).softmax(-1))).tol(1e-7).gtol(1e-7));
  cs.push_back(same("softmax/zero_size", {F({0, 3})}, FN(x[0].softmax(-1))));

  auto lse = [&](const std::string& n, In in, int axis, bool k) {
    cs.push_back(same("logsumexp/" + n, {in}, [axis, k](const auto& x) { return op::logsumexp(x[0], axis, k); }).tol(1e-6).gtol(1e-7));
  };
  lse("axis0", F({4, 5}), 0, false);
  lse("axis0_keepdim", F({4, 5}), 0, true);
  lse("axis1", F({4, 5}), 1, false);
  lse("1d", F({7}), 0, false);
  lse("0d", F({}), 0, false);
  lse("large_values", F({3, 6}, 80, 90), -1, false);
  lse("very_negative", F({3, 6}, -90, -80), -1, false);
  return cs;
}

std::vector<Case> arg_cases() {
  std::vector<Case> cs;
  for (int m = 0; m < 2; m++) {
    std::string n = m ? "argmin" : "argmax";
    auto fn = [m](const auto& x, std::optional<int> a, bool k) { return m ? op::argmin(x, a, k) : op::argmax(x, a, k); };
    auto add = [&](const std::string& tag, In in, std::optional<int> a, bool k) {
      cs.push_back(same(n + "/" + tag, {in}, [fn, a, k](const auto& x) { return fn(x[0], a, k); }));
    };
    add("all", F({10, 20}), {}, false);
    add("axis0", F({10, 20}), 0, false);
    add("axis1", F({10, 20}), 1, false);
    add("axis1_keepdim", F({10, 20}), 1, true);
    add("axis-1", F({3, 4, 5}), -1, false);
    add("ties_first", V({2, 4}, {1, 3, 3, 0, -2, -2, 5, -2}), 1, false);
    add("ties_all", V({6}, {2, 7, 7, -1, -1, 7}), {}, false);
    add("0d", F({}), {}, false);
    add("int", I({4, 5}), 1, false);
    add("bool", B({4, 5}), 0, false);
    cs.push_back(same(n + "/of_softmax", {F({6, 8})}, [fn](const auto& x) { return fn(x[0].softmax(0), {}, false); }));
  }
  return cs;
}

std::vector<Case> cumsum_cases() {
  std::vector<Case> cs;
  auto add = [&](const std::string& tag, In in, int axis) {
    cs.push_back(same("cumsum/" + tag, {in}, [axis](const auto& x) { return x[0].cumsum(axis); }).tol(1e-5));
  };
  add("0d", F({}), 0);
  add("(10,)", F({10}), 0);
  add("(300,)", F({300}), 0);
  add("(5,6)_axis0", F({5, 6}), 0);
  add("(5,6)_axis1", F({5, 6}), 1);
  add("(2,3,4)_axis-1", F({2, 3, 4}), -1);
  add("zero_axis", F({2, 0, 4}), 1);
  add("zero_other_axis", F({0, 3}), 1);
  add("int", I({3, 4}), 1);
  cs.push_back(same("cumsum/permuted", {F({4, 3})}, FN(op::permute(x[0], {1, 0}).cumsum(1))).tol(1e-5));
  return cs;
}

}  // namespace

TEST(Conformance, Reduce) { EXPECT_EQ(run_cases("reduce", reduce_cases()), 0); }
TEST(Conformance, VarStd) { EXPECT_EQ(run_cases("var_std", var_std_cases()), 0); }
TEST(Conformance, Softmax) { EXPECT_EQ(run_cases("softmax", softmax_cases()), 0); }
TEST(Conformance, ArgMaxMin) { EXPECT_EQ(run_cases("arg", arg_cases()), 0); }
TEST(Conformance, Cumsum) { EXPECT_EQ(run_cases("cumsum", cumsum_cases()), 0); }
