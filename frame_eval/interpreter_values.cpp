// Turning real Python state into symbolic values: sources, guards, attributes and globals.
#include <Python.h>

#include <algorithm>

#include "frame_eval/frame_access.h"
#include "frame_eval/interpreter_impl.h"
#include "frame_eval/py_util.h"
#include "graph/op_registry.h"
#include "graph/python/graph_calls.h"

namespace ff {

std::string placeholder_name_for(const Source& s);

SourcePtr attr_source(const SourcePtr& base, const std::string& name) {
  if (!base) return nullptr;
  auto s = std::make_shared<Source>();
  s->kind = Source::Kind::Attr;
  s->base = base;
  s->name = name;
  return s;
}

SourcePtr item_source(const SourcePtr& base, PyObject* key) {
  if (!base) return nullptr;
  auto s = std::make_shared<Source>();
  s->kind = Source::Kind::Item;
  s->base = base;
  if (PyUnicode_CheckExact(key)) {
    s->key_is_str = true;
    s->str_key = PyUnicode_AsUTF8(key);
  } else if (PyLong_CheckExact(key)) {
    s->int_key = PyLong_AsLongLong(key);
  } else {
    return nullptr;
  }
  return s;
}

SourcePtr object_source(PyObject* obj, const std::string& printed) {
  auto s = std::make_shared<Source>();
  s->kind = Source::Kind::Object;
  s->object = PyRef::borrow(obj);
  s->name = printed;
  return s;
}

namespace {

bool is_tensor(PyObject* o) { return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(known().tensor_type)); }
bool is_module(PyObject* o) { return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(known().module_type)); }

// Objects of torch's own internals (torch.backends.cudnn, torch._VF, torch.finfo ...) whose
// attributes are read for real and treated as constants.
bool is_torch_internal(PyObject* o) {
  PyObject* mod = PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(o)), "__module__");
  bool r = false;
  if (mod && PyUnicode_Check(mod)) {
    std::string_view m = PyUnicode_AsUTF8(mod);
    r = m == "torch" || m.rfind("torch.", 0) == 0;
  }
  Py_XDECREF(mod);
  PyErr_Clear();
  return r;
}

// Modules whose attributes never need guards (the stdlib pieces model code uses, and torch).
bool is_stable_module(PyObject* m) {
  const char* name = PyModule_GetName(m);
  if (!name) {
    PyErr_Clear();
    return false;
  }
  std::string_view n = name;
  if (n == "torch" || n.rfind("torch.", 0) == 0) return true;
  for (std::string_view s : {"math", "operator", "functools", "builtins", "typing", "collections", "itertools",
                             "warnings", "numbers", "enum", "dataclasses", "numpy", "copy", "inspect"})
    if (n == s) return true;
  return false;
}

}  // namespace

bool is_frozen_view(const Sym& s) {
  if (!s->is(SymKind::Object) || s->source) return false;
  static PyTypeObject* views[3] = {nullptr, nullptr, nullptr};
  if (!views[0]) {
    PyRef od = PyRef::steal(PyObject_CallNoArgs(known().ordered_dict_type));
    const char* names[3] = {"keys", "values", "items"};
    for (int i = 0; i < 3; ++i) {
      PyRef v = PyRef::steal(od ? PyObject_CallMethod(od.get(), names[i], nullptr) : nullptr);
      views[i] = v ? Py_TYPE(v.get()) : &PyDictProxy_Type;
    }
    PyErr_Clear();
  }
  PyTypeObject* t = Py_TYPE(s->obj.get());
  return t == &PyDictProxy_Type || t == views[0] || t == views[1] || t == views[2];
}

// What reading class attribute `desc` through `self` (of type `type`) gives for the descriptors
// that bind: functions and builtin methods bound to self, classmethods to the type, staticmethods
// unwrapped. nullptr for any other attribute.
Sym bind_class_attr(const Sym& self, PyObject* desc, PyObject* type) {
  if (PyFunction_Check(desc) || PyObject_TypeCheck(desc, &PyMethodDescr_Type) || Py_TYPE(desc) == &PyWrapperDescr_Type) {
    Sym s = make_sym(SymKind::BoundMethod);
    s->items = {self, make_const(desc)};
    return s;
  }
  if (Py_TYPE(desc) != &PyClassMethod_Type && Py_TYPE(desc) != &PyStaticMethod_Type) return nullptr;
  PyRef fn = PyRef::steal(PyObject_GetAttrString(desc, "__func__"));
  if (Py_TYPE(desc) == &PyStaticMethod_Type) return make_const(fn.get());
  Sym s = make_sym(SymKind::BoundMethod);
  s->items = {make_const(type), make_const(fn.get())};
  return s;
}

PyObject* type_lookup(PyTypeObject* t, const char* name) {
  PyRef n = PyRef::steal(PyUnicode_InternFromString(name));
  return _PyType_Lookup(t, n.get());  // borrowed, no error set
}

PyObject* SymbolicTracer::dtype_object(DType t) { return known().dtypes[static_cast<size_t>(t)]; }

void SymbolicTracer::guard(Guard::Kind kind, const SourcePtr& src, PyObject* expected, int64_t length) {
  if (!src) return;
  // NB: keyed by source object (an attribute source by its base and name), not by the printed
  // expression: building strings for every guard dominated capture time on large models.
  const void* base = src->kind == Source::Kind::Attr ? static_cast<const void*>(src->base.get()) : src.get();
  std::string key;
  key.reserve(sizeof(void*) + 2 + src->name.size());
  key.append(reinterpret_cast<const char*>(&base), sizeof(void*));
  key.push_back(static_cast<char>(kind));
  key.push_back(static_cast<char>(src->kind));
  if (src->kind == Source::Kind::Attr) key += src->name;
  if (kind == Guard::Kind::NoAttr || kind == Guard::Kind::NoKey) key += std::string("/") + PyUnicode_AsUTF8(expected);
  if (kind == Guard::Kind::LenAtLeast) key += "/" + std::to_string(length);
  if (!guard_keys_.insert(key).second) return;
  Guard g;
  g.kind = kind;
  g.source = src;
  g.expected = expected;
  Py_XINCREF(expected);
  g.length = length;
  out_.guards.push_back(std::move(g));
}

void SymbolicTracer::note_instance_dict(PyObject* obj) {
  // NB: attribute writes are tracked per object; two objects sharing one __dict__ (proxies that
  // assign another's __dict__) would each see a stale view of the other's writes.
  PyObject** dp = _PyObject_GetDictPtr(obj);
  if (!dp || !*dp) return;
  auto [it, inserted] = owner_of_dict_.emplace(*dp, obj);
  if (!inserted && it->second != obj) brk(BreakKind::UnsupportedValue, "two objects sharing one __dict__");
}

// A set read from frame state, guarded by its elements in its iteration order (contents and
// order). The trace works on a private copy; changes are replayed on the real set afterwards.
void SymbolicTracer::read_set(const Sym& s, PyObject* obj, const SourcePtr& src) {
  PyRef elems = PyRef::steal(PySequence_Tuple(obj));
  FF_CHECK(elems, "tuple(set)");
  std::vector<Sym> keys;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(elems.get()); ++i) {
    PyObject* e = PyTuple_GET_ITEM(elems.get(), i);
    if (!is_plain_const(e)) brk(BreakKind::UnsupportedValue, "a set holding " + describe_sym(make_const(e)) + " (only sets of constants are modelled)");
    keys.push_back(make_const(e));
  }
  guard(Guard::Kind::TypeMatch, src, reinterpret_cast<PyObject*>(&PySet_Type));
  guard(Guard::Kind::IterMatch, src, elems.get());
  s->kind = SymKind::Set;
  s->obj = PyRef::steal(PySet_New(obj));
  s->source = src;
  s->origin = make_const(obj);
  s->keys = std::move(keys);
}

const Sym& SymbolicTracer::materialize(const Sym& v) {
  if (!v->is(SymKind::Appendable)) return v;
  PyRef real = v->obj;
  std::vector<Sym> added = std::move(v->items);
  v->items.clear();
  if (PyList_CheckExact(real.get())) {
    Py_ssize_t n = PyList_GET_SIZE(real.get());
    // NB: every item becomes a value with a guard of its own, checked on each call: past this a
    // list costs more to model than to run (a global list doubled per call reached 2**20 items,
    // and its frames took minutes where Python took seconds: pyfuzz program 2:88202).
    constexpr Py_ssize_t kMaxListItems = 1024;
    if (n > kMaxListItems)
      brk(BreakKind::UnsupportedValue, "a list of " + std::to_string(n) + " items read in full (framefuse models lists of up to " +
                                           std::to_string(kMaxListItems) + ")");
    guard(Guard::Kind::LenMatch, v->source, nullptr, n);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyRef idx = PyRef::steal(PyLong_FromSsize_t(i));
      v->items.push_back(wrap(PyList_GET_ITEM(real.get(), i), item_source(v->source, idx.get())));
    }
    v->kind = SymKind::List;
    if (!added.empty()) {
      for (Sym& a : added) v->items.push_back(std::move(a));
      note_list_mutation(v);
    }
    return v;
  }
  read_set(v, real.get(), v->source);
  for (const Sym& a : added) set_add(v, a);
  return v;
}

void SymbolicTracer::note_appended(const Sym& v) {
  for (const Sym& s : mutated_containers_)
    if (s == v) return;
  mutated_containers_.push_back(v);
}

NodeId SymbolicTracer::add_input(ValueMeta meta, const SourcePtr& src) {
  // NB: placeholders are appended where found; trace() moves them to the front.
  NodeId id = out_.graph.add_call(0, {}, std::move(meta), placeholder_name_for(*src));
  Node& n = out_.graph.mutable_node(id);
  n.kind = NodeKind::Placeholder;
  n.op = kNoOp;
  out_.inputs.push_back(src);
  return id;
}

Sym SymbolicTracer::wrap(PyObject* obj, SourcePtr src) {
  PyTypeObject* t = Py_TYPE(obj);
  if (t == &PyLong_Type && src)
    if (Sym s = dynamic_int(obj, src)) return s;
  if (is_plain_const(obj)) {
    if (t == &PyTuple_Type || t == &PyFrozenSet_Type || t == &PyRange_Type || t == &PySlice_Type ||
        std::string_view(t->tp_name) == "torch.Size") {
      guard(Guard::Kind::TypeMatch, src, reinterpret_cast<PyObject*>(t));
    }
    if (std::string_view(t->tp_name) == "torch.dtype") guard(Guard::Kind::IdMatch, src, obj);
    else guard(Guard::Kind::EqualsMatch, src, obj);
    if (std::string_view(t->tp_name) == "torch.Size") {
      std::vector<Sym> items;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) items.push_back(make_const(PyTuple_GET_ITEM(obj, i)));
      Sym s = make_tuple(std::move(items), known().size_type);
      s->source = src;
      return s;
    }
    return make_const(obj, src);
  }
  if (is_tensor(obj)) {
    if (!src) brk(BreakKind::UnsupportedValue, "a tensor that the compiled code cannot fetch again (no source)");
    TensorMeta meta;
    try {
      meta = meta_from_tensor(obj);
    } catch (const std::exception& e) {
      PyErr_Clear();
      brk(BreakKind::UnsupportedValue, std::string("tensor: ") + e.what());
    }
    make_dynamic(obj, *src, &meta);
    Guard g;
    g.kind = Guard::Kind::TensorMatch;
    g.source = src;
    g.tensor_meta = meta;
    g.expected = reinterpret_cast<PyObject*>(t);
    Py_INCREF(g.expected);
    out_.guards.push_back(std::move(g));
    NodeId id = add_input(ValueMeta::of_tensor(meta), src);
    input_tensors_.emplace(id, obj);
    Sym s = make_sym(SymKind::Tensor);
    s->node = id;
    s->meta = std::move(meta);
    s->obj = PyRef::borrow(reinterpret_cast<PyObject*>(t));
    s->source = src;
    return s;
  }
  auto cached = by_identity_.find(obj);
  if (cached != by_identity_.end()) {
    // NB: read through two sources as one object: the next call must pass one object there too.
    const Sym& known_sym = cached->second;
    if (src && known_sym->source && !known_sym->is(SymKind::Cell)) {
      std::string a = src->str(), b = known_sym->source->str();
      if (a != b && guard_keys_.insert("same:" + a + "|" + b).second) {
        Guard g;
        g.kind = Guard::Kind::SameObject;
        g.source = src;
        g.others = {known_sym->source};
        out_.guards.push_back(std::move(g));
      }
    }
    return known_sym;
  }
  if ((t == &PyList_Type || t == &PySet_Type) && src) {
    // NB: its contents are read (and guarded) only when the trace uses them: a list the code only
    // appends to (a comprehension's, resumed after a graph break) is guarded on its type alone.
    guard(Guard::Kind::TypeMatch, src, reinterpret_cast<PyObject*>(t));
    Sym s = make_sym(SymKind::Appendable);
    s->obj = PyRef::borrow(obj);
    s->source = src;
    by_identity_.emplace(obj, s);
    return s;
  }
  if (t == &PyList_Type || t == &PyTuple_Type) {
    guard(Guard::Kind::TypeMatch, src, reinterpret_cast<PyObject*>(t));
    Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    guard(Guard::Kind::LenMatch, src, nullptr, n);
    std::vector<Sym> items;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyRef idx = PyRef::steal(PyLong_FromSsize_t(i));
      items.push_back(wrap(PySequence_Fast_GET_ITEM(obj, i), item_source(src, idx.get())));
    }
    Sym s = t == &PyList_Type ? make_list(std::move(items)) : make_tuple(std::move(items));
    s->source = src;
    if (t == &PyList_Type) {
      s->obj = PyRef::borrow(obj);
      by_identity_.emplace(obj, s);
    }
    return s;
  }
  if (PyTuple_Check(obj) && PyObject_HasAttrString(reinterpret_cast<PyObject*>(t), "_fields")) {
    guard(Guard::Kind::TypeMatch, src, reinterpret_cast<PyObject*>(t));
    std::vector<Sym> items;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) {
      PyRef idx = PyRef::steal(PyLong_FromSsize_t(i));
      items.push_back(wrap(PyTuple_GET_ITEM(obj, i), item_source(src, idx.get())));
    }
    Sym s = make_tuple(std::move(items), reinterpret_cast<PyObject*>(t));
    s->source = src;
    return s;
  }
  if (t == &PyDict_Type || (PyDict_Check(obj) && std::string_view(t->tp_name) == "collections.OrderedDict")) {
    guard(Guard::Kind::TypeMatch, src, reinterpret_cast<PyObject*>(t));
    Sym s = read_dict(obj, src);
    s->obj = PyRef::borrow(obj);
    by_identity_.emplace(obj, s);
    return s;
  }
  if (PyCell_Check(obj)) brk(BreakKind::UnsupportedValue, "a cell object");
  if (t == reinterpret_cast<PyTypeObject*>(known().partial_type)) {
    Sym s = make_sym(SymKind::Partial);
    PyRef fn = PyRef::steal(PyObject_GetAttrString(obj, "func"));
    PyRef args = PyRef::steal(PyObject_GetAttrString(obj, "args"));
    PyRef kw = PyRef::steal(PyObject_GetAttrString(obj, "keywords"));
    guard(Guard::Kind::TypeMatch, src, reinterpret_cast<PyObject*>(t));
    s->items = {wrap(fn.get(), attr_source(src, "func")), wrap(args.get(), attr_source(src, "args")),
                wrap(kw.get(), attr_source(src, "keywords"))};
    if (s->items[1]->is(SymKind::Const)) s->items[1] = make_tuple(iterate(s->items[1]));
    return s;
  }
  if (PyMethod_Check(obj)) {
    Sym s = make_sym(SymKind::BoundMethod);
    s->items = {wrap(PyMethod_GET_SELF(obj), attr_source(src, "__self__")),
                wrap(PyMethod_GET_FUNCTION(obj), attr_source(src, "__func__"))};
    return s;
  }
  if (is_module(obj)) {
    // NB: not its identity: what the trace reads of a module (attributes, hooks, children,
    // parameters as graph inputs) is guarded where it is read, so N layers of one class share a
    // compile, and a model made again reuses it. Modules read as separate objects stay separate
    // (the Distinct guard), as must ones read as one (SameObject).
    guard(Guard::Kind::TypeMatch, src, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    note_instance_dict(obj);
    Sym s = make_sym(SymKind::Object);
    s->obj = PyRef::borrow(obj);
    s->source = src;
    by_identity_.emplace(obj, s);
    return s;
  }
  if (PyFunction_Check(obj) || PyCFunction_Check(obj) || PyType_Check(obj) || PyModule_Check(obj) ||
      Py_TYPE(obj) == &PyMethodDescr_Type || Py_TYPE(obj) == &PyWrapperDescr_Type ||
      PyObject_TypeCheck(obj, &PyBaseObject_Type) == 0) {
    guard(Guard::Kind::IdMatch, src, obj);
    return make_const(obj, src);
  }
  if (PyObject_IsInstance(obj, reinterpret_cast<PyObject*>(&PyBaseObject_Type)) &&
      PyObject_HasAttrString(reinterpret_cast<PyObject*>(t), "_member_map_")) {  // enum members
    guard(Guard::Kind::IdMatch, src, obj);
    return make_const(obj, src);
  }
  if (t == &PySet_Type) {
    Sym s = make_sym(SymKind::Set);
    read_set(s, obj, src);
    by_identity_.emplace(obj, s);
    return s;
  }
  if (PyObject* rest = iterator_rest(obj)) {  // a list / tuple / range / dict / set iterator
    Py_DECREF(rest);
    if (!src) brk(BreakKind::UnsupportedValue, "an iterator that the compiled code cannot fetch again");
    guard(Guard::Kind::TypeMatch, src, reinterpret_cast<PyObject*>(t));
    Sym it = make_sym(SymKind::Iterator);
    it->iter = IterKind::Native;
    it->obj = PyRef::borrow(obj);
    it->source = src;
    by_identity_.emplace(obj, it);
    return it;
  }
  if (is_torch_internal(obj)) {
    guard(Guard::Kind::IdMatch, src, obj);
    return make_const(obj, src);
  }
  // A user object: its type is guarded, attributes are guarded as they are read.
  guard(Guard::Kind::TypeMatch, src, reinterpret_cast<PyObject*>(t));
  note_instance_dict(obj);
  Sym s = make_sym(SymKind::Object);
  s->obj = PyRef::borrow(obj);
  s->source = src;
  by_identity_.emplace(obj, s);
  return s;
}

Sym SymbolicTracer::cell_contents(const Sym& cell) {
  FF_CHECK(cell && cell->is(SymKind::Cell), "LOAD_DEREF of a slot without a cell");
  if (cell->items.empty()) {
    if (!cell->obj) brk(BreakKind::RaisesInTrace, "free variable referenced before assignment");
    PyObject* v = PyCell_GET(cell->obj.get());
    if (!v) brk(BreakKind::RaisesInTrace, "free variable referenced before assignment");
    cell->items = {wrap(v, cell->source)};
  }
  return cell->items[0];
}

Sym SymbolicTracer::load_global(Frame& f, PyObject* name) {
  bool root = f.globals == view_.globals;
  if (root) {
    auto it = globals_cache_.find(name);
    if (it != globals_cache_.end()) return it->second;
  }
  PyObject* v = PyDict_GetItemWithError(f.globals, name);
  if (v) {
    SourcePtr src;
    if (root) {
      auto s = std::make_shared<Source>();
      s->kind = Source::Kind::Global;
      s->name = PyUnicode_AsUTF8(name);
      src = s;
    } else if (f.guard_globals) {
      if (!f.globals_source) {
        PyObject* modname = PyDict_GetItemString(f.globals, "__name__");
        f.globals_source = object_source(f.globals, std::string("globals of ") + (modname && PyUnicode_Check(modname) ? PyUnicode_AsUTF8(modname) : "?"));
      }
      src = item_source(f.globals_source, name);
    }
    Sym s = wrap(v, src);
    if (root) globals_cache_.emplace(name, s);
    return s;
  }
  PyErr_Clear();
  PyObject* b = PyDict_Check(f.builtins) ? PyDict_GetItemWithError(f.builtins, name) : PyObject_GetAttr(f.builtins, name);
  if (!PyDict_Check(f.builtins)) Py_XDECREF(b);  // borrowed enough: builtins module keeps it alive
  if (!b) {
    PyErr_Clear();
    brk(BreakKind::RaisesInTrace, std::string("name '") + PyUnicode_AsUTF8(name) + "' is not defined");
  }
  return make_const(b);
}

void SymbolicTracer::store_global(Frame& f, PyObject* name, Sym value) {
  if (f.globals != view_.globals) brk(BreakKind::UnsupportedAttribute, "assignment to a global of another module");
  auto s = std::make_shared<Source>();
  s->kind = Source::Kind::Global;
  s->name = PyUnicode_AsUTF8(name);
  effects_.push_back({SideEffect::Kind::StoreGlobal, s, s->name, PyRef(), value});
  globals_cache_[name] = std::move(value);
}

Sym SymbolicTracer::module_child(const Sym& module, const char* dict_name, PyObject* value, const std::string& key) {
  PyRef k = PyRef::steal(PyUnicode_FromString(key.c_str()));
  SourcePtr src = item_source(attr_source(module->source, dict_name), k.get());
  return wrap(value, src);
}

Sym find_attr(std::vector<std::pair<std::string, Sym>>& attrs, const std::string& name) {
  for (auto& [n, v] : attrs)
    if (n == name) return v;
  return nullptr;
}

void set_attr(std::vector<std::pair<std::string, Sym>>& attrs, const std::string& name, Sym v) {
  for (auto& [n, old] : attrs)
    if (n == name) {
      old = std::move(v);
      return;
    }
  attrs.emplace_back(name, std::move(v));
}

// obj.__dict__ of a plain object: the real dict, modelled like any dict passed in and kept in step
// with the object's attributes (a write through either is seen through the other).
Sym SymbolicTracer::instance_dict(const Sym& base) {
  if (base->origin) return base->origin;
  PyObject* o = base->obj.get();
  if (is_module(o)) brk(BreakKind::UnsupportedAttribute, "a module's __dict__ (its parameters and children live elsewhere)");
  for (const PendingEffect& e : effects_)
    if (e.kind == SideEffect::Kind::SetAttr && e.target == base->source)
      brk(BreakKind::UnsupportedAttribute, "obj.__dict__ after the compiled code assigned attributes of obj");
  PyRef d = PyRef::steal(PyObject_GenericGetDict(o, nullptr));
  if (!d) {
    PyErr_Clear();
    return missing_attr(base, "__dict__");
  }
  if (!PyDict_CheckExact(d.get())) brk(BreakKind::UnsupportedAttribute, "obj.__dict__ that is not a dict");
  owner_of_dict_[d.get()] = o;  // NB: a managed dict may only exist from now on
  Sym ds = wrap(d.get(), attr_source(base->source, "__dict__"));
  base->origin = ds;
  return ds;
}

Sym SymbolicTracer::owner_of_instance_dict(const Sym& dict) {
  if (!dict->obj) return nullptr;
  auto owner = owner_of_dict_.find(dict->obj.get());
  if (owner == owner_of_dict_.end()) return nullptr;
  auto sym = by_identity_.find(owner->second);
  return sym != by_identity_.end() && sym->second->origin == dict ? sym->second : nullptr;
}

void SymbolicTracer::set_object_attr(const Sym& obj, const std::string& name, Sym value) {
  set_attr(obj->attrs, name, std::move(value));
}

void SymbolicTracer::not_in_instance_dict(const Sym& base, const std::string& name) {
  PyRef n = PyRef::steal(PyUnicode_InternFromString(name.c_str()));
  guard(Guard::Kind::NoKey, attr_source(base->source, "__dict__"), n.get());
}

// An attribute the object does not have: nullptr, and a guard that it still has none (the next
// call's object may have gained it: hasattr() and getattr() defaults must see that).
Sym SymbolicTracer::missing_attr(const Sym& base, const std::string& name) {
  PyRef n = PyRef::steal(PyUnicode_InternFromString(name.c_str()));
  guard(Guard::Kind::NoAttr, base->source, n.get());
  return nullptr;
}

// Python's generic attribute lookup (object.__getattribute__) on an object from outside the trace:
// data descriptors, the instance dict, then class attributes, then module children and __getattr__.
// Null: no such attribute.
Sym SymbolicTracer::generic_object_attr(const Sym& base, const std::string& name) {
  if (Sym v = find_attr(base->attrs, name)) return v;
  PyObject* o = base->obj.get();
  PyTypeObject* t = Py_TYPE(o);
  if (name == "__class__" && type_lookup(t, "__class__") == type_lookup(&PyBaseObject_Type, "__class__"))
    return make_const(reinterpret_cast<PyObject*>(t));  // the object's type is guarded already
  if (name == "__dict__") return instance_dict(base);
  PyObject* desc = type_lookup(t, name.c_str());
  SourcePtr src = attr_source(base->source, name);
  Sym result;
  if (desc && PyObject_TypeCheck(desc, &PyProperty_Type)) {
    PyRef fget = PyRef::steal(PyObject_GetAttrString(desc, "fget"));
    if (!fget || fget.get() == Py_None) brk(BreakKind::UnsupportedAttribute, "a write-only property");
    return call(make_const(fget.get()), {base}, {});
  }
  bool data_descr = desc && Py_TYPE(desc)->tp_descr_set != nullptr;
  if (data_descr) {
    if (Py_TYPE(desc) == &PyMemberDescr_Type || Py_TYPE(desc) == &PyGetSetDescr_Type) {
      PyObject* v = PyObject_GetAttrString(o, name.c_str());
      if (!v) {
        PyErr_Clear();
        return nullptr;
      }
      PyRef hold = PyRef::steal(v);
      result = wrap(v, src);
      base->attrs.emplace_back(name, result);
      return result;
    }
    brk(BreakKind::UnsupportedAttribute, "attribute '" + name + "' is a descriptor written in Python");
  }
  PyObject** dictptr = _PyObject_GetDictPtr(o);
  PyObject* inst = nullptr;
  PyRef managed;
  if (dictptr && *dictptr) {
    inst = PyDict_GetItemString(*dictptr, name.c_str());
  } else if (t->tp_flags & Py_TPFLAGS_MANAGED_DICT) {
    managed = PyRef::steal(PyObject_GenericGetDict(o, nullptr));
    if (managed) inst = PyDict_GetItemString(managed.get(), name.c_str());
    PyErr_Clear();
  }
  if (inst) {
    result = wrap(inst, src);
  } else if (desc) {
    // NB: found on the class: an instance attribute of that name set later would shadow it.
    if ((dictptr && *dictptr) || managed) not_in_instance_dict(base, name);
    if (Sym bound = bind_class_attr(base, desc, reinterpret_cast<PyObject*>(t))) {
      result = bound;
    } else if (known().logger_type && PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(known().logger_type)) &&
               std::string_view(Py_TYPE(desc)->tp_name) == "functools._lru_cache_wrapper") {
      // A functools.lru_cache method of a logging.Logger (transformers' logger.warning_once):
      // bound as its __get__ binds it; a call is left for after the graph (call_logger_once).
      result = make_sym(SymKind::BoundMethod);
      result->items = {base, make_const(desc)};
      result->name = name;
    } else if (Py_TYPE(desc)->tp_descr_get) {
      brk(BreakKind::UnsupportedAttribute, "attribute '" + name + "' is a descriptor");
    } else {
      // A class attribute (e.g. `expansion = 4`): read through the instance so it is guarded.
      result = wrap(desc, src);
    }
  } else if (is_module(o)) {
    for (const char* dict_name : {"_parameters", "_buffers", "_modules"}) {
      PyObject* d = nullptr;
      if (dictptr && *dictptr) d = PyDict_GetItemString(*dictptr, dict_name);
      if (!d || !PyDict_Check(d)) continue;
      PyObject* v = PyDict_GetItemString(d, name.c_str());
      if (!v) continue;
      result = module_child(base, dict_name, v, name);
      break;
    }
    if (!result) return missing_attr(base, name);
  } else {
    // NB: with a __getattr__ (which try_load_attr calls next), hasattr() is always true: the
    // guard is that the object's own dict still lacks the name.
    if (!type_lookup(t, "__getattr__")) return missing_attr(base, name);
    if ((dictptr && *dictptr) || managed) not_in_instance_dict(base, name);
    return nullptr;
  }
  base->attrs.emplace_back(name, result);
  return result;
}

Sym SymbolicTracer::builtin_attr(const Sym& base, const std::string& name) {
  PyObject* t = type_of(base);
  if (!t) brk(BreakKind::UnsupportedAttribute, "attribute '" + name + "' of " + describe_sym(base));
  if (name == "__class__") return make_const(t);
  // NB: these types keep no attributes on their instances (a partial's __dict__ aside, which the
  // trace never fills): what the type does not have, the value does not have.
  PyObject* d = type_lookup(reinterpret_cast<PyTypeObject*>(t), name.c_str());
  if (!d) return nullptr;
  PyTypeObject* dt = Py_TYPE(d);
  if (dt == &PyMethodDescr_Type || dt == &PyWrapperDescr_Type || dt == &PyClassMethodDescr_Type || PyCFunction_Check(d)) {
    Sym m = make_sym(SymKind::Method);
    m->name = name;
    m->items = {base};
    return m;
  }
  if (d == Py_None || PyUnicode_Check(d)) return make_const(d);  // __hash__ = None, __doc__ ...
  brk(BreakKind::UnsupportedAttribute, "attribute '" + name + "' of " + describe_sym(base));
}

Sym SymbolicTracer::load_attr(const Sym& base, const std::string& name) {
  Sym r = try_load_attr(base, name);
  if (!r) raise_attribute_error(base, name);
  return r;
}

// Python's attribute slot: __getattribute__ (or the generic lookup), then, where that raised
// AttributeError, __getattr__. nullptr: AttributeError.
Sym SymbolicTracer::try_load_attr(const Sym& base, const std::string& name) {
  if (!base->is(SymKind::Object) && !base->is(SymKind::NewObject)) return lookup_attr(base, name);
  Sym r;
  try {
    r = lookup_attr(base, name);
  } catch (const RaisedInTrace& e) {
    if (!e.matches(PyExc_AttributeError)) throw;
  }
  if (r) return r;
  auto* t = reinterpret_cast<PyTypeObject*>(type_of(base));
  PyObject* ga = type_lookup(t, "__getattr__");
  if (!ga || (base->is(SymKind::Object) && is_module(base->obj.get()))) return nullptr;  // modules: generic_object_attr
  if (!PyFunction_Check(ga)) brk(BreakKind::UnsupportedAttribute, "__getattr__ implemented in C");
  PyRef n = PyRef::steal(PyUnicode_FromString(name.c_str()));
  try {
    return call(make_const(ga), {base, make_const(n.get())}, {});
  } catch (const RaisedInTrace& e) {
    if (!e.matches(PyExc_AttributeError)) throw;
    return nullptr;
  }
}

Sym SymbolicTracer::lookup_attr(const Sym& base, const std::string& name) {
  switch (base->kind) {
    case SymKind::Tensor: {
      const TensorMeta& m = base->meta;
      if (name == "shape") {
        std::vector<Sym> items;
        for (const SymInt& d : m.sizes) items.push_back(size_of(d));
        return make_tuple(std::move(items), known().size_type);
      }
      if (name == "dtype") return make_const(dtype_object(m.dtype));
      if (name == "device") {
        PyRef dev = PyRef::steal(PyObject_CallMethod(known().torch, "device", "s", m.device.str().c_str()));
        return make_const(dev.get());
      }
      if (name == "ndim") return make_const_steal(PyLong_FromLong(static_cast<long>(m.dim())));
      if (name == "requires_grad") return make_const(m.requires_grad ? Py_True : Py_False);
      if (name == "is_cuda") return make_const(m.device.type == Device::Type::CUDA ? Py_True : Py_False);
      if (name == "is_meta") return make_const(m.device.type == Device::Type::Meta ? Py_True : Py_False);
      if (name == "is_sparse" || name == "is_quantized" || name == "is_nested") return make_const(Py_False);
      if (name == "is_cpu") return make_const(m.device.type == Device::Type::CPU ? Py_True : Py_False);
      if (name == "layout") {  // NB: traced tensors are dense and strided (is_sparse above)
        PyRef strided = PyRef::steal(PyObject_GetAttrString(known().torch, "strided"));
        if (!strided) {
          PyErr_Clear();
          brk(BreakKind::UnsupportedAttribute, "tensor.layout");
        }
        return make_const(strided.get());
      }
      if (name == "H" || name == "mH") {
        // x.H: the conjugate transpose of a matrix; x.mH: of a batch of matrices.
        if (name == "H" ? m.dim() != 2 : m.dim() < 2)
          brk(BreakKind::RaisesInTrace, "RuntimeError: tensor." + name + " of a " + std::to_string(m.dim()) + "-d tensor");
        std::vector<Sym> args = {make_const_steal(PyLong_FromLong(-2)), make_const_steal(PyLong_FromLong(-1))};
        std::vector<Sym> none;
        KwArgs kw;
        return is_complex(m.dtype) ? call_tensor_method(base, "adjoint", none, kw) : call_tensor_method(base, "transpose", args, kw);
      }
      if (name == "T" || name == "mT") {
        if (name == "T" && m.dim() != 2) {
          std::vector<Sym> dims;
          for (int64_t d = m.dim() - 1; d >= 0; --d) dims.push_back(make_const_steal(PyLong_FromLongLong(d)));
          std::vector<Sym> args = {make_list(std::move(dims))};
          KwArgs kw;
          return call_tensor_method(base, "permute", args, kw);
        }
        std::vector<Sym> args = {make_const_steal(PyLong_FromLong(-2)), make_const_steal(PyLong_FromLong(-1))};
        KwArgs kw;
        return call_tensor_method(base, "transpose", args, kw);
      }
      if (name == "grad" && base->source) {
        // A leaf passed in: its .grad (None or a tensor) as another input, read through the same
        // attribute on the next call (the trace cannot change it: backward() and assignments break).
        auto real = input_tensors_.find(base->node);
        if (real != input_tensors_.end() && PyObject_IsTrue(PyRef::steal(PyObject_GetAttrString(real->second, "is_leaf")).get()) == 1) {
          PyRef g = PyRef::steal(PyObject_GetAttrString(real->second, "grad"));
          if (g) return wrap(g.get(), attr_source(base->source, "grad"));
        }
        PyErr_Clear();
      }
      if (name == "data" || name == "grad" || name == "grad_fn" || name == "_version")
        brk(BreakKind::UnsupportedAttribute, "tensor." + name);
      PyObject* desc = type_lookup(reinterpret_cast<PyTypeObject*>(known().tensor_type), name.c_str());
      if (desc && (PyObject_TypeCheck(desc, &PyMethodDescr_Type) || PyFunction_Check(desc) ||
                   Py_TYPE(desc) == &PyWrapperDescr_Type || PyCFunction_Check(desc))) {
        Sym m2 = make_sym(SymKind::Method);
        m2->name = name;
        m2->items = {base};
        return m2;
      }
      if (!desc) {
        // NB: tensors take instance attributes (`x.test = ...`): guard that a tensor passed in has none.
        if (!base->source) return nullptr;
        auto real = input_tensors_.find(base->node);
        if (real != input_tensors_.end() && PyObject_HasAttrString(real->second, name.c_str()))
          brk(BreakKind::UnsupportedAttribute, "attribute '" + name + "' set on a tensor");
        return missing_attr(base, name);
      }
      brk(BreakKind::UnsupportedAttribute, "tensor." + name);
    }
    case SymKind::Const: {
      PyObject* o = base->obj.get();
      if (PyModule_Check(o)) {
        PyObject* v = PyObject_GetAttrString(o, name.c_str());
        if (!v) {
          PyErr_Clear();
          return nullptr;
        }
        PyRef hold = PyRef::steal(v);
        return wrap(v, is_stable_module(o) ? nullptr : attr_source(base->source, name));
      }
      if (PyType_Check(o)) {
        PyObject* v = PyObject_GetAttrString(o, name.c_str());
        if (!v) {
          PyErr_Clear();
          return base->source ? missing_attr(base, name) : nullptr;
        }
        PyRef hold = PyRef::steal(v);
        if (PyMethod_Check(v)) {  // a classmethod bound to the class
          Sym s = make_sym(SymKind::BoundMethod);
          s->items = {base, make_const(PyMethod_GET_FUNCTION(v))};
          return s;
        }
        return wrap(v, attr_source(base->source, name));
      }
      if (is_plain_const(o) || PyFunction_Check(o) || PyCFunction_Check(o) || is_torch_internal(o) ||
          PyObject_HasAttrString(reinterpret_cast<PyObject*>(Py_TYPE(o)), "_member_map_")) {
        PyObject* v = PyObject_GetAttrString(o, name.c_str());
        if (!v) {
          PyErr_Clear();
          return nullptr;
        }
        PyRef hold = PyRef::steal(v);
        if (is_tensor(v)) brk(BreakKind::UnsupportedValue, "a tensor attribute of a constant object");
        return wrap(v, nullptr);
      }
      brk(BreakKind::UnsupportedAttribute, "attribute '" + name + "' of " + describe_sym(base));
    }
    case SymKind::Tuple:
      if (base->obj && base->obj.get() != known().size_type) {
        // namedtuple fields (_fields) and structseq fields (torch.return_types: __match_args__).
        for (const char* field_names : {"_fields", "__match_args__"}) {
          PyRef fields = PyRef::steal(PyObject_GetAttrString(base->obj.get(), field_names));
          if (!fields) PyErr_Clear();
          if (!fields || !PyTuple_Check(fields.get())) continue;
          for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()) && static_cast<size_t>(i) < base->items.size(); ++i)
            if (name == PyUnicode_AsUTF8(PyTuple_GET_ITEM(fields.get(), i))) return base->items[static_cast<size_t>(i)];
          break;
        }
        PyObject* attr = type_lookup(reinterpret_cast<PyTypeObject*>(base->obj.get()), name.c_str());
        if (attr && PyFunction_Check(attr)) {
          Sym s = make_sym(SymKind::BoundMethod);
          s->items = {base, make_const(attr)};
          return s;
        }
        if (attr && PyObject_TypeCheck(attr, &PyProperty_Type)) {
          PyRef fget = PyRef::steal(PyObject_GetAttrString(attr, "fget"));
          return call(make_const(fget.get()), {base}, {});
        }
      }
      return builtin_attr(base, name);
    case SymKind::List:
    case SymKind::Dict:
    case SymKind::Set:
    case SymKind::DictView:
    case SymKind::Iterator:
    case SymKind::Appendable:
      return builtin_attr(base, name);
    case SymKind::Super: {
      // super(cls, self).name: search the MRO of type(self) after cls.
      PyObject* self_type = type_of(base->items[0]);
      if (!self_type) brk(BreakKind::UnsupportedAttribute, "super() of an unknown type");
      PyObject* mro = reinterpret_cast<PyTypeObject*>(self_type)->tp_mro;
      Py_ssize_t n = PyTuple_GET_SIZE(mro), i = 0;
      while (i < n && PyTuple_GET_ITEM(mro, i) != base->obj.get()) ++i;
      PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
      for (++i; i < n; ++i) {
        PyTypeObject* klass = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
        PyRef dict_ref = PyRef::steal(ff_type_dict(klass));
        PyObject* dict = dict_ref.get();
        PyObject* v = dict ? PyDict_GetItem(dict, key.get()) : nullptr;
        if (!v) continue;
        if (Sym bound = bind_class_attr(base->items[0], v, self_type)) return bound;
        if (PyObject_TypeCheck(v, &PyProperty_Type)) {
          PyRef fget = PyRef::steal(PyObject_GetAttrString(v, "fget"));
          return call(make_const(fget.get()), {base->items[0]}, {});
        }
        // A plain class attribute, guarded where it lives (classes are mutable: A.a = 5).
        std::string printed = std::string(klass->tp_name);
        return wrap(v, attr_source(object_source(reinterpret_cast<PyObject*>(klass), printed), name));
      }
      return nullptr;
    }
    case SymKind::NewObject: {
      PyTypeObject* cls = reinterpret_cast<PyTypeObject*>(base->obj.get());
      PyObject* getattribute = type_lookup(cls, "__getattribute__");
      if (getattribute != type_lookup(&PyBaseObject_Type, "__getattribute__") && cls->tp_getattro != PyObject_GenericGetAttr) {
        if (!PyFunction_Check(getattribute)) brk(BreakKind::UnsupportedAttribute, "an object with a custom __getattribute__ written in C");
        PyRef n = PyRef::steal(PyUnicode_FromString(name.c_str()));
        return call(make_const(getattribute), {base, make_const(n.get())}, {});
      }
      return new_object_attr(base, name);
    }
    case SymKind::Object: {
      // NB: no attribute cache before a custom __getattribute__: it may map names (the cache holds
      // what the generic lookup found).
      // NB: dict's and other C types' __getattribute__ slot wrappers are the generic lookup too.
      PyObject* getattribute = type_lookup(Py_TYPE(base->obj.get()), "__getattribute__");
      if (Py_TYPE(base->obj.get())->tp_getattro != PyObject_GenericGetAttr &&
          getattribute != type_lookup(&PyBaseObject_Type, "__getattribute__")) {
        // A __getattribute__ written in Python (configuration objects remapping names) is inlined
        // like any method; its own lookups go through object.__getattribute__ below.
        if (!PyFunction_Check(getattribute)) brk(BreakKind::UnsupportedAttribute, "an object with a custom __getattribute__ written in C");
        PyRef n = PyRef::steal(PyUnicode_FromString(name.c_str()));
        return call(make_const(getattribute), {base, make_const(n.get())}, {});
      }
      return generic_object_attr(base, name);
    }
    case SymKind::Function:
    case SymKind::BoundMethod:
      if (name == "__self__" && base->is(SymKind::BoundMethod)) return base->items[0];
      if (name == "__func__" && base->is(SymKind::BoundMethod)) return base->items[1];
      brk(BreakKind::UnsupportedAttribute, "attribute '" + name + "' of a function");
    case SymKind::Partial:
      if (name == "func") return base->items[0];
      if (name == "args") return base->items[1];
      if (name == "keywords") return base->items[2];
      return builtin_attr(base, name);
    case SymKind::Slice:
      if (name == "start") return base->items[0];
      if (name == "stop") return base->items[1];
      if (name == "step") return base->items[2];
      return nullptr;
    default:
      brk(BreakKind::UnsupportedAttribute, "attribute '" + name + "' of " + describe_sym(base));
  }
}

// A dict passed in (or a dict subclass's contents): its keys guarded, its values read through
// item sources. NB: an OrderedDict iterates in its own order (move_to_end), not its table's: the
// keys are read through iteration, as the keys guard does.
Sym SymbolicTracer::read_dict(PyObject* obj, const SourcePtr& src) {
  PyRef keys = PyRef::steal(PySequence_Tuple(obj));
  FF_CHECK(keys, "tuple(dict)");
  guard(Guard::Kind::DictKeys, src, keys.get());
  Sym s = make_sym(SymKind::Dict);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys.get()); ++i) {
    PyObject* k = PyTuple_GET_ITEM(keys.get(), i);
    if (src && !PyUnicode_CheckExact(k) && !PyLong_CheckExact(k))
      brk(BreakKind::UnsupportedValue, "a dict with keys that are not str or int");
    PyObject* v = PyDict_GetItemWithError(obj, k);
    FF_CHECK(v, "a dict key vanished while read");
    s->keys.push_back(make_const(k));
    s->items.push_back(wrap(v, item_source(src, k)));
  }
  s->source = src;
  return s;
}

void SymbolicTracer::store_attr(const Sym& base, const std::string& name, Sym value) {
  if (name == "__class__" || name == "__dict__") brk(BreakKind::UnsupportedAttribute, "assignment to " + name);
  if (base->is(SymKind::NewObject)) {
    PyObject* setattr = type_lookup(reinterpret_cast<PyTypeObject*>(base->obj.get()), "__setattr__");
    if (setattr == type_lookup(&PyBaseObject_Type, "__setattr__")) return new_object_store(base, name, std::move(value));
    if (!PyFunction_Check(setattr)) brk(BreakKind::UnsupportedAttribute, "assignment to '" + name + "' runs __setattr__ written in C");
    PyRef n = PyRef::steal(PyUnicode_FromString(name.c_str()));
    call(make_const(setattr), {base, make_const(n.get()), std::move(value)}, {});
    return;
  }
  if (base->is(SymKind::Object) && base->source) {
    PyTypeObject* t = Py_TYPE(base->obj.get());
    PyObject* setattr = type_lookup(t, "__setattr__");
    bool plain = setattr == type_lookup(&PyBaseObject_Type, "__setattr__") || setattr == type_lookup(reinterpret_cast<PyTypeObject*>(known().module_type), "__setattr__");
    PyObject* desc = type_lookup(t, name.c_str());
    if (!plain || (desc && Py_TYPE(desc)->tp_descr_set))
      brk(BreakKind::UnsupportedAttribute, "assignment to '" + name + "' runs custom code");
    if (value->is(SymKind::Tensor) && is_module(base->obj.get())) {
      // Module.__setattr__ registers Parameters and checks buffers; only plain attributes and
      // registered buffers are replayed.
      PyObject** dictptr = _PyObject_GetDictPtr(base->obj.get());
      PyObject* params = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_parameters") : nullptr;
      if (params && PyDict_GetItemString(params, name.c_str()))
        brk(BreakKind::UnsupportedAttribute, "assignment to a parameter");
    }
    if (base->origin) {  // its __dict__ is modelled: the store goes there (and is replayed there)
      PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
      store_subscript(base->origin, make_const(key.get()), value);
      return;
    }
    effects_.push_back({SideEffect::Kind::SetAttr, base->source, name, PyRef(), value});
    set_attr(base->attrs, name, std::move(value));
    return;
  }
  brk(BreakKind::UnsupportedAttribute, "assignment to attribute '" + name + "' of " + describe_sym(base));
}

void SymbolicTracer::delete_attr(const Sym& base, const std::string& name) {
  // NB: an object the trace made holds all of its attributes in `attrs` (they are replayed onto
  // it where it escapes): `del` takes one out (contextlib's __enter__: `del self.args, self.kwds,
  // self.func`). A later read finds the class's attribute, or none, as Python would.
  if (base->is(SymKind::NewObject)) {
    PyTypeObject* cls = reinterpret_cast<PyTypeObject*>(base->obj.get());
    if (type_lookup(cls, "__delattr__") != type_lookup(&PyBaseObject_Type, "__delattr__"))
      brk(BreakKind::UnsupportedAttribute, "deleting attribute '" + name + "' runs custom code (__delattr__)");
    PyObject* desc = type_lookup(cls, name.c_str());
    if (desc && Py_TYPE(desc)->tp_descr_set && !is_slot(cls, desc))
      brk(BreakKind::UnsupportedAttribute, "deleting attribute '" + name + "' runs custom code (a descriptor)");
    if (!del_own_attr(base, name))
      brk(BreakKind::UnsupportedAttribute, "deleting attribute '" + name + "' that " + describe_sym(base) + " does not have");
    return;
  }
  brk(BreakKind::UnsupportedAttribute, "deleting attribute '" + name + "' of " + describe_sym(base));
}

}  // namespace ff
