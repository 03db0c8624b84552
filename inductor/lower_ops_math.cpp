// Rules of the lowering table for the math functions, the rounding divisions (floor_divide,
// remainder, fmod), the bitwise and logical ops, the float tests (isinf, signbit...) and the bool
// reductions (all, any): each eager kernel's formula in loop IR primitives. Where a result
// depends on something the kernel cannot see (an integer divisor that may be zero: eager raises),
// the rule throws NoLowering and torch runs the op.
#include <cfloat>
#include <cmath>
#include <limits>

#include "graph/meta_rules.h"
#include "inductor/lower_internal.h"

namespace ff::inductor {

using loop::BinaryOp;
using loop::ReduceOp;
using loop::UnaryOp;
using V = std::vector<Expr>;

using formula::bin;
using formula::c;
using formula::sel;
using formula::un;

// `v` as eager converts a Python int to the integer dtype `dt` (two's complement wrap).
int64_t wrap_to(int64_t v, DType dt) {
  switch (dt) {
    case DType::UInt8: return static_cast<uint8_t>(v);
    case DType::Int8: return static_cast<int8_t>(v);
    case DType::Int16: return static_cast<int16_t>(v);
    case DType::Int32: return static_cast<int32_t>(v);
    default: return v;
  }
}

namespace {

LT float_unary(Lowerer& L, const Node& n, UnaryOp op) {
  return float_map(L, n, [op](const Expr& x) { return un(op, x); });
}

// A test of the operand's value giving bool: `fl` on floats (in their compute type), the constant
// `ints` on ints and bools (they are never inf or NaN), or `int_fn` where given.
LT float_test(Lowerer& L, const Node& n, const std::function<Expr(const Expr&)>& fl, bool ints,
              const std::function<Expr(const Expr&)>& int_fn = nullptr) {
  LT x = L.tensor(n.args[0]);
  if (is_floating(x.dtype))
    return Lowerer::map({x}, float_compute_dtype(x.dtype), DType::Bool, [fl](const V& v) { return fl(v[0]); });
  if (int_fn && x.dtype != DType::Bool) return Lowerer::map({x}, x.dtype, DType::Bool, [int_fn](const V& v) { return int_fn(v[0]); });
  return Lowerer::map({x}, x.dtype, DType::Bool, [ints](const V&) { return loop::const_of(ints ? 1 : 0, loop::ScalarType::Bool); });
}

Expr is_inf(const Expr& x) { return bin(BinaryOp::Eq, un(UnaryOp::Abs, x), c(INFINITY, x)); }

// The largest finite value of a float dtype.
double max_finite(DType dt) {
  switch (dt) {
    case DType::Float64: return DBL_MAX;
    case DType::Float16: return 65504.0;
    case DType::BFloat16: return 3.3895313892515355e38;  // (2 - 2^-7) * 2^127
    default: return FLT_MAX;
  }
}

LT int_divide_cuda(const LT& x, const LT& y, DType out, BinaryOp op);

// Integer division, remainder or fmod (`op`) of a by b in the result dtype. A Python int divisor
// is neither 0 in the dtype (eager raises) nor -1 (INT_MIN / -1 overflows; x86 traps). A tensor
// divisor: eager CPU raises ZeroDivisionError where an element is 0, which the program checks
// (Lowerer::check_none); the kernel divides by 1 there, and by -1 it negates (a remainder of 0)
// instead of dividing.
LT int_divide(Lowerer& L, const Node& n, const Value& a, const Value& b, BinaryOp op) {
  DType out = L.out_meta(n).dtype;
  if (out == DType::Bool) throw NoLowering("bool division");
  if (b.kind == Value::Kind::Int) {
    int64_t v = wrap_to(b.i, out);
    if (v == 0) throw NoLowering("integer division by zero raises in eager");
    if (v == -1) throw NoLowering("integer division by -1");
    return Lowerer::map({L.tensor(a), L.tensor(b)}, out, out, [op](const V& v) { return bin(op, v[0], v[1]); });
  }
  LT x = Lowerer::cast(L.tensor(a), out), y = Lowerer::cast(L.tensor(b), out);
  if (on_cuda(L)) return int_divide_cuda(x, y, out, op);
  L.check_none(Lowerer::map({Lowerer::broadcast(y, L.out_meta(n).sizes)}, out, DType::Bool,
                            [](const V& v) { return bin(BinaryOp::Eq, v[0], c(0, v[0])); }),
               "ZeroDivisionError");
  return Lowerer::map({x, y}, out, out, [op](const V& v) {
    Expr zero = c(0, v[1]);
    Expr by_minus_one = bin(BinaryOp::Eq, v[1], c(-1, v[1]));
    Expr safe = sel(bin(BinaryOp::Or, bin(BinaryOp::Eq, v[1], zero), by_minus_one), c(1, v[1]), v[1]);
    Expr negated = op == BinaryOp::FloorDiv || op == BinaryOp::Div ? bin(BinaryOp::Sub, zero, v[0]) : zero;
    return sel(by_minus_one, negated, bin(op, v[0], safe));
  });
}

// op(x, y) as eager CUDA gives it: no check of the divisor, and where it is 0 the hardware's
// division result (all bits set: NVIDIA's integer division by 0; int64 takes a 32-bit unsigned
// path where both operands fit in 32 bits, giving 2^32 - 1) through eager's floor and remainder
// fix-ups: floor gives -2 for a negative dividend, remainder adds the divisor 0. Narrower ints
// compute in int and wrap (uint8: 255). A divisor of -1 negates, as on the CPU. Measured on an
// H200, torch 2.11.
LT int_divide_cuda(const LT& x, const LT& y, DType out, BinaryOp op) {
  return Lowerer::map({x, y}, out, out, [op, out](const V& v) {
    Expr zero = c(0, v[1]), by_zero = bin(BinaryOp::Eq, v[1], zero);
    Expr by_minus_one = bin(BinaryOp::Eq, v[1], c(-1, v[1]));
    Expr safe = sel(bin(BinaryOp::Or, by_zero, by_minus_one), c(1, v[1]), v[1]);
    Expr negated = op == BinaryOp::FloorDiv || op == BinaryOp::Div ? bin(BinaryOp::Sub, zero, v[0]) : zero;
    Expr ones = c(-1, v[0]);
    if (out == DType::Int64) {
      Expr fits = bin(BinaryOp::And, bin(BinaryOp::Ge, v[0], zero), bin(BinaryOp::Lt, v[0], c(4294967296.0, v[0])));
      ones = sel(fits, c(4294967295.0, v[0]), ones);
    }
    if (op == BinaryOp::FloorDiv && out != DType::UInt8) ones = sel(bin(BinaryOp::Lt, v[0], zero), c(-2, v[0]), ones);
    return sel(by_zero, ones, sel(by_minus_one, negated, bin(op, v[0], safe)));
  });
}

// op(a, b) of the operands converted to the result dtype (a number too: eager reads it in the
// dtype), computed in the float compute type and rounded once: eager's fmod and remainder of f16
// and bf16 give that (fmod is exact in any precision, remainder's one add rounds once; measured
// on torch 2.13 for tensors, 0-d tensors and numbers on either side).
LT binary_in_dtype(Lowerer& L, const Node& n, const Value& a, const Value& b, BinaryOp op) {
  DType out = L.out_meta(n).dtype;
  DType ct = float_compute_dtype(out);
  LT x = Lowerer::cast(L.tensor(a), out), y = Lowerer::cast(L.tensor(b), out);
  return Lowerer::map({x, y}, ct, out, [op](const V& v) { return bin(op, v[0], v[1]); });
}

// NB: eager CPU's vector loop computes fmod with SLEEF, which gives NaN where x / y overflows the
// dtype (fmod(1.0f, 1e-40f)); its scalar loop (a row's tail) and eager CUDA give C's fmod, as the
// kernels do everywhere. Eager has no one answer there.
LT rounding_binary(Lowerer& L, const Node& n, const Value& a, const Value& b, BinaryOp op) {
  DType out = L.out_meta(n).dtype;
  if (!is_floating(out)) return int_divide(L, n, a, b, op == BinaryOp::Mod ? BinaryOp::Mod : BinaryOp::Fmod);
  // NB: eager CUDA's f16/bf16 remainder is this formula too: fmod in float, the divisor's add in
  // float, rounded once; a number read in the dtype (measured on an H200, torch 2.11)
  return binary_in_dtype(L, n, a, b, op);
}

// Whether eager CPU reads `v` as a "cpu scalar" at f32 in a reduced-float op (torch >= 2: a
// Python number or a 0-d tensor).
bool cpu_scalar(Lowerer& L, const Value& v) {
  if (!torch_at_least(2, 0)) return false;
  if (v.is_number()) return true;
  const Node* t = v.is_node() ? &L.graph().node(v.node) : nullptr;
  return t && t->meta.is_tensor() && t->meta.tensor.dim() == 0;
}

// eager's div_floor_floating (c10/util/generic_math.h): the quotient of a - fmod(a, b), moved down
// by one where the remainder's sign differs from b's, then floored (rounding up a difference
// above 0.5); a zero quotient takes the sign of a / b, and b == 0 gives a / b. `step` rounds
// each op's result where eager computes in the dtype's own arithmetic (f16/bf16 tensors on the
// CPU), `result` the floored quotient where eager stores it in the dtype (CPU and CUDA).
Expr floor_div_float(const Expr& a, const Expr& b, const std::function<Expr(Expr)>& step, const std::function<Expr(Expr)>& result) {
  Expr q = step(bin(BinaryOp::Div, a, b));
  Expr mod = bin(BinaryOp::Fmod, a, b);  // exact
  Expr zero = c(0, a);
  Expr div = step(bin(BinaryOp::Div, step(bin(BinaryOp::Sub, a, mod)), b));
  Expr differ = bin(BinaryOp::And, bin(BinaryOp::Ne, mod, zero), bin(BinaryOp::Ne, bin(BinaryOp::Lt, b, zero), bin(BinaryOp::Lt, mod, zero)));
  div = sel(differ, step(bin(BinaryOp::Sub, div, c(1, a))), div);
  Expr fl = result(un(UnaryOp::Floor, div));
  fl = sel(bin(BinaryOp::Gt, step(bin(BinaryOp::Sub, div, fl)), c(0.5, a)), result(bin(BinaryOp::Add, fl, c(1, a))), fl);
  Expr signed_zero = sel(un(UnaryOp::SignBit, q), c(-0.0, a), zero);
  Expr r = sel(bin(BinaryOp::Ne, div, zero), fl, signed_zero);
  return sel(bin(BinaryOp::Eq, b, zero), q, r);
}

LT elu_like(Lowerer& L, const Node& n, double alpha, double scale, double input_scale) {
  DType ct = float_compute_dtype(L.out_meta(n).dtype);
  // NB: eager multiplies alpha by scale in opmath (float for f32, f16, bf16)
  double negcoef = ct == DType::Float32 ? static_cast<double>(static_cast<float>(alpha) * static_cast<float>(scale)) : alpha * scale;
  // NB: eager CPU before torch 2.11 takes exp(x * input_scale) - 1 (0 for a tiny x), expm1 since
  // (measured: celu(-1.08e-19) is 0 on 1.13, -1.08e-19 on 2.13); eager CUDA takes expm1.
  bool exp_minus_one = !on_cuda(L) && !torch_at_least(2, 11);
  return float_map(L, n, [negcoef, scale, input_scale, exp_minus_one](const Expr& x) {
    Expr pos = scale == 1.0 ? x : bin(BinaryOp::Mul, x, c(scale, x));
    Expr arg = input_scale == 1.0 ? x : bin(BinaryOp::Mul, x, c(input_scale, x));
    Expr em1 = exp_minus_one ? bin(BinaryOp::Sub, un(UnaryOp::Exp, arg), c(1, x)) : un(UnaryOp::Expm1, arg);
    return sel(bin(BinaryOp::Gt, x, c(0, x)), pos, bin(BinaryOp::Mul, em1, c(negcoef, x)));
  });
}

LT fminmax(Lowerer& L, const Node& n, BinaryOp op) {
  DType out = L.out_meta(n).dtype;
  if (out == DType::Bool)  // the larger of two bools is their or, the smaller their and
    return Lowerer::map({L.tensor(n.args[0]), L.tensor(n.args[1])}, out, out, [op](const V& v) {
      return bin(op == BinaryOp::Max ? BinaryOp::Or : BinaryOp::And, v[0], v[1]);
    });
  bool fl = is_floating(out);
  LT x = Lowerer::cast(L.tensor(n.args[0]), out), y = Lowerer::cast(L.tensor(n.args[1]), out);
  return Lowerer::map({x, y}, float_compute_dtype(out), out, [op, fl](const V& v) {
    Expr m = bin(op, v[0], v[1]);
    if (!fl) return m;
    return sel(un(UnaryOp::IsNan, v[0]), v[1], sel(un(UnaryOp::IsNan, v[1]), v[0], m));
  });
}

LT bitwise(Lowerer& L, const Node& n, BinaryOp op) {
  DType out = L.out_meta(n).dtype;
  if (is_floating(out)) throw NoLowering("bitwise op on floats");
  return Lowerer::map({L.tensor(n.args[0]), L.tensor(n.args[1])}, out, out, [op](const V& v) { return bin(op, v[0], v[1]); });
}

// eager's shifts (torch >= 2): a count outside [0, max) gives 0 (left, max = the bit width) or the
// sign fill a >> max (right, max = the bit width less the sign bit); the count is read in the
// result dtype (a Python int wraps to it). Values of 8/16-bit dtypes are held in 32 bits: a left
// shift there narrows on the store as eager's does.
// NB: torch 1.x shifts by the count modulo the bit width in its scalar loop only (C++'s undefined
// behaviour as x86 does it): kept in torch there.
LT shift(Lowerer& L, const Node& n, bool left) {
  DType out = L.out_meta(n).dtype;
  if (!is_integral(out, false)) throw NoLowering("shift without an integral result");
  if (!torch_at_least(2, 0)) throw NoLowering("torch 1.x shifts by the count modulo the bit width");
  auto operand = [&](const Value& v) {
    return v.kind == Value::Kind::Int ? L.tensor(Value::of_int(wrap_to(v.i, out))) : Lowerer::cast(L.tensor(v), out);
  };
  int64_t bits = 8 * static_cast<int64_t>(dtype_size(out));
  int64_t max_shift = left || out == DType::UInt8 ? bits : bits - 1;
  return Lowerer::map({operand(n.args[0]), operand(n.args[1])}, out, out, [left, max_shift](const V& v) {
    Expr outside = bin(BinaryOp::Or, bin(BinaryOp::Lt, v[1], c(0, v[1])), bin(BinaryOp::Ge, v[1], c(max_shift, v[1])));
    if (left) return sel(outside, c(0, v[0]), bin(BinaryOp::Shl, v[0], v[1]));
    return sel(outside, bin(BinaryOp::Shr, v[0], c(max_shift, v[1])), bin(BinaryOp::Shr, v[0], v[1]));
  });
}

// eager's gcd and lcm (calc_gcd): Euclid's loop on the operands' abs in the dtype (math library);
// lcm is |a / g * b|, 0 where g is, wrapping in the dtype.
LT gcd_lcm(Lowerer& L, const Node& n, bool lcm) {
  DType out = L.out_meta(n).dtype;
  if (!is_integral(out, false)) throw NoLowering("gcd of a non-integral dtype");
  LT a = Lowerer::cast(L.tensor(n.args[0]), out), b = Lowerer::cast(L.tensor(n.args[1]), out);
  return Lowerer::map({a, b}, out, out, [out, lcm](const V& v) {
    auto abs_in_dtype = [out](const Expr& x) { return loop::narrow(un(UnaryOp::Abs, x), out); };
    Expr g = loop::call(loop::MathFn::Gcd, {abs_in_dtype(v[0]), abs_in_dtype(v[1])});
    if (!lcm) return g;
    Expr zero = c(0, g), one = c(1, g);
    Expr safe = sel(bin(BinaryOp::Or, bin(BinaryOp::Eq, g, zero), bin(BinaryOp::Eq, g, c(-1, g))), one, g);
    Expr q = sel(bin(BinaryOp::Eq, g, c(-1, g)), bin(BinaryOp::Sub, zero, v[0]), bin(BinaryOp::Div, v[0], safe));
    return sel(bin(BinaryOp::Eq, g, zero), zero, un(UnaryOp::Abs, bin(BinaryOp::Mul, q, v[1])));
  });
}

LT all_any(Lowerer& L, const Node& n, bool all) {
  DType out = L.out_meta(n).dtype;
  LT x = L.tensor_arg(n, "input");
  LT flags = Lowerer::map({x}, x.dtype, DType::Int64, [all](const V& v) {
    Expr t = loop::cast(v[0], loop::ScalarType::Bool);
    return loop::cast(all ? un(UnaryOp::Not, t) : t, loop::ScalarType::I64);
  });
  const Value& d = L.arg(n, "dim");
  if (d.is_sequence() && d.items.empty())  // all.dims over no dims: each element's truth (measured on torch 2.13)
    return Lowerer::map({x}, x.dtype, out, [out](const V& v) {
      return loop::cast(loop::cast(v[0], loop::ScalarType::Bool), loop::dtype_compute_type(out));
    });
  std::vector<int64_t> dims = dims_of(d);  // an int, a list (all.dims, typed by torch), or None
  LT count = L.reduce(flags, dims, L.arg(n, "keepdim").b, ReduceOp::Sum, DType::Int64);
  return Lowerer::map({count}, DType::Int64, out, [all](const V& v) {
    Expr z = loop::const_int(0);
    return loop::cast(bin(all ? BinaryOp::Eq : BinaryOp::Gt, v[0], z), loop::ScalarType::Bool);
  });
}

// The elements of x that are not NaN, NaN read as 0 (nansum's operand), in the accumulator `acc`.
LT nan_as_zero(const LT& x, DType acc) {
  if (!is_floating(x.dtype)) return Lowerer::cast(x, acc);
  return Lowerer::map({x}, acc, acc, [](const V& v) { return sel(un(UnaryOp::IsNan, v[0]), c(0, v[0]), v[0]); });
}

// nansum / nanmean: sum's accumulator (float for f16/bf16, int64 for ints and bools). nanmean is
// eager's composite: nansum rounded to the dtype, divided by the count of non-NaN elements.
LT nan_reduce(Lowerer& L, const Node& n, bool mean) {
  DType out = L.out_meta(n).dtype;
  if (!L.arg(n, "dtype").is_none()) throw NoLowering("dtype= converts first");
  LT x = L.tensor_arg(n, "input");
  if (mean && !is_floating(x.dtype)) throw NoLowering("nanmean of a non-float");
  DType acc = is_floating(out) ? float_compute_dtype(out) : DType::Int64;
  std::vector<int64_t> dims = dims_of(L.arg(n, "dim"));
  bool keepdim = L.arg(n, "keepdim").b;
  LT s = Lowerer::cast(L.reduce(nan_as_zero(x, acc), dims, keepdim, ReduceOp::Sum, acc), out);
  if (!mean) return s;
  LT present = Lowerer::map({x}, float_compute_dtype(x.dtype), DType::Int64, [](const V& v) {
    return loop::cast(un(UnaryOp::Not, un(UnaryOp::IsNan, v[0])), loop::ScalarType::I64);
  });
  LT count = Lowerer::cast(L.reduce(present, dims, keepdim, ReduceOp::Sum, DType::Int64), out);
  return Lowerer::map({s, count}, acc, out, [](const V& v) { return bin(BinaryOp::Div, v[0], v[1]); });
}

// eager CUDA's floor division by a Python number b (div_floor_kernel_cuda's scalar path): b in
// the float compute type (not rounded to f16/bf16), its reciprocal taken on the host; b == 0 gives
// a * (1 / b); else the quotient (a - fmod(a, b)) * (1 / b), its product not fused into another op,
// moved down by one where the remainder's sign differs from b's, floored (rounding up a
// difference above 0.5) and stored in the dtype; a zero quotient takes the sign of a * (1 / b).
// Measured on an H200, torch 2.11, for every float dtype.
LT floor_divide_by_number_cuda(Lowerer& L, const Value& a, double b, DType out) {
  DType ct = float_compute_dtype(out);
  bool f32 = ct == DType::Float32;
  double bc = f32 ? static_cast<double>(static_cast<float>(b)) : b;
  double inv = f32 ? static_cast<double>(1.0f / static_cast<float>(bc)) : 1.0 / bc;
  auto in_dtype = rounding_to(out);
  return Lowerer::map({Lowerer::cast(L.tensor(a), out)}, ct, out, [bc, inv, in_dtype](const V& v) {
    const Expr& x = v[0];
    Expr scaled = loop::rounded(bin(BinaryOp::Mul, x, c(inv, x)));
    if (bc == 0) return scaled;
    Expr mod = bin(BinaryOp::Fmod, x, c(bc, x));  // exact
    Expr zero = c(0, x);
    Expr div = loop::rounded(bin(BinaryOp::Mul, bin(BinaryOp::Sub, x, mod), c(inv, x)));
    Expr differ = bin(BinaryOp::And, bin(BinaryOp::Ne, mod, zero), bc < 0 ? bin(BinaryOp::Ge, mod, zero) : bin(BinaryOp::Lt, mod, zero));
    div = sel(differ, bin(BinaryOp::Sub, div, c(1, x)), div);
    Expr fl = in_dtype(un(UnaryOp::Floor, div));
    fl = sel(bin(BinaryOp::Gt, bin(BinaryOp::Sub, div, fl), c(0.5, x)), in_dtype(bin(BinaryOp::Add, fl, c(1, x))), fl);
    Expr signed_zero = sel(un(UnaryOp::SignBit, scaled), c(-0.0, x), zero);
    return sel(bin(BinaryOp::Ne, div, zero), fl, signed_zero);
  });
}

}  // namespace

LT floor_divide(Lowerer& L, const Node& n, const Value& a, const Value& b) {
  DType out = L.out_meta(n).dtype;
  if (!is_floating(out)) return int_divide(L, n, a, b, BinaryOp::FloorDiv);
  auto exact = [](Expr e) { return e; };
  auto in_dtype = rounding_to(out);
  if (on_cuda(L)) {
    if (b.is_number()) return floor_divide_by_number_cuda(L, a, b.as_double(), out);
    // eager CUDA between tensors: every step in float (f16/bf16 too), the floored quotient stored
    // in the dtype (measured on an H200, torch 2.11)
    return Lowerer::map({Lowerer::cast(L.tensor(a), out), Lowerer::cast(L.tensor(b), out)}, float_compute_dtype(out), out,
                        [exact, in_dtype](const V& v) { return floor_div_float(v[0], v[1], exact, in_dtype); });
  }
  if (!loop::needs_narrowing(out))
    return Lowerer::map({L.tensor(a), L.tensor(b)}, out, out, [exact](const V& v) { return floor_div_float(v[0], v[1], exact, exact); });
  // f16/bf16, measured on torch 2.13's CPU kernels: a cpu scalar divisor (a number or a 0-d
  // tensor) is read at f32 and the whole formula computed in f32; between tensors, and for a cpu
  // scalar dividend (converted to the dtype), every step is rounded to the dtype. torch 1.13
  // converts a number divisor to the dtype too and rounds every step (measured).
  LT x = Lowerer::cast(L.tensor(a), out);
  if (cpu_scalar(L, b))  // a cpu scalar dividend too (0-d // 0-d: measured); never on torch 1
    return Lowerer::map({x, L.tensor(b)}, DType::Float32, out, [exact](const V& v) { return floor_div_float(v[0], v[1], exact, exact); });
  LT y = Lowerer::cast(L.tensor(b), out);
  return Lowerer::map({x, y}, DType::Float32, out, [in_dtype](const V& v) { return floor_div_float(v[0], v[1], in_dtype, in_dtype); });
}

LT trunc_divide_int(Lowerer& L, const Node& n, const Value& a, const Value& b) { return int_divide(L, n, a, b, BinaryOp::Div); }

void add_math_rules(OpRules& r) {
  // ---- math functions: libm's (CPU; eager's SLEEF is within the same ulp) and CUDA's ----
  r[Op::asin] = [](Lowerer& L, const Node& n) { return float_unary(L, n, UnaryOp::Asin); };
  r[Op::acos] = [](Lowerer& L, const Node& n) { return float_unary(L, n, UnaryOp::Acos); };
  r[Op::atan] = [](Lowerer& L, const Node& n) { return float_unary(L, n, UnaryOp::Atan); };
  r[Op::sinh] = [](Lowerer& L, const Node& n) { return float_unary(L, n, UnaryOp::Sinh); };
  r[Op::cosh] = [](Lowerer& L, const Node& n) { return float_unary(L, n, UnaryOp::Cosh); };
  r[Op::asinh] = [](Lowerer& L, const Node& n) { return float_unary(L, n, UnaryOp::Asinh); };
  r[Op::acosh] = [](Lowerer& L, const Node& n) { return float_unary(L, n, UnaryOp::Acosh); };
  r[Op::atanh] = [](Lowerer& L, const Node& n) { return float_unary(L, n, UnaryOp::Atanh); };
  r[Op::erfc] = [](Lowerer& L, const Node& n) { return float_unary(L, n, UnaryOp::Erfc); };
  r[Op::atan2] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    DType ct = float_compute_dtype(out);
    if (!is_floating(ct)) throw NoLowering("integer atan2");
    return binary_in_dtype(L, n, n.args[0], n.args[1], BinaryOp::Atan2);
  };
  r[Op::round] = [](Lowerer& L, const Node& n) {
    const Value& d = L.arg(n, "decimals");
    if (d.kind != Value::Kind::Int) throw NoLowering("decimals is not a constant");
    DType out = L.out_meta(n).dtype;
    if (out == DType::Bool) throw NoLowering("bool round");
    if (!is_floating(out)) {
      if (d.i != 0) throw NoLowering("round of ints with decimals");
      return L.tensor(n.args[0]);
    }
    if (d.i == 0) return float_unary(L, n, UnaryOp::Round);
    if (loop::needs_narrowing(out) && (on_cuda(L) || !torch_at_least(2, 0))) {
      // eager CUDA (round_decimals_kernel_cuda) and torch 1.13's CPU kernel compute in the dtype:
      // 10^|decimals| converted to it (through float), the product or quotient rounded to it before
      // nearbyint (measured: an H200 with torch 2.11, and torch 1.13; f16 with |decimals| >= 5 gives
      // NaN: the power is inf)
      float pf = static_cast<float>(std::pow(10.0, static_cast<double>(std::abs(d.i))));
      bool neg = d.i < 0;
      return Lowerer::map({L.tensor(n.args[0])}, DType::Float32, out, [pf, neg, out](const V& v) {
        Expr p = loop::narrow(c(pf, v[0]), out);
        Expr t = loop::narrow(bin(neg ? BinaryOp::Div : BinaryOp::Mul, v[0], p), out);
        return bin(neg ? BinaryOp::Mul : BinaryOp::Div, un(UnaryOp::Round, t), p);
      });
    }
    // eager's round_decimals: by 10^|decimals| taken in opmath, nearbyint(x * p) / p, or
    // nearbyint(x / p) * p for negative decimals (measured equal on CPU for every float dtype)
    DType ct = float_compute_dtype(out);
    double p = std::pow(10.0, static_cast<double>(std::abs(d.i)));
    if (ct == DType::Float32) p = static_cast<double>(static_cast<float>(p));
    bool neg = d.i < 0;
    return float_map(L, n, [p, neg](const Expr& x) {
      Expr pc = c(p, x);
      return neg ? bin(BinaryOp::Mul, un(UnaryOp::Round, bin(BinaryOp::Div, x, pc)), pc)
                 : bin(BinaryOp::Div, un(UnaryOp::Round, bin(BinaryOp::Mul, x, pc)), pc);
    });
  };
  // eager CPU (addcdiv_cpu_kernel): a + value * b / c, the product first (measured equal for every
  // float dtype); eager CUDA (addcdiv_cuda_kernel): a + value * (b / c). Ints raise in eager.
  r[Op::addcdiv] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    if (!is_floating(out)) throw NoLowering("integer addcdiv");
    const Value& vv = L.arg(n, "value");
    if (!vv.is_number()) throw NoLowering("value is not a constant");
    double val = vv.as_double();
    bool cuda = on_cuda(L);
    std::vector<LT> ops{Lowerer::cast(L.tensor(n.args[0]), out), Lowerer::cast(L.tensor(n.args[1]), out), Lowerer::cast(L.tensor(n.args[2]), out)};
    return Lowerer::map(ops, float_compute_dtype(out), out, [val, cuda](const V& v) {
      Expr q = cuda ? bin(BinaryOp::Mul, c(val, v[1]), bin(BinaryOp::Div, v[1], v[2]))
                    : bin(BinaryOp::Div, bin(BinaryOp::Mul, c(val, v[1]), v[1]), v[2]);
      return bin(BinaryOp::Add, v[0], q);
    });
  };
  // eager CPU (addcmul_cpu_kernel): a + value * b * c, value * b first (the add fused: mul_add);
  // eager CUDA: fma(value, b * c, a)
  // (pointwise_op_impl; older versions a + value * (b * c), contracted the same way).
  r[Op::addcmul] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    double val = number(L, n, "value");
    bool cuda = on_cuda(L);
    return Lowerer::map({L.tensor(n.args[0]), L.tensor(n.args[1]), L.tensor(n.args[2])}, float_compute_dtype(out), out, [&L, val, cuda](const V& v) {
      if (val == 1.0) return mul_add(L, v[1], v[2], v[0]);
      if (cuda) return bin(BinaryOp::Add, v[0], bin(BinaryOp::Mul, bin(BinaryOp::Mul, v[1], v[2]), c(val, v[1])));
      return mul_add(L, bin(BinaryOp::Mul, c(val, v[1]), v[1]), v[2], v[0]);
    });
  };
  // eager: x - trunc(x), exact in every float dtype
  r[Op::frac] = [](Lowerer& L, const Node& n) {
    return float_map(L, n, [](const Expr& x) {
      Expr t = sel(bin(BinaryOp::Lt, x, c(0, x)), un(UnaryOp::Ceil, x), un(UnaryOp::Floor, x));
      return bin(BinaryOp::Sub, x, t);
    });
  };
  // ---- float tests ----
  r[Op::isinf] = [](Lowerer& L, const Node& n) { return float_test(L, n, is_inf, false); };
  r[Op::isposinf] = [](Lowerer& L, const Node& n) {
    return float_test(L, n, [](const Expr& x) { return bin(BinaryOp::Eq, x, c(INFINITY, x)); }, false);
  };
  r[Op::isneginf] = [](Lowerer& L, const Node& n) {
    return float_test(L, n, [](const Expr& x) { return bin(BinaryOp::Eq, x, c(-INFINITY, x)); }, false);
  };
  r[Op::isfinite] = [](Lowerer& L, const Node& n) {
    // NB: |x| < inf is false for NaN too
    return float_test(L, n, [](const Expr& x) { return bin(BinaryOp::Lt, un(UnaryOp::Abs, x), c(INFINITY, x)); }, true);
  };
  r[Op::signbit] = [](Lowerer& L, const Node& n) {
    return float_test(L, n, [](const Expr& x) { return un(UnaryOp::SignBit, x); }, false, [](const Expr& x) { return bin(BinaryOp::Lt, x, loop::const_of(0, x->type)); });
  };
  r[Op::nan_to_num] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    LT x = L.tensor(n.args[0]);
    if (!is_floating(out)) return x;  // eager: a copy
    auto value = [&](const char* name, double dflt) {
      const Value& v = L.arg(n, name);
      if (v.is_none()) return dflt;
      if (!v.is_number()) throw NoLowering(std::string(name) + " is not a constant");
      return v.as_double();
    };
    // NB: the replacements are converted to the dtype as eager's static_cast<scalar_t> does:
    // through float for f16 and bf16, which the f32 literal and the result's rounding repeat.
    double nan = value("nan", 0.0), pos = value("posinf", max_finite(out)), neg = value("neginf", -max_finite(out));
    return Lowerer::map({x}, float_compute_dtype(out), out, [nan, pos, neg](const V& v) {
      const Expr& e = v[0];
      Expr r = sel(bin(BinaryOp::Eq, e, c(INFINITY, e)), c(pos, e), e);
      r = sel(bin(BinaryOp::Eq, e, c(-INFINITY, e)), c(neg, e), r);
      return sel(un(UnaryOp::IsNan, e), c(nan, e), r);
    });
  };
  // ---- activations (eager's elu kernel: x > 0 ? x * scale : expm1(x * input_scale) * alpha * scale) ----

  r[Op::elu] = [](Lowerer& L, const Node& n) {
    no_inplace(L, n);
    return elu_like(L, n, number(L, n, "alpha"), 1.0, 1.0);
  };
  r[Op::selu] = [](Lowerer& L, const Node& n) {
    no_inplace(L, n);
    return elu_like(L, n, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1.0);
  };
  r[Op::celu] = [](Lowerer& L, const Node& n) {
    no_inplace(L, n);
    const Value& a = L.arg(n, "alpha");
    if (!a.is_number()) throw NoLowering("alpha is not a constant");
    double alpha = a.as_double();
    if (alpha == 0) throw NoLowering("celu with alpha 0");  // eager raises
    return elu_like(L, n, alpha, 1.0, 1.0 / alpha);
  };
  // eager (log_sigmoid_cpu_kernel, and CUDA's): min(x, 0) - log1p(exp(-|x|)), NaN propagating
  r[Op::logsigmoid] = [](Lowerer& L, const Node& n) {
    return float_map(L, n, [](const Expr& x) {
      return bin(BinaryOp::Sub, bin(BinaryOp::Min, x, c(0, x)), un(UnaryOp::Log1p, un(UnaryOp::Exp, un(UnaryOp::Neg, un(UnaryOp::Abs, x)))));
    });
  };
  // ---- binary ----
  // fmax/fmin: the other operand where one is NaN

  r[Op::fmax] = [](Lowerer& L, const Node& n) { return fminmax(L, n, BinaryOp::Max); };
  r[Op::fmin] = [](Lowerer& L, const Node& n) { return fminmax(L, n, BinaryOp::Min); };
  r[Op::fmod] = [](Lowerer& L, const Node& n) { return rounding_binary(L, n, n.args[0], n.args[1], BinaryOp::Fmod); };
  r[Op::remainder] = r[Op::op_mod] = [](Lowerer& L, const Node& n) {
    return rounding_binary(L, n, n.args[0], n.args[1], BinaryOp::Mod);
  };
  r[Op::floor_divide] = r[Op::op_floordiv] = [](Lowerer& L, const Node& n) { return floor_divide(L, n, n.args[0], n.args[1]); };
  // ---- bitwise and logical ----

  r[Op::bitwise_and] = r[Op::op_and] = [](Lowerer& L, const Node& n) { return bitwise(L, n, BinaryOp::BitAnd); };
  r[Op::bitwise_or] = r[Op::op_or] = [](Lowerer& L, const Node& n) { return bitwise(L, n, BinaryOp::BitOr); };
  r[Op::bitwise_xor] = r[Op::op_xor] = [](Lowerer& L, const Node& n) { return bitwise(L, n, BinaryOp::BitXor); };
  r[Op::gcd] = [](Lowerer& L, const Node& n) { return gcd_lcm(L, n, false); };
  // eager's f16/bf16 nextafter steps in the dtype's own bits (c10's nextafter): the library's
  r[Op::nextafter] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    LT x = Lowerer::cast(L.tensor(n.args[0]), out), y = Lowerer::cast(L.tensor(n.args[1]), out);
    if (out == DType::Float32 || out == DType::Float64)
      return Lowerer::map({x, y}, out, out, [](const V& v) { return bin(BinaryOp::NextAfter, v[0], v[1]); });
    if (!loop::needs_narrowing(out)) throw NoLowering("nextafter of a non-float");
    loop::MathFn fn = out == DType::BFloat16 ? loop::MathFn::NextafterBf16 : loop::MathFn::NextafterF16;
    return Lowerer::map({x, y}, DType::Float32, out, [fn](const V& v) { return loop::call(fn, {v[0], v[1]}); });
  };
  r[Op::lcm] = [](Lowerer& L, const Node& n) { return gcd_lcm(L, n, true); };
  r[Op::bitwise_left_shift] = r[Op::op_lshift] = [](Lowerer& L, const Node& n) { return shift(L, n, true); };
  r[Op::bitwise_right_shift] = r[Op::op_rshift] = [](Lowerer& L, const Node& n) { return shift(L, n, false); };
  r[Op::bitwise_not] = r[Op::op_invert] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    if (is_floating(out)) throw NoLowering("bitwise not of floats");
    return Lowerer::map({L.tensor(n.args[0])}, out, out, [out](const V& v) {
      if (out == DType::Bool) return un(UnaryOp::Not, v[0]);
      return bin(BinaryOp::BitXor, v[0], loop::const_of(-1, v[0]->type));  // two's complement: ~x
    });
  };
  r[Op::logical_xor] = [](Lowerer& L, const Node& n) {
    DType common = result_type({n.args[0], n.args[1]}, L.graph());
    return Lowerer::map({L.tensor(n.args[0]), L.tensor(n.args[1])}, common, DType::Bool, [](const V& v) {
      return bin(BinaryOp::Ne, loop::cast(v[0], loop::ScalarType::Bool), loop::cast(v[1], loop::ScalarType::Bool));
    });
  };
  // ---- bool reductions: counts of the elements that are (not) zero; NaN counts as true ----

  r[Op::count_nonzero] = [](Lowerer& L, const Node& n) {
    const Value& d = L.arg(n, "dim");  // NB: an empty list counts over every dim, as None does
    LT x = L.tensor_arg(n, "input");
    LT flags = Lowerer::map({x}, x.dtype, DType::Int64, [](const V& v) {
      return loop::cast(loop::cast(v[0], loop::ScalarType::Bool), loop::ScalarType::I64);  // NaN counts
    });
    return L.reduce(flags, dims_of(d), false, ReduceOp::Sum, DType::Int64);
  };
  // eager's vector norms: max |x| (ord inf), min |x| (-inf), the count of nonzeros (0), sum |x|
  // (1), sqrt(sum x^2) (2), else sum(|x|^p)^(1/p); in float for f16/bf16
  r[Op::linalg_vector_norm] = [](Lowerer& L, const Node& n) {
    DType out = L.out_meta(n).dtype;
    if (!is_floating(out)) throw NoLowering("norm of a non-float");
    // NB: dtype= converts the input first (torch accepts only a dtype that holds it exactly), and
    // an empty dim list reduces over every dim, as None does
    LT x = Lowerer::cast(L.tensor_arg(n, "x"), L.arg(n, "dtype").is_none() ? L.tensor_arg(n, "x").dtype : out);
    if (x.numel() == 0) throw NoLowering("norm of an empty tensor");
    const Value& d = L.arg(n, "dim");
    double p = number(L, n, "ord");
    DType acc = float_compute_dtype(out);
    std::vector<int64_t> dims = dims_of(d);
    bool keepdim = L.arg(n, "keepdim").b;
    LT a = Lowerer::map({x}, acc, acc, [](const V& v) { return un(UnaryOp::Abs, v[0]); });
    if (std::isinf(p)) return Lowerer::cast(L.reduce(a, dims, keepdim, p > 0 ? ReduceOp::Max : ReduceOp::Min, acc), out);
    auto powered = [p](const Expr& v) -> Expr {
      if (p == 0) return loop::cast(bin(BinaryOp::Ne, v, c(0, v)), v->type);
      if (p == 1) return v;
      if (p == 2) return bin(BinaryOp::Mul, v, v);
      return bin(BinaryOp::Pow, v, c(p, v));
    };
    LT s = L.reduce(Lowerer::map({a}, acc, acc, [powered](const V& v) { return powered(v[0]); }), dims, keepdim, ReduceOp::Sum, acc);
    return Lowerer::map({s}, acc, out, [p](const V& v) -> Expr {
      if (p == 0 || p == 1) return v[0];
      if (p == 2) return un(UnaryOp::Sqrt, v[0]);
      return bin(BinaryOp::Pow, v[0], c(1.0 / p, v[0]));
    });
  };
  r[Op::nansum] = [](Lowerer& L, const Node& n) { return nan_reduce(L, n, false); };
  r[Op::nanmean] = [](Lowerer& L, const Node& n) { return nan_reduce(L, n, true); };
  r[Op::all] = [](Lowerer& L, const Node& n) { return all_any(L, n, true); };
  r[Op::any] = [](Lowerer& L, const Node& n) { return all_any(L, n, false); };
}

}  // namespace ff::inductor
