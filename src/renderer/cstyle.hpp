// C-like dialects (tinygrad's renderer/cstyle.py): one walk over the linearized UOps, with the
// differences between C (CPU) and CUDA expressed as fields and a few virtual hooks.
//
// Naming: buffers are data<i>, loads val<n>, ALU results alu<n> (only when used more than once,
// else inlined), accumulators acc<n>, loops ridx<n>, casts cast<n>.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <unordered_set>

#include "renderer/renderer.hpp"

namespace tg {

class CStyleLanguage : public Renderer {
 public:
  using OpFn = std::function<std::string(const std::vector<std::string>& operands, DType dtype)>;
  struct KernelParam { std::string name; DType dtype; bool is_mutable; bool is_buffer; };

  std::string kernel_prefix, buffer_prefix, buffer_suffix, smem_align, smem_prefix, barrier;
  bool smem_prefix_for_cast = true;
  std::string arg_int_prefix = "const int";
  std::map<char, std::function<std::string(int)>> code_for_workitem;   // 'g', 'l', 'i' -> expression for dim
  std::vector<std::string> extra_args;
  std::optional<std::string> float4;   // vector constructor pattern: "(float4)" (C) or "make_float4" (CUDA)
  std::map<ScalarKind, std::string> type_map;
  std::string infinity = "INFINITY", nan = "NAN";
  std::map<AluOp, OpFn> code_for_op;
  // the C type of int32 loop counters and index math that only addresses memory in a kernel with vector
  // accumulators ("" keeps int): the CPU's "long" lets clang fold a load's index into its address (int32
  // sign-extends every load's index)
  std::string wide_index_type;

  CStyleLanguage();
  bool supports(AluOp op) const override { return code_for_op.count(op) != 0; }
  std::string render(const std::string& name, const std::vector<UOp>& uops) const override;

  virtual std::string render_dtype(DType dt) const;
  virtual std::string render_cast(const std::string& x, DType dt, bool bitcast = false) const;
  virtual std::string render_vectorize(const std::vector<std::string>& x, DType dt) const;
  virtual std::string render_const(const ConstType& x, DType dt) const;
  virtual std::string render_load(DType out, const std::string& buf, DType buf_dtype, const std::string& idx, bool local) const;
  virtual std::string render_store(const std::string& buf, DType buf_dtype, const std::string& var, DType var_dtype,
                                   const std::string& idx, bool local) const;
  virtual std::string render_local(const std::string& name, DType dt, int64_t size) const;
  // the opening line of a loop (the CPU dialect bounds a parallel RANGE by the thread's slice)
  virtual std::string render_range(const UOp& u, const std::string& type, const std::string& var, const std::string& start,
                                   const std::string& end) const;
  virtual std::string get_kernel_modifier(const std::vector<UOp>& uops) const { return ""; }
  // parameters after the buffers and variables (extra_args by default)
  virtual std::vector<std::string> kernel_extra_args(const std::vector<UOp>& uops) const { return extra_args; }
  virtual std::string render_kernel(const std::string& function_name, const std::vector<std::string>& kernel,
                                    const std::vector<KernelParam>& params, const std::vector<UOp>& uops,
                                    const std::optional<std::vector<std::string>>& prefix) const;

  // buffers and variables in parameter order (order of appearance), buffers marked mutable when stored to
  static std::vector<KernelParam> kernel_params(const std::vector<UOp>& uops);
};

// The scalar int32 RANGEs and ALUs whose every use is a memory index: another such value, a LOAD's, STORE's or
// PREFETCH's index, a RANGE's bounds, a compare, or a RANGE's bookkeeping (ENDRANGE, DEFINE_ACC). Computing
// them wider changes no value that int32 computes without overflow.
std::unordered_set<const UOpNode*> index_only_uops(const std::vector<UOp>& uops);

// The signed int vector that C's compares of vectors of dt return (and its vector selects use).
DType vector_mask_dtype(DType dt);

// C for the CPU device, compiled by clang (or the system cc) and loaded with dlopen.
class ClangRenderer : public CStyleLanguage {
 public:
  // half_type: "__fp16" for clang (arithmetic promotes to float, as tinygrad), "_Float16" for gcc
  explicit ClangRenderer(const std::string& half_type = "__fp16");
  // the kernel followed by its entry point NAME_call(void** bufs, const int* vals, int core_lo, int core_hi)
  std::string render(const std::string& name, const std::vector<UOp>& uops) const override;
  std::string render_range(const UOp& u, const std::string& type, const std::string& var, const std::string& start,
                           const std::string& end) const override;
  std::vector<std::string> kernel_extra_args(const std::vector<UOp>& uops) const override;
  std::string render_cast(const std::string& x, DType dt, bool bitcast = false) const override;
  std::string render_load(DType out, const std::string& buf, DType buf_dtype, const std::string& idx, bool local) const override;
  std::string render_store(const std::string& buf, DType buf_dtype, const std::string& var, DType var_dtype, const std::string& idx,
                           bool local) const override;
  std::string render_kernel(const std::string& function_name, const std::vector<std::string>& kernel,
                            const std::vector<KernelParam>& params, const std::vector<UOp>& uops,
                            const std::optional<std::vector<std::string>>& prefix) const override;
};

// CUDA C++ compiled with NVRTC.
class CUDARenderer : public CStyleLanguage {
 public:
  explicit CUDARenderer(const std::string& arch = "sm_80");   // tensor cores from sm_80
  int sm = 0;   // compute capability as 80, 90: the GEMM template uses wgmma from 90 (codegen/tc_gemm.cpp)
  int sms = 0;  // the device's SM count (0: unknown): the TMA GEMM's persistent grid
  std::string render_kernel(const std::string& function_name, const std::vector<std::string>& kernel,
                            const std::vector<KernelParam>& params, const std::vector<UOp>& uops,
                            const std::optional<std::vector<std::string>>& prefix) const override;
  std::string get_kernel_modifier(const std::vector<UOp>& uops) const override;
  // a 16-byte global load checks the buffer's alignment (a view may start anywhere) and falls back to lanes
  std::string render_load(DType out, const std::string& buf, DType buf_dtype, const std::string& idx, bool local) const override;
  // a 16-byte global store likewise: one vector store when aligned, else its lanes
  std::string render_store(const std::string& buf, DType buf_dtype, const std::string& var, DType var_dtype, const std::string& idx,
                           bool local) const override;
};

// A RANGE marked for thread-parallel execution on the CPU (arg {axis, is_reduce, 1}).
bool is_parallel_range(const UOp& u);

// tinygrad's strip_parens: "(a+b)" -> "a+b", "(a)+(b)" unchanged.
std::string strip_parens(const std::string& s);

}  // namespace tg
