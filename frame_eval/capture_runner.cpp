#include "frame_eval/capture_runner.h"

#include "frame_eval/py_util.h"
#include "src/errors.h"

namespace ff {

// An OutputPlan with sources resolved to slots. Python objects are borrowed from the capture.
struct CaptureRunner::Plan {
  OutputPlan::Kind kind = OutputPlan::Kind::Constant;
  int index = -1;  // GraphOutput: output index; Source: slot
  PyObject* constant = nullptr;
  PyObject* tuple_type = nullptr;
  std::vector<Plan> items;
  std::vector<PyObject*> keys;
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
      r.constant = p.constant ? p.constant : Py_None;
      break;
    case OutputPlan::Kind::Dict:
      FF_CHECK(p.keys.size() == p.items.size(), "dict plan: keys and values differ in number");
      r.keys = p.keys;
      [[fallthrough]];
    case OutputPlan::Kind::Tuple:
    case OutputPlan::Kind::List:
      r.tuple_type = p.tuple_type;
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
  reference_ = std::make_unique<ReferenceRunner>(capture_.graph);
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

PyObject* CaptureRunner::build(const Plan& p, PyObject* outputs, const Slots& slots) const {
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
        PyObject* item = build(p.items[static_cast<size_t>(i)], outputs, slots);
        if (!item) {
          Py_DECREF(seq);
          return nullptr;
        }
        if (p.kind == OutputPlan::Kind::List) PyList_SET_ITEM(seq, i, item);
        else PyTuple_SET_ITEM(seq, i, item);
      }
      if (p.kind == OutputPlan::Kind::Tuple && p.tuple_type) {
        PyObject* nt = PyObject_Call(p.tuple_type, seq, nullptr);  // namedtuple(*items)
        Py_DECREF(seq);
        return nt;
      }
      return seq;
    }
    case OutputPlan::Kind::Dict: {
      PyObject* d = PyDict_New();
      if (!d) return nullptr;
      for (size_t i = 0; i < p.items.size(); ++i) {
        PyObject* item = build(p.items[i], outputs, slots);
        if (!item || PyDict_SetItem(d, p.keys[i], item) < 0) {
          Py_XDECREF(item);
          Py_DECREF(d);
          return nullptr;
        }
        Py_DECREF(item);
      }
      return d;
    }
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

  PyObject* outputs = compiled_ ? PyObject_Vectorcall(compiled_, inputs, n, nullptr) : reference_->run(inputs, n);
  if (!outputs) {
    slots.clear();
    return nullptr;
  }
  PyObject* result = nullptr;
  bool ok = true;
  for (const Effect& e : effects_) {
    PyObject* value = build(e.value, outputs, slots);
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
  if (ok) result = build(*output_, outputs, slots);
  Py_DECREF(outputs);
  slots.clear();
  return result;
}

}  // namespace ff
