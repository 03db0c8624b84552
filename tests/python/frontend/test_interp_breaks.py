"""Unsupported constructs stop the capture with a structured break record (stable id from the
registry, reason, explanation, hint, the user's file:line and the stack through inlined frames)."""
import os
import re

import pytest
import torch

from framefuse._C import _testing as T
from interp_util import brk

x = torch.randn(4, 4)
HERE = os.path.abspath(__file__)


def line_of(fn, text):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(text)


def test_branch_on_tensor_value():
    def f(x):
        if x.sum() > 0:
            return x + 1
        return x - 1
    b = brk(f, x)
    assert b["id"] == "FF0001"
    assert b["reason"] == "branch on a tensor value: bool() of a tensor"
    assert b["filename"] == HERE and b["lineno"] == line_of(f, "if x.sum() > 0")
    assert b["explanation"] and b["hint"]


@pytest.mark.parametrize("method", ["item", "tolist", "numpy"])
def test_tensor_to_python(method):
    def f(x):
        v = getattr(x.sum(), method)()
        return x * 2, v
    b = brk(f, x)
    assert b["id"] == "FF0002" and b["reason"] == f"tensor data used in Python: tensor.{method}()"


def test_print():
    def f(x):
        print("hello")
        return x
    b = brk(f, x)
    assert (b["id"], b["reason"]) == ("FF0003", "call to print")


def test_unknown_c_function():
    import os as _os

    def f(x):
        _os.getpid()
        return x
    b = brk(f, x)
    assert b["id"] == "FF0004" and "getpid" in b["reason"]


def test_unhandled_opcode():
    def f(x):
        match x.shape:
            case (a, b):  # noqa: F841 - the pattern under test binds both
                return x * a
        return x
    b = brk(f, x)
    assert b["id"] == "FF0005" and b["reason"].startswith("unsupported bytecode instruction: ")


def inner_helper(t):
    return t.item()


def test_user_stack_through_inlined_frames():
    def outer(x):
        return inner_helper(x.sum()) + 1
    b = brk(outer, x)
    assert len(b["user_stack"]) == 2
    assert b["user_stack"][0] == f"{HERE}:{line_of(outer, 'inner_helper(x.sum())')} in outer"
    assert b["user_stack"][1] == f"{HERE}:{line_of(inner_helper, 't.item()')} in inner_helper"
    assert b["lineno"] == line_of(inner_helper, "t.item()")


def test_raise_and_wrong_arguments():
    def needs_two(a, b):
        return a + b

    def f(x):
        return needs_two(x)
    assert brk(f, x)["id"] == "FF0018"

    def g(x):
        raise ValueError("no")
    assert brk(g, x)["id"] == "FF0008"


def test_grad_mode_change_inside_is_a_break():
    def f(x):
        with torch.no_grad():
            return x * 2
    with torch.enable_grad():
        assert brk(f, x)["id"] == "FF0013"


def test_break_registry_ids_are_unique_and_used():
    records = T.break_registry()
    ids = [r[0] for r in records]
    assert ids == [f"FF{i:04d}" for i in range(1, len(ids) + 1)]
    assert all(r[1] and r[2] and r[3] for r in records)
    # Every registered reason is raised somewhere in the interpreter, and nothing else is raised.
    root = os.path.join(os.path.dirname(HERE), "..", "..", "..", "frame_eval")
    source = "".join(open(os.path.join(root, f)).read() for f in os.listdir(root) if f.startswith("interpreter"))
    used = set(re.findall(r"BreakKind::(\w+)", source))
    registry = open(os.path.join(root, "break_registry.def")).read()
    declared = re.findall(r"^FF_BREAK\((\w+),", registry, re.M)
    assert len(declared) == len(records)
    assert used == set(declared), (set(declared) - used, used - set(declared))
