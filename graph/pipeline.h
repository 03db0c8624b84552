// The graph stage's pass pipeline: every pass, in the order it runs.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "graph/ir.h"

namespace ff {

struct GraphPass {
  const char* name;
  Graph (*run)(const Graph&);
};

// fold_constants, fuse_attention, eliminate_common_subexpressions, eliminate_dead_code.
const std::vector<GraphPass>& graph_passes();

struct PipelineOptions {
  // Run the verifier on the input and after every pass (InternalError naming the pass).
  // Defaults to config().verify_graphs.
  bool verify;
  // Called with each pass's name and result (e.g. to print the IR after each one).
  std::function<void(std::string_view pass, const Graph& result)> after_pass;

  PipelineOptions();
};

// Runs every pass in order. With `+graph` logging, logs the graph code after each pass.
Graph run_graph_passes(const Graph& g, const PipelineOptions& options = PipelineOptions());

// The graph code before and after each pass, as one text (for debugging and tests):
//   # input
//   def forward(...)
//   # after fold_constants
//   ...
std::string graph_pass_trace(const Graph& g);

}  // namespace ff
