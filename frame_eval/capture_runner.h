// Running a capture on a later call: check its guards on the frame, fetch the graph inputs by
// source, call the compiled graph, replay the side effects in order, build the return value.
// Everything is C++ over raw CPython calls; the only Python-level work is the graph itself.
#pragma once

#include <Python.h>

#include <memory>
#include <vector>

#include "frame_eval/capture.h"
#include "frame_eval/guards.h"
#include "graph/python/reference_runner.h"

namespace ff {

class CaptureRunner {
 public:
  // `compiled_fn`: a backend's callable (new reference, stolen), called with the graph inputs and
  // returning a tuple/list of the graph outputs; null runs the graph on the ReferenceRunner.
  // `frame`: the frame the capture was traced on. Cold path; throws InternalError on a capture it
  // cannot run.
  CaptureRunner(CaptureResult capture, const FrameValues& frame, PyObject* compiled_fn);
  ~CaptureRunner();
  CaptureRunner(const CaptureRunner&) = delete;
  CaptureRunner& operator=(const CaptureRunner&) = delete;

  const GuardProgram& guards() const { return *program_; }
  const CaptureResult& capture() const { return capture_; }
  bool uses_reference_runner() const { return compiled_ == nullptr; }
  // Replaces the reference runner by a backend's callable (new reference, stolen).
  void set_compiled(PyObject* compiled_fn);
  // The graph runs with torch.autocast off (a capture traced under autocast holds its casts).
  void set_autocast_off(bool off) { autocast_off_ = off; }
  // The graph inputs read from `frame`, as a new list; null with an exception set. Cold path.
  PyObject* example_inputs(const FrameValues& frame) const;

  // Hot path, after guards().check(frame, slots) passed: runs and returns the frame's return value
  // (new reference), or null with the Python exception set. Clears `slots`.
  PyObject* run(const FrameValues& frame, Slots& slots) const;

  struct Plan;
  struct Effect;
  struct Memo;

 private:
  Plan resolve_plan(const OutputPlan& p);
  PyObject* build(const Plan& p, PyObject* outputs, const Slots& slots, const FrameValues& frame, Memo* memo) const;
  PyObject* build_one(const Plan& p, PyObject* outputs, const Slots& slots, const FrameValues& frame, Memo* memo) const;
  PyObject* build_break_only(const Plan& p, PyObject* outputs, const Slots& slots, const FrameValues& frame,
                             Memo* memo) const;
  PyObject* build_object(const Plan& p, PyObject* outputs, const Slots& slots, const FrameValues& frame,
                         Memo* memo) const;

  CaptureResult capture_;
  std::unique_ptr<GuardProgram> program_;
  std::unique_ptr<ReferenceRunner> reference_;
  PyObject* compiled_ = nullptr;  // strong
  std::vector<int> input_slots_;
  std::unique_ptr<Plan> output_;
  std::vector<Effect> effects_;
  bool has_symint_plans_ = false;  // an output or effect is an int that varies (OutputPlan::Kind::SymInt)
  bool autocast_off_ = false;
};

}  // namespace ff
