// What passes must know about a node beyond its value: whether running it has effects other than
// producing its result, and which results may share memory.
#pragma once

#include <vector>

#include "graph/ir.h"

namespace ff {

// The call writes into its first operand: an in-place op (kInplace), or an `inplace=True` /
// non-None `out=` argument (F.relu(x, inplace=True)).
bool mutates_operand(const Node& n);

// Eager's result is a new tensor object viewing the call's operand: a view op (kView), or a
// subscript with basic indexing (ints, slices, None, Ellipsis); not an in-place call, whose
// result is its operand itself. `x[0:2]` of a 2-row x is a new object even with x's own shape.
bool returns_new_view(const Node& n);

// Eager's result is the call's first operand itself (the same tensor object): dropout that does
// not train or drops with p == 0 returns its input.
bool returns_its_operand(const Node& n);

// The operands a call writes: its first for an in-place call (mutates_operand), and batch norm's
// running statistics when it runs in training (F.batch_norm updates them as it normalizes).
std::vector<NodeId> written_operands(const Node& n);

// Removing or merging the call changes what the program does besides its result: a mutation, or
// a draw from the RNG (kRandom).
bool has_side_effects(const Node& n);

// The call may raise for some operand values, so eager runs it even where its result is unused:
// integer division and remainder (by zero), indexing (out of range), and the ops not known not to
// (extern, composite and open ops: a cross_entropy target out of range, a singular matrix ...).
bool may_raise(const Node& n, const Graph& g);

// A call whose result depends only on its operands' values and that does nothing else: safe to
// merge with an identical call or to evaluate early.
bool is_pure_call(const Node& n);

// The call surely returns new memory: never an operand, a view of one, or an alias of one
// (pointwise, reduction, extern, composite and creation ops that mutate nothing, less views and
// the methods that may return `self`: x.to(x.dtype) is x, einsum("ij->ji", x) is a view).
bool returns_fresh_tensor(const Node& n);

// Alias classes: two nodes in different classes never share memory. A call joins the classes of
// its tensor operands unless it surely returns a fresh tensor; getitems join their tuple's class;
// graph inputs share one class, since a caller may pass one tensor twice.
// Over-approximate on purpose: an op the table does not know aliases its operands.
class AliasClasses {
 public:
  explicit AliasClasses(const Graph& g);
  int of(NodeId id) const;

 private:
  mutable std::vector<int> parent_;
  void join(NodeId a, NodeId b);
};

}  // namespace ff
