// The text forms of a Graph.
//
// graph_code: FX-like Python code, the form the `graph_code` log artifact, golden tests and error
// messages use. graph/parser.h reads it back (print -> parse -> print is the identity):
//
//   def forward(self, x: "f32[4, 8]", w: "f32[16, 8][1, 16]", b: "f32[16]cuda:0"):
//       linear: "f32[4, 16]" = torch.nn.functional.linear(x, w, b)
//       add: "f32[4, 16]" = linear + 1.0
//       view: "f32[64]" = add.view([64])
//       getitem: "f32[2, 16]" = add[0:2]
//       split: "(f32[2, 16], f32[2, 16])" = torch.split(add, 2)
//       getitem_1: "f32[2, 16]" = split[0]
//       sum_1: "f32[]" = torch.sum(add, keepdim=True)
//       return (view, getitem_1)
//
// Annotations (meta_str): a tensor is `<dtype short name>[sizes]`, then `[strides]` when they are
// not the contiguous strides of the sizes, then the device when it is not the default CPU, then
// ` rg` when it requires grad. Python scalars are `int`, `float`, `bool`, `None`; tuples `(a, b)`.
//
// Calls print as their op's PrintStyle says, with arguments as call_args passes them (defaults
// omitted). Floats print with the shortest text that round-trips (`float('inf')`, `float('nan')`
// for the non-finite ones), dtypes as `torch.float32`, devices as `torch.device('cuda:0')`.
//
// graph_table: one row per node (the `graph` log artifact).
//
// Both never throw on a malformed graph: they are used to explain verifier failures.
#pragma once

#include <string>

#include "graph/ir.h"

namespace ff {

std::string graph_code(const Graph& g);
std::string graph_table(const Graph& g);

// Pieces, shared with the parser's error messages and the table.
std::string meta_str(const ValueMeta& m);
std::string tensor_meta_str(const TensorMeta& t);
std::string float_str(double f);
std::string string_literal(const std::string& s);  // Python repr of a str
std::string value_str(const Value& v, const Graph& g);  // an operand as a Python expression
std::string node_expr(const Graph& g, NodeId id);       // right-hand side of a node's line

}  // namespace ff
