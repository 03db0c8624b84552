// Meta rules for reductions (sum, mean, max with indices, var, norm ...), cumulative ops,
// softmax, normalisation layers and losses.
#include <algorithm>

#include "graph/meta_rules.h"
#include "graph/op.h"
#include "graph/meta_rules_util.h"

namespace ff {
using namespace meta_util;

namespace {

bool is_float_like(DType t) { return is_floating(t) || is_complex(t); }

DType to_real(DType t) {
  if (t == DType::Complex64) return DType::Float32;
  if (t == DType::Complex128) return DType::Float64;
  return t;
}

ValueMeta reduced(const TensorMeta& x, const std::vector<int64_t>& dims, bool keepdim, DType dtype, bool grad) {
  return fresh(reduced_shape(x.sizes, dims, keepdim), dtype, x.device, grad && x.requires_grad);
}

// CPU batch_norm / group_norm: contiguous for a contiguous input, channels-last for a
// channels-last-contiguous one, contiguous for other layouts unless they merely look
// channels-last (left to the fallback). Other devices pick their own.
std::optional<ValueMeta> suggested_layout(const TensorMeta& x, bool grad) {
  if (x.device.type != Device::Type::CPU && !x.is_contiguous()) return std::nullopt;
  TensorMeta out = TensorMeta::contiguous(x.sizes, x.dtype, x.device);
  if (!x.is_contiguous()) {
    if (is_channels_last_contiguous(x)) out.strides = channels_last_strides(x.sizes);
    else if (x.dim() == 4 && strides_like_channels_last(x)) return std::nullopt;
  }
  out.requires_grad = grad;
  return ValueMeta::of_tensor(std::move(out));
}

const TensorMeta* optional_tensor(const MetaContext& ctx, std::string_view name) {
  return tensor_or_null(ctx.arg(name), ctx.graph);
}

}  // namespace

std::optional<ValueMeta> meta_reduce(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const Value& dim_v = ctx.arg("dim");
  bool keepdim = ctx.arg("keepdim").b;
  if (is_complex(x.dtype) && !op_is(ctx, {Op::sum, Op::mean})) return std::nullopt;
  if (dim_v.is_node() || (dim_v.is_sequence() && !all_ints(dim_v))) return std::nullopt;
  std::vector<int64_t> dims = reduction_dims(dim_v, x.dim());
  bool all_dims = dim_v.is_none() || (dim_v.is_sequence() && dim_v.items.empty());
  DType dt = x.dtype;
  bool grad = true;
  if ((op_is(ctx, {Op::prod}) && missing_cpu_kernel(x, true)) || (op_is(ctx, {Op::logsumexp}) && missing_cpu_kernel(x))) return std::nullopt;
  if (op_is(ctx, {Op::sum, Op::prod})) {
    if (op_is(ctx, {Op::prod}) && dim_v.is_none() && keepdim) return std::nullopt;  // no such overload
    dt = dtype_arg(ctx, "dtype", is_integral(x.dtype, true) ? DType::Int64 : x.dtype);
  } else if (op_is(ctx, {Op::mean})) {
    dt = dtype_arg(ctx, "dtype", x.dtype);
    if (!is_float_like(dt)) return std::nullopt;  // eager raises for integer means
  } else if (op_is(ctx, {Op::amax, Op::amin})) {
    if (x.numel() == 0 || x.dtype == DType::Bool) return std::nullopt;
  } else if (op_is(ctx, {Op::logsumexp})) {
    if (is_integral(dt, true)) dt = default_float_dtype();
  } else if (op_is(ctx, {Op::all, Op::any})) {
    if (all_dims && keepdim) return std::nullopt;
    dt = x.dtype == DType::UInt8 ? DType::UInt8 : DType::Bool;
  } else if (op_is(ctx, {Op::norm})) {
    const Value& p = ctx.arg("p");
    if (!is_floating(x.dtype)) return std::nullopt;
    if (p.kind == Value::Kind::Str && (p.s != "fro" || (!all_dims && dims.size() > 2))) return std::nullopt;
    if (!p.is_none() && p.kind != Value::Kind::Str && !p.is_number()) return std::nullopt;
    if (all_dims && keepdim) return std::nullopt;
    if (!ctx.arg("dtype").is_none()) return std::nullopt;  // torch 1.13 rejects dtype for some norms
    dt = to_real(x.dtype);
  } else if (op_is(ctx, {Op::var, Op::std})) {
    if (!is_floating(x.dtype)) return std::nullopt;
    if (!ctx.arg("unbiased").is_none() && !ctx.arg("correction").is_none()) return std::nullopt;
    if (all_dims && keepdim) return std::nullopt;
    dt = to_real(x.dtype);
  } else if (op_is(ctx, {Op::argmax, Op::argmin})) {
    if (x.numel() == 0 || x.dtype == DType::Bool) return std::nullopt;
    if (dim_v.is_none() && keepdim) return std::nullopt;  // torch versions disagree
    dt = DType::Int64;
    grad = false;
  } else {
    return std::nullopt;
  }
  return reduced(x, dims, keepdim, dt, grad && is_float_like(dt));
}

std::optional<ValueMeta> meta_max_min(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const Value& dim_v = ctx.arg("dim");
  bool keepdim = ctx.arg("keepdim").b;
  if (is_complex(x.dtype)) return std::nullopt;
  if (dim_v.is_none()) {  // max(x): the largest element
    if (keepdim || x.numel() == 0) return std::nullopt;
    return fresh({}, x.dtype, x.device, x.requires_grad && is_floating(x.dtype));
  }
  if (const TensorMeta* other = tensor_or_null(dim_v, ctx.graph)) {  // max(x, other) == maximum
    if (keepdim) return std::nullopt;
    std::vector<Value> operands = {ctx.args[0], dim_v};
    DType dt = result_type(operands, ctx.graph);
    (void)other;
    return pointwise_result(operands, ctx.graph, dt, dt, Promote::OnCpu);
  }
  if (!is_int(dim_v)) return std::nullopt;
  int64_t d = wrap_dim(dim_v.i, x.dim());
  if (x.numel() == 0) return std::nullopt;
  ValueMeta values = reduced(x, {d}, keepdim, x.dtype, is_floating(x.dtype));
  ValueMeta indices = reduced(x, {d}, keepdim, DType::Int64, false);
  return ValueMeta::tuple({std::move(values), std::move(indices)});
}

std::optional<ValueMeta> meta_topk(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  if (x.dim() == 0 || x.dtype == DType::Bool || is_complex(x.dtype) || missing_cpu_kernel(x)) return std::nullopt;
  if (!is_int(ctx.arg("k"))) return std::nullopt;
  int64_t k = ctx.arg("k").i;
  int64_t d = wrap_dim(ctx.arg("dim").i, x.dim());
  if (k < 0 || k > x.sizes[d]) throw MetaError("selected index k out of range");
  SymShape sizes = x.sizes;
  sizes[d] = k;
  ValueMeta values = fresh(sizes, x.dtype, x.device, x.requires_grad && is_floating(x.dtype));
  ValueMeta indices = fresh(sizes, DType::Int64, x.device, false);
  return ValueMeta::tuple({std::move(values), std::move(indices)});
}

std::optional<ValueMeta> meta_cumulative(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  if (is_complex(x.dtype) || missing_cpu_kernel(x)) return std::nullopt;
  wrap_dim(ctx.arg("dim").i, x.dim());
  DType dt = dtype_arg(ctx, "dtype", is_integral(x.dtype, true) ? DType::Int64 : x.dtype);
  return fresh(x.sizes, dt, x.device, x.requires_grad && is_floating(dt));
}

std::optional<ValueMeta> meta_softmax(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const Value& dim_v = ctx.arg("dim");
  if (!is_int(dim_v)) return std::nullopt;  // F.softmax(dim=None) picks a dim with a warning
  wrap_dim(dim_v.i, x.dim());
  DType dt = dtype_arg(ctx, "dtype", x.dtype);
  if (!is_floating(dt)) return std::nullopt;
  // Reduced-precision CPU kernels exist in newer torch versions only.
  TensorMeta computed = x;  // softmax(x, dim, dtype) converts x first
  computed.dtype = dt;
  if (missing_cpu_kernel(computed)) return std::nullopt;
  return fresh(x.sizes, dt, x.device, x.requires_grad);
}

std::optional<ValueMeta> meta_norm(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  if (!is_floating(x.dtype)) return std::nullopt;
  if (missing_cpu_kernel(x)) return std::nullopt;
  bool grad = x.requires_grad;
  for (const char* p : {"weight", "bias"}) {
    if (ctx.op.schema.index_of(p) < 0) continue;
    const Value& v = ctx.arg(p);
    if (v.is_none()) continue;
    const TensorMeta* t = tensor_or_null(v, ctx.graph);
    if (!t || t->dtype != x.dtype) return std::nullopt;  // mixed dtypes: version-specific
    grad = grad || t->requires_grad;
  }
  if (op_is(ctx, {Op::layer_norm, Op::rms_norm})) {
    const Value& ns = ctx.arg("normalized_shape");
    if (!all_ints(ns)) return std::nullopt;
    // NB: symbolic entries stay symbolic (`x.shape[-1:]` under dynamic shapes).
    SymShape shape = sym_int_list(ns);
    bool ok = !shape.empty() && shape.size() <= x.sizes.size() &&
              std::equal(shape.rbegin(), shape.rend(), x.sizes.rbegin());
    if (!ok)
      throw MetaError("Given normalized_shape=" + shape_str(shape) + ", expected input with shape [*, " +
                      shape_str(shape).substr(1) + ", but got input of size" + shape_str(x.sizes));
    for (const char* p : {"weight", "bias"}) {
      if (ctx.op.schema.index_of(p) < 0) continue;
      if (const TensorMeta* t = tensor_or_null(ctx.arg(p), ctx.graph); t && t->sizes != shape)
        throw MetaError("Expected " + std::string(p) + " to be of same shape as normalized_shape, but got " +
                        std::string(p) + " of shape " + shape_str(t->sizes) + " and normalized_shape = " + shape_str(shape));
    }
    if (op_is(ctx, {Op::rms_norm}) && !x.is_contiguous()) return std::nullopt;
    return fresh(x.sizes, x.dtype, x.device, grad);
  }
  if (op_is(ctx, {Op::batch_norm})) {
    if (x.dim() < 2) return std::nullopt;
    int64_t c = x.sizes[1];
    for (const char* p : {"running_mean", "running_var", "weight", "bias"}) {
      const Value& v = ctx.arg(p);
      if (v.is_none()) continue;
      const TensorMeta* t = tensor_or_null(v, ctx.graph);
      if (!t || t->numel() != c) return std::nullopt;
      if (t->dtype != x.dtype) return std::nullopt;
    }
    bool training = ctx.arg("training").b;
    if (training && x.numel() / std::max<int64_t>(c, 1) == 1)
      throw MetaError("Expected more than 1 value per channel when training, got input size " + shape_str(x.sizes));
    if (training && (ctx.arg("running_mean").is_none() != ctx.arg("running_var").is_none())) return std::nullopt;
    if (!training && (ctx.arg("running_mean").is_none() || ctx.arg("running_var").is_none())) return std::nullopt;
    return suggested_layout(x, grad);
  }
  if (op_is(ctx, {Op::group_norm})) {
    if (x.dim() < 2 || !is_int(ctx.arg("num_groups"))) return std::nullopt;
    int64_t groups = ctx.arg("num_groups").i;
    if (groups <= 0 || x.sizes[1] % groups != 0)
      throw MetaError("Expected number of channels in input to be divisible by num_groups, but got input of shape " +
                      shape_str(x.sizes) + " and num_groups=" + std::to_string(groups));
    for (const char* p : {"weight", "bias"})
      if (const TensorMeta* t = tensor_or_null(ctx.arg(p), ctx.graph); t && t->numel() != x.sizes[1]) return std::nullopt;
    // F.group_norm checks the batch like batch_norm in training, over [N * C / G, G, *spatial].
    if (x.numel() / std::max<int64_t>(groups, 1) == 1)
      throw MetaError("Expected more than 1 value per channel when training, got input size " + shape_str(x.sizes));
    // CPU group_norm allocates in the input's suggest_memory_format().
    if (x.device.type != Device::Type::CPU && !x.is_contiguous()) return std::nullopt;
    TensorMeta out = TensorMeta::contiguous(x.sizes, x.dtype, x.device);
    if (x.dim() == 4 && strides_like_channels_last(x)) out.strides = channels_last_strides(x.sizes);
    out.requires_grad = grad;
    return ValueMeta::of_tensor(std::move(out));
  }
  if (op_is(ctx, {Op::normalize})) {
    if (x.dim() == 0) return std::nullopt;
    int64_t d = wrap_dim(ctx.arg("dim").i, x.dim());
    // input / input.norm(p, dim, keepdim=True).clamp_min(eps).expand_as(input)
    SymShape keep = x.sizes;
    keep[d] = 1;
    TensorMeta denom = TensorMeta::contiguous(keep, x.dtype, x.device);
    denom.sizes = x.sizes;
    denom.strides[d] = 0;
    TensorMeta out = x;
    out.strides = pointwise_output_strides(x.sizes, {&x, &denom});
    return ValueMeta::of_tensor(std::move(out));
  }
  return std::nullopt;
}

std::optional<ValueMeta> meta_loss(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const TensorMeta& target = ctx.tensor("target");
  if (!ctx.arg("size_average").is_none() || !ctx.arg("reduce").is_none()) return std::nullopt;  // legacy arguments
  const std::string& reduction = ctx.arg("reduction").s;
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    throw MetaError(reduction + " is not a valid value for reduction");
  if (!is_floating(x.dtype)) return std::nullopt;
  if (op_kind(ctx.op.id) == Op::mse_loss ? missing_cpu_kernel(x, true) && x.dtype == DType::BFloat16 : missing_cpu_kernel(x))
    return std::nullopt;
  if (op_kind(ctx.op.id) == Op::mse_loss) {
    if (target.dtype != x.dtype) return std::nullopt;
    std::vector<Value> operands = {ctx.args[0], ctx.args[1]};
    ValueMeta m = pointwise_result(operands, ctx.graph, x.dtype);  // broadcasts (with a warning)
    if (reduction == "none") return m;
    return fresh({}, x.dtype, x.device, m.tensor.requires_grad);
  }
  // cross_entropy: class indices (int64 target of the input's shape without dim 1) or class
  // probabilities (a floating target of the input's shape).
  if (x.dim() == 0) return std::nullopt;
  bool grad = x.requires_grad;
  if (const TensorMeta* w = optional_tensor(ctx, "weight")) {
    int64_t classes = x.dim() == 1 ? x.sizes[0] : x.sizes[1];
    if (w->dtype != x.dtype || w->dim() != 1 || w->sizes[0] != classes) return std::nullopt;
    grad = grad || w->requires_grad;
  }
  SymShape no_class = x.sizes;
  no_class.erase(no_class.begin() + (x.dim() == 1 ? 0 : 1));
  if (target.dtype == DType::Int64) {
    if (target.sizes != no_class) return std::nullopt;
  } else if (target.dtype == x.dtype) {
    if (target.sizes != x.sizes) return std::nullopt;
    grad = grad || target.requires_grad;
  } else {
    return std::nullopt;
  }
  if (reduction != "none") return fresh({}, x.dtype, x.device, grad);
  return fresh(no_class, x.dtype, x.device, grad);
}

}  // namespace ff
