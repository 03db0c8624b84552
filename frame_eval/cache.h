// The per-code-object cache, stored in the code object's co_extra slot.
//
// Each code object framefuse has seen gets one ExtraState: its cache entries (most recently used
// first), and a strategy: Compile (look up, compile on a miss), Skip (run natively; the functions
// it calls are still intercepted), or CacheLimit (the recompile limit was hit: run natively).
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "frame_eval/capture_runner.h"

namespace ff {

// What one framefuse.compile(...) call asked for. Cache entries remember it: a call compiled with
// other options does not reuse them.
struct CompileOptions {
  PyObject* backend = nullptr;  // strong: "eager", "inductor" or a callable
  PyObject* mode = nullptr;     // strong: None or str
  PyObject* options = nullptr;  // strong: None or dict
  bool fullgraph = false;
  std::string backend_name;
  ~CompileOptions();
  bool same_as(const CompileOptions& o) const;
};

// What continues a frame after a graph break (hook_resume.cpp): the stub that runs the break
// instruction natively and the resume function of each of its successors. Shared by every entry
// that breaks at the same place with the same stack layout; never regenerated.
struct BreakPlan {
  PyRef original;                 // the user's code object the stub and resume functions derive from
  PyRef stub;                     // code
  std::vector<PyRef> resume;      // code per successor id
  mutable PyRef stub_fn;          // the stub as a function, when it needs no closure
  mutable PyObject* stub_fn_globals = nullptr;  // borrowed: the globals stub_fn was made with
  // Zero-argument super()'s self, the stub's first argument (bytecode_resume.h SelfSlot): the
  // break state's item `self_state`, or the contents of closure cell `self_cell`; -1: neither.
  int self_state = -1;
  int self_cell = -1;
};

struct CacheEntry {
  std::shared_ptr<CompileOptions> options;
  std::unique_ptr<CaptureRunner> runner;
  int compile_id = 0;
  // A partial capture: running the runner returns the break state (capture.h BreakState), which
  // the hook passes to brk->stub. `break_cells`: trailing state items that are fresh cells.
  std::shared_ptr<const BreakPlan> brk;
  int break_cells = 0;
  bool empty_graph = false;  // no tensor work (kept only because it ends at a break)
};

enum class CodeStrategy : uint8_t { Compile, Skip, CacheLimit };

struct ExtraState {
  std::vector<std::shared_ptr<CacheEntry>> entries;  // most recently used first
  CodeStrategy strategy = CodeStrategy::Compile;
  std::string skip_reason;
  bool skipped_for_break = false;  // Skip because of an unsupported construct (fullgraph=True retraces)
  bool torch_internal = false;  // code of torch or framefuse itself: compiled only as a root
  bool generated_stub = false;  // a graph-break stub: always Skip, even after reset()
  int frame_id = -1;            // assigned at the first compile
  int compiles = 0;
};

// The state of `code`, or null. Hot path.
ExtraState* extra_state(PyCodeObject* code);
// The state of `code`, created if missing. Cold path; may throw InternalError.
ExtraState* ensure_extra_state(PyCodeObject* code);
// Drops every cache entry and strategy (framefuse.reset()).
void reset_caches();
// Number of code objects with state (for tests).
size_t num_extra_states();

}  // namespace ff
