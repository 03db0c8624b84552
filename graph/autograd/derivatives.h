// Derivative rules: how the gradient of an op's result becomes gradients of its operands, written as
// graph calls (so the backward fuses like any other graph). One rule per op family, in the spirit of
// torch's derivatives.yaml; the formulas follow eager's (tools/autograd/derivatives.yaml and
// FunctionsManual.cpp) so gradients agree with eager's up to rounding.
//
// A rule reads the forward call (operands and result are nodes of the joint graph) and the gradient
// of its result, and hands a gradient to each operand it differentiates (`give`). The driver
// (autograd.cpp) casts each to its operand's dtype, sums it over broadcast dims to the operand's
// shape, and adds up the gradients an operand receives from several uses.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/autograd/autograd.h"
#include "graph/op.h"

namespace ff {

// Builds backward calls into the joint graph.
class GradBuilder {
 public:
  GradBuilder(Graph& g, const CallTyper& typer) : g_(g), typer_(typer) {}

  Value call(Op op, const std::vector<Value>& positional, const std::vector<std::pair<std::string, Value>>& keywords = {});
  // An op of the open registry by its target (`torch.ops.aten.embedding_dense_backward`).
  Value call(const std::string& target, const std::vector<Value>& positional);

  const TensorMeta& tensor(const Value& v) const;
  Graph& graph() { return g_; }

  // Shorthands over call().
  Value mul(const Value& a, const Value& b) { return call(Op::mul, {a, b}); }
  Value add(const Value& a, const Value& b) { return call(Op::add, {a, b}); }
  Value sub(const Value& a, const Value& b) { return call(Op::sub, {a, b}); }
  Value div(const Value& a, const Value& b) { return call(Op::div, {a, b}); }
  Value neg(const Value& a) { return call(Op::neg, {a}); }
  Value scale(const Value& a, double c) { return mul(a, Value::of_float(c)); }
  // `g` where `keep` holds, 0 elsewhere (NaN in g included, as eager's masked formulas).
  Value keep_where(const Value& g, const Value& keep);
  Value reshape(const Value& v, const std::vector<int64_t>& sizes);
  Value sum(const Value& v, const std::vector<int64_t>& dims, bool keepdim);
  Value mean(const Value& v, const std::vector<int64_t>& dims, bool keepdim);
  // `v` summed over the dims broadcasting added or widened, to `sizes`.
  Value sum_to(const Value& v, const std::vector<int64_t>& sizes);
  Value expand(const Value& v, const std::vector<int64_t>& sizes);
  Value cast(const Value& v, DType dtype);
  // Half and bfloat16 values in float32, as eager's kernels compute them.
  Value opmath(const Value& v);
  Value transpose_last(const Value& v);  // the last two dims swapped
  Value zeros_like(const Value& v);
  Value item(const Value& tuple, int64_t index);  // a getitem of a tuple-result call

 private:
  Graph& g_;
  const CallTyper& typer_;
};

struct RuleContext {
  GradBuilder& b;
  const Node& node;  // the forward call; its operands are joint-graph values
  Op kind;           // derivative_kind(node.op)
  Value out;         // its result
  Value grad;        // the gradient of its result (not a tuple-result op)
  // Tuple-result ops (split, chunk, unbind): per item, the gradient it received, if any.
  std::vector<std::optional<Value>> item_grads;
  // What the rule hands out: (operand, its gradient).
  std::vector<std::pair<Value, Value>> given;

  const Value& arg(std::string_view name) const;
  const TensorMeta& tensor(std::string_view name) const { return b.tensor(arg(name)); }
  // Whether operand `name` is a tensor node that requires grad.
  bool needs(std::string_view name) const;
  bool needs(const Value& v) const;
  void give(std::string_view name, const Value& g) { give(arg(name), g); }
  void give(const Value& operand, const Value& g) { given.emplace_back(operand, g); }
};

using DerivativeRule = void (*)(RuleContext& c);

// The op whose rule differentiates calls of `op`: itself, or for an op of the open registry the
// listed op with its target (Op::Open if none).
Op derivative_kind(OpId op);
// The rule of `op`, or nullptr (the backward cannot be built).
DerivativeRule derivative_rule(Op op);

}  // namespace ff
