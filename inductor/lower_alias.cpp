// Storage sharing of graph outputs. Eager's results share memory with their operands where the op
// returns a view (v.view(4), x[0], v.add_(1), x.to(x.dtype)) and nowhere else; a caller can see
// the difference by writing into one output and reading another (or a graph input). The lowering
// computes values as index expressions and stores them where they must live, so without care two
// outputs that are one tensor in eager come back as two copies, and an output computed as "the
// input itself" (floor of an int tensor) comes back as the input's memory.
//
// plan_aliases (before lowering) finds eager's storage root of every value and marks the roots
// seen through several outputs: those are stored as soon as they are lowered, so their views are
// lowered as views of that buffer. alias_outputs (after lowering) checks every output against
// eager: an output that shares memory where eager's does not is copied; one that cannot share
// where eager's does makes the graph unsupported (the reference runner runs it).
#include <algorithm>
#include <map>

#include "graph/meta_rules.h"
#include "graph/op.h"
#include "graph/passes/effects.h"
#include "inductor/lower_internal.h"
#include "src/base/errors.h"

namespace ff::inductor {

namespace {

// The operand whose storage node `id`'s result shares in eager, or -1 when the result is fresh
// memory. `parent` holds the answers for earlier nodes (a tuple element follows its tuple).
NodeId eager_alias_parent(const Graph& g, NodeId id, const std::vector<NodeId>& parent) {
  const Node& n = g.node(id);
  if (n.kind == NodeKind::GetItem) return n.args.empty() || !n.args[0].is_node() ? -1 : parent[static_cast<size_t>(n.args[0].node)];
  if (n.kind != NodeKind::Call) return -1;
  NodeId x = -1;
  for (const Value& v : n.args)
    if (v.is_node() && g.node(v.node).meta.is_tensor()) {
      x = v.node;
      break;
    }
  if (x < 0 || (!n.meta.is_tensor() && n.meta.kind != ValueMeta::Kind::Tuple)) return -1;
  const OpDef& op = op_def(n.op);
  const Op kind = op_kind(n);
  if (mutates_operand(n)) return n.args[0].is_node() ? n.args[0].node : -1;
  const TensorMeta& xm = g.node(x).meta.tensor;
  if (op.has(kView)) {
    if (!op_in(kind, {Op::reshape, Op::tensor_reshape, Op::reshape_as, Op::flatten})) return x;
    if (!n.meta.is_tensor()) return x;
    return view_strides(xm.sizes, xm.strides, n.meta.tensor.sizes) ? x : -1;  // a copy where no view exists
  }
  if (!n.meta.is_tensor()) return op.has(kExtern) || op.has(kReduction) || kind == Op::frexp ? -1 : x;
  const TensorMeta& m = n.meta.tensor;
  if (kind == Op::contiguous) return xm.is_contiguous() ? x : -1;
  if (kind == Op::clone) return -1;  // always new memory
  if (op_in(kind, {Op::to, Op::to_float, Op::to_double, Op::to_half, Op::to_bfloat16, Op::to_long, Op::to_int, Op::to_short,
                   Op::to_char, Op::to_byte, Op::to_bool, Op::type_as})) {
    int copy = op.schema.index_of("copy");
    bool forced = copy >= 0 && n.args[static_cast<size_t>(copy)].kind == Value::Kind::Bool && n.args[static_cast<size_t>(copy)].b;
    return !forced && m.dtype == xm.dtype && m.device == xm.device && m.strides == xm.strides ? x : -1;
  }
  if (op_in(kind, {Op::dropout, Op::f_dropout})) return returns_its_operand(n) ? x : -1;
  if (kind == Op::op_getitem) return returns_new_view(n) ? x : -1;  // basic indexing is a view
  if (kind == Op::einsum) return x;  // "ij->ji" is a view
  if (op.traits & (kExtern | kPointwise | kReduction | kComposite | kCreation | kIndexing)) return -1;
  // NB: torch's schema annotates a result that may alias an operand (Tensor(a)): an open op
  // without kView (graph/aten_schema.cpp) returns new memory
  if (op.is_open()) return -1;
  return x;  // an op the table does not know may return a view
}

}  // namespace

void Lowerer::plan_aliases() {
  size_t n = g_.size();
  alias_parent_.assign(n, -1);
  for (NodeId id = 0; id < static_cast<NodeId>(n); ++id) alias_parent_[static_cast<size_t>(id)] = eager_alias_parent(g_, id, alias_parent_);
  shares_storage_.assign(n, false);
  std::map<NodeId, std::vector<NodeId>> by_root;  // eager storage root -> outputs
  if (g_.output())
    g_.output_value().for_each_node([&](NodeId o) {
      auto& outs = by_root[storage_root(o)];
      if (std::find(outs.begin(), outs.end(), o) == outs.end()) outs.push_back(o);
    });
  for (auto& [root, outs] : by_root) {
    if (outs.size() < 2) continue;
    // The root, and each in-place call on its storage (computed out of place: a new value in
    // that storage), are stored when lowered; their views are then views of that buffer.
    for (NodeId id = root; id < static_cast<NodeId>(n); ++id)
      if (storage_root(id) == root && (id == root || mutates_operand(g_.node(id)))) shares_storage_[static_cast<size_t>(id)] = true;
  }
}

NodeId Lowerer::storage_root(NodeId id) const {
  while (alias_parent_[static_cast<size_t>(id)] >= 0) id = alias_parent_[static_cast<size_t>(id)];
  return id;
}

int Lowerer::buffer_storage(int buf) const {
  while (prog_.buffers[static_cast<size_t>(buf)].aliases >= 0) buf = prog_.buffers[static_cast<size_t>(buf)].aliases;
  return buf;
}

void Lowerer::alias_outputs() {
  // The storage each eager root's outputs landed in (the first output's).
  std::map<NodeId, int> root_storage;
  std::map<int, NodeId> storage_root_of;  // our storage -> the eager root that owns it
  for (auto& [o, ref] : prog_.outputs) {
    NodeId root = storage_root(o);
    int storage = buffer_storage(ref.buf);
    const loop::Buffer& sb = prog_.buffers[static_cast<size_t>(storage)];
    // Memory that is a graph input, or that an output of another eager root already returns, is
    // not this output's in eager: it gets a copy of its own.
    bool foreign = sb.role == loop::BufferRole::Input ? sb.node != root
                                                      : storage_root_of.count(storage) && storage_root_of[storage] != root;
    if (foreign) {
      const TensorMeta& m = g_.node(o).meta.tensor;
      LT copy = realize(from_ref(ref, m.dtype), m.strides, loop::BufferRole::Output, o,
                        "graph output: a new tensor in eager, not the memory it was computed in");
      ref = *copy.ref;
      storage = ref.buf;
    }
    storage_root_of.emplace(storage, root);
    auto [it, first] = root_storage.emplace(root, storage);
    bool input_view = g_.node(root).kind == NodeKind::Placeholder && prog_.buffers[static_cast<size_t>(storage)].role != loop::BufferRole::Input;
    if ((!first && it->second != storage) || input_view)
      throw Unsupported("graph output " + g_.node(o).name + " shares memory with " + g_.node(root).name +
                        (input_view ? " (a graph input)" : " and another output") +
                        " in eager, but the code generator computed it apart");
  }
}

}  // namespace ff::inductor
