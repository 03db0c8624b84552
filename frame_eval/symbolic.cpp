#include "frame_eval/symbolic.h"

#include <algorithm>

#include "src/base/errors.h"

namespace ff {

const char* sym_kind_name(SymKind k) {
  static const char* names[] = {
#define FF_SYM_NAME(k, doc) #k,
      FF_SYM_KINDS(FF_SYM_NAME)
#undef FF_SYM_NAME
  };
  return names[static_cast<size_t>(k)];
}

Sym make_const(PyObject* borrowed, SourcePtr source) {
  Sym s = make_sym(SymKind::Const);
  s->obj = PyRef::borrow(borrowed);
  s->source = std::move(source);
  return s;
}

Sym make_size(const SymInt& v) {
  if (!v.is_symbolic()) return make_const_steal(PyLong_FromLongLong(v.hint()));
  Sym s = make_sym(SymKind::SymInt);
  s->sint = v;
  return s;
}

Sym make_const_steal(PyObject* new_ref) {
  if (!new_ref) {
    PyErr_Clear();
    FF_CHECK(false, "a Python call made while tracing failed unexpectedly");
  }
  Sym s = make_sym(SymKind::Const);
  s->obj = PyRef::steal(new_ref);
  return s;
}

Sym make_tuple(std::vector<Sym> items, PyObject* tuple_type) {
  Sym s = make_sym(SymKind::Tuple);
  s->items = std::move(items);
  s->obj = PyRef::borrow(tuple_type);
  return s;
}

Sym make_list(std::vector<Sym> items) {
  Sym s = make_sym(SymKind::List);
  s->items = std::move(items);
  return s;
}

Sym make_null() {
  static const Sym null_sym = make_sym(SymKind::Null);
  return null_sym;
}

bool is_plain_const(PyObject* o) {
  if (o == Py_None || o == Py_Ellipsis || o == Py_NotImplemented) return true;
  PyTypeObject* t = Py_TYPE(o);
  if (t == &PyLong_Type || t == &PyFloat_Type || t == &PyBool_Type || t == &PyUnicode_Type ||
      t == &PyBytes_Type || t == &PyComplex_Type || t == &PyRange_Type || t == &PySlice_Type)
    return true;
  if (t == &PyTuple_Type || t == &PyFrozenSet_Type) {
    PyObject* it = PyObject_GetIter(o);
    if (!it) {
      PyErr_Clear();
      return false;
    }
    bool ok = true;
    while (PyObject* item = PyIter_Next(it)) {
      ok = ok && is_plain_const(item);
      Py_DECREF(item);
    }
    Py_DECREF(it);
    PyErr_Clear();
    return ok;
  }
  // torch.dtype, torch.device, torch.memory_format, torch.layout, torch.Size: pure C types of torch.
  const char* name = t->tp_name;
  if (name && (std::string_view(name) == "torch.dtype" || std::string_view(name) == "torch.device" ||
               std::string_view(name) == "torch.memory_format" || std::string_view(name) == "torch.layout"))
    return true;
  if (name && std::string_view(name) == "torch.Size") return true;
  return false;
}

namespace {
PyObject* sym_to_const_impl(const Sym& s, std::vector<const SymValue*>& open);
}

PyObject* sym_to_const(const Sym& s) {
  std::vector<const SymValue*> open;
  return sym_to_const_impl(s, open);
}

namespace {

// NB: `open` holds the containers being converted: one that holds itself is not a constant.
PyObject* sym_to_const_impl(const Sym& s, std::vector<const SymValue*>& open) {
  if (std::find(open.begin(), open.end(), s.get()) != open.end()) return nullptr;
  open.push_back(s.get());
  struct Close {
    std::vector<const SymValue*>& open;
    ~Close() { open.pop_back(); }
  } close{open};
  auto sym_to_const = [&open](const Sym& item) { return sym_to_const_impl(item, open); };
  switch (s->kind) {
    case SymKind::Const:
      Py_INCREF(s->obj.get());
      return s->obj.get();
    case SymKind::Tuple:
    case SymKind::List: {
      PyObject* seq = s->is(SymKind::List) ? PyList_New(s->items.size()) : PyTuple_New(s->items.size());
      for (size_t i = 0; i < s->items.size(); ++i) {
        PyObject* item = sym_to_const(s->items[i]);
        if (!item) {
          Py_DECREF(seq);
          return nullptr;
        }
        if (s->is(SymKind::List)) PyList_SET_ITEM(seq, i, item);
        else PyTuple_SET_ITEM(seq, i, item);
      }
      if (s->is(SymKind::Tuple) && s->obj) {
        // torch.Size(tuple); namedtuples take the fields positionally.
        PyObject* make = PyObject_GetAttrString(s->obj.get(), "_make");
        PyObject* r = make ? PyObject_CallOneArg(make, seq) : (PyErr_Clear(), PyObject_CallOneArg(s->obj.get(), seq));
        Py_XDECREF(make);
        Py_DECREF(seq);
        if (!r) PyErr_Clear();
        return r;
      }
      return seq;
    }
    case SymKind::Dict: {
      PyObject* d = PyDict_New();
      for (size_t i = 0; i < s->keys.size(); ++i) {
        PyObject* k = sym_to_const(s->keys[i]);
        PyObject* v = k ? sym_to_const(s->items[i]) : nullptr;
        if (!v || PyDict_SetItem(d, k, v) < 0) {
          Py_XDECREF(k);
          Py_XDECREF(v);
          Py_DECREF(d);
          PyErr_Clear();
          return nullptr;
        }
        Py_DECREF(k);
        Py_DECREF(v);
      }
      return d;
    }
    case SymKind::Set: {
      // NB: the model itself, not a copy: a copy may iterate in another order. Callers only read it.
      for (const Sym& e : s->keys)
        if (!e->is(SymKind::Const)) return nullptr;
      PyObject* it = PyObject_GetIter(s->obj.get());
      bool all_const = it != nullptr;
      while (PyObject* k = it ? PyIter_Next(it) : nullptr) {
        all_const = all_const && is_plain_const(k);
        Py_DECREF(k);
      }
      Py_XDECREF(it);
      PyErr_Clear();
      if (!all_const) return nullptr;
      PyObject* r = s->origin && !s->flag ? s->origin->obj.get() : s->obj.get();  // a set passed in: its own order
      Py_INCREF(r);
      return r;
    }
    case SymKind::DictView: {
      PyObject* d = sym_to_const(s->items[0]);
      PyObject* r = d ? PyObject_CallMethod(d, s->name.c_str(), nullptr) : nullptr;
      Py_XDECREF(d);
      if (!r) PyErr_Clear();
      return r;
    }
    case SymKind::Slice: {
      PyObject* a = sym_to_const(s->items[0]);
      PyObject* b = a ? sym_to_const(s->items[1]) : nullptr;
      PyObject* c = b ? sym_to_const(s->items[2]) : nullptr;
      PyObject* r = c ? PySlice_New(a, b, c) : nullptr;
      Py_XDECREF(a);
      Py_XDECREF(b);
      Py_XDECREF(c);
      if (!r) PyErr_Clear();
      return r;
    }
    default:
      return nullptr;
  }
}

}  // namespace

std::string describe_sym(const Sym& s) {
  switch (s->kind) {
    case SymKind::Const: {
      PyObject* r = PyObject_Repr(s->obj.get());
      std::string text = r ? PyUnicode_AsUTF8(r) : "?";
      Py_XDECREF(r);
      PyErr_Clear();
      if (text.size() > 60) text = text.substr(0, 57) + "...";
      return std::string(Py_TYPE(s->obj.get())->tp_name) + " " + text;
    }
    case SymKind::Tensor: return "a tensor";
    case SymKind::Scalar: return s->obj.get() == reinterpret_cast<PyObject*>(&PyLong_Type) ? "an int read from a tensor (.item())" : "a float read from a tensor (.item())";
    case SymKind::Object: return std::string("a ") + Py_TYPE(s->obj.get())->tp_name + " object";
    case SymKind::NewObject: return std::string("a new ") + reinterpret_cast<PyTypeObject*>(s->obj.get())->tp_name + " object";
    case SymKind::Method: return "method " + s->name;
    default: return sym_kind_name(s->kind);
  }
}

}  // namespace ff
