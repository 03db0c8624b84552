// Derivative rules of pointwise ops: arithmetic, unary functions, activations, where/masked_fill,
// casts and dropout (derivatives.h).
#include <cmath>
#include <numeric>

#include "graph/autograd/derivatives_internal.h"

namespace ff::grad {

namespace {

// a + alpha * b, a - alpha * b, alpha * a - b (rsub), by the operands' values.
void add_like(RuleContext& c, const Value& a, const Value& b, double sign_a, double sign_b) {
  if (c.needs(a)) c.give(a, sign_a == 1.0 ? c.grad : c.b.scale(c.grad, sign_a));
  if (c.needs(b)) c.give(b, sign_b == 1.0 ? c.grad : c.b.scale(c.grad, sign_b));
}

double alpha_of(RuleContext& c) {
  const Value& alpha = c.arg("alpha");
  if (!alpha.is_number()) unsupported(c, "with a tensor alpha");
  return alpha.as_double();
}

void rule_add(RuleContext& c) { add_like(c, c.arg("input"), c.arg("other"), 1.0, alpha_of(c)); }
void rule_sub(RuleContext& c) { add_like(c, c.arg("input"), c.arg("other"), 1.0, -alpha_of(c)); }
void rule_rsub(RuleContext& c) { add_like(c, c.arg("input"), c.arg("other"), -alpha_of(c), 1.0); }
void rule_op_add(RuleContext& c) { add_like(c, c.arg("a"), c.arg("b"), 1.0, 1.0); }
void rule_op_sub(RuleContext& c) { add_like(c, c.arg("a"), c.arg("b"), 1.0, -1.0); }

void mul_like(RuleContext& c, const Value& a, const Value& b) {
  if (c.needs(a)) c.give(a, c.b.mul(c.grad, b));
  if (c.needs(b)) c.give(b, c.b.mul(c.grad, a));
}
void rule_mul(RuleContext& c) { mul_like(c, c.arg("input"), c.arg("other")); }
void rule_op_mul(RuleContext& c) { mul_like(c, c.arg("a"), c.arg("b")); }

void div_like(RuleContext& c, const Value& a, const Value& b) {
  if (c.needs(a)) c.give(a, c.b.div(c.grad, b));
  // eager: -grad * self / (other * other)
  if (c.needs(b)) c.give(b, c.b.div(c.b.mul(c.b.neg(c.grad), a), c.b.mul(b, b)));
}
void rule_div(RuleContext& c) {
  if (!c.arg("rounding_mode").is_none()) {
    // floor / trunc division: zero gradient almost everywhere, as eager's
    if (c.needs("input")) c.give("input", c.b.zeros_like(c.grad));
    if (c.needs("other")) c.give("other", c.b.zeros_like(c.grad));
    return;
  }
  div_like(c, c.arg("input"), c.arg("other"));
}
void rule_true_divide(RuleContext& c) { div_like(c, c.arg("input"), c.arg("other")); }
void rule_op_truediv(RuleContext& c) { div_like(c, c.arg("a"), c.arg("b")); }

void pow_like(RuleContext& c, const Value& base, const Value& exponent) {
  if (c.needs(exponent)) unsupported(c, "with respect to a tensor exponent");
  if (!c.needs(base)) return;
  if (!exponent.is_number()) unsupported(c, "with a tensor exponent");
  double e = exponent.as_double();
  if (e == 0.0) {
    c.give(base, c.b.zeros_like(c.grad));
    return;
  }
  // eager: grad * (exponent * self.pow(exponent - 1))
  Value p = c.b.call(Op::pow, {base, Value::of_float(e - 1.0)});
  c.give(base, c.b.mul(c.grad, c.b.scale(p, e)));
}
void rule_pow(RuleContext& c) { pow_like(c, c.arg("input"), c.arg("exponent")); }
void rule_op_pow(RuleContext& c) { pow_like(c, c.arg("a"), c.arg("b")); }

void rule_neg(RuleContext& c) { c.give(c.node.args[0], c.b.neg(c.grad)); }

// Unary ops: d(op(x))/dx from x and the result y.
template <Value (*Derivative)(GradBuilder& b, const Value& x, const Value& y)>
void unary(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (c.needs(x)) c.give(x, c.b.mul(c.grad, Derivative(c.b, x, c.out)));
}

Value d_exp(GradBuilder&, const Value&, const Value& y) { return y; }
Value d_expm1(GradBuilder& b, const Value&, const Value& y) { return b.add(y, Value::of_float(1.0)); }
Value d_log(GradBuilder& b, const Value& x, const Value&) { return b.call(Op::reciprocal, {x}); }
Value d_log1p(GradBuilder& b, const Value& x, const Value&) { return b.call(Op::reciprocal, {b.add(x, Value::of_float(1.0))}); }
Value d_sqrt(GradBuilder& b, const Value&, const Value& y) { return b.scale(b.call(Op::reciprocal, {y}), 0.5); }
Value d_rsqrt(GradBuilder& b, const Value&, const Value& y) {
  return b.scale(b.call(Op::pow, {y, Value::of_float(3.0)}), -0.5);
}
Value d_reciprocal(GradBuilder& b, const Value&, const Value& y) { return b.neg(b.mul(y, y)); }
Value d_sin(GradBuilder& b, const Value& x, const Value&) { return b.call(Op::cos, {x}); }
Value d_cos(GradBuilder& b, const Value& x, const Value&) { return b.neg(b.call(Op::sin, {x})); }
Value d_tanh(GradBuilder& b, const Value&, const Value& y) { return b.call(Op::rsub, {b.mul(y, y), Value::of_float(1.0)}); }
Value d_sigmoid(GradBuilder& b, const Value&, const Value& y) {
  return b.mul(y, b.call(Op::rsub, {y, Value::of_float(1.0)}));
}
Value d_square(GradBuilder& b, const Value& x, const Value&) { return b.scale(x, 2.0); }
Value d_abs(GradBuilder& b, const Value& x, const Value&) { return b.call(Op::sign, {x}); }
Value d_erf(GradBuilder& b, const Value& x, const Value&) {
  // 2/sqrt(pi) * exp(-x^2)
  return b.scale(b.call(Op::exp, {b.neg(b.mul(x, x))}), 2.0 / std::sqrt(M_PI));
}
Value d_silu(GradBuilder& b, const Value& x, const Value&) {
  // sigmoid(x) * (1 + x * (1 - sigmoid(x)))
  Value s = b.call(Op::sigmoid, {x});
  return b.mul(s, b.add(b.mul(x, b.call(Op::rsub, {s, Value::of_float(1.0)})), Value::of_float(1.0)));
}

void rule_relu(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (c.needs(x)) c.give(x, c.b.keep_where(c.grad, c.b.call(Op::gt, {c.out, Value::of_float(0.0)})));
}

void rule_gelu(RuleContext& c) {
  const Value& input = c.arg("input");
  if (!c.needs(input)) return;
  GradBuilder& b = c.b;
  Value x = b.opmath(input);
  Value g = b.opmath(c.grad);
  const Value& approximate = c.arg("approximate");
  if (approximate.kind == Value::Kind::Str && approximate.s == "tanh") {
    const double beta = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
    Value x_sq = b.mul(x, x);
    Value inner = b.scale(b.add(x, b.scale(b.mul(x_sq, x), kappa)), beta);
    Value t = b.call(Op::tanh, {inner});
    Value left_derivative = b.scale(b.add(t, Value::of_float(1.0)), 0.5);
    Value right_derivative = b.mul(b.mul(b.scale(x, 0.5), b.call(Op::rsub, {b.mul(t, t), Value::of_float(1.0)})),
                                   b.scale(b.add(b.scale(x_sq, 3.0 * kappa), Value::of_float(1.0)), beta));
    c.give(input, b.mul(g, b.add(left_derivative, right_derivative)));
    return;
  }
  const double alpha = M_SQRT1_2, beta = M_2_SQRTPI * M_SQRT1_2 * 0.5;
  Value cdf = b.scale(b.add(b.call(Op::erf, {b.scale(x, alpha)}), Value::of_float(1.0)), 0.5);
  Value pdf = b.scale(b.call(Op::exp, {b.scale(b.mul(x, x), -0.5)}), beta);
  c.give(input, b.mul(g, b.add(cdf, b.mul(x, pdf))));
}

void rule_leaky_relu(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  double slope = c.arg("negative_slope").as_double();
  Value positive = c.b.call(Op::gt, {x, Value::of_float(0.0)});
  c.give(x, c.b.call(Op::where, {positive, c.grad, c.b.scale(c.grad, slope)}));
}

void rule_clamp(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  Op op = c.kind;
  std::optional<Value> lo, hi;
  if (op == Op::clamp || op == Op::clamp_min) lo = c.arg("min");
  if (op == Op::clamp || op == Op::clamp_max) hi = c.arg("max");
  std::optional<Value> keep;
  for (auto [bound, cmp] : {std::pair{lo, Op::ge}, std::pair{hi, Op::le}}) {
    if (!bound || bound->is_none()) continue;
    if (!bound->is_number()) unsupported(c, "with tensor bounds");
    Value k = c.b.call(cmp, {x, *bound});
    keep = keep ? c.b.call(Op::logical_and, {*keep, k}) : k;
  }
  c.give(x, keep ? c.b.keep_where(c.grad, *keep) : c.grad);
}

void rule_hardtanh(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  // eager: grad where min_val < x < max_val (open interval), 0 elsewhere
  Value keep = c.b.call(Op::logical_and, {c.b.call(Op::gt, {x, c.arg("min_val")}), c.b.call(Op::lt, {x, c.arg("max_val")})});
  c.give(x, c.b.keep_where(c.grad, keep));
}

void rule_where(RuleContext& c) {
  const Value& cond = c.arg("condition");
  if (c.needs("input")) c.give("input", c.b.keep_where(c.grad, cond));
  if (c.needs("other")) c.give("other", c.b.call(Op::masked_fill, {c.grad, cond, Value::of_float(0.0)}));
}

void rule_masked_fill(RuleContext& c) {
  if (c.needs("value")) unsupported(c, "with respect to a tensor fill value");
  if (c.needs("input")) c.give("input", c.b.call(Op::masked_fill, {c.grad, c.arg("mask"), Value::of_float(0.0)}));
}

void rule_to(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (c.b.tensor(x).device != c.b.tensor(c.out).device) unsupported(c, "across devices");
  rule_identity(c);
}

void rule_dropout(RuleContext& c) {
  Op op = c.kind;
  const Value& p = c.arg("p");
  const Value& train = c.arg(op == Op::f_dropout ? "training" : "train");
  bool identity = (train.kind == Value::Kind::Bool && !train.b) || (p.is_number() && p.as_double() == 0.0);
  if (!identity) unsupported(c, "in training (its mask is not kept yet)");
  rule_identity(c);
}

// Piecewise-constant ops (round, floor ...): a zero gradient almost everywhere, as eager's.
void rule_zero(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (c.needs(x)) c.give(x, c.b.zeros_like(c.grad));
}

// Activations written from eager's backward formulas (FunctionsManual / the *_backward kernels).
Value d_elu_like(GradBuilder& b, const Value& x, double neg_scale, double input_scale, double pos_scale) {
  // x <= 0: neg_scale * input_scale * exp(x * input_scale); else (NaN too) pos_scale
  Value neg = b.scale(b.call(Op::exp, {b.scale(x, input_scale)}), neg_scale * input_scale);
  return b.call(Op::where, {b.call(Op::le, {x, Value::of_float(0.0)}), neg, Value::of_float(pos_scale)});
}

void rule_elu(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  Value d;
  if (c.kind == Op::selu) {
    const double scale = 1.0507009873554804934193349852946, alpha = 1.6732632423543772848170429916717;
    d = d_elu_like(c.b, x, scale * alpha, 1.0, scale);
  } else {
    double alpha = c.arg("alpha").as_double();
    d = c.kind == Op::celu ? d_elu_like(c.b, x, alpha, 1.0 / alpha, 1.0) : d_elu_like(c.b, x, alpha, 1.0, 1.0);
  }
  c.give(x, c.b.mul(c.grad, d));
}

// relu6 and hardsigmoid: the gradient inside an open interval (times hardsigmoid's slope).
void rule_clipped_linear(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  bool sigmoid = c.kind == Op::hardsigmoid;
  double lo = sigmoid ? -3.0 : 0.0, hi = sigmoid ? 3.0 : 6.0;
  Value keep = c.b.call(Op::logical_and, {c.b.call(Op::gt, {x, Value::of_float(lo)}), c.b.call(Op::lt, {x, Value::of_float(hi)})});
  c.give(x, c.b.keep_where(sigmoid ? c.b.scale(c.grad, 1.0 / 6.0) : c.grad, keep));
}

void rule_hardswish(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  GradBuilder& b = c.b;
  // x < -3: 0; x <= 3: x / 3 + 0.5; else 1
  Value mid = b.add(b.div(x, Value::of_float(3.0)), Value::of_float(0.5));
  Value d = b.call(Op::where, {b.call(Op::le, {x, Value::of_float(3.0)}), mid, Value::of_float(1.0)});
  d = b.call(Op::where, {b.call(Op::lt, {x, Value::of_float(-3.0)}), Value::of_float(0.0), d});
  c.give(x, b.mul(c.grad, d));
}

void rule_mish(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  GradBuilder& b = c.b;
  Value s = b.call(Op::sigmoid, {x});
  Value t = b.call(Op::tanh, {b.call(Op::softplus, {x})});
  Value d = b.add(t, b.mul(b.mul(x, s), b.call(Op::rsub, {b.mul(t, t), Value::of_float(1.0)})));
  c.give(x, b.mul(c.grad, d));
}

void rule_softplus(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  const Value &beta = c.arg("beta"), &threshold = c.arg("threshold");
  if (!beta.is_number() || !threshold.is_number()) unsupported(c, "with tensor beta or threshold");
  GradBuilder& b = c.b;
  Value xb = b.scale(x, beta.as_double());
  Value z = b.call(Op::exp, {xb});
  Value d = b.call(Op::where, {b.call(Op::gt, {xb, threshold}), Value::of_float(1.0), b.div(z, b.add(z, Value::of_float(1.0)))});
  c.give(x, b.mul(c.grad, d));
}

void rule_logsigmoid(RuleContext& c) {
  const Value& x = c.arg("input");
  if (c.needs(x)) c.give(x, c.b.mul(c.grad, c.b.call(Op::sigmoid, {c.b.neg(x)})));
}

// maximum / minimum: ties split the gradient in half, as eager's.
void rule_maximum(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value &a = c.arg("input"), &o = c.arg("other");
  Value half = b.call(Op::where, {b.call(Op::eq, {a, o}), b.scale(c.grad, 0.5), c.grad});
  bool max = c.kind == Op::maximum;
  if (c.needs(a)) c.give(a, b.call(Op::masked_fill, {half, b.call(max ? Op::lt : Op::gt, {a, o}), Value::of_float(0.0)}));
  if (c.needs(o)) c.give(o, b.call(Op::masked_fill, {half, b.call(max ? Op::gt : Op::lt, {a, o}), Value::of_float(0.0)}));
}

void rule_addcmul(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value &t1 = c.arg("tensor1"), &t2 = c.arg("tensor2"), &value = c.arg("value");
  if (!value.is_number()) unsupported(c, "with a tensor value");
  double v = value.as_double();
  if (c.needs("input")) c.give("input", c.grad);
  if (c.kind == Op::addcmul) {
    if (c.needs(t1)) c.give(t1, b.scale(b.mul(c.grad, t2), v));
    if (c.needs(t2)) c.give(t2, b.scale(b.mul(c.grad, t1), v));
    return;
  }
  if (c.needs(t1)) c.give(t1, b.scale(b.div(c.grad, t2), v));
  if (c.needs(t2)) c.give(t2, b.scale(b.div(b.mul(c.grad, t1), b.mul(t2, t2)), -v));
}

void rule_lerp(RuleContext& c) {
  const Value& w = c.arg("weight");
  if (!w.is_number()) unsupported(c, "with a tensor weight");
  if (c.needs("input")) c.give("input", c.b.scale(c.grad, 1.0 - w.as_double()));
  if (c.needs("end")) c.give("end", c.b.scale(c.grad, w.as_double()));
}

}  // namespace

void add_pointwise_rules(OpTable<DerivativeRule>& t) {
  t[Op::add] = rule_add;
  t[Op::sub] = rule_sub;
  t[Op::rsub] = rule_rsub;
  t[Op::op_add] = rule_op_add;
  t[Op::op_sub] = rule_op_sub;
  t[Op::mul] = rule_mul;
  t[Op::op_mul] = rule_op_mul;
  t[Op::div] = rule_div;
  t[Op::true_divide] = rule_true_divide;
  t[Op::op_truediv] = rule_op_truediv;
  t[Op::pow] = rule_pow;
  t[Op::op_pow] = rule_op_pow;
  t[Op::neg] = t[Op::op_neg] = rule_neg;
  t[Op::exp] = unary<d_exp>;
  t[Op::expm1] = unary<d_expm1>;
  t[Op::log] = unary<d_log>;
  t[Op::log1p] = unary<d_log1p>;
  t[Op::sqrt] = unary<d_sqrt>;
  t[Op::rsqrt] = unary<d_rsqrt>;
  t[Op::reciprocal] = unary<d_reciprocal>;
  t[Op::sin] = unary<d_sin>;
  t[Op::cos] = unary<d_cos>;
  t[Op::tanh] = unary<d_tanh>;
  t[Op::sigmoid] = unary<d_sigmoid>;
  t[Op::square] = unary<d_square>;
  t[Op::abs] = unary<d_abs>;
  t[Op::erf] = unary<d_erf>;
  t[Op::silu] = unary<d_silu>;
  t[Op::relu] = t[Op::f_relu] = rule_relu;
  t[Op::gelu] = rule_gelu;
  t[Op::leaky_relu] = rule_leaky_relu;
  t[Op::hardtanh] = rule_hardtanh;
  t[Op::clamp] = t[Op::clamp_min] = t[Op::clamp_max] = rule_clamp;
  t[Op::where] = rule_where;
  t[Op::masked_fill] = rule_masked_fill;
  for (Op op : {Op::contiguous, Op::clone, Op::to_float, Op::to_double, Op::to_half, Op::to_bfloat16, Op::type_as,
                Op::expand, Op::expand_as})
    t[op] = rule_identity;
  t[Op::to] = rule_to;
  t[Op::f_dropout] = t[Op::dropout] = rule_dropout;
  for (Op op : {Op::round, Op::floor, Op::ceil, Op::trunc, Op::sign}) t[op] = rule_zero;
  t[Op::frac] = rule_identity;
  t[Op::elu] = t[Op::celu] = t[Op::selu] = rule_elu;
  t[Op::relu6] = t[Op::hardsigmoid] = rule_clipped_linear;
  t[Op::hardswish] = rule_hardswish;
  t[Op::mish] = rule_mish;
  t[Op::softplus] = rule_softplus;
  t[Op::logsigmoid] = rule_logsigmoid;
  t[Op::maximum] = t[Op::minimum] = rule_maximum;
  t[Op::addcmul] = t[Op::addcdiv] = rule_addcmul;
  t[Op::lerp] = rule_lerp;
}

}  // namespace ff::grad
