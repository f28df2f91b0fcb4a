// A tour of tinygrad.cpp's layers (tinygrad's docs/abstractions): one tensor expression,
// relu(a * b).sum(1), walked from the Tensor down to the bytes it computes, printing what each
// stage makes. Run: ./build/examples/tour   (GRAPH=1 and PROFILE=1 also draw and trace it)
#include <tg/origin.hpp>
#include <tg/tg.hpp>

#include <algorithm>
#include <iostream>

#include "access.hpp"
#include "codegen/kernel.hpp"
#include "engine/realize.hpp"
#include "engine/schedule.hpp"
#include "lazy/lazy.hpp"
#include "lazy/metadata.hpp"
#include "runtime/device.hpp"
#include "runtime/disasm.hpp"

using namespace tg;

namespace {

void section(const std::string& title) { std::cout << "\n==== " << title << " ====\n"; }

// the lazy graph under lb, one line per LazyBuffer, indented by depth
void print_lazy(const LazyBufferPtr& lb, int depth = 0) {
  std::cout << std::string(depth * 2, ' ') << lb->str();
  LazyBufferPtr base = lb->base();
  if (!lb->is_base()) std::cout << "  (a view of " << to_str(base->shape()) << ")";
  if (base->metadata) std::cout << "  made by " << base->metadata->str();
  std::cout << "\n";
  for (auto& s : base->srcs) print_lazy(s, depth + 1);
}

}  // namespace

int main() {
  // ---- 1. Tensor: the user's API. Nothing runs yet: each op builds a lazy graph and names itself.
  section("1. Tensor (tensor.hpp): build the expression, lazily");
  Tensor a = Tensor::from<float>({1, -2, 3, -4, 5, -6}, {2, 3}, {.device = "CPU"});
  Tensor b = Tensor::from<float>({2, 2, 2, 3, 3, 3}, {2, 3}, {.device = "CPU"});
  Tensor out = a;
  {
    Origin here;   // the ops below remember this line
    out = (a * b).relu().sum(1);
  }
  std::cout << "out: shape " << to_str(out.shape()) << " " << out.dtype().str() << " on " << out.device() << "\n";

  // ---- 2. LazyBuffer: the graph the ops made. Bases hold an op, views a ShapeTracker over a base.
  section("2. LazyBuffer (lazy/): the graph, with each node's Tensor op");
  print_lazy(Access::lazydata(out));
  std::cout << "a's ShapeTracker: " << Access::lazydata(a)->st.str() << "\n";

  // ---- 3. Schedule: the graph grouped into kernels. The multiply, relu and sum fuse into one.
  section("3. Schedule (engine/schedule): ScheduleItems, one per kernel");
  // (out.schedule() prints the same; it also queues the items for the next realize, and the tour runs them itself)
  std::vector<ScheduleItem> sched = memory_planner(create_schedule({Access::lazydata(out)}));
  const ScheduleItem* kernel = nullptr;
  for (const ScheduleItem& si : sched) {
    std::cout << to_string(si.kind) << " with " << si.bufs.size() << " buffers, made by " << format_metadata(si.metadata) << "\n";
    if (si.kind == MetaOps::KERNEL) kernel = &si;
  }
  if (!kernel) throw Error("tour: the schedule has no kernel");
  std::cout << "its AST (a SINK of STOREs):\n" << kernel->ast.str() << "\n";

  // ---- 4. Kernel: the AST plus optimizations that reshape its iteration space.
  section("4. Kernel (codegen/kernel, heuristic): shape and optimizations");
  const Renderer& renderer = get_renderer("CPU");
  auto k = get_kernel(renderer, Access::uop(kernel->ast));   // required + hand-coded opts, as realize does
  std::cout << "name " << k->name() << ", full shape " << to_str(k->full_shape()) << "\n";
  for (const Opt& o : k->applied_opts) std::cout << "applied " << o.str() << "\n";

  // ---- 5. Lowering: the AST becomes a linear list of UOps (loops, loads, ALU, stores).
  section("5. UOps (codegen/lowerer, uopgraph, linearizer): the linearized program");
  const std::vector<UOp>& uops = k->linearize();
  for (size_t i = 0; i < uops.size(); i++) {
    std::cout << "  " << i << " " << to_string(uops[i]->op) << " " << uops[i]->dtype.str() << " " << arg_str(uops[i]->arg) << " (";
    for (size_t j = 0; j < uops[i]->src.size(); j++)
      std::cout << (j ? ", " : "") << std::find(uops.begin(), uops.end(), uops[i]->src[j]) - uops.begin();
    std::cout << ")\n";
  }

  // ---- 6. Renderer: the UOps as C source for the CPU (CUDA C on a GPU).
  section("6. Renderer (renderer/cstyle): C source");
  RenderedProgram prg = k->to_program();
  std::cout << prg.src << "\n";

  // ---- 7. Runtime: compile, load and (DEBUG=6) disassemble.
  section("7. Runtime (runtime/cpu): compile and disassemble");
  Compiled& cpu = get_device("CPU");
  const std::string lib = cpu.compiler().compile_cached(prg.src);
  std::cout << "compiled to a " << lib.size() << "-byte shared object\n";
  std::cout << disassemble(cpu.renderer_kind(), lib, prg.function_name) << "\n";

  // ---- 8. Realize: the engine lowers each ScheduleItem to a runner and runs it (DEBUG=2 prints a line each).
  // (It builds its own Kernel: a second kernel of the same name gets an "n1" suffix, as in tinygrad.)
  section("8. Realize (engine/realize): run the schedule");
  {
    Context ctx({{"DEBUG", 2}});
    run_schedule(sched);
  }
  std::vector<float> got = out.tolist<float>();
  std::cout << "out = [" << got[0] << ", " << got[1] << "]\n";
  // relu(a*b) row sums: [2+0+6, 0+15+0]
  if (got != std::vector<float>{8, 15}) throw Error("tour: expected [8, 15]");
  std::cout << "\nTry GRAPH=1 (dot files of the graph and schedule) and PROFILE=1 (a Perfetto trace) on this program.\n";
  return 0;
}
