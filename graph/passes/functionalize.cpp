#include "graph/passes/functionalize.h"

#include <exception>
#include <optional>

#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/effects.h"
#include "graph/passes/rewriter.h"

namespace ff {

namespace {

// An open in-place op's out-of-place sibling (`torch.Tensor.abs_` -> `torch.Tensor.abs`, registered
// when the call was traced: graph/python/open_ops.cpp; `torch.abs_` -> the hand-written `abs`)
// with the same parameters (but the first's name, `self` or `input`, and the sibling's `out=`); for
// a variant replaying a count of positional arguments, the sibling's variant of that count.
std::optional<OpId> open_functional_form(const OpDef& op) {
  if (!op.is_open() || op.target.size() < 2 || op.target.back() != '_') return std::nullopt;
  const OpDef& base = op.positional >= 0 ? op_def(op.overload) : op;
  const std::vector<ParamSpec>& mine = base.schema.params;
  for (OpId id : ops_with_target(std::string_view(base.target).substr(0, base.target.size() - 1))) {
    const OpDef& d = op_def(id);
    std::vector<ParamSpec> theirs = d.schema.params;
    if (!theirs.empty() && theirs.back().name == "out" && theirs.back().kwarg_only) theirs.pop_back();
    if (d.positional >= 0 || theirs.size() != mine.size()) continue;
    bool same = true;
    for (size_t i = 1; i < theirs.size(); ++i) same &= theirs[i].name == mine[i].name && theirs[i].kwarg_only == mine[i].kwarg_only;
    if (!same) continue;
    return d.is_open() && op.positional >= 0 ? op_with_positional(id, op.positional) : id;
  }
  return std::nullopt;
}

}  // namespace

std::string out_of_place_call(const Node& n, Node* out, const Graph* g) {
  const OpDef& op = op_def(n.op);
  *out = n;
  if (op.has(kInplace)) {
    Op fop = functional_form(op_kind(n));
    if (fop == Op::Open) {
      std::optional<OpId> open = open_functional_form(op);
      if (!open) return "no out-of-place form known";
      out->op = *open;
      const std::vector<ParamSpec>& params = op_def(*open).schema.params;
      if (params.size() == n.args.size() + 1 && params.back().name == "out") out->args.push_back(Value::none());
    } else {
      out->op = op_id(fop);
    }
    if (op_def(out->op).schema.params.size() != out->args.size()) return "the out-of-place form takes other arguments";
  } else {
    int i = op.schema.index_of("inplace");
    out->args[static_cast<size_t>(i)] = Value::of_bool(false);
  }
  if (g && out->meta.is_tensor()) {
    try {
      if (auto m = infer_meta(op_def(out->op), out->args, *g); m && m->is_tensor() && m->tensor.sizes == n.meta.tensor.sizes)
        out->meta = *m;
    } catch (const std::exception&) {
      // the graph's own meta stays
    }
  }
  return "";
}

Graph functionalize(const Graph& g) {
  const size_t n = g.size();
  std::vector<std::vector<NodeId>> users(n);
  for (NodeId id = 0; id < static_cast<NodeId>(n); ++id)
    for (const Value& v : g.node(id).args) v.for_each_node([&](NodeId u) { users[static_cast<size_t>(u)].push_back(id); });
  // Source nodes whose result is fresh memory: fresh calls, and in-place calls rewritten here.
  std::vector<bool> fresh(n, false);
  for (NodeId id = 0; id < static_cast<NodeId>(n); ++id) fresh[static_cast<size_t>(id)] = returns_fresh_tensor(g.node(id));

  GraphRewriter rw(g);
  for (NodeId id = 0; id < static_cast<NodeId>(n); ++id) {
    const Node& nd = g.node(id);
    bool inplace = nd.kind == NodeKind::Call && (op_def(nd.op).has(kInplace) || (op_def(nd.op).has(kInplaceFlag) && mutates_operand(nd)));
    if (!inplace || nd.args.empty() || !nd.args[0].is_node() || !nd.meta.is_tensor()) {
      rw.copy(id);
      continue;
    }
    NodeId x = nd.args[0].node;
    // Every reader of v but `id` (and `also`) runs before it and returns fresh memory.
    auto read_only_before = [&](NodeId v, NodeId also) {
      for (NodeId u : users[static_cast<size_t>(v)])
        if (u != id && u != also && (u > id || !fresh[static_cast<size_t>(u)])) return false;
      return true;
    };
    bool private_x = fresh[static_cast<size_t>(x)] && read_only_before(x, id);
    // A view of a private tensor that nothing else reads afterwards (ghostnet's
    // `cat(...)[:, :oup] += shortcut`): the write is seen through the view only.
    const Node& xn = g.node(x);
    if (!private_x && returns_new_view(xn) && !xn.args.empty() && xn.args[0].is_node()) {
      NodeId base = xn.args[0].node;
      private_x = fresh[static_cast<size_t>(base)] && read_only_before(base, x) && read_only_before(x, id);
    }
    Node fn;
    if (!private_x || !out_of_place_call(nd, &fn).empty()) {
      rw.copy(id);
      continue;
    }
    std::vector<Value> args;
    for (const Value& v : fn.args) args.push_back(rw.map(v));
    std::optional<ValueMeta> m = inferred_meta(fn.op, args, rw.result());
    if (!m || !m->is_tensor()) {
      rw.copy(id);
      continue;
    }
    if (same_tensor_meta(*m, nd.meta)) {
      rw.replace(id, Value::of_node(rw.add_call(fn.op, std::move(args), nd.meta, nd.name)));
    } else {
      // Computed in another dtype: converted to x's on the way back, as eager stores it.
      static const OpId to = op_id(Op::to);
      if (m->tensor.sizes != nd.meta.tensor.sizes || m->tensor.dtype == nd.meta.tensor.dtype) {
        rw.copy(id);
        continue;
      }
      Graph trial = rw.result();  // NB: the cast's metadata is checked before the graph changes
      NodeId value = trial.add_call(fn.op, args, *m, nd.name);
      std::string err;
      auto cast_args = bind_call(op_def(to), {Value::of_node(value)}, {{"dtype", Value::of_dtype(nd.meta.tensor.dtype)}}, trial, &err);
      std::optional<ValueMeta> cm = cast_args ? inferred_meta(to, *cast_args, trial) : std::nullopt;
      if (!cm || !same_tensor_meta(*cm, nd.meta)) {
        rw.copy(id);
        continue;
      }
      value = rw.add_call(fn.op, std::move(args), *m, nd.name);
      (*cast_args)[0] = Value::of_node(value);
      rw.replace(id, Value::of_node(rw.add_call(to, std::move(*cast_args), nd.meta, nd.name + "_cast")));
    }
    fresh[static_cast<size_t>(id)] = true;
  }
  return rw.finish();
}

}  // namespace ff
