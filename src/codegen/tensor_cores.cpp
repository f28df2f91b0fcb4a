// Tensor cores (tinygrad 0.9.2 Kernel._create_tc_opts / _apply_tc_opt / apply_tensor_cores and the WMMA
// part of get_optimized_ast).
//
// A SUM over MUL(LOAD a, LOAD b) (optionally CAST to the accumulator dtype) whose dtypes match one of the
// renderer's tensor cores becomes a warp-wide matrix multiply-accumulate. The opt only reshapes the
// iteration space: K is unrolled 8 then 2, M and N are upcast by 2, and the warp's 32 threads are LOCAL
// dims of N (2x2) and M (2x2x2). get_optimized_ast then permutes each operand's ShapeTracker (fix_st) so
// that the per-thread upcast lanes and the lane index address exactly the fragment the instruction
// expects (PTX ISA, "Matrix Fragments for mma.m16n8k16"), and replaces the reduce by a WMMA node whose
// operands are CONTRACTed over those upcast axes by the lowerer.
#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "codegen/kernel.hpp"
#include "codegen/tc_gemm.hpp"
#include "shape/shapetracker_arg.hpp"

namespace tg {

void TensorCoreOptions::fix_axes(int64_t removed_axis) {
  for (int tc_dim = 0; tc_dim < 2; tc_dim++) {
    if (!axes_exist[tc_dim]) continue;
    if (removed_axis < axes[tc_dim]) axes[tc_dim] -= 1;
    else if (removed_axis == axes[tc_dim]) axes_exist[tc_dim] = false;
  }
}

namespace {

bool is_mul(const UOp& u) { return u->op == Ops::ALU && u->is<BinaryOps>() && u->as<BinaryOps>() == BinaryOps::MUL; }
bool is_ast_load(const UOp& u) { return u->op == Ops::LOAD && u->src.size() >= 2 && u->src[1]->op == Ops::SHAPETRACKER; }

}  // namespace

std::optional<TensorCoreOptions> Kernel::create_tc_opts(const UOp& reduceop, const TensorCore& tc, int64_t axis, int64_t opt_level) {
  const bool has_cast = tc.dtype_in != tc.dtype_out;
  const UOp& src0 = reduceop->src[0];
  if (has_cast && !(src0->op == Ops::CAST && src0->dtype == tc.dtype_out)) return std::nullopt;
  const UOp& mul_op = has_cast ? src0->src[0] : src0;
  if (!is_mul(mul_op)) return std::nullopt;

  // the bufs index of an operand: a load of the input dtype, or (TC_OPT >= 1) a cast of a load to it
  auto buf_index = [&](const UOp& s) -> std::optional<int> {
    const UOp* l = nullptr;
    if (is_ast_load(s) && s->dtype == tc.dtype_in) l = &s;
    else if (opt_level >= 1 && s->op == Ops::CAST && s->dtype == tc.dtype_in && is_ast_load(s->src[0])) l = &s->src[0];
    if (!l) return std::nullopt;
    auto it = std::find(bufs.begin(), bufs.end(), *l);
    if (it == bufs.end()) return std::nullopt;
    return static_cast<int>(it - bufs.begin());
  };
  const auto buf0 = buf_index(mul_op->src[0]), buf1 = buf_index(mul_op->src[1]);
  if (!buf0 || !buf1) return std::nullopt;

  const auto s0 = sts[*buf0].real_strides(), s1 = sts[*buf1].real_strides();
  // N candidates: axes buf0 broadcasts over (it is the B side); M: axes buf1 broadcasts over
  std::vector<int64_t> axis_buf0, axis_buf1;
  for (int64_t i = 0; i < first_reduce(); i++) {
    if (s0[i] && *s0[i] == 0) axis_buf0.push_back(i);
    if (s1[i] && *s1[i] == 0) axis_buf1.push_back(i);
  }
  if (axis_buf0.empty() || axis_buf1.empty() || !(shape_len() - first_reduce() == 1 || opt_level >= 1)) return std::nullopt;

  // itertools.product(axis_buf0, axis_buf1, reduce axes), taken from the end
  const int64_t n_red = shape_len() - first_reduce();
  const int64_t n_choices = static_cast<int64_t>(axis_buf0.size() * axis_buf1.size()) * n_red;
  if (!(axis < n_choices)) return std::nullopt;
  const int64_t c = n_choices - 1 - axis;
  const int64_t s2 = first_reduce() + c % n_red, s1i = axis_buf1[(c / n_red) % axis_buf1.size()],
                s0i = axis_buf0[c / n_red / axis_buf1.size()];

  TensorCoreOptions o;
  o.axes = {s0i, s1i, s2};   // N, M, K
  for (int i = 0; i < 3; i++)
    if (full_shape()[o.axes[i]] % tc.dims[i] != 0) o.axis_pads.push_back({o.axes[i], tc.dims[i]});
  if (!o.axis_pads.empty() && opt_level < 2) return std::nullopt;
  bool found = false;
  for (auto& [r, b] : bufs_for_tensor_core)
    if (r == reduceop) b = {*buf0, *buf1}, found = true;
  if (!found) bufs_for_tensor_core.push_back({reduceop, {*buf0, *buf1}});
  if (debug() >= 3) std::cout << "TENSOR CORES " << to_str(axis_buf0) << " " << to_str(axis_buf1) << " " << tc.str() << "\n";
  return o;
}

bool Kernel::apply_tc_opt(int64_t use_tc, int64_t axis, int64_t opt_level) {
  if (!(use_tc && opts->has_local && reduceop() && (*reduceop())->as<ReduceArg>().op == ReduceOps::SUM)) return false;
  for (const TensorCore& tc : opts->tensor_cores) {
    std::vector<std::optional<TensorCoreOptions>> all;
    for (const UOp& r : reduceops) all.push_back(create_tc_opts(r, tc, axis, opt_level));
    // fused reduces can only share one tensor core layout
    opt_check(std::all_of(all.begin(), all.end(), [&](auto& o) { return o == all[0]; }), "reduces need different tensor core opts");
    if (!all[0]) continue;
    tensor_core_opts = all[0];
    try {
      for (auto [ax, dim] : std::vector<std::pair<int64_t, int64_t>>(tensor_core_opts->axis_pads)) apply_opt({OptOps::PADTO, ax, dim}, false);
    } catch (const KernelOptError&) {
      continue;
    }
    opt_check(opts->device == "CUDA" || opts->device == "NV", "tensor cores are only laid out for CUDA, not " + opts->device);
    // K: unroll 8 then 2; M and N: upcast 2; then the warp's threads as LOCAL dims (tensor_core_opts follow the axes)
    apply_opt({OptOps::UNROLL, tensor_core_opts->axes[2] - first_reduce(), 8}, false);
    apply_opt({OptOps::UNROLL, tensor_core_opts->axes[2] - first_reduce(), 2}, false);
    apply_opt({OptOps::UPCAST, tensor_core_opts->axes[1], 2}, false);
    apply_opt({OptOps::UPCAST, tensor_core_opts->axes[0], 2}, false);
    for (auto [tc_dim, tc_amt] : tc.threads) apply_opt({OptOps::LOCAL, tensor_core_opts->axes[tc_dim], tc_amt}, false);
    tensor_core = tc;
    use_tensor_cores = use_tc;
    return true;
  }
  return false;
}

bool Kernel::apply_tensor_cores(int64_t use_tc, const std::optional<std::vector<Opt>>& extra_opts, int64_t axis, std::optional<int64_t> tc_opt) {
  const int64_t level = tc_opt.value_or(getenv("TC_OPT", 0));
  if (apply_tensor_cores_at(use_tc, extra_opts, axis, level)) return true;
  // M, N or K not a multiple of the tensor core's dims: the shared-memory GEMM template predicates its copies and
  // stores, so with no TC_OPT asked for, the padded opt (level 2) is taken when the template covers the kernel
  if (tc_opt || !getenv_str("TC_OPT").empty() || level >= 2 || use_tc != 1) return false;
  const Kernel before = *this;
  if (apply_tensor_cores_at(use_tc, extra_opts, axis, 2) && tc_gemm_applies(*this)) return true;
  *this = before;
  return false;
}

bool Kernel::apply_tensor_cores_at(int64_t use_tc, const std::optional<std::vector<Opt>>& extra_opts, int64_t axis, int64_t level) {
  if (use_tc == 0 || (opts->tensor_cores.empty() && use_tc != 2)) return false;
  const Kernel before = *this;   // a failed attempt leaves no half-applied opts behind
  // (a symbolic kernel skips failed opts: the TC opt must fail here, else every symbolic kernel
  // "had tensor cores" and got no other opt)
  skip_failed_opts = false;
  try {
    apply_opt({OptOps::TC, axis, level});
    if (tensor_core_opts) {
      if (extra_opts) {
        for (const Opt& o : *extra_opts) apply_opt(o);
      } else {
        // hand-coded TC opts: upcast M, then N, by the largest of 5..2 dividing them; then a LOCAL of N
        auto late_upcast_tc = [&](int tc_dim) {
          if (!tensor_core_opts->axes_exist[tc_dim]) return;
          const int64_t sz = full_shape()[tensor_core_opts->axes[tc_dim]];
          for (int64_t upc : {5, 4, 3, 2})
            if (sz % upc == 0) { apply_opt({OptOps::UPCAST, tensor_core_opts->axes[tc_dim], upc}); return; }
        };
        late_upcast_tc(1);
        late_upcast_tc(0);
        if (tensor_core && tensor_core_opts->axes_exist[0])
          for (int64_t upc : {4, 2})
            if (full_shape()[tensor_core_opts->axes[0]] % upc == 0) {
              apply_opt({OptOps::LOCAL, tensor_core_opts->axes[0], upc});
              break;
            }
      }
    }
    skip_failed_opts = before.skip_failed_opts;
    return true;
  } catch (const KernelOptError&) {
    *this = before;
    return false;
  }
}

std::pair<std::function<ShapeTracker(const ShapeTracker&)>, std::function<ShapeTracker(const ShapeTracker&)>> Kernel::tc_fix_sts() const {
  using StFn = std::function<ShapeTracker(const ShapeTracker&)>;
  const int64_t wd = global_dims(), tcd = first_upcast();
  // Regroup the warp (local) dims and the tensor core's upcast dims of one operand's ShapeTracker: split the
  // upcast dims into 2s, permute warp+upcast dims by the two patterns ((0, i): warp dim i, (1, i): upcast dim
  // i), merge back. The lanes then address the operand's fragment of the mma.sync layout.
  using Pattern = std::vector<std::pair<int, int64_t>>;
  auto fix_st = [wd, tcd](const Shape& warp_dims, const Shape& tcd_dims, const Shape& tcd_expand, const Pattern& p1, const Pattern& p2,
                          const ShapeTracker& st1) {
    const Shape& s = st1.shape();
    TG_ASSERT(Shape(s.begin() + wd, s.begin() + wd + warp_dims.size()) == warp_dims, "warp dims wrong: " + to_str(s));
    TG_ASSERT(Shape(s.begin() + tcd, s.begin() + tcd + tcd_dims.size()) == tcd_dims, "tcd dims wrong: " + to_str(s));
    Shape new_shape(s.begin(), s.begin() + tcd);
    new_shape.insert(new_shape.end(), tcd_expand.begin(), tcd_expand.end());
    new_shape.insert(new_shape.end(), s.begin() + tcd + tcd_dims.size(), s.end());
    std::vector<int> perm;
    auto add_pattern = [&](const Pattern& p) {
      for (auto [x, y] : p) perm.push_back(static_cast<int>(y + (x == 0 ? wd : tcd)));
    };
    for (int64_t i = 0; i < wd; i++) perm.push_back(static_cast<int>(i));
    add_pattern(p1);
    for (int64_t i = wd + static_cast<int64_t>(warp_dims.size()); i < tcd; i++) perm.push_back(static_cast<int>(i));
    add_pattern(p2);
    for (int64_t i = tcd + static_cast<int64_t>(tcd_expand.size()); i < static_cast<int64_t>(new_shape.size()); i++)
      perm.push_back(static_cast<int>(i));
    return st1.reshape(new_shape).simplify().permute(perm).reshape(s).simplify();
  };
  TG_ASSERT(opts->device == "CUDA" || opts->device == "NV", "unsupported device for tensor cores: " + opts->device);
  const Shape warp{2, 2, 2, 2, 2}, tcd_dims{8, 2, 2, 2}, tcd_expand{2, 2, 2, 2, 2, 2};
  const StFn fix_st1 = [=](const ShapeTracker& st) {
    return fix_st(warp, tcd_dims, tcd_expand, {{1, 1}, {1, 0}, {0, 2}, {0, 3}, {0, 4}}, {{1, 3}, {1, 4}, {1, 2}, {0, 0}, {0, 1}, {1, 5}}, st);
  };
  const StFn fix_st2 = [=](const ShapeTracker& st) {
    return fix_st(warp, tcd_dims, tcd_expand, {{1, 1}, {1, 0}, {1, 5}, {0, 0}, {0, 1}}, {{0, 4}, {0, 2}, {1, 4}, {0, 3}, {1, 3}, {1, 2}}, st);
  };

  return {fix_st1, fix_st2};
}

// The index of a fix_st'd operand goes through a second (contiguous) view over the whole iteration space; its
// strides are int32 constants in the kernel, and one that doesn't fit wraps and breaks the index (a 2048^3 GEMM
// with TC and a LOCAL of 32 read out of bounds on the H100). Such opts are rejected.
void Kernel::check_tc_index_range() const {
  if (!tensor_core || use_tensor_cores != 1) return;
  const auto [f1, f2] = tc_fix_sts();
  for (const auto& [r, b] : bufs_for_tensor_core)
    for (auto [i, f] : {std::pair{b.first, &f1}, std::pair{b.second, &f2}})
      for (const View& v : (*f)(sts[i]).views) {
        bool fits = std::abs(v.offset) < (int64_t{1} << 31);
        for (int64_t st : v.strides) fits = fits && std::abs(st) < (int64_t{1} << 31);
        opt_check(fits, "tensor core operand index needs strides beyond int32: " + (*f)(sts[i]).str());
      }
}

UOp Kernel::tensor_core_reduce(const UOp& op, const std::vector<int64_t>& axes,
                               const std::function<UOp(const UOp&, const std::function<ShapeTracker(const ShapeTracker&)>*)>& fixup) const {
  const TensorCore& tc = *tensor_core;
  const int64_t tcd = first_upcast();
  // CUDA m16n8k16: A (8 lanes of upcast 0) and B/C (upcast 2 and 3)
  const std::vector<int64_t> reduce_axes{0, 1};
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> upcast_axes{{{0, 8}}, {{2, 2}, {3, 2}}, {{2, 2}, {3, 2}}};
  UOp rsrc = op->src[0];
  if (rsrc->op == Ops::CAST) rsrc = rsrc->src[0];
  TG_ASSERT(is_mul(rsrc), "a tensor core reduce must be over a MUL: " + rsrc.str());

  const auto [fix_st1, fix_st2] = tc_fix_sts();

  auto arg = std::make_shared<WMMAArg>();
  arg->name = tc.str();
  arg->dims = tc.dims;
  arg->dtype_in = tc.dtype_in;
  arg->dtype_out = tc.dtype_out;
  arg->device = opts->device;
  for (const auto& up : upcast_axes) {
    arg->upcast_axes.emplace_back();
    for (auto [ax, sz] : up) arg->upcast_axes.back().push_back({tcd + ax, sz});
  }
  for (int64_t ax : reduce_axes) arg->reduce_axes.push_back(tcd + ax);

  UOp ret;
  if (use_tensor_cores >= 2) {
    // TC=2: the tensor core's shapes with a plain multiply and sum (no ShapeTracker fixup)
    UOp mul = fixup(rsrc->src[0], nullptr).alu(BinaryOps::MUL, fixup(rsrc->src[1], nullptr));
    if (mul->dtype != tc.dtype_out) mul = mul.cast(tc.dtype_out);
    ret = UOp(Ops::REDUCE_AXIS, tc.dtype_out, {mul}, ReduceArg{ReduceOps::SUM, arg->reduce_axes});
  } else {
    ret = UOp(Ops::WMMA, tc.dtype_out, {fixup(rsrc->src[0], &fix_st1), fixup(rsrc->src[1], &fix_st2)}, ArgObjPtr(arg));
  }
  std::vector<int64_t> new_reduce_axes;
  for (int64_t a : axes)
    if (std::find(reduce_axes.begin(), reduce_axes.end(), a - tcd) == reduce_axes.end()) new_reduce_axes.push_back(a);
  return new_reduce_axes.empty() ? ret : UOp(Ops::REDUCE_AXIS, op->dtype, {ret}, ReduceArg{op->as<ReduceArg>().op, new_reduce_axes});
}

}  // namespace tg
