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

BufferLifetimes buffer_lifetimes(const Program& p) {
  BufferLifetimes life;
  life.first.assign(p.buffers.size(), -1);
  life.last.assign(p.buffers.size(), -1);
  auto touch = [&](int b, size_t step) {
    if (life.first[static_cast<size_t>(b)] < 0) life.first[static_cast<size_t>(b)] = static_cast<int>(step);
    life.last[static_cast<size_t>(b)] = static_cast<int>(step);
  };
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    if (st.kind == Step::Kind::Kernel) {
      for (int b : p.kernels[static_cast<size_t>(st.index)].buffers()) touch(b, s);
    } else {
      const loop::ExternCall& e = p.externs[static_cast<size_t>(st.index)];
      for (auto& [nid, ref] : e.operands) touch(ref.buf, s);
      if (e.result >= 0) touch(e.result, s);
    }
  }
  return life;
}

StepAllocations step_allocations(const Program& p, const BufferLifetimes& life) {
  StepAllocations plan;
  plan.alloc_at.assign(p.steps.size(), {});
  plan.free_after.assign(p.steps.size(), {});
  auto is_output = [&](size_t b) {
    for (auto& [nid, ref] : p.outputs)
      if (ref.buf == static_cast<int>(b)) return true;
    return false;
  };
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    loop::BufferRole role = p.buffers[b].role;
    bool made = role == loop::BufferRole::Intermediate || role == loop::BufferRole::Output;
    if (life.first[b] < 0) {
      if (made && is_output(b)) plan.unstored_outputs.push_back(static_cast<int>(b));
      continue;
    }
    if (made) plan.alloc_at[static_cast<size_t>(life.first[b])].push_back(static_cast<int>(b));
    if ((role == loop::BufferRole::Intermediate || role == loop::BufferRole::ExternResult) && !is_output(b))
      plan.free_after[static_cast<size_t>(life.last[b])].push_back(static_cast<int>(b));
  }
  return plan;
}

Program plan_memory(const Program& p, std::vector<std::string>* log) {
  Program out = p;
  size_t nb = p.buffers.size();
  // NB: an intermediate that an extern call reads is not eligible, so the extern steps in the
  // lifetimes change nothing here.
  BufferLifetimes life = buffer_lifetimes(p);
  const std::vector<int>& first = life.first;
  const std::vector<int>& last = life.last;
  std::vector<bool> eligible(nb, false);
  // NB: symbolic sizes are known per call only: such buffers are allocated on their own.
  for (size_t b = 0; b < nb; ++b)
    eligible[b] = p.buffers[b].role == loop::BufferRole::Intermediate && !p.buffers[b].sizes.is_symbolic() &&
                  !p.buffers[b].strides.is_symbolic();
  for (const auto& e : p.externs) {
    for (auto& [n, ref] : e.operands) eligible[static_cast<size_t>(ref.buf)] = false;
    if (e.result >= 0) eligible[static_cast<size_t>(e.result)] = false;
  }
  for (auto& [n, ref] : p.outputs) eligible[static_cast<size_t>(ref.buf)] = false;
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
