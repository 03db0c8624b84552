#include "inductor/loop_passes/write_epilogues_in_place.h"

#include <memory>

#include "graph/op.h"
#include "graph/op_registry.h"
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
// Loads and stores of buffer `from` made ones of `to`.
struct RenameBuffer : loop::Mutator {
  int from, to;
  RenameBuffer(int f, int t) : from(f), to(t) {}
  Expr mutate_Load(const Expr& e) override {
    if (e->id != from) return mutate_children(e);
    auto n = std::make_shared<loop::ExprNode>(*e);
    n->id = to;
    for (auto& a : n->args) a = mutate(a);
    return n;
  }
  void mutate_Store(Stmt& s) override {
    if (s.buf == from) s.buf = to;
    mutate_children(s);
  }
};
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
      if (eb.role != loop::BufferRole::ExternResult || eb.dtype != ob.dtype || !eb.sizes.same_as(ob.sizes) || !eb.strides.same_as(ob.strides)) continue;
      bool fresh = false;
      for (const auto& x : out.externs)
        if (x.result == e && x.op != kNoOp) fresh = op_def(x.op).has(kExtern) && op_kind(x.op) != Op::einsum;
      if (!fresh) continue;
      bool same_element = true;
      loop::for_each_expr(st->index, [&](const Expr& x) { same_element &= !(x->kind == ExprKind::Load && x->id == e); });
      loop::for_each_expr(st->value, [&](const Expr& x) {
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
          RenameBuffer(o, e).mutate(out.kernels[static_cast<size_t>(ts.index)].root);
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

}  // namespace ff::inductor
