// Constant folding and local simplification, as a table of rewrite rules.
//
// Each rule is a pattern, an optional guard and a replacement (fold_constants.cpp); one driver
// walks the graph in order, tries the rules on every call and getitem (operands already
// rewritten), replaces the node by the first rule's result and logs which rule fired (`+graph`).
// A rule never changes a result's value, dtype or aliasing: where Python or torch would raise,
// overflow or give a result the metadata does not promise, the rule does not fire.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace ff {

Graph fold_constants(const Graph& g);
// As above; appends "<rule>: <node>" to *fired for every rewrite, in order.
Graph fold_constants(const Graph& g, std::vector<std::string>* fired);

// "name: what it rewrites", one per rule, in the order they are tried.
std::vector<std::string> fold_rules();

}  // namespace ff
