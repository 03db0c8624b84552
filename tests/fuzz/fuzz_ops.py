"""The ops the codegen fuzzer draws from, one table.

Each op renders a Python expression (or an in-place statement) over operand names, given the
operands' eager values so that dims, shapes and constants fit. Its class says how its result is
compared with eager:

  exact   bit for bit (IEEE arithmetic, integer arithmetic, comparisons, views, casts)
  approx  within a few ulps (transcendentals, float reductions, fused multiply-adds in eager)

and whether it may read an approximate value: ops that are discontinuous (floor, comparisons,
casts to int, argmax ...) only read exact ones, so an ulp of difference upstream never becomes a
different integer downstream.
"""
import dataclasses
import math
import random
from typing import Callable, Optional

import torch

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
DTYPES = (torch.bool,) + INTS + FLOATS

# Python scalars, the extremes included (int64's ends, 2**53 + 1, a float's largest, subnormals,
# ties for rounding, inf and nan).
INT_SCALARS = [0, 1, -1, 2, 3, -7, 100, 255, 256, 300, -129, 2**15, 2**31 - 1, 2**31, -2**31, 2**53 + 1,
               2**62 + 1, 2**63 - 1, -2**63, 12345678901, 2**63, 2**64, -2**63 - 1]
FLOAT_SCALARS = [0.0, -0.0, 0.5, -1.5, 2.5, 0.1, 1e-8, 3.0, -0.3, 1e30, -3.4e38, 65504.0, 1e-40, 1.0000001,
                 float("inf"), float("-inf"), float("nan"), 6.0, 1 / 3]


# Ops whose sign of a zero result eager leaves to the code path: max(-0.0, 0.0) is -0.0 in its
# scalar loop and 0.0 in its vector loop (the tail of a row differs from the body). Their zeros
# are compared without sign.
ZERO_SIGN = {"maximum", "minimum", "max_binary", "fmax", "fmin", "clamp_scalar", "clamp_tensor", "clamp_", "hardtanh", "relu6",
             "relu", "relu_", "amax", "amin", "max_dim"}
# Ops with a pole or a sign test at zero: an ulp (or a sign) of difference in an operand near zero
# is any difference in the result. They read approximate or sign-free values only far from zero.
POLES = {"div", "torch_div", "reciprocal", "rsqrt", "atan2", "signbit", "pow", "pow_int", "floordiv", "mod",
         "fmod", "div_trunc", "div_floor", "div_", "log", "log2", "log10", "remainder", "addcdiv", "floor_divide", "asin", "acos"}


# Ops whose result depends on how eager orders or fuses its roundings: float reductions (the
# order of the sum) and multiply-adds its compiler may contract into an FMA (addcmul, add with
# alpha, lerp). Eager's error is one draw from many; results downstream get an ulp of the
# tensor's scale.
SUMS = {"sum", "prod", "mean", "var", "std", "softmax", "log_softmax", "logsumexp", "cumsum", "matmul",
        "addcmul", "add_alpha", "lerp"}
# Ops whose relative error grows with the argument (exp(x) by |x|, cos(x) by |x| / |cos x|): they
# read the result of a sum, or any approximate value, only where it is small, or an ulp of the
# sum's order (of tan's result: exp2(tan(x)) at 2**42, case 11030836) becomes many.
# Periodic ops: an ulp of a large argument is any result. They read approximate values only small.
PERIODIC = {"sin", "cos", "tan"}
# Ops whose derivative is infinite at +-1 (acos(x) near 1 turns an ulp of x into dozens of the
# result): they read approximate values only well inside (-1, 1).
UNIT_POLES = {"asin", "acos"}
# Ops that add: where an approximate operand is much larger than the result (cos(x) - 1 for a small
# x), the operand's ulp is many ulps of the result, and eager's own error, one draw, may be 0 just
# there (its cos rounded the right way) while a kernel's cos 1 ulp away is right too. The generator
# keeps such cancellation out of approximate values (codegen_fuzz._cancellation).
# Ops whose formula cancels in a tail: gelu's 0.5 * x * (1 + tanh(...)) (or erf) for x below -3
# turns an ulp of tanh near -1 into a thousand of the result, where eager's own error, one draw,
# may be small (cases 11039610, 11076823). Their results get the allowance of a sum's (an ulp of
# the tensor's scale), as SUMS do.
TAIL_CANCELS = {"gelu", "gelu_tanh"}
CANCELS = {"add", "sub", "torch_add", "torch_sub", "add_alpha", "addcmul", "lerp", "add_", "sub_", "iadd"}
# Spreads: var and std subtract the mean, so an approximate operand much larger than its own spread
# (log10 of a constant row: every element one value, or an ulp apart where a vector and a scalar
# path computed them) leaves ulps of the operand as the whole result, where eager's draw may be an
# exact 0 (case 31003715). The generator keeps them out as it keeps cancelling adds out.
SPREADS = {"var", "std"}
# Reductions whose partial results may overflow in one order and not in another: prod of 3e38, 7
# and 0 is -0.0 in eager's order and NaN in a sequential one (3e38 * 7 = inf, inf * 0 = NaN). They
# read only tensors where no order overflows (codegen_fuzz._may_overflow).
ORDER_OVERFLOW = {"sum", "mean", "cumsum", "prod"}
AMPLIFIERS = {"exp", "exp2", "expm1", "sin", "cos", "tan", "pow", "pow_scalar", "pow_int", "tanh", "sigmoid",
              "softplus", "mish", "elu", "erf", "gelu", "gelu_tanh", "silu", "softmax", "log_softmax", "logsumexp",
              "sinh", "cosh", "erfc", "selu", "celu", "logsigmoid", "atan"}


def scalar_text(v):
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        return repr(v)
    return repr(v)


def pick_scalar(rng: random.Random, like: Optional[torch.Tensor] = None):
    """A Python number; mostly of the operand's kind, sometimes another."""
    r = rng.random()
    if r < 0.08:
        return rng.random() < 0.5
    if like is not None and not like.dtype.is_floating_point and r < 0.6:
        return rng.choice(INT_SCALARS)
    if r < 0.35:
        return rng.choice(INT_SCALARS[:12])
    return rng.choice(FLOAT_SCALARS)


@dataclasses.dataclass
class Op:
    name: str
    arity: int                      # tensor operands
    render: Callable                # (rng, names, values) -> expression text, or None if it does not apply
    exact: bool = True              # result is bit-exact when its operands are
    smooth: bool = True             # may read approximate operands
    inplace: bool = False           # a statement mutating its first operand
    weight: float = 1.0


def _dim(rng, t):
    return rng.randrange(-t.dim(), t.dim()) if t.dim() else None


OPS = []


def op(name, arity=1, exact=True, smooth=True, inplace=False, weight=1.0):
    def deco(fn):
        OPS.append(Op(name, arity, fn, exact, smooth, inplace, weight))
        return fn
    return deco


def simple(name, text, arity=1, exact=True, smooth=True, weight=1.0):
    OPS.append(Op(name, arity, lambda rng, n, v: text.format(*n), exact, smooth, False, weight))


# ---- pointwise: unary ----------------------------------------------------------------------------
for _name, _text in [("neg", "-{0}"), ("abs", "{0}.abs()"), ("relu", "torch.relu({0})"), ("square", "torch.square({0})"),
                     ("reciprocal", "torch.reciprocal({0})"), ("nan_to_num", "torch.nan_to_num({0})"),
                     ("relu6", "torch.nn.functional.relu6({0})"), ("hardtanh", "torch.nn.functional.hardtanh({0}, -2.0, 3.0)"),
                     ("leaky_relu", "torch.nn.functional.leaky_relu({0}, 0.1)"), ("hardsigmoid", "torch.nn.functional.hardsigmoid({0})"),
                     ("hardswish", "torch.nn.functional.hardswish({0})")]:
    simple(_name, _text)
for _name, _text in [("floor", "torch.floor({0})"), ("ceil", "torch.ceil({0})"), ("trunc", "torch.trunc({0})"),
                     ("round", "torch.round({0})"), ("sign", "torch.sign({0})"), ("logical_not", "torch.logical_not({0})"),
                     ("bitwise_not", "~{0}"), ("isnan", "torch.isnan({0})"), ("isinf", "torch.isinf({0})"),
                     ("gt0", "{0} > 0"), ("frac", "torch.frac({0})"), ("isfinite", "torch.isfinite({0})"),
                     ("torch_bitwise_not", "torch.bitwise_not({0})")]:
    simple(_name, _text, smooth=False)


@op("signbit", smooth=False, weight=0.5)
def _signbit(rng, n, v):
    # NB: the sign of a NaN is not specified (0.0 / 0.0 is -nan on x86, +nan when folded).
    return None if v[0].dtype.is_floating_point and bool(torch.isnan(v[0]).any()) else f"torch.signbit({n[0]})"
for _name, _text in [("exp", "torch.exp({0})"), ("log", "torch.log({0})"), ("sin", "torch.sin({0})"), ("cos", "torch.cos({0})"),
                     ("tanh", "torch.tanh({0})"), ("sigmoid", "torch.sigmoid({0})"), ("erf", "torch.erf({0})"),
                     ("expm1", "torch.expm1({0})"), ("log1p", "torch.log1p({0})"), ("exp2", "torch.exp2({0})"),
                     ("log2", "torch.log2({0})"), ("log10", "torch.log10({0})"), ("tan", "torch.tan({0})"),
                     ("gelu", "torch.nn.functional.gelu({0})"), ("gelu_tanh", "torch.nn.functional.gelu({0}, approximate='tanh')"),
                     ("silu", "torch.nn.functional.silu({0})"), ("softplus", "torch.nn.functional.softplus({0})"),
                     ("elu", "torch.nn.functional.elu({0})"), ("mish", "torch.nn.functional.mish({0})"),
                     ("pow_half", "{0} ** 0.5"), ("pow_scalar", "torch.pow({0}, 2.5)"),
                     # NB: eager's sqrt goes through MKL's vector math where torch has it: not
                     # correctly rounded, so not reproducible bit for bit.
                     ("sqrt", "torch.sqrt({0})"), ("rsqrt", "torch.rsqrt({0})"),
                     ("asin", "torch.asin({0})"), ("acos", "torch.acos({0})"), ("atan", "torch.atan({0})"),
                     ("sinh", "torch.sinh({0})"), ("cosh", "torch.cosh({0})"), ("erfc", "torch.erfc({0})"),
                     ("selu", "torch.nn.functional.selu({0})"), ("celu", "torch.nn.functional.celu({0}, 0.7)"),
                     ("logsigmoid", "torch.nn.functional.logsigmoid({0})")]:
    simple(_name, _text, exact=False, weight=0.5)


@op("clamp_scalar")
def _clamp(rng, n, v):
    lo, hi = pick_scalar(rng, v[0]), pick_scalar(rng, v[0])
    if rng.random() < 0.3:
        return f"torch.clamp({n[0]}, min={scalar_text(lo)})"
    return f"torch.clamp({n[0]}, {scalar_text(lo)}, {scalar_text(hi)})"


@op("pow_int")
def _pow_int(rng, n, v):
    return f"{n[0]} ** {rng.choice([2, 3, -1, 0, 1])}"


@op("cast", smooth=True)
def _cast(rng, n, v):
    dt = rng.choice(DTYPES)
    t = v[0]
    # NB: float -> int of a value outside the int's range (or NaN) is undefined behaviour in eager.
    if t.dtype.is_floating_point and not dt.is_floating_point and dt != torch.bool:
        info = torch.iinfo(dt)
        if t.numel() and not bool(torch.isfinite(t).all() and (t >= info.min).all() and (t <= info.max).all()):
            return None
        return f"{n[0]}.to(torch.{str(dt)[6:]})" if rng.random() < 0.8 else None
    form = rng.random()
    short = {torch.float32: "float", torch.float64: "double", torch.float16: "half", torch.bfloat16: "bfloat16",
             torch.int64: "long", torch.int32: "int", torch.bool: "bool"}
    if form < 0.3 and dt in short:
        return f"{n[0]}.{short[dt]}()"
    return f"{n[0]}.to(torch.{str(dt)[6:]})"


# ---- pointwise: binary (a tensor and a tensor or a Python number) -----------------------------
_BINARY = [("add", "{0} + {1}", True, True), ("sub", "{0} - {1}", True, True), ("mul", "{0} * {1}", True, True),
           ("div", "{0} / {1}", True, True), ("maximum", "torch.maximum({0}, {1})", True, True),
           ("minimum", "torch.minimum({0}, {1})", True, True), ("fmax", "torch.fmax({0}, {1})", True, True),
           ("fmin", "torch.fmin({0}, {1})", True, True), ("torch_add", "torch.add({0}, {1})", True, True),
           ("torch_mul", "torch.mul({0}, {1})", True, True), ("torch_sub", "torch.sub({0}, {1})", True, True),
           ("torch_div", "torch.div({0}, {1})", True, True), ("div_trunc", "torch.div({0}, {1}, rounding_mode='trunc')", True, False),
           ("div_floor", "torch.div({0}, {1}, rounding_mode='floor')", True, False),
           ("floordiv", "{0} // {1}", True, False), ("mod", "{0} % {1}", True, False), ("fmod", "torch.fmod({0}, {1})", True, False),
           ("eq", "{0} == {1}", True, False), ("ne", "{0} != {1}", True, False), ("lt", "{0} < {1}", True, False),
           ("le", "torch.le({0}, {1})", True, False), ("gt", "torch.gt({0}, {1})", True, False), ("ge", "{0} >= {1}", True, False),
           ("logical_and", "torch.logical_and({0}, {1})", True, False), ("logical_or", "torch.logical_or({0}, {1})", True, False),
           ("bit_and", "{0} & {1}", True, False), ("bit_or", "{0} | {1}", True, False), ("bit_xor", "{0} ^ {1}", True, False),
           ("pow", "{0} ** {1}", False, True), ("atan2", "torch.atan2({0}, {1})", False, True),
           ("remainder", "torch.remainder({0}, {1})", True, False), ("floor_divide", "torch.floor_divide({0}, {1})", True, False),
           ("logical_xor", "torch.logical_xor({0}, {1})", True, False), ("bitwise_and", "torch.bitwise_and({0}, {1})", True, False)]


def _binary(text):
    def render(rng, n, v):
        a, b = n
        r = rng.random()
        if r < 0.35:  # a Python number on one side (reflected operators included)
            s = scalar_text(pick_scalar(rng, v[0]))
            return text.format(s, a) if rng.random() < 0.3 and text.startswith("{0} ") else text.format(a, s)
        if r < 0.45 and "torch." in text:
            return text.format(a, f"torch.tensor({scalar_text(pick_scalar(rng, v[0]))})")  # a 0-d tensor
        return text.format(a, b)
    return render


for _name, _text, _exact, _smooth in _BINARY:
    OPS.append(Op(_name, 2, _binary(_text), _exact, _smooth, False, 1.5 if _name in ("add", "sub", "mul", "div") else 1.0))


@op("add_alpha", arity=2, exact=False)
def _add_alpha(rng, n, v):
    return f"torch.add({n[0]}, {n[1]}, alpha={scalar_text(rng.choice([2, -1, 3, 0.5, -2.5]))})"


@op("where", arity=3)
def _where(rng, n, v):
    c = n[0] if v[0].dtype == torch.bool else f"({n[0]} > 0)"
    b = n[2] if rng.random() < 0.6 else scalar_text(pick_scalar(rng, v[1]))
    return f"torch.where({c}, {n[1]}, {b})"


@op("masked_fill", arity=2)
def _masked_fill(rng, n, v):
    m = n[1] if v[1].dtype == torch.bool else f"({n[1]} > 0)"
    return f"{n[0]}.masked_fill({m}, {scalar_text(pick_scalar(rng, v[0]))})"


@op("lerp", arity=2, exact=False)
def _lerp(rng, n, v):
    return f"torch.lerp({n[0]}, {n[1]}, {scalar_text(rng.choice([0.25, 0.5, 0.75, 1.5]))})"


@op("addcmul", arity=3, exact=False)
def _addcmul(rng, n, v):
    return f"torch.addcmul({n[0]}, {n[1]}, {n[2]}, value={scalar_text(rng.choice([1, 0.5, -2]))})"


@op("addcdiv", arity=3, exact=False)
def _addcdiv(rng, n, v):
    if not v[0].dtype.is_floating_point:
        return None
    return f"torch.addcdiv({n[0]}, {n[1]}, {n[2]}, value={scalar_text(rng.choice([1, 0.5, -2]))})"


@op("round_decimals", smooth=False, weight=0.5)
def _round_decimals(rng, n, v):
    return f"torch.round({n[0]}, decimals={rng.choice([1, 2, -1, 3])})" if v[0].dtype.is_floating_point else None


@op("max_binary", arity=2)
def _max_binary(rng, n, v):
    return f"torch.{rng.choice(['max', 'min'])}({n[0]}, {n[1]})"


@op("clamp_tensor", arity=3)
def _clamp_tensor(rng, n, v):
    return f"torch.clamp({n[0]}, {n[1]}, {n[2]})"


# ---- reductions ------------------------------------------------------------------------------
def _reduce(fn, exact_for_ints, keep=True, dims=True):
    def render(rng, n, v):
        t = v[0]
        if not dims or t.dim() == 0 or rng.random() < 0.25:
            return f"{fn}({n[0]})"
        d = _dim(rng, t)
        if keep and rng.random() < 0.4:
            return f"{fn}({n[0]}, {d}, keepdim=True)"
        return f"{fn}({n[0]}, {d})"
    return render


# NB: float sums and products differ from eager's in the last bits (another summation order):
# approx. Their integer forms wrap exactly.
OPS += [Op("sum", 1, _reduce("torch.sum", True), False, True, False, 1.5),
        Op("prod", 1, _reduce("torch.prod", True), False, True, False, 0.5),
        Op("mean", 1, _reduce("torch.mean", False), False, True, False),
        Op("amax", 1, lambda rng, n, v: f"torch.amax({n[0]}, {_dim(rng, v[0]) if v[0].dim() else '()'})", True, True, False),
        Op("amin", 1, lambda rng, n, v: f"torch.amin({n[0]}, {_dim(rng, v[0]) if v[0].dim() else '()'}, keepdim=True)", True, True, False),
        Op("argmax", 1, _reduce("torch.argmax", True), True, False, False, 0.7),
        Op("argmin", 1, _reduce("torch.argmin", True), True, False, False, 0.5),
        Op("var", 1, _reduce("torch.var", False), False, True, False, 0.5),
        Op("std", 1, _reduce("torch.std", False, dims=False), False, True, False, 0.3),
        Op("softmax", 1, lambda rng, n, v: f"torch.softmax({n[0]}, {_dim(rng, v[0]) or 0})", False, True, False, 0.7),
        Op("log_softmax", 1, lambda rng, n, v: f"torch.log_softmax({n[0]}, {_dim(rng, v[0]) or 0})", False, True, False, 0.4),
        Op("logsumexp", 1, lambda rng, n, v: f"torch.logsumexp({n[0]}, {_dim(rng, v[0]) or 0})", False, True, False, 0.4),
        Op("max_dim", 1, lambda rng, n, v: f"torch.max({n[0]}, {_dim(rng, v[0])})[0]" if v[0].dim() else None, True, True, False, 0.4),
        Op("all", 1, lambda rng, n, v: f"torch.all({n[0]})", True, False, False, 0.3),
        Op("any", 1, _reduce("torch.any", True, keep=False), True, False, False, 0.3),
        Op("cumsum", 1, lambda rng, n, v: f"torch.cumsum({n[0]}, {_dim(rng, v[0]) or 0})", False, True, False, 0.3)]


# ---- views and layout ------------------------------------------------------------------------
def _factor(rng, n):
    """A random shape with n elements."""
    dims = []
    while n > 1 and len(dims) < 3:
        ds = [d for d in range(2, n + 1) if n % d == 0]
        d = rng.choice(ds)
        dims.append(d)
        n //= d
    if n > 1:
        dims.append(n)
    rng.shuffle(dims)
    if rng.random() < 0.3:
        dims.insert(rng.randrange(len(dims) + 1), 1)
    return dims


@op("view", weight=1.2)
def _view(rng, n, v):
    t = v[0]
    shape = _factor(rng, t.numel()) if t.numel() else [0]
    if rng.random() < 0.25 and shape:
        shape[rng.randrange(len(shape))] = -1
    fn = rng.choice(["view", "reshape", "reshape"])
    if fn == "view" and not t.is_contiguous():
        fn = "reshape"
    return f"{n[0]}.{fn}({', '.join(map(str, shape)) or '()'})"


@op("flatten", weight=0.4)
def _flatten(rng, n, v):
    return f"{n[0]}.flatten()" if rng.random() < 0.5 or v[0].dim() < 2 else f"torch.flatten({n[0]}, 1)"


@op("permute")
def _permute(rng, n, v):
    t = v[0]
    if t.dim() < 2:
        return None
    if rng.random() < 0.5:
        d = list(range(t.dim()))
        rng.shuffle(d)
        return f"{n[0]}.permute({', '.join(map(str, d))})"
    a, b = rng.sample(range(t.dim()), 2)
    return f"{n[0]}.transpose({a}, {b})" if rng.random() < 0.7 or t.dim() != 2 else f"{n[0]}.t()"


@op("unsqueeze", weight=0.5)
def _unsqueeze(rng, n, v):
    return f"{n[0]}.unsqueeze({rng.randrange(-v[0].dim() - 1, v[0].dim() + 1)})"


@op("squeeze", weight=0.4)
def _squeeze(rng, n, v):
    t = v[0]
    ones = [d for d in range(t.dim()) if t.shape[d] == 1]
    return f"{n[0]}.squeeze({rng.choice(ones)})" if ones and rng.random() < 0.6 else f"{n[0]}.squeeze()"


@op("expand", weight=0.6)
def _expand(rng, n, v):
    t = v[0]
    shape = [rng.choice([2, 3]) if s == 1 and rng.random() < 0.7 else s for s in t.shape]
    if rng.random() < 0.3:
        shape.insert(0, 2)
    return f"{n[0]}.expand({', '.join(map(str, shape)) or '()'})"


@op("slice")
def _slice(rng, n, v):
    t = v[0]
    if t.dim() == 0:
        return None
    d = rng.randrange(t.dim())
    size = t.shape[d]
    start = rng.randrange(0, max(size, 1))
    step = rng.choice([1, 1, 2, 3])
    idx = [":"] * d + [f"{start}::{step}" if rng.random() < 0.7 else f"{start}:{rng.randrange(start, size + 1)}"]
    return f"{n[0]}[{', '.join(idx)}]"


@op("select", weight=0.6)
def _select(rng, n, v):
    t = v[0]
    if t.dim() == 0 or t.shape[0] == 0:
        return None
    i = rng.randrange(-t.shape[0], t.shape[0])
    return f"{n[0]}[{i}]" if rng.random() < 0.6 else f"{n[0]}.narrow(0, {max(i, 0)}, 1)"


@op("contiguous", weight=0.4)
def _contiguous(rng, n, v):
    return f"{n[0]}.contiguous()" if rng.random() < 0.7 else f"{n[0]}.clone()"


@op("split", weight=0.3)
def _split(rng, n, v):
    t = v[0]
    if t.dim() == 0 or t.shape[-1] < 2:
        return None
    return f"{n[0]}.split({rng.randrange(1, t.shape[-1])}, -1)[{rng.choice([0, -1])}]"


@op("cat", arity=2, weight=0.3)
def _cat(rng, n, v):
    return f"torch.cat([{n[0]}.reshape(-1), {n[1]}.reshape(-1)])"


@op("zeros_like", weight=0.2)
def _like(rng, n, v):
    return rng.choice([f"torch.zeros_like({n[0]})", f"torch.ones_like({n[0]})",
                       f"torch.full_like({n[0]}, {scalar_text(pick_scalar(rng, v[0]))})"])


@op("matmul", arity=2, exact=False, weight=0.3)
def _matmul(rng, n, v):
    a, b = v
    if a.dim() != 2 or not a.dtype.is_floating_point or a.dtype != b.dtype:
        return None
    k = a.shape[1]
    return f"{n[0]} @ {n[0]}.t()" if rng.random() < 0.5 else f"torch.nn.functional.linear({n[0]}, {n[0]}[:{max(k, 1)}])"


# ---- in-place ------------------------------------------------------------------------------
def _inplace(text, arity=2, scalar_ok=True):
    def render(rng, n, v):
        other = n[1] if arity == 2 else None
        if arity == 2 and scalar_ok and rng.random() < 0.4:
            other = scalar_text(pick_scalar(rng, v[0]))
        return text.format(n[0], other)
    return render


OPS += [Op("add_", 2, _inplace("{0}.add_({1})"), True, True, True),
        Op("mul_", 2, _inplace("{0}.mul_({1})"), True, True, True),
        Op("sub_", 2, _inplace("{0}.sub_({1})"), True, True, True, 0.5),
        Op("div_", 2, _inplace("{0}.div_({1})"), True, True, True, 0.5),
        Op("iadd", 2, _inplace("{0} += {1}"), True, True, True),
        Op("imul", 2, _inplace("{0} *= {1}"), True, True, True, 0.5),
        Op("clamp_", 1, lambda rng, n, v: f"{n[0]}.clamp_({scalar_text(pick_scalar(rng, v[0]))})", True, True, True, 0.3),
        Op("relu_", 1, lambda rng, n, v: f"{n[0]}.relu_()", True, True, True, 0.4),
        Op("zero_", 1, lambda rng, n, v: f"{n[0]}.zero_()", True, True, True, 0.3),
        Op("fill_", 1, lambda rng, n, v: f"{n[0]}.fill_({scalar_text(pick_scalar(rng, v[0]))})", True, True, True, 0.3),
        Op("copy_", 2, lambda rng, n, v: f"{n[0]}.copy_({n[1]})", True, True, True, 0.4),
        Op("masked_fill_", 2, lambda rng, n, v: f"{n[0]}.masked_fill_({n[1]} > 0, {scalar_text(pick_scalar(rng, v[0]))})",
           True, False, True, 0.3),
        Op("sigmoid_", 1, lambda rng, n, v: f"{n[0]}.sigmoid_()", False, True, True, 0.2)]


def choose(rng: random.Random):
    total = sum(o.weight for o in OPS)
    r = rng.random() * total
    for o in OPS:
        r -= o.weight
        if r <= 0:
            return o
    return OPS[-1]
