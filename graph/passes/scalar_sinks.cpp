#include "graph/passes/scalar_sinks.h"

#include <functional>
#include <unordered_map>

#include "graph/op.h"
#include "graph/passes/effects.h"
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
  std::vector<NodeId> in_tensors(g.size(), -1), in_scalars(g.size(), -1);
  auto remap = [](const Value& v, const std::vector<NodeId>& map) {
    std::function<Value(const Value&)> go = [&](const Value& x) {
      Value y = x;
      if (x.kind == Value::Kind::Node) y.node = map[static_cast<size_t>(x.node)];
      for (Value& item : y.items) item = go(item);
      return y;
    };
    return go(v);
  };
  // The tensor work, in the original order.
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    if (number[static_cast<size_t>(id)] || n.kind == NodeKind::Output) continue;
    if (n.kind == NodeKind::Placeholder) {
      in_tensors[static_cast<size_t>(id)] = split.tensors.add_placeholder(n.name, n.meta);
    } else if (n.kind == NodeKind::GetItem) {
      in_tensors[static_cast<size_t>(id)] = split.tensors.add_getitem(in_tensors[static_cast<size_t>(n.args[0].node)], n.args[1].i, n.name);
    } else {
      in_tensors[static_cast<size_t>(id)] = split.tensors.add_call(n.op, remap(Value::list(n.args), in_tensors).items, n.meta, n.name);
    }
  }
  std::vector<Value> outs;
  std::unordered_map<NodeId, int> out_index;  // original tensor node -> index in outs
  for (size_t i = 0; i < result.items.size(); ++i) {
    const Value& v = result.items[i];
    if (v.kind == Value::Kind::Node && number[static_cast<size_t>(v.node)]) {
      outs.push_back(Value::none());
      continue;
    }
    if (v.kind == Value::Kind::Node) out_index.emplace(v.node, static_cast<int>(outs.size()));
    outs.push_back(remap(v, in_tensors));
  }
  // The numbers: a placeholder per tensor an item() reads (placeholders come first), then their calls.
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    if (!number[static_cast<size_t>(id)]) continue;
    for (const Value& a : g.node(id).args) {
      if (a.kind != Value::Kind::Node || number[static_cast<size_t>(a.node)] || in_scalars[static_cast<size_t>(a.node)] >= 0) continue;
      NodeId t = a.node;
      auto found = out_index.find(t);
      int index = found != out_index.end() ? found->second : static_cast<int>(outs.size());
      if (found == out_index.end()) {
        out_index.emplace(t, index);
        outs.push_back(Value::of_node(in_tensors[static_cast<size_t>(t)]));
      }
      in_scalars[static_cast<size_t>(t)] = split.scalars.add_placeholder(g.node(t).name, g.node(t).meta);
      split.operand_outputs.push_back(index);
    }
  }
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    if (number[static_cast<size_t>(id)])
      in_scalars[static_cast<size_t>(id)] = split.scalars.add_call(n.op, remap(Value::list(n.args), in_scalars).items, n.meta, n.name);
  }
  split.tensors.set_output(Value::tuple(std::move(outs)));
  std::vector<Value> numbers;
  for (size_t i = 0; i < result.items.size(); ++i) {
    const Value& v = result.items[i];
    if (v.kind != Value::Kind::Node || !number[static_cast<size_t>(v.node)]) continue;
    numbers.push_back(Value::of_node(in_scalars[static_cast<size_t>(v.node)]));
    split.scalar_outputs.push_back(static_cast<int>(i));
  }
  split.scalars.set_output(Value::tuple(std::move(numbers)));
  return split;
}

}  // namespace ff
