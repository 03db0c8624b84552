#include "graph/passes/effects.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "graph/op.h"
#include "graph/op_registry.h"

namespace ff {
namespace {

// Methods that return `self` unchanged when there is nothing to do (x.to(x.dtype) is x), so
// their result may alias the operand even where their traits say pointwise; einsum returns a view
// for a permutation ("ij->ji").
bool may_return_self(const OpDef& op) {
  static constexpr std::string_view kMethods[] = {"to", "type", "type_as", "contiguous", "float", "double",
                                                  "half", "bfloat16", "int", "long", "bool", "cpu", "cuda",
                                                  "detach", "requires_grad_", "view_as", "expand_as", "reshape_as",
                                                  "einsum"};
  std::string_view target = op.target;
  size_t dot = target.rfind('.');
  std::string_view last = dot == std::string_view::npos ? target : target.substr(dot + 1);
  return std::find(std::begin(kMethods), std::end(kMethods), last) != std::end(kMethods);
}

}  // namespace

bool returns_its_operand(const Node& n) {
  const Op kind = op_kind(n);
  if (n.kind != NodeKind::Call || (kind != Op::dropout && kind != Op::f_dropout) || mutates_operand(n)) return false;
  const OpSchema& s = op_def(n.op).schema;
  int t = s.index_of(kind == Op::dropout ? "train" : "training"), p = s.index_of("p");
  auto arg = [&](int i) -> const Value* { return i >= 0 && static_cast<size_t>(i) < n.args.size() ? &n.args[static_cast<size_t>(i)] : nullptr; };
  const Value* train = arg(t);
  const Value* prob = arg(p);
  bool training = !train || train->kind != Value::Kind::Bool || train->b;
  bool p_zero = prob && prob->is_number() && prob->as_double() == 0.0;
  return !training || p_zero;
}

bool returns_fresh_tensor(const Node& n) {
  if (n.kind != NodeKind::Call || mutates_operand(n) || returns_its_operand(n)) return false;
  if (op_in(op_kind(n), {Op::clone, Op::cat, Op::stack})) return true;  // always new memory (torch.cat([x]) too)
  const OpDef& op = op_def(n.op);
  if (op.has(kView) || op.has(kInplace) || may_return_self(op)) return false;
  return (op.traits & (kPointwise | kReduction | kExtern | kComposite | kCreation)) != 0;
}

namespace {

bool basic_index(const Value& v) {
  if (v.is_node() || v.kind == Value::Kind::List) return false;
  for (const Value& item : v.items)
    if (!basic_index(item)) return false;
  return true;
}

}  // namespace

bool returns_new_view(const Node& n) {
  if (n.kind != NodeKind::Call || mutates_operand(n)) return false;
  if (op_def(n.op).has(kView)) return true;
  return op_kind(n) == Op::op_getitem && n.args.size() > 1 && n.args[0].is_node() && basic_index(n.args[1]);
}

bool mutates_operand(const Node& n) {
  if (n.kind != NodeKind::Call) return false;
  const OpDef& op = op_def(n.op);
  if (op.has(kInplace)) return true;
  int inplace = op.schema.index_of("inplace");
  if (inplace >= 0 && static_cast<size_t>(inplace) < n.args.size()) {
    const Value& v = n.args[static_cast<size_t>(inplace)];
    if (v.kind == Value::Kind::Bool && v.b) return true;
  }
  int out = op.schema.index_of("out");
  return out >= 0 && static_cast<size_t>(out) < n.args.size() && !n.args[static_cast<size_t>(out)].is_none();
}

std::vector<NodeId> written_operands(const Node& n) {
  std::vector<NodeId> out;
  if (n.kind != NodeKind::Call) return out;
  if (mutates_operand(n) && !n.args.empty() && n.args[0].is_node()) out.push_back(n.args[0].node);
  if (op_kind(n) == Op::batch_norm) {
    const OpSchema& s = op_def(n.op).schema;
    const Value& training = n.args[static_cast<size_t>(s.index_of("training"))];
    if (training.kind != Value::Kind::Bool || training.b)
      for (const char* stat : {"running_mean", "running_var"}) {
        const Value& v = n.args[static_cast<size_t>(s.index_of(stat))];
        if (v.is_node()) out.push_back(v.node);
      }
  }
  return out;
}

bool has_side_effects(const Node& n) {
  // NB: dropout that returns its operand draws nothing
  return n.kind == NodeKind::Call && (!written_operands(n).empty() || (op_def(n.op).has(kRandom) && !returns_its_operand(n)));
}

bool may_raise(const Node& n, const Graph& g) {
  if (n.kind != NodeKind::Call) return false;
  const Op kind = op_kind(n);
  const OpDef& op = op_def(n.op);
  if (kind == Op::Open || (op.traits & (kExtern | kComposite | kIndexing))) return true;
  if (!op_in(kind, {Op::div, Op::floor_divide, Op::remainder, Op::fmod, Op::op_floordiv, Op::op_mod})) return false;
  bool integral = false;  // NB: an integer division by zero raises on the CPU (ZeroDivisionError)
  for (const Value& v : n.args)
    v.for_each_node([&](NodeId id) {
      const ValueMeta& m = g.node(id).meta;
      if (m.is_tensor() && !is_floating(m.tensor.dtype) && !is_complex(m.tensor.dtype)) integral = true;
    });
  return integral;
}

bool is_pure_call(const Node& n) {
  if (n.kind != NodeKind::Call) return false;
  const OpDef& op = op_def(n.op);
  return !op.has(kRandom) && !op.has(kNondeterministicOutput) && written_operands(n).empty();
}

AliasClasses::AliasClasses(const Graph& g) : parent_(g.size()) {
  for (size_t i = 0; i < g.size(); ++i) parent_[i] = static_cast<int>(i);
  // NB: inputs may alias each other (f(x, x), f(x, x[0])): one class for all of them.
  std::optional<NodeId> first_input;
  for (NodeId p : g.placeholders()) {
    if (g.node(p).meta.kind != ValueMeta::Kind::Tensor && g.node(p).meta.kind != ValueMeta::Kind::Tuple) continue;
    if (first_input) join(*first_input, p);
    else first_input = p;
  }
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.kind == NodeKind::Placeholder || n.kind == NodeKind::Output || returns_fresh_tensor(n)) continue;
    for (const Value& v : n.args)
      v.for_each_node([&](NodeId id) {
        ValueMeta::Kind k = g.node(id).meta.kind;
        if (k == ValueMeta::Kind::Tensor || k == ValueMeta::Kind::Tuple) join(static_cast<NodeId>(i), id);
      });
  }
}

int AliasClasses::of(NodeId id) const {
  int r = id;
  while (parent_[r] != r) r = parent_[r];
  while (parent_[id] != r) {  // path compression
    int next = parent_[id];
    parent_[id] = r;
    id = next;
  }
  return r;
}

void AliasClasses::join(NodeId a, NodeId b) {
  int ra = of(a), rb = of(b);
  if (ra != rb) parent_[std::max(ra, rb)] = std::min(ra, rb);
}

}  // namespace ff
