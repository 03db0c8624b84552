"""Graph breaks that split a frame: the graph before the break, the break instruction run natively
by a generated stub, and resume functions (captured in turn) for what follows. Every case is
compared with eager (results, Python state, printed output, exceptions) with graph and break
counts asserted."""
import inspect
import logging
import os
import sys
import traceback

import pytest
import torch

import framefuse
from framefuse import _C
from check_modes import MODES, check_mode
from thread_util import run_threads


pytestmark = pytest.mark.usefixtures("fresh_framefuse")


def same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
        assert torch.allclose(a, b), (a, b)
        assert a.requires_grad == b.requires_grad
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            same(a[k], b[k])
    else:
        assert a == b, (a, b)


def run_both(fn, *args, calls=3, capsys=None):
    """fn compiled vs eager on the same arguments; returns the stats after the compiled calls."""
    cf = framefuse.compile(fn, backend="eager")
    for _ in range(calls):
        expected = fn(*args)
        eager_out = capsys.readouterr().out if capsys else None
        got = cf(*args)
        same(expected, got)
        if capsys:
            assert capsys.readouterr().out == eager_out
    return _C._frame_eval_stats()


X = torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2.5


# ---- break sites -----------------------------------------------------------------------------


def branch(x):
    y = x * 2
    if y.sum() > 0:
        z = y + 1
    else:
        z = y - 1
    return z * 3


def test_branch_on_a_tensor_value_both_directions():
    cf = framefuse.compile(branch, backend="eager")
    pos, neg = X.abs() + 1, -X.abs() - 1
    for x in (pos, neg, pos, neg):
        same(branch(x), cf(x))
    s = _C._frame_eval_stats()
    assert s["frames_split"] == 1 and s["graph_breaks"] == 1
    # the graph before the jump, then one resume function per direction, each with its graph
    assert s["frames_compiled"] == 3
    assert s["resume_calls"] == 4


def with_print(x):
    y = x.sin()
    print("y is", y.shape)
    return y.cos() + 1


def test_print(capsys):
    s = run_both(with_print, X, capsys=capsys)
    assert s["frames_split"] == 1 and s["frames_compiled"] == 2 and s["graph_breaks"] == 1


log = logging.getLogger("framefuse_test_user")


def with_logging(x):
    y = x + 1
    log.warning("value %d", 3)
    return y * y


def test_logging(caplog):
    caplog.set_level(logging.WARNING, logger="framefuse_test_user")
    s = run_both(with_logging, X)
    assert caplog.text.count("value 3") == 6
    assert s["frames_split"] >= 1 and s["frames_compiled"] >= 2


def with_item(x):
    v = x.sum().item()
    if v > 0:
        return x * v
    return x - v


def with_tolist(x):
    values = (x * 2).tolist()
    total = 0
    for row in values:
        total += sum(row)
    return x + total


def test_item_and_tolist_feed_python():
    run_both(with_item, X)
    run_both(with_item, X + 10)
    s = run_both(with_tolist, X)
    assert s["frames_split"] >= 2


def with_c_function(x):
    y = x + 1
    pid = os.getpid()
    return y * (pid > 0)


def test_unknown_c_function():
    s = run_both(with_c_function, X)
    assert s["frames_split"] == 1 and s["frames_compiled"] == 2


def with_graph_break(x):
    y = x * 2
    framefuse.graph_break()
    return y + 1


def test_explicit_graph_break():
    s = run_both(with_graph_break, X)
    assert s["frames_split"] == 1 and s["frames_compiled"] == 2


calls_of_disabled = []
# NB: torch < 2.1 has no torch.compiler (the test using it is skipped there).
_torch_disable = getattr(getattr(torch, "compiler", None), "disable", lambda fn: fn)


@_torch_disable
def disabled_helper(x):
    # Runs natively: a compiled frame would not append (the trace models the list, not this one).
    calls_of_disabled.append(torch.compiler.is_compiling())
    return x.exp()


def with_torch_markers(x):
    y = x * 2
    torch._dynamo.graph_break()
    z = disabled_helper(y)
    return z + 1


@pytest.mark.skipif(not hasattr(torch, "compiler"), reason="torch.compiler (torch >= 2.1)")
def test_torch_markers_are_honoured():
    # As under torch.compile: torch._dynamo.graph_break() splits the frame, a torch.compiler.disable
    # function runs natively (called from the stub, not inlined: is_compiling() is False there).
    calls_of_disabled.clear()
    report = framefuse.explain(with_torch_markers)(X)
    reasons = [b.reason for b in report.break_reasons]
    assert reasons == ["[FF0016] graph_break() called: torch._dynamo.graph_break",
                       "[FF0023] call to a function marked to run natively: disabled_helper"], reasons
    assert report.graph_count == 2  # x * 2, then z + 1: the disabled function is no graph
    framefuse.reset()
    calls_of_disabled.clear()
    s = run_both(with_torch_markers, X)
    assert s["frames_split"] == 2 and s["internal_errors"] == 0
    # Eager's three calls, then the compiled ones: never seen as compiling from inside.
    assert calls_of_disabled == [False] * 6


def inner(x):
    print("inner")
    return x * 3


def outer(x):
    y = inner(x + 1)
    return y - 1


def test_break_inside_an_inlined_function(capsys):
    s = run_both(outer, X, capsys=capsys)
    # outer breaks at the call; inner is captured in its own frame (and splits at its print)
    assert s["frames_split"] == 2
    assert _C._code_cache_info(inner.__code__)["strategy"] == "compile"


# ---- loops -----------------------------------------------------------------------------------


def loop_range(x, n):
    for i in range(n):
        x = x + i
        print("step", i)
        x = x * 0.5
    return x


def loop_list(x, weights):
    out = []
    for w in weights:
        x = x * w
        framefuse.graph_break()
        out.append(x.sum())
    return x, out


def test_break_inside_loops(capsys):
    s = run_both(loop_range, X, 4, capsys=capsys)
    assert s["frames_split"] >= 1
    run_both(loop_list, X, [1.0, 2.0, 0.5])


def twenty_breaks(x, n):
    for i in range(n):
        x = x + 1
        framefuse.graph_break()
        x = x * 0.5
        framefuse.graph_break()
        x = x - 0.25
        if i % 3 == 0:
            framefuse.graph_break()
        for _ in range(3):
            framefuse.graph_break()
            x = x + 0.125
        framefuse.graph_break()
        framefuse.graph_break()
        x = x.sin()
        framefuse.graph_break()
        x = x.cos()
        for _k in range(9):
            framefuse.graph_break()
    return x


def test_twenty_breaks_in_a_loop_without_recursion():
    same(twenty_breaks(X, 3), framefuse.compile(twenty_breaks, backend="eager")(X, 3))
    cf = framefuse.compile(twenty_breaks, backend="eager")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(300)  # the trampoline must not nest a frame per break
    try:
        got = cf(X, 2000)
    finally:
        sys.setrecursionlimit(limit)
    same(twenty_breaks(X, 2000), got)
    assert _C._frame_eval_stats()["frames_split"] >= 5


# ---- blocks ----------------------------------------------------------------------------------


def in_no_grad(x):
    y = x * 2
    with torch.no_grad():
        z = y * 3
        print("inside", torch.is_grad_enabled())
        w = z + y
    print("after", torch.is_grad_enabled())
    return w, y + 1


def test_break_inside_no_grad(capsys):
    x = X.clone().requires_grad_(True)
    run_both(in_no_grad, x, capsys=capsys)
    assert torch.is_grad_enabled()


def in_try(x, out):
    try:
        y = x + 1
        print("in try")
        out.append("try")
        y = y / 0.5
    except ValueError:
        out.append("except")
        y = x
    finally:
        out.append("finally")
    return y


def raising_in_try(x, out):
    y = x * 2
    try:
        os.stat("")  # the break instruction itself raises
        out.append("not reached")
    except FileNotFoundError:
        out.append("caught")
        y = y + 1
    for _ in range(2):
        try:
            os.stat("")
        except OSError:
            out.append("again")
    return y - 1


def test_break_inside_try_except_finally(capsys):
    out_e, out_c = [], []
    cf = framefuse.compile(in_try, backend="eager")
    for _ in range(2):
        same(in_try(X, out_e), cf(X, out_c))
    assert out_e == out_c
    out_e, out_c = [], []
    cf = framefuse.compile(raising_in_try, backend="eager")
    for _ in range(2):
        same(raising_in_try(X, out_e), cf(X, out_c))
    assert out_e == out_c


def closures(x):
    scale = 2

    def times(t):
        return t * scale

    print("break")
    y = times(x)
    scale = 3
    return y + times(x), (lambda: scale)()


def test_cells_and_closures_live_across_the_break(capsys):
    run_both(closures, X, capsys=capsys)


def combine(a, b):
    return a + (0 if b is None else b)


def null_on_stack(x):
    y = x * 2
    return combine(y, print("side"))


def keyword_call(x):
    y = x + 1
    print("kw", end="!\n", sep="-")
    z = combine(a=y, b=print("also", flush=True))
    return z


def test_null_stack_entries_and_keyword_calls(capsys):
    run_both(null_on_stack, X, capsys=capsys)
    run_both(keyword_call, X, capsys=capsys)


# ---- exceptions, frames, caching ---------------------------------------------------------------


def raises_after_break(x):
    y = x + 1
    print("before")
    if y.shape[0] == 2:
        raise ValueError("after the break")
    return y


def test_exception_after_a_break_names_the_user_line(capsys):
    cf = framefuse.compile(raises_after_break, backend="eager")
    for _ in range(2):
        with pytest.raises(ValueError, match="after the break") as e:
            cf(X)
        last = traceback.extract_tb(e.value.__traceback__)[-1]
        assert last.filename == __file__
        assert last.lineno == raises_after_break.__code__.co_firstlineno + 4
        assert last.line.strip() == 'raise ValueError("after the break")'


def frames_after_break(x):
    y = x + 1
    framefuse.graph_break()
    here = sys._getframe()
    info = inspect.getframeinfo(inspect.currentframe())
    # NB: not here.f_lineno after the next break: the frame object of a split frame stops at the
    # line where its part ended.
    return y, here.f_code.co_filename, here.f_code.co_name, info.lineno, info.filename, info.function


def test_getframe_and_inspect_after_a_break():
    run_both(frames_after_break, X)


SCALE = 2


def scaled(x):
    y = x * 2
    print("scaling")
    return y * SCALE


def test_resume_functions_are_cached_and_recompile_on_guard_failure(capsys):
    global SCALE
    cf = framefuse.compile(scaled, backend="eager")
    SCALE = 2
    same(scaled(X), cf(X))
    generated = _C._frame_eval_stats()["codes_generated"]
    assert generated == 2  # one stub, one resume function
    for _ in range(5):
        same(scaled(X), cf(X))
    assert _C._frame_eval_stats()["codes_generated"] == generated
    SCALE = 5  # read only after the break: the resume function's guard fails, not the frame's
    same(scaled(X), cf(X))
    same(scaled(X), cf(X))
    s = _C._frame_eval_stats()
    assert s["recompiles"] == 1 and s["frames_compiled"] == 3
    assert s["codes_generated"] == generated
    assert len(_C._code_cache_info(scaled.__code__)["guards"]) == 1


@pytest.mark.parametrize("mode", MODES)
def test_two_threads(mode):
    """Two threads calling a function whose resume function has one cache entry per loop counter.
    torch's per-tensor getters release the GIL in the middle of a guard check, so the other thread
    compiles and reorders entries meanwhile: the entry that runs must be the one that was checked.
    A tiny switch interval and fifty fresh caches make those hand-offs frequent (before the fix,
    about one call in a hundred here ran another loop counter's entry)."""
    expected = loop_range(X, 6)  # seven entries for the resume function, under the limit of 8

    def work(cf):
        for _ in range(20):
            same(expected, cf(X, 6))

    errors = []
    with check_mode(mode):
        for _ in range(50):
            framefuse.reset()
            cf = framefuse.compile(loop_range, backend="eager")
            errors += run_threads(work, [(cf,), (cf,)], switch_interval=1e-5)
    assert not errors, f"{len(errors)} wrong results, first: {errors[0]!r}"


def mutates(x, state):
    state["a"] = 1
    state["items"].append(x.sum())
    print("mid")
    state["b"] = len(state["items"])
    return x * state["b"]


def test_python_state_matches_eager(capsys):
    se = {"items": []}
    sc = {"items": []}
    cf = framefuse.compile(mutates, backend="eager")
    for _ in range(3):
        same(mutates(X, se), cf(X, sc))
    assert se.keys() == sc.keys() and se["b"] == sc["b"] and len(se["items"]) == len(sc["items"])


def test_fullgraph_still_raises_at_the_first_break():
    cf = framefuse.compile(with_print, backend="eager", fullgraph=True)
    with pytest.raises(framefuse.Unsupported) as e:
        cf(X)
    assert str(e.value).startswith("[FF0003] call to print\n")


def while_tensor(x):
    n = 0
    while x.sum() > 0:  # 3.11: a backward conditional jump at the loop's end
        x = x - 1
        n += 1
    return x, n


def and_or(x, y):
    if (x.sum() > 0 and y.sum() > 0) or x.max() > 3:
        return x + y
    return x - y


def iterators(x, d, ws):
    for k, v in d.items():
        x = x * v
        print(k)
    for i, w in enumerate(ws):
        x = x + i * w
        framefuse.graph_break()
    return x


def test_more_jumps_and_iterators(capsys):
    s = run_both(while_tensor, torch.tensor([3.0, 1.0]))
    assert s["frames_split"] >= 2
    run_both(and_or, torch.ones(2), -torch.ones(2))
    run_both(and_or, torch.ones(2), torch.ones(2))
    run_both(iterators, torch.ones(2), {"a": 2.0, "b": 3.0}, [1.0, 2.0, 3.0], capsys=capsys)
    assert _C._frame_eval_stats()["internal_errors"] == 0


def logged(x):
    y = x.exp()
    framefuse.graph_break()
    return y.log()


def test_logs_name_the_split_and_show_the_generated_code(caplog):
    framefuse.set_logs("graph_breaks,bytecode,graph_code,compile_times")
    caplog.set_level(logging.INFO, logger="framefuse")
    run_both(logged, X.abs())
    text = caplog.text
    assert text.count("(the frame is split): [FF0016] graph_break() called: framefuse.graph_break") == 1
    assert f"{__file__}:{logged.__code__.co_firstlineno + 2} in logged" in text
    # the break's line of source under its location
    assert f"at {__file__}:{logged.__code__.co_firstlineno + 2}\n      framefuse.graph_break()" in text
    assert text.count("GRAPH BREAK STUB at offset") == 1 and text.count("RESUME FUNCTION at offset") == 1
    assert "ORIGINAL BYTECODE" in text and f"__resume_logged_at_{logged.__code__.co_firstlineno + 2}" in text
    assert text.count("GRAPH for ") == 2
    assert "__resume_logged_at_" in text and "capture " in text and "backend " in text


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 4)
        self.b = torch.nn.Linear(4, 2)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.sum() > 0:
            print("positive")
        h = h * 2
        print("mid", h.shape)
        return self.b(h).softmax(-1)


def test_module_forward_with_breaks_and_gradients(capsys):
    torch.manual_seed(0)
    m = Net()
    cm = framefuse.compile(m, backend="eager")
    for _ in range(2):
        xe = X.clone().requires_grad_(True)
        xc = X.clone().requires_grad_(True)
        e = m(xe)
        e.sum().backward()
        out = capsys.readouterr().out
        c = cm(xc)
        c.sum().backward()
        assert capsys.readouterr().out == out
        same(e, c)
        assert torch.allclose(xe.grad, xc.grad)
    s = _C._frame_eval_stats()
    assert s["frames_split"] >= 2 and s["internal_errors"] == 0


def test_break_records_for_explain():
    report = framefuse.explain(branch)(X.abs())
    assert report.graph_count == 2 and report.graph_break_count == 1
    (br,) = report.break_reasons
    assert br.split and br.reason.startswith("[FF0001] branch on a tensor value")
    assert br.user_stack == [f"{__file__}:{branch.__code__.co_firstlineno + 2} in branch"]
    (rec,) = _C._graph_break_records()
    assert rec["id"] == "FF0001" and rec["split"] and rec["lineno"] == branch.__code__.co_firstlineno + 2


def recursive_closure(x):
    def rec(n):
        return x if n == 0 else rec(n - 1) + 1

    print("break")
    return rec(2)


def self_containing(x):
    lst = [x]
    lst.append(lst)
    print("break")
    return len(lst), lst[0] + 1


def test_values_that_refer_to_themselves(capsys):
    # a cell holding the function that closes over it: rebuilt with the cycle
    s = run_both(recursive_closure, X, capsys=capsys)
    assert s["frames_split"] == 1 and s["internal_errors"] == 0
    framefuse.reset()
    # a list containing itself: the frame runs eagerly
    s = run_both(self_containing, X, capsys=capsys)
    assert s["frames_split"] == 0 and s["graph_breaks"] >= 1 and s["internal_errors"] == 0


class _Base(torch.nn.Module):
    def forward(self, x):
        return x * 2


class _Child(_Base):
    def forward(self, x):
        y = x + 1
        print("inside the child")
        return super().forward(y) + 1


def test_zero_argument_super_after_a_break_splits_the_frame(capsys):
    # super() reads the frame's first local as `self`: the stub and resume function keep `self` in
    # that slot (more cases in test_graph_break_super.py)
    m = _Child()
    s = run_both(m, X, capsys=capsys)
    assert s["frames_split"] == 1 and s["graph_breaks"] >= 1 and s["internal_errors"] == 0


BIG = []


def doubles_a_global_list(x):
    BIG.extend(BIG)   # read in full: every item would be a value and a guard
    return x * len(BIG)


def test_a_list_past_the_model_limit_breaks_and_runs_natively():
    """pyfuzz program 2:88202 doubled a global list on each call: framefuse modelled its 2**20 items
    one by one and took minutes where Python took seconds."""
    BIG[:] = list(range(2000))
    report = framefuse.explain(doubles_a_global_list)(X)
    assert any("a list of 2000 items read in full" in br.reason for br in report.break_reasons), report.break_reasons
    BIG[:] = list(range(3000))
    f = framefuse.compile(doubles_a_global_list, backend="eager")
    assert torch.equal(f(X), X * 6000) and len(BIG) == 6000
    BIG[:] = [1, 2]
    assert torch.equal(f(X), X * 4) and BIG == [1, 2, 1, 2]


def test_frames_of_packages_without_tensor_code_run_natively():
    # torch calls into sympy and mpmath lazily (F.max_unpool1d's first call imports sympy) from
    # inside a user's compiled region; those frames (functions they make with exec() among them)
    # are not traced. A function of any other module called the same way is.
    where = {}
    for module in ("sympy.fake", "userlib.fake"):
        ns = {"__name__": module}
        exec("def helper(t):\n    return (t * 2).sum().item()\n", ns)

        def f(a, b, key=ns["helper"]):
            return sorted([a, b], key=key)   # sorted() calls the key natively

        report = framefuse.explain(f)(torch.ones(2), torch.zeros(2))
        where[module] = [b.where.split(" ")[0].split(".")[-1] for b in report.break_reasons]
    assert where == {"sympy.fake": ["f"], "userlib.fake": ["f", "helper"]}


@pytest.mark.skipif(not hasattr(torch, "compiler"), reason="torch.compiler (torch >= 2.1)")
def test_a_torch_compiled_function_is_left_to_torch_compile():
    # framefuse stays out of everything torch.compile runs (Dynamo hands the frames it does not
    # compile to the previous frame hook, framefuse's): the call is a break, torch compiles it.
    import time
    import torch._dynamo
    torch._dynamo.reset()
    seen = []

    def recording(gm, example_inputs):
        seen.append(len(gm.graph.nodes))
        return gm.forward

    inner = torch.compile(lambda t: torch.sin(t) * 2, backend=recording)
    module = torch.compile(torch.nn.Linear(3, 3), backend=recording)

    def outer(t):
        return inner(t) + module(t).sum()

    report = framefuse.explain(outer)(X)
    assert [b.reason.split(":")[0] for b in report.break_reasons] == \
        ["[FF0024] call to a function compiled by torch.compile"] * 2, report.break_reasons
    framefuse.reset()
    start = time.perf_counter()
    got = framefuse.compile(outer)(X)
    assert time.perf_counter() - start < 60  # it used to compile torch's compiler for many minutes
    torch.testing.assert_close(got, outer(X))
    assert len(seen) >= 2  # torch.compile compiled both (once in explain's run)
    torch._dynamo.reset()



def test_a_context_manager_written_in_c_breaks_as_one():
    import threading

    lock = threading.Lock()

    def f(x):
        with lock:
            return x + 1

    with pytest.raises(framefuse.Unsupported, match=r"\[FF0017\]"):
        framefuse.compile(f, fullgraph=True)(torch.ones(2))
    framefuse.reset()
    assert torch.equal(framefuse.compile(f)(torch.ones(2)), torch.ones(2) + 1) and not lock.locked()


def test_profiler_ranges_are_no_ops_in_compiled_code():
    # torch.autograd.profiler.record_function (the optimizers' step wrapper uses it) changes nothing
    # compiled code computes: one graph, as under torch.compile, which drops the range too; a break
    # inside the block resumes in a plain context manager.
    def f(x):
        with torch.autograd.profiler.record_function("scaled"):
            y = x * 3
        with torch.profiler.record_function("shifted"):
            return y + 1

    def g(x):
        with torch.autograd.profiler.record_function("around a break"):
            y = x * 3
            print("", end="")
            return y + 1

    x = torch.randn(5)
    report = framefuse.explain(f)(x)
    assert report.graph_count == 1 and report.graph_break_count == 0
    framefuse.reset()
    assert torch.equal(framefuse.compile(f)(x), f(x))
    framefuse.reset()
    assert torch.equal(framefuse.compile(g)(x), g(x))
    with torch.profiler.profile() as prof:  # the compiled code runs under a live profiler too
        assert torch.equal(framefuse.compile(f)(x), f(x))
    assert prof.key_averages() is not None
