// The bridge between Python objects and the graph IR: how a torch call seen in user code (by the
// frontend, or by a user building a graph from Python) becomes a node.
#pragma once

#include <Python.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/autograd/autograd.h"
#include "graph/ir.h"

namespace ff {

// Must be called once (with the GIL, after `import torch`) before any other function here:
// resolves every op's target and aliases to Python callables. Idempotent.
void init_op_callables();

// The op a Python callable implements (torch.add, torch.Tensor.add, operator.add, F.relu ...).
// `fn` is borrowed. Bound methods of tensors (`x.add`) are not resolved here: the frontend passes
// the unbound descriptor (torch.Tensor.add) and the tensor as the first argument.
std::optional<OpId> op_for_callable(PyObject* fn);

// The eager callable of an op (borrowed; owned by the registry). nullptr if the installed torch
// does not have it.
PyObject* op_callable(OpId op);

// Adds a call of op `op` to `g`: binds the arguments to the schema, computes the result metadata
// (the op's meta rule, else torch on meta tensors). Returns the node, or nullopt with *reason set
// to a one-line explanation (unknown keyword, unsupported operands, eager would raise ...).
// `grad_enabled`: grad mode of the traced code at this call (results require grad only if it is on).
std::optional<NodeId> add_op_call(Graph& g, OpId op, const std::vector<Value>& args,
                                  const std::vector<std::pair<std::string, Value>>& kwargs, std::string* reason,
                                  bool grad_enabled = true);

// add_op_call as AOT autograd's typer (graph/autograd/autograd.h): results do not require grad;
// a call that cannot be typed throws Unsupported with add_op_call's reason.
CallTyper python_typer();

// As add_op_call, starting from a Python callable; *reason says when it is not a registered op.
std::optional<NodeId> add_torch_call(Graph& g, PyObject* fn, const std::vector<Value>& args,
                                     const std::vector<std::pair<std::string, Value>>& kwargs, std::string* reason,
                                     bool grad_enabled = true);

// A Python constant as a Value (None, bool, int, float, str, torch.dtype, torch.device,
// torch.memory_format, torch.layout, Ellipsis, slice, and lists/tuples of those). nullopt otherwise.
// `obj` is borrowed.
std::optional<Value> constant_from_py(PyObject* obj);

// A Value as a Python object (new reference). Node references are looked up in `node_values`
// (borrowed references indexed by NodeId). Returns nullptr with a Python error set on failure.
PyObject* value_to_py(const Value& v, PyObject* const* node_values);

// Metadata of a real tensor (borrowed).
TensorMeta meta_from_tensor(PyObject* tensor);

}  // namespace ff
