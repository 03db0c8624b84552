#include "inductor/python/tensor_check.h"

namespace ff::inductor {

namespace {

struct Names {
  PyObject* dtype;
  PyObject* shape;
  PyObject* stride;
  PyObject* is_cpu;
  PyObject* device;
  PyObject* tensor_type;  // torch.Tensor (strong), or null if torch cannot be imported
};

// Resolved once, with the GIL (the first check). NB: leaked: checks may run during shutdown.
const Names& names() {
  static const Names* n = [] {
    auto* r = new Names{PyUnicode_InternFromString("dtype"), PyUnicode_InternFromString("shape"),
                        PyUnicode_InternFromString("stride"), PyUnicode_InternFromString("is_cpu"),
                        PyUnicode_InternFromString("device"), nullptr};
    if (PyObject* torch = PyImport_ImportModule("torch")) {
      r->tensor_type = PyObject_GetAttrString(torch, "Tensor");
      Py_DECREF(torch);
    }
    PyErr_Clear();
    return r;
  }();
  return *n;
}

std::vector<int64_t> int_vector(PyObject* tuple) {
  std::vector<int64_t> v;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); ++i) v.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i)));
  return v;
}

}  // namespace

void* tensor_data_ptr(PyObject* t) {
  static PyObject* name = PyUnicode_InternFromString("data_ptr");  // NB: leaked: used during shutdown
  PyObject* r = name ? PyObject_CallMethodNoArgs(t, name) : nullptr;
  if (!r) return nullptr;
  void* p = PyLong_AsVoidPtr(r);
  Py_DECREF(r);
  return p;
}

void LayoutCheck::add(PyObject* dtype, PyObject* sizes, PyObject* strides) { want_.push_back({dtype, sizes, strides}); }

int LayoutCheck::check(PyObject* const* tensors) {
  if (want_.empty()) return 1;
  // NB: a rejection or a failure of the shortcut: the exact check decides.
  if (native_) {
    size_t i = 0;
    while (i < want_.size() && native_[i].matches(tensors[i])) ++i;
    if (i == want_.size()) return 1;
  } else if (fast_ && fast_(tensors)) {
    return 1;
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
    PyObject* where = dt ? PyObject_GetAttr(t, device_ ? nm.device : nm.is_cpu) : nullptr;
    PyObject* shape = where ? PyObject_GetAttr(t, nm.shape) : nullptr;
    PyObject* stride = shape ? PyObject_CallMethodNoArgs(t, nm.stride) : nullptr;
    int ok = stride ? 1 : -1;
    if (ok == 1 && dt != want_[i].dtype) ok = 0;
    if (ok == 1) ok = device_ ? PyObject_RichCompareBool(where, device_, Py_EQ) : where == Py_True;
    if (ok == 1) ok = PyObject_RichCompareBool(shape, want_[i].sizes, Py_EQ);
    if (ok == 1) ok = PyObject_RichCompareBool(stride, want_[i].strides, Py_EQ);
    Py_XDECREF(dt);
    Py_XDECREF(where);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    if (ok != 1) return ok;
  }
  return 1;
}

std::string LayoutCheck::mismatch(PyObject* const* tensors) const {
  auto text = [](PyObject* o) {
    PyObject* r = o ? PyObject_Str(o) : nullptr;
    std::string s = r && PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : "?";
    Py_XDECREF(r);
    return s;
  };
  const Names& nm = names();
  std::string out;
  for (size_t i = 0; i < want_.size() && out.empty(); ++i) {
    PyObject* t = tensors[i];
    PyObject* dt = PyObject_GetAttr(t, nm.dtype);
    PyObject* shape = dt ? PyObject_GetAttr(t, nm.shape) : nullptr;
    PyObject* stride = shape ? PyObject_CallMethodNoArgs(t, nm.stride) : nullptr;
    if (stride && (dt != want_[i].dtype || PyObject_RichCompareBool(shape, want_[i].sizes, Py_EQ) != 1 ||
                   PyObject_RichCompareBool(stride, want_[i].strides, Py_EQ) != 1))
      out = "tensor input " + std::to_string(i) + ": " + text(dt) + " " + text(shape) + " strides " + text(stride) +
            ", compiled for " + text(want_[i].dtype) + " " + text(want_[i].sizes) + " strides " + text(want_[i].strides);
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
  }
  PyErr_Clear();
  return out;
}

void LayoutCheck::arm(PyObject* const* tensors) {
  tried_ = true;
  if (torch_native()) {
    auto native = std::make_unique<NativeTensorMatch[]>(want_.size());
    size_t i = 0;
    while (i < want_.size() && native[i].record(tensors[i])) ++i;
    if (i == want_.size()) {
      native_ = std::move(native);
      return;
    }
  }
  Py_ssize_t n = static_cast<Py_ssize_t>(want_.size());
  PyObject* args = PyTuple_New(n);
  if (!args) return PyErr_Clear();
  std::vector<std::vector<int64_t>> sizes, strides;
  for (Py_ssize_t i = 0; i < n; ++i) {
    Py_INCREF(tensors[i]);
    PyTuple_SET_ITEM(args, i, tensors[i]);
    sizes.push_back(int_vector(want_[static_cast<size_t>(i)].sizes));
    strides.push_back(int_vector(want_[static_cast<size_t>(i)].strides));
  }
  // NB: armed only if it accepts the very tensors the exact check just accepted.
  PyObject* check = nullptr;
  Py_XDECREF(make_tensor_guards(args, sizes, strides, &check));
  fast_.reset(check, want_.size());
  Py_DECREF(args);
  PyErr_Clear();
}

}  // namespace ff::inductor
