// The PEP 523 frame hook and the callables that turn it on.
//
// The hook is installed only while some thread runs inside a compiled callable (a per-thread
// entry count; the previous evaluation function is restored when the last thread leaves). On each
// frame it decides one of three outcomes, each with one exit: run the frame natively, run a cached
// capture, or fail (raise). See docs/cpython-frames.md §1 for the CPython rules it follows.
#pragma once

#include <Python.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frame_eval/cache.h"
#include "frame_eval/capture.h"

namespace ff {

// What the hook calls on a cache miss; trace_frame by default. Tests install hand-built captures.
using Tracer = std::function<CaptureResult(const FrameView&)>;
// An empty function restores trace_frame. `torch_free` (tests on interpreters without torch):
// captures without tensor work are kept and no global-state guard is added.
void set_tracer(Tracer tracer, bool torch_free = false);

// A callable that runs `fn` with the hook active (mode Compile) or with framefuse disabled for
// everything `fn` runs (mode Disable). `root_code` (may be null): a code object compiled even if it
// belongs to torch itself (nn.Linear.forward when the module itself is compiled).
enum class CallableMode : uint8_t { Compile,
                                    Disable };
PyObject* make_frame_eval_callable(PyObject* fn, std::shared_ptr<CompileOptions> options, PyObject* root_code,
                                   CallableMode mode);
// The Python type of those callables (ready after init_frame_eval_types).
PyTypeObject* frame_eval_callable_type();
// The function such a callable wraps (borrowed; *disabled: made by framefuse.disable), or null when
// `o` is none.
PyObject* frame_eval_callable_target(PyObject* o, bool* disabled);
void init_frame_eval_types();

// How a captured graph is handed to Python backends (framefuse.backends): returns a new reference
// to a framefuse._C.graph.Graph holding a copy of `g`, or nullptr with a Python error set. The
// bindings register it (src/graph_handle.h's graph_to_python): frame_eval sits below them.
using GraphToPython = PyObject* (*)(const Graph& g);
void set_graph_to_python(GraphToPython fn);

// The exception class raised for fullgraph=True violations (framefuse.Unsupported; borrowed).
void set_unsupported_exception(PyObject* type);
// Inside code compiled with backend="inductor" (not in eager code outside it, nor under other backends),
// frames of `code` call `fn(*positional arguments, **keyword-only arguments)` instead of running; `fn` returns NotImplemented where the
// frame should run natively. For functions without *args and **kwargs (framefuse/optim.py: fused
// optimizer steps).
void set_frame_substitute(PyObject* code, PyObject* fn);
// Frames of the module whose globals are `globals` run natively, with everything they call, as
// frames torch.compiler.disable marks do (torch.utils.checkpoint: torch 2 marks it, torch 1 does not;
// a function it runs must not be compiled, or its second run in the backward saves other tensors).
void set_native_module(PyObject* globals);

// Counters for tests and explain().
struct FrameEvalStats {
  int64_t frames_compiled = 0;   // captures built
  int64_t cache_hits = 0;        // calls served by a cached capture
  int64_t recompiles = 0;        // compiles after a guard failure
  int64_t graph_breaks = 0;      // frames that fell back because of an unsupported construct
  int64_t internal_errors = 0;   // frames that fell back because of a framefuse bug
  int64_t cache_limit_hits = 0;  // code objects that reached config.recompile_limit
  int64_t eager_frames = 0;      // frames handed to the default evaluator while the hook was on
  int64_t frames_split = 0;      // captures that end at a graph break (a stub and resume functions follow)
  int64_t resume_calls = 0;      // resume functions entered by the hook after a break stub returned
  int64_t codes_generated = 0;   // break stubs and resume functions built (each once per layout)
  double compile_seconds = 0;    // capture + backend time of every compile (torch's compile_times)
};
FrameEvalStats& frame_eval_stats();

// Every graph break since the last clear (one per compile that met it), for explain().
struct BreakRecord {
  BreakInfo info;     // id and explanation are empty for an Unsupported without a registry record
  std::string where;  // the frame: "fn (file.py:10)"
  bool split = false; // the frame was split at the break; false: it ran eagerly
};
const std::vector<BreakRecord>& break_records();
void clear_break_records();

// True while the hook is installed (some thread is inside a compiled callable).
bool hook_installed();

}  // namespace ff
