// The registry of graph-break reasons (break_registry.def): stable ids, reasons, explanations, hints.
#pragma once

#include <string>
#include <vector>

#include "frame_eval/capture.h"

namespace ff {

enum class BreakKind : uint8_t {
#define FF_BREAK(e, id, reason, explanation, hint) e,
#include "frame_eval/break_registry.def"
#undef FF_BREAK
};

struct BreakReason {
  BreakKind kind;
  const char* id;
  const char* reason;
  const char* explanation;
  const char* hint;
};

const BreakReason& break_reason(BreakKind kind);
const std::vector<BreakReason>& all_break_reasons();

// A BreakInfo for `kind`; `detail` (may be empty) is appended to the short reason after ": ".
BreakInfo make_break_info(BreakKind kind, const std::string& detail);

}  // namespace ff
