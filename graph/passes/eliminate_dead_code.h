// Dead-code elimination.
#pragma once

#include "graph/ir.h"

namespace ff {

// Removes calls and getitems whose results nothing needs. Kept: placeholders (the signature),
// the output and everything it uses, and calls with side effects (in-place mutations, RNG draws)
// with everything they use.
Graph eliminate_dead_code(const Graph& g);

}  // namespace ff
