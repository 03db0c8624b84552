#include "inductor/loop_passes/collapse_outer_loops.h"

#include <algorithm>
#include <map>

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

Program collapse_outer_loops(const Program& p, int64_t min_extent) {
  Program out = p;
  for (Kernel& k : out.kernels) {
    // NB: only while the inner loop still holds loops: the innermost loop must stay a loop of
    // its own (unit stride, vectorized), never an index split by // and %.
    auto holds_loop = [](const Stmt& s) {
      return std::any_of(s.body.begin(), s.body.end(), [](const Stmt& c) { return c.kind == StmtKind::Loop; });
    };
    // NB: symbolic extents stay as they are (the split index would divide by a run-time size).
    while (!k.root.extent.is_symbolic() && k.root.extent < min_extent && k.root.body.size() == 1 &&
           k.root.body[0].kind == StmtKind::Loop && !k.root.body[0].extent.is_symbolic() && holds_loop(k.root.body[0])) {
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
      for (Stmt& c : inner.body)
        loop::mutate_exprs_in(c, [&](const Expr& x) -> Expr {
          if (x->kind != ExprKind::Var) return nullptr;
          auto it = m.find(x->id);
          return it == m.end() ? x : it->second;
        });
      k.root = loop::loop_stmt(w, a * b, std::move(inner.body), /*parallel=*/true);
    }
  }
  std::string err = loop::verify_program(out);
  FF_CHECK(err.empty(), "collapsing loops produced an invalid program: " + err + "\n" + loop::program_str(out));
  return out;
}

}  // namespace ff::inductor
