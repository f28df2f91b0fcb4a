#include "engine/replay.hpp"

#include <algorithm>
#include <set>

#include "engine/profile.hpp"
#include "tg/helpers.hpp"

namespace tg {

// ******************** GraphRunner ********************

GraphRunner::GraphRunner(Compiled& dev, std::unique_ptr<DeviceGraph> graph, std::vector<BoundKernel*> kernels)
    : Runner(colored("<batched " + std::to_string(kernels.size()) + ">", "cyan"), dev.name), graph_(std::move(graph)),
      kernels_(std::move(kernels)) {
  for (size_t i = 0; i < kernels_.size(); i++) {
    BoundKernel& k = *kernels_[i];
    const size_t node = graph_->add_kernel(*k.runner->clprg, k.args);
    TG_ASSERT(node == i, "graph nodes are numbered in the order they are added");
    op_estimate += k.runner->op_estimate;
    mem_estimate += k.runner->mem_estimate;
    in_graph_.push_back(k.changes ? k.args : KernelLaunch{});
    if (k.changes) changing_.push_back(i);
  }
  lds_estimate = mem_estimate;
  graph_->instantiate();
  GraphStats::built++;
}

double GraphRunner::launch(bool wait) {
  // only kernels that use an input or a variable can differ from what the graph holds
  for (size_t i : changing_)
    if (!(kernels_[i]->args == in_graph_[i])) {
      graph_->update(i, kernels_[i]->args);
      in_graph_[i] = kernels_[i]->args;   // same sizes: no allocation
      GraphStats::node_updates++;
    }
  GraphStats::launches++;
  return graph_->launch(wait);
}

std::optional<double> GraphRunner::operator()(const std::vector<Buffer*>&, const VarVals&, bool wait) {
  const double t = launch(wait);
  if (wait) return t;
  return std::nullopt;
}

// ******************** JitReplay ********************

JitReplay::JitReplay(std::vector<ExecItem> items, const std::vector<std::shared_ptr<Buffer>>& inputs, std::vector<std::string> var_names,
                     const VarVals& captured_vals)
    : items_(std::move(items)), var_names_(std::move(var_names)) {
  for (const std::string& v : var_names_) values_.push_back(captured_vals.at(v));
  kernel_of_item_.assign(items_.size(), -1);
  kernels_.reserve(static_cast<size_t>(std::count_if(items_.begin(), items_.end(), [](const ExecItem& ei) {
    return dynamic_cast<CompiledRunner*>(ei.prg.get()) != nullptr;
  })));
  for (size_t j = 0; j < items_.size(); j++) {
    ExecItem& ei = items_[j];
    bool uses_input = false;
    for (size_t i = 0; i < ei.bufs.size(); i++)
      for (size_t k = 0; k < inputs.size(); k++)
        if (ei.bufs[i] == inputs[k]) input_uses_.push_back({j, i, k}), uses_input = true;
    auto* cr = dynamic_cast<CompiledRunner*>(ei.prg.get());
    if (!cr) {
      plain_.push_back({Step::Item, j});
      continue;
    }
    BoundKernel k;
    k.runner = cr;
    k.item = j;
    for (auto& b : ei.bufs) k.args.bufs.push_back(b->ptr());
    for (const std::string& v : cr->p.vars) {
      auto it = std::find(var_names_.begin(), var_names_.end(), v);
      if (it == var_names_.end())
        throw Error("TinyJit: kernel " + cr->p.function_name + " uses variable '" + v +
                    "', which is not a variable of the JIT call; pass it in vars (bound) so every call gives its value");
      k.var_slots.push_back(static_cast<size_t>(it - var_names_.begin()));
      k.args.vals.push_back(static_cast<int>(captured_vals.at(v)));
    }
    for (int64_t a : cr->p.arg_vals) k.args.vals.push_back(static_cast<int>(a));   // after the variables' (var_slots index those)
    auto [global, local] = cr->p.launch_dims(captured_vals);
    if (local.empty()) local = {1, 1, 1};   // as CompiledRunner: "runtime chooses" is one thread per block
    k.args.global_size = std::move(global);
    k.args.local_size = std::move(local);
    k.changes = uses_input || !k.var_slots.empty();
    kernel_ops_ += cr->op_estimate;
    kernel_mem_ += cr->mem_estimate;
    kernel_of_item_[j] = static_cast<int64_t>(kernels_.size());
    plain_.push_back({Step::Kernel, kernels_.size()});
    kernels_.push_back(std::move(k));
  }
}

void JitReplay::bind_values(const VarVals& var_vals) {
  bool changed = false;
  for (size_t i = 0; i < var_names_.size(); i++) {
    auto it = var_vals.find(var_names_[i]);
    TG_ASSERT(it != var_vals.end(), "TinyJit replay without a value for variable " + var_names_[i]);
    if (values_[i] != it->second) values_[i] = it->second, changed = true;
  }
  if (!changed) return;
  for (BoundKernel& k : kernels_) {
    if (k.var_slots.empty()) continue;
    for (size_t i = 0; i < k.var_slots.size(); i++) k.args.vals[i] = static_cast<int>(values_[k.var_slots[i]]);
    auto [global, local] = k.runner->p.launch_dims(var_vals);   // launch dims may depend on the variables
    if (local.empty()) local = {1, 1, 1};
    k.args.global_size = std::move(global);
    k.args.local_size = std::move(local);
  }
}

void JitReplay::build_graphs() {
  graphed_built_ = true;
  int64_t max_batch = std::max<int64_t>(1, getenv("JIT_BATCH_SIZE", 32));
  std::vector<size_t> batch;        // kernels_ indices, one device
  std::set<std::string> no_graph;   // devices without graphs
  auto flush = [&] {
    if (batch.size() >= 2) {   // one kernel gains nothing from a graph
      Compiled& dev = get_device(kernels_[batch[0]].runner->device);
      if (std::unique_ptr<DeviceGraph> g = dev.graph()) {
        std::vector<BoundKernel*> ks;
        for (size_t k : batch) ks.push_back(&kernels_[k]);
        try {
          graphs_.push_back(std::make_shared<GraphRunner>(dev, std::move(g), std::move(ks)));
        } catch (const Error& e) {
          throw Error(std::string(e.what()) + "\n  (building a device graph for TinyJit; JIT=2 replays without graphs)");
        }
        graphed_.push_back({Step::Graph, graphs_.size() - 1});
        max_batch *= 2;
        batch.clear();
        return;
      }
      no_graph.insert(dev.name);
    }
    for (size_t k : batch) graphed_.push_back({Step::Kernel, k});
    batch.clear();
  };
  for (const Step& s : plain_) {
    const bool graphable = s.kind == Step::Kernel && !no_graph.count(canonicalize_device(kernels_[s.index].runner->device));
    if (!graphable) {
      flush();   // copies and other items split the batches
      graphed_.push_back(s);
      continue;
    }
    if (!batch.empty() && kernels_[batch[0]].runner->device != kernels_[s.index].runner->device) flush();
    batch.push_back(s.index);
    if (static_cast<int64_t>(batch.size()) >= max_batch) flush();
  }
  flush();
  if (debug() >= 1 && !graphs_.empty())
    std::fprintf(stderr, "JIT: %zu kernels in %zu device graphs\n", kernels_.size(), graphs_.size());
}

void JitReplay::run(const std::vector<std::shared_ptr<Buffer>>& inputs, const VarVals& var_vals, int64_t jit_mode) {
  for (const InputUse& u : input_uses_) {
    std::shared_ptr<Buffer>& slot = items_[u.item].bufs[u.buf];
    if (slot != inputs[u.input]) slot = inputs[u.input];
    if (const int64_t k = kernel_of_item_[u.item]; k >= 0) kernels_[static_cast<size_t>(k)].args.bufs[u.buf] = slot->ptr();
  }
  bind_values(var_vals);
  if (jit_mode == 1 && !graphed_built_) build_graphs();
  run_steps(jit_mode == 1 ? graphed_ : plain_, var_vals);
}

void JitReplay::run_steps(const std::vector<Step>& steps, const VarVals& var_vals) {
  if (debug() >= 2 || profile::enabled()) {
    // every item through ExecItem::run: its DEBUG line, its timing, its profile event
    for (const Step& s : steps) {
      if (s.kind == Step::Graph) {
        ExecItem{graphs_[s.index], {}, {}}.run(var_vals, false, true);
        GlobalCounters::kernel_count += static_cast<int64_t>(graphs_[s.index]->size()) - 1;   // counted per kernel
      } else {
        items_[s.kind == Step::Kernel ? kernels_[s.index].item : s.index].run(var_vals, false, true);
      }
    }
    return;
  }
  for (const Step& s : steps) {
    switch (s.kind) {
      case Step::Kernel: kernels_[s.index].launch(); break;
      case Step::Graph: graphs_[s.index]->launch(false); break;
      case Step::Item: items_[s.index].run(var_vals, false, true); break;
    }
  }
  GlobalCounters::kernel_count += static_cast<int64_t>(kernels_.size());
  GlobalCounters::global_ops += kernel_ops_;
  GlobalCounters::global_mem += kernel_mem_;
}

}  // namespace tg
