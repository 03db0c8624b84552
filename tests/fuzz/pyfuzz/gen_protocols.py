"""Python protocols a frontend has to model rather than evaluate: iterators and generators kept
across statements (and graph breaks), context managers written in Python (one suppresses the
exception), class attributes and methods shadowed on an instance, try/finally in a helper that
returns, bounded recursion, collections.Counter / defaultdict / OrderedDict, dict iteration that
mutates its dict (RuntimeError in eager, caught), and dict | / |=.

Each production emits a short fixed shape with random statements interleaved, so that a graph
break can fall between creating an iterator (or entering a `with`) and using it.
"""
from __future__ import annotations

from .gen import INT, LIST_I, STR, T, Ty, Var
from .gen_exprs import expr
from .gen_tensor_exprs import tensor_expr
from .program import Node

TEMPLATES = {
    "Ctx": [Node("class Ctx:", [
        Node("def __init__(self, log, suppress=False):", [Node("self.log = log"), Node("self.suppress = suppress")]),
        Node("def __enter__(self):", [Node("self.log.append(1)"), Node("return self")]),
        Node("def __exit__(self, typ, val, tb):", [Node("self.log.append(2 if typ is None else 3)"),
                                                   Node("return self.suppress")]),
    ])],
    "rsum": [Node("def rsum(n, t):", [Node("return t if n <= 0 else rsum(n - 1, t + n)")])],
    "guarded": [Node("def guarded(t, log):", [Node("try:", [Node("return t * 2")],
                                                   [("finally:", [Node("log.append(len(log))")])])])],
}


def protocol_statement(g):
    return g.weighted(TABLE)


def _use(g, name: str) -> None:
    if name not in g.features:
        g.features.add(name)
        g.module[0:0] = [n.copy() for n in TEMPLATES[name]]


def _iterator(g):
    """An iterator made, advanced, then (after other statements) drained."""
    lst = g.pick(lambda v: v.ty.kind == "list_int")[0]
    d = g.pick(lambda v: v.ty.kind == "dict_si")[0]
    c = g.r.choice(("iter", "iter", "enumerate", "zip", "reversed", "dict", "items", "genexp", "map", "range"))
    if c in ("iter", "enumerate", "zip", "reversed", "genexp", "map") and lst is None:
        c = "range"
    if c in ("dict", "items") and d is None:
        c = "range"
    src, default, item = {
        "iter": (f"iter({lst})", "-1", INT), "enumerate": (f"enumerate({lst})", "(0, -1)", None),
        "zip": (f"zip({lst}, {lst}[1:])", "(0, 0)", None), "reversed": (f"reversed({lst})", "-1", INT),
        "dict": (f"iter({d})", "'none'", STR), "items": (f"iter({d}.items())", "('none', 0)", None),
        "genexp": (f"(v * 2 for v in {lst})", "-1", INT), "map": (f"map(abs, {lst})", "-1", INT),
        "range": (f"iter(range({g.r.randint(0, 4)}))", "-1", INT)}[c]
    it = g.bind("it", Ty("iter"), fixed=True)
    g.emit(f"{it} = {src}")
    first = g.bind("n" if item == INT else "s" if item == STR else "c", item or Ty("tuple_any"))
    g.emit(f"{first} = next({it}, {default})")
    g.fill(g.r.randint(0, 2))
    if g.chance(0.3):
        g.emit(f"print({g.fresh('it')!r}, {first})")
    rest = g.bind("c", Ty("list_any"))
    g.emit(f"{rest} = list({it})" if g.chance(0.7) else f"{rest} = [next({it}, {default}), *{it}]")
    return True


def _generator_kept(g):
    name = g.fresh("gen")
    g.module.append(Node(f"def {name}(n, log):", [Node("for i in range(n):", [
        Node("log.append(i)"), Node("yield i * 10")])]))
    log = g.bind("c", LIST_I)
    g.emit(f"{log} = []")
    gen = g.bind("it", Ty("iter"), fixed=True)
    g.emit(f"{gen} = {name}({g.r.randint(1, 4)}, {log})")
    a = g.bind("n", INT)
    g.emit(f"{a} = next({gen}, -1)")
    g.fill(g.r.randint(0, 2))
    b = g.bind("c", Ty("list_any"))
    g.emit(f"{b} = list({gen})")
    return True


def _context_manager(g):
    lst = g.pick(lambda v: v.ty.kind == "list_int" and v.group not in g.iterating)[0]
    if lst is None:
        return None
    _use(g, "Ctx")
    suppress = g.chance(0.4)
    cm = g.fresh("cm")
    node = Node(f"with Ctx({lst}{', True' if suppress else ''}) as {cm}:")
    with g.suite() as body:
        g.declare(cm, Var(Ty("ctx"), fixed=True))
        g.fill(g.r.randint(0, 2))
        if suppress:
            from .gen_containers import risky_statement  # noqa: PLC0415
            risky_statement(g)   # NB: the manager swallows what it raises
            g.fill(g.r.randint(0, 1))
    node.body = body
    g.emit(node)
    return True


def _class_state(g):
    o = g.pick(lambda v: v.ty.kind == "obj")[0]
    if o is None:
        return None
    c = g.r.choice(("class_attr", "shadow", "unshadow", "vars"))
    if c == "class_attr":
        # A class attribute is module state: the write must reach the class.
        g.emit(f"Box.count = getattr(Box, 'count', 0) + {g.small_int(1, 3)}")
        g.emit(f"{g.bind('n', INT)} = {o}.count if hasattr({o}, 'count') else -1")
    elif c == "shadow":
        # An instance attribute shadows the class's method from here on.
        g.emit(f"{o}.scaled = lambda k: {o}.t * k")
        g.emit(f"{g.bind('t', T(g.base_shape), family='?', contig=False)} = {o}.scaled({g.small_int(0, 3)})")
    elif c == "unshadow":
        g.emit(f"if 'scaled' in vars({o}):")
        g.suites[-1][-1].body.append(Node(f"del {o}.scaled"))
        g.emit(f"{g.bind('t', T(g.base_shape), family='?', contig=False)} = {o}.scaled(1)")
    else:
        g.emit(f"{g.bind('c', Ty('list_any'))} = sorted(vars({o}))")
    return True


def _recursion(g):
    _use(g, "rsum")
    t = g.bind("t", T(g.base_shape))
    g.emit(f"{t} = rsum({g.r.randint(0, 3)}, {tensor_expr(g, g.base_shape, 'f', 1)})")
    return True


def _try_finally_return(g):
    lst = g.pick(lambda v: v.ty.kind == "list_int" and v.group not in g.iterating)[0]
    if lst is None:
        return None
    _use(g, "guarded")
    t = g.bind("t", T(g.base_shape))
    g.emit(f"{t} = guarded({tensor_expr(g, g.base_shape, 'f', 1)}, {lst})")
    return True


def _collections(g):
    lst = g.pick(lambda v: v.ty.kind == "list_int")[0] or "[1, 2, 1]"
    c = g.r.choice(("counter", "defaultdict", "ordered"))
    if c == "counter":
        cnt = g.bind("cnt", Ty("dict_any"))
        g.emit(f"{cnt} = collections.Counter({lst})")
        g.emit(f"{cnt}.update([{g.r.randrange(8)}, {g.r.randrange(8)}])")
        g.emit(f"{g.bind('c', Ty('list_any'))} = {cnt}.most_common({g.r.randint(1, 3)})")
        g.emit(f"{g.bind('n', INT)} = {cnt}[{g.r.randrange(8)}] + sum({cnt}.values())")
    elif c == "defaultdict":
        dd = g.bind("dd", Ty("dict_any"))
        g.emit(f"{dd} = collections.defaultdict(list)")
        g.emit(Node(f"for v in {lst}:", [Node(f"{dd}[v % 3].append(v)")]))
        g.emit(f"{g.bind('c', Ty('dict_any'))} = dict({dd})")
    else:
        d = g.pick(lambda v: v.ty.kind == "dict_si")[0] or "{'a': 1, 'b': 2}"
        od = g.bind("od", Ty("dict_any"))
        g.emit(f"{od} = collections.OrderedDict({d})")
        k = g.key()
        g.emit(Node(f"if {k} in {od}:", [Node(f"{od}.move_to_end({k}, last={g.r.choice(('True', 'False'))})")]))
        g.emit(f"{g.bind('c', Ty('list_any'))} = list({od})")
    return True


def _dict_ops(g):
    d = g.pick(lambda v: v.ty.kind == "dict_si" and v.group not in g.iterating)[0]
    if d is None:
        return None
    c = g.r.choice(("ior", "or", "sorted", "keyset", "iter_mutate"))
    if c == "ior":
        g.emit(f"{d} |= {{{g.key()}: {expr(g, INT, 2)}}}")
    elif c == "or":
        g.emit(f"{g.bind('c', Ty('dict_si'))} = {d} | {{{g.key()}: 0}}")
    elif c == "sorted":
        g.emit(f"{g.bind('c', Ty('dict_si'))} = dict(sorted({d}.items(), key=lambda kv: (kv[1], kv[0])))")
    elif c == "keyset":
        g.emit(f"{g.bind('c', Ty('list_any'))} = sorted({d}.keys() {g.r.choice(('&', '-', '|'))} {{'a', 'k'}})")
    else:
        # Growing a dict while iterating it raises RuntimeError in eager after the first insertion.
        k, msg = g.fresh("k"), g.bind("s", STR)
        g.emit(f"{msg} = ''")
        g.emit(Node("try:", [Node(f"for {k} in {d}:", [Node(f"{d}[{k} + 'x'] = 0")])],
                    [("except RuntimeError as e:", [Node(f"{msg} = str(e)")])]))
    return True


TABLE = [(4, _iterator), (1, _generator_kept), (2, _context_manager), (1, _class_state), (1, _recursion),
         (1, _try_finally_return), (1, _collections), (2, _dict_ops)]
