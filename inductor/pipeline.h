// The compile pipeline of the inductor backend, one per device: every pass a graph goes through on
// its way to kernels, in order, in one list. First the graph passes (torch-level rewrites), then
// lowering and the loop-IR passes, then the renderer.
//
//   compile_for_cpu:   fuse_attention, channels_last | lower_graph, fuse_kernels, eliminate_dead_stores,
//                      plan_memory, reuse_reduced_values, write_epilogues_in_place,
//                      collapse_outer_loops | LLVM
//   compile_for_cuda:  fuse_attention, functionalize_private_inplace, fold_conv_batch_norm
//                      (reduce-overhead), channels_last | lower_graph, fuse_kernels,
//                      eliminate_dead_stores, plan_memory   (rendered by the runner)
//
// Each pass is timed and logged (artifact `passes`), verified after it runs when config
// `verify_graphs` is on or in debug builds (the graph verifier, loop::verify_program), and its IR is
// printed after it runs with artifact `pass_ir` (config `print_ir_after` picks the passes).
// `inductor_pass_trace` returns the same text for tests. The runtimes (python/compiled_graph.cpp,
// cuda/python/cuda_runner.cpp) only prepare and run what the pipeline made.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/channels_last.h"
#include "graph/passes/fold_conv_batch_norm.h"
#include "inductor/cpu_codegen.h"
#include "inductor/loop_ir.h"

namespace ff::inductor {

// One named pass of a pipeline over IR `T` (Graph or loop::Program).
template <typename T>
struct NamedPass {
  const char* name;
  std::function<T(const T&)> run;
};

// Called with each pass's name and the IR it produced (tests, traces).
struct PassObserver {
  std::function<void(std::string_view pass, const Graph&)> graph;
  std::function<void(std::string_view pass, const loop::Program&)> loop;
};

// ---- CPU ----
struct CpuPipelineOptions {
  bool fuse_attention = false;  // explicit attention into one SDPA call (config fuse_attention)
  bool channels_last = false;   // rewrite 2-d convolutions to NHWC (config cpu_channels_last)
  bool render = true;          // run the LLVM renderer (false: stop at the loop IR)
  const PassObserver* observer = nullptr;
};

struct CpuCompiled {
  Graph graph;  // the graph the program runs (channels-last where `channels_last` is set)
  std::optional<ChannelsLastGraph> channels_last;  // its conv weight inputs and outputs to restore
  loop::Program program;
  std::shared_ptr<CpuModule> module;  // null when the program has no kernels or was not rendered
};

// Compiles `g` for the host CPU. Where the channels-last rewrite is refused or the rewritten graph
// fails to compile, the graph as captured is compiled (a perf_hints line says why). Throws
// ff::Unsupported (no LLVM, a graph lowering refuses) or InternalError.
CpuCompiled compile_for_cpu(const Graph& g, const CpuPipelineOptions& options);

// ---- CUDA ----
struct CudaPipelineOptions {
  bool fuse_attention = false;        // explicit attention into one SDPA call (config fuse_attention)
  bool cuda_tf32_matmul = false;      // torch runs float32 matmuls in TF32 now: float32 attention stays
  bool channels_last = false;         // config cuda_channels_last while cuDNN runs TF32
  bool fold_batch_norm = false;       // reduce-overhead with config cuda_fold_batch_norm
  bool fused_conv_epilogues = false;  // torch has cudnn_convolution_relu / _add_relu
  // A graph of CPU or meta tensors is compiled as if its tensors were on cuda:0.
  bool assume_cuda = false;
  // The first graph pass: in-place ops on private intermediates computed out of place (the
  // runner's functionalize_private_inplace until one functionalization lives in graph/passes).
  std::function<Graph(const Graph&)> functionalize;
  const PassObserver* observer = nullptr;
};

struct CudaCompiled {
  Graph graph;  // what the program runs: functionalized, batch norms folded, channels-last
  loop::Program program;
  int device = 0;                    // the CUDA device every tensor is on
  std::vector<FoldedInput> folded;   // inputs derived from batch norms (after the caller's)
  int folded_batch_norms = 0;
  std::optional<ChannelsLastGraph> channels_last;
  std::string channels_last_why;     // "" where the rewrite ran
};

// Runs the graph passes and the loop-IR passes for CUDA; the runner renders and compiles the
// program with NVRTC (cuda/cuda_render.h). Needs no GPU. Throws ff::Unsupported when the graph
// cannot be compiled for CUDA (several devices, no CUDA tensor, mixed devices).
CudaCompiled compile_for_cuda(const Graph& g, const CudaPipelineOptions& options);

// ---- the driver ----
// Runs `passes` over `ir` in order: times and logs each one (artifact `passes`), verifies its
// result (config verify_graphs, debug builds), prints it (artifact `pass_ir`), tells `observer`.
Graph run_passes(const Graph& ir, const std::vector<NamedPass<Graph>>& passes, const PassObserver* observer);
loop::Program run_passes(const loop::Program& ir, const std::vector<NamedPass<loop::Program>>& passes,
                         const PassObserver* observer);

// The text of every pass of compile_for_cpu up to the loop IR (no rendering): "# after <pass>" and
// its IR (graph code or loop IR) per pass.
std::string cpu_pass_trace(const Graph& g, bool channels_last);

}  // namespace ff::inductor
