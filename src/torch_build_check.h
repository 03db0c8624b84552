// What framefuse's modules built against torch's C++ headers (_torch_native, _torch_replay) check
// before anything else: that the running torch is the one they were compiled for. A TensorImpl's
// layout and torch's C++ API are not stable across releases.
#pragma once

#include <Python.h>

#include <cstring>

// True if `torch` (the imported module) has version `built_for` and the C++ ABI `cxx11_abi`;
// otherwise false with ImportError set. `module` names the caller in the message, `without` says
// what framefuse does without it.
inline bool ff_same_torch(PyObject* torch, const char* module, const char* built_for, bool cxx11_abi,
                          const char* without) {
  PyObject* version = PyObject_GetAttrString(torch, "__version__");
  const char* v = version && PyUnicode_Check(version) ? PyUnicode_AsUTF8(version) : nullptr;
  bool same_version = v && std::strcmp(v, built_for) == 0;
  if (!same_version && !PyErr_Occurred())
    PyErr_Format(PyExc_ImportError, "%s was built for torch %s and this is torch %s: rebuild framefuse to use it (%s)",
                 module, built_for, v ? v : "(unknown)", without);
  Py_XDECREF(version);
  if (!same_version) return false;
  PyObject* C = PyObject_GetAttrString(torch, "_C");
  PyObject* abi = C ? PyObject_GetAttrString(C, "_GLIBCXX_USE_CXX11_ABI") : nullptr;
  Py_XDECREF(C);
  PyErr_Clear();
  bool same_abi = abi && PyObject_IsTrue(abi) == (cxx11_abi ? 1 : 0);
  Py_XDECREF(abi);
  if (!same_abi)
    PyErr_Format(PyExc_ImportError, "%s was built with another C++ ABI than this torch: rebuild framefuse", module);
  return same_abi;
}
