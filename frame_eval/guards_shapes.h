// The runtime check of a ShapeRelations guard (capture.h): the symbolic sizes of a cache entry.
//
// Each symbol is bound to the size where it first appears among the entry's tensors, or to the value
// of a Python int that varies (SymbolicInt); then every
// symbolic size and stride is compared with its expression, each symbol must be >= 2 (sizes 0
// and 1 were specialised), and every guard the trace recorded in its ShapeEnv must hold. The
// expressions run as one SymProgram (graph/symint.h). Hot path: no allocation after construction.
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/python/torch_native_api.h"

namespace ff {

class ShapeCheck {
 public:
  struct Tensor {
    int slot;                 // the GuardProgram slot its TensorMatch fetched it into
    TensorMeta meta;          // as traced, symbolic
    std::string source_text;  // printed source, for explanations
  };
  struct Int {
    int slot;        // a Python int that varies (a SymbolicInt guard checked its type)
    SymbolId symbol;  // it binds this symbol
  };
  // `native`: framefuse._torch_native's API, or null (Python getters then).
  ShapeCheck(std::shared_ptr<const ShapeEnv> env, std::vector<Tensor> tensors, std::vector<Int> ints,
             const ff_torch_native_api* native);

  // The symbols' values in the last check that passed (scratch of this check: read them before
  // another call can check the same entry).
  const std::vector<int64_t>& bindings() const { return bindings_; }

  // `slots`: the GuardProgram's slots (borrowed tensors). `why` (cold path): the first failure.
  bool check(PyObject* const* slots, std::string* why) const;

 private:
  // What output i of the program is compared with.
  struct Compare {
    enum class Kind : uint8_t { Size,
                                Stride,
                                Guard,
                                Evaluated } kind;  // Evaluated: only computed (ShapeEnv::evaluated)
    int pos;     // Size/Stride: index into sizes_/strides_; Guard: index into env guards
    SymRel rel;  // Guard
  };
  bool read(size_t t, PyObject* tensor) const;
  std::string describe_failure(size_t item) const;

  std::shared_ptr<const ShapeEnv> env_;
  std::vector<Tensor> tensors_;
  std::vector<Int> ints_;           // read into sizes_ after the tensors' sizes
  std::vector<size_t> offset_;      // tensor t's dims start at offset_[t] in sizes_/strides_
  std::vector<int> symbol_pos_;     // symbol k binds to sizes_[symbol_pos_[k]]
  SymProgram program_;
  std::vector<Compare> compares_;   // one per program output
  const ff_torch_native_api* native_;
  // Scratch: the GIL serialises checks.
  mutable std::vector<int64_t> sizes_, strides_, bindings_, stack_, out_;
};

}  // namespace ff
