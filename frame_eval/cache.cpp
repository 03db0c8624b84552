#include "frame_eval/cache.h"

#include <unordered_set>

#include "frame_eval/frame_access.h"  // the co_extra API's spelling per version
#include "frame_eval/hook_internal.h"
#include "frame_eval/py_util.h"
#include "src/base/errors.h"

namespace ff {
namespace {

// Every live ExtraState, for reset(). Guarded by the GIL. NB: raw pointers, erased by free_extra:
// the registry never keeps a state (or its code) alive.
std::unordered_set<ExtraState*>& registry() {
  static auto* r = new std::unordered_set<ExtraState*>();
  return *r;
}

// co_extra's free function: runs when the code object dies (GIL held).
void free_extra(void* p) {
  auto* state = static_cast<ExtraState*>(p);
  if (!state) return;
  registry().erase(state);
  // NB: destroying entries releases Python objects, which may free other code objects and
  // re-enter free_extra for them; the state is already out of the registry.
  delete state;
}

Py_ssize_t extra_index() {
  static Py_ssize_t index = ff_request_code_extra_index(free_extra);
  return index;
}

}  // namespace

CompileOptions::~CompileOptions() {
  if (!Py_IsInitialized()) return;
  Py_CLEAR(backend);
  Py_CLEAR(mode);
  Py_CLEAR(options);
}

bool CompileOptions::same_as(const CompileOptions& o) const {
  if (this == &o) return true;
  if (fullgraph != o.fullgraph || dynamic != o.dynamic || backend_name != o.backend_name) return false;
  if (backend != o.backend && !(PyUnicode_Check(backend) && PyUnicode_Check(o.backend))) return false;
  int mode_eq = mode == o.mode ? 1 : PyObject_RichCompareBool(mode, o.mode, Py_EQ);
  int opt_eq = options == o.options ? 1 : PyObject_RichCompareBool(options, o.options, Py_EQ);
  if (mode_eq < 0 || opt_eq < 0) PyErr_Clear();
  return mode_eq == 1 && opt_eq == 1;
}

ExtraState* extra_state(PyCodeObject* code) {
  Py_ssize_t idx = extra_index();
  if (idx < 0) return nullptr;
  void* p = nullptr;
  if (ff_code_get_extra(reinterpret_cast<PyObject*>(code), idx, &p) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  return static_cast<ExtraState*>(p);
}

ExtraState* ensure_extra_state(PyCodeObject* code) {
  if (ExtraState* s = extra_state(code)) return s;
  Py_ssize_t idx = extra_index();
  FF_CHECK(idx >= 0, "no co_extra slot available (255 users already)");
  auto* state = new ExtraState();
  if (ff_code_set_extra(reinterpret_cast<PyObject*>(code), idx, state) < 0) {
    PyErr_Clear();
    delete state;
    FF_CHECK(false, "could not store framefuse state on a code object");
  }
  registry().insert(state);
  // NB: classified once, when the state is made (by the hook or by the interpreter decoding a callee).
  state->torch_internal = is_internal_code(code);
  return state;
}

void reset_caches() {
  // Move everything out first, then release it: releasing runs Python deallocators that may free
  // code objects (generated code among them) and so edit the registry while it is walked.
  struct Doomed {
    std::vector<std::shared_ptr<CacheEntry>> entries;
    std::vector<std::shared_ptr<const BreakPlan>> plans;
    std::vector<PyRef> codes;
  } doomed;
  for (ExtraState* s : registry()) {
    for (auto& e : s->entries) doomed.entries.push_back(std::move(e));
    s->entries.clear();
    for (auto& [key, plan] : s->break_plans) doomed.plans.push_back(std::move(plan));
    s->break_plans.clear();
    for (auto& [key, code] : s->resume_codes) doomed.codes.push_back(std::move(code));
    s->resume_codes.clear();
    s->strategy = s->generated_stub ? CodeStrategy::Skip : CodeStrategy::Compile;
    s->skip_reason.clear();
    s->skipped_for_break = false;
    s->compiles = 0;
    s->size_history.clear();
  }
  doomed.entries.clear();
  doomed.plans.clear();
  doomed.codes.clear();
}

CodeStateCounts code_state_counts() {
  CodeStateCounts c;
  for (const ExtraState* s : registry()) {
    ++c.states;
    c.entries += s->entries.size();
    c.break_plans += s->break_plans.size();
    c.resume_codes += s->resume_codes.size();
    c.decoded += s->decoded ? 1 : 0;
  }
  return c;
}

}  // namespace ff
