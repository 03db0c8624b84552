#include "frame_eval/torch_refs.h"

#include <unordered_map>

#include "frame_eval/py_util.h"
#include "src/base/errors.h"
#include "src/base/gil_once.h"

namespace ff {

void AttrGetter::resolve(PyTypeObject* type, const char* attr) {
  name = PyUnicode_InternFromString(attr);
  PyObject* d = _PyType_Lookup(type, name);  // borrowed
  if (d && Py_TYPE(d) == &PyGetSetDescr_Type) {
    auto* gd = reinterpret_cast<PyGetSetDescrObject*>(d);
    fn = gd->d_getset->get;
    closure = gd->d_getset->closure;
  }
}

namespace {

PyObject* attr_or_null(PyObject* o, const char* name) {
  PyObject* r = PyObject_GetAttrString(o, name);
  if (!r) PyErr_Clear();
  return r;
}

TorchRefs* load_torch_refs() {
  auto* refs = new TorchRefs();  // NB: lives for the process; nothing here may be freed at exit
  refs->torch = PyImport_ImportModule("torch");
  if (!refs->torch) {
    std::string err = fetch_py_error_text();
    delete refs;
    throw InternalError("framefuse needs torch: import torch failed: " + err);
  }
  PyRef c = PyRef::steal(PyObject_GetAttrString(refs->torch, "_C"));
  PyObject* base = c ? attr_or_null(c.get(), "TensorBase") : nullptr;
  if (!base && c) base = attr_or_null(c.get(), "_TensorBase");
  if (!base || !PyType_Check(base)) {
    PyErr_Clear();
    throw InternalError("torch._C.TensorBase not found");
  }
  refs->tensor_base = reinterpret_cast<PyTypeObject*>(base);
  refs->is_grad_enabled = attr_or_null(refs->torch, "is_grad_enabled");
  refs->get_default_dtype = attr_or_null(refs->torch, "get_default_dtype");
  refs->strided = attr_or_null(refs->torch, "strided");
  {
    PyRef c = PyRef::steal(PyObject_GetAttrString(refs->torch, "_C"));
    refs->any_autocast = c ? attr_or_null(c.get(), "_is_any_autocast_enabled") : nullptr;
    refs->get_deterministic = c ? attr_or_null(c.get(), "_get_deterministic_algorithms") : nullptr;
    refs->dispatch_stack_len = c ? attr_or_null(c.get(), "_len_torch_dispatch_stack") : nullptr;
    PyErr_Clear();
    PyRef ft = PyRef::steal(c ? PyObject_GetAttrString(c.get(), "_functorch") : nullptr);
    refs->functorch_peek = ft ? attr_or_null(ft.get(), "peek_interpreter_stack") : nullptr;
    PyErr_Clear();
  }
  if (refs->dispatch_stack_len) {
    PyRef pd = PyRef::steal(PyImport_ImportModule("torch.utils._python_dispatch"));
    refs->in_dispatch_mode = pd ? attr_or_null(pd.get(), "is_in_torch_dispatch_mode") : nullptr;
    PyErr_Clear();
  }
  for (int i = 0; i < kNumDTypes; ++i)
    refs->dtypes[i] = attr_or_null(refs->torch, std::string(dtype_name(static_cast<DType>(i))).c_str());
  FF_CHECK(refs->is_grad_enabled && refs->get_default_dtype && refs->strided, "torch API missing");
  return refs;
}

TorchRefs* g_torch_refs = nullptr;  // set once, on first use

}  // namespace

const TorchRefs& torch_refs() { return *gil_once(g_torch_refs, load_torch_refs); }

const TensorReaders& tensor_readers(PyTypeObject* type) {
  static auto* cache = new std::unordered_map<PyTypeObject*, TensorReaders*>();
  auto it = cache->find(type);
  if (it != cache->end()) return *it->second;
  auto* r = new TensorReaders();
  r->shape.resolve(type, "shape");
  r->dtype.resolve(type, "dtype");
  r->requires_grad.resolve(type, "requires_grad");
  r->layout.resolve(type, "layout");
  r->is_cpu.resolve(type, "is_cpu");
  r->is_cuda.resolve(type, "is_cuda");
  r->is_meta.resolve(type, "is_meta");
  r->device.resolve(type, "device");
  PyRef stride_name = PyRef::steal(PyUnicode_InternFromString("stride"));
  PyRef get_device_name = PyRef::steal(PyUnicode_InternFromString("get_device"));
  r->stride = _PyType_Lookup(type, stride_name.get());
  r->get_device = _PyType_Lookup(type, get_device_name.get());
  FF_CHECK(r->stride && r->get_device, "tensor type without stride()/get_device()");
  Py_INCREF(r->stride);
  Py_INCREF(r->get_device);
  PyRef is_neg_name = PyRef::steal(PyUnicode_InternFromString("is_neg"));
  PyRef is_conj_name = PyRef::steal(PyUnicode_InternFromString("is_conj"));
  r->is_neg = _PyType_Lookup(type, is_neg_name.get());
  r->is_conj = _PyType_Lookup(type, is_conj_name.get());
  Py_XINCREF(r->is_neg);
  Py_XINCREF(r->is_conj);
  // NB: the type is kept alive by the cache, so the pointer key cannot be reused.
  Py_INCREF(reinterpret_cast<PyObject*>(type));
  cache->emplace(type, r);
  return *r;
}

bool is_tensor(PyObject* obj) {
  return PyObject_TypeCheck(obj, torch_refs().tensor_base) != 0;
}

PyObject* torch_dtype_object(DType t) { return torch_refs().dtypes[static_cast<int>(t)]; }

bool dtype_from_object(PyObject* dtype_obj, DType* out) {
  const TorchRefs& refs = torch_refs();
  for (int i = 0; i < kNumDTypes; ++i) {
    if (refs.dtypes[i] && refs.dtypes[i] == dtype_obj) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

PyObject* call_torch_getter(PyObject* fn) {
  // NB: both getters are C functions of torch._C taking no arguments; called through their C
  // pointer they skip the vectorcall dispatch (they run on every cached call).
  if (PyCFunction_Check(fn) && PyCFunction_GET_FLAGS(fn) == METH_NOARGS)
    return PyCFunction_GET_FUNCTION(fn)(PyCFunction_GET_SELF(fn), nullptr);
  return PyObject_Vectorcall(fn, nullptr, 0, nullptr);
}

namespace {
thread_local PyObject* g_traced_autocast = nullptr;  // AutocastOff's `traced`
}  // namespace

PyObject* autocast_state_now() {
  if (g_traced_autocast) return Py_NewRef(g_traced_autocast);
  PyObject* torch = torch_refs().torch;
  // NB: torch 2 asks per device type; torch 1.13 has a CPU and a CUDA getter of each.
  bool per_device = PyObject_HasAttrString(torch, "get_autocast_dtype");
  PyRef out = PyRef::steal(PyTuple_New(4));
  const char* devices[2] = {"cpu", "cuda"};
  const char* old_on[2] = {"is_autocast_cpu_enabled", "is_autocast_enabled"};
  const char* old_dtype[2] = {"get_autocast_cpu_dtype", "get_autocast_gpu_dtype"};
  for (int i = 0; i < 2; ++i) {
    PyObject* on = per_device ? PyObject_CallMethod(torch, "is_autocast_enabled", "s", devices[i])
                              : PyObject_CallMethod(torch, old_on[i], nullptr);
    if (!on) return nullptr;
    PyTuple_SET_ITEM(out.get(), 2 * i, on);
    PyObject* dt = per_device ? PyObject_CallMethod(torch, "get_autocast_dtype", "s", devices[i])
                              : PyObject_CallMethod(torch, old_dtype[i], nullptr);
    if (!dt) return nullptr;
    PyTuple_SET_ITEM(out.get(), 2 * i + 1, dt);
  }
  return out.release();
}

PyObject* autocast_state_if_on() {
  int on = autocast_enabled_now();
  PyObject* state = on == 1 ? autocast_state_now() : nullptr;
  if (!state) PyErr_Clear();
  return state;
}

// NB: torch 2's per-device setter (autocast is only captured there: graph/python/graph_calls.h).
AutocastOff::AutocastOff(PyObject* traced) : saved_traced_(g_traced_autocast) {
  PyObject* torch = torch_refs().torch;
  const char* devices[2] = {"cpu", "cuda"};
  for (int i = 0; i < 2; ++i) {
    PyRef on = PyRef::steal(PyObject_CallMethod(torch, "is_autocast_enabled", "s", devices[i]));
    was_on_[i] = on && on.get() == Py_True;
    if (was_on_[i]) Py_XDECREF(PyObject_CallMethod(torch, "set_autocast_enabled", "sO", devices[i], Py_False));
  }
  PyErr_Clear();
  if (traced) g_traced_autocast = traced;
}

AutocastOff::~AutocastOff() {
  g_traced_autocast = saved_traced_;
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);  // NB: a Python error the graph set stays set
  const char* devices[2] = {"cpu", "cuda"};
  for (int i = 0; i < 2; ++i)
    if (was_on_[i]) Py_XDECREF(PyObject_CallMethod(torch_refs().torch, "set_autocast_enabled", "sO", devices[i], Py_True));
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

namespace {

bool user_dispatch_mode_active(const TorchRefs& refs) {
  if (!refs.dispatch_stack_len) return false;
  PyRef n = PyRef::steal(call_torch_getter(refs.dispatch_stack_len));
  if (!n || !PyLong_Check(n.get())) {
    PyErr_Clear();
    return false;
  }
  if (PyLong_AsLong(n.get()) <= 0) return false;
  if (!refs.in_dispatch_mode) return true;  // NB: a mode is on and torch cannot tell which kind
  PyRef args = PyRef::steal(PyTuple_New(0));
  PyRef kw = PyRef::steal(Py_BuildValue("{s:O}", "include_infra_modes", Py_False));
  PyRef r = PyRef::steal(args && kw ? PyObject_Call(refs.in_dispatch_mode, args.get(), kw.get()) : nullptr);
  if (!r) {
    PyErr_Clear();
    return true;
  }
  return r.get() == Py_True;
}

bool functorch_transform_active(const TorchRefs& refs) {
  if (!refs.functorch_peek) return false;
  PyRef r = PyRef::steal(call_torch_getter(refs.functorch_peek));
  if (!r) {
    PyErr_Clear();
    return false;
  }
  return r.get() != Py_None;
}

}  // namespace

bool eager_context_active() {
  if (!g_torch_refs) {  // NB: a program that never imported torch has neither, and imports none here
    PyRef name = PyRef::steal(PyUnicode_FromString("torch"));
    PyRef m = PyRef::steal(name ? PyImport_GetModule(name.get()) : nullptr);
    if (!m) {
      PyErr_Clear();
      return false;
    }
  }
  const TorchRefs& refs = torch_refs();
  return user_dispatch_mode_active(refs) || functorch_transform_active(refs);
}

int autocast_enabled_now() {
  if (g_traced_autocast) return 1;
  const TorchRefs& refs = torch_refs();
  if (refs.any_autocast) {
    PyObject* r = call_torch_getter(refs.any_autocast);
    if (!r) return -1;
    int v = r == Py_True;
    Py_DECREF(r);
    return v;
  }
  PyRef state = PyRef::steal(autocast_state_now());
  if (!state) return -1;
  return PyTuple_GET_ITEM(state.get(), 0) == Py_True || PyTuple_GET_ITEM(state.get(), 2) == Py_True;
}

int grad_enabled_now() {
  PyObject* r = call_torch_getter(torch_refs().is_grad_enabled);
  if (!r) return -1;
  int v = r == Py_True;
  Py_DECREF(r);
  return v;
}

}  // namespace ff
