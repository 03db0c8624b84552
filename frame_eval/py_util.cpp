#include "frame_eval/py_util.h"

#include <algorithm>
#include <string_view>

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

namespace ff {

PyObject* iterator_rest(PyObject* it) {
  static const char* kinds[] = {"list_iterator", "tuple_iterator", "range_iterator", "list_reverseiterator",
                                "dict_keyiterator", "dict_valueiterator", "dict_itemiterator", "set_iterator"};
  std::string_view name = Py_TYPE(it)->tp_name;
  bool known = false;
  for (const char* k : kinds) known = known || name == k;
  if (!known) return nullptr;
  // (callable, (seq,)[, position]): list/tuple/range iterators count up from the position,
  // reversed counts down from it; dict and set iterators reduce to the list of their rest.
  PyRef r = PyRef::steal(PyObject_CallMethod(it, "__reduce__", nullptr));
  if (!r || !PyTuple_Check(r.get()) || PyTuple_GET_SIZE(r.get()) < 2) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* args = PyTuple_GET_ITEM(r.get(), 1);
  if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 1) return nullptr;
  PyObject* seq = PyTuple_GET_ITEM(args, 0);
  PyRef part;
  if (PyTuple_GET_SIZE(r.get()) >= 3) {
    Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(r.get(), 2));
    if (pos == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return nullptr;
    }
    bool reversed = name == "list_reverseiterator";
    PyRef start = PyRef::steal(reversed ? (pos < 0 ? nullptr : PyLong_FromSsize_t(pos)) : PyLong_FromSsize_t(pos));
    PyRef step = PyRef::steal(PyLong_FromLong(reversed ? -1 : 1));
    // NB: a reverse iterator whose position is past its list's end (the list shrank) yields nothing
    // more: CPython's listreviter_next ends it there.
    if (reversed && (pos < 0 || pos >= PySequence_Size(seq))) {
      PyErr_Clear();
      return PyTuple_New(0);
    }
    PyRef slice = PyRef::steal(PySlice_New(start.get(), nullptr, step.get()));
    part = PyRef::steal(slice ? PyObject_GetItem(seq, slice.get()) : nullptr);
    seq = part.get();
  }
  PyObject* out = seq ? PySequence_Tuple(seq) : nullptr;
  if (!out) PyErr_Clear();
  return out;
}

std::string qualname(PyObject* fn) {
  PyObject* q = PyObject_GetAttrString(fn, "__qualname__");
  if (!q) q = PyObject_GetAttrString(fn, "__name__");
  std::string r = q && PyUnicode_Check(q) ? PyUnicode_AsUTF8(q) : Py_TYPE(fn)->tp_name;
  Py_XDECREF(q);
  PyErr_Clear();
  // NB: pybind11 gives its functions its record type's name as their class ("PyCapsule.f",
  // "pybind11_detail_function_record_v1_..._abi_1.f"; torch.ops packets forward __qualname__ to
  // theirs): the function's own name says more.
  if (r.rfind("PyCapsule.", 0) == 0 || r.rfind("pybind11_detail_function_record", 0) == 0)
    r = r.substr(r.rfind('.') + 1);
  return r;
}

std::string module_of(PyObject* fn) {
  PyObject* m = PyObject_GetAttrString(fn, "__module__");
  std::string r = m && PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : "";
  Py_XDECREF(m);
  PyErr_Clear();
  if (r.empty() && PyCFunction_Check(fn)) {
    PyObject* self = PyCFunction_GET_SELF(fn);
    if (self && PyModule_Check(self)) {
      const char* n = PyModule_GetName(self);
      if (n) r = n;
      PyErr_Clear();
    }
  }
  return r;
}

bool function_named(PyObject* fn, std::initializer_list<std::string_view> names, std::initializer_list<std::string_view> modules) {
  auto* f = reinterpret_cast<PyFunctionObject*>(fn);
  if (!f->func_module || !PyUnicode_Check(f->func_module) || !PyUnicode_Check(f->func_qualname)) return false;
  std::string_view mod = PyUnicode_AsUTF8(f->func_module), name = PyUnicode_AsUTF8(f->func_qualname);
  return std::find(names.begin(), names.end(), name) != names.end() &&
         std::find(modules.begin(), modules.end(), mod) != modules.end();
}

namespace {
bool function_flag(PyObject* fn, const char* name) {
  PyObject** dict = _PyObject_GetDictPtr(fn);
  PyObject* flag = dict && *dict ? PyDict_GetItemString(*dict, name) : nullptr;  // borrowed
  return flag && PyObject_IsTrue(flag) == 1;
}
}  // namespace

bool torch_disable_marked(PyObject* fn) { return function_flag(fn, "_torchdynamo_disable"); }

PyObject* torch_nonrecursive_disable_code(PyObject* fn) {
  PyObject** dict = _PyObject_GetDictPtr(fn);
  if (!dict || !*dict) return nullptr;
  PyObject* recursive = PyDict_GetItemString(*dict, "_torchdynamo_disable_recursive");  // borrowed
  PyObject* orig = PyDict_GetItemString(*dict, "_torchdynamo_orig_callable");
  if (!recursive || recursive != Py_False || !orig) return nullptr;
  if (PyMethod_Check(orig)) orig = PyMethod_GET_FUNCTION(orig);
  return PyFunction_Check(orig) ? PyFunction_GET_CODE(orig) : nullptr;
}

bool marked_constant_result(PyObject* fn) { return function_flag(fn, "_dynamo_marked_constant"); }
bool framefuse_frame_disabled(PyObject* fn) { return function_flag(fn, "_framefuse_disable_frame"); }

PyObject* polyfill_table() {
  static PyObject* table = PyDict_New();  // NB: immortal, as the interpreter's other tables
  return table;
}

PyObject* framefuse_polyfill(PyObject* fn, bool* fold) {
  if (PyDict_GET_SIZE(polyfill_table()) == 0) return nullptr;
  PyRef key = PyRef::steal(PyLong_FromVoidPtr(fn));
  PyObject* entry = key ? PyDict_GetItem(polyfill_table(), key.get()) : nullptr;  // borrowed
  if (!entry || !PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3 || PyTuple_GET_ITEM(entry, 0) != fn) return nullptr;
  *fold = PyObject_IsTrue(PyTuple_GET_ITEM(entry, 2)) == 1;
  return PyTuple_GET_ITEM(entry, 1);
}

PyObject* torch_polyfill(PyObject* fn) {
  // NB: torch keeps its handlers in PolyfilledFunctionVariable's cached table, which its
  // substitute_in_graph fills in place (each handler carries the traceable function): the table is
  // fetched once torch._dynamo's variables are imported, then read.
  static PyObject* handlers = nullptr;
  if (!handlers) {
    static PyObject* const module_name = PyUnicode_InternFromString("torch._dynamo.variables");
    PyObject* variables = PyImport_GetModule(module_name);
    PyRef cls = variables ? PyRef::steal(PyObject_GetAttrString(variables, "PolyfilledFunctionVariable")) : PyRef();
    Py_XDECREF(variables);
    PyObject* table = cls ? PyObject_CallMethod(cls.get(), "_get_polyfill_handlers", nullptr) : nullptr;
    PyErr_Clear();
    if (!table || !PyDict_Check(table)) return Py_XDECREF(table), nullptr;
    handlers = table;  // NB: kept for the process, as torch keeps it
  }
  PyObject* wrapped = PyDict_GetItemWithError(handlers, fn);  // borrowed
  PyObject* traceable = wrapped ? PyObject_GetAttrString(wrapped, "__torch_dynamo_polyfill__") : nullptr;
  PyErr_Clear();
  if (traceable && !PyFunction_Check(traceable)) Py_CLEAR(traceable);
  if (traceable) {
    // torch's own polyfills (torch._dynamo.polyfills) are written for Dynamo's values, not eager's
    // (its countOf sums `it == b`, a tensor where eager compares to a bool): the user's only.
    PyObject* mod = reinterpret_cast<PyFunctionObject*>(traceable)->func_module;
    if (mod && PyUnicode_Check(mod) && std::string_view(PyUnicode_AsUTF8(mod)).rfind("torch.", 0) == 0) Py_CLEAR(traceable);
  }
  return traceable;
}

bool torch_compile_wrapper(PyObject* fn) {
  PyObject** dict = _PyObject_GetDictPtr(fn);
  return dict && *dict && PyDict_GetItemString(*dict, "_torchdynamo_orig_callable") && !torch_disable_marked(fn);
}

}  // namespace ff
