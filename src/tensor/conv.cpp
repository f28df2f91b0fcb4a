// conv2d as one autograd Function (tinygrad's FUSE_CONV_BW idea, done in autograd rather than in
// the scheduler). The forward is tinygrad's: the padded input read through _pool's window view,
// times the weight, summed over (cin, *kernel). Differentiating that expression op by op sends the
// input gradient back through the window view: a (n, cin, *out, *kernel) tensor is materialized and
// then summed with div/mod index math (655 MB for beautiful_mnist's second conv at batch 512).
// Conv2d::backward instead emits two convolutions, each the same SUM(a*b) kernel shape as the
// forward, so the CPU's GEMM path (heuristics, B packing) handles them:
//   grad input  = conv(grad_out dilated by the stride and padded by d*(k-1), weight flipped and
//                 with in/out channels swapped per group), stride 1, the forward's dilation;
//   grad weight = SUM over (n, *out) of the input's window view times grad_out.
// A strided conv (dilation 1) takes its input gradient by phases instead (exact_phase_input_grad: one
// stride-1 conv per phase of the input, no multiply-adds against the dilation's zeros; CONV_BW_PHASES=0
// keeps the dilated one, CONV_DX_PHASE_EXACT=0 the padded input's phases, strided_input_grad).
// FUSE_CONV_BW=0 keeps the op-by-op gradient (tests compare the two).
#include <algorithm>
#include <functional>
#include <numeric>

#include "cpu_threads.hpp"
#include "tensor/function.hpp"

namespace tg {

namespace {
// The permutations from channels-first (b, c, *s) to channels-last (b, *s, c) and back, for n spatial dims.
std::pair<std::vector<int>, std::vector<int>> channel_perms(size_t n) {
  std::vector<int> to_last{0}, to_first{0, static_cast<int>(n) + 1};
  for (size_t j = 0; j < n; j++) to_last.push_back(static_cast<int>(2 + j)), to_first.push_back(static_cast<int>(1 + j));
  to_last.push_back(1);
  return {to_last, to_first};
}
}  // namespace

namespace detail {
namespace {
// The conv as an implicit GEMM over channels-last copies, for the GPU's tensor-core template (codegen/tc_gemm.cpp):
// the padded input copied once to (bs, *in, cin) and the weight to (cout, *k, cin), so that the reduce runs over
// (*k, cin) with cin contiguous in both operands: every 8 channels are one 16-byte copy, and the window view's
// rows (bs, *out) and reduce axes are plain strides of one buffer (no masks: the padding is in the copy). The
// output stays (bs, cout, *out). CONV_NHWC: 1 (default) on CUDA with fp16/bf16 operands, groups 1 and cin a
// multiple of 8; 0 off; 2 for every groups-1 conv on any device and dtype (tests compare it with the
// channels-first conv on the CPU, forward and backward).
std::optional<Tensor> conv_channels_last(const Tensor& xp, const Tensor& weight, int groups, const Shape& stride, const Shape& dilation,
                                         std::optional<DType> acc_dtype) {
  const int64_t mode = getenv("CONV_NHWC", 1), cout = weight.shape()[0], cin = weight.shape()[1];
  const DType dt = xp.dtype();
  const bool half = (dt == dtypes::half || dt == dtypes::bfloat16) && weight.dtype() == dt;
  const bool cuda = xp.device().rfind("CUDA", 0) == 0;
  if (mode == 0 || groups != 1 || (mode == 1 && !(cuda && half && cin % 8 == 0))) return std::nullopt;
  const Shape K(weight.shape().begin() + 2, weight.shape().end());
  const int n = static_cast<int>(K.size());
  const auto [to_last, to_first] = channel_perms(K.size());
  const Tensor xl = xp.permute(to_last).contiguous(), wl = weight.permute(to_last).contiguous();
  Tensor win = pool(xl.permute(to_first), K, stride, dilation, "conv2d");   // (bs, cin, *out, *k): a view of xl
  const Shape O(win.shape().begin() + 2, win.shape().begin() + 2 + n);
  std::vector<int> c_last{0};
  for (int j = 0; j < 2 * n; j++) c_last.push_back(2 + j);
  c_last.push_back(1);
  Shape xr{xp.shape()[0], 1}, xe{xp.shape()[0], cout}, wr{1, cout}, out{xp.shape()[0], cout};
  std::vector<int> red;
  xr.insert(xr.end(), O.begin(), O.end()), xr.insert(xr.end(), K.begin(), K.end()), xr.push_back(cin);
  xe.insert(xe.end(), O.begin(), O.end()), xe.insert(xe.end(), K.begin(), K.end()), xe.push_back(cin);
  wr.insert(wr.end(), n, 1), wr.insert(wr.end(), K.begin(), K.end()), wr.push_back(cin);
  out.insert(out.end(), O.begin(), O.end());
  for (int j = 0; j <= n; j++) red.push_back(-1 - j);
  const Tensor x = win.permute(c_last).reshape(xr).expand(xe);   // (bs, cout, *out, *k, cin)
  return (x * wl.reshape(wr)).sum(red, true, acc_dtype).reshape(out);
}
}  // namespace

// conv of an already padded input: (bs, groups*cin, *in) x (cout, cin, *k) -> (bs, cout, *out)
Tensor conv_pooled(const Tensor& xp, const Tensor& weight, int groups, const Shape& stride, const Shape& dilation,
                   std::optional<DType> acc_dtype, bool taps_outer) {
  if (auto c = conv_channels_last(xp, weight, groups, stride, dilation, acc_dtype)) return *c;
  const int64_t bs = xp.shape()[0], cout = weight.shape()[0], cin = weight.shape()[1];
  const Shape HW(weight.shape().begin() + 2, weight.shape().end());
  const size_t n = HW.size();
  Tensor x = pool(xp, HW, stride, dilation, "conv2d");   // (bs, groups*cin, *oyx, *HW)
  const int64_t rcout = cout / groups;
  Shape oyx(x.shape().begin() + 2, x.shape().end() - n);
  Shape r1{bs, groups, cin, 1}, e1{bs, groups, cin, rcout};
  r1.insert(r1.end(), oyx.begin(), oyx.end()), r1.insert(r1.end(), HW.begin(), HW.end());
  e1.insert(e1.end(), oyx.begin(), oyx.end()), e1.insert(e1.end(), HW.begin(), HW.end());
  std::vector<int> perm{0, 1, 3};
  for (size_t j = 0; j < n; j++) perm.push_back(static_cast<int>(4 + j));
  if (!taps_outer) perm.push_back(2);
  for (size_t j = 0; j < n; j++) perm.push_back(static_cast<int>(4 + n + j));
  if (taps_outer) perm.push_back(2);
  x = x.reshape(r1).expand(e1).permute(perm);   // (bs, groups, rcout, *oyx, cin, *HW) (taps_outer: *HW, cin)
  Shape wr{1, groups, rcout};
  wr.insert(wr.end(), n, 1);
  std::vector<int> wperm{0, 1};   // weight (cout, cin, *HW), taps_outer: (cout, *HW, cin)
  for (size_t j = 0; j < n; j++) wperm.insert(wperm.end() - (taps_outer ? 1 : 0), static_cast<int>(2 + j));
  if (taps_outer) wr.insert(wr.end(), HW.begin(), HW.end()), wr.push_back(cin);
  else wr.push_back(cin), wr.insert(wr.end(), HW.begin(), HW.end());
  std::vector<int> red;
  for (size_t j = 0; j < 1 + n; j++) red.push_back(-1 - static_cast<int>(j));
  Shape out{bs, cout};
  out.insert(out.end(), oyx.begin(), oyx.end());
  return (x * weight.permute(wperm).reshape(wr)).sum(red, true, acc_dtype).reshape(out);
}
}  // namespace detail

namespace F {
namespace {
// (batch, *out) elements per block of the weight gradient's reduce (see Conv2d::backward)
constexpr int64_t kReduceBlock = 4096;

// per spatial dim j: (left, right) padding from pad2d's order (last dim first)
std::pair<int64_t, int64_t> side_pads(const Shape& pad2d, size_t n, size_t j) {
  const size_t m = n - 1 - j;
  return {pad2d[2 * m], pad2d[2 * m + 1]};
}

// Each spatial dim of t (the last n) padded by (l, r) zeros, or cut where l or r is negative.
Tensor pad_or_cut(const Tensor& t, const std::vector<std::pair<int64_t, int64_t>>& lr) {
  const size_t nd = t.shape().size(), n = lr.size();
  std::vector<std::optional<std::pair<int64_t, int64_t>>> arg(nd);
  for (size_t j = 0; j < n; j++) arg[nd - n + j] = std::pair<int64_t, int64_t>{-lr[j].first, t.shape()[nd - n + j] + lr[j].second};
  return detail::slice_pad(t, arg);
}

// s-1 zeros between the elements of each spatial dim (a strided conv's output spread back over its input)
Tensor dilate(const Tensor& t, const Shape& s) {
  bool strided = false;
  for (int64_t v : s) strided |= v > 1;
  if (!strided) return t;
  const size_t n = s.size(), lead = t.shape().size() - n;
  Shape r(t.shape().begin(), t.shape().begin() + lead), r2 = r;
  std::vector<std::pair<int64_t, int64_t>> p(lead, {0, 0});
  std::vector<std::pair<int64_t, int64_t>> sh;
  for (size_t i = 0; i < lead; i++) sh.push_back({0, t.shape()[i]});
  for (size_t j = 0; j < n; j++) {
    const int64_t o = t.shape()[lead + j];
    r.insert(r.end(), {o, 1});
    p.insert(p.end(), {{0, 0}, {0, s[j] - 1}});
    r2.push_back(o * s[j]);
    sh.push_back({0, (o - 1) * s[j] + 1});
  }
  return t.reshape(r).pad(p).reshape(r2).shrink(sh);
}
// Calls fn(r, kr) for each phase r of a stride-s conv (0 <= r < s per dim, the last dim fastest) that
// has kernel taps: kr[j] = the taps r[j], r[j] + s[j], ... below K[j].
void for_each_phase(const Shape& K, const Shape& s, const std::function<void(const Shape&, const Shape&)>& fn) {
  const size_t n = K.size();
  Shape r(n, 0);
  for (bool more = true; more;) {
    Shape kr(n);
    bool taps = true;
    for (size_t j = 0; j < n; j++) kr[j] = (K[j] - r[j] + s[j] - 1) / s[j], taps = taps && kr[j] > 0;
    if (taps) fn(r, kr);
    more = false;
    for (size_t j = n; j-- > 0;) {
      if (++r[j] < s[j]) { more = true; break; }
      r[j] = 0;
    }
  }
}

// The kernel's taps r, r+s, r+2s, ... along each spatial dim (the last n): the sub-kernel a strided
// conv applies to the inputs at positions = r (mod s). kr[j] taps along dim j (at least one).
Tensor kernel_phase(const Tensor& w, const Shape& s, const Shape& r, const Shape& kr) {
  const size_t n = s.size(), lead = w.shape().size() - n;
  Tensor t = w;
  for (size_t j = 0; j < n; j++) {
    const int64_t k = t.shape()[lead + j], kmax = (k + s[j] - 1) / s[j];
    std::vector<std::pair<int64_t, int64_t>> p(t.shape().size(), {0, 0});
    p[lead + j] = {0, kmax * s[j] - k};
    Shape split = t.shape();
    split[lead + j] = kmax;
    split.insert(split.begin() + static_cast<int64_t>(lead + j) + 1, s[j]);
    std::vector<std::pair<int64_t, int64_t>> sh;
    for (int64_t d : split) sh.push_back({0, d});
    sh[lead + j] = {0, kr[j]};
    sh[lead + j + 1] = {r[j], r[j] + 1};
    Shape merged = t.shape();
    merged[lead + j] = kr[j];
    t = t.pad(p).reshape(split).shrink(sh).reshape(merged);
  }
  return t;
}

// len rounded up to a multiple of `round` (> 1) where that adds at most 1/frac of it, else len itself
int64_t round_up_within(int64_t len, int64_t round, int64_t frac) {
  if (round <= 1 || len % round == 0) return len;
  const int64_t up = (len / round + 1) * round;
  return up * frac <= len * (frac + 1) ? up : len;
}

// The input gradient of a strided conv (dilation 1), split by the input position's phase: the
// positions y = r (mod s) of the padded input only meet the taps k = r (mod s), so each phase is
// a stride-1 conv of grad_output itself (not dilated) with that sub-kernel, and the phases
// interleave back into dx. The multiply-adds are the useful ones: the dilated grad_output's path
// did s^n times more, all but one in s^n against its inserted zeros.
Tensor strided_input_grad(const Tensor& g, const Tensor& w, const Shape& in, const Shape& pad2d, int groups, const Shape& s) {
  const size_t n = s.size();
  const int64_t bs = g.shape()[0], cout = w.shape()[0], cin = w.shape()[1], rcout = cout / groups;
  const Shape K(w.shape().begin() + 2, w.shape().end()), O(g.shape().begin() + 2, g.shape().end());
  Shape L(n), lo(n), kmax(n);   // per dim: phase length (positions of the padded input / s), left padding, most taps
  for (size_t j = 0; j < n; j++) {
    const auto [pl, pr] = side_pads(pad2d, n, j);
    lo[j] = pl;
    L[j] = (in[j] + pl + pr + s[j] - 1) / s[j];
    kmax[j] = (K[j] + s[j] - 1) / s[j];
  }
  // The last dim's phase length rounded up to a multiple of 16 where that adds at most 1/8 (15 -> 16 for a
  // 28-wide input at stride 2): the phase convs' rows are then whole AVX-512 vectors, the register tile
  // runs along them with the input channels as its rows (one grad_output vector per 8 broadcast weights),
  // where 15-wide rows left the batch as the tile's rows, 8 images' windows read a float each
  // (resnet_s2_bw's phases: 8.1 -> 4.5 ms CPU). The extra positions read the padding's zeros and are cut
  // off with the rest. CONV_PHASE_ROUND=0 keeps the exact length.
  // (CPU only: a GPU's threads don't need whole vectors per row)
  if (g.device().rfind("CPU", 0) == 0) L[n - 1] = round_up_within(L[n - 1], getenv("CONV_PHASE_ROUND", 16), 8);
  // grad_output padded once: by the most taps less one on the left, and on the right as far as every
  // phase's window of it reaches. Each phase's conv then yields its L positions (the ones past the
  // grad's reach read zeros): an output as wide for every phase, not O + taps - 1 (an odd 11 left a
  // 1x1 phase without a vector axis, 6x slower).
  std::vector<std::pair<int64_t, int64_t>> gpad;
  for (size_t j = 0; j < n; j++) gpad.push_back({kmax[j] - 1, std::max<int64_t>(kmax[j] - 1, L[j] - O[j])});
  const Tensor gp = pad_or_cut(g, gpad).contiguous();
  std::vector<int> flips;
  for (size_t j = 0; j < n; j++) flips.push_back(static_cast<int>(2 + j));
  Shape wr{groups, rcout, cin}, wt{groups * cin, rcout};
  std::optional<Tensor> dx;
  for_each_phase(K, s, [&](const Shape& r, const Shape& kr) {
    Shape wrj = wr, wtj = wt;
    wrj.insert(wrj.end(), kr.begin(), kr.end()), wtj.insert(wtj.end(), kr.begin(), kr.end());
    const Tensor wf = kernel_phase(w, s, r, kr).reshape(wrj).transpose(1, 2).reshape(wtj).flip(flips);
    std::vector<std::optional<std::pair<int64_t, int64_t>>> win(2 + n);
    for (size_t j = 0; j < n; j++) win[2 + j] = std::pair<int64_t, int64_t>{kmax[j] - kr[j], kmax[j] - 1 + L[j]};
    Tensor part = detail::conv_pooled(detail::slice_pad(gp, win), wf, groups, Shape(n, 1), Shape(n, 1), std::nullopt);
    // (bs, groups*cin, *L), each position in a 1-long slot at its phase among s
    Shape slots{bs, groups * cin};
    std::vector<std::pair<int64_t, int64_t>> place{{0, 0}, {0, 0}};
    for (size_t j = 0; j < n; j++) slots.insert(slots.end(), {L[j], 1}), place.insert(place.end(), {{0, 0}, {r[j], s[j] - 1 - r[j]}});
    part = part.reshape(slots).pad(place);
    dx = dx ? *dx + part : part;
  });
  Shape full{bs, groups * cin};
  std::vector<std::optional<std::pair<int64_t, int64_t>>> crop(2 + n);
  for (size_t j = 0; j < n; j++) full.push_back(L[j] * s[j]), crop[2 + j] = std::pair<int64_t, int64_t>{lo[j], lo[j] + in[j]};
  TG_ASSERT(dx.has_value(), "conv backward: a strided conv with no kernel taps");
  return detail::slice_pad(dx->reshape(full), crop);
}
// One dim of exact_phase_input_grad: the input positions y = q + s*m (m < M) meet the taps k = r + s*t (t < kr)
// at grad_output's o = m + c - t, where r = (q + pl) mod s and c = (q + pl - r) / s.
struct InputPhase {
  int64_t q, M, r, kr, c, E;   // E: M rounded up for whole vectors (exact_phase_input_grad), else M
};
Shape kr_of(const std::vector<InputPhase>& p) {
  Shape kr;
  for (const InputPhase& v : p) kr.push_back(v.kr);
  return kr;
}
std::vector<InputPhase> input_phases(int64_t in, int64_t pl, int64_t s, int64_t K) {
  std::vector<InputPhase> ret;
  for (int64_t q = 0; q < s && q < in; q++) {
    const int64_t r = (q + pl) % s, M = (in - q + s - 1) / s;
    ret.push_back({q, M, r, r < K ? (K - r + s - 1) / s : 0, (q + pl) / s, M});
  }
  return ret;
}

// Every combination of one phase per dim (the last dim fastest) with taps along each dim, the last dim's extent E
// decided: a phase with one tap there (its tile runs 16-lane vectors along that dim, or its positions merge with the
// rows' into 8-position tiles) is computed M rounded up to `round` (16) where that adds at most 1/7 (14 -> 16); one
// with more taps there keeps M for heuristic.cpp contiguous_tile_rows' 7/8/10-column tile x 2 vectors of input
// channels over packed weights where `packed` (32+ input channels, a batch or phase of 32+: pack.cpp's rows) and the
// reduce is 128+ long; elsewhere that tile came out as 24 float8 accumulators, so the phase is rounded too.
std::vector<std::vector<InputPhase>> phase_combos(const std::vector<std::vector<InputPhase>>& ph, int64_t round, bool packed,
                                                  int64_t rcout) {
  const size_t n = ph.size();
  std::vector<std::vector<InputPhase>> combos;
  std::vector<size_t> at(n, 0);   // the phase index per dim
  bool more = n > 0;
  for (const auto& d : ph) more = more && !d.empty();
  while (more) {
    std::vector<InputPhase> p(n);
    bool taps = true;
    for (size_t j = 0; j < n; j++) p[j] = ph[j][at[j]], taps = taps && p[j].kr > 0;
    InputPhase& x = p[n - 1];
    const bool column_tile = packed && x.kr > 1 && rcout * prod(kr_of(p)) >= 128;
    if (!column_tile) x.E = round_up_within(x.M, round, 7);
    if (taps) combos.push_back(p);
    more = false;
    for (size_t j = n; j-- > 0;) {
      if (++at[j] < ph[j].size()) { more = true; break; }
      at[j] = 0;
    }
  }
  return combos;
}

// The input gradient of a strided conv (dilation 1) by the phases of the input itself (y = q mod s), not of the
// padded input as strided_input_grad does: each phase is then exactly ceil((in - q) / s) positions long, where the
// padded input's phases are ceil(P / s) and cover positions in the padding that the crop drops (resnet_s2_bw, 28
// wide, pad 1: 14 rows kept of 15 computed per phase), and the phases interleave into a grid of the input's size
// (its last dim rounded up to whole vectors) rather than the padded input's. resnet_s2_bw's four phase GEMMs, one
// core: 5.6-5.9 -> 3.9-4.3 ms CPU, 15-29% less in later alternated series (bench/NOTES_conv_bw.md, session 15).
// CONV_DX_PHASE_EXACT=0: strided_input_grad; CONV_PHASE_ROUND=0: no rounding.
Tensor exact_phase_input_grad(const Tensor& g, const Tensor& w, const Shape& in, const Shape& pad2d, int groups, const Shape& s) {
  const size_t n = s.size();
  const int64_t bs = g.shape()[0], cout = w.shape()[0], cin = w.shape()[1], rcout = cout / groups;
  const Shape K(w.shape().begin() + 2, w.shape().end()), O(g.shape().begin() + 2, g.shape().end());
  const int64_t round = g.device().rfind("CPU", 0) == 0 ? getenv("CONV_PHASE_ROUND", 16) : 0;
  std::vector<std::vector<InputPhase>> ph(n);
  int64_t rows = bs;   // (codegen/pack.cpp packs the weights where an output axis they are broadcast along is 32+ long)
  for (size_t j = 0; j < n; j++) {
    ph[j] = input_phases(in[j], side_pads(pad2d, n, j).first, s[j], K[j]);
    rows = std::max(rows, ph[j].empty() ? 0 : ph[j][0].M);
  }
  const bool packed = rows >= 32 && cin % 32 == 0;   // (the phases' weights packed: codegen/pack.cpp)
  const std::vector<std::vector<InputPhase>> combos = phase_combos(ph, round, packed, rcout);
  Shape shape{bs, groups * cin};
  shape.insert(shape.end(), in.begin(), in.end());
  if (combos.empty()) return Tensor::zeros(shape, {g.dtype(), g.device(), std::nullopt});   // no input position meets a tap
  // grad_output padded once, every phase's window inside it: [c - kr + 1, c + E) per dim
  std::vector<std::pair<int64_t, int64_t>> gpad(n, {0, 0});
  for (const auto& p : combos)
    for (size_t j = 0; j < n; j++)
      gpad[j] = {std::max(gpad[j].first, p[j].kr - 1 - p[j].c), std::max(gpad[j].second, p[j].E + p[j].c - O[j])};
  // On the CPU, where the weights are packed, the copy is channels-last and each phase's reduce runs its taps
  // outermost, the output channels innermost: a tile of 4 images x 2 vectors then broadcasts from each image's line
  // of consecutive channels, where from NCHW every channel and row tap was its own line (4 images x 64 channels x 2
  // rows per output position, more than a 32 KB L1 keeps between neighbouring positions). resnet_s2_bw's 4-tap phase 2.08 ->
  // 1.3-1.44 ms, its input gradient 4.4 -> 3.4 ms (Zen 3, 2 threads). Unpacked phases (16 input channels) tile
  // along a row of positions instead, which needs them contiguous. CONV_DX_PHASE_NHWC=0: NCHW.
  const bool nhwc = packed && g.device().rfind("CPU", 0) == 0 && getenv("CONV_DX_PHASE_NHWC", 1);
  const auto [to_last, to_first] = channel_perms(n);
  const Tensor gp = nhwc ? pad_or_cut(g, gpad).permute(to_last).contiguous().permute(to_first) : pad_or_cut(g, gpad).contiguous();
  std::vector<int> flips;
  for (size_t j = 0; j < n; j++) flips.push_back(static_cast<int>(2 + j));
  // the phases' slots per dim: the longest phase's M, the last dim's rounded as a 1-tap phase's E is, so the interleave
  // runs whole 16-wide rows (E_28672_16_2_2: 0.67-0.94 ms against 0.83-1.03 for 14-wide rows, one core, 5 alternated
  // rounds); dx is then a view of that wider grid, as strided_input_grad's was of the padded input's
  auto slot_len = [&](size_t j) { return j + 1 == n ? round_up_within(ph[j][0].M, round, 7) : ph[j][0].M; };
  std::optional<Tensor> dx;
  for (const auto& p : combos) {
    Shape r(n), kr(n), wrj{groups, rcout, cin}, wtj{groups * cin, rcout}, slots{bs, groups * cin};
    std::vector<std::optional<std::pair<int64_t, int64_t>>> win(2 + n), keep(2 + n);
    std::vector<std::pair<int64_t, int64_t>> place{{0, 0}, {0, 0}}, to_max;
    for (size_t j = 0; j < n; j++) {
      r[j] = p[j].r, kr[j] = p[j].kr;
      const int64_t lo = gpad[j].first + p[j].c - p[j].kr + 1, Mmax = slot_len(j);
      win[2 + j] = std::pair<int64_t, int64_t>{lo, lo + p[j].E + p[j].kr - 1};
      keep[2 + j] = std::pair<int64_t, int64_t>{0, p[j].M};   // E cut to M, then padded to the longest phase's
      to_max.push_back({0, Mmax - p[j].M});
      slots.insert(slots.end(), {Mmax, 1});
      place.insert(place.end(), {{0, 0}, {p[j].q, s[j] - 1 - p[j].q}});
    }
    wrj.insert(wrj.end(), kr.begin(), kr.end()), wtj.insert(wtj.end(), kr.begin(), kr.end());
    const Tensor wf = kernel_phase(w, s, r, kr).reshape(wrj).transpose(1, 2).reshape(wtj).flip(flips);
    Tensor part = detail::conv_pooled(detail::slice_pad(gp, win), wf, groups, Shape(n, 1), Shape(n, 1), std::nullopt, nhwc);
    // (bs, groups*cin, *E) -> M positions, padded to the longest phase's, each in a 1-long slot at q among s
    part = pad_or_cut(detail::slice_pad(part, keep), to_max).reshape(slots).pad(place);
    dx = dx ? *dx + part : part;
  }
  Shape full{bs, groups * cin};
  std::vector<std::optional<std::pair<int64_t, int64_t>>> crop(2 + n);
  for (size_t j = 0; j < n; j++) full.push_back(slot_len(j) * s[j]), crop[2 + j] = std::pair<int64_t, int64_t>{0, in[j]};
  return detail::slice_pad(dx->reshape(full), crop);
}

// output channels per panel of the CPU GEMM's packed B operand (codegen/pack.cpp)
constexpr int64_t kPanel = 32;

// Whether a stride-1 undilated conv's input gradient reads grad_output's k-1 padding as a view (its gates,
// 0 <= y + ky - (k-1) < O per dim, then narrow the reduce's tap loops to the valid taps: codegen/narrow_reduce.hpp)
// rather than as a padded copy (every tap multiplied, the padding's zeros included: conv2d_bw's 24x24 from
// 20x20 did 1.44x the useful multiply-adds). The masks change the heuristics' view of the kernel, so only
// where the CPU GEMM path still packs the weights and tiles 8 images x 2 vectors of input channels
// (codegen/pack.cpp's conditions: fp32, an output axis of 32 or more the weights are broadcast along, a
// K x 32 panel in half a 512 KB L2, input channels in whole 16-lane vectors); elsewhere the tile got worse
// (8 input channels, or 8 images: 5-25x slower). Also not where the input's rows are whole vectors (the tile
// runs along the padded copy's rows there, which gates along the row forbid: a 3x3 on 16x16 2x slower), nor
// where a spatial dim is 7 or less (heuristic.cpp upcasts such a masked axis whole: a 7x register tile).
// CONV_DX_NARROW=0 keeps the padded copy.
bool narrow_input_grad(const Tensor& x, const Tensor& g, const Tensor& w, int groups) {
  if (g.device().rfind("CPU", 0) != 0 || g.dtype() != dtypes::float32 || groups != 1 || !getenv("CONV_DX_NARROW", 1)) return false;
  constexpr int64_t kLanes = 16, kRows = 32, kL2 = 512 * 1024;
  const int64_t bs = x.shape()[0], cin = x.shape()[1], cout = w.shape()[0];
  int64_t taps = 1, rows = bs, work = bs * cin * cout;
  for (size_t j = 2; j < w.shape().size(); j++) taps *= w.shape()[j];
  for (size_t j = 2; j < x.shape().size(); j++) {
    if (x.shape()[j] <= 7) return false;
    rows = std::max(rows, x.shape()[j]), work *= x.shape()[j] * w.shape()[j];
  }
  return cin % kLanes == 0 && x.shape().back() % kLanes != 0 && rows >= kRows && cout * taps * kPanel * 4 <= kL2 / 2 &&
         work >= (int64_t{1} << 21);
}

// Where the input gradient's rows are a multiple of 8 or 10 wide, grad_output's last dim is padded in its
// copy and only the other dims read as a view: the CPU heuristics then tile 8 or 10 of dx's columns x 2 vectors
// of input channels (heuristic.cpp contiguous_tile_rows, whose row counts these are: every broadcast of a reduce
// step from one row of one image), where the column gates allowed only 8 images as the rows; the row taps are
// still narrowed. It multiplies the
// padding's zeros along the rows only: conv2d_bw's (24 wide from 20) 1.2x the useful multiply-adds, not 1.44x.
// Rows of 28 and more that are a multiple of the tile's other column counts qualify too: 7 with AVX-512, 4 below it
// (16 vector registers: tiles of 5 or 4 columns). A ResNet 3x3's 28-wide input gradient (bench_kernels conv_dx
// 32,64,28,28,64,3,1), 2 threads, medians of 3 rounds alternated: 102 -> 145 GFLOPS on a Zen 3 (AVX2), 137 -> 156 on
// the device host's Xeon (AVX-512), where 8 images x 2 vectors of channels each broadcast from its own image. Not
// narrower rows: 14-wide (32,128,14,14,128,3,1) on the Xeon went 188 -> 159 (there the padding's zeros add 1/7 to the
// multiply-adds).
// CONV_DX_COLUMNS=0: every dim a view.
bool padded_columns(int64_t width, size_t n) {
  if (n < 2 || !getenv("CONV_DX_COLUMNS", 1)) return false;
  return width % 8 == 0 || width % 10 == 0 || (width >= 28 && width % (cpu_register_bytes() >= 64 ? 7 : 4) == 0);
}

// lr with only the last dim's pair (last) or every pair but the last (!last); the others (0, 0)
std::vector<std::pair<int64_t, int64_t>> only_last(std::vector<std::pair<int64_t, int64_t>> lr, bool last) {
  for (size_t j = 0; j < lr.size(); j++)
    if ((j + 1 == lr.size()) != last) lr[j] = {0, 0};
  return lr;
}

// The narrowed input gradient of a 2D+ conv with dx's columns split at the taps: the interior columns, where
// every tap meets grad_output (I = O - k + 1 of them), are a valid conv of grad_output with no column padding
// and run the register tile of 8 or 10 columns x 2 vectors of input channels (heuristic.cpp contiguous_tile_rows);
// the Ll and Lr border columns on either side read grad_output's first or last k-1 columns, with the padding as a
// view, so their column taps narrow to the valid ones (codegen/narrow_reduce.cpp). A border's rows are padded in a
// small copy whose last two dims are swapped (rows contiguous), so its tile runs along 8 or 10 of dx's rows (their
// padding's zeros are multiplied there, the rows' 1.2x on 1/6 of the work: conv2's dx does 1.04x the useful
// multiply-adds where the padded columns did 1.2x, and the 512x32x20x28 padded copy goes). Each piece is
// realized on its own (unrealized, the scheduler fuses the three reduces into one kernel); they add up into dx in
// one elementwise pass, which fuses with dx's consumer (the previous layer's relu backward, which the single kernel
// had in its epilogue). Off by default (CONV_DX_SPLIT=1 turns it on): in the training step at 2 threads the borders (24 ms:
// ~0.8x the interior's rate on 30% of its work), the border copy (6 ms) and the sum (8 ms) cost more than the padded
// columns' zeros and copy they replace (~18 ms): conv2's dx 105 ms against 91 (bench/NOTES_conv_bw.md, session 13).
// Off: one kernel over padded columns (padded_columns).
std::optional<Tensor> split_columns_input_grad(const Tensor& g, const Tensor& wf, const std::vector<std::pair<int64_t, int64_t>>& lr,
                                               int64_t dx_rows) {
  const size_t n = lr.size();
  const int nd = static_cast<int>(g.shape().size());
  const int64_t O = g.shape().back(), k = wf.shape().back(), I = O - k + 1;
  const auto [Ll, Lr] = lr.back();
  auto tiles = [](int64_t v) { return v >= 8 && (v % 8 == 0 || v % 10 == 0); };
  if (n < 2 || !getenv("CONV_DX_SPLIT", 0) || Ll < 0 || Lr < 0 || Ll + Lr == 0 || !tiles(I) || !tiles(dx_rows)) return std::nullopt;
  // (taps_outer for the borders: their narrowed column-tap loop outermost in the reduce, the 32 channels innermost,
  // where a 1-4 long tap loop inside the channels' ran the borders at ~0.6x the interior's rate: 12 vs 17 ms per border)
  auto conv = [&](const Tensor& gv, const Tensor& w, bool taps_outer = false) {
    return detail::conv_pooled(gv, w, 1, Shape(n, 1), Shape(n, 1), std::nullopt, taps_outer);
  };
  // The borders read grad_output's first and last k-1 columns: both (those with a border) in one copy, the rows
  // padded (as lr says) and the last two dims swapped, (.., sides * (k-1), rows): a border's tile then runs along 8 or
  // 10 of dx's rows, each broadcast a neighbouring float. A border's conv reads its side of the copy with the columns
  // padded by (l, r) as a view and writes dx's border columns as (.., cols, rows): the sum below reads that view.
  const Tensor rows = pad_or_cut(g, only_last(lr, false));
  std::vector<std::pair<int64_t, int64_t>> sides;   // grad_output's columns of each border: [0, k-1) left, [I, O) right
  if (Ll > 0) sides.push_back({0, k - 1});
  if (Lr > 0) sides.push_back({I, O});
  const int64_t m = static_cast<int64_t>(sides.size()) * (k - 1);
  std::optional<Tensor> edges;
  for (size_t i = 0; i < sides.size(); i++) {
    std::vector<std::pair<int64_t, int64_t>> cut(n, {0, 0}), at(n, {0, 0});   // side i's columns at [i*(k-1), (i+1)*(k-1)) of m
    cut.back() = {-sides[i].first, sides[i].second - O};
    at.back() = {static_cast<int64_t>(i) * (k - 1), m - static_cast<int64_t>(i + 1) * (k - 1)};
    const Tensor e = pad_or_cut(pad_or_cut(rows, cut), at);
    edges = edges ? *edges + e : e;
  }
  const Tensor gt = edges->transpose(nd - 1, nd - 2).contiguous();
  auto border = [&](size_t i, int64_t l, int64_t r) {
    std::vector<std::pair<int64_t, int64_t>> cols(n, {0, 0});
    cols[n - 2] = {l - static_cast<int64_t>(i) * (k - 1), r - (m - static_cast<int64_t>(i + 1) * (k - 1))};
    return conv(pad_or_cut(gt, cols), wf.transpose(nd - 1, nd - 2), true).contiguous().transpose(nd - 1, nd - 2);
  };
  std::vector<std::pair<int64_t, int64_t>> place(n, {0, 0});
  place.back() = {Ll, Lr};
  Tensor dx = pad_or_cut(conv(rows, wf).contiguous(), place);
  if (Ll > 0) place.back() = {0, I + Lr}, dx = dx + pad_or_cut(border(0, Ll, 0), place);
  if (Lr > 0) place.back() = {Ll + I, 0}, dx = dx + pad_or_cut(border(Ll > 0 ? 1 : 0, 0, Lr), place);
  return dx;
}

// dw[co, ci, k] = sum_{b, o} g[b, co, o] * x_pad[b, ci, o*s + k*d] (xp: the padded input), as a GEMM
// with co the unit-stride output axis (a GEMM's N: grad_output is its B operand, read one co panel at a
// time) and the reduce over the batch cut into blocks of about kReduceBlock (b, *o) elements whose
// partial sums add up in a second small kernel: one block's B panel then stays in cache.
// grad_output (bs, groups*rcout, *o) copied once as panels of kPanel output channels, (groups, rcout/kPanel,
// bs, *o, kPanel): the layout the CPU GEMM packs its B operand into (codegen/pack.cpp), so the weight
// gradients of a strided conv's phases, which all read the same grad_output, share one copy instead of
// packing it once each (resnet_s2_bw: 4 x 0.17 ms).
std::optional<Tensor> panel_copy(const Tensor& g, int groups) {
  const int64_t rcout = g.shape()[1] / groups;
  if (g.device().rfind("CPU", 0) != 0 || rcout % kPanel != 0 || !getenv("CONV_DW_PANEL", 1)) return std::nullopt;
  const size_t n = g.shape().size() - 2;
  Shape split{g.shape()[0], groups, rcout / kPanel, kPanel};
  split.insert(split.end(), g.shape().begin() + 2, g.shape().end());
  std::vector<int> perm{1, 2, 0};
  for (size_t j = 0; j < n; j++) perm.push_back(static_cast<int>(4 + j));
  perm.push_back(3);
  return g.reshape(split).permute(perm).contiguous();
}

// g: grad_output (bs, cout, *o), or its panel_copy when panel is set
Tensor weight_grad(const Tensor& x_pad, const Tensor& g, const Shape& K, const Shape& s, const Shape& d, int groups, int64_t cout,
                   bool panel = false) {
  // x in grad_output's dtype before the window view (an integer input: beautiful_mnist's uint8 images). Cast
  // after it, the cast is an elementwise of the expanded window's shape, which the scheduler realizes whole
  // (E_2560_576_5: 29 MB for conv1), and the GEMM then reads that copy instead of the window view.
  const Tensor xp = x_pad.cast(g.dtype());
  const size_t n = K.size();
  const int64_t bs = xp.shape()[0], cin = xp.shape()[1] / groups, rcout = cout / groups;
  const Shape O = panel ? Shape(g.shape().begin() + 3, g.shape().end() - 1) : Shape(g.shape().begin() + 2, g.shape().end());
  int64_t per_image = 1;
  for (int64_t v : O) per_image *= v;
  // images per block: the largest divisor of bs within the budget that leaves a block per CPU thread (the blocks are
  // the kernel's first loop, the only one that runs on threads: 8 blocks of a 6x6 conv left 8 of 16 threads idle)
  const bool cpu = g.device().rfind("CPU", 0) == 0;
  const int64_t min_blocks = cpu ? cpu_threads() : 1;
  // (on the CPU a block's grad_output, every output channel, fits half the L2: the kernel's tiles run through the
  // channel panels innermost, so a block larger than the L2 streamed from L3 for every tile: resnet_s2_bw's 16
  // images x 196 positions x 64 channels, 800 KB on a 512 KB L2, took 1.5-1.7 ms in its 4-tap phase against 1.25-1.33
  // in blocks of 4 or 8 images)
  const int64_t budget = cpu ? std::min(kReduceBlock, cpu_caches().l2 / 2 / (rcout * g.dtype().itemsize())) : kReduceBlock;
  int64_t blk = 1;
  for (int64_t b = 1; b <= bs; b++)
    if (bs % b == 0 && b * per_image <= budget && bs / b >= min_blocks) blk = b;
  const int64_t nb = bs / blk;
  Tensor xw = detail::pool(xp, K, s, d, "conv2d");   // (bs, groups*cin, *o, *k)
  // both as (nb, blk, groups, cin, *o, *k, rcout), reduced over blk and *o
  Shape xr{nb, blk, groups, cin}, gr{nb, blk, groups, 1};
  xr.insert(xr.end(), O.begin(), O.end()), xr.insert(xr.end(), K.begin(), K.end()), xr.push_back(1);
  gr.insert(gr.end(), O.begin(), O.end()), gr.insert(gr.end(), n, 1), gr.push_back(rcout);
  std::vector<int> glast{0, 1, 2};   // (nb, blk, groups, rcout, *o) -> (nb, blk, groups, *o, rcout)
  for (size_t j = 0; j < n; j++) glast.push_back(static_cast<int>(4 + j));
  glast.push_back(3);
  Shape gsplit{nb, blk, groups, rcout};
  gsplit.insert(gsplit.end(), O.begin(), O.end());
  std::vector<int> red{1};
  for (size_t j = 0; j < n; j++) red.push_back(static_cast<int>(4 + j));
  Tensor gb = g.reshape(gsplit).permute(glast).reshape(gr), xb = xw.reshape(xr);
  if (panel) {
    // the panels as a last pair of axes (rcout/kPanel, kPanel): (groups, np, bs, *o, P) -> (bs, groups, *o, np, P)
    std::vector<int> bfirst{2, 0};
    for (size_t j = 0; j < n; j++) bfirst.push_back(static_cast<int>(3 + j));
    bfirst.insert(bfirst.end(), {1, static_cast<int>(3 + n)});
    Shape gp = gr, xq = xr;
    gp.back() = rcout / kPanel, gp.push_back(kPanel), xq.push_back(1);
    gb = g.permute(bfirst).reshape(gp), xb = xw.reshape(xq);
  }
  Tensor part = (xb * gb).sum(red);   // (nb, groups, cin, *k, rcout) (panels: rcout as (np, P))
  if (panel) {
    Shape merged = part.shape();
    merged.pop_back(), merged.back() = rcout;
    part = part.reshape(merged);
  }
  std::vector<int> co_first{0, static_cast<int>(2 + n), 1};   // (groups, cin, *k, rcout) -> (groups, rcout, cin, *k)
  for (size_t j = 0; j < n; j++) co_first.push_back(static_cast<int>(2 + j));
  Shape out{cout, cin};
  out.insert(out.end(), K.begin(), K.end());
  return part.sum(0).permute(co_first).reshape(out);
}

// The weight gradient of a stride-1 2D conv as a 1D one over flattened rows: with x's rows shifted by
// each kx into their own copy xs[kx][b, c, Y, ox] = x_pad[b, c, Y, ox + kx] (rows O_x long), the window
// of tap (ky, kx) at output m = oy*O_x + ox is xs[kx][m + ky*O_x]: a 1D conv over the K_x-times wider
// input with K_y taps dilated by O_x, whose reduce runs over m, contiguous in grad_output and in xs.
// Where grad_output's channels give no vector axis (a few input channels: beautiful_mnist's conv1) the
// reduce's vectors then span O_y*O_x (full-width AVX-512 vectors) instead of one O_x row (24: float8).
// The copies cost K_x times x's bytes, little against the GEMM when cin * K is small.
// xs[b, c*Kx + kx, Y*Ox + ox] = x_pad[b, c, Y, ox + kx]: the copy (bs, C*Kx, Py*Ox), in dtype dt
Tensor row_shifted(const Tensor& xp, int64_t Kx, DType dt) {
  const int64_t bs = xp.shape()[0], C = xp.shape()[1], Py = xp.shape()[2], Ox = xp.shape()[3] - Kx + 1;
  return detail::pool(xp, Shape{Kx}, Shape{1}, Shape{1}, "conv2d")   // (bs, C, Py, Ox, Kx)
      .permute({0, 1, 4, 2, 3})
      .cast(dt)   // in the copy (see weight_grad)
      .contiguous()
      .reshape({bs, C * Kx, Py * Ox});
}

// xs: row_shifted(xp) in grad_output's dtype (the forward's copy where it took one, else made here)
Tensor row_shifted_weight_grad(const Tensor& xp, const std::optional<Tensor>& xs_fw, const Tensor& g, const Shape& K, int groups, int64_t cout) {
  const int64_t bs = xp.shape()[0], C = xp.shape()[1], Oy = g.shape()[2], Ox = g.shape()[3];
  const Tensor xs = xs_fw && xs_fw->dtype() == g.dtype() ? *xs_fw : row_shifted(xp, K[1], g.dtype());
  const Tensor dw = weight_grad(xs, g.reshape({bs, cout, Oy * Ox}), Shape{K[0]}, Shape{1}, Shape{Ox}, groups, cout);   // (cout, cin*Kx, Ky)
  return dw.reshape({cout, C / groups, K[1], K[0]}).permute({0, 1, 3, 2});
}

// The 2D stride-1 weight gradients that take row_shifted_weight_grad: cin * K at most kRowShiftMax (the
// GEMM's M, too short for the output-channel vectors to pay for grad_output's packing)
constexpr int64_t kRowShiftMax = 64;
bool row_shift_fits(const Shape& K, const Shape& s, const Shape& d, int64_t cin) {
  if (K.size() != 2 || !getenv("CONV_DW_ROWS", 1)) return false;
  return s[0] == 1 && s[1] == 1 && d[0] == 1 && d[1] == 1 && cin * K[0] * K[1] <= kRowShiftMax;
}

// The forward of such a conv over the same copy, on the CPU where the output rows aren't whole 16-lane vectors
// (beautiful_mnist's conv1: 24 wide, fp32 or uint8 images): out[b, co, m] = sum over (c, kx, ky) of w[co, c, ky, kx]
// * xs[b, c*Kx + kx, m + ky*Ox], a 1D conv over the flattened output (m = oy*Ox + ox) with Ky taps dilated by Ox.
// Its vectors then span the Oy*Ox positions (36 full vectors for conv1) where a 24-wide row gave 3 of 8 lanes, and
// the weight gradient reads the same copy (the backward's copy and its cast are gone). CONV_FW_ROWS=0: the plain conv.
bool row_shift_forward(const Tensor& x, const Shape& K, const ConvArgs& a) {
  const int64_t cin = x.shape()[1] / a.groups;
  if (x.device().rfind("CPU", 0) != 0 || !row_shift_fits(K, a.stride, a.dilation, cin) || !getenv("CONV_FW_ROWS", 1)) return false;
  const int64_t Ox = x.shape()[3] + a.pad[0] + a.pad[1] - K[1] + 1;   // (pad2d's order: the last dim's pair first)
  return Ox % 16 != 0 && !a.acc_dtype;
}

// A CPU forward whose last dim is padded, read at stride 1, and whose output width is a multiple of 10, 8 or 7 (the
// rows of heuristic.cpp contiguous_tile_rows' register tile, which wants the columns unmasked): the input is copied with
// only its columns padded and the other dims padded as a view. The tile then runs along 7-10 output columns x 2 vectors
// of output channels, a reduce step's broadcasts from one or two lines of one image, and the rows' gates narrow the row
// taps (codegen/narrow_reduce.cpp). With every dim a view, the column gates left 8 images as the rows, each broadcast
// from its own image (its own line), and each output position's 256 scattered stores on 256 lines. resnet_fw
// (32x64x28x28, 3x3 pad 1): the GEMM's CPU time 20.6-31 -> 13.2-16.5 ms plus the copy's 1.2-2 ms (loaded VM;
// bench/NOTES_conv_bw.md, session 14). The copy is an input-sized buffer more. CONV_FW_COLUMNS=0: every dim a view.
bool pads_columns_forward(const Tensor& x, const Shape& K, const ConvArgs& a) {
  const size_t n = K.size();
  const int64_t cin = x.shape()[1] / a.groups, W = x.shape().back();
  const auto [pl, pr] = side_pads(a.pad, n, n - 1);
  if (x.device().rfind("CPU", 0) != 0 || !x.dtype().is_float() || a.acc_dtype || !getenv("CONV_FW_COLUMNS", 1)) return false;
  if ((pl == 0 && pr == 0) || a.stride[n - 1] != 1 || a.dilation[n - 1] != 1) return false;
  int64_t taps = 1;
  for (int64_t k : K) taps *= k;
  const int64_t Ox = W + pl + pr - K[n - 1] + 1;
  // (a long reduce: the GEMM-like tile; shorter ones are unrolled whole)
  return cin * taps >= 64 && Ox > 0 && (Ox % 10 == 0 || Ox % 8 == 0 || Ox % 7 == 0);
}

// pads_columns_forward's copy: x with its last dim padded by (pl, pr), as a view of a copy whose padding is rounded
// up to whole groups of 4 on both sides. Every 4 columns of the copy are then all zeros or all of x, so the copy runs
// as one float4 load (under one gate) and store per group (the CPU heuristics' last-axis upcast by 4, the vectorizer's
// gated vector loads); padded exactly (28 + 1 + 1 = 30 columns) it ran scalar, one gate per column. resnet_fw's copy,
// bench_kernels, CPU ms: 1.2-2.4 -> 0.57-0.85 (1 and 2 threads, 10 rounds alternated; bench/NOTES_conv_dw.md, session
// 15). The copy is up to 6 columns wider (36 for 30). CONV_FW_ALIGNED_COPY=0: the exact padding.
Tensor aligned_column_copy(const Tensor& x, std::pair<int64_t, int64_t> pads) {
  const size_t n = x.shape().size() - 2;
  auto last = [n](std::pair<int64_t, int64_t> p) { return only_last(std::vector<std::pair<int64_t, int64_t>>(n, p), true); };
  if (!getenv("CONV_FW_ALIGNED_COPY", 1)) return pad_or_cut(x, last(pads)).contiguous();
  const int64_t W = x.shape().back(), l4 = (pads.first + 3) / 4 * 4, width = (l4 + W + pads.second + 3) / 4 * 4;
  const Tensor copy = pad_or_cut(x, last({l4, width - l4 - W})).contiguous();
  return pad_or_cut(copy, last({pads.first - l4, pads.second - (width - l4 - W)}));
}

// The weight gradient of a strided conv (dilation 1) by phases: the taps k = r (mod s) only read the
// padded input at positions = r (mod s), so each phase is a stride-1 weight gradient over that
// phase's subsampled input (copied once, 1/s^n of x) with those taps; the taps interleave back.
// The strided windows' loads (a gather per vector) were 4-5x slower than the GEMM path.
Tensor strided_weight_grad(const Tensor& xp, const Tensor& g, const Shape& K, const Shape& s, int groups, int64_t cout) {
  const size_t n = K.size();
  const Shape O(g.shape().begin() + 2, g.shape().end()), P(xp.shape().begin() + 2, xp.shape().end());
  Shape kmax(n);
  for (size_t j = 0; j < n; j++) kmax[j] = (K[j] + s[j] - 1) / s[j];
  // the padded input split by phase once, one copy: (*s, bs, c, *L), L = ceil(P / s) positions per phase
  Shape L(n), split{xp.shape()[0], xp.shape()[1]};
  std::vector<std::pair<int64_t, int64_t>> to_whole;
  std::vector<int> phase_first;
  for (size_t j = 0; j < n; j++) {
    L[j] = (P[j] + s[j] - 1) / s[j];
    to_whole.push_back({0, L[j] * s[j] - P[j]});
    split.insert(split.end(), {L[j], s[j]});
    phase_first.push_back(static_cast<int>(3 + 2 * j));
  }
  phase_first.insert(phase_first.end(), {0, 1});
  for (size_t j = 0; j < n; j++) phase_first.push_back(static_cast<int>(2 + 2 * j));
  const Tensor xs = pad_or_cut(xp, to_whole).reshape(split).permute(phase_first).cast(g.dtype()).contiguous();   // see weight_grad
  const std::optional<Tensor> gpanel = panel_copy(g, groups);
  std::optional<Tensor> dw;
  for_each_phase(K, s, [&](const Shape& r, const Shape& kr) {
    // x_r[y] = xp[y*s + r] for the O + kr - 1 positions the phase's windows read: a view of xs
    std::vector<std::optional<std::pair<int64_t, int64_t>>> win(n + 2 + n);
    for (size_t j = 0; j < n; j++) {
      win[j] = std::pair<int64_t, int64_t>{r[j], r[j] + 1};
      win[n + 2 + j] = std::pair<int64_t, int64_t>{0, O[j] + kr[j] - 1};
    }
    Shape xshape{xp.shape()[0], xp.shape()[1]};
    for (size_t j = 0; j < n; j++) xshape.push_back(O[j] + kr[j] - 1);
    const Tensor xr = detail::slice_pad(xs, win).reshape(xshape);
    Tensor part = weight_grad(xr, gpanel ? *gpanel : g, kr, Shape(n, 1), Shape(n, 1), groups, cout, gpanel.has_value());   // (cout, cin, *kr)
    // tap j of the phase is tap r + s*j: kr -> kmax taps, each in a 1-long slot at r among s
    Shape slots{part.shape()[0], part.shape()[1]};
    std::vector<std::pair<int64_t, int64_t>> fill{{0, 0}, {0, 0}}, place{{0, 0}, {0, 0}};
    for (size_t j = 0; j < n; j++) {
      fill.push_back({0, kmax[j] - kr[j]});
      slots.insert(slots.end(), {kmax[j], 1});
      place.insert(place.end(), {{0, 0}, {r[j], s[j] - 1 - r[j]}});
    }
    part = part.pad(fill).reshape(slots).pad(place);
    dw = dw ? *dw + part : part;
  });
  TG_ASSERT(dw.has_value(), "conv backward: a strided conv with no kernel taps");
  Shape full{dw->shape()[0], dw->shape()[1]};
  std::vector<std::optional<std::pair<int64_t, int64_t>>> crop(2 + n);
  for (size_t j = 0; j < n; j++) full.push_back(kmax[j] * s[j]), crop[2 + j] = std::pair<int64_t, int64_t>{0, K[j]};
  return detail::slice_pad(dw->reshape(full), crop);
}

// The weight gradient of a strided conv (dilation 1) on the CPU where grad_output takes the panel copy (32 output
// channels per group): one GEMM over the padded input's strided window view, every tap in one kernel. Its loads are
// gated on the padding (the taps whose windows reach into it multiply those zeros: 42 x 42 (tap, output) pairs per dim
// pair for resnet_s2_bw's 3x3 stride 2 pad 1 on 28x28, as strided_weight_grad's phases), but it reads x once, with no
// copy: the phases first copied x split by phase (0.6-0.9 ms of resnet_s2_bw's ~9 ms on one core) and then read it in
// four kernels. A C model of resnet_s2_bw's weight gradient (one core, x out of cache each round, min / median of 41
// rounds): 3.58-3.65 / 3.78-3.86 ms against 4.43-4.55 / 4.72-4.85 for the phases with their copy, and 4.06-4.15 /
// 4.40-4.41 for four kernels over x's strided views by taps reading the same outputs, ungated (bench/NOTES_conv_bw.md,
// session 16). Not where the GEMM's tile rows can't be 4 or 8 input channels and a phase has 3+ taps along the last
// dim: there the phases' GEMMs tile kernel columns (heuristic.cpp kernel_column_rows) and the one GEMM took 3 channels
// x 2 vectors (a ResNet stem, 3 channels 7x7 stride 2: 10-15 ms against 6-10 ms, one core). Nor where grad_output's
// panel (32 channels x every image's output positions, the GEMM's K) overflows half the L2: resnet_s2_bw's 784 KB on a
// Zen 3's 512 KB L2 streamed from L3 for every row tile (the whole backward 58-61 GFLOPS against 94-95 by phases, whose
// GEMMs take one phase's positions at a time; bench/NOTES_cpu_avx2.md). CONV_DW_STRIDED_PANEL=0: strided_weight_grad.
std::optional<Tensor> strided_panel_weight_grad(const Tensor& xp, const Tensor& g, const Shape& K, const Shape& s, int groups, int64_t cout) {
  if (g.device().rfind("CPU", 0) != 0 || !getenv("CONV_DW_STRIDED_PANEL", 1)) return std::nullopt;
  if (xp.shape()[1] / groups % 4 != 0 && (K.back() + s.back() - 1) / s.back() > 2) return std::nullopt;
  const int64_t positions = prod(g.shape()) / g.shape()[1];   // (every image's output positions)
  if (kPanel * positions * 4 > cpu_caches().l2 / 2) return std::nullopt;
  const std::optional<Tensor> gpanel = panel_copy(g, groups);
  if (!gpanel) return std::nullopt;
  return weight_grad(xp, *gpanel, K, s, Shape(K.size(), 1), groups, cout, true);
}
}  // namespace

LazyBufferPtr Conv2d::forward(const LBs& x, const ConvArgs& args) {
  x_ = x[0], w_ = x[1], args_ = args;
  Tensor xt = detail::make_tensor(x_, false), wt = detail::make_tensor(w_, false);
  const Shape K(wt.shape().begin() + 2, wt.shape().end());
  if (row_shift_forward(xt, K, args)) {
    // (the product's dtype: a uint8 image times float weights is float, as conv_pooled's multiply promotes it)
    const Tensor xp = xt.pad2d(args.pad), xs = row_shifted(xp, K[1], least_upper_dtype(xt.dtype(), wt.dtype()));
    xs_ = detail::lb(xs);
    const int64_t cout = wt.shape()[0], cin = wt.shape()[1], Oy = xp.shape()[2] - K[0] + 1, Ox = xp.shape()[3] - K[1] + 1;
    const Tensor w1 = wt.permute({0, 1, 3, 2}).reshape({cout, cin * K[1], K[0]});   // (cout, cin*Kx, Ky)
    const Tensor out = detail::conv_pooled(xs, w1, args.groups, Shape{1}, Shape{Ox}, std::nullopt);
    return detail::lb(out.reshape({xt.shape()[0], cout, Oy, Ox}));
  }
  if (pads_columns_forward(xt, K, args)) {
    std::vector<std::pair<int64_t, int64_t>> lr;
    for (size_t j = 0; j < K.size(); j++) lr.push_back(side_pads(args.pad, K.size(), j));
    const Tensor xp = pad_or_cut(aligned_column_copy(xt, lr.back()), only_last(lr, false));
    return detail::lb(detail::conv_pooled(xp, wt, args.groups, args.stride, args.dilation, std::nullopt));
  }
  return detail::lb(detail::conv_pooled(xt.pad2d(args.pad), wt, args.groups, args.stride, args.dilation, args.acc_dtype));
}

LBs Conv2d::backward(const LazyBufferPtr& grad) {
  const Tensor g = detail::make_tensor(grad, false), x = detail::make_tensor(x_, false), w = detail::make_tensor(w_, false);
  const int groups = args_.groups;
  const int64_t cout = w.shape()[0], cin = w.shape()[1], rcout = cout / groups;
  const Shape K(w.shape().begin() + 2, w.shape().end());
  const size_t n = K.size();
  const Shape& s = args_.stride;
  const Shape& d = args_.dilation;
  LazyBufferPtr dx, dw;
  bool strided = false, dilated = false;
  for (size_t j = 0; j < n; j++) strided |= s[j] > 1, dilated |= d[j] > 1;
  if (needs_input_grad[0] && strided && !dilated && getenv("CONV_BW_PHASES", 1)) {
    const Shape in(x.shape().begin() + 2, x.shape().end());
    dx = detail::lb(getenv("CONV_DX_PHASE_EXACT", 1) ? exact_phase_input_grad(g, w, in, args_.pad, groups, s)
                                                     : strided_input_grad(g, w, in, args_.pad, groups, s));
  } else if (needs_input_grad[0]) {
    // dx_pad[y] = sum_k g_dilated[y - k*d] * w[k]: with the kernel flipped, a stride-1 conv of g_dilated
    // padded by d*(k-1) on both sides. The forward's padding (and the rows past the last window a
    // stride leaves unread) move into that padding, so the conv's output is dx itself.
    std::vector<std::pair<int64_t, int64_t>> lr;
    for (size_t j = 0; j < n; j++) {
      const auto [pl, pr] = side_pads(args_.pad, n, j);
      const int64_t in = x.shape()[2 + j], P = in + pl + pr, o = g.shape()[2 + j];
      const int64_t used = (o - 1) * s[j] + d[j] * (K[j] - 1) + 1, span = d[j] * (K[j] - 1);
      lr.push_back({span - pl, span + (P - used) - pr});
    }
    // realized on its own: grad_output is usually an unrealized elementwise (the next layer's relu or
    // batchnorm backward) that would otherwise be recomputed, through the padding's gates, in every
    // multiply-add; as a buffer the conv is a plain SUM(a*b) whose weight operand the CPU packs.
    // Where narrow_input_grad holds, grad_output is realized unpadded and the padding read as a view instead.
    const bool narrow = !strided && !dilated && narrow_input_grad(x, g, w, groups);
    Shape wr{groups, rcout, cin}, wt{groups * cin, rcout};
    wr.insert(wr.end(), K.begin(), K.end()), wt.insert(wt.end(), K.begin(), K.end());
    std::vector<int> flips;
    for (size_t j = 0; j < n; j++) flips.push_back(static_cast<int>(2 + j));
    Tensor wf = w.reshape(wr).transpose(1, 2).reshape(wt).flip(flips);   // (groups*cin, rcout, *k), kernel flipped
    // (narrow: groups 1)
    if (auto split = narrow ? split_columns_input_grad(g.contiguous(), wf, lr, x.shape()[x.shape().size() - 2]) : std::nullopt) {
      dx = detail::lb(*split);
    } else {
      const Tensor gp = !narrow                                ? pad_or_cut(dilate(g, s), lr).contiguous()
                        : padded_columns(x.shape().back(), n) ? pad_or_cut(pad_or_cut(g, only_last(lr, true)).contiguous(), only_last(lr, false))
                                                              : pad_or_cut(g.contiguous(), lr);
      dx = detail::lb(detail::conv_pooled(gp, wf, groups, Shape(n, 1), d, std::nullopt));
    }
  }
  if (needs_input_grad[1]) {
    const Tensor xp = x.pad2d(args_.pad);
    const std::optional<Tensor> xs = xs_ ? std::optional<Tensor>(detail::make_tensor(xs_, false)) : std::nullopt;
    const bool phases = strided && !dilated && getenv("CONV_BW_PHASES", 1);
    const std::optional<Tensor> panel = phases ? strided_panel_weight_grad(xp, g, K, s, groups, cout) : std::nullopt;
    dw = detail::lb(panel    ? *panel
                    : phases ? strided_weight_grad(xp, g, K, s, groups, cout)
                    : row_shift_fits(K, s, d, cin)                     ? row_shifted_weight_grad(xp, xs, g, K, groups, cout)
                                                                       : weight_grad(xp, g, K, s, d, groups, cout));
  }
  return {dx, dw};
}

}  // namespace F
}  // namespace tg
