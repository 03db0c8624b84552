#include "graph/autograd/derivatives.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "graph/op_registry.h"
#include "src/base/errors.h"

namespace ff {

namespace {

Value ints(const std::vector<int64_t>& v) {
  std::vector<Value> items;
  for (int64_t i : v) items.push_back(Value::of_int(i));
  return Value::list(std::move(items));
}

std::vector<int64_t> int_list(const Value& v) {
  std::vector<int64_t> out;
  if (v.kind == Value::Kind::Int) return {v.i};
  for (const Value& item : v.items) {
    if (item.kind != Value::Kind::Int) throw Unsupported("a derivative rule needs constant dims");
    out.push_back(item.i);
  }
  return out;
}

int64_t wrap(int64_t dim, int64_t ndim) {
  int64_t n = ndim == 0 ? 1 : ndim;
  return dim < 0 ? dim + n : dim;
}

bool is_reduced_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

}  // namespace

// ---- GradBuilder ------------------------------------------------------------------------------

Value GradBuilder::call(Op op, const std::vector<Value>& positional,
                        const std::vector<std::pair<std::string, Value>>& keywords) {
  return Value::of_node(typer_(g_, op_id(op), positional, keywords));
}

Value GradBuilder::call(const std::string& target, const std::vector<Value>& positional) {
  std::vector<OpId> ops = resolve_target(target);
  std::string why = target + " is not available in the installed torch";
  for (OpId op : ops) {
    try {
      return Value::of_node(typer_(g_, op, positional, {}));
    } catch (const Unsupported& e) {
      why = e.what();
    }
  }
  throw Unsupported(why);
}

const TensorMeta& GradBuilder::tensor(const Value& v) const {
  FF_CHECK(v.is_node() && g_.node(v.node).meta.is_tensor(), "a derivative rule read a non-tensor as a tensor");
  return g_.node(v.node).meta.tensor;
}

Value GradBuilder::keep_where(const Value& g, const Value& keep) {
  return call(Op::masked_fill, {g, call(Op::logical_not, {keep}), Value::of_float(0.0)});
}

Value GradBuilder::reshape(const Value& v, const std::vector<int64_t>& sizes) {
  if (tensor(v).sizes == sizes) return v;
  return call(Op::reshape, {v, ints(sizes)});
}

Value GradBuilder::sum(const Value& v, const std::vector<int64_t>& unsorted_dims, bool keepdim) {
  // NB: a CUDA sum over the leading dims into a short result (a bias gradient: [2048, 768] -> [768])
  // is one thread per result element down a long column, which leaves most of the GPU idle (650 us
  // for GPT-2's c_attn bias). Summed in two steps, chunks of rows first, it runs wide. A sum over
  // inner and outer dims (batch norm's [0, 2, 3]) sums the inner ones first, along rows.
  std::vector<int64_t> dims = unsorted_dims;
  std::sort(dims.begin(), dims.end());
  const TensorMeta t = tensor(v);
  int64_t nd = t.dim();
  if (t.device.type == Device::Type::CUDA && !dims.empty() && dims.back() == nd - 1) {
    size_t inner = dims.size();
    while (inner > 0 && dims[inner - 1] == nd - static_cast<int64_t>(dims.size() - inner) - 1) --inner;
    if (inner > 0) {
      std::vector<int64_t> trailing(dims.begin() + static_cast<std::ptrdiff_t>(inner), dims.end());
      std::vector<int64_t> rest(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(inner));
      Value out = sum(sum(v, trailing, true), rest, true);
      if (keepdim) return out;
      std::vector<int64_t> kept;
      for (int64_t d = 0; d < nd; ++d)
        if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(t.sizes[static_cast<size_t>(d)]);
      return reshape(out, kept);
    }
  }
  int64_t rows = 1, cols = 1;
  bool leading = !keepdim && !dims.empty();
  for (size_t i = 0; i < dims.size(); ++i) leading = leading && dims[i] == static_cast<int64_t>(i);
  for (size_t d = 0; d < t.sizes.size(); ++d) (d < dims.size() ? rows : cols) *= t.sizes[d];
  if (leading && t.device.type == Device::Type::CUDA && rows >= 1024 && cols <= (1 << 16)) {
    int64_t chunks = 1;
    for (int64_t c = 2; c * c <= rows; ++c)
      if (rows % c == 0) chunks = c;
    if (chunks >= 8) {
      std::vector<int64_t> split{chunks, rows / chunks};
      split.insert(split.end(), t.sizes.begin() + static_cast<std::ptrdiff_t>(dims.size()), t.sizes.end());
      Value partial = call(Op::sum, {reshape(v, split), ints({1}), Value::of_bool(false)});
      return call(Op::sum, {partial, ints({0}), Value::of_bool(false)});
    }
  }
  return call(Op::sum, {v, ints(dims), Value::of_bool(keepdim)});
}

Value GradBuilder::mean(const Value& v, const std::vector<int64_t>& dims, bool keepdim) {
  const TensorMeta& t = tensor(v);
  if (t.device.type == Device::Type::CUDA && !dims.empty() && dims.front() != t.dim() - static_cast<int64_t>(dims.size())) {
    int64_t n = 1;  // not a row mean: as sum() splits it
    for (int64_t d : dims) n *= t.sizes[static_cast<size_t>(d)];
    return div(sum(v, dims, keepdim), Value::of_float(static_cast<double>(n)));
  }
  return call(Op::mean, {v, ints(dims), Value::of_bool(keepdim)});
}

Value GradBuilder::sum_to(const Value& v, const std::vector<int64_t>& sizes) {
  const std::vector<int64_t> have = tensor(v).sizes;
  if (have == sizes) return v;
  size_t lead = have.size() - std::min(have.size(), sizes.size());
  FF_CHECK(have.size() >= sizes.size(), "a gradient has fewer dims than its operand");
  std::vector<int64_t> dims;
  for (size_t i = 0; i < lead; ++i) dims.push_back(static_cast<int64_t>(i));
  Value out = v;
  if (!dims.empty()) out = sum(out, dims, false);
  std::vector<int64_t> widened;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] == 1 && have[lead + i] != 1) widened.push_back(static_cast<int64_t>(i));
  if (!widened.empty()) out = sum(out, widened, true);
  FF_CHECK(tensor(out).sizes == sizes, "a gradient does not broadcast to its operand's shape");
  return out;
}

Value GradBuilder::expand(const Value& v, const std::vector<int64_t>& sizes) {
  if (tensor(v).sizes == sizes) return v;
  return call(Op::expand, {v, ints(sizes)});
}

Value GradBuilder::cast(const Value& v, DType dtype) {
  if (tensor(v).dtype == dtype) return v;
  return call(Op::to, {v, Value::of_dtype(dtype)});
}

Value GradBuilder::opmath(const Value& v) {
  return is_reduced_float(tensor(v).dtype) ? cast(v, DType::Float32) : v;
}

Value GradBuilder::transpose_last(const Value& v) {
  return call(Op::transpose, {v, Value::of_int(-2), Value::of_int(-1)});
}

Value GradBuilder::zeros_like(const Value& v) { return call(Op::zeros_like, {v}); }

Value GradBuilder::item(const Value& tuple, int64_t index) {
  const ValueMeta& m = g_.node(tuple.node).meta;
  FF_CHECK(m.kind == ValueMeta::Kind::Tuple && index < static_cast<int64_t>(m.items.size()), "item of a non-tuple");
  ValueMeta item = m.items[static_cast<size_t>(index)];
  NodeId id = g_.add_getitem(tuple.node, index);
  g_.mutable_node(id).meta = std::move(item);
  return Value::of_node(id);
}

// ---- RuleContext ------------------------------------------------------------------------------

const Value& RuleContext::arg(std::string_view name) const {
  const OpDef& op = op_def(node.op);
  int i = op.schema.index_of(name);
  // An op of the open registry takes the rule of the listed op of its target: its parameters
  // have torch's names, but an overload may lack one.
  if (i < 0 && op.is_open()) throw Unsupported("no derivative for " + op.target + " without its argument " + std::string(name));
  FF_CHECK(i >= 0, "derivative rule of " + op.name + " reads unknown parameter " + std::string(name));
  return node.args[static_cast<size_t>(i)];
}

bool RuleContext::needs(std::string_view name) const { return needs(arg(name)); }

bool RuleContext::needs(const Value& v) const {
  if (!v.is_node()) return false;
  const ValueMeta& m = b.graph().node(v.node).meta;
  return m.is_tensor() && m.tensor.requires_grad;
}

// ---- rules ------------------------------------------------------------------------------------

namespace {

void unsupported(RuleContext& c, const std::string& why) {
  throw Unsupported("no derivative for " + op_def(c.node.op).target + " " + why);
}

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

// Identity-like: the gradient goes through unchanged (the driver casts and sums it to shape).
void rule_identity(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (c.needs(x)) c.give(x, c.grad);
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

// Views and reshapes: the gradient reshaped back to the operand's sizes.
void rule_reshape(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (c.needs(x)) c.give(x, c.b.reshape(c.grad, c.b.tensor(x).sizes));
}

void rule_permute(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (!c.needs(x)) return;
  std::vector<int64_t> dims = int_list(c.node.args[1]);
  int64_t nd = static_cast<int64_t>(dims.size());
  std::vector<int64_t> inverse(dims.size());
  for (int64_t i = 0; i < nd; ++i) inverse[static_cast<size_t>(wrap(dims[static_cast<size_t>(i)], nd))] = i;
  c.give(x, c.b.call(Op::permute, {c.grad, ints(inverse)}));
}

void rule_transpose(RuleContext& c) {
  const Value& x = c.arg("input");
  if (c.needs(x)) c.give(x, c.b.call(Op::transpose, {c.grad, c.arg("dim0"), c.arg("dim1")}));
}

void rule_t(RuleContext& c) {
  const Value& x = c.arg("input");
  if (c.needs(x)) c.give(x, c.b.call(Op::t, {c.grad}));
}

void rule_movedim(RuleContext& c) {
  const Value& x = c.arg("input");
  if (c.needs(x)) c.give(x, c.b.call(Op::movedim, {c.grad, c.arg("destination"), c.arg("source")}));
}

// The dims a reduction reduced (all of them for dim=None or []).
std::vector<int64_t> reduced_dims(const Value& dim, int64_t ndim) {
  std::vector<int64_t> dims;
  if (!dim.is_none()) dims = int_list(dim);
  if (dims.empty()) {
    dims.resize(static_cast<size_t>(ndim));
    std::iota(dims.begin(), dims.end(), 0);
  }
  for (int64_t& d : dims) d = wrap(d, ndim);
  return dims;
}

// The gradient of a reduction's result, back at the input's sizes.
Value unreduce(GradBuilder& b, const Value& grad, const TensorMeta& in, const std::vector<int64_t>& dims, bool keepdim) {
  Value g = grad;
  if (!keepdim) {
    std::vector<int64_t> kept = in.sizes;
    for (int64_t d : dims)
      if (!kept.empty()) kept[static_cast<size_t>(d)] = 1;  // a 0-dim input "reduces" dim 0 or -1
    g = b.reshape(g, kept);
  }
  return b.expand(g, in.sizes);
}

void rule_sum_mean(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  const TensorMeta in = c.b.tensor(x);
  std::vector<int64_t> dims = reduced_dims(c.arg("dim"), in.dim());
  const Value& keepdim = c.arg("keepdim");
  Value g = unreduce(c.b, c.grad, in, dims, keepdim.kind == Value::Kind::Bool && keepdim.b);
  if (c.kind == Op::mean) {
    int64_t n = 1;
    for (int64_t d : dims) n *= in.sizes.empty() ? 1 : in.sizes[static_cast<size_t>(d)];
    g = c.b.div(g, Value::of_float(static_cast<double>(n)));
  }
  c.give(x, g);
}

// Piecewise-constant ops (round, floor ...): a zero gradient almost everywhere, as eager's.
void rule_zero(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (c.needs(x)) c.give(x, c.b.zeros_like(c.grad));
}

// amax / amin: the gradient shared evenly among the elements equal to the result, as eager's.
void rule_amax(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  const TensorMeta in = c.b.tensor(x);
  std::vector<int64_t> dims = reduced_dims(c.arg("dim"), in.dim());
  bool keepdim = c.arg("keepdim").kind == Value::Kind::Bool && c.arg("keepdim").b;
  Value hit = c.b.call(Op::eq, {x, unreduce(c.b, c.out, in, dims, keepdim)});
  Value count = c.b.sum(hit, dims, true);
  c.give(x, c.b.mul(c.b.div(unreduce(c.b, c.grad, in, dims, keepdim), count), hit));
}

void rule_logsumexp(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  const TensorMeta in = c.b.tensor(x);
  std::vector<int64_t> dims = reduced_dims(c.arg("dim"), in.dim());
  bool keepdim = c.arg("keepdim").kind == Value::Kind::Bool && c.arg("keepdim").b;
  // eager: grad * exp(self - result)
  Value e = c.b.call(Op::exp, {c.b.sub(x, unreduce(c.b, c.out, in, dims, keepdim))});
  c.give(x, c.b.mul(unreduce(c.b, c.grad, in, dims, keepdim), e));
}

// var / std: 2 (x - mean) / (N - correction), and for std that over 2 std.
void rule_var(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  const TensorMeta in = c.b.tensor(x);
  if (is_complex(in.dtype)) unsupported(c, "of a complex tensor");
  std::vector<int64_t> dims = reduced_dims(c.arg("dim"), in.dim());
  bool keepdim = c.arg("keepdim").kind == Value::Kind::Bool && c.arg("keepdim").b;
  const Value &unbiased = c.arg("unbiased"), &corr = c.arg("correction");
  if (!corr.is_none() && !corr.is_number()) unsupported(c, "with a tensor correction");
  double correction = !corr.is_none() ? corr.as_double() : (unbiased.kind == Value::Kind::Bool && !unbiased.b) ? 0.0
                                                                                                               : 1.0;
  int64_t n = 1;
  for (int64_t d : dims) n *= in.sizes.empty() ? 1 : in.sizes[static_cast<size_t>(d)];
  Value xc = c.b.sub(x, c.b.mean(x, dims, true));
  Value g = unreduce(c.b, c.grad, in, dims, keepdim);
  // NB: N <= correction divides by zero or less, as eager's (inf / nan)
  g = c.b.mul(g, c.b.scale(xc, 2.0 / (static_cast<double>(n) - correction)));
  if (c.kind == Op::std) g = c.b.div(g, c.b.scale(unreduce(c.b, c.out, in, dims, keepdim), 2.0));
  c.give(x, g);
}

// cumsum: the reversed cumulative sum of the gradient, as eager's.
void rule_cumsum(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  Value dim = Value::of_int(wrap(c.arg("dim").i, c.b.tensor(x).dim()));
  if (c.b.tensor(x).dim() == 0) {
    c.give(x, c.grad);
    return;
  }
  Value dims = Value::list({dim});
  Value flipped = c.b.call("torch.flip", {c.grad, dims});
  c.give(x, c.b.call("torch.flip", {c.b.call(Op::cumsum, {flipped, dim}), dims}));
}

// F.pad with constant padding: the gradient is the middle part.
void rule_pad(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  const Value& mode = c.arg("mode");
  if (mode.kind != Value::Kind::Str || mode.s != "constant") unsupported(c, "in mode " + (mode.kind == Value::Kind::Str ? mode.s : "?"));
  std::vector<int64_t> pads = int_list(c.arg("pad"));
  const TensorMeta in = c.b.tensor(x);
  Value g = c.grad;
  for (size_t k = 0; k + 1 < pads.size(); k += 2) {
    int64_t dim = in.dim() - 1 - static_cast<int64_t>(k / 2);
    if (pads[k] < 0 || pads[k + 1] < 0) unsupported(c, "with negative padding");
    if (pads[k] == 0 && pads[k + 1] == 0) continue;
    g = c.b.call(Op::narrow, {g, Value::of_int(dim), Value::of_int(pads[k]), Value::of_int(in.sizes[static_cast<size_t>(dim)])});
  }
  c.give(x, g);
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

// x[index] for basic indexes (ints, slices with step 1, None, Ellipsis): the gradient padded with
// zeros back to the input's sizes.
void rule_getitem(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value& x = c.arg("a");
  if (!c.needs(x)) return;
  const Value& index = c.arg("b");
  std::vector<Value> items = index.kind == Value::Kind::Tuple ? index.items : std::vector<Value>{index};
  const TensorMeta in = b.tensor(x);
  int64_t consumed = 0, ellipsis_at = -1;
  for (size_t i = 0; i < items.size(); ++i) {
    Value::Kind k = items[i].kind;
    if (k == Value::Kind::Int || k == Value::Kind::Slice) ++consumed;
    else if (k == Value::Kind::Ellipsis) ellipsis_at = static_cast<int64_t>(i);
    else if (k != Value::Kind::None) unsupported(c, "with a tensor or list index");
  }
  // Per input dim: [before, after) zeros around the part the result kept.
  std::vector<int64_t> kept = in.sizes, before(in.sizes.size(), 0), after(in.sizes.size(), 0);
  int64_t dim = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Value& item = items[i];
    if (static_cast<int64_t>(i) == ellipsis_at) {
      dim += in.dim() - consumed;
      continue;
    }
    if (item.kind == Value::Kind::None) continue;
    auto d = static_cast<size_t>(dim++);
    int64_t n = in.sizes[d];
    if (item.kind == Value::Kind::Int) {
      int64_t at = item.i < 0 ? item.i + n : item.i;
      kept[d] = 1, before[d] = at, after[d] = n - at - 1;
      continue;
    }
    for (const Value& part : item.items)
      if (!part.is_none() && part.kind != Value::Kind::Int) unsupported(c, "with a computed slice bound");
    if (!item.items[2].is_none() && item.items[2].i != 1) unsupported(c, "of a slice with a step");
    auto clamp_bound = [n](const Value& v, int64_t dflt) {
      if (v.is_none()) return dflt;
      int64_t x = v.i < 0 ? v.i + n : v.i;
      return std::min(std::max<int64_t>(x, 0), n);
    };
    int64_t start = clamp_bound(item.items[0], 0), stop = std::max(start, clamp_bound(item.items[1], n));
    kept[d] = stop - start, before[d] = start, after[d] = n - stop;
  }
  Value g = b.reshape(c.grad, kept);
  std::vector<int64_t> pads;
  bool any = false;
  for (size_t d = in.sizes.size(); d-- > 0;) {
    pads.push_back(before[d]);
    pads.push_back(after[d]);
    any = any || before[d] != 0 || after[d] != 0;
  }
  c.give(x, any ? b.call(Op::pad, {g, ints(pads)}) : g);
}

// split / chunk / unbind: the items' gradients (zeros for those that got none) put back together.
void rule_split(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value& x = c.node.args[0];
  if (!c.needs(x)) return;
  bool unbind = c.kind == Op::unbind;
  int64_t dim = wrap(c.arg("dim").i, b.tensor(x).dim());
  const ValueMeta& items = b.graph().node(c.out.node).meta;
  std::vector<Value> parts;
  for (size_t i = 0; i < items.items.size(); ++i) {
    if (c.item_grads[i]) {
      parts.push_back(*c.item_grads[i]);
      continue;
    }
    const TensorMeta& t = items.items[i].tensor;
    parts.push_back(b.call(Op::zeros, {ints(t.sizes)}, {{"dtype", Value::of_dtype(t.dtype)}, {"device", Value::of_device(t.device)}}));
  }
  c.give(x, b.call(unbind ? Op::stack : Op::cat, {Value::list(std::move(parts)), Value::of_int(dim)}));
}

void rule_cat(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value& list = c.arg("tensors");
  bool stack = c.kind == Op::stack;
  int64_t ndim = b.tensor(c.out).dim();
  int64_t dim = wrap(c.arg("dim").i, ndim), offset = 0;
  for (size_t i = 0; i < list.items.size(); ++i) {
    const Value& item = list.items[i];
    const TensorMeta& t = b.tensor(item);
    if (stack) {
      if (c.needs(item)) c.give(item, b.call(Op::select, {c.grad, Value::of_int(dim), Value::of_int(static_cast<int64_t>(i))}));
      continue;
    }
    if (t.dim() == 1 && t.sizes[0] == 0 && ndim != 1) {  // torch.cat skips legacy empty tensors
      if (c.needs(item)) c.give(item, b.zeros_like(item));  // eager still gives them a (empty) gradient
      continue;
    }
    int64_t size = t.sizes[static_cast<size_t>(dim)];
    if (c.needs(item)) c.give(item, b.call(Op::narrow, {c.grad, Value::of_int(dim), Value::of_int(offset), Value::of_int(size)}));
    offset += size;
  }
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
  int64_t heads = qm.dim() >= 3 ? qm.sizes[qm.sizes.size() - 3] : 1, kv_heads = qm.dim() >= 3 ? km.sizes[km.sizes.size() - 3] : 1;
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

OpTable<DerivativeRule> make_rules() {
  OpTable<DerivativeRule> t;
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
  for (Op op : {Op::view, Op::reshape, Op::tensor_reshape, Op::view_as, Op::reshape_as, Op::flatten, Op::unflatten,
                Op::unsqueeze, Op::squeeze})
    t[op] = rule_reshape;
  t[Op::permute] = t[Op::tensor_permute] = rule_permute;
  t[Op::transpose] = rule_transpose;
  t[Op::t] = rule_t;
  t[Op::movedim] = rule_movedim;
  t[Op::sum] = t[Op::mean] = rule_sum_mean;
  for (Op op : {Op::round, Op::floor, Op::ceil, Op::trunc, Op::sign}) t[op] = rule_zero;
  t[Op::frac] = rule_identity;
  t[Op::amax] = t[Op::amin] = rule_amax;
  t[Op::logsumexp] = rule_logsumexp;
  t[Op::var] = t[Op::std] = rule_var;
  t[Op::cumsum] = rule_cumsum;
  t[Op::pad] = rule_pad;
  t[Op::softmax] = t[Op::f_softmax] = rule_softmax;
  t[Op::log_softmax] = t[Op::f_log_softmax] = rule_log_softmax;
  t[Op::layer_norm] = rule_layer_norm;
  t[Op::matmul] = t[Op::mm] = t[Op::bmm] = rule_matmul;
  t[Op::op_matmul] = rule_op_matmul;
  t[Op::addmm] = t[Op::baddbmm] = rule_addmm;
  t[Op::linear] = rule_linear;
  t[Op::embedding] = rule_embedding;
  t[Op::mse_loss] = rule_mse_loss;
  t[Op::op_getitem] = rule_getitem;
  t[Op::split] = t[Op::chunk] = t[Op::unbind] = rule_split;
  t[Op::cat] = t[Op::stack] = rule_cat;
  t[Op::scaled_dot_product_attention] = rule_attention;
  t[Op::cross_entropy] = rule_cross_entropy;
  t[Op::conv1d] = t[Op::conv2d] = rule_conv;
  t[Op::batch_norm] = rule_batch_norm;
  t[Op::max_pool2d] = rule_max_pool2d;
  t[Op::avg_pool2d] = rule_avg_pool2d;
  t[Op::adaptive_avg_pool2d] = rule_adaptive_avg_pool2d;
  return t;
}

}  // namespace

Op derivative_kind(OpId op) {
  Op kind = op_kind(op);
  if (kind != Op::Open) return kind;
  // NB: an overload torch resolved for a call the listed op's schema does not bind (SDPA with
  // enable_gqa) shares the listed op's rule; the rule reads its arguments by name.
  std::optional<OpId> listed = op_by_target(op_def(op).target);
  return listed ? op_kind(*listed) : Op::Open;
}

DerivativeRule derivative_rule(Op op) {
  static const OpTable<DerivativeRule> rules = make_rules();
  return rules.at(op);
}

}  // namespace ff
