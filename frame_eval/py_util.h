// Small helpers for raw CPython code in frame_eval/: an owning handle and cold-path printing.
#pragma once

#include <Python.h>

#include <string>
#include <utility>

namespace ff {

// Owns one strong reference (or none). NB: raw CPython rather than pybind11 on purpose: the
// hook's hot path must not go through pybind11 (DESIGN.md decision 1).
class PyRef {
 public:
  PyRef() = default;
  static PyRef steal(PyObject* o) { return PyRef(o); }            // takes a new reference
  static PyRef borrow(PyObject* o) { Py_XINCREF(o); return PyRef(o); }  // adds one
  PyRef(const PyRef& o) : p_(o.p_) { Py_XINCREF(p_); }
  PyRef(PyRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  PyRef& operator=(PyRef o) noexcept { std::swap(p_, o.p_); return *this; }
  ~PyRef() { Py_XDECREF(p_); }

  PyObject* get() const { return p_; }
  PyObject* release() { return std::exchange(p_, nullptr); }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  explicit PyRef(PyObject* o) : p_(o) {}
  PyObject* p_ = nullptr;
};

// repr(o), shortened to `max_len` characters; never raises (errors print as <repr failed>).
std::string py_short_repr(PyObject* o, size_t max_len = 80);
// "torch.Tensor", "builtins.int": the qualified name of a type (or of type(o) if o is not a type).
std::string py_type_name(PyObject* o);
// The current Python exception as "TypeName: message", cleared. Empty if none is set.
std::string fetch_py_error_text();

}  // namespace ff
