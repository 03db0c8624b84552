#include "frame_eval/capture_runner.h"

#include "graph/passes/specialize_shapes.h"

#include <optional>

#include "frame_eval/py_util.h"
#include "frame_eval/torch_refs.h"
#include "src/base/errors.h"

namespace ff {

// An OutputPlan with sources resolved to slots. Python objects are borrowed from the capture.
struct CaptureRunner::Plan {
  OutputPlan::Kind kind = OutputPlan::Kind::Constant;
  int index = -1;  // GraphOutput: output index; Source: slot
  PyObject* constant = nullptr;
  PyObject* tuple_type = nullptr;
  std::vector<Plan> items;
  std::vector<PyObject*> keys;
  int memo = -1;
  SymExprId expr = 0;  // SymInt
  bool star_args = true;  // Tuple: tuple_type(*items) (namedtuple) rather than tuple_type(items) (torch.Size)
};

// Objects built once per run (OutputPlan::memo), strong references.
struct CaptureRunner::Memo {
  std::vector<PyObject*> objs;
  std::vector<int64_t> symbols;  // the size symbols' values in this call (SymInt plans)
  explicit Memo(int n) : objs(static_cast<size_t>(n), nullptr) {}
  ~Memo() {
    for (PyObject* o : objs) Py_XDECREF(o);
  }
};

struct CaptureRunner::Effect {
  SideEffect::Kind kind = SideEffect::Kind::SetAttr;
  int target_slot = -1;
  int cell_index = -1;        // CellSet: index into the function's closure
  PyObject* name = nullptr;   // SetAttr, StoreGlobal: interned (strong)
  PyObject* key = nullptr;    // DictSetItem / DictDelItem (borrowed from the capture)
  Plan value;
};

namespace {

void collect_plan_sources(const OutputPlan& p, std::vector<SourcePtr>* out) {
  if (p.kind == OutputPlan::Kind::Source) out->push_back(p.source);
  for (const OutputPlan& item : p.items) collect_plan_sources(item, out);
}

}  // namespace

CaptureRunner::Plan CaptureRunner::resolve_plan(const OutputPlan& p) {
  Plan r;
  r.kind = p.kind;
  r.memo = p.memo;
  FF_CHECK(p.memo < capture_.num_memos, "output plan memo id out of range");
  switch (p.kind) {
    case OutputPlan::Kind::GraphOutput:
      FF_CHECK(p.index >= 0, "graph output plan without an index");
      r.index = p.index;
      break;
    case OutputPlan::Kind::Source:
      r.index = program_->slot_of(p.source);
      FF_CHECK(r.index >= 0, "output source not fetched");
      break;
    case OutputPlan::Kind::Constant:
    case OutputPlan::Kind::Context:
    case OutputPlan::Kind::ContextExit:
      r.constant = p.constant ? p.constant : Py_None;
      break;
    case OutputPlan::Kind::ClosureCell:
      r.index = p.index;
      break;
    case OutputPlan::Kind::Function:
      r.constant = p.constant;
      FF_CHECK(p.items.size() == 3 || p.items.size() == 4, "function plan without defaults, kwdefaults and closure");
      for (const OutputPlan& item : p.items) r.items.push_back(resolve_plan(item));
      break;
    case OutputPlan::Kind::Iterator:
    case OutputPlan::Kind::Cell:
    case OutputPlan::Kind::Method:
    case OutputPlan::Kind::Attr:
    case OutputPlan::Kind::Call:
    case OutputPlan::Kind::Set:
      r.constant = p.constant;
      r.index = p.index;
      for (const OutputPlan& item : p.items) r.items.push_back(resolve_plan(item));
      break;
    case OutputPlan::Kind::SymInt:
      FF_CHECK(p.expr != 0, "a SymInt plan without an expression");
      r.expr = p.expr;
      has_symint_plans_ = true;
      break;
    case OutputPlan::Kind::Object:
      FF_CHECK(p.keys.size() + (p.index == 1 ? 1 : 0) == p.items.size(), "object plan: names and values differ in number");
      r.constant = p.constant;
      r.index = p.index;
      r.keys = p.keys;
      for (const OutputPlan& item : p.items) r.items.push_back(resolve_plan(item));
      break;
    case OutputPlan::Kind::Dict:
      FF_CHECK(p.keys.size() == p.items.size(), "dict plan: keys and values differ in number");
      r.keys = p.keys;
      [[fallthrough]];
    case OutputPlan::Kind::Tuple:
    case OutputPlan::Kind::List:
      r.tuple_type = p.tuple_type;
      if (p.tuple_type) {
        r.star_args = PyObject_HasAttrString(p.tuple_type, "_fields") == 1;
        PyErr_Clear();
      }
      for (const OutputPlan& item : p.items) r.items.push_back(resolve_plan(item));
      break;
  }
  return r;
}

CaptureRunner::CaptureRunner(CaptureResult capture, const FrameValues& frame, PyObject* compiled_fn)
    : capture_(std::move(capture)), compiled_(compiled_fn) {
  FF_CHECK(capture_.inputs.size() == capture_.graph.placeholders().size(),
           "capture has " + std::to_string(capture_.inputs.size()) + " input sources for " +
               std::to_string(capture_.graph.placeholders().size()) + " placeholders");
  std::vector<SourcePtr> extra = capture_.inputs;
  collect_plan_sources(capture_.output, &extra);
  for (const SideEffect& e : capture_.side_effects) {
    if (e.kind != SideEffect::Kind::StoreGlobal && e.kind != SideEffect::Kind::CellSet) extra.push_back(e.target);
    collect_plan_sources(e.value, &extra);
  }
  program_ = std::make_unique<GuardProgram>(capture_.guards, extra, frame);
  for (Guard& g : capture_.guards)  // the program holds these weakly: so must the capture
    if (g.kind == Guard::Kind::IdMatch && g.expected && weakly_held(g.expected)) Py_CLEAR(g.expected);
  for (const SourcePtr& s : capture_.inputs) input_slots_.push_back(program_->slot_of(s));
  output_ = std::make_unique<Plan>(resolve_plan(capture_.output));
  for (const SideEffect& e : capture_.side_effects) {
    Effect fx;
    fx.kind = e.kind;
    fx.value = resolve_plan(e.value);
    switch (e.kind) {
      case SideEffect::Kind::SetAttr:
        fx.name = PyUnicode_InternFromString(e.name.c_str());
        fx.target_slot = program_->slot_of(e.target);
        break;
      case SideEffect::Kind::StoreGlobal:
        fx.name = PyUnicode_InternFromString(e.name.c_str());
        break;
      case SideEffect::Kind::ReplaceList:
        fx.target_slot = program_->slot_of(e.target);
        break;
      case SideEffect::Kind::Advance:
        FF_CHECK(e.key && PyLong_Check(e.key), "Advance without a count");
        fx.key = e.key;
        fx.target_slot = program_->slot_of(e.target);
        break;
      case SideEffect::Kind::CallMethod:
        FF_CHECK(e.value.kind == OutputPlan::Kind::Tuple, "CallMethod without an argument tuple");
        fx.name = PyUnicode_InternFromString(e.name.c_str());
        fx.target_slot = program_->slot_of(e.target);
        break;
      case SideEffect::Kind::DictSetItem:
      case SideEffect::Kind::DictDelItem:
        FF_CHECK(e.key != nullptr, "dict side effect without a key");
        fx.key = e.key;
        fx.target_slot = program_->slot_of(e.target);
        break;
      case SideEffect::Kind::CellSet:
        FF_CHECK(e.target && e.target->kind == Source::Kind::Closure,
                 "CellSet is only supported on closure cells of the compiled function");
        fx.cell_index = e.target->index;
        break;
    }
    effects_.push_back(std::move(fx));
  }
  // NB: a graph with symbolic int arguments always gets a compiled callable (backends._PerSizes
  // runs it specialised to each call's sizes): the reference runner needs concrete arguments.
  if (!has_symbolic_int_args(capture_.graph)) reference_ = std::make_unique<ReferenceRunner>(capture_.graph);
}

CaptureRunner::~CaptureRunner() {
  if (!Py_IsInitialized()) return;
  Py_CLEAR(compiled_);
  for (Effect& e : effects_) Py_CLEAR(e.name);
}

void CaptureRunner::set_compiled(PyObject* compiled_fn) {
  Py_XSETREF(compiled_, compiled_fn);
}

PyObject* CaptureRunner::example_inputs(const FrameValues& frame) const {
  Slots slots(program_->num_slots());
  if (!program_->check(frame, slots)) {
    PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: the capture's guards fail on its own frame");
    return nullptr;
  }
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(input_slots_.size()));
  if (!list) return nullptr;
  for (size_t i = 0; i < input_slots_.size(); ++i) {
    PyObject* v = slots[static_cast<size_t>(input_slots_[i])];
    Py_INCREF(v);
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), v);
  }
  return list;
}

PyObject* CaptureRunner::build(const Plan& p, PyObject* outputs, const Slots& slots, const FrameValues& frame,
                               Memo* memo) const {
  if (p.memo >= 0 && memo) {
    PyObject*& slot = memo->objs[static_cast<size_t>(p.memo)];
    if (slot) {
      Py_INCREF(slot);
      return slot;
    }
    if (p.kind == OutputPlan::Kind::Cell) {
      // NB: the cell exists before its contents: they may refer to it (a recursive closure).
      PyObject* cell = PyCell_New(nullptr);
      if (!cell) return nullptr;
      Py_INCREF(cell);
      memo->objs[static_cast<size_t>(p.memo)] = cell;
      PyObject* contents = p.items.empty() ? nullptr : build(p.items[0], outputs, slots, frame, memo);
      if (!p.items.empty() && (!contents || PyCell_Set(cell, contents) < 0)) {
        Py_XDECREF(contents);
        Py_DECREF(cell);
        return nullptr;
      }
      Py_XDECREF(contents);
      return cell;
    }
    PyObject* v = build_one(p, outputs, slots, frame, memo);
    if (v) {
      Py_INCREF(v);
      memo->objs[static_cast<size_t>(p.memo)] = v;
    }
    return v;
  }
  return build_one(p, outputs, slots, frame, memo);
}

PyObject* CaptureRunner::build_one(const Plan& p, PyObject* outputs, const Slots& slots, const FrameValues& frame,
                                   Memo* memo) const {
  switch (p.kind) {
    case OutputPlan::Kind::GraphOutput: {
      PyObject* v;
      if (PyTuple_Check(outputs)) {
        if (p.index >= PyTuple_GET_SIZE(outputs)) break;
        v = PyTuple_GET_ITEM(outputs, p.index);
      } else if (PyList_Check(outputs)) {
        if (p.index >= PyList_GET_SIZE(outputs)) break;
        v = PyList_GET_ITEM(outputs, p.index);
      } else {
        if (p.index != 0) break;
        v = outputs;
      }
      Py_INCREF(v);
      return v;
    }
    case OutputPlan::Kind::Source: {
      PyObject* v = slots[static_cast<size_t>(p.index)];
      Py_INCREF(v);
      return v;
    }
    case OutputPlan::Kind::Constant:
      Py_INCREF(p.constant);
      return p.constant;
    case OutputPlan::Kind::Tuple:
    case OutputPlan::Kind::List: {
      Py_ssize_t n = static_cast<Py_ssize_t>(p.items.size());
      PyObject* seq = p.kind == OutputPlan::Kind::List ? PyList_New(n) : PyTuple_New(n);
      if (!seq) return nullptr;
      for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* item = build(p.items[static_cast<size_t>(i)], outputs, slots, frame, memo);
        if (!item) {
          Py_DECREF(seq);
          return nullptr;
        }
        if (p.kind == OutputPlan::Kind::List) PyList_SET_ITEM(seq, i, item);
        else PyTuple_SET_ITEM(seq, i, item);
      }
      if (p.kind == OutputPlan::Kind::Tuple && p.tuple_type) {
        PyObject* nt = p.star_args ? PyObject_Call(p.tuple_type, seq, nullptr)  // namedtuple(*items)
                                   : PyObject_CallOneArg(p.tuple_type, seq);
        Py_DECREF(seq);
        return nt;
      }
      return seq;
    }
    case OutputPlan::Kind::Dict: {
      PyObject* d = PyDict_New();
      if (!d) return nullptr;
      for (size_t i = 0; i < p.items.size(); ++i) {
        PyObject* item = build(p.items[i], outputs, slots, frame, memo);
        if (!item || PyDict_SetItem(d, p.keys[i], item) < 0) {
          Py_XDECREF(item);
          Py_DECREF(d);
          return nullptr;
        }
        Py_DECREF(item);
      }
      return d;
    }
    default:
      return build_break_only(p, outputs, slots, frame, memo);
  }
  PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: graph output index out of range");
  return nullptr;
}

PyObject* CaptureRunner::run(const FrameValues& frame, Slots& slots) const {
  constexpr size_t kInlineInputs = 16;
  PyObject* inline_inputs[kInlineInputs];
  std::vector<PyObject*> heap_inputs;
  PyObject** inputs = inline_inputs;
  size_t n = input_slots_.size();
  if (n > kInlineInputs) {
    heap_inputs.resize(n);
    inputs = heap_inputs.data();
  }
  for (size_t i = 0; i < n; ++i) inputs[i] = slots[static_cast<size_t>(input_slots_[i])];

  // NB: read before the graph runs: the values are the guard check's scratch.
  std::vector<int64_t> symbols;
  if (has_symint_plans_) symbols = program_->symbol_values();
  if (!compiled_ && !reference_) {
    slots.clear();
    PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: a graph with symbolic sizes has no compiled callable");
    return nullptr;
  }
  PyObject* outputs;
  if (autocast_off_) {
    AutocastOff off(nullptr);  // NB: the graph only: the values built after may enter autocast blocks
    outputs = compiled_ ? PyObject_Vectorcall(compiled_, inputs, n, nullptr) : reference_->run(inputs, n);
  } else {
    outputs = compiled_ ? PyObject_Vectorcall(compiled_, inputs, n, nullptr) : reference_->run(inputs, n);
  }
  if (!outputs) {
    slots.clear();
    return nullptr;
  }
  PyObject* result = nullptr;
  bool ok = true;
  std::optional<Memo> memo;
  if (capture_.num_memos > 0 || has_symint_plans_) memo.emplace(capture_.num_memos);
  Memo* m = memo ? &*memo : nullptr;
  if (has_symint_plans_) m->symbols = std::move(symbols);
  for (const Effect& e : effects_) {
    PyObject* value = build(e.value, outputs, slots, frame, m);
    if (!value) {
      ok = false;
      break;
    }
    int rc = 0;
    switch (e.kind) {
      case SideEffect::Kind::SetAttr: rc = PyObject_SetAttr(slots[static_cast<size_t>(e.target_slot)], e.name, value); break;
      case SideEffect::Kind::StoreGlobal: rc = PyDict_SetItem(frame.globals, e.name, value); break;
      case SideEffect::Kind::ReplaceList:
        rc = PyList_Check(slots[static_cast<size_t>(e.target_slot)])
                 ? PyList_SetSlice(slots[static_cast<size_t>(e.target_slot)], 0, PY_SSIZE_T_MAX, value)
                 : -1;
        if (rc < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: list side effect on a non-list");
        break;
      case SideEffect::Kind::DictSetItem: rc = PyObject_SetItem(slots[static_cast<size_t>(e.target_slot)], e.key, value); break;
      case SideEffect::Kind::DictDelItem: rc = PyObject_DelItem(slots[static_cast<size_t>(e.target_slot)], e.key); break;
      case SideEffect::Kind::Advance: {
        PyObject* it = slots[static_cast<size_t>(e.target_slot)];
        for (Py_ssize_t i = PyLong_AsSsize_t(e.key); i > 0 && rc == 0; --i) {
          PyObject* item = PyIter_Next(it);
          if (!item) {
            if (!PyErr_Occurred())
              PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: an iterator passed in ended early");
            rc = -1;
          }
          Py_XDECREF(item);
        }
        break;
      }
      case SideEffect::Kind::CallMethod: {
        PyObject* fn = PyObject_GetAttr(slots[static_cast<size_t>(e.target_slot)], e.name);
        PyObject* r = fn ? PyObject_Call(fn, value, nullptr) : nullptr;
        Py_XDECREF(fn);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
        break;
      }
      case SideEffect::Kind::CellSet:
        if (frame.closure && e.cell_index < PyTuple_GET_SIZE(frame.closure)) {
          rc = PyCell_Set(PyTuple_GET_ITEM(frame.closure, e.cell_index), value);
        } else {
          PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: closure cell out of range");
          rc = -1;
        }
        break;
    }
    Py_DECREF(value);
    if (rc < 0) {
      ok = false;
      break;
    }
  }
  if (ok) result = build(*output_, outputs, slots, frame, m);
  Py_DECREF(outputs);
  slots.clear();
  return result;
}

// An object the trace made: its class's __new__ (object's, dict's or OrderedDict's: nothing else
// reaches a plan) without __init__, whose effects the trace modelled, then its state.
PyObject* CaptureRunner::build_object(const Plan& p, PyObject* outputs, const Slots& slots, const FrameValues& frame,
                                      Memo* memo) const {
  auto* cls = reinterpret_cast<PyTypeObject*>(p.constant);
  PyRef no_args = PyRef::steal(PyTuple_New(0));
  PyRef obj = PyRef::steal(no_args ? cls->tp_new(cls, no_args.get(), nullptr) : nullptr);
  if (!obj) return nullptr;
  // NB: the attributes into its __dict__, or through its slots where it has none.
  PyRef dict;
  if (cls->tp_dictoffset != 0) {
    dict = PyRef::steal(PyObject_GenericGetDict(obj.get(), nullptr));
    if (!dict) return nullptr;
  }
  for (size_t i = 0; i < p.keys.size(); ++i) {
    PyRef v = PyRef::steal(build(p.items[i], outputs, slots, frame, memo));
    if (!v) return nullptr;
    int rc = dict ? PyDict_SetItem(dict.get(), p.keys[i], v.get()) : PyObject_GenericSetAttr(obj.get(), p.keys[i], v.get());
    if (rc < 0) return nullptr;
  }
  if (p.index == 1) {
    PyTypeObject* base = cls;
    while (base->tp_flags & Py_TPFLAGS_HEAPTYPE) base = base->tp_base;
    PyRef contents = PyRef::steal(build(p.items.back(), outputs, slots, frame, memo));
    if (!contents) return nullptr;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(contents.get(), &pos, &k, &v))
      if (base->tp_as_mapping->mp_ass_subscript(obj.get(), k, v) < 0) return nullptr;
  }
  return obj.release();
}

PyObject* CaptureRunner::build_break_only(const Plan& p, PyObject* outputs, const Slots& slots,
                                          const FrameValues& frame, Memo* memo) const {
  auto item = [&](size_t i) { return build(p.items[i], outputs, slots, frame, memo); };
  switch (p.kind) {
    case OutputPlan::Kind::Cell: {
      PyObject* contents = p.items.empty() ? nullptr : item(0);
      if (!p.items.empty() && !contents) return nullptr;
      PyObject* cell = PyCell_New(contents);
      Py_XDECREF(contents);
      return cell;
    }
    case OutputPlan::Kind::ClosureCell:
      if (!frame.closure || p.index >= PyTuple_GET_SIZE(frame.closure)) break;
      Py_INCREF(PyTuple_GET_ITEM(frame.closure, p.index));
      return PyTuple_GET_ITEM(frame.closure, p.index);
    case OutputPlan::Kind::Function: {
      PyObject* globals = frame.globals;
      PyRef own_globals;
      if (p.items.size() > 3) {  // made in another module
        own_globals = PyRef::steal(item(3));
        if (!own_globals) return nullptr;
        globals = own_globals.get();
      }
      PyObject* fn = PyFunction_New(p.constant, globals);
      if (!fn) return nullptr;
      static int (*const setters[3])(PyObject*, PyObject*) = {PyFunction_SetDefaults, PyFunction_SetKwDefaults,
                                                              PyFunction_SetClosure};
      for (size_t i = 0; i < 3; ++i) {
        PyObject* v = item(i);
        int rc = v ? setters[i](fn, v) : -1;
        Py_XDECREF(v);
        if (rc < 0) {
          Py_DECREF(fn);
          return nullptr;
        }
      }
      return fn;
    }
    case OutputPlan::Kind::Iterator: {
      PyObject* seq = item(0);
      if (!seq) return nullptr;
      PyObject* it = PyObject_GetIter(seq);
      Py_DECREF(seq);
      if (!it || p.index <= 0) return it;
      // Advanced past the items the trace took: through __setstate__ where the state is that count
      // (list, tuple and range iterators), else by taking them (reversed, dict iterators).
      PyTypeObject* t = Py_TYPE(it);
      if (t == &PyListIter_Type || t == &PyTupleIter_Type || t == &PyRangeIter_Type) {
        PyObject* r = PyObject_CallMethod(it, "__setstate__", "n", static_cast<Py_ssize_t>(p.index));
        if (!r) Py_CLEAR(it);
        Py_XDECREF(r);
        return it;
      }
      for (int i = 0; i < p.index; ++i) {
        PyObject* skipped = PyIter_Next(it);
        if (!skipped) {
          if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: an iterator ended before its traced position");
          Py_CLEAR(it);
          break;
        }
        Py_DECREF(skipped);
      }
      return it;
    }
    case OutputPlan::Kind::Set: {
      PyObject* set = PySet_New(nullptr);
      for (size_t i = 0; set && i < p.items.size(); ++i) {
        PyObject* e = item(i);
        if (!e || PySet_Add(set, e) < 0) Py_CLEAR(set);
        Py_XDECREF(e);
      }
      return set;
    }
    case OutputPlan::Kind::Call: {
      PyObject* callee = item(0);
      if (!callee) return nullptr;
      PyObject* args = PyTuple_New(static_cast<Py_ssize_t>(p.items.size() - 1));
      for (size_t i = 1; args && i < p.items.size(); ++i) {
        PyObject* a = item(i);
        if (!a) {
          Py_CLEAR(args);
          break;
        }
        PyTuple_SET_ITEM(args, static_cast<Py_ssize_t>(i - 1), a);
      }
      PyObject* r = args ? PyObject_Call(callee, args, nullptr) : nullptr;
      Py_XDECREF(args);
      Py_DECREF(callee);
      return r;
    }
    case OutputPlan::Kind::Object:
      return build_object(p, outputs, slots, frame, memo);
    case OutputPlan::Kind::SymInt:
      if (!memo || memo->symbols.empty()) {
        PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: an int that varies, without the call's symbol values");
        return nullptr;
      }
      try {
        return PyLong_FromLongLong(sym_evaluate(p.expr, memo->symbols));
      } catch (const std::exception& e) {  // the guards evaluated it: not expected
        PyErr_SetString(PyExc_RuntimeError, (std::string("framefuse internal error: an int that varies: ") + e.what()).c_str());
        return nullptr;
      }
    case OutputPlan::Kind::Context:
      return PyObject_CallNoArgs(p.constant);
    case OutputPlan::Kind::ContextExit: {
      // The with-block was entered in the graph's grad mode; the native code after the break
      // leaves it through this object's __exit__ (restoring the mode from before the block).
      PyObject* ctx = PyObject_CallNoArgs(p.constant);
      if (!ctx) return nullptr;
      PyObject* r = PyObject_CallMethod(ctx, "__enter__", nullptr);
      PyObject* exit = r ? PyObject_GetAttrString(ctx, "__exit__") : nullptr;
      Py_XDECREF(r);
      Py_DECREF(ctx);
      return exit;
    }
    case OutputPlan::Kind::Attr: {
      PyObject* base = item(0);
      if (!base) return nullptr;
      PyObject* v = PyObject_GetAttr(base, p.constant);
      Py_DECREF(base);
      return v;
    }
    case OutputPlan::Kind::Method: {
      PyObject* self = item(0);
      PyObject* fn = self ? item(1) : nullptr;
      PyObject* m = fn ? PyMethod_New(fn, self) : nullptr;
      Py_XDECREF(self);
      Py_XDECREF(fn);
      return m;
    }
    default:
      break;
  }
  PyErr_SetString(PyExc_RuntimeError, "framefuse internal error: cannot build a graph break's state");
  return nullptr;
}

}  // namespace ff
