#include "inductor/schedule.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "graph/op_registry.h"
#include "inductor/lower.h"
#include "src/errors.h"
#include "src/logging.h"

namespace ff::inductor {

using loop::Expr;
using loop::ExprKind;
using loop::Kernel;
using loop::Program;
using loop::Step;
using loop::Stmt;
using loop::StmtKind;

namespace {

// ---- renaming -----------------------------------------------------------------------------

struct Rename {
  std::map<int, int> vars;
  int local_offset = 0;
  std::map<int, int> replace;  // loads of buffer -> that local (already in the target's numbering)
};

Expr rename(const Expr& e, const Rename& r) {
  if (e->kind == ExprKind::Var) {
    auto it = r.vars.find(e->id);
    FF_CHECK(it != r.vars.end(), "unmapped loop variable v" + std::to_string(e->id));
    return loop::var(it->second);
  }
  if (e->kind == ExprKind::Local) return loop::local(e->id + r.local_offset, e->type);
  if (e->kind == ExprKind::Load) {
    auto it = r.replace.find(e->id);
    if (it != r.replace.end()) return loop::local(it->second, e->type);
  }
  if (e->args.empty()) return e;
  auto n = std::make_shared<loop::ExprNode>(*e);
  for (auto& a : n->args) a = rename(a, r);
  return n;
}

Stmt rename(const Stmt& s, const Rename& r) {
  Stmt o = s;
  if (s.kind == StmtKind::Loop) {
    auto it = r.vars.find(s.var);
    FF_CHECK(it != r.vars.end(), "unmapped loop variable");
    o.var = it->second;
  }
  if (s.local >= 0) o.local = s.local + r.local_offset;
  if (s.index) o.index = rename(s.index, r);
  if (s.value) o.value = rename(s.value, r);
  for (auto& c : o.body) c = rename(c, r);
  return o;
}

template <class Fn>
void walk_exprs(const Expr& e, Fn&& fn) {
  fn(e);
  for (const Expr& a : e->args) walk_exprs(a, fn);
}
template <class Fn>
void walk_stmts(const Stmt& s, Fn&& fn) {
  fn(s);
  for (const Stmt& c : s.body) walk_stmts(c, fn);
}
void collect_vars(const Stmt& s, std::set<int>* vars) {
  walk_stmts(s, [&](const Stmt& x) { if (x.kind == StmtKind::Loop) vars->insert(x.var); });
}

// The loops enclosing the single Store to `buf` in k (root first), and that store; false when
// the buffer is stored zero or several times.
bool store_path(Stmt& root, int buf, std::vector<Stmt*>* path, Stmt** store) {
  int count = 0;
  std::vector<Stmt*> cur;
  std::function<void(Stmt&)> rec = [&](Stmt& s) {
    if (s.kind == StmtKind::Store && s.buf == buf) {
      if (++count == 1) {
        *path = cur;
        *store = &s;
      }
      return;
    }
    if (s.kind != StmtKind::Loop) return;
    cur.push_back(&s);
    for (Stmt& c : s.body) rec(c);
    cur.pop_back();
  };
  rec(root);
  return count == 1;
}

// The perfect nest of k's first `depth` loops (each body a single loop), or empty.
std::vector<const Stmt*> perfect_prefix(const Stmt& root, size_t depth) {
  std::vector<const Stmt*> out;
  const Stmt* s = &root;
  while (out.size() < depth) {
    if (s->kind != StmtKind::Loop) return {};
    out.push_back(s);
    if (out.size() == depth) break;
    if (s->body.size() != 1) return {};
    s = &s->body[0];
  }
  return out;
}

struct Fuser {
  Program p;
  std::vector<std::string>* log;

  void say(const std::string& s) {
    if (log) log->push_back(s);
  }
  Kernel& kernel_at(size_t step) { return p.kernels[static_cast<size_t>(p.steps[step].index)]; }

  // Buffers that each step reads / writes, by step position. NB: computed once per program
  // state and dropped by commit(): every scan asks for them O(steps^2) times, and each walk of a
  // kernel's statements cost more than the whole fusion decision.
  std::vector<std::vector<int>> reads_, writes_;

  void compute_buffer_sets(size_t s) {
    const Step& st = p.steps[s];
    reads_[s].clear();
    writes_[s].clear();
    if (st.kind == Step::Kind::Kernel) {
      const Kernel& k = p.kernels[static_cast<size_t>(st.index)];
      reads_[s] = k.loaded_buffers();
      writes_[s] = k.stored_buffers();
      return;
    }
    const loop::ExternCall& e = p.externs[static_cast<size_t>(st.index)];
    for (auto& [n, ref] : e.operands) reads_[s].push_back(ref.buf);
    if (e.result >= 0) writes_[s].push_back(e.result);
  }
  void ensure_buffer_sets() {
    if (reads_.size() == p.steps.size()) return;
    reads_.assign(p.steps.size(), {});
    writes_.assign(p.steps.size(), {});
    for (size_t s = 0; s < p.steps.size(); ++s) compute_buffer_sets(s);
  }
  const std::vector<int>& reads(size_t s) const { return reads_[s]; }
  const std::vector<int>& writes(size_t s) const { return writes_[s]; }
  // Where the merged kernel of steps i < j may go: i when j can move up to i (everything it reads
  // exists before i or comes from i, and no step between writes what j reads or touches what j
  // writes); j when i can move down to j (no step between reads or writes what i writes, or
  // writes what i reads). -1: nowhere.
  // NB: the steps between matter for inputs that in-place ops write several times: x *= x then
  // x.fill_(2) then erf(x) must read the filled x, not the product.
  int placement(size_t i, size_t j) const {
    auto has = [](const std::vector<int>& v, int b) { return std::find(v.begin(), v.end(), b) != v.end(); };
    const auto &wi = writes(i), &ri = reads(i), &wj = writes(j), &rj = reads(j);
    std::set<int> before;
    // NB: an input a kernel writes (an in-place op on it) holds its new value only after that kernel.
    for (const auto& b : p.buffers)
      if (b.role == loop::BufferRole::Input && !b.mutated) before.insert(static_cast<int>(&b - p.buffers.data()));
    for (size_t s = 0; s < i; ++s)
      for (int b : writes(s)) before.insert(b);
    bool at_i = true, at_j = true;
    for (int b : rj)
      if (!before.count(b) && !has(wi, b)) at_i = false;
    for (size_t s = i + 1; s < j; ++s) {
      for (int b : writes(s)) {
        if (has(rj, b) || has(wj, b)) at_i = false;
        if (has(wi, b) || has(ri, b)) at_j = false;
      }
      for (int b : reads(s)) {
        if (has(wj, b)) at_i = false;
        if (has(wi, b)) at_j = false;
      }
    }
    return at_i ? static_cast<int>(i) : at_j ? static_cast<int>(j) : -1;
  }

  void commit(size_t i, size_t j, int at, Kernel merged) {
    size_t keep = static_cast<size_t>(at) == i ? i : j, drop = keep == i ? j : i;
    merged.name = kernel_at(i).name + "_" + kernel_at(j).name;
    kernel_at(keep) = std::move(merged);
    p.steps.erase(p.steps.begin() + static_cast<long>(drop));
    // Only the merged step's sets change; the dropped step's go.
    ensure_buffer_sets_sized_for_erase(drop);
    compute_buffer_sets(keep > drop ? keep - 1 : keep);
  }
  void ensure_buffer_sets_sized_for_erase(size_t drop) {
    FF_CHECK(reads_.size() == p.steps.size() + 1, "fusion: buffer sets out of step with the schedule");
    reads_.erase(reads_.begin() + static_cast<long>(drop));
    writes_.erase(writes_.begin() + static_cast<long>(drop));
  }

  // Vertical: the kernel at step j reads buffers the kernel at step i stores. Every such buffer
  // must be stored once, inside the same loops, and read by j only at the element stored.
  bool try_vertical(size_t i, size_t j) {
    const auto& stores = writes(i);
    std::vector<int> shared;
    for (int buf : reads(j))
      if (std::find(stores.begin(), stores.end(), buf) != stores.end()) shared.push_back(buf);
    if (shared.empty()) return false;
    Kernel a = kernel_at(i);  // NB: a copy: the checks below take pointers into it
    const Kernel& b = kernel_at(j);
    auto refuse = [&](const std::string& why) {
      say("no fusion " + a.name + " -> " + b.name + ": " + why);
      return false;
    };
    std::vector<Stmt*> path;
    std::vector<Stmt*> store_of(shared.size());
    for (size_t k = 0; k < shared.size(); ++k) {
      std::vector<Stmt*> pk;
      if (!store_path(a.root, shared[k], &pk, &store_of[k])) return refuse("buf" + std::to_string(shared[k]) + " is stored more than once");
      if (k == 0) path = pk;
      else if (pk != path) return refuse("the buffers it reads are stored in different loops");
    }
    auto bnest = perfect_prefix(b.root, path.size());
    if (bnest.size() != path.size()) return refuse(b.name + " has no perfect nest of " + std::to_string(path.size()) + " loops");
    Rename r;
    std::map<int, int> back;  // a var -> b var
    for (size_t t = 0; t < path.size(); ++t) {
      if (path[t]->extent != bnest[t]->extent) return refuse("loop extents differ");
      r.vars[bnest[t]->var] = path[t]->var;
      back[path[t]->var] = bnest[t]->var;
    }
    Rename to_b;
    to_b.vars = back;
    for (size_t k = 0; k < shared.size(); ++k) {
      bool only_path = true;
      walk_exprs(store_of[k]->index, [&](const Expr& e) { if (e->kind == ExprKind::Var && !back.count(e->id)) only_path = false; });
      if (!only_path) return refuse("buf" + std::to_string(shared[k]) + " is stored inside an inner loop");
      Expr want = rename(store_of[k]->index, to_b);
      bool ok = true;
      walk_stmts(b.root, [&](const Stmt& s) {
        for (const Expr* e : {&s.index, &s.value})
          if (*e) walk_exprs(*e, [&](const Expr& x) {
            if (x->kind == ExprKind::Load && x->id == shared[k] && !loop::expr_equal(x->args[0], want)) ok = false;
          });
      });
      if (!ok) return refuse(b.name + " reads buf" + std::to_string(shared[k]) + " at other elements than " + a.name + " writes");
    }
    int at = placement(i, j);
    if (at < 0) return refuse("a step in between reads " + a.name + "'s results");
    // Fresh ids for b's other loop variables and locals.
    std::set<int> bvars;
    collect_vars(b.root, &bvars);
    int next = a.num_vars;
    for (int v : bvars)
      if (!r.vars.count(v)) r.vars[v] = next++;
    r.local_offset = static_cast<int>(a.locals.size());
    Kernel merged = a;
    merged.num_vars = next;
    merged.locals.insert(merged.locals.end(), b.locals.begin(), b.locals.end());
    std::vector<int> value_local(shared.size());
    for (size_t k = 0; k < shared.size(); ++k) {
      if (store_of[k]->value->kind == ExprKind::Local) {  // already forwarded by an earlier fusion
        value_local[k] = store_of[k]->value->id;
        continue;
      }
      value_local[k] = static_cast<int>(merged.locals.size());
      merged.locals.push_back(store_of[k]->value->type);
      // Turn the store into Let + Store of the local, in the copy.
      std::vector<Stmt*> mpath;
      Stmt* mstore = nullptr;
      FF_CHECK(store_path(merged.root, shared[k], &mpath, &mstore), "store vanished");
      Stmt* parent = mpath.back();
      auto pos = std::find_if(parent->body.begin(), parent->body.end(), [&](const Stmt& s) { return &s == mstore; });
      FF_CHECK(pos != parent->body.end(), "store not in its loop");
      Stmt st = *pos;
      *pos = loop::let_stmt(value_local[k], st.value);
      st.value = loop::local(value_local[k], st.value->type);
      parent->body.insert(pos + 1, st);
    }
    std::vector<Stmt*> mpath;
    Stmt* mstore = nullptr;
    FF_CHECK(store_path(merged.root, shared[0], &mpath, &mstore), "store vanished");
    for (size_t k = 0; k < shared.size(); ++k) r.replace[shared[k]] = value_local[k];
    for (const Stmt& s : bnest.back()->body) mpath.back()->body.push_back(rename(s, r));
    std::string bufs;
    for (int buf : shared) bufs += (bufs.empty() ? "buf" : ", buf") + std::to_string(buf);
    say("fused " + a.name + " -> " + b.name + ": " + b.name + " reads " + bufs + " where " + a.name +
        " writes it, inside " + std::to_string(path.size()) + " shared loop(s)");
    commit(i, j, at, std::move(merged));
    return true;
  }

  bool try_horizontal(size_t i, size_t j) {
    if (kernel_at(i).root.extent != kernel_at(j).root.extent) return false;
    const auto &ra = reads(i), &rb = reads(j), &wa = writes(i), &wb = writes(j);
    for (int x : rb)
      if (std::find(wa.begin(), wa.end(), x) != wa.end()) return false;
    for (int x : ra)
      if (std::find(wb.begin(), wb.end(), x) != wb.end()) return false;
    bool shared = false;
    for (int x : ra) shared |= std::find(rb.begin(), rb.end(), x) != rb.end();
    if (!shared) return false;
    int at = placement(i, j);
    if (at < 0) return false;
    const Kernel& a = kernel_at(i);
    const Kernel& b = kernel_at(j);
    Rename r;
    std::set<int> bvars;
    collect_vars(b.root, &bvars);
    int next = a.num_vars;
    for (int v : bvars) r.vars[v] = v == b.root.var ? a.root.var : next++;
    r.local_offset = static_cast<int>(a.locals.size());
    Kernel merged = a;
    merged.num_vars = next;
    merged.locals.insert(merged.locals.end(), b.locals.begin(), b.locals.end());
    for (const Stmt& s : b.root.body) merged.root.body.push_back(rename(s, r));
    say("fused " + a.name + " + " + b.name + " horizontally: same outer loop (" + std::to_string(a.root.extent) +
        ") and a common input");
    commit(i, j, at, std::move(merged));
    return true;
  }

  bool step_once() {
    ensure_buffer_sets();
    for (size_t j = 0; j < p.steps.size(); ++j) {
      if (p.steps[j].kind != Step::Kind::Kernel) continue;
      for (size_t i = 0; i < j; ++i)
        if (p.steps[i].kind == Step::Kind::Kernel && try_vertical(i, j)) return true;
    }
    for (size_t j = 0; j < p.steps.size(); ++j) {
      if (p.steps[j].kind != Step::Kind::Kernel) continue;
      for (size_t i = 0; i < j; ++i)
        if (p.steps[i].kind == Step::Kind::Kernel && try_horizontal(i, j)) return true;
    }
    return false;
  }
};

// Drops Store statements to buffers not in `needed`.
void drop_stores(Stmt& s, const std::vector<bool>& needed) {
  auto& body = s.body;
  body.erase(std::remove_if(body.begin(), body.end(), [&](const Stmt& c) {
               return c.kind == StmtKind::Store && !needed[static_cast<size_t>(c.buf)];
             }), body.end());
  for (Stmt& c : body) drop_stores(c, needed);
}

// Drops the reductions and lets whose local nothing reads any more (the other half of a fused
// argmin whose result went unused), then loops left empty. NB: besides the wasted work, NVRTC
// 13.0 at -Ofast-compile=min crashed compiling such a dead reduction next to a live loop.
void drop_dead_locals(Kernel& k) {
  for (bool changed = true; changed;) {
    changed = false;
    std::set<int> read;
    walk_stmts(k.root, [&](const Stmt& s) {
      for (const Expr* e : {&s.index, &s.value})
        if (*e) walk_exprs(*e, [&](const Expr& x) { if (x->kind == ExprKind::Local && x->id != s.local) read.insert(x->id); });
    });
    std::function<void(Stmt&)> prune = [&](Stmt& s) {
      auto& body = s.body;
      size_t before = body.size();
      body.erase(std::remove_if(body.begin(), body.end(), [&](const Stmt& c) {
                   bool dead_local = (c.kind == StmtKind::Let || c.kind == StmtKind::Init || c.kind == StmtKind::Reduce) && !read.count(c.local);
                   return dead_local || (c.kind == StmtKind::Loop && c.body.empty());
                 }), body.end());
      changed |= body.size() != before;
      for (Stmt& c : body) prune(c);
    };
    prune(k.root);
  }
}

}  // namespace

Program fuse_kernels(const Program& p, std::vector<std::string>* log) {
  Fuser f{p, log};
  std::vector<std::string> scratch;
  // NB: refusals are logged only once the pass settles, so that retries do not repeat them.
  f.log = &scratch;
  while (f.step_once()) {
    for (auto& s : scratch)
      if (log && s.rfind("fused", 0) == 0) log->push_back(s);
    scratch.clear();
#ifndef NDEBUG
    // NB: after every fusion only in debug builds (it names the fusion that broke the program);
    // release builds verify the settled program once, below: per fusion it cost more than fusing.
    std::string err = loop::verify_program(f.p);
    FF_CHECK(err.empty(), "fusion produced an invalid program: " + err + "\n" + loop::program_str(f.p));
#endif
  }
  {
    std::string err = loop::verify_program(f.p);
    FF_CHECK(err.empty(), "fusion produced an invalid program: " + err + "\n" + loop::program_str(f.p));
  }
  if (log)
    for (auto& s : scratch) log->push_back(s);
  // Compact the kernel list to the ones still scheduled.
  Program out = f.p;
  out.kernels.clear();
  for (Step& s : out.steps)
    if (s.kind == Step::Kind::Kernel) {
      out.kernels.push_back(f.p.kernels[static_cast<size_t>(s.index)]);
      s.index = static_cast<int>(out.kernels.size()) - 1;
    }
  return out;
}

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

namespace {
Expr subst_vars(const Expr& e, const std::map<int, Expr>& m) {
  if (e->kind == ExprKind::Var) {
    auto it = m.find(e->id);
    return it == m.end() ? e : it->second;
  }
  if (e->args.empty()) return e;
  auto n = std::make_shared<loop::ExprNode>(*e);
  for (auto& a : n->args) a = subst_vars(a, m);
  return n;
}
void subst_vars(Stmt& s, const std::map<int, Expr>& m) {
  if (s.index) s.index = subst_vars(s.index, m);
  if (s.value) s.value = subst_vars(s.value, m);
  for (Stmt& c : s.body) subst_vars(c, m);
}
}  // namespace

namespace {

bool is_expensive(const Expr& e) {
  bool any = false;
  walk_exprs(e, [&](const Expr& x) {
    if (x->kind == ExprKind::Unary) {
      auto op = static_cast<loop::UnaryOp>(x->op);
      any |= op == loop::UnaryOp::Exp || op == loop::UnaryOp::Log || op == loop::UnaryOp::Sin || op == loop::UnaryOp::Cos ||
             op == loop::UnaryOp::Tanh || op == loop::UnaryOp::Erf || op == loop::UnaryOp::Tan || op == loop::UnaryOp::Expm1 ||
             op == loop::UnaryOp::Log1p || op == loop::UnaryOp::Exp2 ||
             op == loop::UnaryOp::Log2 || op == loop::UnaryOp::Log10;
    }
    if (x->kind == ExprKind::Binary && static_cast<loop::BinaryOp>(x->op) == loop::BinaryOp::Pow) any = true;
  });
  return any;
}

bool contains(const Expr& e, const Expr& target) {
  if (loop::expr_equal(e, target)) return true;
  for (const Expr& a : e->args)
    if (contains(a, target)) return true;
  return false;
}

Expr replace(const Expr& e, const Expr& target, const Expr& with) {
  if (loop::expr_equal(e, target)) return with;
  if (e->args.empty()) return e;
  auto n = std::make_shared<loop::ExprNode>(*e);
  for (auto& a : n->args) a = replace(a, target, with);
  return n;
}

bool touches_buffer(const Stmt& s, int buf) {
  bool hit = false;
  walk_stmts(s, [&](const Stmt& x) {
    if (x.kind == StmtKind::Store && x.buf == buf) hit = true;
    for (const Expr* e : {&x.index, &x.value})
      if (*e) walk_exprs(*e, [&](const Expr& y) { hit |= y->kind == ExprKind::Load && y->id == buf; });
  });
  return hit;
}

bool assigns_local(const Stmt& s, const std::set<int>& locals) {
  bool hit = false;
  walk_stmts(s, [&](const Stmt& x) {
    if ((x.kind == StmtKind::Let || x.kind == StmtKind::Init || x.kind == StmtKind::Reduce) && locals.count(x.local)) hit = true;
  });
  return hit;
}

// Tries the rewrite on body[i] (a loop with a Reduce) and body[j] (a loop whose only statement
// is a Store).
bool reuse_pair(Kernel& k, const Program& p, std::vector<Stmt>& body, size_t i, size_t j) {
  Stmt& l1 = body[i];
  Stmt& l2 = body[j];
  if (l1.kind != StmtKind::Loop || l2.kind != StmtKind::Loop || l1.extent != l2.extent) return false;
  if (l2.body.size() != 1 || l2.body[0].kind != StmtKind::Store) return false;
  Stmt& st = l2.body[0];
  const loop::Buffer& buf = p.buffers[static_cast<size_t>(st.buf)];
  if (buf.role == loop::BufferRole::Input || buf.role == loop::BufferRole::ExternResult) return false;
  for (size_t r = 0; r < l1.body.size(); ++r) {
    Stmt& red = l1.body[r];
    if (red.kind != StmtKind::Reduce || !is_expensive(red.value)) continue;
    if (loop::dtype_compute_type(buf.dtype) != red.value->type ||
        (buf.dtype != DType::Float32 && buf.dtype != DType::Float64))
      continue;
    std::map<int, Expr> to2{{l1.var, loop::var(l2.var)}}, to1{{l2.var, loop::var(l1.var)}};
    Expr target = subst_vars(red.value, to2);
    if (!contains(st.value, target)) continue;
    // The value must mean the same in both loops: no local it reads changes in between, and the
    // output is touched nowhere else in the kernel.
    std::set<int> reads;
    walk_exprs(red.value, [&](const Expr& x) {
      if (x->kind == ExprKind::Local) reads.insert(x->id);
    });
    bool ok = true;
    walk_exprs(red.value, [&](const Expr& x) { ok &= !(x->kind == ExprKind::Var && x->id == l2.var); });
    for (const Stmt& c : l1.body) ok &= !assigns_local(c, reads) || (&c == &red && !reads.count(red.local));
    for (size_t m = i + 1; m < j; ++m) ok &= !assigns_local(body[m], reads) && !touches_buffer(body[m], st.buf);
    walk_stmts(k.root, [&](const Stmt& x) {
      if (&x == &st) return;
      for (const Expr* e : {&x.index, &x.value})
        if (*e) walk_exprs(*e, [&](const Expr& y) { ok &= !(y->kind == ExprKind::Load && y->id == st.buf); });
      if (x.kind == StmtKind::Store && x.buf == st.buf && &x != &st) ok = false;
    });
    if (!ok) return false;
    int tmp = static_cast<int>(k.locals.size());
    k.locals.push_back(red.value->type);
    Expr index1 = subst_vars(st.index, to1);
    Expr value = red.value;
    red.value = loop::local(tmp, value->type);
    Stmt let = loop::let_stmt(tmp, value);
    Stmt store = loop::store_stmt(st.buf, index1, loop::local(tmp, value->type));
    st.value = replace(st.value, target, loop::load(st.buf, st.index, value->type));
    l1.body.insert(l1.body.begin() + static_cast<long>(r), {let, store});
    return true;
  }
  return false;
}

void reuse_in(Kernel& k, const Program& p, Stmt& s) {
  if (s.kind != StmtKind::Loop) return;
  for (size_t i = 0; i < s.body.size(); ++i)
    for (size_t j = i + 1; j < s.body.size(); ++j)
      if (reuse_pair(k, p, s.body, i, j)) break;
  for (Stmt& c : s.body) reuse_in(k, p, c);
}

}  // namespace

Program reuse_reduced_values(const Program& p) {
  Program out = p;
  for (Kernel& k : out.kernels) reuse_in(k, out, k.root);
  std::string err = loop::verify_program(out);
  FF_CHECK(err.empty(), "reusing reduced values produced an invalid program: " + err + "\n" + loop::program_str(out));
  return out;
}

namespace {
Expr rename_buffer(const Expr& e, int from, int to) {
  if (e->args.empty()) return e;
  auto n = std::make_shared<loop::ExprNode>(*e);
  if (n->kind == ExprKind::Load && n->id == from) n->id = to;
  for (auto& a : n->args) a = rename_buffer(a, from, to);
  return n;
}
void rename_buffer(Stmt& s, int from, int to) {
  if (s.kind == StmtKind::Store && s.buf == from) s.buf = to;
  if (s.index) s.index = rename_buffer(s.index, from, to);
  if (s.value) s.value = rename_buffer(s.value, from, to);
  for (Stmt& c : s.body) rename_buffer(c, from, to);
}
// The single Store at the bottom of a perfect loop nest, or nullptr.
Stmt* lone_store(Stmt& root) {
  Stmt* s = &root;
  while (s->kind == StmtKind::Loop) {
    if (s->body.size() != 1) return nullptr;
    s = &s->body[0];
  }
  return s->kind == StmtKind::Store ? s : nullptr;
}
}  // namespace

Program write_epilogues_in_place(const Program& p, std::vector<std::string>* log) {
  Program out = p;
  for (size_t s = 0; s < out.steps.size(); ++s) {
    if (out.steps[s].kind != Step::Kind::Kernel) continue;
    Kernel& k = out.kernels[static_cast<size_t>(out.steps[s].index)];
    Stmt* st = lone_store(k.root);
    if (!st) continue;
    int o = st->buf;
    const loop::Buffer& ob = out.buffers[static_cast<size_t>(o)];
    if (ob.role != loop::BufferRole::Intermediate && ob.role != loop::BufferRole::Output) continue;
    if (!out.slot.empty() && out.slot[static_cast<size_t>(o)] >= 0) continue;
    for (int e : k.loaded_buffers()) {
      const loop::Buffer& eb = out.buffers[static_cast<size_t>(e)];
      if (eb.role != loop::BufferRole::ExternResult || eb.dtype != ob.dtype || eb.sizes != ob.sizes || eb.strides != ob.strides) continue;
      bool fresh = false;
      for (const auto& x : out.externs)
        if (x.result == e && x.op != kNoOp) fresh = op_def(x.op).has(kExtern) && op_def(x.op).name != "einsum";
      if (!fresh) continue;
      bool same_element = true;
      walk_exprs(st->index, [&](const Expr& x) { same_element &= !(x->kind == ExprKind::Load && x->id == e); });
      walk_exprs(st->value, [&](const Expr& x) {
        if (x->kind == ExprKind::Load && x->id == e && !loop::expr_equal(x->args[0], st->index)) same_element = false;
      });
      if (!same_element) continue;
      // NB: a view of e that an extern call returned (v[0] of a product) is e's memory too: the
      // epilogue's values would show through it.
      std::vector<bool> is_e(out.buffers.size(), false);
      for (size_t b = 0; b < out.buffers.size(); ++b)
        for (int a = static_cast<int>(b); a >= 0 && !is_e[b]; a = out.buffers[static_cast<size_t>(a)].aliases) is_e[b] = a == e;
      bool read_later = false;
      for (size_t t = s + 1; t < out.steps.size(); ++t) {
        const Step& ts = out.steps[t];
        if (ts.kind == Step::Kind::Kernel) {
          for (int b : out.kernels[static_cast<size_t>(ts.index)].loaded_buffers()) read_later |= is_e[static_cast<size_t>(b)];
        } else {
          for (auto& [n, ref] : out.externs[static_cast<size_t>(ts.index)].operands) read_later |= is_e[static_cast<size_t>(ref.buf)];
        }
      }
      for (auto& [n, ref] : out.outputs) read_later |= is_e[static_cast<size_t>(ref.buf)];
      if (read_later) continue;
      st->buf = e;
      for (size_t t = s + 1; t < out.steps.size(); ++t) {
        const Step& ts = out.steps[t];
        if (ts.kind == Step::Kind::Kernel) {
          rename_buffer(out.kernels[static_cast<size_t>(ts.index)].root, o, e);
        } else {
          for (auto& [n, ref] : out.externs[static_cast<size_t>(ts.index)].operands)
            if (ref.buf == o) ref.buf = e;
        }
      }
      for (auto& [n, ref] : out.outputs)
        if (ref.buf == o) ref.buf = e;
      if (log) log->push_back(k.name + " writes buf" + std::to_string(o) + " into buf" + std::to_string(e) + " (the extern result it consumes)");
      break;
    }
  }
  std::string err = loop::verify_program(out);
  FF_CHECK(err.empty(), "in-place epilogues produced an invalid program: " + err + "\n" + loop::program_str(out));
  return out;
}

Program collapse_outer_loops(const Program& p, int64_t min_extent) {
  Program out = p;
  for (Kernel& k : out.kernels) {
    // NB: only while the inner loop still holds loops: the innermost loop must stay a loop of
    // its own (unit stride, vectorized), never an index split by // and %.
    auto holds_loop = [](const Stmt& s) {
      return std::any_of(s.body.begin(), s.body.end(), [](const Stmt& c) { return c.kind == StmtKind::Loop; });
    };
    while (k.root.extent < min_extent && k.root.body.size() == 1 && k.root.body[0].kind == StmtKind::Loop &&
           holds_loop(k.root.body[0])) {
      Stmt inner = std::move(k.root.body[0]);
      int64_t a = k.root.extent, b = inner.extent;
      if (a <= 0 || b <= 0 || a > (int64_t{1} << 40) / b) {
        k.root.body[0] = std::move(inner);
        break;
      }
      int w = k.num_vars++;
      std::map<int, Expr> m;
      m[k.root.var] = loop::binary(loop::BinaryOp::FloorDiv, loop::var(w), loop::const_int(b));
      m[inner.var] = loop::binary(loop::BinaryOp::Mod, loop::var(w), loop::const_int(b));
      for (Stmt& c : inner.body) subst_vars(c, m);
      k.root = loop::loop_stmt(w, a * b, std::move(inner.body), /*parallel=*/true);
    }
  }
  std::string err = loop::verify_program(out);
  FF_CHECK(err.empty(), "collapsing loops produced an invalid program: " + err + "\n" + loop::program_str(out));
  return out;
}

Program compile_to_loop_ir(const Graph& g, EagerDevice like) {
  std::vector<std::string> notes, fusion_log, mem_log;
  Program p = lower_graph(g, &notes, like);
  p = fuse_kernels(p, &fusion_log);
  p = eliminate_dead_stores(p);
  p = plan_memory(p, &mem_log);
  std::string err = loop::verify_program(p);
  FF_CHECK(err.empty(), "scheduling produced an invalid program: " + err + "\n" + loop::program_str(p));
  if (log_enabled(LogArtifact::fusion)) {
    std::string msg = "fusion decisions:\n";
    for (auto& s : notes) msg += "  " + s + "\n";
    for (auto& s : fusion_log) msg += "  " + s + "\n";
    log_emit(LogArtifact::fusion, msg);
  }
  if (log_enabled(LogArtifact::schedule)) {
    std::string msg = "schedule:\n";
    for (const Step& s : p.steps) {
      if (s.kind == Step::Kind::Kernel) {
        const Kernel& k = p.kernels[static_cast<size_t>(s.index)];
        msg += "  kernel " + k.name + " (outer loop " + std::to_string(k.root.extent) + ")\n";
      } else {
        const auto& e = p.externs[static_cast<size_t>(s.index)];
        msg += "  extern node " + std::to_string(e.node) + ": " + e.reason + "\n";
      }
    }
    for (auto& s : mem_log) msg += "  " + s + "\n";
    log_emit(LogArtifact::schedule, msg);
  }
  if (log_enabled(LogArtifact::output_code)) log_emit(LogArtifact::output_code, "loop IR:\n" + loop::program_str(p));
  return p;
}

}  // namespace ff::inductor
