"""Container statements: list, dict (and its live views), set and frozenset methods; objects,
namedtuples and dataclasses; unpacking (starred too); comprehensions with side effects; and the
risky statements that try blocks catch.

A method that can raise (pop on an empty list, remove of a missing element) carries a guard here,
except in `risky_statement`, whose whole point is to raise inside a `try`. Nothing grows or
shrinks a container while a loop iterates over it (an infinite loop, or an error eager raises
only by accident of the data).
"""
from __future__ import annotations

from .gen import BOOL, DICT_SI, INT, LIST_I, SET_I, STR, T, Ty, Var
from .gen_exprs import expr
from .gen_tensor_exprs import tensor_expr


def container_statement(g):
    return g.weighted(TABLE)


def list_t_expr(g, fresh=False) -> str:
    s = g.base_shape
    src = g.pick(lambda v: v.ty.kind == "list_T")[0]
    if not fresh and src and g.chance(0.3):
        return src
    c = g.r.choice(g.allowed(("lit", "lit", "comp", "copy", "concat", "dict", "alias2", "rows"), comp=("comp", "rows")))
    if c == "comp" and src:
        return f"[{g.r.choice(('t * 2', 't + 1', 't.relu()', 't.clone()', 't'))} for t in {src}]"
    if c == "copy" and src:
        return g.r.choice((f"list({src})", f"{src}[::-1]", f"{src}[:]", f"{src}.copy()"))
    if c == "concat" and src:
        return f"{src} + [{tensor_expr(g, s, 'f', 1)}]"
    if c == "dict":
        d = g.pick(lambda v: v.ty.kind == "dict_sT")[0]
        return f"list({d}.values())" if d else None or f"[{tensor_expr(g, s, 'f', 1)}]"
    if c == "alias2":
        # The same tensor twice: an in-place op through one element shows in the other.
        return f"[{tensor_expr(g, s, 'f', 2)}] * 2"
    if c == "rows" and len(s) >= 1:
        big = g.pick(lambda v: v.ty.kind == "T" and v.ty.shape[1:] == s and v.ty.dtype == "f" and len(v.ty.shape) >= 1)[0]
        if big:
            return f"list({big}.unbind(0))" if g.chance(0.5) else f"[r for r in {big}]"
    return "[" + ", ".join(tensor_expr(g, s, "f", 1) for _ in range(g.r.randint(1, 3))) + "]"


def dict_t_expr(g, fresh=False) -> str:
    s = g.base_shape
    src = g.pick(lambda v: v.ty.kind == "dict_sT")[0]
    if not fresh and src and g.chance(0.3):
        return src
    if src and g.chance(0.4):
        return g.r.choice((f"{{k: v * 2 for k, v in {src}.items()}}", f"dict({src})", f"{{**{src}}}"))
    lst = g.pick(lambda v: v.ty.kind == "list_T")[0]
    if lst and g.chance(0.3):
        return f"dict(zip(['w', 'b', 'g'], {lst}))" if g.chance(0.5) else f"{{str(i): t for i, t in enumerate({lst})}}"
    return "{" + ", ".join(f"{g.key()}: {tensor_expr(g, s, 'f', 1)}" for _ in range(g.r.randint(1, 3))) + "}"


def _named(g, kind, *, grow=False):
    name, v = g.pick(lambda v: v.ty.kind == kind and (not grow or v.group not in g.iterating))
    return name


# ---- list ------------------------------------------------------------------------------------
def _list_int(g):
    c = g.r.choice(("append", "extend", "insert", "pop", "pop0", "remove", "reverse", "sort", "sort_key", "clear",
                    "index", "setitem", "setslice", "del", "delslice", "copy", "alias", "count"))
    grow = c in ("append", "extend", "insert", "pop", "pop0", "remove", "clear", "setslice", "del", "delslice")
    name = _named(g, "list_int", grow=grow)
    if name is None:
        return None
    v = g.visible()[name]
    if c == "append":
        g.emit(f"{name}.append({expr(g, INT, 1)})")
    elif c == "extend":
        grown = expr(g, LIST_I, 1) if g.chance(0.6) and not g.loop_depth else g.small_list()
        g.emit(f"{name}.extend({grown if g.chance(0.8) else 'range(2)'})")
    elif c == "insert":
        g.emit(f"{name}.insert({g.small_int(-2, 3)}, {expr(g, INT, 1)})")
    elif c in ("pop", "pop0"):
        n = g.bind("n", INT)
        g.emit(f"{n} = {name}.pop({'0' if c == 'pop0' else ''}) if {name} else {g.small_int()}")
    elif c == "remove":
        k = g.r.randrange(8)
        g.emit(f"if {k} in {name}:")
        g.suites[-1][-1].body.append(_node(f"{name}.remove({k})"))
    elif c in ("reverse", "sort", "clear"):
        g.emit(f"{name}.{c}()" if c != "sort" or g.chance(0.5) else f"{name}.sort(reverse=True)")
    elif c == "sort_key":
        g.emit(f"{name}.sort(key=lambda v: {g.r.choice(('-v', 'v % 3', '(v % 2, -v)'))})")
    elif c == "index":
        n = g.bind("n", INT)
        k = g.r.randrange(8)
        g.emit(f"{n} = {name}.index({k}) if {k} in {name} else -1")
    elif c == "count":
        n = g.bind("n", INT)
        g.emit(f"{n} = {name}.count({g.r.randrange(8)})")
    elif c == "setitem":
        g.emit(f"if {name}:")
        g.suites[-1][-1].body.append(_node(f"{name}[{g.small_int(-2, 3)} % len({name})] = {expr(g, INT, 1)}"))
    elif c == "setslice":
        g.emit(f"{name}[1:3] = {g.small_list() if g.loop_depth else expr(g, LIST_I, 1)}")
    elif c == "del":
        g.emit(f"if {name}:")
        g.suites[-1][-1].body.append(_node(f"del {name}[{g.r.choice(('0', '-1'))}]"))
    elif c == "delslice":
        g.emit(f"del {name}[{g.r.choice(('::2', '1:', ':1'))}]")
    elif c == "copy":
        n = g.bind("c", LIST_I, group=g.fresh("grp"))
        g.emit(f"{n} = {g.r.choice((f'{name}[:]', f'list({name})', f'{name}.copy()'))}")
    else:
        # An alias: mutations through either name show in both.
        n = g.bind("c", LIST_I, group=v.group)
        g.emit(f"{n} = {name}")
    return True


def _node(text):
    from .program import Node  # noqa: PLC0415
    return Node(text)


def _list_t(g):
    c = g.r.choice(("append", "extend", "insert", "pop", "reverse", "setitem", "clear", "del", "sort", "elem_inplace"))
    grow = c in ("append", "extend", "insert", "pop", "clear", "del")
    name = _named(g, "list_T", grow=grow)
    if name is None:
        return None
    s = g.base_shape
    if c == "append":
        g.emit(f"{name}.append({tensor_expr(g, s, 'f', 1)})")
    elif c == "extend":
        g.emit(f"{name}.extend([{tensor_expr(g, s, 'f', 1)}, {tensor_expr(g, s, 'f', 1)}])")
    elif c == "insert":
        g.emit(f"{name}.insert(0, {tensor_expr(g, s, 'f', 1)})")
    elif c == "pop":
        t = g.bind("t", T(s), family="?", contig=False)
        g.emit(f"{t} = {name}.pop() if {name} else {tensor_expr(g, s, 'f', 1, fresh=True)}")
    elif c in ("reverse", "clear"):
        g.emit(f"{name}.{c}()")
    elif c == "setitem":
        g.emit(f"if {name}:")
        g.suites[-1][-1].body.append(_node(f"{name}[-1] = {tensor_expr(g, s, 'f', 1)}"))
    elif c == "del":
        g.emit(f"if {name}:")
        g.suites[-1][-1].body.append(_node(f"del {name}[0]"))
    elif c == "sort":
        g.float_to_python = True
        g.emit(f"{name}.sort(key=lambda t: float(t.sum()))")
    else:
        g.emit(f"for {g.fresh('t')} in {name}[:1]:")
        t = g.suites[-1][-1].head.split()[1]
        g.suites[-1][-1].body.append(_node(f"{t}.{g.r.choice(('add_(1)', 'mul_(2)', 'relu_()', 'zero_()'))}"))
    return True


# ---- dict ------------------------------------------------------------------------------------
def _dict_si(g):
    c = g.r.choice(g.allowed(("set", "aug", "update", "update_kw", "update_zip", "setdefault", "pop", "popitem", "del",
                              "clear", "view", "view", "alias"), dview=("view",)))
    grow = c in ("set", "update", "update_kw", "update_zip", "setdefault", "pop", "popitem", "del", "clear")
    name = _named(g, "dict_si", grow=grow)
    if name is None:
        return None
    k = g.key()
    if c == "set":
        g.emit(f"{name}[{k if g.chance(0.8) else expr(g, STR, 1)}] = {expr(g, INT, 1)}")
    elif c == "aug":
        g.emit(f"if {k} in {name}:")
        g.suites[-1][-1].body.append(_node(f"{name}[{k}] += {expr(g, INT, 2)}"))
    elif c == "update":
        g.emit(f"{name}.update({expr(g, DICT_SI, 1)})")
    elif c == "update_kw":
        g.emit(f"{name}.update({k[1:-1]}={expr(g, INT, 1)})")
    elif c == "update_zip":
        g.emit(f"{name}.update(zip(['a', 'q'], {expr(g, LIST_I, 1)}))")
    elif c == "setdefault":
        n = g.bind("n", INT)
        g.emit(f"{n} = {name}.setdefault({k}, {expr(g, INT, 1)})")
    elif c == "pop":
        n = g.bind("n", INT)
        g.emit(f"{n} = {name}.pop({k}, {g.small_int()})")
    elif c == "popitem":
        g.emit(f"if {name}:")
        a, b = g.fresh("k"), g.fresh("n")
        g.suites[-1][-1].body.append(_node(f"{a}, {b} = {name}.popitem()"))
    elif c == "del":
        g.emit(f"if {k} in {name}:")
        g.suites[-1][-1].body.append(_node(f"del {name}[{k}]"))
    elif c == "clear":
        g.emit(f"{name}.clear()")
    elif c == "view":
        # A live view kept across a mutation must show the mutation.
        view = g.bind("dv", Ty("dview"))
        g.emit(f"{view} = {name}.{g.r.choice(('keys', 'values', 'items'))}()")
        if g.may_grow(name):
            g.emit(f"{name}[{k}] = {expr(g, INT, 2)}")
        use = g.bind(g.r.choice(("n", "c")), INT)
        g.emit(f"{use} = len({view})")
        if g.chance(0.5):
            lst = g.bind("c", Ty("list_any"))
            g.emit(f"{lst} = list({view})")
    else:
        n = g.bind("c", DICT_SI, group=g.visible()[name].group)
        g.emit(f"{n} = {name}")
    return True


def _dict_t(g):
    c = g.r.choice(("set", "update", "pop", "setdefault", "inplace_all", "get"))
    name = _named(g, "dict_sT", grow=c in ("set", "update", "pop", "setdefault"))
    if name is None:
        return None
    s, k = g.base_shape, g.key()
    if c == "set":
        g.emit(f"{name}[{k}] = {tensor_expr(g, s, 'f', 1)}")
    elif c == "update":
        g.emit(f"{name}.update({{{k}: {tensor_expr(g, s, 'f', 1)}}})")
    elif c in ("pop", "setdefault", "get"):
        t = g.bind("t", T(s), family="?", contig=False)
        g.emit(f"{t} = {name}.{c}({k}, {tensor_expr(g, s, 'f', 1)})")
    else:
        kk = g.fresh("k")
        g.emit(f"for {kk} in {name}:")
        g.suites[-1][-1].body.append(_node(f"{name}[{kk}] = {name}[{kk}] * 2 + 1" if g.chance(0.5) else
                                           f"{name}[{kk}].add_(1)"))
    return True


# ---- set -------------------------------------------------------------------------------------
def _set_i(g):
    if g.off("set_mutation"):
        return None
    c = g.r.choice(("add", "remove", "discard", "pop", "update", "intersection_update", "difference_update",
                    "symmetric_difference_update", "clear", "copy"))
    name = _named(g, "set_i", grow=c != "copy")
    if name is None:
        return None
    k = g.r.randrange(8)
    if c in ("add", "discard"):
        g.emit(f"{name}.{c}({k if g.chance(0.6) else f'{expr(g, INT, 2)} % 8'})")
    elif c == "remove":
        g.emit(f"if {k} in {name}:")
        g.suites[-1][-1].body.append(_node(f"{name}.remove({k})"))
    elif c == "pop":
        n = g.bind("n", INT)
        g.emit(f"{n} = {name}.pop() if {name} else -1")
    elif c == "clear":
        g.emit(f"{name}.clear()")
    elif c == "copy":
        n = g.bind("c", SET_I, group=g.fresh("grp"))
        g.emit(f"{n} = {name}.copy()" if g.chance(0.5) else f"{n} = set({name})")
    else:
        lst = g.pick(lambda v: v.ty.kind == "list_int")[0]
        arg = f"(v % 8 for v in {lst})" if lst and g.chance(0.5) else expr(g, SET_I, 1)
        g.emit(f"{name}.{c}({arg})")
    return True


# ---- objects ---------------------------------------------------------------------------------
def _objects(g):
    from .gen_funcs import ensure_feature  # noqa: PLC0415
    s = g.base_shape
    c = g.r.choice(g.allowed(("new_box", "box_attr", "box_t", "box_extra", "box_method", "setattr", "new_pair",
                              "pair_ops", "new_rec", "rec_ops"), hasattr=("box_extra",)))
    if c == "new_box":
        ensure_feature(g, "Box")
        o = g.bind("o", Ty("obj"))
        g.emit(f"{o} = Box({tensor_expr(g, s, 'f', 1)}, {expr(g, INT, 2)})")
        return True
    if c == "new_pair":
        ensure_feature(g, "Pair")
        o = g.bind("o", Ty("nt"))
        g.emit(f"{o} = Pair({tensor_expr(g, s, 'f', 1)}, {expr(g, INT, 2)})")
        return True
    if c == "new_rec":
        ensure_feature(g, "Rec")
        o = g.bind("o", Ty("rec"))
        g.emit(f"{o} = Rec({tensor_expr(g, s, 'f', 1)}, {expr(g, INT, 2)})")
        return True
    if c in ("box_attr", "box_t", "box_extra", "box_method", "setattr"):
        o = g.pick(lambda v: v.ty.kind == "obj")[0]
        if o is None:
            return None
        if c == "box_attr":
            g.emit(f"{o}.n {g.r.choice(('+=', '=', '-='))} {expr(g, INT, 2)}")
        elif c == "box_t":
            g.emit(g.r.choice((f"{o}.t = {tensor_expr(g, s, 'f', 1)}", f"{o}.t.add_({g.small_int(1, 3)})",
                               f"{o}.t = {o}.t * 2")))
        elif c == "box_extra":
            g.emit(f"{o}.extra = {expr(g, INT, 2)}" if g.chance(0.7) else f"if hasattr({o}, 'extra'):")
            if g.suites[-1][-1].compound:
                g.suites[-1][-1].body.append(_node(f"del {o}.extra"))
        elif c == "box_method":
            g.emit(f"{o}.bump()" if g.chance(0.5) else f"{g.bind('t', T(s))} = {o}.scaled({g.small_int(0, 2)})")
        else:
            g.emit(f"setattr({o}, 'n', getattr({o}, 'n', 0) + {g.small_int(1, 3)})")
        return True
    if c == "pair_ops":
        o = g.pick(lambda v: v.ty.kind == "nt")[0]
        if o is None:
            return None
        k = g.r.choice(("replace", "unpack", "asdict"))
        if k == "replace":
            o2 = g.bind("o", Ty("nt"))
            g.emit(f"{o2} = {o}._replace(n={expr(g, INT, 2)})")
        elif k == "unpack":
            a, b = g.fresh("t"), g.fresh("n")
            g.emit(f"{a}, {b} = {o}")
            g.declare(a, Var(T(s), family="?", contig=False))
            g.declare(b, Var(INT))
        else:
            g.emit(f"{g.bind('c', Ty('dict_any'))} = {o}._asdict()")
        return True
    o = g.pick(lambda v: v.ty.kind == "rec")[0]
    if o is None:
        return None
    k = g.r.choice(("n", "tags", "replace", "fields"))
    if k == "n":
        g.emit(f"{o}.n = {expr(g, INT, 2)}")
    elif k == "tags":
        g.emit(f"{o}.tags.append({expr(g, STR, 2)})")
    elif k == "replace":
        o2 = g.bind("o", Ty("rec"))
        g.emit(f"{o2} = dataclasses.replace({o}, n={expr(g, INT, 2)})")
    else:
        g.emit(f"{g.bind('c', Ty('list_any'))} = [f.name for f in dataclasses.fields({o})]")
    return True


# ---- unpacking, comprehensions, builtins over iterables ------------------------------------------
def _unpack(g):
    c = g.r.choice(("swap", "star_first", "star_last", "nested", "sorted_pair", "dict_first", "tuple"))
    if c == "swap":
        name, v = g.pick(lambda v: v.ty.kind in ("int", "str"), rebind=True)
        other = g.pick(lambda w: w.ty == v.ty and w is not v, rebind=True)[0] if name else None
        if other is None:
            return None
        g.emit(f"{name}, {other} = {other}, {name}")
        return True
    if c == "star_first":
        lst = g.pick(lambda v: v.ty.kind in ("list_int", "tuple_int"))[0]
        if lst is None:
            return None
        a, rest = g.bind("n", INT), g.bind("c", LIST_I, group=g.fresh("grp"))
        g.emit(f"{a}, *{rest} = [*{lst}, {g.small_int()}]")
        return True
    if c == "star_last":
        lst = g.pick(lambda v: v.ty.kind == "list_T")[0]
        if lst is None:
            return None
        init, last = g.bind("c", Ty("list_T"), group=g.fresh("grp")), g.bind("t", T(g.base_shape), family="?",
                                                                                contig=False)
        g.emit(f"*{init}, {last} = [*{lst}, {tensor_expr(g, g.base_shape, 'f', 1)}]")
        return True
    if c == "nested":
        a, b, n = g.fresh("t"), g.fresh("t"), g.fresh("n")
        ta, tb = tensor_expr(g, g.base_shape, "f", 1), tensor_expr(g, (), "f", 1)
        g.emit(f"({a}, {b}), {n} = ({ta}, {tb}), {expr(g, INT, 1)}")
        g.declare(a, Var(T(g.base_shape), family="?", contig=False))
        g.declare(b, Var(T(()), family="?", contig=False))
        g.declare(n, Var(INT))
        return True
    if c == "sorted_pair":
        a, b = g.bind("n", INT), g.bind("n", INT)
        g.emit(f"{a}, {b} = sorted([{expr(g, INT, 1)}, {expr(g, INT, 1)}])")
        return True
    if c == "dict_first":
        d = g.pick(lambda v: v.ty.kind == "dict_si")[0]
        if d is None:
            return None
        k, n = g.bind("s", STR), g.bind("n", INT)
        g.emit(f"{k}, {n} = next(iter({d}.items()), ('none', 0))")
        return True
    a, b = g.bind("n", INT), g.bind("n", INT)
    g.emit(f"{a}, {b}, *_ = ({expr(g, INT, 1)}, {expr(g, INT, 1)}, {g.small_int()})")
    return True


def _comprehension(g):
    c = g.r.choice(g.allowed(("print_list", "print_tuple", "nested", "genexp_sum", "genexp_tensor", "minmax", "setcomp",
                              "dictcomp", "enumerate_zip", "sum_start"),
                             comp=("print_list", "nested", "setcomp", "dictcomp", "enumerate_zip"),
                             genexp=("print_tuple", "genexp_sum", "genexp_tensor"), sum_start=("sum_start", "genexp_tensor")))
    from .gen_exprs import int_iterable  # noqa: PLC0415
    lst = int_iterable(g, 1)
    if c == "print_list":
        # NB: print inside a comprehension: a graph break in the comprehension's frame.
        g.emit(f"{g.bind('c', LIST_I, group=g.fresh('grp'))} = [(print({g.fresh('cp')!r}, v), v + 1)[1] for v in {lst}]")
    elif c == "print_tuple":
        g.emit(f"{g.bind('c', Ty('tuple_any'))} = tuple(print('g', v) or v for v in {lst})")
    elif c == "nested":
        g.emit(f"{g.bind('c', LIST_I, group=g.fresh('grp'))} = [a * b for a in {lst} for b in range(2) if a != b]")
    elif c == "genexp_sum":
        g.emit(f"{g.bind('n', INT)} = sum(v * v for v in {lst})")
    elif c == "genexp_tensor":
        ts = g.pick(lambda v: v.ty.kind == "list_T")[0]
        if ts is None:
            return None
        g.emit(f"{g.bind('t', T(()))} = sum((t.sum() for t in {ts}), start=torch.tensor(0.0))")
    elif c == "minmax":
        f = g.r.choice(("min", "max"))
        g.emit(f"{g.bind('n', INT)} = {f}({lst}, key=lambda v: (v % 3, v), default=-1)" if g.chance(0.5) else
               f"{g.bind('n', INT)} = {f}({expr(g, INT, 1)}, {expr(g, INT, 1)}, {g.small_int()})")
    elif c == "setcomp":
        g.emit(f"{g.bind('c', SET_I, group=g.fresh('grp'))} = {{(v * 3) % 8 for v in {lst}}}")
    elif c == "dictcomp":
        g.emit(f"{g.bind('c', DICT_SI, group=g.fresh('grp'))} = {{str(i): v for i, v in enumerate({lst}) if v != i}}")
    elif c == "enumerate_zip":
        other = g.pick(lambda v: v.ty.kind == "list_int")[0] or "[3, 1]"
        g.emit(f"{g.bind('c', LIST_I, group=g.fresh('grp'))} = [i * a - b for i, (a, b) in enumerate(zip({lst}, {other}))]")
    else:
        g.emit(f"{g.bind('n', INT)} = sum({lst}, start={expr(g, INT, 1)})")
    return True


# ---- statements that raise, for try blocks -----------------------------------------------------
def risky_statement(g) -> str | None:
    """Emit a statement that may raise; returns the exception type to catch."""
    c = g.r.choice(("dict", "index", "list_index", "remove", "set_remove", "del", "pop_key", "pop_empty", "unpack",
                    "int_str", "zip_strict", "raise", "zerodiv", "tensor_index", "next", "helper", "assert"))
    lst = g.pick(lambda v: v.ty.kind == "list_int")[0]
    d = g.pick(lambda v: v.ty.kind == "dict_si")[0]
    if c == "dict" and d:
        g.emit(f"{g.bind('n', INT)} = {d}[{g.key()}]")
        return "KeyError"
    if c == "index" and lst:
        g.emit(f"{g.bind('n', INT)} = {lst}[{g.small_int(-4, 4)}]")
        return "IndexError"
    if c == "list_index" and lst:
        g.emit(f"{g.bind('n', INT)} = {lst}.index({g.r.randrange(8)})")
        return "ValueError"
    if c == "remove" and lst and g.may_grow(lst):
        g.emit(f"{lst}.remove({g.r.randrange(8)})")
        return "ValueError"
    st = g.pick(lambda v: v.ty.kind == "set_i")[0]
    if c == "set_remove" and st and g.may_grow(st):
        g.emit(f"{st}.remove({g.r.randrange(8)})")
        return "KeyError"
    if c == "del" and d and g.may_grow(d):
        g.emit(f"del {d}[{g.key()}]")
        return "KeyError"
    if c == "pop_key" and d and g.may_grow(d):
        g.emit(f"{g.bind('n', INT)} = {d}.pop({g.key()})")
        return "KeyError"
    if c == "pop_empty" and lst and g.may_grow(lst):
        g.emit(f"{g.bind('n', INT)} = {lst}.pop()")
        return "IndexError"
    if c == "unpack" and lst:
        a, b = g.bind("n", INT), g.bind("n", INT)
        g.emit(f"{a}, {b} = {lst}")
        return "ValueError"
    if c == "int_str":
        g.emit(f"{g.bind('n', INT)} = int({expr(g, STR, 2)})")
        return "ValueError"
    if c == "zip_strict" and lst:
        other = g.pick(lambda v: v.ty.kind in ("list_int", "tuple_int"))[0]
        g.emit(f"{g.bind('c', Ty('list_any'))} = list(zip({lst}, {other}, strict=True))")
        return "ValueError"
    if c == "raise":
        g.emit(f"if {expr(g, BOOL, 1)}:")
        g.suites[-1][-1].body.append(_node(f"raise ValueError({g.fresh('bad')!r})"))
        return "ValueError"
    if c == "zerodiv":
        g.emit(f"{g.bind('n', INT)} = {expr(g, INT, 1)} // {expr(g, INT, 2)}")
        return "ZeroDivisionError"
    if c == "tensor_index":
        name, v = g.pick(lambda v: v.ty.kind == "T" and len(v.ty.shape) >= 1)
        if name:
            t = g.bind("t", T(v.ty.shape[1:], v.ty.dtype), family=v.family, contig=v.contig, writable=v.writable)
            g.emit(f"{t} = {name}[{expr(g, INT, 2)}]")
            return "IndexError"
    if c == "next" and lst:
        g.emit(f"{g.bind('n', INT)} = next(iter({lst}))")
        return "StopIteration"
    if c == "helper":
        from .gen_funcs import call_raising_helper  # noqa: PLC0415
        return call_raising_helper(g)
    if c == "assert":
        g.emit(f"assert {expr(g, BOOL, 1)}, {g.fresh('failed')!r}")
        return "AssertionError"
    return None


TABLE = [(5, _list_int), (3, _list_t), (5, _dict_si), (2, _dict_t), (3, _set_i), (3, _objects), (3, _unpack),
         (3, _comprehension)]
