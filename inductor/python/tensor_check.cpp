#include "inductor/python/tensor_check.h"

namespace ff::inductor {

namespace {

struct Names {
  PyObject* dtype;
  PyObject* shape;
  PyObject* stride;
  PyObject* is_cpu;
  PyObject* tensor_type;       // torch.Tensor (strong), or null if torch cannot be imported
  PyObject* tensor_guards;     // torch._C._dynamo.guards.TensorGuards (strong), or null
};

// Resolved once, with the GIL (the first check). NB: leaked: checks may run during shutdown.
const Names& names() {
  static const Names* n = [] {
    auto* r = new Names{PyUnicode_InternFromString("dtype"), PyUnicode_InternFromString("shape"),
                        PyUnicode_InternFromString("stride"), PyUnicode_InternFromString("is_cpu"), nullptr, nullptr};
    if (PyObject* torch = PyImport_ImportModule("torch")) {
      r->tensor_type = PyObject_GetAttrString(torch, "Tensor");
      Py_DECREF(torch);
    }
    PyErr_Clear();
    if (PyObject* guards = PyImport_ImportModule("torch._C._dynamo.guards")) {
      r->tensor_guards = PyObject_GetAttrString(guards, "TensorGuards");
      Py_DECREF(guards);
    }
    PyErr_Clear();
    return r;
  }();
  return *n;
}

PyObject* int_list(PyObject* tuple) { return PySequence_List(tuple); }

}  // namespace

LayoutCheck::~LayoutCheck() {
  if (Py_IsInitialized()) Py_CLEAR(fast_);
}

void LayoutCheck::add(PyObject* dtype, PyObject* sizes, PyObject* strides) { want_.push_back({dtype, sizes, strides}); }

int LayoutCheck::check(PyObject* const* tensors) {
  if (want_.empty()) return 1;
  if (fast_) {
    PyObject* r = PyObject_Vectorcall(fast_, tensors, want_.size(), nullptr);
    if (r == Py_True) {
      Py_DECREF(r);
      return 1;
    }
    Py_XDECREF(r);
    PyErr_Clear();  // a rejection or a failure of the shortcut: the exact check decides
  }
  int ok = exact(tensors);
  if (ok == 1 && !tried_) arm(tensors);
  return ok;
}

int LayoutCheck::exact(PyObject* const* tensors) {
  const Names& nm = names();
  if (!nm.tensor_type) {
    PyErr_SetString(PyExc_RuntimeError, "framefuse: torch.Tensor is not available");
    return -1;
  }
  for (size_t i = 0; i < want_.size(); ++i) {
    PyObject* t = tensors[i];
    int is = PyObject_IsInstance(t, nm.tensor_type);
    if (is != 1) return is;
    PyObject* dt = PyObject_GetAttr(t, nm.dtype);
    PyObject* cpu = dt ? PyObject_GetAttr(t, nm.is_cpu) : nullptr;
    PyObject* shape = cpu ? PyObject_GetAttr(t, nm.shape) : nullptr;
    PyObject* stride = shape ? PyObject_CallMethodNoArgs(t, nm.stride) : nullptr;
    int ok = stride ? 1 : -1;
    if (ok == 1 && (dt != want_[i].dtype || cpu != Py_True)) ok = 0;
    if (ok == 1) ok = PyObject_RichCompareBool(shape, want_[i].sizes, Py_EQ);
    if (ok == 1) ok = PyObject_RichCompareBool(stride, want_[i].strides, Py_EQ);
    Py_XDECREF(dt);
    Py_XDECREF(cpu);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    if (ok != 1) return ok;
  }
  return 1;
}

void LayoutCheck::arm(PyObject* const* tensors) {
  tried_ = true;
  const Names& nm = names();
  if (!nm.tensor_guards) return;
  Py_ssize_t n = static_cast<Py_ssize_t>(want_.size());
  PyObject* args = PyTuple_New(n);
  PyObject* sizes = PyList_New(n);
  PyObject* strides = PyList_New(n);
  PyObject* kwargs = PyDict_New();
  bool ok = args && sizes && strides && kwargs;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    Py_INCREF(tensors[i]);
    PyTuple_SET_ITEM(args, i, tensors[i]);
    PyObject* sz = int_list(want_[static_cast<size_t>(i)].sizes);
    PyObject* st = int_list(want_[static_cast<size_t>(i)].strides);
    if (sz) PyList_SET_ITEM(sizes, i, sz);
    if (st) PyList_SET_ITEM(strides, i, st);
    ok = sz && st;
  }
  ok = ok && PyDict_SetItemString(kwargs, "dynamic_dims_sizes", sizes) == 0 &&
       PyDict_SetItemString(kwargs, "dynamic_dims_strides", strides) == 0;
  PyObject* guards = ok ? PyObject_Call(nm.tensor_guards, args, kwargs) : nullptr;
  PyObject* check = guards ? PyObject_GetAttrString(guards, "check") : nullptr;
  // NB: armed only if it accepts the very tensors the exact check just accepted.
  PyObject* passed = check ? PyObject_Call(check, args, nullptr) : nullptr;
  if (passed == Py_True) {
    fast_ = check;
    check = nullptr;
  }
  Py_XDECREF(passed);
  Py_XDECREF(check);
  Py_XDECREF(guards);
  Py_XDECREF(kwargs);
  Py_XDECREF(strides);
  Py_XDECREF(sizes);
  Py_XDECREF(args);
  PyErr_Clear();
}

}  // namespace ff::inductor
