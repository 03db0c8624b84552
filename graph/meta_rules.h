// Meta rules: result metadata (sizes, strides as eager produces them, dtype, device) computed from
// operand metadata without running torch. Each returns nullopt for operands it does not handle,
// which sends the call to the meta-tensor fallback.
#pragma once

#include "graph/op_registry.h"

namespace ff {

// ---- shared helpers (also used by the code generator) -------------------------------------

// torch.broadcast_shapes; throws MetaError on mismatch.
std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// The output strides TensorIterator gives a new output of `shape` computed from `inputs`
// (already broadcastable to `shape`). Mirrors TensorIteratorBase's fast setup (all contiguous /
// all channels-last / all the same non-overlapping-and-dense strides) and its stride-sorting
// permutation otherwise.
std::vector<int64_t> pointwise_output_strides(const std::vector<int64_t>& shape,
                                              const std::vector<const TensorMeta*>& inputs);

// torch.result_type over the tensor and scalar operands of a call.
DType result_type(const std::vector<Value>& operands, const Graph& graph);

// Normalises a possibly negative dim; throws MetaError when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim);

// ---- rules, referenced from ops.def -------------------------------------------------------
#define FF_META_RULES(X)                                                                           \
  X(meta_unary)          /* same dtype as input */                                                 \
  X(meta_unary_float)    /* integral inputs promote to the default float dtype (sin, exp ...) */   \
  X(meta_binary)         /* broadcast + type promotion over input/other (add, mul ...) */          \
  X(meta_binary_float)   /* as meta_binary, integral results become float (true divide) */        \
  X(meta_compare)        /* broadcast, bool result (eq, lt ...) */                                 \
  X(meta_inplace)        /* result is the first input (add_, relu_ ...) */                          \
  X(meta_where)          /* where(condition, input, other) */                                      \
  X(meta_reduce)         /* sum / mean / amax / amin / prod with dim, keepdim, dtype */            \
  X(meta_view)           /* view / reshape */                                                      \
  X(meta_permute)        /* permute */                                                             \
  X(meta_transpose)      /* transpose(dim0, dim1) */                                               \
  X(meta_t)              /* t() */                                                                 \
  X(meta_unsqueeze)      /* unsqueeze(dim) */                                                      \
  X(meta_squeeze)        /* squeeze(dim=None) */                                                   \
  X(meta_expand)         /* expand(sizes...) */                                                    \
  X(meta_flatten)        /* flatten(start_dim, end_dim) */                                         \
  X(meta_same_layout)    /* softmax-like: same sizes, dtype (or `dtype` arg), dense like input */  \
  X(meta_matmul)         /* matmul / mm / bmm */                                                   \
  X(meta_linear)         /* linear(input, weight, bias) */                                         \
  X(meta_fallback)       /* no rule: always the meta-tensor fallback */

#define FF_DECLARE_META(name) std::optional<ValueMeta> name(const MetaContext& ctx);
FF_META_RULES(FF_DECLARE_META)
#undef FF_DECLARE_META

}  // namespace ff
