// TinyJit's replay (tinygrad 0.9.2 engine/jit.py: the jit cache, GraphRunner, apply_graph_to_jit).
// The captured kernels are bound once: buffer handles, variable slots and launch dims are kept, and
// a replay patches only the input buffers and the variable values before calling the programs, so
// a replayed kernel costs a program call and no lookups, maps or strings.
// JIT=1 (default): consecutive kernels of one device are batched into device graphs (CUDA graphs;
// on the CPU a call list) of up to JIT_BATCH_SIZE kernels (32, doubling after each batch, as
// tinygrad); copies and other items run between the batches; an argument that changed is updated
// in the graph in place, never rebuilt.
// JIT=2: the same bound kernels launched one by one. DEBUG>=2 or PROFILE: every item goes through
// ExecItem::run for its line and timing (a graph shows as one "<batched N>" item).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/realize.hpp"

namespace tg {

// One captured kernel with its launch arguments bound.
struct BoundKernel {
  CompiledRunner* runner = nullptr;   // owned by the capture's ExecItem
  size_t item = 0;                    // that ExecItem's index in the capture
  KernelLaunch args;                  // what the next launch passes; patched by each replay
  std::vector<size_t> var_slots;      // args.vals[i] is the replay's value of variable var_slots[i]
  bool changes = false;               // args may differ between replays (an input buffer or a variable)
  void launch() { (*runner->clprg)(args.bufs, args.global_size, args.local_size, args.vals, false); }
};

// What the device graphs did, process-wide (for tests and benchmarks).
struct GraphStats {
  static inline int64_t built = 0;          // device graphs instantiated
  static inline int64_t launches = 0;       // graph launches
  static inline int64_t node_updates = 0;   // kernel nodes whose arguments were updated in place
};

// A batch of bound kernels of one device as one device graph.
class GraphRunner : public Runner {
 public:
  GraphRunner(Compiled& dev, std::unique_ptr<DeviceGraph> graph, std::vector<BoundKernel*> kernels);
  // pushes the kernels' changed arguments into the graph, then launches it
  double launch(bool wait);
  std::optional<double> operator()(const std::vector<Buffer*>& bufs, const VarVals& var_vals, bool wait) override;
  size_t size() const { return kernels_.size(); }

 private:
  std::unique_ptr<DeviceGraph> graph_;
  std::vector<BoundKernel*> kernels_;
  std::vector<size_t> changing_;        // nodes whose kernel's arguments can change
  std::vector<KernelLaunch> in_graph_;  // per node: the arguments the graph holds (kept for changing_ nodes)
};

class JitReplay {
 public:
  // items: the capture; inputs: the buffers it was captured with; var_names: the JIT's variables
  // (sorted); captured_vals: their values at the capture
  JitReplay(std::vector<ExecItem> items, const std::vector<std::shared_ptr<Buffer>>& inputs, std::vector<std::string> var_names,
            const VarVals& captured_vals);
  // inputs: this call's buffers, in the capture's order; var_vals: a value for every var_names entry
  void run(const std::vector<std::shared_ptr<Buffer>>& inputs, const VarVals& var_vals, int64_t jit_mode);
  size_t captured() const { return items_.size(); }
  size_t graphs() const { return graphs_.size(); }   // device graphs built (JIT=1 on CUDA)

 private:
  struct Step {
    enum Kind { Kernel, Graph, Item } kind;
    size_t index;   // into kernels_, graphs_ or items_
  };
  struct InputUse { size_t item, buf, input; };
  void bind_values(const VarVals& var_vals);
  void build_graphs();
  void run_steps(const std::vector<Step>& steps, const VarVals& var_vals);

  std::vector<ExecItem> items_;
  std::vector<std::string> var_names_;
  std::vector<BoundKernel> kernels_;   // never resized after construction: graphs point into it
  std::vector<int64_t> kernel_of_item_;   // index into kernels_, -1 for other items
  std::vector<InputUse> input_uses_;
  std::vector<int64_t> values_;        // the variables' values the kernels are bound to
  std::vector<Step> plain_, graphed_;
  bool graphed_built_ = false;
  std::vector<std::shared_ptr<GraphRunner>> graphs_;
  int64_t kernel_ops_ = 0, kernel_mem_ = 0;   // the kernels' estimates, summed (counters of a fast replay)
};

}  // namespace tg
