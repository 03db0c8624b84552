#include "inductor/loop_passes/fuse_kernels.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "inductor/loop_visitor.h"
#include "src/base/errors.h"

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

// Renumbers a kernel's loop variables and locals into another kernel's, and reads the buffers
// in `replace` from locals.
struct Rename : loop::Mutator {
  std::map<int, int> vars;
  int local_offset = 0;
  std::map<int, int> replace;  // loads of buffer -> that local (already in the target's numbering)

  Expr mutate_Var(const Expr& e) override {
    auto it = vars.find(e->id);
    FF_CHECK(it != vars.end(), "unmapped loop variable v" + std::to_string(e->id));
    return loop::var(it->second);
  }
  Expr mutate_Local(const Expr& e) override { return loop::local(e->id + local_offset, e->type); }
  Expr mutate_Load(const Expr& e) override {
    auto it = replace.find(e->id);
    if (it != replace.end()) return loop::local(it->second, e->type);
    return mutate_children(e);
  }
  void mutate_Loop(Stmt& s) override {
    auto it = vars.find(s.var);
    FF_CHECK(it != vars.end(), "unmapped loop variable");
    s.var = it->second;
    mutate_children(s);
  }
  void mutate_Let(Stmt& s) override { renumber_local(s); }
  void mutate_Init(Stmt& s) override { renumber_local(s); }
  void mutate_Reduce(Stmt& s) override { renumber_local(s); }
  void renumber_local(Stmt& s) {
    s.local += local_offset;
    mutate_children(s);
  }
  // A renamed copy of s.
  Stmt operator()(const Stmt& s) {
    Stmt o = s;
    mutate(o);
    return o;
  }
};

std::set<int> loop_vars(const Stmt& s) {
  std::set<int> vars;
  loop::for_each_stmt(s, [&](const Stmt& x) {
    if (x.kind == StmtKind::Loop) vars.insert(x.var);
  });
  return vars;
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
  int64_t min_horizontal_extent = 0;

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
    return at_i ? static_cast<int>(i) : at_j ? static_cast<int>(j)
                                             : -1;
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
      if (!path[t]->extent.same_as(bnest[t]->extent)) return refuse("loop extents differ");
      r.vars[bnest[t]->var] = path[t]->var;
      back[path[t]->var] = bnest[t]->var;
    }
    Rename to_b;
    to_b.vars = back;
    for (size_t k = 0; k < shared.size(); ++k) {
      bool only_path = true;
      loop::for_each_expr(store_of[k]->index, [&](const Expr& e) {
        if (e->kind == ExprKind::Var && !back.count(e->id)) only_path = false;
      });
      if (!only_path) return refuse("buf" + std::to_string(shared[k]) + " is stored inside an inner loop");
      Expr want = to_b.mutate(store_of[k]->index);
      bool ok = true;
      loop::for_each_expr_in(b.root, [&](const Expr& x) {
        if (x->kind == ExprKind::Load && x->id == shared[k] && !loop::expr_equal(x->args[0], want)) ok = false;
      });
      if (!ok) return refuse(b.name + " reads buf" + std::to_string(shared[k]) + " at other elements than " + a.name + " writes");
    }
    int at = placement(i, j);
    if (at < 0) return refuse("a step in between reads " + a.name + "'s results");
    // Fresh ids for b's other loop variables and locals.
    std::set<int> bvars = loop_vars(b.root);
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
    for (const Stmt& s : bnest.back()->body) mpath.back()->body.push_back(r(s));
    std::string bufs;
    for (int buf : shared) bufs += (bufs.empty() ? "buf" : ", buf") + std::to_string(buf);
    say("fused " + a.name + " -> " + b.name + ": " + b.name + " reads " + bufs + " where " + a.name +
        " writes it, inside " + std::to_string(path.size()) + " shared loop(s)");
    commit(i, j, at, std::move(merged));
    return true;
  }

  bool try_horizontal(size_t i, size_t j) {
    if (!kernel_at(i).root.extent.same_as(kernel_at(j).root.extent)) return false;
    if (kernel_at(i).root.extent.hint() < min_horizontal_extent) return false;  // NB: a heuristic: the traced size does
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
    std::set<int> bvars = loop_vars(b.root);
    int next = a.num_vars;
    for (int v : bvars) r.vars[v] = v == b.root.var ? a.root.var : next++;
    r.local_offset = static_cast<int>(a.locals.size());
    Kernel merged = a;
    merged.num_vars = next;
    merged.locals.insert(merged.locals.end(), b.locals.begin(), b.locals.end());
    for (const Stmt& s : b.root.body) merged.root.body.push_back(r(s));
    say("fused " + a.name + " + " + b.name + " horizontally: same outer loop (" + a.root.extent.str() +
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

}  // namespace

Program fuse_kernels(const Program& p, std::vector<std::string>* log, int64_t min_horizontal_extent) {
  Fuser f{p, log, min_horizontal_extent};
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

}  // namespace ff::inductor
