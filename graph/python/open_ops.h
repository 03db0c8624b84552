// The open registry's torch side (DESIGN.md 5b): a torch callable graph/ops.def does not list is
// resolved, the first time a call of it is seen, to the ATen operator of its name through torch's
// own schemas (`torch._C._jit_get_schemas_for_operator`), and its overloads are registered as ops
// (graph/aten_schema.h). Such an op has no meta rule (torch types it on meta tensors, which also
// shows what it writes) and no lowering (inductor runs it as an extern call); the reference runner
// and inductor call the very callable the user called.
#pragma once

#include <Python.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/ir.h"
#include "graph/op_registry.h"

namespace ff {

// The registered overloads of `fn` (borrowed), most specific first; empty when `fn` is not a
// builtin of torch's namespaces (torch.*, torch.linalg/fft/special.*, torch._C._nn.*) or a builtin
// method of torch.Tensor, or when none of its overloads can be expressed (*reason then says why).
// Resolution happens once per callable; needs the GIL.
const std::vector<OpId>& open_ops_for_callable(PyObject* fn, std::string* reason);

// The resolver graph code read back uses for a target no registered op has (`torch.fft.rfft`).
std::vector<OpId> open_ops_for_target(std::string_view target);

// Adds a call of the callable whose overloads are `overloads` (open_ops_for_callable): the first
// overload the arguments bind to, typed on meta tensors. An `out=` tensor is functionalized: the
// call without it, then `out.copy_(result)` (the node returned, which writes `out`).
std::optional<NodeId> add_open_call(Graph& g, const std::vector<OpId>& overloads, const std::vector<Value>& args,
                                    const std::vector<std::pair<std::string, Value>>& kwargs, std::string* reason,
                                    bool grad_enabled);

// allow_in_graph (graph/python/allowed_calls.cpp). The ATen name its ops carry (no such operator).
inline constexpr std::string_view kAllowedInGraphAten = "aten::framefuse_allowed_in_graph";
inline bool is_allowed_in_graph_op(const OpDef& op) { return op.aten == kAllowedInGraphAten; }
// framefuse.compiler.allow_in_graph's table: id(fn) -> fn (borrowed; made on first use).
PyObject* allowed_in_graph_table();
// Whether `fn` was marked with framefuse.compiler.allow_in_graph or torch.compiler.allow_in_graph.
bool allowed_in_graph(PyObject* fn);
// A call of such a function as one node (an op per signature of argument kinds, registered on
// first use); nullopt with *reason where an argument is not a tensor, a list of tensors or a
// constant, or the call cannot be typed.
std::optional<NodeId> add_allowed_call(Graph& g, PyObject* fn, const std::vector<Value>& args,
                                       const std::vector<std::pair<std::string, Value>>& kwargs, std::string* reason,
                                       bool grad_enabled);

}  // namespace ff
