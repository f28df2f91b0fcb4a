// Fuzz: random movement-op chains on small shapes against a brute-force reference that
// materializes, for every output element, the buffer index it reads (or -1 when padded).
// Checked: to_indexed_uops (index and validity of every element, evaluated with eval_uop),
// simplify, view merging through ShapeTracker +, invert, and the soundness of real_strides,
// axis_is_masked and real_size. Deterministic seed.
#include <gtest/gtest.h>

#include <random>

#include "shape/shapetracker_arg.hpp"
#include "tg/helpers.hpp"
#include "tg/shapetracker.hpp"
#include "uop/uop.hpp"

using namespace tg;

namespace {

// The reference: an index map over a row-major shape; each op rebuilds the map element by element.
struct RefMap {
  Shape shape;
  std::vector<int64_t> map;   // flat output index -> buffer index, -1 when invalid

  static RefMap identity(const Shape& s) {
    RefMap r{s, std::vector<int64_t>(prod(s))};
    for (size_t i = 0; i < r.map.size(); i++) r.map[i] = static_cast<int64_t>(i);
    return r;
  }
  std::vector<int64_t> unflatten(int64_t flat) const {
    std::vector<int64_t> idx(shape.size());
    for (size_t d = shape.size(); d-- > 0;) { idx[d] = flat % shape[d]; flat /= shape[d]; }
    return idx;
  }
  int64_t at(const std::vector<int64_t>& idx) const {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); d++) flat = flat * shape[d] + idx[d];
    return map[flat];
  }
  // new map over new_shape where element idx reads old element src(idx) (nullopt = padding)
  template <class F> RefMap remap(const Shape& new_shape, F src) const {
    RefMap r{new_shape, std::vector<int64_t>(prod(new_shape))};
    for (int64_t i = 0; i < static_cast<int64_t>(r.map.size()); i++) {
      auto s = src(r.unflatten(i));
      r.map[i] = s ? at(*s) : -1;
    }
    return r;
  }
  RefMap reshape(const Shape& s) const { return RefMap{s, map}; }
  RefMap permute(const std::vector<int>& axis) const {
    Shape ns;
    for (int a : axis) ns.push_back(shape[a]);
    return remap(ns, [&](const std::vector<int64_t>& idx) {
      std::vector<int64_t> o(shape.size());
      for (size_t i = 0; i < axis.size(); i++) o[axis[i]] = idx[i];
      return std::optional(o);
    });
  }
  RefMap expand(const Shape& ns) const {
    return remap(ns, [&](std::vector<int64_t> idx) {
      for (size_t i = 0; i < idx.size(); i++) if (shape[i] == 1) idx[i] = 0;
      return std::optional(idx);
    });
  }
  RefMap pad(const Mask& arg) const {
    Shape ns;
    for (size_t i = 0; i < shape.size(); i++) ns.push_back(shape[i] + arg[i].first + arg[i].second);
    return remap(ns, [&](std::vector<int64_t> idx) -> std::optional<std::vector<int64_t>> {
      for (size_t i = 0; i < idx.size(); i++) {
        idx[i] -= arg[i].first;
        if (idx[i] < 0 || idx[i] >= shape[i]) return std::nullopt;
      }
      return idx;
    });
  }
  RefMap shrink(const Mask& arg) const {
    Shape ns;
    for (auto& [b, e] : arg) ns.push_back(e - b);
    return remap(ns, [&](std::vector<int64_t> idx) {
      for (size_t i = 0; i < idx.size(); i++) idx[i] += arg[i].first;
      return std::optional(idx);
    });
  }
  RefMap stride(const std::vector<int64_t>& mul) const {
    Shape ns;
    for (size_t i = 0; i < shape.size(); i++) ns.push_back((shape[i] + std::abs(mul[i]) - 1) / std::abs(mul[i]));
    return remap(ns, [&](std::vector<int64_t> idx) {
      for (size_t i = 0; i < idx.size(); i++) idx[i] = mul[i] > 0 ? idx[i] * mul[i] : shape[i] - 1 + idx[i] * mul[i];
      return std::optional(idx);
    });
  }
};

struct Chain {
  ShapeTracker st;
  RefMap ref;
  std::string log;   // the ops applied, for failure messages
};

Shape random_reshape(std::mt19937& rng, int64_t n) {
  Shape out;
  auto coin = [&](int pct) { return static_cast<int>(rng() % 100) < pct; };
  while (n > 1) {
    if (coin(15)) out.push_back(1);
    std::vector<int64_t> fs;
    for (int64_t d = 2; d <= n; d++) if (n % d == 0) fs.push_back(d);
    int64_t d = fs[rng() % fs.size()];
    out.push_back(d);
    n /= d;
  }
  if (out.empty() || coin(25)) out.insert(out.begin() + rng() % (out.size() + 1), 1);
  return out;
}

void step(std::mt19937& rng, Chain& c) {
  const Shape sh = c.st.shape();
  auto rnd = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  switch (rng() % 7) {
    case 0: {
      Shape s = random_reshape(rng, prod(sh));
      c.st = c.st.reshape(s), c.ref = c.ref.reshape(s), c.log += " reshape" + to_str(s);
      break;
    }
    case 1: {
      std::vector<int> axis(sh.size());
      for (size_t i = 0; i < axis.size(); i++) axis[i] = static_cast<int>(i);
      std::shuffle(axis.begin(), axis.end(), rng);
      c.st = c.st.permute(axis), c.ref = c.ref.permute(axis), c.log += " permute" + to_str(axis);
      break;
    }
    case 2: {
      Shape s = sh;
      for (auto& x : s) if (x == 1) x = rnd(1, 4);
      c.st = c.st.expand(s), c.ref = c.ref.expand(s), c.log += " expand" + to_str(s);
      break;
    }
    case 3: {
      Mask m;
      for (size_t i = 0; i < sh.size(); i++) m.emplace_back(rnd(0, 2), rnd(0, 2));
      c.st = c.st.pad(m), c.ref = c.ref.pad(m), c.log += " pad" + std::to_string(m.size());
      break;
    }
    case 4: {
      Mask m;
      for (int64_t s : sh) { int64_t b = rnd(0, s - 1); m.emplace_back(b, rnd(b + 1, s)); }
      c.st = c.st.shrink(m), c.ref = c.ref.shrink(m), c.log += " shrink";
      break;
    }
    default: {   // flips and strides
      static const int64_t muls[] = {1, 1, -1, -1, 2, -2, 3};
      std::vector<int64_t> mul;
      for (size_t i = 0; i < sh.size(); i++) mul.push_back(muls[rng() % 7]);
      c.st = c.st.stride(mul), c.ref = c.ref.stride(mul), c.log += " stride" + to_str(mul);
      break;
    }
  }
}

Chain random_chain(std::mt19937& rng, const Shape& base, int max_ops) {
  Chain c{ShapeTracker::from_shape(base), RefMap::identity(base), "from_shape" + to_str(base)};
  int n = 1 + static_cast<int>(rng() % max_ops);
  for (int i = 0; i < n; i++) {
    step(rng, c);
    if (prod(c.st.shape()) > 400) break;   // keep the brute force small
  }
  return c;
}

// The index map the tracker produces, by evaluating its index/valid UOps for every element.
std::vector<int64_t> uop_map(const ShapeTracker& st) {
  auto [idx, valid] = to_indexed_uops(st);
  RefMap shape_only{st.shape(), {}};
  std::vector<int64_t> out(prod(st.shape()));
  std::unordered_map<std::string, int64_t> vars;
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); i++) {
    auto x = shape_only.unflatten(i);
    for (size_t d = 0; d < x.size(); d++) vars["idx" + std::to_string(d)] = x[d];
    bool ok = const_to_int(eval_uop(valid, vars)) != 0;
    out[i] = ok ? const_to_int(eval_uop(idx, vars)) : -1;
  }
  return out;
}

void check_real_strides(const Chain& c, bool ignore_valid) {
  auto rs = c.st.real_strides(ignore_valid);
  const RefMap& r = c.ref;
  ASSERT_EQ(rs.size(), r.shape.size());
  for (size_t ax = 0; ax < rs.size(); ax++) {
    if (!rs[ax]) continue;
    if (!ignore_valid) EXPECT_FALSE(c.st.axis_is_masked(static_cast<int>(ax))) << c.log;
    for (int64_t i = 0; i < static_cast<int64_t>(r.map.size()); i++) {
      auto x = r.unflatten(i);
      if (x[ax] + 1 >= r.shape[ax]) continue;
      int64_t a = r.at(x);
      x[ax]++;
      int64_t b = r.at(x);
      if (!ignore_valid) ASSERT_EQ(a >= 0, b >= 0) << "axis " << ax << " stride " << *rs[ax] << " but validity changes: " << c.log;
      if (a >= 0 && b >= 0) ASSERT_EQ(b - a, *rs[ax]) << "axis " << ax << ": " << c.log << "\n" << c.st.str();
    }
  }
}

void check_masked_axes(const Chain& c) {
  const RefMap& r = c.ref;
  for (size_t ax = 0; ax < r.shape.size(); ax++) {
    if (c.st.axis_is_masked(static_cast<int>(ax))) continue;
    for (int64_t i = 0; i < static_cast<int64_t>(r.map.size()); i++) {
      auto x = r.unflatten(i);
      if (x[ax] + 1 >= r.shape[ax]) continue;
      bool a = r.at(x) >= 0;
      x[ax]++;
      ASSERT_EQ(a, r.at(x) >= 0) << "axis " << ax << " claimed unmasked: " << c.log << "\n" << c.st.str();
    }
  }
}

void check_chain(std::mt19937& rng, const Chain& c, const Shape& base) {
  SCOPED_TRACE(c.log + "\n" + c.st.str());
  ASSERT_EQ(c.st.shape(), c.ref.shape);
  ASSERT_EQ(uop_map(c.st), c.ref.map);
  ShapeTracker simple = c.st.simplify();
  ASSERT_LE(simple.views.size(), c.st.views.size());
  if (!(simple == c.st)) ASSERT_EQ(uop_map(simple), c.ref.map) << simple.str();

  check_real_strides(c, false);
  check_real_strides(c, true);
  check_masked_axes(c);
  int64_t max_valid = -1;
  for (int64_t v : c.ref.map) max_valid = std::max(max_valid, v);
  EXPECT_GE(c.st.real_size(), max_valid + 1);

  // a single view whose valid elements read every buffer element exactly once must invert
  std::vector<int> reads(prod(base), 0);
  int64_t n_valid = 0;
  for (int64_t v : c.ref.map) if (v >= 0) n_valid++, reads[v]++;
  bool bijective = n_valid == prod(base) && std::all_of(reads.begin(), reads.end(), [](int r) { return r == 1; });
  if (bijective && c.st.views.size() == 1) EXPECT_TRUE(c.st.invert(base).has_value());
  if (auto inv = c.st.invert(base)) {   // inverse maps every buffer element back to an output element reading it
    ASSERT_EQ(inv->shape(), base);
    auto back = uop_map(*inv);
    for (int64_t b = 0; b < static_cast<int64_t>(back.size()); b++) {
      ASSERT_GE(back[b], 0);
      ASSERT_EQ(c.ref.map[back[b]], b) << inv->str();
    }
  }

  // compose with a second chain that starts from this one's shape
  Chain d = random_chain(rng, c.st.shape(), 4);
  ShapeTracker composed = c.st + d.st;
  std::vector<int64_t> expect(d.ref.map.size());
  for (size_t i = 0; i < expect.size(); i++) expect[i] = d.ref.map[i] < 0 ? -1 : c.ref.map[d.ref.map[i]];
  ASSERT_EQ(composed.shape(), d.ref.shape);
  ASSERT_EQ(uop_map(composed), expect) << "compose " << c.st.str() << " + " << d.st.str() << " = " << composed.str();
}

}  // namespace

TEST(FuzzShapeTracker, RandomMovementChains) {
  std::mt19937 rng(1234);
  int multi_view = 0, masked = 0;
  for (int iter = 0; iter < 3000; iter++) {
    Shape base;
    size_t ndim = 1 + rng() % 4;
    for (size_t i = 0; i < ndim; i++) base.push_back(1 + static_cast<int64_t>(rng() % 5));
    Chain c = random_chain(rng, base, 7);
    multi_view += c.st.views.size() > 1;
    masked += c.st.views.back().mask.has_value();
    check_chain(rng, c, base);
    if (::testing::Test::HasFailure()) break;
  }
  // the generator must exercise the interesting cases, not only single plain views
  EXPECT_GT(multi_view, 100);
  EXPECT_GT(masked, 300);
}
