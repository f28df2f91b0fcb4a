// hand_coded_optimizations (tinygrad 0.9.2 Kernel.hand_coded_optimizations): the default opts when
// BEAM is off. Matvec grouping and GROUPTOP on GPUs, upcasts of small masked axes, float4-friendly
// upcasts of expanded axes, unrolling small reduces, and locals on GPUs.
#include <algorithm>
#include <iostream>
#include <set>

#include "codegen/kernel.hpp"
#include "codegen/pack.hpp"
#include "cpu_threads.hpp"

namespace tg {

namespace {

bool is_load(const UOp& u) { return u->op == Ops::LOAD && u->src.size() >= 2 && u->src[1]->op == Ops::SHAPETRACKER; }

int64_t prod_range(const Shape& s, int64_t lo, int64_t hi) {
  int64_t r = 1;
  for (int64_t i = std::max<int64_t>(lo, 0); i < hi && i < static_cast<int64_t>(s.size()); i++) r *= s[i];
  return r;
}

bool has_expanded_axis(const Shape& shape, const std::vector<std::optional<int64_t>>& strides, size_t end = SIZE_MAX) {
  for (size_t i = 0; i < shape.size() && i < end; i++)
    if (shape[i] > 1 && strides[i] && *strides[i] == 0) return true;
  return false;
}

// A SUM(a*b) whose two factors are each broadcast along an output axis (a matmul): every input
// element is reused across outputs, so register tiles (upcasts), not a thread group per output.
bool reuses_inputs(const Kernel& k) {
  auto r = k.reduceop();
  if (!r || (*r)->as<ReduceArg>().op != ReduceOps::SUM) return false;
  auto strip = [](UOp u) { while (u->op == Ops::CAST) u = u->src[0]; return u; };
  const UOp mul = strip((*r)->src[0]);
  if (!is_alu(mul, BinaryOps::MUL)) return false;
  const size_t fr = static_cast<size_t>(k.first_reduce());
  for (const UOp& f : mul->src) {
    const UOp ld = strip(f);
    if (!is_load(ld)) return false;
    const ShapeTracker& st = k.sts[std::find(k.bufs.begin(), k.bufs.end(), ld) - k.bufs.begin()];
    if (!has_expanded_axis(st.shape(), st.real_strides(), fr)) return false;
  }
  return true;
}

// MV: a matrix-vector SUM(a*b) reading one side along the reduce axis gets GROUP + LOCAL + UPCAST
bool matvec(Kernel& k) {
  const int64_t blocksize = getenv("MV_BLOCKSIZE", 4), threads_per_row = getenv("MV_THREADS_PER_ROW", 8),
                rows_per_thread = getenv("MV_ROWS_PER_THREAD", 4);
  if (!(k.opts->has_local && k.opts->has_shared && getenv("MV", 1) != 0 && (blocksize > 1 || threads_per_row > 1 || rows_per_thread > 1)))
    return false;
  auto r = k.reduceop();
  if (!r || (*r)->as<ReduceArg>().op != ReduceOps::SUM || k.full_shape().size() < 2) return false;
  const UOp& mul = (*r)->src[0];
  if (!(mul->op == Ops::ALU && mul->is<BinaryOps>() && mul->as<BinaryOps>() == BinaryOps::MUL && is_load(mul->src[0]) && is_load(mul->src[1])))
    return false;
  auto index = [&](const UOp& u) { return std::find(k.bufs.begin(), k.bufs.end(), u) - k.bufs.begin(); };
  const ShapeTracker &st0 = k.sts[index(mul->src[0])], &st1 = k.sts[index(mul->src[1])];
  const auto s0 = st0.real_strides(), s1 = st1.real_strides();
  if (!(s0[k.first_reduce()] == 1 && !(has_expanded_axis(st0.shape(), s0) && has_expanded_axis(st1.shape(), s1)))) return false;
  for (int64_t g = 0; g < k.global_dims(); g++) {
    if (k.full_shape()[k.first_reduce()] % threads_per_row == 0 && k.full_shape()[g] % (blocksize * rows_per_thread) == 0) {
      if (debug() >= 3) std::cout << "MATVEC: full_shape=" << to_str(k.full_shape()) << " first_reduce=" << k.first_reduce() << "\n";
      if (threads_per_row > 1) k.apply_opt({OptOps::GROUP, 0, threads_per_row});
      if (blocksize > 1) k.apply_opt({OptOps::LOCAL, g, blocksize});
      if (rows_per_thread > 1) k.apply_opt({OptOps::UPCAST, g, rows_per_thread});
      return true;
    }
  }
  return false;
}

void grouptop(Kernel& k) {
  // (a row kernel reading a fused arange (cross-entropy's label gather) reduces the arange in a loop nested
  // in the row's: grouping put the group's barrier inside those loops and a load out of its scope)
  if (std::find(k.inner_reduce.begin(), k.inner_reduce.end(), true) != k.inner_reduce.end()) return;
  const int64_t fr = k.first_reduce();
  const int64_t out_work = prod_range(k.output_shape(), 0, fr);
  if (!(k.float4_axis(0).empty() && fr <= 2 && fr + 1 <= k.shape_len() && out_work <= 2048)) return;
  std::vector<int64_t> sizes = out_work <= 32 ? std::vector<int64_t>{256, 16} : std::vector<int64_t>{16};
  for (int64_t sz : sizes) {
    bool all = true;
    for (const ShapeTracker& st : k.sts) all = all && (st.shape()[fr] % sz == 0 || st.shape()[fr] == 1);
    if (!all) continue;
    try {
      k.apply_opt({OptOps::GROUPTOP, 0, sz});   // may need more shared memory than there is
      return;
    } catch (const KernelOptError&) {
    }
  }
}

void upcast_masked_axes(Kernel& k) {
  // small dims with lots of valid masks (from Tensor.stack, pads) are upcast
  std::vector<int64_t> to_upcast;
  for (int64_t axis = 0; axis < k.first_reduce(); axis++) {
    int64_t up = prod_range(k.full_shape(), k.first_upcast(), k.shape_len());
    for (int64_t j : to_upcast) up *= k.full_shape()[j];
    bool masked = false;
    for (size_t i = 0; i < k.sts.size() && !masked; i++) masked = k.axis_is_masked(i, axis);
    if (k.full_shape()[axis] <= 7 && masked && up * k.full_shape()[axis] <= 7 * 7) {
      if (debug() >= 4) std::cout << "upcasting masked axis : " << axis << "\n";
      to_upcast.push_back(axis);
    }
  }
  for (auto it = to_upcast.rbegin(); it != to_upcast.rend(); ++it) k.apply_opt({OptOps::UPCAST, *it, 0});
}

void upcast_expanded_axes(Kernel& k) {
  std::set<int64_t> upcasted_axis;
  while (prod_range(k.output_shape(), 0, k.first_reduce()) >= 1024) {
    std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> xb_choices;
    for (int64_t axis = 0; axis < k.first_reduce(); axis++) {
      for (int64_t amount : {3, 4}) {
        if (upcasted_axis.count(axis) || k.full_shape()[axis] % amount != 0) continue;
        // some buffer is broadcast along axis and has no broadcast upcasted axis yet
        bool want = false;
        for (size_t b = 0; b < k.sts.size() && !want; b++) {
          if (k.sts[b].views.back().strides[axis] != 0) continue;
          bool has_zero = false;
          for (auto& [sz, st, r] : k.upcasted_axis(b)) has_zero = has_zero || (st && *st == 0);
          want = !has_zero;
        }
        if (!want) continue;
        int64_t n_pos = 0, sum = 0;
        for (const ShapeTracker& st : k.sts) n_pos += st.views.back().strides[axis] > 0, sum += st.views.back().strides[axis];
        xb_choices.emplace_back(n_pos, sum, axis, amount);
      }
    }
    if (xb_choices.empty()) break;
    std::sort(xb_choices.begin(), xb_choices.end());
    if (debug() >= 4) std::cout << "float4 merging axis : " << std::get<2>(xb_choices[0]) << "\n";
    k.apply_opt({OptOps::UPCAST, std::get<2>(xb_choices[0]), std::get<3>(xb_choices[0])});
    upcasted_axis.insert(std::get<2>(xb_choices[0]));
  }
}

void unroll_small_reduce(Kernel& k) {
  if (!(k.first_reduce() < k.first_upcast())) return;
  bool reduce_upcast = false;
  for (auto& [sz, st, r] : k.upcasted_axis(k.full_buf_index)) reduce_upcast = reduce_upcast || r;
  const int64_t up = prod_range(k.full_shape(), k.first_upcast(), k.shape_len());
  if (!((up <= 4 || !reduce_upcast) && (k.upcasted == 0 || prod_range(k.full_shape(), k.shape_len() - k.upcasted, k.shape_len()) < 64))) return;
  const int64_t s = k.full_unupcasted_shape().back();
  auto last_reduce_axis = [&] { return static_cast<int64_t>(k.full_unupcasted_shape().size()) - 1 - k.first_reduce(); };
  if (s <= 32) {
    k.apply_opt({OptOps::UNROLL, last_reduce_axis(), 0});
    // if it's small, unroll a second reduce dimension too
    if (k.first_reduce() < k.first_upcast() && s <= 3 && k.full_unupcasted_shape().back() <= 3)
      k.apply_opt({OptOps::UNROLL, last_reduce_axis(), 0});
  } else if (s % 4 == 0) {
    k.apply_opt({OptOps::UNROLL, last_reduce_axis(), 4});
  }
}

// One output axis (after the upcasts) of 2^16+ threads: a streaming kernel (a*b+1, rand). 32 threads
// a block (tinygrad's first local) cap an H100 SM at 32 blocks = half its threads, and a grid of 2^21
// one-float4 blocks spends its time launching blocks: a*b+1 on 2^28 ran at 0.92x torch's addcmul
// (128 threads a block, one float4 each).
bool wide_grid(const Kernel& k) {
  return k.first_reduce() == 1 && !k.group_for_reduces && k.full_shape()[0] >= (int64_t{1} << 16) && getenv("GPU_WIDE_LOCALS", 1);
}

void add_locals(Kernel& k) {
  if (getenv("NOLOCALS") && k.local_dims == 0 && !k.group_for_reduces) {
    k.apply_opt({OptOps::NOLOCALS, std::nullopt, std::nullopt});
    return;
  }
  // prioritize making expand axes local
  std::vector<std::pair<bool, int64_t>> ranking;
  for (int64_t axis = 0; axis < k.first_reduce(); axis++) {
    bool expanded = false;
    for (const ShapeTracker& st : k.sts) expanded = expanded || st.views.back().strides[axis] == 0;
    ranking.emplace_back(expanded, axis);
  }
  std::sort(ranking.begin(), ranking.end(), [](auto& a, auto& b) { return a.first != b.first ? a.first > b.first : a.second > b.second; });
  std::vector<std::pair<int64_t, int64_t>> to_local;
  for (auto& [_, axis] : ranking) {
    int64_t local_size = 1;
    for (auto& [a, sz] : to_local) local_size *= sz;
    std::vector<int64_t> cands = axis == 0 ? std::vector<int64_t>{32, 16, 8, 4, 3, 2} : std::vector<int64_t>{16, 8, 4, 3, 2};
    // (GPU_EW_LOCAL: the block size of such a grid, for comparing)
    const int64_t wide = axis == 0 && wide_grid(k) ? getenv("GPU_EW_LOCAL", 128) : 0;
    std::vector<int64_t> big;
    for (int64_t x = wide; x > 32; x /= 2) big.push_back(x);
    cands.insert(cands.begin(), big.begin(), big.end());
    for (int64_t x : cands)
      if (k.full_shape()[axis] % x == 0 && local_size * x <= std::max<int64_t>(128, wide)) { to_local.emplace_back(axis, x); break; }
  }
  if (to_local.size() > 3) to_local.resize(3);
  std::sort(to_local.begin(), to_local.end());
  int64_t deleted_shape = 0;
  for (auto [axis, local_sz] : to_local) {
    axis -= deleted_shape;
    const bool will_delete_shape = local_sz == k.full_shape()[axis];
    k.apply_opt({OptOps::LOCAL, axis, local_sz});
    if (will_delete_shape) deleted_shape += 1;
  }
}

// A small upcast that isn't the output's unit-stride axis (the 2 rows of rand's words, upcast as a
// masked axis so threefry runs once per pair) leaves its stores scalar: that axis is upcast by 4 too,
// so each row's 4 consecutive outputs go out in one 16-byte store.
void upcast_store_vectors(Kernel& k) {
  // (a reduce that reads no buffer is an arange, folded into index math: rand's counter)
  for (const UOp& r : k.reduceops)
    for (const UOp& u : r.toposort())
      if (u->op == Ops::LOAD) return;
  if (prod_range(k.full_shape(), k.first_upcast(), k.shape_len()) > 8) return;
  for (auto& [sz, st, r] : k.upcasted_axis(0))
    if (st && *st == 1) return;   // already vectors
  for (int64_t axis = 0; axis < k.first_reduce(); axis++)
    if (k.sts[0].real_strides()[axis] == 1 && k.full_shape()[axis] % 4 == 0 && k.full_shape()[axis] >= 64) {
      k.apply_opt({OptOps::UPCAST, axis, 4});
      return;
    }
}

// ---- CPU (no locals): vector lanes along the output's unit-stride axis, a register tile on top

// stride of buffer i along axis, nullopt when it is not a plain stride (masked/merged views)
std::optional<int64_t> stride_of(const Kernel& k, size_t i, int64_t axis) { return k.sts[i].real_strides()[axis]; }

// An output axis where every buffer is contiguous (stride 1) or broadcast (stride 0), the output
// contiguous: upcast there, loads and stores of consecutive lanes become vector loads and stores.
// Failing that, a kernel with a long reduce (64+) may store strided along it: it stores once per
// output after the loop, so split stores cost little next to the vector loads and FMAs inside it
// (with a short reduce, scattered stores into a large output were 3.5x slower: conv input grads).
// With a long reduce, a contiguous-store axis that isn't a whole number of vectors (a conv's 20-wide
// rows: 16 + 4 lanes, 5/8 of each FMA used) gives way to a strided-store one that is (the output
// channels over packed weights, codegen/pack.hpp).
// buffer i is broadcast along every reduce axis: read by the epilogue after the reduce, not inside it
bool read_after_reduce(const Kernel& k, size_t i) {
  for (int64_t a = k.first_reduce(); a < k.shape_len(); a++)
    if (k.full_shape()[a] != 1 && stride_of(k, i, a) != 0) return false;
  return k.first_reduce() < k.shape_len();
}

// buffer i is a load of the buffer the kernel stores (a K-blocked GEMM's partial sums of the earlier blocks)
bool loads_output(const Kernel& k, size_t i) { return i > 0 && k.bufs[i]->src[0] == k.bufs[0]->src[0]; }

// An input read at stride 1 along the output axis and along a reduce axis too: a conv's window (x + kx). Under a
// long reduce such an axis gives way to a strided-store one of whole vectors (the output channels over packed
// weights) and is left to contiguous_tile_rows as the tile's rows, 8 or 10 columns each broadcast: as the lanes it
// loaded an unaligned vector per tap and tiled 8 channels x 2 rows (a 16-wide conv input gradient, 64 images, one
// core: 9.6-10.3 ms against 7.7-8.2 ms CPU). CPU_WINDOW_LANES=0: it stays the vector axis.
bool sliding_window(const Kernel& k, int64_t axis) {
  for (size_t i = 1; i < k.bufs.size(); i++) {
    if (stride_of(k, i, axis) != 1) continue;
    for (int64_t r = k.first_reduce(); r < k.shape_len(); r++)
      if (k.full_shape()[r] > 1 && stride_of(k, i, r) == 1) return true;
  }
  return false;
}

// a reduce of 64 or more elements per output (a GEMM's or a conv's)
bool reduces_long(const Kernel& k) { return k.reduceop() && prod_range(k.full_shape(), k.first_reduce(), k.shape_len()) >= 64; }

std::optional<int64_t> cpu_vector_axis(const Kernel& k, int64_t lanes) {
  const bool long_reduce = reduces_long(k);
  std::optional<int64_t> unit_axis;
  for (bool strided_store : {false, true}) {
    if (strided_store && !long_reduce) break;
    for (int64_t axis = k.first_reduce() - 1; axis >= 0; axis--) {
      // an odd axis (a 3x3 window's kx) can't be split into lanes and would only block the register tile
      if (k.full_shape()[axis] % 2 != 0 || !stride_of(k, 0, axis) || (!strided_store && stride_of(k, 0, axis) != 1)) continue;
      bool ok = true, unit = !strided_store;
      for (size_t i = 1; i < k.bufs.size() && ok; i++) {
        auto st = stride_of(k, i, axis);
        // (a load after the reduce, e.g. a relu backward's mask on a conv's input gradient, is read once
        // per output like the store: strided is as cheap there)
        ok = st && (*st == 0 || *st == 1 || (strided_store && read_after_reduce(k, i))) && !k.axis_is_masked(i, axis);
        unit = unit || st == 1;
      }
      if (!ok || !unit) continue;
      if (long_reduce && sliding_window(k, axis) && getenv("CPU_WINDOW_LANES", 1)) {
        if (!strided_store && !unit_axis) unit_axis = axis;
        continue;
      }
      if (!strided_store && (!long_reduce || k.full_shape()[axis] % lanes == 0)) return axis;
      if (!strided_store) {
        if (!unit_axis) unit_axis = axis;
        continue;
      }
      if (!unit_axis || k.full_shape()[axis] % lanes == 0) return axis;
    }
  }
  return unit_axis;
}

int64_t largest_divisor(int64_t n, std::initializer_list<int64_t> cands, int64_t at_most = INT64_MAX) {
  for (int64_t c : cands)
    if (c <= at_most && n % c == 0) return c;
  return 1;
}

// The register tile's accumulators, in registers: 20 of AVX-512's 32 (10 rows x 2 vectors, the rows' broadcasts and
// two loaded vectors beside them), 10 of AVX2's 16. 8 rows x 2 vectors of AVX2 left no register for the loads (matmul
// 1024^3 on a Zen 3: spilled); 12 (6 rows) left 4 and ran at half speed: conv2's input gradient tiled 6 columns x 2
// vectors, 82 GFLOPS against 122 for 4 images x 2 vectors (bench_kernels conv_dx 64,32,24,24,32,5,0, 2 threads).
int64_t tile_accumulators(const Kernel& k) { return k.opts->vector_registers >= 32 ? 20 : 10; }

// An elementwise kernel whose vector axis is shorter than a vector (a 2x2 window's kx, after
// refine_views split the rows at the windows: (.., w/2, 2)): the axis outside it is upcast whole too
// where every buffer continues contiguously across it (x and the output: stride 2 there, 1 inside) or
// is broadcast inside it (the pooled values: one per window), so a row's lanes come out as vectors.
bool widens_short_vector_axis(const Kernel& k, int64_t vaxis, int64_t lanes) {
  const int64_t size = k.full_shape()[vaxis];
  if (vaxis == 0 || size >= lanes) return false;
  const int64_t outer = vaxis - 1, n = k.full_shape()[outer];
  if (n * size > 2 * lanes || n < 2) return false;
  for (size_t i = 0; i < k.bufs.size(); i++) {
    auto in = stride_of(k, i, vaxis), out = stride_of(k, i, outer);
    if (!in || !out || k.axis_is_masked(i, outer)) return false;
    if (*in != 0 && *out != *in * size) return false;
  }
  return true;
}

// ---- GPU reductions: cooperative (a block of threads per output, or per few outputs)

// A kernel's one reduce on a GPU, by shape. The main input (the reduce's full-shape buffer) read
//  - along the reduce (a row: softmax, layernorm, sum(-1), the split parts of a full sum): UNROLL
//    by 4 lanes (16-byte loads), then GROUP 256 threads over the rest, so consecutive threads read
//    consecutive 16-byte chunks; the block's partials meet in shared memory. Short rows (< 512)
//    keep a thread per row (the default heuristics).
//  - across the reduce (a column sum: sum(0)): 32 outputs on a warp's lanes (coalesced), 16
//    groups of rows in a block, 4 outputs per thread.
// opts applied all or none (the kernel as it was when one doesn't apply)
bool try_opts(Kernel& k, const std::vector<Opt>& opts) {
  Kernel saved = k;
  const bool skip = k.skip_failed_opts;
  k.skip_failed_opts = false;   // (a symbolic kernel's skipping would apply a part)
  try {
    for (const Opt& o : opts) k.apply_opt(o);
    k.skip_failed_opts = skip;
    return true;
  } catch (const KernelOptError& e) {
    if (debug() >= 4) std::cout << "gpu opts refused: " << e.what() << "\n";
    k = saved;
    return false;
  }
}

// A reduce with a symbolic axis (a KV cache's key length start_pos+1: attention's scores, their
// softmax and scores @ values in a decode step). Its loops and launch dims can't be split into
// fixed tiles, so without this every output is one thread looping alone (a softmax of 12 heads:
// 12 threads on the GPU). Instead:
//  - a symbolic row (the reduce axis is symbolic and contiguous: softmax, max, sum over the keys):
//    GROUP g threads per row, a block-stride loop (see KernelInfo::sym_groups); g from the max
//    length, at least 4 elements per thread there.
//  - a symbolic reduce read across it (scores @ values: the values contiguous along the head dim):
//    32 outputs on a warp's lanes (LOCAL), g groups of threads taking every g-th key.
//  - a fixed contiguous reduce with a symbolic output axis (q @ keys^T: a dot of head_dim per
//    key): a warp per output, UNROLL u x GROUP 32 over the row (coalesced, the warp's partials
//    meet through shuffles).
bool gpu_symbolic_reduce(Kernel& k) {
  const Shape fs = k.full_shape();   // (a copy: a refused opt restores k, and with it the trackers' storage)
  const int64_t fr = k.first_reduce(), n = k.shape_len(), last = n - 1;
  bool sym_out = false, sym_red = false;
  for (int64_t a = 0; a < n; a++) (a < fr ? sym_out : sym_red) |= k.symbolic_axis(a);
  if (!sym_out && !sym_red) return false;
  // the loads inside the reduce (every one of them decides: a gather's index math is not a row)
  std::vector<size_t> loads;
  for (size_t i = 0; i < k.bufs.size(); i++)
    if (k.bufs[i]->op == Ops::LOAD && !read_after_reduce(k, i)) loads.push_back(i);
  if (loads.empty()) return false;
  auto all_loads = [&](int64_t axis, auto pred) {
    return std::all_of(loads.begin(), loads.end(), [&](size_t i) { return pred(stride_of(k, i, axis)); });
  };
  if (sym_red) {
    if (fr != last || !k.symbolic_axis(last)) return false;   // one reduce axis, the symbolic one
    const int64_t mx = fs[last];
    // row: every load contiguous (or broadcast) along the keys
    if (all_loads(last, [](auto s) { return s == 1 || s == 0; })) {
      for (int64_t g : {256, 128, 64, 32})
        if (mx >= 4 * g || g == 32) {
          if (mx < 2 * g) return false;   // a short row: one thread
          return try_opts(k, {{OptOps::GROUP, 0, g}});
        }
    }
    // across: the output's last axis contiguous (or broadcast) in every load, contiguous in one
    const int64_t oax = fr - 1;
    if (oax < 0 || fs[oax] % 32 != 0 || k.symbolic_axis(oax) || !all_loads(oax, [](auto s) { return s == 1 || s == 0; }) ||
        all_loads(oax, [](auto s) { return s == 0; }))
      return false;
    for (int64_t g : {16, 8, 4})
      if (mx >= 4 * g && try_opts(k, {{OptOps::LOCAL, oax, 32}, {OptOps::GROUP, 0, g}})) return true;
    return false;
  }
  // fixed reduce, symbolic output: a warp per output along a contiguous row
  const int64_t red = prod_range(fs, fr, n);
  if (fr != last || red < 32 || red % 32 != 0 || !all_loads(last, [](auto s) { return s == 1 || s == 0; })) return false;
  for (int64_t u : {4, 2, 1}) {
    if ((red / 32) % u != 0) continue;
    std::vector<Opt> opts;
    if (u > 1) opts.push_back({OptOps::UNROLL, 0, u});
    opts.push_back({OptOps::GROUP, 0, 32});
    if (try_opts(k, opts)) return true;
  }
  return false;
}

// One reduce over a row with aranges nested in it (argmax's second kernel where the max is a kernel of its
// own: the largest n - i where x == max): g threads per row over the row's axis, the arange folding inside
// each thread's loop. Before, a thread walked each row (2048 threads for 8192 rows).
bool gpu_nested_row(Kernel& k) {
  if (k.group_for_reduces || k.local_dims || k.upcasted || k.nested_rows) return false;
  const int64_t fr = k.first_reduce(), n = k.shape_len();
  for (int64_t row = fr; row < n; row++) {
    bool contiguous = false;   // a buffer read along the row
    for (size_t i = 0; i < k.bufs.size(); i++) contiguous = contiguous || (k.bufs[i]->op == Ops::LOAD && stride_of(k, i, row) == 1);
    if (!contiguous || !k.reduces_only_row(row)) continue;
    const int64_t red = k.full_shape()[row];
    for (int64_t u : {4, 1})   // (4 lanes: 16-byte loads)
      for (int64_t g : {256, 128, 64, 32}) {
        if (red % (u * g) != 0 || red / (u * g) < 2) continue;
        std::vector<Opt> opts;
        if (u > 1) opts.push_back({OptOps::UNROLL, row - fr, u});
        opts.push_back({OptOps::GROUP, row - fr, g});
        if (try_opts(k, opts)) return true;
      }
  }
  return false;
}

bool gpu_reduce(Kernel& k) {
  if (!(k.opts->has_local && k.opts->has_shared) || !getenv("GPU_REDUCE", 1)) return false;
  // (several reduces of a row kernel reduce the same axes: one block per row serves them all)
  if (!k.same_reduce_axes()) return gpu_nested_row(k);
  if (k.group_for_reduces || k.local_dims || k.upcasted || reuses_inputs(k)) return false;
  const Shape fs = k.full_shape();   // (a copy: a refused opt restores k, and with it the trackers' storage)
  const int64_t fr = k.first_reduce(), n = k.shape_len();
  if (fr >= n) return false;
  if (!k.vars.empty() && gpu_symbolic_reduce(k)) return true;
  const size_t b = static_cast<size_t>(k.full_buf_index);
  int64_t red = 1, out = 1;
  // the main input's reduce dims (a row kernel's fused arange adds dims of its own, 1 in the input)
  for (int64_t i = fr; i < n; i++) red *= k.sts[b].shape()[i];
  for (int64_t i = 0; i < fr; i++) out *= fs[i];
  auto st = [&](int64_t axis) { return stride_of(k, b, axis); };
  auto try_opts = [&](const std::vector<Opt>& opts) { return ::tg::try_opts(k, opts); };
  const int64_t last = n - 1;
  // A long row of a row kernel (softmax, log_softmax over a language model's 32000 logits) on chip: g
  // threads (a multiple of 32, up to 1024) each keep red/g elements in registers (the row's last axis
  // split g x red/g, the lanes unrolled whole, in at most two UNROLLs of 32), so the row is read once
  // for all of its reduces and the store, where a loop re-reads it for each (3 reads of 128 KB rows
  // that don't stay in L2: 2.2 TB/s of the minimal bytes on an H100). Lane j of thread l reads element
  // j*g + l: every load a coalesced row of the block. (Rows up to 8192 fit in L1/L2 between passes.)
  // (GPU_ROW_ON_CHIP=0: the block loop below instead; GPU_ROW_THREADS caps g: for comparing)
  if (getenv("GPU_ROW_ON_CHIP", 1) && k.row_kernel() && st(last) == 1 && fr == last && red > 8192 && fs[last] == red)
    for (int64_t g = std::min<int64_t>(1024, getenv("GPU_ROW_THREADS", 1024)) / 32 * 32; g >= 256; g -= 32) {
      const int64_t u = red / g;
      if (red % g != 0 || u > 64) continue;
      int64_t u1 = 0;
      for (int64_t d = std::min<int64_t>(u, 32); d >= 2 && !u1; d--)
        if (u % d == 0 && u / d <= 32) u1 = d;
      if (!u1) continue;
      std::vector<Opt> opts{{OptOps::GROUP, 0, g}, {OptOps::UNROLL, 1, u1}};
      if (u / u1 > 1) opts.push_back({OptOps::UNROLL, 1, 0});
      if (try_opts(opts)) return true;
    }
  if (st(last) == 1 && red >= 512) {
    // row: unroll u lanes of the last reduce axis, group g threads over what is left of it
    // at least 4 loads per thread: with one (a 1024 row over 256 threads) the shuffles, barrier and
    // shared memory cost more than the loads (layernorm's reduces ran at 1.0-1.3 TB/s on an H100)
    // Rows up to 4096 prefer 16-byte loads over more threads (1024: 64 threads x 4 float4s), longer
    // rows more threads (32000: 256 threads x 125 floats ran at 2.8-3.0 TB/s on an H100).
    std::vector<std::pair<int64_t, int64_t>> cands;   // (threads, lanes)
    for (int64_t a : {256, 128, 64, 32})
      for (int64_t u : {4, 2, 1}) cands.emplace_back(a, u);
    if (red <= 4096) std::stable_sort(cands.begin(), cands.end(), [](auto& x, auto& y) { return x.second > y.second; });
    for (auto [g, u] : cands) {
      if (fs[last] % u != 0 || (fs[last] / u) % g != 0 || (red / u / g < 4 && g > 32)) continue;
      std::vector<Opt> opts;
      if (u > 1) opts.push_back({OptOps::UNROLL, last - fr, u});
      opts.push_back({OptOps::GROUP, last - fr, g});
      if (try_opts(opts)) return true;
    }
    // a row no block size divides (4097 long): g threads take every g-th element in a block-stride
    // loop whose bound masks the tail (a GROUP that doesn't divide, see Kernel::apply_sym_group);
    // before, one thread walked each whole row, once per reduce and once for the store
    // (one reduce axis, the row: a loop over other reduce axes around the block-stride one isn't lowered;
    // a row kernel's nested aranges, argmax's and cross-entropy's label gather, fold inside it)
    if (fr == last || k.nested_rows)
      for (int64_t g : {256, 128, 64, 32})
        if (red >= 4 * g && fs[last] % g != 0 && try_opts({{OptOps::GROUP, last - fr, g}})) return true;
    return false;
  }
  // column: the output's last axis is contiguous in the input, the reduce is strided
  if (fr >= 1 && st(fr - 1) == 1 && st(last) != 1 && out >= 32 && red >= 64) {
    const int64_t oax = fr - 1;
    for (int64_t g : {16, 8, 4})
      for (int64_t up : {4, 1}) {
        if (fs[oax] % (32 * up) != 0 || fs[last] % g != 0) continue;
        if (up > 1 && out / (32 * up) < 256 && fs[oax] % 32 == 0) continue;   // fewer than 2 blocks per SM: more blocks instead
        std::vector<Opt> opts;
        if (up > 1) opts.push_back({OptOps::UPCAST, oax, up});
        opts.push_back({OptOps::LOCAL, oax, 32});
        opts.push_back({OptOps::GROUPTOP, last - fr, g});   // each group of threads sums a band of rows
        if (try_opts(opts)) return true;
      }
  }
  return false;
}

// Loop order for the L2 (after the register tile): with the tile's rows outermost (matmul M), every
// block of rows streams all of the vector inputs (B); with the vector axis outermost, one block of
// them (reduce x the columns of every b axis inside v: a packed panel's tiles) stays in L2 while all
// rows pass, and the other input (A) streams instead, once per block. Swapped when all of B doesn't
// fit in half the L2 but a block does, and the outer axis still splits over the threads (2048^3 on
// one Zen 5 core: 61-74 -> 84-94 GFLOPS). B's size counts every global axis it varies along: 1024^3
// packs B as 8 panels of 4 tiles, 4 MB, where counting only the 8 panels (1 MB) fitted half of this
// Sapphire Rapids' 2 MB L2, so the rows stayed outermost and streamed all of B from L3 for every 8
// rows (44 GFLOPS per CPU second against 86 swapped; Zen 5's 1 MB L2 swapped it either way).
void swap_for_l2(Kernel& k, const std::vector<size_t>& vector_inputs) {
  if (vector_inputs.empty() || k.global_dims() < 2) return;
  const size_t b = vector_inputs[0];
  int64_t reduce = 1, cols = 1;
  for (int64_t i = 0; i < k.shape_len(); i++) {
    const bool is_reduce = k.output_shape()[i] == 1 && k.full_shape()[i] > 1;
    if (is_reduce) reduce *= k.full_shape()[i];
    else if (i >= k.first_upcast() && stride_of(k, b, i) != 0) cols *= k.full_shape()[i];
  }
  // axis 0 is the tile's rows (the vector inputs are broadcast along it); v the vector axis left over
  if (stride_of(k, b, 0) != 0) return;
  std::optional<int64_t> v;
  int64_t inner = 1;   // the global axes inside v that b varies along (a panel's tiles)
  for (int64_t a = 1; a < k.global_dims(); a++)
    if (stride_of(k, b, a).value_or(0) != 0) {
      if (v) inner *= k.full_shape()[a];
      else v = a;
    }
  if (!v) return;
  const int64_t item = k.bufs[b]->src[0]->dtype.base().itemsize(), block = reduce * cols * inner * std::max<int64_t>(item, 1);
  const int64_t half_l2 = cpu_caches().l2 / 2;
  if (block * k.full_shape()[*v] <= half_l2 || block > half_l2 || k.full_shape()[*v] < 2 * cpu_threads()) return;
  if (debug() >= 4) std::cout << "cpu L2 order : swap 0 and " << *v << " (block " << block << " bytes)\n";
  k.apply_opt({OptOps::SWAP, 0, *v});
}

// A transposed copy (the output contiguous along one axis, an input along another) is tiled: both axes are
// upcast by 8, so each thread reads 8 input rows of 8 consecutive elements and writes 8 output rows likewise,
// instead of one output row from elements a page apart (a 3072x768 transpose: every load a TLB miss).
// Not where the untiled copy's loop along the output's contiguous axis stays within kTileSpan bytes of the input
// (16 pages; the 3072x768 transpose's 768 rows cross 9 MB) and its rows don't pile onto a few L1 sets: a span of
// 16 KB at most, or rows a stride apart that isn't a multiple of 1 KB. Such rows stay in L1 and the TLB while
// the outer loop walks them, and the plain copy (4 lanes) beats the tile's 64 scalar loads and stores: the CPU
// GEMM's packs of a conv weight gradient's grad_output (codegen/pack.cpp: 32 output channels, rows of 64 or 400
// floats), one core, sum of per-block minima: 2.0-2.1 -> 1.14-1.19 ms (beautiful_mnist's conv3, 8 KB) and
// 7.3-8.4 -> 5.2-6.0 ms (conv2, 51 KB). Rows of 256 or 512 floats (1 or 2 KB apart: 32 rows on 4 or 2 of the 64
// sets) copied 0.55 ms tiled against 0.74-0.94 untiled (cache-resident): they keep the tile.
constexpr int64_t kTileSpan = 64 * 1024, kSpreadSpan = 16 * 1024, kSetAlias = 1024;
bool cpu_transpose_tile(Kernel& k) {
  if (k.reduceop() || k.upcasted || k.first_reduce() < 2) return false;
  std::optional<int64_t> out_axis, in_axis;
  for (int64_t a = 0; a < k.first_reduce(); a++)
    if (stride_of(k, 0, a) == 1 && k.full_shape()[a] % 8 == 0) out_axis = a;
  if (!out_axis) return false;
  for (size_t i = 1; i < k.bufs.size() && !in_axis; i++) {
    const int64_t item = std::max<int64_t>(1, k.bufs[i]->src[0]->dtype.base().itemsize());
    const int64_t row = stride_of(k, i, *out_axis).value_or(0) * item, span = row * k.full_shape()[*out_axis];
    const bool fits_l1 = span <= kTileSpan && (span <= kSpreadSpan || row % kSetAlias != 0);
    for (int64_t a = 0; a < k.first_reduce(); a++)
      if (a != *out_axis && stride_of(k, i, a) == 1 && k.full_shape()[a] % 8 == 0 && !k.axis_is_masked(i, a) &&
          row >= 64 * item && !fits_l1)
        in_axis = a;
  }
  if (!in_axis) return false;
  if (debug() >= 4) std::cout << "cpu transpose tile : axes " << *in_axis << " and " << *out_axis << " by 8\n";
  const int64_t hi = std::max(*in_axis, *out_axis), lo = std::min(*in_axis, *out_axis);
  k.apply_opt({OptOps::UPCAST, hi, 8});   // the higher axis first: upcasting it doesn't move the lower one
  k.apply_opt({OptOps::UPCAST, lo, 8});
  return true;
}

// the last reduce axis is contiguous (or broadcast) in every input and a multiple of a vector's lanes
// or half of them: cpu_optimizations unrolls it into vector accumulators when the output has no vector axis
bool reduce_unrolls_as_vectors(const Kernel& k, int64_t lanes) {
  if (k.first_reduce() >= k.first_upcast() || lanes < 4) return false;
  const int64_t raxis = static_cast<int64_t>(k.full_unupcasted_shape().size()) - 1;
  if (k.symbolic_axis(raxis) || k.full_shape()[raxis] % (lanes / 2) != 0) return false;
  for (size_t i = 1; i < k.bufs.size(); i++) {
    auto st = stride_of(k, i, raxis);
    if (!st || (*st != 0 && *st != 1) || k.axis_is_masked(i, raxis)) return false;
  }
  return true;
}

// A tile of one vector per row (an output row of exactly 16 lanes: a strided conv's input-gradient phase,
// the rows its input channels) gets a second vector from another output axis the scalar (broadcast)
// inputs don't vary along (an image, an output row): each broadcast then feeds two FMAs, 8 rows x 2
// vectors = 16 accumulators, 2 + 8 loads per 16 FMAs instead of 1 + 8 per 8.
void second_vector_row(Kernel& k, const std::vector<size_t>& vector_inputs) {
  if (vector_inputs.empty() || !getenv("CPU_TILE_VROWS", 1)) return;
  for (int64_t a = k.first_reduce() - 1; a >= 0; a--) {
    if (k.full_shape()[a] % 2 != 0 || k.symbolic_axis(a)) continue;
    bool ok = true, varies = false;
    for (size_t i = 1; i < k.bufs.size() && ok; i++) {
      const bool vec = std::find(vector_inputs.begin(), vector_inputs.end(), i) != vector_inputs.end();
      const auto st = stride_of(k, i, a);
      if (vec) varies = varies || st != 0;
      else ok = read_after_reduce(k, i) || st == 0;
    }
    if (!ok || !varies) continue;
    if (debug() >= 4) std::cout << "cpu second vector row : axis " << a << "\n";
    k.apply_opt({OptOps::UPCAST, a, 2});
    return;
  }
}

// Every input read as scalars (broadcast into the tile; not one of vector_inputs, not read after the reduce) reads
// along axis at stride 1, unmasked, and there is at least one: the tile rows' broadcasts then come from one line.
bool scalar_inputs_contiguous(const Kernel& k, const std::vector<size_t>& vector_inputs, int64_t axis) {
  bool any = false;
  for (size_t i = 1; i < k.bufs.size(); i++) {
    if (std::find(vector_inputs.begin(), vector_inputs.end(), i) != vector_inputs.end() || read_after_reduce(k, i)) continue;
    if (stride_of(k, i, axis) != 1 || k.axis_is_masked(i, axis)) return false;
    any = true;
  }
  return any;
}

// Tile rows along an output axis where every input read as scalars (broadcast to the tile's vectors) is
// contiguous and unmasked: a conv's output columns, where the rows' broadcasts read neighbouring floats (one
// or two lines per reduce step) instead of one line from each of 8 images 74 KB apart, and where 10 rows
// (20-wide outputs) x 2 vectors make 20 accumulators. beautiful_mnist's conv2 forward, (512,32,24,24) x
// (32,32,5,5), one core: 0.70 of the FMA peak tiled by images, 0.80-0.85 by 10 columns (0.96 cache-resident).
// Needs 10, 8 or 7 rows dividing the axis (12 x 2 accumulators spilled: conv2d_bw's dx 0.7x of 8 x 2; 14 x 2 2.5x
// slower than 7 x 2 in a C model of resnet_fw's 28 columns, where 7 x 2 ran 1.25-1.5x faster than 8 images); else, or
// where no such axis is contiguous (a matmul's rows are strided in A), the largest reuse axis keeps the tile.
// Where no axis takes 10, 8 or 7 rows, 9, 6 or 5 (a 6-wide conv output: beautiful_mnist's conv4 forward, 8 images x 2
// vectors before, each broadcast from its own image 16 KB away and 256 scattered stores per tile). As 6 columns x 2
// vectors (12 accumulators), bench_kernels conv_fw 512,64,8,8,64,3,0, one thread, 4 rounds alternated: the GEMM
// 12.8-13.2 -> 9.8-10.8 ms CPU; 5 columns (7x7 inputs) 9.6-13.0 -> 7.9-10.4 ms (bench/NOTES_conv_dw.md, session 15).
// 6 columns x 2 rows x 2 vectors spilled (a clang C model: 3x slower). With AVX2's 16 registers (at most 5 rows), 5 or
// 4 columns: resnet_fw's 28 columns as 7 tiles of 4 x 2 vectors ran at 143 GFLOPS (0.77 of the FMA peak) against 110
// for 4 images x 2 vectors, conv2d_bw's 24-column input gradient 9.4 against 11.8 ms (Zen 3, 2 threads; the images'
// broadcasts each missed L1: 4 images x 64 channels x 3 rows of lines per output pixel, 49 KB, against the L1's 32 KB).
// CPU_TILE_SHORT_ROWS=0: 10, 8 or 7 only.
std::optional<std::pair<int64_t, int64_t>> contiguous_tile_rows(const Kernel& k, const std::vector<size_t>& vector_inputs,
                                                                const std::vector<std::tuple<int64_t, int64_t>>& reuse_axes) {
  if (vector_inputs.empty() || !getenv("CPU_TILE_CONTIG", 1)) return std::nullopt;
  const bool short_rows = getenv("CPU_TILE_SHORT_ROWS", 1) != 0;
  for (const bool short_tier : {false, true}) {
    for (const auto& [neg_size, axis] : reuse_axes) {
      const int64_t most = tile_accumulators(k) / 2;   // (two vectors a row)
      const int64_t rows = !short_tier ? largest_divisor(-neg_size, {10, 8, 7}, most)
                           : most >= 8 ? largest_divisor(-neg_size, {9, 6, 5}, most) : largest_divisor(-neg_size, {5, 4}, most);
      // (the short rows only along the output's columns: a weight gradient's kx keeps kernel_column_rows' tile)
      if (rows == 1 || k.symbolic_axis(axis) || (short_tier && stride_of(k, 0, axis) != 1)) continue;
      if (scalar_inputs_contiguous(k, vector_inputs, axis)) return std::make_pair(axis, rows);
    }
    if (!short_rows) break;
  }
  return std::nullopt;
}

// A conv weight gradient's tile rows: the kernel's columns (kx, 3 to 6 taps: an output axis along which the
// scalar-read input, x's window, is contiguous) whole, times m = 3 or 2 of another reuse axis (a 3x3 kernel's
// rows, else the input channels), at most 10 rows x 2 vectors of output channels: 18-20 accumulators where 8
// channels x 2 vectors held 16. A reduce step's broadcasts then come from one or two lines per channel (x[ci,
// oy+ky, ox..ox+kx]), and each grad_output vector loaded from the L2-resident panel feeds 9-10 rows' FMAs, not 8.
// beautiful_mnist's conv2 (5 kx x 2 channels), one core: 125 -> 136 GFLOPS per CPU second (medians). 12 rows
// (4 channels x 3 kx) don't fit: 12 broadcasts + 2 vectors + 24 accumulators spill, 1.6-3.4x slower.
// Not where that axis is contiguous in the output (a forward conv's output columns: contiguous_tile_rows' case).
// Returns (kx axis, the other axis, m). CPU_TILE_TAPS=0 keeps the 8-channel tile.
struct TapRows { int64_t taps, other, m; };
std::optional<TapRows> kernel_column_rows(const Kernel& k, const std::vector<size_t>& vector_inputs,
                                          const std::vector<std::tuple<int64_t, int64_t>>& reuse_axes) {
  if (vector_inputs.empty() || !getenv("CPU_TILE_TAPS", 1)) return std::nullopt;
  for (const auto& [neg_size, axis] : reuse_axes) {
    const int64_t n = -neg_size;
    if (n < 3 || n > 6 || k.symbolic_axis(axis) || stride_of(k, 0, axis) == 1) continue;
    if (!scalar_inputs_contiguous(k, vector_inputs, axis)) continue;
    for (int64_t m : {3, 2})
      for (const auto& [neg_other, other] : reuse_axes)
        if (other != axis && !k.symbolic_axis(other) && 2 * n * m <= tile_accumulators(k) && -neg_other % m == 0)
          return TapRows{axis, other, m};
  }
  return std::nullopt;
}

// A forward conv's output rows of 4 columns (no row count of contiguous_tile_rows divides them; 4 x 2 vectors would
// hold only 8 accumulators): the columns whole
// (an output axis contiguous in the output and read at stride 1, unmasked, by the scalar-read input) times 2 of the
// axis just outside them (the output rows), 8 rows x 2 vectors: the broadcasts from 2 lines of one image per reduce
// step, where 8 images x 2 vectors read 8 lines (16 KB apart). bench_kernels conv_fw 512,64,6,6,64,3,0, one thread, 5
// rounds alternated: 5.2-9.3 -> 4.0-6.1 ms CPU. Not 3 or 5 columns, nor the images as the other axis: there the
// vectorizer groups the window's columns into float4 loads and the accumulators follow (float4 + 1 lanes): 5 columns x 2
// images 8.6-8.9 -> 32-36 ms, 3 x 3 rows 3.0 -> 46-59 ms, 4 columns x 2 images 7.2-7.4 -> 28-38 ms (same rounds;
// bench/NOTES_conv_dw.md, session 15). Returns (columns, rows axis, 2). CPU_TILE_SHORT_ROWS=0: 8 images.
std::optional<TapRows> four_column_rows(const Kernel& k, const std::vector<size_t>& vector_inputs,
                                        const std::vector<std::tuple<int64_t, int64_t>>& reuse_axes) {
  if (vector_inputs.empty() || !getenv("CPU_TILE_SHORT_ROWS", 1) || tile_accumulators(k) < 16) return std::nullopt;
  auto reused = [&](int64_t a) {
    return std::any_of(reuse_axes.begin(), reuse_axes.end(), [a](const auto& r) { return std::get<1>(r) == a; });
  };
  for (const auto& [neg_size, axis] : reuse_axes) {
    if (-neg_size != 4 || axis == 0 || k.symbolic_axis(axis) || stride_of(k, 0, axis) != 1) continue;
    const int64_t rows = axis - 1;
    if (!reused(rows) || k.symbolic_axis(rows) || k.full_shape()[rows] % 2 != 0) continue;
    if (scalar_inputs_contiguous(k, vector_inputs, axis)) return TapRows{axis, rows, 2};
  }
  return std::nullopt;
}

void cpu_optimizations(Kernel& k) {
  // (not in a GEMM-like SUM(a*b) with a long reduce: its small masked axes stay loops whose gates narrow the reduce's
  // tap loops, codegen/narrow_reduce.cpp; upcast whole, 4 border columns of a conv's input gradient made a 4 x 8 x 2
  // tile of 64 accumulators that spilled: 30-48 ms against 1.9 ms; tensor/conv.cpp split_columns_input_grad)
  if (!(reduces_long(k) && reuses_inputs(k))) upcast_masked_axes(k);
  const int64_t itemsize = std::max<int64_t>(1, k.bufs[0]->src[0]->dtype.base().itemsize());
  // a kernel that can get a register tile (a reduce with an input broadcast along an output axis: a GEMM's, a conv's,
  // with or without a fused mask or epilogue) sizes it in native registers; other kernels use the C vectors
  // (cpu_threads.hpp cpu_register_bytes)
  auto broadcast_input = [&] {
    for (size_t i = 1; i < k.bufs.size(); i++)
      if (has_expanded_axis(k.sts[i].shape(), k.sts[i].real_strides(), static_cast<size_t>(k.first_reduce()))) return true;
    return false;
  };
  const bool tiled = k.reduceop() && !k.row_kernel() && k.opts->register_bytes > 0 && broadcast_input();
  const int64_t lanes = std::clamp<int64_t>((tiled ? k.opts->register_bytes : k.opts->vector_bytes) / itemsize, 1, 16);
  std::optional<int64_t> vaxis = lanes > 1 ? cpu_vector_axis(k, lanes) : std::nullopt;
  // the inputs read as vectors: contiguous along the vector axis (before it is upcast)
  std::vector<size_t> vector_inputs;
  // (not a load of the stored buffer: a K-blocked GEMM's partial sums, added once after the reduce, codegen/pack.cpp)
  for (size_t i = 1; vaxis && i < k.bufs.size(); i++)
    if (stride_of(k, i, *vaxis) == 1 && !loads_output(k, i)) vector_inputs.push_back(i);
  // a register tile reuses a loaded vector: an axis where the vector inputs are broadcast (matmul M,
  // conv output channels); without a vector axis, any input broadcast along it
  auto reuses = [&](int64_t axis) {
    if (vaxis) {
      if (axis == *vaxis || vector_inputs.empty()) return false;
      for (size_t i : vector_inputs)
        if (stride_of(k, i, axis) != 0) return false;
      return true;
    }
    for (size_t i = 1; i < k.bufs.size(); i++)
      if (stride_of(k, i, axis) == 0) return true;
    return false;
  };
  std::vector<std::tuple<int64_t, int64_t>> choices;   // (-size, axis), taken before the axes move
  // the register tile's rows along an axis: a symbolic one (its size is the max) is split into tiles
  // of 4 and a tail, any length (q @ keys^T over a growing cache: 4 keys per loaded q vector, with
  // 8-lane accumulators below)
  auto tile_rows = [&](int64_t axis) {
    if (k.symbolic_axis(axis)) return k.full_shape()[axis] >= 8 ? int64_t{4} : int64_t{1};
    const int64_t n = k.full_shape()[axis];
    return tile_accumulators(k) >= 16 ? largest_divisor(n, {8, 4, 3}) : largest_divisor(n, {5, 4, 3});
  };
  // a row kernel (several passes over each row) keeps one row at a time in L1: no row tile
  std::vector<std::tuple<int64_t, int64_t>> reuse_axes;
  if (k.reduceop() && !k.row_kernel())
    for (int64_t axis = 0; axis < k.first_reduce(); axis++)
      if (reuses(axis)) {
        reuse_axes.emplace_back(-k.full_shape()[axis], axis);
        if (tile_rows(axis) > 1) choices.emplace_back(-k.full_shape()[axis], axis);
      }
  std::sort(choices.begin(), choices.end());
  int64_t rows = choices.empty() ? 1 : tile_rows(std::get<1>(choices[0]));
  const auto contiguous = contiguous_tile_rows(k, vector_inputs, reuse_axes);
  if (contiguous) {
    if (debug() >= 4) std::cout << "cpu contiguous tile rows : axis " << contiguous->first << " by " << contiguous->second << "\n";
    choices.insert(choices.begin(), {-k.full_shape()[contiguous->first], contiguous->first});
    rows = contiguous->second;
  }
  std::optional<TapRows> taps = kernel_column_rows(k, vector_inputs, reuse_axes);
  if (!taps && !contiguous) taps = four_column_rows(k, vector_inputs, reuse_axes);
  const int64_t fr_before = k.first_reduce();
  bool one_vector = false;   // the vector axis is exactly one vector: no second vector per tile row
  bool two_vectors = false;   // two vectors per tile row
  const bool widen = vaxis && k.first_reduce() == k.shape_len() && widens_short_vector_axis(k, *vaxis, lanes);
  if (vaxis) {
    // a short axis is upcast whole (20 = 4 x 5: a vector of 16 and one of 4 per row)
    const int64_t size = k.full_shape()[*vaxis], amt = largest_divisor(size, {lanes, lanes / 2, 4, 2});
    if (amt > 1) {
      if (debug() >= 4) std::cout << "cpu vector axis : " << *vaxis << " by " << amt << "\n";
      k.apply_opt({OptOps::UPCAST, *vaxis, amt});
      const int64_t rest = size / amt;
      two_vectors = amt == lanes && rest == 2;
      if (rest > 1 && rest <= 16 && size <= 2 * lanes) k.apply_opt({OptOps::UPCAST, *vaxis, 0});
      // with a register tile, two vectors per row: 8 rows x 2 vectors is 16 accumulators of the 32
      // AVX-512 registers, and each broadcast feeds two FMAs (measured 1.5-2x over one vector per row)
      else if (!choices.empty() && amt == lanes && rest % 2 == 0) k.apply_opt({OptOps::UPCAST, *vaxis, 2}), two_vectors = true;
      else one_vector = amt == lanes && rest == 1;
      if (widen && rest == 1) k.apply_opt({OptOps::UPCAST, *vaxis - 1, 0});   // (the axis outside it keeps its index)
    }
  }
  if (!choices.empty()) {
    int64_t axis = std::get<1>(choices[0]);
    if (k.first_reduce() < fr_before && axis > *vaxis) axis -= 1;   // the vector axis was upcast whole and dropped
    // Without a vector axis (a conv weight gradient whose output channels are strided in grad_output:
    // the vectors run along the reduce's contiguous axis instead), a second short reuse axis joins the
    // tile whole (a 5-wide kernel's kx): 4 x 5 accumulators load 4 + 5 vectors per 20 FMAs where 8 x 1
    // loaded 9 per 8 (beautiful_mnist's conv1 weight gradient: 2x per core).
    int64_t second = -1;
    if (!vaxis && getenv("CPU_TILE2", 1) && !k.symbolic_axis(axis) && k.full_shape()[axis] % 4 == 0 && reduce_unrolls_as_vectors(k, lanes))
      for (int64_t a = k.first_reduce() - 1; a >= 0 && second < 0; a--)
        if (a != axis && reuses(a) && k.full_shape()[a] >= 3 && k.full_shape()[a] <= 6)
          second = a;
    if (taps && two_vectors) {
      // (axes past the vector axis moved down one if it was upcast whole; the higher of the two goes first)
      auto moved = [&](int64_t a) { return k.first_reduce() < fr_before && a > *vaxis ? a - 1 : a; };
      const int64_t t = moved(taps->taps), o = moved(taps->other);
      if (debug() >= 4) std::cout << "cpu kernel column rows : axis " << t << " whole x axis " << o << " by " << taps->m << "\n";
      if (t > o) k.apply_opt({OptOps::UPCAST, t, 0}), k.apply_opt({OptOps::UPCAST, o, taps->m});
      else k.apply_opt({OptOps::UPCAST, o, taps->m}), k.apply_opt({OptOps::UPCAST, t, 0});
    } else if (second >= 0) {
      const int64_t len = k.first_reduce();
      k.apply_opt({OptOps::UPCAST, axis, 4});
      k.apply_opt({OptOps::UPCAST, second - (second > axis && k.first_reduce() < len ? 1 : 0), 0});   // (axis may drop out)
    } else {
      k.apply_opt({OptOps::UPCAST, axis, rows});
    }
  }
  if (vaxis && !choices.empty() && one_vector) second_vector_row(k, vector_inputs);
  if (vaxis && !choices.empty()) swap_for_l2(k, vector_inputs);
  // small reduce loops are unrolled (conv windows); a long one over contiguous memory, when the
  // output has no vector axis, is unrolled by a vector's lanes: the lowerer keeps a vector accumulator
  if (k.first_reduce() < k.first_upcast()) {
    const int64_t s = k.full_unupcasted_shape().back(), up = prod_range(k.full_shape(), k.first_upcast(), k.shape_len());
    const int64_t raxis = static_cast<int64_t>(k.full_unupcasted_shape().size()) - 1;
    bool contiguous = true;
    for (size_t i = 1; i < k.bufs.size() && contiguous; i++) {
      // (a row kernel's fused arange is a masked const: index math per lane, not a load)
      if (k.row_kernel() && k.bufs[i]->op == Ops::CONST) continue;
      auto st = stride_of(k, i, raxis);
      contiguous = st && (*st == 0 || *st == 1) && !k.axis_is_masked(i, raxis);
    }
    if (k.symbolic_axis(raxis)) {
      // a symbolic loop (s is its max) is split into tiles of a vector's lanes plus a tail: no
      // divisor needed; fewer lanes when the max is short (two tiles at least, see apply_sym_opt)
      // (as a fixed dim: a contiguous reduce by a vector's lanes, a short one (a whole unroll there) by 4)
      int64_t amt = contiguous && !vaxis && lanes > 1 ? lanes : s <= 32 && up * s <= 256 ? 4 : 1;
      while (amt > 4 && (2 * amt > s || up * amt > 256)) amt /= 2;
      if (amt > 1 && s >= 2 * amt) k.apply_opt({OptOps::UNROLL, raxis - k.first_reduce(), amt});
      return;
    }
    // Under a symbolic row tile, accumulators of half a vector: q @ keys^T (12 heads, head_dim 64) took
    // 4.4/12.9/124 us at 64/256/1024 keys with 4 rows x 8 lanes, against 5.0/14.3/129 with 8 x 8,
    // 7.1/25.5/170 with 8 x 16 and 6.1/20.6/137 untiled x 16 (one core of this AVX-512 VM, CPU time)
    const int64_t vlanes = !vaxis && contiguous && lanes > 1 ? largest_divisor(s, {k.sym_splits_global() ? lanes / 2 : lanes, 8, 4}) : 1;
    // up to 256 lanes of accumulators, or 20 full vectors (a 4 x 5 tile: 20 + 9 loaded of 32 AVX-512 registers;
    // with AVX2's 16 registers, 10 vectors of lanes)
    const int64_t acc = tile_accumulators(k), acc_lanes = acc >= 16 ? 256 : acc * lanes;
    if (vlanes > 1 && (up * vlanes <= acc_lanes || (vlanes == lanes && up <= acc))) k.apply_opt({OptOps::UNROLL, raxis - k.first_reduce(), vlanes});
    // (not under a tile of whole vectors: the lowerer's accumulators then run along the unrolled taps,
    // 64 float2 where the tile wanted 8 float16: a 2-tap conv phase ran 10x slower. A tile of 16 lanes at least,
    // as with AVX-512's: AVX2's 4 x 3 tile of a gather's fused arange (12 lanes) keeps its taps unrolled, whose
    // loop the linearizer misplaced, bench/NOTES_cpu_avx2.md)
    else if (s <= 32 && up * s <= 256 && !(vaxis && up >= std::max<int64_t>(lanes, 16)))
      k.apply_opt({OptOps::UNROLL, raxis - k.first_reduce(), 0});
  }
  if (k.upcasted == 0 && cpu_transpose_tile(k)) return;
  if (k.upcasted == 0 && k.first_reduce() == k.first_upcast() && k.first_reduce() > 0 && k.full_unupcasted_shape().back() % 4 == 0)
    k.apply_opt({OptOps::UPCAST, static_cast<int64_t>(k.full_unupcasted_shape().size()) - 1, 4});
}

}  // namespace

Kernel& Kernel::hand_coded_optimizations() {
  required_optimizations();
  // tensor cores first (TC=0 turns them off), as 0.9.2's get_kernel; unlike 0.9.2 every (N, M, K) axis choice
  // is tried, not only the last one (a conv's last reduce axis is its 3-wide kernel, the first its channels)
  if (applied_opts.empty())
    for (int64_t axis = 0; axis < 9; axis++)
      if (apply_tensor_cores(getenv("TC", 1), std::nullopt, axis)) return *this;
  if (!opts->has_local && getenv("CPU_HEURISTIC", 1)) {
    cpu_optimizations(*this);
    return *this;
  }
  if (gpu_reduce(*this)) return *this;
  if (matvec(*this)) return *this;
  if (opts->has_local && opts->has_shared) grouptop(*this);
  if (group_for_reduces) return *this;   // no more opts when grouping

  upcast_masked_axes(*this);
  upcast_expanded_axes(*this);
  unroll_small_reduce(*this);
  // if nothing at all is upcasted and it's easy to, upcast the last axis by 4
  if (upcasted == 0 && !full_unupcasted_shape().empty() && full_unupcasted_shape().back() % 4 == 0)
    apply_opt({OptOps::UPCAST, static_cast<int64_t>(full_unupcasted_shape().size()) - 1, 4});
  else if (opts->has_local) upcast_store_vectors(*this);
  if (opts->has_local) add_locals(*this);
  return *this;
}

}  // namespace tg
