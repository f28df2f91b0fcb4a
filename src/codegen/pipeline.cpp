#include "codegen/pipeline.hpp"

#include <iostream>

#include "codegen/linearizer.hpp"
#include "codegen/lowerer.hpp"
#include "codegen/narrow_reduce.hpp"
#include "codegen/uopgraph.hpp"
#include "tg/helpers.hpp"

namespace tg {

namespace {
// one pass, with its UOp count at DEBUG>=6
template <class F> UOp pass(const char* name, const UOp& in, F&& f) {
  UOp out = f(in);
  if (debug() >= 6) std::cout << "pass " << name << ": " << out.toposort().size() << " uops\n";
  return out;
}
}  // namespace

UOp full_graph_rewrite(const UOp& sink, const DeviceCaps& caps) {
  TG_ASSERT(sink->op == Ops::SINK, "full_graph_rewrite of " + to_string(sink->op) + ", expected a SINK");
  const RewritePasses& p = rewrite_passes(caps);
  UOp s = pass("folder", sink, [&](const UOp& u) { return graph_rewrite(u, p.folder); });
  // CPU loops skip a padded operand's zeros (codegen/narrow_reduce.hpp); a GPU's threads would diverge
  if (caps.cpu_threads)
    if (UOp n = pass("narrow_reduce", s, narrow_reduce_ranges); n != s) s = pass("folder", n, [&](const UOp& u) { return graph_rewrite(u, p.folder); });
  s = pass("expander", s, [&](const UOp& u) { return graph_rewrite(u, p.expand); });
  s = pass("reducer", s, [&](const UOp& u) {
    ReduceContext ctx;
    return graph_rewrite(u, p.reduce, &ctx);
  });
  if (caps.gpu_vector_loads) s = pass("gpu_vector_loads", s, vectorize_gpu_loads);
  if (caps.vector_bytes > 0) s = pass("vectorize_stores", s, [&](const UOp& u) { return vectorize_stores(u, caps.vector_bytes); });
  return s;
}

Lowered codegen(const UOp& ast, const Renderer& r) {
  UOp sink = pass("lower_ast", ast, [&](const UOp& u) { return lower_ast(u, r); });
  if (debug() >= 5) std::cout << sink.str() << std::endl;
  Lowered out;
  out.rewritten = full_graph_rewrite(sink, r.kernel_caps());
  out.uops = linearize(out.rewritten);
  if (debug() >= 6) {
    std::cout << "pass linearize: " << out.uops.size() << " uops\n";
    for (size_t i = 0; i < out.uops.size(); i++) std::cout << i << " " << out.uops[i].str() << "\n";
  }
  return out;
}

RenderedProgram render(const Renderer& r, const std::string& name, const std::vector<UOp>& uops) {
  return to_program(r, name, uops);
}

}  // namespace tg
