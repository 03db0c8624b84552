// Meta rules for views and layout ops (view, permute, expand, split ...), cat/stack, basic
// indexing (x[...], x[...] = v) and index ops (index_select, gather, scatter, embedding).
#include <algorithm>
#include <numeric>

#include "graph/meta_rules.h"
#include "graph/op.h"
#include "graph/meta_rules_util.h"

namespace ff {
using namespace meta_util;

namespace {

bool is_float_like(DType t) { return is_floating(t) || is_complex(t); }

// x.reshape(shape): a view where the strides allow one, else a contiguous copy.
ValueMeta reshape_of(const TensorMeta& x, const SymShape& shape, bool must_view) {
  if (auto strides = view_strides(x, shape)) return view_of(x, shape, std::move(*strides));
  if (must_view)
    throw MetaError(
        "view size is not compatible with input tensor's size and stride (at least one dimension spans "
        "across two contiguous subspaces). Use .reshape(...) instead.");
  return fresh(shape, x.dtype, x.device, x.requires_grad);
}

// A sequence of slicing steps on a (sizes, strides) pair, as torch's applySlicing does them.
struct Sliced {
  SymShape sizes, strides;
};

// torch's slice(dim, start, stop, step) clamping.
void apply_slice(Sliced& t, int64_t dim, const Value& start_v, const Value& stop_v, int64_t step) {
  SymInt size = t.sizes[dim];
  SymInt start = start_v.is_none() ? SymInt(0) : start_v.as_symint();
  SymInt stop = stop_v.is_none() ? size : stop_v.as_symint();
  if (start < 0) start += size;
  if (stop < 0) stop += size;
  auto clamp = [&](SymInt& v) {
    if (v < 0) v = 0;
    else if (v > size) v = size;
  };
  clamp(start);
  clamp(stop);
  if (stop < start) stop = start;
  t.sizes[dim] = (stop - start + step - 1) / step;
  t.strides[dim] *= step;
}

// Basic indexing: ints, slices of int constants, None, Ellipsis. nullopt for anything else
// (tensors, bools, lists, symbolic ints: advanced indexing, decided by torch).
std::optional<Sliced> basic_index(const TensorMeta& x, const Value& index) {
  std::vector<Value> items = index.kind == Value::Kind::Tuple ? index.items : std::vector<Value>{index};
  int64_t specified = 0;
  bool ellipsis = false;
  for (const Value& it : items) {
    switch (it.kind) {
      case Value::Kind::Int: ++specified; break;
      case Value::Kind::Slice:
        for (const Value& part : it.items)
          if (!part.is_none() && part.kind != Value::Kind::Int) return std::nullopt;
        ++specified;
        break;
      case Value::Kind::None: break;
      case Value::Kind::Ellipsis:
        if (ellipsis) throw MetaError("an index can only have a single ellipsis ('...')");
        ellipsis = true;
        break;
      default: return std::nullopt;
    }
  }
  if (x.dim() == 0 && specified > 0) {
    if (items.size() == 1 && items[0].kind == Value::Kind::Int) throw MetaError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or `tensor.item<T>()` in C++ to convert a 0-dim tensor to a number");
    return std::nullopt;
  }
  if (specified > x.dim())
    throw MetaError("too many indices for tensor of dimension " + std::to_string(x.dim()));
  Sliced t{x.sizes, x.strides};
  int64_t dim = 0;
  for (const Value& it : items) {
    switch (it.kind) {
      case Value::Kind::Int: {
        SymInt size = t.sizes[dim];
        SymInt i = it.as_symint();
        if (i < -size || i >= size)
          throw MetaError("index " + i.str() + " is out of bounds for dimension " + std::to_string(dim) +
                          " with size " + size.str());
        t.sizes.erase(t.sizes.begin() + dim);
        t.strides.erase(t.strides.begin() + dim);
        break;
      }
      case Value::Kind::Slice: {
        int64_t step = it.items[2].is_none() ? 1 : it.items[2].as_symint().guard_int();
        if (step <= 0) throw MetaError("step must be greater than zero");
        apply_slice(t, dim, it.items[0], it.items[1], step);
        ++dim;
        break;
      }
      case Value::Kind::None: {
        int64_t nd = static_cast<int64_t>(t.sizes.size());
        SymInt stride = dim >= nd ? SymInt(1) : t.sizes[dim] * t.strides[dim];
        t.sizes.insert(t.sizes.begin() + dim, 1);
        t.strides.insert(t.strides.begin() + dim, stride);
        ++dim;
        break;
      }
      case Value::Kind::Ellipsis: dim += x.dim() - specified; break;
      default: return std::nullopt;
    }
  }
  return t;
}

SymShape target_sizes(const MetaContext& ctx, std::string_view other) {
  return ctx.tensor(other).sizes;
}

}  // namespace

std::optional<ValueMeta> meta_view(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor(ctx.op.schema.params[0].name);
  if (op_is(ctx, {Op::view_as})) return reshape_of(x, target_sizes(ctx, "other"), true);
  if (op_is(ctx, {Op::reshape_as})) return reshape_of(x, target_sizes(ctx, "other"), false);
  if (op_is(ctx, {Op::flatten})) {
    if (x.dim() == 0) return view_of(x, {1}, {1});
    int64_t s = wrap_dim(ctx.arg("start_dim").i, x.dim()), e = wrap_dim(ctx.arg("end_dim").i, x.dim());
    if (s > e) throw MetaError("flatten() has invalid args: start_dim cannot come after end_dim");
    if (s == e) return ValueMeta::of_tensor(x);
    SymShape shape(x.sizes.begin(), x.sizes.begin() + s);
    SymInt prod = 1;
    for (int64_t d = s; d <= e; ++d) prod *= x.sizes[d];
    shape.push_back(prod);
    shape.insert(shape.end(), x.sizes.begin() + e + 1, x.sizes.end());
    return reshape_of(x, shape, false);
  }
  if (op_is(ctx, {Op::unflatten})) {
    const Value& sizes_v = ctx.arg("sizes");
    if (!all_ints(sizes_v) || sizes_v.items.empty()) return std::nullopt;
    if (x.dim() == 0) throw MetaError("Cannot unflatten a 0-dim tensor");
    int64_t d = wrap_dim(ctx.arg("dim").i, x.dim());
    SymShape part = infer_size(SymShape(int_list(sizes_v)), x.sizes[d]);
    SymShape shape(x.sizes.begin(), x.sizes.begin() + d);
    shape.insert(shape.end(), part.begin(), part.end());
    shape.insert(shape.end(), x.sizes.begin() + d + 1, x.sizes.end());
    auto strides = view_strides(x, shape);
    if (!strides) return std::nullopt;  // view in some torch versions, reshape in others
    return view_of(x, shape, std::move(*strides));
  }
  const Value& shape_v = ctx.args[1];
  if (!all_ints(shape_v)) return std::nullopt;
  SymShape shape = infer_size(sym_int_list(shape_v), x.numel());
  return reshape_of(x, shape, op_is(ctx, {Op::view}));
}

std::optional<ValueMeta> meta_permute(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor(ctx.op.schema.params[0].name);
  int64_t nd = x.dim();
  std::vector<int64_t> perm;
  if (op_is(ctx, {Op::t})) {
    if (nd > 2) throw MetaError("t() expects a tensor with <= 2 dimensions, but self is " + std::to_string(nd) + "D");
    if (nd < 2) return ValueMeta::of_tensor(x);
    perm = {1, 0};
  } else if (op_is(ctx, {Op::transpose})) {
    int64_t d0 = wrap_dim(ctx.arg("dim0").i, nd), d1 = wrap_dim(ctx.arg("dim1").i, nd);
    if (nd == 0) return ValueMeta::of_tensor(x);
    perm.resize(static_cast<size_t>(nd));
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[d0], perm[d1]);
  } else if (op_is(ctx, {Op::movedim})) {
    const Value& src_v = ctx.arg("source");
    const Value& dst_v = ctx.arg("destination");
    if (!all_ints(src_v) || !all_ints(dst_v)) return std::nullopt;
    if (src_v.items.size() != dst_v.items.size())
      throw MetaError("movedim: Invalid source or destination dims: source (" + shape_str(int_list(src_v)) +
                      " dims) should contain the same number of dims as destination (" + shape_str(int_list(dst_v)) + " dims)");
    std::vector<int64_t> src, dst;
    for (int64_t s : int_list(src_v)) src.push_back(wrap_dim(s, nd));
    for (int64_t d : int_list(dst_v)) dst.push_back(wrap_dim(d, nd));
    for (const auto* v : {&src, &dst}) {
      std::vector<int64_t> sorted = *v;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        throw MetaError("movedim: repeated dim in `" + std::string(v == &src ? "source" : "destination") + "` (" +
                        shape_str(v == &src ? int_list(src_v) : int_list(dst_v)) + ")");
    }
    if (nd == 0) return ValueMeta::of_tensor(x);
    perm.assign(static_cast<size_t>(nd), -1);
    std::vector<bool> used(static_cast<size_t>(nd), false);
    for (size_t i = 0; i < src.size(); ++i) {
      perm[dst[i]] = src[i];
      used[src[i]] = true;
    }
    int64_t next = 0;
    for (int64_t& p : perm) {
      if (p >= 0) continue;
      while (used[next]) ++next;
      p = next++;
    }
  } else {
    const Value& dims_v = ctx.arg("dims");
    if (!all_ints(dims_v)) return std::nullopt;
    if (static_cast<int64_t>(dims_v.items.size()) != nd)
      throw MetaError(
          "permute(sparse_coo): number of dimensions in the tensor input does not match the length of the "
          "desired ordering of dimensions i.e. input.dim() = " +
          std::to_string(nd) +
          " is not equal to len(dims) = " + std::to_string(dims_v.items.size()));
    std::vector<bool> seen(static_cast<size_t>(nd), false);
    for (int64_t d : int_list(dims_v)) {
      int64_t w = wrap_dim(d, nd);
      if (seen[w]) throw MetaError("permute(): duplicate dims are not allowed.");
      seen[w] = true;
      perm.push_back(w);
    }
  }
  SymShape sizes, strides;
  for (int64_t p : perm) {
    sizes.push_back(x.sizes[p]);
    strides.push_back(x.strides[p]);
  }
  return view_of(x, std::move(sizes), std::move(strides));
}

std::optional<ValueMeta> meta_unsqueeze(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  int64_t d = wrap_dim(ctx.arg("dim").i, x.dim() + 1);
  auto sizes = x.sizes, strides = x.strides;
  SymInt new_stride = d >= x.dim() ? SymInt(1) : x.sizes[d] * x.strides[d];
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, new_stride);
  return view_of(x, std::move(sizes), std::move(strides));
}

std::optional<ValueMeta> meta_squeeze(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const Value& dim_v = ctx.arg("dim");
  std::optional<int64_t> only;
  if (!dim_v.is_none()) only = wrap_dim(dim_v.i, x.dim());
  SymShape sizes, strides;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.sizes[d] == 1 && (!only || *only == d)) continue;
    sizes.push_back(x.sizes[d]);
    strides.push_back(x.strides[d]);
  }
  return view_of(x, std::move(sizes), std::move(strides));
}

std::optional<ValueMeta> meta_expand(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("self");
  SymShape target;
  if (op_kind(ctx.op.id) == Op::expand_as) {
    target = target_sizes(ctx, "other");
  } else {
    const Value& size_v = ctx.arg("size");
    if (!all_ints(size_v)) return std::nullopt;
    target = sym_int_list(size_v);
  }
  if (target.size() < x.sizes.size())
    throw MetaError("expand(torch.FloatTensor{" + shape_str(x.sizes) + "}, size=" + shape_str(target) +
                    "): the number of sizes provided (" + std::to_string(target.size()) +
                    ") must be greater or equal to the number of dimensions in the tensor (" + std::to_string(x.dim()) + ")");
  size_t offset = target.size() - x.sizes.size();
  SymShape sizes(target.size()), strides(target.size());
  for (size_t i = target.size(); i-- > 0;) {
    if (i < offset) {
      if (target[i] < 0) throw MetaError("The expanded size of the tensor (-1) isn't allowed in a leading, non-existing dimension " + std::to_string(i));
      sizes[i] = target[i];
      strides[i] = 0;  // NB: torch uses size * stride of the next dim when the size is 1; see below
      if (target[i] == 1) strides[i] = i + 1 < target.size() ? sizes[i + 1] * strides[i + 1] : SymInt(1);
      continue;
    }
    SymInt s = x.sizes[i - offset];
    SymInt want = target[i] == -1 ? s : target[i];
    if (s == want) {
      sizes[i] = s;
      strides[i] = x.strides[i - offset];
    } else if (s == 1) {
      if (want < 0) throw MetaError("Trying to create tensor with negative dimension " + want.str());
      sizes[i] = want;
      strides[i] = 0;
    } else {
      throw MetaError("The expanded size of the tensor (" + want.str() + ") must match the existing size (" +
                      s.str() + ") at non-singleton dimension " + std::to_string(i) + ".  Target sizes: " +
                      shape_str(target) + ".  Tensor sizes: " + shape_str(x.sizes));
    }
  }
  return view_of(x, std::move(sizes), std::move(strides));
}

std::optional<ValueMeta> meta_narrow(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  if (x.dim() == 0) throw MetaError("narrow() cannot be applied to a 0-dim tensor.");
  if (!is_int(ctx.arg("start")) || !is_int(ctx.arg("length"))) return std::nullopt;
  int64_t d = wrap_dim(ctx.arg("dim").i, x.dim());
  SymInt size = x.sizes[d];
  SymInt start = ctx.arg("start").i;
  int64_t length = ctx.arg("length").i;
  if (start < -size || start > size) throw MetaError("start out of range (expected to be in range of [" + (-size).str() + ", " + size.str() + "], but got " + start.str() + ")");
  if (start < 0) start += size;
  if (length < 0) throw MetaError("narrow(): length must be non-negative.");
  if (start + length > size)
    throw MetaError("start (" + start.str() + ") + length (" + std::to_string(length) +
                    ") exceeds dimension size (" + size.str() + ").");
  auto sizes = x.sizes;
  sizes[d] = length;
  return view_of(x, std::move(sizes), x.strides);
}

std::optional<ValueMeta> meta_select(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  if (x.dim() == 0) throw MetaError("select() cannot be applied to a 0-dim tensor.");
  if (!is_int(ctx.arg("index"))) return std::nullopt;
  int64_t d = wrap_dim(ctx.arg("dim").i, x.dim());
  int64_t i = ctx.arg("index").i;
  if (i < -x.sizes[d] || i >= x.sizes[d])
    throw MetaError("select(): index " + std::to_string(i) + " out of range for tensor of size " + shape_str(x.sizes) +
                    " at dimension " + std::to_string(d));
  auto sizes = x.sizes, strides = x.strides;
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return view_of(x, std::move(sizes), std::move(strides));
}

std::optional<ValueMeta> meta_split(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor(ctx.op.schema.params[0].name);
  if (x.dim() == 0) return std::nullopt;
  int64_t d = wrap_dim(ctx.arg("dim").i, x.dim());
  int64_t size = x.sizes[d];
  std::vector<int64_t> pieces;
  if (op_is(ctx, {Op::unbind})) {
    std::vector<ValueMeta> items;
    auto sizes = x.sizes, strides = x.strides;
    sizes.erase(sizes.begin() + d);
    strides.erase(strides.begin() + d);
    for (int64_t i = 0; i < size; ++i) items.push_back(view_of(x, sizes, strides));
    return ValueMeta::tuple(std::move(items));
  }
  if (op_is(ctx, {Op::chunk})) {
    if (!is_int(ctx.arg("chunks"))) return std::nullopt;
    int64_t chunks = ctx.arg("chunks").i;
    if (chunks <= 0) throw MetaError("chunk expects `chunks` to be greater than 0, got: " + std::to_string(chunks));
    if (size == 0) return std::nullopt;
    int64_t split = (size + chunks - 1) / chunks;
    for (int64_t at = 0; at < size; at += split) pieces.push_back(std::min(split, size - at));
  } else {
    const Value& s = ctx.arg("split_size_or_sections");
    if (is_int(s)) {
      int64_t split = s.i;
      if (split < 0) throw MetaError("split expects split_size be non-negative, but got split_size=" + std::to_string(split));
      if (split == 0 && size != 0) throw MetaError("split_size can only be 0 if dimension size is 0, but got dimension size of " + std::to_string(size));
      if (size == 0) return std::nullopt;
      for (int64_t at = 0; at < size; at += split) pieces.push_back(std::min(split, size - at));
    } else if (all_ints(s)) {
      pieces = int_list(s);
      int64_t sum = 0;
      for (int64_t p : pieces) {
        if (p < 0) throw MetaError("split_with_sizes expects split_sizes have only non-negative entries, but got split_sizes=" + shape_str(pieces));
        sum += p;
      }
      if (sum != size)
        throw MetaError("split_with_sizes expects split_sizes to sum exactly to " + std::to_string(size) +
                        " (input tensor's size at dimension " + std::to_string(d) + "), but got split_sizes=" + shape_str(pieces));
    } else {
      return std::nullopt;
    }
  }
  std::vector<ValueMeta> items;
  for (int64_t p : pieces) {
    auto sizes = x.sizes;
    sizes[d] = p;
    items.push_back(view_of(x, std::move(sizes), x.strides));
  }
  return ValueMeta::tuple(std::move(items));
}

std::optional<ValueMeta> meta_contiguous(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor(ctx.op.schema.params[0].name);
  const std::string& mf = ctx.arg("memory_format").s;
  TensorMeta out = x;
  if (mf == "contiguous_format") {
    out.strides = TensorMeta::contiguous_strides(x.sizes);
    if (op_kind(ctx.op.id) == Op::contiguous && x.is_contiguous()) return ValueMeta::of_tensor(x);
  } else if (mf == "channels_last") {
    if (x.dim() != 4) throw MetaError("required rank 4 tensor to use channels_last format");
    if (op_kind(ctx.op.id) == Op::contiguous && is_channels_last_contiguous(x)) return ValueMeta::of_tensor(x);
    out.strides = channels_last_strides(x.sizes);
  } else if (mf == "preserve_format" && op_kind(ctx.op.id) == Op::clone) {
    auto s = preserve_format_strides(x);
    if (!s) return std::nullopt;
    out.strides = *s;
  } else {
    return std::nullopt;
  }
  return ValueMeta::of_tensor(std::move(out));
}

std::optional<ValueMeta> meta_repeat(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("self");
  const Value& r = ctx.arg("repeats");
  if (!all_ints(r)) return std::nullopt;
  std::vector<int64_t> reps = int_list(r);
  if (static_cast<int64_t>(reps.size()) < x.dim())
    throw MetaError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor");
  SymShape sizes(reps.size());
  size_t offset = reps.size() - x.sizes.size();
  for (size_t i = 0; i < reps.size(); ++i) {
    if (reps[i] < 0) throw MetaError("Trying to create tensor with negative dimension " + std::to_string(reps[i]));
    sizes[i] = reps[i] * (i < offset ? SymInt(1) : x.sizes[i - offset]);
  }
  return fresh(sizes, x.dtype, x.device, x.requires_grad);
}

std::optional<ValueMeta> meta_tril(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  if (x.dim() < 2) throw MetaError(ctx.op.name + ": input tensor must have at least 2 dimensions");
  return fresh(x.sizes, x.dtype, x.device, x.requires_grad);
}

std::optional<ValueMeta> meta_cat(const MetaContext& ctx) {
  const Value& list = ctx.arg("tensors");
  bool stack = op_kind(ctx.op.id) == Op::stack;
  std::vector<const TensorMeta*> ts = tensors_of(list.items, ctx.graph);
  if (ts.size() != list.items.size()) return std::nullopt;
  if (ts.empty()) throw MetaError(stack ? "stack expects a non-empty TensorList" : "torch.cat(): expected a non-empty list of Tensors");
  DType dt = result_type(list.items, ctx.graph);
  Device dev = common_device(ts);
  bool grad = grad_result(ts, dt);
  if (stack) {
    for (size_t i = 1; i < ts.size(); ++i)
      if (ts[i]->sizes != ts[0]->sizes)
        throw MetaError("stack expects each tensor to be equal size, but got " + shape_str(ts[0]->sizes) + " at entry 0 and " +
                        shape_str(ts[i]->sizes) + " at entry " + std::to_string(i));
    int64_t d = wrap_dim(ctx.arg("dim").i, ts[0]->dim() + 1);
    // Stacking inputs of up to 2 dims gives a contiguous result whatever their layout; higher
    // ranks can keep a layout of the inputs (channels-last ...): left to the fallback.
    if (ts[0]->dim() >= 3)
      for (const TensorMeta* t : ts)
        if (!t->is_contiguous()) return std::nullopt;
    SymShape sizes = ts[0]->sizes;
    sizes.insert(sizes.begin() + d, static_cast<int64_t>(ts.size()));
    return fresh(sizes, dt, dev, grad);
  }
  // Legacy behaviour kept by torch: 1-d empty tensors are skipped.
  std::vector<const TensorMeta*> used;
  for (const TensorMeta* t : ts)
    if (!(t->dim() == 1 && t->sizes[0] == 0)) used.push_back(t);
  if (used.empty()) return std::nullopt;
  const TensorMeta& first = *used[0];
  if (first.dim() == 0) throw MetaError("zero-dimensional tensor (at position 0) cannot be concatenated");
  int64_t d = wrap_dim(ctx.arg("dim").i, first.dim());
  SymShape sizes = first.sizes;
  sizes[d] = 0;
  for (size_t i = 0; i < used.size(); ++i) {
    const TensorMeta& t = *used[i];
    if (t.dim() != first.dim())
      throw MetaError("Tensors must have same number of dimensions: got " + std::to_string(first.dim()) + " and " + std::to_string(t.dim()));
    for (int64_t k = 0; k < t.dim(); ++k)
      if (k != d && t.sizes[k] != first.sizes[k])
        throw MetaError("Sizes of tensors must match except in dimension " + std::to_string(d) + ". Expected size " +
                        first.sizes[k].str() + " but got size " + t.sizes[k].str() +
                        " for tensor number " + std::to_string(i) + " in the list.");
    sizes[d] += t.sizes[d];
  }
  // The result takes the inputs' suggested memory format when they all (skipped ones included)
  // agree on channels-last.
  bool all_cl = true;
  for (const TensorMeta* t : ts) all_cl = all_cl && strides_like_channels_last(*t);
  TensorMeta out = TensorMeta::contiguous(sizes, dt, dev);
  if (all_cl) out.strides = channels_last_strides(sizes);
  out.requires_grad = grad;
  return ValueMeta::of_tensor(std::move(out));
}

std::optional<ValueMeta> meta_getitem(const MetaContext& ctx) {
  const TensorMeta* x = tensor_or_null(ctx.args[0], ctx.graph);
  if (!x) return std::nullopt;
  auto t = basic_index(*x, ctx.args[1]);
  if (!t) return std::nullopt;
  return view_of(*x, std::move(t->sizes), std::move(t->strides));
}

std::optional<ValueMeta> meta_setitem(const MetaContext& ctx) {
  const TensorMeta* x = tensor_or_null(ctx.args[0], ctx.graph);
  if (!x || has_internal_overlap(*x)) return std::nullopt;
  auto t = basic_index(*x, ctx.args[1]);
  if (!t) return std::nullopt;
  const Value& value = ctx.args[2];
  if (const TensorMeta* v = tensor_or_null(value, ctx.graph)) {
    if (v->device != x->device && !(v->dim() == 0 && v->device.type == Device::Type::CPU)) return std::nullopt;
    // Leading 1s of the value are dropped before broadcasting (x[0] = y[None]).
    SymShape vs = v->sizes;
    while (!vs.empty() && vs.front() == 1) vs.erase(vs.begin());
    SymShape b = broadcast_shapes(t->sizes, vs);
    if (b != t->sizes)
      throw MetaError("shape mismatch: value tensor of shape " + shape_str(v->sizes) +
                      " cannot be broadcast to indexing result of shape " + shape_str(t->sizes));
  } else if (!is_scalar_value(value, ctx.graph)) {
    return std::nullopt;
  }
  return ValueMeta::of(ValueMeta::Kind::None);
}

std::optional<ValueMeta> meta_index(const MetaContext& ctx) {
  if (op_is(ctx, {Op::embedding})) {
    const TensorMeta& idx = ctx.tensor("input");
    const TensorMeta& w = ctx.tensor("weight");
    if (w.dim() != 2) throw MetaError("'weight' must be 2-D");
    if (idx.dtype != DType::Int64 && idx.dtype != DType::Int32) return std::nullopt;
    const Value& pad = ctx.arg("padding_idx");
    if (is_int(pad) && (pad.i >= w.sizes[0] || pad.i < -w.sizes[0]))
      throw MetaError("Padding_idx must be within num_embeddings");
    SymShape sizes = idx.sizes;
    sizes.push_back(w.sizes[1]);
    return fresh(sizes, w.dtype, w.device, w.requires_grad);
  }
  const TensorMeta& x = ctx.tensor("input");
  const TensorMeta& index = ctx.tensor("index");
  int64_t d = wrap_dim(ctx.arg("dim").i, x.dim());
  if (op_is(ctx, {Op::index_select})) {
    if (index.dim() > 1) throw MetaError("index_select(): Index is supposed to be a vector");
    if (index.dtype != DType::Int64 && index.dtype != DType::Int32) return std::nullopt;
    if (x.dim() == 0) return std::nullopt;
    SymShape sizes = x.sizes;
    sizes[d] = index.numel();
    return fresh(sizes, x.dtype, x.device, x.requires_grad);
  }
  if (index.dtype != DType::Int64) return std::nullopt;
  if (index.dim() != x.dim() && !(x.dim() == 0 && index.dim() <= 1) && !(index.dim() == 0 && x.dim() <= 1))
    throw MetaError("Index tensor must have the same number of dimensions as input tensor");
  if (x.dim() == 0 || index.dim() == 0) return std::nullopt;
  for (int64_t k = 0; k < x.dim(); ++k)
    if (k != d && index.sizes[k] > x.sizes[k]) {
      if (op_is(ctx, {Op::gather}))
        throw MetaError("Size does not match at dimension " + std::to_string(k) + " expected index " + shape_str(index.sizes) +
                        " to be smaller than self " + shape_str(x.sizes) + " apart from dimension " + std::to_string(d));
      return std::nullopt;
    }
  if (op_is(ctx, {Op::gather})) return fresh(index.sizes, x.dtype, x.device, x.requires_grad);
  // scatter / scatter_add: a copy of the input.
  const Value& src = ctx.arg("src");
  bool grad = x.requires_grad;
  if (const TensorMeta* s = tensor_or_null(src, ctx.graph)) {
    if (s->dtype != x.dtype || s->dim() != x.dim()) return std::nullopt;
    for (int64_t k = 0; k < x.dim(); ++k)
      if (index.sizes[k] > s->sizes[k]) return std::nullopt;
    grad = grad || s->requires_grad;
  } else if (!src.is_number()) {
    return std::nullopt;
  }
  return fresh(x.sizes, x.dtype, x.device, grad && is_float_like(x.dtype));
}

std::optional<ValueMeta> meta_item(const MetaContext& ctx) {
  const TensorMeta* x = tensor_or_null(ctx.args[0], ctx.graph);
  if (!x) return std::nullopt;
  const SymInt n = x->numel();
  if (n.is_symbolic() || n.hint() != 1) throw MetaError("Tensor.item() of a tensor that may not have one element");
  if (is_floating(x->dtype)) return ValueMeta::of(ValueMeta::Kind::Float);
  // NB: an int of any value (no size symbol: a size it decides is not modelled).
  if (is_integral(x->dtype, false)) return ValueMeta::of(ValueMeta::Kind::Int);
  throw MetaError("Tensor.item() of a " + std::string(dtype_name(x->dtype)) + " tensor is not captured");
}

}  // namespace ff
