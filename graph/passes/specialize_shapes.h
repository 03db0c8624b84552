// Dynamic shapes: where a graph's symbols come from, and the graph at one set of sizes.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace ff {

// Whether any value of `g` has a symbolic size or stride, or an argument is a symbolic int.
bool has_symbolic_shapes(const Graph& g);

// Whether an argument of a node is a symbolic int (the reference runner cannot run such a graph).
bool has_symbolic_int_args(const Graph& g);

// Where each symbol of `g` is bound: symbol k is the size of placeholder (input) first, dimension
// second, at the first placeholder whose size is exactly that symbol, or the value of an int
// placeholder that is that symbol (dimension -1); (-1, -1) for a symbol that
// appears nowhere (one the trace specialised). Throws InternalError when a symbol the graph uses is
// no placeholder's size (the frontend only makes symbols for input dimensions).
std::vector<std::pair<int, int>> symbol_bindings(const Graph& g);

// Whether `v` or one of its items is a symbolic int.
bool value_symbolic(const Value& v);

// `v` with every symbolic int in it (its items too) replaced by its value at `bindings`.
void specialize_value(Value& v, const std::vector<int64_t>& bindings);

// `m` with its sizes and strides at `bindings`.
TensorMeta specialize_tensor_meta(TensorMeta m, const std::vector<int64_t>& bindings);

// `g` with the symbols in `values` replaced (by their traced value, or by an equal symbol): the
// trace guarded them equal (broadcasting against a static size or another symbolic one).
Graph substitute_symbols(const Graph& g, const std::vector<std::pair<SymbolId, SymInt>>& values);

// `g` with symbol k replaced by bindings[k] in every size, stride and int argument: the static
// graph of one call.
Graph specialize_shapes(const Graph& g, const std::vector<int64_t>& bindings);

}  // namespace ff
