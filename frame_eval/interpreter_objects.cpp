// Objects the trace makes (SymKind::NewObject): their own attributes (in `attrs`, or in a Dict once
// their __dict__ is read), Python's generic attribute protocol on them, and their slots.
#include <algorithm>

#include "frame_eval/interpreter_impl.h"

namespace ff {

Sym SymbolicTracer::own_attr(const Sym& obj, const std::string& name) {
  if (!obj->origin) return find_attr(obj->attrs, name);
  const Sym& d = obj->origin;
  for (size_t i = 0; i < d->keys.size(); ++i)
    if (PyUnicode_Check(d->keys[i]->obj.get()) && name == PyUnicode_AsUTF8(d->keys[i]->obj.get())) return d->items[i];
  return nullptr;
}

void SymbolicTracer::set_own_attr(const Sym& obj, const std::string& name, Sym value) {
  if (!obj->origin) return set_attr(obj->attrs, name, std::move(value));
  PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
  store_subscript(obj->origin, make_const(key.get()), std::move(value));
}

bool SymbolicTracer::del_own_attr(const Sym& obj, const std::string& name) {
  if (!own_attr(obj, name)) return false;
  if (obj->origin) {
    PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
    delete_subscript(obj->origin, make_const(key.get()));
    return true;
  }
  auto it = std::find_if(obj->attrs.begin(), obj->attrs.end(), [&](const auto& a) { return a.first == name; });
  obj->attrs.erase(it);
  return true;
}

bool is_slot(PyTypeObject* cls, PyObject* desc) {
  return cls->tp_dictoffset == 0 && desc && Py_TYPE(desc) == &PyMemberDescr_Type;
}

// Python's generic attribute lookup on an object the trace made: data descriptors of its class,
// then its own attributes, then the class's. nullptr: no such attribute.
Sym SymbolicTracer::new_object_attr(const Sym& base, const std::string& name) {
  auto* cls = reinterpret_cast<PyTypeObject*>(base->obj.get());
  if (name == "__class__" && type_lookup(cls, "__class__") == type_lookup(&PyBaseObject_Type, "__class__"))
    return make_const(base->obj.get());
  PyObject* v = type_lookup(cls, name.c_str());
  if (name == "__dict__" && v && Py_TYPE(v) == &PyGetSetDescr_Type && cls->tp_dictoffset != 0) {
    // From now on its attributes live in this Dict: a write through either is seen through both.
    if (!base->origin) {
      Sym d = make_sym(SymKind::Dict);
      for (auto& [n, a] : base->attrs) {
        d->keys.push_back(make_const_steal(PyUnicode_FromString(n.c_str())));
        d->items.push_back(a);
      }
      base->attrs.clear();
      base->origin = d;
    }
    return base->origin;
  }
  if (is_slot(cls, v)) {
    if (Sym a = find_attr(base->attrs, name)) return a;
    raise_attribute_error(base, name);  // a slot not set yet
  }
  if (v && Py_TYPE(v)->tp_descr_set) {  // a data descriptor wins over the instance's attributes
    if (PyObject_TypeCheck(v, &PyProperty_Type)) {
      PyRef fget = PyRef::steal(PyObject_GetAttrString(v, "fget"));
      if (!fget || fget.get() == Py_None) brk(BreakKind::RaisesInTrace, "AttributeError: property '" + name + "' has no getter");
      return call(make_const(fget.get()), {base}, {});
    }
    // Slots and C-level attributes of an object that does not exist yet (__weakref__, __dict__ ...).
    brk(BreakKind::UnsupportedAttribute, "attribute '" + name + "' of " + describe_sym(base) + " (a descriptor of its class)");
  }
  if (Sym a = own_attr(base, name)) return a;
  if (!v) return nullptr;
  if (Sym bound = bind_class_attr(base, v, base->obj.get())) return bound;
  if (Py_TYPE(v)->tp_descr_get) brk(BreakKind::UnsupportedAttribute, "attribute '" + name + "' is a descriptor");
  // A plain class attribute, guarded where it lives (classes are mutable: A.a = 5).
  return wrap(v, attr_source(object_source(base->obj.get(), cls->tp_name), name));
}

void SymbolicTracer::new_object_store(const Sym& base, const std::string& name, Sym value) {
  auto* cls = reinterpret_cast<PyTypeObject*>(base->obj.get());
  if (PyObject* desc = type_lookup(cls, name.c_str()); is_slot(cls, desc)) {
    set_attr(base->attrs, name, std::move(value));
    return;
  } else if (desc && Py_TYPE(desc)->tp_descr_set) {
    if (PyObject_TypeCheck(desc, &PyProperty_Type)) {
      PyRef fset = PyRef::steal(PyObject_GetAttrString(desc, "fset"));
      if (!fset || fset.get() == Py_None) brk(BreakKind::RaisesInTrace, "AttributeError: property '" + name + "' has no setter");
      call(make_const(fset.get()), {base, std::move(value)}, {});
      return;
    }
    brk(BreakKind::UnsupportedAttribute, "assignment to '" + name + "' of " + describe_sym(base) + " (a descriptor of its class)");
  }
  set_own_attr(base, name, std::move(value));
}

}  // namespace ff
