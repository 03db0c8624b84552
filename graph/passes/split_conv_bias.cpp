#include "graph/passes/split_conv_bias.h"

#include <optional>

#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/rewriter.h"

namespace ff {

Graph split_conv_bias(const Graph& g) {
  // Calls read by a call that becomes generated code (not an extern): the add has a kernel to join.
  std::vector<bool> lowered_reader(g.size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& nd = g.node(id);
    if (nd.kind != NodeKind::Call || op_def(nd.op).has(kExtern)) continue;
    for (const Value& v : nd.args) v.for_each_node([&](NodeId u) { lowered_reader[static_cast<size_t>(u)] = true; });
  }
  GraphRewriter rw(g);
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& nd = g.node(id);
    bool conv = nd.kind == NodeKind::Call && (op_kind(nd.op) == Op::conv1d || op_kind(nd.op) == Op::conv2d) &&
                lowered_reader[static_cast<size_t>(id)];
    if (!conv || nd.args.size() < 3 || !nd.args[2].is_node() || !nd.meta.is_tensor() || nd.meta.tensor.dim() < 3 ||
        nd.meta.tensor.sizes[1].is_symbolic() || g.meta_of(nd.args[2]).tensor.dim() != 1) {
      rw.copy(id);
      continue;
    }
    // [C, 1, ...]: the bias along the channel dim of the [N, C, ...] output.
    std::vector<Value> shape{Value::of_int(nd.meta.tensor.sizes[1].hint())};
    for (int64_t d = 2; d < nd.meta.tensor.dim(); ++d) shape.push_back(Value::of_int(1));
    // Typed on a graph of their own, the convolution's result and the bias its inputs (a copy of the
    // result so far per convolution would make the pass quadratic).
    Graph t;
    NodeId tc = t.add_placeholder("c", nd.meta), tb = t.add_placeholder("b", g.meta_of(nd.args[2]));
    std::optional<ValueMeta> vm = inferred_meta(op_id(Op::reshape), {Value::of_node(tb), Value::list(shape)}, t);
    if (!vm) {
      rw.copy(id);
      continue;
    }
    NodeId tv = t.add_call(op_id(Op::reshape), {Value::of_node(tb), Value::list(shape)}, *vm);
    std::optional<ValueMeta> am = inferred_meta(op_id(Op::op_add), {Value::of_node(tc), Value::of_node(tv)}, t);
    if (!am || !same_tensor_meta(*am, nd.meta)) {
      rw.copy(id);
      continue;
    }
    std::vector<Value> args;
    for (const Value& v : nd.args) args.push_back(rw.map(v));
    Value bias = args[2];
    args[2] = Value::none();
    // NB: the output's layout does not depend on the bias (the channels-last pass set it).
    NodeId c = rw.add_call(nd.op, std::move(args), nd.meta, nd.name);
    NodeId v = rw.add_call(op_id(Op::reshape), {bias, Value::list(shape)}, *vm, nd.name + "_bias");
    ValueMeta out = nd.meta;  // NB: requires_grad as captured
    rw.replace(id, Value::of_node(rw.add_call(op_id(Op::op_add), {Value::of_node(c), Value::of_node(v)}, out, nd.name + "_add")));
  }
  return rw.finish();
}

}  // namespace ff
