// The eval-frame hook: dispatch between the native evaluator, a cached capture and a compile.
#include "frame_eval/hook.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "frame_eval/frame_access.h"
#include "frame_eval/hook_internal.h"
#include "frame_eval/interpreter.h"
#include "frame_eval/py_util.h"
#include "frame_eval/torch_refs.h"
#include "graph/python/graph_calls.h"
#include "src/base/config.h"
#include "src/base/logging.h"

namespace ff {

namespace {

_PyFrameEvalFunction g_previous_eval = nullptr;  // the evaluator we replaced (null: the default)
int g_threads_active = 0;                         // threads with ThreadState::active > 0 (GIL)
bool g_installed = false;
Tracer g_tracer;
bool g_tracer_torch_free = false;  // tests without torch: keep empty captures, no global-state guard
PyObject* g_unsupported_type = nullptr;  // borrowed (module attribute)
PyObject* g_native_globals = nullptr;    // strong: set_native_module's
int g_next_frame_id = 0;
FrameEvalStats g_stats;

PyObject* eval_frame_hook(PyThreadState* tstate, struct _PyInterpreterFrame* frame, int throwflag);

void install_hook() {
  PyInterpreterState* interp = PyInterpreterState_Get();
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (current == eval_frame_hook) return;
  g_previous_eval = current == _PyEval_EvalFrameDefault ? nullptr : current;
  _PyInterpreterState_SetEvalFrameFunc(interp, eval_frame_hook);
  g_installed = true;
}

void uninstall_hook() {
  PyInterpreterState* interp = PyInterpreterState_Get();
  // NB: restore only our own replacement; a tool that installed its hook after us keeps it.
  if (_PyInterpreterState_GetEvalFrameFunc(interp) == eval_frame_hook)
    _PyInterpreterState_SetEvalFrameFunc(interp, g_previous_eval ? g_previous_eval : _PyEval_EvalFrameDefault);
  g_installed = false;
}

// ---- the three exits -------------------------------------------------------------------------

// The frame this thread handed to the evaluator we replaced. Hooks chain both ways: torch.compile's
// shim, installed over ours, keeps ours as the evaluator it hands frames to, so a frame can come
// back here from it; that frame is then evaluated by the default evaluator (no endless ping-pong).
thread_local struct _PyInterpreterFrame* t_handed_on = nullptr;

inline PyObject* run_native(PyThreadState* tstate, struct _PyInterpreterFrame* frame, int throwflag) {
  if (!g_previous_eval || frame == t_handed_on) return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  struct _PyInterpreterFrame* saved = t_handed_on;
  t_handed_on = frame;
  PyObject* result = g_previous_eval(tstate, frame, throwflag);
  t_handed_on = saved;
  return result;
}

// A capture ran instead of the frame (result may be null with an exception set): the frame is
// released here because the evaluator never saw it (3.12+; nothing on 3.11).
inline PyObject* finish_without_evaluator(PyThreadState* tstate, struct _PyInterpreterFrame* frame, PyObject* result) {
  ff_frame_release(tstate, frame);
  return result;
}

// ---- cold path: compile on a miss ------------------------------------------------------------

}  // namespace

std::string code_location(PyCodeObject* code) {
  const char* name = PyUnicode_AsUTF8(code->co_qualname ? code->co_qualname : code->co_name);
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (!name || !file) PyErr_Clear();
  return std::string(name ? name : "?") + " (" + (file ? file : "?") + ":" + std::to_string(code->co_firstlineno) + ")";
}

namespace {

// Line `lineno` of source file `filename`, without its indentation; empty where it cannot be read
// (code made from a string, a file gone since). Cold: read once per logged break.
std::string source_line(const std::string& filename, int lineno) {
  std::ifstream in(filename);
  std::string line;
  for (int i = 0; i < lineno && std::getline(in, line); ++i) {
  }
  if (!in || lineno <= 0) return "";
  size_t start = line.find_first_not_of(" \t");
  return start == std::string::npos ? "" : line.substr(start);
}

std::string break_text(const BreakInfo& b) {
  std::string out = b.reason.empty() ? std::string("unsupported construct") : b.reason;
  if (!b.id.empty()) out = "[" + b.id + "] " + out;
  if (!b.explanation.empty()) out += "\n  " + b.explanation;
  if (!b.hint.empty()) out += "\n  Hint: " + b.hint;
  if (std::string docs = break_docs_link(b.id); !docs.empty()) out += "\n  Docs: " + docs;
  if (!b.filename.empty()) {
    out += "\n  at " + b.filename + ":" + std::to_string(b.lineno);
    std::string line = source_line(b.filename, b.lineno);
    if (!line.empty()) out += "\n      " + line;
  }
  // Each frame ("file:line in fn") with its line of source, as a Python traceback shows them.
  for (const std::string& frame : b.user_stack) {
    out += "\n    " + frame;
    size_t in = frame.rfind(" in "), colon = in == std::string::npos ? in : frame.rfind(':', in);
    if (colon == std::string::npos) continue;
    std::string line = source_line(frame.substr(0, colon), std::atoi(frame.c_str() + colon + 1));
    if (!line.empty()) out += "\n        " + line;
  }
  return out;
}

// NB: only graph calls count: a frame that just mutates Python objects runs natively faster than
// any replay of it.
bool has_tensor_work(const CaptureResult& cap) {
  for (const Node& n : cap.graph.nodes())
    if (n.kind == NodeKind::Call) return true;
  return false;
}

// Moves `e` to the front of `entries`, if it is still there.
void move_to_front(std::vector<std::shared_ptr<CacheEntry>>& entries, const CacheEntry* e) {
  auto it = std::find_if(entries.begin(), entries.end(), [e](const auto& p) { return p.get() == e; });
  if (it != entries.end() && it != entries.begin()) std::rotate(entries.begin(), it, it + 1);
}

void log_recompile(ExtraState& extra, PyCodeObject* code, const FrameValues& values) {
  bool brief = log_enabled(LogArtifact::recompiles);
  bool verbose = log_enabled(LogArtifact::recompiles_verbose);
  if (!brief && !verbose) return;
  std::string msg = "Recompiling function " + code_location(code) + "\n    triggered by the following guard failure(s):";
  // NB: a copy: explaining runs Python code, during which another thread may change the entries.
  std::vector<std::shared_ptr<CacheEntry>> entries = extra.entries;
  for (size_t i = 0; i < entries.size(); ++i) {
    std::vector<std::string> fails = entries[i]->runner->guards().explain(values, !verbose);
    if (fails.empty()) fails.push_back("(compiled with other framefuse.compile options)");
    // NB: labelled frame_id/compile_id of the entry, as torch's log labels it
    for (const std::string& f : fails)
      msg += "\n    - " + std::to_string(extra.frame_id) + "/" + std::to_string(entries[i]->compile_id) + ": " + f;
    if (!verbose) break;
  }
  log_emit(verbose ? LogArtifact::recompiles_verbose : LogArtifact::recompiles, msg);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

enum class CompileOutcome { Compiled,
                            Native,
                            Raise };

std::vector<BreakRecord>& break_records_storage() {
  static auto* r = new std::vector<BreakRecord>();
  return *r;
}

// A graph break, once per compile of a site: the `graph_breaks` log and the structured record
// explain() reads.
void note_break(PyCodeObject* code, const BreakInfo& b, bool split) {
  std::string where = code_location(code);
  if (log_enabled(LogArtifact::graph_breaks))
    log_emit(LogArtifact::graph_breaks, "Graph break in " + where + (split ? " (the frame is split): " : " (the frame runs eagerly): ") +
                                            (b.id.empty() && b.explanation.empty() ? b.reason : break_text(b)));
  auto& records = break_records_storage();
  constexpr size_t kMaxRecords = 1000;  // NB: a process that breaks forever must not grow forever
  if (records.size() < kMaxRecords) records.push_back(BreakRecord{b, where, split});
}

// NB: a split frame is compiled even without tensor work, so interpreters without torch (the
// torch-free tests) reach here; the tracer imported torch already if it can be.
bool torch_loaded() {
  PyObject* name = PyUnicode_FromString("torch");
  PyObject* m = name ? PyImport_GetModule(name) : nullptr;
  Py_XDECREF(name);
  if (!m) PyErr_Clear();
  Py_XDECREF(m);
  return m != nullptr;
}

CompileOutcome mark_native(ExtraState& extra, const std::string& why) {
  extra.strategy = CodeStrategy::Skip;
  extra.skip_reason = why;
  return CompileOutcome::Native;
}

FrameView frame_view(const ff_frame_info& info) {
  FrameView view;
  view.code = info.code;
  view.globals = info.globals;
  view.builtins = info.builtins;
  view.closure = info.closure;
  view.localsplus.assign(info.localsplus, info.localsplus + info.nlocalsplus);
  return view;
}

// A trace's result into a cache entry: guards, runner, backend, logs. `brk`: a partial capture's
// continuation (its graph may be empty: what follows the break is worth compiling anyway).
// How the trace of `extra`'s code treats sizes (interpreter_shapes.cpp) and substituted calls under `options`.
void set_dynamic(TraceOptions& topts, ExtraState& extra, const CompileOptions& options) {
  topts.dynamic = options.dynamic == 1   ? DynamicShapes::All
                  : options.dynamic == 0 ? DynamicShapes::Off
                                         : DynamicShapes::Auto;
  if (topts.dynamic == DynamicShapes::Auto && config().automatic_dynamic_shapes) topts.size_history = &extra.size_history;
  topts.break_at_substitutes = options.backend_name == "inductor";
}

CompileOutcome finish_compile(const ff_frame_info& info, const FrameValues& values,
                              const std::shared_ptr<CompileOptions>& options, CaptureResult cap,
                              std::shared_ptr<const BreakPlan> brk, std::chrono::steady_clock::time_point t0,
                              int compile_id, ExtraState& extra, std::shared_ptr<CacheEntry>* out) {
  double capture_ms = ms_since(t0);
  if (PyErr_Occurred()) throw InternalError("the tracer left a Python exception set: " + fetch_py_error_text());
  bool tensor_work = has_tensor_work(cap);
  if (!tensor_work && !brk && !g_tracer_torch_free) {
    if (log_enabled(LogComponent::frontend, LogLevel::Debug))
      log_emit(LogComponent::frontend, LogLevel::Debug, "skipping " + code_location(info.code) + ": no tensor operations");
    return mark_native(extra, "no tensor operations");
  }
  bool has_global_state = false;
  bool any_requires_grad = false;
  for (const Guard& g : cap.guards) {
    has_global_state |= g.kind == Guard::Kind::GlobalState;
    any_requires_grad |= g.kind == Guard::Kind::TensorMatch && g.tensor_meta.requires_grad;
  }
  // NB: a tensor made inside the graph may require grad too (torch.ones(3, requires_grad=True)).
  for (const Node& n : cap.graph.nodes())
    any_requires_grad |= n.meta.kind == ValueMeta::Kind::Tensor && n.meta.tensor.requires_grad;
  if (!has_global_state && !g_tracer_torch_free && torch_loaded()) cap.guards.push_back(current_global_state_guard());
  bool grad_on = false, autocast_on = false;
  for (const Guard& g : cap.guards)
    if (g.kind == Guard::Kind::GlobalState) grad_on = g.grad_enabled, autocast_on = g.expected != nullptr;
  int break_cells = cap.brk.ncells;
  std::string graph_text = log_enabled(LogArtifact::graph_code) && tensor_work ? graph_code_text(cap.graph) : std::string();
  auto t1 = std::chrono::steady_clock::now();
  auto runner = std::make_unique<CaptureRunner>(std::move(cap), values, nullptr);
  runner->set_autocast_off(autocast_on);
  // NB: an empty graph before a break runs on the reference runner: no backend call, no graph.
  if (tensor_work || g_tracer_torch_free) {
    compile_backend(*options, *runner, values, /*training=*/grad_on && any_requires_grad);
  }
  double backend_ms = ms_since(t1);

  auto entry = std::make_shared<CacheEntry>();
  entry->options = options;
  entry->compile_id = compile_id;
  entry->runner = std::move(runner);
  entry->breaks = brk != nullptr;
  entry->brk = brk;
  entry->break_cells = break_cells;
  entry->empty_graph = !tensor_work;
  ++g_stats.frames_compiled;
  g_stats.compile_seconds += ms_since(t0) / 1e3;
  if (!graph_text.empty()) log_emit(LogArtifact::graph_code, "GRAPH for " + code_location(info.code) + "\n" + graph_text);
  if (log_enabled(LogArtifact::guards)) {
    std::string msg = "GUARDS for " + code_location(info.code) + ":";
    for (const std::string& g : entry->runner->guards().describe()) msg += "\n    " + g;
    log_emit(LogArtifact::guards, msg);
  }
  if (log_enabled(LogArtifact::compile_times))
    log_emit(LogArtifact::compile_times, code_location(info.code) + ": capture " + std::to_string(capture_ms) +
                                             " ms, backend " + std::to_string(backend_ms) + " ms, total " +
                                             std::to_string(ms_since(t0)) + " ms");
  *out = std::move(entry);
  return CompileOutcome::Compiled;
}

CompileOutcome internal_error(ExtraState& extra, const ff_frame_info& info, const std::exception& e) {
  // InternalError and anything else: a framefuse bug. Never the user's problem.
  std::string py_err = fetch_py_error_text();
  std::string what = std::string(e.what()) + (py_err.empty() ? "" : " (" + py_err + ")");
  ++g_stats.internal_errors;
  if (config().raise_on_internal_error) {
    PyErr_SetString(PyExc_RuntimeError, ("framefuse internal error while compiling " + code_location(info.code) + ": " + what).c_str());
    return CompileOutcome::Raise;
  }
  log_emit(LogComponent::frontend, LogLevel::Warning,
           "internal error while compiling " + code_location(info.code) + "; the frame runs eagerly: " + what);
  return mark_native(extra, "internal error: " + what);
}

// The frame broke at a root instruction: trace it again up to that instruction, and continue
// after it with a stub and resume functions (hook_resume.cpp).
CompileOutcome compile_split(ExtraState& extra, const ff_frame_info& info, const FrameValues& values,
                             const std::shared_ptr<CompileOptions>& options, const BreakInfo& b,
                             std::chrono::steady_clock::time_point t0, int compile_id,
                             std::shared_ptr<CacheEntry>* out) {
  auto eager = [&](const std::string& why) {
    note_break(info.code, b, false);
    if (log_enabled(LogComponent::frontend, LogLevel::Debug))
      log_emit(LogComponent::frontend, LogLevel::Debug, "not split at the graph break: " + why);
    extra.skipped_for_break = true;
    return mark_native(extra, "graph break: " + b.reason);
  };
  try {
    TraceOptions topts;
    if (g_tracer || !split_trace_options(info.code, b, &topts)) return eager("not at a resumable root instruction");
    set_dynamic(topts, extra, *options);
    CaptureResult cap = trace_frame(frame_view(info), topts);
    if (PyErr_Occurred()) throw InternalError("the tracer left a Python exception set: " + fetch_py_error_text());
    // NB: tracing may have changed what the code sees (caches the traced code fills): the second
    // trace need not take the same path.
    if (!cap.brk.active) return eager("the second trace did not reach the break");
    std::shared_ptr<const BreakPlan> plan = break_plan_for(info.code, cap.brk);
    note_break(info.code, b, true);
    ++g_stats.frames_split;
    return finish_compile(info, values, options, std::move(cap), std::move(plan), t0, compile_id, extra, out);
  } catch (const PythonErrorPending&) {
    return CompileOutcome::Raise;
  } catch (const Unsupported& u) {  // GraphBreak included: the state at the break cannot be rebuilt
    PyErr_Clear();
    return eager(u.what());
  } catch (const std::exception& e) {
    return internal_error(extra, info, e);
  }
}

// Traces the frame and builds a cache entry. On Native the frame runs eagerly (remembered as
// skip); on Raise a Python exception is set (fullgraph=True).
CompileOutcome compile_frame(ExtraState& extra, const ff_frame_info& info, const FrameValues& values,
                             const std::shared_ptr<CompileOptions>& options, std::shared_ptr<CacheEntry>* out) {
  // Under torch.autocast the trace adds autocast's casts to the graph (graph/python/graph_calls.h
  // AutocastScope); the trace and the backend run with autocast off. torch 1.13 cannot say which
  // casts autocast makes: such calls run eagerly there (the cache keeps no entry for them: calls
  // without autocast still compile).
  PyRef traced_autocast = PyRef::steal(torch_loaded() ? autocast_state_if_on() : nullptr);
  if (traced_autocast && !autocast_capturable()) {
    if (!extra.autocast_noted && log_enabled(LogArtifact::perf_hints))
      log_emit(LogArtifact::perf_hints, code_location(info.code) + ": called under torch.autocast, which framefuse traces on torch 2 only: it runs eagerly");
    extra.autocast_noted = true;
    return CompileOutcome::Native;
  }
  std::optional<AutocastOff> autocast_off;
  if (traced_autocast) autocast_off.emplace(traced_autocast.get());
  // framefuse.disable(fn, recursive=False): fn's own frame runs natively, what it calls is compiled
  if (info.func && framefuse_frame_disabled(info.func)) return mark_native(extra, "framefuse.disable(recursive=False)");
  auto t0 = std::chrono::steady_clock::now();
  if (extra.frame_id < 0) extra.frame_id = g_next_frame_id++;
  int compile_id = extra.compiles++;
  CompileTag saved_tag = current_compile_tag();
  set_compile_tag({extra.frame_id, compile_id});
  struct RestoreTag {
    CompileTag tag;
    ~RestoreTag() { set_compile_tag(tag); }
  } restore_tag{saved_tag};

  BreakInfo split;
  try {
    FrameView view = frame_view(info);
    TraceOptions topts;
    set_dynamic(topts, extra, *options);
    CaptureResult cap = g_tracer ? g_tracer(view) : trace_frame(view, topts);
    return finish_compile(info, values, options, std::move(cap), nullptr, t0, compile_id, extra, out);
  } catch (const PythonErrorPending&) {
    return CompileOutcome::Raise;  // the user's backend raised: their exception, unchanged
  } catch (const GraphBreak& b) {
    PyErr_Clear();
    ++g_stats.graph_breaks;
    // NB: code that raises while traced (FF0008) is not remembered: the next call, with other
    // arguments, may well be capturable. Eager reproduces the exception now; a partial graph
    // would have to stop before code whose failure the trace cannot place. Under fullgraph=True
    // too: the user gets eager's exception (an IndexError, a KeyError ...), not framefuse's.
    if (b.info().id == "FF0008") {
      note_break(info.code, b.info(), false);
      return CompileOutcome::Native;
    }
    if (options->fullgraph) {
      PyErr_SetString(g_unsupported_type ? g_unsupported_type : PyExc_RuntimeError, break_text(b.info()).c_str());
      return CompileOutcome::Raise;
    }
    split = b.info();
  } catch (const Unsupported& u) {
    PyErr_Clear();
    ++g_stats.graph_breaks;
    if (options->fullgraph) {
      PyErr_SetString(g_unsupported_type ? g_unsupported_type : PyExc_RuntimeError,
                      (std::string(u.what()) + "\n  in " + code_location(info.code)).c_str());
      return CompileOutcome::Raise;
    }
    BreakInfo unsupported;
    unsupported.reason = u.what();
    note_break(info.code, unsupported, false);
    extra.skipped_for_break = true;
    return mark_native(extra, std::string("unsupported: ") + u.what());
  } catch (const std::exception& e) {
    return internal_error(extra, info, e);
  }
  return compile_split(extra, info, values, options, split, t0, compile_id, out);
}

// `plan`: the entry's break plan, locked before the entry runs (null for an entry without a break).
Dispatch run_entry(ThreadState& st, std::shared_ptr<CacheEntry> entry, std::shared_ptr<const BreakPlan> plan,
                   const FrameValues& values, Slots& slots) {
  // NB: frames the graph's ops run (torch's Python functions) are not ours to compile.
  ++st.disabled;
  PyObject* result = entry->runner->run(values, slots);
  --st.disabled;
  Dispatch d;
  d.kind = plan && result ? Dispatch::Break : Dispatch::Done;
  d.result = result;
  if (d.kind == Dispatch::Break) {
    d.entry = std::move(entry);
    d.plan = std::move(plan);
  }
  return d;
}

Dispatch native() { return Dispatch{}; }

// The frame's arguments passed to its substitute: positional ones, keyword-only ones by name (new
// reference; null with an exception).
PyObject* run_substitute(PyObject* fn, const ff_frame_info& info) {
  int n = info.code->co_argcount, kwonly = info.code->co_kwonlyargcount;
  for (int i = 0; i < n + kwonly; ++i)
    if (info.localsplus[i] == nullptr) {  // not a frame at its start: leave it alone
      Py_INCREF(Py_NotImplemented);
      return Py_NotImplemented;
    }
  PyRef args = PyRef::steal(PyTuple_New(n));
  PyRef kwargs = PyRef::steal(PyDict_New());
  if (!args || !kwargs) return nullptr;
  for (int i = 0; i < n; ++i) {
    Py_INCREF(info.localsplus[i]);
    PyTuple_SET_ITEM(args.get(), i, info.localsplus[i]);
  }
  PyRef names = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(info.code), "co_varnames"));
  if (!names) return nullptr;
  for (int i = n; i < n + kwonly; ++i)
    if (PyDict_SetItem(kwargs.get(), PyTuple_GET_ITEM(names.get(), i), info.localsplus[i]) < 0) return nullptr;
  return PyObject_Call(fn, args.get(), kwargs.get());
}

Dispatch done(PyObject* result) {
  Dispatch d;
  d.kind = Dispatch::Done;
  d.result = result;
  return d;
}

// ---- the hook --------------------------------------------------------------------------------

// The wrapper torch.compiler.disable / torch._dynamo.disable made around a function (its code is
// one of torch's wrappers; the function carries `_torchdynamo_disable`): it runs natively, and so
// does everything it calls, as under torch.compile (recursive=False: only the function's own frame).
// The wrapper torch.compile made (it carries
// `_torchdynamo_orig_callable`): torch's own frame hook runs it, and framefuse stays out of what it
// runs (Dynamo's shim hands frames it does not compile to the previous hook, framefuse's).
// NB: names compare as interned pointers (hot path).
bool torch_wrapper_frame(const ff_frame_info& info) {
  static PyObject* const fn_name = PyUnicode_InternFromString("_fn");
  static PyObject* const nonrecursive_name = PyUnicode_InternFromString("nonrecursive_disable_wrapper");
  static PyObject* const compile_name = PyUnicode_InternFromString("compile_wrapper");
  PyObject* name = info.code->co_name;
  if (!info.func || (name != fn_name && name != nonrecursive_name && name != compile_name)) return false;
  return torch_disable_marked(info.func) || torch_compile_wrapper(info.func);
}

PyObject* eval_frame_hook(PyThreadState* tstate, struct _PyInterpreterFrame* frame, int throwflag) {
  if (frame == t_handed_on) return _PyEval_EvalFrameDefault(tstate, frame, throwflag);  // came back: see run_native
  ThreadState& st = thread_state();
  if (st.active == 0 || st.disabled > 0) return run_native(tstate, frame, throwflag);
  ff_frame_info info;
  if (!ff_frame_inspect(tstate, frame, throwflag, &info)) return run_native(tstate, frame, throwflag);
  if (info.globals == g_native_globals && g_native_globals != nullptr) {
    ++st.disabled;
    PyObject* result = run_native(tstate, frame, throwflag);
    --st.disabled;
    return result;
  }
  if (torch_wrapper_frame(info)) {
    if (PyObject* fn_code = torch_nonrecursive_disable_code(info.func)) {
      // torch.compiler.disable(fn, recursive=False): the wrapper's frame and fn's own run natively,
      // what fn calls is compiled (as under torch.compile).
      st.native_once = fn_code;
      PyObject* result = run_native(tstate, frame, throwflag);
      if (st.native_once == fn_code) st.native_once = nullptr;  // the wrapper never called fn
      return result;
    }
    ++st.disabled;
    PyObject* result = run_native(tstate, frame, throwflag);
    --st.disabled;
    return result;
  }
  if (st.native_once != nullptr && reinterpret_cast<PyObject*>(info.code) == st.native_once) {
    st.native_once = nullptr;  // the trampoline already dispatched this call: it runs natively
    return run_native(tstate, frame, throwflag);
  }
  Dispatch d = dispatch_frame(st, info);
  switch (d.kind) {
    case Dispatch::Native: return run_native(tstate, frame, throwflag);
    case Dispatch::Done: return finish_without_evaluator(tstate, frame, d.result);
    case Dispatch::Break: return finish_without_evaluator(tstate, frame, run_break_chain(st, std::move(d), info));
  }
  return nullptr;
}

}  // namespace

Dispatch dispatch_frame(ThreadState& st, const ff_frame_info& info) {
  ExtraState* extra = extra_state(info.code);
  if (extra == nullptr) {
    // NB: cold work inside the hook runs with the hook disabled: anything it calls that runs
    // Python frames must not re-enter here.
    ++st.disabled;
    try {
      extra = ensure_extra_state(info.code);
    } catch (const std::exception&) {
      PyErr_Clear();
      extra = nullptr;
    }
    --st.disabled;
    if (extra == nullptr) return native();
  }
  // NB: only under the built-in code generator: backend="eager" (and a custom backend) keeps torch's code.
  if (extra->substitute != nullptr && st.options != nullptr && st.options->backend_name == "inductor") {
    PyObject* result = run_substitute(extra->substitute, info);
    if (result != Py_NotImplemented) return done(result);
    Py_DECREF(result);
  }
  // NB: fullgraph=True retraces a frame another compile remembered as a graph break, to raise.
  if ((extra->strategy != CodeStrategy::Compile && !(extra->skipped_for_break && st.options->fullgraph)) ||
      (extra->torch_internal && reinterpret_cast<PyObject*>(info.code) != st.root_code)) {
    ++g_stats.eager_frames;
    return native();
  }

  const std::string& stance = config().stance;
  if (stance == "force_eager") {
    ++g_stats.eager_frames;
    return native();
  }

  FrameValues values;
  values.localsplus = info.localsplus;
  values.nlocalsplus = info.nlocalsplus;
  values.closure = info.closure;
  values.globals = info.globals;
  values.builtins = info.builtins;

  // Hot path: the first entry compiled with these options whose guards pass.
  // NB: a guard check may release the GIL (torch's per-tensor getters do), and another thread may
  // then compile, reorder or reset this code's entries: the entry is held before it is checked,
  // and moved to the front by identity, never by its index from before the check.
  CompileOptions* opts = st.options;
  auto& entries = extra->entries;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i]->options.get() != opts && !entries[i]->options->same_as(*opts)) continue;
    std::shared_ptr<CacheEntry> entry = entries[i];  // alive while it runs, even if reset() drops it
    Slots slots(entry->runner->guards().num_slots());
    if (!entry->runner->guards().check(values, slots)) continue;
    std::shared_ptr<const BreakPlan> plan = entry->brk.lock();
    if (entry->breaks && !plan) continue;  // stale: its plan went with reset(); compiles again
    move_to_front(entries, entry.get());
    ++g_stats.cache_hits;
    return run_entry(st, std::move(entry), std::move(plan), values, slots);
  }

  // Miss. Entries keyed on an object that no longer exists (a dropped module) can never pass again.
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [](const std::shared_ptr<CacheEntry>& e) { return e->runner->guards().holds_dead_object(); }),
                entries.end());
  if (entries.empty() && reinterpret_cast<PyObject*>(info.code) != st.root_code && in_skipped_module(info.globals)) {
    mark_native(*extra, "code of a package that holds no tensor code");
    ++g_stats.eager_frames;
    return native();
  }
  if (static_cast<int64_t>(entries.size()) >= config().recompile_limit) {
    extra->strategy = CodeStrategy::CacheLimit;
    ++g_stats.cache_limit_hits;
    ++st.disabled;  // cold: explaining the guards may run Python code
    std::string last = "none";
    if (!entries.empty()) {
      // NB: held: explaining checks guards, which may release the GIL to a thread that resets.
      std::shared_ptr<CacheEntry> first = entries.front();
      auto fails = first->runner->guards().explain(values, true);
      if (!fails.empty()) last = fails.front();
    }
    log_emit(LogComponent::frontend, LogLevel::Warning,
             code_location(info.code) + " reached config.recompile_limit (" + std::to_string(config().recompile_limit) +
                 "): it runs eagerly from now on. Last guard failure: " + last);
    --st.disabled;
    ++g_stats.eager_frames;
    return native();
  }
  {
    ++st.disabled;  // cold: may ask torch's Python code
    bool mode = eager_context_active();
    --st.disabled;
    if (mode) {
      // NB: not remembered: the frame compiles on a later call made outside the mode.
      log_emit(LogComponent::frontend, LogLevel::Debug,
               "not compiling " + code_location(info.code) + " now: a TorchDispatchMode or a torch.func transform is active");
      ++g_stats.eager_frames;
      return native();
    }
  }
  if (!entries.empty() && stance != "default") {
    if (stance == "eager_on_recompile") {
      ++g_stats.eager_frames;
      return native();
    }
    if (stance == "fail_on_recompile") {
      ++st.disabled;  // cold: explaining the guards may run Python code
      std::shared_ptr<CacheEntry> first = entries.front();
      auto fails = first->runner->guards().explain(values, true);
      --st.disabled;
      PyErr_SetString(PyExc_RuntimeError,
                      (code_location(info.code) + " would recompile, and the stance is \"fail_on_recompile\" "
                                                  "(framefuse.compiler.set_stance). Failing guard: " +
                       (fails.empty() ? "none" : fails.front()) +
                       ". Call it with inputs like the earlier calls', or mark what varies dynamic.")
                          .c_str());
      return done(nullptr);
    }
  }
  if (!entries.empty()) {
    ++g_stats.recompiles;
    ++st.disabled;
    CompileTag saved = current_compile_tag();
    set_compile_tag({extra->frame_id, extra->compiles});
    log_recompile(*extra, info.code, values);
    set_compile_tag(saved);
    --st.disabled;
  }
  std::shared_ptr<CacheEntry> entry;
  std::shared_ptr<CompileOptions> options = *st.options_owner;
  ++st.disabled;  // NB: frames the tracer and the backend run are not intercepted
  CompileOutcome outcome = compile_frame(*extra, info, values, options, &entry);
  --st.disabled;
  if (outcome == CompileOutcome::Raise) return done(nullptr);
  if (outcome == CompileOutcome::Native) {
    ++g_stats.eager_frames;
    return native();
  }
  // NB: a reset() while the backend compiled (a Python backend may call it) dropped the plan: the
  // frame runs natively, as nothing of it has run yet.
  std::shared_ptr<const BreakPlan> plan = entry->brk.lock();
  if (entry->breaks && !plan) {
    ++g_stats.eager_frames;
    return native();
  }
  extra->entries.insert(extra->entries.begin(), entry);
  Slots slots(entry->runner->guards().num_slots());
  if (!entry->runner->guards().check(values, slots)) {
    // The guards of a fresh capture must hold on the frame it was traced on.
    ++g_stats.internal_errors;
    log_emit(LogComponent::frontend, LogLevel::Warning,
             "internal error: the guards of a fresh capture fail on its own frame in " + code_location(info.code) +
                 "; the frame runs eagerly");
    auto& es = extra->entries;
    es.erase(std::remove(es.begin(), es.end(), entry), es.end());
    extra->strategy = CodeStrategy::Skip;
    return native();
  }
  return run_entry(st, std::move(entry), std::move(plan), values, slots);
}

// ---- shared with hook_callable.cpp -----------------------------------------------------------

ThreadState& thread_state() {
  static thread_local ThreadState state;
  return state;
}

void thread_enter_compiled(ThreadState& st) {
  if (st.active++ == 0 && g_threads_active++ == 0) install_hook();
}

void thread_exit_compiled(ThreadState& st) {
  if (--st.active == 0 && --g_threads_active == 0) uninstall_hook();
}

void set_tracer(Tracer tracer, bool torch_free) {
  g_tracer = std::move(tracer);
  g_tracer_torch_free = g_tracer && torch_free;
}
void set_unsupported_exception(PyObject* type) { g_unsupported_type = type; }
void set_native_module(PyObject* globals) {
  Py_XINCREF(globals);
  Py_XSETREF(g_native_globals, globals);
}
void set_frame_substitute(PyObject* code, PyObject* fn) {
  FF_CHECK(PyCode_Check(code), "set_frame_substitute: not a code object");
  auto* co = reinterpret_cast<PyCodeObject*>(code);
  FF_CHECK((co->co_flags & (CO_VARARGS | CO_VARKEYWORDS)) == 0,
           "set_frame_substitute: the function must take no *args or **kwargs");
  ExtraState* extra = ensure_extra_state(co);
  Py_XINCREF(fn);
  Py_XSETREF(extra->substitute, fn);
}
FrameEvalStats& frame_eval_stats() { return g_stats; }
const std::vector<BreakRecord>& break_records() { return break_records_storage(); }
void clear_break_records() { break_records_storage().clear(); }
bool hook_installed() { return g_installed; }

}  // namespace ff
