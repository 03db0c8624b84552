// Calls of Python objects known at capture time: torch ops (graph nodes), Python builtins and pure
// functions (evaluated at capture time on constants), tensor methods and builtin container methods.
#include <Python.h>

#include <string_view>

#include "frame_eval/interpreter_impl.h"
#include "frame_eval/py_util.h"
#include "frame_eval/torch_refs.h"
#include "graph/meta_rules.h"
#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/effects.h"
#include "graph/python/graph_calls.h"
#include "graph/python/open_ops.h"
#include "src/base/config.h"

namespace ff {

namespace {

bool has_tensor(const Sym& s, std::vector<const SymValue*>* seen = nullptr) {
  if (s->is(SymKind::Tensor)) return true;
  if (!(s->is(SymKind::Tuple) || s->is(SymKind::List) || s->is(SymKind::Slice) || s->is(SymKind::Dict) ||
        s->is(SymKind::Appendable)))
    return false;
  std::vector<const SymValue*> local;
  if (!seen) seen = &local;
  if (std::find(seen->begin(), seen->end(), s.get()) != seen->end()) return false;  // a list holding itself
  seen->push_back(s.get());
  for (const Sym& i : s->items)
    if (i && has_tensor(i, seen)) return true;
  return false;
}

bool starts_with(std::string_view s, std::string_view p) { return s.rfind(p, 0) == 0; }

// Builtins that are pure functions of their (constant) arguments.
bool is_pure_builtin(std::string_view n) {
  for (std::string_view p : {"abs", "all", "any", "ascii", "bin", "bool", "callable", "chr", "complex", "divmod",
                             "float", "format", "frozenset", "hash", "hex", "int", "isinstance", "issubclass", "len",
                             "max", "min", "oct", "ord", "pow", "range", "repr", "round", "slice", "sorted", "str",
                             "sum", "tuple", "type", "bytes"})
    if (n == p) return true;
  return false;
}

// The types of builtin views and iterators, read off sample objects once (borrowed, immortal
// enough: builtin static types).
PyObject* builtin_type_named(std::string_view name) {
  static PyObject* types[] = {
      reinterpret_cast<PyObject*>(&PyDictKeys_Type), reinterpret_cast<PyObject*>(&PyDictValues_Type),
      reinterpret_cast<PyObject*>(&PyDictItems_Type), reinterpret_cast<PyObject*>(&PyListIter_Type),
      reinterpret_cast<PyObject*>(&PyTupleIter_Type), reinterpret_cast<PyObject*>(&PyRangeIter_Type),
      reinterpret_cast<PyObject*>(&PyListRevIter_Type), reinterpret_cast<PyObject*>(&PyReversed_Type),
      reinterpret_cast<PyObject*>(&PyDictIterKey_Type), reinterpret_cast<PyObject*>(&PyDictIterValue_Type),
      reinterpret_cast<PyObject*>(&PyDictIterItem_Type), reinterpret_cast<PyObject*>(&PyEnum_Type),
      reinterpret_cast<PyObject*>(&PyZip_Type), reinterpret_cast<PyObject*>(&PyMap_Type),
      reinterpret_cast<PyObject*>(&PyFilter_Type)};
  for (PyObject* t : types)
    if (name == reinterpret_cast<PyTypeObject*>(t)->tp_name) return t;
  return nullptr;
}

// The type of a modelled iterator; nullptr where it has none the trace can name (a generator's
// values, a set's elements: type() of those breaks).
PyObject* iterator_type(const Sym& it) {
  switch (it->iter) {
    case IterKind::Range: return builtin_type_named("range_iterator");
    case IterKind::Seq: return builtin_type_named(it->origin->is(SymKind::List) ? "list_iterator" : "tuple_iterator");
    case IterKind::Reversed: return builtin_type_named(it->origin->is(SymKind::List) ? "list_reverseiterator" : "reversed");
    case IterKind::DictKeys: return builtin_type_named("dict_keyiterator");
    case IterKind::DictValues: return builtin_type_named("dict_valueiterator");
    case IterKind::DictItems: return builtin_type_named("dict_itemiterator");
    case IterKind::Enumerate: return builtin_type_named("enumerate");
    case IterKind::Zip: return builtin_type_named("zip");
    case IterKind::Map: return builtin_type_named("map");
    case IterKind::Filter: return builtin_type_named("filter");
    case IterKind::Generator: return reinterpret_cast<PyObject*>(&PyGen_Type);
    case IterKind::Native: return nullptr;  // NB: type_of reads the real iterator's type
    case IterKind::Protocol: return it->flag ? builtin_type_named("iterator") : reinterpret_cast<PyObject*>(&PyGen_Type);
    case IterKind::Repeat: return known().itertools_repeat;
    case IterKind::Chain: return known().itertools_chain;
    case IterKind::Islice: return known().itertools_islice;
    case IterKind::Items: return nullptr;
  }
  return nullptr;
}

// Whether isinstance(x, cls) is issubclass(type(x), cls): the metaclass's __instancecheck__ is
// type's or ABCMeta's (which checks the class and its registered virtual subclasses).
bool plain_instancecheck(PyObject* cls) {
  if (PyTuple_Check(cls)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cls); ++i)
      if (!plain_instancecheck(PyTuple_GET_ITEM(cls, i))) return false;
    return true;
  }
  if (!PyType_Check(cls)) return true;  // issubclass raises TypeError below
  static PyObject* abc_meta = nullptr;
  if (!abc_meta) {
    PyRef abc = PyRef::steal(PyImport_ImportModule("abc"));
    abc_meta = abc ? PyObject_GetAttrString(abc.get(), "ABCMeta") : nullptr;  // NB: kept for the process
    PyErr_Clear();
  }
  PyRef name = PyRef::steal(PyUnicode_InternFromString("__instancecheck__"));
  PyObject* check = _PyType_Lookup(Py_TYPE(cls), name.get());
  return check == _PyType_Lookup(&PyType_Type, name.get()) ||
         (abc_meta && PyType_Check(abc_meta) && check == _PyType_Lookup(reinterpret_cast<PyTypeObject*>(abc_meta), name.get()));
}

}  // namespace

PyObject* SymbolicTracer::type_of(const Sym& v) {
  switch (v->kind) {
    case SymKind::Const: return reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get()));
    case SymKind::Tensor: return v->obj ? v->obj.get() : known().tensor_type;
    case SymKind::Scalar: return v->obj.get();
    case SymKind::Tuple: return v->obj ? v->obj.get() : reinterpret_cast<PyObject*>(&PyTuple_Type);
    case SymKind::List: return v->obj ? reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get())) : reinterpret_cast<PyObject*>(&PyList_Type);
    case SymKind::Dict: return v->obj ? reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get())) : reinterpret_cast<PyObject*>(&PyDict_Type);
    case SymKind::Set: return reinterpret_cast<PyObject*>(&PySet_Type);
    case SymKind::DictView: return builtin_type_named(v->name == "keys" ? "dict_keys" : v->name == "values" ? "dict_values"
                                                                                                            : "dict_items");
    case SymKind::Iterator: return v->iter == IterKind::Native ? reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get())) : iterator_type(v);
    case SymKind::Appendable: return reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get()));
    case SymKind::Object: return reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get()));
    case SymKind::NewObject:
    case SymKind::NoopCtx: return v->obj.get();
    case SymKind::Function: return reinterpret_cast<PyObject*>(&PyFunction_Type);
    case SymKind::BoundMethod: return reinterpret_cast<PyObject*>(&PyMethod_Type);
    case SymKind::Slice: return reinterpret_cast<PyObject*>(&PySlice_Type);
    case SymKind::Partial: return known().partial_type;
    case SymKind::Super: return reinterpret_cast<PyObject*>(&PySuper_Type);
    default: return nullptr;
  }
}

Value SymbolicTracer::to_value(const Sym& v) {
  materialize(v);
  switch (v->kind) {
    case SymKind::Tensor:
    case SymKind::Scalar: return Value::of_node(v->node);
    case SymKind::SymInt: return Value::of_symint(v->sint);
    case SymKind::Const: {
      auto c = constant_from_py(v->obj.get());
      if (!c) brk(BreakKind::UnsupportedValue, describe_sym(v) + " as an argument of a torch op");
      return *c;
    }
    case SymKind::Tuple:
    case SymKind::List: {
      std::vector<Value> items;
      items.reserve(v->items.size());
      for (const Sym& i : v->items) items.push_back(to_value(i));
      return v->is(SymKind::List) ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case SymKind::Slice: return Value::slice(to_value(v->items[0]), to_value(v->items[1]), to_value(v->items[2]));
    default: brk(BreakKind::UnsupportedValue, describe_sym(v) + " as an argument of a torch op");
  }
}

Sym SymbolicTracer::torch_call(PyObject* fn, const std::vector<Sym>& args, const KwArgs& kwargs, const std::string& what) {
  if (symints_made_ > 0 && !symint_op(op_for_callable(fn))) {
    for (const Sym& a : args) specialize_ints(a);
    for (const auto& kv : kwargs) specialize_ints(kv.second);
  }
  check_scalar_args(fn, args, kwargs, what);
  std::vector<Value> vals;
  vals.reserve(args.size());
  for (const Sym& a : args) vals.push_back(to_value(a));
  std::vector<std::pair<std::string, Value>> kw;
  for (const auto& [k, v] : kwargs) kw.emplace_back(k, to_value(v));
  std::string reason;
  std::optional<NodeId> node;
  const size_t nodes_before = out_.graph.size();
  try {
    node = add_torch_call(out_.graph, fn, vals, kw, &reason, grad_enabled_);
  } catch (const UserError& e) {
    reason = e.what();
  }
  if (PyErr_Occurred()) PyErr_Clear();
  if (!node) brk(BreakKind::UnsupportedTorchOp, what + ": " + reason);
  if (static_cast<size_t>(*node) < nodes_before) {
    // NB: a call eager answers with its operand itself (torch.conj of a real tensor) adds no node
    // and gives the operand's node: its Sym, so `torch.conj(x) is x` holds as in eager.
    for (const Sym& a : args)
      if (a->is(SymKind::Tensor) && a->node == *node) return a;
    for (const auto& kv : kwargs)
      if (kv.second->is(SymKind::Tensor) && kv.second->node == *node) return kv.second;
    brk(BreakKind::UnsupportedTorchOp, what + ": returns an earlier value that is none of its operands");
  }
  const Node& n = out_.graph.node(*node);
  // torch.manual_seed returns the generator it seeded (the graph's node has no result).
  if (op_kind(n) == Op::manual_seed) return make_const(known().default_generator);
  if (mutates_operand(n) && n.meta.kind != ValueMeta::Kind::None) {  // (t[i] = v returns None)
    // NB: an in-place call returns the very object it wrote (`x.add_(1) is x`): the result is the
    // operand's own Sym, now standing for the call's node, so every reference to the tensor (stack,
    // locals, containers) reads the written value from the call on. A tensor passed in keeps its
    // source: returning it returns the caller's (written) tensor.
    const OpDef& op = op_def(n.op);
    int out_index = op.schema.index_of("out");
    const Value& written = out_index >= 0 && static_cast<size_t>(out_index) < n.args.size() &&
                                   !n.args[static_cast<size_t>(out_index)].is_none()
                               ? n.args[static_cast<size_t>(out_index)]
                               : n.args.at(0);
    Sym target;
    for (const Sym& a : args)
      if (a->is(SymKind::Tensor) && written.kind == Value::Kind::Node && a->node == written.node) target = a;
    for (const auto& kv : kwargs)
      if (kv.second->is(SymKind::Tensor) && written.kind == Value::Kind::Node && kv.second->node == written.node)
        target = kv.second;
    if (!target) brk(BreakKind::UnsupportedTorchOp, what + ": in-place call whose written operand is not a tensor argument");
    if (n.meta.kind != ValueMeta::Kind::Tensor || n.meta.tensor.dtype != target->meta.dtype ||
        n.meta.tensor.device != target->meta.device)
      brk(BreakKind::UnsupportedTorchOp, what + ": in-place call that changes its operand's dtype or device");
    // NB: x.unsqueeze_(0), x.t_(), x.resize_(...) change the tensor's own sizes and strides.
    target->meta = n.meta.tensor;
    target->node = *node;
    return target;
  }
  if (returns_its_operand(n) && !args.empty() && args[0]->is(SymKind::Tensor)) return args[0];
  if (Sym self = unchanged_self(n, args)) return self;
  Sym r = tensor_sym(*node);
  if (r->is(SymKind::Tuple)) r->obj = PyRef::borrow(structseq_type_of(fn, r->items.size()));
  return r;
}

// x.float() on a float tensor, x.contiguous() on a contiguous one, x.to(x.dtype) ... return x
// itself in eager (`x.float() is x`): the operand's Sym, where the result would be the same tensor.
Sym SymbolicTracer::unchanged_self(const Node& n, const std::vector<Sym>& args) {
  static constexpr std::string_view kMethods[] = {"to", "type", "type_as", "contiguous", "float", "double", "half",
                                                  "bfloat16", "int", "long", "bool", "short", "char", "byte", "cpu", "cuda",
                                                  "flatten"};
  const OpDef& op = op_def(n.op);
  std::string_view target = op.target;
  std::string_view method;
  if (target.rfind("torch.Tensor.", 0) == 0) method = target.substr(std::string_view("torch.Tensor.").size());
  else if (target == "torch.flatten") method = "flatten";  // flatten(x) of what is flat already is x
  else return nullptr;
  if (std::find(std::begin(kMethods), std::end(kMethods), method) == std::end(kMethods)) return nullptr;
  int copy = op.schema.index_of("copy");
  if (copy >= 0 && static_cast<size_t>(copy) < n.args.size() && n.args[static_cast<size_t>(copy)].kind == Value::Kind::Bool &&
      n.args[static_cast<size_t>(copy)].b)
    return nullptr;
  if (args.empty() || !args[0]->is(SymKind::Tensor) || n.meta.kind != ValueMeta::Kind::Tensor) return nullptr;
  const TensorMeta& in = args[0]->meta;
  const TensorMeta& out = n.meta.tensor;
  bool same = in.dtype == out.dtype && in.device == out.device && in.sizes == out.sizes && in.strides == out.strides &&
              in.requires_grad == out.requires_grad;
  return same ? args[0] : nullptr;
}

Sym SymbolicTracer::fold(PyObject* fn, const std::vector<Sym>& args, const KwArgs& kwargs, const std::string& what) {
  for (const Sym& a : args) materialize(a);
  for (const auto& kv : kwargs) materialize(kv.second);
  PyRef tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyObject* c = sym_to_const(args[i]);
    if (!c && is_frozen_view(args[i])) c = Py_NewRef(args[i]->obj.get());
    if (!c) brk(BreakKind::UnsupportedOperand, what + " of " + describe_sym(args[i]));
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), c);
  }
  PyRef kw;
  if (!kwargs.empty()) {
    kw = PyRef::steal(PyDict_New());
    for (const auto& [k, v] : kwargs) {
      PyRef c = PyRef::steal(sym_to_const(v));
      if (!c) brk(BreakKind::UnsupportedOperand, what + " of " + describe_sym(v));
      PyDict_SetItemString(kw.get(), k.c_str(), c.get());
    }
  }
  PyObject* r = PyObject_Call(fn, tuple.get(), kw.get());
  if (!r) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    std::string msg = type ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "error";
    PyRef s = PyRef::steal(value ? PyObject_Str(value) : nullptr);
    if (s) msg += std::string(": ") + PyUnicode_AsUTF8(s.get());
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    PyErr_Clear();
    brk(BreakKind::RaisesInTrace, what + " raises " + msg);
  }
  PyRef hold = PyRef::steal(r);
  // NB: type(name, bases, ns) makes a new class on every call: folded, every call would return one.
  if (PyType_Check(r) && PyType_Check(fn) && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(fn), &PyType_Type))
    brk(BreakKind::UnsupportedCall, what + " makes a new class");
  if (PyObject_TypeCheck(r, reinterpret_cast<PyTypeObject*>(known().tensor_type)))
    brk(BreakKind::UnknownCFunction, what + " returns a tensor");
  if (PyList_CheckExact(r) || PyDict_CheckExact(r)) {
    // A fresh container the traced code owns: symbolic, so that mutating it needs no replay.
    Sym s = wrap(r, nullptr);
    Sym fresh = make_sym(s->kind);
    fresh->items = s->items;
    fresh->keys = s->keys;
    by_identity_.erase(r);
    return fresh;
  }
  return wrap(r, nullptr);
}

namespace {

// torch.compiler.is_compiling() and its aliases (Python functions: inlined, they would read
// Dynamo's own flag). True while framefuse captures, as under torch.compile.
bool is_compiling_function(PyObject* fn) {
  return function_named(fn, {"is_compiling", "is_dynamo_compiling"},
                        {"torch.compiler", "torch._utils", "torch._dynamo.external_utils", "torch._dynamo.eval_frame", "torch._dynamo",
                         "framefuse.compiler"});
}

// torch._dynamo.graph_break (a Python function doing nothing: inlined, it would be no break).
bool is_torch_graph_break(PyObject* fn) { return function_named(fn, {"graph_break"}, {"torch._dynamo.decorators", "torch._dynamo"}); }

// torch.utils.checkpoint.checkpoint (torch 2 wraps it in torch._disable_dynamo, which keeps its name).
bool is_torch_checkpoint(PyObject* fn) { return function_named(fn, {"checkpoint"}, {"torch.utils.checkpoint"}); }

}  // namespace

Sym SymbolicTracer::call_const(const Sym& fn, std::vector<Sym>& args, KwArgs& kwargs) {
  PyObject* o = fn->obj.get();
  const Known& k = known();
  bool any_tensor = false;
  for (const Sym& a : args) any_tensor = any_tensor || has_tensor(a);
  for (const auto& kv : kwargs) any_tensor = any_tensor || has_tensor(kv.second);

  if (o == k.graph_break_fn && o) brk(BreakKind::ExplicitBreak, "framefuse.graph_break");
  bool fold_polyfill = false;
  if (PyObject* polyfill = framefuse_polyfill(o, &fold_polyfill)) {
    // framefuse.compiler.substitute_in_graph: its traceable function is traced in place of `o`; with
    // can_constant_fold_through, a call with constant arguments runs `o` now (an immutable result).
    if (fold_polyfill && !any_tensor)
      if (Sym r = constant_result(o, args, kwargs); r && r->is(SymKind::Const) && is_plain_const(r->obj.get())) return r;
    // NB: the table holds the function for good, so its closure is fetched through it
    return call_python_function(polyfill, object_source(polyfill, "polyfill of " + qualname(o)), std::move(args), std::move(kwargs));
  }
  // allow_in_graph: one opaque node calling `o` (graph/python/allowed_calls.cpp), not traced into
  if (allowed_in_graph(o)) return torch_call(o, args, kwargs, qualname(o));
  if (PyRef polyfill = PyRef::steal(torch_polyfill(o)))  // torch.compiler.substitute_in_graph's, the user's
    return call_python_function(polyfill.get(), object_source(polyfill.get(), "polyfill of " + qualname(o)), std::move(args),
                                std::move(kwargs));
  if (o == k.torch_tensor && o && args.size() == 1 && !any_tensor) {
    // torch.tensor(data) of constant data: made now, passed to the graph as a constant input, and
    // cloned by the graph, since eager makes a new tensor on every call.
    materialize(args[0]);
    PyRef data = PyRef::steal(sym_to_const(args[0]));
    PyRef kw = PyRef::steal(PyDict_New());
    bool constant = static_cast<bool>(data);
    for (const auto& [name, v] : kwargs) {
      PyRef c = PyRef::steal(sym_to_const(v));
      if (c && (name == "requires_grad" || name == "pin_memory") && c.get() == Py_False) continue;  // eager's default
      if (!c || (name != "dtype" && name != "device") || !kw) {
        constant = false;
        break;
      }
      PyDict_SetItemString(kw.get(), name.c_str(), c.get());
    }
    if (constant) {
      PyRef made = PyRef::steal(PyObject_Call(o, PyRef::steal(PyTuple_Pack(1, data.get())).get(), kw.get()));
      if (!made) {
        PyErr_Clear();
        brk(BreakKind::RaisesInTrace, "torch.tensor() of " + describe_sym(args[0]) + " raises");
      }
      // NB: each constant its own name: sources print by it.
      std::string printed = "torch.tensor(...)#" + std::to_string(out_.inputs.size());
      Sym in = wrap(made.get(), object_source(made.get(), printed));
      return torch_call(k.torch_clone, {in}, {}, "torch.tensor");
    }
  }
  if (o == k.mapping_get && (args.size() == 2 || args.size() == 3) && kwargs.empty() && is_environ(args[0])) {
    if (Sym v = environ_item(args[0], args[1])) return v;
    return args.size() == 3 ? args[2] : make_const(Py_None);
  }
  if (o == k.copy_deepcopy && args.size() == 1 && kwargs.empty()) {
    std::unordered_map<const SymValue*, Sym> memo;
    return deep_copy(args[0], memo);
  }
  if (o == k.inspect_signature && args.size() == 1 && kwargs.empty()) {
    // inspect.signature of a function (or a method of an object passed in) is computed now: it
    // depends on the function, which its source guards, not on anything the trace changes.
    const Sym& f = args[0];
    PyRef callable;
    if (f->is(SymKind::Const) && (PyFunction_Check(f->obj.get()) || PyCFunction_Check(f->obj.get()))) {
      callable = PyRef::borrow(f->obj.get());
    } else if (f->is(SymKind::BoundMethod) && f->items[1]->is(SymKind::Const) && PyFunction_Check(f->items[1]->obj.get()) &&
               (f->items[0]->is(SymKind::Object) || f->items[0]->is(SymKind::Const))) {
      callable = PyRef::steal(PyMethod_New(f->items[1]->obj.get(), f->items[0]->obj.get()));
    }
    if (callable) return fold(o, {make_const(callable.get())}, kwargs, "inspect.signature");
  }
  if (o == k.build_class) return class_def(args, kwargs);
  if (PyCFunction_Check(o) && !args.empty() && args[0]->source && args[0]->obj && kwargs.empty() &&
      std::string_view(reinterpret_cast<PyCFunctionObject*>(o)->m_ml->ml_name) == "__exit__" &&
      (reinterpret_cast<PyObject*>(Py_TYPE(args[0]->obj.get())) == k.disable_torch_dispatch ||
       reinterpret_cast<PyObject*>(Py_TYPE(args[0]->obj.get())) == k.disable_functorch)) {
    // The rest of a torch._C._DisableTorchDispatch block a graph break split (the break entered a
    // new object, OutputPlan::Kind::ContextExit): it changes nothing where compiled code runs, so
    // the object is left after the graph, in order with the other effects.
    std::vector<Sym> rest(args.begin() + 1, args.end());
    effects_.push_back({SideEffect::Kind::CallMethod, args[0]->source, "__exit__", PyRef(), make_tuple(std::move(rest))});
    return make_const(Py_None);
  }
  if (Sym it = itertools_call(o, args, kwargs)) return it;
  if (PyType_Check(o)) {
    if (o == k.no_grad || o == k.enable_grad) {
      Sym g = make_sym(SymKind::GradCtx);
      g->flag = o == k.enable_grad;
      return g;
    }
    if (is_autocast_type(o)) {
      // NB: made now, with the arguments' values: its constructor only resolves them (the dtype
      // from the current one where None, validation and warnings), and changes no state.
      PyRef pos = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
      PyRef kw = PyRef::steal(PyDict_New());
      for (size_t i = 0; i < args.size(); ++i) {
        if (!args[i]->is(SymKind::Const)) brk(BreakKind::UnsupportedContextManager, "torch.autocast with an argument that is not a constant");
        PyTuple_SET_ITEM(pos.get(), static_cast<Py_ssize_t>(i), Py_NewRef(args[i]->obj.get()));
      }
      for (const auto& [key, v] : kwargs) {
        if (!v->is(SymKind::Const)) brk(BreakKind::UnsupportedContextManager, "torch.autocast with an argument that is not a constant");
        PyDict_SetItemString(kw.get(), key.c_str(), v->obj.get());
      }
      PyRef made = PyRef::steal(PyObject_Call(o, pos.get(), kw.get()));
      if (!made) {
        PyErr_Clear();
        brk(BreakKind::RaisesInTrace, "torch.autocast(...) raises");
      }
      return autocast_ctx(made.get());
    }
    if (o && (o == k.disable_torch_dispatch || o == k.disable_functorch || (o == k.record_function && k.nullcontext))) {
      if (o != k.record_function && (!args.empty() || !kwargs.empty())) brk(BreakKind::UnsupportedContextManager, describe_sym(fn) + " with arguments");
      Sym c = make_sym(SymKind::NoopCtx);
      c->obj = PyRef::borrow(o == k.record_function ? k.nullcontext : o);
      return c;
    }
    if (o == k.set_grad_enabled) {
      if (args.size() != 1 || !args[0]->is(SymKind::Const)) brk(BreakKind::GradModeChange, "set_grad_enabled with a non-constant mode");
      Sym g = make_sym(SymKind::GradCtx);
      g->flag = PyObject_IsTrue(args[0]->obj.get());
      if (g->flag != grad_enabled_) brk(BreakKind::GradModeChange, "torch.set_grad_enabled");
      return g;
    }
    if (o == k.size_type) {
      Sym r = make_tuple(args.empty() ? std::vector<Sym>{} : iterate(args[0]), k.size_type);
      for (const Sym& i : r->items)
        if (!i->is(SymKind::Const)) brk(BreakKind::UnsupportedValue, "torch.Size of non-constant sizes");
      return r;
    }
    if (o == k.partial_type) {
      if (args.empty()) brk(BreakKind::WrongArguments, "partial() needs a function");
      Sym p = make_sym(SymKind::Partial);
      Sym d = make_sym(SymKind::Dict);
      for (auto& [key, v] : kwargs) {
        d->keys.push_back(make_const_steal(PyUnicode_FromString(key.c_str())));
        d->items.push_back(v);
      }
      p->items = {args[0], make_tuple(std::vector<Sym>(args.begin() + 1, args.end())), d};
      return p;
    }
    std::string mod = module_of(o);
    if (PyExceptionClass_Check(o) && !any_tensor) return fold(o, args, kwargs, qualname(o));
    if (mod == "builtins") return call_builtin(o, reinterpret_cast<PyTypeObject*>(o)->tp_name, args, kwargs);
    // NB: only torch's C types are folded (torch.device, torch.finfo ...); a class written in Python
    // (an nn.Module: constructing one draws from the RNG) is constructed by the trace or breaks.
    bool c_type = !(reinterpret_cast<PyTypeObject*>(o)->tp_flags & Py_TPFLAGS_HEAPTYPE);
    if (!any_tensor && ((starts_with(mod, "torch") && c_type) || mod == "math" || mod == "enum")) {
      if (auto op = op_for_callable(o)) return torch_call(o, args, kwargs, qualname(o));
      return fold(o, args, kwargs, qualname(o));
    }
    if (auto op = op_for_callable(o)) return torch_call(o, args, kwargs, qualname(o));
    return construct(o, std::move(args), std::move(kwargs));
  }
  std::string mod = module_of(o);
  if (mod == "builtins" && PyCFunction_Check(o)) return call_builtin(o, qualname(o), args, kwargs);
  if (auto op = op_for_callable(o)) {
    bool pure_python_op = mod == "_operator" || mod == "operator" || mod == "builtins";
    if (!(pure_python_op && !any_tensor)) return torch_call(o, args, kwargs, qualname(o));
  }
  if (PyFunction_Check(o)) {
    if (is_compiling_function(o)) return make_const(Py_True);
    if (is_torch_graph_break(o)) brk(BreakKind::ExplicitBreak, "torch._dynamo.graph_break");
    if (is_torch_checkpoint(o)) return checkpoint_call(std::move(args), std::move(kwargs));
    if (o == known().autocast_exit && autocast_capturable()) return autocast_exit(std::move(args), std::move(kwargs));
    // NB: inlined, torch's disable wrapper would switch torch's frame hook off.
    if (torch_disable_marked(o) || framefuse_frame_disabled(o)) brk(BreakKind::DisabledCall, qualname(o));
    if (torch_compile_wrapper(o)) brk(BreakKind::TorchCompiledCall, qualname(o));
    if (marked_constant_result(o) && !any_tensor) {
      // assume_constant_result: its result is a constant of the compiled code, unguarded (torch's)
      if (Sym r = constant_result(o, args, kwargs)) return r;
    }
    return call_python_function(o, fn->source, std::move(args), std::move(kwargs));
  }
  std::string name = qualname(o);
  if (starts_with(mod, "torch") || starts_with(name, "_has_torch_function") || starts_with(name, "has_torch_function")) {
    if (starts_with(name, "_has_torch_function") || starts_with(name, "has_torch_function")) {
      for (const Sym& a : args)
        for (const Sym& item : iterate_or_self(a))
          if (item->is(SymKind::Object) || item->is(SymKind::NewObject)) {
            PyObject* tf = PyObject_GetAttrString(type_of(item), "__torch_function__");
            bool has = tf != nullptr;
            Py_XDECREF(tf);
            PyErr_Clear();
            if (has) brk(BreakKind::UnsupportedCall, "an argument overrides __torch_function__");
          }
      return make_const(Py_False);
    }
    if (name == "is_grad_enabled") return make_const(grad_enabled_ ? Py_True : Py_False);
    // NB: pybind11 functions of torch._C carry a long prefix in their qualified name.
    std::string_view short_name = std::string_view(name).substr(name.rfind('.') + 1);
    if (short_name == "_get_deterministic_algorithms" && args.empty()) {
      // torch.are_deterministic_algorithms_enabled() (F.pad, pooling): read now, guarded.
      PyRef d = PyRef::steal(PyObject_CallNoArgs(o));
      if (!d) {
        PyErr_Clear();
        brk(BreakKind::RaisesInTrace, "torch._C._get_deterministic_algorithms() raised");
      }
      for (Guard& g : out_.guards)
        if (g.kind == Guard::Kind::GlobalState) g.deterministic = PyObject_IsTrue(d.get());
      return make_const(d.get());
    }
    if (short_name == "result_type" && args.size() == 2 && kwargs.empty()) {
      // torch.result_type(a, b) reads only dtypes and dimensionality, which the trace holds (and guards).
      DType dt = result_type({to_value(args[0]), to_value(args[1])}, out_.graph);
      return make_const(known().dtypes.at(static_cast<size_t>(dt)));
    }
    // torch.compiler.is_compiling() is True while framefuse captures, as under torch.compile.
    if (short_name == "is_compiling" || short_name == "is_dynamo_compiling") return make_const(Py_True);
    if (Sym a = autocast_getter(short_name, args, kwargs)) return a;
    for (std::string_view n : {"_get_tracing_state", "is_inference_mode_enabled", "get_default_dtype", "is_scripting", "is_tracing",
                               "_is_torch_function_mode_enabled",
                               "is_fx_tracing", "is_available", "is_built", "_get_cudnn_enabled", "is_tensor",
                               "is_floating_point", "is_complex", "is_signed", "_jit_internal", "annotate",
                               "_len_torch_dispatch_stack", "_accelerator_getAccelerator", "_cuda_getDeviceCount"})
      if (short_name == n || (starts_with(short_name, "_") && short_name.substr(1) == n)) {
        // NB: by the short name: torch.is_floating_point's qualified one is _VariableFunctionsClass's.
        if (short_name == "is_tensor") return make_const(args.size() == 1 && args[0]->is(SymKind::Tensor) ? Py_True : Py_False);
        if ((short_name == "is_floating_point" || short_name == "is_complex" || short_name == "is_signed") && args.size() == 1 &&
            args[0]->is(SymKind::Tensor)) {
          std::vector<Sym> rest;
          return call_tensor_method(args[0], std::string(short_name), rest, kwargs);
        }
        if (short_name == "annotate" && args.size() == 2) return args[1];
        if (!any_tensor) return fold(o, args, kwargs, name);
      }
    if (!any_tensor && PyType_Check(o)) return fold(o, args, kwargs, name);
    if (Py_TYPE(o) == &PyMethodDescr_Type && !args.empty() && args[0]->is(SymKind::Tensor)) {
      std::vector<Sym> rest(args.begin() + 1, args.end());
      return call_tensor_method(args[0], PyUnicode_AsUTF8(reinterpret_cast<PyDescrObject*>(o)->d_name), rest, kwargs, o);
    }
    std::string why;
    open_ops_for_callable(o, &why);  // why torch's schemas do not serve (a torch.library op's, say)
    brk(BreakKind::UnsupportedTorchOp, why.empty() ? mod + "." + name + " is not in framefuse's op registry" : why);
  }
  if (o == k.functools_reduce) {  // reduce(f, iterable[, initial]), left to right
    if (args.size() < 2 || args.size() > 3) brk(BreakKind::WrongArguments, "reduce() with " + std::to_string(args.size()) + " arguments");
    if (!kwargs.empty()) brk(BreakKind::RaisesInTrace, "TypeError: reduce() takes no keyword arguments");
    std::vector<Sym> items = iterate(args[1]);
    size_t i = 0;
    Sym acc = args.size() == 3 ? args[2] : nullptr;
    if (!acc) {
      if (items.empty()) brk(BreakKind::RaisesInTrace, "TypeError: reduce() of empty iterable with no initial value");
      acc = items[i++];
    }
    for (; i < items.size(); ++i) acc = call(args[0], {acc, items[i]}, {});
    return acc;
  }
  if (mod == "math" || mod == "_operator" || mod == "operator" || mod == "builtins" || mod == "_functools" ||
      Py_TYPE(o) == &PyMethodDescr_Type || Py_TYPE(o) == &PyWrapperDescr_Type ||
      (PyCFunction_Check(o) && PyCFunction_GET_SELF(o) && is_plain_const(PyCFunction_GET_SELF(o)))) {
    if (o == k.object_getattribute && args.size() == 2 && args[0]->is(SymKind::Object) && args[1]->is(SymKind::Const) &&
        PyUnicode_Check(args[1]->obj.get())) {
      // object.__getattribute__(obj, name), typically from a custom __getattribute__ through super():
      // the generic lookup, without obj's own hook.
      const char* attr = PyUnicode_AsUTF8(args[1]->obj.get());
      if (Sym r = generic_object_attr(args[0], attr)) return r;
      raise_attribute_error(args[0], attr);
    }
    if (Sym r = call_mapping_method(o, args, kwargs)) return r;
    if (o == k.object_getattribute && args.size() == 2 && args[0]->is(SymKind::NewObject) && args[1]->is(SymKind::Const) &&
        PyUnicode_Check(args[1]->obj.get())) {
      const char* attr = PyUnicode_AsUTF8(args[1]->obj.get());
      if (Sym r = new_object_attr(args[0], attr)) return r;
      raise_attribute_error(args[0], attr);
    }
    if (o == k.object_setattr && args.size() == 3 && args[0]->is(SymKind::NewObject) && args[1]->is(SymKind::Const) &&
        PyUnicode_Check(args[1]->obj.get())) {
      new_object_store(args[0], PyUnicode_AsUTF8(args[1]->obj.get()), args[2]);
      return make_const(Py_None);
    }
    if ((mod == "_operator" || mod == "operator") && !any_tensor) {
      if (name == "getitem" && args.size() == 2) return subscript(args[0], args[1]);
      if (name == "contains" && args.size() == 2) return contains(args[0], args[1]);
      if (name == "is_" && args.size() == 2) return is_same(args[0], args[1]);
      if (name == "not_" && args.size() == 1) return make_const(truth(args[0]) ? Py_False : Py_True);
      if (name == "truth" && args.size() == 1) return make_const(truth(args[0]) ? Py_True : Py_False);
      if (name == "index" && args.size() == 1 && args[0]->is(SymKind::Const)) return args[0];
    }
    if (Py_TYPE(o) == &PyMethodDescr_Type && !args.empty() && args[0]->is(SymKind::Tensor)) {
      std::vector<Sym> rest(args.begin() + 1, args.end());
      return call_tensor_method(args[0], PyUnicode_AsUTF8(reinterpret_cast<PyDescrObject*>(o)->d_name), rest, kwargs, o);
    }
    if ((Py_TYPE(o) == &PyMethodDescr_Type || Py_TYPE(o) == &PyWrapperDescr_Type) && !args.empty() &&
        (args[0]->is(SymKind::List) || args[0]->is(SymKind::Dict) || args[0]->is(SymKind::Tuple))) {
      Sym m = make_sym(SymKind::Method);
      m->name = PyUnicode_AsUTF8(reinterpret_cast<PyDescrObject*>(o)->d_name);
      m->items = {args[0]};
      std::vector<Sym> rest(args.begin() + 1, args.end());
      return call_method(m, rest, kwargs);
    }
    if (o == k.object_init && !args.empty() && args[0]->is(SymKind::NewObject)) return make_const(Py_None);
    if (!any_tensor) return fold(o, args, kwargs, name);
    brk(BreakKind::UnsupportedOperand, name + " on a tensor");
  }
  if (o == k.graph_break_fn) brk(BreakKind::ExplicitBreak, "framefuse.graph_break");
  brk(BreakKind::UnknownCFunction, (mod.empty() ? "" : mod + ".") + name);
}

std::vector<Sym> SymbolicTracer::iterate_or_self(const Sym& s) {
  if (s->is(SymKind::Tuple) || s->is(SymKind::List)) return s->items;
  return {s};
}

Sym SymbolicTracer::call_builtin(PyObject* fn, const std::string& name, std::vector<Sym>& args, KwArgs& kwargs) {
  auto arg_count = [&](size_t lo, size_t hi) {
    if (args.size() < lo || args.size() > hi) brk(BreakKind::WrongArguments, name + "() with " + std::to_string(args.size()) + " arguments");
  };
  if (name == "print") brk(BreakKind::Print, "");
  if (name == "isinstance" || name == "issubclass") {
    arg_count(2, 2);
    if (!kwargs.empty()) brk(BreakKind::RaisesInTrace, "TypeError: " + name + "() takes no keyword arguments");
    PyObject* t = name == "isinstance" ? type_of(args[0]) : (args[0]->is(SymKind::Const) ? args[0]->obj.get() : nullptr);
    PyRef cls = PyRef::steal(sym_to_const(args[1]));
    if (!t || !cls) brk(BreakKind::UnsupportedOperand, name + " of " + describe_sym(args[0]));
    // NB: isinstance(x, C) is issubclass(type(x), C) unless C's metaclass says otherwise in Python.
    if (name == "isinstance" && !plain_instancecheck(cls.get()))
      brk(BreakKind::UnsupportedCall, "isinstance() with a class whose metaclass defines __instancecheck__");
    int r = PyObject_IsSubclass(t, cls.get());
    if (r < 0) {
      PyErr_Clear();
      brk(BreakKind::RaisesInTrace, name + "() arg 2 is not a type");
    }
    return make_const(r ? Py_True : Py_False);
  }
  if (name == "len") {
    arg_count(1, 1);
    return len_of(args[0]);
  }
  if (name == "getattr" || name == "hasattr") {
    arg_count(2, 3);
    if (!args[1]->is(SymKind::Const) || !PyUnicode_Check(args[1]->obj.get())) brk(BreakKind::UnsupportedOperand, name + " with a non-constant name");
    Sym r = try_load_attr(args[0], PyUnicode_AsUTF8(args[1]->obj.get()));
    if (name == "hasattr") return make_const(r ? Py_True : Py_False);
    if (r) return r;
    if (args.size() == 3) return args[2];
    brk(BreakKind::RaisesInTrace, "AttributeError in getattr");
  }
  if (name == "vars" && args.size() == 1 && kwargs.empty()) {  // vars(obj) is obj.__dict__
    if (Sym d = try_load_attr(args[0], "__dict__")) return d;
    brk(BreakKind::RaisesInTrace, "TypeError: vars() argument must have __dict__ attribute");
  }
  if (name == "delattr" && args.size() == 2 && kwargs.empty()) {
    if (!args[1]->is(SymKind::Const) || !PyUnicode_Check(args[1]->obj.get())) brk(BreakKind::UnsupportedOperand, "delattr with a non-constant name");
    delete_attr(args[0], PyUnicode_AsUTF8(args[1]->obj.get()));
    return make_const(Py_None);
  }
  if (name == "setattr") {
    arg_count(3, 3);
    if (!args[1]->is(SymKind::Const) || !PyUnicode_Check(args[1]->obj.get())) brk(BreakKind::UnsupportedOperand, "setattr with a non-constant name");
    store_attr(args[0], PyUnicode_AsUTF8(args[1]->obj.get()), args[2]);
    return make_const(Py_None);
  }
  if (name == "type" && args.size() == 1) {
    PyObject* t = type_of(args[0]);
    if (!t) brk(BreakKind::UnsupportedOperand, "type() of " + describe_sym(args[0]));
    return make_const(t);
  }
  // Keyword arguments a builtin takes; any other keyword is eager's TypeError.
  auto only_kwargs = [&](std::initializer_list<const char*> allowed) {
    for (auto& kv : kwargs) {
      bool ok = false;
      for (const char* a : allowed) ok = ok || kv.first == a;
      if (!ok) brk(BreakKind::RaisesInTrace, "TypeError: " + name + "() got an unexpected keyword argument '" + kv.first + "'");
    }
  };
  auto kwarg = [&](const char* key) -> Sym {
    for (auto& kv : kwargs)
      if (kv.first == key) return kv.second;
    return nullptr;
  };
  if (name == "enumerate") {
    only_kwargs({"iterable", "start"});
    Sym iterable = args.empty() ? kwarg("iterable") : args[0];
    Sym start = args.size() == 2 ? args[1] : kwarg("start");
    if (!iterable || args.size() > 2 || (args.size() == 2 && kwarg("start"))) brk(BreakKind::RaisesInTrace, "TypeError: enumerate() arguments");
    Sym it = make_iterator(IterKind::Enumerate, {get_iter(iterable)});
    if (start) {
      if (!start->is(SymKind::Const) || !PyLong_Check(start->obj.get())) brk(BreakKind::UnsupportedOperand, "enumerate() with a non-integer start");
      it->pos = PyLong_AsLongLong(start->obj.get());
      if (PyErr_Occurred()) {
        PyErr_Clear();
        brk(BreakKind::UnsupportedOperand, "enumerate() start out of range");
      }
    }
    return it;
  }
  if (name == "zip") {
    only_kwargs({"strict"});
    std::vector<Sym> inner;
    for (const Sym& a : args) inner.push_back(get_iter(a));
    Sym it = make_iterator(IterKind::Zip, std::move(inner));
    if (Sym strict = kwarg("strict")) it->flag = truth(strict);
    return it;
  }
  if (name == "reversed") {
    arg_count(1, 1);
    only_kwargs({});
    return reversed_of(args[0]);
  }
  if (name == "map" || name == "filter") {
    only_kwargs({});
    if (name == "map" ? args.size() < 2 : args.size() != 2) brk(BreakKind::RaisesInTrace, "TypeError: " + name + "() arguments");
    std::vector<Sym> items = {args[0]};
    for (size_t i = 1; i < args.size(); ++i) items.push_back(get_iter(args[i]));
    return make_iterator(name == "map" ? IterKind::Map : IterKind::Filter, std::move(items));
  }
  if (name == "list" || name == "tuple") {
    arg_count(0, 1);
    std::vector<Sym> items = args.empty() ? std::vector<Sym>{} : iterate(args[0]);
    return name == "list" ? make_list(std::move(items)) : make_tuple(std::move(items));
  }
  if (name == "dict") {
    Sym d = make_sym(SymKind::Dict);
    if (args.size() == 1) {
      Sym src = args[0];
      if (src->is(SymKind::Dict)) {
        for (size_t i = 0; i < src->keys.size(); ++i) store_subscript(d, src->keys[i], src->items[i]);
      } else {
        for (Sym& pair : iterate(src)) {
          std::vector<Sym> kv = iterate(pair);
          if (kv.size() != 2) brk(BreakKind::RaisesInTrace, "dict() sequence element is not a pair");
          store_subscript(d, kv[0], kv[1]);
        }
      }
    }
    for (auto& [key, v] : kwargs) store_subscript(d, make_const_steal(PyUnicode_FromString(key.c_str())), v);
    return d;
  }
  if (name == "set" || name == "frozenset") {
    arg_count(0, 1);
    only_kwargs({});
    // NB: built from the same kind of operand as eager's (a set's table is copied, not re-inserted).
    PyRef operand = PyRef::steal(args.empty() ? PyTuple_New(0) : set_operand(args[0]));
    PyObject* r = name == "set" ? PySet_New(operand.get()) : PyFrozenSet_New(operand.get());
    if (!r) brk(BreakKind::RaisesInTrace, name + "() raises");
    if (name == "set") return new_set(r);
    return make_const_steal(r);
  }
  if (name == "iter") {
    arg_count(1, 1);
    only_kwargs({});
    return get_iter(args[0]);
  }
  if (name == "next") {
    arg_count(1, 2);
    only_kwargs({});
    Sym v = iter_next(args[0]);
    if (v) return v;
    if (args.size() == 2) return args[1];
    brk(BreakKind::RaisesInTrace, "StopIteration from next()");
  }
  if (name == "slice") {
    arg_count(1, 3);
    Sym s = make_sym(SymKind::Slice);
    Sym none = make_const(Py_None);
    if (args.size() == 1) s->items = {none, args[0], none};
    else s->items = {args[0], args[1], args.size() == 3 ? args[2] : none};
    return s;
  }
  if (name == "super") {
    Sym sup = make_sym(SymKind::Super);
    if (args.size() == 2) {
      if (!args[0]->is(SymKind::Const) || !PyType_Check(args[0]->obj.get())) brk(BreakKind::UnsupportedCall, "super() with a non-class");
      sup->obj = args[0]->obj;
      sup->items = {args[1]};
      return sup;
    }
    arg_count(0, 0);
    Frame& f = *frames_.back();
    PyObject* names = f.code->co_localsplusnames;
    Sym cls;
    for (int i = 0; i < f.dc->nlocalsplus; ++i)
      if (std::string_view(PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i))) == "__class__" && f.locals[static_cast<size_t>(i)])
        cls = cell_contents(f.locals[static_cast<size_t>(i)]);
    if (!cls || !cls->is(SymKind::Const) || f.code->co_argcount < 1 || !f.locals[0]) brk(BreakKind::UnsupportedCall, "super() outside a method");
    Sym self = f.locals[0];
    if (self->is(SymKind::Cell)) self = cell_contents(self);
    sup->obj = cls->obj;
    sup->items = {self};
    return sup;
  }
  if (name == "bool") {
    arg_count(0, 1);
    return make_const(!args.empty() && truth(args[0]) ? Py_True : Py_False);
  }
  if (name == "float" && args.size() == 1 && kwargs.empty() && (args[0]->is(SymKind::Scalar) || args[0]->is(SymKind::Tensor)))
    if (Sym s = float_of(args[0])) return s;
  if ((name == "int" || name == "float" || name == "complex") && args.size() == 1 && args[0]->is(SymKind::Tensor))
    brk(BreakKind::TensorToPython, name + "() of a tensor");
  if (name == "abs" && args.size() == 1 && args[0]->is(SymKind::Tensor)) {
    std::vector<Sym> none;
    return call_tensor_method(args[0], "abs", none, kwargs);
  }
  if (name == "any" || name == "all") {
    arg_count(1, 1);
    only_kwargs({});
    bool want = name == "any";
    // NB: stops at the first decisive item, as eager does (the rest is never consumed).
    Sym it = get_iter(args[0]);
    while (Sym i = iter_next(it))
      if (truth(i) == want) return make_const(want ? Py_True : Py_False);
    return make_const(want ? Py_False : Py_True);
  }
  if (name == "sum") {
    only_kwargs({"start"});
    if (args.empty() || args.size() > 2 || (args.size() == 2 && kwarg("start"))) brk(BreakKind::RaisesInTrace, "TypeError: sum() arguments");
    Sym acc = args.size() == 2 ? args[1] : kwarg("start");
    if (!acc) acc = make_const_steal(PyLong_FromLong(0));
    if (acc->is(SymKind::Const) && (PyUnicode_Check(acc->obj.get()) || PyBytes_Check(acc->obj.get()) || PyByteArray_Check(acc->obj.get())))
      brk(BreakKind::RaisesInTrace, "TypeError: sum() can't sum strings");
    std::vector<Sym> items = iterate(args[0]);
    bool all_const = acc->is(SymKind::Const);
    for (const Sym& i : items) all_const = all_const && i->is(SymKind::Const) && is_plain_const(i->obj.get());
    if (all_const) {
      // NB: CPython's sum has its own float algorithm (compensated since 3.12): fold the real one.
      std::vector<Sym> a = {make_tuple(std::move(items)), acc};
      KwArgs none;
      return fold(fn, a, none, name);
    }
    for (Sym& i : items) acc = binary_op(0, acc, i);
    return acc;
  }
  if ((name == "min" || name == "max") && args.size() == 1 && kwargs.empty()) {
    std::vector<Sym> items = iterate(args[0]);
    std::vector<Sym> a = {make_tuple(std::move(items))};
    return fold(fn, a, kwargs, name);
  }
  if (name == "callable") {
    arg_count(1, 1);
    SymKind kd = args[0]->kind;
    if (kd == SymKind::Const) return make_const(PyCallable_Check(args[0]->obj.get()) ? Py_True : Py_False);
    bool c = kd == SymKind::Function || kd == SymKind::BoundMethod || kd == SymKind::Method || kd == SymKind::Partial;
    if (kd == SymKind::Object) c = PyCallable_Check(args[0]->obj.get());
    return make_const(c ? Py_True : Py_False);
  }
  if (name == "id" && args.size() == 1 && kwargs.empty() && args[0]->source &&
      (args[0]->is(SymKind::Object) || (args[0]->is(SymKind::Const) && !is_plain_const(args[0]->obj.get())))) {
    // id() of an object passed in: the trace is then for that very object.
    guard(Guard::Kind::IdMatch, args[0]->source, args[0]->obj.get());
    return make_const_steal(PyLong_FromVoidPtr(args[0]->obj.get()));
  }
  if (name == "id" || name == "vars" || name == "globals" || name == "locals" || name == "exec" || name == "eval" ||
      name == "open" || name == "input" || name == "compile" || name == "delattr" || name == "__import__" ||
      name == "breakpoint" || name == "help")
    brk(BreakKind::UnknownCFunction, name);
  if (is_pure_builtin(name) || name == "object") {
    for (const Sym& a : args)
      if (a->is(SymKind::Tensor)) brk(BreakKind::TensorToPython, name + "() of a tensor");
    return fold(fn, args, kwargs, name);
  }
  brk(BreakKind::UnknownCFunction, name);
}

// ---- tensor methods -----------------------------------------------------------------------------

Sym SymbolicTracer::call_tensor_method(const Sym& self, const std::string& name, std::vector<Sym>& args, KwArgs& kwargs,
                                       PyObject* descr) {
  const TensorMeta& m = self->meta;
  auto int_arg = [&](size_t i) -> int64_t {
    if (i >= args.size() || !args[i]->is(SymKind::Const) || !PyLong_Check(args[i]->obj.get()))
      brk(BreakKind::UnsupportedOperand, "tensor." + name + " with a non-constant dim");
    int64_t d = PyLong_AsLongLong(args[i]->obj.get());
    if (d < -m.dim() || d >= std::max<int64_t>(m.dim(), 1)) brk(BreakKind::RaisesInTrace, "dimension out of range in tensor." + name);
    return d < 0 ? d + m.dim() : d;
  };
  if ((name == "stride" || name == "is_contiguous" || name == "storage_offset") && m.sizes.has_unbacked())
    brk(BreakKind::DataDependentShape, "tensor." + name + "() of a data-dependent output (torch picks its layout at run time)");
  if (name == "size" || name == "stride") {
    const SymShape& v = name == "size" ? m.sizes : m.strides;
    if (args.empty() && kwargs.empty()) {
      std::vector<Sym> items;
      for (const SymInt& d : v) items.push_back(size_of(d));
      return make_tuple(std::move(items), name == "size" ? known().size_type : nullptr);
    }
    if (!kwargs.empty() && args.empty()) args.push_back(kwargs[0].second);
    specialize_ints(args[0]);
    return size_of(v[static_cast<size_t>(int_arg(0))]);
  }
  if (name == "dim" || name == "ndimension") return make_const_steal(PyLong_FromLongLong(m.dim()));
  if (name == "numel" || name == "nelement") return size_of(m.numel());
  if (name == "element_size") return make_const_steal(PyLong_FromLong(dtype_size(m.dtype)));
  if (name == "is_floating_point") return make_const(is_floating(m.dtype) ? Py_True : Py_False);
  if (name == "is_complex") return make_const(is_complex(m.dtype) ? Py_True : Py_False);
  if (name == "is_signed") return make_const(m.dtype != DType::UInt8 && m.dtype != DType::Bool ? Py_True : Py_False);
  if (name == "is_contiguous" && args.empty() && kwargs.empty()) return make_const(m.is_contiguous() ? Py_True : Py_False);
  if (name == "get_device") return make_const_steal(PyLong_FromLong(m.device.type == Device::Type::CUDA ? std::max(m.device.index, 0) : -1));
  if (name == "item" && config().capture_scalar_outputs && !is_floating(m.dtype) && !is_integral(m.dtype, false))
    brk(BreakKind::DataDependentShape, "tensor.item() of a " + std::string(dtype_name(m.dtype)) +
                                           " tensor (config capture_scalar_outputs captures floating-point and integer items)");
  // NB: with capture_scalar_outputs, item() is a graph value (tensor_sym makes it a Scalar).
  if ((name == "item" && !config().capture_scalar_outputs) || name == "tolist" || name == "numpy" || name == "__bool__" ||
      name == "__int__" || name == "__float__" || name == "__index__" || name == "__len__")
    brk(BreakKind::TensorToPython, "tensor." + name + "()");
  if (name == "backward" || name == "register_hook" || name == "retain_grad" || name == "requires_grad_" ||
      name == "data_ptr" || name == "storage")
    brk(BreakKind::UnsupportedTorchOp, "tensor." + name + "()");
  PyObject* desc = descr ? (Py_INCREF(descr), descr) : PyObject_GetAttrString(known().tensor_type, name.c_str());
  if (!desc) {
    PyErr_Clear();
    brk(BreakKind::RaisesInTrace, "AttributeError: tensor has no attribute '" + name + "'");
  }
  PyRef hold = PyRef::steal(desc);
  if (PyFunction_Check(desc) && !op_for_callable(desc)) {
    // torch.Tensor methods written in Python (e.g. Tensor.split, __rsub__) are inlined.
    std::vector<Sym> all = {self};
    for (Sym& a : args) all.push_back(a);
    return call_python_function(desc, nullptr, std::move(all), kwargs);
  }
  std::vector<Sym> all;
  all.reserve(args.size() + 1);
  all.push_back(self);
  for (Sym& a : args) all.push_back(a);
  if (!op_for_callable(desc)) {
    // NB: a tensor method and the torch function of the same name are the same ATen op (self is
    // `input`); use the function when only it is registered.
    PyRef fn = PyRef::steal(PyObject_GetAttrString(known().torch, name.c_str()));
    if (!fn) PyErr_Clear();
    if (fn && PyCFunction_Check(fn.get()) && op_for_callable(fn.get()))
      return torch_call(fn.get(), all, kwargs, "Tensor." + name);
  }
  return torch_call(desc, all, kwargs, "Tensor." + name);
}

// torch's autocast getters answer the traced state (autocast itself is off while the trace runs):
// torch.is_autocast_enabled(device_type) (no argument: CUDA), is_autocast_cpu_enabled,
// _is_any_autocast_enabled, get_autocast_dtype(device_type), get_autocast_{cpu,gpu}_dtype. Null
// for any other name; a device type other than CPU and CUDA breaks.
Sym SymbolicTracer::autocast_getter(std::string_view name, const std::vector<Sym>& args, const KwArgs& kwargs) {
  std::string_view n = name.substr(name.find_first_not_of('_') == std::string_view::npos ? 0 : name.find_first_not_of('_'));
  bool enabled = n == "is_autocast_enabled" || n == "is_autocast_cpu_enabled" || n == "is_any_autocast_enabled";
  bool dtype = n == "get_autocast_dtype" || n == "get_autocast_cpu_dtype" || n == "get_autocast_gpu_dtype";
  if (!enabled && !dtype) return nullptr;
  bool cuda = n == "is_autocast_enabled" || n == "get_autocast_gpu_dtype";
  if (n == "is_autocast_enabled" || n == "get_autocast_dtype") {
    const Sym* dev = !args.empty() ? &args[0] : nullptr;
    for (const auto& [key, v] : kwargs)
      if (key == "device_type") dev = &v;
    if (dev || n == "get_autocast_dtype") {
      if (!dev || !(*dev)->is(SymKind::Const) || !PyUnicode_Check((*dev)->obj.get()))
        brk(BreakKind::UnsupportedCall, std::string(name) + " without a constant device type");
      std::string d = PyUnicode_AsUTF8((*dev)->obj.get());
      if (d != "cpu" && d != "cuda") brk(BreakKind::UnsupportedCall, std::string(name) + "(\"" + d + "\"): only CPU and CUDA autocast are traced");
      cuda = d == "cuda";
    }
  }
  if (n == "is_any_autocast_enabled") return make_const(autocast_.any() ? Py_True : Py_False);
  if (enabled) return make_const((cuda ? autocast_.cuda : autocast_.cpu) ? Py_True : Py_False);
  return make_const(dtype_object(cuda ? autocast_.cuda_dtype : autocast_.cpu_dtype));
}

bool SymbolicTracer::is_autocast_type(PyObject* type) const {
  const Known& k = known();
  bool known_type = false;
  for (PyObject* t : k.autocast_types) known_type = known_type || (t && t == type);
  return known_type && autocast_capturable();
}

Sym SymbolicTracer::autocast_ctx(PyObject* manager) {
  PyRef device = PyRef::steal(PyObject_GetAttrString(manager, "device"));
  PyRef dtype = PyRef::steal(device ? PyObject_GetAttrString(manager, "fast_dtype") : nullptr);
  PyRef enabled = PyRef::steal(dtype ? PyObject_GetAttrString(manager, "_enabled") : nullptr);
  PyRef cache = PyRef::steal(enabled ? PyObject_GetAttrString(manager, "_cache_enabled") : nullptr);
  if (!cache) {
    PyErr_Clear();
    brk(BreakKind::UnsupportedContextManager, "a torch.autocast object without its device, dtype or flags");
  }
  const char* dev = PyUnicode_Check(device.get()) ? PyUnicode_AsUTF8(device.get()) : nullptr;
  if (!dev || (std::string_view(dev) != "cpu" && std::string_view(dev) != "cuda"))
    brk(BreakKind::UnsupportedContextManager, "torch.autocast of a device type other than cpu and cuda");
  DType dt;
  if (!dtype_from_object(dtype.get(), &dt)) brk(BreakKind::UnsupportedContextManager, "torch.autocast of a dtype framefuse does not know");
  Sym ctx = make_sym(SymKind::AutocastCtx);
  ctx->name = dev;
  ctx->flag = PyObject_IsTrue(enabled.get()) == 1;
  ctx->pos = static_cast<int64_t>(dt);
  // NB: torch.autocast itself (a deprecated spelling would warn again), with every argument resolved.
  PyRef pos = PyRef::steal(PyTuple_Pack(2, known().autocast_types[0], device.get()));
  PyRef kw = PyRef::steal(Py_BuildValue("{s:O,s:O,s:O}", "dtype", dtype.get(), "enabled", ctx->flag ? Py_True : Py_False,
                                        "cache_enabled", cache.get()));
  ctx->obj = PyRef::steal(pos && kw ? PyObject_Call(known().partial_type, pos.get(), kw.get()) : nullptr);
  if (!ctx->obj) {
    PyErr_Clear();
    brk(BreakKind::UnsupportedContextManager, "torch.autocast: cannot make a fresh one");
  }
  return ctx;
}

Sym SymbolicTracer::autocast_exit(std::vector<Sym> args, KwArgs kwargs) {
  const Sym& self = args.empty() ? nullptr : args[0];
  if (!self || !(self->is(SymKind::Object) || self->is(SymKind::Const)) || !self->obj || !self->source || !kwargs.empty())
    brk(BreakKind::UnsupportedContextManager, "torch.autocast.__exit__ of an object the trace cannot fetch again");
  PyObject* m = self->obj.get();
  PyRef device = PyRef::steal(PyObject_GetAttrString(m, "device"));
  PyRef prev = PyRef::steal(device ? PyObject_GetAttrString(m, "prev") : nullptr);
  PyRef prev_dtype = PyRef::steal(prev ? PyObject_GetAttrString(m, "prev_fastdtype") : nullptr);
  DType dt;
  const char* dev = prev_dtype && PyUnicode_Check(device.get()) ? PyUnicode_AsUTF8(device.get()) : nullptr;
  if (!dev || !dtype_from_object(prev_dtype.get(), &dt) || (std::string_view(dev) != "cpu" && std::string_view(dev) != "cuda")) {
    PyErr_Clear();
    brk(BreakKind::UnsupportedContextManager, "torch.autocast.__exit__ of an object not entered, or of another device type");
  }
  bool on = PyObject_IsTrue(prev.get()) == 1;
  if (std::string_view(dev) == "cpu") autocast_.cpu = on, autocast_.cpu_dtype = dt;
  else autocast_.cuda = on, autocast_.cuda_dtype = dt;
  std::vector<Sym> rest(args.begin() + 1, args.end());
  effects_.push_back({SideEffect::Kind::CallMethod, self->source, "__exit__", PyRef(), make_tuple(std::move(rest))});
  return make_const(Py_False);
}

// ---- builtin methods of containers and context managers -----------------------------------------

void SymbolicTracer::note_list_mutation(const Sym& list) {
  if (!list->obj) return;
  if (!list->source) brk(BreakKind::UnsupportedValue, "mutation of a list that cannot be fetched again");
  for (const Sym& s : mutated_containers_)
    if (s == list) return;
  mutated_containers_.push_back(list);
}

Sym SymbolicTracer::call_method(const Sym& method, std::vector<Sym>& args, KwArgs& kwargs) {
  const Sym& self = method->items[0];
  const std::string& name = method->name;
  Sym none = make_const(Py_None);
  switch (self->kind) {
    case SymKind::Tensor:
      return call_tensor_method(self, name, args, kwargs);
    case SymKind::GradCtx:
      if (name == "__enter__" || name == "__exit__") {
        if (self->flag != grad_enabled_)
          brk(BreakKind::GradModeChange, self->flag ? "torch.enable_grad()" : "torch.no_grad()");
        return none;
      }
      brk(BreakKind::UnsupportedContextManager, "grad-mode object used as " + name);
    case SymKind::NoopCtx:
      if ((name == "__enter__" || name == "__exit__") && PyObject_HasAttrString(self->obj.get(), name.c_str())) return none;
      brk(BreakKind::UnsupportedContextManager, describe_sym(self) + " used as " + name);
    case SymKind::AutocastCtx:
      if (name == "__enter__") {
        // autocast.__enter__: this device type's autocast on or off, at the object's dtype (set
        // even where off, as torch does); returns the object.
        autocast_outside_.push_back(autocast_);
        DType dt = static_cast<DType>(self->pos);
        if (self->name == "cpu") autocast_.cpu = self->flag, autocast_.cpu_dtype = dt;
        else autocast_.cuda = self->flag, autocast_.cuda_dtype = dt;
        return self;
      }
      if (name == "__exit__") {
        if (autocast_outside_.empty()) brk(BreakKind::UnsupportedContextManager, "torch.autocast left without being entered");
        autocast_ = autocast_outside_.back();
        autocast_outside_.pop_back();
        return make_const(Py_False);
      }
      brk(BreakKind::UnsupportedContextManager, "torch.autocast object used as " + name);
    case SymKind::List:
    case SymKind::Tuple:
    case SymKind::Dict:
    case SymKind::Set:
    case SymKind::DictView:
    case SymKind::Appendable:
      return call_container_method(self, name, args, kwargs);
    case SymKind::NewObject:
      if (Sym gen = generator_cm_gen(self); gen && name == "__exit__") {
        // The with-statement's normal exit: __exit__(None, None, None). The generator must end
        // (contextlib raises "generator didn't stop" where it yields again).
        bool normal = args.size() == 3 && kwargs.empty();
        for (const Sym& a : args) normal = normal && a->is(SymKind::Const) && a->obj.get() == Py_None;
        if (!normal) brk(BreakKind::UnsupportedContextManager, "an exception leaving a @contextmanager block");
        if (iter_next(gen)) brk(BreakKind::UnsupportedContextManager, "a @contextmanager generator that yields twice");
        return make_const(Py_False);
      }
      break;
    default:
      break;
  }
  brk(BreakKind::UnsupportedCall, std::string(sym_kind_name(self->kind)) + "." + name + "()");
}

Sym SymbolicTracer::generator_cm_gen(const Sym& mgr) {
  PyObject* cm_type = known().generator_cm_type;
  if (!cm_type || !mgr->is(SymKind::NewObject) || !PyType_Check(mgr->obj.get())) return nullptr;
  PyTypeObject* cls = reinterpret_cast<PyTypeObject*>(mgr->obj.get());
  // NB: only contextlib's own class: a subclass may change __enter__ or __exit__.
  if (cls != reinterpret_cast<PyTypeObject*>(cm_type)) return nullptr;
  Sym gen = own_attr(mgr, "gen");
  return gen && gen->is(SymKind::Iterator) && gen->iter == IterKind::Generator ? gen : nullptr;
}

}  // namespace ff
