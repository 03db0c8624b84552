#include "inductor/python/channels_last_inputs.h"

namespace ff::inductor {

DerivedTensor::DerivedTensor(DerivedTensor&& o) noexcept : src_(o.src_), stamp_(o.stamp_), value_(o.value_) {
  o.src_ = o.value_ = nullptr;
}

DerivedTensor::~DerivedTensor() {
  if ((!src_ && !value_) || !Py_IsInitialized()) return;
  PyGILState_STATE st = PyGILState_Ensure();
  clear();
  PyGILState_Release(st);
}

PyObject* DerivedTensor::get(PyObject* src, const TensorStamp& stamp) const {
  if (!value_ || !made_from(src, stamp)) return nullptr;
  Py_INCREF(value_);
  return value_;
}

void DerivedTensor::set(PyObject* src, const TensorStamp& stamp, PyObject* value) {
  Py_XINCREF(src);
  Py_XINCREF(value);
  PyObject* old_src = src_;
  PyObject* old_value = value_;
  src_ = src;
  stamp_ = stamp;
  value_ = value;
  Py_XDECREF(old_value);  // NB: only now: the fields agree again
  Py_XDECREF(old_src);
}

ChannelsLastInputs::~ChannelsLastInputs() = default;

bool tensor_stamp(PyObject* t, TensorStamp* out) {
  static PyObject* data_ptr = PyUnicode_InternFromString("data_ptr");
  static PyObject* version = PyUnicode_InternFromString("_version");
  PyObject* p = PyObject_CallMethodNoArgs(t, data_ptr);
  if (!p) return false;
  out->ptr = PyLong_AsVoidPtr(p);
  Py_DECREF(p);
  if (PyErr_Occurred()) return false;
  PyObject* v = PyObject_GetAttr(t, version);
  if (!v) {
    // NB: inference tensors raise RuntimeError here; anything else is reported.
    if (!PyErr_ExceptionMatches(PyExc_RuntimeError)) return false;
    PyErr_Clear();
    out->version = -1;
    return true;
  }
  out->version = PyLong_AsLongLong(v);
  Py_DECREF(v);
  return !PyErr_Occurred();
}

void ChannelsLastInputs::add(size_t index, PyObject* sizes, PyObject* strides) {
  Input& in = inputs_.emplace_back();
  in.index = index;
  in.sizes = sizes;
  in.strides = strides;
}

PyObject* ChannelsLastInputs::convert_one(Input& in, PyObject* t) {
  TensorStamp stamp;
  if (!tensor_stamp(t, &stamp)) return nullptr;
  if (PyObject* copy = in.copy.get(t, stamp)) return copy;
  in.copy.clear();  // the old copy goes before the new one is made (peak memory of one copy, not two)
  // NB: exactly the compiled strides: t.contiguous(memory_format=torch.channels_last) keeps a 1x1
  // kernel's [64, 1, 1, 1] strides (channels-last by torch's test, not by the compiled strides).
  PyObject* out = PyObject_CallMethod(t, "new_empty_strided", "OO", in.sizes, in.strides);
  if (!out) return nullptr;
  // detach(): a copy of a parameter that requires grad must not record autograd history (the
  // compiled graph never runs for autograd; the copy outlives the call).
  PyObject* src = PyObject_CallMethod(t, "detach", nullptr);
  PyObject* done = src ? PyObject_CallMethod(out, "copy_", "O", src) : nullptr;
  Py_XDECREF(src);
  if (!done) {
    Py_DECREF(out);
    return nullptr;
  }
  Py_DECREF(done);
  in.copy.set(t, stamp, out);  // NB: another thread may have converted this input meanwhile: replaced
  return out;
}

bool ChannelsLastInputs::convert(PyObject** inputs, PyObject** owned) {
  for (size_t k = 0; k < inputs_.size(); ++k) {
    Input& in = inputs_[k];
    owned[k] = convert_one(in, inputs[in.index]);
    if (!owned[k]) return false;
    inputs[in.index] = owned[k];
  }
  return true;
}

}  // namespace ff::inductor
