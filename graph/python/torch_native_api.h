// The C interface between framefuse._C and framefuse._torch_native (src/torch_native.cpp).
//
// _C uses torch only through its Python-visible API, so one build works with every torch. The
// hot-path checks of a cached call (tensor guards, compiled graphs' input layouts, grad mode and
// default dtype) then pay for torch's Python getters or for torch's TensorGuards, which allocates
// on every call. _torch_native is a second, optional module compiled against the installed torch's
// C++ headers: it reads the same facts straight from the TensorImpl and torch's thread-local state.
// It imports only under the torch it was built for, and _C falls back to the Python-visible path
// when it is missing.
//
// Plain C types only: the two modules share no C++ type, so each can be built with its own flags
// (_torch_native with torch's language standard and ABI).
#pragma once

#include <Python.h>

#include <stdint.h>

#define FF_TORCH_NATIVE_ABI 1
#define FF_TORCH_NATIVE_CAPSULE "framefuse._torch_native._API"

// One tensor's metadata. `sizes` and `strides` point into the tensor: read them before anything
// can run that might resize it.
typedef struct {
  uint64_t keys;  // dispatch keys with torch's thread-local include/exclude sets applied
  int64_t dim;
  const int64_t* sizes;
  const int64_t* strides;
  int32_t scalar_type;  // c10::ScalarType
  int32_t device_type;  // c10::DeviceType
  int32_t device_index;
  int32_t requires_grad;
} ff_native_tensor_meta;

typedef struct {
  uint32_t abi;   // FF_TORCH_NATIVE_ABI
  uint32_t size;  // sizeof(ff_torch_native_api)
  // 1 and *out filled if `tensor` (a torch tensor, borrowed) is a dense strided tensor with plain
  // sizes and strides (no subclass dispatch, nested, functional, batched, sparse or quantized
  // tensor); 0 otherwise. Never raises, never sets a Python error.
  int (*tensor_meta)(PyObject* tensor, ff_native_tensor_meta* out);
  int (*grad_enabled)(void);          // torch.is_grad_enabled()
  int (*default_scalar_type)(void);   // torch.get_default_dtype() as a c10::ScalarType
  int (*dtype_scalar_type)(PyObject* dtype);  // a torch.dtype's c10::ScalarType; -1 if not a dtype
} ff_torch_native_api;
