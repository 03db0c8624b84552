#include "graph/autograd/derivatives.h"

#include <algorithm>

#include "graph/autograd/derivatives_internal.h"

namespace ff {

using grad::ints;
using grad::is_reduced_float;

// ---- GradBuilder ------------------------------------------------------------------------------

Value GradBuilder::call(Op op, const std::vector<Value>& positional,
                        const std::vector<std::pair<std::string, Value>>& keywords) {
  return Value::of_node(typer_(g_, op_id(op), positional, keywords));
}

Value GradBuilder::call(const std::string& target, const std::vector<Value>& positional) {
  std::vector<OpId> ops = resolve_target(target);
  std::string why = target + " is not available in the installed torch";
  for (OpId op : ops) {
    try {
      return Value::of_node(typer_(g_, op, positional, {}));
    } catch (const Unsupported& e) {
      why = e.what();
    }
  }
  throw Unsupported(why);
}

const TensorMeta& GradBuilder::tensor(const Value& v) const {
  FF_CHECK(v.is_node() && g_.node(v.node).meta.is_tensor(), "a derivative rule read a non-tensor as a tensor");
  return g_.node(v.node).meta.tensor;
}

Value GradBuilder::keep_where(const Value& g, const Value& keep) {
  return call(Op::masked_fill, {g, call(Op::logical_not, {keep}), Value::of_float(0.0)});
}

Value GradBuilder::reshape(const Value& v, const std::vector<int64_t>& sizes) {
  if (tensor(v).sizes == sizes) return v;
  return call(Op::reshape, {v, ints(sizes)});
}

Value GradBuilder::sum(const Value& v, const std::vector<int64_t>& unsorted_dims, bool keepdim) {
  // NB: a CUDA sum over the leading dims into a short result (a bias gradient: [2048, 768] -> [768])
  // is one thread per result element down a long column, which leaves most of the GPU idle (650 us
  // for GPT-2's c_attn bias). Summed in two steps, chunks of rows first, it runs wide. A sum over
  // inner and outer dims (batch norm's [0, 2, 3]) sums the inner ones first, along rows.
  std::vector<int64_t> dims = unsorted_dims;
  std::sort(dims.begin(), dims.end());
  const TensorMeta t = tensor(v);
  int64_t nd = t.dim();
  if (t.device.type == Device::Type::CUDA && !dims.empty() && dims.back() == nd - 1) {
    size_t inner = dims.size();
    while (inner > 0 && dims[inner - 1] == nd - static_cast<int64_t>(dims.size() - inner) - 1) --inner;
    if (inner > 0) {
      std::vector<int64_t> trailing(dims.begin() + static_cast<std::ptrdiff_t>(inner), dims.end());
      std::vector<int64_t> rest(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(inner));
      Value out = sum(sum(v, trailing, true), rest, true);
      if (keepdim) return out;
      std::vector<int64_t> kept;
      for (int64_t d = 0; d < nd; ++d)
        if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(t.sizes[static_cast<size_t>(d)]);
      return reshape(out, kept);
    }
  }
  int64_t rows = 1, cols = 1;
  bool leading = !keepdim && !dims.empty();
  for (size_t i = 0; i < dims.size(); ++i) leading = leading && dims[i] == static_cast<int64_t>(i);
  for (size_t d = 0; d < t.sizes.size(); ++d) (d < dims.size() ? rows : cols) *= t.sizes[d];
  if (leading && t.device.type == Device::Type::CUDA && rows >= 1024 && cols <= (1 << 16)) {
    int64_t chunks = 1;
    for (int64_t c = 2; c * c <= rows; ++c)
      if (rows % c == 0) chunks = c;
    if (chunks >= 8) {
      std::vector<int64_t> split{chunks, rows / chunks};
      split.insert(split.end(), t.sizes.begin() + static_cast<std::ptrdiff_t>(dims.size()), t.sizes.end());
      Value partial = call(Op::sum, {reshape(v, split), ints({1}), Value::of_bool(false)});
      return call(Op::sum, {partial, ints({0}), Value::of_bool(false)});
    }
  }
  return call(Op::sum, {v, ints(dims), Value::of_bool(keepdim)});
}

Value GradBuilder::mean(const Value& v, const std::vector<int64_t>& dims, bool keepdim) {
  const TensorMeta& t = tensor(v);
  if (t.device.type == Device::Type::CUDA && !dims.empty() && dims.front() != t.dim() - static_cast<int64_t>(dims.size())) {
    int64_t n = 1;  // not a row mean: as sum() splits it
    for (int64_t d : dims) n *= t.sizes[static_cast<size_t>(d)];
    return div(sum(v, dims, keepdim), Value::of_float(static_cast<double>(n)));
  }
  return call(Op::mean, {v, ints(dims), Value::of_bool(keepdim)});
}

Value GradBuilder::sum_to(const Value& v, const std::vector<int64_t>& sizes) {
  const std::vector<int64_t> have = tensor(v).sizes;
  if (have == sizes) return v;
  size_t lead = have.size() - std::min(have.size(), sizes.size());
  FF_CHECK(have.size() >= sizes.size(), "a gradient has fewer dims than its operand");
  std::vector<int64_t> dims;
  for (size_t i = 0; i < lead; ++i) dims.push_back(static_cast<int64_t>(i));
  Value out = v;
  if (!dims.empty()) out = sum(out, dims, false);
  std::vector<int64_t> widened;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] == 1 && have[lead + i] != 1) widened.push_back(static_cast<int64_t>(i));
  if (!widened.empty()) out = sum(out, widened, true);
  FF_CHECK(tensor(out).sizes == sizes, "a gradient does not broadcast to its operand's shape");
  return out;
}

Value GradBuilder::expand(const Value& v, const std::vector<int64_t>& sizes) {
  if (tensor(v).sizes == sizes) return v;
  return call(Op::expand, {v, ints(sizes)});
}

Value GradBuilder::cast(const Value& v, DType dtype) {
  if (tensor(v).dtype == dtype) return v;
  return call(Op::to, {v, Value::of_dtype(dtype)});
}

Value GradBuilder::opmath(const Value& v) {
  return is_reduced_float(tensor(v).dtype) ? cast(v, DType::Float32) : v;
}

Value GradBuilder::transpose_last(const Value& v) {
  return call(Op::transpose, {v, Value::of_int(-2), Value::of_int(-1)});
}

Value GradBuilder::zeros_like(const Value& v) { return call(Op::zeros_like, {v}); }

Value GradBuilder::item(const Value& tuple, int64_t index) {
  const ValueMeta& m = g_.node(tuple.node).meta;
  FF_CHECK(m.kind == ValueMeta::Kind::Tuple && index < static_cast<int64_t>(m.items.size()), "item of a non-tuple");
  ValueMeta item = m.items[static_cast<size_t>(index)];
  NodeId id = g_.add_getitem(tuple.node, index);
  g_.mutable_node(id).meta = std::move(item);
  return Value::of_node(id);
}

// ---- RuleContext ------------------------------------------------------------------------------

const Value& RuleContext::arg(std::string_view name) const {
  const OpDef& op = op_def(node.op);
  int i = op.schema.index_of(name);
  // An op of the open registry takes the rule of the listed op of its target: its parameters
  // have torch's names, but an overload may lack one.
  if (i < 0 && op.is_open()) throw Unsupported("no derivative for " + op.target + " without its argument " + std::string(name));
  FF_CHECK(i >= 0, "derivative rule of " + op.name + " reads unknown parameter " + std::string(name));
  return node.args[static_cast<size_t>(i)];
}

bool RuleContext::needs(std::string_view name) const { return needs(arg(name)); }

bool RuleContext::needs(const Value& v) const {
  if (!v.is_node()) return false;
  const ValueMeta& m = b.graph().node(v.node).meta;
  return m.is_tensor() && m.tensor.requires_grad;
}

Op derivative_kind(OpId op) {
  Op kind = op_kind(op);
  if (kind != Op::Open) return kind;
  // NB: an overload torch resolved for a call the listed op's schema does not bind (SDPA with
  // enable_gqa) shares the listed op's rule; the rule reads its arguments by name.
  std::optional<OpId> listed = op_by_target(op_def(op).target);
  return listed ? op_kind(*listed) : Op::Open;
}

DerivativeRule derivative_rule(Op op) {
  static const OpTable<DerivativeRule> rules = [] {
    OpTable<DerivativeRule> t;
    grad::add_pointwise_rules(t);
    grad::add_shape_rules(t);
    grad::add_nn_rules(t);
    return t;
  }();
  return rules.at(op);
}

}  // namespace ff