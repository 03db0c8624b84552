#include "inductor/cuda/python/cuda_runner.h"

#include "inductor/loop_passes/plan_memory.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <thread>

#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/effects.h"
#include "graph/passes/fuse_attention.h"
#include "graph/passes/specialize_shapes.h"
#include "graph/python/graph_calls.h"
#include "inductor/python/prepared_call.h"
#include "inductor/python/tensor_check.h"
#include "inductor/pipeline.h"
#include "src/base/config.h"
#include "src/base/errors.h"
#include "src/base/logging.h"

namespace py = pybind11;

namespace ff::cuda {
namespace {

// Whether torch runs float32 CUDA matmuls in TF32 now (allow_tf32, or float32 matmul precision
// "high" / "medium").
bool cuda_matmul_tf32() {
  try {
    py::module torch = py::module::import("torch");
    if (py::hasattr(torch.attr("_C"), "_get_cublas_allow_tf32")) return torch.attr("_C").attr("_get_cublas_allow_tf32")().cast<bool>();
    return torch.attr("backends").attr("cuda").attr("matmul").attr("allow_tf32").cast<bool>();
  } catch (const py::error_already_set&) {
    return false;
  }
}

bool cudnn_tf32_allowed() {
  try {
    return py::module::import("torch").attr("backends").attr("cudnn").attr("allow_tf32").cast<bool>();
  } catch (const py::error_already_set&) {
    return false;
  }
}

std::string layout_str(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  auto join = [](const std::vector<int64_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return "[" + s + "]";
  };
  return join(sizes) + " strides " + join(strides);
}

}  // namespace

CudaGraphModule::CudaGraphModule(const Graph& g, const CudaCompileOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  auto c = std::make_shared<Compiled>();
  c->opts = opts;
  c->captured = g;
  inductor::CudaPipelineOptions po;
  po.assume_cuda = opts.assume_cuda;
  po.fuse_attention = config().fuse_attention;
  po.cuda_tf32_matmul = po.fuse_attention && cuda_matmul_tf32();
  if (config().cuda_fold_batch_norm && opts.mode == "reduce-overhead") {
    auto relu = op_by_name("cudnn_convolution_relu");
    auto add_relu = op_by_name("cudnn_convolution_add_relu");
    po.fold_batch_norm = true;
    po.fused_conv_epilogues = relu && add_relu && op_callable(*relu) && op_callable(*add_relu);
  }
  po.channels_last = config().cuda_channels_last && cudnn_tf32_allowed();
  if (!po.channels_last)
    c->channels_last_why = config().cuda_channels_last ? "cuDNN convolutions run in full fp32 (torch.backends.cudnn.allow_tf32 is off)"
                                                       : "config cuda_channels_last is off";
  po.all_variants = opts.mode == "max-autotune";
  po.arch = opts.arch;
  po.compile_threads = config().cuda_compile_threads;
  if (po.compile_threads <= 0) po.compile_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The hand-written kernels this runtime launches, compiled with the graph's own.
  po.extra_sources = [&](const inductor::CudaCompiled& cc) {
    if (cc.channels_last) {
      // NB: reduce-overhead keeps static buffers and a graph pool anyway (and the folded weights):
      // there copies made once save the packing kernel in every replay.
      if (!config().cuda_keep_nhwc_weights && opts.mode != "reduce-overhead")
        for (int i : cc.channels_last->inputs)
          if (std::find(cc.channels_last->nchw_fed.begin(), cc.channels_last->nchw_fed.end(), i) == cc.channels_last->nchw_fed.end())
            c->to_pack.push_back(i);
    }
    // NB: a symbolic program's calls at its traced sizes: each instance plans its own, and runs
    // those of these head dims.
    std::vector<OwnAttention> calls =
        plan_tf32_attention(cc.program.symbolic ? loop::specialize_program(cc.program, inductor::traced_bindings(cc.graph, symbol_bindings(cc.graph)))
                                                : cc.program);
    for (const OwnAttention& a : calls)
      if (std::find(c->attn_dims.begin(), c->attn_dims.end(), a.call.head_dim) == c->attn_dims.end()) c->attn_dims.push_back(a.call.head_dim);
    if (!calls.empty() && log_enabled(LogArtifact::perf_hints))
      log_emit(LogArtifact::perf_hints, "CUDA: " + std::to_string(calls.size()) +
                                            " float32 attention call(s) run by framefuse's TF32 kernel in calls made while torch "
                                            "runs float32 matmuls in TF32 (otherwise by torch's SDPA)");
    std::vector<std::string> sources;
    if (!c->to_pack.empty()) sources.push_back(nhwc_pack_source());
    if (!c->attn_dims.empty()) sources.push_back(tf32_attention_source(c->attn_dims));
    return sources;
  };
  inductor::CudaCompiled cc = inductor::compile_for_cuda(g, po);
  if (cc.folded_batch_norms > 0) {
    c->folded = cc.folded;
    if (log_enabled(LogArtifact::perf_hints))
      log_emit(LogArtifact::perf_hints, "CUDA: " + std::to_string(cc.folded_batch_norms) + " eval-mode batch norm(s) folded into their convolutions" +
                                            (po.fused_conv_epilogues ? " (relu and residual epilogues in cuDNN)" : ""));
  }
  if (cc.channels_last) {
    c->cl_indices = cc.channels_last->inputs;
    c->cl_restore = std::move(cc.channels_last->restore);
  } else if (po.channels_last) {
    c->channels_last_why = cc.channels_last_why;
  }
  c->graph = std::move(cc.graph);
  c->program = std::move(cc.program);
  c->device = cc.device;
  c->src = std::move(cc.source);
  c->cubins = std::move(cc.cubins);
  c->arch = std::move(cc.arch);
  c->stats = cc.stats;
  // The extra cubins, in the order extra_sources gave them ("" where NVRTC is missing).
  size_t next = 0;
  auto take = [&](std::string* into) {
    if (next < cc.extra_cubins.size()) *into = std::move(cc.extra_cubins[next]);
    ++next;
  };
  if (!c->to_pack.empty()) take(&c->pack_cubin);
  if (!c->attn_dims.empty()) {
    std::string attn_cubin;
    take(&attn_cubin);
    // NB: no NVRTC: torch runs the calls (the graph has no kernels either).
    if (attn_cubin.empty()) c->attn_dims.clear();
    else c->attn_kernel = std::make_shared<Tf32Attention>(std::move(attn_cubin));
  }
  c->hash = content_hash(c->src.source);
  c->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  c_ = std::move(c);
  if (!c_->program.symbolic) {
    init_instance();
    return;
  }
  // NB: the instance at the traced sizes, made now: what the runtime cannot run fails the
  // compile (the graph is then compiled per set of sizes), not a call.
  c_->symbol_at = symbol_bindings(c_->graph);
  std::vector<int64_t> traced = inductor::traced_bindings(c_->graph, c_->symbol_at);
  traced_ = std::shared_ptr<CudaGraphModule>(new CudaGraphModule(c_, traced));
  instances_.add(std::move(traced), traced_);
}

CudaGraphModule::CudaGraphModule(std::shared_ptr<Compiled> c, std::vector<int64_t> bindings)
    : c_(std::move(c)), bindings_(std::move(bindings)) {
  init_instance();
}

std::shared_ptr<CudaGraphModule> CudaGraphModule::instance_for(const std::vector<py::object>& inputs) {
  const size_t n = c_->symbol_at.size();
  inductor::RunArray<int64_t, 16> read(n);
  if (!inductor::read_bindings(c_->symbol_at, reinterpret_cast<PyObject* const*>(inputs.data()), inputs.size(), read.data))
    return nullptr;
  if (auto found = instances_.find(read.data, n)) return found;
  std::vector<int64_t> values(read.data, read.data + n);
  std::shared_ptr<CudaGraphModule> inst;
  try {
    inst = std::shared_ptr<CudaGraphModule>(new CudaGraphModule(c_, values));
    if (log_enabled(LogArtifact::dynamic))
      log_emit(LogArtifact::dynamic, "CUDA: the symbolic program runs at " + inductor::bindings_str(values) +
                                         " (its kernels take the sizes as arguments)");
  } catch (const Unsupported& e) {
    // NB: compiled for these sizes from the graph as captured (its own kernels).
    if (log_enabled(LogArtifact::perf_hints))
      log_emit(LogArtifact::perf_hints, std::string("CUDA: the symbolic program's kernels cannot run at ") + inductor::bindings_str(values) +
                                            " (" + e.what() + "); compiling the graph for these sizes");
    inst = std::make_shared<CudaGraphModule>(specialize_shapes(c_->captured, values), c_->opts);
    ++compiled_instances_;
  }
  instances_.add(std::move(values), inst);
  return inst;
}

void CudaGraphModule::init_instance() {
  const Compiled& c = *c_;
  autotune_ = c.opts.mode == "max-autotune";
  host_emulation_ = c.opts.host_emulation;
  device_ = c.device;
  if (c.program.symbolic) {
    graph_ = specialize_shapes(c.graph, bindings_);
    prog_ = loop::specialize_program(c.program, bindings_);
    for (auto& [node, meta] : c.cl_restore) cl_restore_.push_back({node, specialize_tensor_meta(meta, bindings_)});
    // NB: the kernels were rendered by the traced sizes: 32-bit indices must still reach.
    for (size_t k = 0; k < prog_.kernels.size(); ++k) {
      if (!c.src.kernels[k].wide_index && needs_wide_index(prog_, prog_.kernels[k]))
        throw Unsupported("kernel " + prog_.kernels[k].name + " needs 64-bit indices at these sizes");
      items_.push_back(sym_specialize(c.src.kernels[k].items, bindings_).hint());
    }
  } else {
    graph_ = c.graph;
    prog_ = c.program;
    cl_restore_ = c.cl_restore;
    for (const KernelPlan& k : c.src.kernels) items_.push_back(k.items.hint());
  }
  for (const FoldedInput& spec : c.folded) folded_.push_back(Folded{spec, {}, py::none()});
  writes_.prepare(prog_);
  num_inputs_ = graph_.placeholders().size() - folded_.size();
  if (c.attn_kernel) {
    attn_kernel_ = c.attn_kernel.get();
    for (OwnAttention& a : plan_tf32_attention(prog_))
      if (std::find(c.attn_dims.begin(), c.attn_dims.end(), a.call.head_dim) != c.attn_dims.end()) attn_.push_back(std::move(a));
  }
  attn_at_.assign(prog_.externs.size(), -1);
  for (size_t i = 0; i < attn_.size(); ++i) attn_at_[attn_[i].ext] = static_cast<int>(i);
  cl_indices_ = c.cl_indices;

  // Buffers are allocated before the first step that uses them and freed after the last one
  // (inductor/loop_passes/plan_memory.h).
  size_t nsteps = prog_.steps.size();
  const inductor::BufferLifetimes life = inductor::buffer_lifetimes(prog_);
  // Values the runtime holds per node (tuples of split, getitem sources, non-buffer results) are
  // let go after the last extern step that reads them: a split's tuple kept to the end of the graph
  // keeps the whole product it views alive (nanoGPT's qkv, one per layer).
  std::vector<int> last_read(graph_.size(), -1);
  for (size_t s = 0; s < nsteps; ++s) {
    const loop::Step& st = prog_.steps[s];
    if (st.kind != loop::Step::Kind::Extern) continue;
    const loop::ExternCall& e = prog_.externs[static_cast<size_t>(st.index)];
    auto mark = [&](NodeId u) { last_read[static_cast<size_t>(u)] = static_cast<int>(s); };
    if (e.op == kNoOp) {
      const Node& nd = graph_.node(e.node);
      if (!nd.args.empty() && nd.args[0].is_node()) mark(nd.args[0].node);
    } else {
      for (const Value& v : e.args) v.for_each_node(mark);
    }
    last_read[static_cast<size_t>(e.node)] = std::max(last_read[static_cast<size_t>(e.node)], static_cast<int>(s));
  }
  graph_.output_value().for_each_node([&](NodeId u) { last_read[static_cast<size_t>(u)] = -1; });
  release_after_.assign(nsteps, {});
  for (NodeId id = 0; id < static_cast<NodeId>(graph_.size()); ++id)
    if (last_read[static_cast<size_t>(id)] >= 0 && graph_.node(id).kind != NodeKind::Placeholder)
      release_after_[static_cast<size_t>(last_read[static_cast<size_t>(id)])].push_back(id);

  inductor::StepAllocations plan = inductor::step_allocations(prog_, life);
  alloc_at_ = std::move(plan.alloc_at);
  free_after_ = std::move(plan.free_after);
  alloc_unstored_ = std::move(plan.unstored_outputs);
  plan_packed_weights(c.to_pack, c.pack_cubin, life.first, life.last);
  for (int i : cl_indices_) {
    if (std::find(pack_.inputs.begin(), pack_.inputs.end(), i) != pack_.inputs.end()) continue;
    // NB: exactly the strides the graph was compiled for (see ChannelsLastInputs).
    for (const loop::Buffer& b : prog_.buffers) {
      if (b.role != loop::BufferRole::Input || b.input != i) continue;
      cl_layouts_.push_back(py::cast(b.sizes.ints()));
      cl_layouts_.push_back(py::cast(b.strides.ints()));
      cl_inputs_.add(static_cast<size_t>(i), cl_layouts_[cl_layouts_.size() - 2].ptr(), cl_layouts_.back().ptr());
    }
  }
}

void CudaGraphModule::plan_packed_weights(const std::vector<int>& to_pack, std::string cubin, const std::vector<int>& first,
                                          const std::vector<int>& last) {
  // The candidates: conv weights whose conv reads an NHWC input, of one dtype (the first's: the
  // arena is a tensor of it), non-empty. The arena lives from the first step that reads one to the
  // last.
  std::vector<NhwcPiece> pieces;
  std::vector<int> bufs, inputs;
  std::optional<DType> dtype;
  int from = -1, to = -1;
  for (int i : to_pack) {
    for (size_t b = 0; b < prog_.buffers.size(); ++b) {
      const loop::Buffer& buf = prog_.buffers[b];
      if (buf.role != loop::BufferRole::Input || buf.input != i || first[b] < 0 || buf.sizes.size() != 4) continue;
      if (!dtype) dtype = buf.dtype;
      int64_t numel = buf.sizes[0] * buf.sizes[1] * buf.sizes[2] * buf.sizes[3];
      if (buf.dtype != *dtype || numel == 0 || numel >= (int64_t{1} << 32)) continue;
      pieces.push_back(NhwcPiece{buf.sizes[0], buf.sizes[1], buf.sizes[2] * buf.sizes[3], 0});
      bufs.push_back(static_cast<int>(b));
      inputs.push_back(i);
      from = from < 0 ? first[b] : std::min(from, first[b]);
      to = std::max(to, last[b]);
    }
  }
  if (pieces.empty()) return;
  int elem = dtype_size(*dtype);
  int64_t arena_bytes = NhwcPacker::layout(pieces, elem) * elem;
  // Memory: the arena must not raise the graph's peak. Bytes live per step from the buffers the
  // runner allocates and releases (extern results and intermediates; cuDNN's workspaces are not
  // seen, and are the same either way).
  size_t nsteps = prog_.steps.size();
  std::vector<int64_t> made(nsteps, 0), live(nsteps, 0);
  for (size_t b = 0; b < prog_.buffers.size(); ++b)
    if (first[b] >= 0 && prog_.buffers[b].role != loop::BufferRole::Input)
      made[static_cast<size_t>(first[b])] += loop::buffer_bytes(prog_.buffers[b]);
  int64_t now = 0;
  for (size_t s = 0; s < nsteps; ++s) {
    now += made[s];
    live[s] = now;
    for (int b : free_after_[s]) now -= loop::buffer_bytes(prog_.buffers[static_cast<size_t>(b)]);
  }
  int64_t peak = *std::max_element(live.begin(), live.end());
  int64_t during = *std::max_element(live.begin() + from, live.begin() + to + 1);
  if (during + arena_bytes > peak) {
    if (log_enabled(LogArtifact::perf_hints))
      log_emit(LogArtifact::perf_hints, "CUDA: " + std::to_string(pieces.size()) +
                                            " NHWC conv weight copies kept between calls: packing them per call would raise the graph's peak memory");
    return;
  }
  if (cubin.empty()) return;  // no NVRTC (compile_for_cuda compiles it wherever NVRTC is): weights stay converted
  pack_.at_step = from;
  pack_.bufs = bufs;
  pack_.inputs = inputs;
  pack_.offset.assign(prog_.buffers.size(), -1);
  pack_.packer = std::make_unique<NhwcPacker>(pieces, elem, std::move(cubin));
  for (size_t k = 0; k < bufs.size(); ++k) {
    pack_.offset[static_cast<size_t>(bufs[k])] = pack_.packer->pieces()[k].dst;
    free_after_[static_cast<size_t>(last[static_cast<size_t>(bufs[k])])].push_back(bufs[k]);
  }
}

std::string CudaGraphModule::program_text() const { return loop::program_str(c_->program); }

std::vector<std::string> CudaGraphModule::kernels() const {
  std::vector<std::string> out;
  std::vector<std::string> chosen = c_->module ? c_->module->describe() : std::vector<std::string>{};
  for (size_t i = 0; i < c_->src.kernels.size(); ++i) {
    const KernelPlan& k = c_->src.kernels[i];
    std::string s = k.name + ": " + strategy_name(k.strategy) + " over " + k.items.str() + " " +
                    (k.strategy == Strategy::Pointwise ? "elements" : "rows") + ", " + std::to_string(k.variants.size()) +
                    " variant(s)";
    if (i < chosen.size() && !chosen[i].empty()) s += "; launched " + chosen[i];
    out.push_back(s);
  }
  return out;
}

void CudaGraphModule::ensure_module() {
  const std::vector<KernelPlan>& plans = c_->src.kernels;
  if (module_ || (torch_ && plans.empty())) return;
  if (!plans.empty() || attn_kernel_) {
    std::string why;
    if (!driver_api(&why)) throw UserError(why);
    const DeviceInfo& dev = device_info(device_);
    if (dev.arch() != c_->arch)
      throw UserError("this graph was compiled for " + c_->arch + " but runs on " + dev.arch() + "; compile it again");
  }
  // NB: a graph of extern calls alone has no module but still allocates its outputs through torch.
  dtype_objs_.clear();
  torch_ = py::module_::import("torch");
  empty_strided_ = torch_.attr("empty_strided");
  py::object c = torch_.attr("_C");
  if (py::hasattr(c, "_cuda_getCurrentRawStream")) raw_stream_ = c.attr("_cuda_getCurrentRawStream");
  tf32_matmul_ = py::none();
  if (py::hasattr(c, "_get_cublas_allow_tf32")) tf32_matmul_ = c.attr("_get_cublas_allow_tf32");
  device_obj_ = host_emulation_ ? torch_.attr("device")("cpu") : torch_.attr("device")("cuda", device_);
  for (const loop::Buffer& b : prog_.buffers) dtype_objs_.push_back(torch_.attr(std::string(dtype_name(b.dtype)).c_str()));
  // NB: one module (cubins loaded once per device) for every instance of a symbolic graph.
  if (!plans.empty()) {
    if (!c_->module) c_->module = std::make_shared<CudaModule>(c_->cubins, c_->src.units, c_->arch, plans, c_->hash, autotune_);
    module_ = c_->module.get();
  }
  prepare();
}

// What a run needs as Python objects, made once: the layouts as tuples, the input check, each
// extern call with its arguments converted (PreparedCall) and the check of its result's layout.
struct CudaGraphModule::Prepared {
  explicit Prepared(PyObject* device) : input_check(device) {}
  std::vector<py::object> layouts;  // buffer b: sizes at 2b, strides at 2b + 1 (tuples)
  std::vector<int> input_bufs;      // the Input buffers, in input_check's order
  std::vector<py::object> packed_layouts;  // packed weights as the caller passes them (NCHW), sizes and strides
  std::vector<int> input_of_node;   // node id -> input position (placeholders), else -1
  inductor::LayoutCheck input_check;
  std::vector<std::unique_ptr<inductor::PreparedCall>> calls;     // per extern; null: a GetItem or unavailable
  std::vector<std::unique_ptr<inductor::LayoutCheck>> results;    // per extern with a tensor result
  py::object alloc_kwnames;  // ("dtype", "device")
};

CudaGraphModule::~CudaGraphModule() = default;

void CudaGraphModule::prepare() {
  auto p = std::make_unique<Prepared>(device_obj_.ptr());
  size_t nb = prog_.buffers.size();
  p->layouts.reserve(2 * nb);  // NB: the checks borrow these: no reallocation after add()
  for (const loop::Buffer& b : prog_.buffers) {
    p->layouts.push_back(py::tuple(py::cast(b.sizes.ints())));
    p->layouts.push_back(py::tuple(py::cast(b.strides.ints())));
  }
  p->packed_layouts.reserve(2 * pack_.bufs.size());  // NB: borrowed by the check as well
  for (size_t b = 0; b < nb; ++b) {
    if (prog_.buffers[b].role != loop::BufferRole::Input) continue;
    p->input_bufs.push_back(static_cast<int>(b));
    if (packed(static_cast<int>(b))) {
      p->packed_layouts.push_back(p->layouts[2 * b]);
      p->packed_layouts.push_back(py::tuple(py::cast(TensorMeta::contiguous_strides(prog_.buffers[b].sizes).ints())));
      p->input_check.add(dtype_objs_[b].ptr(), p->packed_layouts[p->packed_layouts.size() - 2].ptr(), p->packed_layouts.back().ptr());
    } else {
      p->input_check.add(dtype_objs_[b].ptr(), p->layouts[2 * b].ptr(), p->layouts[2 * b + 1].ptr());
    }
  }
  if (pack_.packer) {
    pack_.sizes = py::make_tuple(pack_.packer->arena_elems());
    pack_.strides = py::make_tuple(1);
  }
  for (const loop::ExternCall& e : prog_.externs) {
    std::unique_ptr<inductor::PreparedCall> call;
    if (e.op != kNoOp)
      if (PyObject* fn = op_callable(e.op)) call = std::make_unique<inductor::PreparedCall>(fn, op_def(e.op), e.args);
    p->calls.push_back(std::move(call));
    std::unique_ptr<inductor::LayoutCheck> check;
    if (e.result >= 0) {
      size_t r = static_cast<size_t>(e.result);
      check = std::make_unique<inductor::LayoutCheck>(device_obj_.ptr());
      check->add(dtype_objs_[r].ptr(), p->layouts[2 * r].ptr(), p->layouts[2 * r + 1].ptr());
    }
    p->results.push_back(std::move(check));
  }
  p->input_of_node.assign(graph_.size(), -1);
  std::vector<NodeId> placeholders = graph_.placeholders();
  for (size_t i = 0; i < placeholders.size(); ++i) p->input_of_node[static_cast<size_t>(placeholders[i])] = static_cast<int>(i);
  p->alloc_kwnames = py::make_tuple("dtype", "device");
  prep_ = std::move(p);
}

py::object CudaGraphModule::alloc(int b) {
  size_t i = static_cast<size_t>(b);
  PyObject* args[4] = {prep_->layouts[2 * i].ptr(), prep_->layouts[2 * i + 1].ptr(), dtype_objs_[i].ptr(), device_obj_.ptr()};
  PyObject* t = PyObject_Vectorcall(empty_strided_.ptr(), args, 2, prep_->alloc_kwnames.ptr());
  if (!t) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(t);
}

namespace {

void* data_pointer(const py::object& t) {
  void* p = inductor::tensor_data_ptr(t.ptr());
  if (!p && PyErr_Occurred()) throw py::error_already_set();
  return p;
}

}  // namespace

py::object CudaGraphModule::view(const std::vector<py::object>& bufs, int b, const loop::TensorRef& ref) const {
  const loop::Buffer& buf = prog_.buffers[static_cast<size_t>(b)];
  const py::object& t = bufs[static_cast<size_t>(b)];
  FF_CHECK(t && !t.is_none(), "buffer " + buf.name + " used before it was produced");
  // NB: a packed weight's buffer holds the whole arena: its piece starts `offset` elements in.
  int64_t arena = packed(b) ? pack_.offset[static_cast<size_t>(b)] : -1;
  if (arena < 0 && ref.offset == 0 && ref.sizes == buf.sizes && ref.strides == buf.strides) return t;
  int64_t base = t.attr("storage_offset")().cast<int64_t>() + std::max<int64_t>(arena, 0);
  return t.attr("as_strided")(py::cast(ref.sizes.ints()), py::cast(ref.strides.ints()), base + static_cast<int64_t>(ref.offset));
}

py::object CudaGraphModule::folded_value(Folded& f, const std::vector<py::object>& inputs,
                                         std::vector<std::optional<inductor::TensorStamp>>& seen) {
  const FoldedInput& s = f.spec;
  std::vector<inductor::TensorStamp> sources;
  bool reusable = !f.value.is_none();
  for (int i : {s.conv_weight, s.conv_bias, s.mean, s.var, s.weight, s.bias}) {
    if (i < 0) continue;
    auto& stamp = seen.at(static_cast<size_t>(i));
    if (!stamp) {
      stamp.emplace();
      if (!inductor::tensor_stamp(inputs.at(static_cast<size_t>(i)).ptr(), &*stamp)) throw py::error_already_set();
    }
    reusable &= stamp->reusable();
    sources.push_back(*stamp);
  }
  if (reusable && sources == f.sources) return f.value;
  auto in = [&](int i) { return inputs.at(static_cast<size_t>(i)).attr("detach")(); };
  py::object scale = torch_.attr("rsqrt")(in(s.var) + py::float_(s.eps));
  if (s.weight >= 0) scale = scale * in(s.weight);
  py::object value;
  if (s.is_weight) {
    value = in(s.conv_weight) * scale.attr("reshape")(-1, 1, 1, 1);
  } else {
    value = (s.conv_bias >= 0 ? in(s.conv_bias) - in(s.mean) : -in(s.mean)) * scale;
    if (s.bias >= 0) value = value + in(s.bias);
  }
  // NB: releasing the old tensor may let another thread run: it must then find no value, never the
  // new value next to the old sources. The sources change while the value is None.
  f.value = py::none();
  f.sources = std::move(sources);
  f.value = value;
  return value;
}

int64_t CudaGraphModule::layout_copies() const {
  int64_t n = layout_copies_;
  instances_.for_each([&](const CudaGraphModule& inst) { n += inst.layout_copies_; });
  return n;
}

std::vector<int> CudaGraphModule::derived_sources() const {
  if (traced_) return traced_->derived_sources();
  std::vector<int> out;
  auto add = [&](int i) {
    if (i >= 0 && static_cast<size_t>(i) < num_inputs_ && std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
  };
  for (size_t k = 0; k < cl_inputs_.size(); ++k) add(static_cast<int>(cl_inputs_.index(k)));
  for (const Folded& f : folded_)
    for (int i : {f.spec.conv_weight, f.spec.conv_bias, f.spec.mean, f.spec.var, f.spec.weight, f.spec.bias}) add(i);
  return out;
}

py::object CudaGraphModule::run(const std::vector<py::object>& given) {
  if (traced_) {
    // NB: held for the run: a later call may evict it from instances_.
    std::shared_ptr<CudaGraphModule> inst = instance_for(given);
    if (!inst)
      throw UserError("the inputs' sizes do not fit the graph's dynamic dimensions (a size below 2 or a missing dimension)");
    return inst->run(given);
  }
  ensure_module();
  std::vector<py::object> inputs = given;
  if (!folded_.empty()) {
    if (inputs.size() != num_inputs_)
      throw py::type_error("compiled graph expects " + std::to_string(num_inputs_) + " inputs, got " +
                           std::to_string(inputs.size()));
    // NB: every BN reads several inputs and an input may feed several folds: each is read once.
    std::vector<std::optional<inductor::TensorStamp>> seen(num_inputs_);
    for (Folded& f : folded_) inputs.push_back(folded_value(f, inputs, seen));
  }
  if (!cl_inputs_.empty() && inputs.size() == num_inputs_ + folded_.size()) {  // the count is checked below
    std::vector<PyObject*> args(inputs.size()), owned(cl_inputs_.size(), nullptr);
    for (size_t i = 0; i < inputs.size(); ++i) args[i] = inputs[i].ptr();
    bool ok = cl_inputs_.convert(args.data(), owned.data());
    for (size_t k = 0; k < owned.size(); ++k)
      if (owned[k]) inputs[cl_inputs_.index(k)] = py::reinterpret_steal<py::object>(owned[k]);
    if (!ok) throw py::error_already_set();
  }
  size_t nbuf = prog_.buffers.size();
  std::vector<NodeId> placeholders = graph_.placeholders();
  if (inputs.size() != placeholders.size())
    throw UserError("the compiled graph takes " + std::to_string(placeholders.size()) + " inputs, got " +
                    std::to_string(inputs.size()));
  {
    std::vector<PyObject*> tensors;
    tensors.reserve(prep_->input_bufs.size());
    for (int b : prep_->input_bufs) tensors.push_back(inputs.at(static_cast<size_t>(prog_.buffers[static_cast<size_t>(b)].input)).ptr());
    int ok = prep_->input_check.check(tensors.data());
    if (ok < 0) throw py::error_already_set();
    if (!ok) input_mismatch(inputs);
  }
  // NB: on the caller's tensors: a weight converted or folded above is a copy taken before the
  // kernels write, so an alias of a written input must be seen on the original.
  std::vector<void*> given_ptrs;  // read once for these checks and the kernels
  if (!writes_.empty()) {
    PyObject* const* args = reinterpret_cast<PyObject* const*>(given.data());
    given_ptrs.resize(given.size());
    if (!writes_.pointers(args, given.size(), given_ptrs.data())) throw py::error_already_set();
    int ok = writes_.writable(args, given.size(), given_ptrs.data());
    if (ok < 0) throw py::error_already_set();
    if (!ok) throw UserError("an input the graph writes in place shares memory with another input or is an inference tensor");
    if (!writes_.bump(args)) throw py::error_already_set();
  }
  // Per run, so that two threads may run the same graph: each buffer's tensor and pointer, and the
  // Python value of each node an extern call reads or returns.
  std::vector<py::object> bufs(nbuf, py::none());
  std::vector<void*> ptrs(nbuf, nullptr);
  std::vector<py::object> node_objs(graph_.size(), py::none());
  static_assert(sizeof(py::object) == sizeof(PyObject*), "node_objs is passed to PreparedCall as PyObject* const*");
  for (size_t i = 0; i < inputs.size(); ++i) node_objs[static_cast<size_t>(placeholders[i])] = inputs[i];
  for (int b : prep_->input_bufs) {
    size_t pos = static_cast<size_t>(prog_.buffers[static_cast<size_t>(b)].input);
    bufs[static_cast<size_t>(b)] = inputs[pos];
    bool given_ptr = pos < given_ptrs.size() && inputs[pos].ptr() == given[pos].ptr();
    ptrs[static_cast<size_t>(b)] = given_ptr ? given_ptrs[pos] : data_pointer(inputs[pos]);
  }
  CUstream stream = nullptr;
  if (raw_stream_ && (module_ || attn_kernel_) && !host_emulation_)
    stream = reinterpret_cast<CUstream>(raw_stream_(device_).cast<uintptr_t>());
  // NB: the TF32 kernel only while torch's products would round to TF32 too; else torch's SDPA.
  bool tf32 = attn_kernel_ && !tf32_matmul_.is_none() && tf32_matmul_().cast<bool>();
  for (size_t s = 0; s < prog_.steps.size(); ++s) {
    if (static_cast<int>(s) == pack_.at_step) pack_weights(inputs, bufs, ptrs, stream);
    for (int b : alloc_at_[s]) {
      bufs[static_cast<size_t>(b)] = alloc(b);
      ptrs[static_cast<size_t>(b)] = data_pointer(bufs[static_cast<size_t>(b)]);
    }
    const loop::Step& st = prog_.steps[s];
    if (st.kind == loop::Step::Kind::Kernel) {
      size_t k = static_cast<size_t>(st.index);
      module_->launch(k, ptrs, stream, device_, items_[k], bindings_.empty() ? nullptr : bindings_.data());
    } else if (tf32 && attn_at_[static_cast<size_t>(st.index)] >= 0 &&
               run_attention(attn_[static_cast<size_t>(attn_at_[static_cast<size_t>(st.index)])], bufs, ptrs, stream)) {
      // launched by framefuse's TF32 attention kernel instead of torch's SDPA
    } else {
      size_t x = static_cast<size_t>(st.index);
      const loop::ExternCall& e = prog_.externs[x];
      for (auto& [nid, ref] : e.operands) node_objs[static_cast<size_t>(nid)] = view(bufs, ref.buf, ref);
      py::object result;
      if (e.op == kNoOp) {
        // A GetItem's extern call carries no args of its own (lower.cpp): the node holds them.
        const Node& nd = graph_.node(e.node);
        FF_CHECK(nd.args.size() >= 2, "getitem node " + nd.name + " without its operands");
        py::object seq = node_objs.at(static_cast<size_t>(nd.args[0].node));
        FF_CHECK(seq && !seq.is_none(), "getitem of a value the runtime does not hold");
        result = seq[py::int_(nd.args[1].i)];
      } else {
        FF_CHECK(prep_->calls[x], "extern op " + op_def(e.op).name + " is not available");
        PyObject* r = prep_->calls[x]->call(reinterpret_cast<PyObject* const*>(node_objs.data()));
        if (!r) throw py::error_already_set();
        result = py::reinterpret_steal<py::object>(r);
      }
      // NB: what this call held is let go right after it: operand views and a tensor result kept in
      // node_objs would keep every buffer alive to the end of the graph (free_after_ releases only
      // bufs), which tripled resnet18's and nanoGPT's peak memory. Later calls take their operands
      // from bufs again; placeholders get their input back.
      for (auto& [nid, ref] : e.operands) {
        int pos = prep_->input_of_node[static_cast<size_t>(nid)];
        node_objs[static_cast<size_t>(nid)] = pos >= 0 ? inputs[static_cast<size_t>(pos)] : py::none();
      }
      node_objs[static_cast<size_t>(e.node)] = e.result >= 0 ? py::none() : result;
      if (e.result >= 0) {
        PyObject* rp = result.ptr();
        int ok = prep_->results[x]->check(&rp);
        if (ok < 0) throw py::error_already_set();
        if (!ok) {
          // Kernels were generated for the predicted layout: copy the result into it. NB: sizes
          // that differ are no layout question (a copy would broadcast): the graph was typed wrong.
          const loop::Buffer& buf = prog_.buffers[static_cast<size_t>(e.result)];
          if (!py::tuple(result.attr("shape")).equal(prep_->layouts[2 * static_cast<size_t>(e.result)]))
            throw InternalError(op_def(e.op).name + " returned a result of sizes " + py::repr(result.attr("shape")).cast<std::string>() +
                                " where the compiled graph expects " + layout_str(buf.sizes, buf.strides));
          ++layout_copies_;
          if (log_enabled(LogArtifact::perf_hints) && log_enabled(LogComponent::inductor, LogLevel::Debug)) {
            TensorMeta m = meta_from_tensor(result.ptr());
            log_emit(LogArtifact::perf_hints, "CUDA: " + op_def(e.op).name + " returned " + layout_str(m.sizes, m.strides) +
                                                  ", copied into the predicted " + layout_str(buf.sizes, buf.strides));
          }
          py::object t = alloc(e.result);
          t.attr("copy_")(result);
          result = t;
        }
        bufs[static_cast<size_t>(e.result)] = result;
        ptrs[static_cast<size_t>(e.result)] = data_pointer(result);
      }
    }
    for (int b : free_after_[s]) {
      bufs[static_cast<size_t>(b)] = py::none();
      ptrs[static_cast<size_t>(b)] = nullptr;
    }
    for (NodeId id : release_after_[s]) node_objs[static_cast<size_t>(id)] = py::none();
  }
  for (int b : alloc_unstored_) bufs[static_cast<size_t>(b)] = alloc(b);
  for (auto& [nid, ref] : prog_.outputs) {
    py::object v = view(bufs, ref.buf, ref);
    // NB: a view is a new object in eager, even one of its base's own shape (x.view(x.shape),
    // x[0:2] of a 2-row x): not the base itself (an in-place call's result is its operand itself).
    const loop::Buffer& ob = prog_.buffers[static_cast<size_t>(ref.buf)];
    if (ob.node != nid && returns_new_view(graph_.node(nid)) && v.is(bufs[static_cast<size_t>(ref.buf)]))
      v = v.attr("as_strided")(v.attr("size")(), v.attr("stride")(), v.attr("storage_offset")());
    node_objs[static_cast<size_t>(nid)] = v;
  }
  for (auto& [nid, meta] : cl_restore_) {
    py::object t = node_objs[static_cast<size_t>(nid)];
    if (!t || t.is_none()) continue;
    py::dict kw;
    kw["dtype"] = t.attr("dtype");
    kw["device"] = t.attr("device");
    py::object r = empty_strided_(py::cast(meta.sizes.ints()), py::cast(meta.strides.ints()), **kw);
    r.attr("copy_")(t);
    node_objs[static_cast<size_t>(nid)] = r;
  }
  PyObject* out = value_to_py(graph_.output_value(), reinterpret_cast<PyObject* const*>(node_objs.data()));
  if (!out) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(out);
}

void CudaGraphModule::pack_weights(const std::vector<py::object>& inputs, std::vector<py::object>& bufs,
                                   std::vector<void*>& ptrs, CUstream stream) {
  size_t first = static_cast<size_t>(pack_.bufs[0]);
  PyObject* args[4] = {pack_.sizes.ptr(), pack_.strides.ptr(), dtype_objs_[first].ptr(), device_obj_.ptr()};
  PyObject* t = PyObject_Vectorcall(empty_strided_.ptr(), args, 2, prep_->alloc_kwnames.ptr());
  if (!t) throw py::error_already_set();
  py::object arena = py::reinterpret_steal<py::object>(t);
  char* base = static_cast<char*>(data_pointer(arena));
  std::vector<const void*> srcs;
  srcs.reserve(pack_.inputs.size());
  for (int i : pack_.inputs) srcs.push_back(data_pointer(inputs.at(static_cast<size_t>(i))));
  pack_.packer->launch(srcs, base, stream, device_);
  int64_t elem = dtype_size(prog_.buffers[first].dtype);
  for (int b : pack_.bufs) {
    bufs[static_cast<size_t>(b)] = arena;
    ptrs[static_cast<size_t>(b)] = base + pack_.offset[static_cast<size_t>(b)] * elem;
  }
}

namespace {

// The operand of `e` that is node `v` (null: not a tensor operand).
const loop::TensorRef* operand(const loop::ExternCall& e, const Value& v) {
  if (!v.is_node()) return nullptr;
  for (auto& [nid, ref] : e.operands)
    if (nid == v.node) return &ref;
  return nullptr;
}

}  // namespace

std::vector<CudaGraphModule::OwnAttention> CudaGraphModule::plan_tf32_attention(const loop::Program& prog) {
  std::vector<OwnAttention> calls;
  if (!config().cuda_tf32_attention) return calls;
  const OpId sdpa = op_id(Op::scaled_dot_product_attention);
  for (size_t x = 0; x < prog.externs.size(); ++x) {
    const loop::ExternCall& e = prog.externs[x];
    if (e.op != sdpa || e.result < 0) continue;
    const OpDef& op = op_def(e.op);
    auto arg = [&](const char* name) -> const Value& { return e.args.at(static_cast<size_t>(op.schema.index_of(name))); };
    const loop::TensorRef *q = operand(e, arg("query")), *k = operand(e, arg("key")), *v = operand(e, arg("value"));
    const Value &mask = arg("attn_mask"), &dropout = arg("dropout_p"), &causal = arg("is_causal"), &scale = arg("scale");
    bool no_dropout = (dropout.kind == Value::Kind::Float || dropout.kind == Value::Kind::Int) && dropout.as_double() == 0.0;
    if (!q || !k || !v || !no_dropout || !(causal.kind == Value::Kind::Bool && !causal.b)) continue;
    if (!scale.is_none() && scale.kind != Value::Kind::Float && scale.kind != Value::Kind::Int) continue;
    const loop::Buffer& out = prog.buffers[static_cast<size_t>(e.result)];
    auto f32 = [&](const loop::TensorRef* r) { return prog.buffers[static_cast<size_t>(r->buf)].dtype == DType::Float32; };
    size_t nd = q->sizes.size();
    if (!f32(q) || !f32(k) || !f32(v) || out.dtype != DType::Float32 || (nd != 3 && nd != 4) || k->sizes.size() != nd ||
        v->sizes.size() != nd)
      continue;
    int64_t L = q->sizes[nd - 2], E = q->sizes[nd - 1], S = k->sizes[nd - 2], Ev = v->sizes[nd - 1];
    std::vector<int64_t> batch(q->sizes.begin(), q->sizes.end() - 2), want = batch;
    want.insert(want.end(), {L, Ev});
    if (!cuda_tf32_attention_fits(E, Ev) || k->sizes[nd - 1] != E || v->sizes[nd - 2] != S || out.sizes != want ||
        std::vector<int64_t>(k->sizes.begin(), k->sizes.end() - 2) != batch ||
        std::vector<int64_t>(v->sizes.begin(), v->sizes.end() - 2) != batch)
      continue;
    if (q->strides.back() != 1 || k->strides.back() != 1 || v->strides.back() != 1 || out.strides.back() != 1) continue;
    OwnAttention a;
    a.ext = x;
    AttentionCall& c = a.call;
    // (batch, head, row) strides; a 3-d call is one head.
    auto bhl = [&](const std::vector<int64_t>& st, int64_t* sb, int64_t* sh, int64_t* sl) {
      *sb = st[0];
      *sh = nd == 4 ? st[1] : 0;
      *sl = st[nd - 2];
    };
    bhl(q->strides, &c.q_b, &c.q_h, &c.q_l);
    bhl(k->strides, &c.k_b, &c.k_h, &c.k_l);
    bhl(v->strides, &c.v_b, &c.v_h, &c.v_l);
    bhl(out.strides, &c.o_b, &c.o_h, &c.o_l);
    c.B = batch[0];
    c.H = nd == 4 ? batch[1] : 1;
    c.L = L;
    c.S = S;
    c.head_dim = static_cast<int>(E);
    c.scale = static_cast<float>(scale.is_none() ? 1.0 / std::sqrt(static_cast<double>(E)) : scale.as_double());
    a.q = *q;
    a.k = *k;
    a.v = *v;
    if (!mask.is_none()) {
      const loop::TensorRef* m = operand(e, mask);
      if (!m || prog.buffers[static_cast<size_t>(m->buf)].dtype != DType::Bool || m->sizes.size() > nd) continue;
      // Right-aligned against the scores (batch..., L, S): size-1 dims broadcast (stride 0).
      std::vector<int64_t> scores = batch, st(nd, 0);
      scores.insert(scores.end(), {L, S});
      bool ok = true;
      for (size_t i = 0; i < m->sizes.size(); ++i) {
        size_t at = nd - m->sizes.size() + i;
        if (m->sizes[i] == 1) continue;
        ok &= m->sizes[i] == scores[at];
        st[at] = m->strides[i];
      }
      if (!ok) continue;
      bhl(st, &c.m_b, &c.m_h, &c.m_l);
      c.m_s = st[nd - 1];
      a.mask = *m;
    }
    calls.push_back(std::move(a));
  }
  return calls;
}

std::vector<std::string> CudaGraphModule::tf32_attention() const {
  if (traced_) return traced_->tf32_attention();
  std::vector<std::string> out;
  for (const OwnAttention& a : attn_) out.push_back(graph_.node(prog_.externs[a.ext].node).name);
  return out;
}

bool CudaGraphModule::run_attention(const OwnAttention& a, std::vector<py::object>& bufs, std::vector<void*>& ptrs,
                                    CUstream stream) {
  AttentionCall c = a.call;
  auto at = [&](const loop::TensorRef& r, int64_t elem) {
    const char* base = static_cast<const char*>(ptrs[static_cast<size_t>(r.buf)]);
    FF_CHECK(base, "buffer " + prog_.buffers[static_cast<size_t>(r.buf)].name + " used before it was produced");
    // NB: a packed weight's buffer holds the whole arena; attention never reads one.
    return base + r.offset * elem;
  };
  c.q = reinterpret_cast<const float*>(at(a.q, 4));
  c.k = reinterpret_cast<const float*>(at(a.k, 4));
  c.v = reinterpret_cast<const float*>(at(a.v, 4));
  if (a.mask.buf >= 0) c.mask = reinterpret_cast<const unsigned char*>(at(a.mask, 1));
  if (!tf32_attention_aligned(c)) return false;
  int r = prog_.externs[a.ext].result;
  py::object t = alloc(r);
  c.out = static_cast<float*>(data_pointer(t));
  attn_kernel_->launch(c, stream, device_);
  bufs[static_cast<size_t>(r)] = t;
  ptrs[static_cast<size_t>(r)] = c.out;
  return true;
}

void CudaGraphModule::input_mismatch(const std::vector<py::object>& inputs) const {
  for (int b : prep_->input_bufs) {
    const loop::Buffer& buf = prog_.buffers[static_cast<size_t>(b)];
    const py::object& t = inputs.at(static_cast<size_t>(buf.input));
    TensorMeta m = meta_from_tensor(t.ptr());
    // NB: a packed weight is passed as the caller's (NCHW) tensor.
    std::vector<int64_t> strides = packed(b) ? TensorMeta::contiguous_strides(buf.sizes) : SymShape(buf.strides);
    bool device_ok = host_emulation_ ? m.device.type == Device::Type::CPU
                                     : m.device.type == Device::Type::CUDA && std::max(0, m.device.index) == device_;
    if (!device_ok || m.dtype != buf.dtype || m.sizes != buf.sizes || m.strides != strides)
      throw UserError("input " + buf.name + " is " + std::string(dtype_name(m.dtype)) + layout_str(m.sizes, m.strides) +
                      " on " + m.device.str() + "; the graph was compiled for " + std::string(dtype_name(buf.dtype)) +
                      layout_str(buf.sizes, strides) + " on cuda:" + std::to_string(device_));
  }
  throw UserError("an input is not a tensor of the layout and device the graph was compiled for");
}

}  // namespace ff::cuda
