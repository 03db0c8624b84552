// Functionalization: in-place calls rewritten as their out-of-place forms, with the one table of
// in-place -> out-of-place ops (functional_form in graph/op.h, derived from graph/ops.def).
//
// `functionalize` is the graph pass both inductor pipelines run (inductor/pipeline.h). An in-place
// call (x.add_(y), x += y, relu(x, inplace=True)) becomes its out-of-place form where nobody can
// tell the difference:
//  - x is a fresh tensor of this graph (returns_fresh_tensor, graph/passes/effects.h: never an
//    input, a view or an alias of one), or the result of an in-place call rewritten so; or a view
//    (returns_new_view) of such a tensor whose other readers all run before the call and return
//    fresh memory, and which is not part of the output (the write is seen through x only);
//  - every other reader of x runs before the call and returns fresh memory itself (no view of x
//    survives to see the change), and x is not part of the output;
//  - the out-of-place form has the in-place result's sizes and strides. Where it computes in
//    another dtype (x_f16 += y_f32 adds in float32), a cast to x's dtype follows, as eager
//    converts the value when it stores it into x.
// What stays in place: writes into graph inputs (inductor's lowering stores them into the
// caller's tensor, Lowerer::write_input) and everything the rules above refuse (the graph then
// runs on the reference runner).
#pragma once

#include <string>

#include "graph/ir.h"

namespace ff {

// The pass.
Graph functionalize(const Graph& g);

// The out-of-place form of in-place call `n` in *out: add_ -> add, x += y -> x + y,
// relu(x, inplace=True) -> relu(x, inplace=False). Returns "" or why there is none.
// With a graph, *out's metadata is re-inferred where that keeps n's sizes: eager computes an
// in-place op in the dtype its out-of-place form gives (x_bf16 *= y_f64 multiplies in float64)
// and converts the result to self's dtype when it stores it. Without one, *out keeps n's.
std::string out_of_place_call(const Node& n, Node* out, const Graph* g = nullptr);

}  // namespace ff
