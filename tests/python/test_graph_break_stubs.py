"""Graph-break stubs and the hook's trampoline without torch: frames of plain Python that break at
print / unknown C functions are split (partial capture, stub running the break instruction
natively, resume functions dispatched by the hook) and must behave exactly as eager. Pure Python:
also runs on pyenv's 3.12 with a _C built for it, where the stub's opcodes differ.
"""
from __future__ import annotations

import os
import sys
import traceback

import pytest

from test_bytecode_asm import _C  # loads framefuse._C without torch (skips the module if absent)

pytestmark = [pytest.mark.pure_python,
              pytest.mark.skipif(not _C.FRAME_EVAL_SUPPORTED, reason="frame evaluation needs CPython 3.11 or 3.12")]


@pytest.fixture(autouse=True)
def fresh():
    _C._reset()
    yield
    _C._reset()


def compiled(fn):
    return _C._compile_callable(fn, "eager", False, None, None, fn.__code__)


def check(fn, *args, calls=3, capsys=None):
    cf = compiled(fn)
    for _ in range(calls):
        expected = fn(*args)
        out = capsys.readouterr().out if capsys else None
        assert cf(*args) == expected
        if capsys:
            assert capsys.readouterr().out == out
    s = _C._frame_eval_stats()
    assert s["internal_errors"] == 0
    return s


def straight(a, b):
    c = a * 2 + b
    print("c is", c)
    return c - 1, a


def loop(n):
    total = 0
    for i in range(n):
        total += i
        print("i", i, end=";\n", sep="=")
        total *= 2
    for w in [3, 4, 5]:
        os.getpid()
        total -= w
    return total


def nulls(a):
    return max(a, len([print("x")]), print("y") or 0)


def closure(a):
    k = a + 1

    def add(v):
        return v + k

    print("closure")
    r = add(a)
    k = 10
    return r, add(a), (lambda: k)()


def trying(a, out):
    try:
        out.append(a)
        print("try")
        os.stat("")  # raises: the handler runs natively in the stub
        out.append("not reached")
    except FileNotFoundError:
        out.append("caught")
    finally:
        out.append("finally")
    return len(out)


def raising(a):
    print("before")
    return a // 0


def test_straight_line_split(capsys):
    s = check(straight, 3, 4, capsys=capsys)
    assert s["frames_split"] == 1 and s["graph_breaks"] == 1 and s["frames_compiled"] == 1
    assert s["codes_generated"] == 2  # one stub, one resume function, made once
    # No tensor work on either side of the break: after the first call the frame runs natively.
    assert s["resume_calls"] == 1
    assert _C._code_cache_info(straight.__code__)["strategy"] == "skip"


def test_loops_keyword_calls_and_nulls(capsys):
    check(loop, 5, capsys=capsys)
    check(loop, 2000, calls=1, capsys=capsys)
    check(nulls, 2, capsys=capsys)
    assert _C._frame_eval_stats()["frames_split"] >= 3


def test_closures_and_try(capsys):
    check(closure, 5, capsys=capsys)
    out_e, out_c = [], []
    cf = compiled(trying)
    for _ in range(2):
        assert cf(1, out_c) == trying(1, out_e)
    assert out_c == out_e


def test_exception_after_break_points_at_the_user_line(capsys):
    cf = compiled(raising)
    for _ in range(2):
        with pytest.raises(ZeroDivisionError) as e:
            cf(4)
        last = traceback.extract_tb(e.value.__traceback__)[-1]
        assert last.filename == __file__ and last.lineno == raising.__code__.co_firstlineno + 2


def test_no_python_frame_per_break(capsys):
    expected = loop(3000)
    cf = compiled(loop)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # a nested frame per break would overflow after 200 iterations
    try:
        assert cf(3000) == expected
    finally:
        sys.setrecursionlimit(limit)
    assert capsys.readouterr().out.count("i=2999;") == 2
