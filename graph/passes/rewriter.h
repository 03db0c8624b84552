// GraphRewriter: how passes build their result. Nodes of the source graph are copied in order;
// each source node maps to the Value that stands for it in the result: its copy, another node
// (CSE, no-op views) or a constant (folding). Operands are mapped on the way.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/ir.h"

namespace ff {

// The metadata op's rule gives a call of `args` in `g`, or nullopt where the rule declines or throws:
// a pass then keeps the call as captured.
std::optional<ValueMeta> inferred_meta(OpId op, const std::vector<Value>& args, const Graph& g);

// Call `n`'s operand bound to parameter `param` of its op's schema (InternalError if it has none).
const Value& call_arg(const Node& n, std::string_view param);

// Same dtype, sizes, strides and device: what a tensor result promises its readers (a rewrite that
// changes any of them is refused).
bool same_tensor_meta(const ValueMeta& a, const ValueMeta& b);

class GraphRewriter {
 public:
  explicit GraphRewriter(const Graph& source);

  const Graph& source() const { return src_; }
  const Graph& result() const { return dst_; }

  // What source node `id` became. InternalError if it was dropped and is still used.
  const Value& mapped(NodeId id) const;
  bool is_mapped(NodeId id) const { return map_.at(static_cast<size_t>(id)).has_value(); }
  // A source operand as an operand of the result.
  Value map(const Value& v) const;

  // Copies source node `id` (same kind, op, name and meta) with its operands mapped, or with `args`.
  NodeId copy(NodeId id);
  NodeId copy_with(NodeId id, std::vector<Value> args);
  // Uses of source node `id` become `with` (a result operand); the node itself is not copied.
  void replace(NodeId id, Value with);
  // A new call in the result (a pass's replacement); `args` are result operands, bound to the op's schema.
  NodeId add_call(OpId op, std::vector<Value> args, ValueMeta meta, const std::string& name_hint);

  // A new input of the result (only before the first call is added).
  NodeId add_placeholder(const std::string& name, ValueMeta meta) { return dst_.add_placeholder(name, std::move(meta)); }

  Graph finish() { return std::move(dst_); }

 private:
  const Graph& src_;
  Graph dst_;
  std::vector<std::optional<Value>> map_;
};

}  // namespace ff
