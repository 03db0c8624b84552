#include "graph/python/data_dependent.h"

#include <string_view>

#include "graph/meta_rules.h"
#include "graph/meta_rules_util.h"
#include "graph/op.h"
#include "graph/symint.h"

namespace ff {
namespace {

using meta_util::shape_str;
using meta_util::tensor_or_null;

std::string_view base_name(const std::string& aten_name) {
  std::string_view n = aten_name;
  if (n.rfind("aten::", 0) == 0) n.remove_prefix(6);
  return n.substr(0, n.find('.'));
}

// A boolean mask as the whole index: `x[mask]`.
bool is_mask_index(const OpDef& op, const std::vector<Value>& bound, const Graph& g) {
  if (op.is_open() || op_kind(op.id) != Op::op_getitem || bound.size() != 2) return false;
  const TensorMeta* x = tensor_or_null(bound[0], g);
  const TensorMeta* mask = tensor_or_null(bound[1], g);
  return x && mask && mask->dtype == DType::Bool;
}

bool flag(const Value& v, bool* out) {
  if (v.kind != Value::Kind::Bool) return false;
  *out = v.b;
  return true;
}

TensorMeta contiguous(SymShape sizes, DType dtype, Device device, bool requires_grad) {
  TensorMeta m = TensorMeta::contiguous(std::move(sizes), dtype, device);
  m.requires_grad = requires_grad;
  return m;
}

// An output a flag leaves out: torch returns an empty int64 tensor.
TensorMeta empty_long(Device device) { return contiguous({0}, DType::Int64, device, false); }

}  // namespace

bool has_data_dependent_output_shape(const std::string& aten_name) {
  std::string_view n = base_name(aten_name);
  for (std::string_view d : {"nonzero", "argwhere", "unique", "unique_dim", "_unique", "_unique2", "unique_consecutive",
                             "unique_dim_consecutive", "masked_select", "repeat_interleave", "bincount",
                             "nonzero_numpy"})
    if (n == d) return true;
  return false;
}

bool is_data_dependent_call(const OpDef& op, const std::vector<Value>& bound, const Graph& g) {
  if (is_mask_index(op, bound, g)) return true;
  if (!op.is_open() || !has_data_dependent_output_shape(op.aten)) return false;
  // repeat_interleave is only with a tensor of repeats and no output size given.
  if (base_name(op.aten) != "repeat_interleave") return true;
  int size_at = op.schema.index_of("output_size"), repeats_at = op.schema.index_of("repeats");
  bool sized = size_at >= 0 && static_cast<size_t>(size_at) < bound.size() && !bound[static_cast<size_t>(size_at)].is_none();
  return !sized && repeats_at >= 0 && static_cast<size_t>(repeats_at) < bound.size() &&
         tensor_or_null(bound[static_cast<size_t>(repeats_at)], g) != nullptr;
}

std::optional<ValueMeta> data_dependent_meta(const OpDef& op, const std::vector<Value>& bound, const Graph& g,
                                             std::string* reason) {
  ShapeEnv* env = ShapeEnv::current();
  auto unsupported = [&](const std::string& why) -> std::optional<ValueMeta> {
    *reason = op.target + " has an output size that depends on its operands' values; " + why;
    return std::nullopt;
  };
  if (!env) return unsupported("it is captured only while a function is traced");
  auto arg = [&](const char* name) -> const Value& {
    static const Value none;
    int i = op.schema.index_of(name);
    return i >= 0 && static_cast<size_t>(i) < bound.size() ? bound[static_cast<size_t>(i)] : none;
  };
  // NB: a function's `self` is called `input`, as torch's Python signatures have it (aten_schema.cpp).
  auto tensor = [&](const char* name) {
    const TensorMeta* t = tensor_or_null(arg(name), g);
    return t || std::string_view(name) != "self" ? t : tensor_or_null(arg("input"), g);
  };
  auto fresh_size = [&]() { return env->new_unbacked(op.target + "(...).size()[0]"); };

  if (is_mask_index(op, bound, g)) {
    const TensorMeta& x = *tensor_or_null(bound[0], g);
    const TensorMeta& mask = *tensor_or_null(bound[1], g);
    if (mask.dim() > x.dim()) throw MetaError("too many indices for tensor of dimension " + std::to_string(x.dim()));
    if (mask.device != x.device) return unsupported("a mask on another device is not captured");
    for (int64_t d = 0; d < mask.dim(); ++d)
      if (mask.sizes[d] != x.sizes[d])
        throw MetaError("The shape of the mask " + shape_str(mask.sizes) + " at index " + std::to_string(d) +
                        " does not match the shape of the indexed tensor " + shape_str(x.sizes) + " at index " +
                        std::to_string(d));
    SymShape sizes{fresh_size()};
    sizes.insert(sizes.end(), x.sizes.begin() + mask.dim(), x.sizes.end());
    return ValueMeta::of_tensor(contiguous(std::move(sizes), x.dtype, x.device, x.requires_grad));
  }

  const std::string_view name = base_name(op.aten);
  if (name == "nonzero" || name == "argwhere") {
    const TensorMeta* x = tensor("self");
    if (!x) return unsupported("not captured for these operands");
    // NB: torch (1.13 to 2.13) returns the (n, dims) result transposed from a (dims, n) buffer
    // (a 0-dim operand's (n, 0) too: strides (1, n) for its n of 0 or 1).
    TensorMeta m = contiguous({fresh_size(), x->dim()}, DType::Int64, x->device, false);
    m.strides = {1, m.sizes[0]};
    return ValueMeta::of_tensor(std::move(m));
  }
  if (name == "masked_select") {
    const TensorMeta* x = tensor("self");
    const TensorMeta* mask = tensor("mask");
    if (!x || !mask || mask->dtype != DType::Bool) return unsupported("only with a bool mask tensor");
    if (mask->device != x->device) return unsupported("a mask on another device is not captured");
    broadcast_shapes(x->sizes, mask->sizes);  // throws MetaError as eager raises
    return ValueMeta::of_tensor(contiguous({fresh_size()}, x->dtype, x->device, x->requires_grad));
  }
  if (name == "unique_dim" || name == "unique_dim_consecutive" || (name == "unique_consecutive" && !arg("dim").is_none())) {
    // Unique slices along `dim`: the values come out of a buffer with `dim` outermost; the inverse
    // and the counts are always returned, whatever the flags.
    const TensorMeta* x = tensor("self");
    const Value& dim = arg("dim");
    if (!x || dim.kind != Value::Kind::Int || x->dim() == 0) return unsupported("not captured for these operands");
    int64_t d = wrap_dim(dim.i, x->dim());
    SymInt n = fresh_size();
    SymShape sizes = x->sizes;
    sizes[d] = n;
    SymShape others;
    for (int64_t k = 0; k < x->dim(); ++k)
      if (k != d) others.push_back(sizes[k]);
    SymShape inner = TensorMeta::contiguous_strides(others);
    SymInt outer = 1;
    for (const SymInt& o : others) outer *= o;
    TensorMeta values = contiguous(sizes, x->dtype, x->device, x->requires_grad);
    for (int64_t k = 0, j = 0; k < x->dim(); ++k) values.strides[k] = k == d ? outer : inner[j++];
    return ValueMeta::tuple({ValueMeta::of_tensor(std::move(values)),
                             ValueMeta::of_tensor(contiguous({x->sizes[d]}, DType::Int64, x->device, false)),
                             ValueMeta::of_tensor(contiguous({n}, DType::Int64, x->device, false))});
  }
  if (name == "_unique2" || name == "_unique" || name == "unique_consecutive") {
    const TensorMeta* x = tensor("self");
    bool sorted = true, inverse = false, counts = false;
    if (!x) return unsupported("not captured for these operands");
    if (name != "unique_consecutive" && !flag(arg("sorted"), &sorted)) return unsupported("needs constant flags");
    if (!flag(arg("return_inverse"), &inverse)) return unsupported("needs constant flags");
    if (name != "_unique" && !flag(arg("return_counts"), &counts)) return unsupported("needs constant flags");
    SymInt n = fresh_size();
    std::vector<ValueMeta> out{ValueMeta::of_tensor(contiguous({n}, x->dtype, x->device, x->requires_grad)),
                               ValueMeta::of_tensor(inverse ? contiguous(x->sizes, DType::Int64, x->device, false) : empty_long(x->device))};
    if (name != "_unique") out.push_back(ValueMeta::of_tensor(counts ? contiguous({n}, DType::Int64, x->device, false) : empty_long(x->device)));
    return ValueMeta::tuple(std::move(out));
  }
  if (name == "repeat_interleave") {
    const TensorMeta* repeats = tensor("repeats");
    const TensorMeta* x = tensor("self");
    if (!repeats || repeats->dim() > 1 || (repeats->dtype != DType::Int64 && repeats->dtype != DType::Int32))
      return unsupported("only with a 0-dim or 1-dim integer tensor of repeats");
    if (!x) return ValueMeta::of_tensor(contiguous({fresh_size()}, repeats->dtype, repeats->device, false));
    if (repeats->device != x->device) return unsupported("repeats on another device are not captured");
    const Value& dim = arg("dim");
    if (dim.is_none()) return ValueMeta::of_tensor(contiguous({fresh_size()}, x->dtype, x->device, x->requires_grad));
    if (dim.kind != Value::Kind::Int || x->dim() == 0) return unsupported("not captured for these operands");
    int64_t d = wrap_dim(dim.i, x->dim());
    if (repeats->dim() == 1 && repeats->sizes[0] != 1 && repeats->sizes[0] != x->sizes[d])
      return unsupported("repeats must have the dimension's size (eager raises)");
    SymShape sizes = x->sizes;
    sizes[d] = fresh_size();
    return ValueMeta::of_tensor(contiguous(std::move(sizes), x->dtype, x->device, x->requires_grad));
  }
  if (name == "bincount") {
    const TensorMeta* x = tensor("self");
    if (!x || x->dim() != 1 || is_floating(x->dtype) || x->dtype == DType::Bool) return unsupported("only of a 1-dim integer tensor");
    const Value& w = arg("weights");
    const TensorMeta* weights = tensor_or_null(w, g);
    if (!w.is_none() && (!weights || weights->device != x->device)) return unsupported("not captured with these weights");
    // Counts are int64; weighted sums float32 for float32 weights, else float64 (torch 1.13 to 2.13).
    DType dt = !weights ? DType::Int64 : weights->dtype == DType::Float32 ? DType::Float32
                                                                          : DType::Float64;
    return ValueMeta::of_tensor(contiguous({fresh_size()}, dt, x->device, false));
  }
  return unsupported("this op is not captured");
}

}  // namespace ff
