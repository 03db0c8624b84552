"""The workloads and contenders of benchmarks/gpu_suite.py, and the measuring of one pair.

Workloads (issue sizes on CUDA; `tiny` shrinks them for a CPU check of the code paths):
- nanogpt: the suite's nanoGPT-style decoder, 4 layers d768, B8 T512, inference
- resnet18: torchvision resnet18 (the suite's ResNet-18-style net where torchvision is missing), b32 224x224
- mlp_train_ro: the seed 128->256->10 MLP training step (CrossEntropy + Adam, b32), reduce-overhead
- sin_cos, ln_gelu, softmax: the memory-bound kernels of benchmarks/gpu_kernels.py, 64M floats,
  8192x4096 and 4096x4096

Each contender starts from identical weights and inputs (same seed), so outputs compare with eager's.
"""

import math
import os
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from .workloads import pick
from .workloads.models import build_nanogpt, build_resnet18
from .workloads.seed import build_mlp_train_step


class Spec:
    """What one contender needs: a fresh target, its input sets and how a step runs it."""

    def __init__(self, target, arg_sets, step=None, kind="infer", bytes_moved=None, note="", tol=1e-3):
        self.target, self.arg_sets, self.kind = target, arg_sets, kind
        self.step = step or (lambda fn, args: fn(*args))
        self.bytes_moved, self.note, self.tol = bytes_moved, note, tol


def _no_grad(fn, args):
    with torch.no_grad():
        return fn(*args)


def _from_case(case, kind, sets=1):
    """A Spec around a benchmarks.workloads Case (models and the MLP step)."""
    arg_sets = [case.args]
    for _ in range(sets - 1):  # more input sets of the same shapes, for rotation
        arg_sets.append(tuple(torch.randn_like(a) if a.is_floating_point() else a for a in case.args))
    step = case.step or (lambda fn, args: fn(*args))
    return Spec(case.target, arg_sets, step, kind, note=case.note, tol=case.atol)


def _sin_cos(x):
    return torch.sin(x) + torch.cos(x)


def _ln_gelu(x, r, w, b):
    return F.gelu(F.layer_norm(x + r, (x.shape[-1],), w, b))


def _softmax(x):
    return torch.softmax(x * 0.125, -1)


def _kernel_spec(fn, make, nbytes, note):
    return Spec(fn, [make() for _ in range(3)], _no_grad, "infer", nbytes, note, 1e-4)


def build(name, device, tiny):
    """A fresh Spec of workload `name` (call after torch.manual_seed for identical weights)."""
    scale = "tiny" if tiny else "full"
    if name == "nanogpt":
        return _from_case(build_nanogpt(device, scale), "infer")
    if name == "resnet18":
        return _from_case(build_resnet18(device, scale), "infer", sets=2)
    if name == "mlp_train_ro":
        return _from_case(build_mlp_train_step(device, scale), "train", sets=3)
    if name == "sin_cos":
        n = pick(scale, 1 << 12, 0, 1 << 26)
        return _kernel_spec(_sin_cos, lambda: (torch.randn(n, device=device),), 2 * n * 4, f"{n} floats")
    if name == "ln_gelu":
        rows, cols = pick(scale, (64, 256), 0, (8192, 4096))
        return _kernel_spec(_ln_gelu, lambda: (torch.randn(rows, cols, device=device),
                                               torch.randn(rows, cols, device=device),
                                               torch.randn(cols, device=device), torch.randn(cols, device=device)),
                            3 * rows * cols * 4, f"{rows}x{cols}")
    if name == "softmax":
        rows, cols = pick(scale, (64, 256), 0, (4096, 4096))
        return _kernel_spec(_softmax, lambda: (torch.randn(rows, cols, device=device),), 2 * rows * cols * 4,
                            f"{rows}x{cols}")
    raise KeyError(name)


WORKLOADS = {
    "nanogpt": "nanoGPT-style decoder, 4 layers d768, B8 T512, inference",
    "resnet18": "resnet18 inference, b32 224x224",
    "mlp_train_ro": "128->256->10 MLP training step (CrossEntropy + Adam), b32",
    "sin_cos": "sin(x)+cos(x), 64M floats",
    "ln_gelu": "gelu(layer_norm(x + r)), 8192x4096",
    "softmax": "softmax(x * 0.125, -1), 4096x4096",
}
MODEL_WORKLOADS = ("nanogpt", "resnet18", "mlp_train_ro")

# Issue targets on an H200: (what, value). Speedups are over eager in the same run.
GOALS = {
    "nanogpt": ("speedup", 1.3), "resnet18": ("speedup", 1.7), "mlp_train_ro": ("speedup", 1.3),
    "sin_cos": ("TB/s", 3.6), "ln_gelu": ("ms", 0.160), "softmax": ("ms", 0.060),
}


def contenders(workload, device):
    """(name, family, compile(target) -> callable) for one workload."""
    cuda = device.startswith("cuda")
    ro = workload == "mlp_train_ro"
    tc_mode = "reduce-overhead" if ro else None
    ff_mode = "reduce-overhead" if ro else None
    out = [("eager", "eager", lambda t: t),
           ("torch.compile" + ("-ro" if ro else ""), "torch.compile", _tc(tc_mode)),
           ("framefuse" + ("-ro" if ro else ""), "framefuse", _ff(ff_mode))]
    if cuda and not ro:
        out.append(("framefuse-max-autotune", "framefuse", _ff("max-autotune")))
    if cuda and workload == "resnet18":  # many launches, a small output: what CUDA graph replay is for
        out.append(("framefuse-ro", "framefuse", _ff("reduce-overhead")))
    return out


def _tc(mode):
    def compile(target):  # noqa: A001
        kw = {"mode": mode} if mode else {}
        return torch.compile(target, **kw)
    return compile


def _ff(mode):
    def compile(target):  # noqa: A001
        import framefuse
        kw = {"mode": mode} if mode else {}
        return framefuse.compile(target, backend="inductor", **kw)
    return compile


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def fresh_caches(root, family):
    """A fresh on-disk cache for the next compile (cold first call) and the compiler's in-memory caches
    cleared."""
    d = tempfile.mkdtemp(dir=root)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(d, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(d, "triton")
    if family == "torch.compile":
        torch._dynamo.reset()
    elif family == "framefuse":
        import framefuse
        framefuse.reset()
        framefuse.config.cache_dir = os.path.join(d, "framefuse")


def warm_workspaces(device):
    """cuBLAS's per-thread workspaces (the calling thread's and autograd's backward thread's), made
    before a contender's peak memory is measured. They are one-time process costs, and
    torch.compile's CUDA graphs clear them before capturing: without this, whichever contender runs
    next is charged for re-creating them (2 x 32 MB on an H200)."""
    a = torch.randn(64, 64, device=device, requires_grad=True)
    (a @ a).sum().backward()
    sync(device)


def prewarm(family, device):
    """Pays a compiler's one-time imports and set-up with a throwaway function, so they are not charged
    to the first workload's cold call. Returns seconds."""
    if family == "eager":
        return 0.0
    t0 = time.perf_counter()
    fn = (_tc(None) if family == "torch.compile" else _ff(None))(lambda x: (x * 2.0).relu() + 1.0)
    fn(torch.randn(64, device=device))
    sync(device)
    if family == "torch.compile":
        torch._dynamo.reset()
    else:
        import framefuse
        framefuse.reset()
    return time.perf_counter() - t0


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for k in out for t in _tensors(out[k])]
    return []


def snapshot(spec, outs):
    """What is compared with eager: the first call's outputs (inference) or the 3 steps' losses and the
    parameters after them (training), detached copies."""
    ts = [t for o in outs for t in _tensors(o)]
    if spec.kind == "train":
        ts += [p.detach() for p in spec.target.parameters()]
    return [t.detach().clone() for t in ts]


def errors(ref, got):
    """(max abs error, relative error ||got - ref|| / ||ref||), over all compared tensors, in float64."""
    if len(ref) != len(got):
        return math.inf, math.inf
    worst, num, den = 0.0, 0.0, 0.0
    for a, b in zip(ref, got):
        if a.shape != b.shape:
            return math.inf, math.inf
        d = b.double() - a.double()
        if torch.isnan(d).any():
            return math.nan, math.nan
        worst = max(worst, float(d.abs().max())) if d.numel() else worst
        num += float((d * d).sum())
        den += float((a.double() ** 2).sum())
    return worst, math.sqrt(num) / max(math.sqrt(den), 1e-30)


def _batch(fn, spec, inner, i0, device):
    n = len(spec.arg_sets)
    if device.startswith("cuda"):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for i in range(inner):
            spec.step(fn, spec.arg_sets[(i0 + i) % n])
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / 1e3
    t0 = time.perf_counter()
    for i in range(inner):
        spec.step(fn, spec.arg_sets[(i0 + i) % n])
    return time.perf_counter() - t0


def steady_ms(fn, spec, device, samples=25, max_s=3.0, min_batch_s=0.002):
    """Median ms per step: batches of `inner` steps (rotating input sets) timed with CUDA events, enough
    steps per batch that a batch lasts min_batch_s."""
    inner = 1
    while True:
        t = min(_batch(fn, spec, inner, 0, device) for _ in range(2))
        if t >= min_batch_s or inner >= 4096:
            break
        inner = min(4096, max(inner * 2, int(inner * min_batch_s / max(t, 1e-9) * 1.2)))
    per, t0 = [], time.perf_counter()
    while len(per) < samples and (len(per) < 5 or time.perf_counter() - t0 < max_s):
        per.append(_batch(fn, spec, inner, len(per), device) / inner)
    per.sort()
    return statistics.median(per) * 1e3, (per[(3 * len(per)) // 4] - per[len(per) // 4]) * 1e3 / 2, inner


PRECISION = "fp32"  # "default": torch's own TF32 settings while timing; "high": matmuls in TF32 too (gpu_suite)


def _timing_precision():
    """After the compared first call(s): with PRECISION "default", torch's own TF32 settings (cuDNN
    convolutions in TF32, matmuls not) for the timing; with "high", what
    torch.set_float32_matmul_precision("high") sets (matmuls in TF32 as well). Both code paths call
    cuBLAS and cuDNN at run time, so the flags apply to compiled code as well."""
    if PRECISION in ("default", "high"):
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = PRECISION == "high"


def _compare_precision():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def measure(workload, cname, family, compile_fn, device, tiny, ref, cache_root, warmup_s=0.3, timing=True):
    """One contender on one workload: cold first call, error against eager's snapshot `ref` (None for
    eager), steady time, and peak memory: torch.cuda.max_memory_allocated from compile() through the
    warm-up, beyond what the model and inputs hold (so it includes the compiler's work buffers and a
    CUDA graph's pool); with PRECISION "default", only over the calls made at torch's own settings.
    Returns (record, snapshot)."""
    rec = dict(workload=workload, contender=cname, family=family, status="ok", precision=PRECISION)
    _compare_precision()
    fresh_caches(cache_root, family)
    torch.manual_seed(0)
    spec = build(workload, device, tiny)
    rec["note"] = spec.note
    cuda = device.startswith("cuda")
    if cuda:
        warm_workspaces(device)
    sync(device)
    if cuda:
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    # NB: with PRECISION "default" or "high" an inference workload's cold call runs as a user's would, under
    # torch's own settings (a compiler may choose layouts by them); the compared call follows.
    user_settings_cold = PRECISION != "fp32" and spec.kind != "train"
    if user_settings_cold:
        _timing_precision()
    t0 = time.perf_counter()
    fn = compile_fn(spec.target)
    outs = [spec.step(fn, spec.arg_sets[0])]
    sync(device)
    rec["cold_s"] = time.perf_counter() - t0
    if user_settings_cold:
        # NB: a second call under the same settings first: reduce-overhead records its CUDA graph
        # there, as it would for the user, not in the compared call below.
        spec.step(fn, spec.arg_sets[0])
        sync(device)
        # NB: the peak of the user's calls: the compared call below runs with TF32 off, which a user
        # at torch's defaults never does (cuDNN's fp32 kernels for a layout chosen under TF32 can
        # need other workspaces).
        peak = torch.cuda.max_memory_allocated() if cuda else 0
        _compare_precision()
        outs = [spec.step(fn, spec.arg_sets[0])]
    if spec.kind == "train":  # three steps from identical weights, as the error compares
        for i in (1, 2):
            outs.append(spec.step(fn, spec.arg_sets[i % len(spec.arg_sets)]))
    sync(device)
    if not user_settings_cold:
        peak = torch.cuda.max_memory_allocated() if cuda else 0
    snap = snapshot(spec, outs)
    del outs
    if ref is not None:
        rec["max_abs_err"], rec["rel_err"] = errors(ref, snap)
        rec["within_tol"] = bool(rec["rel_err"] <= spec.tol)
    if not timing:
        return rec, snap
    snap_bytes = sum(t.numel() * t.element_size() for t in snap)
    if cuda:  # the snapshot and the error's temporaries are the benchmark's, not the contender's
        sync(device)
        torch.cuda.reset_peak_memory_stats()
    _timing_precision()
    t0, n = time.perf_counter(), 0
    while n < 5 or time.perf_counter() - t0 < warmup_s:
        spec.step(fn, spec.arg_sets[n % len(spec.arg_sets)])
        n += 1
    sync(device)
    if cuda:
        peak = max(peak, torch.cuda.max_memory_allocated() - snap_bytes)
        rec["peak_mb"] = (peak - base) / 2 ** 20
    rec["steady_ms"], rec["steady_iqr_ms"], rec["inner"] = steady_ms(fn, spec, device)
    if spec.bytes_moved:
        rec["tbps"] = spec.bytes_moved / (rec["steady_ms"] / 1e3) / 1e12
    del fn, spec
    return rec, snap
