"""A user's TorchDispatchMode sees eager's ops: a compiled function entered under one runs
uncompiled (as torch.compile does), and compiles on a later call made outside the mode. Found by
PyTorch's Dynamo tests (test_misc's test_compile_non_infra_*): framefuse's own calls (a kernel's
output allocation, its tracing) reached the mode's handler, which raised."""
import pytest
import torch

import framefuse
import framefuse.inductor

TorchDispatchMode = pytest.importorskip("torch.utils._python_dispatch").TorchDispatchMode


class Recording(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


class AddIsMul(TorchDispatchMode):
    """A mode that changes results: what it returns is what eager returns."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.add.Tensor:
            return torch.ops.aten.mul.Tensor(args[0], args[1])
        return func(*args, **(kwargs or {}))


def f(x, y):
    return torch.relu(x + y) * 2


@pytest.mark.parametrize("backend", ["graph.run", "inductor"])
def test_mode_sees_the_ops_eager_runs(backend):
    framefuse.reset()
    graphs = []

    @framefuse.backends.native_graph
    def counting(graph, example_inputs):
        graphs.append(len(graph))
        if backend == "inductor" and framefuse.inductor.codegen_available():
            return framefuse.inductor.compile_graph(graph, example_inputs)
        return graph.run

    x, y = torch.randn(4, 3), torch.randn(4, 3)
    g = framefuse.compile(f, backend=counting)
    with Recording() as eager_mode:
        want = f(x, y)
    with Recording() as mode:
        got = g(x, y)
    assert torch.equal(got, want)
    assert mode.ops == eager_mode.ops and "add" in mode.ops
    assert graphs == []
    # Outside the mode the function compiles; under it again, the compiled code is not used.
    assert torch.equal(g(x, y), want) and len(graphs) == 1
    with Recording() as mode:
        again = g(x, y)
    assert torch.equal(again, want) and mode.ops == eager_mode.ops


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_mode_that_changes_results(backend):
    framefuse.reset()
    x, y = torch.full((3,), 3.0), torch.full((3,), 4.0)
    g = framefuse.compile(f, backend=backend)
    assert torch.equal(g(x, y), f(x, y))   # compiled first, outside the mode
    with AddIsMul():
        assert torch.equal(g(x, y), torch.full((3,), 24.0))   # relu(3 * 4) * 2, as eager under the mode


def test_compiled_inside_a_handler_compiles():
    """The handler runs with its mode off: a function compiled there is compiled."""
    framefuse.reset()
    graphs = []

    @framefuse.backends.native_graph
    def counting(graph, example_inputs):
        graphs.append(1)
        return graph.run

    inner = framefuse.compile(lambda a, b: torch.sub(a, b), backend=counting)

    class SubInHandler(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.add.Tensor:
                return inner(args[0], args[1])
            return func(*args, **(kwargs or {}))

    x = torch.ones(3)
    with SubInHandler():
        out = torch.add(x, x)
    assert torch.equal(out, torch.zeros(3)) and graphs == [1]


# ---- torch.func transforms: their wrapped tensors have no storage a kernel could read ----------------


def square_affine(x):
    return x.square() * 2 + 1


@pytest.mark.skipif(not hasattr(torch, "func"), reason="torch.func is torch 2's")
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_transforms_of_a_compiled_function(backend):
    framefuse.reset()
    g = framefuse.compile(square_affine, backend=backend)
    x = torch.rand(4, 3, dtype=torch.float64)
    assert torch.equal(g(x[0]), square_affine(x[0]))   # compiled first, outside any transform
    assert torch.equal(torch.vmap(g)(x), torch.vmap(square_affine)(x))
    assert torch.equal(torch.func.jacfwd(g)(x[0]), torch.func.jacfwd(square_affine)(x[0]))
    assert torch.equal(torch.func.grad(lambda t: g(t).sum())(x[0]), 4 * x[0])


@pytest.mark.skipif(not hasattr(torch, "func"), reason="torch.func is torch 2's")
def test_compiled_function_calling_a_transform():
    # Dynamo's test_jacfwd_one_hot_dynamic_compile: one_hot under jacfwd's wrapped tensors.
    def func(x, idxs):
        return x.square() * torch.nn.functional.one_hot(idxs, 3)

    def jacfunc(x, idxs):
        return torch.func.jacfwd(func, argnums=(0,))(x, idxs)

    framefuse.reset()
    idxs = torch.tensor([0, 2, 1, 1, 0])
    x = torch.rand(5, 3, dtype=torch.float64)
    assert torch.equal(framefuse.compile(jacfunc, backend="inductor")(x, idxs)[0], jacfunc(x, idxs)[0])
