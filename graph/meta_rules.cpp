// Helpers shared by every meta rule: broadcasting, TensorIterator output strides, type promotion,
// layout predicates. The rules themselves are in meta_rules_{pointwise,reduce,view,nn}.cpp.
#include "graph/meta_rules.h"

#include <algorithm>
#include <atomic>
#include <numeric>

#include "graph/meta_rules_util.h"
#include "src/base/errors.h"

namespace ff {

namespace {

std::atomic<DType> g_default_float{DType::Float32};
std::atomic<int> g_torch_version{200};  // major * 100 + minor

// TensorIterator's dimension order (reorder_dimensions / infer_dense_strides): an insertion sort
// of the dims, last dim first, where should_swap(a, b) > 0 moves b before a, < 0 stops the scan
// and 0 looks further back. perm[0] is the fastest-moving dim.
template <class ShouldSwap>
std::vector<int64_t> fastest_dims_first(int64_t ndim, ShouldSwap should_swap) {
  std::vector<int64_t> perm(static_cast<size_t>(ndim));
  for (int64_t i = 0; i < ndim; ++i) perm[i] = ndim - 1 - i;
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
  return perm;
}

}  // namespace

std::atomic<bool> g_eager_cpu_fma{false};
void set_eager_cpu_fma(bool fused) { g_eager_cpu_fma.store(fused, std::memory_order_relaxed); }
bool eager_cpu_fma() { return g_eager_cpu_fma.load(std::memory_order_relaxed); }

void set_torch_version(int major, int minor) { g_torch_version.store(major * 100 + minor, std::memory_order_relaxed); }
bool torch_at_least(int major, int minor) {
  return g_torch_version.load(std::memory_order_relaxed) >= major * 100 + minor;
}

DType default_float_dtype() { return g_default_float.load(std::memory_order_relaxed); }
void set_default_float_dtype(DType t) {
  FF_CHECK(is_floating(t), "the default dtype must be a floating dtype");
  g_default_float.store(t, std::memory_order_relaxed);
}

bool call_mutates_input(const OpDef& op, const std::vector<Value>& bound) {
  if (op.has(kInplace)) return true;
  if (!op.has(kInplaceFlag)) return false;
  int i = op.schema.index_of("inplace");
  return i >= 0 && bound[static_cast<size_t>(i)].kind == Value::Kind::Bool && bound[static_cast<size_t>(i)].b;
}

SymShape broadcast_shapes(const SymShape& a, const SymShape& b) {
  size_t n = std::max(a.size(), b.size());
  SymShape out(n);
  for (size_t i = 0; i < n; ++i) {
    // NB: a dimension only one side has, or the same size on both, needs no decision.
    if (i < n - a.size() || i < n - b.size()) {
      out[i] = i < n - a.size() ? b[i - (n - b.size())] : a[i - (n - a.size())];
      continue;
    }
    SymInt da = a[i - (n - a.size())];
    SymInt db = b[i - (n - b.size())];
    if (da.same_as(db)) {
      out[i] = da;
      continue;
    }
    if (da != db && da != 1 && db != 1)
      throw MetaError("The size of tensor a (" + std::to_string(da.hint()) + ") must match the size of tensor b (" +
                      std::to_string(db.hint()) + ") at non-singleton dimension " + std::to_string(i));
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

SymShape pointwise_output_strides(const SymShape& shape, const std::vector<const TensorMeta*>& inputs,
                                  bool scalar_operand) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  if (ndim == 0) return {};
  // NB: the layout only; a data-dependent size counts as >= 2 here, as under torch.compile.
  SizeObliviousScope oblivious;
  // Fast setup: every operand has the full shape and they agree on a layout.
  bool same_shape = !inputs.empty() && !scalar_operand;
  for (const TensorMeta* t : inputs) same_shape = same_shape && t->sizes == shape;
  if (same_shape) {
    bool contig = true, cl = ndim == 4, dense = true;
    for (const TensorMeta* t : inputs) {
      contig = contig && t->is_contiguous();
      cl = cl && meta_util::is_channels_last_contiguous(*t);
      dense = dense && meta_util::is_non_overlapping_and_dense(*t) && t->strides == inputs.front()->strides;
    }
    if (contig) return TensorMeta::contiguous_strides(shape);
    if (cl) return meta_util::channels_last_strides(shape);
    if (dense) return inputs.front()->strides;
  }
  // Strides in bytes of each input, broadcast dims zeroed.
  std::vector<SymShape> sb;
  for (const TensorMeta* t : inputs) {
    SymShape s(static_cast<size_t>(ndim), 0);
    int64_t offset = ndim - t->dim();
    for (int64_t i = 0; i < t->dim(); ++i) {
      // NB: a dim of the result's own size is not broadcast (no decision: it may be data-dependent).
      if (!t->sizes[i].same_as(shape[offset + i]) && t->sizes[i] == 1 && shape[offset + i] != 1) s[offset + i] = 0;
      else s[offset + i] = t->strides[i] * dtype_size(t->dtype);
    }
    sb.push_back(std::move(s));
  }
  // perm[0] is the fastest-moving dim (TensorIterator's reorder_dimensions).
  auto should_swap = [&](int64_t dim0, int64_t dim1) -> int {
    for (const auto& s : sb) {
      const SymInt &s0 = s[dim0], &s1 = s[dim1];
      if (s0 == 0 || s1 == 0) continue;
      if (s0 < s1) return -1;
      if (s0 > s1) return 1;
      if (shape[dim0] > shape[dim1]) return 1;
    }
    return 0;
  };
  std::vector<int64_t> perm = fastest_dims_first(ndim, should_swap);
  bool inverted = true;
  for (int64_t j = 0; j < ndim; ++j) inverted = inverted && perm[j] == ndim - 1 - j;
  if (inverted) return TensorMeta::contiguous_strides(shape);
  // NB: raw sizes, not max(size, 1): TensorIterator's compatible_stride (visible with size-0 dims).
  SymShape strides(static_cast<size_t>(ndim));
  SymInt s = 1;
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
    if (const TensorMeta* t = meta_util::tensor_or_null(v, g)) {
      promote(t->dim() == 0 ? zero_result : dim_result, t->dtype);
      continue;
    }
    ValueMeta::Kind k = ValueMeta::Kind::None;
    if (v.is_node()) k = g.node(v.node).meta.kind;
    else if (v.kind == Value::Kind::Bool) k = ValueMeta::Kind::Bool;
    else if (v.kind == Value::Kind::Int) k = ValueMeta::Kind::Int;
    else if (v.kind == Value::Kind::Float) k = ValueMeta::Kind::Float;
    if (k == ValueMeta::Kind::Bool) promote(wrapped_result, DType::Bool);
    else if (k == ValueMeta::Kind::Int) promote(wrapped_result, DType::Int64);
    else if (k == ValueMeta::Kind::Float) promote(wrapped_result, default_float_dtype());
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
  return combine(dim_result, combine(zero_result, wrapped_result)).value_or(default_float_dtype());
}

std::optional<ValueMeta> meta_fallback(const MetaContext&) { return std::nullopt; }

// ---- meta_util ------------------------------------------------------------------------------

namespace meta_util {

std::string shape_str(const SymShape& s) { return s.str(); }

const TensorMeta* tensor_or_null(const Value& v, const Graph& g) {
  if (v.is_node() && g.node(v.node).meta.is_tensor()) return &g.node(v.node).meta.tensor;
  return nullptr;
}

bool is_scalar_value(const Value& v, const Graph& g) {
  if (v.is_number()) return true;
  if (!v.is_node()) return false;
  auto k = g.node(v.node).meta.kind;
  return k == ValueMeta::Kind::Int || k == ValueMeta::Kind::Float || k == ValueMeta::Kind::Bool;
}

bool all_tensor_or_scalar(const std::vector<Value>& operands, const Graph& g) {
  for (const Value& v : operands)
    if (!tensor_or_null(v, g) && !is_scalar_value(v, g)) return false;
  return true;
}

bool has_tensor(const std::vector<Value>& operands, const Graph& g) {
  for (const Value& v : operands)
    if (tensor_or_null(v, g)) return true;
  return false;
}

Device common_device(const std::vector<const TensorMeta*>& ts) {
  std::optional<Device> dev;
  for (const TensorMeta* t : ts) {
    if (t->dim() == 0 && t->device.type == Device::Type::CPU) continue;
    if (!dev) dev = t->device;
    else if (!(*dev == t->device))
      throw MetaError("Expected all tensors to be on the same device, but found at least two devices, " + dev->str() +
                      " and " + t->device.str() + "!");
  }
  if (!dev && !ts.empty()) dev = ts.front()->device;
  return dev.value_or(Device{});
}

bool grad_result(const std::vector<const TensorMeta*>& ts, DType result) {
  if (!is_floating(result) && !is_complex(result)) return false;
  for (const TensorMeta* t : ts)
    if (t->requires_grad) return true;
  return false;
}

std::vector<const TensorMeta*> tensors_of(const std::vector<Value>& operands, const Graph& g) {
  std::vector<const TensorMeta*> ts;
  for (const Value& v : operands)
    if (const TensorMeta* t = tensor_or_null(v, g)) ts.push_back(t);
  return ts;
}

TensorMeta converted(const TensorMeta& t, DType dtype) {
  TensorMeta out = t;
  out.dtype = dtype;
  out.strides = *preserve_format_strides(t);
  return out;
}

ValueMeta pointwise_result(const std::vector<Value>& operands, const Graph& g, DType dtype, std::optional<DType> compute,
                           Promote promote) {
  std::vector<const TensorMeta*> originals = tensors_of(operands, g);
  std::vector<TensorMeta> copies;
  copies.reserve(originals.size());
  std::vector<const TensorMeta*> ts;
  for (const TensorMeta* t : originals) {
    bool convert = compute && t->dtype != *compute && t->dim() > 0 &&
                   (promote == Promote::Always || (promote == Promote::OnCpu && t->device.type == Device::Type::CPU));
    if (convert) {
      copies.push_back(converted(*t, *compute));
      ts.push_back(&copies.back());
    } else {
      ts.push_back(t);
    }
  }
  SymShape shape;
  for (const TensorMeta* t : ts) shape = broadcast_shapes(shape, t->sizes);
  bool scalar_operand = false;
  for (const Value& v : operands) scalar_operand = scalar_operand || is_scalar_value(v, g);
  TensorMeta out;
  out.sizes = shape;
  out.strides = pointwise_output_strides(shape, ts, scalar_operand);
  out.dtype = dtype;
  out.device = common_device(originals);
  out.requires_grad = grad_result(originals, dtype);
  return ValueMeta::of_tensor(std::move(out));
}

ValueMeta view_of(const TensorMeta& base, SymShape sizes, SymShape strides) {
  TensorMeta out = base;
  out.sizes = std::move(sizes);
  out.strides = std::move(strides);
  return ValueMeta::of_tensor(std::move(out));
}

ValueMeta fresh(SymShape sizes, DType dtype, Device device, bool requires_grad) {
  TensorMeta out = TensorMeta::contiguous(std::move(sizes), dtype, device);
  out.requires_grad = requires_grad && (is_floating(dtype) || is_complex(dtype));
  return ValueMeta::of_tensor(std::move(out));
}

std::optional<SymShape> view_strides(const TensorMeta& base, const SymShape& shape) {
  const auto& oldshape = base.sizes;
  const auto& oldstride = base.strides;
  SymShape newstride(shape.size());
  if (oldshape.empty()) return SymShape(shape.size(), 1);
  if (base.numel() == 0) {
    if (oldshape == shape) return oldstride;
    return TensorMeta::contiguous_strides(shape);
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  SymInt chunk_base_stride = oldstride.empty() ? SymInt(1) : oldstride.back();
  SymInt tensor_numel = 1, view_numel = 1;
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

SymShape infer_size(const SymShape& shape, const SymInt& numel) {
  SymShape out = shape;
  SymInt known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw MetaError("only one dimension can be inferred");
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw MetaError("invalid shape dimension " + shape[i].str());
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      throw MetaError("shape '" + shape_str(shape) + "' is invalid for input of size " + numel.str());
    out[static_cast<size_t>(infer)] = numel / known;
  } else if (known != numel) {
    throw MetaError("shape '" + shape_str(shape) + "' is invalid for input of size " + numel.str());
  }
  return out;
}

bool is_int(const Value& v) { return v.kind == Value::Kind::Int; }

bool all_ints(const Value& v) {
  if (!v.is_sequence()) return false;
  for (const Value& item : v.items)
    if (item.kind != Value::Kind::Int) return false;
  return true;
}

std::vector<int64_t> int_list(const Value& v) {
  std::vector<int64_t> out;
  for (const Value& item : v.items)
    out.push_back(item.kind == Value::Kind::Bool ? item.b : item.sym ? item.as_symint().guard_int()
                                                                     : item.i);
  return out;
}

SymShape sym_int_list(const Value& v) {
  SymShape out;
  for (const Value& item : v.items) out.push_back(item.kind == Value::Kind::Bool ? SymInt(item.b) : item.as_symint());
  return out;
}

std::vector<int64_t> reduction_dims(const Value& dim, int64_t ndim) {
  std::vector<int64_t> dims;
  if (!dim.is_none()) {
    std::vector<Value> items = dim.is_sequence() ? dim.items : std::vector<Value>{dim};
    for (const Value& d : items) {
      int64_t w = wrap_dim(d.i, ndim);
      if (std::find(dims.begin(), dims.end(), w) != dims.end())
        throw MetaError("dim " + std::to_string(w) + " appears multiple times in the list of dims");
      dims.push_back(w);
    }
  }
  if (dims.empty()) {
    dims.resize(static_cast<size_t>(ndim));
    std::iota(dims.begin(), dims.end(), 0);
  }
  return dims;
}

SymShape reduced_shape(const SymShape& sizes, const std::vector<int64_t>& dims, bool keepdim) {
  SymShape out;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced) out.push_back(sizes[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

bool is_non_overlapping_and_dense(const TensorMeta& t) {
  // torch ORs the contiguity flags in (an empty tensor is contiguous whatever its strides).
  if (t.is_contiguous() || is_channels_last_contiguous(t)) return true;
  if (t.dim() == 1) return t.sizes[0] < 2 || t.strides[0] == 1;
  std::vector<int64_t> perm(static_cast<size_t>(t.dim()));
  std::iota(perm.begin(), perm.end(), 0);
  // Sort dims by stride, size-1 dims anywhere (torch's compute_non_overlapping_and_dense).
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    if (t.sizes[a] < 2) return false;
    if (t.sizes[b] < 2) return true;
    return t.strides[a] < t.strides[b];
  });
  SymInt require = 1;
  for (int64_t d : perm) {
    if (t.sizes[d] < 2) return true;
    if (t.strides[d] != require) return false;
    require *= t.sizes[d];
  }
  return true;
}

SymShape channels_last_strides(const SymShape& sizes) {
  FF_CHECK(sizes.size() == 4, "channels_last needs 4 dims");
  // NB: raw sizes (c10's get_channels_last_strides_2d): empty(0, 3, 4, 4, channels_last) has
  // strides (48, 1, 12, 3) and empty(2, 0, 4, 4, channels_last) (0, 1, 0, 0).
  SymShape st(4);
  st[1] = 1;
  st[3] = sizes[1];
  st[2] = st[3] * sizes[3];
  st[0] = st[2] * sizes[2];
  return st;
}

// torch's is_channels_last_strides_2d (what suggest_memory_format() looks at).
bool strides_like_channels_last(const TensorMeta& t) {
  if (t.dim() != 4) return false;
  SymInt min = 0;
  if (t.strides[1] == 0) return false;
  for (int d : {1, 3, 2, 0}) {
    if (t.sizes[d] == 0) return false;
    if (t.strides[d] < min) return false;
    if (d == 0 && min == t.strides[1]) return false;
    min = t.strides[d];
    if (t.sizes[d] > 1) min *= t.sizes[d];
  }
  return true;
}

bool is_channels_last_contiguous(const TensorMeta& t) {
  if (t.dim() != 4) return false;
  SymInt expected = 1;
  for (int d : {1, 3, 2, 0}) {
    if (t.sizes[d] == 1) continue;
    if (t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

bool is_channels_last(const TensorMeta& t) {
  return t.dim() == 4 && !t.is_contiguous() && strides_like_channels_last(t) && is_non_overlapping_and_dense(t);
}

bool has_internal_overlap(const TensorMeta& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.sizes[d] > 1 && t.strides[d] == 0) return true;
  return false;
}

// c10's infer_dense_strides: a dense layout in the stride order of `t` (TensorIterator's
// ordering), sizes 0 and 1 counting as 1.
SymShape infer_dense_strides(const TensorMeta& t) {
  const int64_t ndim = t.dim();
  auto should_swap = [&](int64_t d0, int64_t d1) -> int {
    const SymInt &s0 = t.strides[d0], &s1 = t.strides[d1];
    if (s0 == 0 || s1 == 0) return 0;
    if (s0 < s1) return -1;
    if (s0 > s1) return 1;
    return t.sizes[d0] > t.sizes[d1] ? 1 : 0;
  };
  std::vector<int64_t> perm = fastest_dims_first(ndim, should_swap);
  SymShape out(static_cast<size_t>(ndim));
  SymInt cur = 1;
  for (int64_t i = 0; i < ndim; ++i) {
    out[perm[i]] = cur;
    if (t.sizes[perm[i]] > 1) cur *= t.sizes[perm[i]];
  }
  return out;
}

std::optional<SymShape> preserve_format_strides(const TensorMeta& t) {
  SizeObliviousScope oblivious;  // NB: the layout only (see pointwise_output_strides)
  if (is_non_overlapping_and_dense(t)) return t.strides;
  return infer_dense_strides(t);
}

bool missing_cpu_kernel(const TensorMeta& t, bool bfloat16_too) {
  if (t.device.type != Device::Type::CPU || torch_at_least(2, 0)) return false;
  return t.dtype == DType::Float16 || (bfloat16_too && t.dtype == DType::BFloat16);
}

DType dtype_arg(const MetaContext& ctx, std::string_view name, DType fallback) {
  int i = ctx.op.schema.index_of(name);
  if (i < 0) return fallback;
  const Value& v = ctx.args[static_cast<size_t>(i)];
  return v.kind == Value::Kind::DType ? v.dtype : fallback;
}

bool bool_arg(const MetaContext& ctx, std::string_view name, bool fallback) {
  int i = ctx.op.schema.index_of(name);
  if (i < 0) return fallback;
  const Value& v = ctx.args[static_cast<size_t>(i)];
  return v.kind == Value::Kind::Bool ? v.b : fallback;
}

}  // namespace meta_util
}  // namespace ff
