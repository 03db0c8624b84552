#include "graph/ir.h"

#include <algorithm>
#include <cctype>

#include "src/base/errors.h"

namespace ff {

bool ValueMeta::requires_grad() const {
  if (is_tensor()) return tensor.requires_grad;
  for (const ValueMeta& item : items)
    if (item.requires_grad()) return true;
  return false;
}

void ValueMeta::clear_requires_grad() {
  tensor.requires_grad = false;
  for (ValueMeta& item : items) item.clear_requires_grad();
}

bool TensorMeta::operator==(const TensorMeta& o) const {
  return sizes.same_as(o.sizes) && strides.same_as(o.strides) && dtype == o.dtype && device == o.device &&
         requires_grad == o.requires_grad;
}

SymInt TensorMeta::numel() const {
  SymInt n = 1;
  for (const SymInt& s : sizes) n *= s;
  return n;
}

bool TensorMeta::is_contiguous() const {
  // Strides that are the contiguous ones as expressions are contiguous at every size, with no
  // decision (a data-dependent size has no value to decide `numel() == 0` or `size == 1` by).
  if (strides.same_as(contiguous_strides(sizes))) return true;
  if (numel() == 0) return true;
  SymInt expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

SymShape TensorMeta::contiguous_strides(const SymShape& sizes) {
  SymShape strides(sizes.size());
  SymInt s = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    // NB: a symbolic size is >= 2, so max(size, 1) is the size with no guard.
    s *= sizes[d].is_symbolic() ? sizes[d] : SymInt(std::max<int64_t>(sizes[d].hint(), 1));
  }
  return strides;
}

TensorMeta TensorMeta::contiguous(SymShape sizes, DType dtype, Device device) {
  TensorMeta m;
  m.strides = contiguous_strides(sizes);
  m.sizes = std::move(sizes);
  m.dtype = dtype;
  m.device = device;
  return m;
}

const char* node_kind_name(NodeKind k) {
  switch (k) {
#define FF_NODE_NAME(kind, doc) \
  case NodeKind::kind:          \
    return #kind;
    FF_NODE_KINDS(FF_NODE_NAME)
#undef FF_NODE_NAME
  }
  return "?";
}

bool Graph::is_reserved_name(const std::string& name) {
  // Python keywords, the names graph code uses (self, torch, operator, float, slice) and the
  // builtins an op name could shadow (sum, abs, pow ...), as torch.fx avoids them too.
  static const char* const kReserved[] = {
      "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
      "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
      "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
      "self", "torch", "operator", "math", "builtins", "float", "int", "bool", "str", "slice", "inf", "nan",
      "abs", "all", "any", "divmod", "input", "len", "list", "map", "max", "min", "pow", "print",
      "range", "round", "sorted", "sum", "tuple", "type", "zip", "dict", "set", "object", "id", "iter"};
  for (const char* r : kReserved)
    if (name == r) return true;
  return false;
}

std::string Graph::unique_name(const std::string& hint) {
  std::string base = hint.empty() ? "v" : hint;
  // Names must be Python identifiers.
  for (char& c : base)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) c = '_';
  if (std::isdigit(static_cast<unsigned char>(base[0]))) base = "_" + base;
  std::string name = base;
  auto taken = [&](const std::string& n) {
    return is_reserved_name(n) || used_names_.count(n) != 0;
  };
  // NB: resume from the last suffix handed out for this base: a graph with n `add` nodes would
  // otherwise try n names for the next one.
  int& k = next_suffix_[base];
  while (taken(name)) name = base + "_" + std::to_string(++k);
  used_names_.insert(name);
  return name;
}

NodeId Graph::add_placeholder(const std::string& name, ValueMeta meta) {
  FF_CHECK(!output().has_value(), "placeholder added after the output");
  for (const Node& n : nodes_)
    FF_CHECK(n.kind == NodeKind::Placeholder, "placeholders must precede every other node");
  Node n;
  n.kind = NodeKind::Placeholder;
  n.name = unique_name(name);
  n.meta = std::move(meta);
  nodes_.push_back(std::move(n));
  return static_cast<NodeId>(nodes_.size() - 1);
}

static void check_operand(const Graph& g, const Value& v) {
  v.for_each_node([&](NodeId id) {
    FF_CHECK(id >= 0 && static_cast<size_t>(id) < g.size(), "operand refers to a node that does not exist yet");
    FF_CHECK(g.node(id).kind != NodeKind::Output, "operand refers to the output node");
  });
}

NodeId Graph::add_call(OpId op, std::vector<Value> args, ValueMeta meta, const std::string& name_hint) {
  FF_CHECK(op != kNoOp, "call node without an op");
  FF_CHECK(!output().has_value(), "node added after the output");
  for (const Value& v : args) check_operand(*this, v);
  Node n;
  n.kind = NodeKind::Call;
  n.op = op;
  n.name = unique_name(name_hint);
  n.args = std::move(args);
  n.meta = std::move(meta);
  n.checkpointed = checkpointing_;
  nodes_.push_back(std::move(n));
  return static_cast<NodeId>(nodes_.size() - 1);
}

NodeId Graph::add_getitem(NodeId tuple_node, int64_t index, const std::string& name_hint) {
  FF_CHECK(!output().has_value(), "node added after the output");
  const Node& src = node(tuple_node);
  FF_CHECK(src.meta.kind == ValueMeta::Kind::Tuple, "getitem on a node that does not produce a tuple");
  FF_CHECK(index >= 0 && static_cast<size_t>(index) < src.meta.items.size(), "getitem index out of range");
  Node n;
  n.kind = NodeKind::GetItem;
  n.name = unique_name(name_hint);
  n.args = {Value::of_node(tuple_node), Value::of_int(index)};
  n.meta = src.meta.items[static_cast<size_t>(index)];
  n.checkpointed = checkpointing_;
  nodes_.push_back(std::move(n));
  return static_cast<NodeId>(nodes_.size() - 1);
}

NodeId Graph::set_output(Value result) {
  FF_CHECK(!output().has_value(), "graph already has an output");
  check_operand(*this, result);
  Node n;
  n.kind = NodeKind::Output;
  n.name = "output";
  n.args = {std::move(result)};
  nodes_.push_back(std::move(n));
  return static_cast<NodeId>(nodes_.size() - 1);
}

std::vector<NodeId> Graph::placeholders() const {
  std::vector<NodeId> out;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].kind == NodeKind::Placeholder) out.push_back(static_cast<NodeId>(i));
  return out;
}

std::optional<NodeId> Graph::output() const {
  if (!nodes_.empty() && nodes_.back().kind == NodeKind::Output) return static_cast<NodeId>(nodes_.size() - 1);
  return std::nullopt;
}

const Value& Graph::output_value() const {
  auto out = output();
  FF_CHECK(out.has_value(), "graph has no output");
  return nodes_[static_cast<size_t>(*out)].args.at(0);
}

ValueMeta Graph::meta_of(const Value& v) const {
  switch (v.kind) {
    case Value::Kind::Node: return node(v.node).meta;
    case Value::Kind::Int: return ValueMeta::of(ValueMeta::Kind::Int);
    case Value::Kind::Float: return ValueMeta::of(ValueMeta::Kind::Float);
    case Value::Kind::Bool: return ValueMeta::of(ValueMeta::Kind::Bool);
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      std::vector<ValueMeta> items;
      for (const Value& item : v.items) items.push_back(meta_of(item));
      return ValueMeta::tuple(std::move(items));
    }
    default: return ValueMeta::of(ValueMeta::Kind::None);
  }
}

}  // namespace ff
