// The scheduler: passes over a lowered loop IR Program that decide which kernels run together
// and where intermediates live. Pointwise chains are already fused by lowering (inlined
// expressions); these passes fuse at kernel level.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"
#include "inductor/loop_ir.h"
#include "inductor/lower.h"

namespace ff::inductor {

// Vertical fusion: a kernel that reads buffer B only at the index where B's producer stores it,
// inside loops that match the producer's enclosing loops, is appended to the producer's loop body
// and reads the value from a local instead (reductions with their prologue and epilogue: softmax
// and layer norm become one kernel per row block). Horizontal fusion: independent kernels over the
// same outer loop that read a common buffer share one loop. Each decision (and each refusal, with
// its reason) is appended to `log`.
loop::Program fuse_kernels(const loop::Program& p, std::vector<std::string>* log);

// Drops stores to intermediates nothing reads any more, and kernels left without stores.
loop::Program eliminate_dead_stores(const loop::Program& p);

// Assigns intermediates that only kernels touch to shared storage slots when their lifetimes
// (first write .. last read, in steps) do not overlap.
loop::Program plan_memory(const loop::Program& p, std::vector<std::string>* log);

// CPU threads split only a kernel's root loop: while that loop has fewer than `min_extent`
// iterations and its body is a single loop that itself holds loops (the innermost loop is never
// absorbed), the two become one loop over their product (the old
// variables are recovered by // and %, which LLVM hoists out of inner loops). A [1, 256, 768]
// epilogue then runs on every thread instead of one.
loop::Program collapse_outer_loops(const loop::Program& p, int64_t min_extent);

// A row loop that reduces an expensive value (sum of exp(x - max)) followed by a loop over the
// same row that stores an expression containing that value again (exp(x - max) / sum): the
// first loop stores the value into the output as it reduces it, the second reads it back (the
// row is still in cache) instead of computing it twice. Only for outputs stored in their
// compute type, so the value read back is bit-identical.
loop::Program reuse_reduced_values(const loop::Program& p);

// An elementwise epilogue of an extern call (conv -> batch_norm -> relu, mm -> bias -> gelu) that
// reads the extern's fresh result at the very element it stores, where nothing reads that result
// afterwards, stores into it instead of into a new buffer (no allocation, no write-allocate
// traffic). Only after extern ops that always return new memory (convolutions, matrix products).
loop::Program write_epilogues_in_place(const loop::Program& p, std::vector<std::string>* log);

// The whole pipeline: lower, fuse, eliminate dead stores, plan memory; verifies after each pass
// and logs (`schedule`, `fusion`, `output_code` artifacts) when enabled.
loop::Program compile_to_loop_ir(const Graph& g, EagerDevice like = EagerDevice::CPU);

}  // namespace ff::inductor
