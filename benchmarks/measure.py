"""Timing, memory and error measurement.

Times are medians of batched samples: a sample is `inner` back-to-back calls. On CPU, steady() takes
them from torch.utils.benchmark's Timer.adaptive_autorange (blocks of calls sized by the Timer, sampled
until their IQR is within 10% of their median or the budget's sampling time is spent): taking turns
with the batches it replaced, its medians spread as little or less across repeats at about half the
cost, on torch 2.13 and 1.13 (benchmarks/experiments/timing_stability.py; RESULTS.md,
cpu-library-pieces-2026-11-29). Interleaved measurements (paired_overhead, core.interleaved_steady)
and CUDA keep our batches: `inner` calls, chosen so a sample lasts at least `min_sample_s`, bracketed
by CUDA events and synchronized at its end on CUDA (not measured against the Timer, whose clock is the
host's with a synchronize after every block), by perf_counter on CPU.
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
    """Calls fn for at least 3 calls and warmup_s. Returns the mean seconds per call it saw."""
    t0 = time.perf_counter()
    n = 0
    while n < 3 or time.perf_counter() - t0 < budget.warmup_s:
        fn()
        n += 1
        if n >= 1000:
            break
    sync(device)
    return (time.perf_counter() - t0) / n


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
    """Median seconds per call after warm-up. Returns dict(median_s, min_s, samples, inner, iqr_s)."""
    call_s = warmup(fn, device, budget)
    if not is_cuda(device):
        return _adaptive(fn, budget, call_s)
    inner = calibrate(fn, device, budget)
    per_call = []
    t0 = time.perf_counter()
    while len(per_call) < budget.samples and (len(per_call) < 3 or time.perf_counter() - t0 < budget.max_s):
        per_call.append(_batch(fn, inner, device) / inner)
    return _summary(per_call, inner)


def _adaptive(fn, budget, call_s):
    """CPU steady state through torch.utils.benchmark (torch 1.13 has the same Timer API); the summary
    (median, quartiles) is ours, as for our batches. NB: the sampling time is what our batches take
    (`samples` of 1.2 x min_sample_s, calibrate()'s margin; at most max_s), and at least 4 calls, so a
    slow call still gets 4 samples; torch's thread count is left as set (the Timer's default would be
    1); the clock is perf_counter, so a CPU measurement on a GPU machine does not synchronize the GPU
    after every block."""
    import torch
    from torch.utils.benchmark import Timer
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads(), timer=time.perf_counter)
    run_s = max(min(budget.samples * budget.min_sample_s * 1.2, budget.max_s), 4 * call_s)
    m = timer.adaptive_autorange(threshold=0.1, max_run_time=run_s)
    blocks = list(m.raw_times)
    # NB: the Timer stops at its time limit, which blocks longer than a call (its block size is its own)
    # can reach after fewer samples than our batches ever took.
    while len(blocks) < 4:
        blocks.append(timer.timeit(m.number_per_run).raw_times[0])
    return _summary([b / m.number_per_run for b in blocks], m.number_per_run)


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

