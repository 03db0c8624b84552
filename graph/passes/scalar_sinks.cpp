#include "graph/passes/scalar_sinks.h"

#include <unordered_map>

#include "graph/op.h"
#include "graph/passes/effects.h"
#include "graph/passes/rewriter.h"
#include "graph/passes/specialize_shapes.h"

namespace ff {

std::optional<ScalarSinkSplit> split_scalar_sinks(const Graph& g) {
  std::optional<NodeId> out = g.output();
  if (!out || has_unbacked_symbols(g)) return std::nullopt;
  const Value& result = g.output_value();
  if (result.kind != Value::Kind::Tuple) return std::nullopt;
  // The numbers: item() calls and the calls that take a number (Python arithmetic on them).
  std::vector<bool> number(g.size(), false);
  bool any = false;
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    if (n.kind == NodeKind::Output) continue;
    if (n.kind == NodeKind::Call && mutates_operand(n)) return std::nullopt;
    bool reads_number = false;
    for (const Value& a : n.args) a.for_each_node([&](NodeId o) { reads_number = reads_number || number[static_cast<size_t>(o)]; });
    if (n.kind == NodeKind::Call && op_kind(n) == Op::tensor_item) {
      number[static_cast<size_t>(id)] = any = true;
    } else if (reads_number) {
      // NB: only Python arithmetic on numbers, whose result is a number: a tensor op taking one
      // (y * s) needs the number inside the tensor work.
      if (n.kind != NodeKind::Call || n.meta.is_tensor() ||
          !(n.meta.kind == ValueMeta::Kind::Float || n.meta.kind == ValueMeta::Kind::Int))
        return std::nullopt;
      number[static_cast<size_t>(id)] = true;
    }
  }
  if (!any) return std::nullopt;
  for (const Value& v : result.items)
    if (!(v.kind == Value::Kind::Node || v.kind == Value::Kind::None || v.is_number())) return std::nullopt;

  ScalarSinkSplit split;
  // The tensor work, in the original order; its outputs: the original ones (None for a number),
  // then each tensor a number reads that is not among them.
  GraphRewriter tensors(g);
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id)
    if (!number[static_cast<size_t>(id)] && g.node(id).kind != NodeKind::Output) tensors.copy(id);
  std::vector<Value> outs;
  std::unordered_map<NodeId, int> out_index;  // original tensor node -> index in outs
  for (const Value& v : result.items) {
    bool is_number = v.kind == Value::Kind::Node && number[static_cast<size_t>(v.node)];
    if (v.kind == Value::Kind::Node && !is_number) out_index.emplace(v.node, static_cast<int>(outs.size()));
    outs.push_back(is_number ? Value::none() : tensors.map(v));
  }
  // The numbers: a placeholder per tensor an item() reads (placeholders come first), then their calls.
  GraphRewriter scalars(g);
  std::vector<bool> read(g.size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    if (!number[static_cast<size_t>(id)]) continue;
    for (const Value& a : g.node(id).args) {
      if (a.kind != Value::Kind::Node || number[static_cast<size_t>(a.node)] || read[static_cast<size_t>(a.node)]) continue;
      NodeId t = a.node;
      read[static_cast<size_t>(t)] = true;
      auto [it, added] = out_index.emplace(t, static_cast<int>(outs.size()));
      if (added) outs.push_back(tensors.map(a));
      split.operand_outputs.push_back(it->second);
      if (g.node(t).kind == NodeKind::Placeholder) scalars.copy(t);
      else scalars.replace(t, Value::of_node(scalars.add_placeholder(g.node(t).name, g.node(t).meta)));
    }
  }
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id)
    if (number[static_cast<size_t>(id)]) scalars.copy(id);
  std::vector<Value> numbers;
  for (size_t i = 0; i < result.items.size(); ++i) {
    const Value& v = result.items[i];
    if (v.kind != Value::Kind::Node || !number[static_cast<size_t>(v.node)]) continue;
    numbers.push_back(scalars.map(v));
    split.scalar_outputs.push_back(static_cast<int>(i));
  }
  tensors.copy_with(*out, {Value::tuple(std::move(outs))});
  scalars.copy_with(*out, {Value::tuple(std::move(numbers))});
  split.tensors = tensors.finish();
  split.scalars = scalars.finish();
  return split;
}

}  // namespace ff
