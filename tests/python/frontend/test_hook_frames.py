"""The frame hook's CPython mechanics, without torch: cache hits that never hand the frame to the
evaluator (3.12 clears and pops it itself), data-stack chunk boundaries, exceptions, generators,
closures. Runs on every supported interpreter, with or without torch installed (pure_python: the
py312 and py313 lanes load the _C built for them without the package).
"""
import collections
import sys

import pytest

try:
    import torch  # noqa: F401
    from framefuse import _C
except ImportError:  # an interpreter without torch: load the extension module alone
    from test_bytecode_asm import _C

pytestmark = [pytest.mark.pure_python,
              pytest.mark.skipif(not _C.FRAME_EVAL_SUPPORTED, reason="frame evaluation needs CPython 3.11 to 3.13")]


def empty_graph():
    g = _C.graph.Graph()
    g.output(())
    return g


def passthrough_spec(code, locals_):
    """Returns (a, b) rebuilt from the frame's sources; guards on type(a) and b's value."""
    return {"graph": empty_graph(), "inputs": [],
            "guards": [("type", ("local", 0, "a"), type(locals_[0])), ("equals", ("local", 1, "b"), locals_[1])],
            "output": ("tuple", [("src", ("local", 0, "a")), ("src", ("local", 1, "b")), ("const", "k")])}


@pytest.fixture
def spec_tracer():
    installed = []

    def install(fn):
        _C._reset()
        _C._testing.set_tracer(fn, torch_free=True)
        installed.append(fn)
    yield install
    _C._testing.set_tracer(None)
    _C._reset()


def compiled(fn, fullgraph=False):
    return _C._compile_callable(fn, "eager", fullgraph, None, None, fn.__code__)


def pair(a, b):
    return ("native", a, b)


def test_cache_hit_returns_capture_result_and_keeps_refcounts(spec_tracer):
    spec_tracer(passthrough_spec)
    f = compiled(pair)
    a = object()
    b = 12345678
    initial = (sys.getrefcount(a), sys.getrefcount(b))
    assert f(a, b) == (a, b, "k")
    before = (sys.getrefcount(a), sys.getrefcount(b))  # the cache holds the guards' expected values
    for _ in range(10000):
        assert f(a, b) == (a, b, "k")
    assert (sys.getrefcount(a), sys.getrefcount(b)) == before
    s = _C._frame_eval_stats()
    assert s["frames_compiled"] == 1 and s["cache_hits"] == 10000
    assert f(a, 3) == (a, 3, "k") and _C._frame_eval_stats()["recompiles"] == 1
    assert not _C._hook_installed()
    _C._reset()
    assert (sys.getrefcount(a), sys.getrefcount(b)) == initial


def recurse(n, f, a):
    if n == 0:
        return f(a, 1)
    return recurse(n - 1, f, a)


def test_cache_hits_at_every_stack_depth(spec_tracer):
    # Frames land at every offset of the thread's data stack, including the first slot of a new
    # chunk, whose release frees the chunk (3.12).
    spec_tracer(passthrough_spec)
    f = compiled(pair)
    a = []
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))
    try:
        for depth in range(0, 2000):
            assert recurse(depth, f, a) == (a, 1, "k")
    finally:
        sys.setrecursionlimit(limit)
    assert sys.getrefcount(a) == 2


def raising_type(*args):
    raise ValueError("built from the plan")


def test_exception_while_building_the_result_propagates(spec_tracer):
    def spec(code, locals_):
        s = passthrough_spec(code, locals_)
        s["output"] = ("tuple", [("src", ("local", 0, "a"))], raising_type)
        return s
    spec_tracer(spec)
    f = compiled(pair)
    a = object()
    rc = sys.getrefcount(a)
    for _ in range(1000):
        with pytest.raises(ValueError, match="built from the plan"):
            f(a, 2)
    assert sys.getrefcount(a) == rc
    assert f is not None and not _C._hook_installed()


def test_fullgraph_error_releases_the_frame(spec_tracer):
    spec_tracer(lambda code, locals_: {"unsupported": "call to print"})
    f = compiled(pair, fullgraph=True)
    a = object()
    rc = sys.getrefcount(a)
    for _ in range(500):
        with pytest.raises(_C.Unsupported, match="call to print"):
            f(a, 2)
    assert sys.getrefcount(a) == rc


def test_unsupported_frame_runs_natively_once_traced(spec_tracer):
    calls = []
    spec_tracer(lambda code, locals_: calls.append(code.co_name) or {"unsupported": "nope"})
    f = compiled(pair)
    for i in range(5):
        assert f(i, i) == ("native", i, i)
    assert calls == ["pair"]
    assert _C._code_cache_info(pair.__code__)["strategy"] == "skip"


def gen(a, b):
    yield a
    yield b


def test_generators_run_natively(spec_tracer):
    calls = []
    spec_tracer(lambda code, locals_: calls.append(code.co_name) or passthrough_spec(code, locals_))
    g = compiled(gen)
    assert list(g(1, 2)) == [1, 2]
    it = g(3, 4)
    assert next(it) == 3
    with pytest.raises(KeyError):
        it.throw(KeyError("x"))
    assert calls == []


def make_closure():
    secret = object()

    def inner(a, b):
        return secret
    return inner, secret


def test_closure_source_and_nested_native_frames(spec_tracer):
    inner, secret = make_closure()

    def spec(code, locals_):
        idx = code.co_freevars.index("secret")
        return {"graph": empty_graph(), "inputs": [], "guards": [],
                "output": ("tuple", [("src", ("closure", idx, "secret")), ("src", ("local", 1, "b"))])}
    spec_tracer(spec)
    f = _C._compile_callable(inner, "eager", False, None, None, inner.__code__)
    for i in range(100):
        assert f(None, i) == (secret, i)


def test_disabled_callable_runs_natively_inside_compiled_code(spec_tracer):
    calls = []
    spec_tracer(lambda code, locals_: calls.append(code.co_name) or {"unsupported": "outer falls back"})
    helper = _C._disable_callable(pair)

    def outer(a, b):
        return helper(a, b)
    f = compiled(outer)
    assert f(1, 2) == ("native", 1, 2)
    assert calls == ["outer"]


def test_threads_see_their_own_hook_state(spec_tracer):
    import threading
    spec_tracer(passthrough_spec)
    f = compiled(pair)
    out = collections.Counter()

    def work():
        for _ in range(2000):
            out[f(out, 5) == (out, 5, "k")] += 1
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert out == {True: 8000}
    assert not _C._hook_installed()
