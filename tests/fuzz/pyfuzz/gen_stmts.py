"""Statements: the dispatcher, bindings, prints, and control flow (if / for / while / try / with).

`statement(g)` emits one statement (a compound one fills its suites recursively). The table
weights follow what model code does: mostly tensor math, views and in-place updates, container
bookkeeping and loops over lists and dicts; prints, try blocks and identity checks less often.
"""
from __future__ import annotations

import re

from .gen import BOOL, DICT_SI, FLOAT, FSET_I, INT, LIST_I, SET_I, SIZE, STR, TUPLE_I, T, Ty, Var
from .gen_exprs import expr
from .gen_tensor_exprs import tensor_expr
from .program import Node

MAX_NESTING = 3
NAME = re.compile(r"[A-Za-z_]\w*")


def statement(g) -> None:
    table = SIMPLE if g.depth >= MAX_NESTING + 1 else ALL
    g.weighted(table)


# ---- bindings ----------------------------------------------------------------------------------
def random_type(g) -> Ty:
    s = g.base_shape
    choices = [(30, T(s)), (8, T(())), (3, T(s, "i")), (2, T(s, "b")), (14, INT), (3, FLOAT), (4, BOOL), (4, STR),
               (6, LIST_I), (4, Ty("list_T")), (2, TUPLE_I), (5, DICT_SI), (3, Ty("dict_sT")), (4, SET_I),
               (1, FSET_I), (1, SIZE)]
    total = sum(w for w, _ in choices)
    x = g.r.uniform(0, total)
    for w, ty in choices:
        x -= w
        if x <= 0:
            return ty
    return INT


def tensor_info(g, text: str) -> dict:
    """Family and contiguity of a new binding to tensor expression `text` (see gen.Var)."""
    vis = g.visible()
    alias = getattr(text, "alias", "")
    names = [n for n in NAME.findall(text) if n in vis and vis[n].ty.kind == "T"]
    contig = alias in ("",) and all(vis[n].contig for n in names)
    if alias:
        fam = alias
        if alias != "?" and text in vis:
            contig = vis[text].contig
    else:
        fam = g.family()
    return {"family": fam, "contig": contig}


def value_expr(g, ty: Ty, *, fresh=False) -> str:
    if ty.kind == "list_T":
        from .gen_containers import list_t_expr  # noqa: PLC0415
        return list_t_expr(g, fresh=fresh)
    if ty.kind == "dict_sT":
        from .gen_containers import dict_t_expr  # noqa: PLC0415
        return dict_t_expr(g, fresh=fresh)
    return expr(g, ty, fresh=fresh)


def bind_new(g, ty: Ty | None = None) -> str:
    ty = ty or random_type(g)
    text = value_expr(g, ty)
    if ty.kind == "T":
        info = tensor_info(g, text)
    elif ty.kind in ("list_int", "list_T", "dict_si", "dict_sT", "set_i"):
        same = g.visible().get(text)
        info = {"group": same.group if same is not None else g.fresh("grp")}
    else:
        info = {}
    name = g.bind({"T": "t", "int": "n", "float": "f", "bool": "b", "str": "s"}.get(ty.kind, "c"), ty, **info)
    g.emit(f"{name} = {text}")
    return name


def _new_binding(g):
    bind_new(g)
    return True


def _rebind(g):
    name, v = g.pick(lambda v: v.ty.kind in ("T", "int", "float", "bool", "str", "list_int", "dict_si", "set_i",
                                             "tuple_int", "list_T"), rebind=True)
    if name is None:
        return None
    if v.ty.kind == "T":
        text = tensor_expr(g, v.ty.shape, v.ty.dtype, fresh=True)
        info = tensor_info(g, text)
        if getattr(text, "alias", ""):
            return None
        v.contig = v.contig and info["contig"]
    else:
        if v.ty.kind in ("list_int", "list_T", "dict_si", "set_i") and not g.may_grow(name):
            return None
        text = value_expr(g, v.ty, fresh=True)
    g.emit(f"{name} = {text}")
    return True


def _augmented(g):
    name, v = g.pick(lambda v: v.ty.kind in ("int", "float", "str", "T", "list_int", "tuple_int", "set_i") and
                     (v.ty.kind != "T" or v.writable), rebind=True)
    if name is None:
        return None
    k = v.ty.kind
    if k == "int":
        op = g.r.choice(("+=", "-=", "*=", "//=", "%="))
        rhs = expr(g, INT, 1) if op in ("+=", "-=") else str(g.r.choice((2, 3, -2)))
        g.emit(f"{name} {op} {rhs}")
    elif k == "float":
        g.emit(f"{name} {g.r.choice(('+=', '-=', '*='))} {expr(g, g.r.choice((INT, FLOAT)), 1)}")
    elif k == "str":
        g.emit(f"{name} += {expr(g, STR, 1) if not g.loop_depth else repr(g.r.choice(('a', '-', '')))}")
    elif k == "T":
        # NB: `t += u` on a tensor is in place: it writes through to every alias of t.
        if not v.ty.shape and v.ty.dtype != "f" or v.ty.dtype == "b":
            return None
        from .gen_tensor_exprs import operand  # noqa: PLC0415
        rhs = operand(g, v.ty.shape, v.ty.dtype, 1, v.family)
        op = g.r.choice(("+=", "-=", "*=")) if not rhs.replace(".", "").lstrip("-").isdigit() else "+="
        if v.family.startswith("?") and getattr(rhs, "alias", ""):
            return None
        g.emit(f"{name} {op} {rhs}")
    elif k == "list_int":
        if not g.may_grow(name):
            return None
        if g.loop_depth:
            # NB: in a loop only a short literal: `lst += lst` or `lst *= 2` would double per iteration.
            g.emit(f"{name} += {g.small_list()}")
        else:
            g.emit(f"{name} += {expr(g, LIST_I, 1)}" if g.chance(0.7) or g.off("list_imul") else f"{name} *= 2")
    elif k == "tuple_int":
        g.emit(f"{name} += ({expr(g, INT, 1)},)")
    else:
        if not g.may_grow(name) or g.off("set_mutation"):
            return None
        g.emit(f"{name} {g.r.choice(('|=', '&=', '-=', '^='))} {expr(g, SET_I, 1)}")
    return True


def _print(g):
    printable = ("T", "int", "float", "bool", "str", "list_int", "tuple_int", "dict_si", "set_i", "fset_i", "size",
                 "list_T", "nt", "rec")
    names = sorted(n for n, v in g.visible().items() if v.ty.kind in printable)
    parts = [repr(g.fresh("p"))]
    for _ in range(g.r.randint(0, 3)):
        if names and g.chance(0.7):
            parts.append(g.r.choice(names))
        else:
            parts.append(expr(g, g.r.choice((INT, STR, BOOL)), 2))
    tail = g.r.choice(("", "", "", ", sep='|'", ", end=';\\n'"))
    g.emit(f"print({', '.join(parts)}{tail})")
    return True


# ---- control flow ------------------------------------------------------------------------------
def suite_size(g) -> int:
    return g.r.randint(1, 3 if g.depth < 2 else 2)


def tensor_condition(g) -> str:
    name, v = g.pick(lambda v: v.ty.kind == "T" and v.ty.dtype in ("f", "i"))
    if name is None:
        return expr(g, BOOL)
    g.float_to_python |= v.ty.dtype == "f"
    c = g.r.choice(("sum", "any", "max", "all", "item"))
    if c == "sum":
        return f"{name}.sum() > {g.small_int(-2, 3)}"
    if c == "any":
        return f"({name} > {g.small_int(0, 3)}).any()"
    if c == "max":
        return f"{name}.max() >= {expr(g, INT, 2)}"
    if c == "all":
        return f"torch.all({name} < {g.small_int(1, 4)})"
    return f"{name}.sum().item() != 0"


def _if(g):
    cond = tensor_condition(g) if g.chance(0.35) else expr(g, BOOL)
    if g.chance(0.08):
        # An assignment expression binds in the function's scope, visible after the if.
        walrus = g.bind("n", INT)
        cond = f"({walrus} := {expr(g, INT, 1)}) > {g.small_int(0, 3)}"
    node = Node(f"if {cond}:")
    with g.suite() as body:
        g.fill(suite_size(g))
    node.body = body
    if g.chance(0.25):
        with g.suite() as s:
            g.fill(suite_size(g))
        node.clauses.append((f"elif {expr(g, BOOL)}:", s))
    if g.chance(0.45):
        with g.suite() as s:
            g.fill(suite_size(g))
        node.clauses.append(("else:", s))
    g.emit(node)
    return True


def _iteration(g):
    """(header text after `for `, [(name, Var)] bound by it, groups it iterates)."""
    c = g.r.choice(("range", "range", "list", "list_T", "enumerate", "zip", "items", "keys", "reversed", "sorted",
                    "set", "rows", "dict_T"))
    vis = g.visible()

    def named(kind):
        return g.pick(lambda v: v.ty.kind == kind)

    i = g.fresh("i")
    if c == "range":
        bound = g.r.choice((str(g.r.randint(0, 4)), f"min({expr(g, INT, 2)}, 4)", f"len({g.pick(lambda v: v.ty.kind == 'list_int')[0] or '[1, 2]'})"))
        return f"{i} in range({bound})", [(i, Var(INT))], set()
    if c in ("list", "reversed", "sorted", "set", "enumerate", "zip"):
        name, v = named("set_i" if c == "set" else "list_int")
        if name is None:
            return None
        groups = {v.group}
        if c == "enumerate":
            j = g.fresh("v")
            return f"{i}, {j} in enumerate({name})", [(i, Var(INT)), (j, Var(INT))], groups
        if c == "zip":
            other, w = named("list_int")
            j = g.fresh("v")
            strict = ", strict=False" if g.chance(0.3) else ""
            return f"{i}, {j} in zip({name}, {other}{strict})", [(i, Var(INT)), (j, Var(INT))], groups | {w.group}
        src = {"list": name, "set": name, "reversed": f"reversed({name})", "sorted": f"sorted({name})"}[c]
        # NB: sorted() iterates a copy; the loop may grow the original.
        return f"{i} in {src}", [(i, Var(INT))], set() if c == "sorted" else groups
    if c == "list_T":
        name, v = named("list_T")
        if name is None:
            return None
        t = g.fresh("t")
        return f"{t} in {name}", [(t, Var(T(g.base_shape), family="?", contig=False))], {v.group}
    if c in ("items", "keys"):
        name, v = named("dict_si")
        if name is None:
            return None
        k = g.fresh("k")
        if c == "keys":
            return f"{k} in {name}", [(k, Var(STR))], {v.group}
        j = g.fresh("v")
        return f"{k}, {j} in {name}.items()", [(k, Var(STR)), (j, Var(INT))], {v.group}
    if c == "dict_T":
        name, v = named("dict_sT")
        if name is None:
            return None
        k, t = g.fresh("k"), g.fresh("t")
        return f"{k}, {t} in {name}.items()", [(k, Var(STR)), (t, Var(T(g.base_shape), family="?", contig=False))], \
            {v.group}
    name, v = g.pick(lambda v: v.ty.kind == "T" and len(v.ty.shape) >= 1 and v.ty.dtype == "f")
    if name is None or name not in vis:
        return None
    # NB: iterating a tensor yields views of its rows: writes to them reach the tensor.
    row = g.fresh("row")
    return f"{row} in {name}", [(row, Var(T(v.ty.shape[1:]), family=v.family, contig=v.contig))], set()


def _for(g):
    it = _iteration(g)
    if it is None:
        return None
    header, bound, groups = it
    node = Node(f"for {header}:")
    with g.suite(loop=True, iterating=groups) as body:
        for name, var in bound:
            g.declare(name, var)
        g.fill(suite_size(g))
    node.body = body
    if g.chance(0.1):
        with g.suite() as s:
            g.fill(1)
        node.clauses.append(("else:", s))
    g.emit(node)
    return True


def _while(g):
    i = g.fresh("w")
    g.emit(f"{i} = 0")
    g.declare(i, Var(INT, fixed=True))
    cond = f"{i} < {g.r.randint(1, 4)}"
    if g.chance(0.3):
        cond += f" and {tensor_condition(g)}"
    node = Node(f"while {cond}:")
    with g.suite(loop=True) as body:
        # NB: the counter moves first, so no `continue` below can skip it.
        g.emit(Node(f"{i} += 1", pinned=True))
        g.fill(suite_size(g))
    node.body = body
    g.emit(node)
    return True


def _del_name(g):
    """`del name`: the name is unbound from here on (a graph break's live locals must agree)."""
    if g.closures:
        return None  # NB: a closure made earlier may read the name when called later
    names = sorted(n for n, v in g.frames[-1].vars.items() if not v.fixed and v.ty.kind != "fn" and
                   not (g.dynamic and v.family.startswith("arg_")))   # NB: _like() draws on the arguments
    if not names:
        return None
    name = g.r.choice(names)
    del g.frames[-1].vars[name]
    g.emit(f"del {name}")
    return True


def _assert(g):
    t = g.pick(lambda v: v.ty.kind == "T")[0]
    if t is None:
        return None
    cond = g.r.choice((f"isinstance({t}, torch.Tensor)", f"{t}.dim() >= 0", f"len({t}.shape) == {t}.dim()", "True"))
    g.emit(f"assert {cond}" if g.chance(0.5) else f"assert {cond}, {g.fresh('msg')!r}")
    return True


def _break_continue(g):
    if g.loop_depth == 0:
        return None
    g.emit(Node(f"if {expr(g, BOOL, 1)}:", [Node(g.r.choice(("break", "continue")))]))
    return True


def _with(g):
    ctx = g.r.choice(("torch.no_grad()", "torch.no_grad()", "torch.enable_grad()"))
    node = Node(f"with {ctx}:")
    with g.suite() as body:
        g.fill(suite_size(g))
    node.body = body
    g.emit(node)
    return True


def _try(g):
    from .gen_containers import risky_statement  # noqa: PLC0415
    node = Node("try:")
    with g.suite() as body:
        if g.chance(0.5):
            g.fill(1)
        exc = risky_statement(g)
        if g.chance(0.5):
            g.fill(1)
    node.body = body
    handlers = [exc] if exc else ["KeyError"]
    if g.chance(0.3):
        handlers.append(g.r.choice(("IndexError", "ValueError", "(KeyError, IndexError)", "ZeroDivisionError")))
    for h in handlers:
        with g.suite() as s:
            if g.chance(0.3):
                e = g.fresh("e")
                g.declare(e, Var(Ty("exc")))
                header = f"except {h} as {e}:"
                s_name = g.bind("s", STR)
                g.emit(f"{s_name} = {g.r.choice((f'type({e}).__name__', f'str({e})'))}")
            else:
                header = f"except {h}:"
            g.fill(g.r.randint(0, 1))
        node.clauses.append((header, s))
    if g.chance(0.25):
        with g.suite() as s:
            g.fill(1)
        node.clauses.append(("else:", s))
    if g.chance(0.25):
        with g.suite() as s:
            g.fill(1)
        node.clauses.append(("finally:", s))
    g.emit(node)
    return True


def _deferred(module, fn):
    """A production of another gen_* module (imported when first used: they import this one)."""
    def run(g):
        import importlib  # noqa: PLC0415
        return getattr(importlib.import_module(f".{module}", __package__), fn)(g)
    return run


SIMPLE = [
    (10, _new_binding), (4, _rebind), (3, _augmented), (2, _print), (2, _break_continue), (1, _del_name),
    (1, _assert),
    (12, _deferred("gen_tensor_stmts", "tensor_statement")),
    (10, _deferred("gen_containers", "container_statement")),
    (3, _deferred("gen_funcs", "function_statement")),
]
ALL = SIMPLE + [(5, _if), (5, _for), (1, _while), (2, _try), (1, _with),
               (3, _deferred("gen_protocols", "protocol_statement"))]
