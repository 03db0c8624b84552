// Calls: dispatch on the callee, inlining of Python functions (argument binding, defaults,
// closures, generators), nn.Module calls and object construction.
#include <Python.h>

#include "frame_eval/cache.h"
#include "frame_eval/hook.h"
#include "frame_eval/interpreter_impl.h"
#include "frame_eval/py_util.h"
#include "frame_eval/torch_refs.h"
#include "graph/op_registry.h"
#include "graph/passes/effects.h"

namespace ff {

namespace {
bool is_lru_cache(PyObject* o) { return std::string_view(Py_TYPE(o)->tp_name) == "functools._lru_cache_wrapper"; }

// typing's cache of subscripted forms (typing.List[int] is `_tp_cache`'s functools.lru_cache of
// __getitem__): the forms it makes compare equal however often they are made, so it is evaluated now.
bool is_typing_cache(PyObject* o) {
  if (!is_lru_cache(o)) return false;
  PyRef mod = PyRef::steal(PyObject_GetAttrString(o, "__module__"));
  PyErr_Clear();
  return mod && PyUnicode_Check(mod.get()) && PyUnicode_CompareWithASCIIString(mod.get(), "typing") == 0;
}
}  // namespace

namespace {

bool is_module(PyObject* o) { return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(known().module_type)); }

}  // namespace

namespace {
// A typing operand as a Python value: aliases read from frame state (typing.List) are objects,
// the types and aliases of a subscript's key may sit in a tuple.
PyObject* typing_operand(const Sym& s) {
  if (s->is(SymKind::Object)) return Py_NewRef(s->obj.get());
  if (!s->is(SymKind::Tuple)) return sym_to_const(s);
  PyRef t = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(s->items.size())));
  for (size_t i = 0; i < s->items.size(); ++i) {
    PyObject* c = typing_operand(s->items[i]);
    if (!c) return nullptr;
    PyTuple_SET_ITEM(t.get(), static_cast<Py_ssize_t>(i), c);
  }
  return t.release();
}
}  // namespace

// typing's subscripts (`List[int]`, `Dict[str, List[float]]`) evaluated now: the forms compare equal
// however often they are made (typing caches them; on 3.12 its cache wrapper reads a dict keyed by
// functions, which a trace does not model).
Sym SymbolicTracer::typing_call(PyObject* fn, const std::vector<Sym>& args) {
  PyRef tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyObject* c = typing_operand(args[i]);
    if (!c) brk(BreakKind::UnsupportedOperand, "typing's subscript of " + describe_sym(args[i]));
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), c);
  }
  PyRef r = PyRef::steal(PyObject_Call(fn, tuple.get(), nullptr));
  if (!r) {
    PyErr_Clear();
    brk(BreakKind::RaisesInTrace, "typing's subscript raises");
  }
  return wrap(r.get(), nullptr);
}

Sym SymbolicTracer::call(const Sym& fn, std::vector<Sym> args, KwArgs kwargs) {
  if (symints_made_ > 0 && !keeps_symint_args(fn)) {
    for (const Sym& a : args) specialize_ints(a);
    for (const auto& kv : kwargs) specialize_ints(kv.second);
  }
  bool disabled = false;
  if (PyObject* target = fn->obj ? frame_eval_callable_target(fn->obj.get(), &disabled) : nullptr) {
    // framefuse.disable(f): f runs natively, a break; framefuse.compile(f) called from compiled code
    // is traced as part of it (as torch.compile inside torch.compile)
    if (disabled) brk(BreakKind::DisabledCall, "framefuse.disable(" + qualname(target) + ")");
    return call(make_const(target), std::move(args), std::move(kwargs));
  }
  switch (fn->kind) {
    case SymKind::Const:
      return call_const(fn, args, kwargs);
    case SymKind::BoundMethod: {
      if (!fn->name.empty() && fn->items[1]->is(SymKind::Const) && is_lru_cache(fn->items[1]->obj.get())) {
        // logger.warning_once(msg) (generic_object_attr): it logs, once per message, and returns
        // None; the call is made after the graph, in order with the other effects (its own cache
        // keeps it to once). Arguments must be constants.
        const Sym& self = fn->items[0];
        bool constant = kwargs.empty() && self->source;
        for (const Sym& a : args) constant = constant && a->is(SymKind::Const);
        if (!constant) brk(BreakKind::UnsupportedCall, "logger." + fn->name + "() with arguments that are not constants");
        effects_.push_back({SideEffect::Kind::CallMethod, self->source, fn->name, PyRef(), make_tuple(std::move(args))});
        return make_const(Py_None);
      }
      args.insert(args.begin(), fn->items[0]);
      return call(fn->items[1], std::move(args), std::move(kwargs));
    }
    case SymKind::Function:
      // A function the frame hook runs in its own way (framefuse/optim.py) is called natively.
      if (const ExtraState* ex = extra_state(reinterpret_cast<PyCodeObject*>(fn->obj.get()));
          ex && ex->substitute && options_.break_at_substitutes)
        brk(BreakKind::DisabledCall, std::string(PyUnicode_AsUTF8(reinterpret_cast<PyCodeObject*>(fn->obj.get())->co_qualname)) +
                                         " runs as framefuse's fused optimizer step");
      return inline_call(reinterpret_cast<PyCodeObject*>(fn->obj.get()), fn->globals.get(),
                         fn->source ? fn->source : nullptr, fn->items[0], fn->items[1], fn->items[2],
                         std::move(args), std::move(kwargs));
    case SymKind::Method:
      return call_method(fn, args, kwargs);
    case SymKind::Partial: {
      std::vector<Sym> all = iterate(fn->items[1]);
      for (Sym& a : args) all.push_back(std::move(a));
      KwArgs kw;
      const Sym& d = fn->items[2];
      if (d->is(SymKind::Dict))
        for (size_t i = 0; i < d->keys.size(); ++i) kw.emplace_back(PyUnicode_AsUTF8(d->keys[i]->obj.get()), d->items[i]);
      for (auto& [k, v] : kwargs) {
        bool replaced = false;
        for (auto& [k2, v2] : kw)
          if (k2 == k) {
            v2 = v;
            replaced = true;
          }
        if (!replaced) kw.emplace_back(k, v);
      }
      return call(fn->items[0], std::move(all), std::move(kw));
    }
    case SymKind::Object: {
      if (is_module(fn->obj.get())) return call_module(fn, std::move(args), std::move(kwargs));
      if (is_typing_cache(fn->obj.get()) && kwargs.empty()) return typing_call(fn->obj.get(), args);
      if (is_lru_cache(fn->obj.get())) {
        // A functools.lru_cache function called with constants (torch.get_device_module("cuda")) is
        // called now: in eager its cache makes every later call with these arguments return this same
        // object without running the function, so the result is a constant of the compiled code.
        // Only immutable results, modules, types and functions (a cached list could be mutated).
        if (Sym r = constant_result(fn->obj.get(), args, kwargs)) {
          PyObject* v = r->obj.get();
          if (r->is(SymKind::Const) && (is_plain_const(v) || PyModule_Check(v) || PyType_Check(v) || PyFunction_Check(v)))
            return r;
        }
      }
      PyObject* call_attr = type_lookup(Py_TYPE(fn->obj.get()), "__call__");
      if (call_attr && PyFunction_Check(call_attr)) {
        args.insert(args.begin(), fn);
        return call_python_function(call_attr, nullptr, std::move(args), std::move(kwargs));
      }
      break;
    }
    case SymKind::NewObject: {
      PyObject* call_attr = type_lookup(reinterpret_cast<PyTypeObject*>(fn->obj.get()), "__call__");
      if (call_attr && PyFunction_Check(call_attr)) {
        args.insert(args.begin(), fn);
        return call_python_function(call_attr, nullptr, std::move(args), std::move(kwargs));
      }
      break;
    }
    default:
      break;
  }
  brk(BreakKind::UnsupportedCall, "calling " + describe_sym(fn));
}

namespace {
// nn.Module's tree walkers are generators with `yield from`; they are evaluated natively on the
// real module tree, each submodule fetched through its parent's _modules (and guarded).
bool is_module_walker(PyObject* fn, std::string* which) {
  static PyObject* walkers[4] = {nullptr, nullptr, nullptr, nullptr};
  static const char* names[4] = {"modules", "named_modules", "children", "named_children"};
  if (!walkers[0])
    for (int i = 0; i < 4; ++i) {
      walkers[i] = PyObject_GetAttrString(known().module_type, names[i]);
      if (!walkers[i]) PyErr_Clear();
    }
  for (int i = 0; i < 4; ++i)
    if (fn == walkers[i]) {
      *which = names[i];
      return true;
    }
  return false;
}
}  // namespace

void SymbolicTracer::walk_modules(const Sym& module, const std::string& prefix, bool recurse, std::vector<Sym>* seen,
                                  std::vector<std::pair<std::string, Sym>>* out) {
  for (const Sym& s : *seen)
    if (s->obj.get() == module->obj.get()) return;
  seen->push_back(module);
  out->emplace_back(prefix, module);
  PyObject** dictptr = _PyObject_GetDictPtr(module->obj.get());
  PyObject* modules = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_modules") : nullptr;
  if (!modules) return;
  PyRef keys = PyRef::steal(PySequence_Tuple(PyRef::steal(PyDict_Keys(modules)).get()));
  guard(Guard::Kind::DictKeys, attr_source(module->source, "_modules"), keys.get());
  PyObject *k, *m;
  Py_ssize_t pos = 0;
  while (PyDict_Next(modules, &pos, &k, &m)) {
    if (m == Py_None) continue;
    std::string name = PyUnicode_AsUTF8(k);
    Sym child = module_child(module, "_modules", m, name);
    std::string child_prefix = prefix.empty() ? name : prefix + "." + name;
    if (recurse) walk_modules(child, child_prefix, true, seen, out);
    else out->emplace_back(name, child);
  }
}

Sym SymbolicTracer::call_python_function(PyObject* fn, const SourcePtr& fn_source, std::vector<Sym> args, KwArgs kwargs) {
  std::string walker;
  if (is_module_walker(fn, &walker) && args.size() == 1 && kwargs.empty() && args[0]->is(SymKind::Object)) {
    std::vector<Sym> seen;
    std::vector<std::pair<std::string, Sym>> found;
    bool recurse = walker == "modules" || walker == "named_modules";
    if (recurse) {
      walk_modules(args[0], "", true, &seen, &found);
    } else {
      walk_modules(args[0], "", false, &seen, &found);
      found.erase(found.begin());
    }
    bool named = walker.rfind("named_", 0) == 0;
    std::vector<Sym> items;
    for (auto& [name, m] : found)
      items.push_back(named ? make_tuple({make_const_steal(PyUnicode_FromString(name.c_str())), m}) : m);
    return make_iterator(IterKind::Items, std::move(items));
  }
  auto* f = reinterpret_cast<PyFunctionObject*>(fn);
  Sym defaults = f->func_defaults ? wrap(f->func_defaults, nullptr) : nullptr;
  Sym kwdefaults;
  if (f->func_kwdefaults) {
    kwdefaults = make_sym(SymKind::Dict);
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(f->func_kwdefaults, &pos, &k, &v)) {
      kwdefaults->keys.push_back(make_const(k));
      kwdefaults->items.push_back(make_const(v));
    }
  }
  Sym closure;
  if (f->func_closure) {
    std::vector<Sym> cells;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(f->func_closure); ++i) {
      PyObject* c = PyTuple_GET_ITEM(f->func_closure, i);
      auto it = by_identity_.find(c);
      if (it != by_identity_.end()) {
        cells.push_back(it->second);
        continue;
      }
      Sym cell = make_sym(SymKind::Cell);
      cell->obj = PyRef::borrow(c);
      if (fn_source) {
        PyRef idx = PyRef::steal(PyLong_FromSsize_t(i));
        cell->source = attr_source(item_source(attr_source(fn_source, "__closure__"), idx.get()), "cell_contents");
      }
      by_identity_.emplace(c, cell);
      cells.push_back(cell);
    }
    closure = make_tuple(std::move(cells));
  }
  return inline_call(reinterpret_cast<PyCodeObject*>(f->func_code), f->func_globals, nullptr, defaults, kwdefaults,
                     closure, std::move(args), std::move(kwargs));
}

// torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, **kwargs): fn's calls go into the
// graph marked `checkpointed`, so that AOT autograd's backward computes them again rather than the
// forward saving them, as eager's checkpoint does. Eager runs fn a second time in the backward: the
// trace refuses what would make that second run differ from the first (Python state written, tensors
// written in place). Random draws are saved, not drawn again, which gives eager's values where
// eager restores the RNG state for the second run (preserve_rng_state, its default). Other options,
// and the reentrant checkpoint (whose gradients depend on its inputs' requires_grad), run natively.
Sym SymbolicTracer::checkpoint_call(std::vector<Sym> args, KwArgs kwargs) {
  auto native = [&](const std::string& why) { brk(BreakKind::DisabledCall, "torch.utils.checkpoint.checkpoint: " + why); };
  if (args.empty()) native("no function given");
  bool non_reentrant = false;
  KwArgs fn_kwargs;
  for (auto& [key, v] : kwargs) {
    bool is_false = v->is(SymKind::Const) && v->obj.get() == Py_False;
    bool is_true = v->is(SymKind::Const) && v->obj.get() == Py_True;
    if (key == "use_reentrant") {
      if (!is_false) native("use_reentrant=True or not given (only use_reentrant=False is captured)");
      non_reentrant = true;
    } else if (key == "preserve_rng_state" || key == "early_stop") {
      if (key == "preserve_rng_state" && !is_true) native("preserve_rng_state=False");
    } else if (key == "debug") {
      if (!is_false) native("debug=True");
    } else if (key == "context_fn" || key == "determinism_check") {
      native(key + " given");
    } else {
      fn_kwargs.emplace_back(key, v);
    }
  }
  if (!non_reentrant) native("use_reentrant=True or not given (only use_reentrant=False is captured)");
  Sym fn = args[0];
  std::vector<Sym> fn_args(args.begin() + 1, args.end());
  size_t effects = effects_.size(), containers = mutated_containers_.size(), sets = set_calls_.size();
  auto first = static_cast<NodeId>(out_.graph.size());
  bool outer = out_.graph.checkpointing();
  out_.graph.set_checkpointing(true);
  Sym result;
  try {
    result = call(fn, std::move(fn_args), std::move(fn_kwargs));
  } catch (...) {
    out_.graph.set_checkpointing(outer);
    throw;
  }
  out_.graph.set_checkpointing(outer);
  if (effects_.size() != effects || mutated_containers_.size() != containers || set_calls_.size() != sets)
    native("the function writes Python state (eager runs it again in the backward)");
  for (auto id = first; id < static_cast<NodeId>(out_.graph.size()); ++id) {
    const Node& n = out_.graph.node(id);
    if (n.kind == NodeKind::Call && (op_def(n.op).has(kInplace) || !written_operands(n).empty()))
      native("the function writes a tensor in place (eager runs it again in the backward)");
  }
  return result;
}

Sym SymbolicTracer::inline_call(PyCodeObject* code, PyObject* globals, const SourcePtr& globals_source, const Sym& defaults,
                                const Sym& kwdefaults, const Sym& closure, std::vector<Sym> args, KwArgs kwargs) {
  if (static_cast<int>(frames_.size()) > options_.max_inline_depth)
    brk(BreakKind::InlineDepth, "more than " + std::to_string(options_.max_inline_depth) + " nested calls");
  int flags = code->co_flags;
  if (flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE))
    brk(BreakKind::GeneratorFrame, "coroutine or async generator");
  const DecodedCode& dc = decode_code(code);
  auto frame = std::make_shared<Frame>();  // NB: on the heap: a generator's outlives this call
  Frame& f = *frame;
  f.dc = &dc;
  f.code = code;
  f.globals = globals;
  f.builtins = PyEval_GetBuiltins();
  f.globals_source = globals_source;
  {
    PyObject* modname = PyDict_GetItemString(globals, "__name__");
    std::string_view m = modname && PyUnicode_Check(modname) ? PyUnicode_AsUTF8(modname) : "";
    f.guard_globals = !(m == "torch" || m.rfind("torch.", 0) == 0);
  }
  f.depth = static_cast<int>(frames_.size());
  f.locals.resize(static_cast<size_t>(dc.nlocalsplus));
  f.closure = closure;

  // Bind arguments as CPython does: positional, then keywords, then defaults.
  int argcount = code->co_argcount, posonly = code->co_posonlyargcount, kwonly = code->co_kwonlyargcount;
  PyObject* names = code->co_localsplusnames;
  auto name_at = [&](int i) { return std::string(PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i))); };
  int slot_varargs = (flags & CO_VARARGS) ? argcount + kwonly : -1;
  int slot_varkw = (flags & CO_VARKEYWORDS) ? argcount + kwonly + ((flags & CO_VARARGS) ? 1 : 0) : -1;
  std::string fname = PyUnicode_AsUTF8(code->co_name);
  size_t npos = std::min(args.size(), static_cast<size_t>(argcount));
  for (size_t i = 0; i < npos; ++i) f.locals[i] = args[i];
  if (args.size() > static_cast<size_t>(argcount)) {
    if (slot_varargs < 0)
      brk(BreakKind::WrongArguments, fname + "() takes " + std::to_string(argcount) + " positional arguments but " +
                                         std::to_string(args.size()) + " were given");
    f.locals[static_cast<size_t>(slot_varargs)] = make_tuple(std::vector<Sym>(args.begin() + argcount, args.end()));
  } else if (slot_varargs >= 0) {
    f.locals[static_cast<size_t>(slot_varargs)] = make_tuple({});
  }
  Sym varkw;
  if (slot_varkw >= 0) {
    varkw = make_sym(SymKind::Dict);
    f.locals[static_cast<size_t>(slot_varkw)] = varkw;
  }
  for (auto& [k, v] : kwargs) {
    int slot = -1;
    for (int i = posonly; i < argcount + kwonly; ++i)
      if (name_at(i) == k) {
        slot = i;
        break;
      }
    if (slot < 0) {
      if (!varkw) brk(BreakKind::WrongArguments, fname + "() got an unexpected keyword argument '" + k + "'");
      varkw->keys.push_back(make_const_steal(PyUnicode_FromString(k.c_str())));
      varkw->items.push_back(v);
      continue;
    }
    if (f.locals[static_cast<size_t>(slot)]) brk(BreakKind::WrongArguments, fname + "() got multiple values for argument '" + k + "'");
    f.locals[static_cast<size_t>(slot)] = v;
  }
  std::vector<Sym> defs = defaults ? iterate(defaults) : std::vector<Sym>{};
  int first_default = argcount - static_cast<int>(defs.size());
  for (int i = 0; i < argcount; ++i) {
    if (f.locals[static_cast<size_t>(i)]) continue;
    if (i >= first_default) f.locals[static_cast<size_t>(i)] = defs[static_cast<size_t>(i - first_default)];
    else brk(BreakKind::WrongArguments, fname + "() missing required argument '" + name_at(i) + "'");
  }
  for (int i = argcount; i < argcount + kwonly; ++i) {
    if (f.locals[static_cast<size_t>(i)]) continue;
    Sym d;
    if (kwdefaults && kwdefaults->is(SymKind::Dict)) {
      std::string n = name_at(i);
      for (size_t j = 0; j < kwdefaults->keys.size(); ++j)
        if (n == PyUnicode_AsUTF8(kwdefaults->keys[j]->obj.get())) d = kwdefaults->items[j];
    }
    if (!d) brk(BreakKind::WrongArguments, fname + "() missing required keyword-only argument '" + name_at(i) + "'");
    f.locals[static_cast<size_t>(i)] = d;
  }
  ++out_.stats.inlined_calls;
  if (flags & CO_GENERATOR) {
    // NB: a generator runs lazily, a step per next(), as in eager: its body sees what the consumer
    // changed between items, and a consumer that stops early stops it.
    f.generator = true;
    Sym it = make_iterator(IterKind::Generator, {});
    it->frame = std::move(frame);
    generators_.push_back(it);
    return it;
  }
  try {
    return run_frame(f);
  } catch (const RaisedInTrace& e) {
    // NB: a handler covering the raise (except, finally, a with-block's exit) would run in Python.
    int at = f.dc->instrs[static_cast<size_t>(f.ip)].offset;
    for (const auto& [first, end] : f.dc->handled)
      if (at >= first && at < end) throw GraphBreak(e.info());
    throw;
  }
}

Sym SymbolicTracer::call_module(const Sym& module, std::vector<Sym> args, KwArgs kwargs) {
  PyObject* m = module->obj.get();
  PyTypeObject* t = Py_TYPE(m);
  PyObject* call_impl = type_lookup(t, "__call__");
  PyObject* base_call = type_lookup(reinterpret_cast<PyTypeObject*>(known().module_type), "__call__");
  if (call_impl != base_call) {
    if (!call_impl || !PyFunction_Check(call_impl)) brk(BreakKind::UnsupportedCall, "module with a C __call__");
    // NB: a module torch.compile wrapped (OptimizedModule): torch's compiler runs its calls
    if (function_named(call_impl, {"OptimizedModule.__call__"}, {"torch._dynamo.eval_frame"}))
      brk(BreakKind::TorchCompiledCall, std::string(t->tp_name) + " (torch.compile of a module)");
    args.insert(args.begin(), module);
    return call_python_function(call_impl, nullptr, std::move(args), std::move(kwargs));
  }
  // NB: nn.Module.__call__ runs hooks; with none registered it is exactly forward(). Global hook
  // dicts are checked at capture time only.
  PyObject* gh = known().global_hook_dicts;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(gh); ++i)
    if (PyObject_Length(PyTuple_GET_ITEM(gh, i)) > 0) brk(BreakKind::ModuleHooks, "global module hooks are registered");
  PyObject** dictptr = _PyObject_GetDictPtr(m);
  PyObject* d = dictptr ? *dictptr : nullptr;
  if (!d) brk(BreakKind::UnsupportedCall, "module without __dict__");
  for (const char* hooks : {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"}) {
    PyObject* h = PyDict_GetItemString(d, hooks);
    if (!h) continue;
    Py_ssize_t n = PyObject_Length(h);
    if (n != 0) brk(BreakKind::ModuleHooks, std::string(t->tp_name) + "." + hooks);
    guard(Guard::Kind::LenMatch, attr_source(module->source, hooks), nullptr, 0);
  }
  PyObject* forward = nullptr;
  PyObject* inst_forward = PyDict_GetItemString(d, "forward");
  if (inst_forward) brk(BreakKind::UnsupportedCall, "module with an instance attribute 'forward'");
  not_in_instance_dict(module, "forward");
  forward = type_lookup(t, "forward");
  if (!forward || !PyFunction_Check(forward)) brk(BreakKind::UnsupportedCall, std::string(t->tp_name) + ".forward is not a Python function");
  args.insert(args.begin(), module);
  return call_python_function(forward, nullptr, std::move(args), std::move(kwargs));
}

Sym SymbolicTracer::construct(PyObject* cls, std::vector<Sym> args, KwArgs kwargs) {
  auto* t = reinterpret_cast<PyTypeObject*>(cls);
  if (is_module(cls) || PyType_IsSubtype(t, reinterpret_cast<PyTypeObject*>(known().module_type)))
    brk(BreakKind::UnsupportedCall, std::string("constructing ") + t->tp_name + " inside compiled code");
  if (PyType_IsSubtype(t, &PyTuple_Type) && PyObject_HasAttrString(cls, "_fields")) {
    // NB: a subclass without __slots__ has instances with a __dict__, which a tuple model lacks.
    if (t->tp_dictoffset != 0) brk(BreakKind::UnsupportedCall, std::string("constructing ") + t->tp_name + " (instances with attributes)");
    // namedtuple: bind like its __new__ would.
    PyObject* new_fn = type_lookup(t, "__new__");
    if (new_fn && Py_TYPE(new_fn) == &PyStaticMethod_Type) {
      PyRef fn = PyRef::steal(PyObject_GetAttrString(new_fn, "__func__"));
      if (fn && PyFunction_Check(fn.get())) {
        PyCodeObject* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn.get()));
        int n = code->co_argcount;
        // Bind through a throwaway frame-less path: positional then keywords then defaults.
        std::vector<Sym> values(static_cast<size_t>(n - 1));
        for (size_t i = 0; i < args.size(); ++i) {
          if (i >= values.size()) brk(BreakKind::WrongArguments, std::string(t->tp_name) + "() takes too many arguments");
          values[i] = args[i];
        }
        for (auto& [k, v] : kwargs) {
          bool found = false;
          for (int i = 1; i < n; ++i)
            if (k == PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i))) {
              values[static_cast<size_t>(i - 1)] = v;
              found = true;
            }
          if (!found) brk(BreakKind::WrongArguments, std::string(t->tp_name) + "() got an unexpected keyword argument '" + k + "'");
        }
        PyObject* defaults = PyFunction_GET_DEFAULTS(fn.get());
        Py_ssize_t nd = defaults ? PyTuple_GET_SIZE(defaults) : 0;
        for (size_t i = 0; i < values.size(); ++i) {
          if (values[i]) continue;
          Py_ssize_t di = static_cast<Py_ssize_t>(i) - (static_cast<Py_ssize_t>(values.size()) - nd);
          if (di < 0) brk(BreakKind::WrongArguments, std::string(t->tp_name) + "() missing a required argument");
          values[i] = make_const(PyTuple_GET_ITEM(defaults, di));
        }
        return make_tuple(std::move(values), cls);
      }
    }
    brk(BreakKind::UnsupportedCall, std::string("constructing ") + t->tp_name);
  }
  // A plain Python class: object.__new__ then an inlined __init__.
  PyObject* new_fn = type_lookup(t, "__new__");
  PyObject* base_new = type_lookup(&PyBaseObject_Type, "__new__");
  PyObject* meta_call = type_lookup(Py_TYPE(cls), "__call__");
  PyTypeObject* builtin = t;
  while (builtin->tp_flags & Py_TPFLAGS_HEAPTYPE) builtin = builtin->tp_base;
  if ((builtin == &PyDict_Type || reinterpret_cast<PyObject*>(builtin) == known().ordered_dict_type) &&
      new_fn == type_lookup(builtin, "__new__") && meta_call == type_lookup(&PyType_Type, "__call__")) {
    // A dict or OrderedDict subclass (transformers' ModelOutput): its mapping contents are a Dict
    // of the object's own (items[0]), its attributes as for any object.
    Sym obj = make_sym(SymKind::NewObject);
    obj->obj = PyRef::borrow(cls);
    obj->items = {make_sym(SymKind::Dict)};
    PyObject* init = type_lookup(t, "__init__");
    args.insert(args.begin(), obj);
    Sym r = PyFunction_Check(init) ? call_python_function(init, nullptr, std::move(args), std::move(kwargs))
                                   : call(make_const(init), std::move(args), std::move(kwargs));
    if (!(r->is(SymKind::Const) && r->obj.get() == Py_None)) brk(BreakKind::RaisesInTrace, "__init__() should return None");
    return obj;
  }
  if (new_fn != base_new || meta_call != type_lookup(&PyType_Type, "__call__") || !(t->tp_flags & Py_TPFLAGS_HEAPTYPE) ||
      (t->tp_base->tp_init != PyBaseObject_Type.tp_init && type_lookup(t, "__init__") && !PyFunction_Check(type_lookup(t, "__init__"))))
    brk(BreakKind::UnsupportedCall, std::string("constructing ") + t->tp_name + " (custom __new__, metaclass or C base)");
  Sym obj = make_sym(SymKind::NewObject);
  obj->obj = PyRef::borrow(cls);
  PyObject* init = type_lookup(t, "__init__");
  if (init && PyFunction_Check(init)) {
    args.insert(args.begin(), obj);
    Sym r = call_python_function(init, nullptr, std::move(args), std::move(kwargs));
    if (!(r->is(SymKind::Const) && r->obj.get() == Py_None)) brk(BreakKind::RaisesInTrace, "__init__() should return None");
  } else if (!args.empty() || !kwargs.empty()) {
    brk(BreakKind::WrongArguments, std::string(t->tp_name) + "() takes no arguments");
  }
  return obj;
}

// fn(*args, **kwargs) called now, when every argument is a constant; null where one is not, or the
// call raised (the trace then inlines the function, and meets what it raises).
Sym constant_result(PyObject* fn, const std::vector<Sym>& args, const KwArgs& kwargs) {
  PyRef tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  PyRef kw = PyRef::steal(PyDict_New());
  if (!tuple || !kw) return nullptr;
  for (size_t i = 0; i < args.size(); ++i) {
    PyObject* c = sym_to_const(args[i]);
    if (!c) return PyErr_Clear(), nullptr;
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), c);
  }
  for (const auto& [name, v] : kwargs) {
    PyRef c = PyRef::steal(sym_to_const(v));
    if (!c || PyDict_SetItemString(kw.get(), name.c_str(), c.get()) < 0) return PyErr_Clear(), nullptr;
  }
  PyObject* r = PyObject_Call(fn, tuple.get(), kw.get());
  if (!r) return PyErr_Clear(), nullptr;
  if (is_tensor(r)) return Py_DECREF(r), nullptr;  // NB: constants of a graph are not tensors: traced instead
  return make_const_steal(r);
}

// torch.max(t, 1), Tensor.sort(), torch.linalg.eigh ... return a torch.return_types structseq
// named after the function; other tuple-returning ops (chunk, var_mean ...) a plain tuple.
// Borrowed; nullptr for a plain tuple.
PyObject* SymbolicTracer::structseq_type_of(PyObject* fn, size_t n) {
  static PyObject* return_types = nullptr;
  if (!return_types) {
    return_types = PyImport_ImportModule("torch.return_types");
    if (!return_types) {
      PyErr_Clear();
      return nullptr;
    }
  }
  PyRef name = PyRef::steal(PyObject_GetAttrString(fn, "__name__"));
  if (!name || !PyUnicode_Check(name.get())) {
    PyErr_Clear();
    return nullptr;
  }
  PyRef t = PyRef::steal(PyObject_GetAttr(return_types, name.get()));
  if (!t) {
    PyErr_Clear();
    return nullptr;
  }
  PyRef fields = PyRef::steal(PyObject_GetAttrString(t.get(), "n_sequence_fields"));
  if (!fields) PyErr_Clear();
  if (!PyType_Check(t.get()) || !fields || PyLong_AsSsize_t(fields.get()) != static_cast<Py_ssize_t>(n)) return nullptr;
  return t.get();  // NB: the module keeps it alive
}

namespace {
// The package a relative import in a module of `globals` is relative to, as importlib computes it
// (__package__, else __spec__.parent, else __name__ less its last part unless it is a package).
std::string import_package(PyObject* globals) {
  PyObject* package = PyDict_GetItemString(globals, "__package__");
  if (package && PyUnicode_Check(package)) return PyUnicode_AsUTF8(package);
  PyObject* spec = PyDict_GetItemString(globals, "__spec__");
  if (spec && spec != Py_None) {
    PyRef parent = PyRef::steal(PyObject_GetAttrString(spec, "parent"));
    if (parent && PyUnicode_Check(parent.get())) return PyUnicode_AsUTF8(parent.get());
    PyErr_Clear();
  }
  PyObject* name = PyDict_GetItemString(globals, "__name__");
  if (!name || !PyUnicode_Check(name)) return "";
  std::string n = PyUnicode_AsUTF8(name);
  return PyDict_GetItemString(globals, "__path__") ? n : n.substr(0, std::min(n.size(), n.rfind('.')));
}
}  // namespace

PyObject* import_loaded(PyObject* globals, PyObject* name, PyObject* fromlist, long level, std::string& why) {
  std::string absolute = PyUnicode_AsUTF8(name);
  if (level > 0) {
    std::string base = import_package(globals);
    for (long up = 1; up < level && !base.empty(); ++up) {
      size_t dot = base.rfind('.');
      base = dot == std::string::npos ? "" : base.substr(0, dot);
    }
    if (base.empty()) return why = "relative import without a parent package", nullptr;
    absolute = absolute.empty() ? base : base + "." + absolute;
  }
  PyObject* modules = PyImport_GetModuleDict();
  PyObject* module = PyDict_GetItemString(modules, absolute.c_str());
  if (!module) return why = "import of a module that is not loaded yet: " + absolute, nullptr;
  // `from package import sub` imports the submodule when the package lacks the name.
  if (fromlist != Py_None && PyTuple_Check(fromlist) && PyObject_HasAttrString(module, "__path__")) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fromlist); ++i) {
      PyObject* item = PyTuple_GET_ITEM(fromlist, i);
      if (!PyUnicode_Check(item) || PyObject_HasAttr(module, item)) continue;
      std::string sub = absolute + "." + PyUnicode_AsUTF8(item);
      if (!PyDict_GetItemString(modules, sub.c_str()))
        return why = "import of a module that is not loaded yet: " + sub, nullptr;
    }
  }
  PyObject* m = PyImport_ImportModuleLevelObject(name, globals, nullptr, fromlist, static_cast<int>(level));
  if (!m) {
    PyErr_Clear();
    why = "import failed: " + absolute;
  }
  return m;
}

}  // namespace ff
