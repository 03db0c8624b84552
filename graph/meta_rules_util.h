// Helpers shared by the meta rule files (graph/meta_rules_*.cpp). Not part of the public
// meta-rule interface (graph/meta_rules.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/meta_rules.h"
#include "graph/op.h"

namespace ff::meta_util {

// Whether the rule runs for one of `ops` (a rule serves several ops; it tells them apart by Op, so
// a renamed op is a compile error, not a silently skipped branch).
inline bool op_is(const MetaContext& ctx, std::initializer_list<Op> ops) { return op_in(op_kind(ctx.op.id), ops); }

std::string shape_str(const SymShape& s);

// The tensor metadata a value refers to, or nullptr (constants, scalar nodes, tuples).
const TensorMeta* tensor_or_null(const Value& v, const Graph& g);

// A Python number known at trace time or a node producing an int/float/bool.
bool is_scalar_value(const Value& v, const Graph& g);

// Every operand is a tensor or a Python number (None, strings, lists... are not).
bool all_tensor_or_scalar(const std::vector<Value>& operands, const Graph& g);
bool has_tensor(const std::vector<Value>& operands, const Graph& g);

// Device of a result: the first tensor's that is not a 0-dim CPU tensor (those may mix with
// any device). Throws MetaError when two devices disagree.
Device common_device(const std::vector<const TensorMeta*>& ts);

// Autograd records a result when any tensor input requires grad and the result can carry a
// gradient (floating or complex dtype).
bool grad_result(const std::vector<const TensorMeta*>& ts, DType result);

// The tensors among `operands`.
std::vector<const TensorMeta*> tensors_of(const std::vector<Value>& operands, const Graph& g);

// How TensorIterator's inputs reach the common dtype `compute` before it lays out the result:
// CPU TensorIterator copies an input of another dtype (`x.to(compute)`, which keeps x's layout
// only where x is dense); some ops convert explicitly on every device; GPU kernels read mixed
// dtypes in place.
enum class Promote { None,
                     OnCpu,
                     Always };

// A pointwise (TensorIterator) result over `operands`, in TensorIterator's operand order.
ValueMeta pointwise_result(const std::vector<Value>& operands, const Graph& g, DType dtype,
                           std::optional<DType> compute = std::nullopt, Promote promote = Promote::None);

// The layout `t.to(other dtype)` has: torch's infer_dense_strides for non-dense `t`.
TensorMeta converted(const TensorMeta& t, DType dtype);

// A view of `base` with new sizes and strides (dtype, device and requires_grad are kept).
ValueMeta view_of(const TensorMeta& base, SymShape sizes, SymShape strides);

// A fresh contiguous tensor.
ValueMeta fresh(SymShape sizes, DType dtype, Device device, bool requires_grad);

// torch's computeStride: strides that view `base` as `shape` without a copy, or nullopt.
std::optional<SymShape> view_strides(const TensorMeta& base, const SymShape& shape);

// Resolves one -1 in a view/reshape shape; throws MetaError when the numel does not match.
SymShape infer_size(const SymShape& shape, const SymInt& numel);

// Ints of a List/Tuple of Int (or Bool) constants. `all_ints` first says whether it is one.
// int_list specialises symbolic entries (guards); sym_int_list keeps them symbolic.
bool all_ints(const Value& v);
std::vector<int64_t> int_list(const Value& v);
SymShape sym_int_list(const Value& v);
// An int constant (not a symbolic node, not a bool).
bool is_int(const Value& v);

// Wrapped, de-duplicated reduction dims; None or [] means every dim. Throws MetaError on a
// repeated dim.
std::vector<int64_t> reduction_dims(const Value& dim, int64_t ndim);
SymShape reduced_shape(const SymShape& sizes, const std::vector<int64_t>& dims, bool keepdim);

// Memory layout queries, as torch defines them.
bool is_non_overlapping_and_dense(const TensorMeta& t);
bool is_channels_last(const TensorMeta& t);  // 4-d, strides exactly channels-last (and not contiguous)
bool is_channels_last_contiguous(const TensorMeta& t);  // torch's is_contiguous(channels_last)
bool strides_like_channels_last(const TensorMeta& t);   // what suggest_memory_format() looks at
SymShape channels_last_strides(const SymShape& sizes);
// torch's has_internal_overlap == Yes: a dimension of size > 1 with stride 0.
bool has_internal_overlap(const TensorMeta& t);

// Strides a `*_like(preserve_format)` / `.to(dtype)` / clone copy of `t` gets, or nullopt where
// this is not modelled (non-dense inputs with no elements).
std::optional<SymShape> preserve_format_strides(const TensorMeta& t);

// Torch before 2.0 lacks most CPU kernels for float16 (and a few for bfloat16): a rule declines
// such calls there, so that the call raises as eager does instead of being typed.
bool missing_cpu_kernel(const TensorMeta& t, bool bfloat16_too = false);

// The DType argument named `name` if given (not None), else `fallback`.
DType dtype_arg(const MetaContext& ctx, std::string_view name, DType fallback);

// A bool argument that may be absent from the schema.
bool bool_arg(const MetaContext& ctx, std::string_view name, bool fallback);

}  // namespace ff::meta_util
