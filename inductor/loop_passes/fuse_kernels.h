// Kernel-level fusion. Pointwise chains are already fused by lowering (inlined expressions);
// this pass merges whole kernels.
#pragma once

#include <string>
#include <vector>

#include "inductor/loop_ir.h"

namespace ff::inductor {

// Vertical fusion: a kernel that reads buffer B only at the index where B's producer stores it,
// inside loops that match the producer's enclosing loops, is appended to the producer's loop body
// and reads the value from a local instead (reductions with their prologue and epilogue: softmax
// and layer norm become one kernel per row block). Horizontal fusion: independent kernels over the
// same outer loop that read a common buffer share one loop, where that loop has at least
// `min_horizontal_extent` iterations (a GPU runs the shared loop's iterations in parallel and each
// one's body serially: two pointwise nests under a short outer loop would lose their parallelism).
// Each decision (and each refusal, with its reason) is appended to `log`.
loop::Program fuse_kernels(const loop::Program& p, std::vector<std::string>* log, int64_t min_horizontal_extent = 0);

}  // namespace ff::inductor
