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


_C.cuda.set_nvrtc_dir_provider(_nvrtc_dirs)


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
        self._mod = _C.cuda.compile(graph._g, "max-autotune" if mode.startswith("max-autotune") else "default", arch,
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


class CudaGraphReplay:
    """mode="reduce-overhead": the compiled graph's launches recorded once in a CUDA graph and
    replayed; inputs are copied into static buffers, outputs cloned out of the graph's pool.
    Calls whose inputs differ in shape, dtype, device or strides from the recorded ones run the
    compiled graph directly (with a perf_hints line)."""

    def __init__(self, compiled):
        self._compiled = compiled
        self._cuda_graph = None
        self._static_in = None
        self._static_out = None
        self._sig = None
        self._calls = 0

    def __getattr__(self, name):
        return getattr(self._compiled, name)

    @staticmethod
    def _signature(inputs):
        return tuple((t.shape, t.stride(), t.dtype, t.device) if isinstance(t, torch.Tensor) else ("obj", t)
                     for t in inputs)

    def _record(self, inputs):
        self._static_in = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
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

    def __call__(self, *inputs):
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
            return self._compiled(*inputs)
        if self._cuda_graph is None:
            self._calls += 1
            if self._calls < 2:  # first call: compile-and-run path, as torch.compile warms up
                return self._compiled(*inputs)
            self._record(inputs)
        elif self._signature(inputs) != self._sig:
            _hint("reduce-overhead: inputs differ from the recorded CUDA graph's (shape, stride, dtype or "
                  "device); running without the CUDA graph")
            return self._compiled(*inputs)
        for dst, src in zip(self._static_in, inputs):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        self._cuda_graph.replay()
        return _clone_out(self._static_out)


def _clone_out(out):
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (tuple, list)):
        return type(out)(_clone_out(o) for o in out)
    return out


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
