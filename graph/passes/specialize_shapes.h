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
// appears nowhere (one the trace specialised) or is unbacked (see symbol_sources). Throws
// InternalError when another symbol the graph uses is no placeholder's size (the frontend only
// makes symbols for input dimensions).
std::vector<std::pair<int, int>> symbol_bindings(const Graph& g);

// Whether a size, stride or int argument of `g` mentions an unbacked symbol (a data-dependent
// output's size): such a graph runs on the reference runner, which binds them as it goes.
bool has_unbacked_symbols(const Graph& g);
// Whether the graph reads tensor data into its own values: a data-dependent size (above) or a
// Python float of x.item() (config capture_scalar_outputs). Only the reference runner runs these.
bool has_data_dependent_values(const Graph& g);

// Where the run reads each symbol: node `node`'s value (item `item` of its tuple, or the value
// itself when -1), dimension `dim` (-1: the value is the int). Placeholders first, as
// symbol_bindings; an unbacked symbol at the first node whose result has it as a size. {-1, -1, -1}
// for a symbol bound nowhere.
struct SymbolSource {
  int node = -1, item = -1, dim = -1;
};
std::vector<SymbolSource> symbol_sources(const Graph& g);

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
