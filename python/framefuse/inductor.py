"""The `inductor` backend: compile a framefuse graph into fused CPU kernels.

    from framefuse.graph import Graph
    from framefuse.inductor import compile_graph
    g = Graph(); x = g.placeholder("x", torch.randn(1024))
    g.output((g.call(torch.add, g.call(torch.sin, x), g.call(torch.cos, x)),))
    fn = compile_graph(g, [torch.randn(1024)])
    (out,) = fn(torch.randn(1024))

The graph is decomposed to primitives, fused into loop kernels and compiled in-process with LLVM
(one kernel per fused group; matrix products and other ops without a lowering run in torch).
Whenever lowering or code generation fails, or framefuse was built without LLVM, the graph runs on
the reference runner (eager torch ops) and a `perf_hints` log line says why.
"""
from . import _C
from ._autograd import compile_with_autograd
from .backends import native_graph

__all__ = ["compile_graph", "compile_symbolic", "loop_ir", "codegen_available"]


def codegen_available():
    """Whether this build has the CPU code generator (LLVM was found at build time)."""
    return _C.inductor.codegen_available()


def _graph_handle(graph):
    # NB: a GraphModule that framefuse.fx.to_fx made carries the graph it was made from
    graph = getattr(graph, "framefuse_graph", graph)
    return getattr(graph, "_g", graph)


def loop_ir(graph, device="cpu"):
    """The scheduled loop IR of `graph` as text (what the `output_code` log artifact prints).
    `device` ("cpu" or "cuda"): whose eager kernels the lowering follows."""
    return _C.inductor.loop_ir(_graph_handle(graph), device)


def _hint(msg):
    _C.logging.emit("perf_hints", msg)


@native_graph
def compile_graph(graph, example_inputs=None):
    """Compile `graph` (a framefuse.graph.Graph) for CPU; returns a callable taking the inputs.

    `example_inputs` are accepted for the backend interface; shapes, strides and dtypes come from
    the graph's metadata. Calls with inputs of other shapes/strides/dtypes run on the reference
    runner.
    """
    handle = _graph_handle(graph)
    if handle.has_data_dependent_values():
        _hint("inductor: a graph with data-dependent sizes or floats (nonzero, masked_select, unique, .item() ...) "
              "runs on the reference runner (eager torch ops)")
        return _ReferenceFallback(handle)
    if _needs_autograd(handle):
        compiled = compile_with_autograd(handle, _compile_cpu,
                                         lambda why: _hint(f"inductor: {why}; it runs on the reference runner"))
        return compiled if compiled is not None else _ReferenceFallback(handle)
    return _compile_cpu(handle)


def compile_symbolic(graph, example_inputs, mode=None):
    """A graph with symbolic sizes (dynamic shapes) compiled once for every set of sizes: its
    kernels take the sizes as arguments. None where it cannot be (tensors all on the CPU or all on
    CUDA, no autograd, a pass that needs a concrete size; on CUDA not under reduce-overhead, whose
    CUDA graphs are recorded per set of sizes): the caller then compiles it per set of sizes."""
    import torch  # noqa: PLC0415
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if tensors and all(t.is_cuda for t in tensors):
        from . import cuda  # noqa: PLC0415
        return cuda.compile_symbolic(graph, example_inputs, mode)
    handle = _graph_handle(graph)
    if not codegen_available() or any(t.device.type != "cpu" or t.is_neg() or t.is_conj() for t in tensors):
        return None
    if _needs_autograd(handle):
        return None
    return _symbolic_or_none(lambda: _C.inductor.CompiledGraph(handle), "inductor")


def _symbolic_or_none(compile_fn, who):
    """compile_fn()'s result where its program kept the symbolic sizes; None where compiling failed
    (logged) or came out static: the caller then compiles the graph per set of sizes."""
    try:
        compiled = compile_fn()
    except Exception as e:  # noqa: BLE001  (any failure: the graph is compiled per set of sizes)
        if _C.config.get("raise_on_internal_error") and isinstance(e, _C.InternalError):
            raise
        _C.logging.emit("dynamic", f"{who}: the graph is compiled per set of sizes: {type(e).__name__}: {e}")
        return None
    return compiled if compiled.symbolic else None


def _compile_cpu(handle):
    try:
        return _C.inductor.CompiledGraph(handle)
    except Exception as e:  # lowering/codegen failure: never the user's problem
        if _C.config.get("raise_on_internal_error") and isinstance(e, _C.InternalError):
            raise
        _hint(f"inductor: running the graph on the reference runner: {type(e).__name__}: {e}")
        return _ReferenceFallback(handle)


def _requires_grad(meta):
    return bool(meta.get("requires_grad")) or any(_requires_grad(m) for m in meta.get("items", ()))


def _needs_autograd(handle):
    """Kernels record no autograd graph: a graph that makes or takes tensors that require grad
    (torch.ones(2, requires_grad=True) inside it, too) must run on torch's ops while grad mode is on."""
    import torch  # noqa: PLC0415
    return torch.is_grad_enabled() and any(_requires_grad(n.meta) for n in handle.nodes())


class _ReferenceFallback:
    """The graph on the reference runner (eager torch ops)."""

    def __init__(self, handle):
        self._g = handle
        self.num_kernels = 0

    def __call__(self, *inputs):
        return self._g.run(*inputs)


@native_graph
def backend(graph, example_inputs, mode=None, options=None):
    """The `backend="inductor"` of framefuse.compile: CPU graphs go to the LLVM code generator,
    graphs of CUDA tensors to the CUDA code generator (framefuse.cuda); anything else (mixed
    devices, no tensors) runs on the reference runner with a `perf_hints` line."""
    import torch  # noqa: PLC0415  (imported by framefuse already; keeps module import light)

    from torch import fx as torch_fx  # noqa: PLC0415

    if isinstance(graph, torch_fx.GraphModule) and not hasattr(graph, "framefuse_graph"):
        # torch.compile(model, backend=framefuse.inductor.backend): Dynamo's fx graph
        from . import fx  # noqa: PLC0415
        return fx.backend(graph, example_inputs, mode=mode, options=options)
    if options:
        from . import config  # noqa: PLC0415
        with config.patch(**options):
            return backend(graph, example_inputs, mode)

    if _graph_handle(graph).has_data_dependent_values():
        _hint("inductor: a graph with data-dependent sizes or floats (nonzero, masked_select, unique, .item() ...) "
              "runs on the reference runner (eager torch ops)")
        return _ReferenceFallback(_graph_handle(graph))
    # NB: the pipelines' first graph pass rewrites explicit attention (inductor/pipeline.h).
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    devices = {t.device.type for t in tensors}
    if devices == {"cuda"}:
        from . import cuda  # noqa: PLC0415
        return cuda.backend(graph, example_inputs, mode=mode)
    if devices <= {"cpu"}:
        return compile_graph(graph, example_inputs)
    _hint(f"inductor: graph inputs on devices {sorted(devices)}; running the graph on the reference runner")
    return _ReferenceFallback(_graph_handle(graph))
