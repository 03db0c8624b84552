"""Tensor expressions: `tensor_expr(g, shape, dtype)` returns source text for a new tensor of exactly
that shape and dtype, built from tensors in scope with shape-preserving ops (views and
shape-changing ops are statements, gen_tensor_stmts.py, so the generator always knows shapes).

Float tensors hold small integers, and the default ops keep them integers (add, mul by small ints,
relu, clamp, max, floor, sum...): their results are exact in float32 in any evaluation order, which
lets the runner compare the inductor backend bit for bit. Ops that round (tanh, division by 3,
mean) mark the program inexact.

`avoid` names a storage family a bare operand must not come from: an in-place op whose operand is
a partially overlapping view of its target raises in eager ("unsupported operation: some elements
of the input tensor and the written-to tensor refer to a single memory location") - a rule torch
enforces, not a frontend semantics question, so the generator stays clear of it.
"""
from __future__ import annotations

from .gen import FLOAT, INT, T, aliasing
from .gen_exprs import MAX_DEPTH, expr


def tensor_expr(g, shape, dtype="f", d=0, *, fresh=False, avoid=None) -> str:
    shape = tuple(shape)
    if not fresh and (d >= MAX_DEPTH or g.chance(0.4)):
        name = _bare(g, shape, dtype, avoid)
        if name is not None:
            return aliasing(name, g.visible()[name].family)
    if d >= MAX_DEPTH:
        return _leaf(g, shape, dtype)
    table = {"f": FLOAT_TABLE, "i": INT_TABLE, "b": BOOL_TABLE}[dtype]
    out = g.weighted(table, shape, d + 1, avoid)
    return out if out is not None else _leaf(g, shape, dtype)


def _bare(g, shape, dtype, avoid):
    def ok(v):
        if v.ty.kind != "T" or v.ty.dtype != dtype:
            return False
        if v.ty.shape != shape and not (g.chance(0.2) and v.ty.shape == () and shape == ()):
            return False
        return avoid is None or (v.family != avoid and not v.family.startswith("?"))
    return g.pick(ok)[0]


def operand(g, shape, dtype, d, avoid):
    """A same-shape tensor, or (broadcasting) a 0-dim one or a Python scalar."""
    c = g.r.random()
    if c < 0.65 or dtype == "b":
        return tensor_expr(g, shape, dtype, d, avoid=avoid)
    if c < 0.8:
        return tensor_expr(g, (), dtype, d, avoid=avoid)
    return expr(g, INT, MAX_DEPTH - 1) if dtype == "i" or g.chance(0.7) else g.r.choice(("0.5", "2.0", "-1.5"))


def _like(g, shape, dtype):
    """In a dynamic program: a new tensor of `shape` made from a tensor in scope of that shape, so
    its size follows the arguments' (None where no such tensor is in scope)."""
    name = g.pick(lambda v: v.ty.kind == "T" and v.ty.shape == shape)[0]
    if name is None:
        return None
    kw = {"f": "dtype=torch.float32", "i": "dtype=torch.int64", "b": "dtype=torch.bool"}[dtype]
    c = g.r.choice(("zeros", "ones", "full", "arange"))
    if c == "arange" and dtype != "b":
        conv = "" if dtype == "i" else ".float()"
        return f"torch.arange({name}.numel()){conv}.reshape({name}.shape)"
    if c == "full" and dtype != "b":
        v = g.small_int()
        return f"torch.full_like({name}, {v if dtype == 'i' else float(v)}, {kw})"
    return f"torch.{'zeros' if c in ('zeros', 'full') else 'ones'}_like({name}, {kw})"


def shape_source(g, shape) -> tuple[str, str]:
    """(shape, element count) as source. In a dynamic program every multiple of the first
    dimension is that dimension (generate.DYNAMIC_SHAPES), written through a tensor in scope
    (`x.shape[0]`), so the new tensor follows variant C's size."""
    n = 1
    for s in shape:
        n *= s
    dim = g.base_shape[0]
    if not g.dynamic or not any(s % dim == 0 for s in shape):
        return repr(tuple(shape)), str(n)
    name, v = g.pick(lambda v: v.ty.kind == "T" and dim in v.ty.shape)
    if name is None:
        return repr(tuple(shape)), str(n)
    ref = f"{name}.shape[{v.ty.shape.index(dim)}]"
    parts = [str(s) if s % dim else ref if s == dim else f"{s // dim} * {ref}" for s in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")", " * ".join(parts)


def _leaf(g, shape, dtype):
    if g.dynamic and shape and g.chance(0.5):
        like = _like(g, shape, dtype)
        if like is not None:
            return like
    shape, n = shape_source(g, shape)
    if dtype == "b":
        return f"torch.ones({shape}, dtype=torch.bool)" if g.chance(0.5) else f"torch.zeros({shape}, dtype=torch.bool)"
    suffix = ", dtype=torch.int64" if dtype == "i" else ""
    c = g.r.choice(("zeros", "ones", "full", "arange"))
    if c == "arange" and shape != "()":
        conv = "" if dtype == "i" else ".float()"
        return f"torch.arange({n}){conv}.reshape({shape})"
    if c == "arange":
        v = g.small_int()
        return f"torch.tensor({v if dtype == 'i' else float(v)})"
    if c == "full":
        v = g.small_int()
        return f"torch.full({shape}, {v if dtype == 'i' else float(v)}{suffix})"
    return f"torch.{c}({shape}{suffix})"


# ---- float -----------------------------------------------------------------------------------
def _f_binop(g, shape, d, avoid):
    a = tensor_expr(g, shape, "f", d, avoid=avoid)
    b = operand(g, shape, "f", d, avoid)
    op = g.r.choice(("+", "-", "*", "+", "-"))
    return f"({a} {op} {b})"


def _f_torch_binop(g, shape, d, avoid):
    a = tensor_expr(g, shape, "f", d, avoid=avoid)
    b = tensor_expr(g, shape, "f", d, avoid=avoid)
    c = g.r.choice(("add", "sub", "mul", "maximum", "minimum", "where", "add_alpha"))
    if c == "where":
        return f"torch.where({a} > {b}, {a}, {b})"
    if c == "add_alpha":
        return f"torch.add({a}, {b}, alpha={g.r.choice((2, -1, 3))})"
    return f"torch.{c}({a}, {b})"


def _f_unary(g, shape, d, avoid):
    a = tensor_expr(g, shape, "f", d, avoid=avoid)
    c = g.r.choice(("relu", "abs", "neg", "clamp", "floor", "sign", "square", "pow", "F.relu", "leaky", "hardtanh",
                    "clone"))
    if c == "relu":
        return f"torch.relu({a})" if g.chance(0.5) else f"{a}.relu()"
    if c == "clamp":
        lo = g.small_int(-3, 0)
        return f"{a}.clamp(min={lo}, max={lo + g.r.randint(1, 6)})"
    if c == "pow":
        return f"({a} ** 2)" if g.chance(0.5) else f"{a}.pow(2)"
    if c == "F.relu":
        return f"torch.nn.functional.relu({a})"
    if c == "leaky":
        return f"torch.nn.functional.leaky_relu({a}, 0.5)"
    if c == "hardtanh":
        return f"torch.nn.functional.hardtanh({a}, -2.0, 2.0)"
    if c == "neg":
        return f"-{a}" if g.chance(0.5) else f"{a}.neg()"
    return f"{a}.{c}()"


def _f_reduce_broadcast(g, shape, d, avoid):
    # A reduction kept to broadcast back: the shape stays.
    if not shape:
        return None
    a = tensor_expr(g, shape, "f", d, avoid=avoid)
    dim = g.r.randrange(-len(shape), len(shape))
    red = g.r.choice(("sum", "amax", "amin"))
    return f"({a} - {a}.{red}({dim}, keepdim=True))"


def _f_inexact(g, shape, d, avoid):
    g.exact = False
    a = tensor_expr(g, shape, "f", d, avoid=avoid)
    c = g.r.choice(("sigmoid", "tanh", "div", "mean", "softmax", "exp"))
    if c == "div":
        return f"({a} / 3)"
    if c == "exp":
        return f"{a}.clamp(max=3).exp()"
    if c in ("mean", "softmax"):
        if not shape:
            return f"torch.{c if c == 'sigmoid' else 'tanh'}({a})"
        dim = g.r.randrange(len(shape))
        return f"({a}.mean({dim}, keepdim=True) + 0 * {a})" if c == "mean" else f"torch.softmax({a}, {dim})"
    return f"torch.{c}({a})"


def _f_reduce_to_scalar(g, shape, d, avoid):
    if shape:
        return None
    name, v = g.pick(lambda v: v.ty.kind == "T" and v.ty.dtype == "f" and v.ty.shape)
    if name is None:
        return None
    c = g.r.choice(("sum", "max", "amin", "abs_sum", "dot", "index"))
    if c == "abs_sum":
        return f"{name}.abs().sum()"
    if c == "dot":
        return f"({name} * {name}).sum()"
    if c == "index":
        idx = ", ".join(str(g.r.randrange(-s, s)) for s in v.ty.shape)
        return f"{name}[{idx}].clone()"
    return f"{name}.{c}()" if g.chance(0.6) else f"torch.{c}({name})"


def _f_from_int(g, shape, d, avoid):
    if g.chance(0.5):
        return f"{tensor_expr(g, shape, 'i', d)}.float()"
    return f"({tensor_expr(g, shape, 'b', d)}).float()"


def _f_scalar_mix(g, shape, d, avoid):
    a = tensor_expr(g, shape, "f", d, avoid=avoid)
    s = expr(g, INT if g.chance(0.7) else FLOAT, d)
    return f"({a} {g.r.choice(('*', '+', '-'))} {s})"


def _f_container_elem(g, shape, d, avoid):
    if avoid is not None:
        return None
    if shape == g.base_shape:
        name, v = g.pick(lambda v: v.ty.kind in ("list_T", "dict_sT", "obj", "nt", "rec", "tuple_T"))
        if name is None:
            return None
        fallback = tensor_expr(g, shape, "f", d)
        k = v.ty.kind
        if k in ("list_T", "tuple_T"):
            forms = [f"({name}[0] if {name} else {fallback})",
                     f"(torch.stack({name}).sum(0) if {name} else {fallback})",
                     f"max({name}, key=lambda t: float(t.sum()), default={fallback})"]
            if not g.off("sum_start"):
                forms.append(f"sum({name}, start={fallback})")
            return aliasing(g.r.choice(forms), "?")
        if k == "dict_sT":
            forms = [f"{name}.get({g.key()}, {fallback})"]
            if not g.off("sum_start"):
                forms.append(f"sum({name}.values(), start={fallback})")
            return aliasing(g.r.choice(forms), "?")
        if k == "obj" and g.chance(0.3):
            return f"{name}.scaled({g.small_int(0, 2)})"
        return aliasing(f"{name}.t" if k != "nt" or g.chance(0.5) else f"{name}[0]", "?")
    return None


def _f_helper_call(g, shape, d, avoid):
    # NB: a helper may return its argument itself: the result may alias anything.
    if avoid is not None:
        return None
    from .gen_funcs import call_helper  # noqa: PLC0415
    call = call_helper(g, T(shape), d)
    return None if call is None else aliasing(call, "?")


FLOAT_TABLE = [(5, _f_binop), (2, _f_torch_binop), (4, _f_unary), (1, _f_reduce_broadcast), (1, _f_inexact),
               (4, _f_reduce_to_scalar), (1, _f_from_int), (3, _f_scalar_mix), (3, _f_container_elem),
               (2, _f_helper_call)]


# ---- int64 and bool --------------------------------------------------------------------------
def _i_arith(g, shape, d, avoid):
    a = tensor_expr(g, shape, "i", d, avoid=avoid)
    c = g.r.choice(("add", "mul", "floordiv", "mod", "abs", "max", "neg", "from_f", "clamp"))
    if c == "add":
        return f"({a} + {operand(g, shape, 'i', d, avoid)})"
    if c == "mul":
        return f"({a} * {g.small_int(-2, 3)})"
    if c == "floordiv":
        return f"({a} // {g.r.choice((2, 3, -2))})"
    if c == "mod":
        return f"({a} % {g.r.choice((2, 3, 4))})"
    if c == "max":
        return f"torch.maximum({a}, {tensor_expr(g, shape, 'i', d, avoid=avoid)})"
    if c == "neg":
        return f"(-{a})"
    if c == "from_f":
        return f"{tensor_expr(g, shape, 'f', d)}.long()" if g.chance(0.5) else \
            f"{tensor_expr(g, shape, 'f', d)}.to(torch.int64)"
    if c == "clamp":
        return f"{a}.clamp(-2, 4)"
    return f"{a}.abs()"


def _i_reduce(g, shape, d, avoid):
    if shape:
        return None
    name, v = g.pick(lambda v: v.ty.kind == "T" and v.ty.dtype in ("i", "b") and v.ty.shape)
    if name is None:
        return None
    return g.r.choice((f"{name}.sum()", f"{name}.long().max()", f"torch.count_nonzero({name})"))


INT_TABLE = [(4, _i_arith), (1, _i_reduce)]


def _b_compare(g, shape, d, avoid):
    dt = g.r.choice(("f", "f", "i"))
    a = tensor_expr(g, shape, dt, d)
    b = operand(g, shape, dt, d, None) if g.chance(0.5) else str(g.small_int(-1, 2))
    return f"({a} {g.r.choice(('>', '<', '>=', '==', '!='))} {b})"


def _b_logic(g, shape, d, avoid):
    a = tensor_expr(g, shape, "b", d, avoid=avoid)
    c = g.r.choice(("&", "|", "^", "~", "logical_not"))
    if c == "~":
        return f"(~{a})"
    if c == "logical_not":
        return f"torch.logical_not({a})"
    return f"({a} {c} {tensor_expr(g, shape, 'b', d, avoid=avoid)})"


BOOL_TABLE = [(3, _b_compare), (2, _b_logic)]
