#include "inductor/python/channels_last_inputs.h"

namespace ff::inductor {

ChannelsLastInputs::~ChannelsLastInputs() {
  if (!Py_IsInitialized()) return;
  PyGILState_STATE st = PyGILState_Ensure();
  for (Input& in : inputs_) {
    Py_XDECREF(in.src);
    Py_XDECREF(in.converted);
  }
  Py_XDECREF(empty_strided_);
  PyGILState_Release(st);
}

void ChannelsLastInputs::add(size_t index, PyObject* sizes, PyObject* strides, PyObject* dtype) {
  Input in;
  in.index = index;
  in.sizes = sizes;
  in.strides = strides;
  in.dtype = dtype;
  inputs_.push_back(in);
}

namespace {

// t._version, or -1 (no error set) for a tensor without a version counter.
int64_t version_of(PyObject* t, bool* failed) {
  static PyObject* name = PyUnicode_InternFromString("_version");
  PyObject* v = PyObject_GetAttr(t, name);
  if (!v) {
    // NB: inference tensors raise RuntimeError here; anything else is reported.
    if (PyErr_ExceptionMatches(PyExc_RuntimeError)) {
      PyErr_Clear();
      return -1;
    }
    *failed = true;
    return -1;
  }
  int64_t r = PyLong_AsLongLong(v);
  Py_DECREF(v);
  if (r == -1 && PyErr_Occurred()) *failed = true;
  return r;
}

void* data_ptr_of(PyObject* t) {
  PyObject* r = PyObject_CallMethod(t, "data_ptr", nullptr);
  if (!r) return nullptr;
  void* p = PyLong_AsVoidPtr(r);
  Py_DECREF(r);
  return p;
}

}  // namespace

PyObject* ChannelsLastInputs::convert_one(Input& in, PyObject* t) {
  bool failed = false;
  int64_t version = version_of(t, &failed);
  if (failed) return nullptr;
  void* ptr = data_ptr_of(t);
  if (PyErr_Occurred()) return nullptr;
  if (in.converted && in.src == t && in.src_ptr == ptr && version >= 0 && in.version == version) {
    Py_INCREF(in.converted);
    return in.converted;
  }
  // The old copy goes before the new one is made (peak memory of one copy, not two).
  Py_CLEAR(in.converted);
  Py_CLEAR(in.src);
  if (!empty_strided_) {
    PyObject* torch = PyImport_ImportModule("torch");
    if (!torch) return nullptr;
    empty_strided_ = PyObject_GetAttrString(torch, "empty_strided");
    Py_DECREF(torch);
    if (!empty_strided_) return nullptr;
  }
  // NB: exactly the compiled strides: t.contiguous(memory_format=torch.channels_last) keeps a 1x1
  // kernel's [64, 1, 1, 1] strides (channels-last by torch's test, not by the compiled strides).
  PyObject* args = PyTuple_Pack(2, in.sizes, in.strides);
  PyObject* kw = args ? Py_BuildValue("{sO}", "dtype", in.dtype) : nullptr;
  PyObject* out = kw ? PyObject_Call(empty_strided_, args, kw) : nullptr;
  Py_XDECREF(args);
  Py_XDECREF(kw);
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
  // NB: XSETREF: torch may have let another thread convert this input meanwhile.
  Py_INCREF(t);
  Py_XSETREF(in.src, t);
  in.src_ptr = ptr;
  in.version = version;
  Py_XSETREF(in.converted, out);
  Py_INCREF(out);
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
