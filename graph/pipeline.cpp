#include "graph/pipeline.h"

#include "graph/passes/eliminate_common_subexpressions.h"
#include "graph/passes/eliminate_dead_code.h"
#include "graph/passes/fold_constants.h"
#include "graph/passes/fuse_attention.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "src/base/config.h"
#include "src/base/logging.h"

namespace ff {

const std::vector<GraphPass>& graph_passes() {
  // NB: folding first exposes duplicates and dead nodes (and constant attention scales); CSE before DCE so that nodes made
  // unused by merging are removed in the same run.
  static const std::vector<GraphPass> passes = {
      {"fold_constants", [](const Graph& g) { return fold_constants(g); }},
      {"fuse_attention", [](const Graph& g) { return fuse_attention(g); }},
      {"eliminate_common_subexpressions", eliminate_common_subexpressions},
      {"eliminate_dead_code", eliminate_dead_code},
  };
  return passes;
}

PipelineOptions::PipelineOptions() : verify(config().verify_graphs) {}

Graph run_graph_passes(const Graph& g, const PipelineOptions& options) {
  if (options.verify) verify_or_throw(g, "before the graph passes");
  Graph current = g;
  for (const GraphPass& pass : graph_passes()) {
    current = pass.run(current);
    if (options.verify) verify_or_throw(current, std::string("after ") + pass.name);
    if (log_enabled(LogComponent::graph, LogLevel::Debug))
      log_emit(LogComponent::graph, LogLevel::Debug, std::string("after ") + pass.name + ":\n" + graph_code(current));
    if (options.after_pass) options.after_pass(pass.name, current);
  }
  return current;
}

std::string graph_pass_trace(const Graph& g) {
  std::string out = "# input\n" + graph_code(g);
  PipelineOptions options;
  options.after_pass = [&](std::string_view pass, const Graph& result) {
    out += "# after " + std::string(pass) + "\n" + graph_code(result);
  };
  run_graph_passes(g, options);
  return out;
}

}  // namespace ff
