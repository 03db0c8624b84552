#pragma once

#include <string>
#include <vector>

#include "inductor/loop_ir.h"

namespace ff::inductor {

// Assigns intermediates that only kernels touch to shared storage slots when their lifetimes
// (first write .. last read, in steps) do not overlap (Program::slot, Program::slot_bytes).
// Each reuse is appended to `log`.
loop::Program plan_memory(const loop::Program& p, std::vector<std::string>* log);

}  // namespace ff::inductor
