// Shared between the hook's translation units (hook.cpp, hook_callable.cpp, hook_backend.cpp).
#pragma once

#include <Python.h>

#include <memory>
#include <string>

#include "frame_eval/cache.h"
#include "frame_eval/frame_access.h"
#include "frame_eval/interpreter.h"

namespace ff {

// Per-thread state of the hook. NB: thread-local rather than per interpreter: the hook function is
// per interpreter, but whether a thread is inside a compiled callable is the thread's business.
struct ThreadState {
  int active = 0;    // nesting of compiled callables on this thread
  int disabled = 0;  // > 0: every frame runs natively (framefuse.disable, the compiler, graph runs)
  CompileOptions* options = nullptr;                                 // innermost compiled callable's
  const std::shared_ptr<CompileOptions>* options_owner = nullptr;  // the same, owning
  PyObject* root_code = nullptr;                                     // borrowed
  PyObject* native_once = nullptr;  // borrowed: the next frame of this code runs natively (already dispatched)
};
ThreadState& thread_state();
// NB: callers pass the ThreadState they already hold: each thread_state() call from a shared
// library is a __tls_get_addr call, and this is the hot path.
void thread_enter_compiled(ThreadState& st);
void thread_exit_compiled(ThreadState& st);

// Code of torch or framefuse itself (compiled only when it is the compiled callable's root).
bool is_internal_code(PyCodeObject* code);
// Code run with the globals of a module of torch or of a package that holds no tensor code (sympy,
// numpy ...: is_internal_code's list), such as the functions they make with exec() ("<string>" files).
bool in_skipped_module(PyObject* globals);
// "qualname (file:line)" of a code object, for logs and messages.
std::string code_location(PyCodeObject* code);
// Where a graph break's id is explained: `<framefuse package>/graph_breaks.md#ff0002` (the page ships
// with the package); empty for no id.
std::string break_docs_link(const std::string& id);
// The graph's `graph_code` text (empty if the printer is not built in).
std::string graph_code_text(const Graph& g);
// Runs the compile options' backend on the capture; may give the runner a compiled callable.
// Throws InternalError; throws PythonErrorPending when the user's backend raised.
void compile_backend(const CompileOptions& options, CaptureRunner& runner, const FrameValues& values, bool training);

// ---- one frame's dispatch, shared by the hook and the graph-break trampoline ----

// Native: run the code natively; Done: `result` is the frame's result (null: exception set);
// Break: `entry` is a partial capture that ran, `result` its break state (new reference), `plan`
// the entry's break plan (held from before the entry ran until the chain is done with it).
struct Dispatch {
  enum Kind { Native,
              Done,
              Break } kind = Native;
  PyObject* result = nullptr;
  std::shared_ptr<CacheEntry> entry;
  std::shared_ptr<const BreakPlan> plan;
};
// Guards, cache, compile on a miss, run: everything the hook does for a frame it may handle.
// `info` may describe a synthetic frame (a resume function entered by the trampoline).
Dispatch dispatch_frame(ThreadState& st, const ff_frame_info& info);

// hook_resume.cpp. Runs the stub of a break entry and the resume functions after it, in a loop
// (never nesting Python frames per break); returns the frame's result (null: exception set).
// `first` is a Break dispatch; its result (the break state) is stolen.
PyObject* run_break_chain(ThreadState& st, Dispatch first, const ff_frame_info& frame);
// The second trace of a frame that broke: where to stop. False, or Unsupported with the reason,
// when the break cannot be split.
bool split_trace_options(PyCodeObject* traced, const BreakInfo& info, TraceOptions* out);
// The stub and resume functions for a partial capture of `traced` (cached in the state of the
// user's code it derives from). Throws Unsupported when the break's state cannot be resumed.
std::shared_ptr<const BreakPlan> break_plan_for(PyCodeObject* traced, const CaptureResult::BreakState& state);

// A Python exception is set and must reach the user unchanged.
struct PythonErrorPending : std::exception {
  const char* what() const noexcept override { return "Python exception pending"; }
};

}  // namespace ff
