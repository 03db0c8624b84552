#include "graph/passes/creations_on_device.h"

#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/rewriter.h"

namespace ff {

namespace {

bool on_cpu(const ValueMeta& m) { return m.is_tensor() && m.tensor.device.type == Device::Type::CPU; }
bool on_cuda(const ValueMeta& m) { return m.is_tensor() && m.tensor.device.type == Device::Type::CUDA; }

}  // namespace

Graph creations_on_device(const Graph& g) {
  const size_t n = g.size();
  std::vector<std::vector<NodeId>> readers(n);
  for (NodeId id = 0; id < static_cast<NodeId>(n); ++id)
    for (const Value& v : g.node(id).args) v.for_each_node([&](NodeId u) { readers[static_cast<size_t>(u)].push_back(id); });
  std::vector<bool> is_output(n, false);
  g.output_value().for_each_node([&](NodeId u) { is_output[static_cast<size_t>(u)] = true; });

  // The `.to()` each moved creation feeds: it becomes the new creation.
  std::vector<NodeId> moved_to(n, -1);
  for (NodeId id = 0; id < static_cast<NodeId>(n); ++id) {
    const Node& c = g.node(id);
    if (c.kind != NodeKind::Call || !on_cpu(c.meta) || c.meta.tensor.requires_grad || is_output[static_cast<size_t>(id)]) continue;
    Op k = op_kind(c.op);
    bool exact_in_any_dtype = k == Op::zeros || k == Op::ones;
    // NB: a float arange accumulates in double on the CPU and in float on CUDA.
    if (!exact_in_any_dtype && k != Op::full && !(k == Op::arange && is_integral(c.meta.tensor.dtype, true))) continue;
    if (readers[static_cast<size_t>(id)].size() != 1) continue;
    NodeId t = readers[static_cast<size_t>(id)][0];
    const Node& to = g.node(t);
    if (to.kind != NodeKind::Call || op_kind(to.op) != Op::to || !to.args[0].is_node() || to.args[0].node != id) continue;
    if (!on_cuda(to.meta) || to.meta.tensor.sizes != c.meta.tensor.sizes || to.meta.tensor.requires_grad) continue;
    if (!exact_in_any_dtype && to.meta.tensor.dtype != c.meta.tensor.dtype) continue;
    moved_to[static_cast<size_t>(id)] = t;  // NB: zeros, ones, full and arange all take dtype= and device=
  }

  GraphRewriter rw(g);
  std::vector<NodeId> made(n, -1);  // `.to()` node -> the creation that replaces it
  for (NodeId id = 0; id < static_cast<NodeId>(n); ++id) {
    const Node& nd = g.node(id);
    if (NodeId t = moved_to[static_cast<size_t>(id)]; t >= 0) {
      const Node& to = g.node(t);
      std::vector<Value> args;
      for (const Value& v : nd.args) args.push_back(rw.map(v));
      args[static_cast<size_t>(op_def(nd.op).schema.index_of("dtype"))] = Value::of_dtype(to.meta.tensor.dtype);
      args[static_cast<size_t>(op_def(nd.op).schema.index_of("device"))] = Value::of_device(to.meta.tensor.device);
      made[static_cast<size_t>(t)] = rw.add_call(nd.op, std::move(args), to.meta, to.name);
      continue;  // NB: its one reader is the `.to()`, replaced below
    }
    if (made[static_cast<size_t>(id)] >= 0) {
      rw.replace(id, Value::of_node(made[static_cast<size_t>(id)]));
      continue;
    }
    rw.copy(id);
  }
  return rw.finish();
}

}  // namespace ff
