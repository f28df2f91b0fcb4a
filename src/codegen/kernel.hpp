// Kernel: one scheduled AST plus the optimizations applied to it (tinygrad 0.9.2 codegen/kernel.py).
//
// The AST is a SINK of STOREs (engine/schedule.hpp). Every LOAD/STORE/CONST carries a ShapeTracker;
// the Kernel keeps its own copies (`sts`) and reshapes/permutes them all together, so an opt is a
// change of the iteration space only. The shape is laid out in chunks (see colors()):
//   global dims | local dims | group-for-reduce dims | reduce loops | upcasted dims
// get_optimized_ast() writes the reshaped sts back into the AST; linearize() lowers it to UOps.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <tuple>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "renderer/renderer.hpp"
#include "tg/helpers.hpp"
#include "tg/shapetracker.hpp"
#include "uop/uop.hpp"

namespace tg {

enum class OptOps : uint8_t { TC, UPCAST, UPCASTMID, UNROLL, LOCAL, GROUP, GROUPTOP, NOLOCALS, PADTO, SWAP };
std::string to_string(OptOps op);   // "OptOps.UPCAST"

// An opt that doesn't apply to this kernel. BEAM search catches it and skips the candidate.
class KernelOptError : public Error {
 public:
  using Error::Error;
};

class Kernel;

struct Opt {
  OptOps op;
  std::optional<int64_t> axis;   // UNROLL counts from first_reduce, GROUP/GROUPTOP after the groups
  std::optional<int64_t> amt;    // 0: the whole axis
  int64_t real_axis(const Kernel& k) const;
  std::string str() const;       // "Opt(op=OptOps.UPCAST, axis=0, amt=4)"
  bool operator==(const Opt&) const = default;
};

// What the lowerer needs beyond the ShapeTrackers (tinygrad's KernelInfo); stored as the SINK's
// arg {local_dims, upcasted, dont_use_locals, n_splits, then (axis, amt) per split symbolic axis,
// then (axis, group axis) per grouped symbolic axis}.
// A split symbolic axis (a dim N that is an expression of Variables, which no tracker can reshape
// into N/amt x amt) is lowered as a loop of N/amt tiles of amt unrolled lanes plus a loop over the
// N%amt left: a reduce loop (UNROLL), or a global dim (UPCAST: the kernel's stores run in both
// loops; on a GPU instead ceil(N/amt) threads of amt lanes, masked to < N): see lowerer.cpp.
// A grouped symbolic axis (GROUP by g) keeps its dim N whole; a group axis of size g (broadcast in
// every tracker) is added for the threads, and every loop over N is a block-stride loop: thread
// l takes l, l+g, l+2g, .. < N (a runtime bound per thread, so no tail mask).
struct KernelInfo {
  int64_t local_dims = 0, upcasted = 0;
  bool dont_use_locals = false;
  std::vector<std::pair<int64_t, int64_t>> sym_splits;   // (axis, amt), axes in the final shape
  std::vector<std::pair<int64_t, int64_t>> sym_groups;   // (symbolic axis, its group axis)
  Arg to_arg() const;
  static KernelInfo from_arg(const Arg& a);   // a missing arg is the default
};

// Where a tensor core's N, M and K axes sit in the kernel's shape (tinygrad's TensorCoreOptions); N and M
// move as simplify_ones drops size-1 axes, and may vanish.
struct TensorCoreOptions {
  std::array<int64_t, 3> axes{};             // N, M, K
  std::array<bool, 2> axes_exist{true, true};
  std::vector<std::pair<int64_t, int64_t>> axis_pads;   // (axis, tc dim) to PADTO before the tensor core
  void fix_axes(int64_t removed_axis);
  bool operator==(const TensorCoreOptions&) const = default;
};

class Kernel {
 public:
  // ast: SINK of STOREs as the scheduler makes it. opts: the target's renderer (kept by reference).
  Kernel(const UOp& ast, const Renderer& opts);

  UOp ast;
  const Renderer* opts;
  std::vector<UOp> bufs;          // the AST's STORE/LOAD/CONST nodes, outputs first, in AST order
  std::vector<UOp> reduceops;     // REDUCE_AXIS nodes, sources before users
  std::vector<UOp> vars;          // DEFINE_VARs in the AST and its (symbolic) ShapeTrackers, by name
  // sts[i] for bufs[i]; then per reduceop its output and input ShapeTracker (to find reduced axes)
  std::vector<ShapeTracker> sts;
  int full_buf_index = 0;         // a buffer read by the first reduce (of a row kernel: its first row reduce)
  int full_st_index = 0;          // sts index of a tracker with the full shape (the largest reduce input)
  // per reduceop: whether it sits inside another reduce's source (a fused arange in a row kernel's
  // reduce: its own loop nested in the row's); the row kernel checks compare the outer ones
  std::vector<bool> inner_reduce;
  bool nested_rows = false;       // 2+ outer reduces with nested ones (a row kernel reading an arange)
  // the tracker whose 1s mark the reduce axes: the first store's (0), or the first reduce's output
  // when the stores keep the full shape (several reduces over the rows of a fused softmax)
  int out_ref = 0;
  // every reduce reduces the same axes (of the rows); with two or more, or a full-shape store, a row kernel
  bool same_reduce_axes() const;
  size_t first_outer_st() const;   // sts index of the first outer reduce's output (its input follows)
  bool row_kernel() const {
    return same_reduce_axes() && (std::count(inner_reduce.begin(), inner_reduce.end(), false) > 1 || out_ref != 0);
  }

  std::vector<Opt> applied_opts;
  int64_t group_for_reduces = 0, upcasted = 0, local_dims = 0;
  // UNROLL of a symbolic reduce axis or UPCAST of a symbolic global one: (axis, amt); the trackers
  // keep the axis whole, the lowerer splits its loop into unrolled tiles and a tail
  // (KernelInfo::sym_splits). Axes follow the shape.
  std::vector<std::pair<int64_t, int64_t>> sym_splits;
  std::optional<int64_t> sym_split_of(int64_t axis) const;   // its amt when the axis is split
  bool sym_splits_global() const;                             // some split axis is an output (global) dim
  // GROUP of a symbolic reduce axis: (axis, group axis); the group axis (size g, a thread per lane)
  // was inserted broadcast in every tracker that isn't reduced there (KernelInfo::sym_groups)
  std::vector<std::pair<int64_t, int64_t>> sym_groups;
  bool sym_group_axis(int64_t axis) const;   // axis is one of sym_groups' symbolic or group axes
  bool dont_use_locals = false;

  // tensor cores (tensor_cores.cpp): set by OptOps::TC
  std::optional<TensorCore> tensor_core;
  std::optional<TensorCoreOptions> tensor_core_opts;
  int64_t use_tensor_cores = 0;   // 1: WMMA; 2: the tensor core's shape ops with a plain MUL/SUM
  std::vector<std::pair<UOp, std::pair<int, int>>> bufs_for_tensor_core;   // reduceop -> (bufs index of A, of B)

  // shape views
  const Shape& output_shape() const { return sts[out_ref].shape(); }
  const Shape& full_shape() const { return sts[full_st_index].shape(); }
  Shape full_unupcasted_shape() const;
  int64_t shape_len() const { return static_cast<int64_t>(sts[0].shape().size()); }
  int64_t first_upcast() const { return shape_len() - upcasted; }
  int64_t first_reduce() const;
  int64_t global_dims() const { return first_reduce() - local_dims; }
  std::vector<int64_t> upcast_in_mid_reduce_axes() const;
  // every outer reduce reduces axis alone among the reduce axes, nested ones (aranges) others
  bool reduces_only_row(int64_t axis) const;
  std::optional<UOp> reduceop() const { return reduceops.empty() ? std::nullopt : std::optional<UOp>(reduceops[0]); }
  // per upcasted axis of sts[i]: (size, real stride, whether it is a reduce axis)
  std::vector<std::tuple<int64_t, std::optional<int64_t>, bool>> upcasted_axis(size_t i) const;
  std::vector<int64_t> float4_axis(size_t i) const;   // upcasted unit-stride axes of sts[i] divisible by 4
  bool axis_is_masked(size_t i, int64_t axis) const;   // whether sts[i]'s validity depends on axis
  bool stored_unchanged(int64_t axis) const;   // a store's index doesn't move along it (a K block axis)
  bool symbolic_axis(int64_t axis) const;   // some tracker's dim there is a Variable expression (only split, never reshaped)

  std::vector<std::string> colors() const;   // blue global, cyan local, green/white group, red reduce, magenta/yellow upcast
  std::string colored_shape(int pad = 0, bool dense = false) const;
  // "E_3", "r_16_4", "E2_..." for two outputs, "C_" when there is no ALU; "n1".. suffix for a repeated name
  const std::string& name();

  // the optimizations
  void apply_opt(const Opt& opt, bool append_opt = true);   // KernelOptError when it doesn't apply
  // set for kernels with symbolic dims: the heuristics read a symbolic dim at its max, so an opt they
  // pick may not apply there; apply_opt then leaves the kernel as it was and the heuristics go on
  bool skip_failed_opts = false;
  Kernel& required_optimizations();
  Kernel& hand_coded_optimizations();                        // heuristic.cpp
  // OptOps::TC then (unless extra_opts) tinygrad's hand-coded upcasts/locals for it. use_tensor_cores: TC env
  // (0 off, 1 on, 2 shape only); tc_opt: TC_OPT env (0 one reduce of two loads, 1 casted loads and more reduce
  // axes, 2 also pads N/M/K). True when applied; on false the kernel is unchanged.
  bool apply_tensor_cores(int64_t use_tensor_cores = 1, const std::optional<std::vector<Opt>>& extra_opts = std::nullopt,
                          int64_t axis = 0, std::optional<int64_t> tc_opt = std::nullopt);

  // shape plumbing (public for tests and search)
  void reshape_and_permute(const std::function<Shape(const Shape&)>& new_shape_fxn, const std::vector<int>& axis);
  void shift_to(int64_t axis, int64_t amount, bool top = false, std::optional<int64_t> insert_before = std::nullopt);
  bool simplify_ones();
  void simplify_merge_adjacent();

  // the AST with the optimized ShapeTrackers, reduce axes and (on GPU) the local buffers of GROUP
  UOp get_optimized_ast() const;
  // optimized ast -> lowered graph -> rewrites -> linearized list (cached on the Kernel)
  const std::vector<UOp>& linearize();
  UOp lowered;                 // the graph before linearizing (after the rewrites), set by linearize()
  std::vector<UOp> uops;       // set by linearize()
  // render: the program for the runtime; name_override replaces name()
  // (its mem_estimate is what the uops load and store; mem_estimate() below is the buffers' bytes)
  RenderedProgram to_program(const std::optional<std::string>& name_override = std::nullopt);
  int64_t mem_estimate() const;   // bytes of the global buffers touched (largest access per buffer and direction)

 private:
  void upcast();
  void apply_opt_(const Opt& opt, bool append_opt);
  void apply_sym_opt(const Opt& opt, int64_t axis, bool append_opt);
  void apply_sym_group(const Opt& opt, int64_t axis, bool append_opt);
  void check_group_smem(int64_t amt) const;   // KernelOptError when a group of amt needs too much shared memory
  std::optional<TensorCoreOptions> create_tc_opts(const UOp& reduceop, const TensorCore& tc, int64_t axis, int64_t opt_level);
  bool apply_tc_opt(int64_t use_tensor_cores, int64_t axis, int64_t opt_level);
  bool apply_tensor_cores_at(int64_t use_tensor_cores, const std::optional<std::vector<Opt>>& extra_opts, int64_t axis, int64_t level);
  // the WMMA (or TC=2 SUM) replacing a tensor-core reduce in get_optimized_ast; fixup rebuilds a source
  // subtree with its ShapeTrackers passed through the given warp-layout permutation
  std::pair<std::function<ShapeTracker(const ShapeTracker&)>, std::function<ShapeTracker(const ShapeTracker&)>> tc_fix_sts() const;
  void check_tc_index_range() const;   // KernelOptError when a TC operand's index would overflow int32
  UOp tensor_core_reduce(const UOp& reduceop, const std::vector<int64_t>& axes,
                         const std::function<UOp(const UOp&, const std::function<ShapeTracker(const ShapeTracker&)>*)>& fixup) const;
  std::optional<std::string> name_;
};

// 0.9.2's check(): throws KernelOptError(msg) when cond is false.
void opt_check(bool cond, const std::string& msg);

}  // namespace tg
