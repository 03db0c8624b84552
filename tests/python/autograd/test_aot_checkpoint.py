"""torch.utils.checkpoint(fn, ..., use_reentrant=False) inside compiled code: fn is captured into the
graph, and AOT autograd's backward computes its values again instead of the forward saving them (as
eager's checkpoint does). Results and gradients against eager's checkpoint; what the forward saves,
with and without the checkpoint; and what runs natively (the reentrant checkpoint, other options, a
function that writes Python state or tensors in place)."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import framefuse
import inductor_util as iu

pytestmark = pytest.mark.usefixtures("fresh_framefuse")


def _layers():
    torch.manual_seed(0)
    return torch.nn.Linear(16, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)


def _saved_bytes(out, inputs):
    """Bytes of what the compiled forward saved for the backward that are not the graph's inputs."""
    fn = out.grad_fn
    assert type(fn).__name__ == "_FunctionBackward", type(fn).__name__
    ptrs = {t.data_ptr() for t in inputs}
    return sum(t.numel() * t.element_size() for t in fn.saved_tensors if t.data_ptr() not in ptrs)


def _run(fn, x, params):
    for p in params:
        p.grad = None
    x = x.detach().requires_grad_()
    out = fn(x)
    out.sum().backward()
    return out.detach(), [x.grad] + [p.grad for p in params]


@pytest.mark.parametrize("use_checkpoint", [True, False])
def test_checkpointed_block_matches_eager_and_saves_less(use_checkpoint):
    a, b, c = _layers()
    params = [p for m in (a, b, c) for p in m.parameters()]

    def block(h, scale=1.0):
        return b(F.gelu(a(h))).tanh() * scale

    def f(x):
        h = checkpoint(block, x, use_reentrant=False, scale=0.5) if use_checkpoint else block(x, scale=0.5)
        return c(h).relu()

    x = torch.randn(32, 16)
    want = _run(f, x, params)
    compiled = framefuse.compile(f)
    for _ in range(2):
        got = _run(compiled, x, params)
        torch.testing.assert_close(got[0], want[0], **iu.tolerance(torch.float32))
        for g, w in zip(got[1], want[1]):
            torch.testing.assert_close(g, w, **iu.tolerance(torch.float32))
    report = framefuse.explain(f)(x.requires_grad_())
    assert (report.graph_count, report.graph_break_count) == (1, 0), [str(r) for r in report.break_reasons]
    xs = x.detach().requires_grad_()
    saved = _saved_bytes(compiled(xs), [xs] + params)
    # Without the checkpoint the forward keeps the block's products (a(x): 32x64, b(...): 32x64) for the
    # backward; with it only what the last layer reads from the block (its output, 32x64) and c's own.
    if use_checkpoint:
        assert saved <= 32 * 64 * 4 * 2, saved
    else:
        assert saved >= 32 * 64 * 4 * 3, saved


def test_checkpoint_saves_less_than_the_same_code_without_it():
    a, b, c = _layers()
    params = [p for m in (a, b, c) for p in m.parameters()]

    def body(h):
        return b(F.gelu(a(h))).sin()

    sizes = []
    for use in (False, True):
        def f(x, use=use):
            return c(checkpoint(body, x, use_reentrant=False) if use else body(x))
        framefuse.reset()
        x = torch.randn(32, 16, requires_grad=True)
        sizes.append(_saved_bytes(framefuse.compile(f)(x), [x] + params))
    assert sizes[1] < sizes[0], sizes


NO_CONTEXT_FN = not hasattr(torch.utils.checkpoint, "noop_context_fn")


@pytest.mark.parametrize("case", ["reentrant", "default", pytest.param("context_fn", marks=pytest.mark.skipif(
    NO_CONTEXT_FN, reason="torch.utils.checkpoint has no context_fn before torch 2.1")), "python_state", "in_place"])
def test_what_runs_natively_matches_eager(case):
    a, b, c = _layers()
    params = [p for m in (a, b, c) for p in m.parameters()]
    log = []

    def block(h):
        if case == "python_state":
            log.append(1)
        y = a(h)
        if case == "in_place":
            y = y.clone()
            y.mul_(2)
        return b(y.relu())

    kwargs = dict(use_reentrant=False)
    if case == "reentrant":
        kwargs = dict(use_reentrant=True)
    elif case == "default":
        kwargs = {}
    elif case == "context_fn":
        kwargs["context_fn"] = torch.utils.checkpoint.noop_context_fn

    def f(x):
        return c(checkpoint(block, x, **kwargs))

    x = torch.randn(8, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # use_reentrant not given: torch warns
        want = _run(f, x, params)
        calls_eager = len(log)
        got = _run(framefuse.compile(f), x, params)
        calls_compiled = len(log) - calls_eager
        report = framefuse.explain(f)(x.requires_grad_())
    assert any("FF0023" in str(r) and "checkpoint" in str(r) for r in report.break_reasons), \
        [str(r) for r in report.break_reasons]
    torch.testing.assert_close(got[0], want[0], **iu.tolerance(torch.float32))
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w, **iu.tolerance(torch.float32))
    if case == "python_state":
        assert calls_compiled == calls_eager == 2  # the forward and the backward's second run, as eager


def test_dropout_inside_the_checkpoint_keeps_its_draws():
    # The forward's dropout mask is saved (a random draw is never made again), which is what eager's
    # checkpoint gives by restoring the RNG state before its second run.
    a, b, c = _layers()
    params = [p for m in (a, b, c) for p in m.parameters()]

    def block(h):
        return b(F.dropout(a(h).relu(), p=0.3, training=True))

    def f(x):
        return c(checkpoint(block, x, use_reentrant=False))

    x = torch.randn(32, 16)
    torch.manual_seed(123)
    want = _run(f, x, params)
    compiled = framefuse.compile(f)
    torch.manual_seed(123)
    got = _run(compiled, x, params)
    torch.testing.assert_close(got[0], want[0], **iu.tolerance(torch.float32))
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w, **iu.tolerance(torch.float32))


def test_a_checkpoint_with_symbolic_sizes_goes_through_aot_autograd():
    # The block reads a size the forward computes (symbolic under dynamic=True): the size is not saved
    # (it is no tensor); the values around it still split into a compiled forward and backward.
    lin = torch.nn.Linear(8, 8)

    def block(h):
        return lin(h).relu().reshape(h.shape[0], -1) * 2

    def f(x):
        return checkpoint(block, x, use_reentrant=False).sum()

    compiled = framefuse.compile(f, dynamic=True)
    for n in (4, 6):
        x = torch.randn(n, 8, requires_grad=True)
        out = compiled(x)
        assert type(out.grad_fn).__name__ == "_FunctionBackward"
        out.backward()
        want = x.detach().requires_grad_()
        f(want).backward()
        torch.testing.assert_close(x.grad, want.grad, **iu.tolerance(torch.float32))
