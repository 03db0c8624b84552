// Meta rules: result metadata (sizes, strides as eager produces them, dtype, device,
// requires_grad) computed from operand metadata without running torch. Each returns nullopt for
// operands it does not model exactly, which sends the call to the meta-tensor fallback; it throws
// MetaError where eager raises (shape mismatch, bad dim ...). A rule never guesses.
//
// The rules live in graph/meta_rules_{pointwise,reduce,view,nn}.cpp by family; the helpers they
// share are in graph/meta_rules_util.h.
#pragma once

#include "graph/op_registry.h"

namespace ff {

// ---- shared helpers (also used by the code generator) -------------------------------------

// torch.broadcast_shapes; throws MetaError on mismatch.
SymShape broadcast_shapes(const SymShape& a, const SymShape& b);

// The output strides TensorIterator gives a new output of `shape` computed from `inputs`
// (already broadcastable to `shape`). Mirrors TensorIteratorBase's fast setup (all contiguous /
// all channels-last / all the same non-overlapping-and-dense strides) and its stride-sorting
// permutation otherwise. `scalar_operand`: a Python number also takes part as a 0-dim operand
// (x + 2), which disables the fast setup.
SymShape pointwise_output_strides(const SymShape& shape,
                                  const std::vector<const TensorMeta*>& inputs,
                                  bool scalar_operand = false);

// torch.result_type over the tensor and scalar operands of a call. Python floats count as the
// default float dtype; nodes producing Python scalars count as the scalar they produce.
DType result_type(const std::vector<Value>& operands, const Graph& graph);

// Normalises a possibly negative dim; throws MetaError when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim);

// torch.get_default_dtype() as the rules see it (float32 unless the Python layer says
// otherwise: it must call set_default_float_dtype when torch's default changes, and guard on it).
DType default_float_dtype();
void set_default_float_dtype(DType t);

// The installed torch's version, for the few rules whose answer differs between versions (set by
// the Python layer at import; 2.0 until then).
void set_torch_version(int major, int minor);
bool torch_at_least(int major, int minor);

// Whether eager CPU's kernels computing `a + alpha * b` (add and sub with alpha, lerp, addcmul) round
// once, as a fused multiply-add: torch's AVX2 and AVX-512 kernels do, its default ones do not (the
// CPU, or ATEN_CPU_CAPABILITY, decides). Probed on the running torch with the version; false until then.
void set_eager_cpu_fma(bool fused);
bool eager_cpu_fma();

// Whether a bound call of `op` mutates its first operand: kInplace ops always, kInplaceFlag ops
// (F.relu(x, inplace=True) ...) when their `inplace` argument is True.
bool call_mutates_input(const OpDef& op, const std::vector<Value>& bound);

// ---- rules, referenced from ops.def -------------------------------------------------------
// clang-format off
#define FF_META_RULES(X)                                                                            \
  /* pointwise (meta_rules_pointwise.cpp) */                                                        \
  X(meta_unary)            /* same dtype as input; bool inputs go to the fallback */                \
  X(meta_unary_float)      /* integral inputs promote to the default float dtype (sin, exp ...) */  \
  X(meta_unary_float_only) /* floating inputs only (frac) */                                        \
  X(meta_unary_bool)       /* bool result (isnan, logical_not ...) */                               \
  X(meta_unary_integral)   /* integral/bool inputs only, same dtype (bitwise_not, ~) */             \
  X(meta_activation)       /* F.* activations: floating inputs, `inplace` flag */                   \
  X(meta_dropout)          /* F.dropout / torch.dropout */                                          \
  X(meta_binary)           /* broadcast + type promotion (add, mul, pow ...) */                     \
  X(meta_binary_float)     /* as meta_binary, integral results become float (true divide) */       \
  X(meta_compare)          /* broadcast, bool result (eq, lt, logical_and ...) */                   \
  X(meta_bitwise)          /* broadcast + promotion over integral/bool operands (&, |, ^) */        \
  X(meta_int_binary)       /* <<, >>, gcd, lcm: integral results, a number on either side */         \
  X(meta_clamp)            /* clamp / clamp_min / clamp_max */                                      \
  X(meta_ternary)          /* lerp / addcmul / addcdiv */                                           \
  X(meta_where)            /* where(condition, input, other) */                                     \
  X(meta_masked_fill)      /* masked_fill(input, mask, value) */                                    \
  X(meta_inplace)          /* in-place ops: the result is the mutated first operand */              \
  X(meta_cast)             /* to / float / half / ... / type_as */                                  \
  /* reductions and normalisations (meta_rules_reduce.cpp) */                                       \
  X(meta_reduce)           /* sum / mean / prod / amax / var / norm / argmax ... with dim, keepdim */ \
  X(meta_max_min)          /* max / min: full, with dim (tuple), or binary */                       \
  X(meta_topk)             /* topk -> (values, indices) */                                          \
  X(meta_cumulative)       /* cumsum / cumprod */                                                   \
  X(meta_softmax)          /* softmax / log_softmax (torch.* and F.*) */                            \
  X(meta_norm)             /* layer_norm / rms_norm / batch_norm / group_norm / normalize */        \
  X(meta_loss)             /* cross_entropy / mse_loss */                                           \
  /* views, layout and indexing (meta_rules_view.cpp) */                                            \
  X(meta_view)             /* view / reshape / flatten / unflatten / view_as / reshape_as */         \
  X(meta_permute)          /* permute / transpose / t / movedim */                                  \
  X(meta_unsqueeze)        /* unsqueeze(dim) */                                                     \
  X(meta_squeeze)          /* squeeze(dim=None) */                                                  \
  X(meta_expand)           /* expand / expand_as */                                                 \
  X(meta_narrow)           /* narrow(dim, start, length) */                                         \
  X(meta_select)           /* select(dim, index) */                                                 \
  X(meta_split)            /* split / chunk / unbind -> tuple of views */                           \
  X(meta_contiguous)       /* contiguous / clone */                                                 \
  X(meta_repeat)           /* repeat(sizes...) */                                                   \
  X(meta_tril)             /* tril / triu */                                                        \
  X(meta_cat)              /* cat / stack */                                                        \
  X(meta_getitem)          /* x[ints, slices, None, ...] (advanced indexing: fallback) */           \
  X(meta_setitem)          /* x[basic index] = value */                                             \
  X(meta_item)             /* x.item(): a float or an int (capture_scalar_outputs) */               \
  X(meta_index)            /* index_select / gather / scatter / scatter_add / embedding */          \
  /* nn: matmul, conv, pooling, creation (meta_rules_nn.cpp) */                                     \
  X(meta_matmul)           /* matmul / mm / bmm / addmm / baddbmm / @ */                             \
  X(meta_linear)           /* linear(input, weight, bias) */                                        \
  X(meta_sdpa)             /* scaled_dot_product_attention on CPU (else the fallback) */           \
  X(meta_conv)             /* conv1d / conv2d */                                                    \
  X(meta_pool)             /* max_pool2d / avg_pool2d / adaptive_avg_pool2d */                      \
  X(meta_pad)              /* F.pad */                                                              \
  X(meta_interpolate)      /* F.interpolate: nearest, bilinear, bicubic of 4-d inputs */            \
  X(meta_creation)         /* arange / zeros / full / *_like / new_* ... */                         \
  X(meta_rng_state)        /* manual_seed / set_rng_state: None; get_rng_state: the fallback */     \
  X(meta_fallback)         /* no rule: always the meta-tensor fallback */
// clang-format on

#define FF_DECLARE_META(name) std::optional<ValueMeta> name(const MetaContext& ctx);
FF_META_RULES(FF_DECLARE_META)
#undef FF_DECLARE_META

}  // namespace ff
