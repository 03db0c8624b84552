// Rebuilding Python values after a capture's graph ran: OutputPlans for the return value, side
// effects and a graph break's state (see capture.h).
#include <algorithm>

#include "frame_eval/interpreter_impl.h"

namespace ff {

namespace {
// torch.Size values read from frame state are rebuilt (cheap, and tensors' sizes are their source).
bool is_size_tuple(const Sym& v) { return v->obj && v->obj.get() == known().size_type; }
// What makes a fresh context manager like `v` (a GradCtx, NoopCtx or AutocastCtx) when called with
// no arguments.
PyObject* context_class(const Sym& v) {
  if (v->is(SymKind::NoopCtx) || v->is(SymKind::AutocastCtx)) return v->obj.get();
  return v->flag ? known().enable_grad : known().no_grad;
}
}  // namespace

// Objects that must keep their identity however often they are referenced.
int OutputBuilder::memo(const Sym& v) {
  auto it = memo_of.find(v.get());
  if (it != memo_of.end()) return it->second;
  int id = static_cast<int>(memo_of.size());
  memo_of.emplace(v.get(), id);
  return id;
}

OutputPlan OutputBuilder::constant(PyObject* o) {
  OutputPlan p;
  p.kind = OutputPlan::Kind::Constant;
  p.constant = o;
  Py_INCREF(o);
  return p;
}

OutputPlan OutputBuilder::optional(const Sym& v) { return v ? plan(v) : constant(Py_None); }

OutputPlan OutputBuilder::attr_plan(OutputPlan base, const char* name) {
  OutputPlan p;
  p.kind = OutputPlan::Kind::Attr;
  p.items.push_back(std::move(base));
  p.constant = PyUnicode_FromString(name);
  return p;
}

OutputPlan OutputBuilder::call_plan(OutputPlan callee, std::vector<OutputPlan> args) {
  OutputPlan p;
  p.kind = OutputPlan::Kind::Call;
  p.items.push_back(std::move(callee));
  for (OutputPlan& a : args) p.items.push_back(std::move(a));
  return p;
}

// An iterator at a graph break, rebuilt in the state the trace left it in: the same kind of
// iterator over the same (rebuilt) object, advanced as far.
OutputPlan OutputBuilder::plan_iterator(const Sym& v) {
  OutputPlan p = plan_iterator_value(v);
  p.memo = memo(v);  // one object however often the state holds it
  return p;
}

OutputPlan OutputBuilder::plan_iterator_value(const Sym& v) {
  auto advanced = [&](OutputPlan iterable, int64_t pos) {
    OutputPlan p;
    p.kind = OutputPlan::Kind::Iterator;
    p.items.push_back(std::move(iterable));
    p.index = static_cast<int>(pos);
    return p;
  };
  auto builtin = [&](const char* name) {
    PyRef f = PyRef::steal(PyObject_GetAttrString(known().builtins, name));
    FF_CHECK(f, std::string("builtins.") + name);
    return constant(f.get());
  };
  if (v->exhausted) {
    // NB: an exhausted iterator of the same type (an ended list iterator no longer sees appends).
    PyRef empty_tuple = PyRef::steal(PyTuple_New(0));
    switch (v->iter) {
      case IterKind::Seq:
      case IterKind::Reversed: {
        PyRef empty = PyRef::steal(v->origin->is(SymKind::List) ? PyList_New(0) : PyTuple_New(0));
        if (v->iter == IterKind::Seq) return advanced(constant(empty.get()), 0);
        return advanced(call_plan(builtin("reversed"), {constant(empty.get())}), 0);
      }
      case IterKind::DictKeys:
      case IterKind::DictValues:
      case IterKind::DictItems: {
        const char* which = v->iter == IterKind::DictKeys ? "keys" : v->iter == IterKind::DictValues ? "values"
                                                                                                     : "items";
        return advanced(call_plan(attr_plan(constant(PyRef::steal(PyDict_New()).get()), which), {}), 0);
      }
      case IterKind::Enumerate:
      case IterKind::Zip:
        return call_plan(builtin(v->iter == IterKind::Enumerate ? "enumerate" : "zip"), {constant(empty_tuple.get())});
      case IterKind::Map:
      case IterKind::Filter:
        return call_plan(builtin(v->iter == IterKind::Map ? "map" : "filter"), {constant(Py_None), constant(empty_tuple.get())});
      case IterKind::Chain:
        return call_plan(constant(known().itertools_chain), {});
      case IterKind::Islice:
        return call_plan(constant(known().itertools_islice), {constant(empty_tuple.get()), constant(PyRef::steal(PyLong_FromLong(0)).get())});
      default:
        break;  // a range is rebuilt empty below; the rest iterate an empty tuple
    }
    if (v->iter != IterKind::Range) return advanced(constant(empty_tuple.get()), 0);
  }
  switch (v->iter) {
    case IterKind::Range: {
      PyRef r = PyRef::steal(PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyRange_Type), "LLL",
                                                   static_cast<long long>(v->pos), static_cast<long long>(v->stop),
                                                   static_cast<long long>(v->step)));
      FF_CHECK(r, "range()");
      return advanced(constant(r.get()), 0);
    }
    case IterKind::Seq:
      return advanced(plan(v->origin), v->pos);
    case IterKind::Reversed: {
      int64_t n = static_cast<int64_t>(v->origin->items.size());
      if (v->pos < 0 || v->pos >= n) return advanced(constant(PyRef::steal(PyTuple_New(0)).get()), 0);
      return advanced(call_plan(builtin("reversed"), {plan(v->origin)}), n - 1 - v->pos);
    }
    case IterKind::Items: {
      std::vector<Sym> rest(v->items.begin() + std::min<int64_t>(v->pos, static_cast<int64_t>(v->items.size())), v->items.end());
      return advanced(plan(make_tuple(std::move(rest))), 0);
    }
    case IterKind::DictKeys:
    case IterKind::DictValues:
    case IterKind::DictItems: {
      // NB: one made before the dict changed size raises at its next step; rebuilt now it would not.
      if (v->origin->version != static_cast<uint32_t>(v->stop)) break;
      const char* which = v->iter == IterKind::DictKeys ? "keys" : v->iter == IterKind::DictValues ? "values"
                                                                                                   : "items";
      return advanced(call_plan(attr_plan(plan(v->origin), which), {}), v->pos);
    }
    case IterKind::Enumerate:
      return call_plan(builtin("enumerate"), {plan(v->items[0]), constant(PyRef::steal(PyLong_FromLongLong(v->pos)).get())});
    case IterKind::Zip: {
      OutputPlan callee = builtin("zip");
      if (v->flag) {  // zip(..., strict=True) as functools.partial(zip, strict=True)
        PyRef kw = PyRef::steal(Py_BuildValue("{s:O}", "strict", Py_True));
        PyRef part = PyRef::steal(PyObject_Call(known().partial_type, PyRef::steal(PyTuple_Pack(1, callee.constant)).get(), kw.get()));
        FF_CHECK(part, "functools.partial(zip, strict=True)");
        callee = constant(part.get());
      }
      std::vector<OutputPlan> args;
      for (const Sym& i : v->items) args.push_back(plan(i));
      return call_plan(std::move(callee), std::move(args));
    }
    case IterKind::Map:
    case IterKind::Filter: {
      std::vector<OutputPlan> args;
      for (const Sym& i : v->items) args.push_back(plan(i));
      return call_plan(builtin(v->iter == IterKind::Map ? "map" : "filter"), std::move(args));
    }
    case IterKind::Generator:  // a suspended frame of the trace's: nothing native can resume it
    case IterKind::Native:     // planned as its source (plan_value)
    case IterKind::Protocol:   // advancing a new one would call __getitem__ again
      break;
    case IterKind::Islice: {  // islice(the inner iterator, what is left to skip, what is left to give, step)
      auto num = [&](long long n) { return n < 0 ? constant(Py_None) : constant(PyRef::steal(PyLong_FromLongLong(n)).get()); };
      return call_plan(constant(known().itertools_islice), {plan(v->items[0]), num(v->start - v->pos),
                                                            num(v->stop < 0 ? -1 : std::max<long long>(0, v->stop - v->pos)), num(v->step)});
    }
    case IterKind::Chain: {  // chain(the one being read, the rest); the rest of from_iterable as one
      std::vector<OutputPlan> args;
      if (v->origin) args.push_back(plan(v->origin));
      if (v->flag) {
        args.push_back(call_plan(attr_plan(constant(known().itertools_chain), "from_iterable"), {plan(v->items[0])}));
      } else {
        for (size_t i = static_cast<size_t>(v->pos) + (v->origin ? 1 : 0); i < v->items.size(); ++i) args.push_back(plan(v->items[i]));
      }
      if (v->flag && !v->origin) return std::move(args[0]);
      return call_plan(constant(known().itertools_chain), std::move(args));
    }
    case IterKind::Repeat: {   // repeat(value, what is left) or repeat(value)
      std::vector<OutputPlan> args = {plan(v->items[0])};
      if (v->stop >= 0) args.push_back(constant(PyRef::steal(PyLong_FromLongLong(v->stop - v->pos)).get()));
      return call_plan(constant(known().itertools_repeat), std::move(args));
    }
  }
  t.brk(BreakKind::EscapingObject, describe_sym(v));
}

OutputPlan OutputBuilder::plan(const Sym& v) {
  if (!in_progress.insert(v.get()).second) {
    // A cycle. Through a cell (a recursive inner function's cell holds the function) it is a
    // reference to the cell being built (the runner makes cells before their contents).
    if (break_state && v->is(SymKind::Cell) && !v->obj) {
      OutputPlan p;
      p.kind = OutputPlan::Kind::Cell;
      p.memo = memo(v);
      return p;
    }
    t.brk(BreakKind::EscapingObject, describe_sym(v) + " that contains itself");
  }
  struct Done {
    std::unordered_set<const SymValue*>& s;
    const SymValue* v;
    ~Done() { s.erase(v); }
  } done{in_progress, v.get()};
  return plan_value(v);
}

OutputPlan OutputBuilder::plan_value(const Sym& v) {
  OutputPlan p;
  switch (v->kind) {
    case SymKind::Scalar:  // a float the graph computes: one of its outputs
    case SymKind::Tensor: {
      // The caller's tensor itself, not a graph copy of it: at a graph break, and once written in
      // place (the graph wrote it; its identity is the caller's).
      if (v->is(SymKind::Tensor) && v->source && (break_state || t.out_.graph.node(v->node).kind != NodeKind::Placeholder)) {
        p.kind = OutputPlan::Kind::Source;
        p.source = v->source;
        return p;
      }
      auto it = index_of.find(v->node);
      int idx;
      if (it != index_of.end()) {
        idx = it->second;
      } else {
        idx = static_cast<int>(outputs.size());
        outputs.push_back(Value::of_node(v->node));
        index_of.emplace(v->node, idx);
      }
      p.kind = OutputPlan::Kind::GraphOutput;
      p.index = idx;
      return p;
    }
    case SymKind::SymInt:  // a size or an int that varies, returned or kept across a break
      p.kind = OutputPlan::Kind::SymInt;
      p.expr = v->sint.expr();
      t.shape_env_->add_evaluated(p.expr);
      return p;
    case SymKind::Const:
      if (v->source && !is_plain_const(v->obj.get())) {
        p.kind = OutputPlan::Kind::Source;
        p.source = v->source;
      } else {
        p.kind = OutputPlan::Kind::Constant;
        p.constant = v->obj.get();
        Py_INCREF(p.constant);
      }
      return p;
    case SymKind::Tuple:
      if (v->source && !is_size_tuple(v)) {  // a tuple passed in: the same object (identity, attributes)
        p.kind = OutputPlan::Kind::Source;
        p.source = v->source;
        return p;
      }
      p.kind = OutputPlan::Kind::Tuple;
      for (const Sym& i : v->items) p.items.push_back(plan(i));
      p.tuple_type = v->obj.get();
      Py_XINCREF(p.tuple_type);
      return p;
    case SymKind::Appendable:  // the object passed in (what the trace added is replayed first)
      p.kind = OutputPlan::Kind::Source;
      p.source = v->source;
      return p;
    case SymKind::Iterator:
      if (v->iter == IterKind::Native) {  // the iterator passed in, advanced first
        p.kind = OutputPlan::Kind::Source;
        p.source = v->source;
        return p;
      }
      if (break_state) return plan_break_only(v);
      break;
    case SymKind::List:
    case SymKind::Dict:
    case SymKind::Object:
      if (v->source && v->obj) {
        p.kind = OutputPlan::Kind::Source;
        p.source = v->source;
        return p;
      }
      if (v->is(SymKind::List)) {
        p.kind = OutputPlan::Kind::List;
        p.memo = memo(v);
        for (const Sym& i : v->items) p.items.push_back(plan(i));
        return p;
      }
      if (v->is(SymKind::Dict)) {
        p.kind = OutputPlan::Kind::Dict;
        p.memo = memo(v);
        for (size_t i = 0; i < v->keys.size(); ++i) {
          p.items.push_back(plan(v->items[i]));
          p.keys.push_back(v->keys[i]->obj.get());
          Py_INCREF(p.keys.back());
        }
        return p;
      }
      break;
    case SymKind::Set:
      if (v->source) {  // the set passed in (its changes are replayed before this is built)
        p.kind = OutputPlan::Kind::Source;
        p.source = v->source;
        return p;
      }
      p.kind = OutputPlan::Kind::Set;
      p.memo = memo(v);
      for (const Sym& e : t.set_elements(v)) p.items.push_back(plan(e));
      return p;
    case SymKind::DictView:
      return call_plan(attr_plan(plan(v->items[0]), v->name.c_str()), {});
    case SymKind::NewObject: {
      // Rebuilt from its state: __new__ (object's or dict's, construct() allows no other) and the
      // attributes, which hold everything its __init__ did to it.
      auto* cls = reinterpret_cast<PyTypeObject*>(v->obj.get());
      // NB: nor a module (a slice of a ModuleList): its state is more than its attributes here.
      if (PyType_IsSubtype(cls, reinterpret_cast<PyTypeObject*>(known().module_type))) break;
      if (cls->tp_dictoffset == 0 && cls->tp_base != &PyBaseObject_Type && !(cls->tp_base->tp_flags & Py_TPFLAGS_HEAPTYPE)) break;
      p.kind = OutputPlan::Kind::Object;
      p.memo = memo(v);
      p.constant = v->obj.get();
      Py_INCREF(p.constant);
      if (v->origin) {  // its __dict__ was read: the attributes are that Dict's
        for (size_t i = 0; i < v->origin->keys.size(); ++i) {
          PyObject* name = v->origin->keys[i]->obj.get();
          if (!PyUnicode_Check(name)) t.brk(BreakKind::EscapingObject, describe_sym(v) + " with a non-string key in its __dict__");
          Py_INCREF(name);
          p.keys.push_back(name);
          p.items.push_back(plan(v->origin->items[i]));
        }
      } else {
        for (const auto& [name, value] : v->attrs) {
          p.keys.push_back(PyUnicode_FromString(name.c_str()));
          p.items.push_back(plan(value));
        }
      }
      if (!v->items.empty()) {  // a dict subclass: its mapping contents
        p.index = 1;
        p.items.push_back(plan(v->items[0]));
      }
      return p;
    }
    case SymKind::Slice: {
      PyObject* c = sym_to_const(v);
      if (c) {
        p.kind = OutputPlan::Kind::Constant;
        p.constant = c;
        return p;
      }
      break;
    }
    default:
      if (break_state) return plan_break_only(v);
      break;
  }
  t.brk(BreakKind::EscapingObject, describe_sym(v));
}

// Kinds that only a graph break's state rebuilds (objects the code goes on using natively).
OutputPlan OutputBuilder::plan_break_only(const Sym& v) {
  OutputPlan p;
  switch (v->kind) {
    case SymKind::Cell:
      if (v->obj) {
        if (!v->source || v->source->kind != Source::Kind::Closure) break;
        p.kind = OutputPlan::Kind::ClosureCell;
        p.index = v->source->index;
        return p;
      }
      p.kind = OutputPlan::Kind::Cell;
      p.memo = memo(v);
      if (!v->items.empty() && v->items[0]) p.items.push_back(plan(v->items[0]));
      return p;
    case SymKind::Function:
      p.kind = OutputPlan::Kind::Function;
      p.memo = memo(v);
      p.constant = v->obj.get();
      Py_INCREF(p.constant);
      for (size_t i = 0; i < 3; ++i) p.items.push_back(optional(i < v->items.size() ? v->items[i] : nullptr));
      // NB: made by a function of another module: its own globals, not the frame's.
      if (v->globals && v->globals.get() != t.view_.globals) p.items.push_back(constant(v->globals.get()));
      return p;
    case SymKind::Iterator:
      return plan_iterator(v);
    case SymKind::ClassDef: {
      std::vector<OutputPlan> args;
      for (const Sym& a : v->items) args.push_back(plan(a));
      OutputPlan c = call_plan(constant(known().build_class), std::move(args));
      c.memo = memo(v);  // one class however often the state holds it
      return c;
    }
    case SymKind::GradCtx:
    case SymKind::NoopCtx:
    case SymKind::AutocastCtx:
      p.kind = OutputPlan::Kind::Context;
      p.constant = context_class(v);
      Py_INCREF(p.constant);
      return p;
    case SymKind::Method:
      if (v->name == "__exit__" && v->items.size() == 1 &&
          (v->items[0]->is(SymKind::GradCtx) || v->items[0]->is(SymKind::NoopCtx) || v->items[0]->is(SymKind::AutocastCtx))) {
        p.kind = OutputPlan::Kind::ContextExit;
        p.memo = memo(v);
        p.constant = context_class(v->items[0]);
        Py_INCREF(p.constant);
        return p;
      }
      if (v->items.size() == 1) {  // t.item, lst.append ...
        p.kind = OutputPlan::Kind::Attr;
        p.items.push_back(plan(v->items[0]));
        p.constant = PyUnicode_FromString(v->name.c_str());
        return p;
      }
      break;
    case SymKind::BoundMethod:
      p.kind = OutputPlan::Kind::Method;
      p.items.push_back(plan(v->items[0]));
      p.items.push_back(plan(v->items[1]));
      return p;
    default:
      break;
  }
  t.brk(BreakKind::EscapingObject, describe_sym(v));
}

// The frame state at the stop: (stack values non-NULL bottom first..., live locals..., cells...).
OutputPlan plan_break_state(Frame& root, OutputBuilder& ob) {
  CaptureResult::BreakState& bs = ob.t.out_.brk;
  const TraceOptions& opt = ob.t.options_;
  bs.active = true;
  bs.index = root.ip;
  bs.depth = static_cast<int>(root.stack.size());
  OutputPlan p;
  p.kind = OutputPlan::Kind::Tuple;
  for (size_t i = 0; i < root.stack.size(); ++i) {
    if (root.stack[i]->is(SymKind::Null)) bs.null_slots.push_back(static_cast<int>(i));
    else p.items.push_back(ob.plan(root.stack[i]));
  }
  PyObject* names = root.code->co_localsplusnames;
  PyObject* kinds = root.code->co_localspluskinds;
  const int n = root.dc->nlocalsplus;
  for (const std::string& name : opt.stop_live) {
    for (int i = 0; i < n; ++i) {
      if (name != PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i))) continue;
      const Sym& v = root.locals[static_cast<size_t>(i)];
      if (v && !v->is(SymKind::Null)) {
        bs.live.push_back(name);
        p.items.push_back(ob.plan(v));
      }
      break;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (!(PyBytes_AS_STRING(kinds)[i] & 0x40)) continue;  // CO_FAST_CELL: a cellvar of this code
    const Sym& cell = root.locals[static_cast<size_t>(i)];
    FF_CHECK(cell && cell->is(SymKind::Cell) && !cell->obj, "cell variable without a traced cell at a graph break");
    p.items.push_back(ob.plan(cell));
    ++bs.ncells;
  }
  return p;
}

}  // namespace ff
