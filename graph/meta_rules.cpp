#include "graph/meta_rules.h"

#include <algorithm>
#include <numeric>

#include "src/errors.h"

namespace ff {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

const TensorMeta* tensor_or_null(const Value& v, const Graph& g) {
  if (v.is_node() && g.node(v.node).meta.is_tensor()) return &g.node(v.node).meta.tensor;
  return nullptr;
}

// Device of the result: the first non-CPU-scalar tensor's device (0-dim CPU tensors may mix).
std::optional<Device> common_device(const std::vector<const TensorMeta*>& ts) {
  std::optional<Device> dev;
  for (const TensorMeta* t : ts) {
    if (t->dim() == 0 && t->device.type == Device::Type::CPU) continue;
    if (!dev) dev = t->device;
    else if (!(*dev == t->device)) throw MetaError("Expected all tensors to be on the same device, but found at least two devices, " + dev->str() + " and " + t->device.str() + "!");
  }
  if (!dev && !ts.empty()) dev = ts.front()->device;
  return dev;
}

bool any_requires_grad(const std::vector<const TensorMeta*>& ts) {
  for (const TensorMeta* t : ts)
    if (t->requires_grad) return true;
  return false;
}

std::vector<int64_t> dims_arg(const Value& v, int64_t ndim) {
  std::vector<int64_t> dims;
  if (v.is_none()) return dims;
  for (const Value& d : v.items) dims.push_back(wrap_dim(d.i, ndim));
  return dims;
}

// Builds a pointwise result over the given operands; `dtype` is the result dtype.
ValueMeta pointwise_result(const std::vector<Value>& operands, const Graph& g, DType dtype) {
  std::vector<const TensorMeta*> ts;
  for (const Value& v : operands)
    if (const TensorMeta* t = tensor_or_null(v, g)) ts.push_back(t);
  std::vector<int64_t> shape;
  for (const TensorMeta* t : ts) shape = broadcast_shapes(shape, t->sizes);
  TensorMeta out;
  out.sizes = shape;
  out.strides = pointwise_output_strides(shape, ts);
  out.dtype = dtype;
  out.device = common_device(ts).value_or(Device{});
  out.requires_grad = any_requires_grad(ts) && (is_floating(dtype) || is_complex(dtype));
  return ValueMeta::of_tensor(std::move(out));
}

bool has_tensor(const std::vector<Value>& operands, const Graph& g) {
  for (const Value& v : operands)
    if (tensor_or_null(v, g)) return true;
  return false;
}

// Views: a result aliasing `base` with the given sizes/strides.
ValueMeta view_of(const TensorMeta& base, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  TensorMeta out = base;
  out.sizes = std::move(sizes);
  out.strides = std::move(strides);
  return ValueMeta::of_tensor(std::move(out));
}

// Strides for viewing `base` as `shape` without a copy (torch's computeStride), or nullopt.
std::optional<std::vector<int64_t>> view_strides(const TensorMeta& base, const std::vector<int64_t>& shape) {
  const auto& oldshape = base.sizes;
  const auto& oldstride = base.strides;
  std::vector<int64_t> newstride(shape.size());
  if (base.numel() == 0) {
    if (oldshape == shape) return oldstride;
    return TensorMeta::contiguous_strides(shape);
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = oldstride.empty() ? 1 : oldstride.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(oldshape.size()) - 1; tensor_d >= 0; tensor_d--) {
    tensor_numel *= oldshape[tensor_d];
    if (tensor_d == 0 || (oldshape[tensor_d - 1] != 1 && oldstride[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        newstride[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = oldstride[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return newstride;
}

// Resolves a -1 in a view/reshape shape.
std::vector<int64_t> infer_size(const std::vector<int64_t>& shape, int64_t numel) {
  std::vector<int64_t> out = shape;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw MetaError("only one dimension can be inferred");
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw MetaError("invalid shape dimension " + std::to_string(shape[i]));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) throw MetaError("shape '" + shape_str(shape) + "' is invalid for input of size " + std::to_string(numel));
    out[static_cast<size_t>(infer)] = numel / known;
  } else if (known != numel) {
    throw MetaError("shape '" + shape_str(shape) + "' is invalid for input of size " + std::to_string(numel));
  }
  return out;
}

std::vector<int64_t> int_list(const Value& v) {
  std::vector<int64_t> out;
  for (const Value& item : v.items) out.push_back(item.kind == Value::Kind::Bool ? item.b : item.i);
  return out;
}

bool all_ints(const Value& v) {
  if (!v.is_sequence()) return false;
  for (const Value& item : v.items)
    if (item.kind != Value::Kind::Int) return false;
  return true;
}

}  // namespace

// ---- shared helpers ---------------------------------------------------------------------------

std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw MetaError("The size of tensor a (" + std::to_string(da) + ") must match the size of tensor b (" +
                      std::to_string(db) + ") at non-singleton dimension " + std::to_string(i));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim) {
  int64_t n = std::max<int64_t>(ndim, 1);
  if (dim < -n || dim >= n)
    throw MetaError("Dimension out of range (expected to be in range of [" + std::to_string(-n) + ", " +
                    std::to_string(n - 1) + "], but got " + std::to_string(dim) + ")");
  return dim < 0 ? dim + n : dim;
}

std::vector<int64_t> pointwise_output_strides(const std::vector<int64_t>& shape,
                                              const std::vector<const TensorMeta*>& inputs) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  if (ndim == 0) return {};
  // Fast setup: every input has the full shape and they agree on a layout.
  bool same_shape = !inputs.empty();
  for (const TensorMeta* t : inputs) same_shape = same_shape && t->sizes == shape;
  if (same_shape) {
    bool all_contig = true;
    for (const TensorMeta* t : inputs) all_contig = all_contig && t->is_contiguous();
    if (all_contig) return TensorMeta::contiguous_strides(shape);
    // channels-last and identical non-overlapping-dense strides are covered by the permutation
    // below, which reproduces the same strides for them.
  }
  // Strides in bytes of each input, broadcast dims zeroed.
  std::vector<std::vector<int64_t>> sb;
  for (const TensorMeta* t : inputs) {
    std::vector<int64_t> s(static_cast<size_t>(ndim), 0);
    int64_t offset = ndim - t->dim();
    for (int64_t i = 0; i < t->dim(); ++i) {
      if (t->sizes[i] == 1 && shape[offset + i] != 1) s[offset + i] = 0;
      else s[offset + i] = t->strides[i] * dtype_size(t->dtype);
    }
    sb.push_back(std::move(s));
  }
  // perm[0] is the fastest-moving dim (TensorIterator's reorder_dimensions).
  std::vector<int64_t> perm(static_cast<size_t>(ndim));
  for (int64_t i = 0; i < ndim; ++i) perm[i] = ndim - 1 - i;
  auto should_swap = [&](int64_t dim0, int64_t dim1) -> int {
    for (const auto& s : sb) {
      int64_t s0 = s[dim0], s1 = s[dim1];
      if (s0 == 0 || s1 == 0) continue;
      if (s0 < s1) return -1;
      if (s0 > s1) return 1;
      if (shape[dim0] > shape[dim1]) return 1;
    }
    return 0;
  };
  for (int64_t i = 1; i < ndim; ++i) {
    int64_t dim1 = i;
    for (int64_t dim0 = i - 1; dim0 >= 0; --dim0) {
      int cmp = should_swap(perm[dim0], perm[dim1]);
      if (cmp > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (cmp < 0) {
        break;
      }
    }
  }
  bool inverted = true;
  for (int64_t j = 0; j < ndim; ++j) inverted = inverted && perm[j] == ndim - 1 - j;
  if (inverted) return TensorMeta::contiguous_strides(shape);
  std::vector<int64_t> strides(static_cast<size_t>(ndim));
  int64_t s = 1;
  for (int64_t j = 0; j < ndim; ++j) {
    strides[perm[j]] = s;
    s *= shape[perm[j]];
  }
  return strides;
}

DType result_type(const std::vector<Value>& operands, const Graph& g) {
  std::optional<DType> dim_result, zero_result, wrapped_result;
  auto promote = [](std::optional<DType>& acc, DType t) { acc = acc ? promote_types(*acc, t) : t; };
  for (const Value& v : operands) {
    if (const TensorMeta* t = tensor_or_null(v, g)) {
      promote(t->dim() == 0 ? zero_result : dim_result, t->dtype);
    } else if (v.kind == Value::Kind::Bool) {
      promote(wrapped_result, DType::Bool);
    } else if (v.kind == Value::Kind::Int) {
      promote(wrapped_result, DType::Int64);
    } else if (v.kind == Value::Kind::Float) {
      promote(wrapped_result, DType::Float32);  // the default dtype
    }
  }
  // combine_categories(higher, lower) from ATen's TypeProperties.
  auto combine = [](std::optional<DType> higher, std::optional<DType> lower) -> std::optional<DType> {
    if (!higher) return lower;
    if (!lower) return higher;
    if (is_complex(*higher)) return higher;
    if (is_complex(*lower)) {
      if (is_floating(*higher)) return *higher == DType::Float64 ? DType::Complex128 : DType::Complex64;
      return lower;
    }
    if (is_floating(*higher)) return higher;
    if (*higher == DType::Bool || is_floating(*lower)) return promote_types(*higher, *lower);
    return higher;
  };
  return combine(dim_result, combine(zero_result, wrapped_result)).value_or(DType::Float32);
}

// ---- rules ------------------------------------------------------------------------------------

std::optional<ValueMeta> meta_fallback(const MetaContext&) { return std::nullopt; }

std::optional<ValueMeta> meta_unary(const MetaContext& ctx) {
  const Value& x = ctx.args[0];
  const TensorMeta* t = tensor_or_null(x, ctx.graph);
  if (!t) return std::nullopt;
  return pointwise_result({x}, ctx.graph, t->dtype);
}

std::optional<ValueMeta> meta_unary_float(const MetaContext& ctx) {
  const Value& x = ctx.args[0];
  const TensorMeta* t = tensor_or_null(x, ctx.graph);
  if (!t) return std::nullopt;
  DType dt = is_integral(t->dtype, /*include_bool=*/true) ? DType::Float32 : t->dtype;
  return pointwise_result({x}, ctx.graph, dt);
}

std::optional<ValueMeta> meta_binary(const MetaContext& ctx) {
  std::vector<Value> operands = {ctx.args[0], ctx.args[1]};
  if (!has_tensor(operands, ctx.graph)) return std::nullopt;
  return pointwise_result(operands, ctx.graph, result_type(operands, ctx.graph));
}

std::optional<ValueMeta> meta_binary_float(const MetaContext& ctx) {
  std::vector<Value> operands = {ctx.args[0], ctx.args[1]};
  if (!has_tensor(operands, ctx.graph)) return std::nullopt;
  // div with a rounding mode keeps integer types.
  int rm = ctx.op.schema.index_of("rounding_mode");
  DType dt = result_type(operands, ctx.graph);
  if ((rm < 0 || ctx.args[static_cast<size_t>(rm)].is_none()) && is_integral(dt, true)) dt = DType::Float32;
  return pointwise_result(operands, ctx.graph, dt);
}

std::optional<ValueMeta> meta_compare(const MetaContext& ctx) {
  std::vector<Value> operands(ctx.args.begin(), ctx.args.begin() + std::min<size_t>(2, ctx.args.size()));
  if (!has_tensor(operands, ctx.graph)) return std::nullopt;
  ValueMeta m = pointwise_result(operands, ctx.graph, DType::Bool);
  m.tensor.requires_grad = false;
  return m;
}

std::optional<ValueMeta> meta_inplace(const MetaContext& ctx) {
  const TensorMeta* self = tensor_or_null(ctx.args[0], ctx.graph);
  if (!self) return std::nullopt;
  // The broadcast result must fit self; the dtype must be castable (same category or lower).
  std::vector<Value> operands = {ctx.args[0], ctx.args[1]};
  std::vector<int64_t> shape = self->sizes;
  if (const TensorMeta* o = tensor_or_null(ctx.args[1], ctx.graph)) {
    if (broadcast_shapes(self->sizes, o->sizes) != self->sizes)
      throw MetaError("output with shape " + shape_str(self->sizes) + " doesn't match the broadcast shape " +
                      shape_str(broadcast_shapes(self->sizes, o->sizes)));
  }
  DType rt = result_type(operands, ctx.graph);
  if (type_category(rt) > type_category(self->dtype))
    throw MetaError("result type " + std::string(dtype_name(rt)) + " can't be cast to the desired output type " +
                    std::string(dtype_name(self->dtype)));
  return ValueMeta::of_tensor(*self);
}

std::optional<ValueMeta> meta_where(const MetaContext& ctx) {
  std::vector<Value> values = {ctx.args[1], ctx.args[2]};
  const TensorMeta* cond = tensor_or_null(ctx.args[0], ctx.graph);
  if (!cond || cond->dtype != DType::Bool) return std::nullopt;
  DType dt = result_type(values, ctx.graph);
  return pointwise_result({ctx.args[0], ctx.args[1], ctx.args[2]}, ctx.graph, dt);
}

std::optional<ValueMeta> meta_reduce(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const Value& dim_v = ctx.arg("dim");
  bool keepdim = ctx.arg("keepdim").b;
  std::vector<int64_t> dims = dims_arg(dim_v, x.dim());
  if (dims.empty()) {  // None or []: all dims
    dims.resize(static_cast<size_t>(x.dim()));
    std::iota(dims.begin(), dims.end(), 0);
  }
  DType dt = x.dtype;
  int dtype_i = ctx.op.schema.index_of("dtype");
  if (dtype_i >= 0 && !ctx.args[static_cast<size_t>(dtype_i)].is_none()) {
    dt = ctx.args[static_cast<size_t>(dtype_i)].dtype;
  } else if (ctx.op.name == "sum" || ctx.op.name == "prod") {
    if (is_integral(dt, true)) dt = DType::Int64;
  } else if (ctx.op.name == "mean") {
    if (!is_floating(dt) && !is_complex(dt)) return std::nullopt;  // eager raises; let torch say how
  }
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < x.dim(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced) sizes.push_back(x.sizes[d]);
    else if (keepdim) sizes.push_back(1);
  }
  if ((ctx.op.name == "amax" || ctx.op.name == "amin") && x.numel() == 0) return std::nullopt;
  TensorMeta out = TensorMeta::contiguous(sizes, dt, x.device);
  out.requires_grad = x.requires_grad && (is_floating(dt) || is_complex(dt));
  return ValueMeta::of_tensor(std::move(out));
}

std::optional<ValueMeta> meta_view(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor(ctx.op.schema.params[0].name);
  const Value& shape_v = ctx.args[1];
  if (!all_ints(shape_v)) return std::nullopt;
  std::vector<int64_t> shape = infer_size(int_list(shape_v), x.numel());
  auto strides = view_strides(x, shape);
  if (!strides) {
    if (ctx.op.name == "view")
      throw MetaError("view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead.");
    // reshape copies: a contiguous result.
    TensorMeta out = TensorMeta::contiguous(shape, x.dtype, x.device);
    out.requires_grad = x.requires_grad;
    return ValueMeta::of_tensor(std::move(out));
  }
  return view_of(x, std::move(shape), std::move(*strides));
}

std::optional<ValueMeta> meta_permute(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const Value& dims_v = ctx.arg("dims");
  if (!all_ints(dims_v) || static_cast<int64_t>(dims_v.items.size()) != x.dim())
    throw MetaError("permute(sparse_coo): number of dimensions in the tensor input does not match the length of the desired ordering of dimensions i.e. input.dim() = " + std::to_string(x.dim()) + " is not equal to len(dims) = " + std::to_string(dims_v.items.size()));
  std::vector<int64_t> sizes, strides;
  std::vector<bool> seen(static_cast<size_t>(x.dim()), false);
  for (const Value& d : dims_v.items) {
    int64_t w = wrap_dim(d.i, x.dim());
    if (seen[w]) throw MetaError("permute(): duplicate dims are not allowed.");
    seen[w] = true;
    sizes.push_back(x.sizes[w]);
    strides.push_back(x.strides[w]);
  }
  return view_of(x, std::move(sizes), std::move(strides));
}

std::optional<ValueMeta> meta_transpose(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  int64_t d0 = wrap_dim(ctx.arg("dim0").i, x.dim()), d1 = wrap_dim(ctx.arg("dim1").i, x.dim());
  if (x.dim() == 0) return view_of(x, {}, {});
  auto sizes = x.sizes, strides = x.strides;
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  return view_of(x, std::move(sizes), std::move(strides));
}

std::optional<ValueMeta> meta_t(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  if (x.dim() > 2) throw MetaError("t() expects a tensor with <= 2 dimensions, but self is " + std::to_string(x.dim()) + "D");
  if (x.dim() < 2) return view_of(x, x.sizes, x.strides);
  return view_of(x, {x.sizes[1], x.sizes[0]}, {x.strides[1], x.strides[0]});
}

std::optional<ValueMeta> meta_unsqueeze(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  int64_t d = wrap_dim(ctx.arg("dim").i, x.dim() + 1);
  auto sizes = x.sizes, strides = x.strides;
  int64_t new_stride = d >= x.dim() ? 1 : x.sizes[d] * x.strides[d];
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, new_stride);
  return view_of(x, std::move(sizes), std::move(strides));
}

std::optional<ValueMeta> meta_squeeze(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const Value& dim_v = ctx.arg("dim");
  std::vector<int64_t> sizes, strides;
  std::optional<int64_t> only;
  if (!dim_v.is_none()) only = wrap_dim(dim_v.i, x.dim());
  for (int64_t d = 0; d < x.dim(); ++d) {
    bool drop = x.sizes[d] == 1 && (!only || *only == d);
    if (!drop) {
      sizes.push_back(x.sizes[d]);
      strides.push_back(x.strides[d]);
    }
  }
  return view_of(x, std::move(sizes), std::move(strides));
}

std::optional<ValueMeta> meta_expand(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("self");
  const Value& size_v = ctx.arg("size");
  if (!all_ints(size_v)) return std::nullopt;
  std::vector<int64_t> target = int_list(size_v);
  if (target.size() < x.sizes.size())
    throw MetaError("expand: the number of sizes provided (" + std::to_string(target.size()) + ") must be greater or equal to the number of dimensions in the tensor (" + std::to_string(x.dim()) + ")");
  size_t offset = target.size() - x.sizes.size();
  std::vector<int64_t> sizes(target.size()), strides(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < offset) {
      if (target[i] < 0) throw MetaError("expand: -1 is not allowed in a leading, non-existing dimension");
      sizes[i] = target[i];
      strides[i] = 0;
      continue;
    }
    int64_t s = x.sizes[i - offset];
    int64_t want = target[i] == -1 ? s : target[i];
    if (s != want) {
      if (s != 1) throw MetaError("The expanded size of the tensor (" + std::to_string(want) + ") must match the existing size (" + std::to_string(s) + ") at non-singleton dimension " + std::to_string(i) + ".  Target sizes: " + shape_str(target) + ".  Tensor sizes: " + shape_str(x.sizes));
      sizes[i] = want;
      strides[i] = 0;
    } else {
      sizes[i] = s;
      strides[i] = x.strides[i - offset];
    }
  }
  return view_of(x, std::move(sizes), std::move(strides));
}

std::optional<ValueMeta> meta_flatten(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  if (x.dim() == 0) return view_of(x, {1}, {1});
  int64_t s = wrap_dim(ctx.arg("start_dim").i, x.dim()), e = wrap_dim(ctx.arg("end_dim").i, x.dim());
  if (s > e) throw MetaError("flatten() has invalid args: start_dim cannot come after end_dim");
  if (s == e) return view_of(x, x.sizes, x.strides);
  std::vector<int64_t> shape(x.sizes.begin(), x.sizes.begin() + s);
  int64_t prod = 1;
  for (int64_t d = s; d <= e; ++d) prod *= x.sizes[d];
  shape.push_back(prod);
  shape.insert(shape.end(), x.sizes.begin() + e + 1, x.sizes.end());
  if (auto strides = view_strides(x, shape)) return view_of(x, shape, std::move(*strides));
  TensorMeta out = TensorMeta::contiguous(shape, x.dtype, x.device);
  out.requires_grad = x.requires_grad;
  return ValueMeta::of_tensor(std::move(out));
}

std::optional<ValueMeta> meta_same_layout(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  TensorMeta out = x;
  int dtype_i = ctx.op.schema.index_of("dtype");
  if (dtype_i >= 0 && !ctx.args[static_cast<size_t>(dtype_i)].is_none()) out.dtype = ctx.args[static_cast<size_t>(dtype_i)].dtype;
  if (!is_floating(out.dtype)) return std::nullopt;  // eager raises for integer softmax; let torch say how
  out.strides = TensorMeta::contiguous_strides(x.sizes);
  if (ctx.op.name != "layer_norm" && !x.is_contiguous()) return std::nullopt;  // preserve_format cases: use torch
  for (const char* p : {"weight", "bias"}) {
    int i = ctx.op.schema.index_of(p);
    if (i >= 0)
      if (const TensorMeta* t = tensor_or_null(ctx.args[static_cast<size_t>(i)], ctx.graph)) out.requires_grad |= t->requires_grad;
  }
  return ValueMeta::of_tensor(std::move(out));
}

std::optional<ValueMeta> meta_matmul(const MetaContext& ctx) {
  const TensorMeta* a = tensor_or_null(ctx.args[0], ctx.graph);
  const TensorMeta* b = tensor_or_null(ctx.args[1], ctx.graph);
  if (!a || !b) return std::nullopt;
  if (a->dtype != b->dtype)
    throw MetaError("expected m1 and m2 to have the same dtype, but got: " + std::string(dtype_name(a->dtype)) + " != " + std::string(dtype_name(b->dtype)));
  const std::string& name = ctx.op.name;
  if ((name == "mm" && (a->dim() != 2 || b->dim() != 2)) || (name == "bmm" && (a->dim() != 3 || b->dim() != 3)))
    throw MetaError(name == "mm" ? "self must be a matrix" : "batch1 must be a 3D tensor");
  if (a->dim() == 0 || b->dim() == 0) throw MetaError("both arguments to matmul need to be at least 1D");
  if (a->dim() < 2 || b->dim() < 2 || a->dim() > 3 || b->dim() > 3 || (a->dim() == 3 && b->dim() == 3 && a->sizes[0] != b->sizes[0]))
    return std::nullopt;  // vector and broadcast-batch cases: use torch
  int64_t k1 = a->sizes.back(), k2 = b->sizes[b->dim() - 2];
  if (k1 != k2)
    throw MetaError("mat1 and mat2 shapes cannot be multiplied (" + std::to_string(a->numel() / k1) + "x" + std::to_string(k1) + " and " + std::to_string(k2) + "x" + std::to_string(b->sizes.back()) + ")");
  std::vector<int64_t> sizes;
  if (a->dim() == 3) sizes.push_back(a->sizes[0]);
  else if (b->dim() == 3) sizes.push_back(b->sizes[0]);
  if (a->dim() == 2 && b->dim() == 3) return std::nullopt;
  sizes.push_back(a->sizes[a->dim() - 2]);
  sizes.push_back(b->sizes.back());
  TensorMeta out = TensorMeta::contiguous(sizes, a->dtype, a->device);
  out.requires_grad = a->requires_grad || b->requires_grad;
  return ValueMeta::of_tensor(std::move(out));
}

std::optional<ValueMeta> meta_linear(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const TensorMeta& w = ctx.tensor("weight");
  if (w.dim() != 2 || x.dim() < 1) return std::nullopt;
  if (x.sizes.back() != w.sizes[1])
    throw MetaError("mat1 and mat2 shapes cannot be multiplied (" + std::to_string(x.numel() / std::max<int64_t>(x.sizes.back(), 1)) + "x" + std::to_string(x.sizes.back()) + " and " + std::to_string(w.sizes[1]) + "x" + std::to_string(w.sizes[0]) + ")");
  if (x.dtype != w.dtype) return std::nullopt;
  std::vector<int64_t> sizes = x.sizes;
  sizes.back() = w.sizes[0];
  TensorMeta out = TensorMeta::contiguous(sizes, x.dtype, x.device);
  out.requires_grad = x.requires_grad || w.requires_grad;
  if (const TensorMeta* b = tensor_or_null(ctx.arg("bias"), ctx.graph)) out.requires_grad |= b->requires_grad;
  return ValueMeta::of_tensor(std::move(out));
}

}  // namespace ff
