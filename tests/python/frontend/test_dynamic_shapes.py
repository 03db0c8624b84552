"""Dynamic shapes in the frontend: symbolic sizes, their guards, automatic dynamic, the marks.

Every test compares with eager on every call; sizes 0 and 1 are among the sizes each sweep passes.
The counters: `frames_compiled` counts traces (one per cache entry).
"""
import logging
import random

import pytest
import torch

import framefuse
from framefuse import _C

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def _fresh():
    framefuse.reset()
    yield
    framefuse.reset()


def compiled_frames():
    return _C._frame_eval_stats()["frames_compiled"]


def sweep(fn, shapes, make=torch.randn, **compile_kwargs):
    cf = framefuse.compile(fn, **compile_kwargs)
    for shape in shapes:
        args = [make(*s) for s in shape] if isinstance(shape[0], tuple) else [make(*shape)]
        torch.testing.assert_close(cf(*args), fn(*args), equal_nan=True)
    return compiled_frames()


def relu_sum(x):
    return torch.relu(x) * 2 + x.sum()


def test_automatic_dynamic_compiles_once_more_for_every_batch_size():
    # The case: 12 batch sizes compiled 8 times and then ran eagerly.
    sizes = [3, 4, 5, 6, 7, 9, 11, 16, 23, 40, 64, 65]
    assert sweep(relu_sum, [(n, 8) for n in sizes]) == 2  # static, then s0
    assert sweep(relu_sum, [(n, 8) for n in (1, 0, 1, 0)]) == 2 + 2  # 0 and 1 specialise, once each


def test_the_symbolic_entry_is_reused_after_sizes_0_and_1():
    framefuse.reset()
    cf = framefuse.compile(relu_sum)
    for n in [5, 6, 0, 1, 7, 8, 0, 1, 30]:
        x = torch.randn(n, 3)
        torch.testing.assert_close(cf(x), relu_sum(x))
    assert compiled_frames() == 4


def test_dynamic_true_is_symbolic_from_the_first_call_and_false_never():
    assert sweep(relu_sum, [(n, m) for n, m in [(4, 3), (5, 7), (9, 2), (2, 9)]], dynamic=True) == 1
    framefuse.reset()
    assert sweep(relu_sum, [(n, 8) for n in (3, 4, 5, 6)], dynamic=False) == 4


@pytest.mark.parametrize("backend", ["inductor", "eager"])
def test_dense_permuted_inputs_get_symbols_too(backend):
    # A transpose (and nonzero's (n, dims) result, strides (1, n)) is a permutation of a
    # contiguous buffer: its strides follow from its sizes, so it compiles once for all sizes.
    def t_relu(x):
        return torch.relu(x) * 2 + x.sum(0)

    def transposed(n, m):
        return torch.randn(m, n).t()

    assert sweep(t_relu, [(n, m) for n, m in [(4, 3), (5, 7), (9, 2), (2, 9)]], make=transposed, dynamic=True,
                 backend=backend) == 1
    framefuse.reset()
    sliced = lambda n, m: torch.randn(n, m + 1)[:, :m]  # noqa: E731  (not dense: stays static)
    assert sweep(t_relu, [(n, 3) for n in (4, 5, 6)], make=sliced, dynamic=True, backend=backend) == 3


def test_mark_dynamic_and_mark_static():
    cf = framefuse.compile(relu_sum)
    for n in (4, 5, 6):
        x = torch.randn(n, 8)
        framefuse.mark_dynamic(x, 0)
        torch.testing.assert_close(cf(x), relu_sum(x))
    assert compiled_frames() == 1
    framefuse.reset()
    cf = framefuse.compile(relu_sum, dynamic=True)
    for n in (4, 5):
        x = torch.randn(n, 8)
        framefuse.mark_static(x, 0)
        torch.testing.assert_close(cf(x), relu_sum(x))
    assert compiled_frames() == 2
    with pytest.raises(IndexError):
        framefuse.mark_dynamic(torch.randn(3), 1)


def test_torch_dynamo_marks_are_read_too():
    if not hasattr(torch, "_dynamo"):
        pytest.skip("torch 1.x has no torch._dynamo")
    cf = framefuse.compile(relu_sum)
    for n in (4, 5, 6):
        x = torch.randn(n, 8)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(cf(x), relu_sum(x))
    assert compiled_frames() == 1


def add(x, y):
    return x + y


def test_relations_between_sizes_are_guarded():
    # Broadcasting s0 against s1 relies on s0 == s1: a call where they differ must not take the entry.
    cf = framefuse.compile(add, dynamic=True)
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    torch.testing.assert_close(cf(x, y), add(x, y))
    x, y = torch.randn(6, 3), torch.randn(6, 3)
    torch.testing.assert_close(cf(x, y), add(x, y))
    assert compiled_frames() == 1
    x, y = torch.randn(6, 3), torch.randn(5, 3)
    with pytest.raises(RuntimeError, match="must match"):
        cf(x, y)
    x, y = torch.randn(5, 3), torch.randn(1, 3)  # broadcasting is another entry
    torch.testing.assert_close(cf(x, y), add(x, y))


def test_a_guard_failure_says_which_relation_failed(caplog):
    def add2(x, y):
        return x + y
    cf = framefuse.compile(add2, dynamic=True)
    cf(torch.randn(4, 3), torch.randn(4, 3))
    framefuse.set_logs(recompiles=True)
    try:
        with caplog.at_level(logging.INFO, logger="framefuse"):
            cf(torch.randn(5, 3), torch.randn(4, 3))
    except RuntimeError:
        pass
    finally:
        framefuse.set_logs()
    assert "L['x'].size()[0] == L['y'].size()[0] (got 1 == 0; L['x'].size()[0] = 5; L['y'].size()[0] = 4)" in caplog.text, caplog.text


def test_the_dynamic_log_says_which_dimensions_became_symbolic(caplog):
    framefuse.set_logs(dynamic=True)
    try:
        with caplog.at_level(logging.INFO, logger="framefuse"):
            sweep(relu_sum, [(3, 8), (4, 8)])
    finally:
        framefuse.set_logs()
    assert "L['x'].size()[0] -> s0: it was 3 in an earlier call" in caplog.text


def test_module_parameters_stay_static_under_dynamic_true():
    lin = torch.nn.Linear(8, 4)
    cm = framefuse.compile(lin, dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(n, 8)
        torch.testing.assert_close(cm(x), lin(x))
    assert compiled_frames() == 1


# Functions over the op families whose meta rules keep sizes symbolic, called with random sizes
# (0 and 1 included) under automatic dynamic shapes: every result equals eager's.
FUNCTIONS = [
    lambda x: torch.sigmoid(x) + torch.exp(-x) * 0.5,
    lambda x: x.sum(0) + x.mean(1, keepdim=True).sum(),
    lambda x: torch.softmax(x, -1) * x.amax(0),
    lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]),
    lambda x: (x @ x.t()).relu(),
    lambda x: x.transpose(0, 1).contiguous() * 3,
    lambda x: torch.where(x > 0, x, x * 0.1).cumsum(0),
    lambda x: x.reshape(-1) + 1,
    lambda x: torch.cat([x, x * 2], 0).t(),
    lambda x: x[1:] - x[:-1] if x.shape[0] > 1 else x,
]


@pytest.mark.parametrize("i", range(len(FUNCTIONS)))
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_random_sizes_match_eager(i, backend):
    fn = FUNCTIONS[i]
    rng = random.Random(1000 + i)
    cf = framefuse.compile(fn, backend=backend)
    shapes = [(rng.choice([0, 1, 2, 3, 5, 8, 13]), rng.choice([1, 2, 4, 7])) for _ in range(10)]
    for shape in shapes:
        x = torch.randn(*shape)
        # NB: torch 1.13's layer_norm of a one-element row is rounding noise (about 1e-5), not 0.
        torch.testing.assert_close(cf(x), fn(x), equal_nan=True, atol=1e-4, rtol=1e-5)


# ---- symbolic Python ints: sizes read in Python ------------------------------------------------

class TinyAttention(torch.nn.Module):
    """nanoGPT's attention shape handling: B, T, C from x.shape, view/transpose, a causal mask
    sliced by T, positions from arange(T)."""

    def __init__(self, d=16, heads=2, block=64):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))
        self.pos = torch.nn.Embedding(block, d)

    def forward(self, x):
        B, T, C = x.shape
        x = x + self.pos(torch.arange(0, T, dtype=torch.long))
        q, k, v = self.qkv(x).split(C, dim=2)
        hs = C // self.heads
        q = q.view(B, T, self.heads, hs).transpose(1, 2)
        k = k.view(B, T, self.heads, hs).transpose(1, 2)
        v = v.view(B, T, self.heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / hs ** 0.5)
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf")).softmax(-1)
        return (att @ v).transpose(1, 2).contiguous().view(B, T, C)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_sizes_read_in_python_stay_symbolic(backend):
    torch.manual_seed(0)
    m = TinyAttention().eval()
    cm = framefuse.compile(m, backend=backend)
    with torch.no_grad():
        for t in [8, 9, 17, 3, 1, 2, 64, 33]:
            x = torch.randn(2, t, 16)
            torch.testing.assert_close(cm(x), m(x), atol=1e-5, rtol=1e-5)
    assert compiled_frames() == 3  # static, symbolic T, T == 1


def size_arithmetic(x):
    n, m = x.shape
    half = n // 2
    y = x[:half] + x[n - half:]  # views sized by expressions
    return y.reshape(half * m) * 2 + x[n % 2:].sum()


def returns_a_size(x):
    return x * 2, x.shape[0] * x.shape[1] - 1


def test_arithmetic_on_sizes():
    cf = framefuse.compile(size_arithmetic, dynamic=True)
    for n in (4, 5, 8, 9, 12):
        x = torch.randn(n, 3)
        torch.testing.assert_close(cf(x), size_arithmetic(x))
    assert compiled_frames() == 1


def test_a_returned_size_is_the_callers_value():
    # An int computed from sizes is rebuilt from each call's sizes: one entry serves them all.
    cf = framefuse.compile(returns_a_size, dynamic=True)
    for n in (4, 5, 4, 5):
        x = torch.randn(n, 3)
        got, want = cf(x), returns_a_size(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and type(got[1]) is int
    assert compiled_frames() == 1


def branchy(x):
    if x.shape[0] > 6:  # a guard: another entry for sizes <= 6
        return x * 2
    return x - 1


def uses_in_python(x):
    n = x.size(0)
    total = sum(range(n))  # range(), sum(): the size is specialised (guarded)
    return x + total + len(f"{n}")


def test_comparisons_and_unmodelled_uses_are_guarded():
    cf = framefuse.compile(branchy, dynamic=True)
    for n in (3, 7, 9, 4, 10, 2):
        x = torch.randn(n, 2)
        torch.testing.assert_close(cf(x), branchy(x))
    assert compiled_frames() == 2
    framefuse.reset()
    cf = framefuse.compile(uses_in_python, dynamic=True)
    for n in (3, 4, 3, 4):
        x = torch.randn(n, 2)
        torch.testing.assert_close(cf(x), uses_in_python(x))
    assert compiled_frames() == 2  # one entry per size: range() pinned it


def test_sizes_past_the_compile_bound_run_eagerly_and_exactly():
    # NB: the per-size path: graphs whose kernels cannot take sizes as arguments (dynamic_kernels off here).
    from framefuse import backends  # noqa: PLC0415
    with framefuse.config.patch(dynamic_size_compiles=2, dynamic_kernels=False):
        cf = framefuse.compile(relu_sum, dynamic=True)
        before = backends.per_sizes_compiles()
        for n in (3, 4, 5, 6, 3):
            x = torch.randn(n, 8)
            torch.testing.assert_close(cf(x), relu_sum(x))
        assert backends.per_sizes_compiles() - before == 2
    assert compiled_frames() == 1


def test_slices_of_a_shape_and_star_arguments_keep_sizes_symbolic():
    # transformers' attention: `hidden_shape = (*x.shape[:-1], -1, d)`; `x.reshape(*x.shape[:-1], -1)`.
    def heads(x):
        input_shape = x.shape[:-1]
        hidden_shape = (*input_shape, -1, 4)
        return x.view(hidden_shape).transpose(1, 2)

    def flat(x):
        return x.reshape(*x.shape[:-1], -1).contiguous() * 2

    for fn in (heads, flat):
        framefuse.reset()
        assert sweep(fn, [(2, t, 8) for t in (5, 9, 13, 17, 2)]) == 2, fn.__name__


def test_explain_lists_the_dimensions_traced_as_symbols():
    def f(x, y):
        return torch.relu(x) + y.sum()

    x = torch.randn(5, 4)
    framefuse.mark_dynamic(x, 0)
    report = framefuse.explain(f)(x, torch.randn(3, 3).t())
    assert report.dynamic_dims == ["L['x'].size()[0] -> s0: marked dynamic"]
    assert "Dynamic Dimensions:\n  L['x'].size()[0] -> s0: marked dynamic\n" in str(report)
    report = framefuse.explain(f)(torch.randn(5, 4), torch.randn(3, 3))
    assert report.dynamic_dims == [] and "Dynamic Dimensions" not in str(report)


def test_symbols_the_trace_guards_equal_are_one_symbol_in_the_graph(caplog):
    # x * w broadcasts x's last dimension against w's: the trace guards s1 == s2, and the graph the
    # backends see says so (they have no guards to decide it with).
    framefuse.set_logs(graph_code=True)
    try:
        with caplog.at_level(logging.INFO, logger="framefuse"):
            cf = framefuse.compile(lambda x, w: x * w + w.sum(), dynamic=True)
            x, w = torch.randn(3, 5), torch.randn(5)
            torch.testing.assert_close(cf(x, w), x * w + w.sum())
    finally:
        framefuse.set_logs(graph_code=False)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert 'f32[s0, s1]' in text and 'f32[s1]' in text and "s2" not in text, text
