#include "graph/passes/fuse_attention.h"

#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string_view>

#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/effects.h"
#include "graph/passes/rewriter.h"
#include "src/base/config.h"
#include "src/base/errors.h"
#include "src/base/logging.h"

namespace ff {
namespace {

AttentionSupport g_support;

// Why a candidate (a softmax feeding a matmul) was not rewritten.
struct NoMatch {
  std::string why;
};

enum class MaskKind { None,
                      Bool,
                      Additive };

struct Match {
  NodeId softmax = -1;
  NodeId out = -1;                 // p @ v: its uses become the rewrite's result
  std::vector<NodeId> dropped;     // intermediates with no user left after the rewrite
  Value q, k, v;                   // source operands
  MaskKind mask_kind = MaskKind::None;
  Value mask;                      // Bool: true = masked out; Additive: added to the scores
  std::optional<double> scale;     // nullopt: SDPA's default 1/sqrt(E)
};

bool is_matmul(const OpDef& op) { return op_in(op_kind(op.id), {Op::op_matmul, Op::matmul, Op::bmm}); }

const Node* call_node(const Graph& g, const Value& v) {
  if (!v.is_node()) return nullptr;
  const Node& n = g.node(v.node);
  return n.kind == NodeKind::Call ? &n : nullptr;
}

const TensorMeta* tensor_meta(const Graph& g, const Value& v) {
  if (!v.is_node()) return nullptr;
  const Node& n = g.node(v.node);
  return n.meta.is_tensor() ? &n.meta.tensor : nullptr;
}

bool last_dim(const Value& dim, int64_t ndim) {
  return dim.kind == Value::Kind::Int && (dim.i == -1 || dim.i == ndim - 1);
}

bool attention_dtype(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

// `mask` broadcasts into `scores` without changing its shape.
bool broadcasts_into(const TensorMeta& mask, const TensorMeta& scores) {
  if (mask.dim() < 1 || mask.dim() > scores.dim() || !(mask.device == scores.device)) return false;
  for (int64_t i = 1; i <= mask.dim(); ++i) {
    const SymInt &m = mask.sizes[static_cast<size_t>(mask.dim() - i)], &s = scores.sizes[static_cast<size_t>(scores.dim() - i)];
    if (m != 1 && m != s) return false;
  }
  return true;
}

// The nodes the output or an effect needs (the rest is dead code the capture left).
std::vector<bool> live_nodes(const Graph& g) {
  std::vector<bool> live(g.size(), false);
  for (size_t i = g.size(); i-- > 0;) {
    const Node& n = g.nodes()[i];
    if (n.kind == NodeKind::Output || has_side_effects(n)) live[i] = true;
    if (live[i])
      for (const Value& v : n.args) v.for_each_node([&](NodeId id) { live[static_cast<size_t>(id)] = true; });
  }
  return live;
}

class Matcher {
 public:
  // NB: uses by dead nodes (a dropout that returned its operand, left unused) do not count
  explicit Matcher(const Graph& g) : g_(g), uses_(g.size(), 0) {
    std::vector<bool> live = live_nodes(g);
    for (size_t i = 0; i < g.size(); ++i)
      if (live[i])
        for (const Value& v : g.nodes()[i].args) v.for_each_node([&](NodeId id) { ++uses_[static_cast<size_t>(id)]; });
  }

  // The candidate ending at `out` (a matmul whose left operand is a softmax, maybe through an
  // identity dropout): nullopt when `out` is no candidate at all, NoMatch when it is one that
  // cannot be rewritten.
  std::optional<Match> match(NodeId out, std::string* why) const {
    try {
      return match_or_throw(out);
    } catch (const NoMatch& e) {
      *why = e.why;
      return std::nullopt;
    }
  }

  // The softmax of the candidate ending at `out`, if `out` is one.
  std::optional<NodeId> candidate_softmax(NodeId out) const {
    const Node& n = g_.node(out);
    if (n.kind != NodeKind::Call || !is_matmul(op_def(n.op))) return std::nullopt;
    const Node* p = call_node(g_, n.args[0]);
    NodeId id = p ? n.args[0].node : -1;
    if (p && is_dropout(*p)) {
      id = p->args[0].is_node() ? p->args[0].node : -1;
      p = call_node(g_, p->args[0]);
    }
    if (!p || !is_softmax(*p)) return std::nullopt;
    return id;
  }

 private:
  static bool is_dropout(const Node& n) { return op_in(op_kind(n), {Op::f_dropout, Op::dropout}); }
  static bool is_softmax(const Node& n) { return op_in(op_kind(n), {Op::f_softmax, Op::softmax}); }

  // `v` is a node used only by the pattern's next step; returns it.
  NodeId single_use(const Value& v, const char* what) const {
    if (!v.is_node()) throw NoMatch{std::string(what) + " is not a graph value"};
    if (uses_[static_cast<size_t>(v.node)] != 1)
      throw NoMatch{std::string(what) + " '" + g_.node(v.node).name + "' has other users (or is returned)"};
    return v.node;
  }

  void same_shape_and_dtype(const Value& a, const Value& b, const char* what) const {
    const TensorMeta *ma = tensor_meta(g_, a), *mb = tensor_meta(g_, b);
    if (!ma || !mb || ma->sizes != mb->sizes || ma->dtype != mb->dtype)
      throw NoMatch{std::string(what) + " changes the scores' shape or dtype"};
  }

  Match match_or_throw(NodeId out) const {
    Match m;
    m.out = out;
    const Node& o = g_.node(out);
    Value p = o.args[0];
    m.v = o.args[1];
    const Node* pn = call_node(g_, p);
    if (is_dropout(*pn)) {
      const Value& prob = call_arg(*pn, "p");
      const Value& training = call_arg(*pn, op_kind(*pn) == Op::f_dropout ? "training" : "train");
      if (training.kind != Value::Kind::Bool || !prob.is_number())
        throw NoMatch{"dropout's p or training flag is not a constant"};
      // NB: torch's dropout returns its input when not training or p == 0 (no random numbers drawn).
      if (training.b && prob.as_double() != 0.0) throw NoMatch{"dropout in training mode with p > 0 draws random numbers"};
      m.dropped.push_back(single_use(p, "the dropout result"));
      p = pn->args[0];
      pn = call_node(g_, p);
    }
    m.softmax = single_use(p, "the softmax");
    m.dropped.push_back(m.softmax);
    const TensorMeta* pm = tensor_meta(g_, p);
    if (!pm) throw NoMatch{"the softmax is not a tensor"};
    if (!last_dim(call_arg(*pn, "dim"), pm->dim())) throw NoMatch{"the softmax is not over the last dimension"};
    if (!call_arg(*pn, "dtype").is_none()) throw NoMatch{"the softmax casts (dtype=...)"};

    // Mask.
    Value s = pn->args[0];
    const Node* sn = call_node(g_, s);
    if (!sn) throw NoMatch{"the softmax input is not computed in the graph"};
    const Op sop = op_kind(*sn);
    if (sop == Op::masked_fill) {
      const Value& fill = call_arg(*sn, "value");
      if (fill.kind != Value::Kind::Float || !(std::isinf(fill.f) && fill.f < 0))
        throw NoMatch{"masked_fill fills with a value other than -inf"};
      const TensorMeta* mm = tensor_meta(g_, call_arg(*sn, "mask"));
      if (!mm || mm->dtype != DType::Bool) throw NoMatch{"the masked_fill mask is not a bool tensor"};
      m.mask_kind = MaskKind::Bool;
      m.mask = call_arg(*sn, "mask");
      m.dropped.push_back(single_use(s, "the masked scores"));
      same_shape_and_dtype(s, call_arg(*sn, "input"), "masked_fill");
      s = call_arg(*sn, "input");
    } else if (sop == Op::op_add || sop == Op::add) {
      if (sop == Op::add && !(call_arg(*sn, "alpha").is_number() && call_arg(*sn, "alpha").as_double() == 1.0))
        throw NoMatch{"add with alpha"};
      // The scores are the operand computed by a scale or a matmul; the other is the mask.
      int scores = -1;
      for (int i = 0; i < 2 && scores < 0; ++i) {
        const Node* c = call_node(g_, sn->args[static_cast<size_t>(i)]);
        if (c && (is_matmul(op_def(c->op)) || scale_of(*c))) scores = i;
      }
      if (scores < 0) throw NoMatch{"neither operand of the add is the scores"};
      m.mask_kind = MaskKind::Additive;
      m.mask = sn->args[static_cast<size_t>(1 - scores)];
      m.dropped.push_back(single_use(s, "the masked scores"));
      same_shape_and_dtype(s, sn->args[static_cast<size_t>(scores)], "the mask add");
      s = sn->args[static_cast<size_t>(scores)];
    }

    // Scale.
    sn = call_node(g_, s);
    if (!sn) throw NoMatch{"the scores are not computed in the graph"};
    if (auto scale = scale_of(*sn)) {
      // NB: SDPA's math kernel scales q and k by sqrt(scale) in some torch versions: a negative,
      // zero or non-finite factor would not compute what eager does.
      if (!std::isfinite(*scale) || *scale <= 0.0) throw NoMatch{"the scale is not a positive finite number"};
      m.scale = *scale;
      m.dropped.push_back(single_use(s, "the scaled scores"));
      const Value& x = scale_operand(*sn);
      same_shape_and_dtype(s, x, "the scale");
      s = x;
      sn = call_node(g_, s);
    } else {
      m.scale = 1.0;
    }
    if (!sn || !is_matmul(op_def(sn->op))) throw NoMatch{"the scores are not a matrix product"};
    m.dropped.push_back(single_use(s, "the scores"));
    m.q = sn->args[0];
    const Node* kt = call_node(g_, sn->args[1]);
    if (!kt || op_kind(*kt) != Op::transpose) throw NoMatch{"the scores' right operand is not k.transpose(-2, -1)"};
    const TensorMeta* ktm = tensor_meta(g_, sn->args[1]);
    int64_t nd = ktm ? ktm->dim() : 0;
    auto norm = [&](const Value& d) { return d.kind != Value::Kind::Int ? -1 : d.i < 0 ? d.i + nd
                                                                                       : d.i; };
    std::set<int64_t> dims = {norm(call_arg(*kt, "dim0")), norm(call_arg(*kt, "dim1"))};
    if (dims != std::set<int64_t>{nd - 2, nd - 1}) throw NoMatch{"the scores' right operand is not k.transpose(-2, -1)"};
    m.k = call_arg(*kt, "input");
    if (uses_[static_cast<size_t>(sn->args[1].node)] == 1) m.dropped.push_back(sn->args[1].node);

    check_shapes(m, s, p);
    return m;
  }

  // s * c, c * s, s / c: the constant factor.
  static std::optional<double> scale_of(const Node& n) {
    const Op op = op_kind(n);
    const Value &a = n.args[0], &b = n.args[1];
    auto number = [](const Value& v) { return v.kind == Value::Kind::Float || v.kind == Value::Kind::Int; };
    if (op == Op::op_mul || op == Op::mul) {
      if (a.is_node() && number(b)) return b.as_double();
      if (b.is_node() && number(a)) return a.as_double();
    }
    if (op == Op::op_truediv || op == Op::true_divide || (op == Op::div && call_arg(n, "rounding_mode").is_none())) {
      if (a.is_node() && number(b) && b.as_double() != 0.0) return 1.0 / b.as_double();
    }
    return std::nullopt;
  }
  static const Value& scale_operand(const Node& n) { return n.args[0].is_node() ? n.args[0] : n.args[1]; }

  void check_shapes(Match& m, const Value& scores, const Value& p) const {
    const TensorMeta *q = tensor_meta(g_, m.q), *k = tensor_meta(g_, m.k), *v = tensor_meta(g_, m.v);
    const TensorMeta *s = tensor_meta(g_, scores), *pm = tensor_meta(g_, p), *y = tensor_meta(g_, Value::of_node(m.out));
    if (!q || !k || !v || !s || !pm || !y) throw NoMatch{"q, k or v is not a tensor"};
    if (!attention_dtype(q->dtype)) throw NoMatch{"dtype " + std::string(dtype_name(q->dtype)) + " is not a floating type SDPA takes"};
    for (const TensorMeta* t : {k, v, s, pm, y})
      if (t->dtype != q->dtype || !(t->device == q->device)) throw NoMatch{"q, k, v and the scores differ in dtype or device"};
    int64_t nd = q->dim();
    if (nd < 3 || k->dim() != nd || v->dim() != nd) throw NoMatch{"q, k and v need the same number (>= 3) of dimensions"};
    // NB: sizes may be symbolic (dynamic shapes); what cannot be decided without a guard throws
    // SymbolicSpecialization, and the attention stays explicit.
    SymShape batch(q->sizes.begin(), q->sizes.end() - 2);
    auto batch_of = [](const TensorMeta* t) { return SymShape(t->sizes.begin(), t->sizes.end() - 2); };
    if (batch_of(k) != batch || batch_of(v) != batch) throw NoMatch{"q, k and v differ in batch dimensions (matmul would broadcast)"};
    SymInt L = q->sizes[nd - 2], E = q->sizes[nd - 1], S = k->sizes[nd - 2], Ev = v->sizes[nd - 1];
    if (k->sizes[nd - 1] != E || v->sizes[nd - 2] != S) throw NoMatch{"q, k and v shapes do not chain"};
    // NB: empty dimensions are left to eager (SDPA's default scale 1/sqrt(0), kernels' empty cases).
    for (const TensorMeta* t : {q, k, v})
      for (const SymInt& d : t->sizes)
        if (d == 0) throw NoMatch{"an empty dimension"};
    SymShape want_s = batch, want_y = batch;
    want_s.insert(want_s.end(), {L, S});
    want_y.insert(want_y.end(), {L, Ev});
    if (s->sizes != want_s || pm->sizes != want_s || y->sizes != want_y) throw NoMatch{"the scores or the result have unexpected shapes"};
    if (m.mask_kind != MaskKind::None) {
      const TensorMeta* mm = tensor_meta(g_, m.mask);
      if (!mm || !broadcasts_into(*mm, *s)) throw NoMatch{"the mask does not broadcast into the scores"};
      if (m.mask_kind == MaskKind::Additive && mm->dtype != q->dtype) throw NoMatch{"the additive mask's dtype differs from q's"};
    }
    if (m.scale && E.is_symbolic()) throw NoMatch{"an explicit scale with a symbolic head dimension"};
    if (E > 0 && m.scale && *m.scale == 1.0 / std::sqrt(static_cast<double>(E.hint()))) m.scale.reset();
  }

  const Graph& g_;
  std::vector<int> uses_;
};

// ---- building the replacement ----------------------------------------------------------------

struct Emitter {
  GraphRewriter& rw;

  NodeId call(const char* op_name, const std::vector<Value>& positional,
              const std::vector<std::pair<std::string, Value>>& keywords, const std::string& hint,
              const ValueMeta* meta = nullptr) {
    auto op = op_by_name(op_name);
    FF_CHECK(op.has_value(), std::string("no op ") + op_name);
    std::string err;
    auto bound = bind_call(op_def(*op), positional, keywords, rw.result(), &err);
    if (!bound) throw NoMatch{std::string(op_name) + ": " + err};
    std::optional<ValueMeta> m = meta ? std::optional<ValueMeta>(*meta) : infer_meta(op_def(*op), *bound, rw.result());
    if (!m) throw NoMatch{std::string("no meta rule for ") + op_name};
    return rw.add_call(*op, std::move(*bound), std::move(*m), hint);
  }
};

// Emits the SDPA call (and the NaN rows of fully masked queries) for `m`; returns the node that
// stands for m.out. Throws NoMatch where a step cannot be typed (the caller then keeps the
// explicit form).
NodeId emit(GraphRewriter& rw, const Match& m) {
  Emitter e{rw};
  const Graph& src = rw.source();
  const ValueMeta& y = src.node(m.out).meta;
  Value q = rw.map(m.q), k = rw.map(m.k), v = rw.map(m.v), mask = rw.map(m.mask);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::pair<std::string, Value>> kw;
  Value bad;  // bool rows [..., L, 1]: true where eager's softmax row is NaN
  if (m.mask_kind == MaskKind::Bool) {
    kw.push_back({"attn_mask", Value::of_node(e.call("logical_not", {mask}, {}, "attn_mask"))});
    bad = Value::of_node(e.call("all", {mask, Value::of_int(-1), Value::of_bool(true)}, {}, "masked_rows"));
  } else if (m.mask_kind == MaskKind::Additive) {
    kw.push_back({"attn_mask", mask});
    NodeId below = e.call("lt", {mask, Value::of_float(kInf)}, {}, "mask_below_inf");
    NodeId above = e.call("gt", {mask, Value::of_float(-kInf)}, {}, "mask_above_neg_inf");
    NodeId all_below = e.call("all", {Value::of_node(below), Value::of_int(-1), Value::of_bool(true)}, {}, "mask_rows_below_inf");
    NodeId any_above = e.call("any", {Value::of_node(above), Value::of_int(-1), Value::of_bool(true)}, {}, "mask_rows_finite");
    NodeId good = e.call("logical_and", {Value::of_node(all_below), Value::of_node(any_above)}, {}, "mask_rows_ok");
    bad = Value::of_node(e.call("logical_not", {Value::of_node(good)}, {}, "masked_rows"));
  }
  if (m.scale) kw.push_back({"scale", Value::of_float(*m.scale)});
  NodeId sdpa = e.call("scaled_dot_product_attention", {q, k, v}, kw, "scaled_dot_product_attention", &y);
  if (m.mask_kind == MaskKind::None) return sdpa;
  NodeId fixed = e.call("masked_fill", {Value::of_node(sdpa), bad, Value::of_float(std::nan(""))}, {}, "attention");
  if (!(rw.result().node(fixed).meta == y)) throw NoMatch{"the NaN rows step would change the result's layout"};
  return fixed;
}

// One rewrite of `g` with `matches`; the index of a match that could not be emitted in *failed.
std::optional<Graph> rewrite(const Graph& g, const std::vector<Match>& matches, size_t* failed, std::string* why) {
  std::set<NodeId> dropped;
  std::vector<int> at(g.size(), -1);
  for (size_t i = 0; i < matches.size(); ++i) {
    dropped.insert(matches[i].dropped.begin(), matches[i].dropped.end());
    at[static_cast<size_t>(matches[i].out)] = static_cast<int>(i);
  }
  // NB: dead code reading a dropped node goes with it
  std::vector<bool> live = live_nodes(g);
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    bool reads_dropped = false;
    for (const Value& v : g.node(id).args) v.for_each_node([&](NodeId a) { reads_dropped = reads_dropped || dropped.count(a) > 0; });
    if (!live[static_cast<size_t>(id)] && reads_dropped) dropped.insert(id);
  }
  GraphRewriter rw(g);
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    if (dropped.count(id)) continue;
    int mi = at[static_cast<size_t>(id)];
    if (mi < 0) {
      rw.copy(id);
      continue;
    }
    try {
      rw.replace(id, Value::of_node(emit(rw, matches[static_cast<size_t>(mi)])));
    } catch (const NoMatch& e) {
      *failed = static_cast<size_t>(mi);
      *why = e.why;
      return std::nullopt;
    }
  }
  return rw.finish();
}

bool float32_on_cuda(const Graph& g, const Value& q) {
  const TensorMeta* t = tensor_meta(g, q);
  return t && t->dtype == DType::Float32 && t->device.type == Device::Type::CUDA;
}

// Why framefuse's CUDA TF32 attention kernel cannot run `m` ("" when it can).
std::string tf32_kernel_refusal(const Graph& g, const Match& m) {
  if (!config().cuda_tf32_attention) return "config cuda_tf32_attention is off";
  if (m.mask_kind == MaskKind::Additive) return "it takes bool masks, not float ones";
  const TensorMeta *q = tensor_meta(g, m.q), *v = tensor_meta(g, m.v);
  int64_t E = q->sizes.back(), Ev = v->sizes.back();
  if (q->dim() > 4) return "q has more than 4 dims";
  if (!cuda_tf32_attention_fits(E, Ev))
    return "head dims " + std::to_string(E) + " and " + std::to_string(Ev) + ": it takes equal ones, multiples of 8 up to 128";
  return "";
}

void hint(const Graph& g, NodeId softmax, const std::string& why) {
  if (log_enabled(LogArtifact::perf_hints))
    log_emit(LogArtifact::perf_hints, "graph: attention at '" + g.node(softmax).name +
                                          "' stays explicit (not scaled_dot_product_attention): " + why);
}

}  // namespace

void set_attention_support(AttentionSupport support) { g_support = support; }
bool cuda_tf32_attention_fits(int64_t E, int64_t Ev) { return E == Ev && E > 0 && E % 8 == 0 && E <= 128; }
AttentionSupport attention_support() { return g_support; }

Graph fuse_attention(const Graph& g) {
  if (!config().fuse_attention) return g;
  return fuse_attention(g, g_support, nullptr);
}

Graph fuse_attention(const Graph& g, const AttentionSupport& support, std::vector<std::string>* fired) {
  if (!support.sdpa) return g;
  Matcher matcher(g);
  std::vector<Match> matches;
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    auto softmax = matcher.candidate_softmax(id);
    if (!softmax) continue;
    std::string why;
    std::optional<Match> m;
    try {
      m = matcher.match(id, &why);
    } catch (const SymbolicSpecialization& e) {
      why = std::string("its shapes are decided only by a guard on symbolic sizes: ") + e.what();
    }
    if (m && m->scale && !support.scale_keyword) {
      m.reset();
      why = "the scale is not 1/sqrt(E) and this torch's scaled_dot_product_attention has no scale= keyword";
    }
    if (m && support.cuda_tf32_matmul && float32_on_cuda(g, m->q)) {
      std::string no = tf32_kernel_refusal(g, *m);
      if (!no.empty()) {
        m.reset();
        why =
            "float32 on CUDA with TF32 matmuls on: the explicit matmuls run on tensor cores, SDPA's float32 "
            "kernels do not, and framefuse's TF32 attention kernel does not take it (" +
            no + ")";
      }
    }
    if (m) matches.push_back(std::move(*m));
    else hint(g, *softmax, why);
  }
  while (!matches.empty()) {
    size_t failed = 0;
    std::string why;
    std::optional<Graph> out = rewrite(g, matches, &failed, &why);
    if (!out) {
      hint(g, matches[failed].softmax, why);
      matches.erase(matches.begin() + static_cast<std::ptrdiff_t>(failed));
      continue;
    }
    // Names from the result: the rewrite's nodes come after the copied ones.
    for (const Match& m : matches) {
      std::string line = "'" + g.node(m.softmax).name + "' (result '" + g.node(m.out).name + "')";
      if (fired) fired->push_back(g.node(m.softmax).name);
      if (log_enabled(LogArtifact::graph_rewrites))
        log_emit(LogArtifact::graph_rewrites,
                 "fuse_attention: explicit attention at " + line + " -> torch.nn.functional.scaled_dot_product_attention" +
                     (m.mask_kind == MaskKind::Bool       ? " with a bool attn_mask (fully masked rows stay NaN)"
                      : m.mask_kind == MaskKind::Additive ? " with a float attn_mask (fully masked rows stay NaN)"
                                                          : ""));
    }
    return std::move(*out);
  }
  return g;
}

}  // namespace ff
