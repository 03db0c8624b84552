"""Ops whose output sizes depend on tensor values (nonzero, masked_select, x[mask], unique,
repeat_interleave with tensor repeats, bincount) under config capture_dynamic_output_shape_ops: each
such size is an unbacked symbol (u0, u1 ...) that the run binds, so the call stays in the graph and
one compile serves every input. What needs such a size's value in the trace (Python reading it, a
broadcast against 1, a layout query) breaks the graph there. Off (the default), they break.

Every call is compared with eager on random inputs, with counts of 0 and 1 among them.
"""
import pytest
import torch

import framefuse
from test_dynamic_shapes import _fresh, compiled_frames  # noqa: F401  (an autouse fixture)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture
def capture():
    with framefuse.config.patch(capture_dynamic_output_shape_ops=True):
        yield


def inputs(shape, seed):
    """Random inputs with every positive count from none to all (the data-dependent sizes vary)."""
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(*shape, generator=g) for _ in range(4)]
    n = torch.zeros(shape).numel()
    one = -torch.ones(shape)
    one.view(-1)[int(torch.randint(n, (1,), generator=g))] = 2.0
    return out + [-torch.ones(shape), torch.ones(shape), one]


def assert_same(got, want):
    assert type(got) is type(want)
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    elif isinstance(want, torch.Tensor):
        assert got.shape == want.shape and got.dtype == want.dtype and got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    else:
        assert got == want


def recording():
    graphs = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        graphs.append(graph)
        return graph.run

    return backend, graphs


def nonzero_scaled(x):
    i = torch.nonzero(x > 0)
    return i * 2 + 1, x.sum()


def mask_index(x):
    y = x[x > 0]
    return y.exp().sum() + 1, y * 3, torch.cumsum(y, 0)


def masked_select_rows(x):
    m = x > 0.5
    return torch.masked_select(x, m).relu(), x[m[:, 0]] * 2


def unique_parts(x):
    u, inv, counts = torch.unique(x.round(), return_inverse=True, return_counts=True)
    return u * 2, inv, counts, torch.unique(x.round(), dim=1), torch.unique_consecutive(x.round())


def repeat_and_count(x):
    r = (x[:, 0] > 0).long() * 2
    return torch.repeat_interleave(x, r, dim=0) + 1, torch.bincount((x.abs() * 3).long().flatten()), torch.argwhere(x < 0)


def nonzero_tuple(x):
    rows, cols = torch.nonzero(x > 0, as_tuple=True)
    return x[rows, cols] * 2, rows


FUNCTIONS = [nonzero_scaled, mask_index, masked_select_rows, unique_parts, repeat_and_count, nonzero_tuple]


@pytest.mark.usefixtures("capture")
@pytest.mark.parametrize("backend", ["inductor", "eager"])
@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_captured_whole_and_compiled_once(fn, backend):
    report = framefuse.explain(fn)(torch.randn(5, 4))
    assert report.graph_count == 1 and report.graph_break_count == 0, report.break_reasons
    assert "u0" in report.graphs[0].code()
    framefuse.reset()
    cf = framefuse.compile(fn, backend=backend)
    for x in inputs((5, 4), seed=len(fn.__name__)):
        assert_same(cf(x), fn(x))
    assert compiled_frames() == 1  # no recompile: no size the data decides is guarded


@pytest.mark.usefixtures("capture")
def test_the_backend_sees_one_graph_for_every_count():
    backend, graphs = recording()
    cf = framefuse.compile(mask_index, backend=backend)
    for x in inputs((6, 3), seed=1):
        assert_same(cf(x), mask_index(x))
    assert len(graphs) == 1 and graphs[0].has_unbacked_symbols()


def test_off_by_default_each_breaks_naming_the_config():
    for fn in (lambda x: x[x > 0] * 2, lambda x: torch.masked_select(x, x > 0) * 2, lambda x: torch.unique(x) + 1):
        report = framefuse.explain(fn)(torch.randn(4, 3))
        assert report.graph_break_count == 1
        assert "config capture_dynamic_output_shape_ops is off" in report.break_reasons[0].reason
        x = torch.randn(4, 3)
        assert_same(framefuse.compile(fn)(x), fn(x))


def test_a_count_reaching_a_resume_function_does_not_recompile_per_count():
    # Off: nonzero breaks; its (n, 2) result (strides (1, n)) is the resume function's input, whose
    # n becomes symbolic after a second count (automatic dynamic) as a contiguous tensor's would.
    def f(x):
        i = torch.nonzero(x > 0)
        return i * 2 + 1

    cf = framefuse.compile(f)
    g = torch.Generator().manual_seed(0)
    for _ in range(10):
        x = torch.randn(8, 8, generator=g)
        assert_same(cf(x), f(x))
    assert compiled_frames() == 3  # f, the resume function at the first count, then symbolic


def test_repeat_interleave_with_int_repeats_or_an_output_size_is_not_data_dependent():
    def f(x, r):
        return torch.repeat_interleave(x, 2, dim=0) * 2, torch.repeat_interleave(x, r, dim=0, output_size=6) + 1

    x, r = torch.randn(3, 2), torch.tensor([1, 2, 3])
    report = framefuse.explain(f)(x, r)
    # NB: torch 1.13 cannot type int repeats on meta tensors (another reason to break).
    assert not any("operands' values" in b.reason for b in report.break_reasons), report.break_reasons
    if torch.__version__ >= "2":
        assert report.graph_break_count == 0, report.break_reasons
    assert_same(framefuse.compile(f)(x, r), f(x, r))


@pytest.mark.usefixtures("capture")
@pytest.mark.parametrize("backend", ["inductor", "eager"])
def test_python_reading_the_size_breaks_there(backend):
    def f(x):
        y = x[x > 0]
        n = y.shape[0]
        return y * n, n + 1, y.stride(), y.is_contiguous()

    report = framefuse.explain(f)(torch.randn(4, 4))
    assert report.graph_break_count >= 1
    assert "data-dependent output" in report.break_reasons[0].reason
    cf = framefuse.compile(f, backend=backend)
    for x in inputs((4, 4), seed=3):
        assert_same(cf(x), f(x))


@pytest.mark.usefixtures("capture")
@pytest.mark.parametrize("backend", ["inductor", "eager"])
def test_a_decision_on_the_size_breaks_and_counts_of_one_broadcast_as_in_eager(backend):
    # [u0] + [3] broadcasts where u0 is 1 or 3 and raises otherwise: only the run knows.
    def f(x):
        y = x[x > 1.5]
        return y + x.view(-1)[:3], y.sum()

    report = framefuse.explain(f)(torch.tensor([[2.0, 0.0], [0.0, 0.0]]))
    assert report.graph_break_count == 1 and "deciding u0 == 3" in report.break_reasons[0].reason
    cf = framefuse.compile(f, backend=backend)
    for x in (torch.tensor([[2.0, 0.0], [0.0, 0.0]]), torch.tensor([[0.0, 3.0], [3.0, 3.0]])):
        assert_same(cf(x), f(x))
    for x in (torch.tensor([[2.0, 2.0], [0.0, 0.0]]), torch.zeros(2, 2)):
        with pytest.raises(RuntimeError, match="must match"):
            cf(x)


@pytest.mark.usefixtures("capture")
def test_symbolic_sizes_and_data_dependent_sizes_together():
    # dynamic=True: x's sizes are s0, s1 (view's argument s0 * s1 is computed per call) and the
    # mask's count u0; the reference runner evaluates both.
    def f(x):
        flat = x.view(x.shape[0] * x.shape[1])
        return flat[flat > 0] * 2, torch.nonzero(x).float().sum(0)

    backend, graphs = recording()
    cf = framefuse.compile(f, backend=backend, dynamic=True)
    for shape in [(3, 4), (5, 2), (7, 7), (2, 9)]:
        for x in inputs(shape, seed=shape[0])[:3]:
            assert_same(cf(x), f(x))
    assert compiled_frames() == 1 and len(graphs) == 1


@pytest.mark.usefixtures("capture")
def test_gradients_flow_through_data_dependent_ops():
    def f(x, w):
        y = torch.masked_select(x * w, x > 0)
        return y.sin().sum() + (x * w)[x < 0].pow(2).sum()

    x = torch.randn(5, 4)
    w1 = torch.randn(5, 4, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_()
    framefuse.compile(f)(x, w1).backward()
    f(x, w2).backward()
    torch.testing.assert_close(w1.grad, w2.grad)
    assert compiled_frames() == 1


@pytest.mark.cuda
@pytest.mark.usefixtures("capture")
@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_cuda(fn):
    report = framefuse.explain(fn)(torch.randn(5, 4, device="cuda"))
    assert report.graph_count == 1 and report.graph_break_count == 0, report.break_reasons
    framefuse.reset()
    cf = framefuse.compile(fn)
    for x in inputs((5, 4), seed=7):
        x = x.cuda()
        assert_same(cf(x), fn(x))
    assert compiled_frames() == 1

