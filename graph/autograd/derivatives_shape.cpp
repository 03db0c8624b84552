// Derivative rules of views, indexing, reductions, cat/split and pad (derivatives.h).
#include <cmath>
#include <numeric>

#include "graph/autograd/derivatives_internal.h"

namespace ff::grad {

namespace {

// Views and reshapes: the gradient reshaped back to the operand's sizes.
void rule_reshape(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (c.needs(x)) c.give(x, c.b.reshape(c.grad, c.b.tensor(x).sizes));
}

void rule_permute(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (!c.needs(x)) return;
  std::vector<int64_t> dims = int_list(c.node.args[1]);
  int64_t nd = static_cast<int64_t>(dims.size());
  std::vector<int64_t> inverse(dims.size());
  for (int64_t i = 0; i < nd; ++i) inverse[static_cast<size_t>(wrap(dims[static_cast<size_t>(i)], nd))] = i;
  c.give(x, c.b.call(Op::permute, {c.grad, ints(inverse)}));
}

void rule_transpose(RuleContext& c) {
  const Value& x = c.arg("input");
  if (c.needs(x)) c.give(x, c.b.call(Op::transpose, {c.grad, c.arg("dim0"), c.arg("dim1")}));
}

void rule_t(RuleContext& c) {
  const Value& x = c.arg("input");
  if (c.needs(x)) c.give(x, c.b.call(Op::t, {c.grad}));
}

void rule_movedim(RuleContext& c) {
  const Value& x = c.arg("input");
  if (c.needs(x)) c.give(x, c.b.call(Op::movedim, {c.grad, c.arg("destination"), c.arg("source")}));
}

// The dims a reduction reduced (all of them for dim=None or []).
std::vector<int64_t> reduced_dims(const Value& dim, int64_t ndim) {
  std::vector<int64_t> dims;
  if (!dim.is_none()) dims = int_list(dim);
  if (dims.empty()) {
    dims.resize(static_cast<size_t>(ndim));
    std::iota(dims.begin(), dims.end(), 0);
  }
  for (int64_t& d : dims) d = wrap(d, ndim);
  return dims;
}

// The gradient of a reduction's result, back at the input's sizes.
Value unreduce(GradBuilder& b, const Value& grad, const TensorMeta& in, const std::vector<int64_t>& dims, bool keepdim) {
  Value g = grad;
  if (!keepdim) {
    std::vector<int64_t> kept = in.sizes;
    for (int64_t d : dims)
      if (!kept.empty()) kept[static_cast<size_t>(d)] = 1;  // a 0-dim input "reduces" dim 0 or -1
    g = b.reshape(g, kept);
  }
  return b.expand(g, in.sizes);
}

void rule_sum_mean(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  const TensorMeta in = c.b.tensor(x);
  std::vector<int64_t> dims = reduced_dims(c.arg("dim"), in.dim());
  const Value& keepdim = c.arg("keepdim");
  Value g = unreduce(c.b, c.grad, in, dims, keepdim.kind == Value::Kind::Bool && keepdim.b);
  if (c.kind == Op::mean) {
    int64_t n = 1;
    for (int64_t d : dims) n *= in.sizes.empty() ? SymInt(1) : in.sizes[static_cast<size_t>(d)];
    g = c.b.div(g, Value::of_float(static_cast<double>(n)));
  }
  c.give(x, g);
}

// amax / amin: the gradient shared evenly among the elements equal to the result, as eager's.
void rule_amax(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  const TensorMeta in = c.b.tensor(x);
  std::vector<int64_t> dims = reduced_dims(c.arg("dim"), in.dim());
  bool keepdim = c.arg("keepdim").kind == Value::Kind::Bool && c.arg("keepdim").b;
  Value hit = c.b.call(Op::eq, {x, unreduce(c.b, c.out, in, dims, keepdim)});
  Value count = c.b.sum(hit, dims, true);
  c.give(x, c.b.mul(c.b.div(unreduce(c.b, c.grad, in, dims, keepdim), count), hit));
}

void rule_logsumexp(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  const TensorMeta in = c.b.tensor(x);
  std::vector<int64_t> dims = reduced_dims(c.arg("dim"), in.dim());
  bool keepdim = c.arg("keepdim").kind == Value::Kind::Bool && c.arg("keepdim").b;
  // eager: grad * exp(self - result)
  Value e = c.b.call(Op::exp, {c.b.sub(x, unreduce(c.b, c.out, in, dims, keepdim))});
  c.give(x, c.b.mul(unreduce(c.b, c.grad, in, dims, keepdim), e));
}

// var / std: 2 (x - mean) / (N - correction), and for std that over 2 std.
void rule_var(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  const TensorMeta in = c.b.tensor(x);
  if (is_complex(in.dtype)) unsupported(c, "of a complex tensor");
  std::vector<int64_t> dims = reduced_dims(c.arg("dim"), in.dim());
  bool keepdim = c.arg("keepdim").kind == Value::Kind::Bool && c.arg("keepdim").b;
  const Value &unbiased = c.arg("unbiased"), &corr = c.arg("correction");
  if (!corr.is_none() && !corr.is_number()) unsupported(c, "with a tensor correction");
  double correction = !corr.is_none() ? corr.as_double() : (unbiased.kind == Value::Kind::Bool && !unbiased.b) ? 0.0
                                                                                                               : 1.0;
  int64_t n = 1;
  for (int64_t d : dims) n *= in.sizes.empty() ? SymInt(1) : in.sizes[static_cast<size_t>(d)];
  Value xc = c.b.sub(x, c.b.mean(x, dims, true));
  Value g = unreduce(c.b, c.grad, in, dims, keepdim);
  // NB: N <= correction divides by zero or less, as eager's (inf / nan)
  g = c.b.mul(g, c.b.scale(xc, 2.0 / (static_cast<double>(n) - correction)));
  if (c.kind == Op::std) g = c.b.div(g, c.b.scale(unreduce(c.b, c.out, in, dims, keepdim), 2.0));
  c.give(x, g);
}

// cumsum: the reversed cumulative sum of the gradient, as eager's.
void rule_cumsum(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  Value dim = Value::of_int(wrap(c.arg("dim").i, c.b.tensor(x).dim()));
  if (c.b.tensor(x).dim() == 0) {
    c.give(x, c.grad);
    return;
  }
  Value dims = Value::list({dim});
  Value flipped = c.b.call("torch.flip", {c.grad, dims});
  c.give(x, c.b.call("torch.flip", {c.b.call(Op::cumsum, {flipped, dim}), dims}));
}

// F.pad with constant padding: the gradient is the middle part.
void rule_pad(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  const Value& mode = c.arg("mode");
  if (mode.kind != Value::Kind::Str || mode.s != "constant") unsupported(c, "in mode " + (mode.kind == Value::Kind::Str ? mode.s : "?"));
  std::vector<int64_t> pads = int_list(c.arg("pad"));
  const TensorMeta in = c.b.tensor(x);
  Value g = c.grad;
  for (size_t k = 0; k + 1 < pads.size(); k += 2) {
    int64_t dim = in.dim() - 1 - static_cast<int64_t>(k / 2);
    if (pads[k] < 0 || pads[k + 1] < 0) unsupported(c, "with negative padding");
    if (pads[k] == 0 && pads[k + 1] == 0) continue;
    g = c.b.call(Op::narrow, {g, Value::of_int(dim), Value::of_int(pads[k]), Value::of_int(in.sizes[static_cast<size_t>(dim)])});
  }
  c.give(x, g);
}

void rule_tril(RuleContext& c) {
  const Value& x = c.arg("input");
  if (c.needs(x)) c.give(x, c.b.call(c.kind, {c.grad, c.arg("diagonal")}));
}

// gather / index_select: the gradient added back at the indices into zeros.
void rule_gather(RuleContext& c) {
  const Value& x = c.arg("input");
  if (!c.needs(x)) return;
  if (c.kind == Op::gather && c.arg("sparse_grad").kind == Value::Kind::Bool && c.arg("sparse_grad").b)
    unsupported(c, "with sparse gradients");
  Value zeros = c.b.zeros_like(x);
  if (c.kind == Op::gather)
    c.give(x, c.b.call(Op::scatter_add, {zeros, c.arg("dim"), c.arg("index"), c.grad}));
  else
    c.give(x, c.b.call("torch.index_add", {zeros, c.arg("dim"), c.arg("index"), c.grad}));
}

// x.repeat(r...): the tiles' gradients summed.
void rule_repeat(RuleContext& c) {
  const Value& x = c.node.args[0];
  if (!c.needs(x)) return;
  std::vector<int64_t> reps = int_list(c.node.args[1]);
  std::vector<int64_t> sizes = c.b.tensor(x).sizes;
  if (reps.size() < sizes.size()) unsupported(c, "with fewer repeats than dims");
  sizes.insert(sizes.begin(), reps.size() - sizes.size(), 1);
  std::vector<int64_t> split, tile_dims;
  for (size_t i = 0; i < reps.size(); ++i) {
    tile_dims.push_back(static_cast<int64_t>(split.size()));
    split.push_back(reps[i]);
    split.push_back(sizes[i]);
  }
  Value g = c.b.sum(c.b.reshape(c.grad, split), tile_dims, false);
  c.give(x, c.b.reshape(g, c.b.tensor(x).sizes));
}

// x[index] for basic indexes (ints, slices with step 1, None, Ellipsis): the gradient padded with
// zeros back to the input's sizes.
void rule_getitem(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value& x = c.arg("a");
  if (!c.needs(x)) return;
  const Value& index = c.arg("b");
  std::vector<Value> items = index.kind == Value::Kind::Tuple ? index.items : std::vector<Value>{index};
  const TensorMeta in = b.tensor(x);
  int64_t consumed = 0, ellipsis_at = -1;
  for (size_t i = 0; i < items.size(); ++i) {
    Value::Kind k = items[i].kind;
    if (k == Value::Kind::Int || k == Value::Kind::Slice) ++consumed;
    else if (k == Value::Kind::Ellipsis) ellipsis_at = static_cast<int64_t>(i);
    else if (k != Value::Kind::None) unsupported(c, "with a tensor or list index");
  }
  // Per input dim: [before, after) zeros around the part the result kept.
  std::vector<int64_t> kept = in.sizes, before(in.sizes.size(), 0), after(in.sizes.size(), 0);
  int64_t dim = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Value& item = items[i];
    if (static_cast<int64_t>(i) == ellipsis_at) {
      dim += in.dim() - consumed;
      continue;
    }
    if (item.kind == Value::Kind::None) continue;
    auto d = static_cast<size_t>(dim++);
    int64_t n = in.sizes[d];
    if (item.kind == Value::Kind::Int) {
      int64_t at = item.i < 0 ? item.i + n : item.i;
      kept[d] = 1, before[d] = at, after[d] = n - at - 1;
      continue;
    }
    for (const Value& part : item.items)
      if (!part.is_none() && part.kind != Value::Kind::Int) unsupported(c, "with a computed slice bound");
    if (!item.items[2].is_none() && item.items[2].i != 1) unsupported(c, "of a slice with a step");
    auto clamp_bound = [n](const Value& v, int64_t dflt) {
      if (v.is_none()) return dflt;
      int64_t x = v.i < 0 ? v.i + n : v.i;
      return std::min(std::max<int64_t>(x, 0), n);
    };
    int64_t start = clamp_bound(item.items[0], 0), stop = std::max(start, clamp_bound(item.items[1], n));
    kept[d] = stop - start, before[d] = start, after[d] = n - stop;
  }
  Value g = b.reshape(c.grad, kept);
  std::vector<int64_t> pads;
  bool any = false;
  for (size_t d = in.sizes.size(); d-- > 0;) {
    pads.push_back(before[d]);
    pads.push_back(after[d]);
    any = any || before[d] != 0 || after[d] != 0;
  }
  c.give(x, any ? b.call(Op::pad, {g, ints(pads)}) : g);
}

// split / chunk / unbind: the items' gradients (zeros for those that got none) put back together.
void rule_split(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value& x = c.node.args[0];
  if (!c.needs(x)) return;
  bool unbind = c.kind == Op::unbind;
  int64_t dim = wrap(c.arg("dim").i, b.tensor(x).dim());
  const ValueMeta& items = b.graph().node(c.out.node).meta;
  std::vector<Value> parts;
  for (size_t i = 0; i < items.items.size(); ++i) {
    if (c.item_grads[i]) {
      parts.push_back(*c.item_grads[i]);
      continue;
    }
    const TensorMeta& t = items.items[i].tensor;
    parts.push_back(b.call(Op::zeros, {ints(t.sizes)}, {{"dtype", Value::of_dtype(t.dtype)}, {"device", Value::of_device(t.device)}}));
  }
  c.give(x, b.call(unbind ? Op::stack : Op::cat, {Value::list(std::move(parts)), Value::of_int(dim)}));
}

void rule_cat(RuleContext& c) {
  GradBuilder& b = c.b;
  const Value& list = c.arg("tensors");
  bool stack = c.kind == Op::stack;
  int64_t ndim = b.tensor(c.out).dim();
  int64_t dim = wrap(c.arg("dim").i, ndim), offset = 0;
  for (size_t i = 0; i < list.items.size(); ++i) {
    const Value& item = list.items[i];
    const TensorMeta& t = b.tensor(item);
    if (stack) {
      if (c.needs(item)) c.give(item, b.call(Op::select, {c.grad, Value::of_int(dim), Value::of_int(static_cast<int64_t>(i))}));
      continue;
    }
    if (t.dim() == 1 && t.sizes[0] == 0 && ndim != 1) {  // torch.cat skips legacy empty tensors
      if (c.needs(item)) c.give(item, b.zeros_like(item));  // eager still gives them a (empty) gradient
      continue;
    }
    int64_t size = t.sizes[static_cast<size_t>(dim)];
    if (c.needs(item)) c.give(item, b.call(Op::narrow, {c.grad, Value::of_int(dim), Value::of_int(offset), Value::of_int(size)}));
    offset += size;
  }
}

}  // namespace

void add_shape_rules(OpTable<DerivativeRule>& t) {
  for (Op op : {Op::view, Op::reshape, Op::tensor_reshape, Op::view_as, Op::reshape_as, Op::flatten, Op::unflatten,
                Op::unsqueeze, Op::squeeze})
    t[op] = rule_reshape;
  t[Op::permute] = t[Op::tensor_permute] = rule_permute;
  t[Op::transpose] = rule_transpose;
  t[Op::t] = rule_t;
  t[Op::movedim] = rule_movedim;
  t[Op::sum] = t[Op::mean] = rule_sum_mean;
  t[Op::amax] = t[Op::amin] = rule_amax;
  t[Op::logsumexp] = rule_logsumexp;
  t[Op::var] = t[Op::std] = rule_var;
  t[Op::cumsum] = rule_cumsum;
  t[Op::pad] = rule_pad;
  t[Op::tril] = t[Op::triu] = rule_tril;
  t[Op::gather] = t[Op::index_select] = rule_gather;
  t[Op::repeat] = rule_repeat;
  t[Op::op_getitem] = rule_getitem;
  t[Op::split] = t[Op::chunk] = t[Op::unbind] = rule_split;
  t[Op::cat] = t[Op::stack] = rule_cat;
}

}  // namespace ff::grad
