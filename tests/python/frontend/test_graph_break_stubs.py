"""Graph-break stubs and the hook's trampoline without torch: frames of plain Python that break at
print / unknown C functions are split (partial capture, stub running the break instruction
natively, resume functions dispatched by the hook) and must behave exactly as eager. Pure Python:
also runs on pyenv's 3.12 with a _C built for it, where the stub's opcodes differ.
"""
from __future__ import annotations

import dis
import os
import sys
import traceback
import types

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


class Printing:
    """An iterator whose __next__ breaks (print): the loop's FOR_ITER is the break instruction, and
    the exhausted edge resumes after the loop's END_FOR (3.13: END_FOR, POP_TOP)."""

    def __init__(self, n):
        self.i, self.n = 0, n

    def __iter__(self):
        return self

    def __next__(self):
        print("next", self.i)
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i * 10


def loop_breaking_at_for_iter(n):
    total = 1
    for v in Printing(n):
        total = total * 3 + v
    return total, n


def test_a_break_at_for_iter_resumes_both_edges(capsys):
    check(loop_breaking_at_for_iter, 4, capsys=capsys)
    check(loop_breaking_at_for_iter, 0, capsys=capsys)
    assert _C._frame_eval_stats()["graph_breaks"] >= 1


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


# ---- zero-argument super() -------------------------------------------------------------------
# super() takes `self` from the frame's first local slot (a cell's contents when an inner function
# captures it) and __class__ from the closure: the stub and resume functions keep both.


class _Base:
    def __init__(self, k):
        self.k = k

    def step(self, a):
        return a * self.k

    @classmethod
    def make(cls, a):
        return (cls.__name__, a + 100)


class _Child(_Base):
    def __init__(self, k):
        print("init", k)
        super().__init__(k + 1)
        self.extra = k * 2

    def before(self, a):
        b = a + 1
        print("before", b)
        return super().step(b) + 1

    def after(self, a):
        b = super().step(a)
        print("after", b)
        return b - self.k

    def looped(self, n):
        total = 0
        for i in range(n):
            total += super().step(i)
            print("i", i)
        return total

    def captured(self, a):
        get = lambda: self.k  # noqa: E731 -- makes `self` a cell
        print("captured")
        return super().step(a) + get()

    def bare_super(self, a):
        print("bare")
        s = super()  # no attribute right away: 3.12 too looks `self` up in the frame
        return s.step(a) + super().step(1)

    def super_object_across(self, a):
        s = super()
        print("across")
        return s.step(a)

    @classmethod
    def make(cls, a):
        print("make", cls.__name__)
        return super().make(a * 2)

    def no_positional(*args):
        print("no positional")
        return super().step(args[1])

    def deleted(self, a):
        r = super().step(a)
        print("deleted")
        del self
        return r

    def rebound(self, a):
        def rebind():
            nonlocal self
            self = None

        print("rebound")
        r = super().step(a)
        rebind()
        return r


def _split_count(fn, *args, capsys):
    s = check(fn, *args, capsys=capsys)
    return s["frames_split"], s["graph_breaks"]


@pytest.mark.parametrize("name, args", [
    ("before", (3,)), ("after", (3,)), ("captured", (3,)), ("bare_super", (3,)), ("looped", (4,)),
])
def test_super_in_a_split_frame(capsys, name, args):
    obj = _Child(2)
    capsys.readouterr()
    fn = getattr(_Child, name)
    splits, breaks = _split_count(fn, obj, *args, capsys=capsys)
    # a loop splits its resume function again at the next iteration's break
    assert (splits >= 2 if name == "looped" else splits == 1) and breaks >= 1


def test_super_in_a_classmethod(capsys):
    # a classmethod's first local is `cls`: through the bound method, so compile its function
    fn = _Child.make.__func__
    splits, _ = _split_count(fn, _Child, 5, capsys=capsys)
    assert splits == 1
    assert compiled(fn)(_Child, 5) == ("_Child", 110)


def test_super_in_init(capsys):
    cf = compiled(_Child.__init__)
    for k in range(3):
        eager, comp = _Child.__new__(_Child), _Child.__new__(_Child)
        assert _Child.__init__(eager, k) is None
        out = capsys.readouterr().out
        assert cf(comp, k) is None
        assert capsys.readouterr().out == out == f"init {k}\n"
        assert vars(comp) == vars(eager) == {"k": k + 1, "extra": 2 * k}
    s = _C._frame_eval_stats()
    assert s["frames_split"] == 1 and s["internal_errors"] == 0


def _after_first_pop_top(code):
    return next(i.offset for i in dis.get_instructions(code) if i.opname == "POP_TOP")


def test_super_resume_functions_keep_self_first():
    # slot 0 of the generated code is the user's `self` (for a cell, its contents in __ff_self),
    # passed even where the liveness analysis sees no use of it; __class__ stays the function's cell
    T = _C._testing_bytecode
    obj = _Child.__new__(_Child)
    obj.k = 4

    code = _Child.before.__code__
    off = _after_first_pop_top(code)  # the print's result on the stack
    live = T.live_locals_at(code, off)
    assert live == ["self", "b"]
    resume = T.make_resume(code, off, 1, live)
    assert resume.co_varnames[:3] == ("self", "__stack0", "b") and resume.co_argcount == 3
    assert resume.co_freevars == ("__class__",)
    fn = types.FunctionType(resume, globals(), "r", None, _Child.before.__closure__)
    assert fn(obj, None, 5) == 5 * 4 + 1

    code = _Child.captured.__code__
    off = _after_first_pop_top(code)
    live = T.live_locals_at(code, off)
    assert "self" not in live  # a cell: passed in the closure
    resume = T.make_resume(code, off, 1, live)
    assert resume.co_varnames[:2] == ("__ff_self", "__stack0") and resume.co_argcount == 2 + len(live)
    assert resume.co_freevars == ("self", "__class__")
    closure = (types.CellType(obj),) + _Child.captured.__closure__
    fn = types.FunctionType(resume, globals(), "r", None, closure)
    assert fn(obj, None, *[{"a": 5, "get": lambda: 1}[n] for n in live]) == 5 * 4 + 1

    # after `del self` slot 0 cannot be kept: refused
    with pytest.raises(_C.Unsupported, match="'self' is deleted"):
        T.make_resume(_Child.deleted.__code__, _after_first_pop_top(_Child.deleted.__code__), 1, ["r"])


def test_super_frames_that_stay_eager(capsys):
    obj = _Child(2)
    capsys.readouterr()
    # no positional argument: super() raises; the frame is not split and raises the same
    cf = compiled(_Child.no_positional)
    with pytest.raises(RuntimeError, match="no arguments"):
        _Child.no_positional(obj, 3)
    with pytest.raises(RuntimeError, match="no arguments"):
        cf(obj, 3)
    assert _C._code_cache_info(_Child.no_positional.__code__)["strategy"] == "skip"
    capsys.readouterr()
    # a super object live across the break is not rebuilt: that frame runs natively
    check(_Child.super_object_across, obj, 3, capsys=capsys)
    # `self` deleted, or rebound through a closure: slot 0 cannot be kept, the frame runs natively
    for name in ("deleted", "rebound"):
        fn = getattr(_Child, name)
        check(fn, obj, 3, capsys=capsys)
        info = _C._code_cache_info(fn.__code__)
        assert info["strategy"] == "skip" and info["entries"] == 0, (name, info)
