#include "inductor/loop_passes/reuse_reduced_values.h"

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

// e with the loop variables in m replaced.
Expr subst_vars(const Expr& e, const std::map<int, Expr>& m) {
  return loop::mutate_expr(e, [&](const Expr& x) -> Expr {
    if (x->kind != ExprKind::Var) return nullptr;
    auto it = m.find(x->id);
    return it == m.end() ? x : it->second;
  });
}

bool is_expensive(const Expr& e) {
  bool any = false;
  loop::for_each_expr(e, [&](const Expr& x) {
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
  bool found = false;
  loop::for_each_expr(e, [&](const Expr& x) { found = found || loop::expr_equal(x, target); });
  return found;
}

// e with every subexpression equal to target replaced by with.
Expr replace(const Expr& e, const Expr& target, const Expr& with) {
  return loop::mutate_expr(e, [&](const Expr& x) { return loop::expr_equal(x, target) ? with : nullptr; });
}

bool touches_buffer(const Stmt& s, int buf) {
  bool hit = false;
  loop::for_each_stmt(s, [&](const Stmt& x) {
    if (x.kind == StmtKind::Store && x.buf == buf) hit = true;
  });
  loop::for_each_expr_in(s, [&](const Expr& y) { hit |= y->kind == ExprKind::Load && y->id == buf; });
  return hit;
}

bool assigns_local(const Stmt& s, const std::set<int>& locals) {
  bool hit = false;
  loop::for_each_stmt(s, [&](const Stmt& x) {
    if ((x.kind == StmtKind::Let || x.kind == StmtKind::Init || x.kind == StmtKind::Reduce) && locals.count(x.local)) hit = true;
  });
  return hit;
}

// Tries the rewrite on body[i] (a loop with a Reduce) and body[j] (a loop whose only statement
// is a Store).
bool reuse_pair(Kernel& k, const Program& p, std::vector<Stmt>& body, size_t i, size_t j) {
  Stmt& l1 = body[i];
  Stmt& l2 = body[j];
  if (l1.kind != StmtKind::Loop || l2.kind != StmtKind::Loop || !l1.extent.same_as(l2.extent)) return false;
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
    loop::for_each_expr(red.value, [&](const Expr& x) {
      if (x->kind == ExprKind::Local) reads.insert(x->id);
    });
    bool ok = true;
    loop::for_each_expr(red.value, [&](const Expr& x) { ok &= !(x->kind == ExprKind::Var && x->id == l2.var); });
    for (const Stmt& c : l1.body) ok &= !assigns_local(c, reads) || (&c == &red && !reads.count(red.local));
    for (size_t m = i + 1; m < j; ++m) ok &= !assigns_local(body[m], reads) && !touches_buffer(body[m], st.buf);
    loop::for_each_stmt(k.root, [&](const Stmt& x) {
      if (&x == &st) return;
      for (const Expr* e : {&x.index, &x.value})
        if (*e) loop::for_each_expr(*e, [&](const Expr& y) { ok &= !(y->kind == ExprKind::Load && y->id == st.buf); });
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

void reuse_in(Kernel& k, const Program& p) {
  loop::for_each_stmt(k.root, [&](Stmt& s) {
    if (s.kind != StmtKind::Loop) return;
    for (size_t i = 0; i < s.body.size(); ++i)
      for (size_t j = i + 1; j < s.body.size(); ++j)
        if (reuse_pair(k, p, s.body, i, j)) break;
  });
}

}  // namespace

Program reuse_reduced_values(const Program& p) {
  Program out = p;
  for (Kernel& k : out.kernels) reuse_in(k, out);
  std::string err = loop::verify_program(out);
  FF_CHECK(err.empty(), "reusing reduced values produced an invalid program: " + err + "\n" + loop::program_str(out));
  return out;
}

}  // namespace ff::inductor
