// An extern call of a compiled graph with its arguments converted to Python once: constants are
// built at compile time, node values are read from the run's node table, and the call goes
// through vectorcall with keyword names (no argument tuple or dict per call).
#pragma once

#include <Python.h>

#include <vector>

#include "graph/op_registry.h"

namespace ff::inductor {

class PreparedCall {
 public:
  // `fn` is borrowed (the op registry owns it); `args` are bound to `op`'s schema and must outlive this.
  PreparedCall(PyObject* fn, const OpDef& op, const std::vector<Value>& args);
  PreparedCall(const PreparedCall&) = delete;
  PreparedCall& operator=(const PreparedCall&) = delete;
  ~PreparedCall();

  // Calls fn; node values come from `nodes` (borrowed, indexed by NodeId). New reference, or
  // nullptr with a Python error set.
  PyObject* call(PyObject* const* nodes) const;

 private:
  struct Arg {
    PyObject* constant = nullptr;  // strong; a value without node references
    NodeId node = -1;              // a node's value
    const Value* value = nullptr;  // a sequence or slice holding nodes: built per call
  };
  PyObject* fn_;
  std::vector<Arg> args_;       // positional, then keyword values
  size_t positional_ = 0;
  PyObject* kwnames_ = nullptr;  // strong; null without keywords
};

}  // namespace ff::inductor
