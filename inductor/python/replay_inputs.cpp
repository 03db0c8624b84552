#include "inductor/python/replay_inputs.h"

#include <string>

#include "src/errors.h"

namespace ff::inductor {

namespace {

PyObject* tensor_type() {
  static PyObject* t = nullptr;  // NB: leaked, filled under the GIL
  if (!t) {
    if (PyObject* torch = PyImport_ImportModule("torch")) {
      t = PyObject_GetAttrString(torch, "Tensor");
      Py_DECREF(torch);
    }
  }
  return t;
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
    if (!device_) {
      device_ = device;
      layouts_ = std::make_unique<LayoutCheck>(device_);
    } else {
      int same = PyObject_RichCompareBool(device, device_, Py_EQ);
      Py_DECREF(device);
      if (same != 1) {
        PyErr_Clear();
        throw UserError("the copied inputs are on more than one device");
      }
    }
    PyObject* dtype = PyObject_GetAttrString(t, "dtype");
    PyObject* shape = dtype ? PyObject_GetAttrString(t, "shape") : nullptr;
    PyObject* sizes = shape ? PySequence_Tuple(shape) : nullptr;
    PyObject* strides = sizes ? PyObject_CallMethod(t, "stride", nullptr) : nullptr;
    Py_XDECREF(shape);
    for (PyObject* o : {dtype, sizes, strides})
      if (o) owned_.push_back(o);
    if (!strides) fail("cannot read a tensor's layout");
    layouts_->add(dtype, sizes, strides);
    copied_.push_back(i);
  }
  scratch_.resize(copied_.size());
}

ReplayInputs::~ReplayInputs() {
  if (!Py_IsInitialized()) return;
  PyGILState_STATE st = PyGILState_Ensure();
  layouts_.reset();
  for (auto& f : fixed_) Py_DECREF(f.tensor);
  for (auto& [i, v] : values_) Py_DECREF(v);
  for (PyObject* o : owned_) Py_DECREF(o);
  Py_XDECREF(device_);
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
  if (!layouts_) return 1;
  for (size_t k = 0; k < copied_.size(); ++k) scratch_[k] = inputs[copied_[k]];
  return layouts_->check(scratch_.data());
}

}  // namespace ff::inductor
