// The loop passes as a list a pipeline can run one by one: each has a name (the file it lives
// in), and a function of one signature. A pipeline runs them in list order and may log, time,
// verify (loop::verify_program) or print (loop::program_str) the program after each.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "inductor/loop_ir.h"
#include "inductor/loop_passes/collapse_outer_loops.h"
#include "inductor/loop_passes/eliminate_dead_stores.h"
#include "inductor/loop_passes/fuse_kernels.h"
#include "inductor/loop_passes/plan_memory.h"
#include "inductor/loop_passes/reuse_reduced_values.h"
#include "inductor/loop_passes/write_epilogues_in_place.h"

namespace ff::inductor {

// A pass appends one line per decision it took (or refused) to `log` when it is not null.
using LoopPassFn = std::function<loop::Program(const loop::Program&, std::vector<std::string>* log)>;

struct LoopPass {
  std::string name;
  LoopPassFn run;
};

// After lowering, on every device: fuse_kernels, eliminate_dead_stores, plan_memory.
std::vector<LoopPass> schedule_passes();

// Then on the CPU only: reuse_reduced_values, write_epilogues_in_place, collapse_outer_loops
// (root loops shorter than `min_root_extent` absorb their inner loop).
std::vector<LoopPass> cpu_loop_passes(int64_t min_root_extent);

// p after each pass of `passes` in turn (no verification, no logging).
loop::Program run_loop_passes(const loop::Program& p, const std::vector<LoopPass>& passes);

}  // namespace ff::inductor
