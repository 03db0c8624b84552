// Operands of extern calls in layouts torch's kernels take as they are. Some of torch's kernels
// take only some layouts: given another, torch copies the operand with its generic strided copy
// first, or runs a slower kernel. Where the program can choose the layout, it chooses theirs: the
// value is stored in that layout in the first place, or copied by a vectorized kernel of the program.
//   - Batched products (matmul, bmm): each operand a BLAS operand (batch dims one stride, one of the
//     last two dims unit-stride).
//   - scaled_dot_product_attention's attn_mask on CUDA: unit-stride along its last dim (keys).
#include <algorithm>

#include "inductor/lower_internal.h"
#include "src/base/errors.h"

namespace ff::inductor {

using loop::BufferRole;

namespace {

// Whether torch's batched matrix product takes this layout as it is: the batch dims (all but the
// last two) flatten into one stride, and one of the last two dims is unit-stride (a BLAS operand).
// Otherwise torch.matmul copies the operand with its generic strided copy first.
bool batched_blas_layout(const SymShape& sizes, const SymShape& strides) {
  size_t nd = sizes.size();
  std::optional<SymInt> inner;  // stride * size of the next batch dim inwards
  for (size_t d = nd - 2; d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (inner && strides[d] != *inner) return false;
    inner = strides[d] * sizes[d];
  }
  // NB: max(1, n) of a symbolic size is the size itself (symbols are >= 2).
  auto at_least_1 = [](const SymInt& x) { return x.is_symbolic() ? x : SymInt(std::max<int64_t>(1, x.hint())); };
  const SymInt &rows = sizes[nd - 2], &cols = sizes[nd - 1];
  return (strides[nd - 1] == 1 || cols == 1) ? strides[nd - 2] >= at_least_1(cols)
                                             : strides[nd - 2] == 1 && strides[nd - 1] >= at_least_1(rows);
}

// Strides for such an operand made afresh: batch dims outermost, the last two in the order the
// source keeps in memory (so the copy reads and writes along the same dim).
SymShape batched_operand_strides(const SymShape& sizes, const SymShape& strides) {
  size_t nd = sizes.size();
  bool column_major = strides[nd - 1] > strides[nd - 2] && sizes[nd - 1] > 1 && sizes[nd - 2] > 1;
  SymShape out(nd);
  if (column_major) {
    out[nd - 2] = 1;
    out[nd - 1] = sizes[nd - 2];
  } else {
    out[nd - 1] = 1;
    out[nd - 2] = sizes[nd - 1];
  }
  SymInt step = sizes[nd - 1] * sizes[nd - 2];
  for (size_t d = nd - 2; d-- > 0;) {
    out[d] = step;
    step *= sizes[d];
  }
  return out;
}

// What torch's fused CUDA attention kernels (memory-efficient, flash, cuDNN) ask of a mask's layout:
// its last dim unit-stride (or of one element). NB: not the CPU's flash kernel, which takes any
// mask (torch 2.13): there the mask stays as it is.
bool mask_layout_fused(const SymShape& sizes, const SymShape& strides) {
  return sizes.empty() || sizes.back() == 1 || strides.back() == 1;
}

// Whether every reader of node `id` is an SDPA call that reads it as its attn_mask (and only so).
bool read_only_as_attention_mask(const Graph& g, NodeId id) {
  bool read = false;
  for (size_t u = static_cast<size_t>(id) + 1; u < g.size(); ++u) {
    const Node& n = g.node(static_cast<NodeId>(u));
    for (size_t i = 0; i < n.args.size(); ++i) {
      bool reads = false;
      n.args[i].for_each_node([&](NodeId o) { reads |= o == id; });
      if (!reads) continue;
      if (n.kind != NodeKind::Call || op_kind(n.op) != Op::scaled_dot_product_attention ||
          static_cast<int>(i) != op_def(n.op).schema.index_of("attn_mask") || !n.args[i].is_node())
        return false;
      read = true;
    }
  }
  return read;
}

}  // namespace

NodeId Lowerer::attention_mask_node(OpId op, const std::vector<Value>& args) {
  if (op_kind(op) != Op::scaled_dot_product_attention) return -1;
  int i = op_def(op).schema.index_of("attn_mask");
  if (i < 0 || static_cast<size_t>(i) >= args.size() || !args[static_cast<size_t>(i)].is_node()) return -1;
  return args[static_cast<size_t>(i)].node;
}

// NB: on CUDA, with a mask whose last dim is strided, torch's SDPA runs its math path (a product, the mask
// added, a softmax, a product: eight kernels and copies of its own, and a result in another layout
// than the fused kernels', which the runtime then copies into the predicted one). T5's position
// bias is one: an embedding's [q, k, heads] result permuted to [1, heads, q, k] (strides
// [.., 1, heads * k, heads]), and a torch.where over it keeps that order. Given the same mask
// unit-stride, torch runs its fused kernel: the same function, rounded as the fused kernel rounds
// (as under torch.compile, whose layout constraint for SDPA does the same).
loop::TensorRef Lowerer::attention_mask_operand(NodeId mask, NodeId call) {
  if (auto it = unit_stride_masks_.find(mask); it != unit_stride_masks_.end()) return it->second;
  const TensorMeta& m = g_.node(mask).meta.tensor;
  const std::string why = "attn_mask of " + node_desc(g_, call) + ", unit-stride along keys as torch's fused attention takes it";
  auto& lt = values_.at(static_cast<size_t>(mask));
  FF_CHECK(lt.has_value(), "no lowered value for node " + g_.node(mask).name);
  bool broadcast = false;  // a dim of several elements at stride 0 (an expanded mask)
  for (size_t d = 0; d < m.sizes.size(); ++d) broadcast |= m.sizes[d] != 1 && m.strides[d] == 0;
  loop::TensorRef ref;
  if (!lt->ref && !broadcast && supported_dtype(m.dtype) && !mask_layout_fused(m.sizes, m.strides) &&
      read_only_as_attention_mask(g_, mask)) {
    // Not stored yet, and nothing but attention reads it: stored unit-stride in the first place.
    ref = *realize(*lt, TensorMeta::contiguous_strides(m.sizes), BufferRole::Intermediate, -1, why).ref;
  } else {
    ref = ensure_ref(mask, "operand of extern " + node_desc(g_, call));
    if (mask_layout_fused(ref.sizes, ref.strides) || !supported_dtype(m.dtype)) return ref;
    // Copied; a dim broadcast at stride 0 (other than the last) stays broadcast: the copy holds
    // its one element.
    loop::TensorRef distinct = ref;
    size_t nd = ref.sizes.size();
    for (size_t d = 0; d + 1 < nd; ++d)
      if (ref.sizes[d] != 1 && ref.strides[d] == 0) distinct.sizes[d] = 1;
    loop::TensorRef copy =
        *realize(from_ref(distinct, m.dtype), TensorMeta::contiguous_strides(distinct.sizes), BufferRole::Intermediate, -1, why).ref;
    for (size_t d = 0; d + 1 < nd; ++d)
      if (distinct.sizes[d] != ref.sizes[d]) copy.strides[d] = 0;
    copy.sizes = ref.sizes;
    ref = copy;
  }
  unit_stride_masks_.emplace(mask, ref);
  return ref;
}

// Batched products (both operands >= 3-d): an operand torch would copy with its strided copy
// before the product (nanoGPT's q, k and v, heads split out of one product) is copied by a
// vectorized kernel here instead, into a layout the product takes as it is.
void Lowerer::blas_operand_layouts(loop::ExternCall& e, size_t num_operands) {
  if (!op_in(op_kind(e.op), {Op::matmul, Op::op_matmul, Op::bmm}) || e.operands.size() != 2 || num_operands != 2) return;
  bool batched = true;
  for (auto& [o, ref] : e.operands) batched &= ref.sizes.size() >= 3;
  for (auto& [o, ref] : e.operands) {
    if (!batched || batched_blas_layout(ref.sizes, ref.strides) || !supported_dtype(g_.node(o).meta.tensor.dtype)) continue;
    LT view = from_ref(ref, g_.node(o).meta.tensor.dtype);
    ref = *realize(view, batched_operand_strides(ref.sizes, ref.strides), BufferRole::Intermediate, -1,
                   "operand of batched product " + node_desc(g_, e.node) + " in a layout BLAS takes")
               .ref;
  }
}

}  // namespace ff::inductor
