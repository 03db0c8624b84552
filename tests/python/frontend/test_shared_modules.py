"""Modules are not specialized by identity (issue #28): the trace guards what it reads of a module
(its class, attributes, hooks, children, parameters as graph inputs), so layers of one class that
reach a compiled frame one after another share its compile, and a model made again reuses the
compiled code, with its own weights. Modules read as separate objects must stay separate on later
calls, and ones read as one object must stay one."""
import pytest
import torch

import framefuse
from framefuse import _C

BACKENDS = ["eager", "inductor"]


class Layer(torch.nn.Module):
    def __init__(self, scale=2.0):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scale = scale
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return torch.relu(self.lin(x)) * self.scale


class Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


class Stack(torch.nn.Module):
    def __init__(self, n, layer=Layer):
        super().__init__()
        self.layers = torch.nn.ModuleList([layer() for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
            framefuse.graph_break()   # each layer's call starts a resume function of its own frame
        return x


def run(model, x):
    return model(x)


def stats():
    return _C._frame_eval_stats()


def compiles_for(n, backend):
    """Frames compiled and recompiles over three calls of an n-layer stack (none in the third)."""
    framefuse.reset()
    before = stats()
    model, x = Stack(n, Plain), torch.randn(3, 4)
    compiled = framefuse.compile(run, backend=backend)
    for _ in range(2):
        torch.testing.assert_close(compiled(model, x), model(x))
    after_two = stats()
    torch.testing.assert_close(compiled(model, x), model(x))
    assert stats()["frames_compiled"] == after_two["frames_compiled"] and stats()["recompiles"] == after_two["recompiles"]
    return (after_two["frames_compiled"] - before["frames_compiled"], after_two["recompiles"] - before["recompiles"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_layers_of_one_class_share_a_compile(backend):
    # Each layer's call reaches the resume function after the break (and, called natively, the
    # layer's forward) with another layer: as many compiles for 6 layers as for 2.
    assert compiles_for(6, backend) == compiles_for(2, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_model_made_again_reuses_the_compile_with_its_own_weights(backend):
    framefuse.reset()
    compiled = framefuse.compile(run, backend=backend)
    x = torch.randn(3, 4)
    compiled(Stack(3), x)
    before = stats()
    for _ in range(3):
        fresh = Stack(3)   # new weights
        torch.testing.assert_close(compiled(fresh, x), fresh(x))
        assert all(layer.calls == 2 for layer in fresh.layers)   # attribute writes reach this model
    assert stats()["recompiles"] == before["recompiles"], stats()


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_the_trace_read_of_a_module_is_guarded(backend):
    framefuse.reset()
    compiled = framefuse.compile(run, backend=backend)
    x = torch.randn(3, 4)
    for scale in (2.0, 3.0, 2.0):
        layer = Layer(scale)
        torch.testing.assert_close(compiled(layer, x), layer(x))
    wide = torch.nn.Linear(4, 8)   # another class: its own compile
    torch.testing.assert_close(compiled(wide, x), wide(x))
    hooked = Layer()
    hooked.register_forward_hook(lambda m, i, o: o + 100)
    torch.testing.assert_close(compiled(hooked, x), hooked(x))


def twice(a, b, x):
    a.calls += 1
    b.calls += 10
    return a(x) + b(x), a.calls, b.calls


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_module_passed_twice_and_two_modules_stay_apart(backend):
    framefuse.reset()
    compiled = framefuse.compile(twice, backend=backend)
    x = torch.randn(3, 4)
    for same in (False, True, False, True):
        a = Layer()
        b = a if same else Layer()
        ea, eb = (Layer(), None)
        ea.load_state_dict(a.state_dict())
        eb = ea if same else Layer()
        if not same:
            eb.load_state_dict(b.state_dict())
        want, got = twice(ea, eb, x), compiled(a, b, x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:], (same, got[1:], want[1:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_id_of_a_module_still_pins_that_module(backend):
    def keyed(m, x):
        return m(x), id(m)

    framefuse.reset()
    compiled = framefuse.compile(keyed, backend=backend)
    x = torch.randn(3, 4)
    for layer in (Layer(), Layer()):
        assert compiled(layer, x)[1] == id(layer)
