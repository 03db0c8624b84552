// The reference runner: executes a Graph by calling each op's eager torch implementation in order.
// It is the `eager` backend, the fallback of every other backend, and the oracle in tests.
#pragma once

#include <Python.h>

#include <memory>
#include <vector>

#include "graph/ir.h"

namespace ff {

class ReferenceRunner {
 public:
  // Prepares the call plan (constants converted to Python objects once). Needs the GIL.
  explicit ReferenceRunner(const Graph& graph);
  ~ReferenceRunner();
  ReferenceRunner(const ReferenceRunner&) = delete;
  ReferenceRunner& operator=(const ReferenceRunner&) = delete;

  // Runs the graph on `inputs` (borrowed; one per placeholder, in order). Returns the output
  // structure as a new reference, or nullptr with the Python error set (exactly the exception the
  // eager op raised).
  PyObject* run(PyObject* const* inputs, size_t n_inputs);

  size_t num_inputs() const;

 private:
  struct Plan;
  std::unique_ptr<Plan> plan_;
};

}  // namespace ff
