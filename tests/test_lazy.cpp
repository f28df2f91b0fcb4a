// LazyBuffer: const folding, base/view relationships, copies, contiguous_child, errors, lifetime.
#include <gtest/gtest.h>

#include "engine/schedule.hpp"
#include "lazy/lazy.hpp"
#include "runtime/buffer.hpp"
#include "tg/helpers.hpp"

using namespace tg;

namespace {

LazyBufferPtr input(const Shape& shape, DType dt = dtypes::float32, const std::string& device = "CPU") {
  return LazyBuffer::from_buffer(std::make_shared<Buffer>(device, prod(shape), dt), shape);
}

ConstType const_of(const LazyBufferPtr& x) {
  EXPECT_TRUE(x->is_unrealized_const()) << x->str();
  return std::get<ConstType>(x->base()->arg);
}

}  // namespace

TEST(LazyConstFold, AddZeroAndMulOneReturnX) {
  auto x = input({4});
  EXPECT_EQ(x->e(BinaryOps::ADD, x->const_(0.0)), x);
  EXPECT_EQ(x->const_(0.0)->e(BinaryOps::ADD, x), x);
  EXPECT_EQ(x->e(BinaryOps::MUL, x->const_(1.0)), x);
  EXPECT_EQ(x->const_(1.0)->e(BinaryOps::MUL, x), x);
  // a nonzero const is a real add
  auto y = x->e(BinaryOps::ADD, x->const_(2.0));
  EXPECT_NE(y, x);
  EXPECT_TRUE(y->op_is(BinaryOps::ADD));
}

TEST(LazyConstFold, MulZeroIsConstAndMulMinusOneIsNeg) {
  auto x = input({2, 3});
  auto z = x->e(BinaryOps::MUL, x->const_(0.0));
  EXPECT_EQ(const_to_double(const_of(z)), 0.0);
  EXPECT_EQ(z->shape(), (Shape{2, 3}));
  auto n = x->e(BinaryOps::MUL, x->const_(-1.0));
  EXPECT_TRUE(n->op_is(UnaryOps::NEG));
  EXPECT_EQ(n->srcs[0], x);
}

TEST(LazyConstFold, NegNegIsX) {
  auto x = input({4});
  auto n = x->e(UnaryOps::NEG);
  EXPECT_NE(n, x);
  EXPECT_EQ(n->e(UnaryOps::NEG), x);
}

TEST(LazyConstFold, AllConstAlu) {
  auto x = input({3}, dtypes::float32);
  auto five = x->const_(2.0)->e(BinaryOps::ADD, x->const_(3.0));
  EXPECT_EQ(const_to_double(const_of(five)), 5.0);
  EXPECT_EQ(five->shape(), (Shape{3}));
  auto lt = x->const_(2.0)->e(BinaryOps::CMPLT, x->const_(3.0));
  EXPECT_EQ(lt->dtype, dtypes::bool_);
  EXPECT_EQ(std::get<bool>(const_of(lt)), true);
  auto sq = x->const_(16.0)->e(UnaryOps::SQRT);
  EXPECT_EQ(const_to_double(const_of(sq)), 4.0);
  // integer math wraps to the dtype
  auto i = input({2}, dtypes::int8);
  auto wrapped = i->const_(int64_t{127})->e(BinaryOps::ADD, i->const_(int64_t{1}));
  EXPECT_EQ(const_to_int(const_of(wrapped)), -128);
  auto w = i->const_(true)->cast(dtypes::bool_);
  EXPECT_EQ(w->dtype, dtypes::bool_);
  auto sel = w->e(TernaryOps::WHERE, i->const_(int64_t{7}), i->const_(int64_t{9}));
  EXPECT_EQ(const_to_int(const_of(sel)), 7);
}

TEST(LazyConstFold, Reduce) {
  auto x = input({4, 5});
  auto s = x->const_(2.0)->r(ReduceOps::SUM, {1});
  EXPECT_EQ(const_to_double(const_of(s)), 10.0);
  EXPECT_EQ(s->shape(), (Shape{4, 1}));
  auto m = x->const_(3.0)->r(ReduceOps::MAX, {0, 1});
  EXPECT_EQ(const_to_double(const_of(m)), 3.0);
  // reducing size-1 axes is a no-op
  auto k = input({4, 1});
  EXPECT_EQ(k->r(ReduceOps::SUM, {1}), k);
  auto r = x->r(ReduceOps::SUM, {1});
  EXPECT_TRUE(r->op_is(ReduceOps::SUM));
  EXPECT_EQ(std::get<std::vector<int64_t>>(r->arg), (std::vector<int64_t>{1}));
}

TEST(LazyView, BaseAndViews) {
  auto x = input({4});
  EXPECT_TRUE(x->is_base());
  EXPECT_TRUE(x->realized());
  auto v = x->reshape({2, 2});
  EXPECT_FALSE(v->is_base());
  EXPECT_EQ(v->base(), x);
  EXPECT_TRUE(v->is_realized());
  EXPECT_FALSE(v->realized());
  EXPECT_EQ(v->size(), 4);
  // a contiguous view of the whole base is the base
  EXPECT_EQ(v->reshape({4}), x);
  auto p = v->permute({1, 0});
  EXPECT_EQ(p->base(), x);
  EXPECT_EQ(p->permute({1, 0})->reshape({4}), x);
  // views of views stay views of the base
  auto e = x->reshape({4, 1})->expand({4, 3});
  EXPECT_EQ(e->base(), x);
  EXPECT_EQ(e->shape(), (Shape{4, 3}));
}

TEST(LazyView, EmptyAndFullyMaskedViewsAreConsts) {
  auto x = input({4});
  auto empty = x->shrink({{1, 1}});
  EXPECT_TRUE(empty->is_unrealized_const());
  EXPECT_EQ(empty->shape(), (Shape{0}));
  auto masked = x->pad({{2, 2}})->shrink({{0, 2}});
  EXPECT_TRUE(masked->is_unrealized_const());
  EXPECT_EQ(const_to_double(std::get<ConstType>(masked->base()->arg)), 0.0);
  // a partly masked view is a view
  EXPECT_FALSE(x->pad({{2, 2}})->is_unrealized_const());
  auto zero = LazyBuffer::metaop(MetaOps::EMPTY, {3, 0}, dtypes::float32, "CPU");
  EXPECT_TRUE(zero->op_is(MetaOps::CONST));
}

TEST(LazyCopy, Rules) {
  auto x = input({4});
  EXPECT_EQ(x->copy_to_device("CPU"), x);
  auto y = x->copy_to_device("CUDA");
  EXPECT_TRUE(y->op_is(MetaOps::COPY));
  EXPECT_EQ(y->device, "CUDA");
  EXPECT_EQ(std::get<int64_t>(y->arg), 16);
  // a copy of a pending copy copies the original once
  EXPECT_EQ(y->copy_to_device("CPU"), x);
  auto z = y->copy_to_device("CUDA:1");
  EXPECT_TRUE(z->op_is(MetaOps::COPY));
  EXPECT_EQ(z->srcs[0], x);
  // consts are made on the new device
  auto c = x->const_(3.0)->copy_to_device("CUDA");
  EXPECT_TRUE(c->is_unrealized_const());
  EXPECT_EQ(c->device, "CUDA");
  EXPECT_EQ(c->shape(), (Shape{4}));
  // a shrink is made contiguous before the copy, so only its elements move
  auto s = x->shrink({{1, 3}})->copy_to_device("CUDA");
  EXPECT_TRUE(s->op_is(MetaOps::COPY));
  EXPECT_EQ(std::get<int64_t>(s->arg), 8);
  auto src = s->srcs[0];
  EXPECT_TRUE(src->op_is(MetaOps::VIEW) || src->op_is(MetaOps::CONTIGUOUS)) << src->str();
  // a full view copies the base and views the copy
  auto r = x->reshape({2, 2})->copy_to_device("CUDA");
  EXPECT_FALSE(r->is_base());
  EXPECT_TRUE(r->base()->op_is(MetaOps::COPY));
  EXPECT_EQ(r->base()->srcs[0], x);
}

TEST(LazyContiguous, ContiguousChild) {
  auto x = input({2, 3});
  auto c = x->permute({1, 0})->contiguous();
  EXPECT_TRUE(c->op_is(MetaOps::CONTIGUOUS));
  EXPECT_EQ(x->contiguous_child.lock(), c);
  // later uses of x read the contiguous copy through the inverted permute
  auto y = x->e(BinaryOps::ADD, x);
  EXPECT_EQ(y->srcs[0]->base(), c);
  EXPECT_EQ(y->srcs[0]->shape(), (Shape{2, 3}));
  // contiguous of an already contiguous unrealized base forces its realize
  auto z = y->contiguous();
  EXPECT_EQ(z, y);
  EXPECT_TRUE(y->forced_realize);
  // a consecutive shrink becomes a buffer view when allowed
  auto v = input({8})->shrink({{2, 6}})->contiguous();
  EXPECT_TRUE(v->op_is(MetaOps::VIEW));
  auto nv = input({8})->shrink({{2, 6}})->contiguous(false);
  EXPECT_TRUE(nv->op_is(MetaOps::CONTIGUOUS));
}

TEST(LazyCast, Rules) {
  auto x = input({4});
  EXPECT_EQ(x->cast(dtypes::float32), x);
  auto c = x->const_(2.5)->cast(dtypes::int32);
  EXPECT_EQ(const_to_int(const_of(c)), 2);
  EXPECT_EQ(c->dtype, dtypes::int32);
  // narrowing casts happen before the view (on the smaller base)
  auto h = x->reshape({2, 2})->cast(dtypes::float16);
  EXPECT_FALSE(h->is_base());
  EXPECT_TRUE(h->base()->op_is(UnaryOps::CAST));
  EXPECT_EQ(h->base()->shape(), (Shape{4}));
  // widening casts cast the view
  auto d = x->reshape({2, 2})->cast(dtypes::float64);
  EXPECT_TRUE(d->op_is(UnaryOps::CAST));
  EXPECT_EQ(d->shape(), (Shape{2, 2}));
  auto b = x->cast(dtypes::int32, true);
  EXPECT_TRUE(b->op_is(MetaOps::VIEW));
  EXPECT_TRUE(x->cast(dtypes::int32, true, false)->op_is(UnaryOps::BITCAST));
  EXPECT_THROW(x->cast(dtypes::float16, true), Error);
}

TEST(LazyErrors, UserMistakesThrow) {
  auto x = input({4});
  auto t = x->e(BinaryOps::ADD, x);
  EXPECT_THROW(t->assign(x), Error);            // the target is not realized
  EXPECT_THROW(x->assign(input({5})), Error);   // different size
  EXPECT_THROW(x->e(BinaryOps::ADD, input({2, 2})), Error);
  EXPECT_THROW(x->e(BinaryOps::ADD, input({4}, dtypes::int32)), Error);
  EXPECT_THROW(x->e(TernaryOps::WHERE, x, x), Error);   // condition must be bool
  EXPECT_THROW(input({4}, dtypes::bool_)->e(UnaryOps::NEG), Error);
  EXPECT_THROW(x->r(ReduceOps::SUM, {1}), Error);
  EXPECT_THROW(x->reshape({3}), Error);
  try {
    x->e(BinaryOps::ADD, input({2, 2}));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(4,)"), std::string::npos) << e.what();
  }
}

TEST(LazyMisc, StrAndAssign) {
  auto x = input({3}, dtypes::int32);
  EXPECT_EQ(x->str().rfind("<LB CPU (3,) int (MetaOps.EMPTY, <buf", 0), 0u) << x->str();
  auto a = x->assign(x->e(BinaryOps::ADD, x));
  EXPECT_TRUE(a->op_is(MetaOps::ASSIGN));
  EXPECT_EQ(a->srcs[1], x);
  EXPECT_FALSE(a->realized());
  EXPECT_THROW(LazyBuffer::from_buffer(std::make_shared<Buffer>("CPU", 4, dtypes::float32), {5}), Error);
}

TEST(LazyLifetime, ScheduledGraphIsFreed) {
  auto x = input({16});
  std::weak_ptr<LazyBuffer> mid;
  LazyBufferPtr out;
  {
    auto m = x->e(BinaryOps::ADD, x);
    mid = m;
    out = m->e(BinaryOps::MUL, x);
  }
  EXPECT_FALSE(mid.expired());
  auto sched = create_schedule({out});
  EXPECT_EQ(sched.size(), 1u);
  EXPECT_TRUE(out->realized());
  EXPECT_TRUE(out->srcs.empty());
  EXPECT_TRUE(mid.expired());
  EXPECT_EQ(out->buffer.get(), sched[0].bufs[0].get());
}

TEST(LazyLifetime, DeepChainFreesWithoutRecursion) {
  auto x = input({4});
  std::weak_ptr<LazyBuffer> first;
  {
    LazyBufferPtr c = x->e(BinaryOps::ADD, x);
    first = c;
    for (int i = 0; i < 200000; i++) c = c->e(BinaryOps::MUL, x);
  }
  EXPECT_TRUE(first.expired());
}
