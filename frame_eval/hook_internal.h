// Shared between the hook's translation units (hook.cpp, hook_callable.cpp, hook_backend.cpp).
#pragma once

#include <Python.h>

#include <memory>
#include <string>

#include "frame_eval/cache.h"

namespace ff {

// Per-thread state of the hook. NB: thread-local rather than per interpreter: the hook function is
// per interpreter, but whether a thread is inside a compiled callable is the thread's business.
struct ThreadState {
  int active = 0;    // nesting of compiled callables on this thread
  int disabled = 0;  // > 0: every frame runs natively (framefuse.disable, the compiler, graph runs)
  CompileOptions* options = nullptr;                                 // innermost compiled callable's
  const std::shared_ptr<CompileOptions>* options_owner = nullptr;  // the same, owning
  PyObject* root_code = nullptr;                                     // borrowed
};
ThreadState& thread_state();
void thread_enter_compiled();
void thread_exit_compiled();

// Code of torch or framefuse itself (compiled only when it is the compiled callable's root).
bool is_internal_code(PyCodeObject* code);
// The graph's `graph_code` text (empty if the printer is not built in).
std::string graph_code_text(const Graph& g);
// Runs the compile options' backend on the capture; may give the runner a compiled callable.
// Throws InternalError; throws PythonErrorPending when the user's backend raised.
void compile_backend(const CompileOptions& options, CaptureRunner& runner, const FrameValues& values, bool training);

// A Python exception is set and must reach the user unchanged.
struct PythonErrorPending : std::exception {
  const char* what() const noexcept override { return "Python exception pending"; }
};

}  // namespace ff
