"""CPU linear layers through MKL's packed GEMM (config cpu_pack_linear_weights,
inductor/python/packed_linear.h): float32 weights that are graph inputs are packed once they are
seen unchanged on two calls, repacked when they change, and never packed when they change every
call. The products equal torch.ops.mkl._mkl_linear's bit for bit and are written into the runtime's
own outputs (pooled when large). Where torch carries no MKL (Debian's 1.13) the layers run the
ordinary linear."""
import gc

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
        return bool(torch.backends.mkl.is_available())
    except (AttributeError, RuntimeError):
        return False


def _has_mkl_linear():
    try:
        return PACKED and hasattr(torch.ops.mkl, "_mkl_linear")
    except (AttributeError, RuntimeError):
        return False


PACKED = _has_packed_linear()
MKL_LINEAR = _has_mkl_linear()
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

    @framefuse.backends.native_graph
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


def _linear_graph(x, w, b):
    """A compiled graph of F.linear(x, w, b) (b may be None) whose weight is a graph input."""
    def f(x, w, *b):
        return (F.linear(x, w, *b),)

    compiled, graphs = _compiled(f)
    args = (x, w) if b is None else (x, w, b)
    return (lambda: compiled(*args)[0]), graphs


@pytest.mark.skipif(not MKL_LINEAR, reason="this torch has no torch.ops.mkl._mkl_linear to compare with")
@pytest.mark.parametrize("shape, n, bias", [((256, 96), 80, True), ((2, 7, 33), 130, True), ((64, 48), 1000, False),
                                            ((1, 5), 3, True)])
def test_products_equal_mkls_packed_linear_bit_for_bit(shape, n, bias):
    torch.manual_seed(0)
    x, w = torch.randn(*shape), torch.randn(n, shape[-1])
    b = torch.randn(n) if bias else None
    run, graphs = _linear_graph(x, w, b)
    rows = x.numel() // shape[-1]
    want = torch.ops.mkl._mkl_linear(x, torch.ops.mkl._mkl_reorder_linear_weight(w, rows), w, b, rows)
    with torch.no_grad():
        for _ in range(3):
            got = run()
    assert graphs[0].packed_linear_calls == 2
    assert got.shape == want.shape and got.stride() == want.stride()
    assert torch.equal(got, want)


@pytest.mark.skipif(not PACKED, reason="this torch carries no MKL: no packed product to test")
def test_a_large_packed_output_comes_from_the_pool_and_its_memory_is_reused():
    # 64 x 8192 float32 = 2 MB, above the pool's threshold: the products reuse freed blocks, whose
    # pages are mapped already.
    torch.manual_seed(0)
    x, w = torch.randn(64, 32), torch.randn(8192, 32)
    run, graphs = _linear_graph(x, w, None)
    want = F.linear(x, w)
    with torch.no_grad():
        for _ in range(3):  # compile, first sighting of the weight, packing
            run()
        gc.collect()
        seen = set()
        for _ in range(6):
            a = run()
            seen.add(a.data_ptr())
            torch.testing.assert_close(a, want, **TOL)
            del a
        b = run()
    # NB: the pool may also hold a block the compile's own first run freed: two at the most.
    assert len(seen) <= 2 and b.data_ptr() in seen
    assert b._base is None and b.is_contiguous()
    torch.testing.assert_close(b, want, **TOL)
    assert graphs[0].packed_linear_calls == 9
    with pytest.raises(RuntimeError):
        b.resize_(2 * b.numel())  # a pooled block, not torch's allocation: it cannot grow
    with framefuse.config.patch(cpu_buffer_pool_mb=0), torch.no_grad():
        c = run()
        c.resize_(2 * c.numel())  # torch's own storage: it can grow
    assert graphs[0].packed_linear_calls == 10


def test_an_input_of_other_strides_runs_the_ordinary_linear():
    # The packed product reads its input as a dense row-major matrix: a transposed one (traced so)
    # goes to torch's linear.
    torch.manual_seed(0)
    x, w, b = torch.randn(48, 6).t(), torch.randn(20, 48), torch.randn(20)
    run, graphs = _linear_graph(x, w, b)
    with torch.no_grad():
        for _ in range(3):
            _check((run(),), (F.linear(x, w, b),))
    assert graphs[0].packed_linears == (1 if PACKED else 0)
    assert graphs[0].packed_linear_calls == 0
