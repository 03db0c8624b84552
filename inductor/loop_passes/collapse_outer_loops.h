#pragma once

#include <cstdint>

#include "inductor/loop_ir.h"

namespace ff::inductor {

// CPU threads split only a kernel's root loop: while that loop has fewer than `min_extent`
// iterations and its body is a single loop that itself holds loops (the innermost loop is never
// absorbed), the two become one loop over their product (the old variables are recovered by //
// and %, which LLVM hoists out of inner loops). A [1, 256, 768] epilogue then runs on every
// thread instead of one.
loop::Program collapse_outer_loops(const loop::Program& p, int64_t min_extent);

}  // namespace ff::inductor
