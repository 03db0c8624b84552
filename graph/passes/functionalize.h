// Functionalization: an in-place call rewritten as its out-of-place form.
//
// The rewrite of one call is here, once, with the one table of in-place -> out-of-place ops
// (functional_form in graph/op.h, derived from graph/ops.def). When the rewrite is safe depends
// on who asks, and stays with them:
//  - inductor's lowering (Lowerer::functional_form, inductor/lower.cpp): the mutated operand is a
//    fresh intermediate with no other user; also in-place writes into graph inputs;
//  - the CUDA runner (functionalize_private_inplace): the mutated tensor is a fresh result of the
//    graph that every other reader reads earlier.
#pragma once

#include <string>

#include "graph/ir.h"

namespace ff {

// The out-of-place form of in-place call `n` in *out: add_ -> add, x += y -> x + y,
// relu(x, inplace=True) -> relu(x, inplace=False). Returns "" or why there is none.
// With a graph, *out's metadata is re-inferred where that keeps n's sizes: eager computes an
// in-place op in the dtype its out-of-place form gives (x_bf16 *= y_f64 multiplies in float64)
// and converts the result to self's dtype when it stores it. Without one, *out keeps n's.
std::string out_of_place_call(const Node& n, Node* out, const Graph* g = nullptr);

}  // namespace ff
