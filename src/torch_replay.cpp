// framefuse._torch_replay: the replayed half of mode="reduce-overhead" for training graphs
// (framefuse.cuda.TrainingGraphReplay) as a C++ autograd node.
//
// A recording is a forward and a backward CUDA graph over static buffers. Each call checks its
// inputs against the recording, copies the copied inputs in, launches the forward, clones the
// outputs and hangs one autograd node on them; the node's backward copies the incoming gradients
// in, launches the backward and hands out a copy of the gradients. Through Python
// (torch.autograd.Function) the same work costs more host time than the small kernels of a
// training step take on the GPU: the forward and backward here hold no GIL and make no Python
// call, and the graphs are launched straight through the driver (_C's loader, through the
// capsule of inductor/cuda/graph_launch_api.h).
//
// Built against the torch found when framefuse was configured (its C++ headers, libc10,
// libtorch_cpu and libtorch_python) and imported only under that same torch; framefuse.cuda keeps
// its Python replay when the module is missing. Tests drive the same node on the CPU with Python
// callables in place of the graph launches (device -1).
#include <Python.h>

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "inductor/cuda/graph_launch_api.h"
#include "src/base/py_ref.h"
#include "src/torch_build_check.h"

#ifndef FF_TORCH_VERSION
#error "FF_TORCH_VERSION (torch.__version__ at configure time) must be defined"
#endif

namespace {

using ff::PyRef;
using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;
// NB: torch 2.13 holds nodes in c10::intrusive_ptr, earlier releases in std::shared_ptr.
using NodePtr = decltype(torch::autograd::Edge{}.function);

const ff_graph_launch_api* g_launch = nullptr;  // from framefuse._C.cuda, when this torch has CUDA

// Why a call was not replayed (the Python side logs the reason and runs the graph eagerly).
enum Refused : int { kMismatch = 1,
                     kPending = 2,
                     kBusy = 3 };

struct Gil {
  PyGILState_STATE state = PyGILState_Ensure();
  ~Gil() { PyGILState_Release(state); }
};

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

[[noreturn]] void raise_python() {
  python_error err;
  err.persist();
  throw std::move(err);
}

// A recorded graph: an instantiated cudaGraphExec_t, or (device -1) a Python callable.
struct Launch {
  void* exec = nullptr;
  PyRef fn;
};

struct Meta {
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
  c10::Device device{c10::kCPU};
  bool requires_grad = false;
};

// Set when the forward's backward has run; owned by the node, so that a forward whose autograd
// graph is gone no longer counts as pending.
struct Pending {
  std::atomic<bool> done{false};
};

struct State {
  std::mutex mu;
  int device = -1;
  Launch fwd, bwd;
  Py_ssize_t n_inputs = 0;
  std::vector<Py_ssize_t> tensor_at;  // input positions holding tensors (the node's edges, in order)
  struct Fixed {
    Py_ssize_t at;
    PyRef obj;
    void* ptr;
    bool requires_grad;
  };
  std::vector<Fixed> fixed;  // parameters read in place: the same objects at the same addresses
  struct Copied {
    Py_ssize_t at;
    at::Tensor buf;
    Meta meta;
  };
  std::vector<Copied> copied;  // inputs copied into static buffers
  std::vector<std::pair<Py_ssize_t, PyRef>> consts;
  std::vector<at::Tensor> outputs;  // static outputs
  std::vector<size_t> diff_out;     // outputs with a gradient, in the node's input order
  std::vector<at::Tensor> grad_in;  // static incoming gradients, one per diff_out
  std::vector<size_t> need_edge;    // per static gradient: its edge (position in tensor_at)
  std::vector<at::Tensor> grads;    // static gradients (undefined where unused)
  at::Tensor flat;                  // every present gradient in one buffer, or undefined
  std::vector<int64_t> sizes;       // numel of each present gradient, in flat's order (from grads)
  std::vector<std::vector<int64_t>> shapes;  // per static gradient; empty where 1-d (from grads)
  PyRef recompute;  // (inputs, grad_outs, create_graph) -> gradients of need, on the caller's tensors
  PyRef keep;       // what keeps the recording (graphs, memory pool) alive
  std::atomic<uint64_t> gen{0};               // forwards replayed (changed under mu)
  std::atomic<uint64_t> backward_replays{0};  // backwards replayed, not recomputed (under mu)
  std::weak_ptr<Pending> last;  // the last replayed forward with an autograd graph
  std::optional<c10::Stream> stream;  // where the last replay ran

  // The current stream, made to wait for the last replay's where that was another stream: the
  // next replay overwrites the buffers that one read and wrote. Under mu.
  std::optional<c10::Stream> enter_stream() {
    if (device < 0) return std::nullopt;
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    c10::Stream cur = impl.getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
    if (stream && *stream != cur) {
      c10::Event ev(c10::DeviceType::CUDA);
      ev.record(*stream);
      ev.block(cur);
    }
    stream = cur;
    return cur;
  }

  void launch(const Launch& l, const std::optional<c10::Stream>& on, bool have_gil) {
    if (device < 0) {
      std::optional<Gil> gil;
      if (!have_gil) gil.emplace();
      PyObject* r = PyObject_CallNoArgs(l.fn.get());
      if (!r) raise_python();
      Py_DECREF(r);
      return;
    }
    TORCH_CHECK(g_launch, "framefuse: CUDA graph launches need framefuse._C.cuda (not loaded)");
    char err[512] = {0};
    TORCH_CHECK(g_launch->graph_launch(device, l.exec, on->native_handle(), err, sizeof err) == 0, "framefuse: ", err);
  }
};

// NB: a template, so that only the branch of this torch's node pointer is instantiated.
template <class T, class... Args>
NodePtr make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<Node>>)
    return std::shared_ptr<T>(new T(std::forward<Args>(args)...));
  else
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
}

// NB: the last reference to a State may drop on autograd's worker thread, without the GIL: it is
// deleted under the GIL, and its Python references are leaked once the interpreter is finalizing.
void delete_state(State* s) {
  if (!Py_IsInitialized() || finalizing()) {
    (void)s->fwd.fn.release();
    (void)s->bwd.fn.release();
    for (auto& f : s->fixed) (void)f.obj.release();
    for (auto& c : s->consts) (void)c.second.release();
    (void)s->recompute.release();
    (void)s->keep.release();
    delete s;
    return;
  }
  Gil gil;
  delete s;
}

struct ReplayBackward final : Node {
  std::shared_ptr<State> st;
  uint64_t gen;
  std::shared_ptr<Pending> pending = std::make_shared<Pending>();
  std::vector<SavedVariable> saved;  // the tensor inputs: autograd's in-place checks, and the recompute

  ReplayBackward(std::shared_ptr<State> s, uint64_t g) : st(std::move(s)), gen(g) {}
  std::string name() const override { return "framefuse::TrainingReplayBackward"; }
  void release_variables() override {
    for (auto& s : saved) s.reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    std::vector<at::Tensor> inputs;
    inputs.reserve(saved.size());
    for (auto& s : saved) inputs.push_back(s.unpack());  // raises as eager does after in-place changes
    bool create_graph = c10::GradMode::is_enabled();  // then the eager ops' own graph is needed
    pending->done = true;
    if (!create_graph) {
      std::lock_guard<std::mutex> lock(st->mu);
      if (gen == st->gen) return replay(grads);
    }
    return recompute(inputs, grads, create_graph);  // a later forward overwrote the activations
  }

  variable_list replay(const variable_list& grads) {
    State& s = *st;
    auto on = s.enter_stream();
    {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < s.grad_in.size(); ++i) {
        if (i < grads.size() && grads[i].defined())
          s.grad_in[i].copy_(grads[i]);
        else
          s.grad_in[i].zero_();
      }
    }
    s.launch(s.bwd, on, /*have_gil=*/false);
    ++s.backward_replays;
    variable_list out(s.tensor_at.size());
    at::NoGradGuard no_grad;
    if (s.flat.defined()) {
      std::vector<at::Tensor> parts = s.flat.clone().split_with_sizes(s.sizes);
      size_t p = 0;
      for (size_t j = 0; j < s.grads.size(); ++j) {
        if (!s.grads[j].defined()) continue;
        at::Tensor g = parts[p++];
        out[s.need_edge[j]] = s.shapes[j].empty() ? g : g.view(s.shapes[j]);
      }
    } else {
      for (size_t j = 0; j < s.grads.size(); ++j)
        if (s.grads[j].defined()) out[s.need_edge[j]] = s.grads[j].clone();
    }
    return out;
  }

  // The eager ops again, on the caller's tensors, through framefuse.cuda (under the GIL).
  variable_list recompute(const std::vector<at::Tensor>& inputs, const variable_list& grads, bool create_graph) {
    State& s = *st;
    Gil gil;
    PyObject* in = PyList_New(s.n_inputs);
    PyObject* gout = PyList_New(static_cast<Py_ssize_t>(s.outputs.size()));
    PyObject* res = nullptr;
    if (in && gout) {
      for (Py_ssize_t i = 0; i < s.n_inputs; ++i) {
        Py_INCREF(Py_None);
        PyList_SET_ITEM(in, i, Py_None);
      }
      for (size_t j = 0; j < s.tensor_at.size(); ++j)
        PyList_SetItem(in, s.tensor_at[j], THPVariable_Wrap(inputs[j]));
      for (auto& [at, v] : s.consts) {
        Py_INCREF(v.get());
        PyList_SetItem(in, at, v.get());
      }
      for (size_t k = 0; k < s.outputs.size(); ++k) {
        Py_INCREF(Py_None);
        PyList_SET_ITEM(gout, static_cast<Py_ssize_t>(k), Py_None);
      }
      for (size_t i = 0; i < s.diff_out.size(); ++i) {
        at::Tensor g = i < grads.size() && grads[i].defined() ? grads[i] : at::zeros_like(s.outputs[s.diff_out[i]]);
        PyList_SetItem(gout, static_cast<Py_ssize_t>(s.diff_out[i]), THPVariable_Wrap(g));
      }
      res = PyObject_CallFunctionObjArgs(s.recompute.get(), in, gout, create_graph ? Py_True : Py_False, nullptr);
    }
    Py_XDECREF(in);
    Py_XDECREF(gout);
    if (!res) raise_python();
    variable_list out(s.tensor_at.size());
    PyObject* seq = PySequence_Fast(res, "framefuse: the recompute returned no sequence");
    Py_DECREF(res);
    if (!seq) raise_python();
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t j = 0; j < n && static_cast<size_t>(j) < s.need_edge.size(); ++j) {
      PyObject* g = PySequence_Fast_GET_ITEM(seq, j);
      if (g != Py_None && THPVariable_Check(g)) out[s.need_edge[j]] = THPVariable_Unpack(g);
    }
    Py_DECREF(seq);
    return out;
  }
};

// ---- the Python object --------------------------------------------------------------------------

struct ReplayObject {
  PyObject_HEAD std::shared_ptr<State>* st;
};

bool same_meta(const at::Tensor& t, const Meta& m) {
  return t.sizes().equals(m.sizes) && t.strides().equals(m.strides) && t.scalar_type() == m.dtype &&
         t.device() == m.device && t.requires_grad() == m.requires_grad;
}

// Whether this call's inputs fit the recording.
bool matches(const State& s, PyObject* inputs) {
  if (PyTuple_GET_SIZE(inputs) != s.n_inputs) return false;
  for (const auto& f : s.fixed) {
    PyObject* o = PyTuple_GET_ITEM(inputs, f.at);
    if (o != f.obj.get()) return false;
    const at::Tensor& t = THPVariable_Unpack(o);
    if (t.data_ptr() != f.ptr || t.requires_grad() != f.requires_grad) return false;
  }
  for (const auto& c : s.copied) {
    PyObject* o = PyTuple_GET_ITEM(inputs, c.at);
    if (!THPVariable_Check(o) || !same_meta(THPVariable_Unpack(o), c.meta)) return false;
  }
  for (const auto& [at, v] : s.consts) {
    PyObject* o = PyTuple_GET_ITEM(inputs, at);
    if (THPVariable_Check(o)) return false;
    int eq = PyObject_RichCompareBool(o, v.get(), Py_EQ);
    if (eq < 0) PyErr_Clear();
    if (eq != 1) return false;
  }
  return true;
}

// replay(inputs: tuple) -> tuple of outputs, or why not (the module's MISMATCH: the inputs do not
// fit the recording; PENDING: the last replayed forward's backward has not run; BUSY: another
// thread is replaying).
PyObject* replay_call(PyObject* self, PyObject* inputs) {
  HANDLE_TH_ERRORS
  if (!PyTuple_Check(inputs)) {
    PyErr_SetString(PyExc_TypeError, "framefuse._torch_replay: the inputs must be a tuple");
    return nullptr;
  }
  std::shared_ptr<State> st = *reinterpret_cast<ReplayObject*>(self)->st;
  State& s = *st;
  if (!matches(s, inputs)) return PyLong_FromLong(kMismatch);
  std::unique_lock<std::mutex> lock(s.mu, std::try_to_lock);
  if (!lock.owns_lock()) return PyLong_FromLong(kBusy);
  if (auto prev = s.last.lock(); prev && !prev->done) return PyLong_FromLong(kPending);

  std::vector<at::Tensor> tensors;
  tensors.reserve(s.tensor_at.size());
  bool any_grad = false;
  for (Py_ssize_t at : s.tensor_at) {
    tensors.push_back(THPVariable_Unpack(PyTuple_GET_ITEM(inputs, at)));
    any_grad = any_grad || tensors.back().requires_grad();
  }
  bool grad = any_grad && c10::GradMode::is_enabled();
  auto on = s.enter_stream();
  std::vector<at::Tensor> outs;
  {
    at::NoGradGuard no_grad;
    for (const auto& c : s.copied) c.buf.copy_(THPVariable_Unpack(PyTuple_GET_ITEM(inputs, c.at)));
    s.launch(s.fwd, on, /*have_gil=*/true);
    outs.reserve(s.outputs.size());
    for (const auto& o : s.outputs) outs.push_back(o.clone());
  }
  uint64_t gen = ++s.gen;
  s.last.reset();
  if (grad) {
    NodePtr node = make_node<ReplayBackward>(st, gen);
    auto* n = static_cast<ReplayBackward*>(node.get());
    n->set_next_edges(torch::autograd::collect_next_edges(tensors));
    n->saved.reserve(tensors.size());
    for (const auto& t : tensors) n->saved.emplace_back(t, /*is_output=*/false);
    for (size_t k : s.diff_out) torch::autograd::set_history(outs[k], node);
    s.last = n->pending;
  }
  lock.unlock();
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(outs.size()));
  if (!tuple) return nullptr;
  for (size_t k = 0; k < outs.size(); ++k) {
    PyObject* o = THPVariable_Wrap(std::move(outs[k]));
    if (!o) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(k), o);
  }
  return tuple;
  END_HANDLE_TH_ERRORS
}

PyObject* replay_generation(PyObject* self, void*) {
  return PyLong_FromUnsignedLongLong((*reinterpret_cast<ReplayObject*>(self)->st)->gen.load());
}

PyObject* replay_backwards(PyObject* self, void*) {
  return PyLong_FromUnsignedLongLong((*reinterpret_cast<ReplayObject*>(self)->st)->backward_replays.load());
}

void replay_dealloc(PyObject* self) {
  auto* r = reinterpret_cast<ReplayObject*>(self);
  delete r->st;  // pending nodes keep the state (and the recording) alive
  Py_TYPE(self)->tp_free(self);
}

PyGetSetDef kReplayGetSet[] = {
    {"generation", replay_generation, nullptr, "forwards replayed so far", nullptr},
    {"backward_replays", replay_backwards, nullptr, "backwards replayed so far (not recomputed)", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyObject* replay_tp_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  if ((kwargs && PyDict_GET_SIZE(kwargs)) || PyTuple_GET_SIZE(args) != 1) {
    PyErr_SetString(PyExc_TypeError, "framefuse._torch_replay.TrainingReplay takes one tuple of inputs");
    return nullptr;
  }
  return replay_call(self, PyTuple_GET_ITEM(args, 0));
}

PyTypeObject kReplayType = {PyVarObject_HEAD_INIT(nullptr, 0) "framefuse._torch_replay.TrainingReplay"};

// ---- construction -----------------------------------------------------------------------------

PyObject* item(PyObject* spec, const char* key) {
  PyObject* v = PyDict_GetItemString(spec, key);  // borrowed
  if (!v) PyErr_Format(PyExc_KeyError, "framefuse._torch_replay: spec has no %s", key);
  return v;
}

// Calls fn(element) for each element of spec[key] (a sequence); false with a Python error set.
template <class F>
bool each(PyObject* spec, const char* key, F&& fn) {
  PyObject* v = item(spec, key);
  if (!v) return false;
  PyObject* seq = PySequence_Fast(v, "framefuse._torch_replay: expected a sequence");
  if (!seq) return false;
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(seq); ++i) ok = fn(PySequence_Fast_GET_ITEM(seq, i));
  Py_DECREF(seq);
  return ok;
}

bool tensor_of(PyObject* o, at::Tensor* out) {
  if (o == Py_None) {
    *out = at::Tensor();
    return true;
  }
  if (!THPVariable_Check(o)) {
    PyErr_SetString(PyExc_TypeError, "framefuse._torch_replay: expected a tensor");
    return false;
  }
  *out = THPVariable_Unpack(o);
  return true;
}

bool int_of(PyObject* o, int64_t* out) {
  *out = PyLong_AsLongLong(o);
  return !(*out == -1 && PyErr_Occurred());
}

bool launch_of(PyObject* o, int device, Launch* out) {
  if (device < 0) {
    if (!PyCallable_Check(o)) {
      PyErr_SetString(PyExc_TypeError, "framefuse._torch_replay: device -1 takes callables as graphs");
      return false;
    }
    out->fn = PyRef::borrow(o);
    return true;
  }
  out->exec = PyLong_AsVoidPtr(o);
  if (PyErr_Occurred()) return false;
  if (!out->exec) PyErr_SetString(PyExc_ValueError, "framefuse._torch_replay: a CUDA graph must be an instantiated cudaGraphExec_t");
  return out->exec != nullptr;
}

Meta meta_of(const at::Tensor& t) {
  return {t.sizes().vec(), t.strides().vec(), t.scalar_type(), t.device(), t.requires_grad()};
}

// training_replay(spec: dict) -> TrainingReplay. framefuse.cuda.TrainingGraphReplay._native builds
// the spec from a recording; the tests build one on the CPU.
PyObject* training_replay(PyObject*, PyObject* spec) {
  HANDLE_TH_ERRORS
  if (!PyDict_Check(spec)) {
    PyErr_SetString(PyExc_TypeError, "framefuse._torch_replay.training_replay takes a dict");
    return nullptr;
  }
  std::shared_ptr<State> st(new State, delete_state);
  State& s = *st;
  int64_t v = 0;
  PyObject* o = item(spec, "device");
  if (!o || !int_of(o, &v)) return nullptr;
  s.device = static_cast<int>(v);
  if (s.device >= 0 && !g_launch) {
    PyErr_SetString(PyExc_RuntimeError, "framefuse._torch_replay: framefuse._C.cuda's graph launch was not found");
    return nullptr;
  }
  if (!(o = item(spec, "fwd")) || !launch_of(o, s.device, &s.fwd)) return nullptr;
  if (!(o = item(spec, "bwd")) || !launch_of(o, s.device, &s.bwd)) return nullptr;
  if (!(o = item(spec, "n_inputs")) || !int_of(o, &v)) return nullptr;
  s.n_inputs = static_cast<Py_ssize_t>(v);
  std::vector<bool> is_tensor(static_cast<size_t>(s.n_inputs), false);
  auto position = [&](PyObject* p, Py_ssize_t* at) {
    int64_t i = 0;
    if (!int_of(p, &i)) return false;
    if (i < 0 || i >= s.n_inputs) {
      PyErr_SetString(PyExc_IndexError, "framefuse._torch_replay: input position out of range");
      return false;
    }
    *at = static_cast<Py_ssize_t>(i);
    return true;
  };
  bool ok = each(spec, "fixed", [&](PyObject* e) {  // (position, parameter)
    Py_ssize_t at = 0;
    at::Tensor t;
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2 || !position(PyTuple_GET_ITEM(e, 0), &at) ||
        !tensor_of(PyTuple_GET_ITEM(e, 1), &t) || !t.defined()) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "framefuse._torch_replay: fixed takes (position, tensor)");
      return false;
    }
    s.fixed.push_back({at, PyRef::borrow(PyTuple_GET_ITEM(e, 1)), t.data_ptr(), t.requires_grad()});
    is_tensor[static_cast<size_t>(at)] = true;
    return true;
  });
  ok = ok && each(spec, "copied", [&](PyObject* e) {  // (position, static buffer, example input)
         Py_ssize_t at = 0;
         at::Tensor buf, example;
         if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 3 || !position(PyTuple_GET_ITEM(e, 0), &at) ||
             !tensor_of(PyTuple_GET_ITEM(e, 1), &buf) || !tensor_of(PyTuple_GET_ITEM(e, 2), &example) ||
             !buf.defined() || !example.defined()) {
           if (!PyErr_Occurred())
             PyErr_SetString(PyExc_TypeError, "framefuse._torch_replay: copied takes (position, buffer, example)");
           return false;
         }
         s.copied.push_back({at, buf, meta_of(example)});
         is_tensor[static_cast<size_t>(at)] = true;
         return true;
       });
  ok = ok && each(spec, "consts", [&](PyObject* e) {  // (position, value)
         Py_ssize_t at = 0;
         if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2 || !position(PyTuple_GET_ITEM(e, 0), &at)) {
           if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "framefuse._torch_replay: consts takes (position, value)");
           return false;
         }
         s.consts.emplace_back(at, PyRef::borrow(PyTuple_GET_ITEM(e, 1)));
         return true;
       });
  if (!ok) return nullptr;
  for (Py_ssize_t i = 0; i < s.n_inputs; ++i)
    if (is_tensor[static_cast<size_t>(i)]) s.tensor_at.push_back(i);
  if (s.tensor_at.size() + s.consts.size() != static_cast<size_t>(s.n_inputs)) {
    PyErr_SetString(PyExc_ValueError, "framefuse._torch_replay: every input must be fixed, copied or constant, once");
    return nullptr;
  }
  auto tensors = [&](const char* key, std::vector<at::Tensor>* out) {
    return each(spec, key, [&](PyObject* e) {
      at::Tensor t;
      if (!tensor_of(e, &t)) return false;
      out->push_back(t);
      return true;
    });
  };
  auto ints = [&](const char* key, auto* out) {
    return each(spec, key, [&](PyObject* e) {
      int64_t i = 0;
      if (!int_of(e, &i)) return false;
      out->push_back(static_cast<typename std::remove_pointer_t<decltype(out)>::value_type>(i));
      return true;
    });
  };
  std::vector<int64_t> need;
  ok = tensors("outputs", &s.outputs) && ints("diff_out", &s.diff_out) && tensors("grad_in", &s.grad_in) &&
       ints("need", &need) && tensors("grads", &s.grads);
  if (!ok) return nullptr;
  if (!(o = item(spec, "flat")) || !tensor_of(o, &s.flat)) return nullptr;
  if (s.grad_in.size() != s.diff_out.size() || need.size() != s.grads.size()) {
    PyErr_SetString(PyExc_ValueError, "framefuse._torch_replay: grad_in/diff_out or need/grads differ in length");
    return nullptr;
  }
  int64_t flat_numel = 0;
  for (const at::Tensor& g : s.grads) {  // flat's pieces, and the shape each is viewed back to
    s.shapes.push_back(g.defined() && g.dim() != 1 ? g.sizes().vec() : std::vector<int64_t>());
    if (!g.defined()) continue;
    s.sizes.push_back(g.numel());
    flat_numel += g.numel();
  }
  if (s.flat.defined() && s.flat.numel() != flat_numel) {
    PyErr_SetString(PyExc_ValueError, "framefuse._torch_replay: flat does not hold exactly the gradients");
    return nullptr;
  }
  for (size_t k : s.diff_out)
    if (k >= s.outputs.size()) {
      PyErr_SetString(PyExc_IndexError, "framefuse._torch_replay: diff_out past the outputs");
      return nullptr;
    }
  for (int64_t i : need) {  // input position -> edge position
    size_t e = 0;
    while (e < s.tensor_at.size() && s.tensor_at[e] != i) ++e;
    if (e == s.tensor_at.size()) {
      PyErr_SetString(PyExc_ValueError, "framefuse._torch_replay: need names an input that is not a tensor");
      return nullptr;
    }
    s.need_edge.push_back(e);
  }
  if (!(o = item(spec, "recompute")) || !PyCallable_Check(o)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "framefuse._torch_replay: recompute must be callable");
    return nullptr;
  }
  s.recompute = PyRef::borrow(o);
  if (!(o = item(spec, "keep"))) return nullptr;
  s.keep = PyRef::borrow(o);

  auto* obj = PyObject_New(ReplayObject, &kReplayType);
  if (!obj) return nullptr;
  obj->st = new std::shared_ptr<State>(std::move(st));
  return reinterpret_cast<PyObject*>(obj);
  END_HANDLE_TH_ERRORS
}

PyMethodDef kMethods[] = {
    {"training_replay", training_replay, METH_O, "training_replay(spec) -> TrainingReplay (internal)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_torch_replay",
                       "framefuse's replay of recorded training graphs as a C++ autograd node (internal).",
                       -1, kMethods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__torch_replay(void) {
  PyObject* torch = PyImport_ImportModule("torch");
  if (!torch) return nullptr;
  bool same = ff_same_torch(torch, "framefuse._torch_replay", FF_TORCH_VERSION, _GLIBCXX_USE_CXX11_ABI,
                            "reduce-overhead training replays then go through Python");
  Py_DECREF(torch);
  if (!same) return nullptr;
  kReplayType.tp_basicsize = sizeof(ReplayObject);
  kReplayType.tp_flags = Py_TPFLAGS_DEFAULT;
  kReplayType.tp_doc = "A recorded training graph's replay: call with the tuple of inputs (internal).";
  kReplayType.tp_dealloc = replay_dealloc;
  kReplayType.tp_call = replay_tp_call;
  kReplayType.tp_getset = kReplayGetSet;
  if (PyType_Ready(&kReplayType) < 0) return nullptr;
  // The graph launch of _C's driver loader; absent (CPU-only _C builds) only device -1 works.
  PyObject* cuda = PyImport_ImportModule("framefuse._C");
  PyObject* sub = cuda ? PyObject_GetAttrString(cuda, "cuda") : nullptr;
  PyObject* cap = sub ? PyObject_GetAttrString(sub, "_GRAPH_LAUNCH") : nullptr;
  Py_XDECREF(cuda);
  Py_XDECREF(sub);
  if (cap) {
    auto* api = static_cast<const ff_graph_launch_api*>(PyCapsule_GetPointer(cap, FF_GRAPH_LAUNCH_CAPSULE));
    if (api && api->abi == FF_GRAPH_LAUNCH_ABI && api->size >= sizeof(ff_graph_launch_api)) g_launch = api;
    Py_DECREF(cap);
  }
  PyErr_Clear();
  PyObject* module = PyModule_Create(&kModule);
  if (!module) return nullptr;
  Py_INCREF(&kReplayType);
  if (PyModule_AddObject(module, "TrainingReplay", reinterpret_cast<PyObject*>(&kReplayType)) < 0 ||
      PyModule_AddStringConstant(module, "torch_version", FF_TORCH_VERSION) < 0 ||
      PyModule_AddIntConstant(module, "MISMATCH", kMismatch) < 0 || PyModule_AddIntConstant(module, "PENDING", kPending) < 0 ||
      PyModule_AddIntConstant(module, "BUSY", kBusy) < 0) {
    Py_DECREF(&kReplayType);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
