"""Test cases for every op of the registry (used by test_op_meta.py).

Each case is one call of a torch callable with tensor specs (`T`, `I`, `B`) in place of tensors.
CASES maps the canonical op name to its cases; a case's callable may be the op's target or an
alias of it. `fallback=True` marks calls the C++ meta rules leave to the meta-tensor fallback on
purpose (see graph/meta_rules.h); every other call must be typed by the C++ rule alone.
"""
import operator

import torch
import torch.nn.functional as F

f16, f32, f64, bf16 = torch.float16, torch.float32, torch.float64, torch.bfloat16
i32, i64, u8, b8 = torch.int32, torch.int64, torch.uint8, torch.bool
CL = torch.channels_last


class T:
    """A tensor spec: shape, dtype and a layout.

    layout: None (contiguous), "T" (last two dims transposed in memory), "perm" (all dims reversed in
    memory), "cl" (channels-last), "step" (every other element of the last dim: not dense),
    "expand" (dim 0 expanded from size 1: overlapping).
    """

    def __init__(self, *shape, dtype=f32, layout=None, rg=False, lo=-5, hi=6, positive=False):
        if len(shape) == 1 and isinstance(shape[0], tuple):
            shape = shape[0]
        self.shape, self.dtype, self.layout, self.rg = tuple(shape), dtype, layout, rg
        self.lo, self.hi, self.positive = lo, hi, positive

    def _values(self, shape, gen):
        if self.dtype == b8:
            return torch.randn(shape, generator=gen) > 0
        if self.dtype.is_floating_point:
            v = torch.randn(shape, generator=gen, dtype=f64)
            if self.positive:
                v = v.abs() + 0.5
            return v.to(self.dtype)
        return torch.randint(self.lo, self.hi, shape, generator=gen).to(self.dtype)

    def make(self, gen):
        shape, lay = list(self.shape), self.layout
        if lay == "T":
            storage = shape[:-2] + [shape[-1], shape[-2]]
        elif lay == "perm":
            storage = shape[::-1]
        elif lay == "step":
            storage = shape[:-1] + [shape[-1] * 2]
        elif lay == "expand":
            storage = [1] + shape[1:]
        else:
            storage = shape
        t = self._values(storage, gen)
        if self.rg:
            t = t.requires_grad_() * 1  # a non-leaf, so in-place ops on it are allowed
        if lay == "T":
            t = t.transpose(-1, -2)
        elif lay == "perm":
            t = t.permute(*reversed(range(len(shape))))
        elif lay == "step":
            t = t[..., ::2]
        elif lay == "expand":
            t = t.expand(*shape)
        elif lay == "cl":
            t = t.contiguous(memory_format=CL)
        assert list(t.shape) == shape, (t.shape, shape)
        return t

    def __repr__(self):
        extra = "".join(f",{k}" for k in (self.layout,) if k) + (",rg" if self.rg else "")
        return f"T{list(self.shape)}{str(self.dtype).replace('torch.', ':')}{extra}"


def I(hi, *shape, dtype=i64, layout=None):  # noqa: E743 - reads like T(...) in the case tables
    """An index tensor with values in [0, hi)."""
    return T(*shape, dtype=dtype, lo=0, hi=hi, layout=layout)


def B(*shape, layout=None):
    return T(*shape, dtype=b8, layout=layout)


class Case:
    def __init__(self, fn, *args, fallback=False, values=True, **kwargs):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.fallback = fallback  # the C++ rule may decline these operands
        self.values = values      # compare values with eager (off for torch.empty & co.)

    def __repr__(self):
        name = getattr(self.fn, "__qualname__", None) or getattr(self.fn, "__name__", repr(self.fn))
        args = ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()])
        return f"{name}({args})"


C = Case
CASES = {}


def cases(op, *cs):
    CASES.setdefault(op, []).extend(cs)


# ---- pointwise: unary ----------------------------------------------------------------------------
LAYOUTS = [T(3, 4), T(3, 4, layout="T", rg=True), T(2, 3, 4, 5, layout="cl"), T(4, 6, layout="step"),
           T(3, 4, layout="expand"), T(2, 0, 3, layout="perm"), T()]
for name in ["neg", "abs", "sign", "square", "floor", "ceil", "round", "trunc", "relu"]:
    fn = getattr(torch, name)
    cases(name, *[C(fn, t) for t in LAYOUTS], C(fn, T(5, dtype=i64)), C(fn, T(2, 3, dtype=i32, layout="T")),
          C(getattr(torch.Tensor, name), T(3, 2, dtype=f64)))
cases("neg", C(torch.neg, B(3), fallback=True))
cases("abs", C(torch.absolute, T(3)), C(torch.abs, B(3), fallback=True))
cases("sign", C(torch.sign, B(3), fallback=True))
cases("square", C(torch.square, B(3), fallback=True))
cases("round", C(torch.round, T(3, 4), decimals=2), C(torch.Tensor.round, T(3, layout="step"), decimals=-1))
cases("trunc", C(torch.fix, T(3)))
cases("nan_to_num", C(torch.nan_to_num, T(3, 4)), C(torch.nan_to_num, T(3, 4, layout="T"), nan=1.0, posinf=2.0),
      C(torch.nan_to_num, T(3, dtype=i64)), C(torch.Tensor.nan_to_num, T(2, 3, 4, 5, layout="cl"), neginf=-1.0))
cases("frac", C(torch.frac, T(3, 4)), C(torch.frac, T(3, 4, layout="T", rg=True)),
      C(torch.Tensor.frac, T(2, 3, 4, 5, layout="cl")), C(torch.frac, T(3, dtype=i64), fallback=True))
FLOAT_UNARY = ["sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "tanh", "sigmoid", "exp", "exp2", "expm1",
               "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "erf", "erfc", "reciprocal"]
for name in FLOAT_UNARY:
    fn = getattr(torch, name)
    cases(name, *[C(fn, t) for t in LAYOUTS], C(fn, T(6, dtype=i64)), C(fn, B(2, 3)), C(fn, T(3, 2, dtype=f64)),
          C(getattr(torch.Tensor, name), T(2, 3, dtype=i32, layout="T")))
cases("sigmoid", C(torch.special.expit, T(3)), C(F.sigmoid, T(3, layout="step")))
cases("tanh", C(F.tanh, T(2, 3, layout="T")))
cases("asin", C(torch.arcsin, T(3)))
for name in ["logical_not", "isnan", "isinf", "isfinite", "signbit"]:
    fn = getattr(torch, name)
    cases(name, C(fn, T(3, 4)), C(fn, T(3, 4, layout="T", rg=True)), C(fn, T(2, 3, 4, 5, layout="cl")),
          C(fn, T(5, dtype=i64)), C(fn, T(4, 6, layout="step")))
cases("logical_not", C(torch.logical_not, B(3, 4, layout="T")))
cases("bitwise_not", C(torch.bitwise_not, T(5, dtype=i64)), C(torch.bitwise_not, B(3, 4, layout="T")),
      C(torch.Tensor.bitwise_not, T(2, 3, dtype=u8)), C(torch.bitwise_not, T(3), fallback=True))

for name in ["sinc", "isposinf", "isneginf"]:
    fn = getattr(torch, name)
    cases(name, C(fn, T(3, 4)), C(fn, T(3, 4, layout="T", rg=True)), C(fn, T(2, 3, 4, 5, layout="cl")),
          C(fn, T(5, dtype=i64)), C(fn, T(4, 6, layout="step")), C(getattr(torch.Tensor, name), T(3, dtype=f64)))
cases("special_entr", C(torch.special.entr, T(3, 4)), C(torch.special.entr, T(3, 4, layout="T")),
      C(torch.special.entr, T(5, dtype=i64)))
for name in ["deg2rad", "rad2deg", "sgn"]:
    fn = getattr(torch, name)
    cases(name, C(fn, T(3, 4)), C(fn, T(3, 4, layout="T", rg=True)),
          C(fn, T(5, dtype=i64)), C(getattr(torch.Tensor, name), T(2, 3, 4, 5, layout="cl")))
cases("logit", C(torch.logit, T(3, 4)), C(torch.logit, T(3, 4, layout="T"), eps=0.1),
      C(torch.special.logit, T(5, dtype=i64)))
for name, fn in [("xlogy", torch.xlogy), ("special_xlog1py", torch.special.xlog1py), ("copysign", torch.copysign)]:
    cases(name, C(fn, T(3, 4), T(4)), C(fn, T(3, 4, layout="T"), T(3, 4, layout="T", rg=True)),
          C(fn, T(2, 3, 4, 5, layout="cl"), T(2, 3, 4, 5, layout="cl")), C(fn, T(3), T(4)))
cases("xlogy", C(torch.xlogy, T(3, 4), 2.0), C(torch.xlogy, T(4, dtype=i64), T(4, dtype=i64)))
cases("copysign", C(torch.copysign, T(4, dtype=i64), -1.0))
# typed on meta tensors (meta_fallback): eager's own dtype checks
for name, fn in [("logaddexp", torch.logaddexp), ("heaviside", torch.heaviside)]:
    cases(name, C(fn, T(3, 4), T(4), fallback=True), C(fn, T(3, 4, layout="T"), T(3, 4, layout="T", rg=True), fallback=True),
          C(fn, T(2, 3, 4, 5, layout="cl"), T(2, 3, 4, 5, layout="cl"), fallback=True), C(fn, T(3), T(4), fallback=True))
cases("heaviside", C(torch.heaviside, T(4, dtype=i64), T(4, dtype=i64), fallback=True))
cases("hardshrink", C(torch.hardshrink, T(3, 4), fallback=True), C(torch.hardshrink, T(3, 4, layout="T"), 0.3, fallback=True))
cases("softshrink", C(F.softshrink, T(3, 4), fallback=True), C(F.softshrink, T(3, 4, layout="T"), 0.3, fallback=True),
      C(F.softshrink, T(3), -1.0, fallback=True))
cases("threshold", C(torch.threshold, T(3, 4), 0.1, 20.0, fallback=True),
      C(torch.threshold, T(5, dtype=i64), 1.5, -2, fallback=True))
cases("fill", C(torch.fill, T(3, 4), 2.5, fallback=True), C(torch.fill, T(5, dtype=i64), 3, fallback=True))
cases("angle", C(torch.angle, T(3, 4), fallback=True), C(torch.angle, T(5, dtype=i64), fallback=True))
cases("isreal", C(torch.isreal, T(3, 4)), C(torch.isreal, T(5, dtype=i64)))
cases("float_power", C(torch.float_power, T(3, 4), 2, fallback=True), C(torch.float_power, T(3, 4, lo=0.1), T(4), fallback=True),
      C(torch.float_power, T(5, dtype=i64), 0.5, fallback=True))
cases("prelu", C(torch.prelu, T(2, 3, 4), T(3), fallback=True), C(torch.prelu, T(2, 3, 4, 5, layout="cl"), T(1), fallback=True),
      C(torch.prelu, T(2, 3), T(4), fallback=True))

for name in ["nansum", "nanmean"]:
    fn = getattr(torch, name)
    cases(name, C(fn, T(3, 4), fallback=True), C(fn, T(3, 4, layout="T"), 1, fallback=True),
          C(fn, T(2, 3, 4, 5, layout="cl"), [0, 2], True, fallback=True), C(getattr(torch.Tensor, name), T(3, 4), fallback=True))
cases("nansum", C(torch.nansum, T(5, dtype=i64), fallback=True))
cases("linalg_vector_norm", C(torch.linalg.vector_norm, T(3, 4), fallback=True),
      C(torch.linalg.vector_norm, T(3, 4, layout="T"), float("inf"), 1, fallback=True),
      C(torch.linalg.vector_norm, T(2, 3, 4), 3, [0, 2], True, fallback=True))
cases("count_nonzero", C(torch.count_nonzero, T(3, 4), fallback=True), C(torch.count_nonzero, T(3, 4, layout="T"), 1, fallback=True),
      C(torch.count_nonzero, T(2, 3, 4), [0, 2], fallback=True), C(torch.Tensor.count_nonzero, B(3, 4), fallback=True))

# special functions (the math library of generated code)
for name, fn in ([("digamma", torch.digamma), ("lgamma", torch.lgamma), ("erfinv", torch.erfinv), ("i0", torch.i0),
                 ("special_erfcx", torch.special.erfcx), ("special_ndtr", torch.special.ndtr),
                 ("special_ndtri", torch.special.ndtri), ("special_log_ndtr", torch.special.log_ndtr),
                 ("special_i0e", torch.special.i0e), ("special_i1", torch.special.i1), ("special_i1e", torch.special.i1e)]
                 + [("special_" + n, getattr(torch.special, n)) for n in [
                     "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
                     "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
                     "spherical_bessel_j0", "airy_ai"] if hasattr(torch.special, n)]):
    no_grad = "bessel" in name or "airy" in name  # typed on meta tensors: torch has no derivative
    cases(name, C(fn, T(3, 4), fallback=no_grad), C(fn, T(3, 4, layout="T", rg=True), fallback=no_grad),
          C(fn, T(5, dtype=i64), fallback=no_grad), C(fn, T(4, 6, layout="step"), fallback=no_grad))
cases("polygamma", C(torch.polygamma, 1, T(3, 4), fallback=True), C(torch.special.polygamma, 3, T(3, 4, layout="T"), fallback=True))
cases("tensor_polygamma", C(torch.Tensor.polygamma, T(3, 4), 2, fallback=True))
for name, fn in [("special_zeta", torch.special.zeta), ("igamma", torch.igamma), ("igammac", torch.igammac), ("hypot", torch.hypot)]:
    cases(name, C(fn, T(3, 4, lo=1), T(4, lo=0), fallback=True), C(fn, T(3, 4, layout="T", lo=1), T(3, 4, layout="T", lo=0), fallback=True))
for pn in ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
           "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
           "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
           "legendre_polynomial_p"]:
    if hasattr(torch.special, pn):
        fn = getattr(torch.special, pn)
        cases("special_" + pn, C(fn, T(3, 4), T(4, dtype=i64, lo=0, hi=6), fallback=True), C(fn, T(3, 4, layout="T"), 3, fallback=True))

# ---- activations -----------------------------------------------------------------------------------
ACT_PARAMS = {"f_relu": (F.relu, {}), "gelu": (F.gelu, {"approximate": "tanh"}), "silu": (F.silu, {}),
              "mish": (F.mish, {}), "leaky_relu": (F.leaky_relu, {"negative_slope": 0.2}),
              "hardtanh": (F.hardtanh, {"min_val": -0.5, "max_val": 0.5}), "relu6": (F.relu6, {}),
              "elu": (F.elu, {"alpha": 0.5}), "selu": (F.selu, {}), "celu": (F.celu, {"alpha": 2.0}),
              "hardswish": (F.hardswish, {}), "hardsigmoid": (F.hardsigmoid, {}),
              "softplus": (F.softplus, {"beta": 2, "threshold": 10}), "logsigmoid": (F.logsigmoid, {})}
INPLACE_FLAG = {"f_relu", "silu", "mish", "leaky_relu", "hardtanh", "relu6", "elu", "selu", "celu", "hardswish", "hardsigmoid"}
for name, (fn, params) in ACT_PARAMS.items():
    cases(name, C(fn, T(3, 4, rg=True)), C(fn, T(3, 4, layout="T")), C(fn, T(2, 3, 4, 5, layout="cl")),
          C(fn, T(4, 6, layout="step")), C(fn, T(3, 4, dtype=f64), **params), C(fn, T(3, dtype=i64), fallback=True))
    if name in INPLACE_FLAG:
        cases(name, C(fn, T(3, 4, layout="T"), inplace=True), C(fn, T(3, 4, rg=True), inplace=True))
cases("f_relu", C(F.relu, T(5, dtype=i64)))
cases("selu", C(torch.selu, T(3)))
cases("celu", C(torch.celu, T(3, layout="step")))
cases("f_dropout", C(F.dropout, T(3, 4), 0.3), C(F.dropout, T(3, 4, layout="T"), 0.5),
      C(F.dropout, T(3, 4, rg=True), 0.5, training=False), C(F.dropout, T(3, 4), p=0.0),
      C(F.dropout, T(2, 3, 4, 5, layout="cl"), 1.0), C(F.dropout, T(3, 4), 0.2, inplace=True),
      C(F.dropout, T(4, 6, layout="step"), 0.5), C(F.dropout, T(3), 1.5), C(F.dropout, T(3, dtype=i64), fallback=True))
cases("dropout", C(torch.dropout, T(3, 4), 0.2, True), C(torch.dropout, T(3, 4, layout="T"), 0.2, False))

# ---- pointwise: binary -----------------------------------------------------------------------------
def arith(fn, tensor_other=True):
    cs = [C(fn, T(3, 4), T(4)), C(fn, T(3, 4, layout="T"), T(3, 4, layout="T", rg=True)),
          C(fn, T(3, 4, layout="T"), 2.5), C(fn, T(4, dtype=i64), T(4, dtype=i64, lo=1)), C(fn, T(4, dtype=i32), T((), dtype=i64, lo=1)),
          C(fn, T(2, 3, 4, 5, layout="cl"), T(2, 3, 4, 5, layout="cl")), C(fn, T(2, 3, 1, 1, layout="cl"), 3),
          C(fn, T(3, 1), T(1, 4, dtype=f64)), C(fn, T(4, 6, layout="step"), T(4, 6, layout="perm")),
          C(fn, T(3, 4), T(5)), C(fn, T(2, 0), T(2, 1))]
    if tensor_other:
        cs.append(C(fn, T(4, dtype=i64), 1.5))
    return cs


for name in ["add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod"]:
    cases(name, *arith(getattr(torch, name)), C(getattr(torch.Tensor, name), T(2, 3), T(3)))
cases("add", C(torch.add, T(3), T(3), alpha=2), C(torch.add, T(3, dtype=i64), T(3, dtype=i64), alpha=0.5),
      C(torch.add, B(3), B(3)), C(torch.add, T(3, dtype=u8), T(3, dtype=torch.int8)))
cases("sub", C(torch.sub, T(3), T(3), alpha=0.5), C(torch.subtract, T(3), 1), C(torch.sub, B(3), B(3), fallback=True))
cases("rsub", C(torch.rsub, T(3, 4), T(4)), C(torch.rsub, T(3, 4, layout="T"), 2), C(torch.rsub, T(3), T(3), alpha=2))
cases("mul", C(torch.mul, B(3), B(3)), C(torch.multiply, T(2, 3, dtype=f16), 2.0))
cases("div", C(torch.div, T(4, dtype=i64), 3, rounding_mode="floor"), C(torch.div, T(3, 4), T(4), rounding_mode="trunc"),
      C(torch.divide, T(4, dtype=i64), T(4, dtype=i64)), C(torch.div, T(3), 2, rounding_mode="bogus"))
cases("floor_divide", C(torch.floor_divide, B(3), B(3), fallback=True))
cases("pow", C(torch.pow, T(3, 4), 2), C(torch.pow, T(3, 4, layout="T"), 0.5), C(torch.pow, 2, T(3, 4, layout="T")),
      C(torch.pow, T(3, 4), T(4)), C(torch.pow, T(4, dtype=i64), 2), C(torch.pow, T(4, dtype=i64), 0.5),
      C(torch.pow, T(4, dtype=i64), -1), C(torch.pow, 2.5, T(4, dtype=i64)), C(torch.Tensor.pow, T(2, 3, 4, 5, layout="cl"), 3),
      C(torch.pow, T(2, 3, 1, 1, layout="cl"), 2), C(torch.pow, B(3), 2, fallback=True))
for name in ["atan2", "maximum", "minimum", "fmax", "fmin"]:
    fn = getattr(torch, name)
    cases(name, C(fn, T(3, 4), T(4)), C(fn, T(3, 4, layout="T"), T(3, 4, layout="T", rg=True)),
          C(fn, T(4, dtype=i64), T(4, dtype=i64)), C(fn, T(3, 1), T(1, 4, dtype=f64)),
          C(fn, T(2, 3, 4, 5, layout="cl"), T(2, 3, 4, 5)), C(getattr(torch.Tensor, name), T(3), T(2, 1)), C(fn, T(3), T(4)))
for name in ["eq", "ne", "lt", "le", "gt", "ge"]:
    fn = getattr(torch, name)
    cases(name, C(fn, T(3, 4), T(4)), C(fn, T(3, 4, layout="T", rg=True), 0.0), C(fn, T(4, dtype=i64), 1.5),
          C(fn, T(2, 3, 4, 5, layout="cl"), T(2, 3, 4, 5, layout="cl")), C(fn, B(3), B(3)),
          C(getattr(torch.Tensor, name), T(2, 3), T(3)), C(fn, T(3), T(4)))
cases("gt", C(torch.greater, T(3), 0))
cases("ne", C(torch.not_equal, T(3), T(3)))
for name in ["logical_and", "logical_or", "logical_xor"]:
    fn = getattr(torch, name)
    cases(name, C(fn, B(3, 4), T(4)), C(fn, T(3, 4, dtype=i64, layout="T"), T(3, 4, dtype=i64)),
          C(getattr(torch.Tensor, name), B(2, 3), B(3)))
for name in ["bitwise_and", "bitwise_or", "bitwise_xor"]:
    fn = getattr(torch, name)
    cases(name, C(fn, T(3, 4, dtype=i64), T(4, dtype=i64)), C(fn, B(3, 4, layout="T"), B(3, 4)),
          C(fn, T(3, dtype=i32), 3), C(fn, T(3, dtype=u8), T(3, dtype=torch.int8)), C(fn, T(3), T(3), fallback=True))
cases("frexp", C(torch.frexp, T(3, 4), fallback=True), C(torch.Tensor.frexp, T(5, dtype=f64), fallback=True))
cases("nextafter", C(torch.nextafter, T(3, 4), T(4), fallback=True), C(torch.Tensor.nextafter, T(3, dtype=f64), T(3, dtype=f64), fallback=True))
cases("ldexp", C(torch.ldexp, T(3, 4), T(4, dtype=i64), fallback=True), C(torch.Tensor.ldexp, T(3, dtype=f64), T(3), fallback=True),
      C(torch.ldexp, T(2, 3, dtype=bf16), T(3, dtype=i32), fallback=True), C(torch.ldexp, T(3, dtype=i64), T(3, dtype=i64), fallback=True))
cases("mvlgamma", C(torch.mvlgamma, T(3, 4, positive=True), 3, fallback=True), C(torch.Tensor.mvlgamma, T(5, dtype=f64, positive=True), 1, fallback=True),
      C(torch.special.multigammaln, T(2, 3, dtype=i64, lo=3, hi=9), 2, fallback=True))
cases("isclose", C(torch.isclose, T(3, 4), T(4), fallback=True), C(torch.Tensor.isclose, T(3, dtype=f64), T(3, dtype=f64), 0.1, 0.2, True, fallback=True),
      C(torch.isclose, T(3, dtype=i64), T(3, dtype=i64), fallback=True), C(torch.isclose, B(3), B(3), fallback=True),
      C(torch.isclose, T(4, dtype=bf16), T(4, dtype=bf16), 0.0, 0.0, fallback=True))
for name in ["gcd", "lcm"]:
    fn = getattr(torch, name)
    cases(name, C(fn, T(3, 4, dtype=i64), T(4, dtype=i64)), C(fn, T(3, dtype=u8), T(3, dtype=torch.int8)),
          C(getattr(torch.Tensor, name), T(3, dtype=i32), T(3, dtype=i32)), C(fn, T(3), T(3), fallback=True),
          C(fn, B(3), B(3), fallback=True))
for name in ["bitwise_left_shift", "bitwise_right_shift"]:
    fn = getattr(torch, name)
    cases(name, C(fn, T(3, 4, dtype=i64), T(4, dtype=i64)), C(fn, T(3, dtype=i32), 3), C(fn, T(3, dtype=u8), T(3, dtype=torch.int8)),
          C(getattr(torch.Tensor, name), B(3), 1), C(fn, T(3), T(3), fallback=True), C(fn, B(3), B(3), fallback=True))
cases("clamp", C(torch.clamp, T(3, 4), -0.5, 0.5), C(torch.clamp, T(3, 4, layout="T", rg=True), min=0.0),
      C(torch.clamp, T(2, 3, 4, 5, layout="cl"), max=0.1), C(torch.clamp, T(4, dtype=i64), 0.5),
      C(torch.clamp, T(4, dtype=i64), -2, 2), C(torch.clamp, T(3, 4), T(4), T(3, 1)), C(torch.clamp, T(3, 4)),
      C(torch.clip, T(3), 0, 1), C(torch.Tensor.clamp, T(4, 6, layout="step"), min=-1.0))
cases("clamp_min", C(torch.clamp_min, T(3, 4, layout="T"), 0.0), C(torch.clamp_min, T(4, dtype=i64), 0.5),
      C(torch.Tensor.clamp_min, T(2, 3), 1))
cases("clamp_max", C(torch.clamp_max, T(3, 4, layout="T"), 0.0), C(torch.clamp_max, T(4, dtype=i64), 2))
cases("lerp", C(torch.lerp, T(3, 4), T(4), 0.5), C(torch.lerp, T(3, 4, layout="T"), T(3, 4, layout="T"), T(3, 4)),
      C(torch.Tensor.lerp, T(3, rg=True), T(3), 0.25), C(torch.lerp, T(3), T(3, dtype=f64), 0.5, fallback=True))
for name in ["addcmul", "addcdiv"]:
    fn = getattr(torch, name)
    cases(name, C(fn, T(3, 4), T(4), T(3, 1, positive=True)), C(fn, T(3, 4, layout="T"), T(3, 4), T(3, 4, positive=True), value=2),
          C(getattr(torch.Tensor, name), T(3, rg=True), T(3), T(3, positive=True), value=0.5))
cases("where", C(torch.where, B(3, 4), T(3, 4), T(3, 4)), C(torch.where, B(3, 4), T(3, 4, layout="T"), 2.5),
      C(torch.where, B(3, 1), T(1, 4), T(3, 4, layout="T")), C(torch.where, B(4), T(4, dtype=i64), 2.5),
      C(torch.where, B(2, 3, 4, 5, layout="cl"), T(2, 3, 4, 5, layout="cl", rg=True), T(2, 3, 4, 5, layout="cl")),
      C(torch.where, B(3), T(3), T(3, dtype=f64)), C(torch.where, B(3), T(3), T(4)))
cases("masked_fill", C(torch.masked_fill, T(3, 4), B(3, 4), 2.0), C(torch.masked_fill, T(3, 2, layout="T"), B(3, 2, layout="T"), 1),
      C(torch.masked_fill, T(3, 4, rg=True), B(4), T(())), C(torch.Tensor.masked_fill, T(2, 3, 4, 5, layout="cl"), B(5), 0.5),
      C(torch.masked_fill, T(1, 4), B(3, 4), 0.0), C(torch.masked_fill, T(3), B(3), T(2)),
      C(torch.masked_fill, T(3, dtype=i64), B(3), 7))

# ---- Python operators --------------------------------------------------------------------------------
cases("op_add", *arith(operator.add), C(operator.add, 2, T(3, 4, layout="T")))
cases("op_sub", *arith(operator.sub), C(operator.sub, 2, T(3, 4, layout="T")), C(operator.sub, B(3), B(3), fallback=True))
cases("op_mul", *arith(operator.mul), C(operator.mul, 2.0, T(3, dtype=i64)))
cases("op_truediv", *arith(operator.truediv), C(operator.truediv, 2, T(3, 4, layout="T")),
      C(operator.truediv, 1, T(4, dtype=i64)), C(operator.truediv, 2, T(2, 3, 1, 1, layout="cl")))
cases("op_floordiv", C(operator.floordiv, T(4, dtype=i64), 3), C(operator.floordiv, T(3, 4, layout="T"), T(4)),
      C(operator.floordiv, 7, T(3, dtype=i64, lo=1), fallback=True))
cases("op_mod", C(operator.mod, T(4, dtype=i64), 3), C(operator.mod, T(3, 4, layout="T"), 0.5),
      C(operator.mod, 7, T(3, dtype=i64, lo=1), fallback=True))
cases("op_pow", C(operator.pow, T(3, 4, layout="T"), 2), C(operator.pow, 2, T(3, 4, layout="T")),
      C(operator.pow, 2, T(3, 4)), C(operator.pow, 0.5, T(3, dtype=i64)),
      C(operator.pow, T(3, 4), T(4)), C(operator.pow, T(3, dtype=i64), -2))
cases("op_matmul", C(operator.matmul, T(3, 4), T(4, 5)), C(operator.matmul, T(2, 3, 4), T(4)),
      C(torch.Tensor.__matmul__, T(4), T(2, 4, 5), fallback=True))
for name, fn in [("op_and", operator.and_), ("op_or", operator.or_), ("op_xor", operator.xor)]:
    cases(name, C(fn, B(3, 4), B(4)), C(fn, T(3, dtype=i64), 6), C(fn, T(3, 4, dtype=i32, layout="T"), T(3, 4, dtype=i32)),
          C(fn, T(3), T(3), fallback=True))
for name, fn in [("op_lshift", operator.lshift), ("op_rshift", operator.rshift)]:
    cases(name, C(fn, T(3, 4, dtype=i64, layout="T"), T(4, dtype=i64)), C(fn, T(3, dtype=torch.int16), 2), C(fn, 5, T(3, dtype=i64)),
          C(fn, T(3), 1, fallback=True))
cases("op_neg", C(operator.neg, T(3, 4, layout="T", rg=True)), C(operator.neg, T(3, dtype=i64)), C(operator.neg, B(3), fallback=True))
cases("op_invert", C(operator.invert, B(3, 4, layout="T")), C(operator.invert, T(3, dtype=i64)))
for name, fn in [("op_lt", operator.lt), ("op_le", operator.le), ("op_gt", operator.gt), ("op_ge", operator.ge),
                 ("op_eq", operator.eq), ("op_ne", operator.ne)]:
    cases(name, C(fn, T(3, 4, layout="T"), 0.5), C(fn, 0.5, T(3, 4)), C(fn, T(3, 4), T(4, dtype=f64)),
          C(fn, T(2, 3, 4, 5, layout="cl"), 0), C(fn, T(3), T(4)))
cases("op_eq", C(operator.eq, T(3), None, fallback=True))
cases("op_getitem",
      C(operator.getitem, T(4, 5, 6), 1), C(operator.getitem, T(4, 5, 6), -1),
      C(operator.getitem, T(4, 5, 6), (slice(1, None), None, slice(None, None, 2), -1)),
      C(operator.getitem, T(4, 5, 6, layout="perm"), (Ellipsis, 0)), C(operator.getitem, T(4, 5), slice(-100, 100)),
      C(operator.getitem, T(4, 5, layout="T"), (slice(None), slice(1, 4, 2))), C(operator.getitem, T(3), None),
      C(operator.getitem, T(2, 3, 4, 5, layout="cl", rg=True), (0, Ellipsis, None)), C(operator.getitem, T(4, 5), ()),
      C(operator.getitem, T(4, 5), (slice(3, 1),)), C(operator.getitem, T(4, 5), 4), C(operator.getitem, T(4, 5), (0, 0, 0)),
      C(operator.getitem, T(), None), C(operator.getitem, T(), Ellipsis), C(operator.getitem, T(4, 5), slice(None, None, -1)),
      C(operator.getitem, T(4, 5), I(4, 3), fallback=True), C(operator.getitem, T(4, 5), (slice(None), [0, 2]), fallback=True),
      C(torch.Tensor.__getitem__, T(4, 5), (None, 1)))
cases("op_setitem",
      C(operator.setitem, T(4, 5), 0, 1.0), C(operator.setitem, T(4, 5), (slice(1, 3), slice(None, None, 2)), T(2, 3)),
      C(operator.setitem, T(4, 5, layout="T"), (Ellipsis, 1), T(1, 4)), C(operator.setitem, T(4, 5), 0, T(3)),
      C(operator.setitem, T(4, 5, dtype=i64), (slice(None), 0), T(4)), C(operator.setitem, T(4, 5), I(4, 2), 0.0, fallback=True),
      C(torch.Tensor.__setitem__, T(3, 4), None, T(4)))

# ---- in place ----------------------------------------------------------------------------------------
for name, fn in [("op_iadd", operator.iadd), ("op_isub", operator.isub), ("op_imul", operator.imul),
                 ("op_itruediv", operator.itruediv)]:
    cases(name, C(fn, T(3, 4), T(4)), C(fn, T(3, 4, layout="T", rg=True), 2), C(fn, T(4, dtype=i64), T(4, dtype=i64)),
          C(fn, T(4, dtype=i64), 1.5), C(fn, T(4), T(3, 4)), C(fn, T(3, 4, layout="expand"), 1.0),
          C(fn, T(2, 3, dtype=f16), T(2, 3)), C(fn, T(3), T(3, rg=True)))
cases("op_ifloordiv", C(operator.ifloordiv, T(4, dtype=i64), 3), C(operator.ifloordiv, T(3, 4, layout="T"), T(4)))
cases("op_imod", C(operator.imod, T(4, dtype=i64), 3), C(operator.imod, T(3, 4), 0.5))
cases("op_ipow", C(operator.ipow, T(3, 4, layout="T"), 2), C(operator.ipow, T(3, dtype=i64), 2),
      C(operator.ipow, T(3, dtype=i64), 0.5), C(operator.ipow, T(3, dtype=i64), -1))
for name, fn in [("op_iand", operator.iand), ("op_ior", operator.ior), ("op_ixor", operator.ixor)]:
    cases(name, C(fn, T(3, 4, dtype=i64), T(4, dtype=i64)), C(fn, B(3), B(3)), C(fn, T(3), T(3), fallback=True))
for name, fn in [("op_ilshift", operator.ilshift), ("op_irshift", operator.irshift)]:
    cases(name, C(fn, T(3, 4, dtype=i64), T(4, dtype=i64)), C(fn, T(3, dtype=u8), 2), C(fn, T(3), T(3), fallback=True))
cases("add_", C(torch.Tensor.add_, T(3, 4), T(4), alpha=2), C(torch.Tensor.add_, T(3, 4, layout="T"), 1.5),
      C(torch.Tensor.add_, T(4, dtype=i64), 0.5), C(torch.Tensor.add_, T(3, 4, layout="expand"), 1))
cases("sub_", C(torch.Tensor.sub_, T(3, 4), T(4)), C(torch.Tensor.sub_, T(3, 4, layout="T"), 1, alpha=2))
cases("mul_", C(torch.Tensor.mul_, T(3, 4), T(3, 1)), C(torch.Tensor.mul_, T(4, dtype=i64), 2), C(torch.Tensor.mul_, T(4), T(2, 4)))
cases("div_", C(torch.Tensor.div_, T(3, 4), 2), C(torch.Tensor.div_, T(4, dtype=i64), 2),
      C(torch.Tensor.div_, T(4, dtype=i64), 2, rounding_mode="floor"))
cases("clamp_", C(torch.Tensor.clamp_, T(3, 4, layout="T"), 0, 1), C(torch.Tensor.clamp_, T(3), min=0.0),
      C(torch.Tensor.clamp_, T(3, dtype=i64), 0.5), C(torch.Tensor.clip_, T(3), -1, 1))
cases("masked_fill_", C(torch.Tensor.masked_fill_, T(3, 4), B(4), 1.0), C(torch.Tensor.masked_fill_, T(3, 4, layout="T"), B(3, 4), T(())),
      C(torch.Tensor.masked_fill_, T(4), B(3, 4), 0.0))
cases("copy_", C(torch.Tensor.copy_, T(3, 4), T(4)), C(torch.Tensor.copy_, T(3, 4, layout="T"), T(3, 4, dtype=i64)),
      C(torch.Tensor.copy_, T(3, dtype=i64), T(3)), C(torch.Tensor.copy_, T(4), T(3, 4)))
cases("tensor_item", C(torch.Tensor.item, T(())), C(torch.Tensor.item, T(1, 1, dtype=f64)))
cases("fill_", C(torch.Tensor.fill_, T(3, 4), 2), C(torch.Tensor.fill_, T(3, dtype=i64), T(())), C(torch.Tensor.fill_, T(3), T(2)))
cases("zero_", C(torch.Tensor.zero_, T(3, 4, layout="T")), C(torch.Tensor.zero_, T(3, dtype=i64)))
cases("relu_", C(torch.relu_, T(3, 4)), C(torch.Tensor.relu_, T(3, 4, layout="T")), C(F.relu_, T(3, dtype=i64)))
cases("sigmoid_", C(torch.Tensor.sigmoid_, T(3, 4)), C(torch.sigmoid_, T(3, 4, layout="T")),
      C(torch.Tensor.sigmoid_, T(3, dtype=i64), fallback=True))
cases("tanh_", C(torch.Tensor.tanh_, T(3, 4)), C(torch.tanh_, T(3, 4, layout="T")))

# ---- casts -------------------------------------------------------------------------------------------
CAST_INPUTS = [T(3, 4), T(3, 4, layout="T", rg=True), T(2, 3, 4, 5, layout="cl"), T(4, 6, layout="step"),
               T(3, 4, layout="expand"), T(3, 4, dtype=i64), T(2, 0, 3, layout="perm")]
for name, meth in [("to_float", torch.Tensor.float), ("to_double", torch.Tensor.double), ("to_half", torch.Tensor.half),
                   ("to_bfloat16", torch.Tensor.bfloat16), ("to_long", torch.Tensor.long), ("to_int", torch.Tensor.int),
                   ("to_bool", torch.Tensor.bool), ("to_byte", torch.Tensor.byte), ("to_char", torch.Tensor.char),
                   ("to_short", torch.Tensor.short), ("to_cfloat", torch.Tensor.cfloat), ("to_cdouble", torch.Tensor.cdouble)]:
    cases(name, *[C(meth, t) for t in CAST_INPUTS], C(meth, T(2, 3, 4, 5), memory_format=CL),
          C(meth, T(2, 3, 4, 5, layout="cl"), memory_format=torch.contiguous_format))
cases("to", C(torch.Tensor.to, T(3, 4), f64), C(torch.Tensor.to, T(3, 4), f32), C(torch.Tensor.to, T(3, 4, layout="T"), f16),
      C(torch.Tensor.to, T(3, 4), "cpu"), C(torch.Tensor.to, T(3, 4), "cpu", i32), C(torch.Tensor.to, T(3, 4), dtype=f16),
      C(torch.Tensor.to, T(3, 4, rg=True), T(2, dtype=i64)), C(torch.Tensor.to, T(2, 3, 4, 5), memory_format=CL),
      C(torch.Tensor.to, T(3, 4), copy=True), C(torch.Tensor.to, T(4, 6, layout="step"), f64),
      C(torch.Tensor.to, T(3, 4), torch.device("cpu")), C(torch.Tensor.to, T(3, 4), device="cpu", dtype=f64),
      C(torch.Tensor.to, T(3, 4, layout="expand"), i64))
cases("type_as", C(torch.Tensor.type_as, T(3, 4), T(2, dtype=i64)), C(torch.Tensor.type_as, T(3, 4, layout="T"), T(1, dtype=f64)),
      C(torch.Tensor.type_as, T(3, rg=True), T(3)))

# ---- reductions --------------------------------------------------------------------------------------
X3 = T(2, 3, 4)
cases("sum", C(torch.sum, X3), C(torch.sum, X3, 1), C(torch.sum, X3, (0, 2), keepdim=True), C(torch.sum, T(3, 4, dtype=i32)),
      C(torch.sum, T(3, 4), dtype=f64), C(torch.sum, B(3, 4), 0), C(torch.sum, T(3, 4, layout="T", rg=True), -1),
      C(torch.Tensor.sum, T(2, 3, 4, 5, layout="cl"), (2, 3)), C(torch.sum, X3, (1, 1)), C(torch.sum, X3, 3),
      C(torch.sum, T()), C(torch.sum, T(), 0), C(torch.sum, T(0, 3), 0))
cases("mean", C(torch.mean, X3), C(torch.mean, X3, [1]), C(torch.mean, T(3, 4, layout="T"), dim=(0, 1), keepdim=True),
      C(torch.mean, T(3, 4, dtype=i64), fallback=True), C(torch.mean, T(3, 4, dtype=i64), dtype=f32),
      C(torch.Tensor.mean, T(2, 3, 4, 5, layout="cl", rg=True), (-1, -2), True))
cases("prod", C(torch.prod, X3), C(torch.prod, X3, 1), C(torch.prod, T(3, 4, dtype=i32), 0, keepdim=True),
      C(torch.prod, T(3, 4, layout="T"), dim=1, dtype=f64), C(torch.Tensor.prod, T(3, 4, dtype=i64)))
for name in ["amax", "amin"]:
    fn = getattr(torch, name)
    cases(name, C(fn, X3, 1), C(fn, X3, (0, 1)), C(fn, T(3, 4, layout="T"), -1, True), C(fn, T(3, 4, dtype=i64)),
          C(getattr(torch.Tensor, name), T(2, 3, 4, 5, layout="cl"), dim=1), C(fn, T(0, 3), 1, fallback=True))
cases("logsumexp", C(torch.logsumexp, X3, 1), C(torch.logsumexp, X3, (0, 2), True), C(torch.logsumexp, T(3, 4, dtype=i64), 0),
      C(torch.Tensor.logsumexp, T(3, 4, layout="T", rg=True), -1))
for name in ["all", "any"]:
    fn = getattr(torch, name)
    cases(name, C(fn, B(3, 4)), C(fn, B(3, 4), 1), C(fn, T(3, 4, dtype=u8), 0), C(fn, T(3, 4), 1, keepdim=True),
          C(getattr(torch.Tensor, name), T(3, 4, layout="T", dtype=i64)), C(fn, B(2, 3, 4), -1))
cases("norm", C(torch.norm, X3), C(torch.norm, X3, 2, 1), C(torch.norm, X3, p="fro", dim=(0, 1)),
      C(torch.norm, T(3, 4, layout="T"), 1, -1, True), C(torch.Tensor.norm, T(3, 4, rg=True), dim=0),
      C(torch.norm, T(3, 4), float("inf"), 1), C(torch.norm, T(3, 4), dtype=f64, fallback=True), C(torch.norm, T(3, 4), "nuc", fallback=True))
for name in ["var", "std"]:
    fn = getattr(torch, name)
    cases(name, C(fn, X3), C(fn, X3, 1), C(fn, X3, 1, keepdim=True), C(fn, X3, 1, unbiased=False),
          C(fn, X3, dim=1, correction=0), C(fn, T(3, 4, layout="T", rg=True), (0, 1)),
          C(getattr(torch.Tensor, name), T(3, 4), 0, True, True), C(fn, T(3, 4, dtype=i64), fallback=True))
for name in ["argmax", "argmin"]:
    fn = getattr(torch, name)
    cases(name, C(fn, X3), C(fn, X3, 1), C(fn, T(3, 4, layout="T"), dim=-1, keepdim=True), C(fn, T(3, 4, dtype=i64), 0),
          C(getattr(torch.Tensor, name), T(2, 3, 4, 5, layout="cl"), 1), C(fn, X3, 3))
for name in ["max", "min"]:
    fn = getattr(torch, name)
    cases(name, C(fn, X3), C(fn, X3, 1), C(fn, T(3, 4, layout="T"), dim=0, keepdim=True), C(fn, T(3, 4), T(4)),
          C(fn, T(3, 4, dtype=i64), 1), C(getattr(torch.Tensor, name), T(3, 4, rg=True), -1), C(fn, T(0, 3), fallback=True),
          C(fn, X3, 5))
cases("topk", C(torch.topk, X3, 2), C(torch.topk, T(3, 4, layout="T"), 1, dim=0, largest=False),
      C(torch.Tensor.topk, T(3, 4, rg=True), 3, sorted=False), C(torch.topk, T(3, 4), 9), C(torch.topk, T(3, 4, dtype=i64), 2))
for name in ["cumsum", "cumprod"]:
    fn = getattr(torch, name)
    cases(name, C(fn, X3, 1), C(fn, T(3, 4, dtype=i32), 0), C(fn, T(3, 4, layout="T"), dim=0, dtype=f64),
          C(getattr(torch.Tensor, name), T(2, 3, 4, 5, layout="cl", rg=True), 1), C(fn, B(4), 0), C(fn, X3, 3))

# ---- views and layout --------------------------------------------------------------------------------
X = T(3, 4)
cases("view", C(torch.Tensor.view, X, 12), C(torch.Tensor.view, X, -1, 6), C(torch.Tensor.view, X, (2, 2, 3)),
      C(torch.Tensor.view, T(3, 4, layout="T"), 12), C(torch.Tensor.view, T(3, 4, layout="T"), 4, 3),
      C(torch.Tensor.view, T(2, 3, 4, 5, layout="cl"), 2, 3, 20), C(torch.Tensor.view, X, 5, -1),
      C(torch.Tensor.view, T(2, 1, 4, layout="T"), 2, 4), C(torch.Tensor.view, T(), 1), C(torch.Tensor.view, T(0, 3), -1, 6))
cases("reshape", C(torch.reshape, X, (4, -1)), C(torch.reshape, T(3, 4, layout="T", rg=True), (-1,)),
      C(torch.reshape, T(4, 6, layout="step"), (2, 2, 3)), C(torch.reshape, T(2, 3, 4, 5, layout="cl"), (6, 20)),
      C(torch.reshape, X, (5, 5)))
cases("tensor_reshape", C(torch.Tensor.reshape, X, 2, 6), C(torch.Tensor.reshape, T(3, 4, layout="T"), (2, 6)),
      C(torch.Tensor.reshape, T(3, 4, layout="expand"), -1))
cases("view_as", C(torch.Tensor.view_as, X, T(6, 2)), C(torch.Tensor.view_as, T(3, 4, layout="T"), T(12)))
cases("reshape_as", C(torch.Tensor.reshape_as, X, T(6, 2)), C(torch.Tensor.reshape_as, T(3, 4, layout="T"), T(12)))
cases("flatten", C(torch.flatten, X3), C(torch.flatten, X3, 1), C(torch.flatten, T(2, 3, 4, layout="perm"), start_dim=0, end_dim=1),
      C(torch.Tensor.flatten, T(2, 3, 4, 5, layout="cl"), 2), C(torch.flatten, T()), C(torch.flatten, X3, 2, 1))
cases("unflatten", C(torch.Tensor.unflatten, X, 1, (2, 2)), C(torch.Tensor.unflatten, X3, -1, (-1, 2)),
      C(torch.Tensor.unflatten, T(3, 4, layout="T"), 0, (3, 1)), C(torch.unflatten, X, 0, (1, 3)),
      C(torch.Tensor.unflatten, X, 1, (3, 3)))
cases("permute", C(torch.permute, X3, (2, 0, 1)), C(torch.permute, T(2, 3, 4, 5, layout="cl"), (0, 2, 3, 1)),
      C(torch.permute, X3, (0, 0, 1)), C(torch.permute, X3, (0, 1)))
cases("tensor_permute", C(torch.Tensor.permute, X3, 2, 0, 1), C(torch.Tensor.permute, X3, (1, 0, -1)))
cases("movedim", C(torch.movedim, X3, 0, -1), C(torch.movedim, X3, (0, 1), (2, 0)), C(torch.moveaxis, T(2, 3, 4, layout="perm"), 1, 0),
      C(torch.Tensor.movedim, X3, (0, 0), (1, 2)))
cases("transpose", C(torch.transpose, X3, 0, 1), C(torch.transpose, T(2, 3, 4, 5, layout="cl"), -1, -2),
      C(torch.Tensor.transpose, T(), 0, -1), C(torch.swapaxes, X3, 0, 2), C(torch.transpose, X3, 0, 3))
cases("t", C(torch.t, X), C(torch.t, T(4)), C(torch.Tensor.t, T(3, 4, layout="T")), C(torch.t, X3))
cases("unsqueeze", C(torch.unsqueeze, X, 0), C(torch.unsqueeze, X, -1), C(torch.Tensor.unsqueeze, T(3, 4, layout="T"), 1),
      C(torch.unsqueeze, T(), 0), C(torch.unsqueeze, X, 3))
cases("squeeze", C(torch.squeeze, T(3, 1, 4)), C(torch.squeeze, T(3, 1, 4), 1), C(torch.Tensor.squeeze, X, dim=0),
      C(torch.squeeze, T(1, 1)), C(torch.squeeze, T(3, 1, 4, layout="perm"), -2))
cases("expand", C(torch.Tensor.expand, T(3, 1), 3, 4), C(torch.Tensor.expand, T(3, 1), (2, 3, 5)),
      C(torch.Tensor.expand, X, -1, 4), C(torch.Tensor.expand, T(3, 1, layout="T"), 1, 3, 6),
      C(torch.Tensor.expand, X, 2, 4), C(torch.Tensor.expand, T(), 3, 2), C(torch.Tensor.expand, X, 4))
cases("expand_as", C(torch.Tensor.expand_as, T(3, 1), T(2, 3, 4)), C(torch.Tensor.expand_as, T(4), X))
cases("narrow", C(torch.narrow, X, 0, 1, 2), C(torch.narrow, T(3, 4, layout="T"), -1, -3, 2),
      C(torch.Tensor.narrow, X3, 2, 0, 0), C(torch.narrow, X, 0, 2, 2))
cases("select", C(torch.select, X, 1, -1), C(torch.select, T(2, 3, 4, 5, layout="cl"), 1, 0),
      C(torch.Tensor.select, X3, 0, 1), C(torch.select, X, 0, 5))
cases("split", C(torch.split, T(7, 2), 3), C(torch.split, X, [1, 3], dim=1), C(torch.Tensor.split, T(3, 4, layout="T"), 2),
      C(torch.split, X, [1, 1]), C(torch.split, X3, 2, -1))
cases("chunk", C(torch.chunk, T(7, 2), 3), C(torch.chunk, X, 2, dim=1), C(torch.Tensor.chunk, T(3, 4, layout="T"), 5),
      C(torch.chunk, X, 0))
cases("unbind", C(torch.unbind, X), C(torch.unbind, X, dim=1), C(torch.Tensor.unbind, T(2, 3, 4, 5, layout="cl"), 1))
cases("contiguous", C(torch.Tensor.contiguous, T(3, 4, layout="T", rg=True)), C(torch.Tensor.contiguous, X),
      C(torch.Tensor.contiguous, T(2, 3, 4, 5, layout="cl"), memory_format=CL),
      C(torch.Tensor.contiguous, T(2, 3, 4, 5), memory_format=CL), C(torch.Tensor.contiguous, T(4, 6, layout="step")))
cases("clone", C(torch.clone, T(3, 4, layout="T")), C(torch.clone, T(4, 6, layout="step")),
      C(torch.clone, T(2, 3, 4, 5, layout="cl"), memory_format=torch.contiguous_format), C(torch.Tensor.clone, T(3, 4, layout="expand")),
      C(torch.clone, T(2, 3, 4, 5), memory_format=CL), C(torch.clone, T(3, rg=True)))
cases("repeat", C(torch.Tensor.repeat, X, 2, 1), C(torch.Tensor.repeat, X, (2, 1, 1)), C(torch.Tensor.repeat, T(3, 4, layout="T"), 1, 2),
      C(torch.Tensor.repeat, X, 2))
cases("tril", C(torch.tril, X), C(torch.tril, T(3, 4, layout="T"), -1), C(torch.Tensor.tril, T(2, 3, 4, 5, layout="cl"), 1),
      C(torch.tril, T(4)))
cases("triu", C(torch.triu, X, 1), C(torch.triu, T(3, 4, layout="T", rg=True)), C(torch.triu, T(4)))
cases("cat", C(torch.cat, [T(2, 3), T(4, 3)]), C(torch.cat, [T(2, 3), T(2, 5)], dim=1), C(torch.cat, (T(2, 3), T(4, 3, dtype=f64))),
      C(torch.cat, [T(2, 3, 4, 5, layout="cl"), T(2, 3, 4, 5, layout="cl")]), C(torch.cat, [T(2, 3), T(0)]),
      C(torch.cat, [T(2, 3, layout="T"), T(2, 3)], 1), C(torch.concat, [T(2, 3, 4, 5, layout="cl"), T(2, 3, 4, 5)]),
      C(torch.cat, [T(2, 3), T(2, 4)]), C(torch.cat, [T(2, 3), T(3)]), C(torch.cat, [T(2, 3, rg=True), T(1, 3, dtype=i64)], -2))
cases("stack", C(torch.stack, [X, X]), C(torch.stack, [X, T(3, 4, dtype=f64)], dim=-1), C(torch.stack, (T(3, 4, layout="T"), X), 1),
      C(torch.stack, [X, T(4, 3)]), C(torch.stack, [T(), T()]),
      C(torch.stack, [T(2, 3, 4, layout="perm"), T(2, 3, 4)], fallback=True), C(torch.stack, [T(2, 3, 4, 5, layout="cl")] * 2, fallback=True),
      C(torch.stack, [T(3, 4, layout="T"), T(3, 4, layout="T")], 2), C(torch.stack, [T(4, 6, layout="step")] * 3))

# ---- indexing ----------------------------------------------------------------------------------------
cases("index_select", C(torch.index_select, X, 0, I(3, 2)), C(torch.index_select, T(3, 4, layout="T"), 1, I(4, 5)),
      C(torch.Tensor.index_select, T(3, 4, rg=True), -1, I(4, ())), C(torch.index_select, X, 0, I(3, 2, 2)))
cases("gather", C(torch.gather, X, 1, I(4, 3, 2)), C(torch.gather, T(3, 4, layout="T"), 0, I(3, 2, 4)),
      C(torch.Tensor.gather, T(3, 4, rg=True), -1, I(4, 2, 2)), C(torch.gather, X, 1, I(4, 3)), C(torch.gather, X, 1, I(4, 4, 2)))
cases("scatter", C(torch.scatter, X, 0, I(3, 2, 4), T(2, 4)), C(torch.scatter, T(3, 4, layout="T"), 1, I(4, 3, 2), 2.0),
      C(torch.Tensor.scatter, T(3, 4, rg=True), 1, I(4, 3, 1), T(3, 1, rg=True)))
cases("scatter_add", C(torch.scatter_add, X, 0, I(3, 2, 4), T(2, 4)), C(torch.Tensor.scatter_add, T(3, 4, layout="T"), 1, I(4, 3, 2), T(3, 3)))
cases("embedding", C(F.embedding, I(10, 2, 3), T(10, 4, rg=True)), C(F.embedding, I(10, 5), T(10, 4), padding_idx=0),
      C(F.embedding, I(10, 5, dtype=i32), T(10, 4, layout="T")), C(F.embedding, I(10, 3), T(10, 4), padding_idx=12),
      C(F.embedding, I(10, 3), T(10)))

# ---- matrix products and convolutions ------------------------------------------------------------------
cases("matmul", C(torch.matmul, T(3, 4), T(4, 5)), C(torch.matmul, T(2, 3, 4), T(4, 5)), C(torch.matmul, T(4), T(4)),
      C(torch.matmul, T(3, 4), T(4)), C(torch.matmul, T(4), T(4, 5, rg=True)), C(torch.matmul, T(2, 1, 3, 4), T(5, 4, 6)),
      C(torch.matmul, T(2, 3, 4, layout="T"), T(2, 4, 5)), C(torch.matmul, T(3, 4), T(2, 4, 5), fallback=True),
      C(torch.matmul, T(2, 3, 4, layout="perm"), T(4)), C(torch.Tensor.matmul, T(3, 4, dtype=i64), T(4, 2, dtype=i64)),
      C(torch.matmul, T(3, 4), T(5, 6)), C(torch.matmul, T(2, 3, 4), T(3, 4, 5)), C(torch.matmul, T(3), T(4)))
cases("mm", C(torch.mm, T(3, 4), T(4, 5)), C(torch.mm, T(3, 4, layout="T"), T(4, 5, layout="T", rg=True)),
      C(torch.Tensor.mm, T(3, 4, dtype=f64), T(4, 2, dtype=f64)), C(torch.mm, T(3, 4), T(3, 4)), C(torch.mm, T(3, 4), T(4, 5, dtype=f64)))
cases("bmm", C(torch.bmm, T(2, 3, 4), T(2, 4, 5)), C(torch.bmm, T(2, 3, 4, layout="T"), T(2, 4, 5)), C(torch.bmm, T(2, 3, 4), T(3, 4, 5)))
cases("addmm", C(torch.addmm, T(5), T(3, 4), T(4, 5)), C(torch.addmm, T(3, 5, layout="T"), T(3, 4), T(4, 5), beta=0.5, alpha=2),
      C(torch.Tensor.addmm, T(3, 1, rg=True), T(3, 4), T(4, 5)), C(torch.addmm, T(4), T(3, 4), T(4, 5)))
cases("baddbmm", C(torch.baddbmm, T(2, 3, 5), T(2, 3, 4), T(2, 4, 5)), C(torch.baddbmm, T(5), T(2, 3, 4), T(2, 4, 5), alpha=0.5))
cases("linear", C(F.linear, T(3, 4), T(5, 4)), C(F.linear, T(3, 4), T(5, 4), T(5)), C(F.linear, T(2, 3, 4), T(5, 4, rg=True), T(5)),
      C(F.linear, T(2, 3, 4, layout="T"), T(5, 3), T(5)), C(F.linear, T(4), T(5, 4)), C(F.linear, T(2, 2, 3, 4), T(5, 4)),
      C(F.linear, T(3, 4), T(5, 3)), C(F.linear, T(3, 4, dtype=f64), T(5, 4, dtype=f64), T(5, dtype=f64)))
cases("conv1d", C(F.conv1d, T(2, 3, 10), T(4, 3, 3)), C(F.conv1d, T(2, 3, 10), T(4, 3, 3), T(4), stride=2, padding=1),
      C(F.conv1d, T(3, 10), T(4, 3, 3), dilation=2), C(torch.conv1d, T(2, 4, 9), T(4, 2, 3), None, 1, 1, 1, 2),
      C(F.conv1d, T(2, 3, 10, layout="T"), T(4, 3, 3)))
cases("conv2d", C(F.conv2d, T(2, 3, 8, 8), T(4, 3, 3, 3), T(4), padding=1), C(F.conv2d, T(2, 3, 8, 9), T(4, 3, 3, 3), stride=(2, 1)),
      C(F.conv2d, T(2, 4, 8, 8, rg=True), T(6, 2, 3, 3), groups=2), C(F.conv2d, T(2, 3, 8, 8), T(4, 3, 3, 3), padding="same"),
      C(F.conv2d, T(3, 8, 8), T(4, 3, 3, 3), padding="valid"), C(F.conv2d, T(2, 3, 8, 8, layout="cl"), T(4, 3, 3, 3)), C(F.conv2d, T(2, 3, 8, 8), T(4, 3, 3, 3, layout="cl")),
      C(F.conv2d, T(2, 3, 8, 8, layout="T", dtype=f64), T(4, 3, 3, 3, dtype=f64), T(4, dtype=f64)),
      C(F.conv2d, T(3, 8, 8, layout="perm"), T(4, 3, 3, 3), fallback=True),
      C(F.conv2d, T(2, 3, 8, 8), T(4, 2, 3, 3)), C(F.conv2d, T(2, 3, 2, 2), T(4, 3, 3, 3)))
cases("einsum", C(torch.einsum, "ij,jk->ik", T(3, 4), T(4, 5), fallback=True), C(torch.einsum, "bij->bji", T(2, 3, 4), fallback=True),
      C(torch.einsum, "i,i->", [T(4), T(4)], fallback=True))
if hasattr(F, "scaled_dot_product_attention"):
    sdpa = F.scaled_dot_product_attention
else:
    sdpa = "torch.nn.functional.scaled_dot_product_attention"
cases("scaled_dot_product_attention", C(sdpa, T(2, 3, 5, 4), T(2, 3, 6, 4), T(2, 3, 6, 4), fallback=True),
      C(sdpa, T(2, 3, 5, 4), T(2, 3, 5, 4), T(2, 3, 5, 4), is_causal=True, fallback=True))

# ---- composites ----------------------------------------------------------------------------------------
for name, fn in [("softmax", torch.softmax), ("log_softmax", torch.log_softmax)]:
    cases(name, C(fn, X, 1), C(fn, X3, -1, f64), C(fn, T(3, 4, layout="T", rg=True), 0), C(fn, T(2, 3, 4, 5, layout="cl"), 1),
          C(fn, T(3, 4, dtype=i64), 0, dtype=f32), C(getattr(torch.Tensor, name), T(4, 6, layout="step"), -1), C(fn, X, 2),
          C(fn, T(3, 4, dtype=i64), 0, fallback=True), C(fn, T(), 0))
for name, fn in [("f_softmax", F.softmax), ("f_log_softmax", F.log_softmax)]:
    cases(name, C(fn, X, dim=1), C(fn, T(3, 4, layout="T"), 0, dtype=f64), C(fn, T(2, 3, 4, 5, layout="cl", rg=True), dim=-1),
          C(fn, X3, fallback=True))
cases("layer_norm", C(F.layer_norm, X3, [4]), C(F.layer_norm, X3, (3, 4), T(3, 4, rg=True), T(3, 4)),
      C(F.layer_norm, T(2, 3, 4, layout="T"), [3], eps=1e-3), C(F.layer_norm, T(2, 3, 4, 5, layout="cl"), [5], T(5), None),
      C(F.layer_norm, X3, [3]), C(F.layer_norm, X3, [4], T(3)), C(torch.layer_norm, X3, [4]))
cases("rms_norm", C("torch.nn.functional.rms_norm", X3, [4]), C("torch.nn.functional.rms_norm", X3, (3, 4), T(3, 4, rg=True), eps=1e-6),
      C("torch.nn.functional.rms_norm", X3, [3]), C("torch.nn.functional.rms_norm", T(2, 3, 4, layout="T"), [3], fallback=True))
cases("batch_norm", C(F.batch_norm, T(4, 3, 5), T(3), T(3, positive=True)),
      C(F.batch_norm, T(4, 3, 5), T(3), T(3, positive=True), T(3, rg=True), T(3), training=True),
      C(F.batch_norm, T(2, 3, 4, 5, layout="cl"), T(3), T(3, positive=True), training=True, momentum=0.3),
      C(F.batch_norm, T(4, 3), None, None, training=True), C(F.batch_norm, T(1, 3), T(3), T(3, positive=True), training=True),
      C(F.batch_norm, T(4, 3, 5), T(4), T(4, positive=True)), C(F.batch_norm, T(4, 3, 5, layout="T"), T(3), T(3, positive=True)),
      C(F.batch_norm, T(2, 3, 4, 5, layout="perm"), None, None, training=True))
cases("group_norm", C(F.group_norm, T(2, 4, 3, 3), 2), C(F.group_norm, T(2, 4, 5, rg=True), 4, T(4), T(4), eps=1e-3),
      C(F.group_norm, T(2, 3, 3, 3), 2), C(torch.group_norm, T(2, 4, 3), 1), C(F.group_norm, T(2, 4, 3, 3, layout="cl"), 2), C(F.group_norm, T(2, 4, 6, layout="step"), 2))
cases("normalize", C(F.normalize, X), C(F.normalize, X, p=1.0, dim=0), C(F.normalize, T(3, 4, layout="T", rg=True)),
      C(F.normalize, T(2, 3, 4, 5, layout="cl"), dim=1), C(F.normalize, T(4, 6, layout="step"), 2.0, -1, 1e-6))
cases("cross_entropy", C(F.cross_entropy, T(4, 5, rg=True), I(5, 4)), C(F.cross_entropy, T(4, 5), I(5, 4), reduction="sum"),
      C(F.cross_entropy, T(4, 5), I(5, 4), reduction="none"), C(F.cross_entropy, T(4, 5), I(5, 4), label_smoothing=0.1),
      C(F.cross_entropy, T(4, 5), T(4, 5)), C(F.cross_entropy, T(4, 5), I(5, 4), T(5), ignore_index=1),
      C(F.cross_entropy, T(2, 5, 3), I(5, 2, 3)), C(F.cross_entropy, T(2, 5, 3), I(5, 2, 3), reduction="none"),
      C(F.cross_entropy, T(2, 5, 3, 4), I(5, 2, 3, 4, layout="T"), reduction="none"), C(F.cross_entropy, T(5), I(5, ()), reduction="none"),
      C(F.cross_entropy, T(4, 5), T(4, 5), reduction="none"),
      C(F.cross_entropy, T(4, 5), I(5, 4), reduction="bogus"))
cases("mse_loss", C(F.mse_loss, X, T(3, 4)), C(F.mse_loss, T(3, 4, rg=True), T(3, 4), reduction="none"),
      C(F.mse_loss, T(3, 4, layout="T"), T(3, 4), reduction="sum"), C(F.mse_loss, T(3, 4), T(3, 4, layout="T"), reduction="none"))
cases("adaptive_avg_pool2d", C(F.adaptive_avg_pool2d, T(2, 3, 8, 8), 1), C(F.adaptive_avg_pool2d, T(2, 3, 8, 8), (4, 2)),
      C(F.adaptive_avg_pool2d, T(2, 3, 8, 8, layout="cl", rg=True), 1), C(F.adaptive_avg_pool2d, T(2, 3, 8, 8, layout="cl"), (3, 5)),
      C(F.adaptive_avg_pool2d, T(3, 8, 8), (None, 3)), C(F.adaptive_avg_pool2d, T(2, 3, 8, 8, layout="T"), 2))
cases("max_pool2d", C(F.max_pool2d, T(2, 3, 8, 8), 2), C(F.max_pool2d, T(2, 3, 9, 9), 3, stride=2, padding=1),
      C(F.max_pool2d, T(1, 2, 5, 5), 2, ceil_mode=True), C(F.max_pool2d, T(2, 3, 8, 8), 2, return_indices=True),
      C(F.max_pool2d, T(2, 3, 8, 8, layout="cl", rg=True), (2, 3)), C(F.max_pool2d, T(3, 8, 8), 2, dilation=2),
      C(F.max_pool2d, T(1, 1, 5, 5), 2, padding=2), C(torch.max_pool2d, T(1, 2, 6, 6), 3),
      C(F.max_pool2d, T(2, 3, 8, 8, layout="T"), 2))
cases("avg_pool2d", C(F.avg_pool2d, T(2, 3, 8, 8), 2), C(F.avg_pool2d, T(2, 3, 9, 9), 3, 2, 1, count_include_pad=False),
      C(F.avg_pool2d, T(2, 3, 8, 8, layout="cl"), 2, ceil_mode=True), C(F.avg_pool2d, T(3, 7, 7, rg=True), (2, 3), divisor_override=3),
      C(F.avg_pool2d, T(1, 1, 5, 5), 2, padding=2), C(F.avg_pool2d, T(2, 3, 8, 8, layout="perm"), 2))
cases("interpolate", C(F.interpolate, T(2, 3, 4, 5), scale_factor=2), C(F.interpolate, T(1, 2, 5, 7, layout="cl"), size=(3, 9)),
      C(F.interpolate, T(2, 3, 4, 5), scale_factor=1.5, mode="bilinear"),
      C(F.interpolate, T(2, 3, 4, 5, layout="cl"), scale_factor=(2, 0.5), mode="bilinear", align_corners=True),
      C(F.interpolate, T(1, 3, 6, 6, dtype=f64), size=4, mode="bicubic"),
      C(F.interpolate, T(2, 8, 1, 1, layout="cl"), scale_factor=7, mode="nearest-exact"),
      C(F.interpolate, T(2, 3, 4, 5, rg=True), size=[8, 10], mode="bilinear"),
      C(F.interpolate, T(2, 3, 7, 5), scale_factor=0.3), C(F.interpolate, T(2, 3, 4, 5, layout="T"), scale_factor=2),
      C(F.interpolate, T(2, 3, 4, 5), scale_factor=2, mode="area", fallback=True),
      C(F.interpolate, T(2, 3, 8), scale_factor=2, mode="linear", fallback=True),
      C(F.interpolate, T(2, 3, 4, 5), scale_factor=2, mode="bilinear", antialias=True, fallback=True))
cases("pad", C(F.pad, X, (1, 2)), C(F.pad, T(2, 3, 4), (1, 1, 2, 2), value=1.0), C(F.pad, T(2, 3, 4, 5, layout="cl"), (1, 1)),
      C(F.pad, X, (-1, 1)), C(F.pad, T(3, 4, rg=True), (0, 0, 1, 0)), C(F.pad, T(1, 2, 4, 4), (1, 1, 1, 1), mode="reflect", fallback=True),
      C(F.pad, X, (1,)), C(F.pad, X, (-3, -2)), C(F.pad, T(3, 4, layout="T"), (1, 1)))

# ---- creation ------------------------------------------------------------------------------------------
cases("arange", C(torch.arange, 5), C(torch.arange, 1, 10, 2), C(torch.arange, 0.0, 1.0, 0.25), C(torch.arange, 5, dtype=f32),
      C(torch.arange, 10, 0, -3), C(torch.arange, 0, 1, 0.1), C(torch.arange, 0, 5, -1), C(torch.arange, 0, 5, 0),
      C(torch.arange, 4, requires_grad=True, dtype=f64), C(torch.arange, 2.5, dtype=i64, fallback=True))
for name in ["zeros", "ones", "empty", "rand", "randn"]:
    fn = getattr(torch, name)
    vals = name != "empty"
    cases(name, C(fn, 2, 3, values=vals), C(fn, (2, 3), dtype=f64, values=vals), C(fn, 2, 3, requires_grad=True, values=vals),
          C(fn, [], values=vals), C(fn, 2, device="cpu", values=vals), C(fn, 2, -1, values=vals))
for name in ["zeros", "ones", "empty"]:
    fn = getattr(torch, name)
    cases(name, C(fn, 3, dtype=i64, values=name != "empty"), C(fn, 3, dtype=i64, requires_grad=True))
cases("empty", C(torch.empty, 2, 3, 4, 5, memory_format=CL, values=False))
cases("rand", C(torch.rand, 3, dtype=i64, fallback=True))
cases("full", C(torch.full, (2, 3), 1.5), C(torch.full, (2,), True), C(torch.full, (2,), 7), C(torch.full, [2, 2], 1, dtype=f16),
      C(torch.full, (2,), 1.0, requires_grad=True))
for name in ["zeros_like", "ones_like", "empty_like", "rand_like", "randn_like"]:
    fn = getattr(torch, name)
    vals = name != "empty_like"
    cases(name, C(fn, T(3, 4, layout="T"), values=vals), C(fn, T(2, 3, 4, 5, layout="cl", rg=True), values=vals),
          C(fn, T(4, 6, layout="step"), values=vals), C(fn, T(3, 4), dtype=f64, values=vals),
          C(fn, T(3, 4, layout="expand"), values=vals), C(fn, T(2, 3, 4, 5, layout="cl"), memory_format=torch.contiguous_format, values=vals),
          C(fn, T(3, 4), requires_grad=True, values=vals))
for name in ["zeros_like", "ones_like", "empty_like"]:
    fn = getattr(torch, name)
    cases(name, C(fn, T(3, 4), dtype=i64, values=name != "empty_like"))
cases("full_like", C(torch.full_like, T(3, 4, layout="T"), 2), C(torch.full_like, T(3, dtype=i64), 2.5),
      C(torch.full_like, T(2, 3, 4, 5, layout="cl"), 1.0, dtype=f64), C(torch.full_like, T(4, 6, layout="step"), True))
cases("rand_like", C(torch.rand_like, T(3, dtype=i64), fallback=True))
cases("get_rng_state", C(torch.get_rng_state, fallback=True))
for name in ["new_zeros", "new_ones", "new_empty"]:
    fn = getattr(torch.Tensor, name)
    vals = name != "new_empty"
    cases(name, C(fn, T(3, 4, layout="T", rg=True), 2, 3, values=vals), C(fn, T(3, dtype=i64), (2,), values=vals),
          C(fn, T(3), 3, dtype=i32, values=vals), C(fn, T(3), [2, 2], requires_grad=True, values=vals))
cases("new_full", C(torch.Tensor.new_full, T(3, 4), (2, 2), 3.0), C(torch.Tensor.new_full, T(3, dtype=i64), [3], 2),
      C(torch.Tensor.new_full, T(3, dtype=f64), (1,), 2, dtype=f32))

# ---- reduced precision (torch 1.13 lacks many float16 CPU kernels: the rules must not type
# those calls there) ---------------------------------------------------------------------------------
H, BH = T(3, 4, dtype=f16), T(3, 4, dtype=bf16, layout="T")
for name in ["neg", "abs", "sign", "square", "floor", "round", "relu"] + FLOAT_UNARY + ["frac", "isnan", "signbit"]:
    cases(name, C(getattr(torch, name), H), C(getattr(torch, name), BH))
for name, (fn, params) in ACT_PARAMS.items():
    cases(name, C(fn, H), C(fn, BH, **params))
for name in ["add", "sub", "mul", "div", "remainder", "fmod", "floor_divide", "pow", "atan2", "maximum", "eq", "lt"]:
    fn = getattr(torch, name)
    cases(name, C(fn, H, T(4, dtype=f16)), C(fn, BH, T((), dtype=f32)), C(fn, H, T(3, 4, dtype=bf16)))
cases("op_add", C(operator.add, H, 1.5), C(operator.add, BH, T(3, 4, dtype=f16)))
cases("clamp", C(torch.clamp, H, -0.5, 0.5), C(torch.clamp, BH, min=0.0),
      C(torch.clamp, T(3, 4, dtype=i32), H, T(3, 4, dtype=i32)))  # in float16: promoted
cases("where", C(torch.where, B(3, 4), H, 0.5), C(torch.where, B(3, 4), BH, T(3, 4)))
cases("masked_fill", C(torch.masked_fill, H, B(4), 1.0), C(torch.masked_fill, BH, B(3, 4), 2))
cases("lerp", C(torch.lerp, H, T(3, 4, dtype=f16), 0.5))
cases("addcmul", C(torch.addcmul, H, H, H), C(torch.addcmul, BH, BH, BH, value=0.5))
for name in ["sum", "mean", "amax", "prod", "var", "std", "argmax", "logsumexp", "norm"]:
    fn = getattr(torch, name)
    cases(name, C(fn, H, 1), C(fn, BH, 0))
cases("max", C(torch.max, H, 1), C(torch.max, BH))
cases("cumsum", C(torch.cumsum, H, 1), C(torch.cumsum, BH, 0))
cases("topk", C(torch.topk, H, 2), C(torch.topk, BH, 1, dim=0))
for name, fn in [("softmax", torch.softmax), ("log_softmax", torch.log_softmax), ("f_softmax", F.softmax)]:
    cases(name, C(fn, H, 1), C(fn, BH, 0), C(fn, H, 1, dtype=f32))
cases("layer_norm", C(F.layer_norm, H, [4]), C(F.layer_norm, BH, [4], T(4, dtype=bf16), T(4, dtype=bf16)))
cases("rms_norm", C("torch.nn.functional.rms_norm", H, [4]), C("torch.nn.functional.rms_norm", T(3, 4, dtype=bf16), [4]))
cases("batch_norm", C(F.batch_norm, T(4, 3, 5, dtype=f16), None, None, training=True),
      C(F.batch_norm, T(4, 3, 5, dtype=bf16), None, None, training=True))
cases("group_norm", C(F.group_norm, T(2, 4, 3, dtype=f16), 2), C(F.group_norm, T(2, 4, 3, dtype=bf16), 2))
cases("normalize", C(F.normalize, H), C(F.normalize, BH))
cases("dropout", C(torch.dropout, H, 0.5, True), C(torch.dropout, BH, 0.5, True))
cases("f_dropout", C(F.dropout, H, 0.5, training=False))
cases("matmul", C(torch.matmul, H, T(4, 5, dtype=f16)), C(torch.matmul, BH, T(4, 5, dtype=bf16)))
cases("mm", C(torch.mm, H, T(4, 5, dtype=f16)), C(torch.mm, BH, T(4, 5, dtype=bf16)))
cases("linear", C(F.linear, H, T(5, 4, dtype=f16)), C(F.linear, BH, T(5, 4, dtype=bf16), T(5, dtype=bf16)))
cases("conv2d", C(F.conv2d, T(2, 3, 8, 8, dtype=f16), T(4, 3, 3, 3, dtype=f16)),
      C(F.conv2d, T(2, 3, 8, 8, dtype=bf16), T(4, 3, 3, 3, dtype=bf16)))
# cuDNN's fused convolutions (CUDA only: on CPU both eager and the graph reject them).
cases("cudnn_convolution_relu", C(torch.cudnn_convolution_relu, T(2, 3, 8, 8), T(4, 3, 3, 3), T(4), [1, 1], [1, 1], [1, 1], 1,
                                   fallback=True))
cases("cudnn_convolution_add_relu", C(torch.cudnn_convolution_add_relu, T(2, 3, 8, 8), T(4, 3, 3, 3), T(2, 4, 8, 8), 1.0, T(4),
                                       [1, 1], [1, 1], [1, 1], 1, fallback=True))
cases("max_pool2d", C(F.max_pool2d, T(2, 3, 8, 8, dtype=f16), 2), C(F.max_pool2d, T(2, 3, 8, 8, dtype=bf16), 2))
cases("avg_pool2d", C(F.avg_pool2d, T(2, 3, 8, 8, dtype=f16), 2), C(F.avg_pool2d, T(2, 3, 8, 8, dtype=bf16), 2))
cases("adaptive_avg_pool2d", C(F.adaptive_avg_pool2d, T(2, 3, 8, 8, dtype=f16), 2),
      C(F.adaptive_avg_pool2d, T(2, 3, 8, 8, dtype=f16), 1, fallback=True))
cases("mse_loss", C(F.mse_loss, H, H), C(F.mse_loss, BH, BH))
cases("cross_entropy", C(F.cross_entropy, H, I(4, 3)), C(F.cross_entropy, BH, I(4, 3)))
cases("cat", C(torch.cat, [H, T(1, 4, dtype=f16)]), C(torch.cat, [BH, H]))
cases("to_float", C(torch.Tensor.float, H), C(torch.Tensor.float, BH))
cases("to", C(torch.Tensor.to, H, bf16))
cases("embedding", C(F.embedding, I(3, 4), H))
cases("pad", C(F.pad, H, (1, 1)))


def graph_value(g, v, placeholders):
    """`v` for a call on graph `g`: tensors (also inside lists and tuples) become placeholders x0,
    x1, ... (appended to `placeholders`), everything else stays a constant."""
    if isinstance(v, torch.Tensor):
        node = g.placeholder(f"x{len(placeholders)}", v)
        placeholders.append(node)
        return node
    if isinstance(v, (list, tuple)):
        return type(v)(graph_value(g, i, placeholders) for i in v)
    return v
