// Builtin containers as the interpreter models them: the methods of list, tuple, dict, set and dict
// views. Each method either does exactly what CPython's does (results, mutation, aliasing,
// identity, the order sets iterate in) or breaks; where eager would raise, the trace breaks with
// RaisesInTrace and the frame runs eagerly, raising eager's error.
//
// Containers read from frame state keep their real object and source: their mutations are replayed
// on the real object after the graph ran (lists: their final contents; dicts: each store and
// delete in order; sets: what was removed, then what was added).
#include <Python.h>

#include <algorithm>

#include "frame_eval/interpreter_impl.h"

namespace ff {

namespace {

bool const_int(const Sym& s, int64_t* out) {
  if (!s->is(SymKind::Const) || !PyLong_Check(s->obj.get())) return false;
  *out = PyLong_AsLongLong(s->obj.get());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// Python's error text of a failed call, for the break reason.
std::string fetch_error() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  std::string msg = type ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "error";
  PyRef s = PyRef::steal(value ? PyObject_Str(value) : nullptr);
  if (s) msg += std::string(": ") + PyUnicode_AsUTF8(s.get());
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();
  return msg;
}

}  // namespace

// ---- sets -----------------------------------------------------------------------------------------

Sym SymbolicTracer::new_set(PyObject* shadow) {
  FF_CHECK(shadow && PySet_CheckExact(shadow), "a set model needs a set");
  Sym s = make_sym(SymKind::Set);
  s->obj = PyRef::steal(shadow);
  return s;
}

PyRef SymbolicTracer::set_key(const Sym& v) {
  PyRef key;
  if (v->is(SymKind::Const) || v->is(SymKind::Tuple)) {
    key = PyRef::steal(sym_to_const(v));
  } else if (v->is(SymKind::Object)) {
    // NB: objects hash and compare by identity unless their type says otherwise (user code then).
    PyTypeObject* t = Py_TYPE(v->obj.get());
    if (t->tp_hash == PyBaseObject_Type.tp_hash && t->tp_richcompare == PyBaseObject_Type.tp_richcompare)
      key = v->obj;
  }
  if (!key) brk(BreakKind::UnsupportedValue, "set element " + describe_sym(v));
  if (PyObject_Hash(key.get()) == -1) brk(BreakKind::RaisesInTrace, "TypeError: unhashable set element: " + fetch_error());
  return key;
}

Sym SymbolicTracer::set_element(PyObject* key) {
  auto it = by_identity_.find(key);
  if (it != by_identity_.end()) return it->second;
  return make_const(key);
}

PyObject* SymbolicTracer::set_operand(const Sym& v) {
  materialize(v);
  if (v->is(SymKind::Set)) {
    Py_INCREF(v->obj.get());
    return v->obj.get();
  }
  if (v->is(SymKind::Const) && PyAnySet_Check(v->obj.get())) {
    Py_INCREF(v->obj.get());
    return v->obj.get();
  }
  // Any other iterable: its elements in order (set.update(list) adds them one by one, as here).
  std::vector<Sym> items = iterate(v);
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(items.size()));
  for (size_t i = 0; i < items.size(); ++i) PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), set_key(items[i]).release());
  return t;
}

std::vector<Sym> SymbolicTracer::set_elements(const Sym& set) {
  if (set->origin) {
    // NB: a set read from frame state iterates in its own order (guarded); its private copy may
    // lay out its table differently, so after a change the order is no longer known.
    if (set->flag) brk(BreakKind::UnsupportedValue, "iteration over a set passed in after the compiled code changed it");
    return set->keys;
  }
  std::vector<Sym> out;
  PyRef it = PyRef::steal(PyObject_GetIter(set->obj.get()));
  while (PyObject* k = PyIter_Next(it.get())) {
    out.push_back(set_element(k));
    Py_DECREF(k);
  }
  FF_CHECK(!PyErr_Occurred(), "iteration of a set model");
  return out;
}

namespace {

// The operands of a set method call as it will be made again at the end. NB: taken before the
// call: an operand may be the set itself (s -= s) or another set of the trace that changes later.
PyRef recorded_operands(PyObject* argv) {
  Py_ssize_t n = PyTuple_GET_SIZE(argv);
  PyRef out = PyRef::steal(PyTuple_New(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = PyTuple_GET_ITEM(argv, i);
    PyObject* kept = PySet_CheckExact(a) ? PySet_New(a) : (Py_INCREF(a), a);
    if (!kept) return PyRef();
    PyTuple_SET_ITEM(out.get(), i, kept);
  }
  return out;
}

}  // namespace

void SymbolicTracer::note_set_mutation(const Sym& set, const char* method, PyRef args) {
  if (!set->origin) return;  // made by the trace: nothing outside sees it
  if (!set->source) brk(BreakKind::UnsupportedValue, "mutation of a set that cannot be fetched again");
  set->flag = true;
  set_calls_.push_back({set, method, std::move(args)});
  for (const Sym& s : mutated_containers_)
    if (s == set) return;
  mutated_containers_.push_back(set);
}

void SymbolicTracer::set_add(const Sym& set, const Sym& v) {
  PyRef key = set_key(v);
  if (set->is(SymKind::Appendable)) {  // a set passed in that the trace only adds to
    set->items.push_back(v);
    note_appended(set);
    return;
  }
  if (PySet_Add(set->obj.get(), key.get()) < 0) brk(BreakKind::RaisesInTrace, fetch_error());
  note_set_mutation(set, "add", PyRef::steal(PyTuple_Pack(1, key.get())));
}

Sym SymbolicTracer::set_binary_op(int nb, bool inplace, const Sym& a, const Sym& b) {
  auto is_setlike = [](const Sym& s) {
    return s->is(SymKind::Set) || (s->is(SymKind::Const) && PyAnySet_Check(s->obj.get()));
  };
  if (!is_setlike(a) || !is_setlike(b)) return nullptr;
  using BinFn = PyObject* (*)(PyObject*, PyObject*);
  BinFn fn = nullptr;
  const char* method = nullptr;  // the method that does what the in-place operator does
  switch (nb) {  // NB_AND, NB_OR, NB_SUBTRACT, NB_XOR
    case 1: fn = inplace ? PyNumber_InPlaceAnd : PyNumber_And, method = "intersection_update"; break;
    case 7: fn = inplace ? PyNumber_InPlaceOr : PyNumber_Or, method = "update"; break;
    case 10: fn = inplace ? PyNumber_InPlaceSubtract : PyNumber_Subtract, method = "difference_update"; break;
    case 12: fn = inplace ? PyNumber_InPlaceXor : PyNumber_Xor, method = "symmetric_difference_update"; break;
    default: return nullptr;
  }
  PyRef lhs = PyRef::steal(set_operand(a));
  PyRef rhs = PyRef::steal(set_operand(b));
  PyRef call = recorded_operands(PyRef::steal(PyTuple_Pack(1, rhs.get())).get());
  if (!call) brk(BreakKind::RaisesInTrace, fetch_error());
  PyRef r = PyRef::steal(fn(lhs.get(), rhs.get()));
  if (!r) brk(BreakKind::RaisesInTrace, fetch_error());
  if (r.get() == lhs.get() && a->is(SymKind::Set)) {  // in place on the model itself
    note_set_mutation(a, method, std::move(call));
    return a;
  }
  if (PySet_CheckExact(r.get())) return new_set(r.release());
  return make_const(r.get());
}

// ---- dicts ----------------------------------------------------------------------------------------

Sym SymbolicTracer::dict_view(const Sym& dict, const char* which) {
  Sym v = make_sym(SymKind::DictView);
  v->items = {dict};
  v->name = which;
  return v;
}

namespace {

// Index of `key` among a dict model's keys (compared as CPython's dict does for constants), or -1.
int dict_find(const Sym& d, PyObject* key) {
  for (size_t i = 0; i < d->keys.size(); ++i) {
    PyObject* k = d->keys[i]->obj.get();
    if (k == key) return static_cast<int>(i);
    int eq = PyObject_RichCompareBool(k, key, Py_EQ);
    if (eq < 0) PyErr_Clear();
    if (eq == 1) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

void SymbolicTracer::delete_dict_key(const Sym& d, int i) {
  if (owner_of_instance_dict(d)) brk(BreakKind::UnsupportedValue, "deleting from an object's __dict__");
  if (d->obj) {
    if (!d->source) brk(BreakKind::UnsupportedValue, "mutation of a dict that cannot be fetched again");
    effects_.push_back({SideEffect::Kind::DictDelItem, d->source, "", d->keys[static_cast<size_t>(i)]->obj, make_const(Py_None)});
  }
  d->keys.erase(d->keys.begin() + i);
  d->items.erase(d->items.begin() + i);
  ++d->version;
}

// ---- methods ----------------------------------------------------------------------------------------

namespace {
// The builtin base (dict or OrderedDict) that owns a C method descriptor; nullptr for any other.
PyTypeObject* mapping_owner(PyObject* descr) {
  if (Py_TYPE(descr) != &PyMethodDescr_Type && Py_TYPE(descr) != &PyWrapperDescr_Type) return nullptr;
  PyTypeObject* owner = PyDescr_TYPE(descr);
  return owner == &PyDict_Type || reinterpret_cast<PyObject*>(owner) == known().ordered_dict_type ? owner : nullptr;
}
}  // namespace

// The contents of a dict subclass's instance passed in (a registry global, a ModelOutput ...), read
// like a dict passed in (its keys in iteration order and its entries guarded), for dict's own
// read-only methods only: a write would be replayed through the subclass's own __setitem__. Its own
// __getitem__ and the like are inlined where they are called; only its iteration order must be
// dict's or OrderedDict's (the keys guard iterates it).
Sym SymbolicTracer::object_mapping(const Sym& v) {
  if (!v->items.empty()) return v->items[0];
  auto* t = Py_TYPE(v->obj.get());
  if (!mapping_owner(type_lookup(t, "__iter__"))) brk(BreakKind::UnsupportedValue, std::string(t->tp_name) + " with its own __iter__");
  Sym d = read_dict(v->obj.get(), v->source);
  v->items = {d};
  return d;
}

Sym SymbolicTracer::mapping_part(const Sym& v, const char* dunder) {
  bool passed_in = v->is(SymKind::Object) && PyDict_Check(v->obj.get()) && v->source;
  if (!(v->is(SymKind::NewObject) && !v->items.empty()) && !passed_in) return nullptr;
  PyObject* m = type_lookup(reinterpret_cast<PyTypeObject*>(type_of(v)), dunder);
  if (!m || !mapping_owner(m)) return nullptr;
  if (!passed_in) return v->items[0];
  std::string_view n = dunder;
  return n == "__len__" || n == "__contains__" || n == "__getitem__" || n == "__iter__" ? object_mapping(v) : nullptr;
}

Sym SymbolicTracer::call_mapping_method(PyObject* descr, std::vector<Sym>& args, KwArgs& kwargs) {
  if (args.empty()) return nullptr;
  PyTypeObject* owner = mapping_owner(descr);
  if (!owner) return nullptr;
  const std::string name = PyUnicode_AsUTF8(PyDescr_NAME(descr));
  if (args[0]->is(SymKind::Object) && PyDict_Check(args[0]->obj.get()) && args[0]->source) {
    static const char* const reads[] = {"get", "keys", "values", "items", "__getitem__", "__contains__", "__len__", "__iter__", "copy"};
    if (std::none_of(std::begin(reads), std::end(reads), [&](const char* n) { return name == n; }))
      brk(BreakKind::UnsupportedCall, std::string(owner->tp_name) + "." + name + " of " + describe_sym(args[0]) + " passed in");
    object_mapping(args[0]);
  }
  if (!(args[0]->is(SymKind::NewObject) || args[0]->is(SymKind::Object)) || args[0]->items.empty()) return nullptr;
  auto* cls = reinterpret_cast<PyTypeObject*>(type_of(args[0]));
  const Sym d = args[0]->items[0];
  std::vector<Sym> rest(args.begin() + 1, args.end());
  Sym none = make_const(Py_None);
  auto arity = [&](size_t n) {
    if (rest.size() != n || !kwargs.empty())
      brk(BreakKind::RaisesInTrace, "TypeError: " + std::string(owner->tp_name) + "." + name + "() takes " + std::to_string(n) + " arguments");
  };
  bool odict = owner != &PyDict_Type;
  if (name == "__init__") {
    if (rest.empty() && kwargs.empty()) return none;
    // NB: OrderedDict.__init__ stores through the object's own __setitem__.
    if (odict && type_lookup(cls, "__setitem__") != type_lookup(owner, "__setitem__"))
      brk(BreakKind::UnsupportedCall, std::string(cls->tp_name) + ".__init__ with contents (they go through its own __setitem__)");
    call_container_method(d, "update", rest, kwargs);
    return none;
  }
  if (name == "__getitem__") return arity(1), subscript(d, rest[0]);
  if (name == "__setitem__") return arity(2), store_subscript(d, rest[0], rest[1]), none;
  if (name == "__delitem__") return arity(1), delete_subscript(d, rest[0]), none;
  if (name == "__contains__") return arity(1), contains(d, rest[0]);
  if (name == "__len__") return arity(0), len_of(d);
  if (name == "__iter__") return arity(0), get_iter(d);
  // OrderedDict's own methods that behave as dict's on the contents; the others (move_to_end,
  // popitem(last=False), copy: type(self)(self), update: through __setitem__ ...) are not modelled.
  static const char* const same_as_dict[] = {"keys", "values", "items", "get", "pop", "setdefault", "clear"};
  if (odict && std::none_of(std::begin(same_as_dict), std::end(same_as_dict), [&](const char* n) { return name == n; }))
    brk(BreakKind::UnsupportedCall, std::string("OrderedDict.") + name + " of " + describe_sym(args[0]));
  if (name.size() > 1 && name[0] == '_' && name[1] == '_')
    brk(BreakKind::UnsupportedCall, std::string(owner->tp_name) + "." + name + " of " + describe_sym(args[0]));
  return call_container_method(d, name, rest, kwargs);
}

Sym SymbolicTracer::deep_copy(const Sym& v, std::unordered_map<const SymValue*, Sym>& memo) {
  materialize(v);
  if (auto m = memo.find(v.get()); m != memo.end()) return m->second;
  auto copy_items = [&](const std::vector<Sym>& items, bool* changed) {
    std::vector<Sym> out;
    for (const Sym& i : items) {
      out.push_back(deep_copy(i, memo));
      *changed |= out.back() != i;
    }
    return out;
  };
  switch (v->kind) {
    case SymKind::Const: {
      PyObject* o = v->obj.get();
      if (is_plain_const(o) || PyType_Check(o) || PyFunction_Check(o) || PyCFunction_Check(o) || PyModule_Check(o)) return v;
      // Another constant (a torch.device, an enum member ...): copied now; deepcopy keeps what it
      // returns itself as itself.
      PyRef c = PyRef::steal(PyObject_CallOneArg(known().copy_deepcopy, o));
      if (!c) {
        PyErr_Clear();
        brk(BreakKind::RaisesInTrace, "copy.deepcopy of " + describe_sym(v) + " raises");
      }
      if (c.get() == o) return v;
      if (!is_plain_const(c.get())) brk(BreakKind::UnsupportedCall, "copy.deepcopy of " + describe_sym(v));
      return make_const(c.get());
    }
    case SymKind::Tuple: {
      bool changed = false;
      std::vector<Sym> items = copy_items(v->items, &changed);
      if (!changed && !v->obj) return v;  // as copy's own: a tuple of atoms is itself
      if (v->obj && v->obj.get() != known().size_type) brk(BreakKind::UnsupportedCall, "copy.deepcopy of a named tuple");
      return make_tuple(std::move(items), v->obj.get());
    }
    case SymKind::List: {
      Sym out = make_list({});
      memo[v.get()] = out;
      bool changed = false;
      out->items = copy_items(v->items, &changed);
      return out;
    }
    case SymKind::Dict: {
      Sym out = make_sym(SymKind::Dict);
      memo[v.get()] = out;
      for (size_t i = 0; i < v->keys.size(); ++i) {
        out->keys.push_back(deep_copy(v->keys[i], memo));
        out->items.push_back(deep_copy(v->items[i], memo));
      }
      return out;
    }
    case SymKind::Object:
    case SymKind::NewObject: {
      // object.__reduce_ex__'s way for a plain class: cls.__new__(cls), then its __dict__ copied into
      // the new one. Anything that changes that (its own __deepcopy__, __reduce__, __getstate__,
      // __setstate__, __new__, slots, a builtin base) is not modelled.
      auto* t = reinterpret_cast<PyTypeObject*>(type_of(v));
      auto* base = &PyBaseObject_Type;
      bool plain = (t->tp_flags & Py_TPFLAGS_HEAPTYPE) && t->tp_dictoffset != 0 && t->tp_base->tp_new == PyBaseObject_Type.tp_new &&
                   type_lookup(t, "__new__") == type_lookup(base, "__new__") && !type_lookup(t, "__deepcopy__") &&
                   !type_lookup(t, "__setstate__") &&
                   type_lookup(t, "__reduce_ex__") == type_lookup(base, "__reduce_ex__") &&
                   type_lookup(t, "__reduce__") == type_lookup(base, "__reduce__") &&
                   type_lookup(t, "__getstate__") == type_lookup(base, "__getstate__") &&
                   type_lookup(t, "__slots__") == nullptr && (v->is(SymKind::NewObject) ? v->items.empty() : !PyObject_TypeCheck(v->obj.get(), reinterpret_cast<PyTypeObject*>(known().module_type)));
      if (!plain) brk(BreakKind::UnsupportedCall, "copy.deepcopy of " + describe_sym(v));
      Sym out = make_sym(SymKind::NewObject);
      out->obj = PyRef::borrow(reinterpret_cast<PyObject*>(t));
      memo[v.get()] = out;
      Sym state = v->is(SymKind::Object) ? instance_dict(v) : new_object_attr(v, "__dict__");
      if (!state || !state->is(SymKind::Dict)) brk(BreakKind::UnsupportedCall, "copy.deepcopy of " + describe_sym(v) + " without a __dict__");
      materialize(state);
      for (size_t i = 0; i < state->keys.size(); ++i) {
        PyObject* name = state->keys[i]->obj.get();
        if (!PyUnicode_Check(name)) brk(BreakKind::UnsupportedCall, "copy.deepcopy of " + describe_sym(v) + " with a non-string attribute name");
        out->attrs.emplace_back(PyUnicode_AsUTF8(name), deep_copy(state->items[i], memo));
      }
      return out;
    }
    default:
      break;
  }
  brk(BreakKind::UnsupportedCall, "copy.deepcopy of " + describe_sym(v));
}

Sym SymbolicTracer::call_container_method(const Sym& self, const std::string& name, std::vector<Sym>& args,
                                          KwArgs& kwargs) {
  Sym none = make_const(Py_None);
  auto arity = [&](size_t lo, size_t hi) {
    if (!kwargs.empty() && !(self->is(SymKind::Dict) && name == "update") && !(self->is(SymKind::List) && name == "sort"))
      brk(BreakKind::RaisesInTrace, "TypeError: " + name + "() takes no keyword arguments");
    if (args.size() < lo || args.size() > hi)
      brk(BreakKind::RaisesInTrace, "TypeError: " + name + "() takes " + std::to_string(lo) + " to " + std::to_string(hi) +
                                        " arguments (" + std::to_string(args.size()) + " given)");
  };
  auto index_arg = [&](size_t i) {
    int64_t v;
    if (!const_int(args[i], &v)) brk(BreakKind::UnsupportedOperand, name + "() with a non-constant index");
    return v;
  };
  // The first position where a sequence holds `x` (identity first, then ==, as list.index does);
  // -1 if none. Breaks where deciding it would compare tensors or run user code.
  auto find_in = [&](const std::vector<Sym>& items, const Sym& x, int64_t from, int64_t to) -> int64_t {
    int64_t n = static_cast<int64_t>(items.size());
    if (from < 0) from = std::max<int64_t>(0, from + n);
    if (to < 0) to = std::max<int64_t>(0, to + n);
    for (int64_t i = from; i < std::min(n, to); ++i) {
      const Sym& e = items[static_cast<size_t>(i)];
      if (e == x) return i;
      PyRef ec = PyRef::steal(sym_to_const(e));
      PyRef xc = PyRef::steal(sym_to_const(x));
      if (ec && xc && is_plain_const(ec.get()) && is_plain_const(xc.get())) {
        int eq = PyObject_RichCompareBool(ec.get(), xc.get(), Py_EQ);
        if (eq < 0) brk(BreakKind::RaisesInTrace, fetch_error());
        if (eq == 1) return i;
        continue;
      }
      if (is_same(e, x)->obj.get() == Py_True) return i;
      if (e->is(SymKind::Tensor) || x->is(SymKind::Tensor))
        brk(BreakKind::DataDependentBranch, name + "() compares a tensor");
      if (!(ec && xc)) brk(BreakKind::UnsupportedOperand, name + "() of " + describe_sym(x) + " in a sequence of other values");
    }
    return -1;
  };

  if (self->is(SymKind::Appendable)) {
    bool is_list = PyList_CheckExact(self->obj.get());
    if (args.size() == 1 && kwargs.empty() && name == (is_list ? "append" : "add")) {
      if (is_list) {
        self->items.push_back(args[0]);
        note_appended(self);
      } else {
        set_add(self, args[0]);
      }
      return none;
    }
    materialize(self);
  }
  switch (self->kind) {
    case SymKind::List: {
      std::vector<Sym>& items = self->items;
      int64_t n = static_cast<int64_t>(items.size());
      if (name == "append") {
        arity(1, 1);
        items.push_back(args[0]);
        note_list_mutation(self);
        return none;
      }
      if (name == "extend") {
        arity(1, 1);
        note_list_mutation(self);
        if (args[0]->is(SymKind::Iterator)) {
          // NB: CPython appends each item as the iterator yields it (a generator reading the list
          // sees the items appended so far); a list or tuple is read whole first (L.extend(L)).
          while (Sym i = iter_next(args[0])) items.push_back(std::move(i));
          return none;
        }
        for (Sym& i : iterate(args[0])) items.push_back(i);
        return none;
      }
      if (name == "insert") {
        arity(2, 2);
        int64_t i = index_arg(0);
        if (i < 0) i = std::max<int64_t>(0, i + n);
        i = std::min(i, n);
        items.insert(items.begin() + i, args[1]);
        note_list_mutation(self);
        return none;
      }
      if (name == "pop") {
        arity(0, 1);
        if (items.empty()) brk(BreakKind::RaisesInTrace, "IndexError: pop from empty list");
        int64_t i = args.empty() ? n - 1 : index_arg(0);
        if (i < 0) i += n;
        if (i < 0 || i >= n) brk(BreakKind::RaisesInTrace, "IndexError: pop index out of range");
        Sym r = items[static_cast<size_t>(i)];
        items.erase(items.begin() + i);
        note_list_mutation(self);
        return r;
      }
      if (name == "remove") {
        arity(1, 1);
        int64_t i = find_in(items, args[0], 0, n);
        if (i < 0) brk(BreakKind::RaisesInTrace, "ValueError: list.remove(x): x not in list");
        items.erase(items.begin() + i);
        note_list_mutation(self);
        return none;
      }
      if (name == "index" || name == "count") {
        if (name == "count") arity(1, 1);
        else arity(1, 3);
        if (name == "count") {
          int64_t c = 0;
          for (int64_t from = 0; from < n;) {
            int64_t i = find_in(items, args[0], from, n);
            if (i < 0) break;
            ++c;
            from = i + 1;
          }
          return make_const_steal(PyLong_FromLongLong(c));
        }
        int64_t i = find_in(items, args[0], args.size() > 1 ? index_arg(1) : 0, args.size() > 2 ? index_arg(2) : n);
        if (i < 0) brk(BreakKind::RaisesInTrace, "ValueError: list.index(x): x not in list");
        return make_const_steal(PyLong_FromLongLong(i));
      }
      if (name == "copy") {
        arity(0, 0);
        return make_list(items);
      }
      if (name == "reverse") {
        arity(0, 0);
        std::reverse(items.begin(), items.end());
        note_list_mutation(self);
        return none;
      }
      if (name == "clear") {
        arity(0, 0);
        items.clear();
        note_list_mutation(self);
        return none;
      }
      if (name == "sort") {
        arity(0, 0);
        Sym key_fn, reverse = make_const(Py_False);
        for (auto& [k, v] : kwargs) {
          if (k == "key") key_fn = v;
          else if (k == "reverse") reverse = v;
          else brk(BreakKind::RaisesInTrace, "TypeError: sort() got an unexpected keyword argument '" + k + "'");
        }
        // The permutation CPython's stable sort gives, computed on the (constant) keys.
        PyRef keys = PyRef::steal(PyList_New(n));
        for (int64_t i = 0; i < n; ++i) {
          const Sym& e = items[static_cast<size_t>(i)];
          Sym k = key_fn && !(key_fn->is(SymKind::Const) && key_fn->obj.get() == Py_None) ? call(key_fn, {e}, {}) : e;
          PyObject* kc = sym_to_const(k);
          if (!kc || !is_plain_const(kc)) {
            Py_XDECREF(kc);
            brk(BreakKind::UnsupportedOperand, "sort() of " + describe_sym(k));
          }
          PyList_SET_ITEM(keys.get(), static_cast<Py_ssize_t>(i), kc);
        }
        PyRef getitem = PyRef::steal(PyObject_GetAttrString(keys.get(), "__getitem__"));
        PyRef range = PyRef::steal(PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyRange_Type), "L", static_cast<long long>(n)));
        PyRef kw = PyRef::steal(PyDict_New());
        PyDict_SetItemString(kw.get(), "key", getitem.get());
        PyRef rev = PyRef::steal(sym_to_const(reverse));
        if (!rev) brk(BreakKind::UnsupportedOperand, "sort() with a non-constant reverse");
        PyDict_SetItemString(kw.get(), "reverse", rev.get());
        PyRef sorted_fn = PyRef::steal(PyObject_GetAttrString(known().builtins, "sorted"));
        PyRef sorted = PyRef::steal(PyObject_Call(sorted_fn.get(), PyRef::steal(PyTuple_Pack(1, range.get())).get(), kw.get()));
        if (!sorted) brk(BreakKind::RaisesInTrace, "sort() raises " + fetch_error());
        std::vector<Sym> out;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sorted.get()); ++i)
          out.push_back(items[static_cast<size_t>(PyLong_AsSsize_t(PyList_GET_ITEM(sorted.get(), i)))]);
        items = std::move(out);
        note_list_mutation(self);
        return none;
      }
      break;
    }
    case SymKind::Tuple:
      if (name == "count" || name == "index") {
        arity(1, name == "index" ? 3 : 1);
        int64_t n = static_cast<int64_t>(self->items.size());
        if (name == "count") {
          int64_t c = 0;
          for (int64_t from = 0; from < n;) {
            int64_t i = find_in(self->items, args[0], from, n);
            if (i < 0) break;
            ++c;
            from = i + 1;
          }
          return make_const_steal(PyLong_FromLongLong(c));
        }
        int64_t i = find_in(self->items, args[0], args.size() > 1 ? index_arg(1) : 0, args.size() > 2 ? index_arg(2) : n);
        if (i < 0) brk(BreakKind::RaisesInTrace, "ValueError: tuple.index(x): x not in tuple");
        return make_const_steal(PyLong_FromLongLong(i));
      }
      if (name == "_replace" || name == "_asdict") brk(BreakKind::UnsupportedCall, "namedtuple." + name);
      break;
    case SymKind::Dict: {
      auto key_of = [&](const Sym& k) {
        PyRef c = PyRef::steal(sym_to_const(k));
        if (!c) brk(BreakKind::UnsupportedValue, "dict key " + describe_sym(k));
        if (PyObject_Hash(c.get()) == -1) brk(BreakKind::RaisesInTrace, "TypeError: unhashable dict key: " + fetch_error());
        return c;
      };
      if (name == "get" || name == "__getitem__") {
        arity(1, name == "get" ? 2 : 1);
        int i = dict_find(self, key_of(args[0]).get());
        if (i >= 0) return self->items[static_cast<size_t>(i)];
        if (name == "__getitem__") brk(BreakKind::RaisesInTrace, "KeyError");
        return args.size() > 1 ? args[1] : none;
      }
      if (name == "__contains__") {
        arity(1, 1);
        return make_const(dict_find(self, key_of(args[0]).get()) >= 0 ? Py_True : Py_False);
      }
      if (name == "keys" || name == "values" || name == "items") {
        arity(0, 0);
        return dict_view(self, name.c_str());
      }
      if (name == "__iter__") {
        arity(0, 0);
        return get_iter(self);
      }
      if (name == "__len__") {
        arity(0, 0);
        return len_of(self);
      }
      if (name == "copy") {
        arity(0, 0);
        Sym d = make_sym(SymKind::Dict);
        d->keys = self->keys;
        d->items = self->items;
        return d;
      }
      if (name == "update") {
        if (args.size() > 1) brk(BreakKind::RaisesInTrace, "TypeError: update expected at most 1 argument");
        if (!args.empty()) {
          const Sym& other = args[0];
          if (other->is(SymKind::Dict)) {
            for (size_t i = 0; i < other->keys.size(); ++i) store_subscript(self, other->keys[i], other->items[i]);
          } else if (other->is(SymKind::Const) && PyDict_Check(other->obj.get())) {
            Sym w = wrap(other->obj.get(), nullptr);
            for (size_t i = 0; i < w->keys.size(); ++i) store_subscript(self, w->keys[i], w->items[i]);
          } else {
            for (Sym& pair : iterate(other)) {
              std::vector<Sym> kv = iterate(pair);
              if (kv.size() != 2) brk(BreakKind::RaisesInTrace, "ValueError: dictionary update sequence element has the wrong length");
              store_subscript(self, kv[0], kv[1]);
            }
          }
        }
        for (auto& [key, v] : kwargs) store_subscript(self, make_const_steal(PyUnicode_FromString(key.c_str())), v);
        return none;
      }
      if (name == "setdefault") {
        arity(1, 2);
        int i = dict_find(self, key_of(args[0]).get());
        if (i >= 0) return self->items[static_cast<size_t>(i)];
        Sym v = args.size() > 1 ? args[1] : none;
        store_subscript(self, args[0], v);
        return v;
      }
      if (name == "pop" || name == "__delitem__") {
        arity(1, name == "pop" ? 2 : 1);
        PyRef k = key_of(args[0]);
        int i = dict_find(self, k.get());
        if (i < 0) {
          if (args.size() > 1) return args[1];
          brk(BreakKind::RaisesInTrace, "KeyError in dict." + name);
        }
        Sym v = self->items[static_cast<size_t>(i)];
        delete_dict_key(self, i);
        return name == "pop" ? v : none;
      }
      if (name == "popitem") {
        arity(0, 0);
        if (self->keys.empty()) brk(BreakKind::RaisesInTrace, "KeyError: 'popitem(): dictionary is empty'");
        int i = static_cast<int>(self->keys.size()) - 1;
        Sym pair = make_tuple({self->keys[static_cast<size_t>(i)], self->items[static_cast<size_t>(i)]});
        delete_dict_key(self, i);
        return pair;
      }
      if (name == "clear") {
        arity(0, 0);
        while (!self->keys.empty()) delete_dict_key(self, static_cast<int>(self->keys.size()) - 1);
        return none;
      }
      break;
    }
    case SymKind::Set: {
      PyObject* shadow = self->obj.get();
      if (name == "add") {
        arity(1, 1);
        set_add(self, args[0]);
        return none;
      }
      if (name == "__contains__") {
        arity(1, 1);
        return contains(self, args[0]);
      }
      if (name == "__len__") {
        arity(0, 0);
        return len_of(self);
      }
      if (name == "pop") {
        arity(0, 0);
        // NB: set.pop() takes the element after an internal cursor that earlier pops moved; only a
        // set whose whole history the trace saw has a known cursor.
        if (self->origin) brk(BreakKind::UnsupportedCall, "set.pop() of a set passed in");
        PyRef r = PyRef::steal(PyObject_CallMethod(shadow, "pop", nullptr));
        if (!r) brk(BreakKind::RaisesInTrace, fetch_error());
        return set_element(r.get());
      }
      bool mutates = name == "remove" || name == "discard" || name == "clear" || name == "update" ||
                     name == "difference_update" || name == "intersection_update" ||
                     name == "symmetric_difference_update";
      bool pure = name == "copy" || name == "union" || name == "intersection" || name == "difference" ||
                  name == "symmetric_difference" || name == "issubset" || name == "issuperset" || name == "isdisjoint";
      if (!mutates && !pure) break;
      // The same method on the model, with the same kind of operands (sets stay sets: a set's
      // table is copied, not re-inserted, which can change the order it iterates in).
      PyRef argv = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
      for (size_t i = 0; i < args.size(); ++i) {
        PyObject* a = name == "remove" || name == "discard" ? set_key(args[i]).release() : set_operand(args[i]);
        PyTuple_SET_ITEM(argv.get(), static_cast<Py_ssize_t>(i), a);
      }
      if (!kwargs.empty()) brk(BreakKind::RaisesInTrace, "TypeError: set." + name + "() takes no keyword arguments");
      PyRef call = mutates ? recorded_operands(argv.get()) : PyRef();
      if (mutates && !call) brk(BreakKind::RaisesInTrace, fetch_error());
      PyRef fn = PyRef::steal(PyObject_GetAttrString(shadow, name.c_str()));
      PyRef r = PyRef::steal(fn ? PyObject_Call(fn.get(), argv.get(), nullptr) : nullptr);
      if (!r) brk(BreakKind::RaisesInTrace, "set." + name + "() raises " + fetch_error());
      if (mutates) {
        note_set_mutation(self, name.c_str(), std::move(call));
        return none;
      }
      if (PySet_CheckExact(r.get())) return new_set(r.release());
      return make_const(r.get());
    }
    case SymKind::DictView:
      if (name == "__len__") {
        arity(0, 0);
        return len_of(self);
      }
      if (name == "__iter__") {
        arity(0, 0);
        return get_iter(self);
      }
      if (name == "__contains__") {
        arity(1, 1);
        return contains(self, args[0]);
      }
      break;
    default:
      break;
  }
  brk(BreakKind::UnsupportedCall, std::string(sym_kind_name(self->kind)) + "." + name + "()");
}

}  // namespace ff
