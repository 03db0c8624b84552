// What the derivative rule files share (derivatives.cpp, derivatives_pointwise.cpp,
// derivatives_shape.cpp, derivatives_nn.cpp): small helpers, and how each file adds its rules to the
// table derivative_rule() reads.
#pragma once

#include <string>
#include <vector>

#include "graph/autograd/derivatives.h"
#include "graph/op_registry.h"
#include "src/base/errors.h"

namespace ff::grad {

inline Value ints(const std::vector<int64_t>& v) {
  std::vector<Value> items;
  for (int64_t i : v) items.push_back(Value::of_int(i));
  return Value::list(std::move(items));
}

inline std::vector<int64_t> int_list(const Value& v) {
  std::vector<int64_t> out;
  if (v.kind == Value::Kind::Int) return {v.i};
  for (const Value& item : v.items) {
    if (item.kind != Value::Kind::Int) throw Unsupported("a derivative rule needs constant dims");
    out.push_back(item.i);
  }
  return out;
}

inline int64_t wrap(int64_t dim, int64_t ndim) {
  int64_t n = ndim == 0 ? 1 : ndim;
  return dim < 0 ? dim + n : dim;
}

inline bool is_reduced_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

[[noreturn]] inline void unsupported(RuleContext& c, const std::string& why) {
  throw Unsupported("no derivative for " + op_def(c.node.op).target + " " + why);
}

// Identity-like: the gradient goes through unchanged (the driver casts and sums it to shape).
inline void rule_identity(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (c.needs(x)) c.give(x, c.grad);
}

// Each rule file's part of the table.
void add_pointwise_rules(OpTable<DerivativeRule>& t);  // arithmetic, activations, where, casts, dropout
void add_shape_rules(OpTable<DerivativeRule>& t);      // views, indexing, reductions, cat/split, pad
void add_nn_rules(OpTable<DerivativeRule>& t);         // products, norms, softmax, conv, pooling, losses

}  // namespace ff::grad
