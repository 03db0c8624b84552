#pragma once

#include "inductor/loop_ir.h"

namespace ff::inductor {

// A row loop that reduces an expensive value (sum of exp(x - max)) followed by a loop over the
// same row that stores an expression containing that value again (exp(x - max) / sum): the
// first loop stores the value into the output as it reduces it, the second reads it back (the
// row is still in cache) instead of computing it twice. Only for outputs stored in their
// compute type, so the value read back is bit-identical.
loop::Program reuse_reduced_values(const loop::Program& p);

}  // namespace ff::inductor
