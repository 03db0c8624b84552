#include "inductor/python/input_writes.h"

#include "inductor/python/tensor_check.h"
#include "src/base/errors.h"

namespace ff::inductor {

InputWrites::~InputWrites() {
  if (!Py_IsInitialized()) return;
  Py_CLEAR(increment_version_);
  Py_CLEAR(is_inference_);
}

void InputWrites::prepare(const loop::Program& p) {
  for (const loop::Buffer& b : p.buffers) {
    if (b.role != loop::BufferRole::Input) continue;
    tensors_.push_back({static_cast<size_t>(b.input), loop::buffer_bytes(b), b.mutated});
    if (b.mutated) written_.push_back(static_cast<size_t>(b.input));
  }
  if (written_.empty()) return;
  if (PyObject* mod = PyImport_ImportModule("torch.autograd.graph")) {
    increment_version_ = PyObject_GetAttrString(mod, "increment_version");
    Py_DECREF(mod);
  }
  if (!increment_version_) {
    PyErr_Clear();
    throw Unsupported("the graph writes a graph input in place and this torch has no torch.autograd.graph.increment_version");
  }
  is_inference_ = PyUnicode_InternFromString("is_inference");
  FF_CHECK(is_inference_, "out of memory");
}

bool InputWrites::pointers(PyObject* const* inputs, size_t n, void** ptrs) const {
  for (const Tensor& t : tensors_) {
    if (t.pos >= n) continue;
    ptrs[t.pos] = tensor_data_ptr(inputs[t.pos]);
    if (!ptrs[t.pos] && PyErr_Occurred()) return false;
  }
  return true;
}

int InputWrites::writable(PyObject* const* inputs, size_t n, void* const* ptrs) const {
  for (const Tensor& w : tensors_) {
    if (!w.written || w.pos >= n) continue;
    PyObject* inference = PyObject_CallMethodNoArgs(inputs[w.pos], is_inference_);
    if (!inference) return -1;
    bool is_inference = inference == Py_True;
    Py_DECREF(inference);
    if (is_inference) return 0;
    auto start = reinterpret_cast<uintptr_t>(ptrs[w.pos]);
    for (const Tensor& o : tensors_) {
      if (o.pos == w.pos || o.pos >= n || w.bytes == 0 || o.bytes == 0) continue;
      auto other = reinterpret_cast<uintptr_t>(ptrs[o.pos]);
      if (start < other + static_cast<uintptr_t>(o.bytes) && other < start + static_cast<uintptr_t>(w.bytes)) return 0;
    }
  }
  return 1;
}

bool InputWrites::bump(PyObject* const* inputs) const {
  PyObject* args = PyTuple_New(static_cast<Py_ssize_t>(written_.size()));
  if (!args) return false;
  for (size_t k = 0; k < written_.size(); ++k) {
    Py_INCREF(inputs[written_[k]]);
    PyTuple_SET_ITEM(args, static_cast<Py_ssize_t>(k), inputs[written_[k]]);
  }
  PyObject* done = PyObject_CallOneArg(increment_version_, args);
  Py_DECREF(args);
  Py_XDECREF(done);
  return done != nullptr;
}

}  // namespace ff::inductor
