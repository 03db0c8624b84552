// The runtime of a compiled graph: allocates outputs and intermediates through torch (with the
// strides eager produces), runs kernels (threads follow torch.get_num_threads()) and extern
// calls in order, and returns the graph's result. Inputs whose sizes, strides or dtypes differ
// from the ones compiled for run on the reference runner instead (one perf_hints line).
// Graphs with 2-d convolutions run them channels-last (config cpu_channels_last): the weights are
// converted once per version, outputs come back in eager's layout.
#pragma once

#include <Python.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/python/reference_runner.h"
#include "inductor/cpu_codegen.h"
#include "inductor/python/size_bindings.h"
#include "inductor/loop_ir.h"
#include "graph/passes/channels_last.h"

namespace ff::inductor {

// What compile_for_cpu (inductor/pipeline.h) made of one graph; shared by every CompiledGraph
// built from a structurally equal graph (the in-memory cache).
struct CompiledProgram {
  Graph graph;  // the graph the program runs (channels-last where `channels_last` is set)
  loop::Program program;
  std::shared_ptr<CpuModule> module;
  std::string key;
  std::optional<ChannelsLastGraph> channels_last;  // its `graph` left empty: see `graph`
};

class CompiledGraph {
 public:
  // Compiles `g` (or takes it from the in-memory cache). Throws on any failure; the caller
  // falls back to the reference runner.
  explicit CompiledGraph(const Graph& g);
  ~CompiledGraph();

  // Runs on `inputs` (borrowed). New reference, or nullptr with a Python error set.
  PyObject* run(PyObject* const* inputs, size_t n);

  const CompiledProgram& compiled() const { return *prog_; }
  bool from_memory_cache() const { return from_memory_cache_; }
  bool channels_last() const { return original_ != nullptr; }
  // Dynamic shapes: the program's kernels take the symbols' values as arguments; each new set of
  // sizes costs a specialised copy of the program's sizes (no code generation).
  bool symbolic() const { return prog_->program.symbolic; }
  size_t instances() const { return instances_.size(); }
  // Linear layers set up for MKL's packed GEMM, and the calls they served (packed_linear.h).
  int packed_linears() const;
  int64_t packed_linear_calls() const;

 private:
  struct Plan;
  // The program at one set of sizes: prog_'s own where it is static; for a symbolic program, its
  // graph and program specialised to one call's symbol values (`bindings`).
  struct Instance {
    std::vector<int64_t> bindings;
    Graph graph;  // symbolic programs only
    loop::Program program;
    const Graph* g = nullptr;             // the graph run (prog_'s or `graph`)
    const loop::Program* p = nullptr;     // the program run (prog_'s or `program`)
    std::unique_ptr<Graph> original;  // symbolic programs run channels-last: the captured graph at these sizes
    std::unique_ptr<Plan> plan;
    std::unique_ptr<ReferenceRunner> fallback;
  };
  void build_plan(Instance& inst, const Graph& captured);
  std::shared_ptr<Instance> make_instance(std::vector<int64_t> bindings);  // throws where it cannot run
  // The instance for the inputs' sizes (made and kept on first use; one without a plan runs on the
  // reference runner); nullptr where the inputs do not bind the symbols, or with *failed and a
  // Python error set.
  std::shared_ptr<Instance> instance_for(PyObject* const* inputs, size_t n, bool* failed);
  PyObject* matmul_into_pool(Plan& pl, const std::string& op, const std::vector<PyObject*>& operands, int result);
  std::shared_ptr<const CompiledProgram> prog_;
  std::unique_ptr<Graph> original_;  // the graph as captured, when prog_ runs it channels-last
  Instance static_;                  // a static program's one instance
  std::vector<std::pair<int, int>> symbol_at_;  // symbol -> (input, dim) its value is read from
  InstanceCache<Instance> instances_;  // symbolic programs
  std::unique_ptr<ReferenceRunner> symbolic_fallback_;  // inputs whose sizes cannot bind the symbols
  bool from_memory_cache_ = false;
  bool warned_ = false;
};

// A structural hash of a graph (ops, constants, metadata): the in-memory cache key.
std::string graph_structure_key(const Graph& g);

// The disk cache's directory of CPU objects (kernel_cache.h; empty when the disk cache is off).
std::string disk_cache_dir();

// Drops the in-memory cache (framefuse.reset()).
void clear_memory_cache();

}  // namespace ff::inductor
