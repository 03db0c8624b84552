// The symbolic bytecode interpreter: runs a frame's code on symbolic values, recording tensor work
// into a Graph, and returns a CaptureResult (capture.h). One opcode table per CPython version.
#pragma once

#include <unordered_map>

#include "frame_eval/capture.h"
#include "src/base/errors.h"

namespace ff {

// Thrown when the frame contains a construct framefuse cannot capture. Carries the structured
// break record (stable id, reason, explanation, hint, user file:line).
class GraphBreak : public Unsupported {
 public:
  explicit GraphBreak(BreakInfo info);
  const BreakInfo& info() const { return info_; }

 private:
  BreakInfo info_;
};

// Which dimensions of the tensors a trace reads get a symbol (graph/symint.h).
enum class DynamicShapes : uint8_t {
  Off,   // none (dynamic=False, and traces outside the hook)
  Auto,  // those marked (mark_dynamic) or seen with another size before (automatic dynamic)
  All,   // every dimension of a tensor passed in (dynamic=True); module attributes stay static
};

// Per code: the sizes each tensor source had in earlier traces, -1 where a dimension was seen
// with two sizes. Automatic dynamic reads it and writes what the trace saw.
using SizeHistory = std::unordered_map<std::string, std::vector<int64_t>>;

struct TraceOptions {
  int max_inline_depth = 32;  // bounded recursion of inlined user calls
  // Partial capture (a graph break's second trace): stop before the root frame runs instruction
  // `stop_index` (decoded index) for the `stop_visit`-th time; the result's `brk` describes the
  // frame state there. `stop_live`: the locals live there (only the bound ones are passed).
  int stop_index = -1;
  int stop_visit = 0;
  std::vector<std::string> stop_live;
  DynamicShapes dynamic = DynamicShapes::Off;
  SizeHistory* size_history = nullptr;  // Auto: read and updated; may be null
  // Calls of code the frame hook substitutes (hook.h set_frame_substitute) break, so that the hook
  // runs them: under backend="inductor" only, where the hook substitutes.
  bool break_at_substitutes = false;
};

// Traces `frame`. Throws GraphBreak for unsupported constructs and InternalError for bugs; the
// caller (the hook) turns both into an eager run of the frame. Needs the GIL.
CaptureResult trace_frame(const FrameView& frame, const TraceOptions& options = {});

}  // namespace ff
