// torch's C++ tensor check (torch._C._dynamo.guards.TensorGuards), shared by the frame guards and
// the compiled graphs' input checks: one call compares a list of tensors' type, dispatch keys,
// dtype, device, requires_grad, sizes and strides, instead of five Python-level getters each.
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

namespace ff {

// The TensorGuards type where this torch has one that passes a probe (it must accept its own
// tensors and reject a change of each property guarded); null otherwise (torch 1.x). Needs the GIL.
PyObject* tensor_guards_type();

// A size or stride a tensor guard does not check (a symbolic one: passed to torch as None).
constexpr int64_t kUncheckedSize = INT64_MIN;

// A TensorGuards for `tensors` (a tuple) expecting sizes[i] / strides[i]. Returns it (new reference)
// and its bound check method in *check, or null with no error set when torch has none or the check
// rejects `tensors` themselves.
PyObject* make_tensor_guards(PyObject* tensors, const std::vector<std::vector<int64_t>>& sizes,
                             const std::vector<std::vector<int64_t>>& strides, PyObject** check);

// Calls a TensorGuards' bound `check` on the hot path. The method takes an argument tuple
// (METH_VARARGS), which a vectorcall would allocate, fill and free on every call; this keeps one
// tuple, lends it the tensors for the call and takes them back. Needs the GIL.
class TensorGuardsCall {
 public:
  TensorGuardsCall() = default;
  TensorGuardsCall(const TensorGuardsCall&) = delete;
  TensorGuardsCall& operator=(const TensorGuardsCall&) = delete;
  ~TensorGuardsCall();

  // Takes `check` (a new reference from make_tensor_guards, or null) for calls with `n` tensors.
  void reset(PyObject* check, size_t n);
  explicit operator bool() const { return check_ != nullptr; }
  PyObject* method() const { return check_; }

  // True if the n tensors (borrowed) pass; false if not or on an error (cleared).
  bool operator()(PyObject* const* tensors) const;

 private:
  PyObject* check_ = nullptr;                 // the bound method (strong)
  mutable PyCFunctionWithKeywords fn_ = nullptr;  // its C function, when it takes (self, tuple, kwargs)
  PyObject* self_ = nullptr;                  // borrowed from check_
  mutable PyObject* args_ = nullptr;          // the lent tuple: untracked by the GC, items null between calls
  mutable bool busy_ = false;
  size_t n_ = 0;
};

}  // namespace ff
