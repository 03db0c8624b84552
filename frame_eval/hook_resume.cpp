// Graph breaks at run time: where a frame's second trace stops, the generated code that continues
// it (a stub running the break instruction natively, resume functions for what follows, cached per
// layout in the state of the user's code), and the trampoline that runs them (see cpython-frames.md §4.2).
//
// A partial capture's runner returns the frame state at the break. The stub runs the break
// instruction and returns (marker, successor, state...) instead of continuing; the trampoline
// then dispatches the successor's resume function like a frame of its own (guards, cache,
// compile) without calling it, so a loop with breaks never nests Python frames.
#include <algorithm>

#include "frame_eval/bytecode.h"
#include "frame_eval/bytecode_resume.h"
#include "frame_eval/bytecode_stub.h"
#include "frame_eval/frame_access.h"
#include "frame_eval/hook.h"
#include "frame_eval/hook_internal.h"
#include "frame_eval/py_util.h"
#include "src/base/errors.h"
#include "src/base/gil_once.h"

namespace ff {

namespace {

// What the stubs' tails return first; user code can never return it.
PyObject* marker() {
  // NB: one object for the whole process: stubs compare against the one their code was built with.
  static PyObject* m = nullptr;
  return gil_once(m, [] { return PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type)); });
}

// Generated code derives from the user's code object: a break in a resume function is a break in
// the original at instruction index - shift.
struct Origin {
  PyRef original;
  int shift = 0;
};

// NB: generated code's state refers to the original weakly (cache.h: the original's state owns the
// generated code). The original outlives every frame of code generated from it (those run inside
// a call of the original, whose frame holds it), so a dead reference means framefuse lost track.
Origin origin_of(PyCodeObject* traced) {
  ExtraState* s = extra_state(traced);
  if (!s || !s->origin) return Origin{PyRef::borrow(reinterpret_cast<PyObject*>(traced)), 0};
  PyRef ref = PyRef::steal(ff_weakref_target(s->origin.get()));
  if (!ref) throw Unsupported("the code this resume function was generated from is gone");
  return Origin{ref, s->origin_shift};
}

// Marks `generated` as derived from `original`: its state holds a weak reference to it.
void set_origin(PyObject* generated, PyObject* original, int shift) {
  ExtraState* s = ensure_extra_state(reinterpret_cast<PyCodeObject*>(generated));
  PyRef weak = PyRef::steal(PyWeakref_NewRef(original, nullptr));
  if (!weak) throw InternalError("cannot make a weak reference to a code object: " + fetch_py_error_text());
  s->origin = weak;
  s->origin_shift = shift;
}

int unit_of(PyObject* code, int index) {
  bc::Bytecode b = bc::decode(code);
  FF_CHECK(index >= 0 && static_cast<size_t>(index) < b.instrs.size(), "graph break outside the code");
  return b.instrs[static_cast<size_t>(index)].offset;
}

std::string layout_key(int unit, int depth, const std::vector<int>& nulls, const std::vector<std::string>& live) {
  std::string key = std::to_string(unit) + "/" + std::to_string(depth) + "/";
  for (int n : nulls) key += std::to_string(n) + ",";
  key += "/";
  for (const std::string& l : live) key += l + ",";
  return key;
}

PyRef resume_code(PyObject* original, ExtraState& original_state, const bc::StubSuccessor& s) {
  std::string key = layout_key(s.unit, s.depth, s.null_slots, s.live);
  auto it = original_state.resume_codes.find(key);
  if (it != original_state.resume_codes.end()) return it->second;
  int shift = 0;
  PyRef code = PyRef::steal(bc::make_resume(original, s.unit, s.depth, s.live, s.null_slots, &shift));
  set_origin(code.get(), original, shift);
  original_state.resume_codes[key] = code;
  ++frame_eval_stats().codes_generated;
  return code;
}

PyRef make_function(PyObject* code, PyObject* globals, PyObject* closure) {
  PyRef fn = PyRef::steal(PyFunction_New(code, globals));
  if (fn && closure && PyTuple_GET_SIZE(closure) > 0 && PyFunction_SetClosure(fn.get(), closure) < 0) return PyRef();
  return fn;
}

// A frame split at a break with no tensor work before it, whose resume function has none either
// (a helper that prints): the split only adds calls. Its code runs natively from now on.
void give_up_empty_split(PyCodeObject* code, const CacheEntry& entry, PyCodeObject* resume) {
  if (!entry.empty_graph) return;
  ExtraState* r = extra_state(resume);
  if (!r || r->strategy != CodeStrategy::Skip || r->skip_reason != "no tensor operations") return;
  ExtraState* c = extra_state(code);
  if (!c || c->entries.size() != 1 || c->entries[0].get() != &entry) return;
  c->strategy = CodeStrategy::Skip;
  c->skip_reason = "no tensor operations on either side of a graph break";
  c->entries.clear();  // NB: the caller holds the entry until it is done with it
}

PyObject* internal_error(const char* what) {
  PyErr_Format(PyExc_RuntimeError, "framefuse internal error after a graph break: %s", what);
  return nullptr;
}

}  // namespace

bool split_trace_options(PyCodeObject* traced, const BreakInfo& info, TraceOptions* out) {
  if (info.root_index < 0) return false;
  Origin o = origin_of(traced);
  int k = info.root_index - o.shift;
  if (k < 0) return false;
  // NB: zero-argument super() needs self kept in slot 0 (bytecode_resume.h SelfSlot); where that
  // cannot be done this throws Unsupported and the frame runs eagerly with that reason logged.
  bc::self_slot(o.original.get());
  // NB: a resume function holds only the live locals; code that reads its own frame (locals(),
  // vars(), eval/exec with the frame's namespace, dir(), sys._getframe) would see the difference.
  for (const std::string& n : bc::str_tuple(o.original.get(), "co_names"))
    if (n == "locals" || n == "vars" || n == "eval" || n == "exec" || n == "dir" || n == "_getframe" ||
        n == "currentframe")
      throw Unsupported(code_location(reinterpret_cast<PyCodeObject*>(o.original.get())) + " calls " + n + "(), which would see the split frame: it runs eagerly");
  out->stop_index = info.root_index;
  out->stop_visit = info.root_visit;
  out->stop_live = bc::live_locals_at(o.original.get(), unit_of(o.original.get(), k));
  return true;
}

std::shared_ptr<const BreakPlan> break_plan_for(PyCodeObject* traced, const CaptureResult::BreakState& bs) {
  Origin o = origin_of(traced);
  PyObject* original = o.original.get();
  ExtraState& original_state = *ensure_extra_state(reinterpret_cast<PyCodeObject*>(original));
  int unit = unit_of(original, bs.index - o.shift);
  std::string key = layout_key(unit, bs.depth, bs.null_slots, bs.live);
  auto it = original_state.break_plans.find(key);
  if (it != original_state.break_plans.end()) return it->second;

  int self_state = -1, self_cell = -1;
  switch (bc::self_slot(original)) {
    case bc::SelfSlot::None:
      break;
    case bc::SelfSlot::Local: {
      const std::string first = bc::str_tuple(original, "co_varnames")[0];
      auto at = std::find(bs.live.begin(), bs.live.end(), first);
      // NB: bound at every break the liveness allows (only a 3.12 comprehension reusing the name clears it)
      if (at == bs.live.end()) throw Unsupported("zero-argument super()'s '" + first + "' is unbound at the graph break");
      self_state = bs.depth - static_cast<int>(bs.null_slots.size()) + static_cast<int>(at - bs.live.begin());
      break;
    }
    case bc::SelfSlot::Cell: {
      std::vector<std::string> cells = bc::str_tuple(original, "co_cellvars");
      const std::string first = bc::str_tuple(original, "co_varnames")[0];
      self_cell = static_cast<int>(std::find(cells.begin(), cells.end(), first) - cells.begin());
      FF_CHECK(self_cell < static_cast<int>(cells.size()), "super()'s self cell not among the cells");
      break;
    }
  }
  bc::BreakStub stub = bc::make_break_stub(original, unit, bs.depth, bs.live, bs.null_slots, marker());
  auto plan = std::make_shared<BreakPlan>();
  plan->stub = PyRef::steal(stub.code);
  plan->self_state = self_state;
  plan->self_cell = self_cell;
  ++frame_eval_stats().codes_generated;
  ExtraState* extra = ensure_extra_state(reinterpret_cast<PyCodeObject*>(plan->stub.get()));
  extra->generated_stub = true;
  extra->strategy = CodeStrategy::Skip;
  extra->skip_reason = "graph-break stub";
  for (const bc::StubSuccessor& s : stub.successors) plan->resume.push_back(resume_code(original, original_state, s));
  original_state.break_plans[key] = plan;
  return plan;
}

PyObject* run_break_chain(ThreadState& st, Dispatch d, const ff_frame_info& frame) {
  PyRef closure = PyRef::borrow(frame.closure);
  PyRef st_ref = PyRef::steal(d.result);
  std::shared_ptr<CacheEntry> entry = std::move(d.entry);
  // NB: held for the whole step: running the stub may run reset(), which drops the plan's owner.
  std::shared_ptr<const BreakPlan> plan_ref = std::move(d.plan);
  for (bool first = true;; first = false) {
    const BreakPlan& plan = *plan_ref;
    PyObject* s = st_ref.get();
    if (!PyTuple_CheckExact(s) || PyTuple_GET_SIZE(s) < entry->break_cells) return internal_error("bad break state");
    Py_ssize_t nargs = PyTuple_GET_SIZE(s) - entry->break_cells;
    if (entry->break_cells > 0) {
      // The code's own cells, made fresh with the traced contents, then its free variables: the
      // one closure every stub and resume function of this call shares.
      Py_ssize_t nfree = closure ? PyTuple_GET_SIZE(closure.get()) : 0;
      PyRef c = PyRef::steal(PyTuple_New(entry->break_cells + nfree));
      if (!c) return nullptr;
      for (Py_ssize_t i = 0; i < entry->break_cells; ++i) {
        PyObject* cell = PyTuple_GET_ITEM(s, nargs + i);
        Py_INCREF(cell);
        PyTuple_SET_ITEM(c.get(), i, cell);
      }
      for (Py_ssize_t i = 0; i < nfree; ++i) {
        PyObject* cell = PyTuple_GET_ITEM(closure.get(), i);
        Py_INCREF(cell);
        PyTuple_SET_ITEM(c.get(), entry->break_cells + i, cell);
      }
      closure = c;
    }
    // NB: a fresh function per call: one cached on the plan would hold the frame's globals, and
    // through them (an exec'd namespace, a module being unloaded) the user's code whose state owns
    // the plan, a cycle the GC cannot see. Making one costs about 0.1 us.
    PyRef fn = make_function(plan.stub.get(), frame.globals, closure.get());
    if (!fn) return nullptr;
    PyObject** args = &PyTuple_GET_ITEM(s, 0);
    size_t nstub = static_cast<size_t>(nargs);
    // super()'s self goes first (the stub's slot 0); the state has it among the live locals or in a cell.
    constexpr size_t kInlineArgs = 16;
    PyObject* inline_args[kInlineArgs];
    std::vector<PyObject*> heap_args;
    if (plan.self_state >= 0 || plan.self_cell >= 0) {
      nstub += plan.self_cell >= 0 ? 1 : 0;
      PyObject** a = inline_args;
      if (nstub > kInlineArgs) heap_args.resize(nstub), a = heap_args.data();
      PyObject* self = nullptr;
      if (plan.self_state >= 0) {
        if (plan.self_state >= nargs) return internal_error("super()'s self outside the break state");
        self = args[plan.self_state];
      } else {
        if (!closure || plan.self_cell >= PyTuple_GET_SIZE(closure.get())) return internal_error("super()'s self cell");
        self = PyCell_GET(PyTuple_GET_ITEM(closure.get(), plan.self_cell));
        if (!self) return internal_error("super()'s self cell is empty");
      }
      a[0] = self;
      size_t k = 1;
      for (Py_ssize_t i = 0; i < nargs; ++i)
        if (i != plan.self_state) a[k++] = args[i];
      args = a;
    }
    PyRef r = PyRef::steal(PyObject_Vectorcall(fn.get(), args, nstub, nullptr));
    if (!r) return nullptr;
    PyObject* rt = r.get();
    if (!PyTuple_CheckExact(rt) || PyTuple_GET_SIZE(rt) < 2 || PyTuple_GET_ITEM(rt, 0) != marker()) return r.release();

    size_t succ = PyLong_AsSize_t(PyTuple_GET_ITEM(rt, 1));
    if (succ >= plan.resume.size()) return internal_error("unknown successor");
    PyObject* resume = plan.resume[succ].get();
    auto* rc = reinterpret_cast<PyCodeObject*>(resume);
    Py_ssize_t n = PyTuple_GET_SIZE(rt) - 2;
    if (n != rc->co_argcount) return internal_error("resume function arity");
    // NB: the synthetic frame's slots: arguments, then unbound (as a fresh frame has them).
    constexpr int kInline = 32;
    PyObject* inline_slots[kInline];
    std::vector<PyObject*> heap_slots;
    PyObject** localsplus = inline_slots;
    if (rc->co_nlocalsplus > kInline) {
      heap_slots.resize(static_cast<size_t>(rc->co_nlocalsplus));
      localsplus = heap_slots.data();
    }
    for (int i = 0; i < rc->co_nlocalsplus; ++i) localsplus[i] = i < n ? PyTuple_GET_ITEM(rt, 2 + i) : nullptr;
    ff_frame_info info{};
    info.code = rc;
    info.func = nullptr;
    info.globals = frame.globals;
    info.builtins = frame.builtins;
    info.closure = closure.get();
    info.localsplus = localsplus;
    info.nlocalsplus = rc->co_nlocalsplus;
    ++frame_eval_stats().resume_calls;
    d = dispatch_frame(st, info);
    if (d.kind == Dispatch::Done) return d.result;
    if (d.kind == Dispatch::Native) {
      if (first) give_up_empty_split(frame.code, *entry, rc);
      PyRef rf = make_function(resume, frame.globals, closure.get());
      if (!rf) return nullptr;
      st.native_once = resume;  // NB: its frame was dispatched just now; do not trace it twice
      PyObject* result = PyObject_Vectorcall(rf.get(), localsplus, static_cast<size_t>(n), nullptr);
      st.native_once = nullptr;
      return result;
    }
    entry = std::move(d.entry);
    plan_ref = std::move(d.plan);
    st_ref = PyRef::steal(d.result);
  }
}

}  // namespace ff
