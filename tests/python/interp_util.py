"""Helpers for the interpreter tests: trace a function with framefuse._C._testing and compare the
capture run on the reference runner with eager execution."""
import copy

import torch

from framefuse._C import _testing as T


def trace(fn, *args, **kwargs):
    """The capture of fn(*args, **kwargs); fails the test on a graph break."""
    r = T.trace(fn, args, kwargs)
    assert r["break"] is None, f"unexpected graph break: {r['break']}"
    return r


def brk(fn, *args, **kwargs):
    """The break record of fn(*args, **kwargs); fails the test when it captures."""
    r = T.trace(fn, args, kwargs)
    assert r["break"] is not None, "expected a graph break, got a graph:\n" + r["graph"]
    return r["break"]


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.allclose(
            a, b, atol=1e-5, rtol=1e-4, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if hasattr(a, "__dict__") and not isinstance(a, type) and not callable(a):
        return type(a) is type(b) and same(vars(a), vars(b))
    return type(a) is type(b) and a == b


def check(fn, *args, **kwargs):
    """Runs the capture and eager on deep copies of the arguments; asserts equal results and equal
    argument state afterwards (side effects). Returns the capture info."""
    eager_args = copy.deepcopy((args, kwargs))
    expected = fn(*eager_args[0], **eager_args[1])
    got, info = T.run(fn, args, kwargs)
    assert same(expected, got), f"result differs:\n eager={expected!r}\n captured={got!r}\n{info['graph']}"
    assert same(eager_args[0], args), "argument state differs after the call (side effects)"
    return info
