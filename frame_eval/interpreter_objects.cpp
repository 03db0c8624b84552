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

namespace {

// Whether running a class body can be told apart from not running it (or running it later): it may
// only name constants and functions, wrapped in staticmethod / classmethod / property, and read its
// enclosing function's cells. Anything else (a call of another name, an attribute read, an import)
// may have effects.
bool plain_class_body(PyCodeObject* code) {
  const DecodedCode& dc = decode_code(code);
  const OpcodeInfo* table = opcode_table();
  for (const Instr& ins : dc.instrs) {
    std::string_view op = table[ins.opcode].name ? table[ins.opcode].name : "";
    if (op == "LOAD_NAME") {
      PyObject* n = PyTuple_GetItem(code->co_names, ins.arg);
      std::string_view name = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : "";
      if (name != "__name__" && name != "staticmethod" && name != "classmethod" && name != "property") return false;
      continue;
    }
    static constexpr std::string_view kPlain[] = {
        "RESUME", "NOP", "CACHE", "COPY_FREE_VARS", "MAKE_CELL", "STORE_NAME", "LOAD_CONST", "MAKE_FUNCTION",
        "LOAD_CLOSURE", "LOAD_CLASSDEREF", "LOAD_DEREF", "BUILD_TUPLE", "PUSH_NULL", "PRECALL", "CALL",
        "POP_TOP", "COPY", "RETURN_VALUE", "RETURN_CONST", "LOAD_LOCALS", "LOAD_FROM_DICT_OR_DEREF",
        // 3.13: closures and __class__ load their cells with LOAD_FAST; functions get their closure
        // from SET_FUNCTION_ATTRIBUTE
        "LOAD_FAST", "SET_FUNCTION_ATTRIBUTE"};
    if (std::find(std::begin(kPlain), std::end(kPlain), op) == std::end(kPlain)) return false;
  }
  PyErr_Clear();
  return true;
}

// Classes whose subclassing runs no code but type's (or torch's own, whose metaclasses and
// __init_subclass__ hooks only set up the new class: torch.autograd.Function).
bool plain_base(PyObject* base) {
  if (!PyType_Check(base)) return false;
  PyObject* meta = reinterpret_cast<PyObject*>(Py_TYPE(base));
  auto torch_owned = [](PyObject* cls) {
    PyRef mod = PyRef::steal(PyObject_GetAttrString(cls, "__module__"));
    PyErr_Clear();
    std::string_view m = mod && PyUnicode_Check(mod.get()) ? PyUnicode_AsUTF8(mod.get()) : "";
    return m == "torch" || m.starts_with("torch.");
  };
  if (meta != reinterpret_cast<PyObject*>(&PyType_Type) && !torch_owned(meta)) return false;
  PyObject* mro = reinterpret_cast<PyTypeObject*>(base)->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* c = PyTuple_GET_ITEM(mro, i);
    PyObject* dict = reinterpret_cast<PyTypeObject*>(c)->tp_dict;
    if (c != reinterpret_cast<PyObject*>(&PyBaseObject_Type) && dict && PyDict_GetItemString(dict, "__init_subclass__") && !torch_owned(c))
      return false;
  }
  return true;
}

}  // namespace

Sym SymbolicTracer::class_def(const std::vector<Sym>& args, const KwArgs& kwargs) {
  if (args.size() < 2 || !args[0]->is(SymKind::Function) || !args[1]->is(SymKind::Const) || !PyUnicode_Check(args[1]->obj.get()))
    brk(BreakKind::UnsupportedCall, "__build_class__ with other arguments than a class statement's");
  if (!kwargs.empty()) brk(BreakKind::UnsupportedCall, "a class statement with keywords (metaclass=...)");
  std::string what = "the class statement of " + std::string(PyUnicode_AsUTF8(args[1]->obj.get()));
  if (!plain_class_body(reinterpret_cast<PyCodeObject*>(args[0]->obj.get())))
    brk(BreakKind::UnsupportedCall, what + ": its body does more than define functions");
  for (size_t i = 2; i < args.size(); ++i)
    if (!args[i]->is(SymKind::Const) || !plain_base(args[i]->obj.get()))
      brk(BreakKind::UnsupportedCall, what + ": a base class whose metaclass or __init_subclass__ runs code");
  Sym c = make_sym(SymKind::ClassDef);
  c->items = args;
  return c;
}

}  // namespace ff
