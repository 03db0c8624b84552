#pragma once

#include <string>
#include <vector>

#include "inductor/loop_ir.h"

namespace ff::inductor {

// Assigns intermediates that only kernels touch to shared storage slots when their lifetimes
// (first write .. last read, in steps) do not overlap (Program::slot, Program::slot_bytes).
// Each reuse is appended to `log`.
loop::Program plan_memory(const loop::Program& p, std::vector<std::string>* log);

// The first and last step that touches each buffer (-1: none): a kernel that reads or writes it, an
// extern call that takes it as an operand or writes its result. The lifetimes plan_memory shares
// slots by, and the CUDA runtime allocates and frees by (step_allocations).
struct BufferLifetimes {
  std::vector<int> first, last;
};
BufferLifetimes buffer_lifetimes(const loop::Program& p);

// The plan of a runtime that allocates buffers as the steps need them (the CUDA runtime): per
// step, the intermediates and outputs to allocate before it and the intermediates and extern
// results to free after it (never a graph output), and the outputs no step writes (no elements:
// Lowerer::store_kernel stores nothing), made all the same.
struct StepAllocations {
  std::vector<std::vector<int>> alloc_at, free_after;  // [step] -> buffers
  std::vector<int> unstored_outputs;
};
StepAllocations step_allocations(const loop::Program& p, const BufferLifetimes& life);

}  // namespace ff::inductor
