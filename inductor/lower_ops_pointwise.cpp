// Rules of the lowering table for the pointwise ops typed on meta tensors (graph/ops.def's "more
// math" block: deg2rad, sinc, logit, xlogy, the shrinks, threshold, prelu ...): each eager CPU
// kernel's formula. Eager's CPU kernels written in scalar_t round f16/bf16 after every operation
// (c10's Half and BFloat16 arithmetic); those written in opmath_t round once. Eager CUDA computes
// them in opmath (float) and rounds once.
#include <cmath>

#include "graph/meta_rules.h"
#include "inductor/lower_internal.h"

namespace ff::inductor {

using loop::BinaryOp;
using loop::UnaryOp;
using V = std::vector<Expr>;

using formula::bin;
using formula::c;
using formula::sel;
using formula::un;

namespace {

// Rounds each operation's result to the dtype where eager's CPU kernel computes in scalar_t.
std::function<Expr(Expr)> per_op_rounding(const Lowerer& L, DType out) {
  if (on_cuda(L)) return [](Expr e) { return e; };
  return rounding_to(out);
}

// A number converted to the dtype (scalar_t(v)): rounded for f16/bf16, truncated toward zero for ints.
Expr dtype_constant(double v, DType dt, const Expr& like) {
  if (!is_floating(dt)) return loop::const_of(std::trunc(v), like->type);
  Expr k = c(v, like);
  return loop::needs_narrowing(dt) ? loop::narrow(k, dt) : k;
}

// fn over both operands converted to the result dtype (eager's common dtype; a number too) and
// computed in its float compute type.
LT float_binary(Lowerer& L, const Node& n, const std::function<Expr(const Expr&, const Expr&)>& fn) {
  DType out = L.out_meta(n).dtype;
  DType ct = float_compute_dtype(out);
  if (!is_floating(ct)) throw NoLowering("integer result");
  LT x = Lowerer::cast(L.tensor(n.args[0]), out), y = Lowerer::cast(L.tensor(n.args[1]), out);
  return Lowerer::map({x, y}, ct, out, [fn](const V& v) { return fn(v[0], v[1]); });
}

// x * k for deg2rad and rad2deg: eager multiplies by the number as a cpu scalar, read at f32 in
// f16/bf16 on torch >= 2, converted to the dtype on torch 1.13 (measured).
LT scale_rule(Lowerer& L, const Node& n, double k) {
  DType out = L.out_meta(n).dtype;
  bool in_dtype = loop::needs_narrowing(out) && !torch_at_least(2, 0);
  return float_map(L, n, [k, in_dtype, out](const Expr& x) { return bin(BinaryOp::Mul, x, in_dtype ? dtype_constant(k, out, x) : c(k, x)); });
}

// x * log(y) with xlogy's cases (eager's xlogy_kernel, xlog1py_kernel): NaN where y is NaN, 0 where x is 0.
LT xlogy_rule(Lowerer& L, const Node& n, UnaryOp log) {
  auto r = per_op_rounding(L, L.out_meta(n).dtype);
  return float_binary(L, n, [log, r](const Expr& x, const Expr& y) {
    Expr v = r(bin(BinaryOp::Mul, x, r(un(log, y))));
    return sel(un(UnaryOp::IsNan, y), c(NAN, x), sel(bin(BinaryOp::Eq, x, c(0, x)), c(0, x), v));
  });
}

// Whether eager's mul (`mul`) or add reads a number operand of an f16/bf16 tensor at f32 (CUDA;
// CPU's mul on torch >= 2) rather than converted to the dtype (lower_ops.cpp's opmath_scalar).
bool number_at_opmath(const Lowerer& L, bool mul) { return on_cuda(L) || (mul && torch_at_least(2, 0)); }
Expr number_operand(double v, DType dt, bool opmath, const Expr& like) { return opmath ? c(v, like) : dtype_constant(v, dt, like); }

// eager's isclose (a composite): a == b, or both NaN under equal_nan; unless both tolerances are 0,
// also |a - b| finite and at most atol + |rtol * b|, in the operands' float dtype (ints and bools
// converted to the default float dtype first), each step rounded to it.
LT isclose_rule(Lowerer& L, const Node& n) {
  LT a = L.tensor(n.args[0]), b = L.tensor(n.args[1]);
  if (a.dtype != b.dtype) throw NoLowering("isclose of different dtypes");  // eager raises
  if (is_complex(a.dtype) || !supported_dtype(a.dtype)) throw NoLowering("isclose of this dtype");
  double rtol = number(L, n, "rtol"), atol = number(L, n, "atol");
  const Value& en = L.arg(n, "equal_nan");
  if (rtol < 0 || atol < 0 || en.kind != Value::Kind::Bool) throw NoLowering("isclose with negative or unknown tolerances");
  bool equal_nan = en.b && is_floating(a.dtype);
  DType ft = is_floating(a.dtype) ? a.dtype : default_float_dtype();
  auto r = rounding_to(ft);
  LT same = Lowerer::map({a, b}, float_compute_dtype(a.dtype), DType::Bool, [equal_nan](const V& v) {
    Expr eq = bin(BinaryOp::Eq, v[0], v[1]);
    return equal_nan ? bin(BinaryOp::Or, eq, bin(BinaryOp::And, un(UnaryOp::IsNan, v[0]), un(UnaryOp::IsNan, v[1]))) : eq;
  });
  if (rtol == 0 && atol == 0) return same;
  bool mul_opmath = number_at_opmath(L, true), add_opmath = number_at_opmath(L, false);
  return Lowerer::map({same, Lowerer::cast(a, ft), Lowerer::cast(b, ft)}, float_compute_dtype(ft), DType::Bool, [=](const V& v) {
    Expr scaled = un(UnaryOp::Abs, r(bin(BinaryOp::Mul, v[2], number_operand(rtol, ft, mul_opmath, v[1]))));
    Expr allowed = r(bin(BinaryOp::Add, scaled, number_operand(atol, ft, add_opmath, v[1])));
    Expr actual = un(UnaryOp::Abs, r(bin(BinaryOp::Sub, v[1], v[2])));
    Expr finite = bin(BinaryOp::And, bin(BinaryOp::Eq, actual, actual), bin(BinaryOp::Ne, actual, c(INFINITY, actual)));
    return bin(BinaryOp::Or, bin(BinaryOp::Ne, v[0], c(0, v[0])), bin(BinaryOp::And, finite, bin(BinaryOp::Le, actual, allowed)));
  });
}

// eager's mvlgamma (a composite, each step's result in the dtype; ints in the default float
// dtype): the sum of lgamma(x - j/2) for j = p-1 down to 0, plus p(p-1)/4 log(pi) (a number).
LT mvlgamma_rule(Lowerer& L, const Node& n) {
  const Value& pv = L.arg(n, "p");
  if (pv.kind != Value::Kind::Int || pv.i < 1 || pv.i > 64) throw NoLowering("p is not a constant in [1, 64]");
  DType out = L.out_meta(n).dtype;
  if (!is_floating(out)) throw NoLowering("mvlgamma without a float result");
  int64_t p = pv.i;
  double k = static_cast<double>(p * (p - 1)) * std::log(M_PI) * 0.25;
  auto r = rounding_to(out);
  bool add_opmath = number_at_opmath(L, false);
  return Lowerer::map({Lowerer::cast(L.tensor(n.args[0]), out)}, float_compute_dtype(out), out, [=](const V& v) {
    Expr s;
    for (int64_t j = p - 1; j >= 0; --j) {
      Expr t = r(loop::call(loop::MathFn::Lgamma, {r(bin(BinaryOp::Add, c(-0.5 * static_cast<double>(j), v[0]), v[0]))}));
      s = s ? bin(BinaryOp::Add, s, t) : t;
    }
    return bin(BinaryOp::Add, r(s), number_operand(k, out, add_opmath, v[0]));
  });
}

// eager's ldexp: x * pow(2.0, other), a composite (the power in other's float dtype, ints in the
// default one, then the product in the result dtype). Since torch 2.11 (measured on 2.11 and 2.13; 1.13 is the
// composite) a float x with an integer exponent is scaled exactly instead, in x's dtype: C's ldexp
// by the exponent as a C int (through float for f16/bf16).
LT ldexp_rule(Lowerer& L, const Node& n) {
  DType out = L.out_meta(n).dtype;
  LT x = L.tensor(n.args[0]), e = L.tensor(n.args[1]);
  if (!is_floating(out) || is_complex(x.dtype) || is_complex(e.dtype)) throw NoLowering("ldexp of complex operands");
  if (is_floating(x.dtype) && !is_floating(e.dtype)) {
    if (torch_at_least(2, 0) && !torch_at_least(2, 11)) throw NoLowering("torch 2.0-2.10's ldexp of an integer exponent is not measured");
    if (torch_at_least(2, 11)) {
      DType at = out == DType::Float64 ? DType::Float64 : DType::Float32;
      LT k = Lowerer::cast(Lowerer::cast(e, DType::Int32), DType::Float64);
      LT r = Lowerer::map({Lowerer::cast(x, DType::Float64), k}, DType::Float64, at,
                          [](const V& v) { return loop::call(loop::MathFn::Ldexp, {v[0], v[1]}); });
      return Lowerer::cast(r, out);
    }
  }
  // NB: torch >= 2.11 takes the power of a 0-d exponent in the promoted dtype of x and it where x is
  // f64/f16/bf16: other dtypes there stay in torch
  if (torch_at_least(2, 11) && e.dim() == 0 && is_floating(x.dtype) && x.dtype != DType::Float32 && x.dtype != e.dtype)
    throw NoLowering("ldexp of a 0-d exponent");
  DType pt = is_floating(e.dtype) ? e.dtype : default_float_dtype();
  LT pw = Lowerer::map({Lowerer::cast(e, pt)}, float_compute_dtype(pt), pt, [](const V& v) { return bin(BinaryOp::Pow, c(2.0, v[0]), v[0]); });
  return Lowerer::map({Lowerer::cast(x, out), Lowerer::cast(pw, out)}, float_compute_dtype(out), out,
                      [](const V& v) { return bin(BinaryOp::Mul, v[0], v[1]); });
}

// A math library function (inductor/math_library.inc) of the operands converted to the result's
// float dtype.
LT math_rule(Lowerer& L, const Node& n, loop::MathFn fn) {
  if (loop::math_fn_arity(fn) == 1) return float_map(L, n, [fn](const Expr& x) { return loop::call(fn, {x}); });
  return float_binary(L, n, [fn](const Expr& x, const Expr& y) { return loop::call(fn, {x, y}); });
}

// polygamma(n, x) of a constant order n >= 0
LT polygamma_rule(Lowerer& L, const Node& n) {
  const Value& order = L.arg(n, "n");
  if (order.kind != Value::Kind::Int || order.i < 0) throw NoLowering("polygamma of a negative or unknown order");
  int64_t k = order.i;
  DType out = L.out_meta(n).dtype;
  DType ct = float_compute_dtype(out);
  if (!is_floating(ct)) throw NoLowering("integer result");
  LT x = L.tensor(n.args[op_def(n.op).schema.index_of(op_kind(n) == Op::polygamma ? "input" : "self")]);
  return Lowerer::map({x}, ct, out, [k](const V& v) {
    if (k == 0) return loop::call(loop::MathFn::Digamma, {v[0]});
    if (k == 1) return loop::call(loop::MathFn::Trigamma, {v[0]});
    return loop::call(loop::MathFn::Polygamma, {c(static_cast<double>(k), v[0]), v[0]});
  });
}

}  // namespace

void add_pointwise_rules(OpRules& r) {
  using loop::MathFn;
  // real operands only (complex ones: torch)
  // eager (angle_kernel of reals): NaN passes, pi below 0, else 0
  r[Op::angle] = [](Lowerer& L, const Node& n) {
    if (is_complex(L.tensor(n.args[0]).dtype)) throw NoLowering("complex angle");
    return float_map(L, n, [](const Expr& x) {
      return sel(un(UnaryOp::IsNan, x), x, sel(bin(BinaryOp::Lt, x, c(0, x)), c(M_PI, x), c(0, x)));
    });
  };
  r[Op::isreal] = [](Lowerer& L, const Node& n) {
    if (is_complex(L.tensor(n.args[0]).dtype)) throw NoLowering("complex isreal");
    return Lowerer::broadcast(Lowerer::scalar(1, DType::Bool), L.out_meta(n).sizes);
  };
  // eager: pow of both operands converted to float64
  r[Op::float_power] = [](Lowerer& L, const Node& n) {
    if (L.out_meta(n).dtype != DType::Float64) throw NoLowering("complex float_power");
    LT x = Lowerer::cast(L.tensor(n.args[0]), DType::Float64), y = Lowerer::cast(L.tensor(n.args[1]), DType::Float64);
    return Lowerer::map({x, y}, DType::Float64, DType::Float64, [](const V& v) { return bin(BinaryOp::Pow, v[0], v[1]); });
  };
  r[Op::isclose] = isclose_rule;
  r[Op::mvlgamma] = mvlgamma_rule;
  r[Op::ldexp] = ldexp_rule;
  // ---- special functions: the math library ----
#define FF_MATH_RULE(op, fn) r[Op::op] = [](Lowerer& L, const Node& n) { return math_rule(L, n, MathFn::fn); };
  FF_MATH_RULE(digamma, Digamma)
  FF_MATH_RULE(lgamma, Lgamma)
  FF_MATH_RULE(hypot, Hypot)
  FF_MATH_RULE(erfinv, Erfinv)
  FF_MATH_RULE(i0, I0)
  FF_MATH_RULE(special_erfcx, Erfcx)
  FF_MATH_RULE(special_ndtr, Ndtr)
  FF_MATH_RULE(special_ndtri, Ndtri)
  FF_MATH_RULE(special_log_ndtr, LogNdtr)
  FF_MATH_RULE(special_i0e, I0e)
  FF_MATH_RULE(special_i1, I1)
  FF_MATH_RULE(special_i1e, I1e)
  FF_MATH_RULE(special_bessel_j0, BesselJ0)
  FF_MATH_RULE(special_bessel_j1, BesselJ1)
  FF_MATH_RULE(special_bessel_y0, BesselY0)
  FF_MATH_RULE(special_bessel_y1, BesselY1)
  FF_MATH_RULE(special_modified_bessel_i0, I0)
  FF_MATH_RULE(special_modified_bessel_i1, I1)
  FF_MATH_RULE(special_modified_bessel_k0, K0)
  FF_MATH_RULE(special_modified_bessel_k1, K1)
  FF_MATH_RULE(special_scaled_modified_bessel_k0, K0e)
  FF_MATH_RULE(special_scaled_modified_bessel_k1, K1e)
  FF_MATH_RULE(special_spherical_bessel_j0, SphericalJ0)
  FF_MATH_RULE(special_airy_ai, AiryAi)
  FF_MATH_RULE(special_zeta, Zeta)
  FF_MATH_RULE(igamma, Igamma)
  FF_MATH_RULE(igammac, Igammac)
  FF_MATH_RULE(special_chebyshev_polynomial_t, ChebyshevT)
  FF_MATH_RULE(special_chebyshev_polynomial_u, ChebyshevU)
  FF_MATH_RULE(special_chebyshev_polynomial_v, ChebyshevV)
  FF_MATH_RULE(special_chebyshev_polynomial_w, ChebyshevW)
  FF_MATH_RULE(special_shifted_chebyshev_polynomial_t, ShiftedChebyshevT)
  FF_MATH_RULE(special_shifted_chebyshev_polynomial_u, ShiftedChebyshevU)
  FF_MATH_RULE(special_shifted_chebyshev_polynomial_v, ShiftedChebyshevV)
  FF_MATH_RULE(special_shifted_chebyshev_polynomial_w, ShiftedChebyshevW)
  FF_MATH_RULE(special_hermite_polynomial_h, HermiteH)
  FF_MATH_RULE(special_hermite_polynomial_he, HermiteHe)
  FF_MATH_RULE(special_laguerre_polynomial_l, LaguerreL)
  FF_MATH_RULE(special_legendre_polynomial_p, LegendreP)
#undef FF_MATH_RULE
  r[Op::polygamma] = r[Op::tensor_polygamma] = polygamma_rule;
  r[Op::deg2rad] = [](Lowerer& L, const Node& n) { return scale_rule(L, n, M_PI / 180.0); };
  r[Op::rad2deg] = [](Lowerer& L, const Node& n) { return scale_rule(L, n, 180.0 / M_PI); };
  // eager (sinc_kernel): 1 at 0, else sin(pi x) / (pi x), in opmath
  r[Op::sinc] = [](Lowerer& L, const Node& n) {
    return float_map(L, n, [](const Expr& x) {
      Expr p = bin(BinaryOp::Mul, c(M_PI, x), x);
      return sel(bin(BinaryOp::Eq, x, c(0, x)), c(1, x), bin(BinaryOp::Div, un(UnaryOp::Sin, p), p));
    });
  };
  // real dtypes: sign's values (complex: torch)
  r[Op::sgn] = [](Lowerer& L, const Node& n) {
    if (is_complex(L.out_meta(n).dtype)) throw NoLowering("complex sgn");
    return op_lowerings().at(Op::sign)(L, n);
  };
  // eager (logit_kernel): log(x / (1 - x)), x clamped to [eps, 1 - eps] first where eps is given
  // (NaN passes); x == 1 gives inf. In scalar_t on CPU.
  r[Op::logit] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    const Value& e = L.arg(n, "eps");
    if (!e.is_none() && !e.is_number()) throw NoLowering("eps is not a constant");
    bool clamp = !e.is_none() && !std::isnan(e.as_double());
    double eps = clamp ? e.as_double() : 0.0;
    if (clamp && eps == 0.0) throw NoLowering("logit with eps 0 has its own kernel");
    auto rd = per_op_rounding(L, out);
    return float_map(L, n, [clamp, eps, out, rd](const Expr& x) {
      Expr v = x;
      if (clamp) {
        Expr lo = dtype_constant(eps, out, x), hi = rd(bin(BinaryOp::Sub, c(1, x), lo));
        v = sel(bin(BinaryOp::Lt, x, lo), lo, sel(bin(BinaryOp::Gt, x, hi), hi, x));
      }
      Expr q = rd(bin(BinaryOp::Div, v, rd(bin(BinaryOp::Sub, c(1, v), v))));
      return sel(bin(BinaryOp::Eq, v, c(1, v)), c(INFINITY, v), un(UnaryOp::Log, q));
    });
  };
  // eager (entr_kernel): NaN passes, -x log x above 0, 0 at 0, -inf below. In scalar_t on CPU.
  r[Op::special_entr] = [](Lowerer& L, const Node& n) {
    auto rd = per_op_rounding(L, L.out_meta(n).dtype);
    return float_map(L, n, [rd](const Expr& x) {
      Expr v = rd(bin(BinaryOp::Mul, un(UnaryOp::Neg, x), rd(un(UnaryOp::Log, x))));
      Expr r = sel(bin(BinaryOp::Gt, x, c(0, x)), v, sel(bin(BinaryOp::Eq, x, c(0, x)), c(0, x), c(-INFINITY, x)));
      return sel(un(UnaryOp::IsNan, x), x, r);
    });
  };
  r[Op::xlogy] = [](Lowerer& L, const Node& n) { return xlogy_rule(L, n, UnaryOp::Log); };
  r[Op::special_xlog1py] = [](Lowerer& L, const Node& n) { return xlogy_rule(L, n, UnaryOp::Log1p); };
  // eager (heaviside_kernel): values where input is 0, else input > 0; operands of one dtype
  r[Op::heaviside] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    LT x = Lowerer::cast(L.tensor(n.args[0]), out), v = Lowerer::cast(L.tensor(n.args[1]), out);
    return Lowerer::map({x, v}, float_compute_dtype(out), out, [](const V& a) {
      Expr pos = loop::cast(bin(BinaryOp::Gt, a[0], loop::const_of(0, a[0]->type)), a[0]->type);
      return sel(bin(BinaryOp::Eq, a[0], loop::const_of(0, a[0]->type)), a[1], pos);
    });
  };
  // |x| with y's sign bit (exact in any precision)
  r[Op::copysign] = [](Lowerer& L, const Node& n) {
    return float_binary(L, n, [](const Expr& x, const Expr& y) {
      Expr a = un(UnaryOp::Abs, x);
      return sel(un(UnaryOp::SignBit, y), un(UnaryOp::Neg, a), a);
    });
  };
  // eager (logaddexp_kernel; f16/bf16 in float): a where both are the same infinity, else
  // max(a, b) + log1p(exp(-|a - b|))
  r[Op::logaddexp] = [](Lowerer& L, const Node& n) {
    return float_binary(L, n, [](const Expr& a, const Expr& b) {
      Expr m = bin(BinaryOp::Max, a, b);
      Expr v = bin(BinaryOp::Add, m, un(UnaryOp::Log1p, un(UnaryOp::Exp, un(UnaryOp::Neg, un(UnaryOp::Abs, bin(BinaryOp::Sub, a, b))))));
      Expr same_inf = bin(BinaryOp::And, bin(BinaryOp::Eq, un(UnaryOp::Abs, a), c(INFINITY, a)), bin(BinaryOp::Eq, a, b));
      return sel(same_inf, a, v);
    });
  };
  // eager (hardshrink_kernel): 0 inside [-lambd, lambd], else x; lambd converted to the dtype
  r[Op::hardshrink] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    double l = number(L, n, "lambd");
    return float_map(L, n, [l, out](const Expr& x) {
      Expr lam = dtype_constant(l, out, x);
      Expr inside = bin(BinaryOp::And, bin(BinaryOp::Ge, x, un(UnaryOp::Neg, lam)), bin(BinaryOp::Le, x, lam));
      return sel(inside, c(0, x), x);
    });
  };
  // eager (softshrink_kernel): x - lambd above lambd, x + lambd below -lambd, else x * 0 (a signed
  // zero, NaN for NaN)
  r[Op::softshrink] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    double l = number(L, n, "lambd");
    return float_map(L, n, [l, out](const Expr& x) {
      Expr lam = dtype_constant(l, out, x);
      Expr below = sel(bin(BinaryOp::Lt, x, un(UnaryOp::Neg, lam)), bin(BinaryOp::Add, x, lam), bin(BinaryOp::Mul, x, c(0, x)));
      return sel(bin(BinaryOp::Gt, x, lam), bin(BinaryOp::Sub, x, lam), below);
    });
  };
  // eager (threshold_kernel): value where x <= threshold, else x; both numbers converted to the dtype
  r[Op::threshold] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    if (out == DType::Bool) throw NoLowering("bool threshold");
    double th = number(L, n, "threshold"), val = number(L, n, "value");
    return Lowerer::map({L.tensor(n.args[0])}, float_compute_dtype(out), out, [th, val, out](const V& v) {
      return sel(bin(BinaryOp::Le, v[0], dtype_constant(th, out, v[0])), dtype_constant(val, out, v[0]), v[0]);
    });
  };
  // eager (prelu: _prelu_kernel): x > 0 ? x : w * x, the weight along dim 1 (one weight: everywhere)
  r[Op::prelu] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    if (!is_floating(out)) throw NoLowering("integer prelu");
    LT x = L.tensor(n.args[0]), w = L.tensor(n.args[1]);
    if (w.dim() > 1) throw NoLowering("prelu weight rank");
    if (w.dim() == 1 && w.sizes[0] != 1) {
      if (x.dim() < 2 || w.sizes[0] != x.sizes[1]) throw NoLowering("prelu weight size");
      SymShape s{w.sizes[0]};
      for (int64_t d = 2; d < x.dim(); ++d) s.push_back(1);
      w = L.reshape(w, s);
    } else {
      w = L.reshape(w, SymShape{});
    }
    return Lowerer::map({x, Lowerer::cast(w, out)}, float_compute_dtype(out), out, [](const V& v) {
      return sel(bin(BinaryOp::Gt, v[0], c(0, v[0])), v[0], bin(BinaryOp::Mul, v[1], v[0]));
    });
  };
}

}  // namespace ff::inductor
