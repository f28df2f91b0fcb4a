// EXP2 / LOG2 / SIN from +, *, where, casts and bitcasts (tinygrad 0.9.2 codegen/transcendental.py,
// after SLEEF: https://arxiv.org/pdf/2001.09258). Each is a 1.0 ULP approximation.
#include <cmath>

#include "codegen/uopgraph.hpp"

namespace tg {

namespace {
UOp k(const UOp& x, double v) { return x.const_like(v); }
UOp ki(const UOp& x, int64_t v) { return x.const_like(v); }
bool is(DType d, DType e) { return d == e; }

int significand_bits(DType d) { return is(d, dtypes::float64) ? 52 : is(d, dtypes::float32) ? 23 : 10; }
int exponent_bias(DType d) { return is(d, dtypes::float64) ? 1022 : is(d, dtypes::float32) ? 126 : 14; }
int64_t exponent_mask(DType d) { return is(d, dtypes::float64) ? 0x7FF : is(d, dtypes::float32) ? 0xFF : 0x1F; }
DType int_of(DType d) { return is(d, dtypes::float64) ? dtypes::int64 : is(d, dtypes::float32) ? dtypes::int32 : dtypes::int16; }
DType uint_of(DType d) { return is(d, dtypes::float64) ? dtypes::uint64 : is(d, dtypes::float32) ? dtypes::uint32 : dtypes::uint16; }

// inf -> inf, -inf -> _inf, nan -> nan, anything else -> ratio
UOp lazy_map_numbers(const UOp& x, const UOp& inf, const UOp& _inf, const UOp& nan, const UOp& ratio) {
  return x.ne(k(x, INFINITY)).where(x.ne(x).where(nan, x.ne(k(x, -INFINITY)).where(ratio, _inf)), inf);
}
std::pair<UOp, UOp> dfadd2(const UOp& xx, const UOp& xy, const UOp& yx, const UOp& yy) { return {xx + yx, xy + yy}; }
std::pair<UOp, UOp> dfmul2(const UOp& xx, const UOp& xy, const UOp& yx, const UOp& yy) { return {xx * yx, xx * yy + xy * yx}; }
std::pair<UOp, UOp> dfdiv2(const UOp& nx, const UOp& ny, const UOp& dx, const UOp& dy) {
  UOp t = dx.recip(), qx = nx * t;
  return {qx, (ny - qx * dy) * t};
}

UOp shr(const UOp& x, int y) { return x.alu(BinaryOps::IDIV, ki(x, int64_t{1} << y)); }
UOp shl(const UOp& x, int y) { return x * ki(x, int64_t{1} << y); }
UOp mla(const UOp& x, const UOp& y, const UOp& z) { return x * y + z; }
UOp polyN(UOp u, const UOp& s, std::initializer_list<double> coeffs) {
  for (double c : coeffs) u = mla(u, s, k(u, c));
  return u;
}

// round to nearest as an int of the float's width
UOp rintk(const UOp& d) { return (d + d.lt(k(d, 0.0)).where(k(d, -0.5), k(d, 0.5))).cast(int_of(d->dtype)); }

// 2^q as a float, for integer q in [-126, 127]
UOp pow2if(const UOp& q, DType float_dtype) {
  DType qd = q->dtype;
  DType fin = is(qd, dtypes::int64) ? dtypes::float64 : is(qd, dtypes::int16) ? float_dtype : dtypes::float32;
  return shl(q + (exponent_bias(fin) + 1), significand_bits(fin)).bitcast(fin);
}

// integer part of log2(d) for normalized d >= 0
UOp ilogb2k(const UOp& d) {
  UOp dint = d.bitcast(int_of(d->dtype));
  return (shr(dint, significand_bits(d->dtype)) & ki(dint, exponent_mask(d->dtype))) - (exponent_bias(d->dtype) + 1);
}

// d * 2^e with e a float holding an integer in [-127, 127]
UOp ldexp3k(const UOp& d, const UOp& e) {
  DType it = int_of(d->dtype);
  UOp m1 = d.bitcast(it), m2 = shl(e.cast(it), significand_bits(d->dtype));
  return (m1 + m2).bitcast(d->dtype);
}

// (mantissa, exponent)
std::pair<UOp, UOp> frexp(const UOp& v) {
  DType dt = v->dtype;
  int64_t m1 = is(dt, dtypes::float64) ? 0x000FFFFFFFFFFFFF : is(dt, dtypes::float32) ? 0x807FFFFF : 0x83FF;
  int64_t m2 = is(dt, dtypes::float64) ? 0x3FE0000000000000 : is(dt, dtypes::float32) ? 0x3F000000 : 0x3C00;
  int64_t bias = is(dt, dtypes::float64) ? 1022 : is(dt, dtypes::float32) ? 126 : 15;
  UOp bits = v.bitcast(uint_of(dt));
  UOp exponent = shr(bits, significand_bits(dt)) & ki(bits, exponent_mask(dt));
  UOp exponent_zero = exponent.ne(ki(exponent, 0));
  UOp result_f = ((bits & ki(bits, m1)) | ki(bits, m2)).bitcast(dt);
  UOp value = exponent_zero.where(result_f, v);
  UOp exp = exponent + ki(exponent, -bias);
  exp = exponent_zero.where(exp, ki(exp, 0));
  if (is(dt, dtypes::float16)) exp = exp.bitcast(dtypes::int16);
  return {value, exp};
}

// d mod pi/2 for 39800 <= d <= inf: (remainder in [0, pi/2), quadrant)
std::pair<UOp, UOp> payne_hanek_reduction(const UOp& d) {
  static const int64_t two_over_pi_f[] = {0x00000000, 0x28be60db, 0x9391054a, 0x7f09d5f4, 0x7d4d3770, 0x36d8a566, 0x4f10e410};
  DType input_dtype = d->dtype, dtype_via = is(d->dtype, dtypes::float16) ? dtypes::float32 : d->dtype, acc = dtypes::uint64;
  auto [f, e0] = frexp(d);
  UOp ia = (f.cast(dtype_via) * k(f.cast(dtype_via), 4.294967296e9)).cast(acc);
  UOp i = shr(e0.cast(acc), 5);
  UOp e = (e0.cast(acc) & ki(e0.cast(acc), 31)).cast(dtypes::uint32);
  UOp offset = -e + 32;
  // an = two_over_pi_f[i + offset], as a chain of selects on i
  std::function<UOp(const UOp&, int, int)> take = [&](const UOp& an, int off, int count) -> UOp {
    if (count + off <= 5) return i.ne(ki(i, count)).where(take(an, off, count + 1), ki(an, two_over_pi_f[count + off]));
    return an;
  };
  auto exact_pow2if = [&](const UOp& x) { return pow2if(x, input_dtype).cast(acc); };
  auto shl_lazy = [&](const UOp& x, const UOp& y) { return (x.cast(acc) * exact_pow2if(y)).cast(dtypes::uint32); };
  auto shr_lazy = [&](const UOp& x, const UOp& y) { return x.cast(acc).alu(BinaryOps::IDIV, exact_pow2if(y)).cast(dtypes::uint32); };
  UOp zero = ki(i, 0).cast(dtypes::uint32);
  UOp a1 = take(zero, 0, 0), a2 = take(zero, 1, 0), a3 = take(zero, 2, 0), a4 = take(zero, 3, 0);
  UOp hi = shl_lazy(a1, e) | shr_lazy(a2, offset);
  UOp mi = shl_lazy(a2, e) | shr_lazy(a3, offset);
  UOp lo = shl_lazy(a3, e) | shr_lazy(a4, offset);
  auto hp_mul = [](const UOp& x, const UOp& y) { return x.cast(dtypes::uint64) * y.cast(dtypes::uint64); };
  UOp p = hp_mul(ia, lo);
  p = hp_mul(ia, mi) + shr(p, 32);
  p = shl(hp_mul(ia, hi), 32) + p;
  UOp q = shr(p, 62).cast(dtypes::int32);
  p = p & ki(p, 0x3fffffffffffffff);
  UOp r = (p.cast(dtype_via) * k(p.cast(dtype_via), 3.4061215800865545e-19)).cast(input_dtype);
  UOp small = f.lt(k(f, 0.5));
  return {small.where(r, r + k(r, -M_PI / 2)), small.where(q, q + 1)};
}

// d mod pi/2 for 0 <= |d| <= 39800
std::pair<UOp, UOp> cody_waite_reduction(const UOp& d) {
  const double m_1_pi = 0.318309886183790671537767526745028724;
  UOp qdh = (d * k(d, m_1_pi / 16777216)).cast(dtypes::int64).cast(d->dtype) * k(d, 16777216.0);
  auto quadrant = [&](const UOp& x) {
    if (is(x->dtype, dtypes::float64)) return rintk(mla(d, k(d, m_1_pi), -qdh)).cast(x->dtype);
    return rintk(x * k(x, m_1_pi)).cast(x->dtype);
  };
  std::function<UOp(const UOp&, const UOp&)> reduce_d = [&](const UOp& x, const UOp& q) -> UOp {
    if (is(x->dtype, dtypes::float64)) {
      UOp r = mla(qdh, k(x, -3.1415926218032836914), x);
      r = mla(q, k(x, -3.1415926218032836914), r);
      r = mla(qdh, k(x, -3.1786509424591713469e-08), r);
      r = mla(q, k(x, -3.1786509424591713469e-08), r);
      r = mla(qdh, k(x, -1.2246467864107188502e-16), r);
      r = mla(q, k(x, -1.2246467864107188502e-16), r);
      return mla(qdh + q, k(x, -1.2736634327021899816e-24), r);
    }
    // float16 needs float32 precision here to reach 1 ULP
    if (is(x->dtype, dtypes::float16)) return reduce_d(x.cast(dtypes::float32), q.cast(dtypes::float32)).cast(dtypes::float16);
    UOp r = mla(q, k(x, -3.1414794921875), x);
    r = mla(q, k(x, -0.00011315941810607910156), r);
    r = mla(q, k(x, -1.9841872589410058936e-09), r);
    return mla(q, k(x, -1.2154201256553420762e-10), r);
  };
  UOp q = quadrant(d);
  return {reduce_d(d, q), q.cast(dtypes::int32)};
}

// sine on [-pi/2, pi/2]
UOp sin_poly(const UOp& d) {
  UOp s = d * d, u;
  if (is(d->dtype, dtypes::float64)) {
    UOp s2 = s * s, s4 = s2 * s2;
    auto poly4 = [](const UOp& x, const UOp& x2, double c3, double c2, double c1, double c0) {
      return mla(x2, mla(x, k(x, c3), k(x, c2)), mla(x, k(x, c1), k(x, c0)));
    };
    u = mla(s4, poly4(s, s2, -7.97255955009037868891952e-18, 2.81009972710863200091251e-15, -7.64712219118158833288484e-13,
                      1.60590430605664501629054e-10),
            poly4(s, s2, -2.50521083763502045810755e-08, 2.75573192239198747630416e-06, -0.000198412698412696162806809,
                  0.00833333333333332974823815));
    u = mla(u, s, k(d, -0.166666666666666657414808));
  } else {
    u = polyN(k(s, 2.6083159809786593541503e-06), s,
              {-0.0001981069071916863322258, 0.00833307858556509017944336, -0.166666597127914428710938});
  }
  return mla(s, u * d, d);
}
UOp ifand(const UOp& q, int64_t n) { return (q & ki(q, n)).ne(ki(q, 0)); }
UOp sin_poly_small(const UOp& d, const UOp& q) {
  UOp r = sin_poly(d);
  return r * ifand(q, 1).where(k(r, -1.0), k(r, 1.0));
}
UOp sin_poly_large(const UOp& d, const UOp& q) {
  UOp r = sin_poly(d + ifand(q, 1).where(k(d, M_PI / 2), k(d, 0.0)));
  return r * ifand(q, 2).where(k(r, -1.0), k(r, 1.0));
}
}  // namespace

UOp xsin(const UOp& d, bool fast, double switch_over) {
  UOp x = lazy_map_numbers(d, k(d, 0.0), k(d, 0.0), k(d, 0.0), d);   // +-inf/nan masked as zero
  UOp x_sign = x.ne(k(x, 0.0)).where(x.lt(k(x, 0.0)).where(k(x, -1.0), k(x, 1.0)), k(x, 0.0));
  UOp x_abs = x * x_sign;
  UOp result;
  if (fast) {
    auto [r, q] = cody_waite_reduction(x_abs);
    result = sin_poly_small(r, q);
  } else {
    // Payne-Hanek assumes |x| >= pi/4: small values take Cody-Waite
    auto [r0, q0] = payne_hanek_reduction(x_abs);
    UOp use_fast = x_abs.lt(k(x_abs, switch_over));
    auto [r_fast, q_fast] = cody_waite_reduction(x_abs);
    UOp r = use_fast.where(r_fast, r0), q = use_fast.where(q_fast, q0);
    result = use_fast.where(sin_poly_small(r, q), sin_poly_large(r, q));
  }
  result = result * x_sign;
  return lazy_map_numbers(d, k(d, NAN), k(d, NAN), k(d, NAN), result);
}

UOp xexp2(const UOp& d) {
  // Clamp to [lower, upper] first: NaN and -inf go to lower (a compare with NaN is false), +inf to
  // upper, so the polynomial and the int conversion only see finite values. 2^lower rounds to 0 and
  // 2^upper to inf in the two-factor ldexp below, so the ends need no selects of their own: 3 in
  // all where tinygrad's masking takes 12, most of a vector exp on the CPU (float16: see below).
  DType dt = d->dtype;
  double upper = is(dt, dtypes::float64) ? 1024 : is(dt, dtypes::float32) ? 128 : 23.0;
  double lower = is(dt, dtypes::float64) ? -2000 : is(dt, dtypes::float32) ? -150 : -24.0;   // even: see below
  UOp x = k(d, lower).lt(d).where(d, k(d, lower));
  x = x.lt(k(x, upper)).where(x, k(x, upper));
  // x >= lower, so x + 0.5 - lower is positive and truncating it is a floor: round to nearest
  // without the sign select of rintk (ties go up, which the polynomial's range allows)
  const int64_t lo = int64_t(lower);
  UOp shifted = (x + k(x, 0.5 - lower)).cast(int_of(dt));   // q - lower, >= 0
  UOp q = shifted + ki(shifted, lo);
  UOp s = x - q.cast(x->dtype);
  UOp u;
  // polynomial on [-(log 2)/2, (log 2)/2]
  if (is(dt, dtypes::float64)) {
    u = polyN(k(s, 0.4434359082926529454e-9), s,
              {0.7073164598085707425e-8, 0.1017819260921760451e-6, 0.1321543872511327615e-5, 0.1525273353517584730e-4,
               0.1540353045101147808e-3, 0.1333355814670499073e-2, 0.9618129107597600536e-2, 0.5550410866482046596e-1,
               0.2402265069591012214e+0, 0.6931471805599452862e+0, 0.1000000000000000000e+1});
  } else {
    u = polyN(k(s, 0.1535920892e-3), s, {0.1339262701e-2, 0.9618384764e-2, 0.5550347269e-1, 0.2402264476e+0, 0.6931471825e+0, 0.1000000000e+1});
  }
  // tinygrad's ldexp2k (u * 2^h * 2^(q-h), h about q/2: 2^q alone may not be a normal float), h from
  // the non-negative q - lower, where halving is one unsigned shift instead of a signed division
  UOp h = shr(shifted.cast(uint_of(dt)), 1).cast(int_of(dt));
  u = (u * pow2if(h + ki(h, lo / 2), dt)) * pow2if(shifted - h + ki(h, lo / 2), dt);
  // float16 is computed in float on some devices (clang's __fp16), where 2^23 and 2^-23 don't round
  // to inf and 0: the ends get selects, at tinygrad's bounds (below -22 is 0)
  if (is(dt, dtypes::float16)) u = x.lt(k(x, -22.0)).where(k(x, 0.0), x.lt(k(x, upper)).where(u, k(x, INFINITY)));
  return d.ne(d).where(d, u);   // NaN in, NaN out
}

UOp xlog2(const UOp& d0) {
  DType dt = d0->dtype;
  UOp d = d0;
  UOp denormal_map = d.lt(k(d, is(dt, dtypes::float16) ? 1e-6 : 1e-4));
  for (int i = 0; i < 8; i++) d = denormal_map.where(d * k(d, 256.0), d);
  UOp e = ilogb2k(d * k(d, 1.0 / 0.75)).cast(dt);
  UOp m = ldexp3k(d, -e);
  e = denormal_map.where(e + k(e, -64.0), e);
  UOp r;
  if (is(dt, dtypes::float64)) {
    UOp x = (m - k(m, 1.0)) * (m + k(m, 1.0)).recip();
    UOp x2 = x * x;
    UOp t = polyN(k(x, 0.2211941750456081490e+0), x2,
                  {0.2200768693152277689e+0, 0.2623708057488514656e+0, 0.3205977477944495502e+0, 0.4121985945485324709e+0,
                   0.5770780162997058982e+0, 0.96179669392608091449});
    auto [mx, my] = dfmul2(k(t, 2.885390081777926774), k(t, 0.0), x, k(x, 0.0));
    auto [s_hi, s_lo] = dfadd2(e, k(e, 0.0), mx, my);
    r = mla(t, x * x2, s_hi + s_lo);
  } else {
    auto [nx, ny] = dfadd2(k(m, -1.0), k(m, 0.0), m, k(m, 0.0));
    auto [dx, dy] = dfadd2(k(m, 1.0), k(m, 0.0), m, k(m, 0.0));
    auto [xx, xy] = dfdiv2(nx, ny, dx, dy);
    UOp x2 = xx * xx;
    UOp t = polyN(k(d, 0.4374550283e+0), x2, {0.5764790177e+0, 0.9618012905120});
    auto [mx, my] = dfmul2(xx, xy, k(xx, 2.8853900432586669922), k(xy, 3.2734474483568488616e-08));
    auto [sx, sy] = dfadd2(e, k(e, 0.0), mx, my);
    auto [sx2, sy2] = dfadd2(sx, sy, k(x2, 0.0), (x2 * xx) * t);
    r = sx2 + sy2;
  }
  r = d0.ne(k(d0, INFINITY)).where(r, k(r, INFINITY));
  r = d0.lt(k(d0, -0.0)).where(k(r, NAN), r);
  // log2(0) = -inf: compare with the unmasked result for 0, since tiny values compare equal to 0
  double log2_zero = is(dt, dtypes::float64) ? -1087 : is(dt, dtypes::float32) ? -191 : -79;
  r = r.ne(k(r, log2_zero)).where(r, k(r, -INFINITY));
  r = d0.lt(k(d0, INFINITY)).where(r, d0.ne(k(d0, INFINITY)).where(k(d, NAN), d));
  // log2(-0.0) = -inf, through the reciprocal since some devices do not see x == -0.0
  return d0.recip().ne(k(d0, -INFINITY)).where(r, k(r, -INFINITY));
}

}  // namespace tg
