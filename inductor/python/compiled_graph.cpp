#include "inductor/python/compiled_graph.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "graph/op_registry.h"
#include "graph/python/graph_calls.h"
#include "inductor/parallel.h"
#include "inductor/python/buffer_pool.h"
#include "inductor/schedule.h"
#include "src/config.h"
#include "src/errors.h"
#include "src/logging.h"

namespace ff::inductor {

namespace {

// NB: below this many element operations a kernel runs on the calling thread: waking the
// OpenMP team costs more than it saves.
constexpr double kParallelWork = 32768;
constexpr int64_t kMinRootExtent = 256;

// An owned reference that decrefs on scope exit.
struct Ref {
  PyObject* p = nullptr;
  Ref() = default;
  explicit Ref(PyObject* o) : p(o) {}  // steals
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  Ref(Ref&& o) noexcept : p(o.p) { o.p = nullptr; }
  Ref& operator=(Ref&& o) noexcept {
    std::swap(p, o.p);
    return *this;
  }
  ~Ref() { Py_XDECREF(p); }
  PyObject* get() const { return p; }
  PyObject* release() {
    PyObject* r = p;
    p = nullptr;
    return r;
  }
  explicit operator bool() const { return p != nullptr; }
};

Ref int_tuple(const std::vector<int64_t>& v) {
  Ref t(PyTuple_New(static_cast<Py_ssize_t>(v.size())));
  for (size_t i = 0; i < v.size(); ++i) PyTuple_SET_ITEM(t.get(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(v[i]));
  return t;
}

void throw_py(const std::string& what) {
  std::string msg = what;
  if (PyErr_Occurred()) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (value) {
      Ref s(PyObject_Str(value));
      if (s) msg += ": " + std::string(PyUnicode_AsUTF8(s.get()));
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
  }
  throw InternalError(msg);
}

void* data_ptr(PyObject* t) {
  Ref r(PyObject_CallMethod(t, "data_ptr", nullptr));
  if (!r) return nullptr;
  return PyLong_AsVoidPtr(r.get());
}

std::string value_key(const Value& v) {
  std::string s = std::to_string(static_cast<int>(v.kind)) + ":";
  switch (v.kind) {
    case Value::Kind::Bool: s += v.b ? "1" : "0"; break;
    case Value::Kind::Int: s += std::to_string(v.i); break;
    case Value::Kind::Float: {
      char b[40];
      std::snprintf(b, sizeof b, "%a", v.f);
      s += b;
      break;
    }
    case Value::Kind::Str: case Value::Kind::MemoryFormat: case Value::Kind::Layout: s += v.s; break;
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
    for (int64_t x : m.tensor.sizes) s += std::to_string(x) + ",";
    s += "/";
    for (int64_t x : m.tensor.strides) s += std::to_string(x) + ",";
    s += "]";
  }
  for (const ValueMeta& i : m.items) s += "(" + meta_key(i) + ")";
  return s;
}

std::mutex g_cache_mu;
std::map<std::string, std::shared_ptr<const CompiledProgram>>& memory_cache() {
  static auto* m = new std::map<std::string, std::shared_ptr<const CompiledProgram>>;
  return *m;
}

std::shared_ptr<const CompiledProgram> build(const Graph& g, const std::string& key) {
  auto cp = std::make_shared<CompiledProgram>();
  cp->graph = g;
  cp->key = key;
  cp->program = compile_to_loop_ir(g);
  // NB: enough root iterations for every thread (and for load balance between them).
  {
    // NB: the text form only when it is printed: it costs as much as a pass.
    bool print_ir = log_enabled(LogArtifact::output_code);
    std::string before = print_ir ? loop::program_str(cp->program) : std::string();
    std::vector<std::string> inplace_log;
    cp->program = collapse_outer_loops(write_epilogues_in_place(reuse_reduced_values(cp->program), &inplace_log), kMinRootExtent);
    if (log_enabled(LogArtifact::schedule) && !inplace_log.empty()) {
      std::string msg = "epilogues written in place:\n";
      for (auto& l : inplace_log) msg += "  " + l + "\n";
      log_emit(LogArtifact::schedule, msg);
    }
    if (print_ir && loop::program_str(cp->program) != before)
      log_emit(LogArtifact::output_code, "CPU loop IR (reduced values reused, outer loops collapsed for threads):\n" + loop::program_str(cp->program));
  }
  if (!cp->program.kernels.empty()) {
    if (!cpu_codegen_available())
      throw Unsupported("framefuse was built without LLVM: CPU graphs run on the reference runner");
    CpuCompileOptions opt;
    opt.cache_dir = disk_cache_dir();
    opt.want_llvm_ir = log_enabled(LogArtifact::output_code) && log_enabled(LogComponent::inductor, LogLevel::Debug);
    cp->module = compile_cpu(cp->program, opt);
    if (opt.want_llvm_ir) log_emit(LogArtifact::output_code, "LLVM IR:\n" + cp->module->llvm_ir);
    if (log_enabled(LogArtifact::schedule))
      log_emit(LogArtifact::schedule, "compiled " + std::to_string(cp->program.kernels.size()) + " kernel(s) in " +
                                          std::to_string(cp->module->compile_ms) + " ms" +
                                          (cp->module->from_disk_cache ? " (object code from the disk cache)" : "") +
                                          "; threads: " + parallel_backend());
  }
  return cp;
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

std::string disk_cache_dir() {
  if (!config().disk_cache) return "";
  std::string base = config().cache_dir;
  if (base.empty()) {
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) base = std::string(x) + "/framefuse";
    else if (const char* h = std::getenv("HOME"); h && *h) base = std::string(h) + "/.cache/framefuse";
    else return "";
  }
  return base + "/inductor-cpu";
}

void clear_memory_cache() {
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    memory_cache().clear();
  }
  buffer_pool_clear();
}

// Python objects prepared once per compiled graph.
struct CompiledGraph::Plan {
  Ref torch, tensor_type, empty_strided, empty, as_strided, get_num_threads, uint8, matmul, addmm;
  struct Buf {
    Ref sizes, strides, kwargs;  // kwargs: {"dtype": ...}
    bool allocate = false;       // Intermediate/Output that some step uses, not in a slot
    int64_t bytes = 0;           // what its layout spans
    bool contiguous = false;     // row-major, dense
  };
  std::vector<Buf> bufs;
  std::vector<int> input_buf;  // placeholder position -> buffer (-1: not a tensor input)
  std::vector<NodeId> placeholders;
  std::vector<std::vector<int>> kernel_bufs;
};

CompiledGraph::CompiledGraph(const Graph& g) {
  std::string key = graph_structure_key(g);
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    auto it = memory_cache().find(key);
    if (it != memory_cache().end()) {
      prog_ = it->second;
      from_memory_cache_ = true;
    }
  }
  if (!prog_) {
    prog_ = build(g, key);
    std::lock_guard<std::mutex> lock(g_cache_mu);
    memory_cache()[key] = prog_;
  }
  const loop::Program& p = prog_->program;
  plan_ = std::make_unique<Plan>();
  Plan& pl = *plan_;
  pl.torch = Ref(PyImport_ImportModule("torch"));
  if (!pl.torch) throw_py("cannot import torch");
  auto attr = [&](PyObject* o, const char* name) {
    Ref r(PyObject_GetAttrString(o, name));
    if (!r) throw_py(std::string("torch has no ") + name);
    return r;
  };
  pl.tensor_type = attr(pl.torch.get(), "Tensor");
  pl.empty_strided = attr(pl.torch.get(), "empty_strided");
  pl.empty = attr(pl.torch.get(), "empty");
  pl.as_strided = attr(pl.torch.get(), "as_strided");
  pl.get_num_threads = attr(pl.torch.get(), "get_num_threads");
  pl.uint8 = attr(pl.torch.get(), "uint8");
  pl.matmul = attr(pl.torch.get(), "matmul");
  pl.addmm = attr(pl.torch.get(), "addmm");
  std::vector<bool> used(p.buffers.size(), false);
  for (const auto& k : p.kernels)
    for (int b : k.buffers()) used[static_cast<size_t>(b)] = true;
  for (const auto& e : p.externs)
    for (auto& [n, r] : e.operands) used[static_cast<size_t>(r.buf)] = true;
  for (auto& [n, r] : p.outputs) used[static_cast<size_t>(r.buf)] = true;
  pl.bufs.resize(p.buffers.size());
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const loop::Buffer& buf = p.buffers[b];
    auto& pb = pl.bufs[b];
    pb.sizes = int_tuple(buf.sizes);
    pb.strides = int_tuple(buf.strides);
    pb.kwargs = Ref(PyDict_New());
    Ref dt = attr(pl.torch.get(), std::string(dtype_name(buf.dtype)).c_str());
    PyDict_SetItemString(pb.kwargs.get(), "dtype", dt.get());
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
  pl.placeholders = prog_->graph.placeholders();
  pl.input_buf.assign(pl.placeholders.size(), -1);
  for (size_t b = 0; b < p.buffers.size(); ++b)
    if (p.buffers[b].role == loop::BufferRole::Input) pl.input_buf[static_cast<size_t>(p.buffers[b].input)] = static_cast<int>(b);
  for (const auto& k : p.kernels) pl.kernel_bufs.push_back(k.buffers());
}

CompiledGraph::~CompiledGraph() = default;

namespace {

// NB: cpu_buffer_pool_mb = 0 also takes the pool out of the allocation path: every tensor then
// comes from torch's allocator (e.g. for callers that grow outputs with resize_ or move them to
// shared memory, which a pooled tensor's fixed-size storage does not allow).
bool pool_on() { return config().cpu_buffer_pool_mb > 0; }

bool requires_grad(PyObject* t) {
  if (t == Py_None) return false;
  Ref r(PyObject_GetAttrString(t, "requires_grad"));
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
PyObject* CompiledGraph::matmul_into_pool(const std::string& op, const std::vector<PyObject*>& operands, int result) {
  Plan& pl = *plan_;
  const auto& pb = pl.bufs[static_cast<size_t>(result)];
  if (!pool_on() || pb.bytes < kPoolMinBytes || !pb.contiguous) return nullptr;
  for (PyObject* o : operands)
    if (requires_grad(o)) return nullptr;
  PyObject* dtype = PyDict_GetItemString(pb.kwargs.get(), "dtype");
  Ref out(pooled_empty_strided(pb.sizes.get(), pb.strides.get(), dtype, pb.bytes));
  if (!out) {
    PyErr_Clear();
    return nullptr;
  }
  Ref kw(PyDict_New());
  Ref done;
  if (op == "linear") {
    PyObject *x = operands[0], *w = operands[1], *bias = operands[2];
    Ref wt(PyObject_CallMethod(w, "t", nullptr));
    if (!wt) {
      PyErr_Clear();
      return nullptr;
    }
    if (bias == Py_None) {
      PyDict_SetItemString(kw.get(), "out", out.get());
      Ref args(PyTuple_Pack(2, x, wt.get()));
      done = Ref(PyObject_Call(pl.matmul.get(), args.get(), kw.get()));
    } else {
      // NB: what F.linear does for contiguous inputs: one addmm over the flattened rows.
      Ref k(PyObject_CallMethod(wt.get(), "size", "i", 0)), n(PyObject_CallMethod(wt.get(), "size", "i", 1));
      Ref x2(k ? PyObject_CallMethod(x, "reshape", "(iO)", -1, k.get()) : nullptr);
      Ref o2(x2 && n ? PyObject_CallMethod(out.get(), "view", "(iO)", -1, n.get()) : nullptr);
      if (!o2) {
        PyErr_Clear();
        return nullptr;
      }
      PyDict_SetItemString(kw.get(), "out", o2.get());
      Ref args(PyTuple_Pack(3, bias, x2.get(), wt.get()));
      done = Ref(PyObject_Call(pl.addmm.get(), args.get(), kw.get()));
    }
  } else {
    PyDict_SetItemString(kw.get(), "out", out.get());
    Ref args(PyTuple_Pack(2, operands[0], operands[1]));
    done = Ref(PyObject_Call(pl.matmul.get(), args.get(), kw.get()));
  }
  if (!done) {
    PyErr_Clear();  // e.g. a dtype out= does not accept: the ordinary call reports real errors
    return nullptr;
  }
  return out.release();
}

PyObject* CompiledGraph::run(PyObject* const* inputs, size_t n) {
  const loop::Program& p = prog_->program;
  const Graph& g = prog_->graph;
  Plan& pl = *plan_;
  size_t nb = p.buffers.size();
  // Guards on what the code was compiled for; anything else runs on the reference runner.
  bool match = n == pl.placeholders.size();
  for (size_t i = 0; match && i < n; ++i) {
    int b = pl.input_buf[i];
    if (b < 0) continue;
    PyObject* t = inputs[i];
    const auto& pb = pl.bufs[static_cast<size_t>(b)];
    if (PyObject_IsInstance(t, pl.tensor_type.get()) != 1) { match = false; break; }
    Ref dt(PyObject_GetAttrString(t, "dtype")), shape(PyObject_GetAttrString(t, "shape")),
        stride(PyObject_CallMethod(t, "stride", nullptr)), cpu(PyObject_GetAttrString(t, "is_cpu"));
    if (!dt || !shape || !stride || !cpu) return nullptr;
    PyObject* want_dt = PyDict_GetItemString(pb.kwargs.get(), "dtype");
    if (dt.get() != want_dt || cpu.get() != Py_True || PyObject_RichCompareBool(shape.get(), pb.sizes.get(), Py_EQ) != 1 ||
        PyObject_RichCompareBool(stride.get(), pb.strides.get(), Py_EQ) != 1)
      match = false;
  }
  if (!match) {
    if (!warned_ && log_enabled(LogArtifact::perf_hints))
      log_emit(LogArtifact::perf_hints, "inductor: inputs differ from the ones the graph was compiled for (sizes, strides, dtype or device); running it on the reference runner");
    warned_ = true;
    if (!fallback_) fallback_ = std::make_unique<ReferenceRunner>(g);
    return fallback_->run(inputs, n);
  }

  std::vector<Ref> tensors(nb);
  std::vector<void*> ptrs(nb, nullptr);
  std::vector<Ref> slots(p.slot_bytes.size());
  std::vector<Ref> node_objs(g.size());
  for (size_t i = 0; i < n; ++i) {
    Py_INCREF(inputs[i]);
    node_objs[static_cast<size_t>(pl.placeholders[i])] = Ref(inputs[i]);
    int b = pl.input_buf[i];
    if (b < 0) continue;
    Py_INCREF(inputs[i]);
    tensors[static_cast<size_t>(b)] = Ref(inputs[i]);
    ptrs[static_cast<size_t>(b)] = data_ptr(inputs[i]);
    if (PyErr_Occurred()) return nullptr;
  }
  for (size_t s = 0; s < slots.size(); ++s) {
    int64_t bytes = std::max<int64_t>(p.slot_bytes[s], 1);
    Ref size(PyTuple_Pack(1, Ref(PyLong_FromLongLong(bytes)).get()));
    if (pool_on() && bytes >= kPoolMinBytes) {
      Ref stride(Py_BuildValue("(i)", 1));
      slots[s] = Ref(pooled_empty_strided(size.get(), stride.get(), pl.uint8.get(), bytes));
    } else {
      Ref kw(PyDict_New());
      PyDict_SetItemString(kw.get(), "dtype", pl.uint8.get());
      slots[s] = Ref(PyObject_Call(pl.empty.get(), size.get(), kw.get()));
    }
    if (!slots[s]) return nullptr;
  }
  for (size_t b = 0; b < nb; ++b) {
    if (!p.slot.empty() && p.slot[b] >= 0) {
      ptrs[b] = data_ptr(slots[static_cast<size_t>(p.slot[b])].get());
      continue;
    }
    if (!pl.bufs[b].allocate) continue;
    if (pool_on() && pl.bufs[b].bytes >= kPoolMinBytes) {
      tensors[b] = Ref(pooled_empty_strided(pl.bufs[b].sizes.get(), pl.bufs[b].strides.get(),
                                            PyDict_GetItemString(pl.bufs[b].kwargs.get(), "dtype"), pl.bufs[b].bytes));
    } else {
      Ref args(PyTuple_Pack(2, pl.bufs[b].sizes.get(), pl.bufs[b].strides.get()));
      tensors[b] = Ref(PyObject_Call(pl.empty_strided.get(), args.get(), pl.bufs[b].kwargs.get()));
    }
    if (!tensors[b]) return nullptr;
    ptrs[b] = data_ptr(tensors[b].get());
  }
  if (PyErr_Occurred()) return nullptr;

  auto view_of = [&](const loop::TensorRef& r) -> Ref {
    PyObject* base = tensors[static_cast<size_t>(r.buf)].get();
    FF_CHECK(base, "buffer buf" + std::to_string(r.buf) + " has no tensor");
    const loop::Buffer& buf = p.buffers[static_cast<size_t>(r.buf)];
    if (r.sizes == buf.sizes && r.strides == buf.strides && r.offset == 0) {
      Py_INCREF(base);
      return Ref(base);
    }
    Ref off(PyObject_CallMethod(base, "storage_offset", nullptr));
    if (!off) return Ref();
    Ref args(Py_BuildValue("(OOOL)", base, int_tuple(r.sizes).get(), int_tuple(r.strides).get(),
                           static_cast<long long>(PyLong_AsLongLong(off.get()) + r.offset)));
    return Ref(PyObject_Call(pl.as_strided.get(), args.get(), nullptr));
  };

  int threads = static_cast<int>(config().cpu_threads);
  if (threads <= 0) {
    Ref nt(PyObject_CallNoArgs(pl.get_num_threads.get()));
    if (!nt) return nullptr;
    threads = static_cast<int>(PyLong_AsLong(nt.get()));
  }
  std::vector<PyObject*> node_ptrs(g.size(), nullptr);
  for (const loop::Step& s : p.steps) {
    if (s.kind == loop::Step::Kind::Kernel) {
      const loop::Kernel& k = p.kernels[static_cast<size_t>(s.index)];
      std::vector<void*> args;
      for (int b : pl.kernel_bufs[static_cast<size_t>(s.index)]) args.push_back(ptrs[static_cast<size_t>(b)]);
      KernelFn fn = prog_->module->kernels[static_cast<size_t>(s.index)];
      if (threads > 1 && k.work() >= kParallelWork) {
        PyThreadState* ts = PyEval_SaveThread();
        parallel_run(fn, args.data(), k.root.extent, threads);
        PyEval_RestoreThread(ts);
      } else if (k.root.extent > 0) {
        fn(args.data(), 0, k.root.extent);
      }
      continue;
    }
    const loop::ExternCall& e = p.externs[static_cast<size_t>(s.index)];
    for (auto& [node, ref] : e.operands) {
      node_objs[static_cast<size_t>(node)] = view_of(ref);
      if (!node_objs[static_cast<size_t>(node)]) return nullptr;
    }
    for (size_t i = 0; i < node_objs.size(); ++i) node_ptrs[i] = node_objs[i].get();
    Ref result;
    const Node& nd = g.node(e.node);
    if (e.op == kNoOp) {
      PyObject* src = node_ptrs[static_cast<size_t>(nd.args[0].node)];
      FF_CHECK(src, "getitem of a value the runtime does not hold");
      result = Ref(PySequence_GetItem(src, static_cast<Py_ssize_t>(nd.args[1].i)));
    } else {
      const OpDef& op = op_def(e.op);
      PyObject* fn = op_callable(e.op);
      if (!fn) {
        PyErr_SetString(PyExc_RuntimeError, (op.target + " is not available in the installed torch").c_str());
        return nullptr;
      }
      if (e.result >= 0 && (op.name == "linear" || op.name == "matmul" || op.name == "op_matmul" || op.name == "mm" || op.name == "bmm")) {
        std::vector<Ref> owned;
        std::vector<PyObject*> operands;
        for (const Value& v : e.args) {
          owned.emplace_back(value_to_py(v, node_ptrs.data()));
          if (!owned.back()) return nullptr;
          operands.push_back(owned.back().get());
        }
        result = Ref(matmul_into_pool(op.name, operands, e.result));
      }
      if (!result) {
      CallArgs ca = call_args(op, e.args);
      Ref pos(PyTuple_New(static_cast<Py_ssize_t>(ca.positional.size())));
      for (size_t i = 0; i < ca.positional.size(); ++i) {
        PyObject* v = value_to_py(*ca.positional[i], node_ptrs.data());
        if (!v) return nullptr;
        PyTuple_SET_ITEM(pos.get(), static_cast<Py_ssize_t>(i), v);
      }
      Ref kw(PyDict_New());
      for (auto& [name, val] : ca.keywords) {
        Ref v(value_to_py(*val, node_ptrs.data()));
        if (!v) return nullptr;
        PyDict_SetItemString(kw.get(), name.c_str(), v.get());
      }
      result = Ref(PyObject_Call(fn, pos.get(), kw.get()));
      }
    }
    if (!result) return nullptr;
    if (e.result >= 0) {
      auto& pb = pl.bufs[static_cast<size_t>(e.result)];
      Ref dt(PyObject_GetAttrString(result.get(), "dtype")), shape(PyObject_GetAttrString(result.get(), "shape")),
          stride(PyObject_CallMethod(result.get(), "stride", nullptr));
      if (!dt || !shape || !stride) return nullptr;
      if (dt.get() != PyDict_GetItemString(pb.kwargs.get(), "dtype") || PyObject_RichCompareBool(shape.get(), pb.sizes.get(), Py_EQ) != 1 ||
          PyObject_RichCompareBool(stride.get(), pb.strides.get(), Py_EQ) != 1) {
        // The kernels after it assume the layout eager documented at trace time: copy into it.
        Ref args(PyTuple_Pack(2, pb.sizes.get(), pb.strides.get()));
        Ref fixed(PyObject_Call(pl.empty_strided.get(), args.get(), pb.kwargs.get()));
        if (!fixed) return nullptr;
        Ref ok(PyObject_CallMethod(fixed.get(), "copy_", "O", result.get()));
        if (!ok) return nullptr;
        result = std::move(fixed);
      }
      Py_INCREF(result.get());
      tensors[static_cast<size_t>(e.result)] = Ref(result.get());
      ptrs[static_cast<size_t>(e.result)] = data_ptr(result.get());
      if (PyErr_Occurred()) return nullptr;
    }
    node_objs[static_cast<size_t>(e.node)] = std::move(result);
  }
  for (auto& [node, ref] : p.outputs) {
    node_objs[static_cast<size_t>(node)] = view_of(ref);
    if (!node_objs[static_cast<size_t>(node)]) return nullptr;
  }
  for (size_t i = 0; i < node_objs.size(); ++i) node_ptrs[i] = node_objs[i].get();
  return value_to_py(g.output_value(), node_ptrs.data());
}

}  // namespace ff::inductor
