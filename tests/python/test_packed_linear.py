"""CPU linear layers through MKL's packed GEMM (config cpu_pack_linear_weights,
inductor/python/packed_linear.h): float32 weights that are graph inputs are packed once they are
seen unchanged on two calls, repacked when they change, and never packed when they change every
call. Where torch has no torch.ops.mkl._mkl_linear (1.13) the layers run the ordinary linear."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import framefuse
from framefuse import _C
from framefuse.inductor import compile_graph
from thread_util import run_threads

pytestmark = [
    pytest.mark.usefixtures("fresh_framefuse"),
    pytest.mark.skipif(not _C.inductor.codegen_available(), reason="framefuse built without LLVM"),
]


def _has_packed_linear():
    try:
        return bool(torch.backends.mkl.is_available()) and hasattr(torch.ops.mkl, "_mkl_linear")
    except (AttributeError, RuntimeError):
        return False


PACKED = _has_packed_linear()
TOL = dict(rtol=1e-5, atol=1e-5)


class Mlp(nn.Module):
    """Three kinds of linear: bias added in a fused epilogue (gelu after it), bias added by torch
    (a graph output needs the product in memory), and no bias (a tied-head-like projection)."""

    def __init__(self, d=48, hidden=96, vocab=40):
        super().__init__()
        self.fc = nn.Linear(d, hidden)
        self.proj = nn.Linear(hidden, d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        h = self.proj(F.gelu(self.fc(x)))
        return self.head(x + h), h


def _compiled(model):
    graphs = []

    def backend(graph, example_inputs):
        cg = compile_graph(graph, example_inputs)
        graphs.append(cg)
        return cg

    return framefuse.compile(model, backend=backend), graphs


def _mlp(rows):
    """A seeded Mlp in eval mode, an input of `rows` rows, its compiled form and the graphs compiled."""
    torch.manual_seed(0)
    model = Mlp().eval()
    compiled, graphs = _compiled(model)
    return model, torch.randn(rows, 48), compiled, graphs


def _check(got, want):
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **TOL)
        assert g.shape == w.shape and g.stride() == w.stride()


def test_weights_are_packed_from_the_second_call_and_results_equal_eager():
    torch.manual_seed(0)
    model = Mlp().eval()
    x = torch.randn(2, 5, 48)
    compiled, graphs = _compiled(model)
    with torch.no_grad():
        for call in range(4):
            _check(compiled(x), model(x))
            (cg,) = graphs
            if call == 0:
                assert cg.packed_linear_calls == 0  # first sighting of each weight: ordinary linear
    assert cg.packed_linears == (3 if PACKED else 0)
    # Calls 2, 3 and 4 of each of the three layers ran packed.
    assert cg.packed_linear_calls == (9 if PACKED else 0)


def test_a_changed_weight_is_repacked():
    model, x, compiled, graphs = _mlp(3)
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
        model.fc.weight.mul_(-2)  # in place: same tensor, new version
        _check(compiled(x), model(x))
        _check(compiled(x), model(x))
        model.head.weight = nn.Parameter(torch.randn(40, 48))  # a new tensor: the guard recompiles
        _check(compiled(x), model(x))
        _check(compiled(x), model(x))
    if PACKED:
        assert graphs[0].packed_linear_calls > 0


def test_a_weight_that_changes_every_call_is_never_packed():
    def f(x, w):
        return torch.relu(F.linear(x, w)) * 2

    compiled, graphs = _compiled(f)
    x = torch.randn(8, 16)
    with torch.no_grad():
        for i in range(5):
            w = torch.randn(12, 16)
            _check((compiled(x, w),), (f(x, w),))
    (cg,) = graphs
    assert cg.packed_linears == (1 if PACKED else 0)
    assert cg.packed_linear_calls == 0


def test_the_knob_off_runs_the_ordinary_linear():
    torch.manual_seed(0)
    model = Mlp().eval()
    x = torch.randn(4, 48)
    with framefuse.config.patch(cpu_pack_linear_weights=False):
        compiled, graphs = _compiled(model)
        with torch.no_grad():
            for _ in range(3):
                _check(compiled(x), model(x))
    assert graphs[0].packed_linears == 0 and graphs[0].packed_linear_calls == 0


def test_other_dtypes_and_vector_inputs_are_not_packed():
    torch.manual_seed(0)
    model64 = Mlp().double().eval()
    lin = nn.Linear(16, 8).eval()
    with torch.no_grad():
        c64, g64 = _compiled(model64)
        x64 = torch.randn(4, 48, dtype=torch.float64)
        cvec, gvec = _compiled(lambda v: torch.relu(lin(v)))
        v = torch.randn(16)
        for _ in range(3):
            _check(c64(x64), model64(x64))
            _check((cvec(v),), (torch.relu(lin(v)),))
    assert g64[0].packed_linears == 0
    assert gvec[0].packed_linears == 0


def test_inference_mode_weights_are_never_packed():
    # Tensors made under inference_mode have no version counter: a write would go unseen.
    with torch.inference_mode():
        lin = nn.Linear(16, 8)
    compiled, graphs = _compiled(lambda x: torch.relu(lin(x)))
    x = torch.randn(4, 16)
    with torch.no_grad():
        for _ in range(3):
            _check((compiled(x),), (torch.relu(lin(x)),))
    assert graphs[0].packed_linear_calls == 0


def test_gradients_through_a_compiled_model_are_eager_ones():
    # Graphs that need autograd never run MKL's packed product (it has no derivative).
    torch.manual_seed(0)
    model = Mlp()
    x = torch.randn(4, 48)
    compiled = framefuse.compile(model, backend="inductor")
    for _ in range(3):
        out = compiled(x)
        out[0].sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x)[0].sum().backward()
        want = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, **TOL)


def test_two_threads_share_the_packed_weights():
    model, x, compiled, graphs = _mlp(6)
    with torch.no_grad():
        want = model(x)

    def work():
        with torch.no_grad():
            for _ in range(20):
                _check(compiled(x), want)

    errors = run_threads(work, [(), ()])
    assert not errors, errors[0]
    if PACKED:
        # NB: both threads may have compiled the first call (one graph each): count over all of them.
        assert sum(g.packed_linear_calls for g in graphs) > 0


def test_two_threads_bringing_different_weights_through_one_graph_get_their_own():
    # One compiled graph (the guards check the weights' layout, not their identity), so its layer
    # sees two weights: each call must use its own, packed or not, while torch lets the other
    # thread run in the middle of packing and multiplying.

    def f(x, w):
        return torch.relu(F.linear(x, w)) * 2

    torch.manual_seed(0)
    weights = [torch.randn(96, 48) for _ in range(2)]
    x = torch.randn(6, 48)
    compiled, graphs = _compiled(f)
    with torch.no_grad():
        want = [f(x, w) for w in weights]
        compiled(x, weights[0])  # compile once, before the threads

    def work(k):
        with torch.no_grad():
            for _ in range(300):
                _check((compiled(x, weights[k]),), (want[k],))

    errors = run_threads(work, [(0,), (1,)], switch_interval=1e-5)
    assert not errors, f"{len(errors)} wrong results, first: {errors[0]!r}"
    assert len(graphs) == 1
