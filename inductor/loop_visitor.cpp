#include "inductor/loop_visitor.h"

namespace ff::loop {

void Visitor::visit(const Expr& e) {
  switch (e->kind) {
#define FF_LOOP_VISIT_CASE(kind, doc) \
  case ExprKind::kind: return visit_##kind(e);
    FF_LOOP_EXPR_KINDS(FF_LOOP_VISIT_CASE)
#undef FF_LOOP_VISIT_CASE
  }
}

void Visitor::visit(const Stmt& s) {
  switch (s.kind) {
#define FF_LOOP_VISIT_CASE(kind, doc) \
  case StmtKind::kind: return visit_##kind(s);
    FF_LOOP_STMT_KINDS(FF_LOOP_VISIT_CASE)
#undef FF_LOOP_VISIT_CASE
  }
}

void Visitor::visit_children(const Expr& e) {
  for (const Expr& a : e->args) visit(a);
}

void Visitor::visit_children(const Stmt& s) {
  if (s.index) visit(s.index);
  if (s.value) visit(s.value);
  for (const Stmt& c : s.body) visit(c);
}

Expr Mutator::mutate(const Expr& e) {
  switch (e->kind) {
#define FF_LOOP_MUTATE_CASE(kind, doc) \
  case ExprKind::kind: return mutate_##kind(e);
    FF_LOOP_EXPR_KINDS(FF_LOOP_MUTATE_CASE)
#undef FF_LOOP_MUTATE_CASE
  }
  return e;
}

void Mutator::mutate(Stmt& s) {
  switch (s.kind) {
#define FF_LOOP_MUTATE_CASE(kind, doc) \
  case StmtKind::kind: return mutate_##kind(s);
    FF_LOOP_STMT_KINDS(FF_LOOP_MUTATE_CASE)
#undef FF_LOOP_MUTATE_CASE
  }
}

Expr Mutator::mutate_children(const Expr& e) {
  if (e->args.empty()) return e;
  auto n = std::make_shared<ExprNode>(*e);
  for (auto& a : n->args) a = mutate(a);
  return n;
}

void Mutator::mutate_children(Stmt& s) {
  if (s.index) s.index = mutate(s.index);
  if (s.value) s.value = mutate(s.value);
  for (Stmt& c : s.body) mutate(c);
}

}  // namespace ff::loop
