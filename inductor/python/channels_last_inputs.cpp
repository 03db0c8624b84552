#include "inductor/python/channels_last_inputs.h"

namespace ff::inductor {

ChannelsLastInputs::~ChannelsLastInputs() {
  if (!Py_IsInitialized()) return;
  PyGILState_STATE st = PyGILState_Ensure();
  for (Input& in : inputs_) {
    Py_XDECREF(in.src);
    Py_XDECREF(in.converted);
  }
  PyGILState_Release(st);
}

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
  Input in;
  in.index = index;
  in.sizes = sizes;
  in.strides = strides;
  inputs_.push_back(in);
}

PyObject* ChannelsLastInputs::convert_one(Input& in, PyObject* t) {
  TensorStamp stamp;
  if (!tensor_stamp(t, &stamp)) return nullptr;
  if (in.converted && in.src == t && stamp.reusable() && in.stamp == stamp) {
    Py_INCREF(in.converted);
    return in.converted;
  }
  // The old copy goes before the new one is made (peak memory of one copy, not two).
  {
    PyObject* src = in.src;
    PyObject* converted = in.converted;
    in.src = in.converted = nullptr;
    Py_XDECREF(converted);
    Py_XDECREF(src);
  }
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
  // NB: another thread may have converted this input meanwhile (torch releases the GIL). The three
  // fields are set together and what they held is released only afterwards: releasing a tensor may
  // let another thread run, which must never see a copy next to another tensor's source or stamp.
  Py_INCREF(t);
  Py_INCREF(out);
  PyObject* old_src = in.src;
  PyObject* old_converted = in.converted;
  in.src = t;
  in.stamp = stamp;
  in.converted = out;
  Py_XDECREF(old_src);
  Py_XDECREF(old_converted);
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
