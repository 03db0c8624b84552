// framefuse._torch_native seen from _C: loading it once, and NativeTensorMatch, the tensor check
// built on it (graph/python/torch_native_api.h says what the module is and why it is separate).
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "graph/python/torch_native_api.h"

namespace ff {

// The module's functions, or null when it was not built, does not import under this torch, or
// config().torch_native is off. Imports it on the first call (needs the GIL; call it where torch
// has been imported). The reason it is missing goes to the `perf_hints` log once.
const ff_torch_native_api* torch_native();

// "loaded", or why torch_native() returns null.
std::string torch_native_status();

// One tensor's exact Python type, dispatch keys (with the thread-local sets applied, as torch's
// TensorGuards compares them), dtype, device, requires_grad, sizes and strides, compared in a few
// dozen instructions without allocating.
class NativeTensorMatch {
 public:
  NativeTensorMatch() = default;
  NativeTensorMatch(const NativeTensorMatch&) = delete;
  NativeTensorMatch& operator=(const NativeTensorMatch&) = delete;
  ~NativeTensorMatch();

  // Takes `tensor`'s (borrowed) properties as the expected ones. False, with nothing recorded, when
  // the module is unavailable or does not read this kind of tensor (see tensor_meta).
  bool record(PyObject* tensor);
  explicit operator bool() const { return api_ != nullptr; }

  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  bool requires_grad() const { return requires_grad_ != 0; }

  // Hot path: `tensor` (borrowed, any object) has every recorded property.
  bool matches(PyObject* tensor) const;
  // Cold path: the first property `tensor` differs in, as "requires_grad True (expected False)"
  // and the like; "" when it matches.
  std::string mismatch(PyObject* tensor) const;

 private:
  const ff_torch_native_api* api_ = nullptr;
  PyTypeObject* type_ = nullptr;  // strong
  uint64_t keys_ = 0;
  int32_t scalar_type_ = 0, device_type_ = 0, device_index_ = 0, requires_grad_ = 0;
  std::vector<int64_t> sizes_, strides_;
};

}  // namespace ff
