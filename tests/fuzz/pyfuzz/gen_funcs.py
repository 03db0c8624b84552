"""Functions: module-level helpers the compiled function calls (and a frontend inlines), closures
with `nonlocal`, lambdas, functools.partial, generator functions, and the module-level templates
(Box, Pair, Rec, globals) programs use.

Calls respect the loop rule of gen_containers: a helper may grow the containers passed to it (and
the module's G_log), a closure those it captures, so neither is called where a loop iterates them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .gen import INT, LIST_I, T, Ty, Var
from .gen_exprs import expr
from .gen_tensor_exprs import tensor_expr
from .program import Node

GLOBAL_LOG_GROUP = "grp_G_log"

TEMPLATES = {
    "Box": [Node("class Box:", [
        Node("def __init__(self, t, n):", [Node("self.t = t"), Node("self.n = n")]),
        Node("def scaled(self, k):", [Node("return self.t * (self.n + k)")]),
        Node("def bump(self):", [Node("self.n += 1"), Node("return self")]),
    ])],
    "Pair": [Node('Pair = collections.namedtuple("Pair", ["t", "n"])')],
    "Rec": [Node("@dataclasses.dataclass"), Node("class Rec:", [
        Node("t: object"), Node("n: int = 0"), Node("tags: list = dataclasses.field(default_factory=list)")])],
}


@dataclass
class Helper:
    name: str
    params: list            # [(name, Ty)]
    ret: Ty
    raises: bool = False
    groups: set = field(default_factory=set)   # container groups it may grow, besides its arguments


def ensure_feature(g, name: str) -> None:
    if name in g.features:
        return
    g.features.add(name)
    # NB: templates go first: helpers generated before a template was needed may not use it.
    g.module[0:0] = [n.copy() for n in TEMPLATES[name]]


# ---- module-level helpers --------------------------------------------------------------------
PARAM_TYPES = ("T", "T", "T", "int", "int", "list_int", "dict_si", "list_T", "T0")


def _param_ty(g, code):
    return {"T": T(g.base_shape), "T0": T(()), "int": INT, "list_int": LIST_I, "dict_si": Ty("dict_si"),
            "list_T": Ty("list_T")}[code]


def make_helper(g) -> Helper:
    name = g.fresh("h")
    params = [(g.fresh("a"), _param_ty(g, g.r.choice(PARAM_TYPES))) for _ in range(g.r.randint(1, 3))]
    if g.dynamic and not any(ty == T(g.base_shape) for _, ty in params):
        # NB: the helper's tensors take their size from a tensor parameter (gen_tensor_exprs.shape_source).
        params[0] = (params[0][0], T(g.base_shape))
    ret = g.r.choice((T(g.base_shape), T(g.base_shape), INT, T(())))
    raises = g.chance(0.2)
    g.suites.append(g.module)
    node = Node(f"def {name}({', '.join(p for p, _ in params)}):")
    with g.suite(function=True) as body:
        for p, ty in params:
            g.declare(p, Var(ty, family="?" if ty.kind == "T" else "", group=f"param_{p}", contig=False))
        if "G_n" in g.frames[0].vars and g.chance(0.3):
            # A helper that rebinds a module global: the write must reach the module, inlined or not.
            g.emit("global G_n")
            g.emit(f"G_n += {g.small_int(1, 3)}")
        if raises:
            cond = next((f"{p} < 0" for p, ty in params if ty == INT), None) or \
                next((f"not {p}" for p, ty in params if ty.kind in ("list_int", "dict_si", "list_T")), "False")
            g.emit(Node(f"if {cond}:", [Node(f"raise ValueError('{name}: bad argument')")]))
        g.fill(g.r.randint(0, 3))
        if ret.kind == "T":
            g.emit(f"return {tensor_expr(g, ret.shape, 'f', 1)}")
        else:
            g.emit(f"return {expr(g, ret, 1)}")
    node.body = body
    g.suites.pop()
    g.module.append(node)
    h = Helper(name, params, ret, raises, {GLOBAL_LOG_GROUP} if "G_log" in g.frames[0].vars else set())
    g.helpers.append(h)
    return h


def _args_for(g, h: Helper, d: int) -> list[str] | None:
    if h.groups & g.iterating:
        return None
    args = []
    for _, ty in h.params:
        if ty.kind == "T":
            args.append(tensor_expr(g, ty.shape, "f", d))
        elif ty.kind in ("list_int", "dict_si", "list_T"):
            name = g.pick(lambda v: v.ty == ty and v.group not in g.iterating)[0]
            if name is None:
                from .gen_stmts import value_expr  # noqa: PLC0415
                name = value_expr(g, ty, fresh=True)
            args.append(name)
        else:
            args.append(expr(g, ty, d))
    return args


def call_helper(g, ret: Ty, d: int = 1) -> str | None:
    """A call of a module helper (or a closure in scope) returning ret, or None."""
    # NB: a helper is listed once its body is done, so helpers never recurse.
    pool = [h for h in g.helpers if h.ret == ret]
    closures = [(n, v) for n, v in sorted(g.visible().items()) if v.ty.kind == "fn" and g.closures[n].ret == ret]
    if closures and (not pool or g.chance(0.5)):
        name, _ = g.r.choice(closures)
        c = g.closures[name]
        if c.groups & g.iterating:
            return None
        args = _args_for(g, c, d)
        return None if args is None else f"{name}({', '.join(args)})"
    pool = [h for h in pool if not h.raises]
    if not pool:
        return None
    h = g.r.choice(pool)
    args = _args_for(g, h, d)
    if args is None:
        return None
    if h.params and g.chance(0.1):
        # Star arguments: the call binds them like any other.
        if g.chance(0.5):
            return f"{h.name}(*({''.join(a + ', ' for a in args)}))"
        return f"{h.name}(**{{{', '.join(f'{p!r}: {a}' for (p, _), a in zip(h.params, args))}}})"
    if h.params and g.chance(0.2):
        # Keyword arguments go through the same inlining.
        p, _ = h.params[-1]
        return f"{h.name}({''.join(a + ', ' for a in args[:-1])}{p}={args[-1]})"
    return f"{h.name}({', '.join(args)})"


def call_raising_helper(g) -> str | None:
    pool = [h for h in g.helpers if h.raises and not (h.groups & g.iterating)]
    if not pool:
        return None
    h = g.r.choice(pool)
    args = _args_for(g, h, 2)
    if args is None:
        return None
    r = g.bind("r", h.ret, **({"family": "?", "contig": False} if h.ret.kind == "T" else {}))
    g.emit(f"{r} = {h.name}({', '.join(args)})")
    return "ValueError"


# ---- statements ------------------------------------------------------------------------------
def function_statement(g):
    return g.weighted(TABLE)


def _call_statement(g):
    ret = g.r.choice((T(g.base_shape), INT, T(())))
    call = call_helper(g, ret, 1)
    if call is None:
        return None
    if g.chance(0.2):
        g.emit(call)
    else:
        name = g.bind("r", ret, family="?", contig=False) if ret.kind == "T" else g.bind("r", ret)
        g.emit(f"{name} = {call}")
    return True


def _closure(g):
    name = g.fresh("inner")
    acc = None
    if g.chance(0.6):
        acc = g.bind("acc", INT)
        g.emit(f"{acc} = {expr(g, INT, 2)}")
    params = [(g.fresh("a"), T(g.base_shape) if g.chance(0.7) else INT) for _ in range(g.r.randint(1, 2))]
    ret = g.r.choice((T(g.base_shape), INT))
    captured = {v.group for v in g.visible().values() if v.group}
    node = Node(f"def {name}({', '.join(p for p, _ in params)}):")
    with g.suite(function=True, nonlocals={acc} if acc else set()) as body:
        if acc:
            g.emit(f"nonlocal {acc}")
            g.emit(f"{acc} {g.r.choice(('+=', '-='))} {g.small_int(1, 3)}")
        for p, ty in params:
            g.declare(p, Var(ty, family="?" if ty.kind == "T" else "", contig=False))
        g.fill(g.r.randint(0, 2))
        g.emit(f"return {tensor_expr(g, ret.shape, 'f', 1) if ret.kind == 'T' else expr(g, ret, 1)}")
    node.body = body
    g.emit(node)
    g.declare(name, Var(Ty("fn"), group=""))
    g.closures[name] = Helper(name, params, ret, False, captured | {GLOBAL_LOG_GROUP})
    # Call it at once (and maybe later through call_helper), so the def is not dead code.
    call = call_helper(g, ret, 1) if g.chance(0.3) else None
    args = _args_for(g, g.closures[name], 1)
    if args is not None:
        r = g.bind("r", ret, family="?", contig=False) if ret.kind == "T" else g.bind("r", ret)
        g.emit(f"{r} = {name}({', '.join(args)})")
    if call:
        g.emit(call)
    return True


def _lambda(g):
    name = g.fresh("lam")
    k = expr(g, INT, 2)
    g.emit(f"{name} = lambda t: t * 2 + {k}" if g.chance(0.5) else f"{name} = lambda t, m=({k}): t - m")
    g.declare(name, Var(Ty("fn")))
    g.closures[name] = Helper(name, [("t", T(g.base_shape))], T(g.base_shape), False, set())
    return True


def _partial(g):
    c = g.r.choice(("helper", "torch", "attrs"))
    p = g.fresh("pf")
    if c == "torch":
        g.emit(f"{p} = functools.partial(torch.add, alpha={g.r.choice((2, -1))})")
        g.emit(f"{g.bind('t', T(g.base_shape))} = {p}({tensor_expr(g, g.base_shape, 'f', 1)}, "
               f"{tensor_expr(g, g.base_shape, 'f', 1)})")
        return True
    pool = [h for h in g.helpers if len(h.params) >= 2 and not h.raises]
    if not pool:
        return None
    h = g.r.choice(pool)
    args = _args_for(g, h, 1)
    if args is None:
        return None
    g.emit(f"{p} = functools.partial({h.name}, {args[0]})")
    if c == "attrs":
        b = g.bind("b", Ty("bool"))
        checks = (f"{p}.func is {h.name}", f"len({p}.args) == 1", f"callable({p})", f"hasattr({p}, '__call__')",
                  f"{p}.keywords == {{}}")
        g.emit(f"{b} = {g.r.choice(checks)}")
    r = g.bind("r", h.ret, family="?", contig=False) if h.ret.kind == "T" else g.bind("r", h.ret)
    g.emit(f"{r} = {p}({', '.join(args[1:])})")
    return True


def _generator_fn(g):
    c = g.r.choice(("tensors", "ints"))
    name = g.fresh("gen")
    if c == "ints":
        g.module.append(Node(f"def {name}(n):", [Node("i = 0"), Node("while i < n:", [
            Node("yield i * i"), Node("i += 1", pinned=True)])]))
        out = g.bind("c", LIST_I)
        g.emit(f"{out} = list({name}({g.r.randint(0, 4)}))" if g.chance(0.5) or g.off("comp") else
               f"{out} = [v + 1 for v in {name}({g.r.randint(0, 4)}) if v != 1]")
        return True
    ts = g.pick(lambda v: v.ty.kind == "list_T" and v.group not in g.iterating)[0]
    if ts is None or g.off("sum_start"):
        return None
    g.module.append(Node(f"def {name}(ts, k):", [Node("for t in ts:", [Node("yield t * k")])]))
    out = g.bind("t", T(g.base_shape))
    g.emit(f"{out} = sum({name}({ts}, {g.small_int(1, 3)}), start={tensor_expr(g, g.base_shape, 'f', 1)})")
    return True


def _isinstance_dispatch(g):
    if g.off("sum_start") or g.dynamic:
        return None
    # The shape of model code that handles tensors and lists of tensors alike.
    name, v = g.pick(lambda v: v.ty.kind in ("T", "list_T", "int", "dict_sT") and
                     (v.ty.kind != "T" or v.ty.shape == g.base_shape))
    if name is None:
        return None
    out = g.bind("t", T(g.base_shape))
    g.emit(Node(f"if isinstance({name}, torch.Tensor):", [Node(f"{out} = {name} * 2")], [
        ("elif isinstance(" + name + ", (list, tuple)):",
         [Node(f"{out} = sum({name}, start=torch.zeros({g.base_shape}))")]),
        ("elif isinstance(" + name + ", dict):",
         [Node(f"{out} = sum({name}.values(), start=torch.ones({g.base_shape}))")]),
        ("else:", [Node(f"{out} = torch.full({g.base_shape}, float({name}))")])]))
    return True


TABLE = [(4, _call_statement), (2, _closure), (1, _lambda), (1, _partial), (1, _generator_fn),
         (1, _isinstance_dispatch)]
