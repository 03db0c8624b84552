#pragma once

#include "inductor/loop_ir.h"

namespace ff::inductor {

// Drops stores to intermediates nothing reads any more, and kernels left without stores; in the
// kernels that stay, reductions and lets whose local nothing reads, and loops left empty.
loop::Program eliminate_dead_stores(const loop::Program& p);

}  // namespace ff::inductor
