"""The bytecode assembler (frame_eval/bytecode_*.cpp) through framefuse._C._testing_bytecode.

Real code objects are decoded, re-encoded and constructed again; the result must run exactly like
the original and pass the verifier. Broken code objects must be rejected with a clear message.
These tests need no torch (pure_python): they load framefuse._C built for the running interpreter
without importing the framefuse package.
"""
from __future__ import annotations

import contextlib
import dis
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
import textwrap
import traceback
import types
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure_python


def _load_c():
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    dirs = [os.environ.get("FRAMEFUSE_MODULE_DIR", "")] + [str(Path(p) / "framefuse") for p in sys.path]
    for d in dirs:
        path = Path(d) / f"_C{suffix}" if d else None
        if path and path.is_file():
            # NB: not `import framefuse._C`: the package's __init__ imports torch.
            loader = importlib.machinery.ExtensionFileLoader("framefuse._C", str(path))
            spec = importlib.util.spec_from_file_location("framefuse._C", str(path), loader=loader)
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
            return mod
    return None


_C = sys.modules.get("framefuse._C") or _load_c()
if _C is None:
    pytest.skip(f"no framefuse._C built for this interpreter ({sysconfig.get_config_var('EXT_SUFFIX')})",
                allow_module_level=True)
T = _C._testing_bytecode
PY312 = sys.version_info >= (3, 12)


# ---- functions covering the constructs the assembler must preserve ---------------------------

def f_loop(n):
    s = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        s += i
        while s > 50:
            s -= 7
    return s


def f_try(n):
    out = []
    for i in range(n):
        try:
            out.append(10 // (i - 2))
        except ZeroDivisionError as e:
            out.append(str(e))
        except (TypeError, ValueError):
            out.append("never")
        else:
            out.append("else")
        finally:
            out.append("fin")
    return out


def f_with(n):
    log = []

    @contextlib.contextmanager
    def cm(tag):
        log.append(("enter", tag))
        try:
            yield tag
        finally:
            log.append(("exit", tag))

    with cm(1) as a, cm(2) as b:
        log.append(a + b + n)
    try:
        with cm(3):
            raise KeyError(n)
    except KeyError as k:
        log.append(("caught", k.args))
    return log


def f_closure(n):
    acc = n

    def add(k):
        nonlocal acc
        acc += k
        return acc

    fns = [lambda j, i=i: i * j + acc for i in range(3)]
    return add(2), [f(2) for f in fns], acc


def f_comprehensions(n):
    sq = [i * i for i in range(n) if i % 2]
    st = {i % 4 for i in range(n)}
    dc = {i: str(i) for i in range(n)}
    gen = sum(i for i in range(n))
    return sq, sorted(st), dc, gen


def f_generator(n):
    for i in range(n):
        got = yield i
        if got:
            yield from range(got)
    return "done"


def f_kwargs(a, /, b, *args, c=3, **kw):
    fmt = f"{a!r:>5}{b}{c:03d}"
    x, *rest = [a, b, *args]
    return fmt, x, rest, sorted(kw.items()), dict(a=1, **kw)


def f_raise(n):
    if n > 1:
        raise ValueError(f"bad {n}")
    return n


def f_big(n):
    # Enough constants and code to need EXTENDED_ARG prefixes for arguments and jumps.
    ns = {}
    src = "def g(n):\n    t = 0\n" + "".join(f"    if n > {i}:\n        t += {i}.5\n" for i in range(300)) + \
        "    return t\n"
    exec(src, ns)
    return ns["g"]


def _run(fn, args):
    if fn.__code__.co_flags & 0x20:  # generator
        g = fn(*args)
        out = [next(g)]
        with contextlib.suppress(StopIteration):
            out.append(g.send(2))
            while True:
                out.append(next(g))
        return out
    try:
        return ("ok", fn(*args))
    except Exception as e:
        return ("raise", type(e).__name__, str(e))


def _rebuilt(fn):
    new_code = T.roundtrip(fn.__code__)
    new = types.FunctionType(new_code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


CASES = [(f_loop, (20,)), (f_try, (5,)), (f_with, (4,)), (f_closure, (5,)), (f_comprehensions, (9,)),
         (f_generator, (4,)), (f_kwargs, (1, 2, 5, 6)), (f_raise, (0,)), (f_raise, (5,)), (f_big(0), (150,))]


@pytest.mark.parametrize("fn,args", CASES, ids=lambda v: getattr(v, "__name__", None) or repr(v))
def test_roundtrip_runs_identically(fn, args):
    new = _rebuilt(fn)
    assert _run(new, args) == _run(fn, args)
    T.verify(new.__code__)
    # The encoder reproduces CPython's own code, caches, tables and stack size exactly.
    assert new.__code__.co_code == fn.__code__.co_code
    assert new.__code__.co_exceptiontable == fn.__code__.co_exceptiontable
    assert new.__code__.co_stacksize == fn.__code__.co_stacksize


def test_nested_code_objects_roundtrip():
    for fn, _ in CASES:
        for c in fn.__code__.co_consts:
            if isinstance(c, types.CodeType):
                new = T.roundtrip(c)
                assert new.co_code == c.co_code
                assert T.stacksize(c) <= c.co_stacksize


def _stdlib_functions(limit=2500):
    import ast, inspect, json.decoder, textwrap as tw, collections as co, argparse, email.parser  # noqa: E401,F401
    seen = 0
    for mod in (ast, inspect, json.decoder, tw, co, argparse, email.parser, traceback, dis, contextlib):
        stack = [v for v in vars(mod).values()]
        while stack and seen < limit:
            v = stack.pop()
            if isinstance(v, type) and v.__module__ == mod.__name__:
                stack.extend(vars(v).values())
            elif isinstance(v, (staticmethod, classmethod)):
                stack.append(v.__func__)
            elif isinstance(v, types.FunctionType):
                yield v.__code__
                seen += 1
                stack.extend(c for c in v.__code__.co_consts if isinstance(c, types.CodeType))
            elif isinstance(v, types.CodeType):
                yield v
                seen += 1


def test_stdlib_code_objects_roundtrip_exactly():
    n = 0
    for code in _stdlib_functions():
        new = T.roundtrip(code)
        assert new.co_code == code.co_code, code
        assert new.co_exceptiontable == code.co_exceptiontable, code
        assert new.co_stacksize == code.co_stacksize, code
        # Lines survive (columns are dropped on purpose: code-13 entries).
        assert [p[0] for p in new.co_positions()] == [p[0] for p in code.co_positions()], code
        n += 1
    assert n > 500


def test_stdlib_functions_run_after_roundtrip():
    import textwrap as tw
    text = "  a\n  b c d e f g h"
    calls = [(tw.dedent, (text,)), (tw.fill, (text * 9,)), (tw.indent, (text, "> ")),
             (json.dumps, ({"x": [1, 2, {"y": None}]},)), (json.loads, ('{"a": [1, 2.5, null]}',))]
    for fn, args in calls:
        assert _rebuilt(fn)(*args) == fn(*args)


def test_traceback_lines_are_the_users():
    new = _rebuilt(f_raise)
    with pytest.raises(ValueError) as info:
        new(7)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].name == "f_raise"
    expected = f_raise.__code__.co_firstlineno + 2
    assert frames[-1].lineno == expected
    assert "raise ValueError" in frames[-1].line


def test_exception_table_format():
    # The documented example: start 20, size 8, target 100, depth 3 (no lasti).
    assert T.write_exception_table([(20, 8, 100, 3, False)]) == bytes([0x94, 0x08, 0x41, 0x24, 0x06])
    entries = [(0, 3, 70, 1, True), (5, 200, 4000, 2, False)]
    assert [tuple(e) for e in T.parse_exception_table(T.write_exception_table(entries))] == entries
    for code in list(_stdlib_functions(300)):
        raw = code.co_exceptiontable
        assert T.write_exception_table([tuple(e) for e in T.parse_exception_table(raw)]) == raw


def test_line_table_covers_every_unit():
    table = T.write_line_table(10, [10, 12, -1, 9, 200], [1, 3, 2, 9, 1])
    assert T.parse_line_table(table, 10) == [10, 12, 12, 12, -1, -1] + [9] * 9 + [200]


def test_decode_folds_prefixes_and_caches():
    big = f_big(0)
    instrs, _ = T.decode(big.__code__)
    by_dis = [i for i in dis.get_instructions(big.__code__) if i.opname not in ("EXTENDED_ARG", "CACHE")]
    assert [(n, a) for _, n, a, *_ in instrs] == [(i.opname, i.arg or 0) for i in by_dis]
    # Offsets are those of the first EXTENDED_ARG prefix (where jumps land), dis names the opcode's.
    assert all(0 <= d.offset - o <= 6 for (o, *_), d in zip(instrs, by_dis))
    assert any(a > 255 for _, _, a, *_ in instrs)
    for name, count in (zip(dis.opname, dis._inline_cache_entries) if isinstance(dis._inline_cache_entries, list)
                        else []):
        if not name.startswith("<"):
            assert T.cache_count(dis.opmap[name]) == count, name
    assert {op for op in range(256) if T.is_jump(op)} == {op for op in dis.hasjrel if op < 256}


def test_disassembly_reads_like_dis():
    text = T.dis(f_try.__code__)
    assert text.startswith("Disassembly of f_try (")
    assert "ExceptionTable:" in text and "lasti" in text
    for i in dis.get_instructions(f_try.__code__):
        if i.opname not in ("CACHE", "EXTENDED_ARG"):
            assert f" {i.offset} {i.opname}" in text


# ---- the verifier rejects broken code objects --------------------------------------------------

def _expect_rejected(code, words):
    with pytest.raises(RuntimeError) as info:
        T.verify(code)
    msg = str(info.value)
    assert "bytecode verification failed" in msg and words in msg, msg


def test_verifier_accepts_real_code():
    for fn, _ in CASES:
        T.verify(fn.__code__)


def test_verifier_rejects_small_stacksize():
    _expect_rejected(f_loop.__code__.replace(co_stacksize=1), "co_stacksize is 1")


def test_verifier_rejects_short_line_table():
    code = f_loop.__code__
    _expect_rejected(code.replace(co_linetable=code.co_linetable[:4]), "line table")


def test_verifier_rejects_missing_resume():
    code = f_raise.__code__
    raw = bytearray(code.co_code)
    assert raw[0] == dis.opmap["RESUME"]
    raw[0] = dis.opmap["NOP"]
    _expect_rejected(code.replace(co_code=bytes(raw)), "no RESUME")


def test_verifier_rejects_missing_make_cell():
    code = f_closure.__code__
    raw = bytearray(code.co_code)
    i = raw.index(dis.opmap["MAKE_CELL"])
    raw[i], raw[i + 1] = dis.opmap["NOP"], 0
    _expect_rejected(code.replace(co_code=bytes(raw)), "MAKE_CELL")


def test_verifier_rejects_jump_into_caches():
    code = f_loop.__code__
    raw = bytearray(code.co_code)
    ins = [i for i in dis.get_instructions(code) if i.opname == "JUMP_FORWARD" or i.opname.startswith("POP_JUMP")]
    j = ins[0]
    raw[j.offset + 1] += 1  # one unit further: into the middle of something
    with pytest.raises(RuntimeError) as info:
        T.verify(code.replace(co_code=bytes(raw)))
    assert "bytecode verification failed" in str(info.value)


def test_verifier_rejects_negative_stack():
    code = f_raise.__code__
    raw = bytearray(code.co_code)
    # Replace the first instruction after RESUME with POP_TOP on an empty stack.
    first = [i for i in dis.get_instructions(code) if i.opname != "RESUME"][0]
    raw[first.offset], raw[first.offset + 1] = dis.opmap["POP_TOP"], 0
    _expect_rejected(code.replace(co_code=bytes(raw)), "negative")


def test_verifier_rejects_overlapping_exception_ranges():
    code = f_try.__code__
    entries = [tuple(e) for e in T.parse_exception_table(code.co_exceptiontable)]
    s, n, t, d, la = entries[1]
    entries[1] = (entries[0][0], n + (s - entries[0][0]), t, d, la)
    _expect_rejected(code.replace(co_exceptiontable=T.write_exception_table(entries)), "overlap")


_MISC_SOURCE = textwrap.dedent('''
    import asyncio

    class Shape:
        sides = 0

        def area(self):
            return super().__repr__()

    def match_it(v):
        match v:
            case {"kind": "pt", "x": x, **rest}:
                return ("pt", x, rest)
            case [a, *others] if a > 0:
                return ("seq", a, others)
            case Shape(sides=3):
                return "triangle"
            case str() | bytes():
                return "text"
            case _:
                return None

    async def agen(n):
        for i in range(n):
            yield i
            await asyncio.sleep(0)

    async def main(n):
        out = [i async for i in agen(n)]
        async with asyncio.timeout(5):
            try:
                raise ExceptionGroup("g", [ValueError(1), KeyError(2)])
            except* ValueError as eg:
                out.append(len(eg.exceptions))
            except* KeyError:
                out.append("k")
        return out
''')


def _walk(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _walk(c)


def test_module_class_match_async_code_roundtrips_and_runs():
    module_code = compile(_MISC_SOURCE, "<misc>", "exec")
    rebuilt = {}
    for code in _walk(module_code):
        new = T.roundtrip(code)
        assert (new.co_code, new.co_exceptiontable, new.co_stacksize) == \
            (code.co_code, code.co_exceptiontable, code.co_stacksize), code.co_qualname
        rebuilt[code] = new

    def swap(code):  # the module with every nested code object replaced by its round-tripped copy
        consts = tuple(swap(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
        return rebuilt[code].replace(co_consts=consts)

    import asyncio
    results = []
    for code in (module_code, swap(module_code)):
        ns = {"__name__": "misc"}
        exec(code, ns)
        results.append([ns["match_it"](v) for v in ({"kind": "pt", "x": 1, "y": 2}, [3, 4], ns["Shape"](), "s", 0)]
                       + [asyncio.run(ns["main"](3)), ns["Shape"]().area()[:6]])
    assert results[0] == results[1]
