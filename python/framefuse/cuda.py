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
import threading
import weakref

import torch

from . import _C
from .backends import native_graph

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


_capture_streams = {}


def _uses_cudnn(graph):
    """Whether the graph has an op that runs on cuDNN with a TF32 choice (its convolutions)."""
    return any(n.op is not None and "conv" in n.op for n in graph.nodes())


def _cublas_switches():
    """torch's getters of the switches that choose cuBLAS kernels, those this torch has."""
    names = ("_get_cublas_allow_tf32", "_get_cublas_allow_fp16_reduced_precision_reduction",
             "_get_cublas_allow_bf16_reduced_precision_reduction", "_get_cublas_allow_fp16_accumulation")
    return tuple(f for f in (getattr(torch._C, n, None) for n in names) if f is not None)


_CUBLAS_SWITCHES = _cublas_switches()


def _precision_state(cudnn):
    """torch's precision switches that choose cuBLAS kernels, and cuDNN's TF32 switch where `cudnn`.
    A CUDA graph keeps the kernels chosen when it was recorded, so it is replayed only under the same
    switches. NB: torch._C's getters, which torch.backends.cuda.matmul's attributes return, at a
    seventh of their cost (0.6 against 4.3 us on the development machine: every replay reads them)."""
    return tuple(f() for f in _CUBLAS_SWITCHES), cudnn and torch._C._get_cudnn_allow_tf32()


_MISMATCH_HINT = ("inputs or precision switches differ from those of the recorded CUDA graph (shape, stride, dtype, "
                  "device, requires_grad, another tensor where a parameter was recorded, TF32)")
_PRECISION_HINT = ("TF32 / reduced-precision switches differ from those the CUDA graph was recorded under; "
                   "running without it")


def _release_cublas_workspaces():
    """Drops cuBLAS's cached workspaces (one per handle and stream). A recorded kernel keeps its
    workspace's address, so recordings release them just before capturing (the capture then makes
    its own, inside the graph's memory pool, where nothing else is given that memory) and right after
    (so that no later work on the capture stream shares a recorded graph's workspace). torch.compile's
    CUDA graphs do the same; a graph recorded with a workspace from the common pool crashed once
    torch.compile released it."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        torch.cuda.synchronize()
        clear()


def _after_last_replay(last):
    """The current stream, made to wait for `last` (the stream a graph last replayed on) where it is
    another one: the next replay overwrites the static buffers that replay read and wrote. Streams
    are (id, device index, device type) keys: torch.cuda.current_stream() builds a Stream object and
    looks the device up in Python, about 10 us of a replay's host time."""
    stream = torch._C._cuda_getCurrentStream(torch._C._cuda_getDevice())
    if last is not None and last != stream:
        _stream_of(stream).wait_stream(_stream_of(last))
    return stream


def _stream_of(key):
    return torch.cuda.Stream(stream_id=key[0], device_index=key[1], device_type=key[2])


def _capture_stream():
    """The side stream of the current device on which CUDA graphs are warmed up and recorded: one per
    device, because cuBLAS keeps a workspace (tens of MB) for each stream it runs on. The cached
    workspaces are released first too: the warm-up's then take the memory of the ones let go."""
    _release_cublas_workspaces()
    device = torch.cuda.current_device()
    stream = _capture_streams.get(device)
    if stream is None:
        stream = _capture_streams[device] = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    return stream


class CompiledCudaGraph:
    """A graph compiled for CUDA. Call it with the graph inputs; returns the graph outputs."""

    def __init__(self, graph, mode="default", arch=""):
        self._graph = graph
        self._mod = _C.cuda.compile(graph, "max-autotune" if mode.startswith("max-autotune") else mode, arch,
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

    @property
    def symbolic(self):
        """Dynamic shapes: one compile serves every set of sizes (the kernels take them as arguments)."""
        return self._mod.symbolic

    @property
    def instances(self):
        return self._mod.instances

    def __call__(self, *inputs):
        # NB: kernels do not record autograd: inputs that need gradients run eagerly.
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
            _hint("CUDA graph ran eagerly: an input requires grad (the CUDA code generator is inference-only)")
            return self._eager(inputs)
        try:
            return self._mod.run(*inputs)
        except _C.UserError as e:
            _hint(f"CUDA graph ran eagerly: {e}")
            return self._eager(inputs)
        except _C.InternalError as e:
            if _C.config.get("raise_on_internal_error"):
                raise
            _hint(f"CUDA graph ran eagerly after an internal error: {e}")
            return self._eager(inputs)

    def _eager(self, inputs):
        # NB: a graph with symbolic sizes runs on eager ops at the call's sizes (its symbolic int
        # arguments, view sizes and the like, need values).
        graph = self._graph
        if graph.is_symbolic():
            graph = graph.specialize(graph.symbol_values(inputs))
        return graph.run(*inputs)


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
        self._inputs = None  # _C.inductor.ReplayInputs of the recording
        self._first_ids = None
        self._derived = []  # (tensor, version) of the in-place inputs weights are converted or folded from
        self._no_graph = False
        self._training = None  # TrainingGraphReplay, made on the first call that needs autograd
        self._precision = None  # _precision_state() when recorded
        self._cudnn = _uses_cudnn(compiled._graph)
        self._lock = threading.Lock()  # one thread records or replays at a time: the buffers are shared
        self._stream = None  # the stream of the last replay (a key, see _after_last_replay)

    def __getattr__(self, name):
        return getattr(self._compiled, name)

    def _record(self, inputs):
        mod = getattr(self._compiled, "_mod", None)
        if getattr(mod, "writes_inputs", False):  # a replay would write the static copies, bump no version
            _hint("reduce-overhead: the graph writes its inputs in place; running without a CUDA graph")
            self._no_graph = True
            return False
        # NB: weights the compiled graph converts or folds (channels-last, batch norms) are cached
        # from their values when recorded; a replay must not see other values there.
        derived = set(getattr(mod, "derived_sources", ()))
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
        self._derived = [(inputs[i], inputs[i]._version) for i in sorted(derived)]
        stream = _capture_stream()
        with torch.cuda.stream(stream):
            self._compiled(*self._static_in)  # warm up: module load, allocator pools
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        _release_cublas_workspaces()
        with torch.cuda.graph(g, stream=stream):
            self._static_out = self._compiled(*self._static_in)
        _release_cublas_workspaces()
        self._cuda_graph = g
        self._inputs = _C.inductor.ReplayInputs(inputs, fixed)
        self._precision = _precision_state(self._cudnn)
        return True

    def __call__(self, *inputs):
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
            if self._training is None:
                self._training = TrainingGraphReplay(self._compiled._graph)
            return self._training(*inputs)
        if self._no_graph:
            return self._compiled(*inputs)
        if not self._lock.acquire(blocking=False):  # another thread is recording or replaying
            return self._compiled(*inputs)
        try:
            return self._replay(inputs)
        finally:
            self._lock.release()

    def _replay(self, inputs):
        if self._cuda_graph is None:
            if self._first_ids is None:  # first call: compile-and-run path, as torch.compile warms up
                self._first_ids = [id(t) for t in inputs]
                return self._compiled(*inputs)
            if not self._record(inputs):
                return self._compiled(*inputs)
        elif not self._inputs.matches(inputs):
            _hint("reduce-overhead: inputs differ from the recorded CUDA graph's (shape, stride, dtype, "
                  "device, or another tensor where a module's parameter was recorded); running without the "
                  "CUDA graph")
            return self._compiled(*inputs)
        elif _precision_state(self._cudnn) != self._precision:
            _hint("reduce-overhead: " + _PRECISION_HINT)
            return self._compiled(*inputs)
        elif any(t._version != v for t, v in self._derived):
            # A converted or folded weight changed in place: its derived copy is made again.
            self._first_ids = [id(t) for t in inputs]
            self._compiled(*inputs)
            if not self._record(inputs):
                return self._compiled(*inputs)
        self._stream = _after_last_replay(self._stream)
        for dst, src in zip(self._static_in, inputs):
            if isinstance(dst, torch.Tensor) and dst is not src:
                dst.copy_(src)
        self._cuda_graph.replay()
        return _clone_out(self._static_out)



_replay_module = []  # [module or None], filled on first use


def _torch_replay():
    """framefuse._torch_replay (the training replay's C++ autograd node), or None where it was not
    built (a torch without its C++ libraries, torch 1.x) or was built for another torch; the
    reason goes to perf_hints once."""
    if not _replay_module:
        try:
            from . import _torch_replay as mod  # noqa: PLC0415 - optional module, loaded on first use
        except ImportError as e:
            mod = None
            _hint(f"reduce-overhead (training): replays go through torch.autograd.Function ({e})")
        _replay_module.append(mod)
    return _replay_module[0]


# Whether training replays use framefuse._torch_replay where it loads (the tests turn it off to
# cover the Python replay too).
native_training_replay = True


def _recompute(graph, need_grad, inputs, grad_outs, create_graph):
    """The gradients of the inputs at `need_grad` by the graph's eager ops, on the caller's own
    tensors (so that a create_graph backward leads back to them)."""
    with torch.enable_grad():
        outs = graph.run(*inputs)
        diff = [k for k, o in enumerate(outs) if o.requires_grad]
        return list(torch.autograd.grad([outs[k] for k in diff], [inputs[i] for i in need_grad],
                                        [grad_outs[k] for k in diff], create_graph=create_graph,
                                        allow_unused=True))


class _Token:
    """One replayed forward: which recording it read (gen) and whether its backward has run."""
    __slots__ = ("gen", "done", "__weakref__")

    def __init__(self, gen):
        self.gen, self.done = gen, False


class _Recorded:
    """The CUDA graphs of one training recording and the static tensors they read and write."""

    def __init__(self):
        self.fwd = self.bwd = None
        self.inputs = []       # static inputs: detached aliases of parameters, copies of the rest
        self.fixed = []        # (index, tensor, data_ptr) of parameters read in place
        self.copied_meta = []  # (index, (shape, stride, dtype, device, requires_grad)) of copied inputs
        self.consts = []       # the non-tensor inputs by position, None at tensors
        self.tensor_at = []    # indices of tensor inputs
        self.const_at = []     # indices of the other inputs
        self.outputs = []      # static outputs
        self.precision = None  # _precision_state() when recorded
        self.diff_out = []     # indices of outputs that carry gradients
        self.grad_in = []      # static incoming gradients, one per diff_out
        self.need_grad = []    # indices of inputs that receive gradients
        self.grads = []        # static gradients, one per need_grad (None where unused)
        self.flat = None       # every gradient in one buffer (cloned once per backward), or None
        self.sizes = []        # numel of each gradient present, in flat's order
        self.shapes = []       # shape of each gradient (None where unused or already 1-d)


class TrainingGraphReplay:
    """mode="reduce-overhead" for graphs that need autograd: the forward and its backward each
    recorded once in a CUDA graph (the reference runner's ops and torch.autograd.grad over them) and
    replayed under one autograd node, as torch.compile's CUDA graphs do for training. The node is
    framefuse._torch_replay's C++ one where that module loads (no Python and no GIL on the replayed
    path); otherwise a torch.autograd.Function.

    Parameters passed as the same objects in the first two calls are read in place (an optimizer's
    in-place updates are seen); other inputs are copied in. Outputs and gradients are copies, never
    the static buffers. A forward is replayed only when the previous replayed forward's backward has
    run or its autograd graph is gone; otherwise the call runs eagerly, so two forwards never share
    the recorded activations. A backward whose activations were overwritten (retain_graph and a later
    forward) or that builds a graph of its own (create_graph) recomputes the forward eagerly. Graphs
    that draw random numbers, mutate an input, or return aliases run without a CUDA graph."""

    def __init__(self, graph):
        self._graph = graph
        self._rec = None
        self._native = None  # the recording's framefuse._torch_replay.TrainingReplay, where it loads
        self._first_ids = None
        self._no_graph = None  # why this graph runs without a CUDA graph
        self._gen = 0
        self._bwd_replays = 0
        self._pending = None  # weakref to the _Token of the last replayed forward
        self._hinted_pending = False
        self._lock = threading.Lock()
        self._stream = None  # the stream of the last replay (forward or backward)
        self._cudnn = _uses_cudnn(graph)
        random_ops = {o["name"] for o in _C.graph.ops() if "random" in o["traits"]}
        drawn = sorted({n.op for n in graph.nodes() if n.op in random_ops})
        if drawn:
            self._no_graph = f"the graph draws random numbers ({', '.join(drawn)})"
            _hint(f"reduce-overhead (training): {self._no_graph}; running without a CUDA graph")

    @property
    def replays(self):
        """How many forwards have been replayed from the recording."""
        return self._native.generation if self._native is not None else self._gen

    @property
    def backward_replays(self):
        """How many backwards have been replayed from the recording (not recomputed eagerly)."""
        return self._native.backward_replays if self._native is not None else self._bwd_replays

    @staticmethod
    def _meta(t):
        return t.shape, t.stride(), t.dtype, t.device, t.requires_grad

    def _matches(self, rec, inputs):
        """Whether this call's inputs fit the recording: the same parameters at the same addresses,
        copied inputs of the same metadata, the same other values."""
        if len(inputs) != len(rec.consts) or _precision_state(self._cudnn) != rec.precision:
            return False
        for i, t, ptr in rec.fixed:
            if inputs[i] is not t or t.data_ptr() != ptr:
                return False
        for i, meta in rec.copied_meta:
            t = inputs[i]
            if not isinstance(t, torch.Tensor) or self._meta(t) != meta:
                return False
        return all(not isinstance(inputs[i], torch.Tensor) and inputs[i] == rec.consts[i] for i in rec.const_at)

    def _eager(self, inputs, why=None):
        if why:
            _hint(f"reduce-overhead (training): {why}; running without a CUDA graph")
        return self._graph.run(*inputs)

    def __call__(self, *inputs):
        if self._no_graph:
            return self._graph.run(*inputs)
        if self._rec is None:
            if self._first_ids is None:  # first call: eager, as torch.compile warms up
                self._first_ids = [id(t) for t in inputs]
                return self._graph.run(*inputs)
            try:
                self._rec = self._record(inputs)
            except Exception as e:  # noqa: BLE001  (any failure to record leaves the graph eager)
                self._no_graph = f"recording failed ({type(e).__name__}: {e})"
            if self._rec is None:
                return self._eager(inputs, self._no_graph)
            self._native = self._native_replay(self._rec, inputs)
        if self._native is not None:
            return self._call_native(inputs)
        if not self._matches(self._rec, inputs):
            return self._eager(inputs, _MISMATCH_HINT)
        pending = self._pending() if self._pending is not None else None
        if pending is not None and not pending.done:
            return self._eager_pending(inputs)
        if not self._lock.acquire(blocking=False):  # another thread is replaying
            return self._graph.run(*inputs)
        try:
            return _TrainingReplayFn.apply(self, *inputs)
        finally:
            self._lock.release()

    def _eager_pending(self, inputs):
        if not self._hinted_pending:
            self._hinted_pending = True
            _hint("reduce-overhead (training): a forward ran while the previous one's backward had not; "
                  "it runs eagerly so the recorded activations stay with the first")
        return self._graph.run(*inputs)

    def _call_native(self, inputs):
        if _precision_state(self._cudnn) != self._rec.precision:
            return self._eager(inputs, _MISMATCH_HINT)
        out = self._native(inputs)
        if type(out) is tuple:
            return out
        mod = _torch_replay()
        if out == mod.MISMATCH:
            return self._eager(inputs, _MISMATCH_HINT)
        if out == mod.PENDING:
            return self._eager_pending(inputs)
        return self._graph.run(*inputs)  # BUSY: another thread is replaying

    def _native_replay(self, rec, inputs):
        """The recording's replay as a C++ autograd node (framefuse._torch_replay), or None: the
        module did not load, or this torch's CUDAGraph has no raw_cuda_graph_exec."""
        mod = _torch_replay() if native_training_replay else None
        if mod is None or not hasattr(rec.fwd, "raw_cuda_graph_exec"):
            return None
        graph, need_grad = self._graph, rec.need_grad
        try:
            spec = dict(
                device=inputs[rec.tensor_at[0]].device.index, fwd=rec.fwd.raw_cuda_graph_exec(),
                bwd=rec.bwd.raw_cuda_graph_exec(), n_inputs=len(rec.consts),
                fixed=[(i, t) for i, t, _ in rec.fixed],
                copied=[(i, rec.inputs[i], inputs[i]) for i, _ in rec.copied_meta],
                consts=[(i, rec.consts[i]) for i in rec.const_at], outputs=rec.outputs, diff_out=rec.diff_out,
                grad_in=rec.grad_in, need=need_grad, grads=rec.grads, flat=rec.flat, keep=rec,
                # NB: refers to the graph, not to self, so that the recording holds no cycle through C++.
                recompute=lambda ins, gouts, create: _recompute(graph, need_grad, ins, gouts, create))
            return mod.training_replay(spec)
        except (RuntimeError, TypeError, ValueError) as e:
            _hint(f"reduce-overhead (training): replays go through torch.autograd.Function ({e})")
            return None

    def _record(self, inputs):
        tensors = [isinstance(t, torch.Tensor) for t in inputs]
        if not all(t.is_cuda for t, is_t in zip(inputs, tensors) if is_t):
            self._no_graph = "an input is not a CUDA tensor"
            return None
        rec = _Recorded()
        fixed = [is_t and isinstance(t, torch.nn.Parameter) and id(t) == first
                 for t, is_t, first in zip(inputs, tensors, self._first_ids)]
        # A first run on copies of every input finds graphs that mutate one (their writes would go
        # to the static copies, or twice to a parameter).
        trial = [t.detach().clone().requires_grad_(t.requires_grad) if is_t else t for t, is_t in zip(inputs, tensors)]
        versions = [t._version if is_t else None for t, is_t in zip(trial, tensors)]
        out = self._graph.run(*trial)
        if any(is_t and t._version != v for t, is_t, v in zip(trial, tensors, versions)):
            self._no_graph = "the graph changes one of its inputs in place"
            return None
        if not isinstance(out, (tuple, list)) or not all(isinstance(o, torch.Tensor) for o in out):
            self._no_graph = "the graph returns something other than a tuple of tensors"
            return None
        storages = [o.untyped_storage().data_ptr() for o in out]
        inputs_st = {t.untyped_storage().data_ptr() for t, is_t in zip(trial, tensors) if is_t}
        if len(set(storages)) != len(storages) or inputs_st.intersection(storages):
            self._no_graph = "the graph returns views of its inputs or of each other"
            return None
        del out, trial
        rec.inputs = [(t.detach().requires_grad_(t.requires_grad) if f else t.detach().clone().requires_grad_(t.requires_grad))
                      if is_t else t for t, is_t, f in zip(inputs, tensors, fixed)]
        rec.fixed = [(i, inputs[i], inputs[i].data_ptr()) for i, f in enumerate(fixed) if f]
        rec.precision = _precision_state(self._cudnn)
        rec.copied_meta = [(i, self._meta(t)) for i, (t, is_t, f) in enumerate(zip(inputs, tensors, fixed)) if is_t and not f]
        rec.consts = [None if is_t else t for t, is_t in zip(inputs, tensors)]
        rec.tensor_at = [i for i, is_t in enumerate(tensors) if is_t]
        rec.const_at = [i for i, is_t in enumerate(tensors) if not is_t]
        rec.need_grad = [i for i, (t, is_t) in enumerate(zip(inputs, tensors)) if is_t and t.requires_grad]
        need = [rec.inputs[i] for i in rec.need_grad]

        def forward_backward(grad_in=None):
            outs = self._graph.run(*rec.inputs)
            diff = [o for o in outs if o.requires_grad]
            grads = torch.autograd.grad(diff, need, grad_in or [torch.ones_like(o) for o in diff],
                                        retain_graph=grad_in is not None, allow_unused=True)
            return outs, grads

        stream = _capture_stream()
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up: cuBLAS workspaces, allocator pools, lazy module loads
                forward_backward()
        torch.cuda.current_stream().wait_stream(stream)
        rec.fwd, rec.bwd = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        _release_cublas_workspaces()
        with torch.cuda.graph(rec.fwd, stream=stream):
            rec.outputs = list(self._graph.run(*rec.inputs))
        rec.diff_out = [k for k, o in enumerate(rec.outputs) if o.requires_grad]
        if not rec.diff_out:
            _release_cublas_workspaces()
            self._no_graph = "no output of the graph carries a gradient"
            return None
        rec.grad_in = [torch.empty_like(rec.outputs[k]) for k in rec.diff_out]
        with torch.cuda.graph(rec.bwd, pool=rec.fwd.pool(), stream=stream):
            grads = torch.autograd.grad([rec.outputs[k] for k in rec.diff_out], need, rec.grad_in,
                                        retain_graph=True, allow_unused=True)
            present = [g for g in grads if g is not None]
            if present and len({g.dtype for g in present}) == 1:
                rec.flat = torch.cat([g.reshape(-1) for g in present])
        _release_cublas_workspaces()
        rec.grads = list(grads)
        rec.sizes = [g.numel() for g in grads if g is not None]
        rec.shapes = [None if g is None or g.dim() == 1 else g.shape for g in grads]
        return rec

    # The two halves of a replayed call, run by _TrainingReplayFn under self._lock (forward) and
    # from autograd's backward.
    def _replay_forward(self, inputs):
        rec = self._rec
        self._stream = _after_last_replay(self._stream)
        for i, _ in rec.copied_meta:
            rec.inputs[i].copy_(inputs[i])  # autograd.Function.forward runs without grad mode
        rec.fwd.replay()
        self._gen += 1
        token = _Token(self._gen)
        self._pending = weakref.ref(token)
        return [o.clone() for o in rec.outputs], token

    def _replay_backward(self, token, grad_outs):
        rec = self._rec
        with self._lock:
            token.done = True
            if token.gen != self._gen:
                return None  # a later forward overwrote the activations
            self._stream = _after_last_replay(self._stream)
            for buf, k in zip(rec.grad_in, rec.diff_out):
                buf.copy_(grad_outs[k])
            rec.bwd.replay()
            self._bwd_replays += 1
            if rec.flat is None:
                return [None if g is None else g.clone() for g in rec.grads]
            parts = iter(rec.flat.clone().split(rec.sizes))
            return [None if g is None else next(parts) if shape is None else next(parts).view(shape)
                    for g, shape in zip(rec.grads, rec.shapes)]


class _TrainingReplayFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, runner, *inputs):
        outs, token = runner._replay_forward(inputs)
        rec = runner._rec
        ctx.runner, ctx.token = runner, token
        ctx.save_for_backward(*(inputs[i] for i in rec.tensor_at))  # also autograd's in-place checks
        if len(rec.diff_out) < len(outs):
            diff = set(rec.diff_out)
            ctx.mark_non_differentiable(*(o for k, o in enumerate(outs) if k not in diff))
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grad_outs):
        runner = ctx.runner
        saved = ctx.saved_tensors  # raises as eager does if an input was changed in place since
        create_graph = torch.is_grad_enabled()  # then the eager ops' own graph is needed
        grads = None if create_graph else runner._replay_backward(ctx.token, grad_outs)
        rec = runner._rec
        if grads is None:
            ctx.token.done = True
            inputs = list(rec.consts)
            for i, t in zip(rec.tensor_at, saved):
                inputs[i] = t
            grads = _recompute(runner._graph, rec.need_grad, inputs, grad_outs, create_graph)
        result = [None] * len(rec.consts)
        for i, g in zip(rec.need_grad, grads):
            result[i] = g
        return (None, *result)

def _clone_out(out):
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (tuple, list)):
        return type(out)(_clone_out(o) for o in out)
    return out


@native_graph
def backend(graph, example_inputs, mode=None, **options):
    """A framefuse.compile backend for graphs of CUDA tensors:
    `framefuse.compile(fn, backend=framefuse.cuda.backend)`. Graphs with CPU tensors, and graphs
    the code generator cannot compile, run on the reference runner (with a perf_hints line)."""
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if not tensors or not all(t.is_cuda for t in tensors):
        _hint("CUDA backend: the graph's inputs are not all CUDA tensors; running it eagerly")
        return graph.run
    from .inductor import _graph_handle, _needs_autograd  # noqa: PLC0415
    handle = _graph_handle(graph)
    if handle.has_data_dependent_values():
        _hint("CUDA backend: a graph with data-dependent sizes or floats (nonzero, masked_select, unique, .item() ...) "
              "runs eagerly")
        return graph.run
    if _needs_autograd(handle):
        from ._autograd import compile_with_autograd  # noqa: PLC0415
        inner = "default" if mode in (None, "reduce-overhead") else mode
        compiled = compile_with_autograd(handle, lambda g: _compile_or_eager(g, inner),
                                         lambda why: _hint(f"CUDA backend: {why}; running it eagerly"))
        return compiled if compiled is not None else graph.run
    return _compile_or_eager(graph, mode or "default")


def _compile_or_eager(graph, mode):
    try:
        return compile_graph(graph, mode=mode)
    except (_C.Unsupported, _C.UserError) as e:
        _hint(f"CUDA backend: running the graph eagerly: {e}")
        return graph.run
    except _C.InternalError as e:
        if _C.config.get("raise_on_internal_error"):
            raise
        _hint(f"CUDA backend: internal error, running the graph eagerly: {e}")
        return graph.run


def compile_symbolic(graph, example_inputs, mode=None):
    """A graph of CUDA tensors with symbolic sizes compiled once for every set of sizes (see
    framefuse.inductor.compile_symbolic); None where it cannot be."""
    from .inductor import _graph_handle, _needs_autograd, _symbolic_or_none  # noqa: PLC0415
    if (mode or "default") not in ("default", "max-autotune", "max-autotune-no-cudagraphs") or _needs_autograd(_graph_handle(graph)):
        return None
    return _symbolic_or_none(lambda: CompiledCudaGraph(graph, mode or "default"), "CUDA")


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
