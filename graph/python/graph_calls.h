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

// torch.autocast's state where a traced call runs: on or off per device type, with its dtype.
struct AutocastState {
  bool cpu = false, cuda = false;
  DType cpu_dtype = DType::BFloat16, cuda_dtype = DType::Float16;
  bool any() const { return cpu || cuda; }
  bool operator==(const AutocastState&) const = default;
};

// While alive (on this thread), add_op_call adds its calls as torch.autocast in `*state` runs them:
// the casts autocast makes of the operands, as explicit `to` nodes, then the call on the cast
// operands (python/framefuse/_autocast.py reads the casts off torch's autocast on fake tensors). A
// call autocast does more to than cast its operands is not added. `state` is read at each call
// (the trace changes it where a `with torch.autocast` block starts or ends); null: no autocast.
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState* state);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  const AutocastState* saved_;
};

// Whether this torch can capture calls under autocast (torch 2: fake tensors, per-device state).
bool autocast_capturable();

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
