// The one way a graph crosses between C++ and Python: a `framefuse._C.graph.Graph` object owns a C++
// `Graph` (src/bind_graph.cpp), and `framefuse.graph.Graph` wraps one in `_g`. Every binding that
// takes or returns a graph goes through these two functions; nothing passes a graph's address.
#pragma once

#include <pybind11/pybind11.h>

#include "graph/ir.h"

namespace ff {

// The graph inside `obj`: a framefuse.graph.Graph or a framefuse._C.graph.Graph. Raises TypeError
// (naming `what`) for anything else. The graph stays owned by `obj`: copy it if it must outlive `obj`.
const Graph& graph_from_python(pybind11::handle obj, const char* what = "graph");

// A copy of `g` as a framefuse._C.graph.Graph.
pybind11::object graph_to_python(const Graph& g);

}  // namespace ff
