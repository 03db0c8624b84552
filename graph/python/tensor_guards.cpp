#include "graph/python/tensor_guards.h"

namespace ff {

namespace {

// Python source because it runs once; any exception means "not available".
const char* kProbe = R"PY(
def probe():
    import torch
    from torch._C._dynamo.guards import TensorGuards
    def build(*ts):
        return TensorGuards(*ts, dynamic_dims_sizes=[list(t.size()) for t in ts],
                            dynamic_dims_strides=[list(t.stride()) for t in ts])
    a = torch.zeros(2, 3)
    g = build(a, a)
    if g.check(a, torch.zeros(2, 3)) is not True:
        return None
    others = [torch.zeros(3, 2), torch.zeros(2, 3).t().contiguous().t(), torch.zeros(2, 3, dtype=torch.float64),
              torch.zeros(2, 3, requires_grad=True), torch.zeros(2, 4)[:, :3], torch.nn.Parameter(torch.zeros(2, 3))]
    if any(g.check(a, o) is not False for o in others):
        return None
    return TensorGuards
)PY";

PyObject* probe() {
  PyObject* globals = PyDict_New();
  if (!globals || PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) < 0) {
    Py_XDECREF(globals);
    PyErr_Clear();
    return nullptr;
  }
  PyObject* ran = PyRun_String(kProbe, Py_file_input, globals, globals);
  PyObject* fn = ran ? PyDict_GetItemString(globals, "probe") : nullptr;  // borrowed
  PyObject* r = fn ? PyObject_CallNoArgs(fn) : nullptr;
  Py_XDECREF(ran);
  Py_DECREF(globals);
  if (!r) PyErr_Clear();
  if (r == Py_None) Py_CLEAR(r);
  return r;
}

PyObject* int_lists(const std::vector<std::vector<int64_t>>& v) {
  PyObject* l = PyList_New(static_cast<Py_ssize_t>(v.size()));
  for (size_t i = 0; l && i < v.size(); ++i) {
    PyObject* inner = PyList_New(static_cast<Py_ssize_t>(v[i].size()));
    for (size_t j = 0; inner && j < v[i].size(); ++j) {
      PyObject* n = v[i][j] == kUncheckedSize ? Py_NewRef(Py_None) : PyLong_FromLongLong(v[i][j]);
      if (!n) Py_CLEAR(inner);
      else PyList_SET_ITEM(inner, static_cast<Py_ssize_t>(j), n);
    }
    if (!inner) Py_CLEAR(l);
    else PyList_SET_ITEM(l, static_cast<Py_ssize_t>(i), inner);
  }
  return l;
}

}  // namespace

PyObject* tensor_guards_type() {
  // NB: not a function-local static initialized by probe(): the probe runs Python code, which may
  // hand the GIL to another thread; that thread would then wait on the C++ initialization guard
  // while holding the GIL, and neither could go on. Under the GIL a flag is enough: a thread that
  // asks while the probe runs gets null (its guards use the per-tensor getters).
  static bool probed = false;
  static PyObject* type = nullptr;  // NB: leaked; null when unavailable
  if (!probed) {
    probed = true;
    type = probe();
  }
  return type;
}

PyObject* make_tensor_guards(PyObject* tensors, const std::vector<std::vector<int64_t>>& sizes,
                             const std::vector<std::vector<int64_t>>& strides, PyObject** check) {
  *check = nullptr;
  PyObject* type = tensor_guards_type();
  if (!type) return nullptr;
  PyObject* sz = int_lists(sizes);
  PyObject* st = int_lists(strides);
  PyObject* kwargs = sz && st ? PyDict_New() : nullptr;
  bool ok = kwargs && PyDict_SetItemString(kwargs, "dynamic_dims_sizes", sz) == 0 &&
            PyDict_SetItemString(kwargs, "dynamic_dims_strides", st) == 0;
  PyObject* guards = ok ? PyObject_Call(type, tensors, kwargs) : nullptr;
  PyObject* method = guards ? PyObject_GetAttrString(guards, "check") : nullptr;
  PyObject* passed = method ? PyObject_CallObject(method, tensors) : nullptr;
  Py_XDECREF(kwargs);
  Py_XDECREF(st);
  Py_XDECREF(sz);
  if (passed != Py_True) {
    Py_XDECREF(passed);
    Py_XDECREF(method);
    Py_XDECREF(guards);
    PyErr_Clear();
    return nullptr;
  }
  Py_DECREF(passed);
  *check = method;
  return guards;
}

TensorGuardsCall::~TensorGuardsCall() {
  if (!Py_IsInitialized()) return;
  Py_CLEAR(args_);
  Py_CLEAR(check_);
}

void TensorGuardsCall::reset(PyObject* check, size_t n) {
  Py_CLEAR(args_);
  Py_CLEAR(check_);
  check_ = check;
  n_ = n;
  fn_ = nullptr;
  self_ = nullptr;
  if (!check_ || !PyCFunction_Check(check_) ||
      PyCFunction_GET_FLAGS(check_) != (METH_VARARGS | METH_KEYWORDS))
    return;
  args_ = PyTuple_New(static_cast<Py_ssize_t>(n));
  if (!args_) return PyErr_Clear();
  // NB: while lent, the tuple holds borrowed references; the GC must never count them.
  PyObject_GC_UnTrack(args_);
  fn_ = reinterpret_cast<PyCFunctionWithKeywords>(reinterpret_cast<void (*)(void)>(PyCFunction_GET_FUNCTION(check_)));
  self_ = PyCFunction_GET_SELF(check_);
}

bool TensorGuardsCall::operator()(PyObject* const* tensors) const {
  PyObject* r;
  if (fn_ && !busy_ && Py_REFCNT(args_) == 1) {
    busy_ = true;
    for (size_t i = 0; i < n_; ++i) PyTuple_SET_ITEM(args_, static_cast<Py_ssize_t>(i), tensors[i]);
    r = fn_(self_, args_, nullptr);
    if (Py_REFCNT(args_) == 1) {
      for (size_t i = 0; i < n_; ++i) PyTuple_SET_ITEM(args_, static_cast<Py_ssize_t>(i), nullptr);
    } else {
      // Something kept the tuple: it must own its items from now on, and a new one is lent next time.
      for (size_t i = 0; i < n_; ++i) Py_INCREF(tensors[i]);
      Py_DECREF(args_);
      args_ = PyTuple_New(static_cast<Py_ssize_t>(n_));
      if (args_) {
        PyObject_GC_UnTrack(args_);
      } else {
        PyErr_Clear();
        fn_ = nullptr;
      }
    }
    busy_ = false;
  } else {
    r = PyObject_Vectorcall(check_, tensors, n_, nullptr);
  }
  if (!r) {
    PyErr_Clear();
    return false;
  }
  bool ok = r == Py_True;
  Py_DECREF(r);
  return ok;
}

}  // namespace ff
