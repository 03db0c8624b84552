// More rules of the lowering table: activations, casts, clamps and the like, each a short
// composition of loop IR primitives.
#include <algorithm>
#include <cmath>

#include "graph/meta_rules.h"
#include "inductor/lower_internal.h"

namespace ff::inductor {

using loop::BinaryOp;
using loop::ReduceOp;
using loop::UnaryOp;
using V = std::vector<Expr>;

using formula::bin;
using formula::c;
using formula::un;

Expr clamp_expr(const Expr& x, const Expr* lo, const Expr* hi) {
  Expr r = x;
  if (lo) r = loop::select(bin(BinaryOp::Lt, r, *lo), *lo, r);
  if (hi) r = loop::select(bin(BinaryOp::Gt, r, *hi), *hi, r);
  return r;
}

void no_inplace(Lowerer& L, const Node& n) {
  if (L.has_arg(n, "inplace") && L.arg(n, "inplace").kind == Value::Kind::Bool && L.arg(n, "inplace").b)
    throw NoLowering("in-place variant");
}

double number(Lowerer& L, const Node& n, const char* name) {
  const Value& v = L.arg(n, name);
  if (!v.is_number()) throw NoLowering(std::string(name) + " is not a constant");
  return v.as_double();
}

LT float_map(Lowerer& L, const Node& n, const std::function<Expr(const Expr&)>& fn) {
  DType out = L.out_meta(n).dtype;
  DType ct = float_compute_dtype(out);
  if (!is_floating(ct)) throw NoLowering("integer input");
  return Lowerer::map({L.tensor(n.args[0])}, ct, out, [fn](const V& v) { return fn(v[0]); });
}

LT any_map(Lowerer& L, const Node& n, const std::function<Expr(const Expr&)>& fn) {
  DType out = L.out_meta(n).dtype;
  if (out == DType::Bool) throw NoLowering("bool input");
  return Lowerer::map({L.tensor(n.args[0])}, float_compute_dtype(out), out, [fn](const V& v) { return fn(v[0]); });
}

namespace {

LT cast_rule(Lowerer& L, const Node& n) {
  LT x = L.tensor(n.args[0]);
  DType out = L.out_meta(n).dtype;
  if (x.dtype == out) return x;  // torch returns the input itself
  return Lowerer::cast(x, out);
}

// eager's hardtanh: clamp to [lo, hi]; integer inputs take the bounds truncated (toLong), so that
// they do not promote the result
LT hardtanh_rule(Lowerer& L, const Node& n, double lo, double hi) {
  DType out = L.out_meta(n).dtype;
  if (out == DType::Bool || (out == DType::UInt8 && (lo < 0 || hi < 0))) throw NoLowering("hardtanh of bools or negative uint8 bounds");
  if (!is_floating(out)) {
    return Lowerer::map({L.tensor(n.args[0])}, out, out, [lo, hi](const V& v) {
      Expr a = loop::const_of(std::trunc(lo), v[0]->type), b = loop::const_of(std::trunc(hi), v[0]->type);
      return clamp_expr(v[0], &a, &b);
    });
  }
  return float_map(L, n, [lo, hi](const Expr& x) { Expr a = c(lo, x), b = c(hi, x); return clamp_expr(x, &a, &b); });
}

LT clamp_rule(Lowerer& L, const Node& n, const char* lo_name, const char* hi_name) {
  DType out = L.out_meta(n).dtype;
  const Value* lo = lo_name && !L.arg(n, lo_name).is_none() ? &L.arg(n, lo_name) : nullptr;
  const Value* hi = hi_name && !L.arg(n, hi_name).is_none() ? &L.arg(n, hi_name) : nullptr;
  if (out == DType::Bool) {  // bool bounds: max is or, min is and
    std::vector<LT> ops{L.tensor(n.args[0])};
    if (lo) ops.push_back(L.tensor(*lo));
    if (hi) ops.push_back(L.tensor(*hi));
    bool has_lo = lo != nullptr;
    return Lowerer::map(ops, out, out, [has_lo](const V& v) {
      Expr r = has_lo ? bin(BinaryOp::Or, v[0], v[1]) : v[0];
      return v.size() > (has_lo ? 2u : 1u) ? bin(BinaryOp::And, r, v.back()) : r;
    });
  }
  std::vector<LT> ops{L.tensor(n.args[0])};
  // NB: with both bounds given, a NaN number fills the result with NaN on every device (clamp_out).
  // With one bound, eager CUDA's kernel (clamp_min/max_scalar, cuda/TensorCompare.cu) takes
  // ::max(v, lo) / ::min(v, hi), which never returns a NaN bound: it is as if absent.
  auto nan_number = [](const Value* v) { return v && v->is_number() && std::isnan(v->as_double()); };
  if (on_cuda(L) && !(lo && hi) && !((lo && lo->is_node()) || (hi && hi->is_node()))) {
    if (nan_number(lo)) lo = nullptr;
    if (nan_number(hi)) hi = nullptr;
    if (!lo && !hi) return L.tensor(n.args[0]).dtype == out ? L.tensor(n.args[0]) : Lowerer::cast(L.tensor(n.args[0]), out);
  }
  if (lo) ops.push_back(L.tensor(*lo));
  if (hi) ops.push_back(L.tensor(*hi));
  // NB: eager has two kernels. Tensor bounds: min(max(x, lo), hi) with NaN from any operand.
  // Number bounds: std::min(std::max(x, lo), hi), where only x's NaN propagates, except that a NaN
  // bound fills the result with NaN (torch 1.13: only when both bounds are given).
  bool tensors = (lo && lo->is_node()) || (hi && hi->is_node());
  bool nan_lo = lo && !tensors && std::isnan(lo->as_double()), nan_hi = hi && !tensors && std::isnan(hi->as_double());
  bool nan_fill = (nan_lo || nan_hi) && (torch_at_least(2, 0) || (lo && hi));
  if ((nan_lo || nan_hi) && !nan_fill) return L.tensor(n.args[0]).dtype == out ? L.tensor(n.args[0]) : Lowerer::cast(L.tensor(n.args[0]), out);
  bool has_lo = lo != nullptr, has_hi = hi != nullptr;
  return Lowerer::map(ops, out, out, [has_lo, has_hi, tensors, nan_fill](const V& v) {
    if (nan_fill) return c(NAN, v[0]);
    Expr r = v[0];
    size_t k = 1;
    if (tensors) {
      if (has_lo) r = bin(BinaryOp::Max, r, v[k++]);
      if (has_hi) r = bin(BinaryOp::Min, r, v[k++]);
      return r;
    }
    if (has_lo) {
      Expr lo = v[k++];
      r = loop::select(bin(BinaryOp::Lt, r, lo), lo, r);
    }
    if (has_hi) {
      Expr hi = v[k++];
      r = loop::select(bin(BinaryOp::Gt, r, hi), hi, r);
    }
    return r;
  });
}

// NB: eager converts both operands to their common dtype first: logical_and(x_uint8, tensor(256))
// tests 256 as the uint8 0.
LT logical(Lowerer& L, const Node& n, BinaryOp op) {
  DType common = result_type({n.args[0], n.args[1]}, L.graph());
  return Lowerer::map({L.tensor(n.args[0]), L.tensor(n.args[1])}, common, DType::Bool, [op](const V& v) {
    return bin(op, loop::cast(v[0], loop::ScalarType::Bool), loop::cast(v[1], loop::ScalarType::Bool));
  });
}

// ---- basic indexing and concatenation: index maps ------------------------------------------

// One output dimension of a strided view of x: input dimension `in` read at start + step * i, or a
// new dimension of size 1 (in == -1). Input dimensions no output one reads are fixed at `fixed`.
struct ViewDim {
  int64_t in = -1;
  SymInt start = 0;
  int64_t step = 1;
  SymInt size = 1;
};

LT strided_view(const LT& x, const std::vector<ViewDim>& dims, const std::vector<std::pair<int64_t, SymInt>>& fixed) {
  LT r = x;
  r.sizes.clear();
  for (const ViewDim& d : dims) r.sizes.push_back(d.size);
  if (x.ref) {
    loop::TensorRef ref = *x.ref;
    ref.sizes = r.sizes;
    ref.strides.clear();
    for (const ViewDim& d : dims) {
      ref.strides.push_back(d.in < 0 ? SymInt(1) : x.ref->strides[static_cast<size_t>(d.in)] * d.step);
      if (d.in >= 0) ref.offset += d.start * x.ref->strides[static_cast<size_t>(d.in)];
    }
    for (const auto& [in, at] : fixed) ref.offset += at * x.ref->strides[static_cast<size_t>(in)];
    r.ref = ref;
  }
  auto inner = x.at;
  size_t nin = x.sizes.size();
  r.at = [inner, dims, fixed, nin](const Idx& idx) {
    Idx sub(nin);
    for (const auto& [in, at] : fixed) sub[static_cast<size_t>(in)] = loop::size_expr(at);
    for (size_t o = 0; o < dims.size(); ++o) {
      const ViewDim& d = dims[o];
      if (d.in < 0) continue;
      sub[static_cast<size_t>(d.in)] = loop::index_add(loop::index_mul(idx[o], d.step), loop::size_expr(d.start));
    }
    return inner(sub);
  };
  return r;
}

// An int argument, symbolic where the graph's is (an index or bound written with x.shape).
SymInt int_arg(const Value& v) { return v.sym ? v.as_symint() : SymInt(v.i); }

// Python's slice.indices for a positive step, as a ViewDim of input dimension `in`. NB: with
// symbolic sizes or bounds the comparisons may need a guard (SymbolicSpecialization: the node
// becomes an extern call); a symbolic stop clamped to the size is what the trace guarded, so the
// result's size is `out_size`, the graph's own.
ViewDim slice_dim(int64_t in, const SymInt& size, const Value& start, const Value& stop, int64_t step, const SymInt& out_size) {
  auto bound = [&size](const Value& v, const SymInt& dflt) {
    if (v.is_none()) return dflt;
    if (v.kind != Value::Kind::Int) throw NoLowering("a slice bound that is not a constant");
    SymInt i = int_arg(v);
    if (i < 0) i = i + size;
    return i < 0 ? SymInt(0) : i > size ? size
                                        : i;
  };
  if (step <= 0) throw NoLowering("a slice step that is not positive");
  ViewDim d;
  d.in = in;
  d.start = bound(start, 0);
  d.step = step;
  if (stop.sym && step == 1 && !d.start.is_symbolic()) {
    d.size = out_size;
    return d;
  }
  SymInt end = bound(stop, size);
  d.size = end > d.start ? (end - d.start + step - 1) / step : SymInt(0);
  return d;
}

// x[index] for ints, slices of constant ints, None and one Ellipsis (a view in eager).
LT getitem_rule(Lowerer& L, const Node& n) {
  LT x = L.tensor(n.args[0]);
  const Value& index = n.args[1];
  std::vector<Value> items = index.kind == Value::Kind::Tuple ? index.items : std::vector<Value>{index};
  int64_t specified = 0;
  for (const Value& it : items) {
    if (it.kind == Value::Kind::Int || it.kind == Value::Kind::Slice) ++specified;
    else if (it.kind != Value::Kind::None && it.kind != Value::Kind::Ellipsis) throw NoLowering("advanced indexing");
  }
  if (specified > x.dim()) throw NoLowering("too many indices");
  std::vector<ViewDim> dims;
  std::vector<std::pair<int64_t, SymInt>> fixed;
  const SymShape& out_sizes = L.out_meta(n).sizes;
  int64_t in = 0;
  auto keep = [&](int64_t d) { dims.push_back(ViewDim{d, 0, 1, x.sizes[static_cast<size_t>(d)]}); };
  for (const Value& it : items) {
    switch (it.kind) {
      case Value::Kind::Int: {
        const SymInt& size = x.sizes[static_cast<size_t>(in)];
        SymInt i = int_arg(it);
        if (i < 0) i = i + size;
        if (i < 0 || i >= size) throw NoLowering("an index out of range");
        fixed.emplace_back(in++, i);
        break;
      }
      case Value::Kind::Slice: {
        int64_t step = it.items[2].is_none() ? 1 : it.items[2].kind == Value::Kind::Int ? it.items[2].i
                                                                                        : 0;
        if (it.items[2].sym) throw NoLowering("a symbolic slice step");
        if (dims.size() >= out_sizes.size()) throw NoLowering("an index the lowering reads otherwise than eager");
        dims.push_back(slice_dim(in, x.sizes[static_cast<size_t>(in)], it.items[0], it.items[1], step, out_sizes[dims.size()]));
        ++in;
        break;
      }
      case Value::Kind::None: dims.push_back(ViewDim{}); break;
      default:  // the Ellipsis: the dimensions no index names
        for (int64_t k = 0; k < x.dim() - specified; ++k) keep(in++);
        break;
    }
  }
  while (in < x.dim()) keep(in++);
  LT r = strided_view(x, dims, fixed);
  if (r.sizes != out_sizes) throw NoLowering("an index the lowering reads otherwise than eager");
  return r;
}

LT narrow_rule(Lowerer& L, const Node& n) {
  LT x = L.tensor(n.args[0]);
  const Value& dim_v = L.arg(n, "dim");
  const Value& start_v = L.arg(n, "start");
  const Value& len_v = L.arg(n, "length");
  if (dim_v.kind != Value::Kind::Int || start_v.kind != Value::Kind::Int || len_v.kind != Value::Kind::Int || x.dim() == 0)
    throw NoLowering("narrow with arguments that are not constants");
  int64_t dim = dim_v.i < 0 ? dim_v.i + x.dim() : dim_v.i;
  std::vector<ViewDim> dims;
  for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(ViewDim{d, 0, 1, x.sizes[static_cast<size_t>(d)]});
  int64_t start = start_v.i < 0 ? start_v.i + x.sizes[static_cast<size_t>(dim)] : SymInt(start_v.i);
  dims[static_cast<size_t>(dim)] = ViewDim{dim, start, 1, len_v.i};
  LT r = strided_view(x, dims, {});
  if (r.sizes != L.out_meta(n).sizes) throw NoLowering("narrow out of range");
  return r;
}

// torch.cat: each output element read from the operand whose slice of `dim` holds it. The reads
// of the operands not chosen are clamped into their bounds (a vector select computes both sides).
LT cat_of(std::vector<LT> operands, int64_t dim, const TensorMeta& m) {
  std::vector<LT> parts;
  for (const LT& p : operands) {
    if (p.dim() != static_cast<int64_t>(m.sizes.size())) {
      // NB: torch skips 1-d empty operands of any other cat (a legacy rule transformers' KV caches
      // rely on: cat([tensor([]), k], -2)); they count only for the result's dtype, which m has.
      if (p.dim() == 1 && p.sizes[0].same_as(SymInt(0))) continue;
      throw NoLowering("cat with an operand of other dims");
    }
    if (p.sizes[static_cast<size_t>(dim)] == 0) continue;
    parts.push_back(Lowerer::cast(p, m.dtype));
  }
  if (parts.empty() || parts.size() > 8) throw NoLowering("cat of no or many operands");
  if (parts.size() == 1) return parts[0];
  std::vector<int64_t> offsets;
  int64_t total = 0;
  LT r;
  r.sizes = m.sizes;
  r.dtype = m.dtype;
  for (const LT& p : parts) {
    offsets.push_back(total);
    total += p.sizes[static_cast<size_t>(dim)];
    r.cost += p.size() + 2;
  }
  if (total != m.sizes[static_cast<size_t>(dim)]) throw NoLowering("cat of operands of other sizes");
  r.at = [parts, offsets, dim, total](const Idx& idx) {
    auto piece = [&](size_t k) {
      Idx sub = idx;
      int64_t size = parts[k].sizes[static_cast<size_t>(dim)];
      Expr e = loop::index_add(idx[static_cast<size_t>(dim)], loop::const_int(-offsets[k]));
      if (offsets[k] > 0) e = bin(BinaryOp::Max, e, loop::const_int(0));
      if (total - offsets[k] > size) e = bin(BinaryOp::Min, e, loop::const_int(size - 1));
      sub[static_cast<size_t>(dim)] = e;
      return parts[k].at(sub);
    };
    Expr out = piece(parts.size() - 1);
    for (size_t k = parts.size() - 1; k-- > 0;)
      out = loop::select(bin(BinaryOp::Lt, idx[static_cast<size_t>(dim)], loop::const_int(offsets[k + 1])), piece(k), out);
    return out;
  };
  return r;
}

// cat (stack: of the operands each with a new dimension of size 1 at `dim`).
LT cat_rule(Lowerer& L, const Node& n, bool stack) {
  const Value& list = L.arg(n, "tensors");
  if (list.kind != Value::Kind::List && list.kind != Value::Kind::Tuple) throw NoLowering("cat of a non-list");
  const TensorMeta& m = L.out_meta(n);
  const Value& dim_v = L.arg(n, "dim");
  if (dim_v.kind != Value::Kind::Int) throw NoLowering("cat along a dimension that is not a constant");
  int64_t dim = dim_v.i < 0 ? dim_v.i + static_cast<int64_t>(m.sizes.size()) : dim_v.i;
  std::vector<LT> operands;
  for (const Value& v : list.items) {
    LT p = L.tensor(v);
    if (stack) {
      SymShape sizes = p.sizes;
      if (dim > static_cast<int64_t>(sizes.size())) throw NoLowering("stack along a dimension out of range");
      sizes.insert(sizes.begin() + dim, 1);
      p = L.reshape(p, sizes);
    }
    operands.push_back(std::move(p));
  }
  return cat_of(std::move(operands), dim, m);
}

}  // namespace

void add_extra_rules(OpRules& r) {
  r[Op::op_getitem] = getitem_rule;
  r[Op::narrow] = narrow_rule;
  r[Op::cat] = [](Lowerer& L, const Node& n) { return cat_rule(L, n, false); };
  r[Op::stack] = [](Lowerer& L, const Node& n) { return cat_rule(L, n, true); };
  r[Op::square] = [](Lowerer& L, const Node& n) { return any_map(L, n, [](const Expr& x) { return bin(BinaryOp::Mul, x, x); }); };
  r[Op::trunc] = [](Lowerer& L, const Node& n) {
    if (!is_floating(L.out_meta(n).dtype)) return L.tensor(n.args[0]);
    return float_map(L, n, [](const Expr& x) {
      return loop::select(bin(BinaryOp::Lt, x, c(0, x)), un(UnaryOp::Ceil, x), un(UnaryOp::Floor, x));
    });
  };
  // NB: exp2 of its own: exp(x * ln 2) loses |x| ulps to the rounding of the product.
  r[Op::exp2] = [](Lowerer& L, const Node& n) { return float_map(L, n, [](const Expr& x) { return un(UnaryOp::Exp2, x); }); };
  // NB: log2 and log10 of their own: log(x) / ln 2 misses log2(8) = 3 by an ulp.
  r[Op::log2] = [](Lowerer& L, const Node& n) { return float_map(L, n, [](const Expr& x) { return un(UnaryOp::Log2, x); }); };
  r[Op::log10] = [](Lowerer& L, const Node& n) { return float_map(L, n, [](const Expr& x) { return un(UnaryOp::Log10, x); }); };
  r[Op::sign] = [](Lowerer& L, const Node& n) {
    if (L.out_meta(n).dtype == DType::Bool) return L.tensor(n.args[0]);  // sign(True) is True
    return any_map(L, n, [](const Expr& x) {
      Expr pos = loop::cast(bin(BinaryOp::Gt, x, c(0, x)), x->type), neg = loop::cast(bin(BinaryOp::Lt, x, c(0, x)), x->type);
      return bin(BinaryOp::Sub, pos, neg);  // NaN compares false both ways: sign(NaN) is 0, as in eager
    });
  };
  r[Op::isnan] = [](Lowerer& L, const Node& n) {
    LT x = L.tensor(n.args[0]);
    if (!is_floating(x.dtype)) return Lowerer::map({x}, DType::Bool, DType::Bool, [](const V& v) { return c(0, v[0]); });
    return Lowerer::map({x}, float_compute_dtype(x.dtype), DType::Bool, [](const V& v) { return un(UnaryOp::IsNan, v[0]); });
  };
  r[Op::leaky_relu] = [](Lowerer& L, const Node& n) {
    no_inplace(L, n);
    double s = number(L, n, "negative_slope");
    return float_map(L, n, [s](const Expr& x) { return loop::select(bin(BinaryOp::Lt, x, c(0, x)), bin(BinaryOp::Mul, x, c(s, x)), x); });
  };
  r[Op::hardtanh] = [](Lowerer& L, const Node& n) {
    no_inplace(L, n);
    return hardtanh_rule(L, n, number(L, n, "min_val"), number(L, n, "max_val"));
  };
  r[Op::relu6] = [](Lowerer& L, const Node& n) {
    no_inplace(L, n);
    return hardtanh_rule(L, n, 0, 6);
  };
  // NB: eager CUDA (hardsigmoid_kernel, hardswish_kernel in ActivationHard*Kernel.cu) multiplies by
  // one_sixth, the float 1.0f / 6.0f even in double; eager CPU divides by 6.
  r[Op::hardsigmoid] = [](Lowerer& L, const Node& n) {
    no_inplace(L, n);
    bool cuda = on_cuda(L);
    // NB: eager's formula, min(max(x + 3, 0), 6) / 6: x / 6 + 0.5 rounds differently.
    return float_map(L, n, [cuda](const Expr& x) {
      Expr a = c(0, x), b = c(6, x);
      Expr r = clamp_expr(bin(BinaryOp::Add, x, c(3, x)), &a, &b);
      return cuda ? bin(BinaryOp::Mul, r, c(static_cast<double>(1.0f / 6.0f), x)) : bin(BinaryOp::Div, r, c(6, x));
    });
  };
  r[Op::hardswish] = [](Lowerer& L, const Node& n) {
    no_inplace(L, n);
    bool cuda = on_cuda(L);
    return float_map(L, n, [cuda](const Expr& x) {
      Expr a = c(0, x), b = c(6, x);
      Expr r = bin(BinaryOp::Mul, x, clamp_expr(bin(BinaryOp::Add, x, c(3, x)), &a, &b));
      return cuda ? bin(BinaryOp::Mul, r, c(static_cast<double>(1.0f / 6.0f), x)) : bin(BinaryOp::Div, r, c(6, x));
    });
  };
  r[Op::softplus] = [](Lowerer& L, const Node& n) {
    double beta = number(L, n, "beta"), th = number(L, n, "threshold");
    return float_map(L, n, [beta, th](const Expr& x) {
      Expr bx = bin(BinaryOp::Mul, x, c(beta, x));
      Expr soft = bin(BinaryOp::Div, un(UnaryOp::Log1p, un(UnaryOp::Exp, bx)), c(beta, x));
      return loop::select(bin(BinaryOp::Gt, bx, c(th, x)), x, soft);
    });
  };
  r[Op::mish] = [](Lowerer& L, const Node& n) {
    no_inplace(L, n);
    return float_map(L, n, [](const Expr& x) {
      Expr sp = loop::select(bin(BinaryOp::Gt, x, c(20, x)), x, un(UnaryOp::Log1p, un(UnaryOp::Exp, x)));
      return bin(BinaryOp::Mul, x, un(UnaryOp::Tanh, sp));
    });
  };
  r[Op::rsub] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    if (out == DType::Bool) throw NoLowering("bool rsub");
    const Value& al = L.arg(n, "alpha");
    if (!al.is_number()) throw NoLowering("alpha");
    // other - alpha * input, alpha converted to the result dtype like the operands (exact int64)
    return Lowerer::map({L.tensor(n.args[0]), L.tensor(n.args[1]), L.tensor(al)}, out, out, [&L](const V& v) {
      if (loop::is_float(v[0]->type)) return mul_add(L, un(UnaryOp::Neg, v[0]), v[2], v[1]);
      return bin(BinaryOp::Sub, v[1], bin(BinaryOp::Mul, v[0], v[2]));
    });
  };

  r[Op::logical_and] = [](Lowerer& L, const Node& n) { return logical(L, n, BinaryOp::And); };
  r[Op::logical_or] = [](Lowerer& L, const Node& n) { return logical(L, n, BinaryOp::Or); };
  r[Op::clamp] = [](Lowerer& L, const Node& n) { return clamp_rule(L, n, "min", "max"); };
  r[Op::clamp_min] = [](Lowerer& L, const Node& n) { return clamp_rule(L, n, "min", nullptr); };
  r[Op::clamp_max] = [](Lowerer& L, const Node& n) { return clamp_rule(L, n, nullptr, "max"); };
  r[Op::masked_fill] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    LT mask = Lowerer::cast(L.tensor_arg(n, "mask"), DType::Bool);
    LT x = L.tensor_arg(n, "input"), val = L.tensor(L.arg(n, "value"));
    return Lowerer::map({mask, x, val}, out, out, [](const V& v) {
      return loop::select(loop::cast(v[0], loop::ScalarType::Bool), v[2], v[1]);
    });
  };
  r[Op::lerp] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    if (!is_floating(out)) throw NoLowering("lerp of ints");
    // NB: eager's formula: from the nearer end, start + w * (end - start) for |w| < 0.5, else
    // end - (end - start) * (1 - w) (exact at w = 1).
    return Lowerer::map({L.tensor(n.args[0]), L.tensor(n.args[1]), L.tensor(n.args[2])}, float_compute_dtype(out), out,
                        [&L](const V& v) {
                          Expr d = bin(BinaryOp::Sub, v[1], v[0]);
                          Expr small = bin(BinaryOp::Lt, un(UnaryOp::Abs, v[2]), c(0.5, v[2]));
                          return loop::select(small, mul_add(L, v[2], d, v[0]),
                                              mul_add(L, un(UnaryOp::Neg, d), bin(BinaryOp::Sub, c(1, v[2]), v[2]), v[1]));
                        });
  };
  // creation from a constant (and torch.fill): the value converted to the dtype as torch's fill does (ints
  // truncated and wrapped, bools nonzero), broadcast to the result's sizes
  OpLowering constant = [](Lowerer& L, const Node& n) {
    const TensorMeta& m = L.out_meta(n);
    double v = op_in(op_kind(n), {Op::zeros, Op::zeros_like, Op::new_zeros}) ? 0.0
               : op_in(op_kind(n), {Op::ones, Op::ones_like, Op::new_ones})  ? 1.0
               : op_kind(n) == Op::fill                                      ? number(L, n, "value")
                                                                             : number(L, n, "fill_value");
    if (is_complex(m.dtype)) throw NoLowering("complex constant");
    if (m.dtype == DType::Bool) v = v != 0.0 ? 1.0 : 0.0;
    else if (!is_floating(m.dtype)) {
      if (!(std::abs(v) <= 9007199254740992.0)) throw NoLowering("integer fill value beyond 2^53");
      v = static_cast<double>(wrap_to(static_cast<int64_t>(v), m.dtype));
    }
    return Lowerer::broadcast(Lowerer::scalar(v, m.dtype), m.sizes);
  };
  for (Op op : {Op::zeros, Op::ones, Op::full, Op::zeros_like, Op::ones_like, Op::full_like, Op::new_zeros, Op::new_ones, Op::new_full,
                Op::fill})
    r[op] = constant;
  // casts
  for (Op op : {Op::to, Op::to_float, Op::to_double, Op::to_half, Op::to_bfloat16, Op::to_long, Op::to_int, Op::to_short,
                Op::to_char, Op::to_byte, Op::to_bool, Op::type_as})
    r[op] = cast_rule;
  r[Op::clone] = [](Lowerer& L, const Node& n) {
    LT x = L.tensor(n.args[0]);
    x.ref.reset();  // a new tensor (realized with the layout eager gives it when needed)
    return x;
  };
  // views
  OpLowering reshape = [](Lowerer& L, const Node& n) { return L.reshape(L.tensor(n.args[0]), L.out_meta(n).sizes); };
  r[Op::tensor_reshape] = r[Op::view_as] = r[Op::reshape_as] = reshape;
  r[Op::expand_as] = [](Lowerer& L, const Node& n) { return Lowerer::broadcast(L.tensor(n.args[0]), L.out_meta(n).sizes); };
  r[Op::tensor_permute] = [](Lowerer& L, const Node& n) {
    LT x = L.tensor(n.args[0]);
    const Value& dv = n.args[1];
    std::vector<int64_t> perm;
    const std::vector<Value>& items = dv.items.size() == 1 && dv.items[0].is_sequence() ? dv.items[0].items : dv.items;
    for (const Value& d : items) {
      if (d.kind != Value::Kind::Int) throw NoLowering("dims");
      perm.push_back(wrap_dim(d.i, x.dim()));
    }
    if (static_cast<int64_t>(perm.size()) != x.dim()) throw NoLowering("dims");
    return Lowerer::permute(x, perm);
  };
  // reductions
  r[Op::logsumexp] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    if (!is_floating(out)) throw NoLowering("logsumexp to a non-float");
    LT x = Lowerer::cast(L.tensor_arg(n, "input"), out);  // NB: eager converts ints to the default dtype first
    std::vector<int64_t> dims;
    for (const Value& d : L.arg(n, "dim").items) {
      if (d.kind != Value::Kind::Int) throw NoLowering("dims");
      dims.push_back(d.i);
    }
    if ((dims.empty() && x.dim() != 0) || x.numel() == 0) throw NoLowering("dims");  // NB: () of a 0-d tensor is its one element
    bool keepdim = L.arg(n, "keepdim").b;
    DType ct = float_compute_dtype(out);
    LT xc = L.consistent(Lowerer::cast(x, ct));
    LT m = L.reduce(xc, dims, true, ReduceOp::Max, ct);
    // torch: a row of -inf gives -inf (not NaN): shift by 0 where the max is infinite.
    auto shift = [](const Expr& mx) {
      Expr inf = bin(BinaryOp::Eq, un(UnaryOp::Abs, mx), c(INFINITY, mx));
      return loop::select(inf, c(0, mx), mx);
    };
    LT e = Lowerer::map({xc, m}, ct, ct, [shift](const V& v) { return un(UnaryOp::Exp, bin(BinaryOp::Sub, v[0], shift(v[1]))); });
    LT s = L.reduce(e, dims, true, ReduceOp::Sum, ct);
    LT y = Lowerer::map({s, m}, ct, out, [shift](const V& v) { return bin(BinaryOp::Add, un(UnaryOp::Log, v[0]), shift(v[1])); });
    if (keepdim) return y;
    return L.reshape(y, L.out_meta(n).sizes);
  };
  // Every output element is the max of its window's elements. A window position in the padding
  // reads its nearest element inside the input instead: with dilation 1 and floor-mode sizes that
  // element is in the same window, and a repeated element leaves a max unchanged, so no mask (and no
  // out-of-bounds load) is needed. NaN propagates as in torch (Max does).
  r[Op::max_pool2d] = [](Lowerer& L, const Node& n) {
    if (L.arg(n, "return_indices").b) throw NoLowering("max_pool2d with indices");
    if (L.arg(n, "ceil_mode").b) throw NoLowering("max_pool2d in ceil mode");
    DType out = L.out_meta(n).dtype;
    if (!is_floating(out)) throw NoLowering("max_pool2d of ints");
    auto pair = [&](const char* name, std::vector<int64_t> dflt) -> std::vector<int64_t> {
      const Value& v = L.arg(n, name);
      if (v.is_none() || (v.is_sequence() && v.items.empty())) return dflt;
      std::vector<Value> items = v.is_sequence() ? v.items : std::vector<Value>{v};
      if (items.size() == 1) items.push_back(items[0]);
      if (items.size() != 2 || items[0].kind != Value::Kind::Int || items[1].kind != Value::Kind::Int)
        throw NoLowering(std::string("max_pool2d ") + name);
      return {items[0].i, items[1].i};
    };
    std::vector<int64_t> k = pair("kernel_size", {});
    if (k.size() != 2) throw NoLowering("max_pool2d kernel_size");
    std::vector<int64_t> s = pair("stride", k), p = pair("padding", {0, 0}), d = pair("dilation", {1, 1});
    if (d[0] != 1 || d[1] != 1) throw NoLowering("dilated max_pool2d");
    LT x = L.tensor_arg(n, "input");
    const SymShape& osz = L.out_meta(n).sizes;  // NB: the batch and channels may be symbolic
    size_t nd = x.sizes.size();
    if (nd < 3 || osz.size() != nd) throw NoLowering("max_pool2d rank");
    for (int i = 0; i < 2; ++i)
      if (k[i] < 1 || s[i] < 1 || p[i] < 0 || 2 * p[i] > k[i] || x.sizes[nd - 2 + i] < 1) throw NoLowering("max_pool2d parameters");
    const int64_t in_h = x.sizes[nd - 2], in_w = x.sizes[nd - 1];
    auto at = x.at;
    LT r;
    r.sizes = osz;
    r.dtype = x.dtype;
    r.cost = static_cast<int>(k[0] * k[1]) * (x.cost + 4);
    const int64_t out_h = osz[nd - 2], out_w = osz[nd - 1];
    r.at = [at, k, s, p, in_h, in_w, out_h, out_w, nd](const Idx& idx) {
      // The input row (column) of window offset `off` for output position o, kept inside [0, size).
      auto pos = [](const Expr& o, int64_t stride, int64_t pad, int64_t off, int64_t size, int64_t outs) {
        Expr e = loop::index_add(loop::index_mul(o, stride), loop::const_int(off - pad));
        if (off - pad < 0) e = bin(BinaryOp::Max, e, loop::const_int(0));
        if ((outs - 1) * stride + off - pad > size - 1) e = bin(BinaryOp::Min, e, loop::const_int(size - 1));
        return e;
      };
      Expr m;
      for (int64_t i = 0; i < k[0]; ++i) {
        for (int64_t j = 0; j < k[1]; ++j) {
          Idx in(idx.begin(), idx.end());
          in[nd - 2] = pos(idx[nd - 2], s[0], p[0], i, in_h, out_h);
          in[nd - 1] = pos(idx[nd - 1], s[1], p[1], j, in_w, out_w);
          Expr v = at(in);
          m = m ? bin(BinaryOp::Max, m, v) : v;
        }
      }
      return m;
    };
    return r;
  };
  r[Op::rms_norm] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    if (!is_floating(out)) throw NoLowering("rms_norm of ints");
    LT x = L.tensor_arg(n, "input");
    size_t k = L.arg(n, "normalized_shape").items.size();
    if (k == 0 || k > x.sizes.size()) throw NoLowering("normalized_shape");
    std::vector<int64_t> dims;
    for (size_t d = x.sizes.size() - k; d < x.sizes.size(); ++d) dims.push_back(static_cast<int64_t>(d));
    DType ct = float_compute_dtype(out);
    const Value& ev = L.arg(n, "eps");
    // torch's default eps is the machine epsilon of the input dtype.
    double eps = ev.is_none() ? (x.dtype == DType::Float64 ? 2.220446049250313e-16 : x.dtype == DType::Float32 ? 1.1920928955078125e-07
                                                                                 : x.dtype == DType::BFloat16  ? 0.0078125
                                                                                                               : 0.0009765625)
                              : ev.as_double();
    LT xc = Lowerer::cast(x, ct);
    double count = 1;
    for (int64_t d : dims) count *= static_cast<double>(x.sizes[static_cast<size_t>(d)]);
    LT sq = Lowerer::map({xc}, ct, ct, [](const V& v) { return bin(BinaryOp::Mul, v[0], v[0]); });
    LT ms = L.reduce(sq, dims, true, ReduceOp::Sum, ct);
    LT y = Lowerer::map({xc, ms}, ct, ct, [count, eps](const V& v) {
      return bin(BinaryOp::Mul, v[0], un(UnaryOp::Rsqrt, bin(BinaryOp::Add, bin(BinaryOp::Div, v[1], c(count, v[1])), c(eps, v[1]))));
    });
    if (!L.arg(n, "weight").is_none()) y = Lowerer::binary(BinaryOp::Mul, y, L.tensor(L.arg(n, "weight")), ct);
    return Lowerer::cast(y, out);
  };
}

}  // namespace ff::inductor
