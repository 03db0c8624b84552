// framefuse._torch_native: tensor metadata and torch's thread-local modes read through torch's C++
// headers, for the hot-path checks of cached calls (graph/python/torch_native_api.h says why).
//
// Built against the torch found when framefuse was configured, and only imported under that same
// torch (version string and C++ ABI): a TensorImpl's layout is not stable across releases.
// Everything here is inline torch code plus a few libc10 functions; nothing from libtorch_python.
#include <Python.h>

#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>

#include "graph/python/torch_native_api.h"
#include "src/torch_build_check.h"

#ifndef FF_TORCH_VERSION
#error "FF_TORCH_VERSION (torch.__version__ at configure time) must be defined"
#endif

namespace {

PyTypeObject* g_tensor_base = nullptr;  // torch._C.TensorBase (strong, leaked)
PyTypeObject* g_dtype_type = nullptr;   // torch.dtype (strong, leaked)

// NB: the keys TensorGuards compares (Dynamo's LocalState): the tensor's own keys with the
// thread-local included set added and the excluded set removed, so that entering e.g.
// inference-mode-like dispatch states fails the check as it does for torch.compile. Less the
// autocast keys: autocast's state has a guard of its own (the global-state guard), and a frame
// traced under autocast records its tensors with autocast switched off (frame_eval/torch_refs.h
// AutocastOff).
uint64_t local_keys(c10::DispatchKeySet ks) {
  c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  return (((ks | tls.included_) - tls.excluded_) - c10::autocast_dispatch_keyset).raw_repr();
}

int tensor_meta(PyObject* obj, ff_native_tensor_meta* out) noexcept {
  if (!obj || !g_tensor_base || !PyObject_TypeCheck(obj, g_tensor_base)) return 0;
  try {
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!t.defined()) return 0;
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    c10::DispatchKeySet ks = impl->key_set();
    // NB: every TensorImpl whose sizes or strides are not plain fields (custom sizes policies,
    // symbolic shapes) carries one of these keys or a non-strided layout; for the rest sizes()
    // and strides() are two field reads that cannot throw.
    if (impl->layout() != c10::kStrided || impl->is_python_dispatch() || impl->is_nested() ||
        impl->is_quantized() || ks.has(c10::DispatchKey::Functionalize) ||
        ks.has(c10::DispatchKey::FuncTorchBatched) || ks.has(c10::DispatchKey::FuncTorchGradWrapper) ||
        ks.has(c10::DispatchKey::PythonTLSSnapshot))
      return 0;
    c10::Device device = impl->device();
    if (device.type() != c10::DeviceType::CPU && device.type() != c10::DeviceType::CUDA &&
        device.type() != c10::DeviceType::Meta)
      return 0;
    c10::IntArrayRef sizes = impl->sizes();
    c10::IntArrayRef strides = impl->strides();
    if (sizes.size() != strides.size()) return 0;
    out->keys = local_keys(ks);
    out->dim = static_cast<int64_t>(sizes.size());
    out->sizes = sizes.data();
    out->strides = strides.data();
    out->scalar_type = static_cast<int32_t>(c10::typeMetaToScalarType(impl->dtype()));
    out->device_type = static_cast<int32_t>(device.type());
    out->device_index = static_cast<int32_t>(device.index());
    out->requires_grad = impl->requires_grad() ? 1 : 0;
    return 1;
  } catch (...) {
    return 0;
  }
}

int grad_enabled() { return c10::GradMode::is_enabled() ? 1 : 0; }

int default_scalar_type() { return static_cast<int>(c10::get_default_dtype_as_scalartype()); }

int dtype_scalar_type(PyObject* dtype) {
  if (!dtype || !g_dtype_type || Py_TYPE(dtype) != g_dtype_type) return -1;
  return static_cast<int>(reinterpret_cast<THPDtype*>(dtype)->scalar_type);
}

const ff_torch_native_api kApi = {
    FF_TORCH_NATIVE_ABI,
    sizeof(ff_torch_native_api),
    tensor_meta,
    grad_enabled,
    default_scalar_type,
    dtype_scalar_type,
};

PyTypeObject* type_attr(PyObject* obj, const char* name) {
  PyObject* t = PyObject_GetAttrString(obj, name);
  if (t && !PyType_Check(t)) Py_CLEAR(t);
  if (!t) PyErr_Clear();
  return reinterpret_cast<PyTypeObject*>(t);
}

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_torch_native",
                       "framefuse's reader of tensor metadata through torch's C++ headers (internal).",
                       -1, nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__torch_native(void) {
  PyObject* torch = PyImport_ImportModule("torch");
  if (!torch) return nullptr;
  PyObject* module = nullptr;
  if (ff_same_torch(torch, "framefuse._torch_native", FF_TORCH_VERSION, _GLIBCXX_USE_CXX11_ABI,
                    "framefuse works without it, with slower guard checks")) {
    PyObject* C = PyObject_GetAttrString(torch, "_C");
    if (C) {
      // NB: TensorBase in torch 2.x, _TensorBase in 1.x.
      g_tensor_base = type_attr(C, "TensorBase");
      if (!g_tensor_base) g_tensor_base = type_attr(C, "_TensorBase");
      Py_DECREF(C);
    }
    PyObject* f32 = PyObject_GetAttrString(torch, "float32");
    if (f32) {
      g_dtype_type = Py_TYPE(f32);
      Py_INCREF(reinterpret_cast<PyObject*>(g_dtype_type));
      Py_DECREF(f32);
    }
    if (!g_tensor_base || !g_dtype_type) {
      PyErr_SetString(PyExc_ImportError, "framefuse._torch_native: torch._C.TensorBase or torch.dtype not found");
    } else {
      module = PyModule_Create(&kModule);
      PyObject* capsule = module ? PyCapsule_New(const_cast<ff_torch_native_api*>(&kApi), FF_TORCH_NATIVE_CAPSULE, nullptr)
                                 : nullptr;
      if (!capsule || PyModule_AddObjectRef(module, "_API", capsule) < 0 ||
          PyModule_AddStringConstant(module, "torch_version", FF_TORCH_VERSION) < 0)
        Py_CLEAR(module);
      Py_XDECREF(capsule);
    }
  }
  Py_DECREF(torch);
  return module;
}
