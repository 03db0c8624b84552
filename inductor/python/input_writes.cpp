#include "inductor/python/input_writes.h"

#include <algorithm>

#include "src/errors.h"

namespace ff::inductor {

InputWrites::~InputWrites() {
  if (!Py_IsInitialized()) return;
  Py_CLEAR(increment_version_);
  Py_CLEAR(is_inference_);
  Py_CLEAR(data_ptr_);
}

void InputWrites::prepare(const loop::Program& p) {
  for (const loop::Buffer& b : p.buffers) {
    if (b.role != loop::BufferRole::Input) continue;
    tensors_.push_back({static_cast<size_t>(b.input), loop::buffer_bytes(b)});
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
  data_ptr_ = PyUnicode_InternFromString("data_ptr");
  FF_CHECK(is_inference_ && data_ptr_, "out of memory");
}

int InputWrites::writable(PyObject* const* inputs) const {
  constexpr size_t kInline = 16;
  uintptr_t inline_start[kInline];
  std::vector<uintptr_t> heap;
  uintptr_t* start = inline_start;
  if (tensors_.size() > kInline) {
    heap.resize(tensors_.size());
    start = heap.data();
  }
  for (size_t k = 0; k < tensors_.size(); ++k) {
    PyObject* r = PyObject_CallMethodNoArgs(inputs[tensors_[k].first], data_ptr_);
    if (!r) return -1;
    start[k] = reinterpret_cast<uintptr_t>(PyLong_AsVoidPtr(r));
    Py_DECREF(r);
    if (PyErr_Occurred()) return -1;
  }
  for (size_t k = 0; k < tensors_.size(); ++k) {
    auto [pos, bytes] = tensors_[k];
    if (std::find(written_.begin(), written_.end(), pos) == written_.end()) continue;
    PyObject* inference = PyObject_CallMethodNoArgs(inputs[pos], is_inference_);
    if (!inference) return -1;
    bool is_inference = inference == Py_True;
    Py_DECREF(inference);
    if (is_inference) return 0;
    for (size_t o = 0; o < tensors_.size(); ++o) {
      int64_t other = tensors_[o].second;
      if (o == k || bytes == 0 || other == 0) continue;
      if (start[k] < start[o] + static_cast<uintptr_t>(other) && start[o] < start[k] + static_cast<uintptr_t>(bytes)) return 0;
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
