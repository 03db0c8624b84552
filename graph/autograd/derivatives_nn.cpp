// Derivative rules of matrix products, normalizations, softmax, convolution, pooling, attention and
// losses (derivatives.h).
#include <cmath>
#include <numeric>

#include "graph/autograd/derivatives_internal.h"

namespace ff::grad {

namespace {

void rule_rms_norm(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value &input = c.arg("input"), &weight = c.arg("weight"), &eps_arg = c.arg("eps");
  const TensorMeta in = b.tensor(input);
  double eps = 0.0;
  if (eps_arg.is_number()) {
    eps = eps_arg.as_double();
  } else if (in.dtype == DType::Float32) {
    eps = 1.1920928955078125e-07;  // torch.finfo(float32).eps, eager's default
  } else if (in.dtype == DType::Float64) {
    eps = 2.220446049250313e-16;
  } else {
    unsupported(c, "of a reduced float without eps");
  }
  int64_t k = static_cast<int64_t>(int_list(c.arg("normalized_shape")).size());
  std::vector<int64_t> inner, outer;
  for (int64_t d = 0; d < in.dim(); ++d) (d >= in.dim() - k ? inner : outer).push_back(d);
  Value x = b.opmath(input), g = b.opmath(c.grad);
  Value rstd = b.call(Op::rsqrt, {b.add(b.mean(b.mul(x, x), inner, true), Value::of_float(eps))});
  Value xhat = b.mul(x, rstd);
  if (c.needs(input)) {
    Value gxhat = weight.is_none() ? g : b.mul(g, b.opmath(weight));
    c.give(input, b.mul(rstd, b.sub(gxhat, b.mul(xhat, b.mean(b.mul(gxhat, xhat), inner, true)))));
  }
  if (c.needs(weight)) c.give(weight, outer.empty() ? b.mul(g, xhat) : b.sum(b.mul(g, xhat), outer, false));
}

// Softmax family: the dim, or Unsupported where it is implicit.
int64_t softmax_dim(RuleContext& c) {
  const Value& dim = c.arg("dim");
  if (dim.kind != Value::Kind::Int) unsupported(c, "with an implicit dim");
  return dim.i;
}

void rule_softmax(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  int64_t dim = softmax_dim(c);
  // eager: y * (grad - sum(grad * y, dim, keepdim))
  Value y = c.b.opmath(c.out), g = c.b.opmath(c.grad);
  Value dot = c.b.sum(c.b.mul(g, y), {dim}, true);
  c.give(x, c.b.mul(y, c.b.sub(g, dot)));
}

void rule_log_softmax(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  int64_t dim = softmax_dim(c);
  // eager: grad - exp(y) * sum(grad, dim, keepdim)
  Value y = c.b.opmath(c.out), g = c.b.opmath(c.grad);
  c.give(x, c.b.sub(g, c.b.mul(c.b.call(Op::exp, {y}), c.b.sum(g, {dim}, true))));
}

void rule_layer_norm(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value& input = c.arg("input");
  const Value& weight = c.arg("weight");
  const Value& bias = c.arg("bias");
  const TensorMeta in = b.tensor(input);
  int64_t k = static_cast<int64_t>(int_list(c.arg("normalized_shape")).size());
  std::vector<int64_t> inner, outer;
  for (int64_t d = 0; d < in.dim(); ++d) (d >= in.dim() - k ? inner : outer).push_back(d);
  // The statistics again, from the saved input (eager saves them; they are one fused reduction).
  Value x = b.opmath(input);
  Value xc = b.sub(x, b.mean(x, inner, true));
  Value var = b.mean(b.mul(xc, xc), inner, true);
  Value rstd = b.call(Op::rsqrt, {b.add(var, c.arg("eps"))});
  Value xhat = b.mul(xc, rstd);
  Value g = b.opmath(c.grad);
  if (c.needs(input)) {
    Value gxhat = weight.is_none() ? g : b.mul(g, b.opmath(weight));
    Value m1 = b.mean(gxhat, inner, true);
    Value m2 = b.mean(b.mul(gxhat, xhat), inner, true);
    c.give(input, b.mul(rstd, b.sub(b.sub(gxhat, m1), b.mul(xhat, m2))));
  }
  if (c.needs(weight)) c.give(weight, outer.empty() ? b.mul(g, xhat) : b.sum(b.mul(g, xhat), outer, false));
  if (c.needs(bias)) c.give(bias, outer.empty() ? g : b.sum(g, outer, false));
}

// Matrix products of operands with at least two dims (batch dims broadcast; the driver sums them).
void matmul_2d(RuleContext& c, const Value& a, const Value& m, double alpha = 1.0) {
  GradBuilder& b = c.b;
  Value g = alpha == 1.0 ? c.grad : b.scale(c.grad, alpha);
  if (c.needs(a)) c.give(a, b.call(Op::matmul, {g, b.transpose_last(m)}));
  if (c.needs(m)) c.give(m, b.call(Op::matmul, {b.transpose_last(a), g}));
}

void matmul_like(RuleContext& c, const Value& a, const Value& m) {
  GradBuilder& b = c.b;
  int64_t da = b.tensor(a).dim(), dm = b.tensor(m).dim();
  if (da >= 2 && dm >= 2) return matmul_2d(c, a, m);
  if (da == 1 && dm == 1) {  // dot: the gradient is a 0-dim tensor
    if (c.needs(a)) c.give(a, b.mul(c.grad, m));
    if (c.needs(m)) c.give(m, b.mul(c.grad, a));
    return;
  }
  if (da == 1 && dm == 2) {  // [k] @ [k, n] -> [n]
    if (c.needs(a)) c.give(a, b.call(Op::matmul, {m, c.grad}));
    if (c.needs(m)) c.give(m, b.mul(b.reshape(a, {b.tensor(a).sizes[0], 1}), b.reshape(c.grad, {1, b.tensor(c.grad).sizes[0]})));
    return;
  }
  if (da == 2 && dm == 1) {  // [n, k] @ [k] -> [n]
    if (c.needs(a)) c.give(a, b.mul(b.reshape(c.grad, {b.tensor(c.grad).sizes[0], 1}), b.reshape(m, {1, b.tensor(m).sizes[0]})));
    if (c.needs(m)) c.give(m, b.call(Op::matmul, {b.transpose_last(a), c.grad}));
    return;
  }
  unsupported(c, "of a batched product with a 1-d operand");
}

void rule_matmul(RuleContext& c) { matmul_like(c, c.arg("input"), c.arg(c.kind == Op::matmul ? "other" : "mat2")); }
void rule_op_matmul(RuleContext& c) { matmul_like(c, c.arg("a"), c.arg("b")); }

void rule_addmm(RuleContext& c) {
  bool batched = c.kind == Op::baddbmm;
  const Value& beta = c.arg("beta");
  const Value& alpha = c.arg("alpha");
  if (!beta.is_number() || !alpha.is_number()) unsupported(c, "with tensor beta or alpha");
  if (c.needs("input")) c.give("input", beta.as_double() == 1.0 ? c.grad : c.b.scale(c.grad, beta.as_double()));
  matmul_2d(c, c.arg(batched ? "batch1" : "mat1"), c.arg(batched ? "batch2" : "mat2"), alpha.as_double());
}

void rule_linear(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value& x = c.arg("input");
  const Value& w = c.arg("weight");
  const Value& bias = c.arg("bias");
  const TensorMeta wm = b.tensor(w);
  if (wm.dim() != 2) unsupported(c, "with a weight that is not a matrix");
  int64_t n = wm.sizes[0], k = wm.sizes[1];
  if (c.needs(x)) c.give(x, b.call(Op::matmul, {c.grad, w}));
  if (c.needs(w) || c.needs(bias)) {
    Value g2 = b.reshape(c.grad, {-1, n});
    if (c.needs(w)) c.give(w, b.call(Op::mm, {b.call(Op::t, {g2}), b.reshape(x, {-1, k})}));
    if (c.needs(bias)) c.give(bias, b.tensor(bias).dim() == 0 ? b.sum(g2, {}, false) : b.sum(g2, {0}, false));
  }
}

void rule_embedding(RuleContext& c) {
  const Value& weight = c.arg("weight");
  if (c.needs("input")) unsupported(c, "with respect to indices");
  if (!c.needs(weight)) return;
  if (!c.arg("max_norm").is_none()) unsupported(c, "with max_norm (it renormalizes the weight in place)");
  if (c.arg("sparse").kind == Value::Kind::Bool && c.arg("sparse").b) unsupported(c, "with sparse gradients");
  const Value& padding = c.arg("padding_idx");
  int64_t rows = c.b.tensor(weight).sizes.at(0);
  int64_t pad = padding.is_none() ? -1 : wrap(padding.i, rows);
  c.give(weight, c.b.call("torch.ops.aten.embedding_dense_backward",
                          {c.grad, c.arg("input"), Value::of_int(rows), Value::of_int(pad), c.arg("scale_grad_by_freq")}));
}

void rule_mse_loss(RuleContext& c) {
  const Value& reduction = c.arg("reduction");
  if (reduction.kind != Value::Kind::Str || !c.arg("size_average").is_none() || !c.arg("reduce").is_none())
    unsupported(c, "with legacy reduction arguments");
  GradBuilder& b = c.b;
  const Value& x = c.arg("input");
  const Value& t = c.arg("target");
  Value diff = b.sub(x, t);
  Value g = c.grad;
  if (reduction.s != "none") g = b.expand(g, b.tensor(diff).sizes);
  Value d = b.mul(b.scale(diff, 2.0), g);
  if (reduction.s == "mean") d = b.div(d, Value::of_float(static_cast<double>(b.tensor(diff).numel())));
  if (c.needs(x)) c.give(x, d);
  if (c.needs(t)) c.give(t, b.neg(d));
}

// conv1d / conv2d: torch's convolution_backward (an extern call), for the operands that need it.
void rule_conv(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value &x = c.arg("input"), &w = c.arg("weight"), &bias = c.arg("bias");
  size_t n = static_cast<size_t>(b.tensor(w).dim()) - 2;
  auto per_dim = [&](const char* name) {
    const Value& v = c.arg(name);
    if (v.kind == Value::Kind::Str && v.s == "valid") return ints(std::vector<int64_t>(n, 0));
    std::vector<int64_t> out = int_list(v);
    if (out.size() == 1) out.assign(n, out[0]);
    if (out.size() != n) unsupported(c, std::string("with ") + name + " " + (v.kind == Value::Kind::Str ? v.s : "of another rank"));
    return ints(out);
  };
  Value stride = per_dim("stride"), padding = per_dim("padding"), dilation = per_dim("dilation");
  bool nx = c.needs(x), nw = c.needs(w), nb = c.needs(bias);
  Value bias_sizes = bias.is_none() ? Value::none() : ints(b.tensor(bias).sizes);
  Value mask = Value::list({Value::of_bool(nx), Value::of_bool(nw), Value::of_bool(nb)});
  // NB: an unbatched input (conv1d of [C, L]) is convolved as a batch of one, as eager does.
  bool unbatched = b.tensor(x).dim() == static_cast<int64_t>(n) + 1;
  Value xb = unbatched ? b.call(Op::unsqueeze, {x, Value::of_int(0)}) : x;
  Value gb = unbatched ? b.call(Op::unsqueeze, {c.grad, Value::of_int(0)}) : c.grad;
  Value r = b.call("torch.ops.aten.convolution_backward",
                   {gb, xb, w, bias_sizes, stride, padding, dilation, Value::of_bool(false),
                    ints(std::vector<int64_t>(n, 0)), c.arg("groups"), mask});
  if (nx) c.give(x, b.reshape(b.item(r, 0), b.tensor(x).sizes));
  if (nw) c.give(w, b.item(r, 1));
  if (nb) c.give(bias, b.item(r, 2));
}

// Per channel (dim 1) statistics of batch_norm: every dim but the channels'.
std::vector<int64_t> all_but_channels(int64_t ndim) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < ndim; ++d)
    if (d != 1) dims.push_back(d);
  return dims;
}

void rule_batch_norm(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value &input = c.arg("input"), &weight = c.arg("weight"), &bias = c.arg("bias");
  if (c.needs("running_mean") || c.needs("running_var")) unsupported(c, "with respect to the running statistics");
  const TensorMeta in = b.tensor(input);
  if (in.dim() < 2) unsupported(c, "of a tensor without channels");
  std::vector<int64_t> dims = all_but_channels(in.dim()), channel_shape(static_cast<size_t>(in.dim()), 1);
  channel_shape[1] = in.sizes[1];
  const Value& training = c.arg("training");
  bool batch_stats = training.kind == Value::Kind::Bool && training.b;
  Value x = b.opmath(input), g = b.opmath(c.grad);
  Value xc, invstd;
  if (batch_stats) {  // the batch's statistics again (eager saves them)
    xc = b.sub(x, b.mean(x, dims, true));
    invstd = b.call(Op::rsqrt, {b.add(b.mean(b.mul(xc, xc), dims, true), c.arg("eps"))});
  } else {
    const Value &mean = c.arg("running_mean"), &var = c.arg("running_var");
    if (mean.is_none() || var.is_none()) unsupported(c, "in eval mode without running statistics");
    xc = b.sub(x, b.reshape(b.opmath(mean), channel_shape));
    invstd = b.reshape(b.call(Op::rsqrt, {b.add(b.opmath(var), c.arg("eps"))}), channel_shape);
  }
  Value xhat = b.mul(xc, invstd);
  if (c.needs(input)) {
    Value gxhat = weight.is_none() ? g : b.mul(g, b.reshape(b.opmath(weight), channel_shape));
    if (batch_stats) {
      Value m1 = b.mean(gxhat, dims, true), m2 = b.mean(b.mul(gxhat, xhat), dims, true);
      c.give(input, b.mul(invstd, b.sub(b.sub(gxhat, m1), b.mul(xhat, m2))));
    } else {
      c.give(input, b.mul(gxhat, invstd));
    }
  }
  if (c.needs(weight)) c.give(weight, b.sum(b.mul(g, xhat), dims, false));
  if (c.needs(bias)) c.give(bias, b.sum(g, dims, false));
}

// The 2-d pooling parameter `name` as a list of two (an int is both).
Value pair_arg(RuleContext& c, const char* name, const Value& fallback) {
  const Value& v = c.arg(name);
  if (v.is_none()) return fallback;
  std::vector<int64_t> out = int_list(v);
  if (out.size() == 1) out.push_back(out[0]);
  if (out.size() != 2) unsupported(c, std::string("with a ") + name + " that is not a pair");
  return ints(out);
}

void rule_max_pool2d(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  if (c.arg("return_indices").b) unsupported(c, "that returns its indices");
  Value kernel = pair_arg(c, "kernel_size", Value::none());
  Value stride = pair_arg(c, "stride", kernel), padding = pair_arg(c, "padding", kernel), dilation = pair_arg(c, "dilation", kernel);
  // NB: the indices again (the forward ran max_pool2d, which keeps none), then torch's backward.
  Value r = b.call("torch.ops.aten.max_pool2d_with_indices", {x, kernel, stride, padding, dilation, c.arg("ceil_mode")});
  c.give(x, b.call("torch.ops.aten.max_pool2d_with_indices_backward",
                   {c.grad, x, kernel, stride, padding, dilation, c.arg("ceil_mode"), b.item(r, 1)}));
}

void rule_avg_pool2d(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  Value kernel = pair_arg(c, "kernel_size", Value::none());
  Value stride = pair_arg(c, "stride", kernel), padding = pair_arg(c, "padding", kernel);
  c.give(x, c.b.call("torch.ops.aten.avg_pool2d_backward", {c.grad, x, kernel, stride, padding, c.arg("ceil_mode"),
                                                            c.arg("count_include_pad"), c.arg("divisor_override")}));
}

void rule_adaptive_avg_pool2d(RuleContext& c) {
  const Value& x = c.arg("input");
  if (c.needs(x)) c.give(x, c.b.call("torch.ops.aten._adaptive_avg_pool2d_backward", {c.grad, x}));
}

void rule_attention(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value &q = c.arg("query"), &k = c.arg("key"), &v = c.arg("value"), &mask = c.arg("attn_mask");
  const Value& dropout = c.arg("dropout_p");
  if (!dropout.is_number() || dropout.as_double() != 0.0) unsupported(c, "with dropout");
  const TensorMeta qm = b.tensor(q), km = b.tensor(k);
  if (qm.dim() < 2 || qm.dim() != km.dim()) unsupported(c, "with operands of different ranks");
  int64_t heads = qm.dim() >= 3 ? qm.sizes[qm.sizes.size() - 3] : SymInt(1),
          kv_heads = qm.dim() >= 3 ? km.sizes[km.sizes.size() - 3] : SymInt(1);
  if (heads != kv_heads) {
    int gqa = op_def(c.node.op).schema.index_of("enable_gqa");
    if (gqa < 0 || c.node.args[static_cast<size_t>(gqa)].kind != Value::Kind::Bool || !c.node.args[static_cast<size_t>(gqa)].b ||
        heads % kv_heads != 0)
      unsupported(c, "with mismatched heads");
  }
  // enable_gqa: each key/value head serves heads / kv_heads query heads (repeat_interleave on dim
  // -3, as eager); their gradients are summed back per group.
  auto repeat_heads = [&](const Value& t) {
    if (heads == kv_heads) return t;
    std::vector<int64_t> sizes = b.tensor(t).sizes, grouped = sizes;
    grouped.insert(grouped.end() - 2, 1);
    std::vector<int64_t> expanded = grouped;
    expanded[expanded.size() - 3] = heads / kv_heads;
    sizes[sizes.size() - 3] = heads;
    return b.reshape(b.expand(b.reshape(t, grouped), expanded), sizes);
  };
  auto sum_heads = [&](const Value& g, const Value& like) {
    if (heads == kv_heads) return g;
    std::vector<int64_t> sizes = b.tensor(like).sizes, grouped = sizes;
    grouped.insert(grouped.end() - 2, heads / kv_heads);
    return b.sum(b.reshape(g, grouped), {static_cast<int64_t>(grouped.size()) - 3}, false);
  };
  int64_t len = qm.sizes[qm.sizes.size() - 2], src = km.sizes[km.sizes.size() - 2];
  const Value& scale_arg = c.arg("scale");
  double scale = scale_arg.is_none() ? 1.0 / std::sqrt(static_cast<double>(qm.sizes.back())) : scale_arg.as_double();
  // The probabilities again (eager's math attention), then the gradients of both products.
  Value qf = b.opmath(q), kf = repeat_heads(b.opmath(k)), vf = repeat_heads(b.opmath(v)), g = b.opmath(c.grad);
  Value scores = b.scale(b.call(Op::matmul, {qf, b.transpose_last(kf)}), scale);
  const Value& causal = c.arg("is_causal");
  if (causal.kind == Value::Kind::Bool && causal.b) {
    Value ones = b.call(Op::ones, {ints({len, src})}, {{"dtype", Value::of_dtype(DType::Bool)}, {"device", Value::of_device(qm.device)}});
    Value keep = b.call(Op::tril, {ones});
    scores = b.call(Op::masked_fill, {scores, b.call(Op::logical_not, {keep}), Value::of_float(-INFINITY)});
  }
  if (!mask.is_none()) {
    if (b.tensor(mask).dtype == DType::Bool)
      scores = b.call(Op::masked_fill, {scores, b.call(Op::logical_not, {mask}), Value::of_float(-INFINITY)});
    else
      scores = b.add(scores, b.opmath(mask));
  }
  Value p = b.call(Op::softmax, {scores, Value::of_int(-1)});
  if (c.needs(v)) c.give(v, sum_heads(b.call(Op::matmul, {b.transpose_last(p), g}), v));
  if (!c.needs(q) && !c.needs(k) && !c.needs(mask)) return;
  Value dp = b.call(Op::matmul, {g, b.transpose_last(vf)});
  Value ds = b.mul(p, b.sub(dp, b.sum(b.mul(dp, p), {-1}, true)));
  if (c.needs(mask)) c.give(mask, ds);
  if (c.needs(q)) c.give(q, b.scale(b.call(Op::matmul, {ds, kf}), scale));
  if (c.needs(k)) c.give(k, sum_heads(b.scale(b.call(Op::matmul, {b.transpose_last(ds), qf}), scale), k));
}

// cross_entropy with class-index targets: (softmax(x) - onehot(target)) * the row's weight share.
void rule_cross_entropy(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value &x = c.arg("input"), &target = c.arg("target"), &weight = c.arg("weight");
  if (!c.needs(x)) return;
  const Value& reduction = c.arg("reduction");
  const Value& smoothing = c.arg("label_smoothing");
  if (reduction.kind != Value::Kind::Str || !c.arg("size_average").is_none() || !c.arg("reduce").is_none())
    unsupported(c, "with legacy reduction arguments");
  if (!smoothing.is_number() || smoothing.as_double() != 0.0) unsupported(c, "with label smoothing");
  if (is_floating(b.tensor(target).dtype)) unsupported(c, "with class probabilities as targets");
  if (c.needs(weight)) unsupported(c, "with respect to the class weights");
  const TensorMeta xm = b.tensor(x);
  int64_t cd = xm.dim() >= 2 ? 1 : 0, classes = xm.sizes[static_cast<size_t>(cd)];
  Value p = b.call(Op::softmax, {b.opmath(x), Value::of_int(cd)});
  std::vector<int64_t> class_shape{classes};
  for (int64_t d = cd + 1; d < xm.dim(); ++d) class_shape.push_back(1);
  Value classes_idx = b.reshape(b.call(Op::arange, {Value::of_int(classes)}, {{"device", Value::of_device(xm.device)}}), class_shape);
  Value t = xm.dim() >= 2 ? b.call(Op::unsqueeze, {target, Value::of_int(cd)}) : target;
  Value onehot = b.call(Op::eq, {classes_idx, t});
  Value row_weight;
  if (weight.is_none()) {
    row_weight = b.cast(b.call(Op::ne, {target, c.arg("ignore_index")}), is_reduced_float(xm.dtype) ? DType::Float32 : xm.dtype);
  } else {
    Value w = b.reshape(b.opmath(weight), class_shape);
    Value valid = b.call(Op::ne, {target, c.arg("ignore_index")});
    row_weight = b.mul(b.sum(b.mul(onehot, w), {cd}, false), valid);
  }
  Value g = b.mul(b.opmath(c.grad), row_weight);
  if (reduction.s == "mean") {
    Value total = b.sum(row_weight, {}, false);
    // NB: every target ignored: eager's gradient is 0, not 0 / 0
    g = b.div(g, b.call(Op::masked_fill, {total, b.call(Op::eq, {total, Value::of_float(0.0)}), Value::of_float(1.0)}));
  }
  if (xm.dim() >= 2) g = b.call(Op::unsqueeze, {g, Value::of_int(cd)});
  c.give(x, b.mul(b.sub(p, b.cast(onehot, b.tensor(p).dtype)), g));
}

}  // namespace

void add_nn_rules(OpTable<DerivativeRule>& t) {
  t[Op::rms_norm] = rule_rms_norm;
  t[Op::softmax] = t[Op::f_softmax] = rule_softmax;
  t[Op::log_softmax] = t[Op::f_log_softmax] = rule_log_softmax;
  t[Op::layer_norm] = rule_layer_norm;
  t[Op::matmul] = t[Op::mm] = t[Op::bmm] = rule_matmul;
  t[Op::op_matmul] = rule_op_matmul;
  t[Op::addmm] = t[Op::baddbmm] = rule_addmm;
  t[Op::linear] = rule_linear;
  t[Op::embedding] = rule_embedding;
  t[Op::mse_loss] = rule_mse_loss;
  t[Op::scaled_dot_product_attention] = rule_attention;
  t[Op::cross_entropy] = rule_cross_entropy;
  t[Op::conv1d] = t[Op::conv2d] = rule_conv;
  t[Op::batch_norm] = rule_batch_norm;
  t[Op::max_pool2d] = rule_max_pool2d;
  t[Op::avg_pool2d] = rule_avg_pool2d;
  t[Op::adaptive_avg_pool2d] = rule_adaptive_avg_pool2d;
}

}  // namespace ff::grad
