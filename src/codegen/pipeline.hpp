// Codegen as its list of passes (like Halide's Lower.cpp): a kernel AST with its opts applied
// becomes a linearized UOp list, then source.
//   lower_ast          ast + ShapeTrackers -> RANGE/SPECIAL/LOAD/STORE/REDUCE graph   lowerer.cpp
//   folder             symbolic/constant folding, transcendentals the device lacks     uopgraph.cpp
//   expander           EXPAND/CONTRACT -> explicit vector lanes                          uopgraph.cpp
//   reducer            REDUCE -> DEFINE_ACC + PHI (its context numbers the accumulators) uopgraph.cpp
//   gpu_vector_loads   GPU: 16-byte loads of consecutive lanes                           vectorizer.cpp
//   vectorize_stores   CPU: lanes -> vector ALU/loads/stores                             vectorizer.cpp
//   linearize          block-ordered list (RANGE..ENDRANGE, IF..ENDIF)                   linearizer.cpp
//   render             source for the device, launch dims                                renderer/
// DEBUG>=5 prints the lowered graph, DEBUG>=6 each pass's UOp count and the linearized list.
// Kernel::linearize and Kernel::to_program (which realize and BEAM search call) go through here.
#pragma once
#include <string>
#include <vector>

#include "renderer/renderer.hpp"
#include "uop/uop.hpp"

namespace tg {

struct Lowered {
  UOp rewritten;           // the graph after the rewrite passes, before linearizing
  std::vector<UOp> uops;   // linearized
};

// lower_ast through linearize for one device.
Lowered codegen(const UOp& ast, const Renderer& r);

// The source of a linearized kernel (the render pass).
RenderedProgram render(const Renderer& r, const std::string& name, const std::vector<UOp>& uops);

}  // namespace tg
