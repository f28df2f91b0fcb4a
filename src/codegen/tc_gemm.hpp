// The shared-memory tensor-core GEMM (issue 12's second rung): a kernel template instantiated from a Kernel
// whose reduce took OptOps::TC. The AST gives the operands' strides, the M/N/K/batch axes and the epilogue
// (everything between the SUM and the STORE: bias, activation, cast); the template gives the main loop:
// 16-byte cp.async tiles in 3-4 shared-memory stages with a swizzled (bank-conflict-free) layout, ldmatrix
// into mma.sync.m16n8k16 fragments, a 128x128x32 (or 64x64x32) block tile of 8 (4) warps.
// M and N edges are predicated (zero-filled copies, guarded stores); K needs only a multiple of 8.
// sm_90: wgmma; by default fed by TMA into an mbarrier ring with a producer warpgroup and a persistent grid (the
// kernel describes its dynamic shared memory and tensor maps in a `tg_launch` module global the CUDA runtime reads).
// That kernel is shape-generic: M, N, K, the batch sizes and the strides are int arguments (RenderedProgram::arg_vals)
// and its function name holds no shape, so GEMMs of one config render one source and a new shape reuses the binary.
// fp32 GEMMs (no tensor core) take a register-blocked SIMT template (128x128 block tile, 8x8 per thread); with
// ALLOW_TF32=1 (sm_80+) the tensor-core kernels above instead, on TF32 operands (the fp32 bits; TF32_ROUND=1 rounds).
// Several M (or K) axes whose strides don't merge, as a channels-last conv's window view (tensor/conv.cpp), are an
// implicit GEMM: the cp.async copies address each 16-byte chunk by the axes' digits (no TMA for those).
#pragma once
#include <optional>
#include <string>

#include "renderer/renderer.hpp"

namespace tg {

class Kernel;

// The template's program for k (named `name`), or nothing when k is not a GEMM the template covers: no TC opt
// (or TC=2) unless an fp32 GEMM of at least 64x64x32 (SIMT_GEMM=0 and no ALLOW_TF32: none), not CUDA, TC_GEMM=0, a fused second
// reduce, symbolic shapes, masked or multi-view operands (a channels-first conv's padded window), operands whose
// contiguous dim is neither K's nor the rows' innermost or whose other strides are not 16-byte multiples. Those use the WMMA path (or the heuristic's kernel).
std::optional<RenderedProgram> tc_gemm_program(const Kernel& k, const std::string& name);
// whether tc_gemm_program would render k from the template
bool tc_gemm_applies(const Kernel& k);

}  // namespace tg
