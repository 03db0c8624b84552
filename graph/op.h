// Ops as identifiers: `enum class Op` has one enumerator per op of graph/ops.def, in the same
// order, so an op's enumerator is its OpId (ops.def's ops get ids 0 .. kOpCount - 1). Passes and
// lowerings compare and index by Op; renaming an op in ops.def is a compile error wherever it is
// used. Names stay for printing and for open ops.
//
// Ops registered at run time by the open registry (graph/aten_schema, graph/python/open_ops) have
// no enumerator: op_kind() gives them Op::Open, and their OpDef keeps their name.
//
// Op families, also derived from ops.def:
//  - functional_form(op): the out-of-place form of an in-place op that takes the same arguments
//    (add_ -> add, op_iadd -> op_add, relu_ -> relu), Op::Open where there is none. The one table
//    every functionalization uses.
//  - views, in-place ops and the other traits: OpDef::has(kView) ... (graph/op_registry.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "graph/ir.h"

namespace ff {

enum class Op : int32_t {
#define FF_OP(name, ...) name,
#define FF_INPLACE_OP(name, ...) name,
#include "graph/ops.def"
#undef FF_INPLACE_OP
#undef FF_OP
  Open,  // an op of the open registry: no enumerator, identified by its OpId and name
};

// The number of ops in graph/ops.def.
constexpr size_t kOpCount = static_cast<size_t>(Op::Open);

constexpr Op op_kind(OpId id) {
  return id >= 0 && static_cast<size_t>(id) < kOpCount ? static_cast<Op>(id) : Op::Open;
}
// Op::Open for a node that is not a call.
inline Op op_kind(const Node& n) { return n.kind == NodeKind::Call ? op_kind(n.op) : Op::Open; }
// The OpId of an op of graph/ops.def (not Op::Open).
constexpr OpId op_id(Op op) { return static_cast<OpId>(op); }

namespace detail {
inline constexpr Op kFunctionalForm[] = {
#define FF_OP(name, ...) Op::Open,
#define FF_INPLACE_OP(name, functional, ...) Op::functional,
#include "graph/ops.def"
#undef FF_INPLACE_OP
#undef FF_OP
};
static_assert(sizeof(kFunctionalForm) / sizeof(kFunctionalForm[0]) == kOpCount);
}  // namespace detail

// The out-of-place form of in-place op `op` (see above); Op::Open where there is none.
constexpr Op functional_form(Op op) {
  return op == Op::Open ? Op::Open : detail::kFunctionalForm[static_cast<size_t>(op)];
}

// Whether `op` is one of `ops` (`op_in(op_kind(n), {Op::softmax, Op::f_softmax})`).
constexpr bool op_in(Op op, std::initializer_list<Op> ops) {
  for (Op o : ops)
    if (o == op) return true;
  return false;
}

// A table indexed by Op, for the ops of graph/ops.def (lowering rules ...).
template <typename T>
class OpTable {
 public:
  T& operator[](Op op) { return items_[static_cast<size_t>(op)]; }
  // The entry of `op`, or a value-initialized T for Op::Open.
  T at(Op op) const { return op == Op::Open ? T{} : items_[static_cast<size_t>(op)]; }

 private:
  T items_[kOpCount] = {};
};

}  // namespace ff
