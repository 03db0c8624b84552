#include "frame_eval/break_registry.h"

namespace ff {

const std::vector<BreakReason>& all_break_reasons() {
  static const std::vector<BreakReason> records = {
#define FF_BREAK(e, id, reason, explanation, hint) {BreakKind::e, id, reason, explanation, hint},
#include "frame_eval/break_registry.def"
#undef FF_BREAK
  };
  return records;
}

const BreakReason& break_reason(BreakKind kind) { return all_break_reasons()[static_cast<size_t>(kind)]; }

BreakInfo make_break_info(BreakKind kind, const std::string& detail) {
  const BreakReason& r = break_reason(kind);
  BreakInfo info;
  info.id = r.id;
  info.reason = detail.empty() ? std::string(r.reason) : std::string(r.reason) + ": " + detail;
  info.explanation = r.explanation;
  info.hint = r.hint;
  return info;
}

}  // namespace ff
