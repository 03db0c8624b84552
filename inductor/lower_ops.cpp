// The rule table: one lowering per torch-level op (an OpTable indexed by Op), written in the tensor algebra of
// lower_internal.h. A rule throws NoLowering for operands it does not handle; the node then runs
// in torch as an extern call.
#include <cmath>
#include <limits>

#include "graph/meta_rules.h"
#include "inductor/lower_internal.h"

namespace ff::inductor {

using loop::BinaryOp;
using loop::ReduceOp;
using loop::UnaryOp;
using V = std::vector<Expr>;

std::vector<int64_t> dims_of(const Value& v) {
  std::vector<int64_t> dims;
  if (v.is_none()) return dims;
  if (v.kind == Value::Kind::Int) return {v.i};
  if (!v.is_sequence()) throw NoLowering("dims are not constants");
  for (const Value& d : v.items) {
    if (d.kind != Value::Kind::Int) throw NoLowering("dims are not constants");
    dims.push_back(d.i);
  }
  return dims;
}

namespace {

Expr fconst(double v, const Expr& like) { return loop::const_of(v, like->type); }

DType common_dtype(Lowerer& L, const std::vector<Value>& operands) {
  return result_type(operands, L.graph());
}

// out = fn(x) computed in the float compute type of the result dtype.
LT unary_float(Lowerer& L, const Node& n, const std::function<Expr(const Expr&)>& fn) {
  DType out = L.out_meta(n).dtype;
  LT x = L.tensor(n.args[0]);
  DType ct = float_compute_dtype(out);
  if (!is_floating(ct)) throw NoLowering("integer input");
  return Lowerer::map({x}, ct, out, [fn](const V& v) { return fn(v[0]); });
}

LT unary_op(Lowerer& L, const Node& n, UnaryOp op) {
  return unary_float(L, n, [op](const Expr& x) { return loop::unary(op, x); });
}

Expr sigmoid(const Expr& x) {
  return loop::binary(BinaryOp::Div, fconst(1, x), loop::binary(BinaryOp::Add, fconst(1, x), loop::unary(UnaryOp::Exp, loop::unary(UnaryOp::Neg, x))));
}

// Whether eager's CPU kernel reads operand v (the second operand of mul or div) at opmath precision
// instead of converted to the result dtype: torch >= 2.0 does for a reduced-float result when v is a
// Python number or a 0-dim tensor (TensorIterator's "cpu scalar", read from its original dtype).
bool opmath_scalar(Lowerer& L, const Value& v, DType out, bool cuda) {
  if (!(out == DType::Float16 || out == DType::BFloat16) || (!cuda && !torch_at_least(2, 0))) return false;
  if (v.is_number()) return true;
  const Node* t = v.is_node() ? &L.graph().node(v.node) : nullptr;
  // NB: on CUDA a 0-dim tensor (a CUDA one: the graph does not mix devices) is no "cpu scalar":
  // it is read at the common dtype.
  return !cuda && t && t->meta.is_tensor() && t->meta.tensor.dim() == 0;
}

// The operands of a binary op converted as eager converts them: both to the result dtype `out`,
// except a scalar second operand of mul/div read at opmath precision (opmath_scalar). Returns the
// dtype to compute in.
DType binary_operands(Lowerer& L, const Value& b, DType out, bool scalar_at_opmath, LT* x, LT* /*y*/, bool cuda = false) {
  if (!scalar_at_opmath || !opmath_scalar(L, b, out, cuda)) return out;
  *x = Lowerer::cast(*x, out);
  return float_compute_dtype(out);
}

// a op b with torch's promotion; `alpha` scales b (add/sub).
LT arith(Lowerer& L, const Node& n, const Value& a, const Value& b, BinaryOp op, const Value* alpha = nullptr) {
  DType out = L.out_meta(n).dtype;
  LT x = L.tensor(a), y = L.tensor(b);
  bool scaled = alpha && !alpha->is_none() && !(alpha->kind == Value::Kind::Int && alpha->i == 1) &&
                !(alpha->kind == Value::Kind::Float && alpha->f == 1.0);
  if (scaled && !alpha->is_number()) throw NoLowering("alpha is not a constant");
  if (out == DType::Bool && op != BinaryOp::Mul) {
    // bool + bool is logical or in torch; alpha converts to bool (a + b * alpha)
    if (op != BinaryOp::Add) throw NoLowering("bool arithmetic");
    if (scaled && alpha->as_double() == 0.0) return Lowerer::cast(x, DType::Bool);
    return Lowerer::map({x, y}, DType::Bool, DType::Bool, [](const V& v) { return loop::binary(BinaryOp::Or, v[0], v[1]); });
  }
  if (out == DType::Bool) return Lowerer::map({x, y}, DType::Bool, DType::Bool, [](const V& v) { return loop::binary(BinaryOp::And, v[0], v[1]); });
  // Python's reflected operators: `2.5 * t` runs t.__rmul__(2.5), i.e. mul(t, 2.5).
  bool reflected = (op == BinaryOp::Mul || op == BinaryOp::Add) && op_def(n.op).style == PrintStyle::Infix && a.is_number();
  if (reflected) std::swap(x, y);
  // NB: eager CUDA's add/sub/mul (opmath_symmetric_gpu_kernel_with_scalars, cuda/Loops.cuh) read a
  // cpu scalar at opmath, on every torch; eager CPU's add/sub convert it to the result dtype.
  bool cuda = on_cuda(L);
  // `0.5 - t` (rsub): the number is the first operand, read at opmath too.
  bool number_first = cuda && !reflected && a.is_number() && !b.is_number();
  DType compute = number_first ? binary_operands(L, a, out, true, &y, &x, cuda)
                               : binary_operands(L, reflected ? a : b, out, op == BinaryOp::Mul || cuda, &x, &y, cuda);
  std::vector<LT> ops{x, y};
  // alpha converted to the result dtype like the operands (exact for int64).
  if (scaled) ops.push_back(L.tensor(*alpha));
  return Lowerer::map(ops, compute, out, [&L, op](const V& v) {
    if (v.size() == 3 && loop::is_float(v[0]->type))  // eager: a + alpha * b (sub: alpha negated)
      return mul_add(L, op == BinaryOp::Sub ? loop::unary(UnaryOp::Neg, v[1]) : v[1], v[2], v[0]);
    return loop::binary(op, v[0], v.size() == 3 ? loop::binary(BinaryOp::Mul, v[1], v[2]) : v[1]);
  });
}

// 1 / b as eager CUDA takes it on the host for a number divisor: at accscalar (float for float32,
// f16 and bf16; double for float64), then used as a factor.
double host_reciprocal(double b, DType compute) {
  return compute == DType::Float32 ? static_cast<double>(1.0f / static_cast<float>(b)) : 1.0 / b;
}

LT div_rule(Lowerer& L, const Node& n, const Value& a, const Value& b, const Value* mode) {
  DType out = L.out_meta(n).dtype;
  if (mode && !mode->is_none()) {
    if (mode->s == "floor") return floor_divide(L, n, a, b);
    if (mode->s == "trunc" && !is_floating(out)) return trunc_divide_int(L, n, a, b);
    if (mode->s != "trunc") throw NoLowering("rounding_mode " + mode->s);
    LT x = L.tensor(a), y = L.tensor(b);
    if (on_cuda(L) && b.is_number()) {
      // NB: eager CUDA (div_trunc_kernel_cuda, cuda/BinaryDivTruncKernel.cu) multiplies by the
      // reciprocal of a cpu scalar divisor taken on the host at accscalar: trunc(a * (1 / b)).
      DType ct = float_compute_dtype(out);
      double inv = host_reciprocal(b.as_double(), ct);
      return Lowerer::map({x}, ct, out, [inv](const V& v) {
        Expr q = loop::binary(BinaryOp::Mul, v[0], fconst(inv, v[0]));
        return loop::select(loop::binary(BinaryOp::Lt, q, fconst(0, q)), loop::unary(UnaryOp::Ceil, q), loop::unary(UnaryOp::Floor, q));
      });
    }
    DType compute = binary_operands(L, b, out, true, &x, &y);
    // NB: eager's f16/bf16 kernel rounds the quotient to the dtype before it truncates (except
    // for an opmath scalar divisor, where it truncates the float quotient).
    bool round_first = compute == out && loop::needs_narrowing(out);
    return Lowerer::map({x, y}, compute, out, [round_first, out](const V& v) {
      Expr q = loop::binary(BinaryOp::Div, v[0], v[1]);
      if (round_first) q = loop::narrow(q, out);
      // trunc(q): floor for q >= 0, ceil below.
      return loop::select(loop::binary(BinaryOp::Lt, q, fconst(0, q)), loop::unary(UnaryOp::Ceil, q), loop::unary(UnaryOp::Floor, q));
    });
  }
  if (!is_floating(out)) throw NoLowering("integer division");
  if (op_def(n.op).style == PrintStyle::Infix && a.is_number()) {
    // `2.5 / t` runs t.__rtruediv__(2.5): reciprocal(t) * 2.5, rounded twice.
    LT r = Lowerer::map({L.tensor(b)}, out, out, [](const V& v) { return loop::unary(UnaryOp::Reciprocal, v[0]); });
    LT s = L.tensor(a);
    DType compute = binary_operands(L, a, out, true, &r, &s);
    return Lowerer::map({r, s}, compute, out, [](const V& v) { return loop::binary(BinaryOp::Mul, v[0], v[1]); });
  }
  LT x = L.tensor(a), y = L.tensor(b);
  if (on_cuda(L) && b.is_number()) {
    // NB: eager CUDA (div_true_kernel_cuda, cuda/BinaryDivTrueKernel.cu) multiplies by the
    // reciprocal of a cpu scalar divisor, taken on the host in opmath: a * (1 / b).
    DType ct = float_compute_dtype(out);
    double inv = host_reciprocal(b.as_double(), ct);
    return Lowerer::map({x}, ct, out, [inv](const V& v) { return loop::binary(BinaryOp::Mul, v[0], fconst(inv, v[0])); });
  }
  DType compute = binary_operands(L, b, out, true, &x, &y);
  return Lowerer::map({x, y}, compute, out, [](const V& v) { return loop::binary(BinaryOp::Div, v[0], v[1]); });
}

// x ** e of ints: for a constant e >= 0 repeated squaring inline, wrapping as eager's does
// (products modulo 2^bits agree in any order; a negative constant raises in eager); else eager's
// powi from the math library, on the operands in the result dtype.
LT int_pow(Lowerer& L, const Value& a, const Value& b, DType out) {
  if (out == DType::Bool) throw NoLowering("pow of bools");
  if (b.kind != Value::Kind::Int || b.i < 0 || b.i > 1024) {
    if (b.kind == Value::Kind::Int && b.i < 0) throw NoLowering("integer pow to a negative power raises");
    return Lowerer::map({Lowerer::cast(L.tensor(a), out), Lowerer::cast(L.tensor(b), out)}, out, out,
                        [](const V& v) { return loop::call(loop::MathFn::Powi, {v[0], v[1]}); });
  }
  int64_t e = b.i;
  return Lowerer::map({L.tensor(a)}, out, out, [e](const V& v) {
    Expr result = loop::const_of(1, v[0]->type), base = v[0];
    for (int64_t k = e; k > 0; k >>= 1) {
      if (k & 1) result = loop::binary(BinaryOp::Mul, result, base);
      if (k > 1) base = loop::binary(BinaryOp::Mul, base, base);
    }
    return result;
  });
}

LT pow_rule(Lowerer& L, const Node& n, const Value& a, const Value& b) {
  DType out = L.out_meta(n).dtype;
  if (!is_floating(out)) return int_pow(L, a, b, out);
  DType ct = float_compute_dtype(out);
  if (b.is_number()) {
    double e = b.as_double();
    auto m = [&](std::function<Expr(const Expr&)> f) { return Lowerer::map({L.tensor(a)}, ct, out, [f](const V& v) { return f(v[0]); }); };
    // NB: eager's bf16 kernel rounds x*x to bf16 before the next step of x**3 and x**-2 (its
    // vector type rounds every op); f16 and wider compute them in one go.
    // Eager CUDA (pow_tensor_scalar_kernel_impl, cuda/PowKernel.cu) multiplies in the dtype itself,
    // so there f16 rounds each step too.
    bool each_step = out == DType::BFloat16 || (out == DType::Float16 && on_cuda(L));
    auto step = [out, each_step](const Expr& x) { return each_step ? loop::narrow(x, out) : x; };
    if (e == 1.0) return m([](const Expr& x) { return x; });
    if (e == 2.0) return m([](const Expr& x) { return loop::binary(BinaryOp::Mul, x, x); });
    if (e == 3.0) return m([step](const Expr& x) { return loop::binary(BinaryOp::Mul, step(loop::binary(BinaryOp::Mul, x, x)), x); });
    if (e == -2.0) return m([step](const Expr& x) { return loop::unary(UnaryOp::Reciprocal, step(loop::binary(BinaryOp::Mul, x, x))); });
    if (e == 0.5) return m([](const Expr& x) { return loop::unary(UnaryOp::Sqrt, x); });
    if (e == -0.5) return m([](const Expr& x) { return loop::unary(UnaryOp::Rsqrt, x); });
    if (e == -1.0) return m([](const Expr& x) { return loop::unary(UnaryOp::Reciprocal, x); });
  }
  return Lowerer::map({L.tensor(a), L.tensor(b)}, ct, out, [](const V& v) { return loop::binary(BinaryOp::Pow, v[0], v[1]); });
}

LT compare(Lowerer& L, const Node& /*n*/, const Value& a, const Value& b, BinaryOp op) {
  DType ct = common_dtype(L, {a, b});  // a scalar is converted to it: int8 < 300 compares with 44
  // NB: eager CUDA too compares a f16/bf16 tensor with a number converted to the tensor's dtype
  // (0.30078125 > 0.3 is false for bf16 on the H200): measured, test_cuda_exact.py.
  return Lowerer::map({L.tensor(a), L.tensor(b)}, ct, DType::Bool, [op](const V& v) { return loop::binary(op, v[0], v[1]); });
}

LT minmax(Lowerer& L, const Node& n, BinaryOp op) {
  DType out = L.out_meta(n).dtype;
  if (out == DType::Bool)  // max of bools is or, min is and
    return Lowerer::map({L.tensor(n.args[0]), L.tensor(n.args[1])}, out, out, [op](const V& v) {
      return loop::binary(op == BinaryOp::Max ? BinaryOp::Or : BinaryOp::And, v[0], v[1]);
    });
  return Lowerer::map({L.tensor(n.args[0]), L.tensor(n.args[1])}, out, out,
                      [op](const V& v) { return loop::binary(op, v[0], v[1]); });
}

DType sum_acc(DType out) { return is_floating(out) ? float_compute_dtype(out) : DType::Int64; }

int64_t reduced_numel(const LT& x, std::vector<int64_t> dims) {
  // NB: a 0-dim tensor reduces over dim 0 or -1 as if it had one dimension of size 1.
  if (dims.empty() || x.dim() == 0) return x.numel();
  int64_t n = 1;
  for (int64_t d : dims) n *= x.sizes[static_cast<size_t>(wrap_dim(d, x.dim()))];
  return n;
}

LT sum_rule(Lowerer& L, const Node& n) {
  DType out = L.out_meta(n).dtype;
  LT x = L.tensor_arg(n, "input");
  return L.reduce(x, dims_of(L.arg(n, "dim")), L.arg(n, "keepdim").b, ReduceOp::Sum, sum_acc(out));
}

LT mean_rule(Lowerer& L, const Node& n) {
  DType out = L.out_meta(n).dtype;
  if (!is_floating(out)) throw NoLowering("mean of a non-float");
  LT x = L.tensor_arg(n, "input");
  auto dims = dims_of(L.arg(n, "dim"));
  double count = static_cast<double>(reduced_numel(x, dims));
  DType acc = float_compute_dtype(out);
  LT s = L.reduce(x, dims, L.arg(n, "keepdim").b, ReduceOp::Sum, acc);
  return Lowerer::map({s}, acc, out, [count](const V& v) { return loop::binary(BinaryOp::Div, v[0], fconst(count, v[0])); });
}

LT extreme_rule(Lowerer& L, const Node& n, ReduceOp op) {
  LT x = L.tensor_arg(n, "input");
  if (x.numel() == 0) throw NoLowering("empty input");
  if (x.dtype == DType::Bool)  // the max of bools is their any
    return Lowerer::cast(L.reduce(Lowerer::cast(x, DType::Int32), dims_of(L.arg(n, "dim")), L.arg(n, "keepdim").b, op, DType::Int32), DType::Bool);
  DType acc = is_floating(x.dtype) ? float_compute_dtype(x.dtype) : (x.dtype == DType::Int64 ? DType::Int64 : DType::Int32);
  return L.reduce(x, dims_of(L.arg(n, "dim")), L.arg(n, "keepdim").b, op, acc);
}

// torch.max(x): amax over every dim; torch.max(x, other): maximum. torch.max(x, dim) gives values
// and indices, a tuple no rule makes: run by torch.
LT max_min_rule(Lowerer& L, const Node& n, ReduceOp reduce, BinaryOp pointwise) {
  const Value& d = L.arg(n, "dim");
  if (d.is_none()) return extreme_rule(L, n, reduce);
  if (d.is_node() && L.graph().node(d.node).meta.is_tensor()) return minmax(L, n, pointwise);
  throw NoLowering("max/min along a dim returns values and indices");
}

// argmax/argmin as two reductions the scheduler fuses into one kernel per row: the extreme value
// m, then the smallest index whose element equals m (NaN counts as the extreme, like torch: the
// first NaN wins). Indices are along `dim`, or into the flattened tensor when dim is None.
LT arg_extreme_rule(Lowerer& L, const Node& n, ReduceOp op) {
  LT x = L.tensor_arg(n, "input");
  if (x.numel() == 0) throw NoLowering("empty input");
  if (x.dim() == 0) {  // the index of the one element
    LT zero = Lowerer::scalar_int(0);
    return Lowerer::broadcast(zero, L.out_meta(n).sizes);
  }
  if (x.dtype == DType::Bool) x = Lowerer::cast(x, DType::Int32);
  const Value& dim = L.arg(n, "dim");
  bool keepdim = L.arg(n, "keepdim").b;
  std::vector<int64_t> dims = dims_of(dim);
  bool fl = is_floating(x.dtype);
  DType ct = fl ? float_compute_dtype(x.dtype) : (x.dtype == DType::Int64 ? DType::Int64 : DType::Int32);
  LT xc = L.consistent(Lowerer::cast(x, ct));
  LT m = Lowerer::broadcast(L.reduce(xc, dims, true, op, ct), x.sizes);
  std::vector<int64_t> sizes = x.sizes;
  int64_t d0 = dims.empty() ? -1 : (dims[0] < 0 ? dims[0] + x.dim() : dims[0]);
  LT cand;
  cand.sizes = x.sizes;
  cand.dtype = DType::Int64;
  cand.cost = xc.cost + m.cost + 8;
  // NB: NaN priority comes from the element itself, never from m: kernels with float max/min
  // reductions are compiled assuming no NaN operands, and m's NaN-ness may be folded away.
  // NaN elements rank by their index, equal elements by index + N: the minimum tells both.
  int64_t big = x.numel();
  cand.at = [xc, m, sizes, d0, fl, big](const Idx& i) {
    Expr index;
    if (d0 >= 0) {
      index = i[static_cast<size_t>(d0)];
    } else {
      index = loop::const_int(0);
      for (size_t d = 0; d < sizes.size(); ++d) index = loop::index_add(loop::index_mul(index, sizes[d]), i[d]);
    }
    Expr xv = xc.at(i), mv = m.at(i);
    Expr none = loop::const_int(std::numeric_limits<int64_t>::max());
    Expr eq = loop::select(loop::binary(BinaryOp::Eq, xv, mv), loop::index_add(index, loop::const_int(big)), none);
    return fl ? loop::select(loop::unary(UnaryOp::IsNan, xv), index, eq) : eq;
  };
  LT r = L.reduce(cand, dims, keepdim, ReduceOp::Min, DType::Int64);
  return Lowerer::map({r}, DType::Int64, DType::Int64, [big](const V& v) {
    Expr k = loop::const_int(big);
    return loop::select(loop::binary(BinaryOp::Ge, v[0], k), loop::binary(BinaryOp::Sub, v[0], k), v[0]);
  });
}

LT prod_rule(Lowerer& L, const Node& n) {
  DType out = L.out_meta(n).dtype;
  LT x = L.tensor_arg(n, "input");
  return L.reduce(x, dims_of(L.arg(n, "dim")), L.arg(n, "keepdim").b, ReduceOp::Prod, sum_acc(out));
}

// var/std as two passes (mean, then squared deviations): fused into one kernel by the scheduler.
// NB: the corrected two-pass algorithm, sum(d^2) - sum(d)^2 / n with d = x - mean: the second
// sum takes out the rounding of the mean, so a constant row has variance 0 exactly, as eager's
// Welford gives (the plain form left 1e-31).
LT var_rule(Lowerer& L, const Node& n, bool is_std) {
  DType out = L.out_meta(n).dtype;
  if (!is_floating(out)) throw NoLowering("var of a non-float");
  LT x = L.tensor_arg(n, "input");
  auto dims = dims_of(L.arg(n, "dim"));
  double correction = 1.0;
  if (L.has_arg(n, "correction") && !L.arg(n, "correction").is_none()) correction = L.arg(n, "correction").as_double();
  else if (L.has_arg(n, "unbiased") && L.arg(n, "unbiased").kind == Value::Kind::Bool) correction = L.arg(n, "unbiased").b ? 1.0 : 0.0;
  bool keepdim = L.has_arg(n, "keepdim") && L.arg(n, "keepdim").b;
  // NB: eager CPU's Welford accumulates in double for every float dtype (std_var_kernel_impl), so
  // float32 values near 1e38 have a finite variance there; eager CUDA accumulates in float.
  DType ct = on_cuda(L) ? float_compute_dtype(out) : DType::Float64;
  double count = static_cast<double>(reduced_numel(x, dims));
  LT xc = L.consistent(Lowerer::cast(x, ct));
  LT mean = Lowerer::map({L.reduce(xc, dims, true, ReduceOp::Sum, ct)}, ct, ct, [count](const V& v) { return loop::binary(BinaryOp::Div, v[0], fconst(count, v[0])); });
  LT d = Lowerer::map({xc, mean}, ct, ct, [](const V& v) { return loop::binary(BinaryOp::Sub, v[0], v[1]); });
  LT sq = Lowerer::map({d}, ct, ct, [](const V& v) { return loop::binary(BinaryOp::Mul, v[0], v[0]); });
  LT ss = L.reduce(sq, dims, keepdim, ReduceOp::Sum, ct);
  LT sd = L.reduce(d, dims, keepdim, ReduceOp::Sum, ct);
  double denom = std::max(0.0, count - correction);
  return Lowerer::map({ss, sd}, ct, out, [denom, count, is_std](const V& v) {
    Expr m2 = loop::binary(BinaryOp::Sub, v[0], loop::binary(BinaryOp::Div, loop::binary(BinaryOp::Mul, v[1], v[1]), fconst(count, v[1])));
    m2 = loop::select(loop::binary(BinaryOp::Lt, m2, fconst(0, m2)), fconst(0, m2), m2);  // rounding never makes it negative
    Expr r = loop::binary(BinaryOp::Div, m2, fconst(denom, m2));
    return is_std ? loop::unary(UnaryOp::Sqrt, r) : r;
  });
}

int64_t dim_arg(Lowerer& L, const Node& n, const char* name, int64_t ndim) {
  const Value& v = L.arg(n, name);
  if (v.kind != Value::Kind::Int) throw NoLowering("dim is not a constant");
  return wrap_dim(v.i, std::max<int64_t>(ndim, 1));
}

// softmax / log_softmax over one dim, computed in f32 for low-precision inputs.
LT softmax_rule(Lowerer& L, const Node& n, bool log) {
  DType out = L.out_meta(n).dtype;
  if (!is_floating(out)) throw NoLowering("softmax of a non-float");
  LT x = L.tensor_arg(n, "input");
  if (x.numel() == 0) throw NoLowering("empty input");
  int64_t dim = dim_arg(L, n, "dim", x.dim());
  DType ct = float_compute_dtype(out);
  LT xc = L.consistent(Lowerer::cast(x, ct));
  std::vector<int64_t> dims = x.dim() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{dim};
  LT m = L.reduce(xc, dims, true, ReduceOp::Max, ct);
  LT e = Lowerer::map({xc, m}, ct, ct, [](const V& v) { return loop::unary(UnaryOp::Exp, loop::binary(BinaryOp::Sub, v[0], v[1])); });
  LT s = L.reduce(e, dims, true, ReduceOp::Sum, ct);
  if (log)
    return Lowerer::map({xc, m, s}, ct, out, [](const V& v) {
      return loop::binary(BinaryOp::Sub, loop::binary(BinaryOp::Sub, v[0], v[1]), loop::unary(UnaryOp::Log, v[2]));
    });
  return Lowerer::map({e, s}, ct, out, [](const V& v) { return loop::binary(BinaryOp::Div, v[0], v[1]); });
}

// (x - mean) * rsqrt(var + eps) over `dims` (kept), in `ct`.
LT normalize(Lowerer& L, const LT& x, const std::vector<int64_t>& dims, double eps, DType ct) {
  LT xc = L.consistent(Lowerer::cast(x, ct));
  double count = static_cast<double>(reduced_numel(x, dims));
  auto div_count = [count](const V& v) { return loop::binary(BinaryOp::Div, v[0], fconst(count, v[0])); };
  LT mean = Lowerer::map({L.reduce(xc, dims, true, ReduceOp::Sum, ct)}, ct, ct, div_count);
  LT d = Lowerer::map({xc, mean}, ct, ct, [](const V& v) { return loop::binary(BinaryOp::Sub, v[0], v[1]); });
  LT sq = Lowerer::map({d}, ct, ct, [](const V& v) { return loop::binary(BinaryOp::Mul, v[0], v[0]); });
  LT var = Lowerer::map({L.reduce(sq, dims, true, ReduceOp::Sum, ct)}, ct, ct, div_count);
  return Lowerer::map({d, var}, ct, ct, [eps](const V& v) {
    return loop::binary(BinaryOp::Mul, v[0], loop::unary(UnaryOp::Rsqrt, loop::binary(BinaryOp::Add, v[1], fconst(eps, v[1]))));
  });
}

LT affine(Lowerer& L, LT y, const Value& w, const Value& b, DType ct) {
  if (!w.is_none()) y = Lowerer::map({y, L.tensor(w)}, ct, ct, [](const V& v) { return loop::binary(BinaryOp::Mul, v[0], v[1]); });
  if (!b.is_none()) y = Lowerer::map({y, L.tensor(b)}, ct, ct, [](const V& v) { return loop::binary(BinaryOp::Add, v[0], v[1]); });
  return y;
}

LT layer_norm_rule(Lowerer& L, const Node& n) {
  DType out = L.out_meta(n).dtype;
  if (!is_floating(out)) throw NoLowering("layer_norm of a non-float");
  LT x = L.tensor_arg(n, "input");
  size_t k = dims_of(L.arg(n, "normalized_shape")).size();
  if (k == 0 || k > x.sizes.size()) throw NoLowering("normalized_shape");
  std::vector<int64_t> dims;
  for (size_t d = x.sizes.size() - k; d < x.sizes.size(); ++d) dims.push_back(static_cast<int64_t>(d));
  DType ct = float_compute_dtype(out);
  LT y = normalize(L, x, dims, L.arg(n, "eps").as_double(), ct);
  return Lowerer::cast(affine(L, y, L.arg(n, "weight"), L.arg(n, "bias"), ct), out);
}

// A per-channel parameter [C] as [C, 1, ...] so that it broadcasts against [N, C, *].
LT per_channel(Lowerer& L, const Value& v, int64_t ndim) {
  LT p = L.tensor(v);
  std::vector<int64_t> s = p.sizes;
  for (int64_t d = 2; d < ndim; ++d) s.push_back(1);
  return L.reshape(p, s);
}

LT batch_norm_rule(Lowerer& L, const Node& n) {
  DType out = L.out_meta(n).dtype;
  if (!is_floating(out)) throw NoLowering("batch_norm of a non-float");
  if (L.arg(n, "training").kind != Value::Kind::Bool || L.arg(n, "training").b)
    throw NoLowering("training-mode batch_norm updates the running statistics in torch");
  if (L.arg(n, "running_mean").is_none() || L.arg(n, "running_var").is_none()) throw NoLowering("no running statistics");
  LT x = L.tensor_arg(n, "input");
  if (x.dim() < 2) throw NoLowering("batch_norm input rank");
  DType ct = float_compute_dtype(out);
  double eps = L.arg(n, "eps").as_double();
  LT rm = per_channel(L, L.arg(n, "running_mean"), x.dim()), rv = per_channel(L, L.arg(n, "running_var"), x.dim());
  LT y = Lowerer::map({x, rm, rv}, ct, ct, [eps](const V& v) {
    return loop::binary(BinaryOp::Mul, loop::binary(BinaryOp::Sub, v[0], v[1]),
                        loop::unary(UnaryOp::Rsqrt, loop::binary(BinaryOp::Add, v[2], fconst(eps, v[2]))));
  });
  if (!L.arg(n, "weight").is_none()) y = Lowerer::binary(BinaryOp::Mul, y, per_channel(L, L.arg(n, "weight"), x.dim()), ct);
  if (!L.arg(n, "bias").is_none()) y = Lowerer::binary(BinaryOp::Add, y, per_channel(L, L.arg(n, "bias"), x.dim()), ct);
  return Lowerer::cast(y, out);
}

LT group_norm_rule(Lowerer& L, const Node& n) {
  DType out = L.out_meta(n).dtype;
  if (!is_floating(out)) throw NoLowering("group_norm of a non-float");
  LT x = L.tensor_arg(n, "input");
  const Value& gv = L.arg(n, "num_groups");
  if (gv.kind != Value::Kind::Int || x.dim() < 2) throw NoLowering("num_groups");
  int64_t G = gv.i, C = x.sizes[1];
  if (G <= 0 || C % G != 0) throw NoLowering("channels not divisible by groups");
  std::vector<int64_t> split{x.sizes[0], G, C / G};
  std::vector<int64_t> dims{2};
  for (size_t d = 2; d < x.sizes.size(); ++d) {
    split.push_back(x.sizes[d]);
    dims.push_back(static_cast<int64_t>(d + 1));
  }
  DType ct = float_compute_dtype(out);
  LT y = normalize(L, L.reshape(x, split), dims, L.arg(n, "eps").as_double(), ct);
  y = L.reshape(y, x.sizes);
  if (!L.arg(n, "weight").is_none()) y = Lowerer::binary(BinaryOp::Mul, y, per_channel(L, L.arg(n, "weight"), x.dim()), ct);
  if (!L.arg(n, "bias").is_none()) y = Lowerer::binary(BinaryOp::Add, y, per_channel(L, L.arg(n, "bias"), x.dim()), ct);
  return Lowerer::cast(y, out);
}

LT gelu_rule(Lowerer& L, const Node& n) {
  bool tanh_approx = L.has_arg(n, "approximate") && L.arg(n, "approximate").s == "tanh";
  return unary_float(L, n, [tanh_approx](const Expr& x) {
    Expr half_x = loop::binary(BinaryOp::Mul, x, fconst(0.5, x));
    Expr inner;
    if (tanh_approx) {
      Expr x3 = loop::binary(BinaryOp::Mul, loop::binary(BinaryOp::Mul, x, x), x);
      Expr poly = loop::binary(BinaryOp::Add, x, loop::binary(BinaryOp::Mul, x3, fconst(0.044715, x)));
      inner = loop::unary(UnaryOp::Tanh, loop::binary(BinaryOp::Mul, poly, fconst(std::sqrt(2.0 / M_PI), x)));
    } else {
      inner = loop::unary(UnaryOp::Erf, loop::binary(BinaryOp::Mul, x, fconst(M_SQRT1_2, x)));
    }
    return loop::binary(BinaryOp::Mul, half_x, loop::binary(BinaryOp::Add, inner, fconst(1.0, x)));
  });
}

LT relu_rule(Lowerer& L, const Node& n) {
  DType out = L.out_meta(n).dtype;
  if (out == DType::Bool) throw NoLowering("bool relu");
  // NB: select rather than max so that NaN passes through, as in torch.
  return Lowerer::map({L.tensor(n.args[0])}, float_compute_dtype(out), out, [](const V& v) {
    return loop::select(loop::binary(BinaryOp::Lt, v[0], fconst(0, v[0])), fconst(0, v[0]), v[0]);
  });
}

LT where_rule(Lowerer& L, const Node& n) {
  DType out = L.out_meta(n).dtype;
  LT c = Lowerer::cast(L.tensor_arg(n, "condition"), DType::Bool);
  LT a = L.tensor_arg(n, "input"), b = L.tensor_arg(n, "other");
  return Lowerer::map({c, a, b}, out, out, [](const V& v) {
    return loop::select(loop::cast(v[0], loop::ScalarType::Bool), v[1], v[2]);
  });
}

// Whether a kernel reads node id's result: a consumer that is neither an extern call nor a view,
// or one through views (GPT-2's `addmm(...).view(b, t, n)` before its gelu or residual add).
bool read_by_a_kernel(const Graph& g, NodeId id, int depth = 0) {
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& u = g.nodes()[i];
    bool uses = false;
    for (const Value& v : u.args) v.for_each_node([&](NodeId o) { uses |= o == id; });
    if (!uses || u.kind != NodeKind::Call || !u.meta.is_tensor() || op_def(u.op).has(kExtern)) continue;
    if (!op_def(u.op).has(kView) || (depth < 8 && read_by_a_kernel(g, static_cast<NodeId>(i), depth + 1))) return true;
  }
  return false;
}

// A matrix product with a bias (linear, addmm): the product in torch (`product`, `args`: an extern
// call), the bias added by the kernel that reads the result. When every consumer needs the result in
// memory anyway (a graph output, an extern call, a split), an epilogue would be a pass of its own:
// BLAS adds the bias for free instead.
LT bias_epilogue(Lowerer& L, const Node& n, const Value& bias, OpId product, std::vector<Value> args) {
  if (!read_by_a_kernel(L.graph(), L.current())) throw NoLowering("matrix product with its bias in torch: every consumer needs it in memory");
  DType out = L.out_meta(n).dtype;
  // NB: eager's bf16/f16 addmm adds the bias to the float accumulator and rounds once; the product
  // rounded to bf16 first and the bias added after is up to an ulp off (OpInfo's linear_cross_entropy).
  if (loop::needs_narrowing(out)) throw NoLowering("matrix product with its bias in torch: eager rounds once in " + std::string(dtype_name(out)));
  LT b = L.tensor(bias);
  LT mm = L.extern_call(n, L.current(), product, std::move(args), "matrix product in torch; the bias is added in a fused epilogue");
  return Lowerer::binary(BinaryOp::Add, mm, b, float_compute_dtype(out));
}

LT linear_rule(Lowerer& L, const Node& n) {
  const Value& bias = L.arg(n, "bias");
  if (bias.is_none()) throw NoLowering("matrix products run in torch");
  std::vector<Value> args = n.args;
  args[static_cast<size_t>(op_def(n.op).schema.index_of("bias"))] = Value::none();
  return bias_epilogue(L, n, bias, n.op, std::move(args));
}

// torch.addmm(bias, x, w) (transformers' Conv1D: GPT-2) as linear: mm in torch, the bias in the
// kernel that reads it. On CUDA this also takes cuBLAS's plain GEMM instead of cuBLASLt's bias
// epilogue, whose fp32 kernels ran GPT-2's products about 9% slower on an H200 (torch.compile
// decomposes addmm the same way). beta/alpha other than 1 stay in torch.
LT addmm_rule(Lowerer& L, const Node& n) {
  const Value& beta = L.arg(n, "beta");
  const Value& alpha = L.arg(n, "alpha");
  if (!beta.is_number() || !alpha.is_number() || beta.as_double() != 1.0 || alpha.as_double() != 1.0)
    throw NoLowering("matrix products run in torch (addmm with beta or alpha)");
  return bias_epilogue(L, n, L.arg(n, "input"), op_id(Op::mm), {L.arg(n, "mat1"), L.arg(n, "mat2")});
}

using Rules = OpRules;

Rules make_rules() {
  Rules r;
  // pointwise: unary
  r[Op::neg] = r[Op::op_neg] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    if (out == DType::Bool) throw NoLowering("bool neg");
    return Lowerer::unary(UnaryOp::Neg, L.tensor(n.args[0]), out);
  };
  r[Op::abs] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    if (out == DType::Bool) return L.tensor(n.args[0]);
    return Lowerer::map({L.tensor(n.args[0])}, float_compute_dtype(out), out, [](const V& v) { return loop::unary(UnaryOp::Abs, v[0]); });
  };
  r[Op::sin] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Sin); };
  r[Op::cos] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Cos); };
  r[Op::tan] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Tan); };
  r[Op::exp] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Exp); };
  r[Op::log] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Log); };
  r[Op::log1p] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Log1p); };
  r[Op::expm1] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Expm1); };
  r[Op::sqrt] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Sqrt); };
  r[Op::rsqrt] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Rsqrt); };
  r[Op::tanh] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Tanh); };
  r[Op::erf] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Erf); };
  r[Op::reciprocal] = [](Lowerer& L, const Node& n) { return unary_op(L, n, UnaryOp::Reciprocal); };
  r[Op::sigmoid] = [](Lowerer& L, const Node& n) { return unary_float(L, n, sigmoid); };
  r[Op::silu] = [](Lowerer& L, const Node& n) {
    if (L.has_arg(n, "inplace") && L.arg(n, "inplace").b) throw NoLowering("in-place silu");
    return unary_float(L, n, [](const Expr& x) { return loop::binary(BinaryOp::Mul, x, sigmoid(x)); });
  };
  r[Op::gelu] = gelu_rule;
  r[Op::relu] = r[Op::f_relu] = [](Lowerer& L, const Node& n) {
    if (L.has_arg(n, "inplace") && L.arg(n, "inplace").b) throw NoLowering("in-place relu");
    return relu_rule(L, n);
  };
  r[Op::floor] = [](Lowerer& L, const Node& n) {
    if (!is_floating(L.out_meta(n).dtype)) return L.tensor(n.args[0]);
    return unary_op(L, n, UnaryOp::Floor);
  };
  r[Op::ceil] = [](Lowerer& L, const Node& n) {
    if (!is_floating(L.out_meta(n).dtype)) return L.tensor(n.args[0]);
    return unary_op(L, n, UnaryOp::Ceil);
  };
  r[Op::logical_not] = [](Lowerer& L, const Node& n) {
    return Lowerer::map({L.tensor(n.args[0])}, DType::Bool, DType::Bool, [](const V& v) { return loop::unary(UnaryOp::Not, v[0]); });
  };
  // pointwise: binary and ternary
  r[Op::add] = [](Lowerer& L, const Node& n) { return arith(L, n, n.args[0], n.args[1], BinaryOp::Add, &L.arg(n, "alpha")); };
  r[Op::sub] = [](Lowerer& L, const Node& n) { return arith(L, n, n.args[0], n.args[1], BinaryOp::Sub, &L.arg(n, "alpha")); };
  r[Op::mul] = [](Lowerer& L, const Node& n) { return arith(L, n, n.args[0], n.args[1], BinaryOp::Mul); };
  r[Op::op_add] = [](Lowerer& L, const Node& n) { return arith(L, n, n.args[0], n.args[1], BinaryOp::Add); };
  r[Op::op_sub] = [](Lowerer& L, const Node& n) {
    if (L.out_meta(n).dtype == DType::Bool) throw NoLowering("bool subtraction");
    return arith(L, n, n.args[0], n.args[1], BinaryOp::Sub);
  };
  r[Op::op_mul] = [](Lowerer& L, const Node& n) { return arith(L, n, n.args[0], n.args[1], BinaryOp::Mul); };
  r[Op::div] = [](Lowerer& L, const Node& n) { return div_rule(L, n, n.args[0], n.args[1], &L.arg(n, "rounding_mode")); };
  r[Op::op_truediv] = r[Op::true_divide] = [](Lowerer& L, const Node& n) { return div_rule(L, n, n.args[0], n.args[1], nullptr); };
  r[Op::pow] = r[Op::op_pow] = [](Lowerer& L, const Node& n) { return pow_rule(L, n, n.args[0], n.args[1]); };
  r[Op::maximum] = [](Lowerer& L, const Node& n) { return minmax(L, n, BinaryOp::Max); };
  r[Op::minimum] = [](Lowerer& L, const Node& n) { return minmax(L, n, BinaryOp::Min); };
  r[Op::eq] = r[Op::op_eq] = [](Lowerer& L, const Node& n) { return compare(L, n, n.args[0], n.args[1], BinaryOp::Eq); };
  r[Op::ne] = r[Op::op_ne] = [](Lowerer& L, const Node& n) { return compare(L, n, n.args[0], n.args[1], BinaryOp::Ne); };
  r[Op::lt] = r[Op::op_lt] = [](Lowerer& L, const Node& n) { return compare(L, n, n.args[0], n.args[1], BinaryOp::Lt); };
  r[Op::le] = r[Op::op_le] = [](Lowerer& L, const Node& n) { return compare(L, n, n.args[0], n.args[1], BinaryOp::Le); };
  r[Op::gt] = r[Op::op_gt] = [](Lowerer& L, const Node& n) { return compare(L, n, n.args[0], n.args[1], BinaryOp::Gt); };
  r[Op::ge] = r[Op::op_ge] = [](Lowerer& L, const Node& n) { return compare(L, n, n.args[0], n.args[1], BinaryOp::Ge); };
  r[Op::where] = where_rule;
  // reductions
  r[Op::sum] = sum_rule;
  r[Op::mean] = mean_rule;
  r[Op::amax] = [](Lowerer& L, const Node& n) { return extreme_rule(L, n, ReduceOp::Max); };
  r[Op::amin] = [](Lowerer& L, const Node& n) { return extreme_rule(L, n, ReduceOp::Min); };
  r[Op::prod] = prod_rule;
  r[Op::max] = [](Lowerer& L, const Node& n) { return max_min_rule(L, n, ReduceOp::Max, BinaryOp::Max); };
  r[Op::min] = [](Lowerer& L, const Node& n) { return max_min_rule(L, n, ReduceOp::Min, BinaryOp::Min); };
  r[Op::argmax] = [](Lowerer& L, const Node& n) { return arg_extreme_rule(L, n, ReduceOp::Max); };
  r[Op::argmin] = [](Lowerer& L, const Node& n) { return arg_extreme_rule(L, n, ReduceOp::Min); };
  r[Op::var] = [](Lowerer& L, const Node& n) { return var_rule(L, n, false); };
  r[Op::std] = [](Lowerer& L, const Node& n) { return var_rule(L, n, true); };
  // views and layout: index maps
  OpLowering reshape = [](Lowerer& L, const Node& n) { return L.reshape(L.tensor(n.args[0]), L.out_meta(n).sizes); };
  r[Op::view] = r[Op::reshape] = r[Op::flatten] = r[Op::unsqueeze] = r[Op::squeeze] = reshape;
  r[Op::expand] = [](Lowerer& L, const Node& n) { return Lowerer::broadcast(L.tensor(n.args[0]), L.out_meta(n).sizes); };
  r[Op::permute] = [](Lowerer& L, const Node& n) {
    LT x = L.tensor(n.args[0]);
    std::vector<int64_t> perm = dims_of(L.arg(n, "dims"));
    for (auto& p : perm) p = wrap_dim(p, x.dim());
    return Lowerer::permute(x, perm);
  };
  r[Op::transpose] = [](Lowerer& L, const Node& n) {
    LT x = L.tensor(n.args[0]);
    std::vector<int64_t> perm(static_cast<size_t>(x.dim()));
    for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int64_t>(d);
    if (x.dim() > 0) std::swap(perm[static_cast<size_t>(dim_arg(L, n, "dim0", x.dim()))], perm[static_cast<size_t>(dim_arg(L, n, "dim1", x.dim()))]);
    return Lowerer::permute(x, perm);
  };
  r[Op::t] = [](Lowerer& L, const Node& n) {
    LT x = L.tensor(n.args[0]);
    return x.dim() < 2 ? x : Lowerer::permute(x, {1, 0});
  };
  r[Op::contiguous] = [](Lowerer& L, const Node& n) {
    LT x = L.tensor(n.args[0]);
    if (x.ref && x.ref->strides != L.out_meta(n).strides) x.ref.reset();  // realized as eager lays it out
    return x;
  };
  // composites
  r[Op::softmax] = r[Op::f_softmax] = [](Lowerer& L, const Node& n) { return softmax_rule(L, n, false); };
  r[Op::log_softmax] = r[Op::f_log_softmax] = [](Lowerer& L, const Node& n) { return softmax_rule(L, n, true); };
  r[Op::layer_norm] = layer_norm_rule;
  r[Op::batch_norm] = batch_norm_rule;
  r[Op::group_norm] = group_norm_rule;
  r[Op::dropout] = r[Op::f_dropout] = [](Lowerer& L, const Node& n) {
    bool training = L.has_arg(n, "training") ? L.arg(n, "training").b : L.has_arg(n, "train") && L.arg(n, "train").b;
    double p = L.has_arg(n, "p") ? L.arg(n, "p").as_double() : 0.5;
    if (training && p != 0.0) throw NoLowering("training-mode dropout draws from torch's RNG");
    if (L.has_arg(n, "inplace") && L.arg(n, "inplace").b) throw NoLowering("in-place dropout");
    return L.tensor(n.args[0]);
  };
  r[Op::linear] = linear_rule;
  r[Op::addmm] = addmm_rule;
  add_extra_rules(r);
  add_math_rules(r);
  add_pointwise_rules(r);
  return r;
}

}  // namespace

const OpRules& op_lowerings() {
  static const Rules rules = make_rules();
  return rules;
}

}  // namespace ff::inductor
