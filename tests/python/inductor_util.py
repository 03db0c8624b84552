"""Shared helpers of the inductor tests: build a graph, compile it, compare with eager."""
import torch

import framefuse
from framefuse import _C
from framefuse.graph import Graph
from framefuse.inductor import compile_graph

needs_codegen = __import__("pytest").mark.skipif(
    not _C.inductor.codegen_available(), reason="framefuse built without LLVM (reference runner only)")


def recording_backend():
    """(graphs, backend): a framefuse backend that keeps each graph's code in `graphs` and runs the
    graph on the reference runner."""
    graphs = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        graphs.append(graph.code())
        return graph.run

    return graphs, backend


def build(fn, inputs):
    """A graph whose outputs are fn(g, *placeholders) (a node or a tuple of nodes)."""
    g = Graph()
    phs = [g.placeholder(f"x{i}", t) for i, t in enumerate(inputs)]
    try:
        out = fn(g, *phs)
    except _C.Unsupported as e:
        if "op registry" in str(e):  # the op is not registered in this build's graph IR
            __import__("pytest").skip(str(e))
        if "not implemented for" in str(e):  # older torch lacks this kernel: the graph refuses the call
            __import__("pytest").skip(str(e))
        raise
    g.output(out if isinstance(out, tuple) else (out,))
    return g


def tolerance(dtype):
    if dtype in (torch.bfloat16,):
        return dict(atol=2e-2, rtol=2e-2)
    if dtype in (torch.float16,):
        return dict(atol=2e-3, rtol=2e-3)
    if dtype == torch.float32:
        return dict(atol=2e-5, rtol=2e-5)
    if dtype == torch.float64:
        return dict(atol=1e-10, rtol=1e-10)
    return dict(atol=0, rtol=0)


def check_steps(model, compiled, x, eager, steps=2):
    """`compiled` (a compile of `model`) against `eager` (a copy of `model` before it ran): eval-mode
    inference, then `steps` training steps (the loss, every gradient, the buffers such as BatchNorm's
    running statistics), within tolerance(float32)."""
    tol = tolerance(torch.float32)
    model.eval(), eager.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), eager(x), **tol)
    model.train(), eager.train()
    for _ in range(steps):
        for m in (model, eager):
            m.zero_grad(set_to_none=True)
        loss, want = compiled(x).square().mean(), eager(x).square().mean()
        loss.backward(), want.backward()
        torch.testing.assert_close(loss, want, **tol)
        for (n, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **tol, msg=lambda m: f"grad of {n}: {m}")
        for b, c in zip(model.buffers(), eager.buffers()):
            torch.testing.assert_close(b, c, **tol)


def check(fn, inputs, compiled=True, scale=1.0):
    """Compiles fn's graph, runs it on `inputs` and compares every output with the reference
    runner (eager): values within tolerance, same dtype, shape and strides."""
    g = build(fn, inputs)
    cg = compile_graph(g, inputs)
    if compiled:
        assert isinstance(cg, _C.inductor.CompiledGraph), "the graph fell back to the reference runner"
    try:
        ref = g.run(*inputs)
    except RuntimeError as e:
        if "not implemented for" in str(e):  # older torch lacks this kernel for the dtype
            __import__("pytest").skip(str(e))
        raise
    got = cg(*inputs)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert a.dtype == b.dtype
        assert a.shape == b.shape
        if a.numel() > 1:
            assert a.stride() == b.stride(), (a.stride(), b.stride())
        tol = tolerance(b.dtype)
        torch.testing.assert_close(a, b, atol=tol["atol"] * scale, rtol=tol["rtol"] * scale, equal_nan=True)
    return cg


# Tests never write to the user's cache directory.
import tempfile as _tempfile  # noqa: E402

framefuse.config.cache_dir = _tempfile.mkdtemp(prefix="framefuse_test_cache_")
