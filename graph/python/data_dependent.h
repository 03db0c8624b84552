// Ops whose output sizes depend on their operands' values (nonzero, masked_select, unique, x[mask]
// ...). With config capture_dynamic_output_shape_ops on, the trace puts them in the graph: each
// such size is a new unbacked symbol of the trace's ShapeEnv (graph/symint.h), bound by the run
// from the op's output. Off, or for a form not typed here, the call graph-breaks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/op_registry.h"

namespace ff {

// Whether the ATen operator `aten_name` ("aten::nonzero", "aten::unique_consecutive.out" ...) has
// an output size that depends on its operands' values.
bool has_data_dependent_output_shape(const std::string& aten_name);

// Whether a call of `op` with `bound` (its bound arguments) has a data-dependent output size: a
// data-dependent ATen op (repeat_interleave only without output_size), or indexing with a bool mask.
bool is_data_dependent_call(const OpDef& op, const std::vector<Value>& bound, const Graph& g);

// The result of such a call, its data-dependent sizes new unbacked symbols of the active ShapeEnv;
// nullopt with *reason set where the form is not typed here (or no ShapeEnv is active).
std::optional<ValueMeta> data_dependent_meta(const OpDef& op, const std::vector<Value>& bound, const Graph& g,
                                             std::string* reason);

}  // namespace ff
