// GRAPH=1: Graphviz drawings of what was realized (tinygrad 0.9.2's engine/graph.py), written at
// exit (and by save()) to GRAPHPATH (a folder; default <TMPDIR>/tg_graph):
//   net.dot       the lazy graph at each realize: one node per base LazyBuffer, colored by op family
//                 (meta yellow, elementwise grey, reduce red, realized buffers blue), labelled with
//                 op, shape, dtype and the Tensor ops that made it; edges carry the shape read
//   schedule.dot  one box per kernel/copy that ran, named as DEBUG=2 names it, edges through buffers
// and each as .svg when Graphviz `dot` is installed.
#pragma once
#include <string>
#include <vector>

#include "lazy/lazy.hpp"

namespace tg {
struct ExecItem;
}

namespace tg::graph {

bool enabled();                                        // GRAPH >= 1
void log_lazy(const std::vector<LazyBufferPtr>& outs);   // before scheduling (it frees the graph)
void log_exec(const ExecItem& ei, int n_outputs);      // each item as it runs (outputs come first in bufs)
std::string lazy_dot();                                // the graphs so far, as dot text
std::string schedule_dot();
void clear();
std::string graph_path();                              // GRAPHPATH or the default folder
// Writes net.dot and schedule.dot (and .svg when dot is installed); returns the paths written.
std::vector<std::string> save();

}  // namespace tg::graph
