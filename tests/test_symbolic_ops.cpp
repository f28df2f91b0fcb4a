// Symbolic shapes end to end: the facts of tinygrad 0.9.2's test_symbolic_ops.py and
// test_symbolic_shapetracker.py, written for tinygrad.cpp. Each op on a tensor with a dim bound
// to a Variable must equal the same op on the concrete tensor, and a new value compiles nothing.
#include <gtest/gtest.h>

#include <cmath>

#include "access.hpp"
#include "lazy/lazy.hpp"
#include "engine/realize.hpp"
#include "tg/tg.hpp"

using namespace tg;

namespace {

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol = 1e-5f) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}
std::vector<float> vals(const Tensor& t) { return t.contiguous().realize().tolist<float>(); }
// a realized i x j random tensor and its view with both dims bound Variables ("i" and "j", at most 10)
std::pair<Tensor, Tensor> rand_over_two_vars(int64_t i, int64_t j) {
  Tensor a = Tensor::rand({i, j}).realize();
  return {a, a.reshape({Variable("i", 1, 10).bind(i), Variable("j", 1, 10).bind(j)})};
}

}  // namespace

TEST(SymbolicOps, Plus1) {
  for (int64_t i = 1; i < 5; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor a = Tensor::rand({3, i});
    Tensor s = (a.reshape({3, vi}) + 1).realize();
    EXPECT_TRUE(s.is_symbolic());
    EXPECT_TRUE(s.sym_shape()[1].same(vi));
    expect_close(vals(s), vals(a + 1));
  }
}

TEST(SymbolicOps, Add) {
  for (int64_t i = 1; i < 5; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor a = Tensor::rand({3, i}), b = Tensor::rand({3, i});
    expect_close(vals(a.reshape({3, vi}) + b.reshape({3, vi})), vals(a + b));
  }
}

TEST(SymbolicOps, OneKernelForEveryValue) {
  // warm up once, then every new value of i runs the same compiled kernel
  Variable v("i", 1, 10);
  auto run = [&](int64_t i) {
    Tensor a = Tensor::rand({3, i}).realize();
    return vals((a.reshape({3, v.bind(i)}) * 2 + 1));
  };
  run(1);
  size_t before = method_cache_size();
  for (int64_t i = 2; i < 8; i++) {
    auto r = run(i);
    EXPECT_EQ(r.size(), static_cast<size_t>(3 * i));
  }
  // rand itself compiles one kernel per concrete size; the symbolic add compiles nothing new
  Tensor a = Tensor::rand({3, 9}).realize();
  size_t mid = method_cache_size();
  vals(a.reshape({3, v.bind(9)}) * 2 + 1);
  EXPECT_EQ(method_cache_size(), mid);
  EXPECT_GE(mid, before);
}

TEST(SymbolicOps, Matmul) {
  for (int64_t i = 1; i < 5; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor a = Tensor::rand({3, i}), b = Tensor::rand({i, 5});
    Tensor s = a.reshape({3, vi}).matmul(b.reshape({vi, 5}));
    EXPECT_FALSE(s.is_symbolic());
    expect_close(vals(s), vals(a.matmul(b)));
  }
}

TEST(SymbolicOps, Attention) {
  auto f = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return q.transpose(1, 2).scaled_dot_product_attention(k.transpose(1, 2), v.transpose(1, 2));
  };
  for (int64_t i = 1; i < 5; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor q = Tensor::rand({2, 1, 4, 8}), k = Tensor::rand({2, i, 4, 8}), v = Tensor::rand({2, i, 4, 8});
    Tensor s = f(q, k.reshape({2, vi, 4, 8}), v.reshape({2, vi, 4, 8}));
    expect_close(vals(s), vals(f(q, k, v)));
  }
}

TEST(SymbolicOps, CatDim0) {
  for (int64_t i = 1; i < 5; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor a = Tensor::rand({i, 3}), b = Tensor::rand({2, 3});
    Tensor s = Tensor::cat({a.reshape({vi, 3}), b}, 0);
    EXPECT_FALSE(s.sym_shape()[0].is_const());
    EXPECT_EQ(s.sym_shape()[0].value(), i + 2);
    expect_close(vals(s), vals(Tensor::cat({a, b}, 0)));
  }
}

TEST(SymbolicOps, CatDim1) {
  for (int64_t i = 1; i < 5; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor a = Tensor::rand({3, i}), b = Tensor::rand({3, 2});
    expect_close(vals(Tensor::cat({a.reshape({3, vi}), b}, 1)), vals(Tensor::cat({a, b}, 1)));
  }
}

TEST(SymbolicOps, CatTwoVars) {
  for (int64_t i = 1; i < 4; i++)
    for (int64_t j = 1; j < 4; j++) {
      Variable vi = Variable("i", 1, 10).bind(i), vj = Variable("j", 1, 10).bind(j);
      Tensor a = Tensor::rand({i, 3}), b = Tensor::rand({j, 3});
      expect_close(vals(Tensor::cat({a.reshape({vi, 3}), b.reshape({vj, 3})}, 0)), vals(Tensor::cat({a, b}, 0)));
      Tensor c = Tensor::rand({3, i}), d = Tensor::rand({3, j});
      expect_close(vals(Tensor::cat({c.reshape({3, vi}), d.reshape({3, vj})}, 1)), vals(Tensor::cat({c, d}, 1)));
    }
}

TEST(SymbolicOps, TwoVarsPlus1) {
  for (int64_t i = 1; i < 4; i++)
    for (int64_t j = 1; j < 4; j++) {
      Variable vi = Variable("i", 1, 10).bind(i), vj = Variable("j", 1, 10).bind(j);
      Tensor a = Tensor::rand({i, 3}), b = Tensor::rand({3, j});
      expect_close(vals(a.reshape({vi, 3}).matmul(b.reshape({3, vj})) + 1), vals(a.matmul(b) + 1));
      Tensor c = Tensor::rand({j, 3}), d = Tensor::rand({3, i});
      expect_close(vals(c.reshape({vj, 3}).matmul(d.reshape({3, vi})) + 1), vals(c.matmul(d) + 1));
    }
}

TEST(SymbolicOps, Shrink) {
  Tensor a = Tensor::rand({7, 11}).realize();
  for (int64_t i = 1; i < 5; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor s = a.shrink({{sint(3), sint(5)}, {vi, vi + 2}});
    expect_close(vals(s), vals(a.shrink({{3, 5}, {i, i + 2}})));
  }
}

TEST(SymbolicOps, OnesSum) {
  for (int64_t i = 1; i < 5; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor t = Tensor::ones({i});
    EXPECT_EQ(t.reshape({vi}).sum().item<float>(), static_cast<float>(i));
  }
}

TEST(SymbolicOps, SumMaxSoftmaxOverSymbolicAxis) {
  for (int64_t i = 1; i < 6; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor a = Tensor::rand({3, i}).realize();
    Tensor s = a.reshape({3, vi});
    expect_close(vals(s.sum(1)), vals(a.sum(1)));
    expect_close(vals(s.max(1)), vals(a.max(1)));
    expect_close(vals(s.softmax(-1)), vals(a.softmax(-1)));
  }
}

TEST(SymbolicOps, Mean) {
  for (int64_t i = 1; i < 5; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor a = Tensor::rand({i, 3}).realize();
    expect_close(vals(a.reshape({vi, 3}).mean()), vals(a.mean()));
    expect_close(vals(a.reshape({vi, 3}).mean(0)), vals(a.mean(0)));
    expect_close(vals(a.reshape({vi, 3}).mean(1)), vals(a.mean(1)));
  }
}

TEST(SymbolicOps, Arange) {
  for (int64_t i = 1; i < 6; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor t = Tensor::arange(vi);
    EXPECT_TRUE(t.sym_shape()[0].same(vi));
    auto got = t.contiguous().realize().tolist<int32_t>();
    ASSERT_EQ(got.size(), static_cast<size_t>(i));
    for (int64_t k = 0; k < i; k++) EXPECT_EQ(got[k], k);
  }
}

TEST(SymbolicOps, Errors) {
  Variable v("i", 1, 10);
  Tensor a = Tensor::rand({3, 4});
  EXPECT_THROW(a.reshape({3, sint(v)}), Error);                       // unbound
  EXPECT_THROW(a.reshape({3, v.bind(5)}), Error);                     // wrong number of elements
  EXPECT_THROW(v.bind(11), Error);                                    // outside [min, max]
  Tensor s = a.reshape({3, v.bind(4)});
  Tensor b = Tensor::rand({3, 5}).reshape({3, Variable("j", 1, 10).bind(5)});
  EXPECT_THROW(s + b, Error);                                          // i vs j don't broadcast
}

// ---- test_symbolic_shapetracker.py facts

TEST(SymbolicShapeTracker, ShapesAndStrides) {
  Variable a("a", 1, 10), b("b", 1, 10);
  ShapeTracker st = ShapeTracker::from_sym_shape({sint(a), sint(b)});
  EXPECT_TRUE(st.symbolic());
  EXPECT_TRUE(st.contiguous());
  EXPECT_TRUE(st.views[0].sym->strides[0].same(b));
  EXPECT_EQ(st.views[0].sym->strides[1].const_value(), 1);
  ShapeTracker p = st.permute({1, 0});
  EXPECT_TRUE(p.sym_shape()[0].same(b));
  EXPECT_FALSE(p.contiguous());
  ShapeTracker e = ShapeTracker::from_sym_shape({sint(a), sint(1)}).expand_sym({sint(a), sint(b)});
  EXPECT_EQ(e.views[0].sym->strides[1].const_value(), 0);
  EXPECT_TRUE(e.sym_shape()[1].same(b));
  // shrink with a variable keeps one view with a symbolic offset
  ShapeTracker s = ShapeTracker::from_shape({10, 10}).shrink_sym({{sint(a), a + 1}, {sint(0), sint(10)}});
  EXPECT_EQ(s.views.size(), 1u);
  EXPECT_EQ(s.views[0].sym->offset.eval({{"a", 3}}), 30);
  auto [idx, valid] = ShapeTracker::from_sym_shape({sint(a), sint(3)}).expr_idxs();
  EXPECT_EQ(idx.render(), "((idx0*3)+idx1)");
}

TEST(SymbolicShapeTracker, UnbindAndBind) {
  Variable v("i", 1, 10);
  ShapeTracker st = ShapeTracker::from_sym_shape({sint(3), sint(v.bind(4))});
  EXPECT_EQ(st.shape(), (Shape{3, 4}));
  VarBindings vals;
  ShapeTracker u = st.unbind(&vals);
  EXPECT_EQ(vals.at("i"), 4);
  EXPECT_EQ(u.shape(), (Shape{3, 10}));   // unbound: a variable stands at its max
  EXPECT_EQ(u.bind({{"i", 7}}).shape(), (Shape{3, 7}));
  EXPECT_EQ(u.max_size(), 30);
  EXPECT_EQ(u, ShapeTracker::from_sym_shape({sint(3), sint(v.bind(9))}).unbind());
}

// shape() has no int value for a symbolic dim: it throws, naming the op that asked and sym_shape()
TEST(SymbolicOps, ShapeOfSymbolicTensorThrows) {
  Variable v("i", 1, 10);
  Tensor s = Tensor::rand({3, 4}).reshape({3, v.bind(4)});
  try {
    (void)s.shape();
    FAIL() << "shape() of a symbolic tensor must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sym_shape()"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(3, i)"), std::string::npos) << e.what();
  }
  try {   // an op that needs concrete dims names itself
    (void)s.cumsum(1);
    FAIL() << "cumsum over a symbolic dim must throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cumsum:", 0), 0u) << e.what();
  }
  // a symbolic offset with concrete dims (a KV-cache slot) has a shape
  Tensor slot = Tensor::rand({4, 5}).shrink({{sint(0), sint(4)}, {sint(v.bind(2)), v.bind(2) + 1}});
  EXPECT_TRUE(slot.is_symbolic());
  EXPECT_EQ(slot.shape(), (Shape{4, 1}));
  EXPECT_EQ(s.ndim(), 2);
  EXPECT_EQ(s.numel(), 12);
}

// a value outside the Variable's range, or a dim bound to 0
TEST(SymbolicOps, BoundValueErrors) {
  Variable v("i", 1, 10);
  try {
    (void)v.bind(0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 10]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(v.bind(11), Error);
  // a Variable whose range holds 0: a dim bound to 0 gives an empty tensor, and the kernels run no iterations
  Variable z("n", 0, 8);
  for (int64_t n : {0, 3, 0}) {
    Tensor a = Tensor::ones({2, n});
    Tensor s = a.reshape({2, z.bind(n)});
    EXPECT_EQ(s.sym_shape()[1].value(), n);
    EXPECT_EQ(vals(s.sum(1)), (std::vector<float>{static_cast<float>(n), static_cast<float>(n)}));
    EXPECT_EQ(vals(s + 1).size(), static_cast<size_t>(2 * n));
  }
}

// ---- more of test_symbolic_ops.py / test_symbolic_shapetracker.py (0.9.2)

TEST(SymbolicOps, VarAndMean2D) {
  for (int64_t i = 1; i < 4; i++)
    for (int64_t j = 2; j < 4; j++) {
      auto [a, s] = rand_over_two_vars(i, j);
      expect_close(vals(s.mean()), vals(a.mean()));
      expect_close(vals(s.mean(0)), vals(a.mean(0)));
      expect_close(vals(s.mean(1)), vals(a.mean(1)));
    }
  // var over one symbolic dim (0.9.2's test_var); two symbolic dims: VarOverTwoSymbolicDims
  for (int64_t i = 2; i < 5; i++) {
    Variable vi = Variable("i", 1, 10).bind(i);
    Tensor a = Tensor::rand({i, 3}).realize();
    Tensor s = a.reshape({vi, 3});
    expect_close(vals(s.var()), vals(a.var()), 1e-4f);
    expect_close(vals(s.var(0)), vals(a.var(0)), 1e-4f);
    expect_close(vals(s.var(1)), vals(a.var(1)), 1e-4f);
  }
}

// Before: var(0)/var(1) of a tensor with two symbolic dims hit the scheduler's internal assertion
// "can't merge reduce": the reduce's key view kept the value of the other (reduced-away) Variable,
// so it didn't equal the view that looked it up.
TEST(SymbolicOps, VarOverTwoSymbolicDims) {
  for (int64_t i = 2; i < 5; i++)
    for (int64_t j = 2; j < 4; j++) {
      auto [a, s] = rand_over_two_vars(i, j);
      expect_close(vals(s.var()), vals(a.var()), 1e-4f);
      expect_close(vals(s.var(0)), vals(a.var(0)), 1e-4f);
      expect_close(vals(s.var(1)), vals(a.var(1)), 1e-4f);
      expect_close(vals(s.std(1)), vals(a.std(1)), 1e-4f);
      expect_close(vals((s - s.mean(0)).sum(0)), vals((a - a.mean(0)).sum(0)), 1e-4f);
    }
}

// a view whose symbolic dim was shrunk away keeps no value for its Variable: it equals (and hashes
// like) the same view made without it
TEST(SymbolicShapeTracker, DroppedVariableLeavesNoValue) {
  Variable vi = Variable("i", 1, 10).bind(3), vj = Variable("j", 1, 10).bind(2);
  ShapeTracker both = ShapeTracker::from_sym_shape({sint(vi), sint(vj)});
  ShapeTracker only_j = ShapeTracker::from_sym_shape({sint(1), sint(vj)});
  ShapeTracker shrunk = both.shrink_sym({{sint(0), sint(1)}, {sint(0), sint(vj)}});
  ASSERT_EQ(shrunk.var_vals(), (VarBindings{{"j", 2}}));
  EXPECT_EQ(shrunk.views.back().shape, only_j.views.back().shape);
  EXPECT_EQ(shrunk.reshape_sym({sint(vj)}), only_j.reshape_sym({sint(vj)}));
  EXPECT_EQ(shrunk.reshape_sym({sint(vj)}).views.back().hash(), only_j.reshape_sym({sint(vj)}).views.back().hash());
}

// gpt2's Attention at start_pos 0: a Variable whose range holds 0, with 0, 1 and 2 new tokens
TEST(SymbolicOps, AttentionAtPosZero) {
  Variable sp("start_pos", 0, 16);
  for (int64_t seqlen : {1, 2}) {
    const int64_t H = 2, D = 4, MAX = 16;
    Tensor cache = Tensor::zeros({2, 1, MAX, H, D}).contiguous().realize();
    Tensor xk = Tensor::rand({1, seqlen, H, D}).realize(), xv = Tensor::rand({1, seqlen, H, D}).realize();
    sint p = sp.bind(0);
    cache.shrink({{sint(0), sint(2)}, {sint(0), sint(1)}, {p, p + seqlen}, {sint(0), sint(H)}, {sint(0), sint(D)}})
        .assign(Tensor::stack({xk, xv}))
        .realize();
    Tensor keys = cache[{0}].shrink({{sint(0), sint(1)}, {sint(0), p + seqlen}, {sint(0), sint(H)}, {sint(0), sint(D)}});
    Tensor values = cache[{1}].shrink({{sint(0), sint(1)}, {sint(0), p + seqlen}, {sint(0), sint(H)}, {sint(0), sint(D)}});
    Tensor q = Tensor::rand({1, seqlen, H, D}).realize();
    Tensor got = q.transpose(1, 2).scaled_dot_product_attention(keys.transpose(1, 2), values.transpose(1, 2));
    Tensor want = q.transpose(1, 2).scaled_dot_product_attention(xk.transpose(1, 2), xv.transpose(1, 2));
    expect_close(vals(got), vals(want), 1e-5f);
  }
}

TEST(SymbolicShapeTracker, RealStridesAndCatStrides) {
  Variable x("x", 1, 100);
  EXPECT_EQ(ShapeTracker::from_sym_shape({sint(x), sint(3)}).real_strides(), (std::vector<std::optional<int64_t>>{3, 1}));
  Variable i = Variable("i", 1, 5).bind(3), j = Variable("j", 1, 5).bind(3), k = Variable("k", 1, 5).bind(3);
  Tensor t = Tensor::cat({Tensor::cat({Tensor::rand({3, 4}).reshape({i, 4}), Tensor::rand({3, 4}).reshape({j, 4})}, 0),
                          Tensor::rand({3, 4}).reshape({k, 4})}, 0);
  EXPECT_EQ(t.sym_shape()[0].value(), 9);
  EXPECT_EQ(t.sym_shape()[0].render(), (sint(i) + j + k).unbind().render());
  EXPECT_EQ(t.sym_shape()[1].const_value(), 4);
}

TEST(SymbolicShapeTracker, VarVals) {
  EXPECT_TRUE(ShapeTracker::from_shape({3, 4, 5}).var_vals().empty());
  Variable x = Variable("x", 1, 100).bind(3);
  EXPECT_EQ(ShapeTracker::from_sym_shape({sint(x), sint(3)}).var_vals(), (VarBindings{{"x", 3}}));
  // offset: a shrink by x
  ShapeTracker o = ShapeTracker::from_shape({4, 3}).shrink_sym({{sint(x), x + 1}, {sint(0), sint(3)}});
  EXPECT_EQ(o.views.back().sym->offset.eval({{"x", 3}}), 9);
  EXPECT_EQ(o.var_vals(), (VarBindings{{"x", 3}}));
  // complex: shape, offset from two variables
  Variable y = Variable("y", 1, 100).bind(4), z = Variable("z", 1, 100).bind(3);
  ShapeTracker c = ShapeTracker::from_sym_shape({sint(x), sint(5), sint(y)}).shrink_sym({{sint(0), sint(x)}, {sint(z), z + 1}, {sint(0), sint(3)}});
  EXPECT_EQ(c.views.back().sym->offset.eval({{"y", 4}, {"z", 3}}), 12);   // y*z
  EXPECT_EQ(c.var_vals(), (VarBindings{{"x", 3}, {"y", 4}, {"z", 3}}));
  // a shrink by x then a reshape to ints keeps x's value
  ShapeTracker sr = ShapeTracker::from_shape({10, 10, 10}).shrink_sym({{sint(x), x + 3}, {sint(3), sint(7)}, {sint(2), sint(5)}}).reshape({36});
  EXPECT_EQ(sr.var_vals(), (VarBindings{{"x", 3}}));
}

TEST(SymbolicShapeTracker, ReshapeIntoSymbols) {
  for (int64_t i = 1; i < 6; i++) {
    Variable vi = Variable("i", 1, 5).bind(i);
    Tensor t = Tensor::rand({i, 4}).reshape({vi, 4});
    EXPECT_TRUE(t.sym_shape()[0].same(vi));
    EXPECT_EQ(Tensor::rand({i, 6}).reshape({vi, 2, 3}).sym_shape().size(), 3u);
    EXPECT_EQ(t.reshape({i, 4}).shape(), (Shape{i, 4}));   // back to ints
    for (int64_t j = 1; j < 4; j++) {
      Variable vj = Variable("j", 1, 5).bind(j);
      Tensor u = Tensor::rand({i, j}).reshape({vi, vj}).reshape({vj, vi});
      EXPECT_TRUE(u.sym_shape()[0].same(vj));
      EXPECT_TRUE(u.sym_shape()[1].same(vi));
    }
  }
  Variable v4 = Variable("i", 1, 10).bind(4);
  EXPECT_THROW(Tensor::rand({3, 4}).reshape({sint(3), v4 + 1}), Error);   // 3*5 elements != 12
}

TEST(SymbolicShapeTracker, ReshapeFromConstAndPadded) {
  Variable vi = Variable("i", 1, 5).bind(4);
  Tensor t = Tensor::ones({3, 4}).reshape({3, vi});
  EXPECT_TRUE(t.sym_shape()[1].same(vi));
  ShapeTracker st = Access::lazydata(t)->st;
  EXPECT_FALSE(st.contiguous());
  EXPECT_EQ(st.views.size(), 1u);
  // 0.9.2 refuses (4, 3) -> (3, i) of a const; here the view is exact, so it gives the 12 ones
  EXPECT_EQ(vals(Tensor::ones({4, 3}).reshape({3, vi})), std::vector<float>(12, 1.0f));
  // a padded, shrunk view: reshaping its first dim to a Variable changes only the shape
  Tensor p = Tensor::ones({3, 4}).contiguous().expand({2, 3, 4}).pad({{1, 1}, {0, 0}, {0, 0}}).shrink({{0, 4}, {0, 3}, {1, 3}});
  View v = Access::lazydata(p)->st.views.back();
  ASSERT_EQ(Access::lazydata(p)->st.views.size(), 1u);
  Tensor q = p.reshape({vi, 3, 2});
  ASSERT_EQ(Access::lazydata(q)->st.views.size(), 1u);
  SymView s = Access::lazydata(q)->st.views[0].as_sym();
  EXPECT_TRUE(s.shape[0].same(vi));
  std::vector<int64_t> strides;
  for (auto& x : s.strides) strides.push_back(x.const_value());
  EXPECT_EQ(strides, v.strides);
  EXPECT_EQ(s.offset.const_value(), v.offset);
  ASSERT_TRUE(s.mask.has_value());
  EXPECT_EQ((*s.mask)[0].first.const_value(), 1);
  EXPECT_EQ((*s.mask)[0].second.const_value(), 3);
}

TEST(SymbolicShapeTracker, ExpandAndShrinkIntoSymbols) {
  Variable vi = Variable("i", 1, 5).bind(3), vj = Variable("j", 1, 5).bind(3);
  Tensor a = Tensor::from<float>({1, 2, 3}, {3, 1}).expand({sint(3), sint(vi)});
  EXPECT_TRUE(a.sym_shape()[1].same(vi));
  Tensor b = a.reshape({sint(3), sint(vi), sint(1)}).expand({sint(3), sint(vi), sint(vj)});
  EXPECT_TRUE(b.sym_shape()[2].same(vj));
  EXPECT_EQ(vals(b), (std::vector<float>{1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3}));
  for (int64_t i = 1; i < 6; i++) {
    Variable w = Variable("i", 1, 5).bind(i);
    EXPECT_TRUE((Tensor::rand({3, i}).reshape({sint(3), sint(w)}) + 1).sym_shape()[1].same(w));
  }
  // a shrink by a Variable to a constant width has a concrete shape
  Variable u = Variable("i", 1, 4).bind(2);
  EXPECT_EQ(Tensor::rand({3, 5}).shrink({{sint(0), sint(2)}, {sint(u), u + 1}}).shape(), (Shape{2, 1}));
}
