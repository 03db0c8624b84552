// Dead-code elimination.
#pragma once

#include "graph/ir.h"

namespace ff {

// Removes calls and getitems whose results nothing needs. Kept: placeholders (the signature),
// the output and everything it uses, calls with side effects (in-place mutations, RNG draws) and
// calls that may raise for some values (effects.h: eager raises ZeroDivisionError for `x // x` of
// an integer tensor holding a zero even where the result is unused), with everything they use.
Graph eliminate_dead_code(const Graph& g);

}  // namespace ff
