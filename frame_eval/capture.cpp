// Ownership of the Python references a CaptureResult holds (see capture.h).
#include "frame_eval/capture.h"

#include <utility>

namespace ff {
namespace {

void release_plan(OutputPlan& plan) {
  Py_CLEAR(plan.constant);
  Py_CLEAR(plan.tuple_type);
  for (PyObject*& k : plan.keys) Py_CLEAR(k);
  for (OutputPlan& item : plan.items) release_plan(item);
}

void release_all(CaptureResult& r) {
  // NB: a CaptureResult may outlive the interpreter's willingness to run Python (a static cache
  // destroyed at exit); only touch refcounts while Python is alive.
  if (!Py_IsInitialized()) return;
  for (Guard& g : r.guards) Py_CLEAR(g.expected);
  release_plan(r.output);
  for (SideEffect& e : r.side_effects) {
    Py_CLEAR(e.key);
    release_plan(e.value);
  }
}

}  // namespace

CaptureResult::CaptureResult(CaptureResult&& other) noexcept
    : graph(std::move(other.graph)),
      inputs(std::exchange(other.inputs, {})),
      guards(std::exchange(other.guards, {})),
      output(std::exchange(other.output, OutputPlan{})),
      side_effects(std::exchange(other.side_effects, {})) {}

CaptureResult& CaptureResult::operator=(CaptureResult&& other) noexcept {
  if (this != &other) {
    release_all(*this);
    graph = std::move(other.graph);
    inputs = std::exchange(other.inputs, {});
    guards = std::exchange(other.guards, {});
    output = std::exchange(other.output, OutputPlan{});
    side_effects = std::exchange(other.side_effects, {});
  }
  return *this;
}

CaptureResult::~CaptureResult() { release_all(*this); }

}  // namespace ff
