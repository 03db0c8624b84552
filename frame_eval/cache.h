// The per-code-object cache, stored in the code object's co_extra slot.
//
// Each code object framefuse has seen gets one ExtraState: its cache entries (most recently used
// first), and a strategy: Compile (look up, compile on a miss), Skip (run natively; the functions
// it calls are still intercepted), or CacheLimit (the recompile limit was hit: run natively).
//
// Lifetime. Everything framefuse keeps for a code object lives in its ExtraState, and the state
// dies with the code (co_extra's free function): no global table holds code objects or their
// states. NB: code objects are not tracked by the cyclic GC, so a reference from a code's state
// back to that code (directly, or through a function, a globals dict or generated code) makes a
// cycle nothing can collect. Hence what a state holds never owns the code it belongs to: generated
// code refers to the user's code it derives from weakly (`origin`), cache entries refer to break
// plans weakly, and the interpreter's decoding holds no reference to its code. Not yet so: guards
// hold the objects they compare identities with (guards.h), so an entry of a function that calls
// another function of the same exec'd namespace keeps that namespace, and so its own code, alive
// until reset() drops the entry.
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <unordered_map>
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
  int dynamic = -1;  // compile(dynamic=): -1 None (automatic), 0 False, 1 True
  std::string backend_name;
  ~CompileOptions();
  bool same_as(const CompileOptions& o) const;
};

struct DecodedCode;  // interpreter_impl.h

// What continues a frame after a graph break (hook_resume.cpp): the stub that runs the break
// instruction natively and the resume function of each of its successors. Owned by the state of
// the user's code it derives from (ExtraState::break_plans), shared by every entry that breaks at
// the same place with the same stack layout; regenerated only after reset().
struct BreakPlan {
  PyRef stub;                     // code
  std::vector<PyRef> resume;      // code per successor id
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
  // NB: weak: an entry of a resume function would otherwise own (through the plan) the very code
  // whose state holds the entry. The hook locks it before running the entry; an expired plan
  // (the user's code died or reset() ran) makes the entry stale.
  std::weak_ptr<const BreakPlan> brk;
  bool breaks = false;  // brk was set (an expired weak_ptr and an empty one look alike)
  int break_cells = 0;
  bool empty_graph = false;  // no tensor work (kept only because it ends at a break)
};

enum class CodeStrategy : uint8_t { Compile,
                                    Skip,
                                    CacheLimit };

struct ExtraState {
  std::vector<std::shared_ptr<CacheEntry>> entries;  // most recently used first
  CodeStrategy strategy = CodeStrategy::Compile;
  std::string skip_reason;
  bool skipped_for_break = false;  // Skip because of an unsupported construct (fullgraph=True retraces)
  bool autocast_noted = false;     // the perf_hints line for calls under torch.autocast (torch 1) was written
  bool torch_internal = false;  // code of torch or framefuse itself: compiled only as a root
  bool generated_stub = false;  // a graph-break stub: always Skip, even after reset()
  // A function run instead of this code's frames inside compiled code (set_frame_substitute); it may
  // return NotImplemented to have the frame run natively. Strong; kept across reset().
  PyObject* substitute = nullptr;
  int frame_id = -1;            // assigned at the first compile
  int compiles = 0;
  // Sizes of the tensors earlier traces read (automatic dynamic shapes, interpreter_shapes.cpp).
  std::unordered_map<std::string, std::vector<int64_t>> size_history;

  // In the state of a user's code: what its graph breaks generated, by layout (hook_resume.cpp).
  // They own the generated code objects (a stub per plan, resume functions shared between plans).
  std::unordered_map<std::string, std::shared_ptr<const BreakPlan>> break_plans;
  std::unordered_map<std::string, PyRef> resume_codes;
  // In the state of a resume function: a weak reference to the user's code it derives from, and
  // where that code's instructions start in it (index - shift).
  PyRef origin;
  int origin_shift = 0;

  // The interpreter's decoding of the code (interpreter.cpp decode_code); kept across reset().
  std::shared_ptr<const DecodedCode> decoded;
};

// The state of `code`, or null. Hot path.
ExtraState* extra_state(PyCodeObject* code);
// The state of `code`, created if missing. Cold path; may throw InternalError.
ExtraState* ensure_extra_state(PyCodeObject* code);
// Drops every cache entry, strategy, break plan and resume function (framefuse.reset()).
void reset_caches();

// What the per-code states hold, summed over every live one (tests: nothing may grow per dead
// function).
struct CodeStateCounts {
  size_t states = 0;           // code objects with a state
  size_t entries = 0;          // cache entries
  size_t break_plans = 0;      // stubs
  size_t resume_codes = 0;     // resume functions
  size_t decoded = 0;          // codes the interpreter decoded
};
CodeStateCounts code_state_counts();

}  // namespace ff
