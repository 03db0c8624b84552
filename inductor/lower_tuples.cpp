// Tuple results lowered as their items (Lowerer::tuple_items_), where the graph reads only the items.
#include "inductor/lower_internal.h"

namespace ff::inductor {

bool Lowerer::lower_tuple_items(NodeId id) { return lower_frexp(id) || lower_max_min_with_dim(id); }

// Whether the graph reads tuple node `id` only through its items (not the tuple itself).
bool Lowerer::only_items_read(NodeId id) const {
  for (NodeId u = id + 1; u < static_cast<NodeId>(g_.size()); ++u) {
    bool uses = false;
    for (const Value& v : g_.node(u).args) v.for_each_node([&](NodeId o) { uses |= o == id; });
    if (uses && g_.node(u).kind != NodeKind::GetItem) return false;
  }
  return true;
}

bool Lowerer::lower_max_min_with_dim(NodeId id) {
  const Node& n = g_.node(id);
  const Op kind = op_kind(n);
  if (!op_in(kind, {Op::max, Op::min}) || n.meta.kind != ValueMeta::Kind::Tuple || n.meta.items.size() != 2) return false;
  const OpDef& op = op_def(n.op);
  const Value& dim = n.args[static_cast<size_t>(op.schema.index_of("dim"))];
  if (dim.kind != Value::Kind::Int || !only_items_read(id)) return false;
  Node values = n, indices = n;
  values.op = op_id(kind == Op::max ? Op::amax : Op::amin);
  values.args = {n.args[0], Value::list({dim}), n.args[static_cast<size_t>(op.schema.index_of("keepdim"))]};
  values.meta = n.meta.items[0];
  indices.op = op_id(kind == Op::max ? Op::argmax : Op::argmin);
  indices.args = {n.args[0], dim, values.args[2]};
  indices.meta = n.meta.items[1];
  if (!values.meta.is_tensor() || !indices.meta.is_tensor()) return false;
  try {
    LT v = op_lowerings().at(op_kind(values.op))(*this, values);
    LT i = op_lowerings().at(op_kind(indices.op))(*this, indices);
    if (v.sizes != values.meta.tensor.sizes || i.sizes != indices.meta.tensor.sizes) return false;
    if (v.dtype != values.meta.tensor.dtype) v = cast(v, values.meta.tensor.dtype);
    if (i.dtype != indices.meta.tensor.dtype) i = cast(i, indices.meta.tensor.dtype);
    tuple_items_[id] = {v, i};
    note(n.name + ": values and indices as " + op_def(values.op).name + " and " + op_def(indices.op).name);
    return true;
  } catch (const NoLowering&) {
    return false;
  } catch (const SymbolicSpecialization&) {
    return false;
  }
}

// frexp's mantissa and exponent: C's frexp of each value (math library, in double: exact for every
// float dtype), the exponent as int32.
bool Lowerer::lower_frexp(NodeId id) {
  const Node& n = g_.node(id);
  if (op_kind(n) != Op::frexp || n.meta.kind != ValueMeta::Kind::Tuple || n.meta.items.size() != 2 || !n.meta.items[0].is_tensor() || !n.args[0].is_node())
    return false;
  const std::optional<LT>& x = values_[static_cast<size_t>(n.args[0].node)];
  if (!x || !is_floating(x->dtype) || !only_items_read(id)) return false;
  DType dt = x->dtype, ct = float_compute_dtype(dt);
  LT mantissa = map({*x}, ct, dt, [](const std::vector<Expr>& v) { return loop::call(loop::MathFn::FrexpMantissa, {v[0]}); });
  LT exponent = map({*x}, ct, DType::Int32, [](const std::vector<Expr>& v) {
    return loop::cast(loop::call(loop::MathFn::FrexpExponent, {v[0]}), loop::ScalarType::I32);
  });
  tuple_items_[id] = {mantissa, exponent};
  return true;
}

}  // namespace ff::inductor
