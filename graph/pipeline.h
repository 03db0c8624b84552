// The graph stage's pass pipeline: every graph pass, in the order it runs, and the driver that runs
// a list of passes (timed and logged, verified between passes, printed after any of them).
//
//   fold_constants, fuse_attention, eliminate_common_subexpressions, eliminate_dead_code,
//   functionalize
//
// Both inductor pipelines (inductor/pipeline.h) start with this list; `Graph.optimized()` runs it.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/ir.h"

namespace ff {

// One named pass over IR `T` (a Graph here; inductor's loop::Program).
template <typename T>
struct NamedPass {
  const char* name;
  std::function<T(const T&)> run;
};
using GraphPass = NamedPass<Graph>;

struct GraphStageOptions {
  // Explicit attention into one SDPA call (graph/passes/fuse_attention.h), where config
  // fuse_attention is on.
  bool fuse_attention = true;
  // Per compile: float32 matmuls on CUDA run in TF32 now (fuse_attention's AttentionSupport).
  bool cuda_tf32_matmul = false;
};

// The graph stage, in order (see above).
std::vector<GraphPass> graph_passes(const GraphStageOptions& options = GraphStageOptions());

// ---- the driver (inductor's loop-IR driver shares its habits) ----
// Whether passes verify their result: debug builds, or config verify_graphs.
bool verify_between_passes();
// Whether the `pass_ir` artifact prints the IR after `pass` (config print_ir_after: a comma list of
// pass names; empty: every pass).
bool print_ir_after(std::string_view pass);
// "<pass>: <ms> ms" to the `passes` artifact.
void log_pass_time(std::string_view pass, double ms);

// Runs `passes` over `g` in order: times and logs each one (artifact `passes`), verifies its result
// where `verify` (InternalError naming the pass), prints it (artifact `pass_ir`), calls `after`.
Graph run_passes(const Graph& g, const std::vector<GraphPass>& passes, bool verify,
                 const std::function<void(std::string_view pass, const Graph& result)>& after = {});

struct PipelineOptions {
  // Run the verifier on the input and after every pass (InternalError naming the pass).
  // Defaults to verify_between_passes().
  bool verify;
  // Called with each pass's name and result (e.g. to print the IR after each one).
  std::function<void(std::string_view pass, const Graph& result)> after_pass;

  PipelineOptions();
};

// Runs graph_passes() in order.
Graph run_graph_passes(const Graph& g, const PipelineOptions& options = PipelineOptions());

// The graph code before and after each pass, as one text (for debugging and tests):
//   # input
//   def forward(...)
//   # after fold_constants
//   ...
std::string graph_pass_trace(const Graph& g);

}  // namespace ff
