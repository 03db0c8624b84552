#include "graph/pipeline.h"

#include <chrono>
#include <cstdio>

#include "graph/passes/attention_masks.h"
#include "graph/passes/eliminate_common_subexpressions.h"
#include "graph/passes/eliminate_dead_code.h"
#include "graph/passes/fold_constants.h"
#include "graph/passes/functionalize.h"
#include "graph/passes/fuse_attention.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "src/base/config.h"
#include "src/base/logging.h"

namespace ff {

std::vector<GraphPass> graph_passes(const GraphStageOptions& options) {
  // NB: folding first exposes duplicates and dead nodes (and constant attention scales); CSE before
  // DCE so that nodes made unused by merging are removed in the same run; functionalization last,
  // when every reader of a mutated tensor is known (CSE may add readers).
  std::vector<GraphPass> passes = {{"fold_constants", [](const Graph& g) { return fold_constants(g); }}};
  if (options.fuse_attention && config().fuse_attention) {
    bool tf32 = options.cuda_tf32_matmul;
    passes.push_back({"fuse_attention", [tf32](const Graph& g) {
                        AttentionSupport support = attention_support();
                        support.cuda_tf32_matmul = tf32;
                        return fuse_attention(g, support, nullptr);
                      }});
  }
  // NB: after fuse_attention, whose SDPA calls may carry such masks; before DCE, which then drops
  // the index arithmetic that built them.
  passes.push_back({"attention_masks", attention_masks});
  passes.push_back({"eliminate_common_subexpressions", eliminate_common_subexpressions});
  passes.push_back({"eliminate_dead_code", eliminate_dead_code});
  passes.push_back({"functionalize", [](const Graph& g) { return functionalize(g); }});
  return passes;
}

bool verify_between_passes() {
#ifndef NDEBUG
  return true;
#else
  return config().verify_graphs;
#endif
}

bool print_ir_after(std::string_view pass) {
  if (!log_enabled(LogArtifact::pass_ir)) return false;
  const std::string& names = config().print_ir_after;
  if (names.empty()) return true;
  size_t start = 0;
  while (start <= names.size()) {
    size_t end = names.find(',', start);
    if (end == std::string::npos) end = names.size();
    std::string_view name(names.data() + start, end - start);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (name == pass) return true;
    start = end + 1;
  }
  return false;
}

void log_pass_time(std::string_view pass, double ms) {
  if (!log_enabled(LogArtifact::passes)) return;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", ms);
  log_emit(LogArtifact::passes, std::string(pass) + ": " + buf);
}

Graph run_passes(const Graph& g, const std::vector<GraphPass>& passes, bool verify,
                 const std::function<void(std::string_view pass, const Graph& result)>& after) {
  Graph current = g;
  for (const GraphPass& pass : passes) {
    auto t0 = std::chrono::steady_clock::now();
    current = pass.run(current);
    log_pass_time(pass.name, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (verify) verify_or_throw(current, std::string("after ") + pass.name);
    if (print_ir_after(pass.name)) log_emit(LogArtifact::pass_ir, std::string("graph after ") + pass.name + ":\n" + graph_code(current));
    if (after) after(pass.name, current);
  }
  return current;
}

PipelineOptions::PipelineOptions() : verify(verify_between_passes()) {}

Graph run_graph_passes(const Graph& g, const PipelineOptions& options) {
  if (options.verify) verify_or_throw(g, "before the graph passes");
  return run_passes(g, graph_passes(), options.verify, options.after_pass);
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
