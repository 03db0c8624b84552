"""Running a capture: inputs by source, outputs per plan, side effects, exceptions, memory."""
import collections
import gc

import pytest
import torch

import framefuse
from framefuse.graph import Graph
from capture_specs import stats, tracer
from mem_util import assert_rss_growth_below, rss_kb

STATE = {}
COUNTER = 0


def one_op_spec(code, locals_, op):
    """op(first argument), the first argument tensor-guarded."""
    x = locals_[0]
    g = Graph()
    g.output((g.call(op, g.placeholder(code.co_varnames[0], x)),))
    src = ("local", 0, code.co_varnames[0])
    return {"graph": g, "inputs": [src], "guards": [("tensor", src, x)], "output": ("out", 0)}


def test_output_plan_structures():
    Pair = collections.namedtuple("Pair", "a b")

    def f(x, n):
        return Pair(torch.relu(x), [n, {"k": x}])

    def capture(code, locals_):
        spec = one_op_spec(code, locals_, torch.relu)
        spec["output"] = ("tuple", [("out", 0), ("list", [("const", locals_[1]), ("dict", ["k"], [("src", ("local", 0, "x"))])])], Pair)
        spec["guards"].append(("equals", ("local", 1, "n"), locals_[1]))
        return spec
    with tracer(capture):
        cf = framefuse.compile(f, backend="eager")
        x = torch.randn(3)
        out = cf(x, 7)
        assert type(out) is Pair and torch.equal(out.a, torch.relu(x))
        assert out.b[0] == 7 and out.b[1]["k"] is x
        out = cf(x, 7)
        assert stats()["cache_hits"] == 1 and out.b[1]["k"] is x


class Box:
    pass


def test_side_effects_replay_in_order():
    box = Box()
    lst = [1, 2]

    def f(x, box, lst):
        global COUNTER
        y = torch.relu(x)
        box.last = y
        lst[:] = [y, 3]
        STATE["y"] = y
        COUNTER = 5
        return y

    def capture(code, locals_):
        spec = one_op_spec(code, locals_, torch.relu)
        spec["side_effects"] = [
            ("setattr", ("local", 1, "box"), "last", ("out", 0)),
            ("replace_list", ("local", 2, "lst"), ("list", [("out", 0), ("const", 3)])),
            ("dict_set", ("global", "STATE"), "y", ("out", 0)),
            ("store_global", "COUNTER", ("const", 5)),
        ]
        spec["guards"] += [("type", ("local", 1, "box"), Box), ("type", ("local", 2, "lst"), list)]
        return spec
    with tracer(capture):
        cf = framefuse.compile(f, backend="eager")
        for _ in range(2):
            x = torch.randn(3)
            y = cf(x, box, lst)
            assert torch.equal(y, torch.relu(x))
            assert box.last is y and lst[0] is y and lst[1] == 3 and STATE["y"] is y
            assert COUNTER == 5
        assert stats()["cache_hits"] == 1


def test_closure_input_and_cell_side_effect():
    def make():
        w = torch.randn(3)
        count = 0

        def f(x):
            nonlocal count
            count = 1
            return x * w
        return f, lambda: count
    f, get_count = make()

    def capture(code, locals_):
        idx = code.co_freevars.index("w")
        g = Graph()
        x = locals_[0]
        w = f.__closure__[idx].cell_contents
        px, pw = g.placeholder("x", x), g.placeholder("w", w)
        g.output((g.call(torch.mul, px, pw),))
        return {"graph": g, "inputs": [("local", 0, "x"), ("closure", idx, "w")],
                "guards": [("tensor", ("local", 0, "x"), x), ("tensor", ("closure", idx, "w"), w)],
                "output": ("out", 0),
                "side_effects": [("cell_set", ("closure", code.co_freevars.index("count"), "count"), ("const", 1))]}
    with tracer(capture):
        cf = framefuse.compile(f, backend="eager")
        x = torch.randn(3)
        assert torch.equal(cf(x), x * f.__closure__[f.__code__.co_freevars.index("w")].cell_contents)
        assert get_count() == 1


def test_exception_in_graph_propagates_and_the_function_keeps_working():
    def f(x, y):
        return x @ y

    def capture(code, locals_):
        x, y = locals_[0], locals_[1]
        g = Graph()
        g.output((g.call(torch.matmul, g.placeholder("x", x), g.placeholder("y", y)),))
        return {"graph": g, "inputs": [("local", 0, "x"), ("local", 1, "y")],
                "guards": [("tensor", ("local", 0, "x"), x), ("type", ("local", 1, "y"), torch.Tensor)],
                "output": ("out", 0)}
    with tracer(capture):
        cf = framefuse.compile(f, backend="eager")
        a, b = torch.randn(2, 3), torch.randn(3, 4)
        assert torch.equal(cf(a, b), a @ b)
        with pytest.raises(RuntimeError) as compiled_err:
            cf(a, torch.randn(5, 4))  # y is only type-guarded: the graph runs and matmul raises
        with pytest.raises(RuntimeError) as eager_err:
            f(a, torch.randn(5, 4))
        assert type(compiled_err.value) is type(eager_err.value)
        assert torch.equal(cf(a, b), a @ b)
        assert not framefuse._C._hook_installed()


def test_training_runs_through_autograd():
    lin = torch.nn.Linear(4, 3)

    def f(x, w, b):
        return torch.nn.functional.linear(x, w, b).sum()

    def capture(code, locals_):
        g = Graph()
        ps = [g.placeholder(n, v) for n, v in zip("xwb", locals_[:3])]
        g.output((g.call(torch.sum, g.call(torch.nn.functional.linear, *ps)),))
        srcs = [("local", i, n) for i, n in enumerate("xwb")]
        return {"graph": g, "inputs": srcs, "guards": [("tensor", s, v) for s, v in zip(srcs, locals_[:3])],
                "output": ("out", 0)}
    with tracer(capture):
        cf = framefuse.compile(f, backend="inductor")
        x = torch.randn(2, 4)
        loss = cf(x, lin.weight, lin.bias)
        loss.backward()
        gw = lin.weight.grad.clone()
        lin.weight.grad = None
        f(x, lin.weight, lin.bias).backward()
        assert torch.allclose(gw, lin.weight.grad)


def test_a_million_cached_calls_do_not_grow_memory():
    def f(x):
        return torch.relu(x)
    with tracer(lambda code, locals_: one_op_spec(code, locals_, torch.relu)):
        cf = framefuse.compile(f, backend="eager")
        x = torch.randn(8)
        for _ in range(20000):
            cf(x)
        gc.collect()
        before = rss_kb()
        for _ in range(1_000_000):
            cf(x)
        gc.collect()
        after = rss_kb()
        assert stats()["cache_hits"] == 1_019_999
    assert_rss_growth_below(after - before, 2048, "a million cached calls")
