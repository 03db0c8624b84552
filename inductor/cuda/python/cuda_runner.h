// A graph compiled for CUDA: lowered and fused loop IR rendered to one CUDA module, compiled by
// NVRTC, run on torch's current stream with memory from torch's caching allocator and extern
// calls (matmul, convolution, ops without a lowering) executed by torch.
//
// Dynamic shapes: a graph with symbolic sizes compiles once; its kernels take the sizes as
// arguments (cuda_render.h). Each call's sizes (the symbols' values, read from the inputs) select
// an instance: a CudaGraphModule whose graph and program are specialised to them, sharing the
// compiled kernels (no NVRTC). A binding the kernels cannot serve (indices past 32 bits) gets an
// instance compiled for its sizes from the captured graph.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "inductor/cuda/attention.h"
#include "inductor/cuda/cuda_launch.h"
#include "inductor/cuda/cuda_render.h"
#include "graph/passes/channels_last.h"
#include "inductor/python/channels_last_inputs.h"
#include "inductor/python/input_writes.h"
#include "graph/passes/fold_conv_batch_norm.h"
#include "inductor/cuda/nhwc_pack.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/loop_ir.h"
#include "inductor/python/size_bindings.h"

namespace ff::cuda {

struct CudaCompileOptions {
  std::string mode = "default";  // "default" | "max-autotune" | "reduce-overhead" (replay in Python; folds batch norms)
  std::string arch;              // "" = the device's (sm_90 when no GPU is present)
  // Compile-only (inspection, CI without a GPU): a graph of CPU or meta tensors is compiled as if
  // its tensors were on cuda:0. Running it then rejects non-CUDA inputs.
  bool assume_cuda = false;
  // Tests only: inputs and buffers are CPU tensors and launches go to whatever libcuda.so.1 is
  // loaded (a recording stub in the tests), so the runtime's host side runs on machines without
  // a GPU. Kernels do not really run: results are meaningless.
  bool host_emulation = false;
};

class CudaGraphModule {
 public:
  ~CudaGraphModule();
  // Compiles `g` (all tensors on one CUDA device) with inductor::compile_for_cuda and prepares its
  // runs. Needs no GPU.
  // Throws ff::Unsupported when the graph cannot be compiled for CUDA.
  CudaGraphModule(const Graph& g, const CudaCompileOptions& opts);

  // Runs on `inputs` (one tensor per placeholder). Throws ff::UserError when an input does not
  // match what the graph was compiled for (device, dtype, sizes, strides).
  pybind11::object run(const std::vector<pybind11::object>& inputs);

  const std::string& source() const { return c_->src.source; }
  std::string program_text() const;
  const std::string& arch() const { return c_->arch; }
  const CompileStats& compile_stats() const { return c_->stats; }
  double compile_ms() const { return c_->compile_ms; }
  std::vector<std::string> kernels() const;  // strategy and chosen launch per kernel
  int device() const { return c_->device; }
  // "" when the graph runs its convolutions channels-last, else why not.
  const std::string& channels_last_why() const { return c_->channels_last_why; }
  // Dynamic shapes: the kernels take the sizes as arguments; instances() sets of sizes have run
  // (or were made at compile time: the traced one), compiled_instances() of them compiled their own.
  bool symbolic() const { return c_->program.symbolic; }
  size_t instances() const { return instances_.size(); }
  size_t compiled_instances() const { return compiled_instances_; }
  // Extern results copied into the layout the kernels were generated for, over all runs.
  int64_t layout_copies() const;
  // Input positions of the conv weights packed into NHWC in every call rather than kept.
  const std::vector<int>& packed_weights() const { return traced().pack_.inputs; }
  // Caller's input indices whose values are converted or folded into cached derived tensors (a
  // CUDA graph replay must see them unchanged, or record again).
  std::vector<int> derived_sources() const;
  // Whether the kernels write graph inputs in place (a CUDA graph replay would write its copies).
  bool writes_inputs() const { return !traced().writes_.empty(); }
  // Names of the scaled_dot_product_attention calls framefuse's TF32 kernel runs (attention.h)
  // while torch runs float32 matmuls in TF32.
  std::vector<std::string> tf32_attention() const;

 private:
  // What compiling made, shared by the instances of a symbolic graph.
  struct Compiled {
    CudaCompileOptions opts;
    Graph captured;         // the graph as given
    Graph graph;            // after the graph passes
    loop::Program program;  // symbolic sizes where the graph has them
    ModuleSource src;
    std::string arch, hash, channels_last_why;
    std::vector<std::string> cubins;  // per ModuleSource unit; "" for lazy units not compiled yet
    CompileStats stats;
    double compile_ms = 0;
    int device = 0;
    std::vector<FoldedInput> folded;
    std::vector<int> cl_indices;  // inputs converted channels-last
    std::vector<std::pair<NodeId, TensorMeta>> cl_restore;
    std::vector<int> to_pack;     // conv weights to pack per call where memory allows (plan_packed_weights)
    std::string pack_cubin;
    std::vector<int> attn_dims;   // head dims the TF32 attention cubin has kernels for
    std::shared_ptr<Tf32Attention> attn_kernel;
    std::shared_ptr<CudaModule> module;  // made by the first run (ensure_module)
    inductor::SymbolSources symbol_at;   // symbolic graphs: where each symbol's value is read
  };
  // One set of sizes' instance of `c` (bindings empty: a static program).
  CudaGraphModule(std::shared_ptr<Compiled> c, std::vector<int64_t> bindings);
  void init_instance();
  // The instance for the inputs' sizes (made on first use), or null where they bind no sizes.
  std::shared_ptr<CudaGraphModule> instance_for(const std::vector<pybind11::object>& inputs);
  void ensure_module();
  void prepare();
  [[noreturn]] void input_mismatch(const std::vector<pybind11::object>& inputs) const;
  pybind11::object view(const std::vector<pybind11::object>& bufs, int buf, const loop::TensorRef& ref) const;
  pybind11::object alloc(int buf);

  std::shared_ptr<Compiled> c_;
  Graph graph_;           // c_'s at this instance's sizes
  loop::Program prog_;    // c_'s at this instance's sizes
  std::vector<int64_t> bindings_;  // symbol id -> value (empty: a static program)
  std::vector<int64_t> items_;     // per kernel: its plan's items at these sizes
  bool autotune_ = false;
  bool host_emulation_ = false;
  int device_ = 0;
  CudaModule* module_ = nullptr;  // c_->module once made
  // A symbolic graph's instances (this one runs none of its own) and the one at the traced sizes,
  // which answers for them (layouts, written inputs ...).
  inductor::InstanceCache<CudaGraphModule> instances_;
  std::shared_ptr<CudaGraphModule> traced_;
  const CudaGraphModule& traced() const { return traced_ ? *traced_ : *this; }
  size_t compiled_instances_ = 0;
  // Buffers first/last used at each step.
  std::vector<std::vector<int>> alloc_at_, free_after_;  // [step] -> buffers
  std::vector<int> alloc_unstored_;  // graph outputs no step touches: no elements, so no kernel stores them
  std::vector<std::vector<NodeId>> release_after_;       // [step] -> nodes whose held value goes
  pybind11::object torch_, empty_strided_, raw_stream_, device_obj_;
  std::vector<pybind11::object> dtype_objs_;  // per buffer
  // Made once (prepare()): what a run needs as Python objects, so that a call converts nothing.
  struct Prepared;
  std::unique_ptr<Prepared> prep_;
  // Channels-last: conv weights converted on the way in (once per weight version) and outputs
  // copied back to eager's layout.
  std::vector<int> cl_indices_;                 // from the rewrite, until the buffers exist
  std::vector<pybind11::object> cl_layouts_;    // the sizes and strides lists cl_inputs_ borrows
  inductor::ChannelsLastInputs cl_inputs_;
  // Conv weights packed into NHWC per call instead (nhwc_pack.h): those whose convolution reads an
  // NHWC input, where the arena does not raise the graph's peak memory (plan_packed_weights).
  struct PackedWeights {
    std::unique_ptr<NhwcPacker> packer;  // null: none packed
    int at_step = -1;                    // packed just before this step
    std::vector<int> bufs, inputs;       // per piece: the Input buffer and the input position
    std::vector<int64_t> offset;         // per buffer: elements into the arena (-1 for the others)
    pybind11::object sizes, strides;     // the arena's layout as tuples (prepare())
  } pack_;
  // to_pack: candidate input positions; cubin: the packing kernel's, if compiled with the graph's;
  // first/last: each buffer's first and last step.
  void plan_packed_weights(const std::vector<int>& to_pack, std::string cubin, const std::vector<int>& first,
                           const std::vector<int>& last);
  bool packed(int buf) const { return !pack_.offset.empty() && pack_.offset[static_cast<size_t>(buf)] >= 0; }
  // Packs the weights into a new arena on `stream`; their buffers then hold it.
  void pack_weights(const std::vector<pybind11::object>& inputs, std::vector<pybind11::object>& bufs,
                    std::vector<void*>& ptrs, CUstream stream);
  // Batch norms folded into convolutions: the folded weights and biases, recomputed when a tensor
  // they come from changes (pointer or version).
  struct Folded {
    FoldedInput spec;
    std::vector<inductor::TensorStamp> sources;
    pybind11::object value;
  };
  std::vector<Folded> folded_;
  size_t num_inputs_ = 0;  // what callers pass (the folded inputs come after)
  inductor::InputWrites writes_;  // inputs the kernels write in place
  // seen[i]: input i's stamp once read this call (null while unread).
  pybind11::object folded_value(Folded& f, const std::vector<pybind11::object>& inputs,
                                std::vector<std::optional<inductor::TensorStamp>>& seen);
  // scaled_dot_product_attention calls framefuse's TF32 kernel takes (plan_tf32_attention): the
  // call's sizes, strides and scale, its operands' buffers and offsets; pointers are set per run.
  struct OwnAttention {
    size_t ext = 0;
    AttentionCall call;
    loop::TensorRef q, k, v, mask;  // mask.buf -1: none
  };
  std::vector<OwnAttention> attn_;
  std::vector<int> attn_at_;  // per extern: index into attn_, or -1
  Tf32Attention* attn_kernel_ = nullptr;  // c_->attn_kernel
  pybind11::object tf32_matmul_;  // torch._C._get_cublas_allow_tf32 (None: not on this torch)
  // The calls of `prog` the TF32 kernel can run (those of a symbolic program at its traced sizes).
  static std::vector<OwnAttention> plan_tf32_attention(const loop::Program& prog);
  // Runs attention a into a new result buffer; false (nothing done) where the operands' pointers
  // are not aligned as the kernel needs (the caller then calls torch).
  bool run_attention(const OwnAttention& a, std::vector<pybind11::object>& bufs, std::vector<void*>& ptrs, CUstream stream);
  std::vector<std::pair<NodeId, TensorMeta>> cl_restore_;
  std::string channels_last_why_;
  int64_t layout_copies_ = 0;
};

}  // namespace ff::cuda
