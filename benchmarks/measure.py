"""Timing, memory and error measurement.

Times are medians of batched samples: a sample is `inner` back-to-back calls, with `inner` chosen so a
sample lasts at least `min_sample_s` (short calls are dominated by timer noise otherwise). On CUDA a
sample is bracketed by CUDA events and synchronized at its end; on CPU by perf_counter.
"""

import math
import statistics
import time
from dataclasses import dataclass


@dataclass
class Budget:
    warmup_s: float = 0.2        # at least 3 calls, then keep warming up for this long
    min_sample_s: float = 0.005
    samples: int = 15
    max_s: float = 1.0           # stop sampling after this long (but take at least 3 samples)


def is_cuda(device):
    return str(device).startswith("cuda")


def sync(device):
    if is_cuda(device):
        import torch
        torch.cuda.synchronize()


def timed(fn, device):
    """(seconds, result) of one call, synchronized."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


def _batch(fn, inner, device):
    if is_cuda(device):
        import torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return time.perf_counter() - t0


def warmup(fn, device, budget):
    t0 = time.perf_counter()
    n = 0
    while n < 3 or time.perf_counter() - t0 < budget.warmup_s:
        fn()
        n += 1
        if n >= 1000:
            break
    sync(device)


def calibrate(fn, device, budget):
    """Calls per sample so one sample lasts at least min_sample_s."""
    inner = 1
    while True:
        # The fastest of three: one preempted batch must not fix `inner` too low on a busy machine.
        t = min(_batch(fn, inner, device) for _ in range(3))
        if t >= budget.min_sample_s or inner >= 1 << 20:
            return inner
        inner = min(1 << 20, max(inner * 2, int(inner * budget.min_sample_s / max(t, 1e-9) * 1.2)))


def steady(fn, device, budget):
    """Median seconds per call after warm-up. Returns dict(median_s, samples, inner, spread)."""
    warmup(fn, device, budget)
    inner = calibrate(fn, device, budget)
    per_call = []
    t0 = time.perf_counter()
    while len(per_call) < budget.samples and (len(per_call) < 3 or time.perf_counter() - t0 < budget.max_s):
        per_call.append(_batch(fn, inner, device) / inner)
    return _summary(per_call, inner)


def paired_overhead(base, fn, device, budget):
    """Per-call time of `fn` above `base`, measured interleaved (base batch, fn batch, ...) so machine
    noise hits both alike. Reported: difference of the two medians."""
    warmup(base, device, budget)
    warmup(fn, device, budget)
    inner = calibrate(base, device, budget)
    b, c = [], []
    t0 = time.perf_counter()
    while len(b) < budget.samples and (len(b) < 3 or time.perf_counter() - t0 < 2 * budget.max_s):
        b.append(_batch(base, inner, device) / inner)
        c.append(_batch(fn, inner, device) / inner)
    base_s, fn_s = _summary(b, inner), _summary(c, inner)
    return dict(fn=fn_s, base=base_s, overhead_s=fn_s["median_s"] - base_s["median_s"])


def _summary(per_call, inner):
    per_call = sorted(per_call)
    q1 = per_call[len(per_call) // 4]
    q3 = per_call[(3 * len(per_call)) // 4]
    return dict(median_s=statistics.median(per_call), min_s=per_call[0], samples=len(per_call), inner=inner,
                iqr_s=q3 - q1)


def fix_malloc():
    """Fixes glibc malloc's mmap and trim thresholds for the whole run. Returns a note, or None where
    it does not apply (not glibc). NB: glibc raises both thresholds as it sees large blocks freed, so
    what ran earlier in the process decides whether a later contender's outputs come from the heap or
    are mapped (and page-faulted) anew on every call: measured here, sin(x)+cos(x) over 1M floats ran
    3-5x slower as the first contender than as an identical contender after it. Fixed values make
    every contender allocate alike."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    m_trim_threshold, m_mmap_threshold = -1, -3
    mmap_at, trim_at = 32 << 20, 1 << 30  # 32 MB is glibc's own ceiling for the mmap threshold
    if mallopt(m_mmap_threshold, mmap_at) != 1 or mallopt(m_trim_threshold, trim_at) != 1:
        return None
    return "glibc malloc thresholds fixed for the run: mmap at 32 MB, trim at 1 GB"


# --- memory -----------------------------------------------------------------------------------------

class MemoryProbe:
    """Peak memory over a region. CUDA: torch.cuda.max_memory_allocated (absolute, bytes held by
    tensors). CPU: growth of the process's peak RSS (VmHWM) above the RSS at the start, after
    resetting the peak through /proc/self/clear_refs; this includes the compiler's own memory."""

    def __init__(self, device):
        self.device = device
        self.kind = None
        self.start_rss = None

    def start(self):
        if is_cuda(self.device):
            import torch
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.kind = "cuda max_memory_allocated"
            return
        self.start_rss = _rss()
        if self.start_rss is None:
            return
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.kind = "peak RSS growth"
        except OSError:
            self.kind = "RSS growth (end - start; peak not resettable)"

    def stop(self):
        """Megabytes, or None when nothing could be measured."""
        if is_cuda(self.device):
            import torch
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() / 2 ** 20
        if self.start_rss is None or self.kind is None:
            return None
        end = _hwm() if self.kind == "peak RSS growth" else _rss()
        if end is None:
            return None
        return max(0.0, (end - self.start_rss) / 2 ** 20)


def _status_kb(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _rss():
    return _status_kb("VmRSS")


def _hwm():
    return _status_kb("VmHWM")


# --- error ------------------------------------------------------------------------------------------

def flatten(out):
    """Tensors of a (nested) result, in a stable order: tuples, lists, dicts and ModelOutput-likes."""
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for k in out for t in flatten(out[k])]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten(o)]
    return []


def compare(ref, got, atol, rtol):
    """(max abs error, within tolerance, note). Shapes or structure that differ are reported, never
    silently compared."""
    import torch
    a, b = flatten(ref), flatten(got)
    if len(a) != len(b):
        return math.inf, False, f"{len(b)} output tensors, eager has {len(a)}"
    worst, ok = 0.0, True
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return math.inf, False, f"shape {tuple(y.shape)}, eager has {tuple(x.shape)}"
        if x.numel() == 0:
            continue
        x, y = x.detach().cpu(), y.detach().cpu()
        if not (x.is_floating_point() or x.is_complex()):
            x, y = x.double(), y.double()
        diff = (x.double() - y.double()).abs()
        both_inf = torch.isinf(x) & torch.isinf(y) & (torch.sign(x) == torch.sign(y))
        diff = torch.where(both_inf | (torch.isnan(x) & torch.isnan(y)), torch.zeros_like(diff), diff)
        if torch.isnan(diff).any():
            return math.nan, False, "NaN where eager has a number"
        worst = max(worst, float(diff.max()))
        bound = atol + rtol * torch.nan_to_num(x.double().abs(), nan=0.0, posinf=0.0)
        ok = ok and bool((diff <= bound).all())
    return worst, ok, ""

