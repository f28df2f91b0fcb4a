// View: one strided, offset, optionally masked window onto a buffer (tinygrad 0.9.2 shape/view.py).
#include <algorithm>
#include <numeric>

#include "shape/shape_helpers.hpp"
#include "tg/helpers.hpp"
#include "uop/uop.hpp"

namespace tg {

// ---- module-level helpers ----

std::vector<int64_t> canonicalize_strides(const Shape& shape, const std::vector<int64_t>& strides) {
  std::vector<int64_t> ret(strides);
  for (size_t i = 0; i < shape.size(); i++) if (shape[i] == 1) ret[i] = 0;
  return ret;
}

std::vector<int64_t> strides_for_shape(const Shape& shape) {
  std::vector<int64_t> ret(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) { ret[i] = acc; acc *= shape[i]; }
  return canonicalize_strides(shape, ret);
}

Shape reduce_shape(const Shape& shape, const std::vector<int64_t>& axis) {
  Shape ret = shape;
  for (int64_t a : axis) ret[a] = 1;
  return ret;
}

std::vector<MergedDim> merge_dims(const Shape& shape, const std::vector<int64_t>& strides, const std::optional<Mask>& mask) {
  if (shape.empty()) return {};
  TG_ASSERT(shape.size() == strides.size() && (!mask || mask->size() == shape.size()), "merge_dims: rank mismatch");
  std::vector<MergedDim> ret{{shape[0], strides[0], strides[0] ? shape[0] : 0}};
  // a dim masked to one element (or of size 1) merges into whatever follows it
  auto single = [&](size_t i) { return mask ? (*mask)[i].second - (*mask)[i].first == 1 : shape[i] == 1; };
  bool merging = single(0);
  for (size_t i = 1; i < shape.size(); i++) {
    int64_t s = shape[i], st = strides[i];
    if (s == 1) continue;
    MergedDim& last = ret.back();
    if (merging || last.stride == s * st) last = {last.size * s, st, st ? (merging ? s : last.real * s) : 0};
    else ret.push_back({s, st, st ? s : 0});
    merging = single(i);
  }
  return ret;
}

std::optional<Mask> reshape_mask(const std::optional<Mask>& mask, const Shape& old_shape, const Shape& new_shape) {
  if (!mask) {
    Mask full;
    for (int64_t s : new_shape) full.emplace_back(0, s);
    return full;
  }
  const Mask zero(new_shape.size(), {0, 0});
  for (auto& [b, e] : *mask) if (e - b < 1) return zero;
  // walk both shapes from the innermost dim, splitting or combining mask ranges
  size_t im = mask->size(), io = old_shape.size(), in = new_shape.size();
  auto next_mask = [&]() { return im > 0 ? (*mask)[--im] : std::pair<int64_t, int64_t>{0, 1}; };
  auto next_old = [&]() { return io > 0 ? old_shape[--io] : int64_t{1}; };
  auto next_new = [&]() { return in > 0 ? new_shape[--in] : int64_t{1}; };
  Mask new_mask;
  int64_t curr_stride = 1, old_dim = next_old(), new_dim = next_new();
  auto m = next_mask();
  for (size_t guard = 0; new_mask.size() < new_shape.size(); guard++) {
    TG_ASSERT(guard < 4 * (old_shape.size() + new_shape.size()) + 8, "reshape_mask did not terminate");
    auto [l, r] = m;
    int64_t next_stride = new_dim * curr_stride;
    if (old_dim >= next_stride) {
      if (old_dim == next_stride) {   // dims line up: copy the range, move to the next pair
        new_mask.emplace_back(l / curr_stride, (r - 1) / curr_stride + 1);
        curr_stride = 1, old_dim = next_old(), new_dim = next_new(), m = next_mask();
      } else {   // split the old dim: only possible if the mask doesn't cut across the split
        if (((l % next_stride != 0 || r % next_stride != 0) && l / next_stride != (r - 1) / next_stride) ||
            old_dim % next_stride != 0)
          return std::nullopt;
        new_mask.emplace_back(l % next_stride / curr_stride, (r - 1) % next_stride / curr_stride + 1);
        curr_stride = next_stride, new_dim = next_new();
      }
    } else {   // combine with the next old dim: the mask must unfold continuously
      auto nm = next_mask();
      if (m != std::pair<int64_t, int64_t>{0, old_dim} && nm.second - nm.first != 1) return std::nullopt;
      m = {nm.first * old_dim + l, (nm.second - 1) * old_dim + r};
      old_dim *= next_old();
    }
  }
  while (im > 0) if ((*mask)[--im] != std::pair<int64_t, int64_t>{0, 1}) return zero;   // leading 1s must be unmasked
  std::reverse(new_mask.begin(), new_mask.end());
  return new_mask;
}

std::vector<int64_t> un1d(const Shape& shape, int64_t offs) {
  std::vector<int64_t> ret;
  for (int64_t st : strides_for_shape(shape)) {
    int64_t here = st ? floordiv(offs, st) : 0;
    ret.push_back(here);
    offs -= here * st;
  }
  return ret;
}

std::string mask_str(const Mask& m) {
  std::string s = "(";
  for (size_t i = 0; i < m.size(); i++)
    s += (i ? ", (" : "(") + std::to_string(m[i].first) + ", " + std::to_string(m[i].second) + ")";
  return s + (m.size() == 1 ? ",)" : ")");
}

static bool has_zero(const Shape& s) { return std::find(s.begin(), s.end(), 0) != s.end(); }

// "invalid <op> <arg> for <shape>: <why>"
[[noreturn]] static void bad_arg(const std::string& op, const std::string& arg, const Shape& shape, const std::string& why) {
  throw Error("invalid " + op + " " + arg + " for " + to_str(shape) + ": " + why);
}

// ---- View ----

View View::create(const Shape& shape, std::optional<std::vector<int64_t>> strides, int64_t offset, std::optional<Mask> mask) {
  for (int64_t s : shape)
    if (s < 0) throw Error("View.create: negative dimension in shape " + to_str(shape) + "; dims must be >= 0");
  if (strides && strides->size() != shape.size())
    throw Error("View.create: strides " + to_str(*strides) + " don't match shape " + to_str(shape));
  if (mask && mask->size() != shape.size())
    throw Error("View.create: mask " + mask_str(*mask) + " doesn't match shape " + to_str(shape));
  std::vector<int64_t> st = strides && !strides->empty() ? canonicalize_strides(shape, *strides) : strides_for_shape(shape);
  if (has_zero(shape)) return View{shape, std::vector<int64_t>(shape.size(), 0), 0, std::nullopt, true};
  if (mask) {
    bool full = true;
    for (size_t i = 0; i < shape.size(); i++) full &= (*mask)[i] == std::pair<int64_t, int64_t>{0, shape[i]};
    if (full) mask.reset();
  }
  if (mask) {
    // a dim masked to at most one element doesn't need its stride: fold it into the offset
    std::vector<bool> elim;
    bool any_elim = false, any_empty = false;
    for (auto& [b, e] : *mask) { elim.push_back(!(b + 1 < e)); any_elim |= elim.back(); any_empty |= !(b < e); }
    if (any_elim) {
      if (any_empty) { st.assign(shape.size(), 0); offset = 0; mask = Mask(shape.size(), {0, 0}); }
      for (size_t i = 0; i < shape.size(); i++)
        if (elim[i]) { offset += st[i] * (*mask)[i].first; st[i] = 0; }
    }
  }
  bool contiguous = offset == 0 && !mask && st == strides_for_shape(shape);
  return View{shape, st, offset, mask, contiguous};
}

int64_t View::size() const { return prod(shape); }

View View::minify() const {
  if (sym) return *this;
  Shape min_shape;
  for (auto& m : merge_dims(shape, strides, mask)) min_shape.push_back(m.size);
  auto nv = reshape(min_shape);
  return nv ? *nv : *this;
}

// shrink/pad core: window arg[i] = [begin, end) in this view's coordinates (may extend past it)
static View unsafe_resize(const View& v, const Mask& arg, std::optional<Mask> mask = std::nullopt) {
  int64_t offset = 0;
  for (size_t i = 0; i < arg.size(); i++) offset += v.strides[i] * arg[i].first;
  if (v.mask) {   // move the old mask into the window, then intersect with the new one
    Mask nmask;
    for (size_t i = 0; i < arg.size(); i++) {
      auto [mx, my] = (*v.mask)[i];
      auto [ax, ay] = arg[i];
      nmask.emplace_back(std::max<int64_t>(0, std::min(mx - ax, ay - ax)), std::max<int64_t>(0, std::min(my - ax, ay - ax)));
    }
    if (mask)
      for (size_t i = 0; i < arg.size(); i++)
        nmask[i] = {std::max(nmask[i].first, (*mask)[i].first), std::min(nmask[i].second, (*mask)[i].second)};
    mask = nmask;
  }
  Shape shape;
  for (auto& [x, y] : arg) shape.push_back(y - x);
  return View::create(shape, v.strides, v.offset + offset, mask);
}

View View::pad(const Mask& arg) const {
  if (sym) return sym_pad_ints(*this, arg);
  if (arg.size() != shape.size()) bad_arg("pad", mask_str(arg), shape, "need one (before, after) pair per axis");
  for (auto& [b, e] : arg) if (b < 0 || e < 0) bad_arg("pad", mask_str(arg), shape, "pads must be >= 0 (use shrink to cut)");
  bool any = false;
  for (auto& [b, e] : arg) any |= b || e;
  if (!any) return *this;
  Mask window, mask;
  for (size_t i = 0; i < shape.size(); i++) {
    window.emplace_back(-arg[i].first, shape[i] + arg[i].second);
    mask.emplace_back(arg[i].first, shape[i] + arg[i].first);
  }
  return unsafe_resize(*this, window, mask);
}

View View::shrink(const Mask& arg) const {
  if (sym) return sym_shrink_ints(*this, arg);
  if (arg.size() != shape.size()) bad_arg("shrink", mask_str(arg), shape, "need one (begin, end) pair per axis");
  for (size_t i = 0; i < shape.size(); i++)
    if (!(0 <= arg[i].first && arg[i].first <= arg[i].second && arg[i].second <= shape[i]))
      bad_arg("shrink", mask_str(arg), shape, "need 0 <= begin <= end <= size on every axis");
  return unsafe_resize(*this, arg);
}

View View::expand(const Shape& new_shape) const {
  if (sym) return sym_expand_ints(*this, new_shape);
  if (new_shape.size() != shape.size()) bad_arg("expand", to_str(new_shape), shape, "need the same number of dims");
  for (int64_t x : new_shape) if (x < 0) bad_arg("expand", to_str(new_shape), shape, "dims must be >= 0");
  if (has_zero(shape)) {
    for (size_t i = 0; i < shape.size(); i++)
      if (!((shape[i] == 0 && new_shape[i] == 0) || (shape[i] > 0 && new_shape[i] % shape[i] == 0)))
        bad_arg("expand", to_str(new_shape), shape, "only size-1 dims can expand");
    return View::create(new_shape);
  }
  for (size_t i = 0; i < shape.size(); i++)
    if (!(shape[i] == new_shape[i] || (shape[i] == 1 && strides[i] == 0)))
      bad_arg("expand", to_str(new_shape), shape, "only size-1 dims can expand; reshape first to add them");
  std::optional<Mask> nm;
  if (mask) {
    nm = Mask{};
    for (size_t i = 0; i < shape.size(); i++) {
      auto m = (*mask)[i];
      if (shape[i] != new_shape[i]) m = m != std::pair<int64_t, int64_t>{0, 1} ? std::pair<int64_t, int64_t>{0, 0} : std::pair<int64_t, int64_t>{0, new_shape[i]};
      nm->push_back(m);
    }
  }
  return View::create(new_shape, strides, offset, nm);
}

View View::permute(const std::vector<int>& axis) const {
  if (sym && axis.size() == shape.size()) {
    std::vector<int> sorted_ax(axis);
    std::sort(sorted_ax.begin(), sorted_ax.end());
    bool perm = true;
    for (size_t i = 0; i < sorted_ax.size(); i++) perm &= sorted_ax[i] == static_cast<int>(i);
    if (perm) return sym_permute(*this, axis);
  }
  std::vector<int> sorted(axis);
  std::sort(sorted.begin(), sorted.end());
  bool ok = axis.size() == shape.size();
  for (size_t i = 0; ok && i < sorted.size(); i++) ok = sorted[i] == static_cast<int>(i);
  if (!ok) bad_arg("permute", to_str(axis), shape, "the axes must be a permutation of 0.." + std::to_string(int(shape.size()) - 1));
  Shape ns;
  std::vector<int64_t> nst;
  std::optional<Mask> nm;
  if (mask) nm = Mask{};
  for (int a : axis) {
    ns.push_back(shape[a]);
    nst.push_back(strides[a]);
    if (mask) nm->push_back((*mask)[a]);
  }
  return View::create(ns, nst, offset, nm);
}

View View::stride(const std::vector<int64_t>& mul) const {
  if (sym && mul.size() == shape.size() && std::find(mul.begin(), mul.end(), 0) == mul.end()) return sym_stride(*this, mul);
  if (mul.size() != shape.size()) bad_arg("stride", to_str(mul), shape, "need one multiplier per axis");
  for (int64_t m : mul) if (m == 0) bad_arg("stride", to_str(mul), shape, "multipliers must be nonzero (negative flips)");
  std::vector<int64_t> nst;
  Shape ns;
  int64_t off = offset;
  std::optional<Mask> nm;
  if (mask) nm = Mask{};
  for (size_t i = 0; i < shape.size(); i++) {
    int64_t m = mul[i], am = std::abs(m), s = shape[i];
    nst.push_back(strides[i] * m);
    ns.push_back((s + am - 1) / am);
    if (m < 0) off += (s - 1) * strides[i];
    if (mask) {
      auto [mx, my] = (*mask)[i];
      nm->emplace_back(floordiv((m > 0 ? mx : s - my) + am - 1, am), floordiv((m > 0 ? my : s - mx) + am - 1, am));
    }
  }
  return View::create(ns, nst, off, nm);
}

std::optional<View> View::reshape(const Shape& new_shape) const {
  if (sym) return sym_reshape_ints(*this, new_shape);
  if (shape == new_shape) return *this;
  for (int64_t x : new_shape)
    if (x < 0) bad_arg("reshape", to_str(new_shape), shape, "dims must be >= 0 (the Tensor resolves -1)");
  if (prod(shape) != prod(new_shape))
    bad_arg("reshape", to_str(new_shape), shape, "the number of elements must stay " + std::to_string(prod(shape)));
  if (has_zero(shape)) return View::create(new_shape);
  if (new_shape.empty() && mask)
    for (auto& [mx, my] : *mask) if (mx == my) return std::nullopt;
  if (contiguous) return View::create(new_shape);

  // assign strides to the new dims from the innermost merged dim outwards
  std::vector<int64_t> rstrides;   // innermost first
  size_t rn = new_shape.size();
  auto md = merge_dims(shape, strides, mask);
  for (auto it = md.rbegin(); it != md.rend(); ++it) {
    int64_t acc = 1, new_stride = it->stride;
    while (acc <= it->size && acc != it->size && rn > 0) {
      int64_t new_dim = new_shape[--rn];
      rstrides.push_back(new_stride);
      if (new_dim != 1) new_stride *= ((acc *= new_dim) < it->real ? new_dim : 0);
    }
    if (acc != it->size) return std::nullopt;   // a new dim straddles two merged dims
  }
  rstrides.resize(new_shape.size(), 0);
  auto new_mask = reshape_mask(mask, shape, new_shape);
  if (!new_mask) return std::nullopt;
  Shape extents;
  for (auto& [b, e] : *new_mask) extents.push_back(e - b);
  std::vector<int64_t> new_strides = canonicalize_strides(extents, std::vector<int64_t>(rstrides.rbegin(), rstrides.rend()));
  // keep the first valid element where it was
  int64_t extra = 0;
  if (mask) for (size_t i = 0; i < shape.size(); i++) extra += (*mask)[i].first * strides[i];
  for (size_t i = 0; i < new_shape.size(); i++) extra -= (*new_mask)[i].first * new_strides[i];
  return View::create(new_shape, new_strides, offset + extra, new_mask);
}

// A linear term over vm1's indices (coef per dim + const) with its exact bounds.
struct LinTerm {
  std::vector<int64_t> coef;
  int64_t c = 0;
  int64_t bound(const Shape& shape, bool hi) const {
    int64_t r = c;
    for (size_t i = 0; i < coef.size(); i++) {
      int64_t v = coef[i] * (shape[i] - 1);
      r += hi ? std::max<int64_t>(0, v) : std::min<int64_t>(0, v);
    }
    return r;
  }
};

// View.__add__: the single view equal to applying *this (vm2, below) then vm1 (above), if any.
std::optional<View> View::operator+(const View& vm1) const {
  const View& vm2 = *this;
  if (vm2.sym || vm1.sym) return sym_add(vm2, vm1);
  if (vm2.contiguous) return vm1;
  if (vm1.contiguous && vm1.shape == vm2.shape) return vm2;
  if (vm1.contiguous && vm1.size() == vm2.size())
    if (auto ret = vm2.reshape(vm1.shape)) return ret;
  if (has_zero(vm1.shape)) return View::create(vm1.shape);   // touches nothing
  if (vm1.mask) {   // merge the unmasked part, then pad the mask back on
    for (auto& [b, e] : *vm1.mask)
      if (!(b < e)) return View::create(vm1.shape, std::vector<int64_t>(vm1.shape.size(), 0), 0, Mask(vm1.shape.size(), {0, 0}));
    auto merged = vm2 + vm1.shrink(*vm1.mask);
    if (!merged) return std::nullopt;
    Mask padding;
    for (size_t i = 0; i < vm1.shape.size(); i++) padding.emplace_back((*vm1.mask)[i].first, vm1.shape[i] - (*vm1.mask)[i].second);
    return merged->pad(padding);
  }

  // project vm1's offset and strides onto vm2's dims
  const size_t n1 = vm1.shape.size(), n2 = vm2.shape.size();
  std::vector<int64_t> origin = un1d(vm2.shape, vm1.offset);
  std::vector<std::vector<std::pair<size_t, int64_t>>> terms(n2);
  std::vector<int64_t> strides(n1, 0);
  for (size_t d1 = 0; d1 < n1; d1++) {
    int64_t st = vm1.strides[d1];
    if (st == 0) continue;
    std::vector<int64_t> moved = un1d(vm2.shape, vm1.offset + st);
    for (size_t d2 = 0; d2 < n2; d2++) {
      int64_t s1 = moved[d2] - origin[d2];
      if (s1 == 0) continue;
      terms[d2].emplace_back(d1, s1);
      strides[d1] += s1 * vm2.strides[d2];
    }
  }

  // merge vm2 dims only where a vm1 index carries across them (merging more would hide vm2's mask)
  std::vector<std::pair<int64_t, LinTerm>> extents;   // innermost first
  int64_t merged_size = 1;
  LinTerm merged{std::vector<int64_t>(n1, 0), 0};
  for (size_t k = n2; k-- > 0;) {
    for (auto [d1, s1] : terms[k]) merged.coef[d1] += s1 * merged_size;
    merged.c += origin[k] * merged_size;
    merged_size *= vm2.shape[k];
    if (merged.bound(vm1.shape, true) < merged_size && merged.bound(vm1.shape, false) >= 0) {
      extents.emplace_back(merged_size, merged);
      merged_size = 1;
      merged = LinTerm{std::vector<int64_t>(n1, 0), 0};
    }
  }
  if (merged.bound(vm1.shape, false) != 0 || merged.bound(vm1.shape, true) != 0) return std::nullopt;
  Shape vm2_shape;
  for (auto it = extents.rbegin(); it != extents.rend(); ++it) vm2_shape.push_back(it->first);
  if (vm2_shape != vm2.shape) {
    auto reshaped = vm2.reshape(vm2_shape);
    if (!reshaped) return std::nullopt;
    return *reshaped + vm1;
  }

  if (vm2.mask) {   // project vm2's mask onto vm1's dims
    std::vector<int64_t> newb(n1, 0), newe(vm1.shape);
    bool bad = false;
    for (size_t d2 = 0; d2 < n2; d2++) {
      auto [b, e] = (*vm2.mask)[d2];
      const LinTerm& t = extents[n2 - 1 - d2].second;
      int64_t o = origin[d2];
      if (!(t.bound(vm1.shape, false) < b || t.bound(vm1.shape, true) >= e)) continue;   // always inside the mask
      const auto& term = terms[d2];
      if (term.size() != 1) {
        if (term.empty() && !newe.empty()) newe[0] = 0;   // constant and outside: nothing is valid
        else bad = true;
        continue;
      }
      auto [d1, s1] = term[0];
      newb[d1] = std::max(newb[d1], ceildiv(s1 > 0 ? b - o : e - o - 1, s1));
      newe[d1] = std::min(newe[d1], floordiv(s1 < 0 ? b - o : e - o - 1, s1) + 1);
    }
    // if part of vm1 is masked off, merge again with that mask on vm1
    for (size_t i = 0; i < n1; i++) {
      if (newb[i] != 0 || newe[i] != vm1.shape[i]) {
        Mask m;
        for (size_t j = 0; j < n1; j++) m.emplace_back(newb[j], newe[j]);
        return vm2 + View::create(vm1.shape, vm1.strides, vm1.offset, m);
      }
    }
    if (bad) return std::nullopt;
  }
  int64_t offset = vm2.offset;
  for (size_t i = 0; i < n2; i++) offset += origin[i] * vm2.strides[i];
  return View::create(vm1.shape, strides, offset);
}

std::optional<View> View::invert(const Shape& out_shape) const {
  if (sym) return std::nullopt;
  View ret = View::create(shape);
  if (mask) ret = ret.shrink(*mask);
  std::vector<int64_t> flips;
  for (int64_t x : strides) flips.push_back(x < 0 ? -1 : 1);
  std::vector<int> order(strides.size());
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](int i) { return strides[i] > 0 ? -strides[i] : strides[i]; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  ret = ret.stride(flips).permute(order);
  // shrink, expand and |stride| != 1 lose elements: not invertible
  if (prod(ret.shape) != prod(out_shape)) return std::nullopt;
  // tinygrad stops at the size check; also require the valid part to be a bijection onto the buffer,
  // so a size that matches by coincidence (expand + pad) can't give a wrong inverse
  View valid = mask ? shrink(*mask) : *this;
  std::vector<int> dims(valid.shape.size());
  std::iota(dims.begin(), dims.end(), 0);
  std::stable_sort(dims.begin(), dims.end(), [&](int a, int b) { return std::abs(valid.strides[a]) < std::abs(valid.strides[b]); });
  int64_t acc = 1, start = valid.offset;
  for (int d : dims) {
    if (valid.shape[d] == 1) continue;
    if (std::abs(valid.strides[d]) != acc) return std::nullopt;
    acc *= valid.shape[d];
    if (valid.strides[d] < 0) start += valid.strides[d] * (valid.shape[d] - 1);
  }
  if (start != 0 || acc != prod(out_shape)) return std::nullopt;
  return ret;
}

std::string View::str() const {
  if (sym) return sym_view_str(*this);
  return "View(shape=" + to_str(shape) + ", strides=" + to_str(strides) + ", offset=" + std::to_string(offset) +
         ", mask=" + (mask ? mask_str(*mask) : "None") + ", contiguous=" + (contiguous ? "True" : "False") + ")";
}

bool View::operator==(const View& o) const {
  if (!(shape == o.shape && strides == o.strides && offset == o.offset && mask == o.mask && contiguous == o.contiguous)) return false;
  if (!sym || !o.sym) return !sym && !o.sym;
  return sym == o.sym || sym_equal(*sym, *o.sym);
}

static void hash_mix(size_t& h, int64_t v) { h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

size_t View::hash() const {
  size_t h = shape.size();
  for (int64_t s : shape) hash_mix(h, s);
  for (int64_t s : strides) hash_mix(h, s);
  hash_mix(h, offset);
  hash_mix(h, mask ? 1 : 0);
  if (mask) for (auto& [b, e] : *mask) { hash_mix(h, b); hash_mix(h, e); }
  if (sym) hash_mix(h, static_cast<int64_t>(sym_hash(*sym)));
  return h;
}

}  // namespace tg
