// Operand packing for CPU GEMMs (BLIS's packed B panels), as two generated kernels.
//
// A reduce SUM(a*b) where `a` is broadcast along the output's unit-stride axis N and `b` along
// another output axis M (a matmul's rows) reads b in panels: every row tile streams K x NC of it.
// When b's rows are far apart (a 1024-wide matrix: 4 KB, one L1 set for every k) or b is transposed,
// those loads miss L1 and defeat the prefetcher. The plan copies b once into a scratch buffer laid
// out [batch][N/NC][NC/TW][K][TW] (a copy kernel; TW the register tile's 2 vectors, NC/TW tiles a panel,
// panels a line apart), and rewrites the GEMM's ast so N is split into (N/NC, NC/TW, TW) (or (N/NC, NC)
// for one-tile panels) and b is read from the scratch: each tile's K x TW is one contiguous stream and
// a panel stays in L2.
// Both asts go through the ordinary Kernel path (heuristics, BEAM, render, caches).
#pragma once
#include <cstdint>
#include <optional>

#include "renderer/renderer.hpp"
#include "uop/uop.hpp"

namespace tg {

struct PackPlan {
  UOp pack_ast;             // STORE(scratch = global 0, contiguous) of LOAD(b's buffer = global 1)
  UOp gemm_ast;             // the reduce with N split and b read from global `scratch_index`
  int64_t b_index = 0;      // the DEFINE_GLOBAL index of b's buffer in the original ast
  int64_t scratch_index = 0;   // the scratch's DEFINE_GLOBAL index in gemm_ast: b's, or one past the others when b is read twice
  int64_t scratch_size = 0;    // elements
  DType dtype;
  int64_t nc = 0;              // panel width: one tile (lanes x 2, or lanes) or a few side by side
  int64_t k_blocks = 1;        // the reduce's blocks, each adding to the sum of those before (1: one pass over K)
};

// The plan for a CPU kernel ast, or nothing when packing doesn't apply or wouldn't pay
// (CPU_PACK=0 turns it off; renderers with locals, i.e. GPUs, never pack).
std::optional<PackPlan> cpu_gemm_pack(const UOp& ast, const Renderer& renderer);

}  // namespace tg
