"""Expressions of container types (lists, tuples, sets, frozensets and dicts of ints, torch.Size)
and the iterables comprehensions draw from; the table entries of gen_exprs.expr for those types."""
from __future__ import annotations

from .gen import INT
from .gen_exprs import expr, of_kind, tensor_var


# ---- lists and tuples --------------------------------------------------------------------------------
def _list_int(g, d):
    c = g.r.choice(g.allowed(("lit", "range", "comp", "concat", "slice", "sorted", "reversed", "set", "enum", "zip",
                              "dict", "shape", "tuple", "map", "filter", "starred"), comp=("comp", "enum", "zip")))
    src = of_kind(g, "list_int") or of_kind(g, "tuple_int")
    if c == "lit":
        return "[" + ", ".join(expr(g, INT, d) for _ in range(g.r.randint(0, 3))) + "]"
    if c == "range":
        return f"list(range({g.r.randint(0, 4)}))" if g.chance(0.5) else f"list(range(1, {g.r.randint(1, 6)}, 2))"
    if c == "shape":
        name, _ = tensor_var(g)
        return f"list({name}.shape)" if name else None
    if src is None:
        return None
    if c == "comp":
        cond = g.r.choice(("", f" if v > {g.r.randrange(5)}", " if v % 2"))
        return f"[v * {g.r.randint(1, 3)} + {g.small_int(0, 2)} for v in {int_iterable(g, d)}{cond}]"
    if c == "concat":
        return f"list({src}) + [{expr(g, INT, d)}]"
    if c == "slice":
        return f"list({src}[{g.r.choice(('1:', ':2', '::-1', '::2', '-2:'))}])"
    if c == "sorted":
        return f"sorted({src}{g.r.choice(('', ', reverse=True', ', key=lambda v: -v', ', key=lambda v: v % 3'))})"
    if c == "reversed":
        return f"list(reversed({src}))"
    if c == "set":
        s = of_kind(g, "set_i") or of_kind(g, "fset_i")
        return f"sorted({s})" if s and g.chance(0.5) else f"list({s})" if s else None
    if c == "enum":
        return f"[i + v for i, v in enumerate({src}{g.r.choice(('', ', 1'))})]"
    if c == "zip":
        other = of_kind(g, "list_int") or src
        strict = g.r.choice(("", "", ", strict=False"))
        return f"[a * b for a, b in zip({src}, {other}{strict})]"
    if c == "dict":
        dn = of_kind(g, "dict_si")
        return (f"list({dn}.values())" if g.chance(0.6) or g.off("comp") else f"[len(k) + v for k, v in {dn}.items()]") \
            if dn else None
    if c == "map":
        return f"list(map(abs, {src}))"
    if c == "filter":
        return f"list(filter(None, {src}))"
    if c == "starred":
        return f"[*{src}, {expr(g, INT, d)}]"
    return f"list({src})"


def int_iterable(g, d) -> str:
    """Source of an iterable of ints for a comprehension or a for loop (never one a loop may grow:
    comprehensions only read)."""
    lst = of_kind(g, "list_int") or of_kind(g, "tuple_int")
    c = g.r.choice(("range", "list", "list", "reversed", "sorted", "set", "dict_values", "zip", "enumerate",
                    "map", "slice"))
    if c == "range" or lst is None:
        return f"range({g.r.randint(0, 4)})" if g.chance(0.6) else f"range({expr(g, INT, d)} % 4)"
    if c == "reversed":
        return f"reversed({lst})"
    if c == "sorted":
        return f"sorted({lst}, reverse={g.r.choice(('True', 'False'))})"
    if c == "set":
        s = of_kind(g, "set_i") or of_kind(g, "fset_i")
        return s or lst
    if c == "dict_values":
        dn = of_kind(g, "dict_si")
        return f"{dn}.values()" if dn else lst
    if c == "zip":
        other = of_kind(g, "list_int") or lst
        # NB: a generator of sums, so `v` stays an int; strict=False as zip stops at the shorter one
        return f"(a + b for a, b in zip({lst}, {other}{g.r.choice(('', ', strict=False'))}))"
    if c == "enumerate":
        return f"(i * a for i, a in enumerate({lst}, {g.r.randint(0, 2)}))"
    if c == "map":
        return f"map(abs, {lst})"
    if c == "slice":
        return f"{lst}[{g.r.choice(('1:', '::-1', ':2'))}]"
    return lst


def _tuple_int(g, d):
    c = g.r.choice(("lit", "of_list", "shape", "concat"))
    if c == "lit":
        return "(" + "".join(expr(g, INT, d) + ", " for _ in range(g.r.randint(1, 3))) + ")"
    if c == "shape":
        name, _ = tensor_var(g)
        return f"tuple({name}.shape)" if name else None
    src = of_kind(g, "list_int") or of_kind(g, "set_i")
    if c == "of_list" and src:
        return f"tuple({src})" if g.chance(0.5) else f"tuple(sorted({src}))"
    t = of_kind(g, "tuple_int")
    return f"{t} + ({expr(g, INT, d)},)" if t else None


def _set_i(g, d):
    c = g.r.choice(g.allowed(("lit", "of_list", "comp", "op", "method", "range"), comp=("comp",)))
    s = of_kind(g, "set_i") or of_kind(g, "fset_i")
    src = of_kind(g, "list_int") or of_kind(g, "tuple_int")
    if c == "lit":
        return "{" + ", ".join(str(g.r.randrange(8)) for _ in range(g.r.randint(1, 4))) + "}"
    if c == "range":
        return f"set(range({g.r.randint(0, 6)}))"
    if c == "of_list" and src:
        return f"set(v % 8 for v in {src})"
    if c == "comp" and src:
        return f"{{v % 8 for v in {src}}}"
    if c == "op" and s:
        other = "{" + ", ".join(str(g.r.randrange(8)) for _ in range(2)) + "}"
        return f"set({s} {g.r.choice(('|', '&', '-', '^'))} {other})"
    if c == "method" and s:
        m = g.r.choice(("union", "intersection", "difference", "symmetric_difference"))
        arg = f"[v % 8 for v in {src}]" if src and g.chance(0.5) and not g.off("comp") else "{1, 2, 5}"
        return f"set({s}.{m}({arg}))"
    return None


def _fset_i(g, d):
    s = of_kind(g, "set_i")
    lst = of_kind(g, "list_int")
    if s and g.chance(0.5):
        return f"frozenset({s})"
    if lst and g.chance(0.5):
        return f"frozenset(v % 8 for v in {lst})"
    return "frozenset({" + ", ".join(str(g.r.randrange(8)) for _ in range(g.r.randint(0, 3))) + "})"


def _dict_si(g, d):
    c = g.r.choice(("lit", "comp", "zip", "copy", "merge", "fromkeys", "enum"))
    src = of_kind(g, "dict_si")
    if c == "lit":
        return "{" + ", ".join(f"{g.key()}: {expr(g, INT, d)}" for _ in range(g.r.randint(0, 3))) + "}"
    if c == "zip":
        lst = of_kind(g, "list_int")
        return f"dict(zip(['a', 'b', 'c'], {lst}))" if lst else None
    if c == "fromkeys":
        return f"dict.fromkeys({g.r.choice((['a', 'b'], 'xy', ('k',)))!r}, {g.small_int()})"
    if c == "enum":
        lst = of_kind(g, "list_int")
        return f"{{str(v): i for i, v in enumerate({lst})}}" if lst else None
    if src is None:
        return None
    if c == "comp":
        cond = g.r.choice(("", " if v > 0", f" if k != {g.key()}"))
        return f"{{k: v * 2 for k, v in {src}.items(){cond}}}"
    if c == "copy":
        return g.r.choice((f"dict({src})", f"{src}.copy()"))
    return g.r.choice((f"{{**{src}, {g.key()}: {expr(g, INT, d)}}}", f"{src} | {{{g.key()}: 1}}"))


def _size(g, d):
    name, v = tensor_var(g, dims_min=1)
    if name is None:
        return None
    return g.r.choice((f"{name}.shape", f"{name}.size()", f"{name}.shape[1:]"))
