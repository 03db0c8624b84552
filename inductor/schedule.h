// The scheduler: lowering followed by the loop passes that decide which kernels run together and
// where intermediates live (loop_passes/: one file per pass, listed in loop_passes.h). Pointwise
// chains are already fused by lowering (inlined expressions); these passes fuse at kernel level.
#pragma once

#include "graph/ir.h"
#include "inductor/loop_ir.h"
#include "inductor/loop_passes/loop_passes.h"
#include "inductor/lower.h"

namespace ff::inductor {

// Lowering, then schedule_passes() in order (fuse_kernels, eliminate_dead_stores, plan_memory);
// verifies the result (debug builds: after each pass) and logs the `fusion`, `schedule` and
// `output_code` artifacts when enabled.
loop::Program compile_to_loop_ir(const Graph& g, EagerDevice like = EagerDevice::CPU);

}  // namespace ff::inductor
