// Walking and rewriting the loop IR (loop_ir.h). Two forms of each:
//
// - functions taking a lambda, for the common case of "look at every node" / "replace some nodes":
//   for_each_expr, for_each_stmt, for_each_expr_in, mutate_expr, mutate_exprs_in;
// - classes with one hook per node kind (generated from the X-macro lists), for walks that keep
//   state across a scope (the verifier binds a loop's variable for its body): Visitor, Mutator.
//
// Order: pre-order; a statement's index, then its value, then its body. A node shared by several
// parents is visited once per parent (no memo).
//
// NB: rewrites copy every interior node they pass, changed or not, and never share one copy
// between two parents. The CUDA renderer finds common subexpressions by node identity, so a
// rewrite that shared unchanged subtrees would change the kernels it writes.
#pragma once

#include <memory>
#include <utility>

#include "inductor/loop_ir.h"

namespace ff::loop {

// ---- functions ------------------------------------------------------------------------------

// fn(x) for e and every node below it.
template <class Fn>
void for_each_expr(const Expr& e, Fn&& fn) {
  fn(e);
  for (const Expr& a : e->args) for_each_expr(a, fn);
}

// fn(x) for s and every statement nested in it. Also over a mutable tree (fn gets Stmt&).
template <class S, class Fn>
void for_each_stmt(S& s, Fn&& fn) {
  fn(s);
  for (auto& c : s.body) for_each_stmt(c, fn);
}

// fn(x) for every expression node of s and of the statements nested in it.
template <class Fn>
void for_each_expr_in(const Stmt& s, Fn&& fn) {
  for_each_stmt(s, [&](const Stmt& x) {
    if (x.index) for_each_expr(x.index, fn);
    if (x.value) for_each_expr(x.value, fn);
  });
}

// e with every node x for which fn(x) returns a non-null expression replaced by it (its
// arguments not visited); other interior nodes are copied with their arguments rewritten.
template <class Fn>
Expr mutate_expr(const Expr& e, Fn&& fn) {
  if (Expr r = fn(e)) return r;
  if (e->args.empty()) return e;
  auto n = std::make_shared<ExprNode>(*e);
  for (auto& a : n->args) a = mutate_expr(a, fn);
  return n;
}

// mutate_expr over the index and value of s and of every statement nested in it, in place.
template <class Fn>
void mutate_exprs_in(Stmt& s, Fn&& fn) {
  for_each_stmt(s, [&](Stmt& x) {
    if (x.index) x.index = mutate_expr(x.index, fn);
    if (x.value) x.value = mutate_expr(x.value, fn);
  });
}

// ---- classes --------------------------------------------------------------------------------

// Override the hooks of the kinds a walk cares about; call the base hook (or visit_children) to
// go on below the node.
class Visitor {
 public:
  virtual ~Visitor() = default;
  void visit(const Expr& e);
  void visit(const Stmt& s);

 protected:
  void visit_children(const Expr& e);
  void visit_children(const Stmt& s);  // index, value, body
#define FF_LOOP_VISIT_HOOK(kind, doc) \
  virtual void visit_##kind(const Expr& e) { visit_children(e); }
  FF_LOOP_EXPR_KINDS(FF_LOOP_VISIT_HOOK)
#undef FF_LOOP_VISIT_HOOK
#define FF_LOOP_VISIT_HOOK(kind, doc) \
  virtual void visit_##kind(const Stmt& s) { visit_children(s); }
  FF_LOOP_STMT_KINDS(FF_LOOP_VISIT_HOOK)
#undef FF_LOOP_VISIT_HOOK
};

// Expression hooks return the node's replacement (the base: a copy with rewritten arguments,
// leaves themselves); statement hooks rewrite the statement in place.
class Mutator {
 public:
  virtual ~Mutator() = default;
  Expr mutate(const Expr& e);
  void mutate(Stmt& s);

 protected:
  Expr mutate_children(const Expr& e);
  void mutate_children(Stmt& s);  // index, value, body
#define FF_LOOP_MUTATE_HOOK(kind, doc) \
  virtual Expr mutate_##kind(const Expr& e) { return mutate_children(e); }
  FF_LOOP_EXPR_KINDS(FF_LOOP_MUTATE_HOOK)
#undef FF_LOOP_MUTATE_HOOK
#define FF_LOOP_MUTATE_HOOK(kind, doc) \
  virtual void mutate_##kind(Stmt& s) { mutate_children(s); }
  FF_LOOP_STMT_KINDS(FF_LOOP_MUTATE_HOOK)
#undef FF_LOOP_MUTATE_HOOK
};

}  // namespace ff::loop
