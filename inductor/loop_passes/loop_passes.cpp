#include "inductor/loop_passes/loop_passes.h"

namespace ff::inductor {

std::vector<LoopPass> schedule_passes() {
  return {
      {"fuse_kernels", [](const loop::Program& p, std::vector<std::string>* log) { return fuse_kernels(p, log); }},
      {"eliminate_dead_stores", [](const loop::Program& p, std::vector<std::string>*) { return eliminate_dead_stores(p); }},
      {"plan_memory", plan_memory},
  };
}

std::vector<LoopPass> cpu_loop_passes(int64_t min_root_extent) {
  return {
      {"reuse_reduced_values", [](const loop::Program& p, std::vector<std::string>*) { return reuse_reduced_values(p); }},
      {"write_epilogues_in_place", write_epilogues_in_place},
      {"collapse_outer_loops",
       [min_root_extent](const loop::Program& p, std::vector<std::string>*) { return collapse_outer_loops(p, min_root_extent); }},
  };
}

loop::Program run_loop_passes(const loop::Program& p, const std::vector<LoopPass>& passes) {
  loop::Program out = p;
  for (const LoopPass& pass : passes) out = pass.run(out, nullptr);
  return out;
}

}  // namespace ff::inductor
