"""Resume functions (frame_eval/bytecode_resume.cpp): continue a function after a break point.

A resume code object starting at an instruction receives the stack values and live locals there;
calling it must give what the original function gives from that point. Pure Python (no torch).
"""
from __future__ import annotations

import dis
import sys
import traceback
import types

import pytest

from test_bytecode_asm import T  # loads framefuse._C without torch (skips the module if absent)

pytestmark = pytest.mark.pure_python

calls = []


def marker(v):
    calls.append(v)
    return v + 100


def f_straight(a, b):
    c = a * 2
    d = marker(c)
    for i in range(b):
        c += d + i
    return c, d


def f_loop(n):
    total = 0
    for i in range(n):
        total += marker(i)
        if total > 250:
            total -= 50
    return total


def f_try(n):
    try:
        x = marker(n)
        y = 10 // (x - 105)
    except ZeroDivisionError:
        y = -1
    finally:
        n += 1
    return n, y


def f_cells(n):
    scale = 3

    def inner(v):
        return v * scale

    got = marker(n)
    scale = 5
    return inner(got), scale


def _after_call(code, nth=0):
    """Byte offset of the instruction after the nth call to `marker` (the value is on the stack)."""
    ins = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    seen = 0
    for k, i in enumerate(ins):
        if i.opname in ("LOAD_GLOBAL",) and i.argval == "marker":
            if seen == nth:
                j = k
                while ins[j].opname != "CALL":
                    j += 1
                return ins[j + 1].offset
            seen += 1
    raise AssertionError("no call to marker")


def _resume_fn(fn, offset, depth, live, closure=None):
    code = T.make_resume(fn.__code__, offset, depth, live)
    T.verify(code)
    return types.FunctionType(code, fn.__globals__, code.co_name, None, closure)


def test_resume_straight_line():
    off = _after_call(f_straight.__code__)
    r = _resume_fn(f_straight, off, 1, ["a", "b", "c"])
    assert r.__code__.co_varnames[:4] == ("__stack0", "a", "b", "c")
    assert r.__code__.co_argcount == 4
    a, b = 4, 5
    c = a * 2
    assert r(marker(c), a, b, c) == f_straight(a, b)


def test_resume_inside_a_loop():
    off = _after_call(f_loop.__code__)
    # Inside the loop the stack holds the iterator and (3.11/3.12) the running total below the call.
    ins = {i.offset: i for i in dis.get_instructions(f_loop.__code__)}
    depth = 3 if ins[off].opname == "BINARY_OP" else 2
    r = _resume_fn(f_loop, off, depth, ["n", "i"])
    n = 9
    it = iter(range(n))
    total = 0
    for i in it:  # run the first four iterations natively, break in the fifth
        if i == 4:
            break
        total += marker(i)
        if total > 250:
            total -= 50
    expected = f_loop(n)
    assert r(it, total, marker(4), n, 4) == expected


def test_resume_inside_try_keeps_handlers():
    off = _after_call(f_try.__code__)
    r = _resume_fn(f_try, off, 1, ["n"])
    # x = 105 divides by zero after the resume point: the original handler and finally must run.
    assert r(105, 5) == (6, -1)
    assert r(110, 5) == (6, 2)
    assert f_try(5) == (6, -1)


def test_resume_with_cells_passes_them_by_identity():
    off = _after_call(f_cells.__code__)
    code = T.make_resume(f_cells.__code__, off, 1, ["n", "inner"])
    assert code.co_freevars == f_cells.__code__.co_cellvars + f_cells.__code__.co_freevars
    cell = types.CellType(3)
    r = types.FunctionType(code, f_cells.__globals__, code.co_name, None, (cell,))
    inner = lambda v: v * cell.cell_contents  # noqa: E731  (what f_cells made from the cell)
    assert r(marker(2), 2, inner) == f_cells(2)
    assert cell.cell_contents == 5  # the store went to the caller's cell


def test_resume_traceback_has_users_lines():
    off = _after_call(f_try.__code__)
    r = _resume_fn(f_try, off, 1, ["n"])
    with pytest.raises(TypeError) as info:
        r("not a number", 1)
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    assert frame.filename == f_try.__code__.co_filename
    assert "y = 10 // (x - 105)" in frame.line
    assert frame.name.startswith("__resume_f_try_at_")


def test_resume_rejects_wrong_stack_depth_and_offsets():
    off = _after_call(f_straight.__code__)
    with pytest.raises(RuntimeError, match="the stack holds 1 values"):
        T.make_resume(f_straight.__code__, off, 0, ["a", "b", "c"])
    load = next(i for i in dis.get_instructions(f_straight.__code__) if i.argval == "marker")
    with pytest.raises(RuntimeError, match="not an instruction boundary"):
        T.make_resume(f_straight.__code__, load.offset + 2, 1, ["a"])  # inside LOAD_GLOBAL's caches
    with pytest.raises(RuntimeError, match="not a local"):
        T.make_resume(f_straight.__code__, off, 1, ["zzz"])


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11's LOAD_FAST checks unbound locals itself")
def test_resume_missing_live_local_raises_not_crashes():
    off = _after_call(f_straight.__code__)
    r = _resume_fn(f_straight, off, 1, ["a", "b"])  # c is live but not passed
    with pytest.raises(UnboundLocalError):
        r(108, 4, 5)


def test_bytecode_log_shows_original_and_resume():
    from test_bytecode_asm import _C

    records = []
    _C.logging.set_spec("bytecode")
    _C.logging.set_sink(lambda logger, level, msg: records.append((logger, msg)))
    try:
        off = _after_call(f_straight.__code__)
        T.make_resume(f_straight.__code__, off, 1, ["a", "b", "c"])
    finally:
        _C.logging.set_sink(None)
        _C.logging.set_spec("")
    assert len(records) == 1
    logger, msg = records[0]
    assert logger.endswith("bytecode")
    assert msg.startswith("ORIGINAL BYTECODE\nDisassembly of f_straight (")
    assert f"RESUME FUNCTION at offset {off}\nDisassembly of __resume_f_straight_at_" in msg
    assert "JUMP_FORWARD" in msg and "__stack0" in msg


def f_nested_call(a):
    return str(marker(a) * 2)


def test_resume_with_null_on_the_stack():
    # Breaking after the inner call of str(marker(a) * 2): below the value lie `str` and its NULL
    # (3.11/3.12: NULL, str; 3.13: str, NULL).
    code = f_nested_call.__code__
    off = _after_call(code)
    ins = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    first_load = next(i for i in ins if i.opname == "LOAD_GLOBAL")
    assert first_load.argval == "str" and first_load.arg & 1  # LOAD_GLOBAL pushes a NULL beside str
    null_slot = 1 if sys.version_info >= (3, 13) else 0
    code_r = T.make_resume(code, off, 3, [], null_slots=[null_slot])
    T.verify(code_r)
    assert code_r.co_varnames[:2] == (f"__stack{1 - null_slot}", "__stack2")
    fn = types.FunctionType(code_r, f_nested_call.__globals__)
    assert fn(str, marker(7)) == f_nested_call(7)


def f_liveness(a, b, unused):
    c = a + 1
    d = marker(c)
    e = 5  # written before any read: not live at the break
    if d > 0:
        return b + e + d
    return c


def test_live_locals_at_the_break():
    off = _after_call(f_liveness.__code__)
    assert T.live_locals_at(f_liveness.__code__, off) == ["b", "c"]
    # `a` was last read before the break.
    assert T.live_locals_at(f_straight.__code__, _after_call(f_straight.__code__)) == ["b", "c"]
    assert T.live_locals_at(f_try.__code__, _after_call(f_try.__code__)) == ["n"]  # read by `finally`


def test_resume_with_computed_liveness_runs():
    for fn, args in ((f_liveness, (1, 2, 3)), (f_try, (5,)), (f_straight, (3, 4))):
        code = fn.__code__
        off = _after_call(code)
        live = T.live_locals_at(code, off)
        r = _resume_fn(fn, off, 1, live)
        env = dict(zip(code.co_varnames, args))
        if fn is f_liveness:
            env["c"] = args[0] + 1
        if fn is f_straight:
            env["c"] = args[0] * 2
        stack = marker(env["c"] if "c" in env else env["n"])
        assert r(stack, *[env[v] for v in live]) == fn(*args), fn.__name__


def f_pairs(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17):
    m = marker(a0)
    b, c = a1 + a2, a3 * a4  # 3.13: LOAD_FAST_LOAD_FAST a1 a2, a3 a4
    a5, a6 = a6, a5  # 3.13: STORE_FAST_STORE_FAST a5 a6
    return m, b, c, a5 - a6 + a7 + a8 + a9 + a10 + a11 + a12 + a13 + a14 + a15 + a16 + a17


def test_resume_moves_pair_instruction_slots_past_15():
    # 3.13 packs two 4-bit slots into LOAD_FAST_LOAD_FAST & co. The resume function passes the live
    # locals in reverse, so a1..a4 land in slots above 15: the pairs must come apart, not wrap.
    code = f_pairs.__code__
    names = list(code.co_varnames[:18])
    if sys.version_info >= (3, 13):
        assert {"LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"} <= {i.opname for i in dis.get_instructions(code)}
    live = [n for n in reversed(names) if n != "a0"]
    off = _after_call(code)
    r = _resume_fn(f_pairs, off, 1, live)
    assert r.__code__.co_varnames.index("a1") > 15
    args = list(range(18))
    assert r(marker(0), *[args[names.index(n)] for n in live]) == f_pairs(*args)
