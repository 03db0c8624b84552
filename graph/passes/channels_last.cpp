// Conv nets in channels-last. On the CPU, oneDNN reorders NCHW activations to its blocked layout and
// back on every convolution, which NHWC activations mostly avoid (resnet18 at batch 8: ~1.35x in
// eager); on CUDA, cuDNN's convolutions (TF32 ones above all) can run faster in NHWC. torch.compile's
// Inductor lays conv nets out so on both. Here the weights of 2-d convolutions become
// channels-last graph inputs (converted once per weight version by the runner), so every conv
// returns NHWC; the metadata of everything downstream is recomputed by the ops' meta rules, so the
// fused kernels between convs read and write NHWC too. Outputs whose layout moved are copied back
// to eager's strides by the runner. A conv whose input is NHWC already would return NHWC from its
// input alone (converting its weight in the call): the result says which weights feed convs with
// NCHW inputs, the ones that are needed for the layout to take hold at all.
#include "graph/passes/channels_last.h"

#include <algorithm>
#include <functional>

#include "graph/meta_rules_util.h"
#include "graph/op.h"
#include "graph/op_registry.h"

namespace ff {
namespace {

// 2-d convolutions: input args[0], weight args[1] (cuDNN's fused ones come from folded batch norms).
bool is_conv2d_op(Op op) { return op_in(op, {Op::conv2d, Op::cudnn_convolution_relu, Op::cudnn_convolution_add_relu}); }

bool is_nchw_contiguous_4d(const ValueMeta& m) {
  return m.kind == ValueMeta::Kind::Tensor && m.tensor.dim() == 4 && is_floating(m.tensor.dtype) &&
         m.tensor.strides == TensorMeta::contiguous_strides(m.tensor.sizes);
}

bool same_shapes(const ValueMeta& a, const ValueMeta& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == ValueMeta::Kind::Tensor) return a.tensor.sizes == b.tensor.sizes && a.tensor.dtype == b.tensor.dtype;
  if (a.kind == ValueMeta::Kind::Tuple) {
    if (a.items.size() != b.items.size()) return false;
    for (size_t i = 0; i < a.items.size(); ++i)
      if (!same_shapes(a.items[i], b.items[i])) return false;
  }
  return true;
}

// Every tensor's device set to `d`; *devices collects the devices seen before.
void set_devices(Graph& g, const Device& d, std::vector<Device>* devices) {
  std::function<void(ValueMeta&)> fix = [&](ValueMeta& m) {
    for (ValueMeta& item : m.items) fix(item);
    if (m.kind != ValueMeta::Kind::Tensor) return;
    if (devices) devices->push_back(m.tensor.device);
    m.tensor.device = d;
  };
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) fix(g.mutable_node(id).meta);
}

// The tensor whose storage `u`'s value shares, as far as the graph says (views, in-place ops, and
// elements of a view op's tuple); `u` itself for a fresh result.
NodeId view_base(const Graph& g, NodeId u) {
  for (;;) {
    const Node& nd = g.node(u);
    auto aliases_first = [&](const Node& n) {
      if (n.kind != NodeKind::Call || n.args.empty() || !n.args[0].is_node()) return false;
      const OpDef& op = op_def(n.op);
      return op.has(kView) || op.has(kInplace) || op.has(kInplaceFlag);
    };
    if (nd.kind == NodeKind::GetItem && !nd.args.empty() && nd.args[0].is_node() && aliases_first(g.node(nd.args[0].node))) {
      u = g.node(nd.args[0].node).args[0].node;
    } else if (aliases_first(nd)) {
      u = nd.args[0].node;
    } else {
      return u;
    }
  }
}

}  // namespace

int count_conv2d(const Graph& g) {
  int count = 0;
  for (const Node& nd : g.nodes())
    if (nd.kind == NodeKind::Call && is_conv2d_op(op_kind(nd.op))) ++count;
  return count;
}

bool has_conv2d(const Graph& g) { return count_conv2d(g) > 0; }

std::optional<ChannelsLastGraph> to_channels_last(const Graph& src, std::string* why) {
  // NB: the layouts are worked out on CPU metadata: the CPU rules are the complete ones (GPU
  // layouts are left to torch's meta fallback), and for these ops (convolutions, batch norm,
  // pooling, pointwise, views) CUDA keeps the same layouts. A lowered op's layout is the code
  // generator's choice anyway, and an extern result in another layout is copied by the runner.
  std::vector<Device> devices;
  Graph g = src;
  set_devices(g, Device{}, &devices);
  Device cuda;
  bool have_cuda = false;
  bool other = false;
  for (const Device& d : devices) {
    if (d.type == Device::Type::CUDA) {
      cuda = d;
      have_cuda = true;
    } else {
      other = true;
    }
  }
  if (have_cuda && other) {
    *why = "the graph mixes CUDA tensors with tensors on other devices";
    return std::nullopt;
  }
  ChannelsLastGraph out{g, {}, {}};
  Graph& h = out.graph;
  const size_t n = h.size();
  std::vector<bool> is_conv(n, false), weight(n, false);
  for (NodeId id = 0; id < static_cast<NodeId>(n); ++id) {
    const Node& nd = h.node(id);
    if (nd.kind != NodeKind::Call || !is_conv2d_op(op_kind(nd.op)) || nd.args.size() < 2) continue;
    if (!nd.args[0].is_node() || !nd.args[1].is_node()) continue;
    NodeId w = nd.args[1].node;
    if (h.node(w).kind != NodeKind::Placeholder || !is_nchw_contiguous_4d(h.node(w).meta)) continue;
    if (h.meta_of(nd.args[0]).kind != ValueMeta::Kind::Tensor || h.meta_of(nd.args[0]).tensor.dim() != 4) continue;
    if (!is_nchw_contiguous_4d(nd.meta)) continue;
    is_conv[static_cast<size_t>(id)] = true;
    weight[static_cast<size_t>(w)] = true;
  }
  if (std::find(is_conv.begin(), is_conv.end(), true) == is_conv.end()) {
    *why = "no 2-d convolution with a weight input";
    return std::nullopt;
  }
  std::vector<NodeId> placeholders = h.placeholders();
  for (NodeId w : placeholders) {
    if (!weight[static_cast<size_t>(w)]) continue;
    // A weight read by anything but convolutions keeps its layout (its other readers would see
    // other strides).
    for (NodeId id = 0; id < static_cast<NodeId>(n); ++id) {
      const Node& nd = h.node(id);
      bool reads = false;
      for (const Value& v : nd.args) v.for_each_node([&](NodeId u) { reads |= u == w; });
      if (reads && !(is_conv[static_cast<size_t>(id)] && nd.args[1].is_node() && nd.args[1].node == w &&
                     !(nd.args[0].is_node() && nd.args[0].node == w)))
        weight[static_cast<size_t>(w)] = false;
    }
  }
  if (std::find(weight.begin(), weight.end(), true) == weight.end()) {
    *why = "every conv weight has other readers";
    return std::nullopt;
  }
  for (NodeId w : placeholders) {
    if (!weight[static_cast<size_t>(w)]) continue;
    TensorMeta& t = h.mutable_node(w).meta.tensor;
    t.strides = meta_util::channels_last_strides(t.sizes);
  }
  std::vector<bool> nchw_fed(n, false);
  // Recompute every call's metadata in order; a rule that cannot say what a node's layout becomes
  // (no C++ rule, an error, other shapes) abandons the rewrite: the original graph is always right.
  for (NodeId id = 0; id < static_cast<NodeId>(n); ++id) {
    Node& nd = h.mutable_node(id);
    if (nd.kind != NodeKind::Call) continue;
    const ValueMeta before = g.node(id).meta;
    if (is_conv[static_cast<size_t>(id)]) {
      // NB: oneDNN, torch's CPU fallback and cuDNN return channels-last when the input or the
      // weight is (torch's suggest_memory_format on each; a wrong guess only costs the runner a
      // copy into the predicted layout).
      NodeId w = nd.args[1].node;
      bool nhwc_input = meta_util::is_channels_last(h.meta_of(nd.args[0]).tensor);
      if (!nhwc_input) nchw_fed[static_cast<size_t>(w)] = true;
      if (nhwc_input || weight[static_cast<size_t>(w)])
        nd.meta.tensor.strides = meta_util::channels_last_strides(nd.meta.tensor.sizes);
      continue;
    }
    std::optional<ValueMeta> m;
    try {
      m = infer_meta(op_def(nd.op), nd.args, h);
    } catch (const std::exception& e) {
      *why = nd.name + ": " + e.what();
      return std::nullopt;
    }
    if (!m) {
      // No rule: fine only when no operand's layout changed.
      bool changed = false;
      for (const Value& v : nd.args)
        v.for_each_node([&](NodeId u) { changed |= !(h.node(u).meta == g.node(u).meta); });
      if (changed) {
        *why = nd.name + " (" + op_def(nd.op).name + ") has no meta rule for channels-last operands";
        return std::nullopt;
      }
      continue;
    }
    if (!same_shapes(*m, before)) {
      *why = nd.name + ": its meta rule disagrees with the captured shapes";
      return std::nullopt;
    }
    bool rg = before.kind == ValueMeta::Kind::Tensor && before.tensor.requires_grad;
    nd.meta = *m;
    if (nd.meta.kind == ValueMeta::Kind::Tensor) nd.meta.tensor.requires_grad = rg;
  }
  for (size_t i = 0; i < placeholders.size(); ++i) {
    size_t w = static_cast<size_t>(placeholders[i]);
    if (!weight[w]) continue;
    out.inputs.push_back(static_cast<int>(i));
    if (nchw_fed[w]) out.nchw_fed.push_back(static_cast<int>(i));
  }
  if (have_cuda) set_devices(h, cuda, nullptr);
  std::vector<NodeId> outputs;
  h.output_value().for_each_node([&](NodeId u) {
    if (std::find(outputs.begin(), outputs.end(), u) != outputs.end()) return;
    outputs.push_back(u);
    const ValueMeta& a = h.node(u).meta;
    const ValueMeta& b = g.node(u).meta;
    if (a.kind == ValueMeta::Kind::Tensor && !(a.tensor.strides == b.tensor.strides)) out.restore.push_back({u, b.tensor});
  });
  // An output copied back to eager's layout is a new tensor: where eager's outputs alias each other
  // (one a view of the other, or both views of one tensor), the copy would not.
  for (auto& [r, meta] : out.restore)
    for (NodeId u : outputs)
      if (u != r && view_base(h, u) == view_base(h, r)) {
        *why = h.node(r).name + " would be copied back to eager's layout but aliases output " + h.node(u).name;
        return std::nullopt;
      }
  return out;
}

}  // namespace ff
