"""allow_in_graph (framefuse.compiler's and torch.compiler's): a call of a marked function is one
opaque node of the graph; the function runs on the real tensors when the compiled code runs."""
import numpy as np
import pytest
import torch

import framefuse
import inductor_util as iu

pytestmark = pytest.mark.usefixtures("fresh_framefuse")

BACKENDS = ["eager", "inductor"]
calls = []


@framefuse.compiler.allow_in_graph
def numpy_tanh(x, w, scale=2.0):
    # NB: a numpy round trip framefuse cannot trace; typed on meta tensors while tracing
    calls.append(x.device.type)
    if x.device.type == "meta":
        return torch.empty_like(x @ w)
    return torch.from_numpy(np.tanh((x @ w).numpy()) * scale)


def _with_numpy(x, w):
    return numpy_tanh(torch.relu(x), w, 3.0) + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_untraceable_function_is_one_node(backend):
    x, w = torch.randn(4, 5), torch.randn(5, 3)
    calls.clear()
    fn = framefuse.compile(_with_numpy, backend=backend, fullgraph=True)
    for _ in range(2):
        torch.testing.assert_close(fn(x, w), torch.tanh(torch.relu(x) @ w) * 3.0 + 1)
    assert calls == ["meta", "cpu", "cpu"]  # typed once on meta tensors, then run on each call
    graphs, recording = iu.recording_backend()
    framefuse.reset()
    framefuse.compile(_with_numpy, backend=recording, fullgraph=True)(x, w)
    (code,) = graphs
    assert "allow_in_graph(" in code and "numpy_tanh" in code and "torch.relu" in code, code


def test_keyword_arguments_and_tuple_results():
    @framefuse.compiler.allow_in_graph
    def split_scale(x, *, factor):
        return x[:, :2] * factor, x[:, 2:].clone()

    def f(x):
        a, b = split_scale(x, factor=4)
        return a.sum(1) + b.sum(1)

    x = torch.randn(3, 5)
    for backend in BACKENDS:
        framefuse.reset()
        torch.testing.assert_close(framefuse.compile(f, backend=backend, fullgraph=True)(x), f(x))
    framefuse.reset()
    r = framefuse.compile(lambda t: split_scale(t, factor=2), fullgraph=True)(x)
    assert type(r) is tuple and len(r) == 2 and r[0] is not r[1]


def _returns_argument(x):
    return x


def _returns_view(x):
    return x.t()


def _writes_argument(x):
    x.add_(1)
    return x * 2


def _returns_list(x):
    return [x * 2, x * 3]


def _returns_same_twice(x):
    y = x * 2
    return y, y


@pytest.mark.parametrize("fn", [_returns_argument, _returns_view, _writes_argument, _returns_list, _returns_same_twice])
def test_what_cannot_be_one_node_breaks_and_keeps_eagers_result(fn):
    allowed = framefuse.compiler.allow_in_graph(fn)

    def f(x):
        return allowed(x + 1)

    x = torch.randn(3, 2)
    with pytest.raises(framefuse.Unsupported, match="allow_in_graph"):
        framefuse.compile(f, fullgraph=True)(x.clone())
    framefuse.reset()
    expected = f(x.clone())
    got = framefuse.compile(f)(x.clone())
    assert type(got) is type(expected)
    if isinstance(expected, torch.Tensor):
        assert torch.equal(got, expected)
    else:
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
        if expected[0] is expected[1]:
            assert got[0] is got[1]


def test_an_argument_that_is_not_a_tensor_or_constant_breaks():
    @framefuse.compiler.allow_in_graph
    def takes_dict(d):
        return d["x"] * 2

    with pytest.raises(framefuse.Unsupported, match="allow_in_graph"):
        framefuse.compile(lambda x: takes_dict({"x": x}), fullgraph=True)(torch.randn(2))


def test_gradients_flow_through_the_call():
    @framefuse.compiler.allow_in_graph
    def smooth(x, w):
        return torch.nn.functional.softplus(x @ w)

    def loss(x, w):
        return smooth(x, w).pow(2).sum()

    x = torch.randn(4, 3)
    w1, w2 = torch.randn(3, 2, requires_grad=True), None
    w2 = w1.detach().clone().requires_grad_()
    loss(x, w1).backward()
    framefuse.compile(loss, fullgraph=True)(x, w2).backward()
    torch.testing.assert_close(w2.grad, w1.grad)


def test_symbolic_sizes():
    @framefuse.compiler.allow_in_graph
    def rowwise(x):
        return torch.cumsum(x, 1).flip(0)

    fn = framefuse.compile(lambda x: rowwise(x * 2) + 1, dynamic=True, fullgraph=True)
    for n in (3, 5, 9):
        x = torch.randn(n, 4)
        torch.testing.assert_close(fn(x), torch.cumsum(x * 2, 1).flip(0) + 1)


def test_torch_allow_in_graph_is_honoured():
    allow = getattr(getattr(torch, "compiler", None), "allow_in_graph", None)
    if allow is None:
        pytest.skip("torch.compiler.allow_in_graph (torch >= 2.1)")

    def untraceable(x):
        return torch.from_numpy(np.sin(x.numpy())) if x.device.type != "meta" else torch.empty_like(x)

    allow(untraceable)
    x = torch.randn(6)
    fn = framefuse.compile(lambda t: untraceable(t * 2) - 1, fullgraph=True)
    torch.testing.assert_close(fn(x), torch.sin(x * 2) - 1)


def test_a_list_marks_each_function():
    def a(x):
        return x + 1

    def b(x):
        return x * 2

    assert framefuse.compiler.allow_in_graph([a, b]) == [a, b]
    graphs, recording = iu.recording_backend()
    framefuse.compile(lambda x: b(a(x)), backend=recording, fullgraph=True)(torch.randn(2))
    assert graphs[0].count("allow_in_graph(") == 2, graphs


def test_marking_an_op_the_registry_takes_changes_nothing():
    framefuse.compiler.allow_in_graph(torch.cos)  # as torch's allow_in_graph of an op: no change
    graphs, recording = iu.recording_backend()
    x = torch.randn(4)
    out = framefuse.compile(lambda t: torch.cos(t) + 1, backend=recording, fullgraph=True)(x)
    assert torch.equal(out, torch.cos(x) + 1)
    assert "torch.cos(" in graphs[0] and "allow_in_graph(" not in graphs[0], graphs
