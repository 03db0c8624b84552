#include "inductor/schedule.h"

#include <map>

#include "inductor/lower.h"
#include "src/base/errors.h"
#include "src/base/logging.h"

namespace ff::inductor {

using loop::Kernel;
using loop::Program;
using loop::Step;

Program compile_to_loop_ir(const Graph& g, EagerDevice like) {
  std::vector<std::string> notes;
  std::map<std::string, std::vector<std::string>> logs;  // pass name -> its decisions
  Program p = lower_graph(g, &notes, like);
  for (const LoopPass& pass : schedule_passes()) {
    p = pass.run(p, &logs[pass.name]);
#ifndef NDEBUG
    std::string err = loop::verify_program(p);
    FF_CHECK(err.empty(), pass.name + " produced an invalid program: " + err + "\n" + loop::program_str(p));
#endif
  }
  std::string err = loop::verify_program(p);
  FF_CHECK(err.empty(), "scheduling produced an invalid program: " + err + "\n" + loop::program_str(p));
  if (log_enabled(LogArtifact::fusion)) {
    std::string msg = "fusion decisions:\n";
    for (auto& s : notes) msg += "  " + s + "\n";
    for (auto& s : logs["fuse_kernels"]) msg += "  " + s + "\n";
    log_emit(LogArtifact::fusion, msg);
  }
  if (log_enabled(LogArtifact::schedule)) {
    std::string msg = "schedule:\n";
    for (const Step& s : p.steps) {
      if (s.kind == Step::Kind::Kernel) {
        const Kernel& k = p.kernels[static_cast<size_t>(s.index)];
        msg += "  kernel " + k.name + " (outer loop " + k.root.extent.str() + ")\n";
      } else {
        const auto& e = p.externs[static_cast<size_t>(s.index)];
        msg += "  extern node " + std::to_string(e.node) + ": " + e.reason + "\n";
      }
    }
    for (auto& s : logs["plan_memory"]) msg += "  " + s + "\n";
    log_emit(LogArtifact::schedule, msg);
  }
  if (log_enabled(LogArtifact::output_code)) log_emit(LogArtifact::output_code, "loop IR:\n" + loop::program_str(p));
  return p;
}

}  // namespace ff::inductor
