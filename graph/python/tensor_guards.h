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

// A TensorGuards for `tensors` (a tuple) expecting sizes[i] / strides[i]. Returns it (new reference)
// and its bound check method in *check, or null with no error set when torch has none or the check
// rejects `tensors` themselves.
PyObject* make_tensor_guards(PyObject* tensors, const std::vector<std::vector<int64_t>>& sizes,
                             const std::vector<std::vector<int64_t>>& strides, PyObject** check);

}  // namespace ff
