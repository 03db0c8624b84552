// Python operators, truth tests, subscripts and iteration on symbolic values.
#include <Python.h>

#include <functional>

#include "frame_eval/interpreter_impl.h"
#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/python/graph_calls.h"
#include "src/base/config.h"
#include "src/base/gil_once.h"

namespace ff {

namespace {

// An object of the typing module (typing.List, typing.Optional ...): subscripting it is pure.
bool is_typing_form(PyObject* o) {
  PyRef mod = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(o)), "__module__"));
  PyErr_Clear();
  return mod && PyUnicode_Check(mod.get()) && PyUnicode_CompareWithASCIIString(mod.get(), "typing") == 0;
}

const char* kNbNames[] = {"add", "and_", "floordiv", "lshift", "matmul", "mul", "mod", "or_", "pow",
                          "rshift", "sub", "truediv", "xor"};
const char* kNbInplace[] = {"iadd", "iand", "ifloordiv", "ilshift", "imatmul", "imul", "imod", "ior", "ipow",
                            "irshift", "isub", "itruediv", "ixor"};
const char* kTensorInplace[] = {"add_", "bitwise_and_", "floor_divide_", "bitwise_left_shift_", nullptr, "mul_",
                                "remainder_", "bitwise_or_", "pow_", "bitwise_right_shift_", "sub_", "div_",
                                "bitwise_xor_"};
const char* kCmpNames[] = {"lt", "le", "eq", "ne", "gt", "ge"};

PyRef operator_fn(const char* name) { return PyRef::steal(PyObject_GetAttrString(known().operator_mod, name)); }

PyObject* nn_type(const char* name) {
  PyObject* nn = PyImport_ImportModule("torch.nn");
  PyObject* t = nn ? PyObject_GetAttrString(nn, name) : nullptr;
  Py_XDECREF(nn);
  if (!t) PyErr_Clear();
  return t;  // NB: kept for the process lifetime
}

// Sequential / ModuleList / ModuleDict and their subclasses whose iteration protocol is the base
// class's (a subclass overriding __iter__/__getitem__/__len__ is inlined instead).
bool is_module_container(PyObject* o) {
  static PyObject* types[3] = {nn_type("Sequential"), nn_type("ModuleList"), nn_type("ModuleDict")};
  for (PyObject* t : types) {
    if (!t || !PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(t))) continue;
    for (const char* m : {"__iter__", "__getitem__", "__len__"}) {
      PyRef n = PyRef::steal(PyUnicode_FromString(m));
      if (_PyType_Lookup(Py_TYPE(o), n.get()) != _PyType_Lookup(reinterpret_cast<PyTypeObject*>(t), n.get())) return false;
    }
    return true;
  }
  return false;
}

bool is_module_dict(PyObject* o) {
  static PyObject* t = nullptr;  // NB: stays null without torch.nn: looked up again per call then
  gil_once(t, [] { return nn_type("ModuleDict"); });
  return t && PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(t));
}

bool const_int(const Sym& s, int64_t* out) {
  if (!s->is(SymKind::Const) || !PyLong_Check(s->obj.get())) return false;
  *out = PyLong_AsLongLong(s->obj.get());
  return true;
}

PyObject* dict_of(PyObject* o) {
  PyObject** p = _PyObject_GetDictPtr(o);
  return p ? *p : nullptr;
}

}  // namespace

Sym SymbolicTracer::binary_op(int nb, const Sym& a, const Sym& b) {
  if (Sym r = symint_binary(nb, a, b)) return r;
  if (!a->is(SymKind::Tensor) && !b->is(SymKind::Tensor)) {
    specialize_ints(a);
    specialize_ints(b);
  }
  materialize(a);
  materialize(b);
  bool inplace = nb >= 13;
  int base = inplace ? nb - 13 : nb;
  FF_CHECK(base >= 0 && base < 13, "unknown BINARY_OP");
  if ((a->is(SymKind::Scalar) || b->is(SymKind::Scalar)) && !a->is(SymKind::Tensor) && !b->is(SymKind::Tensor))
    return scalar_binary(base, a, b);
  if (a->is(SymKind::Tensor) || b->is(SymKind::Tensor)) {
    if (inplace && a->is(SymKind::Tensor)) {
      PyRef fn = operator_fn(kNbInplace[base]);
      if (op_for_callable(fn.get())) return torch_call(fn.get(), {a, b}, {}, std::string("operator.") + kNbInplace[base]);
      if (kTensorInplace[base]) {
        std::vector<Sym> args = {b};
        KwArgs kw;
        return call_tensor_method(a, kTensorInplace[base], args, kw);
      }
    }
    PyRef fn = operator_fn(kNbNames[base]);
    return torch_call(fn.get(), {a, b}, {}, std::string("operator.") + kNbNames[base]);
  }
  if (Sym r = set_binary_op(base, inplace, a, b)) return r;
  if (base == 7 && a->is(SymKind::Dict)) {  // d | other, d |= other (PEP 584)
    if (!inplace && !b->is(SymKind::Dict)) brk(BreakKind::RaisesInTrace, "TypeError: unsupported operand type(s) for |");
    Sym target = a;
    if (!inplace) {
      target = make_sym(SymKind::Dict);
      target->keys = a->keys;
      target->items = a->items;
    }
    std::vector<Sym> args = {b};
    KwArgs none;
    call_container_method(target, "update", args, none);
    return target;
  }
  // Sequences: concatenation and repetition build new symbolic containers.
  bool a_seq = a->is(SymKind::List) || a->is(SymKind::Tuple);
  if (a_seq && (base == 0 || base == 5)) {
    if (base == 0) {
      std::vector<Sym> rhs = iterate(b);
      if (inplace && a->is(SymKind::List)) {
        for (Sym& i : rhs) a->items.push_back(i);
        note_list_mutation(a);
        return a;
      }
      if ((a->is(SymKind::List) && !(b->is(SymKind::List) || (b->is(SymKind::Const) && PyList_Check(b->obj.get())))) ||
          (a->is(SymKind::Tuple) && !(b->is(SymKind::Tuple) || (b->is(SymKind::Const) && PyTuple_Check(b->obj.get())))))
        brk(BreakKind::RaisesInTrace, "can only concatenate sequences of the same type");
      std::vector<Sym> items = a->items;
      for (Sym& i : rhs) items.push_back(i);
      return a->is(SymKind::List) ? make_list(std::move(items)) : make_tuple(std::move(items));
    }
    int64_t n;
    if (const_int(b, &n)) {
      std::vector<Sym> items;
      for (int64_t k = 0; k < n; ++k)
        for (const Sym& i : a->items) items.push_back(i);
      if (inplace && a->is(SymKind::List)) {  // lst *= n repeats the list itself
        a->items = std::move(items);
        note_list_mutation(a);
        return a;
      }
      return a->is(SymKind::List) ? make_list(std::move(items)) : make_tuple(std::move(items));
    }
  }
  if ((b->is(SymKind::List) || b->is(SymKind::Tuple)) && base == 0 && a->is(SymKind::Const)) {
    std::vector<Sym> items = iterate(a);
    for (const Sym& i : b->items) items.push_back(i);
    return b->is(SymKind::List) ? make_list(std::move(items)) : make_tuple(std::move(items));
  }
  PyRef a_c = PyRef::steal(sym_to_const(a));
  PyRef b_c = PyRef::steal(sym_to_const(b));
  if (a_c && b_c && (is_plain_const(a_c.get()) || PyList_Check(a_c.get()) || PyDict_Check(a_c.get())) &&
      (is_plain_const(b_c.get()) || PyList_Check(b_c.get()) || PyDict_Check(b_c.get()))) {
    PyRef fn = operator_fn(inplace ? kNbInplace[base] : kNbNames[base]);
    return fold(fn.get(), {make_const(a_c.get()), make_const(b_c.get())}, {}, std::string("operator ") + kNbNames[base]);
  }
  brk(BreakKind::UnsupportedOperand, std::string(kNbNames[base]) + " of " + describe_sym(a) + " and " + describe_sym(b));
}

Sym SymbolicTracer::scalar_binary(int base, const Sym& a, const Sym& b) {
  // NB: BINARY_OP's order: add, and, floordiv, lshift, matmul, mul, remainder, or, pow, rshift,
  // sub, truediv, xor. The graph computes these on Python numbers as Python does (the reference
  // runner calls operator.add ...); x / 0 raises in Python, so a divisor must be a nonzero number.
  auto number = [](const Sym& s) {
    return s->is(SymKind::Scalar) || (s->is(SymKind::Const) && (PyFloat_CheckExact(s->obj.get()) || PyLong_CheckExact(s->obj.get())));
  };
  auto is_int = [](const Sym& s) { return s->is(SymKind::Scalar) ? s->obj.get() == reinterpret_cast<PyObject*>(&PyLong_Type) : PyLong_CheckExact(s->obj.get()); };
  const bool ints = number(a) && number(b) && is_int(a) && is_int(b);
  const bool nonzero_divisor = b->is(SymKind::Const) && PyObject_IsTrue(b->obj.get()) == 1;
  PyErr_Clear();
  std::optional<Op> op;
  if (base == 0) op = Op::op_add;
  else if (base == 5) op = Op::op_mul;
  else if (base == 10) op = Op::op_sub;
  else if (base == 11 && nonzero_divisor) op = Op::op_truediv;
  else if (base == 2 && ints && nonzero_divisor) op = Op::op_floordiv;  // Python's floored // and % of ints
  else if (base == 6 && ints && nonzero_divisor) op = Op::op_mod;
  if (!op || !number(a) || !number(b))
    brk(BreakKind::DataDependentShape, std::string(kNbNames[base]) + " of " + describe_sym(a) + " and " + describe_sym(b));
  ValueMeta kind = ValueMeta::of(ints && base != 11 ? ValueMeta::Kind::Int : ValueMeta::Kind::Float);
  return scalar_sym(out_.graph.add_call(op_id(*op), {to_value(a), to_value(b)}, kind, kNbNames[base]));
}

Sym SymbolicTracer::float_of(const Sym& v) {
  if (!config().capture_scalar_outputs) return nullptr;
  if (v->is(SymKind::Scalar)) return type_of(v) == reinterpret_cast<PyObject*>(&PyFloat_Type) ? v : nullptr;  // float(x) of a float is x
  if (!v->is(SymKind::Tensor) || !is_floating(v->meta.dtype)) return nullptr;
  std::vector<Sym> none;
  KwArgs no_kwargs;
  return call_tensor_method(v, "item", none, no_kwargs);  // Tensor.__float__ of a floating tensor
}

void SymbolicTracer::check_scalar_args(PyObject* fn, const std::vector<Sym>& args, const KwArgs& kwargs, const std::string& what) {
  if (!config().capture_scalar_outputs) {
    // NB: torch.Tensor.item(x) called as a function reaches the registry's op directly.
    static PyObject* item = PyObject_GetAttrString(known().tensor_type, "item");  // NB: leaked on purpose
    if (fn == item) brk(BreakKind::TensorToPython, "Tensor.item()");
    return;
  }
  bool direct = false, an_int = false;
  std::function<void(const Sym&, bool)> visit = [&](const Sym& s, bool top) {
    if (s->is(SymKind::Scalar)) {
      if (!top) brk(BreakKind::DataDependentShape, what + " with " + describe_sym(s) + " inside a list or tuple");
      direct = true;
      an_int = an_int || type_of(s) == reinterpret_cast<PyObject*>(&PyLong_Type);
    } else if (s->is(SymKind::List) || s->is(SymKind::Tuple)) {
      for (const Sym& i : s->items) visit(i, false);
    }
  };
  for (const Sym& a : args) visit(a, true);
  for (const auto& kv : kwargs) visit(kv.second, true);
  if (!direct) return;
  std::optional<OpId> op = op_for_callable(fn);
  // NB: a creation op reads an int as a size; a pointwise op's rule reads a number's kind only.
  const OpTrait allowed = an_int ? kPointwise : static_cast<OpTrait>(kPointwise | kCreation);
  if (!op || op_def(*op).is_open() || !(op_def(*op).traits & allowed) || op_def(*op).has(kRandom))
    brk(BreakKind::DataDependentShape, what + " with a number read from a tensor (.item()) as an argument");
}

Sym SymbolicTracer::compare_op(int cmp, const Sym& a, const Sym& b) {
  if (Sym r = symint_compare(cmp, a, b)) return r;
  if (!a->is(SymKind::Tensor) && !b->is(SymKind::Tensor)) {
    specialize_ints(a);
    specialize_ints(b);
  }
  materialize(a);
  materialize(b);
  FF_CHECK(cmp >= 0 && cmp < 6, "unknown COMPARE_OP");
  if ((a->is(SymKind::Scalar) || b->is(SymKind::Scalar)) && !a->is(SymKind::Tensor) && !b->is(SymKind::Tensor))
    brk(BreakKind::DataDependentShape, std::string("comparison ") + kCmpNames[cmp] + " of " + describe_sym(a) + " and " + describe_sym(b));
  if (a->is(SymKind::Tensor) || b->is(SymKind::Tensor)) {
    PyRef fn = operator_fn(kCmpNames[cmp]);
    return torch_call(fn.get(), {a, b}, {}, std::string("operator.") + kCmpNames[cmp]);
  }
  PyRef a_c = PyRef::steal(sym_to_const(a));
  PyRef b_c = PyRef::steal(sym_to_const(b));
  if (a_c && b_c) {
    auto plain = [](PyObject* o) {
      return is_plain_const(o) || PyList_CheckExact(o) || PyType_Check(o) || PyAnySet_CheckExact(o) || PyDict_CheckExact(o);
    };
    bool plain_a = plain(a_c.get());
    bool plain_b = plain(b_c.get());
    bool identity_eq = (cmp == 2 || cmp == 3) &&
                       Py_TYPE(a_c.get())->tp_richcompare == PyBaseObject_Type.tp_richcompare;
    if ((plain_a && plain_b) || identity_eq || PyObject_HasAttrString(reinterpret_cast<PyObject*>(Py_TYPE(a_c.get())), "_member_map_")) {
      PyErr_Clear();
      PyRef fn = operator_fn(kCmpNames[cmp]);
      return fold(fn.get(), {make_const(a_c.get()), make_const(b_c.get())}, {}, std::string("comparison ") + kCmpNames[cmp]);
    }
    PyErr_Clear();
  }
  if ((cmp == 2 || cmp == 3) && (a->is(SymKind::Object) || b->is(SymKind::Object))) {
    PyObject* ta = type_of(a);
    if (ta && reinterpret_cast<PyTypeObject*>(ta)->tp_richcompare == PyBaseObject_Type.tp_richcompare) {
      Sym same = is_same(a, b);
      bool eq = same->obj.get() == Py_True;
      return make_const((eq == (cmp == 2)) ? Py_True : Py_False);
    }
  }
  brk(BreakKind::UnsupportedOperand, std::string("comparison ") + kCmpNames[cmp] + " of " + describe_sym(a) + " and " + describe_sym(b));
}

Sym SymbolicTracer::unary_op(const char* op_name, const Sym& a) {
  if (a->is(SymKind::SymInt) && std::string_view(op_name) == "neg") return size_of(-a->sint);
  if (a->is(SymKind::SymInt) && std::string_view(op_name) == "pos") return a;
  specialize_ints(a);
  PyRef fn = operator_fn(op_name);
  if (a->is(SymKind::Tensor)) return torch_call(fn.get(), {a}, {}, std::string("operator.") + op_name);
  if (a->is(SymKind::Scalar) && std::string_view(op_name) == "pos") return a;
  if (a->is(SymKind::Scalar) && std::string_view(op_name) == "neg")
    return scalar_sym(out_.graph.add_call(op_id(Op::op_neg), {to_value(a)}, out_.graph.node(a->node).meta, "neg"));
  if (a->is(SymKind::Const) && is_plain_const(a->obj.get())) return fold(fn.get(), {a}, {}, op_name);
  brk(BreakKind::UnsupportedOperand, std::string(op_name) + " of " + describe_sym(a));
}

bool SymbolicTracer::truth(const Sym& v) {
  if (v->is(SymKind::SymInt)) return v->sint != 0;
  materialize(v);
  switch (v->kind) {
    case SymKind::Const: {
      PyObject* o = v->obj.get();
      PyTypeObject* t = Py_TYPE(o);
      bool safe = is_plain_const(o) || PyType_Check(o) || PyFunction_Check(o) || PyCFunction_Check(o) ||
                  PyModule_Check(o) || PyList_Check(o) || PyDict_Check(o) || PySet_Check(o) ||
                  ((t->tp_as_number == nullptr || t->tp_as_number->nb_bool == nullptr) &&
                   (t->tp_as_mapping == nullptr || t->tp_as_mapping->mp_length == nullptr) &&
                   (t->tp_as_sequence == nullptr || t->tp_as_sequence->sq_length == nullptr));
      if (!safe) brk(BreakKind::UnsupportedOperand, "truth value of " + describe_sym(v));
      int r = PyObject_IsTrue(o);
      if (r < 0) {
        PyErr_Clear();
        brk(BreakKind::RaisesInTrace, "bool() raises");
      }
      return r == 1;
    }
    case SymKind::Tensor: brk(BreakKind::DataDependentBranch, "bool() of a tensor");
    case SymKind::Scalar: brk(BreakKind::DataDependentBranch, "bool() of " + describe_sym(v));
    case SymKind::Tuple:
    case SymKind::List:
    case SymKind::Dict:
    case SymKind::Set:
    case SymKind::DictView:
      return truth(len_of(v));
    case SymKind::Object:
    case SymKind::NewObject: {
      PyTypeObject* t = reinterpret_cast<PyTypeObject*>(type_of(v));
      PyRef bool_name = PyRef::steal(PyUnicode_FromString("__bool__"));
      PyRef len_name = PyRef::steal(PyUnicode_FromString("__len__"));
      PyObject* b = _PyType_Lookup(t, bool_name.get());
      PyObject* l = _PyType_Lookup(t, len_name.get());
      if (b && PyFunction_Check(b)) {
        Sym r = call(make_const(b), {v}, {});
        if (!r->is(SymKind::Const) || !PyBool_Check(r->obj.get()))
          brk(BreakKind::RaisesInTrace, "TypeError: __bool__ should return bool, returned " + describe_sym(r));
        return r->obj.get() == Py_True;
      }
      if (l) {
        Sym n = len_of(v);
        if (!n->is(SymKind::Const) || !PyLong_Check(n->obj.get()) || PyObject_RichCompareBool(n->obj.get(), PyRef::steal(PyLong_FromLong(0)).get(), Py_LT) != 0)
          brk(BreakKind::RaisesInTrace, "TypeError/ValueError: __len__ should return an int >= 0");
        return truth(n);
      }
      if (b) brk(BreakKind::UnsupportedOperand, "truth value of " + describe_sym(v));
      return true;
    }
    case SymKind::Null: FF_CHECK(false, "truth of NULL");
    default:
      return true;
  }
}

Sym SymbolicTracer::len_of(const Sym& v) {
  materialize(v);
  switch (v->kind) {
    case SymKind::Tuple:
    case SymKind::List:
      return make_const_steal(PyLong_FromSize_t(v->items.size()));
    case SymKind::Dict:
      return make_const_steal(PyLong_FromSize_t(v->keys.size()));
    case SymKind::DictView:
      return make_const_steal(PyLong_FromSize_t(v->items[0]->keys.size()));
    case SymKind::Set:
      return make_const_steal(PyLong_FromSsize_t(PySet_GET_SIZE(v->obj.get())));
    case SymKind::Tensor:
      if (v->meta.dim() == 0) brk(BreakKind::RaisesInTrace, "len() of a 0-d tensor");
      return make_const_steal(PyLong_FromLongLong(v->meta.sizes[0]));
    case SymKind::Const: {
      Py_ssize_t n = PyObject_Length(v->obj.get());
      if (n < 0) {
        PyErr_Clear();
        brk(BreakKind::RaisesInTrace, "len() of " + describe_sym(v));
      }
      return make_const_steal(PyLong_FromSsize_t(n));
    }
    case SymKind::Iterator:
      brk(BreakKind::RaisesInTrace, "len() of an iterator");
    case SymKind::Object: {
      PyObject* o = v->obj.get();
      if (is_frozen_view(v)) {
        Py_ssize_t n = PyObject_Length(o);
        if (n < 0) brk(BreakKind::RaisesInTrace, "len() of a mappingproxy raises");
        return make_const_steal(PyLong_FromSsize_t(n));
      }
      if (is_module_container(o)) {
        PyObject* modules = dict_of(o) ? PyDict_GetItemString(dict_of(o), "_modules") : nullptr;
        if (modules) {
          PyRef keys = PyRef::steal(PySequence_Tuple(PyRef::steal(PyDict_Keys(modules)).get()));
          guard(Guard::Kind::DictKeys, attr_source(v->source, "_modules"), keys.get());
          return make_const_steal(PyLong_FromSsize_t(PyDict_Size(modules)));
        }
      }
      [[fallthrough]];
    }
    case SymKind::NewObject: {
      if (Sym d = mapping_part(v, "__len__")) return len_of(d);
      PyRef len_name = PyRef::steal(PyUnicode_FromString("__len__"));
      PyObject* l = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type_of(v)), len_name.get());
      if (l && PyFunction_Check(l)) return call(make_const(l), {v}, {});
      break;
    }
    default:
      break;
  }
  brk(BreakKind::UnsupportedOperand, "len() of " + describe_sym(v));
}

Sym SymbolicTracer::contains(const Sym& container, const Sym& item) {
  materialize(container);
  materialize(item);
  if (container->is(SymKind::Dict)) {
    PyRef k = PyRef::steal(sym_to_const(item));
    if (!k) brk(BreakKind::UnsupportedOperand, "`in` with key " + describe_sym(item));
    for (const Sym& key : container->keys) {
      int eq = PyObject_RichCompareBool(key->obj.get(), k.get(), Py_EQ);
      if (eq < 0) PyErr_Clear();
      if (eq == 1) return make_const(Py_True);
    }
    return make_const(Py_False);
  }
  if (container->is(SymKind::Set)) {
    if (item->is(SymKind::Tensor)) brk(BreakKind::UnsupportedOperand, "`in` of a tensor in a set");
    PyRef key = set_key(item);
    int r = PySet_Contains(container->obj.get(), key.get());
    if (r < 0) brk(BreakKind::RaisesInTrace, "`in` raises");
    return make_const(r ? Py_True : Py_False);
  }
  if (container->is(SymKind::DictView)) {
    const Sym& d = container->items[0];
    if (container->name == "keys") return contains(d, item);
    std::vector<Sym> items = iterate(container);
    for (const Sym& e : items) {
      if (e == item) return make_const(Py_True);
      Sym eq = compare_op(2, e, item);
      if (!eq->is(SymKind::Const)) brk(BreakKind::DataDependentBranch, "`in` of a dict view with tensors");
      if (truth(eq)) return make_const(Py_True);
    }
    return make_const(Py_False);
  }
  if (container->is(SymKind::Tensor) || item->is(SymKind::Tensor))
    brk(BreakKind::DataDependentBranch, "`in` with a tensor");
  PyRef c = PyRef::steal(is_frozen_view(container) ? Py_NewRef(container->obj.get()) : sym_to_const(container));
  PyRef i = PyRef::steal(sym_to_const(item));
  if (c && i) {
    int r = PySequence_Contains(c.get(), i.get());
    if (r < 0) {
      PyErr_Clear();
      brk(BreakKind::RaisesInTrace, "`in` raises");
    }
    return make_const(r ? Py_True : Py_False);
  }
  if ((container->is(SymKind::List) || container->is(SymKind::Tuple)) && i) {
    // Items that are not constants (tensors, objects) are never equal to a constant here only
    // if comparing them would not run user code; be conservative.
    brk(BreakKind::UnsupportedOperand, "`in` over a sequence with non-constant items");
  }
  if (container->is(SymKind::Object) && is_module_container(container->obj.get()) && i && PyUnicode_Check(i.get())) {
    PyObject* modules = dict_of(container->obj.get()) ? PyDict_GetItemString(dict_of(container->obj.get()), "_modules") : nullptr;
    if (modules) {
      PyRef keys = PyRef::steal(PySequence_Tuple(PyRef::steal(PyDict_Keys(modules)).get()));
      guard(Guard::Kind::DictKeys, attr_source(container->source, "_modules"), keys.get());
      return make_const(PyDict_GetItem(modules, i.get()) ? Py_True : Py_False);
    }
  }
  if (is_environ(container)) return make_const(environ_item(container, item) ? Py_True : Py_False);
  if (container->is(SymKind::Object) || container->is(SymKind::NewObject)) {
    // A container class written in Python (collections.abc.Mapping ...): its __contains__, inlined.
    PyRef name = PyRef::steal(PyUnicode_FromString("__contains__"));
    PyObject* fn = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type_of(container)), name.get());
    if (fn && PyFunction_Check(fn)) {
      Sym r = call(make_const(fn), {container, item}, {});
      return make_const(truth(r) ? Py_True : Py_False);
    }
    if (Sym d = mapping_part(container, "__contains__")) return contains(d, item);
  }
  brk(BreakKind::UnsupportedOperand, "`in` of " + describe_sym(item) + " in " + describe_sym(container));
}

Sym SymbolicTracer::is_same(const Sym& a, const Sym& b) {
  auto yes = [] { return make_const(Py_True); };
  auto no = [] { return make_const(Py_False); };
  if (a == b) return yes();
  auto has_identity = [](const Sym& s) {
    return s->is(SymKind::Const) || s->is(SymKind::Object) || ((s->is(SymKind::List) || s->is(SymKind::Dict)) && s->obj);
  };
  if (has_identity(a) && has_identity(b)) return a->obj.get() == b->obj.get() ? yes() : no();
  // NB: a list or dict the trace made is one Sym wherever it is referenced: another Sym is another object.
  auto fresh = [](const Sym& s) { return (s->is(SymKind::List) || s->is(SymKind::Dict)) && !s->obj; };
  if (fresh(a) || fresh(b)) return no();
  bool a_none = a->is(SymKind::Const) && a->obj.get() == Py_None;
  bool b_none = b->is(SymKind::Const) && b->obj.get() == Py_None;
  if (a_none != b_none && !a->is(SymKind::Null) && !b->is(SymKind::Null)) return no();
  if (a->is(SymKind::Tensor) && b->is(SymKind::Tensor)) {
    if (a->node == b->node) return yes();
    auto ia = input_tensors_.find(a->node), ib = input_tensors_.find(b->node);
    if (a->source && b->source && ia != input_tensors_.end() && ib != input_tensors_.end()) {
      // Two tensors passed in (MHA's `query is key`): what they are now, and guarded to stay so.
      Guard g;
      g.kind = ia->second == ib->second ? Guard::Kind::SameObject : Guard::Kind::Distinct;
      if (g.kind == Guard::Kind::SameObject) {
        g.source = a->source;
        g.others = {b->source};
      } else {
        g.others = {a->source, b->source};
      }
      out_.guards.push_back(std::move(g));
      return ia->second == ib->second ? yes() : no();
    }
    if (a->source && b->source) brk(BreakKind::UnsupportedOperand, "`is` between two input tensors");
    return no();
  }
  if (a->kind != b->kind) {
    if (a->is(SymKind::Tensor) || b->is(SymKind::Tensor)) return no();
    if (a->is(SymKind::NewObject) || b->is(SymKind::NewObject)) return no();
  }
  if (a->is(SymKind::NewObject) && b->is(SymKind::NewObject)) return no();
  brk(BreakKind::UnsupportedOperand, "`is` between " + describe_sym(a) + " and " + describe_sym(b));
}

bool SymbolicTracer::is_environ(const Sym& v) const {
  return v->is(SymKind::Object) && v->source && reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get())) == known().environ_type;
}

// NB: os.environ's own methods go through its str-to-bytes encoding and try/except KeyError; a key
// read here is guarded by its value (or, absent, by its absence), not the whole environment.
Sym SymbolicTracer::environ_item(const Sym& env, const Sym& key) {
  if (!key->is(SymKind::Const) || !PyUnicode_CheckExact(key->obj.get()))
    brk(BreakKind::UnsupportedOperand, "os.environ with key " + describe_sym(key));
  PyObject* v = PyObject_GetItem(env->obj.get(), key->obj.get());
  if (!v) {
    if (!PyErr_ExceptionMatches(PyExc_KeyError)) {
      PyErr_Clear();
      brk(BreakKind::RaisesInTrace, "os.environ lookup raises");
    }
    PyErr_Clear();
    guard(Guard::Kind::NoKey, env->source, key->obj.get());
    return nullptr;
  }
  PyRef hold = PyRef::steal(v);
  return wrap(v, item_source(env->source, key->obj.get()));
}

Sym SymbolicTracer::subscript(const Sym& c, const Sym& index) {
  if (!c->is(SymKind::Tensor)) specialize_ints(index);  // a list index, a dict key ...
  materialize(c);
  switch (c->kind) {
    case SymKind::Tensor: {
      PyRef fn = operator_fn("getitem");
      return torch_call(fn.get(), {c, index}, {}, "tensor indexing");
    }
    case SymKind::Tuple:
    case SymKind::List: {
      Py_ssize_t n = static_cast<Py_ssize_t>(c->items.size());
      int64_t i;
      if (const_int(index, &i)) {
        if (i < 0) i += n;
        if (i < 0 || i >= n) raise_in_trace(PyExc_IndexError, "IndexError: index out of range");
        return c->items[static_cast<size_t>(i)];
      }
      PyRef sl = PyRef::steal(index->is(SymKind::Slice) ? sym_to_const(index) : nullptr);
      if (sl) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(sl.get(), &start, &stop, &step) < 0) {
          PyErr_Clear();
          brk(BreakKind::RaisesInTrace, "bad slice");
        }
        Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
        std::vector<Sym> items;
        for (Py_ssize_t k = 0; k < len; ++k) items.push_back(c->items[static_cast<size_t>(start + k * step)]);
        if (c->is(SymKind::List)) return make_list(std::move(items));
        return make_tuple(std::move(items), c->obj.get() == known().size_type ? known().size_type : nullptr);
      }
      break;
    }
    case SymKind::Dict: {
      Sym m = make_sym(SymKind::Method);
      m->name = "__getitem__";
      m->items = {c};
      std::vector<Sym> args = {index};
      KwArgs kw;
      return call_method(m, args, kw);
    }
    case SymKind::Const: {
      PyRef i = PyRef::steal(sym_to_const(index));
      if (!i) break;
      PyObject* o = c->obj.get();
      // NB: a builtin type's subscript is its __class_getitem__ (list[int] is a types.GenericAlias);
      // typing's special forms (typing.List[int]) make cached aliases.
      bool builtin_type = PyType_Check(o) && !(reinterpret_cast<PyTypeObject*>(o)->tp_flags & Py_TPFLAGS_HEAPTYPE);
      if (!(is_plain_const(o) || PyList_Check(o) || PyDict_Check(o) || builtin_type || is_typing_form(o))) break;
      PyRef fn = operator_fn("getitem");
      return fold(fn.get(), {c, make_const(i.get())}, {}, "subscript");
    }
    case SymKind::Object: {
      PyObject* o = c->obj.get();
      if (is_typing_form(o)) {
        PyRef fn = operator_fn("getitem");
        return typing_call(fn.get(), {c, index});
      }
      if (is_module_container(o)) {
        PyObject* modules = dict_of(o) ? PyDict_GetItemString(dict_of(o), "_modules") : nullptr;
        if (!modules) break;
        PyRef keys = PyRef::steal(PySequence_Tuple(PyRef::steal(PyDict_Keys(modules)).get()));
        guard(Guard::Kind::DictKeys, attr_source(c->source, "_modules"), keys.get());
        int64_t i;
        std::string key;
        if (is_module_dict(o)) {
          if (!index->is(SymKind::Const) || !PyUnicode_Check(index->obj.get())) break;
          key = PyUnicode_AsUTF8(index->obj.get());
        } else if (const_int(index, &i)) {
          Py_ssize_t n = PyDict_Size(modules);
          if (i < 0) i += n;
          if (i < 0 || i >= n) brk(BreakKind::RaisesInTrace, "IndexError: module index out of range");
          PyObject* k = PyTuple_GET_ITEM(keys.get(), i);
          key = PyUnicode_AsUTF8(k);
        } else if (static PyObject* module_list = nn_type("ModuleList");
                   index->is(SymKind::Slice) && reinterpret_cast<PyObject*>(Py_TYPE(o)) == module_list) {
          // A slice is a new ModuleList of the same children (`for layer in self.layers[:n]`): an
          // object of the trace's own that holds them in its _modules, as ModuleList's __iter__,
          // __len__ and __getitem__ read them. It never escapes: a module is not rebuilt.
          PyRef sl = PyRef::steal(sym_to_const(index));
          Py_ssize_t start, stop, step;
          if (!sl || PySlice_Unpack(sl.get(), &start, &stop, &step) < 0) {
            PyErr_Clear();
            break;
          }
          Py_ssize_t len = PySlice_AdjustIndices(PyTuple_GET_SIZE(keys.get()), &start, &stop, step);
          Sym children = make_sym(SymKind::Dict);
          for (Py_ssize_t j = 0; j < len; ++j) {
            PyObject* k = PyTuple_GET_ITEM(keys.get(), start + j * step);
            children->keys.push_back(make_const_steal(PyUnicode_FromString(std::to_string(j).c_str())));
            children->items.push_back(module_child(c, "_modules", PyDict_GetItem(modules, k), PyUnicode_AsUTF8(k)));
          }
          Sym view = make_sym(SymKind::NewObject);
          view->obj = PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(o)));
          view->attrs = {{"_modules", children}};
          return view;
        } else {
          break;
        }
        PyObject* m = PyDict_GetItemString(modules, key.c_str());
        if (!m) brk(BreakKind::RaisesInTrace, "KeyError: " + key);
        return module_child(c, "_modules", m, key);
      }
      [[fallthrough]];
    }
    case SymKind::NewObject: {
      if (is_environ(c)) {
        if (Sym v = environ_item(c, index)) return v;
        raise_in_trace(PyExc_KeyError, "KeyError: " + describe_sym(index) + " not in os.environ");
      }
      if (Sym d = mapping_part(c, "__getitem__")) return subscript(d, index);
      PyRef name = PyRef::steal(PyUnicode_FromString("__getitem__"));
      PyObject* gi = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type_of(c)), name.get());
      if (gi && PyFunction_Check(gi)) return call(make_const(gi), {c, index}, {});
      break;
    }
    default:
      break;
  }
  brk(BreakKind::UnsupportedOperand, "subscript of " + describe_sym(c) + " with " + describe_sym(index));
}

void SymbolicTracer::store_subscript(const Sym& c, const Sym& index, Sym value) {
  materialize(c);
  switch (c->kind) {
    case SymKind::Dict: {
      PyRef k = PyRef::steal(sym_to_const(index));
      if (!k || PyObject_Hash(k.get()) == -1) {
        PyErr_Clear();
        brk(BreakKind::UnsupportedValue, "dict key " + describe_sym(index));
      }
      if (c->obj) {
        if (!c->source) brk(BreakKind::UnsupportedValue, "mutation of a dict that cannot be fetched again");
        effects_.push_back({SideEffect::Kind::DictSetItem, c->source, "", k, value});
        if (Sym owner = owner_of_instance_dict(c)) {
          if (!PyUnicode_Check(k.get())) brk(BreakKind::UnsupportedValue, "a non-string key in an object's __dict__");
          set_object_attr(owner, PyUnicode_AsUTF8(k.get()), value);
        }
      }
      for (size_t i = 0; i < c->keys.size(); ++i) {
        int eq = PyObject_RichCompareBool(c->keys[i]->obj.get(), k.get(), Py_EQ);
        if (eq < 0) PyErr_Clear();
        if (eq == 1) {
          c->items[i] = std::move(value);
          return;
        }
      }
      c->keys.push_back(make_const(k.get()));
      c->items.push_back(std::move(value));
      ++c->version;
      return;
    }
    case SymKind::List: {
      int64_t i;
      if (const_int(index, &i)) {
        int64_t n = static_cast<int64_t>(c->items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) brk(BreakKind::RaisesInTrace, "IndexError: list assignment index out of range");
        c->items[static_cast<size_t>(i)] = std::move(value);
        note_list_mutation(c);
        return;
      }
      break;
    }
    case SymKind::Tensor: {
      PyRef fn = operator_fn("setitem");
      torch_call(fn.get(), {c, index, value}, {}, "tensor item assignment");
      return;
    }
    case SymKind::Object:
    case SymKind::NewObject: {
      if (Sym d = mapping_part(c, "__setitem__")) return store_subscript(d, index, std::move(value));
      PyRef name = PyRef::steal(PyUnicode_FromString("__setitem__"));
      PyObject* si = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type_of(c)), name.get());
      if (si && PyFunction_Check(si)) {
        call(make_const(si), {c, index, value}, {});
        return;
      }
      break;
    }
    default:
      break;
  }
  brk(BreakKind::UnsupportedOperand, "item assignment on " + describe_sym(c));
}

void SymbolicTracer::delete_subscript(const Sym& c, const Sym& index) {
  materialize(c);
  switch (c->kind) {
    case SymKind::Dict: {
      std::vector<Sym> args = {index};
      KwArgs none;
      call_container_method(c, "__delitem__", args, none);
      return;
    }
    case SymKind::List: {
      int64_t i;
      if (const_int(index, &i)) {
        int64_t n = static_cast<int64_t>(c->items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) brk(BreakKind::RaisesInTrace, "IndexError: list assignment index out of range");
        c->items.erase(c->items.begin() + i);
        note_list_mutation(c);
        return;
      }
      break;
    }
    case SymKind::NewObject: {
      if (Sym d = mapping_part(c, "__delitem__")) return delete_subscript(d, index);
      PyObject* di = type_lookup(reinterpret_cast<PyTypeObject*>(c->obj.get()), "__delitem__");
      if (di && PyFunction_Check(di)) {
        call(make_const(di), {c, index}, {});
        return;
      }
      break;
    }
    default:
      break;
  }
  brk(BreakKind::UnsupportedOperand, "del of an item of " + describe_sym(c));
}

std::optional<std::vector<Sym>> SymbolicTracer::module_container_items(const Sym& v) {
  PyObject* o = v->obj.get();
  if (!is_module_container(o)) return std::nullopt;
  PyObject* modules = dict_of(o) ? PyDict_GetItemString(dict_of(o), "_modules") : nullptr;
  if (!modules) return std::nullopt;
  PyRef keys = PyRef::steal(PySequence_Tuple(PyRef::steal(PyDict_Keys(modules)).get()));
  guard(Guard::Kind::DictKeys, attr_source(v->source, "_modules"), keys.get());
  std::vector<Sym> out;
  bool is_dict = is_module_dict(o);
  PyObject *k, *m;
  Py_ssize_t pos = 0;
  while (PyDict_Next(modules, &pos, &k, &m)) {
    if (is_dict) out.push_back(make_const(k));
    else out.push_back(module_child(v, "_modules", m, PyUnicode_AsUTF8(k)));
  }
  return out;
}

}  // namespace ff
