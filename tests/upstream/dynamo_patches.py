"""Redirect every compiler entry point PyTorch's Dynamo tests use to framefuse.

Installed once, before the upstream test modules are imported, so that names they bind at import
time (`from torch._dynamo.testing import CompileCounter`, `make_dynamo_test`, which captures
`optimize_assert` when a test is decorated) already see the redirection:

    torch.compile, torch.compiler.compile            -> framefuse.compile
    torch._dynamo.optimize / optimize_assert         -> framefuse.compile (optimize_assert: fullgraph)
    torch._dynamo.testing.{optimize_assert, reset}   -> the same (standard_test, make_dynamo_test)
    torch._dynamo.reset, torch.compiler.reset        -> Dynamo's reset and framefuse.reset
    torch._dynamo.disable, torch.compiler.disable    -> framefuse.disable
    torch._dynamo.graph_break                        -> framefuse.graph_break
    torch._dynamo.config.{capture_scalar_outputs, capture_dynamic_output_shape_ops}
                                                     -> framefuse.config's knobs of the same name,
                                                        copied before every checked call

The tests' own backends (CompileCounter, CompileCounterWithBackend, EagerAndRecordGraphs ...) become
framefuse callable backends that update the same attributes (frame_count, op_count, graphs) from
the framefuse graph and run it on the backend chosen with --backend. Entry points that only make
sense for Dynamo itself (explain, export, optimize as a context manager, custom FX backends) raise
DynamoInternal, so the test is counted apart instead of silently running the real Dynamo.
"""
from __future__ import annotations

import functools

import torch
import torch._dynamo
import torch._dynamo.eval_frame
import torch._dynamo.testing as dynamo_testing

import framefuse
from framefuse.backends import _inductor as _framefuse_inductor

import dynamo_reference as reference

_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# Dynamo backend names that mean "run the captured graph as it is".
_EAGER_NAMES = {"eager", "aot_eager", "aot_eager_decomp_partition", "aot_eager_default_partitioner",
                "eager_noexcept", "eager_debug", "pre_dispatch_eager", "cudagraphs", "aot_ts"}


class DynamoInternal(Exception):
    """The test reached an API that only Dynamo itself has; the test is counted as dynamo-internal."""


class Settings:
    backend = "eager"        # framefuse backend that runs graphs: "eager" or "inductor"


def _run_backend():
    """The framefuse backend for a graph the test's own backend has accepted."""
    if Settings.backend == "inductor":
        return _inductor_unless_training
    return lambda graph, example_inputs: graph.run


@framefuse.backends.native_graph
def _inductor_unless_training(graph, example_inputs):
    # framefuse's own rule for backend="inductor" (backends._call_backend): a graph that needs
    # autograd runs on the reference runner. A callable backend is not told, so ask the inputs.
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        return graph.run
    return _framefuse_inductor(graph, example_inputs)


def _op_count(graph):
    return sum(1 for node in graph.nodes() if "call" in node.kind)


def _recording(record):
    """A framefuse callable backend: `record(graph)` first, then the chosen backend."""
    run = _run_backend()

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        reference.STATE.graphs += 1
        record(graph)
        return run(graph, example_inputs)
    return backend


def _count_into(counter, graph):
    counter.frame_count += 1
    counter.op_count += _op_count(graph)


def framefuse_backend(backend):
    """What framefuse.compile gets for a Dynamo `backend` argument."""
    if backend is None or isinstance(backend, str):
        name = backend or "inductor"
        if name == "inductor" or name in _EAGER_NAMES:
            # NB: a recording backend even for plain names, so graphs are counted for every test.
            return _recording(lambda graph: None)
        raise DynamoInternal(f"Dynamo backend {name!r}")
    if isinstance(backend, dynamo_testing.CompileCounterWithBackend):
        return _recording(lambda graph: (_count_into(backend, graph), backend.graphs.append(graph)))
    if isinstance(backend, dynamo_testing.CompileCounter):
        return _recording(lambda graph: _count_into(backend, graph))
    if isinstance(backend, (dynamo_testing.EagerAndRecordGraphs, dynamo_testing.AotEagerAndRecordGraphs,
                            dynamo_testing.InductorAndRecordGraphs)):
        return _recording(lambda graph: backend.graphs.append(graph))
    if callable(backend):
        # A test's own FX backend expects a torch.fx.GraphModule, which framefuse does not make; the
        # graph runs on the chosen backend and the test is marked (its assertions on what the backend
        # saw are Dynamo's).
        reference.STATE.notes.add("custom FX backend replaced")
        return _recording(lambda graph: None)
    raise TypeError(f"backend must be a str or a callable, not {type(backend).__name__}")


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None,  # noqa: A001
            options=None, disable=False, **_ignored):
    """torch.compile with framefuse underneath; every compiled callable is checked against eager."""
    if dynamic:
        reference.STATE.notes.add("dynamic=True requested (framefuse specializes)")
    ff_backend = framefuse_backend(backend)
    ff_mode = mode if mode in _MODES else None

    def apply(fn):
        if disable:
            return fn
        compiled = framefuse.compile(fn, fullgraph=bool(fullgraph), backend=ff_backend, mode=ff_mode)
        return reference.checked(compiled, fn, fullgraph=bool(fullgraph))
    return apply if model is None else apply(model)


class _Optimize:
    """torch._dynamo.optimize(...)'s result: a decorator (a context manager only for Dynamo)."""

    def __init__(self, backend, fullgraph):
        self.backend, self.fullgraph = backend, fullgraph

    def __call__(self, fn):
        return compile(fn, backend=self.backend, fullgraph=self.fullgraph)

    def __enter__(self):
        raise DynamoInternal("torch._dynamo.optimize(...) as a context manager")

    def __exit__(self, *exc):
        return False


def optimize(backend="inductor", *args, nopython=False, **kwargs):
    return _Optimize(backend, bool(nopython))


def optimize_assert(backend="inductor", *args, **kwargs):
    return _Optimize(backend, True)


def disable(fn=None, recursive=True, *, reason=None, wrapping=True):
    if fn is None:
        return functools.partial(disable, recursive=recursive, reason=reason, wrapping=wrapping)
    if not wrapping or not recursive:
        # torch's own lazy `_disable_dynamo` wrappers (wrapping=False): framefuse never traces torch's
        # code anyway. recursive=False has no framefuse counterpart; running the function under the
        # caller's compilation is what it asks for minus the skip of this one frame.
        return fn
    return framefuse.disable(fn)


_dynamo_reset = torch._dynamo.reset


def reset():
    _dynamo_reset()
    reference.STATE.bank_stats()
    framefuse.reset()


def _internal(name):
    def refuse(*args, **kwargs):
        raise DynamoInternal(name)
    return refuse


def _backfill_test_utils():
    """Names newer upstream test files import from torch.testing._internal that this torch lacks.

    Each stand-in keeps the test's meaning for framefuse: the decorator below only switches Dynamo's
    translation validation (a Dynamo self-check) off for dynamic shapes.
    """
    import torch.testing._internal.common_utils as common_utils  # noqa: PLC0415
    if not hasattr(common_utils, "disable_translation_validation_if_dynamic_shapes"):
        common_utils.disable_translation_validation_if_dynamic_shapes = lambda fn: fn


# torch._dynamo.config knobs that framefuse.config has under the same name and meaning. Tests set them
# with torch._dynamo.config.patch (a decorator or a with block), which writes torch's context
# variables directly, so they are read at each compiled call rather than intercepted when set.
_MIRRORED_KNOBS = ("capture_scalar_outputs", "capture_dynamic_output_shape_ops")


def _mirror_config():
    for name in _MIRRORED_KNOBS:
        setattr(framefuse.config, name, bool(getattr(torch._dynamo.config, name)))


def install(backend):
    """Patch torch for the whole process (the runner forks a child per test from it)."""
    Settings.backend = backend
    reference.BEFORE_CALL.append(_mirror_config)
    _backfill_test_utils()
    torch.compile = compile
    torch.compiler.compile = compile
    for module in (torch._dynamo, torch._dynamo.eval_frame):
        module.optimize = optimize
        module.optimize_assert = optimize_assert
    dynamo_testing.optimize_assert = optimize_assert
    dynamo_testing.reset = reset
    torch._dynamo.reset = reset
    torch.compiler.reset = reset
    torch._dynamo.disable = disable
    torch._dynamo.decorators.disable = disable
    torch.compiler.disable = disable
    torch._dynamo.graph_break = framefuse.graph_break
    torch._dynamo.decorators.graph_break = framefuse.graph_break
    torch._dynamo.explain = _internal("torch._dynamo.explain")
    torch._dynamo.export = _internal("torch._dynamo.export")
    torch._dynamo.run = _internal("torch._dynamo.run")
    torch._dynamo.eval_frame._debug_get_cache_entry_list = _internal("_debug_get_cache_entry_list")
