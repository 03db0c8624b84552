// Meta rules for pointwise ops: unary and binary math, comparisons, activations, where,
// masked_fill, in-place variants and casts.
#include <algorithm>

#include "graph/meta_rules.h"
#include "graph/op.h"
#include "graph/meta_rules_util.h"

namespace ff {
using namespace meta_util;

namespace {

bool is_float_like(DType t) { return is_floating(t) || is_complex(t); }

// A unary TensorIterator op over one tensor: the result layout. `promote`: how an input of
// another dtype than `dtype` reaches it (see Promote).
ValueMeta unary_result(const TensorMeta& x, DType dtype, Promote promote = Promote::None) {
  TensorMeta out = x;
  bool convert = dtype != x.dtype && x.dim() > 0 &&
                 (promote == Promote::Always || (promote == Promote::OnCpu && x.device.type == Device::Type::CPU));
  TensorMeta in = convert ? converted(x, dtype) : x;
  out.strides = pointwise_output_strides(x.sizes, {&in});
  out.dtype = dtype;
  out.requires_grad = grad_result({&x}, dtype);
  return ValueMeta::of_tensor(std::move(out));
}

const Value* arg_if(const MetaContext& ctx, std::string_view name) {
  int i = ctx.op.schema.index_of(name);
  return i < 0 ? nullptr : &ctx.args[static_cast<size_t>(i)];
}

// Integer results reject a floating alpha (add/sub with alpha=0.5 on ints) and non-bool results
// a bool alpha.
bool alpha_ok(const MetaContext& ctx, DType result) {
  const Value* alpha = arg_if(ctx, "alpha");
  if (!alpha || alpha->is_none()) return true;
  if (alpha->is_node()) return false;
  if (alpha->kind == Value::Kind::Float && is_integral(result, true)) return false;
  if (alpha->kind == Value::Kind::Bool && result != DType::Bool) return false;
  return true;
}

// The dtype an out-of-place binary op gives; nullopt where eager raises or the rule does not know.
std::optional<DType> binary_dtype(const MetaContext& ctx, const std::vector<Value>& operands, bool true_divide) {
  DType dt = result_type(operands, ctx.graph);
  if (is_complex(dt)) return std::nullopt;
  // Subtraction rejects a bool operand even when the other one is not.
  if (op_is(ctx, {Op::sub, Op::rsub, Op::op_sub, Op::op_isub, Op::sub_}))
    for (const Value& v : operands) {
      const TensorMeta* t = tensor_or_null(v, ctx.graph);
      if ((t && t->dtype == DType::Bool) || v.kind == Value::Kind::Bool) return std::nullopt;
    }
  if (true_divide && is_integral(dt, true)) dt = default_float_dtype();
  // NB: a bool tensor to a bool number's power stays bool in torch 2 (torch's own meta kernel says
  // int64); torch 1.13 raises.
  bool bool_pow = op_is(ctx, {Op::pow, Op::op_pow, Op::op_ipow}) && operands[1].kind == Value::Kind::Bool && torch_at_least(2, 0);
  if (dt == DType::Bool && !bool_pow &&
      !op_is(ctx, {Op::add, Op::mul, Op::op_add, Op::op_mul, Op::op_iadd, Op::op_imul, Op::add_, Op::mul_, Op::maximum, Op::minimum}))
    return std::nullopt;  // sub/div/pow/remainder ... of bools raise or promote specially
  if (!alpha_ok(ctx, dt)) return std::nullopt;
  return dt;
}

// pow(int tensor, negative int) raises in eager.
void check_int_pow(const MetaContext& ctx, DType dt) {
  const Value& e = ctx.args[1];
  if (is_integral(dt, true) && e.kind == Value::Kind::Int && e.i < 0)
    throw MetaError("Integers to negative integer powers are not allowed.");
}

bool is_pow(const MetaContext& ctx) { return op_is(ctx, {Op::pow, Op::op_pow, Op::op_ipow}); }

}  // namespace

// ---- unary ------------------------------------------------------------------------------------

std::optional<ValueMeta> meta_unary(const MetaContext& ctx) {
  const TensorMeta* x = tensor_or_null(ctx.args[0], ctx.graph);
  if (!x || x->dtype == DType::Bool || is_complex(x->dtype)) return std::nullopt;
  if (missing_cpu_kernel(*x) && !op_is(ctx, {Op::neg, Op::op_neg, Op::abs, Op::sign, Op::square})) return std::nullopt;
  return unary_result(*x, x->dtype);
}

std::optional<ValueMeta> meta_unary_float(const MetaContext& ctx) {
  const TensorMeta* x = tensor_or_null(ctx.args[0], ctx.graph);
  if (!x || (missing_cpu_kernel(*x) && !op_is(ctx, {Op::exp2, Op::reciprocal})) || is_complex(x->dtype)) return std::nullopt;
  return unary_result(*x, is_integral(x->dtype, true) ? default_float_dtype() : x->dtype, Promote::OnCpu);
}

std::optional<ValueMeta> meta_unary_float_only(const MetaContext& ctx) {
  const TensorMeta* x = tensor_or_null(ctx.args[0], ctx.graph);
  if (!x || !is_floating(x->dtype)) return std::nullopt;
  return unary_result(*x, x->dtype);
}

std::optional<ValueMeta> meta_unary_bool(const MetaContext& ctx) {
  const TensorMeta* x = tensor_or_null(ctx.args[0], ctx.graph);
  if (!x || is_complex(x->dtype)) return std::nullopt;
  return unary_result(*x, DType::Bool);
}

std::optional<ValueMeta> meta_unary_integral(const MetaContext& ctx) {
  const TensorMeta* x = tensor_or_null(ctx.args[0], ctx.graph);
  if (!x || !is_integral(x->dtype, true)) return std::nullopt;
  return unary_result(*x, x->dtype);
}

std::optional<ValueMeta> meta_activation(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  bool int_ok = op_kind(ctx.op.id) == Op::f_relu;
  if (!is_floating(x.dtype) && !(int_ok && is_integral(x.dtype, false))) return std::nullopt;
  if (missing_cpu_kernel(x, /*bfloat16_too=*/op_kind(ctx.op.id) == Op::mish)) return std::nullopt;
  if (bool_arg(ctx, "inplace", false)) {
    if (has_internal_overlap(x)) return std::nullopt;
    return ValueMeta::of_tensor(x);
  }
  if (op_kind(ctx.op.id) == Op::logsigmoid) return fresh(x.sizes, x.dtype, x.device, x.requires_grad);
  // TensorIterator ops, on torch 1.13 and 2.x alike (test_op_meta_random.py's activations): a dense
  // input whose size-1 dims have unusual strides (a pooled [N, C, 1, 1] in channels-last) gives a
  // contiguous result. hardtanh and relu6 allocate with empty_like, which keeps those strides: they
  // are not modelled there, nor are inputs without elements.
  SymShape ti = pointwise_output_strides(x.sizes, {&x});
  bool empty_like = op_kind(ctx.op.id) == Op::hardtanh || op_kind(ctx.op.id) == Op::relu6;
  if (ti != x.strides && (x.numel() == 0 || (empty_like && is_non_overlapping_and_dense(x)))) return std::nullopt;
  return unary_result(x, x.dtype);
}

std::optional<ValueMeta> meta_dropout(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  double p = ctx.arg("p").as_double();
  bool training = op_kind(ctx.op.id) == Op::f_dropout ? ctx.arg("training").b : ctx.arg("train").b;
  if (p < 0 || p > 1)
    throw MetaError("dropout probability has to be between 0 and 1, but got " + std::to_string(p));
  if (!is_floating(x.dtype)) return std::nullopt;
  // Eval mode, p == 0 and in-place dropout all return the input itself.
  if (training && p > 0 && missing_cpu_kernel(x)) return std::nullopt;
  if (!training || p == 0 || x.numel() == 0 || bool_arg(ctx, "inplace", false)) return ValueMeta::of_tensor(x);
  if (x.device.type != Device::Type::CPU) return std::nullopt;  // fused kernels allocate differently
  TensorMeta out = x;
  if (p == 1) {
    out.strides = pointwise_output_strides(x.sizes, {&x}, /*scalar_operand=*/true);  // input * zeros({})
    return ValueMeta::of_tensor(std::move(out));
  }
  // input * empty_like(input).bernoulli_(1 - p)
  auto noise_strides = preserve_format_strides(x);
  if (!noise_strides) return std::nullopt;
  TensorMeta noise = x;
  noise.strides = *noise_strides;
  out.strides = pointwise_output_strides(x.sizes, {&x, &noise});
  return ValueMeta::of_tensor(std::move(out));
}

// ---- binary -----------------------------------------------------------------------------------

std::optional<ValueMeta> meta_binary(const MetaContext& ctx) {
  std::vector<Value> operands = {ctx.args[0], ctx.args[1]};
  if (!all_tensor_or_scalar(operands, ctx.graph) || !has_tensor(operands, ctx.graph)) return std::nullopt;
  bool lhs_scalar = !tensor_or_null(ctx.args[0], ctx.graph);
  if (lhs_scalar && op_is(ctx, {Op::op_floordiv, Op::op_mod})) return std::nullopt;  // reflected: version-specific
  auto dt = binary_dtype(ctx, operands, false);
  if (!dt) return std::nullopt;
  if (is_pow(ctx)) {
    check_int_pow(ctx, *dt);
    const TensorMeta* base = tensor_or_null(ctx.args[0], ctx.graph);
    const TensorMeta* exp = tensor_or_null(ctx.args[1], ctx.graph);
    // pow(Tensor, Scalar): the scalar is no operand; the base is converted to the result dtype.
    if (base && !exp) return unary_result(*base, *dt, Promote::Always);
    if (!base) {
      // torch.pow(Scalar, Tensor) allocates a contiguous result. `2 ** x` is that call from
      // torch 2.0 on; before, it was torch.tensor(2) ** x, a pointwise op keeping x's layout.
      // NB: meta tensors keep x's layout in torch.pow(Scalar, Tensor) too, so the fallback is
      // wrong here: the rule must answer.
      if (op_kind(ctx.op.id) == Op::op_pow && !torch_at_least(2, 0)) {
        TensorMeta out = unary_result(*exp, *dt).tensor;
        out.strides = pointwise_output_strides(exp->sizes, {exp}, /*scalar_operand=*/true);
        return ValueMeta::of_tensor(std::move(out));
      }
      return fresh(exp->sizes, *dt, exp->device, grad_result({exp}, *dt));
    }
  }
  return pointwise_result(operands, ctx.graph, *dt, *dt, Promote::OnCpu);
}

std::optional<ValueMeta> meta_binary_float(const MetaContext& ctx) {
  std::vector<Value> operands = {ctx.args[0], ctx.args[1]};
  if (!all_tensor_or_scalar(operands, ctx.graph) || !has_tensor(operands, ctx.graph)) return std::nullopt;
  const Value* rounding = arg_if(ctx, "rounding_mode");
  bool rounds = rounding && !rounding->is_none();
  if (rounds && rounding->s != "floor" && rounding->s != "trunc")
    throw MetaError("div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '" + rounding->s + "'");
  auto dt = binary_dtype(ctx, operands, !rounds);
  if (!dt) return std::nullopt;
  if (op_kind(ctx.op.id) == Op::atan2 && *dt == DType::Float16 && !torch_at_least(2, 0)) return std::nullopt;
  const TensorMeta* rhs = tensor_or_null(ctx.args[1], ctx.graph);
  if (!tensor_or_null(ctx.args[0], ctx.graph)) {
    // 2 / x is x.reciprocal() * 2.
    if (op_kind(ctx.op.id) != Op::op_truediv) return std::nullopt;
    DType r = is_integral(rhs->dtype, true) ? default_float_dtype() : rhs->dtype;
    // A floating tensor times a Python number keeps the tensor's dtype.
    TensorMeta out = unary_result(*rhs, r, Promote::OnCpu).tensor;
    out.strides = pointwise_output_strides(out.sizes, {&out}, /*scalar_operand=*/true);
    return ValueMeta::of_tensor(std::move(out));
  }
  return pointwise_result(operands, ctx.graph, *dt, *dt, Promote::OnCpu);
}

std::optional<ValueMeta> meta_compare(const MetaContext& ctx) {
  std::vector<Value> operands = {ctx.args[0], ctx.args[1]};
  if (!all_tensor_or_scalar(operands, ctx.graph) || !has_tensor(operands, ctx.graph)) return std::nullopt;
  DType common = result_type(operands, ctx.graph);
  if (is_complex(common)) return std::nullopt;
  // Comparisons and logical ops promote both operands to the common dtype first.
  ValueMeta m = pointwise_result(operands, ctx.graph, DType::Bool, common, Promote::OnCpu);
  m.tensor.requires_grad = false;
  return m;
}

std::optional<ValueMeta> meta_bitwise(const MetaContext& ctx) {
  std::vector<Value> operands = {ctx.args[0], ctx.args[1]};
  if (!all_tensor_or_scalar(operands, ctx.graph) || !tensor_or_null(ctx.args[0], ctx.graph)) return std::nullopt;
  DType dt = result_type(operands, ctx.graph);
  if (!is_integral(dt, true)) return std::nullopt;
  return pointwise_result(operands, ctx.graph, dt, dt, Promote::OnCpu);
}

// Shifts, gcd and lcm: an integral result (a bool operand promotes with an int one; two bools have
// no kernel, nor do floats), a number on either side (2 << x).
std::optional<ValueMeta> meta_int_binary(const MetaContext& ctx) {
  std::vector<Value> operands = {ctx.args[0], ctx.args[1]};
  if (!all_tensor_or_scalar(operands, ctx.graph)) return std::nullopt;
  if (!tensor_or_null(ctx.args[0], ctx.graph) && !tensor_or_null(ctx.args[1], ctx.graph)) return std::nullopt;
  DType dt = result_type(operands, ctx.graph);
  if (!is_integral(dt, false)) return std::nullopt;
  return pointwise_result(operands, ctx.graph, dt, dt, Promote::OnCpu);
}

std::optional<ValueMeta> meta_clamp(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const Value* lo = arg_if(ctx, "min");
  const Value* hi = arg_if(ctx, "max");
  Value none;
  const Value& lov = lo ? *lo : none;
  const Value& hiv = hi ? *hi : none;
  if (lov.is_none() && hiv.is_none()) throw MetaError("torch.clamp: At least one of 'min' or 'max' must not be None");
  if (x.dtype == DType::Bool || is_complex(x.dtype) || missing_cpu_kernel(x)) return std::nullopt;
  const TensorMeta* tlo = tensor_or_null(lov, ctx.graph);
  const TensorMeta* thi = tensor_or_null(hiv, ctx.graph);
  if (tlo || thi) {
    // clamp(Tensor, Tensor?, Tensor?): a ternary TensorIterator op; numbers cannot mix in.
    if ((!lov.is_none() && !tlo) || (!hiv.is_none() && !thi)) return std::nullopt;
    std::vector<Value> operands = {ctx.args[0]};
    if (tlo) operands.push_back(lov);
    if (thi) operands.push_back(hiv);
    DType dt = result_type(operands, ctx.graph);
    TensorMeta promoted = x;  // clamp(int32, f16, int32) runs in f16 (torch 1.13 has no CPU kernel)
    promoted.dtype = dt;
    if (missing_cpu_kernel(promoted)) return std::nullopt;
    return pointwise_result(operands, ctx.graph, dt, dt, Promote::OnCpu);
  }
  for (const Value* v : {&lov, &hiv})
    if (!v->is_none() && !v->is_number()) return std::nullopt;
  DType dt = x.dtype;
  if (!is_floating(dt)) dt = result_type({ctx.args[0], lov, hiv}, ctx.graph);
  return unary_result(x, dt, Promote::Always);  // clamp converts self.to(result_type) first
}

std::optional<ValueMeta> meta_ternary(const MetaContext& ctx) {
  std::vector<Value> operands;
  for (const Value& v : ctx.args)
    if (tensor_or_null(v, ctx.graph)) operands.push_back(v);
  if (operands.size() != (op_kind(ctx.op.id) == Op::lerp ? operands.size() : 3u) || operands.size() < 2) return std::nullopt;
  std::vector<const TensorMeta*> ts = tensors_of(operands, ctx.graph);
  DType dt = result_type(operands, ctx.graph);
  for (const TensorMeta* t : ts)
    if (missing_cpu_kernel(*t)) return std::nullopt;
  if (op_kind(ctx.op.id) == Op::lerp) {
    for (const TensorMeta* t : ts)
      if (t->dtype != ts[0]->dtype) return std::nullopt;
    if (!is_floating(dt)) return std::nullopt;
    const Value& w = ctx.arg("weight");
    if (!tensor_or_null(w, ctx.graph) && !w.is_number()) return std::nullopt;
  } else {
    // NB: eager's addcdiv raises when both factors are integral, whatever `input` is (found by
    // the codegen fuzzer: typed, the call was dropped as unused and nothing raised).
    auto integral = [](const TensorMeta* t) { return !is_floating(t->dtype) && !is_complex(t->dtype); };
    if (op_kind(ctx.op.id) == Op::addcdiv && ts.size() == 3 && integral(ts[1]) && integral(ts[2]))
      throw MetaError(
          "Integer division with addcdiv is no longer supported, and in a future release addcdiv will "
          "perform a true division of tensor1 and tensor2.");
    if (!is_floating(dt)) return std::nullopt;  // integer addcdiv raises; keep addcmul simple too
    const Value& value = ctx.arg("value");
    if (!value.is_number()) return std::nullopt;
  }
  return pointwise_result(operands, ctx.graph, dt, dt, Promote::OnCpu);
}

std::optional<ValueMeta> meta_where(const MetaContext& ctx) {
  const TensorMeta* cond = tensor_or_null(ctx.args[0], ctx.graph);
  if (!cond || cond->dtype != DType::Bool) return std::nullopt;
  std::vector<Value> values = {ctx.args[1], ctx.args[2]};
  if (!all_tensor_or_scalar(values, ctx.graph)) return std::nullopt;
  DType dt = result_type(values, ctx.graph);
  if (is_complex(dt)) return std::nullopt;
  // where converts input and other to the result dtype first (the condition stays bool).
  std::vector<Value> all = {ctx.args[0], ctx.args[1], ctx.args[2]};
  std::vector<TensorMeta> copies;
  copies.reserve(3);
  std::vector<const TensorMeta*> ts;
  bool scalar = false;
  for (size_t i = 0; i < all.size(); ++i) {
    const TensorMeta* t = tensor_or_null(all[i], ctx.graph);
    if (!t) {
      scalar = true;
      continue;
    }
    if (i > 0 && t->dtype != dt && t->dim() > 0) {
      copies.push_back(converted(*t, dt));
      t = &copies.back();
    }
    ts.push_back(t);
  }
  ValueMeta m = pointwise_result(all, ctx.graph, dt);
  m.tensor.strides = pointwise_output_strides(m.tensor.sizes, ts, scalar);
  m.tensor.requires_grad = grad_result(tensors_of(values, ctx.graph), dt);
  return m;
}

std::optional<ValueMeta> meta_masked_fill(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const TensorMeta& mask = ctx.tensor("mask");
  const Value& value = ctx.arg("value");
  if (mask.dtype != DType::Bool) return std::nullopt;
  const TensorMeta* tv = tensor_or_null(value, ctx.graph);
  if (tv && tv->dim() != 0)
    throw MetaError("masked_fill_ only supports a 0-dimensional value tensor, but got tensor with " +
                    std::to_string(tv->dim()) + " dimension(s).");
  if (!tv && !value.is_number()) return std::nullopt;
  if (tv && tv->device != x.device) return std::nullopt;
  // The result is a contiguous clone of the broadcast input, filled in place.
  SymShape shape = broadcast_shapes(mask.sizes, x.sizes);
  std::vector<const TensorMeta*> grads = {&x};
  if (tv) grads.push_back(tv);
  return fresh(shape, x.dtype, x.device, grad_result(grads, x.dtype));
}

// ---- in place ---------------------------------------------------------------------------------

std::optional<ValueMeta> meta_inplace(const MetaContext& ctx) {
  const TensorMeta* self = tensor_or_null(ctx.args[0], ctx.graph);
  if (!self) return std::nullopt;
  if (has_internal_overlap(*self))
    throw MetaError(
        "unsupported operation: more than one element of the written-to tensor refers to a single memory "
        "location. Please clone() the tensor before performing the operation.");
  const Op n = op_kind(ctx.op.id);
  TensorMeta out = *self;
  auto must_fit = [&](const TensorMeta& other) {
    SymShape b = broadcast_shapes(self->sizes, other.sizes);
    if (b != self->sizes)
      throw MetaError("output with shape " + shape_str(self->sizes) + " doesn't match the broadcast shape " + shape_str(b));
  };
  auto must_cast = [&](DType result) {
    if (!can_cast(result, self->dtype))
      throw MetaError("result type " + std::string(dtype_name(result)) + " can't be cast to the desired output type " +
                      std::string(dtype_name(self->dtype)));
  };
  auto add_grad = [&](const Value& v) {
    if (const TensorMeta* t = tensor_or_null(v, ctx.graph))
      out.requires_grad = out.requires_grad || (t->requires_grad && is_float_like(self->dtype));
  };
  if (n == Op::zero_) return ValueMeta::of_tensor(out);
  if (n == Op::relu_ || n == Op::sigmoid_ || n == Op::tanh_) {
    if (missing_cpu_kernel(*self)) return std::nullopt;
    if (self->dtype == DType::Bool || (n != Op::relu_ && !is_floating(self->dtype))) return std::nullopt;
    return ValueMeta::of_tensor(out);
  }
  if (n == Op::fill_) {
    const Value& v = ctx.arg("value");
    const TensorMeta* tv = tensor_or_null(v, ctx.graph);
    if (tv && tv->dim() != 0)
      throw MetaError("fill_ only supports 0-dimension value tensor but got tensor with " + std::to_string(tv->dim()) +
                      " dimensions.");
    if (!tv && !v.is_number()) return std::nullopt;
    add_grad(v);
    return ValueMeta::of_tensor(out);
  }
  if (n == Op::copy_) {
    const TensorMeta& src = ctx.tensor("other");
    must_fit(src);
    if (is_complex(src.dtype) && !is_complex(self->dtype)) return std::nullopt;  // warns and discards imag
    add_grad(ctx.args[1]);
    return ValueMeta::of_tensor(out);
  }
  if (n == Op::masked_fill_) {
    const TensorMeta& mask = ctx.tensor("mask");
    if (mask.dtype != DType::Bool) return std::nullopt;
    must_fit(mask);
    const Value& v = ctx.arg("value");
    const TensorMeta* tv = tensor_or_null(v, ctx.graph);
    if (tv && tv->dim() != 0)
      throw MetaError("masked_fill_ only supports a 0-dimensional value tensor, but got tensor with " +
                      std::to_string(tv->dim()) + " dimension(s).");
    if (!tv && !v.is_number()) return std::nullopt;
    add_grad(v);
    return ValueMeta::of_tensor(out);
  }
  if (n == Op::clamp_) {
    const Value& lo = ctx.arg("min");
    const Value& hi = ctx.arg("max");
    if (lo.is_none() && hi.is_none()) throw MetaError("torch.clamp: At least one of 'min' or 'max' must not be None");
    for (const Value* v : {&lo, &hi}) {
      if (v->is_none()) continue;
      if (!v->is_number()) return std::nullopt;  // tensor bounds: fallback
    }
    if (self->dtype == DType::Bool || is_complex(self->dtype) || missing_cpu_kernel(*self)) return std::nullopt;
    DType rt = is_floating(self->dtype) ? self->dtype : result_type({ctx.args[0], lo, hi}, ctx.graph);
    if (rt != self->dtype)
      throw MetaError("result type " + std::string(dtype_name(rt)) + " can't be cast to the desired inplace output type " +
                      std::string(dtype_name(self->dtype)));
    return ValueMeta::of_tensor(out);
  }
  // Binary in-place arithmetic: x += y, x.add_(y) ...
  std::vector<Value> operands = {ctx.args[0], ctx.args[1]};
  if (!all_tensor_or_scalar(operands, ctx.graph)) return std::nullopt;
  // NB: as out of place (binary_dtype): subtraction rejects a bool operand, x_int.sub_(True) too.
  if (op_is(ctx, {Op::sub_, Op::op_isub}))
    for (const Value& v : operands) {
      const TensorMeta* t = tensor_or_null(v, ctx.graph);
      if ((t && t->dtype == DType::Bool) || v.kind == Value::Kind::Bool) return std::nullopt;
    }
  if (const TensorMeta* o = tensor_or_null(ctx.args[1], ctx.graph)) must_fit(*o);
  DType rt = result_type(operands, ctx.graph);
  if (is_complex(rt)) return std::nullopt;
  bool divide = n == Op::op_itruediv || (n == Op::div_ && ctx.arg("rounding_mode").is_none());
  if (divide && is_integral(rt, true)) rt = default_float_dtype();
  if (n == Op::op_iand || n == Op::op_ior || n == Op::op_ixor) {
    if (!is_integral(rt, true)) return std::nullopt;
  } else if (n == Op::op_ilshift || n == Op::op_irshift) {
    if (!is_integral(rt, false)) return std::nullopt;
  } else if (rt == DType::Bool && n != Op::op_iadd && n != Op::op_imul && n != Op::add_ && n != Op::mul_) {
    return std::nullopt;
  }
  if (!alpha_ok(ctx, rt)) return std::nullopt;
  if (n == Op::op_ipow) check_int_pow(ctx, rt);
  must_cast(rt);
  add_grad(ctx.args[1]);
  return ValueMeta::of_tensor(out);
}

// ---- casts ------------------------------------------------------------------------------------

std::optional<ValueMeta> meta_cast(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("self");
  const Op n = op_kind(ctx.op.id);
  DType dt = x.dtype;
  Device dev = x.device;
  bool copy = false;
  std::string memory_format = "preserve_format";
  if (const Value* mf = arg_if(ctx, "memory_format")) memory_format = mf->s;
  auto set_device = [&](const Value& v) -> bool {
    if (v.kind == Value::Kind::Device) {
      dev = v.device;
    } else if (v.kind == Value::Kind::Str) {
      auto d = Device::parse(v.s);
      if (!d) throw MetaError("Invalid device string: '" + v.s + "'");
      dev = *d;
    } else {
      return false;
    }
    // "cuda" without an index means the current device, which is not known here.
    return !(dev.type == Device::Type::CUDA && dev.index < 0);
  };
  if (n == Op::to_float) dt = DType::Float32;
  else if (n == Op::to_double) dt = DType::Float64;
  else if (n == Op::to_half) dt = DType::Float16;
  else if (n == Op::to_bfloat16) dt = DType::BFloat16;
  else if (n == Op::to_long) dt = DType::Int64;
  else if (n == Op::to_int) dt = DType::Int32;
  else if (n == Op::to_bool) dt = DType::Bool;
  else if (n == Op::to_byte) dt = DType::UInt8;
  else if (n == Op::to_char) dt = DType::Int8;
  else if (n == Op::to_short) dt = DType::Int16;
  else if (n == Op::to_cfloat) dt = DType::Complex64;
  else if (n == Op::to_cdouble) dt = DType::Complex128;
  else if (n == Op::type_as) {
    const TensorMeta& other = ctx.tensor("other");
    dt = other.dtype;
    if (other.device != x.device) return std::nullopt;
  } else if (n == Op::to) {
    const Value& a0 = ctx.arg("arg0");
    const Value& a1 = ctx.arg("arg1");
    if (const TensorMeta* other = tensor_or_null(a0, ctx.graph)) {  // x.to(other)
      if (!a1.is_none()) return std::nullopt;
      dt = other->dtype;
      dev = other->device;
    } else if (a0.kind == Value::Kind::DType) {  // x.to(dtype)
      if (!a1.is_none()) return std::nullopt;
      dt = a0.dtype;
    } else if (!a0.is_none()) {  // x.to(device[, dtype])
      if (!set_device(a0)) return std::nullopt;
      if (a1.kind == Value::Kind::DType) dt = a1.dtype;
      else if (!a1.is_none()) return std::nullopt;
    } else if (!a1.is_none()) {
      return std::nullopt;
    }
    const Value& kdt = ctx.arg("dtype");
    const Value& kdev = ctx.arg("device");
    if (!kdt.is_none()) {
      if (a0.kind == Value::Kind::DType || a1.kind == Value::Kind::DType || tensor_or_null(a0, ctx.graph)) return std::nullopt;
      dt = kdt.dtype;
    }
    if (!kdev.is_none()) {
      if (!a0.is_none() && a0.kind != Value::Kind::DType) return std::nullopt;
      if (!set_device(kdev)) return std::nullopt;
    }
    copy = ctx.arg("copy").b;
  }
  if (dev.type == Device::Type::CPU) dev.index = -1;
  if (dev.type != x.device.type) {
    // Copies across devices: only the plain layouts are modelled.
    if (memory_format != "preserve_format" || !x.is_contiguous()) return std::nullopt;
  }
  bool aliases = !copy && dt == x.dtype && dev == x.device &&
                 (memory_format == "preserve_format" || (memory_format == "contiguous_format" && x.is_contiguous()) ||
                  (memory_format == "channels_last" && is_channels_last_contiguous(x)));
  if (aliases) return ValueMeta::of_tensor(x);
  TensorMeta out = x;
  out.dtype = dt;
  out.device = dev;
  out.requires_grad = x.requires_grad && is_float_like(dt);
  if (memory_format == "contiguous_format") {
    out.strides = TensorMeta::contiguous_strides(x.sizes);
  } else if (memory_format == "channels_last") {
    if (x.dim() != 4) throw MetaError("required rank 4 tensor to use channels_last format");
    out.strides = channels_last_strides(x.sizes);
  } else if (memory_format == "preserve_format") {
    auto s = preserve_format_strides(x);
    if (!s) return std::nullopt;
    out.strides = *s;
  } else {
    return std::nullopt;
  }
  return ValueMeta::of_tensor(std::move(out));
}

}  // namespace ff
