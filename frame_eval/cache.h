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

struct CacheEntry {
  std::shared_ptr<CompileOptions> options;
  std::unique_ptr<CaptureRunner> runner;
  int compile_id = 0;
};

enum class CodeStrategy : uint8_t { Compile, Skip, CacheLimit };

struct ExtraState {
  std::vector<std::shared_ptr<CacheEntry>> entries;  // most recently used first
  CodeStrategy strategy = CodeStrategy::Compile;
  std::string skip_reason;
  bool torch_internal = false;  // code of torch or framefuse itself: compiled only as a root
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
