#include "inductor/python/compiled_graph.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>

#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/effects.h"
#include "graph/passes/specialize_shapes.h"
#include "graph/python/graph_calls.h"
#include "graph/passes/channels_last.h"
#include "inductor/kernel_cache.h"
#include "inductor/lower.h"
#include "inductor/parallel.h"
#include "inductor/python/buffer_pool.h"
#include "inductor/python/channels_last_inputs.h"
#include "inductor/python/packed_linear.h"
#include "inductor/python/prepared_call.h"
#include "inductor/python/size_bindings.h"
#include "inductor/python/input_writes.h"
#include "inductor/python/tensor_check.h"
#include "inductor/pipeline.h"
#include "src/base/config.h"
#include "src/base/errors.h"
#include "src/base/logging.h"
#include "src/base/py_ref.h"

namespace ff::inductor {

namespace {

// NB: below this many element operations a kernel runs on the calling thread: waking the
// OpenMP team costs more than it saves.
constexpr double kParallelWork = 32768;

// `s` at one call's symbol values (a static program's `bindings` are empty: its sizes are constants).
std::vector<int64_t> sym_ints(const SymShape& s, const std::vector<int64_t>& bindings) {
  std::vector<int64_t> out;
  for (const SymInt& x : s) out.push_back(sym_specialize(x, bindings).hint());
  return out;
}

PyRef int_tuple(const std::vector<int64_t>& v) {
  PyRef t = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(v.size())));
  for (size_t i = 0; i < v.size(); ++i) PyTuple_SET_ITEM(t.get(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(v[i]));
  return t;
}

// Whether MKL's packed GEMM may run linear(input, weight, bias) (extern call `args`, in that schema
// order): float32 CPU tensors, the weight a graph input, 2-d and contiguous. Sets the product's
// row count, in_features and out_features.
bool packable_linear(const Graph& g, const OpDef& op, const std::vector<Value>& args, int64_t* rows, int64_t* k,
                     int64_t* n) {
  if (op.schema.index_of("input") != 0 || op.schema.index_of("weight") != 1 || op.schema.index_of("bias") != 2) return false;
  const Value &in = args[0], &w = args[1], &b = args[2];
  if (!in.is_node() || !w.is_node() || !(b.is_none() || b.is_node())) return false;
  if (g.node(w.node).kind != NodeKind::Placeholder) return false;
  auto f32 = [&](NodeId id) {
    const ValueMeta& m = g.node(id).meta;
    return m.is_tensor() && m.tensor.dtype == DType::Float32 && m.tensor.device.type == Device::Type::CPU;
  };
  if (!f32(in.node) || !f32(w.node) || (b.is_node() && !f32(b.node))) return false;
  const TensorMeta& wm = g.node(w.node).meta.tensor;
  const TensorMeta& xm = g.node(in.node).meta.tensor;
  if (wm.dim() != 2 || !wm.is_contiguous() || xm.dim() < 2 || wm.sizes[1] == 0 || xm.sizes.back() != wm.sizes[1])
    return false;
  *k = wm.sizes[1];
  *n = wm.sizes[0];
  *rows = xm.numel() / *k;
  return *rows > 0 && *n > 0;
}

void throw_py(const std::string& what) {
  std::string msg = what;
  if (PyErr_Occurred()) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (value) {
      PyRef s = PyRef::steal(PyObject_Str(value));
      if (s) msg += ": " + std::string(PyUnicode_AsUTF8(s.get()));
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
  }
  throw InternalError(msg);
}

std::string value_key(const Value& v) {
  std::string s = std::to_string(static_cast<int>(v.kind)) + ":";
  switch (v.kind) {
    case Value::Kind::Bool: s += v.b ? "1" : "0"; break;
    case Value::Kind::Int: s += v.sym ? "s(" + sym_str(v.sym) + ")" : std::to_string(v.i); break;
    case Value::Kind::Float: {
      char b[40];
      std::snprintf(b, sizeof b, "%a", v.f);
      s += b;
      break;
    }
    case Value::Kind::Str:
    case Value::Kind::MemoryFormat:
    case Value::Kind::Layout: s += v.s; break;
    case Value::Kind::DType: s += dtype_name(v.dtype); break;
    case Value::Kind::Device: s += v.device.str(); break;
    case Value::Kind::Node: s += "%" + std::to_string(v.node); break;
    default: break;
  }
  if (!v.items.empty()) {
    s += "(";
    for (const Value& i : v.items) s += value_key(i) + ",";
    s += ")";
  }
  return s;
}

std::string meta_key(const ValueMeta& m) {
  std::string s = std::to_string(static_cast<int>(m.kind));
  if (m.is_tensor()) {
    s += std::string(dtype_name(m.tensor.dtype)) + m.tensor.device.str() + "[";
    // NB: symbolic entries by their expression: graphs that differ only in the traced sizes
    // share one symbolic program.
    for (const SymInt& x : m.tensor.sizes) s += x.str() + ",";
    s += "/";
    for (const SymInt& x : m.tensor.strides) s += x.str() + ",";
    s += "]";
  }
  for (const ValueMeta& i : m.items) s += "(" + meta_key(i) + ")";
  return s;
}

// Compiled programs by graph structure: every program some graph still runs (weak), and the most
// recent ones kept alive (a function compiled again after reset(), or a new function with the same
// graph, finds its kernels without LLVM). Bounded: a process that compiles new graphs for ever
// keeps only those in use plus kMemoryCacheKept (each holds JIT code and memory mappings).
constexpr size_t kMemoryCacheKept = 256;
struct MemoryCache {
  std::map<std::string, std::weak_ptr<const CompiledProgram>> live;
  std::deque<std::shared_ptr<const CompiledProgram>> recent;  // newest at the back

  std::shared_ptr<const CompiledProgram> find(const std::string& key) {
    auto it = live.find(key);
    if (it == live.end()) return nullptr;
    auto p = it->second.lock();
    if (!p) live.erase(it);
    return p;
  }
  void add(const std::string& key, std::shared_ptr<const CompiledProgram> p) {
    live[key] = p;
    recent.push_back(std::move(p));
    if (recent.size() > kMemoryCacheKept) recent.pop_front();
    if (live.size() > 2 * kMemoryCacheKept)  // NB: sweep keys whose programs died, now and then
      for (auto it = live.begin(); it != live.end();) it = it->second.expired() ? live.erase(it) : std::next(it);
  }
  void clear() {
    live.clear();
    recent.clear();
  }
};

std::mutex g_cache_mu;
MemoryCache& memory_cache() {
  static auto* m = new MemoryCache;
  return *m;
}

}  // namespace

std::string graph_structure_key(const Graph& g) {
  std::string s;
  for (const Node& n : g.nodes()) {
    s += std::to_string(static_cast<int>(n.kind)) + " " + (n.kind == NodeKind::Call ? op_def(n.op).name : n.name) + " ";
    for (const Value& v : n.args) s += value_key(v) + ";";
    s += meta_key(n.meta) + "\n";
  }
  return cache_key_hash(s) + std::to_string(s.size());
}

std::string disk_cache_dir() { return cache_area_dir(CacheArea::CpuObjects); }

void clear_memory_cache() {
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    memory_cache().clear();
  }
  buffer_pool_clear();
}

// Python objects prepared once per compiled graph.
struct CompiledGraph::Plan {
  PyRef torch, tensor_type, empty_strided, as_strided, get_num_threads, uint8, matmul, addmm;
  PyRef dtype_kwnames;                    // ("dtype",)
  PyRef unit_stride;                      // (1,): the byte slots' stride
  PyRef storage_offset_name;
  struct Buf {
    PyRef sizes, strides, dtype;
    bool allocate = false;       // Intermediate/Output that some step uses, not in a slot
    int64_t bytes = 0;           // what its layout spans
    bool contiguous = false;     // row-major, dense
    bool kernel_reads = false;   // a kernel touches it through a raw pointer
    bool strided_views = false;  // an extern operand or output takes a view other than the whole buffer
  };
  std::vector<Buf> bufs;
  std::vector<int> input_buf;  // placeholder position -> buffer (-1: not a tensor input)
  std::vector<size_t> tensor_inputs;  // placeholder positions with a buffer, in order
  LayoutCheck input_check;
  std::vector<NodeId> placeholders;
  std::vector<std::vector<int>> kernel_bufs;
  bool any_parallel = false;  // some kernel has enough work to be split across threads
  int packed_linears = 0;     // externs with a PackedLinear (they copy biases on several threads)
  bool check_inputs = true;   // see the constructor
  struct Extern {
    std::unique_ptr<PreparedCall> call;    // null: a GetItem
    bool matmul = false;                   // may write into a pooled buffer (matmul_into_pool)
    std::unique_ptr<LayoutCheck> check;    // result layout, where kernels or views rely on it
    std::unique_ptr<PackedLinear> packed;  // a linear with a graph-input weight (packed_linear.h)
  };
  std::vector<Extern> externs;
  // Channels-last (see graph/passes/channels_last.h): the conv weights converted per call, the
  // captured strides they are checked against, and the outputs copied back to eager's layout.
  ChannelsLastInputs cl_inputs;
  std::vector<PyRef> cl_input_strides;
  struct Restore {
    NodeId node;
    PyRef sizes, strides, dtype;
  };
  std::vector<Restore> restore;
  InputWrites writes;  // the inputs an in-place op writes (Lowerer::write_input)
};

CompiledGraph::CompiledGraph(const Graph& g) {
  // NB: the streaming-store size and the channels-last switch change the generated code: part of
  // the key (of the graph as captured: a hit skips the rewrite too).
  bool channels_last = config().cpu_channels_last, attention = config().fuse_attention;
  std::string key = graph_structure_key(g) + " stream " + std::to_string(config().cpu_streaming_store_mb) +
                    (channels_last ? " nhwc" : "") + (attention ? " sdpa" : "");
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    prog_ = memory_cache().find(key);
    from_memory_cache_ = prog_ != nullptr;
  }
  if (!prog_) {
    CpuPipelineOptions options;
    options.fuse_attention = attention;
    options.channels_last = channels_last;
    CpuCompiled c = compile_for_cpu(g, options);
    auto cp = std::make_shared<CompiledProgram>();
    cp->graph = std::move(c.graph);
    cp->program = std::move(c.program);
    cp->module = std::move(c.module);
    cp->channels_last = std::move(c.channels_last);
    cp->key = key;
    prog_ = cp;
    std::lock_guard<std::mutex> lock(g_cache_mu);
    memory_cache().add(key, prog_);
  }
  if (prog_->channels_last) original_ = std::make_unique<Graph>(g);
  if (prog_->program.symbolic) {
    symbol_at_ = symbol_bindings(prog_->graph);
    // NB: the instance at the traced sizes, made now: whatever the runtime cannot run (an input
    // written in place on a torch without version counters ...) fails the compile, as for a
    // static program, instead of a call.
    std::vector<int64_t> traced = traced_bindings(prog_->graph, symbol_at_);
    instances_.add(traced, make_instance(traced));
    return;  // the others are made per set of sizes (instance_for)
  }
  static_.g = &prog_->graph;
  static_.p = &prog_->program;
  build_plan(static_, g);
}

void CompiledGraph::build_plan(Instance& inst, const Graph& g) {
  const std::optional<ChannelsLastGraph>& cl = prog_->channels_last;
  const loop::Program& p = *inst.p;
  inst.plan = std::make_unique<Plan>();
  Plan& pl = *inst.plan;
  pl.torch = PyRef::steal(PyImport_ImportModule("torch"));
  if (!pl.torch) throw_py("cannot import torch");
  auto attr = [&](PyObject* o, const char* name) {
    PyRef r = PyRef::steal(PyObject_GetAttrString(o, name));
    if (!r) throw_py(std::string("torch has no ") + name);
    return r;
  };
  pl.tensor_type = attr(pl.torch.get(), "Tensor");
  pl.empty_strided = attr(pl.torch.get(), "empty_strided");
  pl.as_strided = attr(pl.torch.get(), "as_strided");
  pl.get_num_threads = attr(pl.torch.get(), "get_num_threads");
  pl.uint8 = attr(pl.torch.get(), "uint8");
  pl.matmul = attr(pl.torch.get(), "matmul");
  pl.addmm = attr(pl.torch.get(), "addmm");
  pl.dtype_kwnames = PyRef::steal(Py_BuildValue("(s)", "dtype"));
  pl.unit_stride = PyRef::steal(Py_BuildValue("(i)", 1));
  pl.storage_offset_name = PyRef::steal(PyUnicode_InternFromString("storage_offset"));
  if (!pl.dtype_kwnames || !pl.unit_stride || !pl.storage_offset_name) throw_py("out of memory");
  std::vector<bool> used(p.buffers.size(), false);
  pl.bufs.resize(p.buffers.size());
  for (const auto& k : p.kernels) {
    for (int b : k.buffers()) used[static_cast<size_t>(b)] = pl.bufs[static_cast<size_t>(b)].kernel_reads = true;
    if (k.work() >= kParallelWork) pl.any_parallel = true;
  }
  auto note_view = [&](const loop::TensorRef& r) {
    const loop::Buffer& buf = p.buffers[static_cast<size_t>(r.buf)];
    used[static_cast<size_t>(r.buf)] = true;
    if (r.sizes != buf.sizes || r.strides != buf.strides || r.offset != 0) pl.bufs[static_cast<size_t>(r.buf)].strided_views = true;
  };
  for (const auto& e : p.externs)
    for (auto& [n, r] : e.operands) note_view(r);
  for (auto& [n, r] : p.outputs) note_view(r);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const loop::Buffer& buf = p.buffers[b];
    auto& pb = pl.bufs[b];
    pb.sizes = int_tuple(buf.sizes);
    pb.strides = int_tuple(buf.strides);
    pb.dtype = attr(pl.torch.get(), std::string(dtype_name(buf.dtype)).c_str());
    bool slotted = !p.slot.empty() && p.slot[b] >= 0;
    pb.bytes = loop::buffer_bytes(buf);
    int64_t expect = 1;
    pb.contiguous = true;
    for (size_t d = buf.sizes.size(); d-- > 0;) {
      if (buf.sizes[d] != 1 && buf.strides[d] != expect) pb.contiguous = false;
      expect *= buf.sizes[d];
    }
    pb.allocate = used[b] && !slotted && (buf.role == loop::BufferRole::Intermediate || buf.role == loop::BufferRole::Output);
  }
  pl.placeholders = inst.g->placeholders();
  pl.input_buf.assign(pl.placeholders.size(), -1);
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (p.buffers[b].role == loop::BufferRole::Input) pl.input_buf[static_cast<size_t>(p.buffers[b].input)] = static_cast<int>(b);
  std::vector<bool> converted(pl.input_buf.size(), false);
  if (cl)
    for (int i : cl->inputs) converted[static_cast<size_t>(i)] = true;
  pl.cl_input_strides.resize(pl.input_buf.size());
  for (size_t i = 0; i < pl.input_buf.size(); ++i) {
    int b = pl.input_buf[i];
    if (b < 0) continue;
    const auto& pb = pl.bufs[static_cast<size_t>(b)];
    pl.tensor_inputs.push_back(i);
    PyObject* strides = pb.strides.get();
    if (converted[i]) {
      // The caller passes the weight as captured; the run converts it to the compiled layout.
      pl.cl_input_strides[i] = int_tuple(sym_ints(g.node(pl.placeholders[i]).meta.tensor.strides, inst.bindings));
      strides = pl.cl_input_strides[i].get();
      pl.cl_inputs.add(i, pb.sizes.get(), pb.strides.get());
    }
    pl.input_check.add(pb.dtype.get(), pb.sizes.get(), strides);
  }
  if (cl) {
    for (auto& [node, meta] : cl->restore)
      pl.restore.push_back(Plan::Restore{node, int_tuple(sym_ints(meta.sizes, inst.bindings)), int_tuple(sym_ints(meta.strides, inst.bindings)),
                                         attr(pl.torch.get(), std::string(dtype_name(meta.dtype)).c_str())});
    if (log_enabled(LogArtifact::schedule))
      log_emit(LogArtifact::schedule, "channels-last: " + std::to_string(pl.cl_inputs.size()) +
                                          " conv weight(s) converted once per version; convolutions and the kernels between "
                                          "them run NHWC; " +
                                          std::to_string(pl.restore.size()) +
                                          " output(s) copied back to eager's layout");
  }
  pl.writes.prepare(p);
  for (const auto& k : p.kernels) pl.kernel_bufs.push_back(k.buffers());
  // NB: a program of extern calls only, on whole tensors, is the graph's own torch calls on
  // whatever it is given (what the reference runner would do), so its inputs need no check. Raw
  // pointers (kernels), views that assume a layout, and out= buffers of the traced size do.
  pl.check_inputs = !p.kernels.empty() || !pl.cl_inputs.empty() || !pl.writes.empty();
  for (const auto& pb : pl.bufs) pl.check_inputs = pl.check_inputs || pb.strided_views;
  int packed_linears = 0;
  for (const loop::ExternCall& e : p.externs) {
    Plan::Extern& x = pl.externs.emplace_back();
    if (e.op != kNoOp) {
      const OpDef& op = op_def(e.op);
      if (PyObject* fn = op_callable(e.op)) x.call = std::make_unique<PreparedCall>(fn, op, e.args);
      x.matmul = op_in(op_kind(e.op), {Op::linear, Op::matmul, Op::op_matmul, Op::mm, Op::bmm});
      // NB: not for a symbolic program: each set of sizes has its own plan, and each would keep a
      // packed copy of every weight (MKL's packed layout is made for one product's m, n, k).
      if (op_kind(e.op) == Op::linear && e.result >= 0 && config().cpu_pack_linear_weights && !prog_->program.symbolic) {
        int64_t rows = 0, k = 0, n = 0;
        const auto& pb = pl.bufs[static_cast<size_t>(e.result)];
        if (packable_linear(*inst.g, op, e.args, &rows, &k, &n) && pb.contiguous && packed_linear_available()) {
          x.packed = std::make_unique<PackedLinear>(rows, k, n, pb.sizes.get(), pb.strides.get(), pb.bytes);
          ++packed_linears;
          pl.check_inputs = true;  // the packed copy assumes the traced weight layout
        }
      }
      if (x.matmul && e.result >= 0 && pl.bufs[static_cast<size_t>(e.result)].bytes >= kPoolMinBytes) pl.check_inputs = true;
    }
    if (e.result >= 0) {
      // NB: a result that only other externs and the graph's outputs see as a whole is used as
      // torch returned it (as eager would); kernels and strided views assume the traced layout.
      const auto& pb = pl.bufs[static_cast<size_t>(e.result)];
      if (pb.kernel_reads || pb.strided_views) {
        x.check = std::make_unique<LayoutCheck>();
        x.check->add(pb.dtype.get(), pb.sizes.get(), pb.strides.get());
      }
    }
  }
  pl.packed_linears = packed_linears;
  if (packed_linears > 0 && log_enabled(LogArtifact::schedule))
    log_emit(LogArtifact::schedule, "packed weights: " + std::to_string(packed_linears) +
                                        " linear layer(s) run MKL's packed GEMM once their weight is seen unchanged on two calls");
}

CompiledGraph::~CompiledGraph() = default;

int CompiledGraph::packed_linears() const {
  int n = static_.plan ? static_.plan->packed_linears : 0;
  // NB: an instance on the reference runner has no plan.
  instances_.for_each([&](const Instance& inst) { n = std::max(n, inst.plan ? inst.plan->packed_linears : 0); });
  return n;
}

int64_t CompiledGraph::packed_linear_calls() const {
  int64_t n = 0;
  auto count = [&](const Plan& pl) {
    for (const auto& x : pl.externs)
      if (x.packed) n += x.packed->packed_calls();
  };
  if (static_.plan) count(*static_.plan);
  instances_.for_each([&](const Instance& inst) {
    if (inst.plan) count(*inst.plan);
  });
  return n;
}

// NB: a program compiled for sizes >= 2 (every symbol's bound: broadcasting and the like were
// decided on it) runs only where each symbol's value is; anything else, or inputs that are not
// tensors of the expected rank, run on the reference runner.
std::shared_ptr<CompiledGraph::Instance> CompiledGraph::make_instance(std::vector<int64_t> bindings) {
  auto inst = std::make_shared<Instance>();
  inst->bindings = std::move(bindings);
  inst->graph = specialize_shapes(prog_->graph, inst->bindings);
  if (original_) inst->original = std::make_unique<Graph>(specialize_shapes(*original_, inst->bindings));
  inst->program = loop::specialize_program(prog_->program, inst->bindings);
  report_eager_strides(inst->program, inst->graph);
  inst->g = &inst->graph;
  inst->p = &inst->program;
  build_plan(*inst, original_ ? *inst->original : inst->graph);
  return inst;
}

std::shared_ptr<CompiledGraph::Instance> CompiledGraph::instance_for(PyObject* const* inputs, size_t n, bool* failed) {
  *failed = false;
  RunArray<int64_t, 16> values(symbol_at_.size());
  if (!read_bindings(symbol_at_, inputs, n, values.data)) return nullptr;
  if (auto found = instances_.find(values.data, symbol_at_.size())) return found;
  std::shared_ptr<Instance> inst;
  try {
    inst = make_instance(std::vector<int64_t>(values.data, values.data + symbol_at_.size()));
  } catch (const std::exception& e) {
    // NB: the construction made an instance at the traced sizes, so this is a failure at these
    // sizes only: they run on the reference runner.
    if (PyErr_Occurred()) {
      *failed = true;
      return nullptr;
    }
    inst = std::make_shared<Instance>();
    inst->bindings.assign(values.data, values.data + symbol_at_.size());
    inst->graph = specialize_shapes(original_ ? *original_ : prog_->graph, inst->bindings);
    inst->fallback = std::make_unique<ReferenceRunner>(inst->graph);
    if (log_enabled(LogArtifact::perf_hints))
      log_emit(LogArtifact::perf_hints, std::string("inductor: the symbolic program cannot run at these sizes (") + e.what() +
                                            "); they run on the reference runner");
  }
  if (log_enabled(LogArtifact::dynamic) && inst->plan)
    log_emit(LogArtifact::dynamic, "inductor: the symbolic program runs at " + bindings_str(inst->bindings) +
                                       " (its kernels take the sizes as arguments)");
  instances_.add(inst->bindings, inst);
  return inst;
}

namespace {

bool requires_grad(PyObject* t) {
  if (t == Py_None) return false;
  PyRef r = PyRef::steal(PyObject_GetAttrString(t, "requires_grad"));
  if (!r) {
    PyErr_Clear();
    return true;  // not a tensor we understand: take the ordinary path
  }
  return r.get() == Py_True;
}

}  // namespace

// A large matrix product writes straight into a pooled buffer (torch.matmul / addmm with out=):
// torch would hand back freshly mapped memory, whose page faults cost a tenth of the product.
// Returns nullptr without an error set when this path does not apply.
PyObject* CompiledGraph::matmul_into_pool(Plan& pl, const std::string& op, const std::vector<PyObject*>& operands, int result) {
  const auto& pb = pl.bufs[static_cast<size_t>(result)];
  if (!buffer_pool_on() || pb.bytes < kPoolMinBytes || !pb.contiguous) return nullptr;
  for (PyObject* o : operands)
    if (requires_grad(o)) return nullptr;
  PyRef out = PyRef::steal(pooled_empty_strided(pb.sizes.get(), pb.strides.get(), pb.dtype.get(), pb.bytes));
  if (!out) {
    PyErr_Clear();
    return nullptr;
  }
  PyRef kw = PyRef::steal(PyDict_New());
  PyRef done;
  if (op == "linear") {
    PyObject *x = operands[0], *w = operands[1], *bias = operands[2];
    PyRef wt = PyRef::steal(PyObject_CallMethod(w, "t", nullptr));
    if (!wt) {
      PyErr_Clear();
      return nullptr;
    }
    if (bias == Py_None) {
      PyDict_SetItemString(kw.get(), "out", out.get());
      PyRef args = PyRef::steal(PyTuple_Pack(2, x, wt.get()));
      done = PyRef::steal(PyObject_Call(pl.matmul.get(), args.get(), kw.get()));
    } else {
      // NB: what F.linear does for contiguous inputs: one addmm over the flattened rows.
      PyRef k = PyRef::steal(PyObject_CallMethod(wt.get(), "size", "i", 0));
      PyRef n = PyRef::steal(PyObject_CallMethod(wt.get(), "size", "i", 1));
      PyRef x2 = PyRef::steal(k ? PyObject_CallMethod(x, "reshape", "(iO)", -1, k.get()) : nullptr);
      PyRef o2 = PyRef::steal(x2 && n ? PyObject_CallMethod(out.get(), "view", "(iO)", -1, n.get()) : nullptr);
      if (!o2) {
        PyErr_Clear();
        return nullptr;
      }
      PyDict_SetItemString(kw.get(), "out", o2.get());
      PyRef args = PyRef::steal(PyTuple_Pack(3, bias, x2.get(), wt.get()));
      done = PyRef::steal(PyObject_Call(pl.addmm.get(), args.get(), kw.get()));
    }
  } else {
    PyDict_SetItemString(kw.get(), "out", out.get());
    PyRef args = PyRef::steal(PyTuple_Pack(2, operands[0], operands[1]));
    done = PyRef::steal(PyObject_Call(pl.matmul.get(), args.get(), kw.get()));
  }
  if (!done) {
    PyErr_Clear();  // e.g. a dtype out= does not accept: the ordinary call reports real errors
    return nullptr;
  }
  return out.release();
}

PyObject* CompiledGraph::run(PyObject* const* inputs, size_t n) {
  Instance* inst = &static_;
  // NB: held for the run: another thread may evict it from instances_ while kernels run without the GIL.
  std::shared_ptr<Instance> held;
  if (prog_->program.symbolic) {
    bool failed = false;
    held = instance_for(inputs, n, &failed);
    inst = held.get();
    if (inst && !inst->plan) return inst->fallback->run(inputs, n);
    if (failed) return nullptr;
    if (!inst) {
      if (!warned_ && log_enabled(LogArtifact::perf_hints))
        log_emit(LogArtifact::perf_hints,
                 "inductor: inputs whose sizes do not fit the symbolic program (a size below 2, "
                 "or not a tensor of the traced rank); running it on the reference runner");
      warned_ = true;
      if (!symbolic_fallback_) symbolic_fallback_ = std::make_unique<ReferenceRunner>(original_ ? *original_ : prog_->graph);
      return symbolic_fallback_->run(inputs, n);
    }
  }
  const loop::Program& p = *inst->p;
  const Graph& g = *inst->g;
  Plan& pl = *inst->plan;
  size_t nb = p.buffers.size();
  // Guards on what the code was compiled for; anything else runs on the reference runner.
  int match = n == pl.placeholders.size() ? 1 : 0;
  if (match && pl.check_inputs) {
    RunArray<PyObject*, 16> tin(pl.tensor_inputs.size());
    for (size_t i = 0; i < pl.tensor_inputs.size(); ++i) tin[i] = inputs[pl.tensor_inputs[i]];
    match = pl.input_check.check(tin.data);
    if (match < 0) return nullptr;
  }
  auto run_reference = [&](const char* why) {
    if (!warned_ && log_enabled(LogArtifact::perf_hints))
      log_emit(LogArtifact::perf_hints, std::string("inductor: ") + why + "; running it on the reference runner");
    warned_ = true;
    if (!inst->fallback) inst->fallback = std::make_unique<ReferenceRunner>(inst->original ? *inst->original : original_ ? *original_
                                                                                                                         : g);
    return inst->fallback->run(inputs, n);
  };
  if (!match) {
    std::string why = "inputs differ from the ones the graph was compiled for (sizes, strides, dtype or device)";
    if (!warned_ && log_enabled(LogArtifact::perf_hints) && n == pl.placeholders.size()) {
      RunArray<PyObject*, 16> tin(pl.tensor_inputs.size());
      for (size_t i = 0; i < pl.tensor_inputs.size(); ++i) tin[i] = inputs[pl.tensor_inputs[i]];
      std::string which = pl.input_check.mismatch(tin.data);
      if (!which.empty()) why += ": " + which;
    }
    return run_reference(why.c_str());
  }
  // The caller's data pointers, read once for the checks of inputs written in place and the kernels.
  RunArray<void*, 32> given_ptrs(pl.writes.empty() ? 0 : n);
  if (!pl.writes.empty()) {
    if (!pl.writes.pointers(inputs, n, given_ptrs.data)) return nullptr;
    int safe = pl.writes.writable(inputs, n, given_ptrs.data);
    if (safe < 0) return nullptr;
    if (!safe) return run_reference("an input the graph writes in place shares memory with another input or is an inference tensor");
    if (!pl.writes.bump(inputs)) return nullptr;
  }
  PyObject* const* given = inputs;
  // Channels-last: the conv weights in the compiled layout, referenced until the run ends.
  RunArray<PyObject*, 128> cl_args(pl.cl_inputs.empty() ? 0 : n);
  RunArray<PyObject*, 32> cl_owned(pl.cl_inputs.size());
  struct DropOwned {
    PyObject** a;
    size_t n;
    ~DropOwned() {
      for (size_t i = 0; i < n; ++i) Py_XDECREF(a[i]);
    }
  } drop_owned{cl_owned.data, pl.cl_inputs.size()};
  if (!pl.cl_inputs.empty()) {
    for (size_t i = 0; i < n; ++i) cl_args[i] = inputs[i];
    if (!pl.cl_inputs.convert(cl_args.data, cl_owned.data)) return nullptr;
    inputs = cl_args.data;
  }

  // Every PyObject* in node_objs and tensors is a strong reference, dropped on every exit.
  RunArray<PyObject*, 32> tensors(nb);
  RunArray<void*, 32> ptrs(nb);
  RunArray<PyObject*, 64> node_objs(g.size());
  std::vector<PyRef> slots(p.slot_bytes.size());
  struct Drop {
    PyObject** a;
    size_t n;
    ~Drop() {
      for (size_t i = 0; i < n; ++i) Py_XDECREF(a[i]);
    }
  } drop_tensors{tensors.data, nb}, drop_nodes{node_objs.data, g.size()};
  auto set_node = [&](NodeId id, PyObject* obj) {  // steals obj
    Py_XSETREF(node_objs[static_cast<size_t>(id)], obj);
  };
  for (size_t i = 0; i < n; ++i) {
    Py_INCREF(inputs[i]);
    set_node(pl.placeholders[i], inputs[i]);
    int b = pl.input_buf[i];
    if (b < 0) continue;
    Py_INCREF(inputs[i]);
    tensors[static_cast<size_t>(b)] = inputs[i];
    if (pl.bufs[static_cast<size_t>(b)].kernel_reads) {
      if (!pl.writes.empty() && inputs[i] == given[i]) {
        ptrs[static_cast<size_t>(b)] = given_ptrs[i];
        continue;
      }
      ptrs[static_cast<size_t>(b)] = tensor_data_ptr(inputs[i]);
      if (PyErr_Occurred()) return nullptr;
    }
  }
  for (size_t s = 0; s < slots.size(); ++s) {
    int64_t bytes = std::max<int64_t>(p.slot_bytes[s], 1);
    PyRef size = PyRef::steal(PyTuple_Pack(1, PyRef::steal(PyLong_FromLongLong(bytes)).get()));
    slots[s] = PyRef::steal(cpu_empty_strided(size.get(), pl.unit_stride.get(), pl.uint8.get(), bytes));
    if (!slots[s]) return nullptr;
  }
  for (size_t b = 0; b < nb; ++b) {
    if (!p.slot.empty() && p.slot[b] >= 0) {
      ptrs[b] = tensor_data_ptr(slots[static_cast<size_t>(p.slot[b])].get());
      if (PyErr_Occurred()) return nullptr;
      continue;
    }
    const auto& pb = pl.bufs[b];
    if (!pb.allocate) continue;
    tensors[b] = cpu_empty_strided(pb.sizes.get(), pb.strides.get(), pb.dtype.get(), pb.bytes);
    if (!tensors[b]) return nullptr;
    if (pb.kernel_reads) {
      ptrs[b] = tensor_data_ptr(tensors[b]);
      if (PyErr_Occurred()) return nullptr;
    }
  }

  // New reference to the tensor `r` names, or nullptr with an error set.
  // `fresh`: a new tensor object even where the view is the whole buffer (x.view(x.shape) is not x).
  auto view_of = [&](const loop::TensorRef& r, bool fresh = false) -> PyObject* {
    PyObject* base = tensors[static_cast<size_t>(r.buf)];
    FF_CHECK(base, "buffer buf" + std::to_string(r.buf) + " has no tensor");
    const loop::Buffer& buf = p.buffers[static_cast<size_t>(r.buf)];
    if (!fresh && r.sizes == buf.sizes && r.strides == buf.strides && r.offset == 0) {
      Py_INCREF(base);
      return base;
    }
    PyRef off = PyRef::steal(PyObject_CallMethodNoArgs(base, pl.storage_offset_name.get()));
    if (!off) return nullptr;
    PyRef args = PyRef::steal(Py_BuildValue("(OOOL)", base, int_tuple(r.sizes).get(), int_tuple(r.strides).get(),
                                            static_cast<long long>(PyLong_AsLongLong(off.get()) + r.offset)));
    return args ? PyObject_Call(pl.as_strided.get(), args.get(), nullptr) : nullptr;
  };

  int threads = 1;
  if (pl.any_parallel || pl.packed_linears > 0) {
    threads = static_cast<int>(config().cpu_threads);
    if (threads <= 0) {
      PyRef nt = PyRef::steal(PyObject_CallNoArgs(pl.get_num_threads.get()));
      if (!nt) return nullptr;
      threads = static_cast<int>(PyLong_AsLong(nt.get()));
    }
  }
  for (const loop::Step& s : p.steps) {
    if (s.kind == loop::Step::Kind::Kernel) {
      const loop::Kernel& k = p.kernels[static_cast<size_t>(s.index)];
      const auto& kb = pl.kernel_bufs[static_cast<size_t>(s.index)];
      RunArray<void*, 16> args(kb.size() + 1);
      for (size_t i = 0; i < kb.size(); ++i) args[i] = ptrs[static_cast<size_t>(kb[i])];
      // NB: the kernels of a symbolic program read the symbols' values after their buffers.
      args[kb.size()] = const_cast<int64_t*>(inst->bindings.data());
      KernelFn fn = prog_->module->kernels[static_cast<size_t>(s.index)];
      if (threads > 1 && k.work() >= kParallelWork) {
        PyThreadState* ts = PyEval_SaveThread();
        parallel_run(fn, args.data, k.root.extent, threads);
        PyEval_RestoreThread(ts);
      } else if (k.root.extent > 0) {
        fn(args.data, 0, k.root.extent);
      }
      continue;
    }
    const loop::ExternCall& e = p.externs[static_cast<size_t>(s.index)];
    const Plan::Extern& x = pl.externs[static_cast<size_t>(s.index)];
    for (auto& [node, ref] : e.operands) {
      PyObject* v = view_of(ref);
      if (!v) return nullptr;
      set_node(node, v);
    }
    PyRef result;
    const Node& nd = g.node(e.node);
    if (e.op == kNoOp) {
      PyObject* src = node_objs[static_cast<size_t>(nd.args[0].node)];
      FF_CHECK(src, "getitem of a value the runtime does not hold");
      result = PyRef::steal(PySequence_GetItem(src, static_cast<Py_ssize_t>(nd.args[1].i)));
    } else {
      if (!x.call) {
        PyErr_SetString(PyExc_RuntimeError, (op_def(e.op).target + " is not available in the installed torch").c_str());
        return nullptr;
      }
      if (x.packed) {
        PyRef a[3];
        for (size_t i = 0; i < 3; ++i)
          if (!(a[i] = PyRef::steal(value_to_py(e.args[i], node_objs.data))).get()) return nullptr;
        result = PyRef::steal(x.packed->call(a[0].get(), a[1].get(), a[2].get(), threads));
      }
      if (!result && e.result >= 0 && x.matmul && buffer_pool_on() && pl.bufs[static_cast<size_t>(e.result)].bytes >= kPoolMinBytes) {
        std::vector<PyRef> owned;
        std::vector<PyObject*> operands;
        for (const Value& v : e.args) {
          owned.push_back(PyRef::steal(value_to_py(v, node_objs.data)));
          if (!owned.back()) return nullptr;
          operands.push_back(owned.back().get());
        }
        result = PyRef::steal(matmul_into_pool(pl, op_def(e.op).name, operands, e.result));
      }
      if (!result) result = PyRef::steal(x.call->call(node_objs.data));
    }
    if (!result) return nullptr;
    if (e.result >= 0) {
      auto& pb = pl.bufs[static_cast<size_t>(e.result)];
      if (x.check) {
        PyObject* r = result.get();
        int ok = x.check->check(&r);
        if (ok < 0) return nullptr;
        if (!ok) {
          // NB: sizes that differ are no layout question (a copy would broadcast): the graph was
          // typed wrong, never to be papered over.
          PyRef shape = PyRef::steal(PyObject_GetAttrString(r, "shape"));
          int same = shape ? PyObject_RichCompareBool(shape.get(), pb.sizes.get(), Py_EQ) : -1;
          if (same < 0) return nullptr;
          if (!same) {
            PyErr_Format(PyExc_RuntimeError,
                         "framefuse: %s returned a result of sizes %R where the compiled graph expects %R (a framefuse "
                         "bug: please report it; framefuse.config.dynamic_kernels = False avoids it)",
                         op_def(e.op).name.c_str(), shape.get(), pb.sizes.get());
            return nullptr;
          }
          // The kernels after it assume the layout eager documented at trace time: copy into it.
          PyObject* args[3] = {pb.sizes.get(), pb.strides.get(), pb.dtype.get()};
          PyRef fixed = PyRef::steal(PyObject_Vectorcall(pl.empty_strided.get(), args, 2, pl.dtype_kwnames.get()));
          if (!fixed) return nullptr;
          PyRef done = PyRef::steal(PyObject_CallMethod(fixed.get(), "copy_", "O", result.get()));
          if (!done) return nullptr;
          result = std::move(fixed);
        }
      }
      Py_INCREF(result.get());
      Py_XSETREF(tensors[static_cast<size_t>(e.result)], result.get());
      if (pb.kernel_reads) {
        ptrs[static_cast<size_t>(e.result)] = tensor_data_ptr(result.get());
        if (PyErr_Occurred()) return nullptr;
      }
    }
    set_node(e.node, result.release());
  }
  for (const loop::Check& c : p.checks) {
    const void* flag = ptrs[static_cast<size_t>(c.buf)];
    if (flag && *static_cast<const int64_t*>(flag) != 0) {
      PyErr_SetString(PyExc_RuntimeError, c.message.c_str());
      return nullptr;
    }
  }
  for (auto& [node, ref] : p.outputs) {
    const loop::Buffer& ob = p.buffers[static_cast<size_t>(ref.buf)];
    // NB: a view is a new object in eager, even one of its base's own shape, whether the base is an
    // input or another value of the graph (an in-place call's result is its operand itself).
    const Node& on = g.node(node);
    bool fresh = ob.node != node && returns_new_view(on);
    PyObject* v = view_of(ref, fresh);
    if (!v) return nullptr;
    set_node(node, v);
  }
  for (const Plan::Restore& r : pl.restore) {
    PyObject* args[3] = {r.sizes.get(), r.strides.get(), r.dtype.get()};
    PyRef fixed = PyRef::steal(PyObject_Vectorcall(pl.empty_strided.get(), args, 2, pl.dtype_kwnames.get()));
    if (!fixed) return nullptr;
    PyRef done = PyRef::steal(PyObject_CallMethod(fixed.get(), "copy_", "O", node_objs[static_cast<size_t>(r.node)]));
    if (!done) return nullptr;
    set_node(r.node, fixed.release());
  }
  return value_to_py(g.output_value(), node_objs.data);
}

}  // namespace ff::inductor
