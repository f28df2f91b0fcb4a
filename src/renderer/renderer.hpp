// Renderer: turns a linearized UOp list into source code for one device (tinygrad's
// renderer/__init__.py). Also the program summary the runtime needs to launch the kernel.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "uop/uop.hpp"

namespace tg {

// An ALU op as a key of a renderer's code_for_op table.
using AluOp = std::variant<UnaryOps, BinaryOps, TernaryOps>;

// D = A * B + C with A (M x K), B (K x N), C and D (M x N) on one warp / SIMD group.
struct TensorCore {
  std::array<int64_t, 3> dims;                      // N, M, K
  DType dtype_in, dtype_out;
  std::vector<std::pair<int64_t, int64_t>> threads;  // (TC dim, amount) building the warp's thread layout
  std::string str() const;                           // "WMMA_8_16_16_half_float"
};

// The arg of a WMMA UOp: which intrinsic to call and its shape (tinygrad's WMMA arg tuple).
struct WMMAArg : ArgObj {
  std::string name;                 // TensorCore::str(), the helper function is "__" + name
  std::array<int64_t, 3> dims;      // N, M, K
  DType dtype_in, dtype_out;
  std::string device;
  // per operand (A, B, C/D): the upcast (axis, size) pairs its vector is contracted from / expanded to,
  // and the upcast axes the instruction itself reduces (tinygrad's wmma_arg[-2], wmma_arg[-1])
  std::vector<std::vector<std::pair<int64_t, int64_t>>> upcast_axes;
  std::vector<int64_t> reduce_axes;
  size_t hash() const override;
  bool equals(const ArgObj& o) const override;
  std::string str() const override;
};

// What a device can do, in one struct: kernel opts and the heuristic, the lowerer, the rewrite
// passes and the renderer all read it. A Renderer is its device's caps plus the code it writes.
struct DeviceCaps {
  bool supports_float4 = true;
  bool has_local = true;
  bool has_shared = true;
  bool has_warp_shuffle = false;   // BinaryOps::SHFL_XOR renders (a group reduce combines its warps' lanes first)
  bool cpu_threads = false;   // a RANGE marked parallel is split over CPU threads (core_lo/core_hi)
  int64_t vector_bytes = 0;   // > 0: upcast lanes are rebuilt into vector ALU/loads/stores of up to this size
  int64_t register_bytes = 0;     // a CPU's native vector register (32 AVX2, 64 AVX-512): a register tile's vectors
  int64_t vector_registers = 0;   // and how many it has (16, 32): the register tile's room
  bool gpu_vector_loads = false;   // 16-byte loads of consecutive lanes (vectorize_gpu_loads)
  // native transcendentals; the rewrite passes replace the others (a Renderer's come from its op
  // table through kernel_caps())
  bool has_exp2 = true, has_log2 = true, has_sin = true;
  std::vector<int64_t> global_max{0x8FFFFFFF, 0x8FFFFFFF, 0x8FFFFFFF};   // (x, y, z); empty: no limit
  std::vector<int64_t> local_max{0x8FFFFFFF, 0x8FFFFFFF, 0x8FFFFFFF};    // (x, y, z); empty: no locals
  int64_t shared_max = 32768;
  std::vector<TensorCore> tensor_cores;
};

struct Renderer : DeviceCaps {
  std::string device;

  virtual ~Renderer() = default;
  // Source for a kernel named `name` (already a valid identifier) from a linearized list.
  virtual std::string render(const std::string& name, const std::vector<UOp>& uops) const = 0;
  // Whether the dialect has code for this ALU op (ops it lacks are rewritten, e.g. transcendentals).
  virtual bool supports(AluOp op) const = 0;
  // The caps one kernel is compiled with: the transcendentals from supports(), VECTORIZE=0 turns the
  // CPU vectorizer off, GPU_FLOAT4=0 the 16-byte loads of a GPU without a vector width.
  DeviceCaps kernel_caps() const;
};

// What the runtime needs to compile and launch a rendered kernel (the lead unifies this with
// runtime/program.hpp's ProgramSpec).
struct RenderedProgram {
  std::string name;            // display name as given (may hold ANSI colors)
  std::string function_name;   // the kernel's C identifier; the CPU entry point is function_name + "_call"
  std::string src;
  std::string device;
  // launch dimensions: CPU kernels with a parallel RANGE have global_size[0] = its extent (the runtime
  // splits [0, extent) over threads as core_lo/core_hi), else {1,1,1}. GPU sizes come from SPECIALs.
  // An empty local_size means "runtime chooses" (a SPECIAL "i" index was used).
  std::vector<int64_t> global_size{1, 1, 1}, local_size{1, 1, 1};
  std::vector<UOp> global_dims, local_dims;   // the same sizes as UOps (symbolic when they use variables)
  std::vector<std::string> vars;              // DEFINE_VAR names, sorted: vals[] is passed in this order
  std::vector<std::pair<int64_t, int64_t>> var_ranges;   // each var's [min, max]: buffers are sized for max
  // int arguments passed after the variables' values, fixed per program: a shape-generic template's sizes and
  // strides (tc_gemm.cpp), so that GEMMs of one config render one source and share its binary
  std::vector<int64_t> arg_vals;
  int n_bufs = 0;                             // DEFINE_GLOBALs: bufs[] holds buffer i at index i
  std::vector<int64_t> outs;                  // buffer indices the kernel stores to, sorted
  int64_t op_estimate = 0;                    // flops (index math excluded)
  int64_t mem_estimate = 0;                   // bytes loaded+stored; the caller may replace it with buffer sizes
  // sizes with variables substituted
  std::pair<std::vector<int64_t>, std::vector<int64_t>> launch_dims(const std::unordered_map<std::string, int64_t>& var_vals) const;
};

RenderedProgram to_program(const Renderer& r, const std::string& name, const std::vector<UOp>& uops);

// tinygrad's flops_mem: (flops, bytes moved) of a linearized kernel; symbolic loop bounds count at their max.
std::pair<int64_t, int64_t> flops_mem(const std::vector<UOp>& uops, bool ignore_indexing = false);

// Drops ANSI escapes and hex-encodes every char that can't be in a C identifier ("E_3" stays).
std::string to_function_name(const std::string& s);

}  // namespace tg
