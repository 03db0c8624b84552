#include "graph/autograd/autograd.h"

#include <optional>
#include <unordered_map>

#include "graph/autograd/derivatives.h"
#include "graph/meta_rules.h"
#include "graph/op_registry.h"
#include "graph/passes/effects.h"
#include "src/base/config.h"
#include "src/base/errors.h"

namespace ff {

namespace {

Value map_value(const Value& v, const std::vector<NodeId>& map) {
  if (v.is_node()) {
    NodeId to = map.at(static_cast<size_t>(v.node));
    FF_CHECK(to >= 0, "a value of the joint graph was not carried over");
    return Value::of_node(to);
  }
  if (v.items.empty()) return v;
  Value out = v;
  for (Value& item : out.items) item = map_value(item, map);
  return out;
}

// Copies node `id` of `from` into `to` with its operands mapped; records the copy in `map`.
NodeId copy_node(const Graph& from, NodeId id, Graph& to, std::vector<NodeId>& map) {
  const Node& n = from.node(id);
  NodeId out = -1;
  if (n.kind == NodeKind::Call) {
    std::vector<Value> args;
    for (const Value& a : n.args) args.push_back(map_value(a, map));
    out = to.add_call(n.op, std::move(args), n.meta, n.name);
  } else if (n.kind == NodeKind::GetItem) {
    out = to.add_getitem(map_value(n.args[0], map).node, n.args[1].i, n.name);
    to.mutable_node(out).meta = n.meta;
  } else {
    FF_CHECK(false, "copy_node copies calls and getitems");
  }
  to.mutable_node(out).checkpointed = n.checkpointed;
  map[static_cast<size_t>(id)] = out;
  return out;
}

// The node a chain of views starts from.
NodeId view_base(const Graph& g, NodeId id) {
  while (g.node(id).kind == NodeKind::Call && op_def(g.node(id).op).has(kView) && g.node(id).args[0].is_node())
    id = g.node(id).args[0].node;
  return id;
}

// What the source returns: a flat tuple of tensors. Results that are inputs or views of inputs are
// left out of the Function (it would return them as new tensors, and eager's aliasing would be
// lost): `aliases` lists their positions, and the runtime makes them from the inputs, as eager.
std::vector<NodeId> checked_outputs(const Graph& g, std::vector<int>* aliases) {
  const Value& out = g.output_value();
  if (!out.is_sequence()) throw Unsupported("the graph's result is not a tuple of tensors");
  std::vector<NodeId> nodes, bases;
  for (const Value& v : out.items) {
    if (!v.is_node() || !g.node(v.node).meta.is_tensor()) throw Unsupported("the graph returns something other than tensors");
    NodeId base = view_base(g, v.node);
    if (g.node(base).kind == NodeKind::Placeholder) {
      aliases->push_back(static_cast<int>(&v - out.items.data()));
      continue;
    }
    for (NodeId b : bases)
      if (b == base) throw Unsupported("two results of the graph share memory");
    nodes.push_back(v.node);
    bases.push_back(base);
  }
  return nodes;
}

// The graph of the results that alias inputs: the source's inputs in, their view chains.
Graph alias_graph(const Graph& src, const std::vector<int>& aliases) {
  Graph out;
  std::vector<NodeId> map(src.size(), -1);
  for (NodeId p : src.placeholders()) map[static_cast<size_t>(p)] = out.add_placeholder(src.node(p).name, src.node(p).meta);
  std::vector<Value> results;
  for (int k : aliases) {
    std::vector<NodeId> chain;
    for (NodeId id = src.output_value().items[static_cast<size_t>(k)].node; src.node(id).kind != NodeKind::Placeholder;
         id = src.node(id).args[0].node)
      chain.push_back(id);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it)
      if (map[static_cast<size_t>(*it)] < 0) copy_node(src, *it, out, map);
    results.push_back(map_value(src.output_value().items[static_cast<size_t>(k)], map));
  }
  out.set_output(Value::tuple(std::move(results)));
  return out;
}

void check_calls(const Graph& g) {
  for (const Node& n : g.nodes()) {
    if (op_in(op_kind(n), {Op::conv1d, Op::conv2d}) && !config().aot_autograd_convolutions)
      throw Unsupported("graphs with convolutions train faster on eager ops for now (config aot_autograd_convolutions)");
    if (n.kind != NodeKind::Call || !n.meta.requires_grad()) continue;
    const OpDef& op = op_def(n.op);
    if (call_mutates_input(op, n.args))
      throw Unsupported(op.target + " writes a tensor that requires grad in place");
    if (op.has(kCreation)) throw Unsupported(op.target + " creates a tensor that requires grad inside the graph");
  }
}

// A dropout in training whose result needs a gradient, as eager computes it: x * dropout(ones_like(x))
// (the same draws: one call of the same op on a tensor of the same sizes, strides and dtype; bit for
// bit eager's result on CPU for every dtype, and on CUDA in float32 and float64, where the fused
// kernel's x * mask * scale rounds the same). The mask then is a value the backward can read. Half
// and bfloat16 on CUDA (scale rounded differently) and other dropouts stay as they are, and the
// split reports them.
std::optional<Value> explicit_dropout(GradBuilder& b, const Node& n, const std::vector<Value>& args) {
  Op kind = op_kind(n);
  if (!op_in(kind, {Op::f_dropout, Op::dropout}) || !n.meta.is_tensor() || !n.meta.tensor.requires_grad) return std::nullopt;
  const OpSchema& s = op_def(n.op).schema;
  const Value& p = n.args[static_cast<size_t>(s.index_of("p"))];
  const Value& train = n.args[static_cast<size_t>(s.index_of(kind == Op::f_dropout ? "training" : "train"))];
  if (!p.is_number() || p.as_double() <= 0.0 || p.as_double() >= 1.0 || train.kind != Value::Kind::Bool || !train.b)
    return std::nullopt;
  if (kind == Op::f_dropout && n.args[static_cast<size_t>(s.index_of("inplace"))].b) return std::nullopt;
  const TensorMeta& t = n.meta.tensor;
  if (t.device.type == Device::Type::CUDA && t.dtype != DType::Float32 && t.dtype != DType::Float64) return std::nullopt;
  Value noise = b.call(kind, {b.call(Op::ones_like, {args[0]}), p, train});
  Value out = b.mul(args[0], noise);
  b.graph().mutable_node(out.node).meta.tensor.requires_grad = true;
  return out;
}

Graph with_explicit_dropout(const Graph& src, const CallTyper& typer) {
  Graph out;
  GradBuilder b(out, typer);
  std::vector<NodeId> map(src.size(), -1);
  for (NodeId id = 0; id < static_cast<NodeId>(src.size()); ++id) {
    const Node& n = src.node(id);
    if (n.kind == NodeKind::Placeholder) {
      map[static_cast<size_t>(id)] = out.add_placeholder(n.name, n.meta);
    } else if (n.kind == NodeKind::Output) {
      out.set_output(map_value(n.args[0], map));
    } else if (n.kind == NodeKind::Call) {
      std::vector<Value> args;
      for (const Value& a : n.args) args.push_back(map_value(a, map));
      std::optional<Value> made = explicit_dropout(b, n, args);
      if (made)
        map[static_cast<size_t>(id)] = made->node;
      else
        map[static_cast<size_t>(id)] = out.add_call(n.op, std::move(args), n.meta, n.name);
      out.mutable_node(map[static_cast<size_t>(id)]).checkpointed = n.checkpointed;
    } else {
      copy_node(src, id, out, map);
    }
  }
  return out;
}

struct Joint {
  Graph g;
  size_t inputs = 0;           // joint nodes [0, inputs) are the source's inputs, in order
  size_t tangents = 0;         // then the tangents
  NodeId first_backward = 0;   // nodes from here on are the backward's
  std::vector<NodeId> outputs;  // the source's results (joint nodes)
  std::vector<bool> differentiable;
  std::vector<int> grad_inputs;
  std::vector<Value> grads;  // per grad_inputs: the gradient, or None
  std::vector<int> aliases;  // positions of the source's results that alias its inputs
};

// Adds `grad` (for joint node `operand`) to what it received, cast and summed to its metadata.
void accumulate(GradBuilder& b, std::vector<std::optional<Value>>& grads, const Value& operand, Value grad) {
  const TensorMeta want = b.tensor(operand);
  grad = b.cast(b.sum_to(grad, want.sizes), want.dtype);
  auto& slot = grads[static_cast<size_t>(operand.node)];
  slot = slot ? b.add(*slot, grad) : grad;
}

Joint build_joint(const Graph& source, const CallTyper& typer) {
  Graph src = with_explicit_dropout(source, typer);
  Joint j;
  std::vector<NodeId> outs = checked_outputs(src, &j.aliases);
  check_calls(src);
  std::vector<NodeId> map(src.size(), -1);
  for (NodeId p : src.placeholders()) {
    map[static_cast<size_t>(p)] = j.g.add_placeholder(src.node(p).name, src.node(p).meta);
    ++j.inputs;
  }
  std::vector<NodeId> tangents;
  for (NodeId o : outs) {
    bool diff = src.node(o).meta.tensor.requires_grad;
    j.differentiable.push_back(diff);
    if (!diff) continue;
    TensorMeta t = src.node(o).meta.tensor;
    t = TensorMeta::contiguous(t.sizes, t.dtype, t.device);
    tangents.push_back(j.g.add_placeholder("tangents_" + std::to_string(j.tangents++), ValueMeta::of_tensor(t)));
  }
  for (NodeId id = 0; id < static_cast<NodeId>(src.size()); ++id) {
    NodeKind k = src.node(id).kind;
    if (k == NodeKind::Call || k == NodeKind::GetItem) copy_node(src, id, j.g, map);
  }
  for (NodeId o : outs) j.outputs.push_back(map[static_cast<size_t>(o)]);
  j.first_backward = static_cast<NodeId>(j.g.size());

  GradBuilder b(j.g, typer);
  std::vector<std::optional<Value>> grads(j.g.size());
  std::unordered_map<NodeId, std::vector<std::optional<Value>>> item_grads;  // of tuple results
  for (size_t k = 0, t = 0; k < outs.size(); ++k)
    if (j.differentiable[k]) accumulate(b, grads, Value::of_node(j.outputs[k]), Value::of_node(tangents[t++]));
  for (NodeId id = j.first_backward - 1; id >= 0; --id) {
    auto items = item_grads.find(id);
    if (!grads[static_cast<size_t>(id)] && items == item_grads.end()) continue;
    const Node fwd = j.g.node(id);  // NB: a copy: rules add nodes, which moves the node list
    if (fwd.kind == NodeKind::Placeholder) continue;
    if (fwd.kind == NodeKind::GetItem) {
      NodeId tuple = fwd.args[0].node;
      auto& slots = item_grads[tuple];
      slots.resize(j.g.node(tuple).meta.items.size());
      slots.at(static_cast<size_t>(fwd.args[1].i)) = grads[static_cast<size_t>(id)];
      continue;
    }
    Op kind = derivative_kind(fwd.op);
    DerivativeRule rule = derivative_rule(kind);
    if (!rule) throw Unsupported("no derivative rule for " + op_def(fwd.op).target);
    RuleContext c{b, fwd, kind, Value::of_node(id), grads[static_cast<size_t>(id)].value_or(Value::none()), items == item_grads.end() ? std::vector<std::optional<Value>>{} : items->second, {}};
    rule(c);
    grads.resize(j.g.size());
    for (const auto& [operand, g] : c.given) accumulate(b, grads, operand, g);
  }
  for (size_t i = 0; i < j.inputs; ++i) {
    if (!src.node(static_cast<NodeId>(i)).meta.is_tensor() || !src.node(static_cast<NodeId>(i)).meta.tensor.requires_grad)
      continue;
    j.grad_inputs.push_back(static_cast<int>(i));
    const auto& g = grads[i];
    j.grads.push_back(g ? *g : Value::none());
  }
  return j;
}

// The source inputs the graph writes (effects.h written_operands: in-place operands, batch norm's
// running statistics in training): the backward must not read them, it would see the written values.
std::vector<bool> written_inputs(const Graph& g) {
  std::vector<bool> written(g.size(), false);
  for (const Node& n : g.nodes())
    for (NodeId w : written_operands(n))
      if (g.node(view_base(g, w)).kind == NodeKind::Placeholder) written[static_cast<size_t>(view_base(g, w))] = true;
  return written;
}

// A call the backward may compute again rather than have the forward save: anything deterministic
// that writes nothing (what torch.utils.checkpoint recomputes, matrix products and convolutions too).
bool recomputable_when_checkpointed(const Node& n) {
  if (n.kind == NodeKind::GetItem) return true;  // of a tuple that is recomputed too
  if (n.kind != NodeKind::Call) return false;
  const OpDef& op = op_def(n.op);
  if (op.has(kRandom) || op.has(kInplace) || op.has(kNondeterministicOutput)) return false;
  return written_operands(n).empty();
}

// Whether the backward computes call `n` again without being asked to: the above but matrix products
// and convolutions (extern) and ops of the open registry (their cost is unknown). A value made from
// the graph's inputs by such calls alone is recomputed by the backward from those inputs (free to
// keep: the caller holds them).
bool cheap_to_recompute(const Node& n) {
  if (n.kind == NodeKind::Call && (op_def(n.op).is_open() || op_def(n.op).has(kExtern))) return false;
  return recomputable_when_checkpointed(n);
}

}  // namespace

CallTyper rule_typer() {
  return [](Graph& g, OpId op, const std::vector<Value>& positional,
            const std::vector<std::pair<std::string, Value>>& keywords) -> NodeId {
    const OpDef& def = op_def(op);
    std::string why;
    auto bound = bind_call(def, positional, keywords, g, &why);
    if (!bound) throw Unsupported(def.target + ": " + why);
    std::optional<ValueMeta> meta = infer_meta(def, *bound, g);
    if (!meta) throw Unsupported(def.target + " has no C++ meta rule for these operands");
    meta->clear_requires_grad();
    return g.add_call(op, std::move(*bound), std::move(*meta), def.schema.name);
  };
}

Graph joint_graph(const Graph& g, const CallTyper& typer) {
  Joint j = build_joint(g, typer);
  std::vector<Value> items;
  for (NodeId o : j.outputs) items.push_back(Value::of_node(o));
  for (const Value& v : j.grads) items.push_back(v);
  j.g.set_output(Value::tuple(std::move(items)));
  return std::move(j.g);
}

AutogradGraphs split_for_autograd(const Graph& src, const CallTyper& typer) {
  Joint j = build_joint(src, typer);
  const Graph& g = j.g;
  size_t first_tangent = j.inputs, first_call = j.inputs + j.tangents;

  // What the backward reads from the forward: recomputed there (a chain of cheap calls from inputs
  // the graph does not write; not the user's results, which are there anyway), or saved.
  std::vector<bool> written = written_inputs(g), user_result(g.size(), false);
  for (NodeId o : j.outputs) user_result[static_cast<size_t>(o)] = true;
  // A call made inside torch.utils.checkpoint is recomputed whatever its cost (but random draws and
  // writes): what it reads that is not recomputed is saved instead (the checkpointed function's
  // inputs), unless the graph writes it in place somewhere (the backward would read the new value).
  std::vector<bool> written_anywhere(g.size(), false);
  for (size_t i = first_call; i < static_cast<size_t>(j.first_backward); ++i)
    for (NodeId w : written_operands(g.node(static_cast<NodeId>(i)))) written_anywhere[static_cast<size_t>(view_base(g, w))] = true;
  std::vector<bool> recomputable(g.size(), false);
  for (size_t i = first_call; i < static_cast<size_t>(j.first_backward); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    bool checkpointed = n.checkpointed && recomputable_when_checkpointed(n);
    bool ok = checkpointed || cheap_to_recompute(n);
    for (const Value& a : n.args)
      a.for_each_node([&](NodeId o) {
        bool input = g.node(o).kind == NodeKind::Placeholder;
        // NB: what it reads is saved, so it must be a tensor (a size computed by the forward is not).
        if (checkpointed)
          ok = ok && !written_anywhere[static_cast<size_t>(view_base(g, o))] &&
               (input || recomputable[static_cast<size_t>(o)] || g.node(o).meta.is_tensor());
        else
          ok = ok && ((input && !written[static_cast<size_t>(o)]) || (!input && recomputable[static_cast<size_t>(o)]));
      });
    recomputable[i] = ok;
  }
  std::vector<bool> recompute(g.size(), false), saved(g.size(), false);
  std::vector<NodeId> work;
  auto reads = [&](const Value& v) { v.for_each_node([&](NodeId id) { work.push_back(id); }); };
  for (NodeId id = j.first_backward; id < static_cast<NodeId>(g.size()); ++id)
    for (const Value& a : g.node(id).args) reads(a);
  for (const Value& v : j.grads) reads(v);
  while (!work.empty()) {
    NodeId id = work.back();
    work.pop_back();
    auto i = static_cast<size_t>(id);
    if (id >= j.first_backward || (i >= first_tangent && i < first_call) || recompute[i] || saved[i]) continue;
    if (i >= first_call && recomputable[i] && !user_result[i]) {
      recompute[i] = true;
      for (const Value& a : g.node(id).args) reads(a);
    } else {
      if (i >= first_call && !g.node(id).meta.is_tensor())
        throw Unsupported("the backward reads a non-tensor value computed by the forward");
      if (i < first_call && written[i]) throw Unsupported("the backward reads an input that the graph writes in place");
      saved[i] = true;
    }
  }

  AutogradGraphs out;
  out.outputs = j.outputs.size();
  out.alias_outputs = j.aliases;
  if (!j.aliases.empty()) out.aliases = alias_graph(src, j.aliases);
  out.differentiable = j.differentiable;
  out.grad_inputs = j.grad_inputs;

  // The forward: the source's nodes; returns its outputs, then the saved results.
  std::vector<NodeId> fmap(g.size(), -1);
  for (size_t i = 0; i < j.inputs; ++i) {
    const Node& p = g.node(static_cast<NodeId>(i));
    fmap[i] = out.forward.add_placeholder(p.name, p.meta);
  }
  for (size_t i = first_call; i < static_cast<size_t>(j.first_backward); ++i) {
    NodeId c = copy_node(g, static_cast<NodeId>(i), out.forward, fmap);
    out.forward.mutable_node(c).meta.clear_requires_grad();
  }
  std::vector<Value> results;
  for (NodeId o : j.outputs) results.push_back(Value::of_node(fmap[static_cast<size_t>(o)]));

  // The backward: saved values and tangents in, recomputed forward values, then the gradients.
  std::vector<NodeId> bmap(g.size(), -1);
  for (size_t i = 0; i < first_tangent; ++i) {
    if (!saved[i]) continue;
    const Node& p = g.node(static_cast<NodeId>(i));
    bmap[i] = out.backward.add_placeholder(p.name, p.meta);
    out.saved_inputs.push_back(static_cast<int>(i));
  }
  for (size_t i = first_call; i < static_cast<size_t>(j.first_backward); ++i) {
    if (!saved[i]) continue;
    ValueMeta m = g.node(static_cast<NodeId>(i)).meta;
    m.clear_requires_grad();
    bmap[i] = out.backward.add_placeholder(g.node(static_cast<NodeId>(i)).name, m);
    out.saved_inputs.push_back(-1);
    results.push_back(Value::of_node(fmap[i]));
  }
  for (size_t i = first_tangent; i < first_call; ++i)
    bmap[i] = out.backward.add_placeholder(g.node(static_cast<NodeId>(i)).name, g.node(static_cast<NodeId>(i)).meta);
  for (size_t i = first_call; i < g.size(); ++i) {
    if (i < static_cast<size_t>(j.first_backward) && !recompute[i]) continue;
    NodeId c = copy_node(g, static_cast<NodeId>(i), out.backward, bmap);
    out.backward.mutable_node(c).meta.clear_requires_grad();
  }
  std::vector<Value> grads;
  for (const Value& v : j.grads) grads.push_back(map_value(v, bmap));
  // Which tangents each gradient reads: where all of them are None (the outputs took no part in
  // the loss), the gradient is None, as in eager.
  const Graph& bg = out.backward;
  std::vector<std::vector<bool>> reads_tangent(bg.size(), std::vector<bool>(j.tangents, false));
  for (size_t t = 0; t < j.tangents; ++t) reads_tangent[static_cast<size_t>(bmap[first_tangent + t])][t] = true;
  for (NodeId id = 0; id < static_cast<NodeId>(bg.size()); ++id)
    for (const Value& a : bg.node(id).args)
      a.for_each_node([&](NodeId o) {
        for (size_t t = 0; t < j.tangents; ++t)
          if (reads_tangent[static_cast<size_t>(o)][t]) reads_tangent[static_cast<size_t>(id)][t] = true;
      });
  for (const Value& v : grads) {
    std::vector<int> deps;
    for (size_t t = 0; t < j.tangents; ++t)
      if (v.is_node() && reads_tangent[static_cast<size_t>(v.node)][t]) deps.push_back(static_cast<int>(t));
    out.grad_tangents.push_back(std::move(deps));
  }
  out.backward.set_output(Value::tuple(std::move(grads)));
  out.forward.set_output(Value::tuple(std::move(results)));
  return out;
}

}  // namespace ff
