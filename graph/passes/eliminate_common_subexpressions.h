// Common-subexpression elimination.
#pragma once

#include "graph/ir.h"

namespace ff {

// Replaces a call (or getitem) by an earlier identical one: same op, same operands, same meta.
// Never merges random, nondeterministic or mutating calls, nor two calls separated by an
// in-place mutation of memory either may read (alias classes, graph/passes/effects.h). Two
// results that would both be returned stay distinct objects, as eager returns them.
Graph eliminate_common_subexpressions(const Graph& g);

}  // namespace ff
