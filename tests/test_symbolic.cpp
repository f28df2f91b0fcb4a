// Symbolic simplification: each rule with exact renders, the seed-003 examples, the public Expr API.
#include <gtest/gtest.h>

#include "access.hpp"
#include "tg/helpers.hpp"
#include "tg/symbolic.hpp"
#include "uop/affine.hpp"
#include "uop/symbolic.hpp"

using namespace tg;

namespace {
UOp var(const char* name, int64_t lo, int64_t hi) { return Access::uop(Variable(name, lo, hi)); }
UOp ci(int64_t v) { return UOp::const_(dtypes::int32, v); }
std::string simp(const UOp& u) { return simplify(u).render(); }
int64_t lo(const UOp& u) { return const_to_int(u.vmin()); }
int64_t hi(const UOp& u) { return const_to_int(u.vmax()); }
}  // namespace

TEST(Symbolic, SeedExamples) {
  Variable a("a", 0, 10), b("b", 0, 10);
  EXPECT_EQ((a * 10).vmin(), 0);
  EXPECT_EQ((a * 10).vmax(), 100);
  EXPECT_EQ((a + b).vmax(), 20);
  Expr m = (a + b * 10) % 10;
  EXPECT_EQ(m.render(), "(a%10)");
  Expr d = (a * 40 + b) / 20;
  EXPECT_EQ(d.render(), "(a*2)");
  EXPECT_EQ(d.vmin(), 0);
  EXPECT_EQ(d.vmax(), 20);
}

TEST(Symbolic, ConstantFolding) {
  EXPECT_EQ(simp(ci(3) + ci(4)), "7");
  EXPECT_EQ(simp((ci(7) * ci(3)) % ci(4)), "1");
  EXPECT_EQ(simp(ci(7).lt(ci(3))), "False");
  EXPECT_EQ(simp(ci(9).max(ci(3))), "9");
  EXPECT_EQ(simp(ci(5).alu(BinaryOps::IDIV, ci(0))), "(5//0)");   // undefined: left alone
  EXPECT_EQ(simp(UOp::const_(dtypes::float32, 1.5) + UOp::const_(dtypes::float32, 2.0)), "3.5");
}

TEST(Symbolic, SelfFolding) {
  UOp x = var("x", 0, 100);
  EXPECT_EQ(simp(x + 0), "x");
  EXPECT_EQ(simp(0 + x), "x");
  EXPECT_EQ(simp(x * 1), "x");
  EXPECT_EQ(simp(1 * x), "x");
  EXPECT_EQ(simp(x * 0), "0");
  EXPECT_EQ(simp(x / 1), "x");
  EXPECT_EQ(simp(x.alu(BinaryOps::IDIV, x)), "1");
  EXPECT_EQ(simp(x / -1), "(x*-1)");
  EXPECT_EQ(simp(x * -1), "(x*-1)");
  EXPECT_EQ(simp(-(-x)), "x");
  EXPECT_EQ(simp(x - x), "0");
  EXPECT_EQ(simp(x % 1), "0");
  EXPECT_EQ(simp(x.lt(x)), "False");
}

TEST(Symbolic, DivMod) {
  UOp x = var("x", 0, 100), y = var("y", 0, 3);
  EXPECT_EQ(simp((x * 4) / 4), "x");
  EXPECT_EQ(simp((x * 8) / 4), "(x*2)");
  EXPECT_EQ(simp((x / 3) / 4), "(x//12)");
  EXPECT_EQ(simp((4 * x) % 4), "0");
  EXPECT_EQ(simp((x * 4 + y) % 4), "y");                // y in [0,4): the mod goes away
  EXPECT_EQ(simp((x * 4 + y) / 4), "x");
  EXPECT_EQ(simp((x * 6 + y) % 4), "(((x*2)+y)%4)");
  EXPECT_EQ(simp(y % 4), "y");
  EXPECT_EQ(simp(y / 4), "0");
  EXPECT_EQ(simp((y + 8) % 4), "y");                    // remove mod by range: [8,11] -> x-8
  EXPECT_EQ(simp((x % 12) % 4), "(x%4)");
  EXPECT_EQ(simp((x % 4) + (x / 4) * 4), "x");
  EXPECT_EQ(simp((x * 6 + y) / 4), "(((x*6)+y)//4)");   // nothing to fold: no common factor
  EXPECT_EQ(simp((x * 2 + 1) / 4), "(x//2)");            // mul add div: 1 < gcd(2,4)
  EXPECT_EQ(simp((x * 4 + 6) / 4), "(1+x)");            // 6 = 4 + 2, 2 < 4
  // negative operands are left alone: C division truncates toward zero
  UOp n = var("n", -10, 10);
  EXPECT_EQ(simp((n * 4 + 1) / 4), "(((n*4)+1)//4)");
}

TEST(Symbolic, CombineTerms) {
  UOp x = var("x", 0, 100), y = var("y", 0, 100);
  EXPECT_EQ(simp(x * 3 + x * 5), "(x*8)");
  EXPECT_EQ(simp(x + x * 5), "(x*6)");
  EXPECT_EQ(simp((x + 3) + 4), "(7+x)");
  EXPECT_EQ(simp((x * 3) * 4), "(x*12)");
  EXPECT_EQ(simp((x + 3) * 4), "((x*4)+12)");
  EXPECT_EQ(simp(3 + x), "(3+x)");
  EXPECT_EQ(simp((x + 3) + y), "(3+x+y)");
  EXPECT_EQ(simp(-(x + y)), "((x*-1)+(y*-1))");
  EXPECT_EQ(simp(-(x * 3)), "(x*-3)");
}

TEST(Symbolic, Lt) {
  UOp x = var("x", 0, 100), y = var("y", 0, 3);
  EXPECT_EQ(simp((3 + x).lt(ci(10))), "(x<7)");
  EXPECT_EQ(simp((x * 4).lt(ci(10))), "(x<3)");
  EXPECT_EQ(simp((x * 4 + y).lt(ci(8))), "(x<2)");
  EXPECT_EQ(simp(x.lt(ci(101))), "True");     // range analysis
  EXPECT_EQ(simp(x.lt(ci(0))), "False");
}

TEST(Symbolic, MaxWhere) {
  UOp x = var("x", 0, 10), y = var("y", 20, 30), z = var("z", 5, 25);
  EXPECT_EQ(simp(x.max(y)), "y");
  EXPECT_EQ(simp(y.max(x)), "y");
  EXPECT_EQ(simp(x.max(z)), "max(x, z)");
  EXPECT_EQ(simp(x.max(ci(-3))), "x");
  UOp c = x.lt(z);
  EXPECT_EQ(simp(c.where(y, y)), "y");
  EXPECT_EQ(simp(UOp::const_(dtypes::bool_, true).where(x, y)), "x");
  EXPECT_EQ(simp(UOp::const_(dtypes::bool_, false).where(x, y)), "y");
}

TEST(Symbolic, BoolFolding) {
  UOp x = var("x", 0, 10), z = var("z", 5, 25);
  UOp b = x.lt(z), t = UOp::const_(dtypes::bool_, true), f = UOp::const_(dtypes::bool_, false);
  EXPECT_EQ(simp(b & t), "(x<z)");
  EXPECT_EQ(simp(b & f), "False");
  EXPECT_EQ(simp(b | t), "True");
  EXPECT_EQ(simp(b | f), "(x<z)");
  EXPECT_EQ(simp(b & b), "(x<z)");
  EXPECT_EQ(simp(b | b), "(x<z)");
  EXPECT_EQ(simp(b.ne(t)), "(not (x<z))");
  EXPECT_EQ(simp(b.ne(f)), "(x<z)");
  EXPECT_EQ(simp(t & f), "False");
  EXPECT_EQ(simp(-(-b)), "(x<z)");
}

TEST(Symbolic, SharedNodesRewriteOnce) {
  UOp x = var("x", 0, 100);
  UOp e = (x + 0) * 3 + (x + 0) * 5;
  EXPECT_EQ(simp(e), "(x*8)");
  EXPECT_EQ(simplify(simplify(e)), simplify(e));   // fixed point
}

// ---------------------------------------------------------------- public API
TEST(Expr, Api) {
  Variable a("a", 0, 10);
  EXPECT_EQ((a * 2 + 1).render(), "((a*2)+1)");
  EXPECT_EQ((a / 20).render(), "0");
  Variable big("big", 0, 1000);
  EXPECT_EQ((big / 20).render(), "(big//20)");
  EXPECT_EQ((big / 20).vmax(), 50);
  EXPECT_EQ((a - 3).render(), "(-3+a)");
  EXPECT_EQ((a - 3).vmin(), -3);
  EXPECT_EQ((5 + a).render(), "(5+a)");
  EXPECT_EQ((Expr(6) * 7).const_value(), 42);
  EXPECT_TRUE((Expr(6) * 7).is_const());
  EXPECT_FALSE(a.is_const());
  EXPECT_EQ(a.lt(11).render(), "True");
  EXPECT_EQ(a.lt(5).render(), "(a<5)");
  EXPECT_EQ(a.max(3).render(), "max(a, 3)");
  EXPECT_EQ(a.min(20).render(), "a");
  EXPECT_EQ(((a * 3 + 4) % 5).eval({{"a", 7}}), 0);
  EXPECT_TRUE(((a + 1) * 2).same(a * 2 + 2));
  EXPECT_EQ(Access::expr(Access::uop(a)).render(), "a");
  EXPECT_EQ((a.lt(5) + 1).render(), "((a<5)+1)" );
}

TEST(Expr, Variable) {
  Variable i("i", 1, 10);
  EXPECT_EQ(i.name(), "i");
  EXPECT_EQ(i.min(), 1);
  EXPECT_EQ(i.max(), 10);
  EXPECT_FALSE(i.val().has_value());
  Variable b = i.bind(3);
  EXPECT_EQ(*b.val(), 3);
  auto [u, v] = b.unbind();
  EXPECT_EQ(v, 3);
  EXPECT_FALSE(u.val().has_value());
  EXPECT_EQ(bound_uop(b)->op, Ops::BIND);
  // a bound variable keeps its range in expressions: no folding by the bound value
  EXPECT_EQ((b / 4).render(), "(i//4)");
}

TEST(Expr, Errors) {
  EXPECT_THROW(Variable("a", 5, 1), Error);
  EXPECT_THROW(Variable("", 0, 1), Error);
  Variable a("a", 0, 10);
  EXPECT_THROW(a.bind(11), Error);
  EXPECT_THROW(a.unbind(), Error);
  EXPECT_THROW(a / 0, Error);
  EXPECT_THROW(a % 0, Error);
  EXPECT_THROW(a / (a - a), Error);   // simplifies to a zero constant
  EXPECT_THROW(a.const_value(), Error);
  EXPECT_THROW((a + 1).eval({}), Error);
  try {
    (void)(a / 0);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(a//0)"), std::string::npos) << e.what();
  }
}

// uop/affine: the one affine view of index math the folder, the vectorizer and reduce_fold share. Its
// parts are x's own nodes, so a pass that sums them again gets x back (kernels don't change).
TEST(Affine, TermsConstAndLinearParts) {
  UOp a = var("a", 0, 10), b = var("b", 0, 10), c = var("c", 0, 10);
  UOp x = (a * ci(4) + ci(3) * b) + (c + ci(7));
  Affine f = affine(x);
  EXPECT_EQ(f.c, 7);
  ASSERT_EQ(f.terms.size(), 3u);
  EXPECT_EQ(f.terms[0].term, a);
  EXPECT_EQ(f.terms[0].coeff, 4);
  EXPECT_EQ(f.terms[1].term, b);
  EXPECT_EQ(f.terms[1].coeff, 3);
  EXPECT_EQ(f.terms[2].term, c);
  EXPECT_EQ(f.terms[2].coeff, 1);
  std::vector<UOp> parts;
  add_terms(x, parts);
  EXPECT_EQ(parts.size(), 4u);
  EXPECT_EQ(sum_terms(parts), UOp(((a * ci(4) + ci(3) * b) + c) + ci(7)));
  auto [base, off] = split_const(c + ci(7));
  EXPECT_EQ(base, c);
  EXPECT_EQ(off, 7);
  EXPECT_FALSE(split_const(ci(5)).first);
  EXPECT_EQ(split_const(ci(5)).second, 5);
  // linear in two variables at once, the rest a base free of them
  auto l = linear_in(a * ci(2) - b * ci(3) + c, {a, b});
  ASSERT_TRUE(l);
  EXPECT_EQ(l->coeffs, (std::vector<int64_t>{2, -3}));
  EXPECT_FALSE(depends_on(l->base, a));
  EXPECT_FALSE(depends_on(l->base, b));
  EXPECT_TRUE(depends_on(l->base, c));
  EXPECT_FALSE(linear_in(a * b, {a}).has_value());
  EXPECT_FALSE(linear_in((a + c) / ci(2), {a}).has_value());
}
