// The compile pipeline of the inductor backend, one per device: every pass a graph goes through on
// its way to kernels, in order, in one list. First the graph passes (torch-level rewrites: the
// graph stage of graph/pipeline.h, then the device's own), then lowering and the loop-IR passes,
// then the renderer.
//
//   compile_for_cpu:   fold_constants, fuse_attention, eliminate_common_subexpressions,
//                      eliminate_dead_code, functionalize, channels_last | lower_graph, fuse_kernels,
//                      eliminate_dead_stores, plan_memory, reuse_reduced_values,
//                      write_epilogues_in_place, collapse_outer_loops | LLVM
//   compile_for_cuda:  creations_on_device, fold_constants, fuse_attention, eliminate_common_subexpressions,
//                      eliminate_dead_code, functionalize, fold_conv_batch_norm (reduce-overhead),
//                      channels_last, split_conv_bias | lower_graph, fuse_kernels, eliminate_dead_stores,
//                      plan_memory | CUDA C++ (render_cuda: cuda/cuda_render.h; NVRTC: compile_cubins)
//
// Each pass is timed and logged (artifact `passes`), verified after it runs when config
// `verify_graphs` is on or in debug builds (the graph verifier, loop::verify_program), and its IR is
// printed after it runs with artifact `pass_ir` (config `print_ir_after` picks the passes).
// `cpu_pass_trace` returns the same text for tests. The runtimes (python/compiled_graph.cpp,
// cuda/python/cuda_runner.cpp) only prepare and run what the pipeline made.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/ir.h"
#include "graph/pipeline.h"
#include "graph/passes/channels_last.h"
#include "graph/passes/fold_conv_batch_norm.h"
#include "inductor/cpu_codegen.h"
#include "inductor/cuda/cuda_render.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/loop_ir.h"

namespace ff::inductor {

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
struct CudaCompiled;

struct CudaPipelineOptions {
  bool fuse_attention = false;        // explicit attention into one SDPA call (config fuse_attention)
  bool cuda_tf32_matmul = false;      // torch runs float32 matmuls in TF32 now: float32 attention stays
  bool channels_last = false;         // config cuda_channels_last while cuDNN runs TF32
  bool fold_batch_norm = false;       // reduce-overhead with config cuda_fold_batch_norm
  bool fused_conv_epilogues = false;  // torch has cudnn_convolution_relu / _add_relu
  // A graph of CPU or meta tensors is compiled as if its tensors were on cuda:0.
  bool assume_cuda = false;
  // Render the program to CUDA C++ and compile its eager units with NVRTC (false: stop at the
  // loop IR).
  bool render = true;
  bool all_variants = false;  // max-autotune: every candidate block shape of row kernels
  std::string arch;           // "" = the device's (sm_90 where no GPU is present)
  int compile_threads = 1;    // NVRTC programs compiled at once; the kernels are split into as many units
  // Hand-written kernels the runtime launches besides the generated ones (weight packing, TF32
  // attention), asked for once the loop IR is final and compiled with the generated units.
  std::function<std::vector<std::string>(const CudaCompiled&)> extra_sources;
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
  // Where `render` is on:
  std::string arch;                    // what the cubins are for
  cuda::ModuleSource source;           // the rendered module
  std::vector<std::string> cubins;     // per source unit; "" for lazy units (compiled when a launch needs one)
  std::vector<std::string> extra_cubins;  // per extra source; empty where nothing needed NVRTC and it is missing
  cuda::CompileStats stats;            // of the generated units
};

// Runs the graph passes and the loop-IR passes for CUDA, then renders the program to CUDA C++
// (cuda/cuda_render.h) and compiles it with NVRTC. Needs no GPU. Throws ff::Unsupported when the
// graph cannot be compiled for CUDA (several devices, no CUDA tensor, mixed devices).
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
