#include "graph/passes/fold_conv_batch_norm.h"

#include <string_view>

#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/rewriter.h"
#include "src/base/errors.h"

namespace ff {
namespace {

const Value& arg(const Graph& g, NodeId id, std::string_view param) {
  const Node& n = g.node(id);
  int i = op_def(n.op).schema.index_of(param);
  FF_CHECK(i >= 0, op_def(n.op).name + " has no parameter " + std::string(param));
  return n.args[static_cast<size_t>(i)];
}

bool is_call(const Graph& g, const Value& v, std::string_view op) {
  return v.is_node() && g.node(v.node).kind == NodeKind::Call && op_def(g.node(v.node).op).name == op;
}

// A relu that is not in place (functionalized graphs have none in place on intermediates).
bool is_relu(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (op_kind(n) == Op::relu) return true;
  return op_kind(n) == Op::f_relu && arg(g, id, "inplace").kind == Value::Kind::Bool && !arg(g, id, "inplace").b;
}

// Two ints (an int or a one/two-element list of ints).
std::optional<Value> pair_of_ints(const Value& v) {
  std::vector<Value> items = v.is_sequence() ? v.items : std::vector<Value>{v};
  if (items.size() == 1) items.push_back(items[0]);
  if (items.size() != 2) return std::nullopt;
  for (const Value& i : items)
    if (i.kind != Value::Kind::Int) return std::nullopt;
  return Value::list(items);
}

enum class Epilogue { None,
                      Relu,
                      AddRelu };

struct Match {
  NodeId conv = -1, bn = -1, add = -1, final = -1;
  Epilogue epilogue = Epilogue::None;
  Value z;  // AddRelu: the residual
  Value stride, padding, dilation;
  int64_t groups = 1;
  int weight_input = -1, bias_input = -1;  // the folded inputs' indices
};

}  // namespace

std::optional<ConvFusionGraph> fold_conv_batch_norm(const Graph& g, bool relu_ops, std::string* why) {
  const size_t n = g.size();
  std::vector<int> users(n, 0);
  std::vector<NodeId> sole_user(n, -1);
  for (NodeId id = 0; id < static_cast<NodeId>(n); ++id)
    for (const Value& v : g.node(id).args)
      v.for_each_node([&](NodeId u) {
        ++users[static_cast<size_t>(u)];
        sole_user[static_cast<size_t>(u)] = id;
      });
  std::vector<NodeId> phs = g.placeholders();
  std::vector<int> input_of(n, -1);
  for (size_t i = 0; i < phs.size(); ++i) input_of[static_cast<size_t>(phs[i])] = static_cast<int>(i);
  // A tensor input of `dim` dims and dtype float32, or None (when `optional`): its input index or -1.
  auto input = [&](const Value& v, int64_t dim, bool optional, int* index) {
    *index = -1;
    if (v.is_none()) return optional;
    if (!v.is_node() || input_of[static_cast<size_t>(v.node)] < 0) return false;
    const ValueMeta& m = g.node(v.node).meta;
    if (!m.is_tensor() || m.tensor.dim() != dim || m.tensor.dtype != DType::Float32) return false;
    *index = input_of[static_cast<size_t>(v.node)];
    return true;
  };

  ConvFusionGraph out;
  std::vector<Match> matches;
  std::vector<bool> dropped(n, false), is_final(n, false);
  std::vector<int> match_of(n, -1);
  std::vector<bool> claimed(n, false);  // adds taken by a match
  int next_input = static_cast<int>(phs.size());
  for (NodeId b = 0; b < static_cast<NodeId>(n); ++b) {
    if (op_kind(g.node(b)) != Op::batch_norm) continue;
    const Value& training = arg(g, b, "training");
    const Value& eps = arg(g, b, "eps");
    if (training.kind != Value::Kind::Bool || training.b || !eps.is_number()) continue;
    const Value& cv = arg(g, b, "input");
    if (!is_call(g, cv, "conv2d") || users[static_cast<size_t>(cv.node)] != 1) continue;
    Match m;
    m.conv = cv.node;
    m.bn = b;
    FoldedInput w, bias;
    if (!input(arg(g, m.conv, "weight"), 4, false, &w.conv_weight) || !input(arg(g, m.conv, "bias"), 1, true, &w.conv_bias) ||
        !input(arg(g, b, "running_mean"), 1, false, &w.mean) || !input(arg(g, b, "running_var"), 1, false, &w.var) ||
        !input(arg(g, b, "weight"), 1, true, &w.weight) || !input(arg(g, b, "bias"), 1, true, &w.bias))
      continue;
    const ValueMeta& cm = g.node(m.conv).meta;
    // NB: only where no gradient flows: the folded weights are not differentiable inputs.
    if (!cm.is_tensor() || cm.tensor.dim() != 4 || cm.tensor.dtype != DType::Float32 || cm.tensor.requires_grad) continue;
    auto stride = pair_of_ints(arg(g, m.conv, "stride"));
    auto padding = pair_of_ints(arg(g, m.conv, "padding"));
    auto dilation = pair_of_ints(arg(g, m.conv, "dilation"));
    const Value& groups = arg(g, m.conv, "groups");
    if (!stride || !padding || !dilation || groups.kind != Value::Kind::Int) continue;
    m.stride = *stride;
    m.padding = *padding;
    m.dilation = *dilation;
    m.groups = groups.i;
    m.final = b;
    NodeId u = users[static_cast<size_t>(b)] == 1 ? sole_user[static_cast<size_t>(b)] : -1;
    if (relu_ops && u >= 0 && is_relu(g, u) && g.node(u).args[0] == Value::of_node(b)) {
      m.epilogue = Epilogue::Relu;
      m.final = u;
    } else if (relu_ops && u >= 0 && g.node(u).kind == NodeKind::Call &&
               (op_kind(g.node(u)) == Op::op_add || (op_kind(g.node(u)) == Op::add && arg(g, u, "alpha") == Value::of_int(1)))) {
      const Node& a = g.node(u);
      const Value& other = a.args[0] == Value::of_node(b) ? a.args[1] : a.args[0];
      NodeId r = users[static_cast<size_t>(u)] == 1 ? sole_user[static_cast<size_t>(u)] : -1;
      const ValueMeta* zm = other.is_node() ? &g.node(other.node).meta : nullptr;
      // NB: the residual must have the result's shape and dtype (no broadcast, no promotion).
      // NB: a residual block adds two batch norms (main path and downsample): the add goes to the
      // first one matched; the other stays a plain folded convolution that feeds it.
      if (r >= 0 && is_relu(g, r) && zm && zm->is_tensor() && other != Value::of_node(b) && !claimed[static_cast<size_t>(u)] &&
          zm->tensor.sizes == g.node(b).meta.tensor.sizes && zm->tensor.dtype == DType::Float32 &&
          g.node(u).meta.is_tensor() && g.node(u).meta.tensor.sizes == zm->tensor.sizes) {
        m.epilogue = Epilogue::AddRelu;
        m.add = u;
        claimed[static_cast<size_t>(u)] = true;
        m.z = other;
        m.final = r;
      }
    }
    w.eps = eps.as_double();
    bias = w;
    bias.is_weight = false;
    w.index = m.weight_input = next_input++;
    bias.index = m.bias_input = next_input++;
    out.folded.push_back(w);
    out.folded.push_back(bias);
    dropped[static_cast<size_t>(m.conv)] = true;
    dropped[static_cast<size_t>(m.bn)] = m.final != m.bn;
    if (m.add >= 0) dropped[static_cast<size_t>(m.add)] = true;
    is_final[static_cast<size_t>(m.final)] = true;
    match_of[static_cast<size_t>(m.final)] = static_cast<int>(matches.size());
    matches.push_back(m);
  }
  for (const Match& m : matches)
    m.z.for_each_node([&](NodeId z) {
      FF_CHECK(!dropped[static_cast<size_t>(z)], "a residual operand of a folded convolution was folded away");
    });
  if (matches.empty()) {
    *why = "no 2-d convolution followed by an eval-mode batch norm with input weights and statistics";
    return std::nullopt;
  }

  GraphRewriter rw(g);
  for (NodeId p : phs) rw.copy(p);
  std::vector<NodeId> folded_nodes;
  for (const Match& m : matches) {
    const Node& conv = g.node(m.conv);
    ValueMeta wm = g.meta_of(arg(g, m.conv, "weight"));
    ValueMeta bm = wm;
    bm.tensor = TensorMeta::contiguous({wm.tensor.sizes[0]}, wm.tensor.dtype, wm.tensor.device);
    wm.tensor.requires_grad = bm.tensor.requires_grad = false;
    folded_nodes.push_back(rw.add_placeholder(conv.name + "_folded_weight", wm));
    folded_nodes.push_back(rw.add_placeholder(conv.name + "_folded_bias", bm));
  }
  for (NodeId id = 0; id < static_cast<NodeId>(n); ++id) {
    const Node& nd = g.node(id);
    if (nd.kind == NodeKind::Placeholder || dropped[static_cast<size_t>(id)]) continue;
    if (!is_final[static_cast<size_t>(id)]) {
      rw.copy(id);
      continue;
    }
    size_t k = static_cast<size_t>(match_of[static_cast<size_t>(id)]);
    const Match& m = matches[k];
    Value x = rw.map(arg(g, m.conv, "input"));
    Value w = Value::of_node(folded_nodes[2 * k]);
    Value b = Value::of_node(folded_nodes[2 * k + 1]);
    Value groups = Value::of_int(m.groups);
    std::vector<Value> args;
    std::string op;
    switch (m.epilogue) {
      case Epilogue::None:
        op = "conv2d";
        args = {x, w, b, m.stride, m.padding, m.dilation, groups};
        break;
      case Epilogue::Relu:
        op = "cudnn_convolution_relu";
        args = {x, w, b, m.stride, m.padding, m.dilation, groups};
        break;
      case Epilogue::AddRelu:
        op = "cudnn_convolution_add_relu";
        args = {x, w, rw.map(m.z), Value::of_float(1.0), b, m.stride, m.padding, m.dilation, groups};
        break;
    }
    auto opid = op_by_name(op);
    FF_CHECK(opid.has_value(), "op " + op + " is not registered");
    ValueMeta meta = nd.meta;
    meta.tensor.requires_grad = false;
    NodeId fused = rw.add_call(*opid, std::move(args), meta, op == "conv2d" ? "conv2d" : "conv_relu");
    rw.replace(id, Value::of_node(fused));
  }
  out.graph = rw.finish();
  out.fused = static_cast<int>(matches.size());
  return out;
}

}  // namespace ff
