// Kernel strategies: how a loop IR kernel's loops map onto the grid (see cuda_render.h).
#include "inductor/cuda/cuda_render.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <functional>
#include <set>
#include <sstream>

#include "inductor/cuda/cuda_codegen.h"
#include "inductor/math_library.h"
#include "src/base/errors.h"

namespace ff::cuda {

using loop::Expr;
using loop::ExprKind;
using loop::Kernel;
using loop::Program;
using loop::Stmt;
using loop::StmtKind;
using namespace detail;

const char* strategy_name(Strategy s) {
  switch (s) {
#define FF_CUDA_STRATEGY_NAME(e) \
  case Strategy::e:              \
    return #e;
    FF_CUDA_STRATEGIES(FF_CUDA_STRATEGY_NAME)
#undef FF_CUDA_STRATEGY_NAME
  }
  return "?";
}

namespace {

// The perfect nest under the kernel root, flattened into rows.
struct Nest {
  std::vector<const Stmt*> chain;  // root first
  const std::vector<Stmt>* body = nullptr;
  SymInt rows = 1;
};

// Dynamic shapes: extents may be symbolic. What the source relies on must hold at every binding
// (divisibility is decided exactly: sym_divisible); heuristics (thread shapes, strategies) read
// the traced values; `wide` indexes are checked per binding by the runtime (needs_wide_index).
bool is_one(const SymInt& x) { return !x.is_symbolic() && x.hint() == 1; }
int64_t hint_of(const SymInt& x) { return x.hint(); }

Nest find_nest(const Stmt& root) {
  Nest n;
  const Stmt* cur = &root;
  n.chain.push_back(cur);
  while (cur->body.size() == 1 && cur->body[0].kind == StmtKind::Loop) {
    cur = &cur->body[0];
    n.chain.push_back(cur);
  }
  n.body = &cur->body;
  for (const Stmt* l : n.chain) n.rows = n.rows * l->extent;
  return n;
}

bool has_loop(const std::vector<Stmt>& body) {
  for (const Stmt& s : body)
    if (s.kind == StmtKind::Loop) return true;
  return false;
}

int64_t pow2_at_least(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Whether any index can reach 2^30: then indices are 64-bit. At the traced sizes for a symbolic
// kernel (the runtime checks each binding's program with needs_wide_index).
bool wide_at_hints(const Program& p, const Kernel& k, const Nest& n) {
  constexpr int64_t kLimit = int64_t(1) << 30;
  if (hint_of(n.rows) >= kLimit) return true;
  for (int b : k.buffers()) {
    const loop::Buffer& buf = p.buffers.at(static_cast<size_t>(b));
    int64_t span = 1;
    for (size_t d = 0; d < buf.sizes.size(); ++d) {
      if (hint_of(buf.sizes[d]) == 0) span = 0;
      if (span == 0) break;
      span += (hint_of(buf.sizes[d]) - 1) * hint_of(buf.strides[d]);
    }
    if (span >= kLimit) return true;
  }
  bool wide = false;
  for_each_stmt(k.root, [&](const Stmt& s) { wide |= s.kind == StmtKind::Loop && hint_of(s.extent) >= kLimit; });
  return wide;
}

// Assigns the chain's loop variables from a flat row index `flat` (last loop fastest).
void bind_chain(Emitter& em, const Nest& n, const std::string& flat, int indent) {
  SymInt inner = 1;
  for (size_t i = n.chain.size(); i-- > 0;) {
    const Stmt* l = n.chain[i];
    std::string v = "v" + std::to_string(l->var);
    std::string e;
    std::string outer = is_one(inner) ? flat : "(" + flat + " / " + em.size(inner) + ")";
    if (is_one(l->extent)) e = "0";
    else if (i == 0) e = outer;
    else e = "(" + outer + " % " + em.size(l->extent) + ")";
    em.line(indent, std::string("const ") + em.ix() + " " + v + " = " + e + ";");
    em.bind_var(l->var, v);
    inner = inner * l->extent;
  }
}

// Affine index `a` is the vector lane index `lane_var` plus terms that keep VEC alignment.
bool vector_index(const loop::Affine& a, int lane_var, int vec, const std::function<int64_t(int)>& other_coef_ok) {
  bool has_lane = false;
  for (auto [v, c] : a.terms) {
    if (v == lane_var) {
      if (c != 1) return false;
      has_lane = true;
    } else if (other_coef_ok(v) < 0 || c % vec != 0) {
      return false;
    }
  }
  return has_lane && a.offset % vec == 0;
}

struct VecPlan {
  int vec = 1;
  // node -> (buf, index key); the key names the lane variable "L", so the same element read by
  // two passes over a row (each with its own lane variable) has the same key.
  std::map<const loop::ExprNode*, std::pair<int, std::string>> loads;
  std::map<const Stmt*, int> stores;                                    // stmt -> buf
};

// Which loads/stores of `stmts` (straight-line code, one vector lane per value of `lane_var`) can
// move whole ff_vec registers, and the widest VEC (16 bytes) they allow with `extent`.
VecPlan plan_vectors(const Program& p, const Kernel& k, const std::vector<const Stmt*>& stmts, int lane_var,
                     const SymInt& extent, const std::set<int>& allowed_vars) {
  VecPlan vp;
  std::set<int> stored;
  for (int b : k.stored_buffers()) stored.insert(b);
  std::set<int> loaded;
  for (int b : k.loaded_buffers()) loaded.insert(b);
  auto ok_var = [&](int v) -> int64_t { return allowed_vars.count(v) ? 1 : -1; };
  int max_size = 0;
  std::vector<std::pair<const loop::ExprNode*, int>> loads;
  std::vector<std::pair<const Stmt*, int>> stores;
  for (const Stmt* s : stmts) {
    auto visit = [&](const Expr& e) {
      if (e->kind != ExprKind::Load || stored.count(e->id)) return;
      loop::Affine a;
      if (as_affine(e->args[0], &a) && vector_index(a, lane_var, 1, ok_var)) loads.push_back({e.get(), e->id});
    };
    if (s->value) for_each_expr(s->value, visit);
    if (s->kind == StmtKind::Store && !loaded.count(s->buf)) {
      loop::Affine a;
      if (as_affine(s->index, &a) && vector_index(a, lane_var, 1, ok_var)) stores.push_back({s, s->buf});
    }
  }
  for (auto& [n, b] : loads) max_size = std::max(max_size, dtype_size(p.buffers[static_cast<size_t>(b)].dtype));
  for (auto& [s, b] : stores) max_size = std::max(max_size, dtype_size(p.buffers[static_cast<size_t>(b)].dtype));
  if (max_size == 0) return vp;
  int vec = std::min(8, 16 / max_size);
  while (vec > 1 && !sym_divisible(extent, vec)) vec /= 2;
  if (vec <= 1) return vp;
  // Keep only accesses whose other terms and offset stay multiples of vec.
  for (auto& [n, b] : loads) {
    loop::Affine a;
    as_affine(n->args[0], &a);
    if (!vector_index(a, lane_var, vec, ok_var)) continue;
    std::string key = "b" + std::to_string(b);
    for (auto [v, c] : a.terms) key += "|" + (v == lane_var ? std::string("L") : std::to_string(v)) + "*" + std::to_string(c);
    key += "+" + std::to_string(a.offset);
    vp.loads[n] = {b, key};
  }
  for (auto& [s, b] : stores) {
    loop::Affine a;
    as_affine(s->index, &a);
    if (vector_index(a, lane_var, vec, ok_var)) vp.stores[s] = b;
  }
  if (vp.loads.empty() && vp.stores.empty()) return vp;
  vp.vec = vec;
  return vp;
}

// vp.loads in an order that does not depend on where the nodes live in memory: the source must be
// the same in every process, or the cubin cache (keyed by the source's hash) would never hit.
std::vector<std::pair<const loop::ExprNode*, std::pair<int, std::string>>> ordered_loads(const VecPlan& vp) {
  std::vector<std::pair<const loop::ExprNode*, std::pair<int, std::string>>> v(vp.loads.begin(), vp.loads.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.second < b.second.second; });
  return v;
}

// A row's loads kept in registers from one pass over the row to the next (softmax's max, sum and
// output passes; layer norm's mean, variance and output passes read the same elements): the later
// passes take them from `arrays` instead of memory. Only for buffers the kernel never stores, and
// where each thread's share of the row is a few vectors (`per_thread`, the passes unrolled).
struct RowCache {
  int per_thread = 0;                        // vectors per thread per pass (0: no cache)
  std::string slot;                          // the unrolled pass's vector index, while emitting one
  std::map<std::string, std::string> arrays; // VecPlan load key -> register array
  std::set<std::string> filled;              // keys an earlier pass has loaded
  std::set<std::string> loading;             // keys the pass being emitted puts into the arrays

  const std::string* array(const std::string& key) const {
    auto it = arrays.find(key);
    return it == arrays.end() ? nullptr : &it->second;
  }
};

// Emits the straight-line statements `stmts` for VEC lanes starting at lane variable value
// `lane_base` (vector loads before, vector stores after). Returns the alignment requirements.
// With `cache`, loads it holds are taken from (or, in the first pass, also put into) its arrays.
std::vector<std::pair<int, int>> emit_vector_lanes(Emitter& em, const Program& p, const Kernel& /*k*/, const VecPlan& vp,
                                                   const std::vector<const Stmt*>& stmts, int lane_var,
                                                   const std::string& lane_base, int indent, RowCache* cache = nullptr) {
  std::vector<std::pair<int, int>> aligned;
  std::map<std::string, std::string> regs;  // key -> register
  em.bind_var(lane_var, lane_base);
  em.vec_loads.clear();
  em.vec_stores.clear();
  std::string vec = std::to_string(vp.vec);
  for (auto& [node, bk] : ordered_loads(vp)) {
    auto [b, key] = bk;
    auto it = regs.find(key);
    if (it == regs.end()) {
      std::string reg = "ld" + std::to_string(regs.size());
      std::string st = storage_type(p.buffers[static_cast<size_t>(b)].dtype);
      std::string decl = "const ff_vec<" + st + ", " + vec + "> " + reg + " = ";
      const std::string* held = cache ? cache->array(key) : nullptr;
      if (held && cache->filled.count(key)) {
        em.line(indent, decl + *held + "[" + cache->slot + "];");
      } else {
        std::string index = em.expr(node->args[0], indent);
        em.line(indent, decl + "*reinterpret_cast<const ff_vec<" + st + ", " + vec + ">*>(b" + std::to_string(b) + " + " + index + ");");
        aligned.push_back({b, vp.vec * dtype_size(p.buffers[static_cast<size_t>(b)].dtype)});
        if (held) {
          em.line(indent, *held + "[" + cache->slot + "] = " + reg + ";");
          cache->loading.insert(key);
        }
      }
      it = regs.emplace(key, reg).first;
    }
    em.vec_loads[node] = it->second;
  }
  int si = 0;
  std::vector<std::pair<const Stmt*, std::string>> store_regs;
  for (auto& [s, b] : vp.stores) {
    std::string reg = "st" + std::to_string(si++);
    em.line(indent, "ff_vec<" + std::string(storage_type(p.buffers[static_cast<size_t>(b)].dtype)) + ", " + vec + "> " + reg + ";");
    em.vec_stores[s] = reg;
    store_regs.push_back({s, reg});
    aligned.push_back({b, vp.vec * dtype_size(p.buffers[static_cast<size_t>(b)].dtype)});
  }
  for (int lane = 0; lane < vp.vec; ++lane) {
    em.line(indent, "{");
    em.bind_var(lane_var, "(" + lane_base + " + " + std::to_string(lane) + ")");
    em.set_lane(lane);
    for (const Stmt* s : stmts) em.stmt(*s, indent + 1);
    em.line(indent, "}");
  }
  em.set_lane(-1);
  em.bind_var(lane_var, lane_base);
  for (auto& [s, reg] : store_regs) {
    std::string index = em.expr(s->index, indent);
    std::string st = storage_type(p.buffers[static_cast<size_t>(s->buf)].dtype);
    em.line(indent, "*reinterpret_cast<ff_vec<" + st + ", " + vec + ">*>(b" + std::to_string(s->buf) + " + " + index + ") = " + reg + ";");
  }
  em.vec_loads.clear();
  em.vec_stores.clear();
  return aligned;
}

std::string fn_name(const Kernel& k) {
  std::string s = "ff_";
  for (char c : k.name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  return s;
}

// ---- Pointwise -------------------------------------------------------------------------------

void render_pointwise(const Program& p, const Kernel& k, const Nest& n, bool vectorize, bool wide, const std::string& fn,
                      std::ostringstream& out, KernelPlan& plan) {
  Emitter em(p, k, out, wide);
  // The flat index acts as one loop variable (id -1 is never a real variable).
  constexpr int kFlat = -1000;
  std::vector<const Stmt*> stmts;
  for (const Stmt& s : *n.body) stmts.push_back(&s);
  // Express each chain variable's contribution through the flat index: a load is vectorizable when
  // its affine index equals flat + offset, i.e. each chain var's coefficient is its flat stride.
  VecPlan vp;
  if (vectorize) {
    // Rewrite test: build the flat-stride signature per chain var.
    std::map<int, SymInt> flat_stride;
    SymInt inner = 1;
    for (size_t i = n.chain.size(); i-- > 0;) {
      flat_stride[n.chain[i]->var] = inner;
      inner = inner * n.chain[i]->extent;
    }
    std::map<int, SymInt> extent_of;
    for (const Stmt* l : n.chain) extent_of[l->var] = l->extent;
    // Collapse an affine index onto the flat variable when it matches the flat strides.
    auto collapse = [&](const Expr& idx, loop::Affine* out) {
      loop::Affine a;
      if (!as_affine(idx, &a)) return false;
      out->terms.clear();
      out->offset = a.offset;
      std::map<int, int64_t> coef;
      for (auto [v, c] : a.terms) coef[v] = c;
      for (auto [v, st] : flat_stride) {
        int64_t c = coef.count(v) ? coef[v] : 0;
        // NB: a symbolic flat stride matches no constant coefficient at every binding.
        if (!is_one(extent_of[v]) && (st.is_symbolic() || c != st.hint())) return false;
        coef.erase(v);
      }
      if (!coef.empty()) return false;
      out->terms.push_back({kFlat, 1});
      return true;
    };
    // Loads that do not follow the flat index but are contiguous along the innermost loop (a
    // permuting copy: nanoGPT's heads moved next to the batch): lane 0's index starts a vector
    // when the innermost extent is a multiple of VEC and every other term keeps VEC alignment.
    int innermost = -1;
    for (const Stmt* l : n.chain)
      if (!is_one(l->extent) && hint_of(l->extent) > 1) innermost = l->var;
    std::vector<std::pair<const loop::ExprNode*, loop::Affine>> row_loads;
    auto along_innermost = [&](const Expr& idx, loop::Affine* out) {
      if (innermost < 0 || !as_affine(idx, out)) return false;
      bool unit = false;
      for (auto [v, c] : out->terms) {
        if (v == innermost) unit = c == 1;
        else if (!extent_of.count(v)) return false;
      }
      return unit;
    };
    std::set<int> stored, loaded;
    for (int b : k.stored_buffers()) stored.insert(b);
    for (int b : k.loaded_buffers()) loaded.insert(b);
    int max_size = 0;
    std::vector<std::pair<const loop::ExprNode*, int64_t>> loads;
    std::vector<std::pair<const Stmt*, int64_t>> stores;
    for (const Stmt* s : stmts) {
      if (s->value)
        for_each_expr(s->value, [&](const Expr& e) {
          loop::Affine a;
          if (e->kind != ExprKind::Load || stored.count(e->id)) return;
          if (collapse(e->args[0], &a)) loads.push_back({e.get(), a.offset});
          else if (along_innermost(e->args[0], &a)) row_loads.push_back({e.get(), a});
        });
      loop::Affine a;
      if (s->kind == StmtKind::Store && !loaded.count(s->buf) && collapse(s->index, &a)) stores.push_back({s, a.offset});
    }
    for (auto& [e, off] : loads) max_size = std::max(max_size, dtype_size(p.buffers[static_cast<size_t>(e->id)].dtype));
    for (auto& [s, off] : stores) max_size = std::max(max_size, dtype_size(p.buffers[static_cast<size_t>(s->buf)].dtype));
    if (max_size > 0) {
      vp.vec = std::min(8, 16 / max_size);
      for (auto& [e, off] : loads)
        if (off % vp.vec == 0) vp.loads[e] = {e->id, "b" + std::to_string(e->id) + "+" + std::to_string(off)};
      if (innermost >= 0 && sym_divisible(extent_of[innermost], vp.vec))
        for (auto& [e, a] : row_loads) {
          bool aligned = a.offset % vp.vec == 0;
          std::string key = "b" + std::to_string(e->id) + "|row";
          for (auto [v, c] : a.terms) {
            aligned &= v == innermost || c % vp.vec == 0;
            key += "|" + std::to_string(v) + "*" + std::to_string(c);
          }
          if (aligned) vp.loads[e] = {e->id, key + "+" + std::to_string(a.offset)};
        }
      for (auto& [s, off] : stores)
        if (off % vp.vec == 0) vp.stores[s] = s->buf;
      if (vp.loads.empty() && vp.stores.empty()) vp.vec = 1;
    }
  }
  int vec = vp.vec;
  em.line(0, "extern \"C\" __global__ void __launch_bounds__(1024) " + fn + "(" + em.params() + ") {");
  em.declare_locals(1);
  std::string ix = em.ix();
  std::string N = em.size(n.rows);
  std::string V = std::to_string(vec);
  em.line(1, "for (" + ix + " base = ((" + ix + ")blockIdx.x * blockDim.x + threadIdx.x) * " + V + "; base < " + N +
                 "; base += (" + ix + ")gridDim.x * blockDim.x * " + V + ") {");
  KernelVariant var;
  var.fn = fn;
  if (vec > 1) {
    // NB: when N is a multiple of VEC, every base is too and the scalar tail is dead code; leaving
    // it out saves NVRTC a second copy of the body (each costs compile time, sin/cos notably).
    bool tail = !sym_divisible(n.rows, vec);
    em.line(2, tail ? "if (base + " + V + " <= " + N + ") {" : "{");
    // Vector loads index through the chain variables of lane 0 (`base`).
    bind_chain(em, n, "base", 3);
    // Loads/stores were collapsed onto the flat index; render their index with lane 0's vars.
    std::map<std::string, std::string> regs;
    for (auto& [node, bk] : ordered_loads(vp)) {
      auto it = regs.find(bk.second);
      if (it == regs.end()) {
        std::string reg = "ld" + std::to_string(regs.size());
        std::string st = storage_type(p.buffers[static_cast<size_t>(bk.first)].dtype);
        std::string index = em.expr(node->args[0], 3);
        em.line(3, "const ff_vec<" + st + ", " + V + "> " + reg + " = *reinterpret_cast<const ff_vec<" + st + ", " + V +
                       ">*>(b" + std::to_string(bk.first) + " + " + index + ");");
        it = regs.emplace(bk.second, reg).first;
        var.aligned.push_back({bk.first, vec * dtype_size(p.buffers[static_cast<size_t>(bk.first)].dtype)});
      }
      em.vec_loads[node] = it->second;
    }
    std::vector<std::pair<const Stmt*, std::string>> store_regs;
    for (auto& [s, b] : vp.stores) {
      std::string reg = "st" + std::to_string(store_regs.size());
      em.line(3, "ff_vec<" + std::string(storage_type(p.buffers[static_cast<size_t>(b)].dtype)) + ", " + V + "> " + reg + ";");
      em.vec_stores[s] = reg;
      store_regs.push_back({s, reg});
      var.aligned.push_back({b, vec * dtype_size(p.buffers[static_cast<size_t>(b)].dtype)});
    }
    std::vector<std::string> store_index;
    for (auto& [s, reg] : store_regs) store_index.push_back(em.expr(s->index, 3));
    for (int lane = 0; lane < vec; ++lane) {
      em.line(3, "{");
      bind_chain(em, n, "(base + " + std::to_string(lane) + ")", 4);
      em.set_lane(lane);
      for (const Stmt* s : stmts) em.stmt(*s, 4);
      em.set_lane(-1);
      em.line(3, "}");
    }
    for (size_t i = 0; i < store_regs.size(); ++i) {
      const Stmt* s = store_regs[i].first;
      std::string st = storage_type(p.buffers[static_cast<size_t>(s->buf)].dtype);
      em.line(3, "*reinterpret_cast<ff_vec<" + st + ", " + V + ">*>(b" + std::to_string(s->buf) + " + " + store_index[i] +
                     ") = " + store_regs[i].second + ";");
    }
    em.vec_loads.clear();
    em.vec_stores.clear();
    if (tail) {
      em.line(2, "} else {");
      em.line(3, "for (" + ix + " f = base; f < " + N + "; ++f) {");
      bind_chain(em, n, "f", 4);
      for (const Stmt* s : stmts) em.stmt(*s, 4);
      em.line(3, "}");
    }
    em.line(2, "}");
  } else {
    bind_chain(em, n, "base", 2);
    for (const Stmt* s : stmts) em.stmt(*s, 2);
  }
  em.line(1, "}");
  em.line(0, "}");
  plan.vec = std::max(plan.vec, vec);
  var.vec = vec;
  plan.variants.push_back(var);
}

// ---- Serial ----------------------------------------------------------------------------------

void render_serial(const Program& p, const Kernel& k, const Nest& n, bool wide, const std::string& fn,
                   std::ostringstream& out, KernelPlan& plan) {
  Emitter em(p, k, out, wide);
  em.line(0, "extern \"C\" __global__ void __launch_bounds__(1024) " + fn + "(" + em.params() + ") {");
  em.declare_locals(1);
  std::string ix = em.ix();
  em.line(1, "for (" + ix + " row = (" + ix + ")blockIdx.x * blockDim.x + threadIdx.x; row < " + em.size(n.rows) +
                 "; row += (" + ix + ")gridDim.x * blockDim.x) {");
  bind_chain(em, n, "row", 2);
  for (const Stmt& s : *n.body) em.stmt(s, 2);
  em.line(1, "}");
  em.line(0, "}");
  KernelVariant v;
  v.fn = fn;
  plan.variants.push_back(v);
}

// ---- RowBlock --------------------------------------------------------------------------------

struct LoopInfo {
  std::set<int> set_inside;     // locals Let/Init inside the loop
  std::set<int> reduced;        // locals Reduce'd inside, set outside (block-reduced after)
  std::set<int> read_inside;    // locals read inside
  std::map<int, loop::ReduceOp> rop;
};

LoopInfo loop_info(const Stmt& l) {
  LoopInfo info;
  for_each_stmt(l, [&](const Stmt& s) {
    if (s.kind == StmtKind::Let || s.kind == StmtKind::Init) info.set_inside.insert(s.local);
  });
  for_each_stmt(l, [&](const Stmt& s) {
    if (s.kind == StmtKind::Reduce && !info.set_inside.count(s.local)) {
      info.reduced.insert(s.local);
      info.rop[s.local] = s.rop;
    }
  });
  for_each_expr_in(l, [&](const Expr& e) {
    if (e->kind == ExprKind::Local) info.read_inside.insert(e->id);
  });
  return info;
}

// Whether the row body can be spread over threads (see cuda_render.h); *why says why not.
bool row_block_ok(const Kernel& k, const Nest& n, std::string* why) {
  std::set<int> private_locals;  // set inside a distributed loop: not valid outside it
  for (const Stmt& s : *n.body) {
    std::set<int> read;
    for_each_expr_in(s, [&](const Expr& e) {
      if (e->kind == ExprKind::Local) read.insert(e->id);
    });
    if (s.kind == StmtKind::Reduce) read.insert(s.local);
    if (s.kind == StmtKind::Loop)
      for (int l : loop_info(s).set_inside) read.erase(l);  // set before use in each iteration
    for (int l : read)
      if (private_locals.count(l)) {
        *why = "local t" + std::to_string(l) + " is set inside a loop and read after it";
        return false;
      }
    if (s.kind != StmtKind::Loop) {
      if (s.kind == StmtKind::Let || s.kind == StmtKind::Init) private_locals.erase(s.local);
      continue;
    }
    LoopInfo info = loop_info(s);
    for (int l : info.reduced) {
      if (info.read_inside.count(l)) {
        *why = "reduction local t" + std::to_string(l) + " is read inside its loop";
        return false;
      }
      loop::ScalarType t = k.locals.at(static_cast<size_t>(l));
      if (t == loop::ScalarType::Bool) {
        *why = "boolean reduction";
        return false;
      }
    }
    for (int l : info.set_inside) private_locals.insert(l);
  }
  return true;
}

// Loads in distributed loops contiguous along the loop (row-contiguous) vs across rows.
bool prefers_row_block(const Nest& n) {
  int innermost_chain = -1;
  for (const Stmt* l : n.chain)
    if (hint_of(l->extent) > 1) innermost_chain = l->var;
  bool along = false, across = false;
  int64_t max_extent = 0;
  for (const Stmt& s : *n.body) {
    if (s.kind != StmtKind::Loop) continue;
    max_extent = std::max<int64_t>(max_extent, hint_of(s.extent));
    for_each_expr_in(s, [&](const Expr& e) {
      if (e->kind != ExprKind::Load) return;
      loop::Affine a;
      if (!as_affine(e->args[0], &a)) return;
      for (auto [v, c] : a.terms) {
        if (v == s.var && c == 1) along = true;
        if (v == innermost_chain && c == 1) across = true;
      }
    });
  }
  if (along) return true;
  if (across) return false;
  return !(max_extent <= 16 && hint_of(n.rows) >= 65536);
}

// The loads to keep in registers across a row's passes (see RowCache): every vectorized pass
// covers the row with the same vector width in the same number of whole vectors per thread (at
// most 8), and the arrays take at most 64 registers a thread. Emits the arrays' declarations.
RowCache plan_row_cache(Emitter& em, const Program& p, const std::vector<Stmt>& body, const std::vector<VecPlan>& plans,
                        int tx) {
  int vec = 0;
  int64_t per_thread = 0;
  std::map<std::string, std::pair<int, int>> passes;  // key -> (buffer, passes reading it)
  for (size_t i = 0; i < body.size(); ++i) {
    const VecPlan& vp = plans[i];
    if (body[i].kind != StmtKind::Loop || vp.vec <= 1) continue;
    // NB: the unrolled passes need the row's length in the source.
    if (body[i].extent.is_symbolic()) return {};
    int64_t extent = body[i].extent.hint();
    int64_t step = static_cast<int64_t>(tx) * vp.vec;
    if (extent % step != 0 || (vec != 0 && (vp.vec != vec || extent / step != per_thread))) return {};
    vec = vp.vec;
    per_thread = extent / step;
    std::set<std::string> seen;
    for (auto& [node, bk] : vp.loads)
      if (seen.insert(bk.second).second) {
        passes[bk.second].first = bk.first;
        ++passes[bk.second].second;
      }
  }
  int64_t bytes = 0;
  for (auto& [key, bn] : passes)
    if (bn.second > 1) bytes += vec * dtype_size(p.buffers[static_cast<size_t>(bn.first)].dtype) * per_thread;
  if (per_thread < 1 || per_thread > 8 || bytes == 0 || bytes > 256) return {};
  RowCache cache;
  cache.per_thread = static_cast<int>(per_thread);
  for (auto& [key, bn] : passes) {
    if (bn.second < 2) continue;
    std::string name = "rc" + std::to_string(cache.arrays.size());
    em.line(1, "ff_vec<" + std::string(storage_type(p.buffers[static_cast<size_t>(bn.first)].dtype)) + ", " +
                   std::to_string(vec) + "> " + name + "[" + std::to_string(per_thread) + "];");
    cache.arrays[key] = name;
  }
  return cache;
}

// A statement of a row body spread over a block's threads (RowBlock, ColumnBlock): a barrier first
// where it loads what an earlier statement stored (another thread may have stored it); row-level
// stores by thread 0, other row-level statements by every thread. False for a loop, which the
// strategy spreads itself.
bool emit_row_level(Emitter& em, const Stmt& s, std::set<int>& stored_so_far) {
  bool reads_stored = false;
  for_each_expr_in(s, [&](const Expr& e) { reads_stored |= e->kind == ExprKind::Load && stored_so_far.count(e->id); });
  if (reads_stored) {
    em.line(1, "__syncthreads();");
    stored_so_far.clear();
  }
  for_each_stmt(s, [&](const Stmt& x) {
    if (x.kind == StmtKind::Store) stored_so_far.insert(x.buf);
  });
  if (s.kind == StmtKind::Loop) return false;
  if (s.kind == StmtKind::Store) {
    em.line(1, "if (tid == 0) {");
    em.stmt(s, 2);
    em.line(1, "}");
  } else {
    em.stmt(s, 1);
  }
  return true;
}

void render_row_block(const Program& p, const Kernel& k, const Nest& n, int tx, bool vectorize, bool wide,
                      const std::string& fn, std::ostringstream& out, KernelPlan& plan) {
  // Rows per block divide the rows; a symbolic row count whose divisibility is not known gets
  // them anyway where the kernel may run a row twice (it stores nothing it loads): the last block's
  // threads past the end redo the last row, storing the same values.
  std::vector<int> loaded = k.loaded_buffers(), stored = k.stored_buffers();
  bool rerunnable = std::none_of(stored.begin(), stored.end(), [&](int b) { return std::count(loaded.begin(), loaded.end(), b) > 0; });
  bool clamp_rows = n.rows.is_symbolic() && rerunnable;
  int r = 1;
  while (tx * r * 2 <= 256 && (clamp_rows || sym_divisible(n.rows, r * 2))) r *= 2;
  clamp_rows &= !sym_divisible(n.rows, r);
  Emitter em(p, k, out, wide);
  em.line(0, "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(tx * r) + ") " + fn + "(" + em.params() + ") {");
  // Shared memory for block reductions, one array per reduced type.
  std::set<loop::ScalarType> red_types;
  for (const Stmt& s : *n.body)
    if (s.kind == StmtKind::Loop)
      for (int l : loop_info(s).reduced) red_types.insert(k.locals.at(static_cast<size_t>(l)));
  if (tx > 32)
    for (auto t : red_types)
      em.line(1, std::string("__shared__ ") + c_type(t) + " sm_" + loop::scalar_type_name(t) + "[" + std::to_string(r * tx / 32) + "];");
  em.declare_locals(1);
  std::set<int> chain_vars;
  for (const Stmt* l : n.chain) chain_vars.insert(l->var);
  // Each distributed loop's vector plan, and the loads more than one of them reads.
  std::vector<VecPlan> plans(n.body->size());
  std::vector<std::vector<const Stmt*>> bodies(n.body->size());
  for (size_t i = 0; i < n.body->size(); ++i) {
    const Stmt& s = (*n.body)[i];
    if (s.kind != StmtKind::Loop) continue;
    bool straight = !has_loop(s.body);
    for (const Stmt& c : s.body) straight &= c.kind != StmtKind::Init;
    for (const Stmt& c : s.body) bodies[i].push_back(&c);
    if (vectorize && straight) plans[i] = plan_vectors(p, k, bodies[i], s.var, s.extent, chain_vars);
  }
  RowCache cache = plan_row_cache(em, p, *n.body, plans, tx);
  std::string ix = em.ix();
  std::string row = "(" + ix + ")blockIdx.x * " + std::to_string(r) + " + threadIdx.y";
  em.line(1, "const " + ix + " row = " + (clamp_rows ? "min(" + row + ", " + em.size(n.rows) + " - 1)" : row) + ";");
  em.line(1, "const int tid = threadIdx.x;");
  bind_chain(em, n, "row", 1);
  KernelVariant var;
  var.fn = fn;
  var.block_x = tx;
  var.block_y = r;
  var.fixed_block = true;
  std::set<int> stored_so_far;
  for (size_t si = 0; si < n.body->size(); ++si) {
    const Stmt& s = (*n.body)[si];
    if (emit_row_level(em, s, stored_so_far)) continue;
    std::string v = "v" + std::to_string(s.var);
    const VecPlan& vp = plans[si];
    const std::vector<const Stmt*>& body = bodies[si];
    if (vp.vec > 1 && cache.per_thread > 0) {
      // The pass unrolled: each thread's vectors of the row by a constant index into the arrays.
      std::string V = std::to_string(vp.vec);
      cache.slot = v + "k";
      em.line(1, "#pragma unroll");
      em.line(1, "for (int " + cache.slot + " = 0; " + cache.slot + " < " + std::to_string(cache.per_thread) + "; ++" +
                     cache.slot + ") {");
      em.line(2, "const " + ix + " " + v + "b = tid * " + V + " + " + cache.slot + " * " + std::to_string(tx * vp.vec) + ";");
      auto al = emit_vector_lanes(em, p, k, vp, body, s.var, v + "b", 2, &cache);
      var.aligned.insert(var.aligned.end(), al.begin(), al.end());
      em.line(1, "}");
      cache.filled.insert(cache.loading.begin(), cache.loading.end());  // NB: only what this pass loaded
      cache.loading.clear();
    } else if (vp.vec > 1) {
      std::string V = std::to_string(vp.vec);
      em.line(1, "for (" + ix + " " + v + "b = tid * " + V + "; " + v + "b < " + em.size(s.extent) + "; " + v +
                     "b += " + std::to_string(tx) + " * " + V + ") {");
      auto al = emit_vector_lanes(em, p, k, vp, body, s.var, v + "b", 2);
      var.aligned.insert(var.aligned.end(), al.begin(), al.end());
      em.line(1, "}");
    } else {
      em.bind_var(s.var, v);
      em.line(1, "for (" + ix + " " + v + " = tid; " + v + " < " + em.size(s.extent) + "; " + v + " += " +
                     std::to_string(tx) + ") {");
      for (const Stmt& c : s.body) em.stmt(c, 2);
      em.line(1, "}");
    }
    LoopInfo info = loop_info(s);
    for (int l : info.reduced) {
      loop::ScalarType t = k.locals.at(static_cast<size_t>(l));
      std::string tl = "t" + std::to_string(l);
      std::string smem = tx > 32 ? std::string("sm_") + loop::scalar_type_name(t) : "nullptr";
      em.line(1, tl + " = ff_block_reduce<" + std::to_string(Emitter::reduce_code(info.rop[l])) + ", " + std::to_string(tx) +
                     ">(" + tl + ", (" + c_type(t) + "*)" + smem + ");");
    }
  }
  em.line(0, "}");
  plan.rows_per_block = r;
  plan.variants.push_back(var);
}

// ---- ColumnBlock -----------------------------------------------------------------------------

struct ColumnShape {
  int rows = 0;     // rows per block (threadIdx.x), 0: the strategy does not apply
  int threads = 0;  // threads per row (threadIdx.y)
};

// Where the row body's loops load contiguously across rows (the innermost chain loop's variable
// with coefficient 1: a channel mean of an NHWC tensor, a column sum) and spread enough work per
// row, rows go to consecutive lanes and each row's loops to the threads of its column.
ColumnShape column_shape(const Nest& n) {
  int innermost_chain = -1;
  for (const Stmt* l : n.chain)
    if (hint_of(l->extent) > 1) innermost_chain = l->var;
  bool across = false;
  int64_t work = 0;
  for (const Stmt& s : *n.body) {
    if (s.kind != StmtKind::Loop) continue;
    work = std::max(work, hint_of(find_nest(s).rows));  // the loop and the perfect nest under it
    for_each_expr_in(s, [&](const Expr& e) {
      loop::Affine a;
      if (e->kind != ExprKind::Load || !as_affine(e->args[0], &a)) return;
      for (auto [v, c] : a.terms) across |= v == innermost_chain && c == 1;
    });
  }
  ColumnShape shape;
  if (innermost_chain < 0 || !across || work < 64) return shape;
  // 8 lanes of float32 fill a 32-byte sector; wider where there are blocks enough.
  for (int rows : {32, 16, 8})
    if (sym_divisible(n.rows, rows) && (hint_of(n.rows) >= int64_t(rows) * 256 || rows == 8)) {
      shape.rows = rows;
      break;
    }
  if (shape.rows == 0) return shape;
  int64_t blocks = hint_of(n.rows) / shape.rows;
  int threads = blocks >= 256 ? 256 : blocks >= 64 ? 512
                                                   : 1024;
  shape.threads = threads / shape.rows;
  while (shape.threads > 8 && int64_t(shape.threads) * 4 > work) shape.threads /= 2;
  return shape;
}

// ColumnBlock: like RowBlock with the roles of the thread indices swapped: `row` from threadIdx.x
// (consecutive rows in consecutive lanes read consecutive addresses), each top-level loop of the
// row body (with the perfect nest under it flattened) spread over the column's threads (threadIdx.y),
// its reductions combined through shared memory (ff_column_reduce), row-level stores by thread 0.
void render_column_block(const Program& p, const Kernel& k, const Nest& n, ColumnShape shape, bool wide,
                         const std::string& fn, std::ostringstream& out, KernelPlan& plan) {
  const std::string tx = std::to_string(shape.rows), ty = std::to_string(shape.threads);
  Emitter em(p, k, out, wide);
  em.line(0, "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(shape.rows * shape.threads) + ") " + fn + "(" +
                 em.params() + ") {");
  std::set<loop::ScalarType> red_types;
  for (const Stmt& s : *n.body)
    if (s.kind == StmtKind::Loop)
      for (int l : loop_info(s).reduced) red_types.insert(k.locals.at(static_cast<size_t>(l)));
  for (auto t : red_types)
    em.line(1, std::string("__shared__ ") + c_type(t) + " sm_" + loop::scalar_type_name(t) + "[" +
                   std::to_string(shape.rows * shape.threads) + "];");
  em.declare_locals(1);
  std::string ix = em.ix();
  em.line(1, "const " + ix + " row = (" + ix + ")blockIdx.x * " + tx + " + threadIdx.x;");
  em.line(1, "const int tid = threadIdx.y;");
  bind_chain(em, n, "row", 1);
  std::set<int> stored_so_far;
  for (const Stmt& s : *n.body) {
    if (emit_row_level(em, s, stored_so_far)) continue;
    Nest inner = find_nest(s);  // the loop and the perfect nest under it, flattened
    std::string f = "f" + std::to_string(s.var);
    em.line(1, "for (" + ix + " " + f + " = tid; " + f + " < " + em.size(inner.rows) + "; " + f + " += " + ty + ") {");
    bind_chain(em, inner, f, 2);
    for (const Stmt& c : *inner.body) em.stmt(c, 2);
    em.line(1, "}");
    LoopInfo info = loop_info(s);
    for (int l : info.reduced) {
      loop::ScalarType t = k.locals.at(static_cast<size_t>(l));
      std::string tl = "t" + std::to_string(l);
      em.line(1, tl + " = ff_column_reduce<" + std::to_string(Emitter::reduce_code(info.rop[l])) + ", " + tx + ", " + ty +
                     ">(" + tl + ", sm_" + loop::scalar_type_name(t) + ");");
    }
  }
  em.line(0, "}");
  KernelVariant var;
  var.fn = fn;
  var.block_x = shape.rows;
  var.block_y = shape.threads;
  var.fixed_block = true;
  var.rows_on_x = true;
  plan.rows_per_block = shape.rows;
  plan.variants.push_back(var);
}

int heuristic_tx(const Nest& n) {
  int64_t max_extent = 1;
  for (const Stmt& s : *n.body)
    if (s.kind == StmtKind::Loop) max_extent = std::max<int64_t>(max_extent, hint_of(s.extent));
  // About 8 elements per thread per loop, 32 to 1024 threads per row.
  return static_cast<int>(std::clamp<int64_t>(pow2_at_least((max_extent + 7) / 8), 32, 1024));
}

}  // namespace

bool needs_wide_index(const Program& p, const Kernel& k) { return wide_at_hints(p, k, find_nest(k.root)); }

ModuleSource render_module(const Program& p, const RenderOptions& opts) {
  ModuleSource m;
  std::ostringstream out;
  out << cuda_prelude() << "\n";
  // Per kernel: the functions compiled up front and the scalar fallback compiled on demand.
  std::vector<std::string> eager_src, lazy_src;
  for (const Kernel& k : p.kernels) {
    FF_CHECK(k.root.kind == StmtKind::Loop && k.root.parallel, "kernel " + k.name + " has no parallel root loop");
    Nest n = find_nest(k.root);
    bool wide = wide_at_hints(p, k, n);
    KernelPlan plan;
    plan.name = k.name;
    plan.buffers = k.buffers();
    plan.symbols = k.symbols();
    plan.wide_index = wide;
    plan.items = n.rows;
    {
      std::vector<int> ld = k.loaded_buffers(), st = k.stored_buffers();
      for (int b : st) plan.rerunnable &= std::find(ld.begin(), ld.end(), b) == ld.end();
    }
    std::string base = fn_name(k);
    std::ostringstream ks, fs;  // eager functions, lazy fallback
    ks << "// kernel " << k.name << "\n";
    std::string why;
    bool has_fallback = false;
    if (!has_loop(*n.body)) {
      plan.strategy = Strategy::Pointwise;
      std::ostringstream vec_src;
      KernelPlan probe = plan;
      render_pointwise(p, k, n, true, wide, base + "_v", vec_src, probe);
      if (probe.variants.back().aligned.empty()) {
        // Nothing to vectorize: the scalar kernel is the only variant.
        render_pointwise(p, k, n, false, wide, base, ks, plan);
      } else {
        ks << vec_src.str();
        plan = probe;
        plan.items = n.rows;
        render_pointwise(p, k, n, false, wide, base, fs, plan);
        has_fallback = true;
      }
    } else if (prefers_row_block(n) && row_block_ok(k, n, &why)) {
      plan.strategy = Strategy::RowBlock;
      int tx = heuristic_tx(n);
      std::vector<int> txs = {tx};
      if (opts.all_variants)
        for (int t : {64, 128, 256, 512, 1024})
          if (t != tx) txs.push_back(t);
      // Vector variants that found nothing to vectorize (identical to the scalar one) are dropped.
      std::vector<KernelVariant> kept;
      for (int t : txs) {
        std::ostringstream vs;
        KernelPlan probe = plan;
        render_row_block(p, k, n, t, true, wide, base + "_t" + std::to_string(t) + "v", vs, probe);
        if (probe.variants.back().aligned.empty()) continue;
        ks << vs.str();
        kept.push_back(probe.variants.back());
      }
      plan.variants = kept;
      KernelPlan scalar = plan;
      render_row_block(p, k, n, tx, false, wide, base + "_t" + std::to_string(tx), kept.empty() ? ks : fs, scalar);
      plan.variants.push_back(scalar.variants.back());
      plan.rows_per_block = scalar.rows_per_block;
      has_fallback = !kept.empty();
    } else if (ColumnShape shape = column_shape(n); shape.rows > 0 && row_block_ok(k, n, &why)) {
      plan.strategy = Strategy::ColumnBlock;
      render_column_block(p, k, n, shape, wide, base, ks, plan);
    } else {
      plan.strategy = Strategy::Serial;
      render_serial(p, k, n, wide, base, ks, plan);
    }
    out << ks.str() << fs.str() << "\n";
    eager_src.push_back(ks.str());
    lazy_src.push_back(has_fallback ? fs.str() : std::string());
    if (has_fallback) plan.variants.back().unit = -1;  // resolved below
    m.kernels.push_back(std::move(plan));
  }
  m.source = out.str();
  if (m.source.find("ff_math_") != std::string::npos) m.source.insert(cuda_prelude().size() + 1, inductor::cuda_math_library() + "\n");

  // Eager units: kernels dealt round-robin by decreasing source size over at most max_units
  // programs, so the programs compiled in parallel finish at about the same time.
  size_t nk = m.kernels.size();
  size_t nunits = std::max<size_t>(1, std::min<size_t>(nk, static_cast<size_t>(std::max(1, opts.max_units))));
  std::vector<size_t> order(nk);
  for (size_t i = 0; i < nk; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return eager_src[a].size() > eager_src[b].size(); });
  std::vector<size_t> unit_of(nk, 0);
  std::vector<size_t> load(nunits, 0);
  for (size_t i : order) {
    size_t u = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    unit_of[i] = u;
    load[u] += eager_src[i].size();
  }
  if (nk == 0) return m;
  m.units.assign(nunits, CompileUnit{});
  for (auto& u : m.units) u.source = cuda_prelude() + "\n";
  for (size_t i = 0; i < nk; ++i) {
    CompileUnit& u = m.units[unit_of[i]];
    u.source += eager_src[i] + "\n";
    for (KernelVariant& v : m.kernels[i].variants)
      if (v.unit >= 0) {
        v.unit = static_cast<int>(unit_of[i]);
        ++u.functions;
      }
  }
  // One lazy unit per kernel with a fallback: a misaligned pointer usually affects one kernel.
  for (size_t i = 0; i < nk; ++i) {
    if (lazy_src[i].empty()) continue;
    CompileUnit u;
    u.source = cuda_prelude() + "\n" + lazy_src[i];
    u.lazy = true;
    u.functions = 1;
    m.kernels[i].variants.back().unit = static_cast<int>(m.units.size());
    m.units.push_back(std::move(u));
  }
  // The math library goes into the programs that call it, after the prelude it needs.
  for (CompileUnit& u : m.units)
    if (u.source.find("ff_math_", cuda_prelude().size()) != std::string::npos)
      u.source.insert(cuda_prelude().size() + 1, inductor::cuda_math_library() + "\n");
  return m;
}

}  // namespace ff::cuda
