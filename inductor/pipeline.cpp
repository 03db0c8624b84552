#include "inductor/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>

#include "graph/passes/creations_on_device.h"
#include "graph/passes/split_conv_bias.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "inductor/cuda/cuda_api.h"
#include "inductor/kernel_cache.h"
#include "inductor/lower.h"
#include "inductor/parallel.h"
#include "inductor/schedule.h"
#include "src/base/config.h"
#include "src/base/errors.h"
#include "src/base/logging.h"

namespace ff::inductor {
namespace {

// NB: enough root iterations for every thread (and for load balance between them).
constexpr int64_t kMinRootExtent = 256;
// NB: on CUDA a horizontally fused kernel runs its shared outer loop's iterations as its rows (one
// per thread block) and each body serially: a short loop left an H200 with 4 blocks for a
// rotary embedding over 2M elements (7 ms instead of 10 us). 2048 rows fill 132 SMs' blocks.
constexpr int64_t kCudaMinHorizontalRows = 2048;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void check_program(const loop::Program& p, std::string_view after) {
  std::string err = loop::verify_program(p);
  FF_CHECK(err.empty(), "the loop IR after " + std::string(after) + " is invalid: " + err + "\n" + loop::program_str(p));
}

// Graph -> loop IR: the one pass that changes IR.
loop::Program lower(const Graph& g, std::vector<std::string>* notes, bool cpu_only, const PassObserver* observer) {
  auto t0 = std::chrono::steady_clock::now();
  loop::Program p = lower_graph(g, notes, cpu_only ? EagerDevice::CPU : EagerDevice::CUDA);
  log_pass_time("lower_graph", ms_since(t0));
  if (verify_between_passes()) check_program(p, "lower_graph");
  if (print_ir_after("lower_graph")) log_emit(LogArtifact::pass_ir, "loop IR after lower_graph:\n" + loop::program_str(p));
  if (observer && observer->loop) observer->loop("lower_graph", p);
  return p;
}

// The scheduling passes both devices share, then the `fusion`, `schedule` and `output_code` logs
// they have always written.
std::vector<NamedPass<loop::Program>> schedule_passes(std::vector<std::string>* fusion_log, std::vector<std::string>* mem_log,
                                                      int64_t min_horizontal_extent) {
  return {
      {"fuse_kernels",
       [fusion_log, min_horizontal_extent](const loop::Program& p) { return fuse_kernels(p, fusion_log, min_horizontal_extent); }},
      {"eliminate_dead_stores", [](const loop::Program& p) { return eliminate_dead_stores(p); }},
      {"plan_memory", [mem_log](const loop::Program& p) { return plan_memory(p, mem_log); }},
  };
}

void log_schedule(const loop::Program& p, const std::vector<std::string>& notes, const std::vector<std::string>& fusion_log,
                  const std::vector<std::string>& mem_log) {
  if (log_enabled(LogArtifact::fusion)) {
    std::string msg = "fusion decisions:\n";
    for (auto& s : notes) msg += "  " + s + "\n";
    for (auto& s : fusion_log) msg += "  " + s + "\n";
    log_emit(LogArtifact::fusion, msg);
  }
  if (log_enabled(LogArtifact::schedule)) {
    std::string msg = "schedule:\n";
    for (const loop::Step& s : p.steps) {
      if (s.kind == loop::Step::Kind::Kernel) {
        const loop::Kernel& k = p.kernels[static_cast<size_t>(s.index)];
        msg += "  kernel " + k.name + " (outer loop " + k.root.extent.str() + ")\n";
      } else {
        const auto& e = p.externs[static_cast<size_t>(s.index)];
        msg += "  extern node " + std::to_string(e.node) + ": " + e.reason + "\n";
      }
    }
    for (auto& s : mem_log) msg += "  " + s + "\n";
    log_emit(LogArtifact::schedule, msg);
  }
  if (log_enabled(LogArtifact::output_code)) log_emit(LogArtifact::output_code, "loop IR:\n" + loop::program_str(p));
}

// The device every tensor of `g` is on (one CUDA device), without changing the graph: lowering and
// fusion read sizes, strides and dtypes only.
int cuda_device_of(const Graph& g, bool assume_cuda) {
  bool cuda = false, other = false;
  int device = -1;
  std::function<void(const ValueMeta&)> see = [&](const ValueMeta& m) {
    if (m.kind == ValueMeta::Kind::Tuple)
      for (const ValueMeta& item : m.items) see(item);
    if (m.kind != ValueMeta::Kind::Tensor) return;
    if (m.tensor.device.type != Device::Type::CUDA) {
      other = true;
      return;
    }
    cuda = true;
    int idx = std::max(0, m.tensor.device.index);
    if (device >= 0 && device != idx) throw Unsupported("the graph uses tensors on several CUDA devices");
    device = idx;
  };
  for (const Node& n : g.nodes()) see(n.meta);
  if (assume_cuda && !cuda) return 0;
  if (!cuda) throw Unsupported("the graph has no CUDA tensor");
  if (other) throw Unsupported("the graph mixes CUDA tensors with CPU or meta tensors");
  return device;
}

// The CPU pipeline up to the loop IR.
loop::Program cpu_loop_ir(const Graph& g, const PassObserver* observer) {
  std::vector<std::string> notes, fusion_log, mem_log, inplace_log;
  loop::Program p = lower(g, &notes, /*cpu_only=*/true, observer);
  p = run_passes(p, schedule_passes(&fusion_log, &mem_log, 0), observer);
  // NB: release builds verify once here (verify_graphs: after every pass).
  check_program(p, "plan_memory");
  log_schedule(p, notes, fusion_log, mem_log);
  // NB: the text form only when it is printed: it costs as much as a pass.
  bool print_ir = log_enabled(LogArtifact::output_code);
  std::string before = print_ir ? loop::program_str(p) : std::string();
  std::vector<NamedPass<loop::Program>> cpu_passes = {
      {"reuse_reduced_values", [](const loop::Program& q) { return reuse_reduced_values(q); }},
      {"write_epilogues_in_place", [&](const loop::Program& q) { return write_epilogues_in_place(q, &inplace_log); }},
      {"collapse_outer_loops", [](const loop::Program& q) { return collapse_outer_loops(q, kMinRootExtent); }},
  };
  p = run_passes(p, cpu_passes, observer);
  if (log_enabled(LogArtifact::schedule) && !inplace_log.empty()) {
    std::string msg = "epilogues written in place:\n";
    for (auto& l : inplace_log) msg += "  " + l + "\n";
    log_emit(LogArtifact::schedule, msg);
  }
  if (print_ir && loop::program_str(p) != before)
    log_emit(LogArtifact::output_code, "CPU loop IR (reduced values reused, outer loops collapsed for threads):\n" + loop::program_str(p));
  return p;
}

CpuCompiled compile_cpu_graph(const Graph& g, std::optional<ChannelsLastGraph> cl, const CpuPipelineOptions& options) {
  CpuCompiled out;
  out.graph = cl ? cl->graph : g;
  out.channels_last = std::move(cl);
  if (out.channels_last) out.channels_last->graph = Graph();  // `out.graph` holds it
  out.program = cpu_loop_ir(out.graph, options.observer);
  if (!options.render || out.program.kernels.empty()) return out;
  if (!cpu_codegen_available()) throw Unsupported("framefuse was built without LLVM: CPU graphs run on the reference runner");
  auto t0 = std::chrono::steady_clock::now();
  CpuCompileOptions opt;
  opt.cache_dir = cache_area_dir(CacheArea::CpuObjects);
  opt.want_llvm_ir = log_enabled(LogArtifact::output_code) && log_enabled(LogComponent::inductor, LogLevel::Debug);
  opt.streaming_store_bytes = std::max<int64_t>(0, config().cpu_streaming_store_mb) << 20;
  out.module = compile_cpu(out.program, opt);
  log_pass_time("render_llvm", ms_since(t0));
  if (opt.want_llvm_ir) log_emit(LogArtifact::output_code, "LLVM IR:\n" + out.module->llvm_ir);
  if (log_enabled(LogArtifact::schedule))
    log_emit(LogArtifact::schedule, "compiled " + std::to_string(out.program.kernels.size()) + " kernel(s) in " +
                                        std::to_string(out.module->compile_ms) + " ms" +
                                        (out.module->from_disk_cache ? " (object code from the disk cache)" : "") +
                                        "; threads: " + parallel_backend());
  return out;
}

// The CUDA program as CUDA C++ and cubins: render_cuda, then NVRTC over the eager units and the
// runtime's hand-written kernels, in parallel.
void render_cuda(CudaCompiled& out, const CudaPipelineOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  cuda::RenderOptions ro;
  ro.all_variants = options.all_variants;
  ro.max_units = std::max(1, options.compile_threads);
  out.source = cuda::render_module(out.program, ro);
  log_pass_time("render_cuda", ms_since(t0));
  out.arch = options.arch;
  if (out.arch.empty()) out.arch = cuda::driver_api() ? cuda::device_info(out.device).arch() : "sm_90";
  if (log_enabled(LogArtifact::output_code) && log_enabled(LogComponent::inductor, LogLevel::Debug))
    log_emit(LogArtifact::output_code, "CUDA source (" + out.arch + "):\n" + out.source.source);
  std::vector<std::string> extra = options.extra_sources ? options.extra_sources(out) : std::vector<std::string>();
  out.cubins.assign(out.source.units.size(), std::string());
  // NB: a graph with no kernels needs NVRTC only for the hand-written ones, which the runtime can
  // leave to torch: without NVRTC they are simply not compiled.
  if (out.source.kernels.empty() && (extra.empty() || !cuda::nvrtc_api())) return;
  t0 = std::chrono::steady_clock::now();
  std::vector<std::string> sources;
  std::vector<size_t> unit_of;  // per compiled generated source: its unit
  if (!out.source.kernels.empty())
    for (size_t u = 0; u < out.source.units.size(); ++u)
      if (!out.source.units[u].lazy) {
        sources.push_back(out.source.units[u].source);
        unit_of.push_back(u);
      }
  sources.insert(sources.end(), extra.begin(), extra.end());
  std::vector<cuda::CompileStats> per;
  std::vector<std::string> cubins = cuda::compile_cubins(sources, out.arch, &per, std::max(1, options.compile_threads));
  log_pass_time("nvrtc", ms_since(t0));
  for (size_t i = 0; i < unit_of.size(); ++i) out.cubins[unit_of[i]] = std::move(cubins[i]);
  out.extra_cubins.assign(std::make_move_iterator(cubins.begin() + static_cast<std::ptrdiff_t>(unit_of.size())),
                          std::make_move_iterator(cubins.end()));
  if (unit_of.empty()) return;
  out.stats = cuda::CompileStats{};
  out.stats.disk_hit = true;
  out.stats.programs = static_cast<int>(unit_of.size());
  for (size_t i = 0; i < unit_of.size(); ++i) {
    out.stats.nvrtc_ms += per[i].nvrtc_ms;
    out.stats.disk_hit &= per[i].disk_hit;
    out.stats.functions += out.source.units[unit_of[i]].functions;
  }
}

}  // namespace

Graph run_passes(const Graph& ir, const std::vector<NamedPass<Graph>>& passes, const PassObserver* observer) {
  return ff::run_passes(ir, passes, verify_between_passes(), observer ? observer->graph : nullptr);
}

loop::Program run_passes(const loop::Program& ir, const std::vector<NamedPass<loop::Program>>& passes,
                         const PassObserver* observer) {
  loop::Program current = ir;
  for (const auto& pass : passes) {
    auto t0 = std::chrono::steady_clock::now();
    current = pass.run(current);
    log_pass_time(pass.name, ms_since(t0));
    if (verify_between_passes()) check_program(current, pass.name);
    if (print_ir_after(pass.name))
      log_emit(LogArtifact::pass_ir, std::string("loop IR after ") + pass.name + ":\n" + loop::program_str(current));
    if (observer && observer->loop) observer->loop(pass.name, current);
  }
  return current;
}

CpuCompiled compile_for_cpu(const Graph& captured, const CpuPipelineOptions& options) {
  // NB: no ShapeEnv while compiling: a pass that reads a symbolic size as an int throws
  // SymbolicSpecialization (the graph is then compiled per set of sizes) instead of guarding on it.
  ShapeEnvScope no_env(nullptr);
  GraphStageOptions stage;
  stage.fuse_attention = options.fuse_attention;
  const Graph g = run_passes(captured, graph_passes(stage), options.observer);
  if (!options.channels_last || !has_conv2d(g)) return compile_cpu_graph(g, std::nullopt, options);
  // The one CPU graph pass. NB: the graph as captured may still compile where the rewritten one
  // does not: only the rewrite is given up.
  std::string why;
  try {
    std::optional<ChannelsLastGraph> cl;
    Graph rewritten = run_passes(g, {{"channels_last", [&](const Graph& in) {
                                        cl = to_channels_last(in, &why);
                                        return cl ? cl->graph : in;
                                      }}},
                                 options.observer);
    if (cl) return compile_cpu_graph(g, std::move(cl), options);
  } catch (const std::exception& e) {
    if (config().raise_on_internal_error && dynamic_cast<const InternalError*>(&e)) throw;
    why = std::string("compiling the rewritten graph failed: ") + e.what();
  }
  if (log_enabled(LogArtifact::perf_hints))
    log_emit(LogArtifact::perf_hints, "inductor: the graph's convolutions run in eager's layout, not channels-last: " + why);
  return compile_cpu_graph(g, std::nullopt, options);
}

CudaCompiled compile_for_cuda(const Graph& g, const CudaPipelineOptions& options) {
  // NB: no ShapeEnv, as in compile_for_cpu: a symbolic size read as an int throws.
  ShapeEnvScope no_env(nullptr);
  CudaCompiled out;
  GraphStageOptions stage;
  stage.fuse_attention = options.fuse_attention;
  stage.cuda_tf32_matmul = options.cuda_tf32_matmul;
  std::vector<NamedPass<Graph>> passes = graph_passes(stage);
  passes.insert(passes.begin(), {"creations_on_device", creations_on_device});
  // NB: cuDNN's fused convolutions cost more host time per call than plain ones; that time is gone
  // under a CUDA graph, where the saved kernels pay off (resnet18 b32 H100: reduce-overhead 2.11x
  // eager), while without one a host-bound call got slower (1.40x against 1.51x unfolded).
  if (options.fold_batch_norm)
    passes.push_back({"fold_conv_batch_norm", [&](const Graph& in) {
                        std::string why;
                        auto f = fold_conv_batch_norm(in, options.fused_conv_epilogues, &why);
                        if (!f) return in;
                        out.folded = std::move(f->folded);
                        out.folded_batch_norms = f->fused;
                        return std::move(f->graph);
                      }});
  // NB: channels-last pays off where cuDNN's convolutions run in TF32 (torch's default for them);
  // in full fp32 its NHWC kernels are slower than NCHW ones. The caller decides.
  // NB: one convolution alone (a vision transformer's patch embedding) gains nothing: its input and
  // output are converted around it, and its TF32 rounding in NHWC moves the result away from
  // eager's NCHW one (transformers' ViT-base on an H200: 1.7e-3 against 1.0e-5).
  if (options.channels_last)
    passes.push_back({"channels_last", [&](const Graph& in) {
                        if (count_conv2d(in) < 2) {
                          out.channels_last_why = "the graph has one convolution: nothing would stay in channels-last";
                          return in;
                        }
                        auto cl = to_channels_last(in, &out.channels_last_why);
                        if (!cl) return in;
                        Graph rewritten = std::move(cl->graph);
                        out.channels_last = std::move(cl);
                        return rewritten;
                      }});
  passes.push_back({"split_conv_bias", split_conv_bias});
  out.graph = run_passes(g, passes, options.observer);
  out.device = cuda_device_of(out.graph, options.assume_cuda);
  std::vector<std::string> notes, fusion_log, mem_log;
  loop::Program p = lower(out.graph, &notes, /*cpu_only=*/false, options.observer);
  p = run_passes(p, schedule_passes(&fusion_log, &mem_log, kCudaMinHorizontalRows), options.observer);
  check_program(p, "plan_memory");
  log_schedule(p, notes, fusion_log, mem_log);
  out.program = std::move(p);
  if (options.render) render_cuda(out, options);
  return out;
}

std::string cpu_pass_trace(const Graph& g, bool channels_last) {
  std::string text;
  PassObserver observer;
  observer.graph = [&](std::string_view pass, const Graph& r) { text += "# after " + std::string(pass) + "\n" + graph_code(r); };
  observer.loop = [&](std::string_view pass, const loop::Program& p) {
    text += "# after " + std::string(pass) + "\n" + loop::program_str(p);
  };
  CpuPipelineOptions options;
  options.channels_last = channels_last;
  options.render = false;
  options.observer = &observer;
  compile_for_cpu(g, options);
  return text;
}

}  // namespace ff::inductor
