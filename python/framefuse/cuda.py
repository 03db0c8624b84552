"""CUDA code generation: graphs of CUDA tensors compiled to CUDA C++ by framefuse, built with NVRTC
and launched on torch's current stream.

    from framefuse.graph import Graph
    from framefuse import cuda
    g = Graph(); x = g.placeholder("x", torch.randn(1024, device="cuda"))
    g.output((g.call(torch.add, g.call(torch.sin, x), g.call(torch.cos, x)),))
    fn = cuda.compile_graph(g)                 # mode="max-autotune" / "reduce-overhead"
    (y,) = fn(torch.randn(1024, device="cuda"))
    print(fn.source)                           # the generated CUDA C++

NVRTC comes from the CUDA toolkit or the `nvidia-cuda-nvrtc` wheel (`pip install nvidia-cuda-nvrtc`);
the driver from the NVIDIA driver. Neither is needed to import framefuse.
"""
import importlib.util
import os

import torch

from . import _C

_MODES = ("default", "max-autotune", "reduce-overhead", "max-autotune-no-cudagraphs")


def _nvrtc_dirs():
    """Library folders of installed NVIDIA wheels that may hold libnvrtc."""
    dirs = []
    for mod in ("nvidia.cu13", "nvidia.cuda_nvrtc", "nvidia.cu12"):
        try:
            spec = importlib.util.find_spec(mod)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                d = os.path.join(loc, "lib")
                if os.path.isdir(d):
                    dirs.append(d)
    return dirs



def nvrtc_status():
    """{'available', 'path', 'version', 'error'} of the runtime compiler (loads it on first call)."""
    return dict(_C.cuda.nvrtc_status())


def driver_status():
    """{'available', 'version', 'error'} of the CUDA driver (loads it on first call)."""
    return dict(_C.cuda.driver_status())


def _hint(msg):
    _C.cuda.perf_hint(msg)


class CompiledCudaGraph:
    """A graph compiled for CUDA. Call it with the graph inputs; returns the graph outputs."""

    def __init__(self, graph, mode="default", arch=""):
        self._graph = graph
        self._mod = _C.cuda.compile(graph._g, "max-autotune" if mode.startswith("max-autotune") else mode, arch,
                                    bool(arch))

    @property
    def source(self):
        return self._mod.source

    @property
    def program(self):
        return self._mod.program

    @property
    def arch(self):
        return self._mod.arch

    @property
    def compile_ms(self):
        return self._mod.compile_ms

    def kernels(self):
        return list(self._mod.kernels())

    def __call__(self, *inputs):
        # NB: kernels do not record autograd: inputs that need gradients run eagerly.
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
            _hint("CUDA graph ran eagerly: an input requires grad (the CUDA code generator is inference-only)")
            return self._graph.run(*inputs)
        try:
            return self._mod.run(*inputs)
        except _C.UserError as e:
            _hint(f"CUDA graph ran eagerly: {e}")
            return self._graph.run(*inputs)
        except _C.InternalError as e:
            if _C.config.get("raise_on_internal_error"):
                raise
            _hint(f"CUDA graph ran eagerly after an internal error: {e}")
            return self._graph.run(*inputs)


class CudaGraphReplay:
    """mode="reduce-overhead": the compiled graph's launches recorded once in a CUDA graph and
    replayed. Parameters, and the tensors the graph derives converted or folded weights from, passed
    as the very same objects in the first two calls are used in place, as torch.compile's static
    inputs are; the others are copied into static buffers on each call. Outputs are cloned out of the graph's pool. Calls whose inputs
    differ (shape, stride, dtype, device, or another tensor where a static one was recorded) run the
    compiled graph directly (with a perf_hints line)."""

    def __init__(self, compiled):
        self._compiled = compiled
        self._cuda_graph = None
        self._static_in = None
        self._static_out = None
        self._sig = None
        self._first_ids = None
        self._fixed = []  # (index, tensor, data_ptr, version) of inputs used in place
        self._no_graph = False

    def __getattr__(self, name):
        return getattr(self._compiled, name)

    @staticmethod
    def _signature(inputs):
        return tuple((t.shape, t.stride(), t.dtype, t.device) if isinstance(t, torch.Tensor) else ("obj", t)
                     for t in inputs)

    def _record(self, inputs):
        # NB: weights the compiled graph converts or folds (channels-last, batch norms) are cached
        # from their values when recorded; a replay must not see other values there.
        derived = set(getattr(getattr(self._compiled, "_mod", None), "derived_sources", ()))
        # Read in place: parameters and the tensors weights are derived from, passed as the same
        # objects twice (an input batch passed twice is still copied: the next batch is another tensor).
        fixed = [isinstance(t, torch.Tensor) and id(t) == first and (isinstance(t, torch.nn.Parameter) or i in derived)
                 for i, (t, first) in enumerate(zip(inputs, self._first_ids))]
        if any(not fixed[i] for i in derived):
            _hint("reduce-overhead: weights that the compiled graph converts or folds are passed as new tensors "
                  "on each call; running without a CUDA graph")
            self._no_graph = True
            return False
        self._static_in = [t if f else t.clone() if isinstance(t, torch.Tensor) else t for t, f in zip(inputs, fixed)]
        self._fixed = [(i, t, t.data_ptr(), t._version if i in derived else None)
                       for i, (t, f) in enumerate(zip(inputs, fixed)) if f]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._compiled(*self._static_in)  # warm up: module load, allocator pools
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self._static_out = self._compiled(*self._static_in)
        self._cuda_graph = g
        self._sig = self._signature(inputs)
        return True

    def __call__(self, *inputs):
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
            return self._compiled(*inputs)
        if self._no_graph:
            return self._compiled(*inputs)
        if self._cuda_graph is None:
            if self._first_ids is None:  # first call: compile-and-run path, as torch.compile warms up
                self._first_ids = [id(t) for t in inputs]
                return self._compiled(*inputs)
            if not self._record(inputs):
                return self._compiled(*inputs)
        elif self._signature(inputs) != self._sig or any(
                inputs[i] is not t or t.data_ptr() != ptr for i, t, ptr, _ in self._fixed):
            _hint("reduce-overhead: inputs differ from the recorded CUDA graph's (shape, stride, dtype, "
                  "device, or another tensor where a module's parameter was recorded); running without the "
                  "CUDA graph")
            return self._compiled(*inputs)
        elif any(v is not None and t._version != v for _, t, _, v in self._fixed):
            # A converted or folded weight changed in place: its derived copy is made again.
            self._first_ids = [id(t) for t in inputs]
            self._compiled(*inputs)
            if not self._record(inputs):
                return self._compiled(*inputs)
        for dst, src in zip(self._static_in, inputs):
            if isinstance(dst, torch.Tensor) and dst is not src:
                dst.copy_(src)
        self._cuda_graph.replay()
        return _clone_out(self._static_out)


def _clone_out(out):
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (tuple, list)):
        return type(out)(_clone_out(o) for o in out)
    return out


def backend(graph, example_inputs, mode=None, **options):
    """A framefuse.compile backend for graphs of CUDA tensors:
    `framefuse.compile(fn, backend=framefuse.cuda.backend)`. Graphs with CPU tensors, and graphs
    the code generator cannot compile, run on the reference runner (with a perf_hints line)."""
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if not tensors or not all(t.is_cuda for t in tensors):
        _hint("CUDA backend: the graph's inputs are not all CUDA tensors; running it eagerly")
        return graph.run
    try:
        return compile_graph(graph, mode=mode or "default")
    except (_C.Unsupported, _C.UserError) as e:
        _hint(f"CUDA backend: running the graph eagerly: {e}")
        return graph.run
    except _C.InternalError as e:
        if _C.config.get("raise_on_internal_error"):
            raise
        _hint(f"CUDA backend: internal error, running the graph eagerly: {e}")
        return graph.run


def compile_graph(graph, mode="default", arch=""):
    """Compile a framefuse.graph.Graph of CUDA tensors. With `arch` ("sm_90") the graph is compiled
    for that architecture without a GPU, its tensors taken as on cuda:0 whatever their device (for
    inspection and compile-only tests; such a result runs CPU inputs eagerly)."""
    mode = mode or "default"
    if mode not in _MODES:
        raise ValueError(f"framefuse.cuda.compile_graph: unknown mode {mode!r}; valid modes: {', '.join(_MODES)}")
    compiled = CompiledCudaGraph(graph, mode, arch)
    if mode == "reduce-overhead":
        return CudaGraphReplay(compiled)
    return compiled
