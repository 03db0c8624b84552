"""Expressions of Python scalar types and containers: `expr(g, ty)` returns source text whose value
has type ty in the current scope. Tensor expressions are in gen_tensor_exprs.py.

Expressions have no side effects other than `print` (mutation is a statement's business), and they
never raise: a production that could (an index, `d[k]`, a division) carries its own guard.
`fresh=True` asks for a new object (not a bare name), which rebinding a container needs so that
alias groups stay what the generator believes.
"""
from __future__ import annotations

from .gen import BOOL, FLOAT, INT, STR, Ty
from .values import WORDS

MAX_DEPTH = 3


def expr(g, ty: Ty, d: int = 0, *, fresh: bool = False) -> str:
    if ty.kind == "T":
        from .gen_tensor_exprs import tensor_expr  # noqa: PLC0415 - the two modules call each other
        return tensor_expr(g, ty.shape, ty.dtype, d, fresh=fresh)
    table = TABLES[ty.kind]
    if not fresh and (d >= MAX_DEPTH or g.chance(0.35)):
        name = g.pick_ty(ty)
        if name is not None:
            return name
    if d >= MAX_DEPTH:
        return LEAVES[ty.kind](g)
    out = g.weighted(table, d + 1)
    return out if out is not None else LEAVES[ty.kind](g)


def var(g, ty):
    return g.pick_ty(ty)


def of_kind(g, kind):
    return g.pick(lambda v: v.ty.kind == kind)[0]


def tensor_var(g, dims_min=0, dtype=None):
    return g.pick(lambda v: v.ty.kind == "T" and len(v.ty.shape) >= dims_min and
                  (dtype is None or v.ty.dtype == dtype))


# ---- int -------------------------------------------------------------------------------------
def _int_binop(g, d):
    a, b = expr(g, INT, d), expr(g, INT, d)
    op = g.r.choice(("+", "-", "*", "+", "-"))
    return f"({a} {op} {b})"


def _int_floordiv_mod(g, d):
    # NB: negative divisors on purpose: Python floors, C truncates.
    k = g.r.choice((2, 3, -2, 4, -3))
    return f"({expr(g, INT, d)} {g.r.choice(('//', '%'))} {k})"


def _int_len(g, d):
    name = g.pick(lambda v: v.ty.kind in ("list_int", "list_T", "tuple_int", "dict_si", "dict_sT", "set_i",
                                           "fset_i", "str", "size", "tuple_T", "dview"))[0]
    return f"len({name})" if name else None


def _int_builtin(g, d):
    f = g.r.choice(("abs", "max", "min", "pow2", "neg", "divmod", "bool"))
    a = expr(g, INT, d)
    if f == "abs":
        return f"abs({a})"
    if f == "pow2":
        # NB: bounded: `n = n ** 2` in nested loops would grow without limit.
        return f"({a} % 5) ** 2"
    if f == "neg":
        return f"-{a}"
    if f == "divmod":
        return f"divmod({a}, {g.r.choice((3, -2))})[{g.r.randint(0, 1)}]"
    if f == "bool":
        return f"({expr(g, BOOL, d)} + {a})"
    return f"{f}({a}, {expr(g, INT, d)})"


def _int_of_tensor(g, d):
    name, v = tensor_var(g)
    if name is None:
        return None
    c = g.r.choice(("shape", "size", "dim", "numel", "item", "len"))
    if c in ("shape", "size") and v.ty.shape:
        i = g.r.randrange(-len(v.ty.shape), len(v.ty.shape))
        return f"{name}.shape[{i}]" if c == "shape" else f"{name}.size({i})"
    if c == "len" and v.ty.shape:
        return f"len({name})"
    if c == "item":
        # NB: data-dependent: a graph break in the compiled function.
        g.float_to_python |= v.ty.dtype == "f"
        return f"int({name}.sum())" if g.chance(0.5) else f"int({name}.max())"
    return f"{name}.{'dim' if c == 'dim' else 'numel'}()"


def _int_of_list(g, d):
    name = of_kind(g, "list_int") or of_kind(g, "tuple_int")
    if name is None:
        return None
    c = g.r.choice(g.allowed(("sum", "sum_start", "count", "max", "min", "index", "next", "genexp", "elem"),
                             sum_start=("sum_start",), genexp=("next", "genexp")))
    if c == "sum":
        return f"sum({name})"
    if c == "sum_start":
        return f"sum({name}, start={expr(g, INT, d)})"
    if c == "count":
        return f"{name}.count({g.r.randrange(8)})"
    if c in ("max", "min"):
        return f"{c}({name}, default={g.small_int()})"
    if c == "index":
        k = g.r.randrange(8)
        return f"({name}.index({k}) if {k} in {name} else -1)"
    if c == "next":
        return f"next((v for v in {name} if v > {g.r.randrange(6)}), {g.small_int()})"
    if c == "genexp":
        return f"sum(1 for v in {name} if v % 2 == {g.r.randint(0, 1)})"
    i = g.r.randint(-3, 3)
    return f"({name}[{i} % len({name})] if {name} else {g.small_int()})"


def _int_of_dict(g, d):
    name = of_kind(g, "dict_si")
    if name is None:
        return None
    c = g.r.choice(("get", "get2", "sumvals", "in"))
    if c == "get":
        return f"{name}.get({g.key()}, {g.small_int()})"
    if c == "get2":
        return f"{name}.get({g.key()}, {expr(g, INT, d)})"
    if c == "sumvals":
        return f"sum({name}.values())"
    return f"sum(v for k, v in {name}.items() if k < {g.key()})"


def _int_of_obj(g, d):
    name = of_kind(g, "obj") or of_kind(g, "nt") or of_kind(g, "rec")
    if name is None:
        return None
    if g.chance(0.2):
        return f"getattr({name}, 'n', {g.small_int()})"
    return f"{name}.n"


def _int_cond(g, d):
    return f"({expr(g, INT, d)} if {expr(g, BOOL, d)} else {expr(g, INT, d)})"


def _int_of_float(g, d):
    f = g.r.choice(("int", "round", "math.floor", "math.ceil"))
    return f"{f}({expr(g, FLOAT, d)})"


def _int_of_set(g, d):
    name = of_kind(g, "set_i") or of_kind(g, "fset_i")
    if name is None:
        return None
    return g.r.choice((f"sum({name})", f"max({name}, default=0)", f"min({name}, default=9)",
                       f"len({name} & {{1, 2, 3}})", f"(sorted({name})[0] if {name} else -1)"))


def _int_helper(g, d):
    from .gen_funcs import call_helper  # noqa: PLC0415
    return call_helper(g, INT, d)


INT_TABLE = [(2, _int_helper), (4, _int_binop), (2, _int_floordiv_mod), (3, _int_len), (2, _int_builtin), (3, _int_of_tensor),
             (3, _int_of_list), (2, _int_of_dict), (1, _int_of_obj), (1, _int_cond), (1, _int_of_float),
             (1, _int_of_set)]


# ---- float -----------------------------------------------------------------------------------
def _float_arith(g, d):
    a = expr(g, FLOAT, d)
    c = g.r.choice(("mul", "add", "div", "int", "sqrt", "neg", "round", "pow"))
    if c == "mul":
        return f"({a} * {g.r.choice(('0.5', '2', '1.5', '-3'))})"
    if c == "add":
        return f"({a} + {expr(g, INT, d)})"
    if c == "div":
        return f"({a} / {g.r.choice((2, 3, -4, 0.5))})"
    if c == "int":
        k = g.r.choice((2, 3, 7))
        if k != 2:
            g.exact = False   # a third or a seventh: its rounding feeds tensors that a fused backend may sum in another order
        return f"float({expr(g, INT, d)}) / {k}"
    if c == "sqrt":
        g.exact = False
        return f"math.sqrt(abs({a}))"
    if c == "round":
        return f"round({a}, {g.r.randint(0, 2)})"
    if c == "pow":
        g.exact = False
        return f"abs({a}) ** 0.5"
    return f"-{a}"


def _float_of_tensor(g, d):
    name, v = tensor_var(g, dtype="f")
    if name is None:
        return None
    g.float_to_python = True
    return g.r.choice((f"{name}.sum().item()", f"float({name}.max())", f"{name}.abs().sum().item() / 2"))


def _float_mixed(g, d):
    return f"max({expr(g, FLOAT, d)}, {expr(g, INT, d)})" if g.chance(0.5) else \
        f"({expr(g, INT, d)} / {g.r.choice((2, 4, -8))})"


FLOAT_TABLE = [(4, _float_arith), (2, _float_of_tensor), (1, _float_mixed)]


# ---- bool ------------------------------------------------------------------------------------
def _bool_compare(g, d):
    ty = g.r.choice((INT, INT, FLOAT))
    if g.chance(0.15):
        return f"({expr(g, INT, d)} < {expr(g, ty, d)} <= {expr(g, INT, d)})"
    return f"({expr(g, ty, d)} {g.r.choice(('<', '<=', '>', '==', '!=', '>='))} {expr(g, ty, d)})"


def _bool_logic(g, d):
    c = g.r.choice(("and", "or", "not"))
    if c == "not":
        return f"(not {expr(g, BOOL, d)})"
    return f"({expr(g, BOOL, d)} {c} {expr(g, BOOL, d)})"


def _bool_membership(g, d):
    name, v = g.pick(lambda v: v.ty.kind in ("list_int", "tuple_int", "set_i", "fset_i", "dict_si", "dict_sT",
                                             "str"))
    if name is None:
        return None
    if v.ty.kind in ("dict_si", "dict_sT"):
        probe = g.key() if g.chance(0.7) else expr(g, STR, d)
        return f"({probe} {g.r.choice(('in', 'not in'))} {name}{g.r.choice(('', '', '.keys()'))})"
    if v.ty.kind == "str":
        return f"({g.r.choice(WORDS[:3])!r} in {name})"
    return f"({g.r.randrange(8)} {g.r.choice(('in', 'not in'))} {name})"


def _bool_isinstance(g, d):
    name, v = g.pick(lambda v: True)
    if name is None:
        return None
    cls = g.r.choice(("int", "float", "str", "list", "tuple", "dict", "set", "frozenset", "torch.Tensor", "bool",
                      "(list, tuple)", "(int, float)"))
    return f"isinstance({name}, {cls})"


def _bool_attr(g, d):
    if g.off("hasattr"):
        return None
    name, v = g.pick(lambda v: v.ty.kind in ("obj", "nt", "rec", "T", "size", "list_int", "dict_si"))
    if name is None:
        return None
    attr = g.r.choice(("n", "t", "extra", "shape", "_fields", "append", "keys", "__call__", "__len__", "values"))
    return f"hasattr({name}, {attr!r})"


def _bool_of_tensor(g, d):
    name, v = tensor_var(g)
    if name is None:
        return None
    if v.ty.dtype == "b":
        return g.r.choice((f"bool({name}.any())", f"{name}.all().item()"))
    c = g.r.choice(("sum", "any", "contig", "dtype", "shape", "is"))
    if c == "sum":
        return f"bool({name}.sum() > {g.small_int()})"
    if c == "any":
        return f"bool(({name} > {g.small_int(0, 3)}).any())"
    if c == "contig":
        return f"{name}.is_contiguous()"
    if c == "dtype":
        return f"({name}.dtype == torch.{g.r.choice(('float32', 'int64', 'bool'))})"
    if c == "shape":
        return f"({name}.shape == {tuple(v.ty.shape) if g.chance(0.7) else (2, 2)})"
    other, _ = tensor_var(g)
    return f"({name} {g.r.choice(('is', 'is not'))} {other})"


def _bool_of_container(g, d):
    name, v = g.pick(lambda v: v.ty.kind in ("list_int", "set_i", "dict_si", "tuple_int", "fset_i"))
    if name is None:
        return None
    if v.ty.kind in ("list_int", "tuple_int"):
        return g.r.choice((f"any(v > {g.r.randrange(6)} for v in {name})", f"all(v < 6 for v in {name})",
                           f"bool({name})", f"({name} == sorted({name}))"))
    if v.ty.kind in ("set_i", "fset_i"):
        return g.r.choice((f"{name}.isdisjoint({{0, 1}})", f"({name} <= {{0, 1, 2, 3, 4}})", f"bool({name})",
                           f"({name} == {{{g.r.randrange(8)}}})"))
    return g.r.choice((f"bool({name})", f"any(v > 1 for v in {name}.values())", f"({name} == {{}})"))


def _bool_identity(g, d):
    name, v = g.pick(lambda v: v.ty.kind in CONTAINERS_AND_OBJECTS)
    if name is None:
        return None
    other, _ = g.pick(lambda w: w.ty.kind == v.ty.kind)
    return f"({name} {g.r.choice(('is', 'is not'))} {other})"


CONTAINERS_AND_OBJECTS = ("list_int", "list_T", "dict_si", "dict_sT", "set_i", "obj", "nt", "rec")

BOOL_TABLE = [(4, _bool_compare), (2, _bool_logic), (3, _bool_membership), (1, _bool_isinstance), (1, _bool_attr),
              (3, _bool_of_tensor), (2, _bool_of_container), (1, _bool_identity)]


# ---- str -------------------------------------------------------------------------------------
def _str_format(g, d):
    c = g.r.choice(g.allowed(("fstr", "percent", "format", "concat", "join", "method", "str", "typename", "fmtfloat"),
                             genexp=("join",)))
    if c == "fstr":
        return fstring(expr(g, STR, d), "-", expr(g, INT, d))
    if c == "percent":
        return f"(\"%s:%d\" % ({expr(g, STR, d)}, {expr(g, INT, d)}))"
    if c == "format":
        return f"\"{{}}/{{}}\".format({expr(g, INT, d)}, {expr(g, STR, d)})"
    if c == "concat":
        return f"({expr(g, STR, d)} + {g.r.choice(WORDS)!r})"
    if c == "join":
        name = of_kind(g, "list_int") or of_kind(g, "set_i")
        if name is None:
            return None
        return f"\",\".join(str(v) for v in {name})"
    if c == "method":
        m = g.r.choice(("upper()", "strip('-')", "replace('a', 'b')", "split('-')[0]", "title()", "[1:]", "[::-1]"))
        return f"({expr(g, STR, d)}).{m}" if not m.startswith("[") else f"({expr(g, STR, d)}){m}"
    if c == "str":
        name, _ = g.pick(lambda v: v.ty.kind in ("int", "list_int", "tuple_int", "dict_si", "bool", "float",
                                                 "size", "set_i"))
        return f"{g.r.choice(('str', 'repr'))}({name})" if name else None
    if c == "typename":
        name, _ = g.pick(lambda v: True)
        return f"type({name}).__name__" if name else None
    return fstring(expr(g, FLOAT, d), ":.2f")


def fstring(*parts) -> str:
    """An f-string of expression parts (odd positions are literal text or a format spec after ':');
    where a part holds quotes (which an f-string cannot nest before 3.12) it becomes format()."""
    if any('"' in p or "\\" in p or "{" in p for p in parts[0::2]):
        fmt = "".join("{}" if i % 2 == 0 else p for i, p in enumerate(parts) if not p.startswith(":"))
        spec = [p for p in parts[1::2] if p.startswith(":")]
        if spec:
            return f"format({parts[0]}, {spec[0][1:]!r})"
        return f"{fmt!r}.format({', '.join(parts[0::2])})"
    out = []
    for i, p in enumerate(parts):
        if i % 2 == 0:
            out.append("{" + p)
            if i + 1 >= len(parts) or not parts[i + 1].startswith(":"):
                out.append("}")
        elif p.startswith(":"):
            out.append(p + "}")
        else:
            out.append(p)
    return 'f"' + "".join(out) + '"'


def _str_keys(g, d):
    name = of_kind(g, "dict_si") or of_kind(g, "dict_sT")
    if name is None:
        return None
    return g.r.choice((f"\"\".join({name})", f"\"|\".join(sorted({name}.keys()))",
                       f"(next(iter({name})) if {name} else 'none')", f"str(list({name}))"))


STR_TABLE = [(4, _str_format), (1, _str_keys)]


from .gen_container_exprs import (  # noqa: E402 - it uses expr() above
    _dict_si, _fset_i, _list_int, _set_i, _size, _tuple_int, int_iterable)  # noqa: F401 - re-exported

TABLES = {"int": INT_TABLE, "float": FLOAT_TABLE, "bool": BOOL_TABLE, "str": STR_TABLE,
          "list_int": [(1, _list_int)], "tuple_int": [(1, _tuple_int)], "set_i": [(1, _set_i)],
          "fset_i": [(1, _fset_i)], "dict_si": [(1, _dict_si)], "size": [(1, _size)]}

LEAVES = {
    "int": lambda g: str(g.small_int()),
    "float": lambda g: g.r.choice(("0.5", "1.25", "-2.0", "3.0")),
    "bool": lambda g: g.r.choice(("True", "False")),
    "str": lambda g: repr(g.r.choice(WORDS)),
    "list_int": lambda g: repr([g.r.randrange(8) for _ in range(g.r.randint(0, 3))]),
    "tuple_int": lambda g: repr(tuple(g.r.randrange(8) for _ in range(g.r.randint(1, 3)))),
    "set_i": lambda g: "{" + ", ".join(str(g.r.randrange(8)) for _ in range(g.r.randint(1, 3))) + "}",
    "fset_i": lambda g: "frozenset()",
    "dict_si": lambda g: "{" + f"{g.key()}: {g.small_int()}" + "}",
    "size": lambda g: "torch.Size([2, 3])",
}

