"""Backends of framefuse.compile: a name ("eager", "inductor", "aot_eager", "cudagraphs", or one
registered with `register_backend`) or a callable `(gm, example_inputs) -> callable`.

A callable backend receives, as torch.compile's do, the captured graph as a torch.fx.GraphModule
(`gm.graph`, `gm.code`, `gm.print_readable()`; calling `gm` runs it eagerly) and the example
inputs (the tensors of the first call), and returns the callable to run on later calls; it is
called with the graph inputs and returns the graph outputs (a tuple). `mode=` and `options=`
given to framefuse.compile reach it as keywords, as under torch.compile:

    def my_backend(gm, example_inputs):
        gm.graph.print_tabular()
        return gm.forward

    fn = framefuse.compile(fn, backend=my_backend)

A backend marked with `native_graph` receives framefuse's own graph instead
(framefuse.graph.Graph: `graph.code()`, `graph.run(*inputs)`, what framefuse.inductor compiles).
"""
import functools

from . import _debug
from .graph import Graph

_BUILTIN = ("eager", "inductor", "aot_eager", "cudagraphs")
_registered = {}


def register_backend(compiler_fn=None, name=None, tags=()):
    """Make `compiler_fn` available as framefuse.compile(..., backend=name), as
    torch._dynamo.register_backend does: `register_backend(fn, name="x")`, the decorators
    `@register_backend` (the function's name) and `@register_backend(name="x")`, and
    `register_backend("x", fn)`. `tags` is accepted for torch's signature."""
    del tags
    if isinstance(compiler_fn, str):  # register_backend("name", fn)
        compiler_fn, name = name, compiler_fn
    if compiler_fn is None:
        return functools.partial(register_backend, name=name)
    if not callable(compiler_fn):
        raise TypeError(f"register_backend: the backend {name!r} must be callable")
    name = getattr(compiler_fn, "__name__", None) if name is None else name
    if not isinstance(name, str) or not name:
        raise TypeError("register_backend: the name must be a non-empty str")
    if name in _BUILTIN:
        raise ValueError(f"register_backend: {name!r} is a built-in backend")
    _registered[name] = compiler_fn
    return compiler_fn


def native_graph(compiler_fn):
    """Mark a backend as taking framefuse's own graph (framefuse.graph.Graph) rather than an fx
    GraphModule: `@framefuse.backends.native_graph`."""
    if not callable(compiler_fn):
        raise TypeError(f"native_graph expects a callable, not {type(compiler_fn).__name__}")
    try:
        compiler_fn._framefuse_native_graph = True
        return compiler_fn
    except AttributeError:  # a builtin or a bound method: wrap it
        @functools.wraps(compiler_fn)
        def wrapper(*args, **kwargs):
            return compiler_fn(*args, **kwargs)
        wrapper._framefuse_native_graph = True
        return wrapper


def list_backends():
    """Names accepted by framefuse.compile(backend=...)."""
    return list(_BUILTIN) + sorted(_registered)


def lookup_backend(backend):
    """The backend framefuse.compile stores: a built-in name or a callable."""
    if isinstance(backend, str):
        if backend in _BUILTIN:
            return backend
        if backend in _registered:
            return _registered[backend]
        raise ValueError(f"framefuse.compile: unknown backend {backend!r}. "
                         f"Valid backends: {', '.join(list_backends())}, or a callable (gm, example_inputs) -> callable.")
    if callable(backend):
        return backend
    raise TypeError(f"framefuse.compile: backend must be a str or a callable, not {type(backend).__name__}")


def _inductor(graph, example_inputs, mode=None):
    from . import inductor  # noqa: PLC0415
    from ._C import logging as _log  # noqa: PLC0415
    # Generated kernels read storage as it is: a negative or conjugate view (its bit set) would be
    # read un-negated. The guards keep such inputs out of entries traced on plain tensors.
    for t in example_inputs:
        if (getattr(t, "is_neg", None) and t.is_neg()) or (getattr(t, "is_conj", None) and t.is_conj()):
            _log.emit("perf_hints", "backend=inductor: an input is a negative or conjugate view; the graph runs "
                                    "on the reference runner (call .resolve_neg() / .resolve_conj() first to compile it)")
            return graph.run
    if hasattr(inductor, "backend"):
        return inductor.backend(graph, example_inputs, mode=mode)
    _log.emit("perf_hints", "backend=inductor: the code generator is not available in this build; "
                            "the graph runs on the reference runner (eager torch ops)")
    return graph.run


def _inductor_training(graph, example_inputs, mode):
    """backend="inductor" for a graph that needs autograd: under mode="reduce-overhead" with every
    tensor on the GPU, CUDA graphs of its forward and backward; otherwise AOT autograd's compiled
    forward and backward (framefuse._autograd, config aot_autograd), or eager ops."""
    import torch  # noqa: PLC0415
    from ._C import config as _config  # noqa: PLC0415
    from ._C import logging as _log  # noqa: PLC0415
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if mode == "reduce-overhead" and tensors and all(t.is_cuda for t in tensors):
        from . import cuda  # noqa: PLC0415
        return cuda.TrainingGraphReplay(graph)
    if _config.get("aot_autograd"):
        return _inductor(graph, example_inputs, mode)
    _log.emit("perf_hints", "backend=inductor: graphs that need autograd run on the reference runner (eager torch ops)")
    return graph.run


def _call_backend(backend, cgraph, example_inputs, mode, options, training=False):
    # Called by the frontend (frame_eval/hook_backend.cpp) once per captured graph; `training`: grad
    # mode is on and an input requires grad.
    graph = Graph(cgraph)
    if _debug.run_dir() is not None:  # FRAMEFUSE_COMPILE_DEBUG: a runnable repro of the graph
        _debug.record_graph(graph, example_inputs, backend, mode, options)
    try:
        return _compile(backend, graph, example_inputs, mode, options, training)
    except Exception as e:  # noqa: BLE001  (config suppress_errors: any error of a backend)
        from ._C import config as _config  # noqa: PLC0415
        if not _config.get("suppress_errors"):
            raise
        from ._C import logging as _log  # noqa: PLC0415
        name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
        _log.warn("frontend", f"backend {name} raised {type(e).__name__}: {e}; the graph runs on eager ops "
                              "(config suppress_errors)")
        return graph.run


def _compile(backend, graph, example_inputs, mode, options, training):
    if graph.has_data_dependent_values():
        sinks = _compile_scalar_sinks(backend, graph, example_inputs, mode, options, training)
        if sinks is not None:
            return sinks
        return _compile_unbacked(backend, graph, example_inputs, mode, options)
    if graph.is_symbolic():
        compiled = _compile_symbolic(backend, graph, example_inputs, mode, options, training)
        if compiled is not None:
            return compiled
        return _PerSizes(graph, lambda g, examples: _compile_static(backend, g, examples, mode, options, training),
                         example_inputs)
    return _compile_static(backend, graph, example_inputs, mode, options, training)


def _compile_scalar_sinks(backend, graph, example_inputs, mode, options, training):
    """A graph whose numbers read by x.item() (config capture_scalar_outputs) are only returned
    (`return loss, loss.item()`): its tensor work compiled by the backend, then the numbers computed
    by the reference runner from the tensors they read (graph/passes/scalar_sinks.h: the graph
    writes no tensor, so they are the same after it). None where that split does not apply."""
    if graph.is_symbolic():
        return None
    split = graph.scalar_sink_split()
    if split is None:
        return None
    tensors = _compile(backend, split["tensors"], example_inputs, mode, options, training)
    numbers = split["scalars"].run
    operands, positions, count = split["operand_outputs"], split["scalar_outputs"], split["outputs"]

    def run(*args):
        outs = tensors(*args)
        values = numbers(*(outs[i] for i in operands))
        result = list(outs[:count])
        for p, v in zip(positions, values):
            result[p] = v
        return tuple(result)

    return run


def _compile_unbacked(backend, graph, example_inputs, mode, options):
    """A graph with data-dependent sizes or floats (config capture_dynamic_output_shape_ops,
    capture_scalar_outputs): the reference runner, which reads each such size from the op that
    made it as it runs. Backends that take
    framefuse's own graph (native_graph) receive it (framefuse.inductor.backend runs it on the
    reference runner too); the code generators and fx backends, which need every size from the
    inputs, do not."""
    if getattr(backend, "_framefuse_native_graph", False):
        kwargs = {k: v for k, v in (("mode", mode), ("options", options)) if v}
        return backend(graph, example_inputs, **kwargs)
    from ._C import logging as _log  # noqa: PLC0415
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
    _log.emit("perf_hints", f"backend={name}: a graph with data-dependent sizes or floats (nonzero, "
                            "masked_select, unique, .item() ...) runs on the reference runner (eager torch ops)")
    return graph.run


_per_sizes_compiles = 0
_symbolic_compiles = 0


def _compile_symbolic(backend, graph, example_inputs, mode, options, training):
    """backend="inductor": one program for every set of sizes, its kernels taking the sizes as
    arguments (framefuse.inductor.compile_symbolic: CPU, and CUDA outside reduce-overhead)."""
    if backend != "inductor" or training:
        return None
    from . import config, inductor  # noqa: PLC0415
    with config.patch(**(options or {})):
        if not config.dynamic_kernels:
            return None
        compiled = inductor.compile_symbolic(graph, example_inputs, mode)
    if compiled is not None:
        global _symbolic_compiles
        _symbolic_compiles += 1
    return compiled


def symbolic_compiles():
    """Graphs with symbolic sizes compiled once for all their sizes (kernels that take sizes as arguments)."""
    return _symbolic_compiles


def per_sizes_compiles():
    """Static graphs compiled for symbolic ones so far (one per distinct set of sizes)."""
    return _per_sizes_compiles


class _PerSizes:
    """A graph with symbolic sizes (dynamic shapes), compiled by its backend once per distinct set
    of sizes, on the first call that has them: backends receive static graphs.

    NB: the frontend traces once for every size (what the trace relied on is guarded); this is the
    path of graphs whose kernels cannot take the sizes as arguments (backends other than
    inductor, training graphs, CUDA graphs of reduce-overhead, a pass that needs a concrete size),
    so each new size compiles its own."""

    def __init__(self, graph, compile_static, example_inputs):
        self._graph = graph
        self._bindings = graph.symbol_bindings()
        self._compile_static = compile_static
        self._compiled = {}
        self._noted_limit = False
        self(*example_inputs, _compile_only=True)

    def __call__(self, *inputs, _compile_only=False):
        key = self._graph.symbol_values(inputs, self._bindings)
        fn = self._compiled.get(key)
        if fn is None:
            from ._C import config as _config  # noqa: PLC0415
            limit = _config.get("dynamic_size_compiles")
            static = self._graph.specialize(key)
            if limit and len(self._compiled) >= limit:
                if not self._noted_limit:
                    from ._C import logging as _log  # noqa: PLC0415
                    _log.emit("perf_hints", f"a graph with symbolic sizes was compiled for {limit} sets of sizes "
                                            "(config dynamic_size_compiles): new sizes run on eager ops")
                    self._noted_limit = True
                return None if _compile_only else static.run(*inputs)
            global _per_sizes_compiles
            _per_sizes_compiles += 1
            fn = self._compiled[key] = self._compile_static(static, inputs)
        return None if _compile_only else fn(*inputs)


def _compile_static(backend, graph, example_inputs, mode, options, training):
    if backend == "eager":
        return graph.run
    if backend == "aot_eager":
        return _aot_eager(graph, training)
    if backend == "cudagraphs":
        return _cudagraphs(graph, example_inputs)
    if backend == "inductor":
        from . import config  # noqa: PLC0415
        with config.patch(**(options or {})):
            if training:
                return _inductor_training(graph, example_inputs, mode)
            return _inductor(graph, example_inputs, mode)
    kwargs = {k: v for k, v in (("mode", mode), ("options", options)) if v}
    if getattr(backend, "_framefuse_native_graph", False):
        compiled = backend(graph, example_inputs, **kwargs)
    else:
        from .fx import to_fx  # noqa: PLC0415
        compiled = backend(to_fx(graph), example_inputs, **kwargs)
    if not callable(compiled):
        name = getattr(backend, "__name__", repr(backend))
        raise TypeError(f"framefuse backend {name} returned {type(compiled).__name__}; "
                        "a backend must return a callable taking the graph inputs")
    return compiled


def _aot_eager(graph, training):
    """backend="aot_eager": a graph that needs autograd split into AOT autograd's forward and
    backward graphs, both run on eager ops (to tell the split's problems from code generation's)."""
    if not training:
        return graph.run
    from ._autograd import compile_with_autograd  # noqa: PLC0415
    from ._C import logging as _log  # noqa: PLC0415
    compiled = compile_with_autograd(graph._g, lambda g: g.run,
                                     lambda why: _log.emit("perf_hints", f"backend=aot_eager: {why}; eager ops"))
    return compiled if compiled is not None else graph.run


def _cudagraphs(graph, example_inputs):
    """backend="cudagraphs": the graph's eager kernels recorded in CUDA graphs and replayed (the
    forward and, for training, its backward), as torch's backend of that name; on the CPU, eager ops."""
    import torch  # noqa: PLC0415
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if tensors and all(t.is_cuda for t in tensors):
        from . import cuda  # noqa: PLC0415
        return cuda.TrainingGraphReplay(graph)
    from ._C import logging as _log  # noqa: PLC0415
    _log.emit("perf_hints", "backend=cudagraphs: the graph's inputs are not all CUDA tensors; it runs on eager ops")
    return graph.run
