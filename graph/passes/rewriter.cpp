#include "graph/passes/rewriter.h"

#include <exception>

#include "graph/op_registry.h"
#include "src/base/errors.h"

namespace ff {

const Value& call_arg(const Node& n, std::string_view param) {
  int i = op_def(n.op).schema.index_of(param);
  FF_CHECK(i >= 0, op_def(n.op).name + " has no parameter " + std::string(param));
  return n.args[static_cast<size_t>(i)];
}

std::optional<ValueMeta> inferred_meta(OpId op, const std::vector<Value>& args, const Graph& g) {
  try {
    return infer_meta(op_def(op), args, g);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool same_tensor_meta(const ValueMeta& a, const ValueMeta& b) {
  return a.is_tensor() && b.is_tensor() && a.tensor.dtype == b.tensor.dtype && a.tensor.sizes == b.tensor.sizes &&
         a.tensor.strides == b.tensor.strides && a.tensor.device == b.tensor.device;
}

GraphRewriter::GraphRewriter(const Graph& source) : src_(source), map_(source.size()) {}

const Value& GraphRewriter::mapped(NodeId id) const {
  const auto& m = map_.at(static_cast<size_t>(id));
  FF_CHECK(m.has_value(), "node '" + src_.node(id).name + "' was dropped but is still used");
  return *m;
}

Value GraphRewriter::map(const Value& v) const {
  if (v.is_node()) return mapped(v.node);
  if (v.items.empty()) return v;
  Value out = v;
  for (Value& item : out.items) item = map(item);
  return out;
}

NodeId GraphRewriter::copy(NodeId id) {
  std::vector<Value> args;
  for (const Value& v : src_.node(id).args) args.push_back(map(v));
  return copy_with(id, std::move(args));
}

NodeId GraphRewriter::copy_with(NodeId id, std::vector<Value> args) {
  const Node& n = src_.node(id);
  NodeId out = -1;
  switch (n.kind) {
    case NodeKind::Placeholder: out = dst_.add_placeholder(n.name, n.meta); break;
    case NodeKind::Call: out = dst_.add_call(n.op, std::move(args), n.meta, n.name); break;
    case NodeKind::GetItem:
      FF_CHECK(args.size() == 2 && args[0].is_node() && args[1].kind == Value::Kind::Int,
               "getitem '" + n.name + "' must stay a getitem of a node");
      out = dst_.add_getitem(args[0].node, args[1].i, n.name);
      dst_.mutable_node(out).meta = n.meta;
      break;
    case NodeKind::Output: out = dst_.set_output(std::move(args.at(0))); break;
  }
  dst_.mutable_node(out).checkpointed = n.checkpointed;
  map_[static_cast<size_t>(id)] = Value::of_node(out);
  return out;
}

void GraphRewriter::replace(NodeId id, Value with) {
  FF_CHECK(src_.node(id).kind == NodeKind::Call || src_.node(id).kind == NodeKind::GetItem,
           "only calls and getitems can be replaced");
  map_[static_cast<size_t>(id)] = std::move(with);
}

NodeId GraphRewriter::add_call(OpId op, std::vector<Value> args, ValueMeta meta, const std::string& name_hint) {
  return dst_.add_call(op, std::move(args), std::move(meta), name_hint);
}

}  // namespace ff
