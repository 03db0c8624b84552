// PyRef: the owning PyObject* reference of every area that holds Python objects (header only; the
// areas that include it link Python).
//
// A PyRef holds a new reference and releases it on destruction; the caller holds the GIL for every
// operation. Say how a pointer comes in: PyRef::steal (a new reference, e.g. what most C API calls
// return) or PyRef::borrow (a borrowed one: increfs). Copying increfs.
#pragma once

#include <Python.h>

#include <utility>

namespace ff {

class PyRef {
 public:
  PyRef() = default;
  static PyRef steal(PyObject* o) {
    PyRef r;
    r.p_ = o;
    return r;
  }
  static PyRef borrow(PyObject* o) {
    Py_XINCREF(o);
    return steal(o);
  }
  PyRef(const PyRef& o) : p_(o.p_) { Py_XINCREF(p_); }
  PyRef(PyRef&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  PyRef& operator=(PyRef o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~PyRef() { Py_XDECREF(p_); }
  PyObject* get() const { return p_; }
  // Hands the reference to the caller (a new reference) and leaves this empty.
  PyObject* release() {
    PyObject* r = p_;
    p_ = nullptr;
    return r;
  }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  PyObject* p_ = nullptr;
};

}  // namespace ff
