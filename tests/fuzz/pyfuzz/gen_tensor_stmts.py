"""Tensor statements: views (and writes through them), in-place methods, index assignment,
shape-changing ops and structseq returns (`torch.max(t, 1).values`).

A view binds a new name in its base's storage family; an in-place op on any member of a family
must show in every other member, in the arguments the caller passed in, and in what the function
returns. That is the aliasing a functionalizing frontend most easily gets wrong.
"""
from __future__ import annotations

from .gen import INT, T, Ty, Var
from .gen_exprs import expr
from .gen_stmts import bind_new, tensor_info
from .gen_tensor_exprs import operand, tensor_expr


def tensor_statement(g):
    return g.weighted(TABLE)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _target(g, *, writable=True, dtypes=("f",), min_dims=0):
    return g.pick(lambda v: v.ty.kind == "T" and v.ty.dtype in dtypes and len(v.ty.shape) >= min_dims and
                  (v.writable or not writable))


def _bind_view(g, text, base: Var, shape, *, contig, writable=True):
    name = g.bind("v", T(shape, base.ty.dtype), family=base.family, contig=contig, writable=writable and base.writable)
    g.emit(f"{name} = {text}")
    return True


# ---- views -----------------------------------------------------------------------------------
def _view(g):
    name, v = _target(g, writable=False, dtypes=("f", "f", "i"), min_dims=1)
    if name is None:
        return None
    s = v.ty.shape
    c = g.r.choice(("index", "col", "slice", "view", "reshape", "t", "unsqueeze", "flatten", "narrow", "diagonal",
                    "detach", "alias", "expand", "contiguous", "permute", "T", "ellipsis"))
    if c == "index":
        i = g.r.randrange(-s[0], s[0])
        return _bind_view(g, f"{name}[{i}]", v, s[1:], contig=v.contig)
    if c == "col" and len(s) >= 2:
        j = g.r.randrange(-s[1], s[1])
        return _bind_view(g, f"{name}[:, {j}]", v, s[:1] + s[2:], contig=False)
    if c == "ellipsis" and len(s) >= 2:
        j = g.r.randrange(s[-1])
        return _bind_view(g, f"{name}[..., {j}]", v, s[:-1], contig=False)
    if c == "slice" and s[0] >= 2:
        a = g.r.randrange(0, s[0] - 1)
        b = g.r.randint(a + 1, s[0])
        return _bind_view(g, f"{name}[{a}:{b}]", v, (b - a,) + s[1:], contig=v.contig)
    if c in ("view", "reshape", "flatten") and v.contig:
        n = _numel(s)
        if c == "flatten":
            return _bind_view(g, f"{name}.flatten()", v, (n,), contig=True)
        if n % 2 == 0 and g.chance(0.5):
            return _bind_view(g, f"{name}.{c}(2, -1)", v, (2, n // 2), contig=True)
        return _bind_view(g, f"{name}.{c}(-1)", v, (n,), contig=True)
    if c in ("t", "T") and len(s) == 2:
        return _bind_view(g, f"{name}.{c}" + ("()" if c == "t" else ""), v, (s[1], s[0]), contig=False)
    if c == "permute" and len(s) >= 2:
        dims = list(range(len(s)))[::-1]
        return _bind_view(g, f"{name}.permute({', '.join(map(str, dims))})", v, tuple(s[::-1]), contig=False)
    if c == "unsqueeze":
        k = g.r.randint(0, len(s))
        return _bind_view(g, f"{name}.unsqueeze({k})", v, s[:k] + (1,) + s[k:], contig=v.contig)
    if c == "narrow" and s[0] >= 2:
        return _bind_view(g, f"{name}.narrow(0, 1, {s[0] - 1})", v, (s[0] - 1,) + s[1:], contig=v.contig)
    if c == "diagonal" and len(s) == 2:
        return _bind_view(g, f"{name}.diagonal()", v, (min(s),), contig=False)
    if c == "detach":
        return _bind_view(g, f"{name}.detach()", v, s, contig=v.contig)
    if c == "alias":
        # NB: .float() on a float tensor and .contiguous() on a contiguous one return the tensor itself.
        text = f"{name}.float()" if v.ty.dtype == "f" else f"{name}.long()"
        return _bind_view(g, text, v, s, contig=v.contig)
    if c == "expand":
        return _bind_view(g, f"{name}.expand(2, *{name}.shape)", v, (2,) + s, contig=False, writable=False)
    if c == "contiguous":
        # Whether this copies depends on strides; either way the result is contiguous.
        return _bind_view(g, f"{name}.contiguous()", v, s, contig=True)
    return None


def _chunks(g):
    name, v = _target(g, writable=False, min_dims=1)
    if name is None or v.ty.shape[0] < 2:
        return None
    s = v.ty.shape
    if g.dynamic and s[0] % g.base_shape[0] == 0:
        return None   # NB: the parts' count and sizes would change with variant C's first dimension
    if s[0] % 2 == 0 and g.chance(0.5):
        a, b = g.fresh("p"), g.fresh("q")
        g.emit(f"{a}, {b} = {name}.chunk(2{', 0' if g.chance(0.5) else ''})")
        shape = (s[0] // 2,) + s[1:]
    elif s[0] <= 3:
        parts = [g.fresh("r") for _ in range(s[0])]
        g.emit(f"{', '.join(parts)}{',' if len(parts) == 1 else ''} = {name}.unbind({'0' if g.chance(0.5) else ''})")
        for p in parts:
            g.declare(p, Var(T(s[1:]), family=v.family, contig=v.contig, writable=v.writable))
        return True
    else:
        a, b = g.fresh("p"), g.fresh("q")
        g.emit(f"{a}, {b} = {name}.split([1, {s[0] - 1}])")
        g.declare(a, Var(T((1,) + s[1:]), family=v.family, contig=v.contig, writable=v.writable))
        g.declare(b, Var(T((s[0] - 1,) + s[1:]), family=v.family, contig=v.contig, writable=v.writable))
        return True
    for p in (a, b):
        g.declare(p, Var(T(shape), family=v.family, contig=v.contig, writable=v.writable))
    return True


def _reshaping(g):
    """Ops that make a new tensor of another shape."""
    name, v = _target(g, writable=False, min_dims=1)
    if name is None:
        return None
    s = v.ty.shape
    c = g.r.choice(("sum", "amax", "cumsum", "cat", "stack", "matmul", "flip", "repeat", "roll", "masked_sum"))
    dim = g.r.randrange(len(s))
    if c in ("sum", "amax"):
        out, text = s[:dim] + s[dim + 1:], f"{name}.{c}({dim})" if g.chance(0.5) else f"torch.{c}({name}, dim={dim})"
    elif c == "cumsum":
        out, text = s, f"{name}.cumsum({dim})"
    elif c == "cat":
        other = tensor_expr(g, s, "f", 1)
        out, text = s[:dim] + (2 * s[dim],) + s[dim + 1:], f"torch.cat([{name}, {other}], {dim})"
    elif c == "stack":
        other = tensor_expr(g, s, "f", 1)
        out, text = (2,) + s, f"torch.stack([{name}, {other}])"
    elif c == "matmul" and len(s) == 2:
        other = tensor_expr(g, s, "f", 1)
        out, text = (s[0], s[0]), f"{name} @ {other}.t()" if g.chance(0.5) else f"torch.matmul({name}, {other}.T)"
    elif c == "flip":
        out, text = s, f"{name}.flip({dim})"
    elif c == "repeat":
        out, text = (2 * s[0],) + s[1:], f"{name}.repeat({', '.join(['2'] + ['1'] * (len(s) - 1))})"
    elif c == "roll":
        out, text = s, f"{name}.roll(1, {dim})"
    elif c == "masked_sum":
        # A data-dependent shape inside: the compiled function must break or handle it.
        out, text = (), f"{name}[{name} > 0].sum()"
    else:
        return None
    t = g.bind("t", T(out, v.ty.dtype), family=g.family(), contig=tensor_info(g, text)["contig"])
    g.emit(f"{t} = {text}")
    return True


def _structseq(g):
    if g.off("structseq"):
        return None
    name, v = _target(g, writable=False, min_dims=1)
    if name is None:
        return None
    s = v.ty.shape
    dim = g.r.randrange(len(s))
    c = g.r.choice(("max", "min", "sort", "aminmax", "method"))
    red = s[:dim] + s[dim + 1:]
    if c == "sort":
        call, fields = f"torch.sort({name}, dim={dim}, stable=True)", (("values", s, "f"), ("indices", s, "i"))
    elif c == "aminmax":
        call, fields = f"torch.aminmax({name}, dim={dim})", (("min", red, "f"), ("max", red, "f"))
    elif c == "method":
        call, fields = f"{name}.max(dim={dim})", (("values", red, "f"), ("indices", red, "i"))
    else:
        call, fields = f"torch.{c}({name}, {dim})", (("values", red, "f"), ("indices", red, "i"))
    fields = tuple((f, sh, "i" if dt == "i" else v.ty.dtype) for f, sh, dt in fields)
    form = g.r.choice(("attrs", "unpack", "index", "keep"))
    if form == "unpack":
        a, b = g.fresh("a"), g.fresh("b")
        g.emit(f"{a}, {b} = {call}")
        names = (a, b)
    else:
        r = g.bind("r", Ty("sseq"))
        g.emit(f"{r} = {call}")
        names = []
        for i, (f, sh, dt) in enumerate(fields):
            n = g.fresh("a")
            g.emit(f"{n} = {r}.{f}" if form != "index" else f"{n} = {r}[{i}]")
            names.append(n)
        if form == "keep" and g.chance(0.5):
            flag = g.bind("b", Ty("bool"))
            g.emit(f"{flag} = {g.r.choice((f'isinstance({r}, tuple)', f'{r}[0] is {r}.{fields[0][0]}', f'len({r}) == 2'))}")
    for n, (f, sh, dt) in zip(names, fields):
        g.declare(n, Var(T(sh, dt), family=g.family(), contig=False))
    return True


# ---- in-place --------------------------------------------------------------------------------
def _inplace(g):
    name, v = _target(g, dtypes=("f", "f", "f", "i"))
    if name is None:
        return None
    s, dt = v.ty.shape, v.ty.dtype
    fresh = v.family.startswith("?")

    def rhs():
        return tensor_expr(g, s, dt, 1, fresh=True, avoid=v.family) if fresh else operand(g, s, dt, 1, v.family)
    c = g.r.choice(("add_", "sub_", "mul_", "add_alpha", "relu_", "zero_", "fill_", "neg_", "abs_", "clamp_", "copy_",
                    "torch.relu_", "masked_fill_", "self", "sigmoid_", "floor_"))
    if dt == "i" and c in ("relu_", "torch.relu_", "sigmoid_", "floor_", "neg_", "abs_"):
        c = "mul_"
    if c in ("add_", "sub_"):
        text = f"{name}.{c}({rhs()})"
    elif c == "add_alpha":
        text = f"{name}.add_({rhs()}, alpha={g.r.choice((2, -1))})"
    elif c == "mul_":
        text = f"{name}.mul_({g.r.choice((2, -1, 0, 3))})"
    elif c in ("relu_", "zero_", "neg_", "abs_", "floor_"):
        text = f"{name}.{c}()"
    elif c == "sigmoid_":
        g.exact = False
        text = f"{name}.sigmoid_()"
    elif c == "fill_":
        text = f"{name}.fill_({expr(g, INT, 2) if g.chance(0.5) else g.small_int()})"
    elif c == "clamp_":
        lo = g.small_int(-2, 0)
        text = f"{name}.clamp_({lo}, {lo + g.r.randint(1, 4)})" if g.chance(0.6) else f"{name}.clamp_(min={lo})"
    elif c == "copy_":
        text = f"{name}.copy_({rhs()})"
    elif c == "torch.relu_":
        text = f"torch.relu_({name})"
    elif c == "masked_fill_":
        text = f"{name}.masked_fill_({name} < {g.small_int(-1, 2)}, {g.small_int()})"
    else:
        text = f"{name}.add_({name})" if g.chance(0.5) else f"{name}.mul_({name})"
    if g.chance(0.3):
        # The result of an in-place method is the tensor itself: `r is t` must hold.
        r = g.bind("t", v.ty, family=v.family, contig=v.contig, writable=v.writable)
        g.emit(f"{r} = {text}")
    else:
        g.emit(text)
    return True


def _setitem(g):
    name, v = _target(g, dtypes=("f", "f", "i"), min_dims=1)
    if name is None:
        return None
    s, dt = v.ty.shape, v.ty.dtype
    c = g.r.choice(("row", "col", "elem", "mask", "slice", "aug_row", "aug_col"))
    src_fresh = v.family.startswith("?")

    def part(shape):
        return tensor_expr(g, shape, dt, 1, fresh=True, avoid=v.family) if src_fresh or g.chance(0.3) else \
            operand(g, shape, dt, 1, v.family)
    i = g.r.randrange(-s[0], s[0])
    if c == "row":
        g.emit(f"{name}[{i}] = {part(s[1:])}")
    elif c == "col" and len(s) >= 2:
        g.emit(f"{name}[:, {g.r.randrange(s[1])}] = {part(s[:1] + s[2:])}")
    elif c == "elem":
        idx = ", ".join(str(g.r.randrange(-n, n)) for n in s)
        g.emit(f"{name}[{idx}] = {expr(g, INT, 2)}")
    elif c == "mask":
        g.emit(f"{name}[{name} > {g.small_int(-1, 2)}] = {g.small_int()}")
    elif c == "slice" and s[0] >= 2:
        g.emit(f"{name}[1:] = {g.small_int()}")
    elif c == "aug_row":
        g.emit(f"{name}[{i}] += {g.small_int(1, 3)}")
    elif c == "aug_col" and len(s) >= 2:
        g.emit(f"{name}[:, {g.r.randrange(s[1])}] *= {g.r.choice((2, -1))}")
    else:
        return None
    return True


def _size_binding(g):
    name, v = _target(g, writable=False, dtypes=("f", "i", "b"), min_dims=1)
    if name is None:
        return None
    sz = g.bind("sz", Ty("size"))
    g.emit(f"{sz} = {name}.{g.r.choice(('shape', 'size()', 'shape'))}")
    use = g.r.choice((f"{sz}[1:]", f"tuple({sz})", f"list({sz})", f"{sz}.numel()", f"hasattr({sz}, '_fields')",
                      f"type({sz}[-1:]).__name__", f"{sz} == {tuple(v.ty.shape)}", f"len({sz})"))
    g.emit(f"{g.fresh('u')} = {use}")
    return True


def _new_tensor(g):
    bind_new(g, T(g.base_shape) if g.chance(0.7) else T(()))
    return True


def _clone_detach(g):
    name, v = _target(g, writable=False, dtypes=("f",))
    if name is None:
        return None
    info = tensor_info(g, name)
    t = g.bind("t", v.ty, family=g.family(), contig=info["contig"])
    g.emit(f"{t} = {name}.clone()")
    return True


TABLE = [(4, _view), (1, _chunks), (2, _reshaping), (1, _structseq), (6, _inplace), (3, _setitem),
         (1, _size_binding), (4, _new_tensor), (1, _clone_detach)]

