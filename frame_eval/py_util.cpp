#include "frame_eval/py_util.h"

namespace ff {

std::string py_short_repr(PyObject* o, size_t max_len) {
  if (!o) return "<null>";
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  std::string out;
  PyRef r = PyRef::steal(PyObject_Repr(o));
  const char* utf8 = r ? PyUnicode_AsUTF8(r.get()) : nullptr;
  if (utf8) out = utf8;
  else out = "<repr failed>";
  PyErr_Clear();
  PyErr_Restore(et, ev, tb);
  if (out.size() > max_len) out = out.substr(0, max_len - 3) + "...";
  return out;
}

std::string py_type_name(PyObject* o) {
  if (!o) return "<null>";
  PyTypeObject* t = PyType_Check(o) ? reinterpret_cast<PyTypeObject*>(o) : Py_TYPE(o);
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  std::string out = t->tp_name;
  PyRef mod = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(t), "__module__"));
  PyRef qual = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(t), "__qualname__"));
  if (mod && qual && PyUnicode_Check(mod.get()) && PyUnicode_Check(qual.get())) {
    const char* m = PyUnicode_AsUTF8(mod.get());
    const char* q = PyUnicode_AsUTF8(qual.get());
    if (m && q) out = std::string(m) == "builtins" ? std::string(q) : std::string(m) + "." + q;
  }
  PyErr_Clear();
  PyErr_Restore(et, ev, tb);
  return out;
}

std::string fetch_py_error_text() {
  if (!PyErr_Occurred()) return "";
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  PyErr_NormalizeException(&et, &ev, &tb);
  std::string out = et ? py_type_name(et) : "<exception>";
  if (ev) {
    PyRef s = PyRef::steal(PyObject_Str(ev));
    const char* u = s ? PyUnicode_AsUTF8(s.get()) : nullptr;
    if (u && *u) out += std::string(": ") + u;
    PyErr_Clear();
  }
  Py_XDECREF(et);
  Py_XDECREF(ev);
  Py_XDECREF(tb);
  return out;
}

}  // namespace ff
