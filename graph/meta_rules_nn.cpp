// Meta rules for matrix products, linear, convolutions, pooling, padding and creation ops.
#include <algorithm>
#include <cmath>

#include "graph/meta_rules.h"
#include "graph/op.h"
#include "graph/meta_rules_util.h"

namespace ff {
using namespace meta_util;

namespace {

bool is_float_like(DType t) { return is_floating(t) || is_complex(t); }

bool unsupported_cpu_half(const TensorMeta& t) { return missing_cpu_kernel(t); }

void check_same_dtype(const TensorMeta& a, const TensorMeta& b) {
  if (a.dtype != b.dtype)
    throw MetaError("expected m1 and m2 to have the same dtype, but got: " + std::string(dtype_name(a.dtype)) +
                    " != " + std::string(dtype_name(b.dtype)));
}

void check_mm(const SymShape& a, const SymShape& b) {
  const SymInt &k1 = a.back(), &k2 = b[b.size() - 2];
  if (k1 != k2)
    throw MetaError("mat1 and mat2 shapes cannot be multiplied (" + a[a.size() - 2].str() + "x" + k1.str() + " and " +
                    k2.str() + "x" + b.back().str() + ")");
}

// An int, or a list of ints of length 1 or `n`, expanded to `n` values.
std::optional<std::vector<int64_t>> expand_param(const Value& v, size_t n) {
  if (is_int(v)) return std::vector<int64_t>(n, v.i);
  if (!all_ints(v)) return std::nullopt;
  std::vector<int64_t> out = int_list(v);
  if (out.size() == 1) out.assign(n, out[0]);
  if (out.size() != n) return std::nullopt;
  return out;
}

std::optional<Device> device_arg(const MetaContext& ctx, const Device& fallback) {
  int i = ctx.op.schema.index_of("device");
  if (i < 0) return fallback;
  const Value& v = ctx.args[static_cast<size_t>(i)];
  if (v.is_none()) return fallback;
  std::optional<Device> d;
  if (v.kind == Value::Kind::Device) d = v.device;
  else if (v.kind == Value::Kind::Str) d = Device::parse(v.s);
  if (!d) throw MetaError("Expected one of cpu, cuda, meta device type at start of device string: " + v.s);
  if (d->type == Device::Type::CUDA && d->index < 0) return std::nullopt;  // the current device: not known here
  if (d->type == Device::Type::CPU) d->index = -1;
  return d;
}

// Output size of one pooled/convolved dim (torch's pooling_output_shape).
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// A result allocated in the input's suggest_memory_format(): channels-last when the input's
// strides look channels-last, else contiguous (pooling, constant padding, norms on CPU).
std::optional<ValueMeta> suggested_format(const TensorMeta& x, const SymShape& sizes, DType dtype, bool grad) {
  TensorMeta out = TensorMeta::contiguous(sizes, dtype, x.device);
  out.requires_grad = grad;
  if (x.dim() == 4 && sizes.size() == 4 && strides_like_channels_last(x)) out.strides = channels_last_strides(sizes);
  return ValueMeta::of_tensor(std::move(out));
}

}  // namespace

std::optional<ValueMeta> meta_matmul(const MetaContext& ctx) {
  bool has_self = op_is(ctx, {Op::addmm, Op::baddbmm});
  const TensorMeta* a = tensor_or_null(ctx.args[has_self ? 1 : 0], ctx.graph);
  const TensorMeta* b = tensor_or_null(ctx.args[has_self ? 2 : 1], ctx.graph);
  if (!a || !b) return std::nullopt;
  if (a->dtype == DType::Bool || is_complex(a->dtype) || unsupported_cpu_half(*a)) return std::nullopt;
  const int64_t da = a->dim(), db = b->dim();
  bool grad = a->requires_grad || b->requires_grad;
  SymShape sizes;
  if (op_is(ctx, {Op::mm, Op::addmm})) {
    if (da != 2) throw MetaError(op_is(ctx, {Op::mm}) ? "self must be a matrix" : "mat1 must be a matrix, got " + std::to_string(da) + "-D tensor");
    if (db != 2) throw MetaError(op_is(ctx, {Op::mm}) ? "mat2 must be a matrix" : "mat2 must be a matrix, got " + std::to_string(db) + "-D tensor");
    check_mm(a->sizes, b->sizes);
    check_same_dtype(*a, *b);
    sizes = {a->sizes[0], b->sizes[1]};
  } else if (op_is(ctx, {Op::bmm, Op::baddbmm})) {
    if (da != 3) throw MetaError("batch1 must be a 3D tensor");
    if (db != 3) throw MetaError("batch2 must be a 3D tensor");
    if (a->sizes[0] != b->sizes[0])
      throw MetaError("batch1 and batch2 must have same number of batches, got " + std::to_string(a->sizes[0]) + " and " +
                      std::to_string(b->sizes[0]));
    if (a->sizes[2] != b->sizes[1])
      throw MetaError("Expected size for first two dimensions of batch2 tensor to be: [" + std::to_string(a->sizes[0]) +
                      ", " + std::to_string(a->sizes[2]) + "] but got: [" + std::to_string(b->sizes[0]) + ", " +
                      std::to_string(b->sizes[1]) + "].");
    check_same_dtype(*a, *b);
    sizes = {a->sizes[0], a->sizes[1], b->sizes[2]};
  } else {  // matmul, @
    if (da == 0 || db == 0)
      throw MetaError("both arguments to matmul need to be at least 1D, but they are " + std::to_string(da) + "D and " +
                      std::to_string(db) + "D");
    if (a->dtype != b->dtype) return std::nullopt;  // the message depends on the path taken
    if (da == 1 && db == 1) {
      if (a->sizes[0] != b->sizes[0])
        throw MetaError("inconsistent tensor size, expected tensor [" + std::to_string(a->sizes[0]) +
                        "] and src [" + std::to_string(b->sizes[0]) + "] to have the same number of elements, but got " +
                        std::to_string(a->sizes[0]) + " and " + std::to_string(b->sizes[0]) + " elements respectively");
    } else if (da <= 2 && db >= 3) {
      return std::nullopt;  // folded through transposes: the layout depends on the torch version
    } else {
      // Matrix dims of each side (a vector is a row for the left side, a column for the right).
      SymInt k1 = a->sizes.back();
      SymInt k2 = db == 1 ? b->sizes[0] : b->sizes[db - 2];
      if (k1 != k2) {
        int64_t rows = da == 1 ? int64_t{1} : a->numel().hint() / std::max<int64_t>(k1.hint(), 1);
        throw MetaError("mat1 and mat2 shapes cannot be multiplied (" + std::to_string(rows) + "x" + k1.str() +
                        " and " + k2.str() + "x" + (db == 1 ? std::string("1") : b->sizes.back().str()) + ")");
      }
      SymShape batch_a(a->sizes.begin(), a->sizes.end() - std::min<int64_t>(da, 2));
      SymShape batch_b(b->sizes.begin(), b->sizes.end() - std::min<int64_t>(db, 2));
      sizes = broadcast_shapes(batch_a, batch_b);
      if (da >= 2) sizes.push_back(a->sizes[da - 2]);
      if (db >= 2) sizes.push_back(b->sizes.back());
    }
  }
  if (has_self) {
    const TensorMeta* self = tensor_or_null(ctx.args[0], ctx.graph);
    if (!self || self->dtype != a->dtype) return std::nullopt;
    if (broadcast_shapes(self->sizes, sizes) != sizes)
      throw MetaError("The expanded size of the tensor (" + std::to_string(sizes.back()) + ") must match the existing size (" +
                      std::to_string(self->sizes.back()) + ") at non-singleton dimension " + std::to_string(sizes.size() - 1) +
                      ".  Target sizes: " + shape_str(sizes) + ".  Tensor sizes: " + shape_str(self->sizes));
    for (const char* s : {"beta", "alpha"}) {
      const Value& v = ctx.arg(s);
      if (!v.is_number() || (v.kind == Value::Kind::Float && !is_float_like(a->dtype))) return std::nullopt;
    }
    grad = grad || self->requires_grad;
  }
  return fresh(sizes, a->dtype, common_device({a, b}), grad);
}

std::optional<ValueMeta> meta_linear(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const TensorMeta& w = ctx.tensor("weight");
  if (w.dim() != 2 || x.dim() < 1 || !is_floating(x.dtype) || unsupported_cpu_half(x)) return std::nullopt;
  if (x.sizes.back() != w.sizes[1]) {
    int64_t rows = x.numel().hint() / std::max<int64_t>(x.sizes.back().hint(), 1);
    throw MetaError("mat1 and mat2 shapes cannot be multiplied (" + std::to_string(rows) + "x" + x.sizes.back().str() +
                    " and " + w.sizes[1].str() + "x" + w.sizes[0].str() + ")");
  }
  if (x.dtype != w.dtype) return std::nullopt;
  bool grad = x.requires_grad || w.requires_grad;
  if (const TensorMeta* b = tensor_or_null(ctx.arg("bias"), ctx.graph)) {
    if (b->dtype != x.dtype || b->dim() > 1 || (b->dim() == 1 && b->sizes[0] != w.sizes[0])) return std::nullopt;
    grad = grad || b->requires_grad;
  }
  SymShape sizes(x.sizes.begin(), x.sizes.end() - 1);  // NB: x.dim() >= 1 (checked above)
  sizes.push_back(w.sizes[0]);
  return fresh(sizes, x.dtype, x.device, grad);
}

// scaled_dot_product_attention, in the layouts eager's kernels give; the meta-tensor fallback says
// contiguous where they do not, and specialises symbolic sequence lengths (dynamic shapes): this is
// written over SymInts. q, k and v of the same batch and heads with unit-stride head dims, no
// dropout, no grad:
// - CPU (as measured on torch 2.13): the flash kernel when E == Ev, its result laid out like q
//   (contiguous q, or q transposed from (B, L, H, E)); otherwise the math path's matmul gives a
//   contiguous result.
// - CUDA (as measured on torch 2.11, H100/H200): float32 runs the memory-efficient kernel, whose
//   result is q transposed from a contiguous (B, L, H, E) whatever q's layout; half precision runs
//   flash, laid out like q as on the CPU. Other head dims and dtypes take the math path
//   (contiguous). A kernel choice this misses is caught at run time: the CUDA runtime copies an
//   extern result into the predicted layout.
// Anything else (older torch, dropout, other layouts, requires_grad) is left to the fallback.
std::optional<ValueMeta> meta_sdpa(const MetaContext& ctx) {
  const TensorMeta &q = ctx.tensor("query"), &k = ctx.tensor("key"), &v = ctx.tensor("value");
  const bool cuda = q.device.type == Device::Type::CUDA;
  if (cuda ? !torch_at_least(2, 11) : (q.device.type != Device::Type::CPU || !torch_at_least(2, 13))) return std::nullopt;
  for (const TensorMeta* t : {&q, &k, &v}) {
    if (t->dim() != 4 || t->dtype != q.dtype || t->device != q.device || t->requires_grad) return std::nullopt;
    if (t->strides.back() != 1) return std::nullopt;
    for (const SymInt& s : t->sizes)
      if (s == 0) return std::nullopt;
  }
  const bool half = q.dtype == DType::Float16 || q.dtype == DType::BFloat16;
  if (q.dtype != DType::Float32 && q.dtype != DType::Float64 && q.dtype != DType::BFloat16 && !(cuda && half)) return std::nullopt;
  const Value& dropout = ctx.arg("dropout_p");
  if (!(dropout.kind == Value::Kind::Float && dropout.f == 0.0) && !(dropout.kind == Value::Kind::Int && dropout.i == 0))
    return std::nullopt;
  if (const TensorMeta* m = tensor_or_null(ctx.arg("attn_mask"), ctx.graph)) {
    if (m->dim() != 4 || m->device != q.device || m->requires_grad) return std::nullopt;
  } else if (!ctx.arg("attn_mask").is_none()) {
    return std::nullopt;
  }
  const SymInt &B = q.sizes[0], &H = q.sizes[1], &L = q.sizes[2], &E = q.sizes[3], &S = k.sizes[2], &Ev = v.sizes[3];
  if (k.sizes[0] != B || v.sizes[0] != B || k.sizes[1] != H || v.sizes[1] != H || k.sizes[3] != E || v.sizes[2] != S)
    return std::nullopt;
  SymShape sizes{B, H, L, Ev};
  SymShape contiguous = TensorMeta::contiguous_strides(sizes);
  SymShape blhe{L * H * Ev, Ev, H * Ev, 1};  // q.transpose(1, 2) of a contiguous (B, L, H, E)
  TensorMeta out = TensorMeta::contiguous(sizes, q.dtype, q.device);
  if (E != Ev) return ValueMeta::of_tensor(std::move(out));
  if (cuda) {
    // NB: head dims the fused kernels take; others run the math path.
    int64_t e = E;
    if (e % 8 != 0 || e > (half ? 256 : 128) || q.dtype == DType::Float64) return ValueMeta::of_tensor(std::move(out));
    if (!half) {
      out.strides = blhe;
      return ValueMeta::of_tensor(std::move(out));
    }
  }
  if (q.strides.same_as(contiguous)) return ValueMeta::of_tensor(std::move(out));
  if (!q.strides.same_as(blhe)) return std::nullopt;
  out.strides = blhe;
  return ValueMeta::of_tensor(std::move(out));
}

std::optional<ValueMeta> meta_conv(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const TensorMeta& w = ctx.tensor("weight");
  const size_t spatial = op_kind(ctx.op.id) == Op::conv1d ? 1 : 2;
  const int64_t batched_dims = static_cast<int64_t>(spatial) + 2;
  if (x.dim() != batched_dims && x.dim() != batched_dims - 1) return std::nullopt;
  if (w.dim() != batched_dims) return std::nullopt;
  if (!is_floating(x.dtype) || x.dtype != w.dtype || unsupported_cpu_half(x)) return std::nullopt;
  // On CPU the result is channels-last when the input or the weight is laid out channels-last
  // (2-d convs; oneDNN and the slow path agree), else contiguous. Strides that only resemble
  // channels-last (size-1 dims with other strides) are left to the fallback, as are GPU backends
  // and unbatched inputs (which go through an unsqueeze).
  bool batched = x.dim() == batched_dims;
  bool cl = false;
  if (spatial == 2 && batched) {
    for (const TensorMeta* t : {&x, &w}) {
      if (!strides_like_channels_last(*t)) continue;
      if (t->strides != channels_last_strides(t->sizes)) return std::nullopt;
      cl = true;
    }
  }
  if (x.device.type != Device::Type::CPU || !batched) {
    if (!x.is_contiguous() || !w.is_contiguous()) return std::nullopt;
  }
  if (!is_int(ctx.arg("groups"))) return std::nullopt;
  int64_t groups = ctx.arg("groups").i;
  auto stride = expand_param(ctx.arg("stride"), spatial);
  auto dilation = expand_param(ctx.arg("dilation"), spatial);
  if (!stride || !dilation || groups <= 0) return std::nullopt;
  for (int64_t s : *stride)
    if (s <= 0) return std::nullopt;
  const int64_t lead = x.dim() - static_cast<int64_t>(spatial) - 1;  // index of the channel dim
  // NB: sizes stay symbolic (a batch or an image size of dynamic shapes).
  SymShape in_spatial(x.sizes.begin() + lead + 1, x.sizes.end());
  SymShape k(w.sizes.begin() + 2, w.sizes.end());
  std::vector<int64_t> pad(spatial, 0);
  const Value& pv = ctx.arg("padding");
  bool same = false;
  if (pv.kind == Value::Kind::Str) {
    if (pv.s == "same") same = true;
    else if (pv.s != "valid") throw MetaError("Invalid padding string: '" + pv.s + "'");
  } else {
    auto p = expand_param(pv, spatial);
    if (!p) return std::nullopt;
    pad = *p;
  }
  const SymInt& c = x.sizes[lead];
  if (w.sizes[1] * groups != c)
    throw MetaError("Given groups=" + std::to_string(groups) + ", weight of size " + shape_str(w.sizes) +
                    ", expected input" + shape_str(x.sizes) + " to have " + (w.sizes[1] * groups).str() +
                    " channels, but got " + c.str() + " channels instead");
  if (w.sizes[0] % groups != 0) return std::nullopt;
  bool grad = x.requires_grad || w.requires_grad;
  if (const TensorMeta* b = tensor_or_null(ctx.arg("bias"), ctx.graph)) {
    if (b->dtype != x.dtype || b->dim() != 1 || b->sizes[0] != w.sizes[0]) return std::nullopt;
    grad = grad || b->requires_grad;
  }
  SymShape sizes(x.sizes.begin(), x.sizes.begin() + lead);
  sizes.push_back(w.sizes[0]);
  for (size_t i = 0; i < spatial; ++i) {
    if (same) {
      for (int64_t s : *stride)
        if (s != 1) throw MetaError("padding='same' is not supported for strided convolutions");
      sizes.push_back(in_spatial[i]);
      continue;
    }
    SymInt eff = (*dilation)[i] * (k[i] - 1) + 1;
    if (in_spatial[i] + 2 * pad[i] < eff)
      throw MetaError("Calculated padded input size per channel: (" + (in_spatial[i] + 2 * pad[i]).str() +
                      "). Kernel size: (" + eff.str() + "). Kernel size can't be greater than actual input size");
    sizes.push_back((in_spatial[i] + 2 * pad[i] - eff) / (*stride)[i] + 1);
  }
  TensorMeta out = TensorMeta::contiguous(sizes, x.dtype, x.device);
  if (cl) out.strides = channels_last_strides(sizes);
  out.requires_grad = grad;
  return ValueMeta::of_tensor(std::move(out));
}

std::optional<ValueMeta> meta_pool(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  if (x.dim() != 3 && x.dim() != 4) return std::nullopt;
  if (!is_floating(x.dtype) || unsupported_cpu_half(x)) return std::nullopt;
  for (int64_t d = x.dim() - 3; d < x.dim(); ++d)
    if (x.sizes[d] == 0) return std::nullopt;
  const int64_t h = x.sizes[x.dim() - 2], wdt = x.sizes[x.dim() - 1];
  SymShape sizes(x.sizes.begin(), x.sizes.end() - 2);  // NB: the batch and channels stay symbolic
  if (op_is(ctx, {Op::adaptive_avg_pool2d})) {
    const Value& os = ctx.arg("output_size");
    std::vector<Value> items = os.is_sequence() ? os.items : std::vector<Value>{os, os};
    if (items.size() != 2) return std::nullopt;
    for (int i = 0; i < 2; ++i) {
      if (items[i].is_none()) sizes.push_back(i == 0 ? h : wdt);
      else if (is_int(items[i]) && items[i].i >= 0) sizes.push_back(items[i].i);
      else return std::nullopt;
    }
    return suggested_format(x, sizes, x.dtype, x.requires_grad);
  }
  bool is_max = op_is(ctx, {Op::max_pool2d});
  auto k = expand_param(ctx.arg("kernel_size"), 2);
  const Value& sv = ctx.arg("stride");
  auto s = sv.is_none() || (sv.is_sequence() && sv.items.empty()) ? k : expand_param(sv, 2);
  auto p = expand_param(ctx.arg("padding"), 2);
  auto d = is_max ? expand_param(ctx.arg("dilation"), 2) : std::optional<std::vector<int64_t>>(std::vector<int64_t>{1, 1});
  if (!k || !s || !p || !d) return std::nullopt;
  bool ceil_mode = ctx.arg("ceil_mode").b;
  if (!is_max && !ctx.arg("divisor_override").is_none() && !is_int(ctx.arg("divisor_override"))) return std::nullopt;
  if (!is_max && is_int(ctx.arg("divisor_override")) && ctx.arg("divisor_override").i == 0) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    if ((*k)[i] <= 0 || (*s)[i] <= 0 || (*d)[i] <= 0 || (*p)[i] < 0) return std::nullopt;
    int64_t eff = ((*k)[i] - 1) * (*d)[i] + 1;
    if ((*p)[i] > eff / 2)
      throw MetaError("pad should be at most half of effective kernel size, but got pad=" + std::to_string((*p)[i]) +
                      ", kernel_size=" + std::to_string((*k)[i]) + " and dilation=" + std::to_string((*d)[i]));
    if ((*p)[i] > (*k)[i] / 2) return std::nullopt;  // older torch versions check pad <= kernel / 2
    int64_t out = pooled_size(i == 0 ? h : wdt, (*k)[i], (*p)[i], (*s)[i], (*d)[i], ceil_mode);
    if (out <= 0)
      throw MetaError("Given input size: (" + x.sizes[x.dim() - 3].str() + "x" + std::to_string(h) + "x" +
                      std::to_string(wdt) + "). Calculated output size: (" + x.sizes[x.dim() - 3].str() + "x" +
                      (i == 0 ? std::to_string(out) : sizes.back().str()) + "x...). Output size is too small");
    sizes.push_back(out);
  }
  auto values = suggested_format(x, sizes, x.dtype, x.requires_grad);
  if (!values || !is_max || !ctx.arg("return_indices").b) return values;
  auto indices = suggested_format(x, sizes, DType::Int64, false);
  return ValueMeta::tuple({std::move(*values), std::move(*indices)});
}

std::optional<ValueMeta> meta_pad(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const Value& pv = ctx.arg("pad");
  if (!all_ints(pv)) return std::nullopt;
  std::vector<int64_t> pad = int_list(pv);
  if (pad.size() % 2 != 0) throw MetaError("Padding length must be divisible by 2");
  if (static_cast<int64_t>(pad.size()) > 2 * x.dim())
    throw MetaError("Padding length should be less than or equal to two times the input dimension but got padding length " +
                    std::to_string(pad.size()) + " and input of dimension " + std::to_string(x.dim()));
  if (ctx.arg("mode").s != "constant") return std::nullopt;  // reflect / replicate / circular: fallback
  std::vector<int64_t> sizes = x.sizes;
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    int64_t d = x.dim() - 1 - static_cast<int64_t>(i);
    int64_t out = sizes[d] + pad[2 * i] + pad[2 * i + 1];
    if (out < 0)
      throw MetaError("The input size " + std::to_string(sizes[d]) + ", plus negative padding " + std::to_string(pad[2 * i]) +
                      " and " + std::to_string(pad[2 * i + 1]) +
                      " resulted in a negative output size, which is invalid. "
                      "Check dimension " +
                      std::to_string(d) + " of your input.");
    sizes[d] = out;
  }
  return suggested_format(x, sizes, x.dtype, x.requires_grad);
}

// F.interpolate of a 4-d float tensor in the modes torch's upsample kernels serve (area, antialias and
// bicubic of channels-last inputs are left to the fallback): [N, C, *size], or each spatial size times its scale, rounded down; in
// the input's suggested memory format (a channels-last input gives a channels-last result).
std::optional<ValueMeta> meta_interpolate(const MetaContext& ctx) {
  const TensorMeta& x = ctx.tensor("input");
  const std::string& mode = ctx.arg("mode").s;
  bool nearest = mode == "nearest" || mode == "nearest-exact";
  if (x.dim() != 4 || !is_floating(x.dtype) || !(nearest || mode == "bilinear" || mode == "bicubic")) return std::nullopt;
  if (ctx.arg("antialias").b || (nearest && !ctx.arg("align_corners").is_none())) return std::nullopt;
  // NB: bicubic keeps a channels-last input's layout on torch 2.x, not on 1.13 (CPU).
  if (mode == "bicubic" && strides_like_channels_last(x)) return std::nullopt;
  const Value &size = ctx.arg("size"), &scale = ctx.arg("scale_factor");
  if (size.is_none() == scale.is_none()) return std::nullopt;  // eager raises
  auto pair = [](const Value& v) {  // a number, or a list or tuple of two
    std::vector<Value> out;
    if (v.kind == Value::Kind::List || v.kind == Value::Kind::Tuple) out = v.items;
    else out = {v, v};
    return out;
  };
  std::vector<Value> given = pair(size.is_none() ? scale : size);
  if (given.size() != 2) return std::nullopt;
  SymShape sizes = {x.sizes[0], x.sizes[1]};
  for (size_t i = 0; i < 2; ++i) {
    const Value& v = given[i];
    if (!size.is_none()) {
      if (v.kind != Value::Kind::Int || v.i <= 0) return std::nullopt;
      sizes.push_back(v.i);
      continue;
    }
    const SymInt& in = x.sizes[2 + i];
    if (!v.is_number() || in.is_symbolic()) return std::nullopt;
    double out = std::floor(static_cast<double>(in.hint()) * v.as_double());
    if (!(out >= 1)) return std::nullopt;
    sizes.push_back(static_cast<int64_t>(out));
  }
  if (x.numel() == 0) return std::nullopt;
  return suggested_format(x, sizes, x.dtype, x.requires_grad);
}

std::optional<ValueMeta> meta_creation(const MetaContext& ctx) {
  const std::string& n = ctx.op.name;
  bool like = n.ends_with("_like");
  bool method = n.starts_with("new_");
  const TensorMeta* base = like || method ? &ctx.tensor(ctx.op.schema.params[0].name) : nullptr;
  const Value& layout = ctx.arg("layout");
  if (!layout.is_none() && layout.s != "strided") return std::nullopt;
  bool random = n.starts_with("rand");
  // dtype
  DType dt = base ? base->dtype : default_float_dtype();
  if (op_is(ctx, {Op::arange, Op::full, Op::new_full, Op::full_like})) {
    // fill values and arange bounds must be known numbers
    for (const char* p : {"start", "end", "step", "fill_value"}) {
      if (ctx.op.schema.index_of(p) < 0) continue;
      const Value& v = ctx.arg(p);
      if (!v.is_none() && !v.is_number()) return std::nullopt;
    }
  }
  if (op_is(ctx, {Op::full})) {
    const Value& fv = ctx.arg("fill_value");
    dt = fv.kind == Value::Kind::Bool ? DType::Bool : fv.kind == Value::Kind::Int ? DType::Int64
                                                                                  : default_float_dtype();
  }
  SymShape sizes;
  if (op_is(ctx, {Op::arange})) {
    Value start = ctx.arg("start"), end = ctx.arg("end"), step = ctx.arg("step");
    if (end.is_none()) std::swap(start, end), start = Value::of_int(0);
    bool any_float = false;
    for (const Value* v : {&start, &end, &step}) {
      if (v->kind == Value::Kind::Bool) return std::nullopt;
      any_float = any_float || v->kind == Value::Kind::Float;
    }
    dt = any_float ? default_float_dtype() : DType::Int64;
    dt = dtype_arg(ctx, "dtype", dt);
    if (is_integral(dt, true) && any_float) return std::nullopt;  // truncation rules differ by version
    if (!any_float && (start.sym || end.sym || step.sym)) {
      // A symbolic bound (arange(T)): the length as an expression, the bound checks guarded.
      SymInt lo = start.as_symint(), hi = end.as_symint();
      int64_t st = step.as_symint().guard_int();
      if (st == 0) throw MetaError("step must be nonzero");
      if (st > 0 ? hi < lo : hi > lo) throw MetaError("upper bound and larger bound inconsistent with step sign");
      sizes = {st > 0 ? (hi - lo + (st - 1)) / st : (lo - hi + (-st - 1)) / (-st)};
    } else {
      double a = start.as_double(), b = end.as_double(), st = step.as_double();
      if (st == 0) throw MetaError("step must be nonzero");
      if (!std::isfinite(a) || !std::isfinite(b)) throw MetaError("unsupported range: " + std::to_string(a) + " -> " + std::to_string(b));
      if (!((st > 0 && b >= a) || (st < 0 && b <= a)))
        throw MetaError("upper bound and larger bound inconsistent with step sign");
      int64_t len;
      if (!any_float) {
        int64_t ia = start.i, ib = end.i, is = step.i, sgn = is > 0 ? 1 : -1;
        len = (ib - ia + is - sgn) / is;
      } else {
        len = static_cast<int64_t>(std::ceil((b - a) / st));
      }
      sizes = {len};
    }
  } else if (like) {
    sizes = base->sizes;
  } else {
    const Value& sv = ctx.arg("size");
    if (!all_ints(sv)) return std::nullopt;
    sizes = sym_int_list(sv);
    for (const SymInt& s : sizes)
      if (s < 0) throw MetaError("Trying to create tensor with negative dimension " + s.str() + ": " + shape_str(sizes));
  }
  if (!op_is(ctx, {Op::arange})) dt = dtype_arg(ctx, "dtype", dt);
  if (random && !is_floating(dt)) return std::nullopt;
  auto dev = device_arg(ctx, base ? base->device : Device{});
  if (!dev) return std::nullopt;
  bool requires_grad = ctx.arg("requires_grad").b;
  if (requires_grad && !is_float_like(dt))
    throw MetaError("Only Tensors of floating point and complex dtype can require gradients");
  TensorMeta out = TensorMeta::contiguous(sizes, dt, *dev);
  out.requires_grad = requires_grad;
  int mf_i = ctx.op.schema.index_of("memory_format");
  std::string mf = mf_i < 0 ? "contiguous_format" : ctx.args[static_cast<size_t>(mf_i)].s;
  if (mf == "channels_last") {
    if (out.dim() != 4) throw MetaError("required rank 4 tensor to use channels_last format");
    out.strides = channels_last_strides(sizes);
  } else if (mf == "preserve_format") {
    auto s = preserve_format_strides(*base);
    if (!s) return std::nullopt;
    out.strides = *s;
  } else if (mf != "contiguous_format") {
    return std::nullopt;
  }
  return ValueMeta::of_tensor(std::move(out));
}

std::optional<ValueMeta> meta_rng_state(const MetaContext& ctx) {
  // NB: get_rng_state's state is a CPU uint8 tensor whose size is the generator's: reading it has
  // no effect, so the fallback (which calls it) types it.
  if (op_is(ctx, {Op::get_rng_state, Op::cuda_get_rng_state})) return std::nullopt;
  if (op_is(ctx, {Op::set_rng_state, Op::cuda_set_rng_state})) {
    const TensorMeta& s = ctx.tensor("new_state");
    if (s.dtype != DType::UInt8 || s.device.type != Device::Type::CPU) return std::nullopt;
  }
  return ValueMeta::of(ValueMeta::Kind::None);
}

}  // namespace ff
