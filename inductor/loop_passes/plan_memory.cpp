#include "inductor/loop_passes/plan_memory.h"

#include <algorithm>

namespace ff::inductor {

using loop::Expr;
using loop::ExprKind;
using loop::Kernel;
using loop::Program;
using loop::Step;
using loop::Stmt;
using loop::StmtKind;

Program plan_memory(const Program& p, std::vector<std::string>* log) {
  Program out = p;
  size_t nb = p.buffers.size();
  std::vector<int> first(nb, -1), last(nb, -1);
  std::vector<bool> eligible(nb, false);
  for (size_t b = 0; b < nb; ++b) eligible[b] = p.buffers[b].role == loop::BufferRole::Intermediate;
  for (const auto& e : p.externs)
    for (auto& [n, ref] : e.operands) eligible[static_cast<size_t>(ref.buf)] = false;
  for (auto& [n, ref] : p.outputs) eligible[static_cast<size_t>(ref.buf)] = false;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (p.steps[s].kind != Step::Kind::Kernel) continue;
    const Kernel& k = p.kernels[static_cast<size_t>(p.steps[s].index)];
    for (int b : k.buffers()) {
      if (first[static_cast<size_t>(b)] < 0) first[static_cast<size_t>(b)] = static_cast<int>(s);
      last[static_cast<size_t>(b)] = static_cast<int>(s);
    }
  }
  out.slot.assign(nb, -1);
  out.slot_bytes.clear();
  std::vector<int> slot_free_after;  // step after which the slot is free again
  for (size_t s = 0; s < p.steps.size(); ++s) {
    for (size_t b = 0; b < nb; ++b) {
      if (!eligible[b] || first[b] != static_cast<int>(s)) continue;
      int64_t bytes = loop::buffer_bytes(p.buffers[b]);
      int chosen = -1;
      for (size_t k = 0; k < out.slot_bytes.size(); ++k)
        if (slot_free_after[k] < static_cast<int>(s) && (chosen < 0 || out.slot_bytes[k] > out.slot_bytes[static_cast<size_t>(chosen)]))
          chosen = static_cast<int>(k);
      if (chosen < 0) {
        out.slot_bytes.push_back(bytes);
        slot_free_after.push_back(last[b]);
        chosen = static_cast<int>(out.slot_bytes.size()) - 1;
      } else {
        if (log) log->push_back("buf" + std::to_string(b) + " reuses the storage of slot " + std::to_string(chosen));
        out.slot_bytes[static_cast<size_t>(chosen)] = std::max(out.slot_bytes[static_cast<size_t>(chosen)], bytes);
        slot_free_after[static_cast<size_t>(chosen)] = last[b];
      }
      out.slot[b] = chosen;
    }
  }
  return out;
}

}  // namespace ff::inductor
