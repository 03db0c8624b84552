// AOT autograd (DESIGN.md 5c): a graph whose outputs need gradients becomes two graphs that the
// code generators compile like any other.
//
//   source:   def forward(x: "f32[8] rg", w: "f32[8] rg"):  mul = x * w;  tanh = torch.tanh(mul)
//                                                             return (tanh,)
//   joint:    the source's nodes, then the backward built from derivative rules (derivatives.h),
//             with one `tangents_k` input per output that needs a gradient
//   forward:  the source's nodes; returns (tanh, <saved>...)
//   backward: def backward(<saved>..., tangents_0):  returns (grad of x, grad of w)
//
// The partition: a value of the forward that the backward reads is recomputed there when it is
// computed from the graph's inputs through cheap calls only (pointwise, views, reductions,
// normalizations: everything but matrix products, convolutions, open ops and random draws, see
// cheap_to_recompute); anything else, and the user's results, are saved. A chain that starts at the
// graph's inputs then costs the forward no extra writes, and its recomputation fuses into the
// backward's kernels. (Not a min-cut yet: a chain after a matrix product is saved at the end the
// backward reads, not at the product.) A call made inside torch.utils.checkpoint (Node::checkpointed)
// is recomputed whatever its cost but random draws and writes; what it reads that is not recomputed
// is saved (the checkpointed function's inputs).
//
// The runtime (framefuse's Python layer) runs the forward inside a torch.autograd.Function, saves
// what it returns after the user's outputs, and runs the backward (compiled on its first call) from
// the Function's backward. What cannot be split exactly throws Unsupported naming the reason, and the
// graph runs on eager ops as before: an op without a derivative rule, an in-place write to a tensor
// that requires grad, two results that share memory, a leaf created in the graph.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace ff {

// Adds a call of `op` to `g` with these arguments (bound to the op's schema, typed, results not
// requiring grad); throws Unsupported when the call cannot be typed. The Python layer's typer also
// types ops without a C++ meta rule (on meta tensors); `rule_typer()` uses the meta rules alone.
using CallTyper = std::function<NodeId(Graph& g, OpId op, const std::vector<Value>& positional,
                                       const std::vector<std::pair<std::string, Value>>& keywords)>;
CallTyper rule_typer();

struct AutogradGraphs {
  Graph forward;   // the source's inputs; returns (the source's outputs..., the saved values...)
  Graph backward;  // inputs: the saved values, then one tangent per differentiable output
  // The source's results that are its inputs or views of them, made from the inputs outside the
  // Function (so they alias them as in eager): this graph (the source's inputs in) returns them,
  // and alias_outputs gives their positions among the source's results. Empty if none.
  Graph aliases;
  std::vector<int> alias_outputs;
  size_t outputs = 0;  // the forward's leading results: the source's other results, in order
  // Per such output: whether it needs a gradient (its tangent is a backward input); the others
  // are marked non-differentiable.
  std::vector<bool> differentiable;
  // Per saved value: the source input it is (its index), or -1 for a forward result (in order).
  std::vector<int> saved_inputs;
  // The backward's results in order: the index of the source input each is the gradient of.
  std::vector<int> grad_inputs;
  // Per backward result: the tangents it reads (indices among the tangents).
  std::vector<std::vector<int>> grad_tangents;
};

// Splits `g` (after the graph passes) into forward and backward. Throws Unsupported (see above).
AutogradGraphs split_for_autograd(const Graph& g, const CallTyper& typer);

// The joint graph alone (tests, the `aot_graphs` artifact): the source's nodes, then the backward's;
// inputs: the source's, then the tangents; returns (outputs..., gradients...).
Graph joint_graph(const Graph& g, const CallTyper& typer);

}  // namespace ff
