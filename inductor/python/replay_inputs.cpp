#include "inductor/python/replay_inputs.h"

#include <string>

#include "src/base/errors.h"
#include "src/base/gil_once.h"

namespace ff::inductor {

namespace {

PyObject* tensor_type() {
  static PyObject* t = nullptr;
  return gil_once(t, []() -> PyObject* {
    PyObject* torch = PyImport_ImportModule("torch");
    PyObject* r = torch ? PyObject_GetAttrString(torch, "Tensor") : nullptr;
    Py_XDECREF(torch);
    return r;
  });
}

[[noreturn]] void fail(const char* what) {
  PyErr_Clear();
  throw InternalError(std::string("ReplayInputs: ") + what);
}

}  // namespace

ReplayInputs::ReplayInputs(const std::vector<PyObject*>& inputs, const std::vector<bool>& fixed) : n_(inputs.size()) {
  PyObject* tensor = tensor_type();
  if (!tensor || fixed.size() != inputs.size()) fail("torch.Tensor is unavailable, or fixed has another length");
  for (size_t i = 0; i < inputs.size(); ++i) {
    PyObject* t = inputs[i];
    int is = PyObject_IsInstance(t, tensor);
    if (is < 0) fail("isinstance failed");
    if (!is) {
      Py_INCREF(t);
      values_.emplace_back(i, t);
      continue;
    }
    if (fixed[i]) {
      void* data = tensor_data_ptr(t);
      if (PyErr_Occurred()) fail("data_ptr failed");
      Py_INCREF(t);
      fixed_.push_back({i, t, data});
      continue;
    }
    PyObject* device = PyObject_GetAttrString(t, "device");
    if (!device) fail("no device");
    Device* at = nullptr;
    for (Device& d : devices_) {
      int same = PyObject_RichCompareBool(device, d.device, Py_EQ);
      if (same < 0) fail("cannot compare devices");
      if (same) {
        at = &d;
        break;
      }
    }
    if (at) {
      Py_DECREF(device);
    } else {
      at = &devices_.emplace_back(Device{device, std::make_unique<LayoutCheck>(device), {}, {}});
    }
    PyObject* dtype = PyObject_GetAttrString(t, "dtype");
    PyObject* shape = dtype ? PyObject_GetAttrString(t, "shape") : nullptr;
    PyObject* sizes = shape ? PySequence_Tuple(shape) : nullptr;
    PyObject* strides = sizes ? PyObject_CallMethod(t, "stride", nullptr) : nullptr;
    Py_XDECREF(shape);
    for (PyObject* o : {dtype, sizes, strides})
      if (o) owned_.push_back(o);
    if (!strides) fail("cannot read a tensor's layout");
    at->layouts->add(dtype, sizes, strides);
    at->indices.push_back(i);
  }
  for (Device& d : devices_) d.scratch.resize(d.indices.size());
}

ReplayInputs::~ReplayInputs() {
  if (!Py_IsInitialized()) return;
  PyGILState_STATE st = PyGILState_Ensure();
  for (Device& d : devices_) {
    d.layouts.reset();
    Py_DECREF(d.device);
  }
  for (auto& f : fixed_) Py_DECREF(f.tensor);
  for (auto& [i, v] : values_) Py_DECREF(v);
  for (PyObject* o : owned_) Py_DECREF(o);
  PyGILState_Release(st);
}

int ReplayInputs::matches(PyObject* const* inputs, size_t n) {
  if (n != n_) return 0;
  for (const Fixed& f : fixed_) {
    if (inputs[f.index] != f.tensor) return 0;
    void* data = tensor_data_ptr(f.tensor);
    if (PyErr_Occurred()) return -1;
    if (data != f.data) return 0;
  }
  for (const auto& [i, v] : values_) {
    PyObject* got = inputs[i];
    if (got == v) continue;
    if (PyObject_IsInstance(got, tensor_type()) == 1) return 0;  // NB: never a tensor's elementwise ==
    int eq = PyObject_RichCompareBool(got, v, Py_EQ);
    if (eq != 1) return eq;
  }
  for (Device& d : devices_) {
    for (size_t k = 0; k < d.indices.size(); ++k) d.scratch[k] = inputs[d.indices[k]];
    int ok = d.layouts->check(d.scratch.data());
    if (ok != 1) return ok;
  }
  return 1;
}

}  // namespace ff::inductor
