#include "inductor/loop_passes/eliminate_dead_stores.h"

#include <algorithm>
#include <set>
#include <vector>

#include "inductor/loop_visitor.h"

namespace ff::inductor {

using loop::Expr;
using loop::ExprKind;
using loop::Kernel;
using loop::Program;
using loop::Step;
using loop::Stmt;
using loop::StmtKind;

namespace {

// Drops Store statements to buffers not in `needed`.
void drop_stores(Stmt& root, const std::vector<bool>& needed) {
  loop::for_each_stmt(root, [&](Stmt& s) {
    auto& body = s.body;
    body.erase(std::remove_if(body.begin(), body.end(), [&](const Stmt& c) {
                 return c.kind == StmtKind::Store && !needed[static_cast<size_t>(c.buf)];
               }),
               body.end());
  });
}

// Drops the reductions and lets whose local nothing reads any more (the other half of a fused
// argmin whose result went unused), then loops left empty. NB: besides the wasted work, NVRTC
// 13.0 at -Ofast-compile=min crashed compiling such a dead reduction next to a live loop.
void drop_dead_locals(Kernel& k) {
  for (bool changed = true; changed;) {
    changed = false;
    std::set<int> read;
    loop::for_each_stmt(k.root, [&](const Stmt& s) {
      for (const Expr* e : {&s.index, &s.value})
        if (*e) loop::for_each_expr(*e, [&](const Expr& x) {
          if (x->kind == ExprKind::Local && x->id != s.local) read.insert(x->id);
        });
    });
    loop::for_each_stmt(k.root, [&](Stmt& s) {
      auto& body = s.body;
      size_t before = body.size();
      body.erase(std::remove_if(body.begin(), body.end(), [&](const Stmt& c) {
                   bool dead_local = (c.kind == StmtKind::Let || c.kind == StmtKind::Init || c.kind == StmtKind::Reduce) && !read.count(c.local);
                   return dead_local || (c.kind == StmtKind::Loop && c.body.empty());
                 }),
                 body.end());
      changed |= body.size() != before;
    });
  }
}

}  // namespace

Program eliminate_dead_stores(const Program& p) {
  std::vector<bool> needed(p.buffers.size(), false);
  for (size_t b = 0; b < p.buffers.size(); ++b) needed[b] = p.buffers[b].role != loop::BufferRole::Intermediate;
  for (const Kernel& k : p.kernels)
    for (int b : k.loaded_buffers()) needed[static_cast<size_t>(b)] = true;
  for (const auto& e : p.externs)
    for (auto& [n, ref] : e.operands) needed[static_cast<size_t>(ref.buf)] = true;
  for (auto& [n, ref] : p.outputs) needed[static_cast<size_t>(ref.buf)] = true;
  Program out = p;
  out.kernels.clear();
  std::vector<Step> steps;
  for (const Step& s : p.steps) {
    if (s.kind == Step::Kind::Extern) {
      steps.push_back(s);
      continue;
    }
    Kernel k = p.kernels[static_cast<size_t>(s.index)];
    drop_stores(k.root, needed);
    if (k.stored_buffers().empty()) continue;
    drop_dead_locals(k);
    out.kernels.push_back(std::move(k));
    steps.push_back({Step::Kind::Kernel, static_cast<int>(out.kernels.size()) - 1});
  }
  out.steps = std::move(steps);
  return out;
}

}  // namespace ff::inductor
