// Guards compiled into a flat check program.
//
// A GuardProgram is a list of instructions over numbered slots: FETCH evaluates one Source
// (locals, closure cells, globals, builtins, attributes, items, types) into a slot, CHECK tests a
// guard on a slot. Sources are deduplicated, fetched once, in the order the guards first need
// them. The hot path (check) uses raw pointers and pre-resolved C getters, allocates nothing of its
// own and never goes through pybind11. The cold path (explain) renders a failing guard as Python
// source with the expected and actual values: `L['x'].size()[0] == 8` (got 16).
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "frame_eval/capture.h"
#include "frame_eval/guards_shapes.h"
#include "graph/python/tensor_guards.h"
#include "graph/python/torch_native_api.h"

namespace ff {

// The values a program reads: a fresh frame's localsplus, closure, globals and builtins
// (all borrowed).
struct FrameValues {
  PyObject* const* localsplus = nullptr;
  int nlocalsplus = 0;
  PyObject* closure = nullptr;  // tuple of cells, or null
  PyObject* globals = nullptr;
  PyObject* builtins = nullptr;
};

// Per-call storage for fetched values: each filled slot holds a strong reference.
class Slots {
 public:
  explicit Slots(size_t n);
  ~Slots();
  Slots(const Slots&) = delete;
  Slots& operator=(const Slots&) = delete;
  PyObject*& operator[](size_t i) { return data_[i]; }
  PyObject* operator[](size_t i) const { return data_[i]; }
  PyObject* const* data() const { return data_; }
  void clear();  // releases every slot

 private:
  static constexpr size_t kInline = 32;
  PyObject* inline_[kInline];
  std::unique_ptr<PyObject*[]> heap_;
  PyObject** data_;
  size_t n_;
};

class GuardProgram {
 public:
  // Compiles `guards`, then appends fetches for `extra_sources` (graph inputs, side-effect targets,
  // returned objects). `frame` is the frame the capture was traced on: expected tensor types are
  // read from it. Cold path; needs the GIL. Throws InternalError on a malformed guard.
  GuardProgram(const std::vector<Guard>& guards, const std::vector<SourcePtr>& extra_sources,
               const FrameValues& frame);
  ~GuardProgram();
  GuardProgram(const GuardProgram&) = delete;
  GuardProgram& operator=(const GuardProgram&) = delete;

  size_t num_slots() const { return slot_sources_.size(); }
  // The slot a source was fetched into (sources compare by their printed form); -1 if none.
  int slot_of(const SourcePtr& s) const;

  // Hot path: fetches and checks. True: every guard passed and every source was fetched (the
  // slots then hold strong references; the caller uses and clears them). False: `slots` are
  // cleared. Never leaves a Python exception set.
  bool check(const FrameValues& frame, Slots& slots) const;
  // The values of the size symbols in the last check() that passed (empty without symbols).
  const std::vector<int64_t>& symbol_values() const { return shapes_ ? shapes_->bindings() : no_symbols_; }

  // Cold path: each failing guard as "expr (got actual)", in program order; at most one when
  // `first_only`. Empty if all pass.
  std::vector<std::string> explain(const FrameValues& frame, bool first_only) const;

  // Whether an identity guard's object (held weakly) no longer exists: the program never passes.
  bool holds_dead_object() const;

  // Every guard as a Python expression, for the `guards` log.
  std::vector<std::string> describe() const;

  struct Fetch;
  struct Check;
  struct Instr {
    bool is_fetch;
    int index;  // into fetches_ or checks_; kTensorBatch: every TensorMatch at once
  };
  static constexpr int kTensorBatch = -1;

 private:
  int add_source(const SourcePtr& s);
  // Runs instruction `ins`; on failure returns false and, if `why` is set, describes it.
  bool run_fetch(const Fetch& f, const FrameValues& frame, Slots& slots) const;
  bool run_check(const Check& c, const Slots& slots, std::string* why) const;
  // Builds the hot program with every TensorMatch replaced by one call to torch's C++ tensor
  // check, where torch has one and it accepts the traced tensors. Cold path.
  void batch_tensor_checks(const std::vector<PyRef>& live);
  bool run_tensor_batch(const Slots& slots) const;
  // Cold: why the tensor batch fails where no single tensor guard does (dispatch keys).
  std::string explain_tensor_batch(const Slots& slots) const;

  const ff_torch_native_api* native_ = nullptr;  // framefuse._torch_native, or null
  const ShapeCheck* shapes_ = nullptr;  // the ShapeRelations check (owned by its Check), or null
  std::vector<int64_t> no_symbols_;
  std::vector<SourcePtr> slot_sources_;
  std::vector<std::string> slot_names_;  // printed
  std::vector<std::string> slot_keys_;   // slot_key(): what makes two sources one slot
  std::vector<Fetch> fetches_;
  std::vector<Check> checks_;
  std::vector<Instr> program_;       // every check in guard order (explain, describe)
  std::vector<Instr> hot_program_;   // what check() runs: program_, or with the tensor batch
  PyObject* tensor_guards_ = nullptr;  // the TensorGuards object (strong), or null
  TensorGuardsCall tensor_batch_;      // its check, or empty
  std::vector<int> tensor_batch_slots_;
  mutable std::vector<PyObject*> tensor_batch_args_;  // scratch, sized once; the GIL serialises use
};

// Whether an IdMatch guard holds its object weakly (objects that take weak references, not types).
bool weakly_held(PyObject* o);

// Guards on the global state a graph depends on, read now (grad mode, default dtype).
Guard current_global_state_guard();

}  // namespace ff
