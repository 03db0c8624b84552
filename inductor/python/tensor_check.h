// Checks that tensors have the dtype, sizes and strides a compiled graph was built for (its
// inputs, and the results of extern calls that kernels read through raw pointers).
//
// Why not plain attribute reads: `t.dtype`, `t.shape`, `t.stride()` and two tuple comparisons
// cost about 0.6 us per tensor, as much as a whole small kernel. After the first tensors that pass
// the exact check, a shortcut recorded from them checks later calls: framefuse._torch_native's
// NativeTensorMatch where it is loaded (no allocation), else a torch._C._dynamo.guards.TensorGuards
// (where torch has it), the whole list in one call. Both are stricter (same Python type, dispatch
// keys, requires_grad, device index), so a tensor they reject goes through the exact check again:
// the shortcut only ever says "matches" for tensors the exact check would accept.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/python/tensor_guards.h"
#include "graph/python/torch_native.h"

namespace ff::inductor {

class LayoutCheck {
 public:
  // `device`: a torch.device (borrowed, must outlive this check) the tensors must be on; null: the CPU.
  explicit LayoutCheck(PyObject* device = nullptr) : device_(device) {}
  LayoutCheck(const LayoutCheck&) = delete;
  LayoutCheck& operator=(const LayoutCheck&) = delete;
  ~LayoutCheck() = default;

  // One expected tensor: `dtype` (a torch.dtype), `sizes` and `strides` (tuples of ints); all borrowed,
  // and must outlive this check.
  void add(PyObject* dtype, PyObject* sizes, PyObject* strides);
  size_t size() const { return want_.size(); }

  // 1 if every tensors[i] (borrowed) is a torch tensor of the i-th layout on the device, 0 if not,
  // -1 with a Python error set.
  int check(PyObject* const* tensors);
  // Cold path, after check() said 0: which tensor differs and how ("input 3: float32 (2, 64) strides
  // (64, 1), compiled for ..."); empty if none does (or on error, cleared).
  std::string mismatch(PyObject* const* tensors) const;

 private:
  struct Want {
    PyObject* dtype;
    PyObject* sizes;
    PyObject* strides;
  };
  int exact(PyObject* const* tensors);
  void arm(PyObject* const* tensors);

  std::vector<Want> want_;
  PyObject* device_ = nullptr;
  std::unique_ptr<NativeTensorMatch[]> native_;  // one per tensor, or null
  TensorGuardsCall fast_;     // TensorGuards.check, or empty
  bool tried_ = false;        // arm() ran (it runs once, after the first exact match)
};

// t.data_ptr() (t borrowed); nullptr with a Python error set on failure (an empty tensor's null
// pointer comes without an error). Shared by the CPU and CUDA runtimes.
void* tensor_data_ptr(PyObject* t);

}  // namespace ff::inductor
