// cpu_gemm_pack (see pack.hpp): finds the SUM(a*b) whose b is worth packing and builds the two asts.
#include "codegen/pack.hpp"

#include <algorithm>
#include <functional>
#include <iostream>
#include <numeric>
#include <unordered_map>

#include "codegen/lowerer.hpp"
#include "cpu_threads.hpp"
#include "shape/shapetracker_arg.hpp"
#include "tg/helpers.hpp"

namespace tg {

namespace {

bool is_buffer_load(const UOp& u) {
  return u->op == Ops::LOAD && u->src.size() == 2 && u->src[0]->op == Ops::DEFINE_GLOBAL && u->src[1]->op == Ops::SHAPETRACKER;
}

// root with every ShapeTracker rewritten by st_fn, every REDUCE_AXIS's axes by axes_fn, and the node `from` (if any)
// replaced by `to`
UOp map_trackers(const UOp& root, const std::function<ShapeTracker(const ShapeTracker&)>& st_fn,
                 const std::function<std::vector<int64_t>(std::vector<int64_t>)>& axes_fn, const UOp* from = nullptr,
                 const UOp* to = nullptr) {
  std::unordered_map<const UOpNode*, UOp> memo;
  std::function<UOp(const UOp&)> go = [&](const UOp& u) -> UOp {
    if (from && u == *from) return *to;
    if (auto it = memo.find(u.get()); it != memo.end()) return it->second;
    UOp r;
    if (u->op == Ops::SHAPETRACKER) {
      r = st_uop(st_fn(st_of(u)));
    } else {
      std::vector<UOp> src;
      for (const UOp& x : u->src) src.push_back(go(x));
      Arg arg = u->arg;
      if (u->op == Ops::REDUCE_AXIS) arg = ReduceArg{u->as<ReduceArg>().op, axes_fn(u->as<ReduceArg>().axes)};
      r = UOp(u->op, u->dtype, std::move(src), arg);
    }
    memo.emplace(u.get(), r);
    return r;
  };
  return go(root);
}

// The ast with every ShapeTracker's axis v split into `parts` (outermost first, their product shape[v]),
// the reduce axes moved with it, and the node `b` replaced by `nb`.
UOp split_ast(const UOp& ast, int64_t v, const std::vector<int64_t>& parts, const UOp& b, const UOp& nb) {
  const int64_t extra = static_cast<int64_t>(parts.size()) - 1;
  auto split = [&](const ShapeTracker& st) {
    Shape s = st.shape();
    TG_ASSERT(static_cast<int64_t>(s.size()) > v && s[v] == prod(parts), "pack: a tracker without the split axis: " + st.str());
    s.erase(s.begin() + v);
    s.insert(s.begin() + v, parts.begin(), parts.end());
    return st.reshape(s);
  };
  auto moved = [&](std::vector<int64_t> axes) {
    for (int64_t& a : axes) a += a > v ? extra : 0;
    return axes;
  };
  return map_trackers(ast, split, moved, &b, &nb);
}

// How many K blocks a packed GEMM's reduce takes (1: none): enough that a row tile's 8 rows of A (8 x kc floats)
// fill at most 2/3 of the L1, kc a multiple of the lanes. The threads never split the block axis (its blocks add to
// the same outputs in turn: codegen/lowerer.cpp keeps it out of the parallel loop, and the Kernel takes no opt of it
// but SWAP, so BEAM searches it too); only where the panels and row tiles alone give the parallel loop
// cpu_units_per_thread iterations a thread (lowerer.cpp parallel_dims). CPU_KBLOCK=kc sets the block (0: none). 2048^3 on the device host's Xeon (48 KB
// L1), 2 threads, 8 runs alternated: 2 blocks of 1024 faster than one pass in 7 of 8 (median 280 against 270 GFLOPS),
// 4 of 512 slower (248; bench/NOTES_cpu_gemm.md, session 16).
int64_t k_blocks(int64_t K, int64_t lanes, int64_t units) {
  if (units < cpu_units_per_thread(cpu_threads()) * cpu_threads()) return 1;
  const int64_t forced = getenv("CPU_KBLOCK", -1);
  if (forced == 0) return 1;
  if (forced > 0) return K % forced == 0 && forced % lanes == 0 ? K / forced : 1;
  const int64_t fit = cpu_caches().l1 * 2 / 3 / (8 * 4);
  int64_t kb = 1;
  while (K / kb > fit && K % (2 * kb) == 0 && (K / (2 * kb)) % lanes == 0) kb *= 2;
  return K / kb > fit ? 1 : kb;
}

// K blocking of a packed GEMM whose A rows overflow the L1: the reduce axis k (of extent K) becomes
// (kb, kc) with kb an output axis placed at `pos` (after the panel axis, so the loops run panel, row
// tile, kb, tile, k), the store broadcast along kb, and each kb adding the stored partial sum of the
// ones before it (a load of the output masked to kb >= 1: 0 at kb = 0). A row tile's 8 x kc block of
// A then stays in L1 across the panel's tiles, where 8 x K (64 KB at K = 2048) went back to L2 for
// every tile. Only for a store of the bare reduce (no epilogue to apply once).
UOp kblock_ast(const UOp& gemm, int64_t k, int64_t kb, int64_t pos) {
  TG_ASSERT(pos < k, "kblock: the block axis goes before the reduce");
  const UOp& store = gemm->src[0];
  const UOp& red = store->src[2];
  auto regroup = [&](const ShapeTracker& st) {
    Shape s = st.shape();
    const int64_t ext = s[k];
    s[k] = ext == 1 ? 1 : ext / kb;
    s.insert(s.begin() + k, ext == 1 ? 1 : kb);
    ShapeTracker r = st.reshape(s);
    if (ext == 1) s[k] = kb, r = r.expand(s);   // the store: every kb writes the same element
    std::vector<int> perm;
    for (int i = 0; i < static_cast<int>(s.size()); i++)
      if (i != k) perm.push_back(i);
    perm.insert(perm.begin() + pos, static_cast<int>(k));
    return r.permute(perm);
  };
  auto reduce_kc = [&](const std::vector<int64_t>&) { return std::vector<int64_t>{k + 1}; };
  const UOp nred = map_trackers(red, regroup, reduce_kc), out_st = map_trackers(store->src[1], regroup, reduce_kc);
  Mask later;
  for (int64_t d : st_of(out_st).shape()) later.emplace_back(0, d);
  later[pos] = {1, kb};
  Mask pad(later.size(), {0, 0});
  pad[pos] = {1, 0};
  const UOp before = UOp(Ops::LOAD, red->dtype, {store->src[0], st_uop(st_of(out_st).shrink(later).pad(pad))});
  const UOp sum = UOp(Ops::ALU, red->dtype, {nred, before}, BinaryOps::ADD);
  return UOp(Ops::SINK, dtypes::void_, {UOp(Ops::STORE, dtypes::void_, {store->src[0], out_st, sum})});
}

}  // namespace

std::optional<PackPlan> cpu_gemm_pack(const UOp& ast, const Renderer& ren) {
  if (ren.has_local || !getenv("CPU_PACK", 1) || ren.register_bytes < 16) return std::nullopt;
  if (ast->op != Ops::SINK || ast->src.size() != 1 || ast->src[0]->op != Ops::STORE) return std::nullopt;
  const UOp& store = ast->src[0];
  // the one reduce under the store; what sits between them is an elementwise epilogue (a fused bias,
  // relu or its backward's mask, a cast) that split_ast carries along like the rest of the ast
  UOp red;
  int reduces = 0;
  for (const UOp& u : store->src[2].toposort())
    if (u->op == Ops::REDUCE_AXIS) red = u, reduces++;
  if (reduces != 1 || red->as<ReduceArg>().op != ReduceOps::SUM) return std::nullopt;
  const UOp& mul = red->src[0];
  if (mul->op != Ops::ALU || !mul->is<BinaryOps>() || mul->as<BinaryOps>() != BinaryOps::MUL || mul->dtype != dtypes::float32)
    return std::nullopt;
  if (!is_buffer_load(mul->src[0]) || !is_buffer_load(mul->src[1])) return std::nullopt;
  const ShapeTracker& out = st_of(store->src[1]);
  if (out.symbolic() || st_of(mul->src[0]->src[1]).symbolic() || st_of(mul->src[1]->src[1]).symbolic()) return std::nullopt;
  const Shape& full = st_of(mul->src[0]->src[1]).shape();
  const int64_t n = static_cast<int64_t>(full.size());
  const std::vector<int64_t>& raxes = red->as<ReduceArg>().axes;   // K: every reduce axis (a conv's ci, ky, kx)
  auto is_reduce = [&](int64_t i) { return std::find(raxes.begin(), raxes.end(), i) != raxes.end(); };
  const int64_t lanes = ren.register_bytes / 4, r = raxes.back();   // (the register tile's)
  int64_t K = 1;
  for (int64_t i : raxes) K *= full[i];
  const auto so = out.real_strides();
  int64_t max_global = -1;
  for (const UOp& u : ast.toposort())
    if (u->op == Ops::DEFINE_GLOBAL) max_global = std::max(max_global, u->as<int64_t>());

  for (int which : {1, 0}) {
    const UOp &a = mul->src[1 - which], &b = mul->src[which];
    const ShapeTracker &sta = st_of(a->src[1]), &stb = st_of(b->src[1]);
    const auto sa = sta.real_strides(), sb = stb.real_strides();
    auto bcast = [](const std::optional<int64_t>& s) { return s && *s == 0; };
    bool b_reads_k = true;
    for (int64_t i : raxes) b_reads_k = b_reads_k && !bcast(sb[i]);
    if (!b_reads_k) continue;
    for (int64_t v = n - 1; v >= 0; v--) {
      // the output is stored along N: contiguous, or strided after a long reduce (a conv's output
      // channels: one scattered store per output against K loads and FMAs)
      if (is_reduce(v) || !so[v] || (*so[v] != 1 && K < 64) || !bcast(sa[v]) || bcast(sb[v]) || full[v] % lanes != 0) continue;
      // already panel-shaped: consecutive lanes along N and the next k within a cache line or two. The GEMM
      // reads it as it is, and the other operand isn't packed instead (a strided conv's 1x1 phase, whose
      // weight gradient reads grad_output's panel copy, packed x's phase instead: tensor/conv.cpp panel_copy)
      if (sb[v] == 1 && sb[r] && *sb[r] > 0 && *sb[r] * 4 <= 2 * 64) return std::nullopt;
      // the rows: an output axis b is broadcast along and a isn't; every other axis b reads must be a batch axis of a too
      int64_t rows = 0;
      bool ok = true;
      std::vector<int64_t> batch;
      for (int64_t i = 0; i < n && ok; i++) {
        if (i == v || is_reduce(i) || full[i] == 1) continue;
        if (bcast(sb[i])) rows = std::max(rows, bcast(sa[i]) ? 0 : full[i]);
        else if (bcast(sa[i])) ok = false;   // b varies where a is broadcast (a conv's image): packing would copy windows
        else batch.push_back(i);
      }
      if (!ok || rows < 32) continue;
      // the panel: two vectors wide (the register tile's columns), or a few tiles side by side when
      // that still fits half the L2: the row tiles then sweep the tiles of one panel in turn while their
      // rows of a stay in L1, which divides the passes over a by that many (2048^3: a is 16 MB)
      int64_t nc = full[v] % (2 * lanes) == 0 ? 2 * lanes : lanes;
      // (the threads split the panels: at least two each)
      for (int64_t blk : {4, 2})
        if (nc == 2 * lanes && full[v] % (nc * blk) == 0 && full[v] / (nc * blk) >= 2 * cpu_threads() &&
            K * nc * blk * 4 <= cpu_caches().l2 / 2 && blk <= getenv("CPU_PACK_BLOCK", 4)) {
          nc *= blk;
          break;
        }
      // the panel (K x nc) must stay in half the L2 (no K-blocking here); the work must dwarf the copy
      if (K * nc * 4 > cpu_caches().l2 / 2 || K < 16) continue;   // (nc was only widened within it)
      int64_t bsize = full[v] * K, work = 1;
      for (int64_t i : batch) bsize *= full[i];
      for (int64_t i = 0; i < n; i++) work *= full[i];
      if (work < (int64_t{1} << 21) || bsize > (int64_t{1} << 26)) continue;

      // The split shape: v -> (panels, tiles, tile columns) at v, v + 1, v + 2; the reduce axes move past it.
      // The scratch keeps each tile's K x tw columns contiguous ([panel][tile][K][tw]): the register tile
      // then streams one line pair per k, where a panel laid out [K][nc] put its k steps nc floats apart
      // (512 bytes at nc = 128: every k step of a tile on 2 of each 16 L1 sets, 1/8 of the L1 for B, and
      // 4 interleaved streams for the prefetcher). One core, 2048^3 laid out by tiles: 116-128 GFLOPS per
      // CPU second against 105-110 by panels (a C model of the generated loop, same hour).
      // (a panel of one tile keeps two parts: no 1-long axis)
      const int64_t tw = nc % (2 * lanes) == 0 ? 2 * lanes : nc;
      const std::vector<int64_t> parts = nc > tw ? std::vector<int64_t>{full[v] / nc, nc / tw, tw} : std::vector<int64_t>{full[v] / nc, nc};
      const int64_t e = static_cast<int64_t>(parts.size()) - 1;   // the tile columns' axis is v + e
      Shape split = full;
      split.erase(split.begin() + v);
      split.insert(split.begin() + v, parts.begin(), parts.end());
      std::vector<int64_t> order;   // the scratch's axes in split coordinates, outermost first
      for (int64_t i : batch) order.push_back(i + (i > v ? e : 0));
      for (int64_t j = 0; j < e; j++) order.push_back(v + j);
      for (int64_t i : raxes) order.push_back(i + (i > v ? e : 0));
      order.push_back(v + e);
      // Panels lie a line apart more than their tiles fill: a panel's stride then isn't its tiles' (tiles x
      // K x tw), so the Kernel keeps panel and tile as two axes instead of merging them, and the L2 order
      // (heuristic.cpp swap_for_l2) can put the panels outermost with the row tiles between them and the
      // tiles: a row tile's rows of a stay in L1 across its panel's tiles. Merged, the tiles went outermost
      // and a streamed once per tile (1024^3: 75-79 GFLOPS per CPU second against 119-125).
      const int64_t pad = e == 2 ? cpu_caches().line / 4 : 0;
      std::vector<int64_t> strides(split.size(), 0);
      int64_t acc = 1;
      Shape pshape;
      for (size_t j = order.size(); j-- > 0;) {
        strides[order[j]] = acc, acc *= split[order[j]];
        if (order[j] == v + 1 && e == 2) acc += pad;
      }
      std::vector<int64_t> pstrides;
      for (int64_t i : order) pshape.push_back(split[i]), pstrides.push_back(strides[i]);
      const DType ptr = dtypes::float32.ptr_to();
      // the scratch takes b's place among the kernel's buffers unless b is read elsewhere too (x @ x)
      bool b_elsewhere = false;
      for (const UOp& u : ast.toposort())
        b_elsewhere = b_elsewhere || (u != b && u->op == Ops::LOAD && u->src[0] == b->src[0]);
      const int64_t scratch_index = b_elsewhere ? max_global + 1 : b->src[0]->as<int64_t>();
      const UOp scratch = UOp(Ops::DEFINE_GLOBAL, ptr, {}, scratch_index);
      const UOp nb = UOp(Ops::LOAD, dtypes::float32, {scratch, st_uop(ShapeTracker({View::create(split, strides)}))});

      // the copy: b's view in split coordinates, its broadcast axes shrunk to one element, the scratch order
      ShapeTracker pst = stb.reshape(split);
      Mask sh;
      for (size_t i = 0; i < split.size(); i++)
        sh.emplace_back(0, std::find(order.begin(), order.end(), static_cast<int64_t>(i)) != order.end() ? split[i] : 1);
      pst = pst.shrink(sh);
      std::vector<int> perm(order.begin(), order.end());
      for (int i = 0; i < static_cast<int>(split.size()); i++)
        if (std::find(order.begin(), order.end(), i) == order.end()) perm.push_back(i);
      pst = pst.permute(perm).reshape(pshape);
      const UOp load = UOp(Ops::LOAD, dtypes::float32, {UOp(Ops::DEFINE_GLOBAL, ptr, {}, int64_t{1}), st_uop(pst)});
      const UOp pstore = UOp(Ops::STORE, dtypes::void_, {UOp(Ops::DEFINE_GLOBAL, ptr, {}, int64_t{0}), st_uop(ShapeTracker({View::create(pshape, pstrides)})), load});

      PackPlan plan;
      plan.pack_ast = UOp(Ops::SINK, dtypes::void_, {pstore});
      plan.gemm_ast = split_ast(ast, v, parts, b, nb);
      // (the block axis goes right after the panels, inside every other output axis: the rows must come before N)
      bool rows_before = true;
      for (int64_t i = v + 1; i < n; i++) rows_before = rows_before && (is_reduce(i) || full[i] == 1);
      const int64_t rk = r + (r > v ? e : 0);
      if (const int64_t kb = k_blocks(K, lanes, full[v] / nc * (rows / 8)); kb > 1 && raxes.size() == 1 && batch.empty() &&
                                                                             rows_before && store->src[2] == red && rk > v + 1) {
        if (debug() >= 4) std::cout << "cpu k blocks : " << kb << " x " << K / kb << "\n";
        plan.gemm_ast = kblock_ast(plan.gemm_ast, rk, kb, v + 1);
        plan.k_blocks = kb;
      }
      plan.b_index = b->src[0]->as<int64_t>();
      plan.scratch_index = scratch_index;
      plan.scratch_size = acc;
      plan.dtype = dtypes::float32;
      plan.nc = nc;
      if (debug() >= 4) std::cout << "cpu pack : b (global " << plan.b_index << ") as " << to_str(pshape) << "\n";
      return plan;
    }
  }
  return std::nullopt;
}

}  // namespace tg
