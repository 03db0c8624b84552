#include "inductor/python/packed_linear.h"

#include <string>

#include "src/logging.h"

namespace ff::inductor {

namespace {

// NB: plain statics filled under the GIL, not function-local statics: their initializers run
// Python code, and a second thread blocked on a C++ initialization guard while holding the GIL
// would deadlock against the first.
int g_available = -1;  // -1: not checked yet
PyObject* g_reorder = nullptr;
PyObject* g_linear = nullptr;
PyObject* g_is_grad_enabled = nullptr;

PyObject* attr_path(PyObject* root, std::initializer_list<const char*> names) {
  PyObject* o = root;
  Py_INCREF(o);
  for (const char* n : names) {
    PyObject* next = PyObject_GetAttrString(o, n);
    Py_DECREF(o);
    if (!next) return nullptr;
    o = next;
  }
  return o;
}

bool check_available() {
  PyObject* torch = PyImport_ImportModule("torch");
  if (!torch) return false;
  PyObject* mkl_ok = attr_path(torch, {"backends", "mkl", "is_available"});
  PyObject* r = mkl_ok ? PyObject_CallNoArgs(mkl_ok) : nullptr;
  bool ok = r == Py_True;
  Py_XDECREF(r);
  Py_XDECREF(mkl_ok);
  if (ok) {
    g_reorder = attr_path(torch, {"ops", "mkl", "_mkl_reorder_linear_weight"});
    g_linear = attr_path(torch, {"ops", "mkl", "_mkl_linear"});
    g_is_grad_enabled = attr_path(torch, {"is_grad_enabled"});
    ok = g_reorder && g_linear && g_is_grad_enabled;
  }
  Py_DECREF(torch);
  PyErr_Clear();  // NB: torch 1.13 has no torch.ops.mkl._mkl_linear: not available, not an error
  return ok;
}

// Whether autograd would record this product: _mkl_linear has no derivative.
int needs_autograd(PyObject* const* ts, size_t n) {
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (ts[i] == Py_None) continue;
    PyObject* r = PyObject_GetAttrString(ts[i], "requires_grad");
    if (!r) return -1;
    any |= r == Py_True;
    Py_DECREF(r);
  }
  if (!any) return 0;
  PyObject* g = PyObject_CallNoArgs(g_is_grad_enabled);
  if (!g) return -1;
  int on = g == Py_True;
  Py_DECREF(g);
  return on;
}

}  // namespace

bool packed_linear_available() {
  if (g_available < 0) g_available = check_available() ? 1 : 0;
  return g_available == 1;
}

PackedLinear::PackedLinear(int64_t rows, int64_t in_features, PyObject* out_sizes)
    : rows_(PyLong_FromLongLong(rows)), in_shape_(Py_BuildValue("(LL)", rows, in_features)), out_sizes_(out_sizes) {
  if (!rows_ || !in_shape_) {
    PyErr_Clear();
    disabled_ = true;
  }
}

PackedLinear::~PackedLinear() {
  if (!Py_IsInitialized()) return;
  PyGILState_STATE st = PyGILState_Ensure();
  Py_XDECREF(rows_);
  Py_XDECREF(in_shape_);
  PyGILState_Release(st);
}

PyObject* PackedLinear::call(PyObject* x, PyObject* w, PyObject* bias) {
  if (disabled_ || !packed_linear_available()) return nullptr;
  PyObject* out = try_call(x, w, bias);
  if (out) ++packed_calls_;
  if (out || !PyErr_Occurred()) return out;
  // NB: the ordinary linear runs instead, and reports the error if it has one too.
  std::string why = "error";
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (PyObject* str = value ? PyObject_Str(value) : nullptr) {
    if (const char* u = PyUnicode_AsUTF8(str)) why = u;
    Py_DECREF(str);
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  disabled_ = true;
  if (log_enabled(LogArtifact::perf_hints))
    log_emit(LogArtifact::perf_hints, "inductor: a linear layer runs without MKL's packed weights from now on: " + why);
  return nullptr;
}

PyObject* PackedLinear::try_call(PyObject* x, PyObject* w, PyObject* bias) {
  PyObject* operands[3] = {x, w, bias};
  int grad = needs_autograd(operands, 3);
  if (grad != 0) return nullptr;  // (an error, if any, stays set for the caller)
  TensorStamp stamp;
  if (!tensor_stamp(w, &stamp)) return nullptr;
  // NB: `packed` is this call's own reference: torch releases the GIL while it packs and while it
  // multiplies, and another thread may meanwhile bring another weight through this layer.
  PyObject* packed = packed_.get(w, stamp);
  if (!packed) {
    if (!seen_.made_from(w, stamp)) {
      // A new or changed weight (or one without a version counter, which could change unseen):
      // remembered, and packed if the next call brings it unchanged.
      seen_.set(w, stamp, nullptr);
      return nullptr;
    }
    PyObject* args[2] = {w, rows_};
    packed = PyObject_Vectorcall(g_reorder, args, 2, nullptr);
    if (!packed) return nullptr;
    packed_.set(w, stamp, packed);
  }
  PyObject* x2 = PyObject_CallMethod(x, "reshape", "(O)", in_shape_);
  PyObject* y = nullptr;
  if (x2) {
    PyObject* args[5] = {x2, packed, w, bias, rows_};
    y = PyObject_Vectorcall(g_linear, args, 5, nullptr);
    Py_DECREF(x2);
  }
  Py_DECREF(packed);
  if (!y) return nullptr;
  PyObject* out = PyObject_CallMethod(y, "view", "(O)", out_sizes_);
  Py_DECREF(y);
  return out;
}

}  // namespace ff::inductor
