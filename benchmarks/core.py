"""Runs one workload with one contender and returns its record (a plain dict, written to JSON as is).

What each field means (also written into results.json under "measured"):
- first_call_s: compile() plus the first call, synchronized. With a fresh on-disk cache directory for
  the contender (TORCHINDUCTOR_CACHE_DIR, FRAMEFUSE_CACHE_DIR) and the compiler's one-time imports
  already paid by a throwaway compile (`prewarm_s` in the contender table). For the "-eager" backends
  this is capture time alone.
- steady_s: median seconds per call after warm-up (batched samples: torch.utils.benchmark's
  Timer.adaptive_autorange on CPU, CUDA events on GPU).
- overhead_s (overhead workloads): median per-call time above eager, measured interleaved with eager.
- peak_mem_mb: CPU: peak RSS growth from before compile() to the end of timing (compiler included);
  CUDA: torch.cuda.max_memory_allocated over the same region.
- graphs / breaks: from the contender's explain() on a fresh copy, where it has one.
- max_abs_err / within_tol: first-call output against eager's first-call output, same seed and inputs.
"""

import os
import shutil
import statistics
import tempfile
import time
import traceback
import warnings

from . import measure
from .contenders import Unavailable, first_line
from .workloads import WorkloadUnavailable


def apply_framefuse_cache_dir():
    """framefuse reads its disk-cache directory from framefuse.config.cache_dir: point it at
    $FRAMEFUSE_CACHE_DIR when framefuse is loaded."""
    import sys
    ff = sys.modules.get("framefuse")
    path = os.environ.get("FRAMEFUSE_CACHE_DIR")
    if ff is None or not path:
        return
    try:
        ff.config.cache_dir = path
    except Exception:  # an older framefuse without the knob: nothing to point
        pass


class CacheDirs:
    """A fresh cache directory per (workload, contender), removed at the end of the run."""

    def __init__(self):
        # A supervised child uses its parent's directory: a child that crashes cannot clean up.
        self.root = os.environ.get("FRAMEFUSE_BENCH_CACHE_ROOT")
        self.owned = self.root is None
        if self.owned:
            self.root = tempfile.mkdtemp(prefix="framefuse-bench-")
        self.n = 0

    def fresh(self):
        self.n += 1
        d = os.path.join(self.root, f"{os.getpid()}-{self.n}")
        os.makedirs(d)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(d, "inductor")
        os.environ["FRAMEFUSE_CACHE_DIR"] = os.path.join(d, "framefuse")
        apply_framefuse_cache_dir()
        return d

    def cleanup(self):
        if self.owned:
            shutil.rmtree(self.root, ignore_errors=True)


def _base_record(wl, device, contender):
    return dict(workload=wl.name, family=wl.family, kind=wl.kind, device=device, contender=contender.name,
                status="ok", reason="")


def _fail(rec, stage, exc):
    rec["status"] = "unavailable" if isinstance(exc, (Unavailable, WorkloadUnavailable)) else "failed"
    msg = first_line(exc)
    if rec["status"] == "unavailable":
        rec["reason"] = msg
    else:
        rec["reason"] = f"{stage}: {type(exc).__name__}" + (f": {msg}" if msg else "")
    if rec["status"] == "failed":
        rec["traceback"] = traceback.format_exc(limit=-6)
    return rec


def build_case(wl, device, scale):
    import torch
    torch.manual_seed(0)
    return wl.build(device, scale)


def run_one(wl, device, scale, contender, budget, ref, caches, do_explain=True, on_stage=None):
    """ref: dict(out=eager first-call output) or None when this is eager itself (or eager failed)."""
    import torch
    rec = _base_record(wl, device, contender)
    stage = "check"

    def mark(s):
        nonlocal stage
        stage = s
        if on_stage:
            on_stage(s)

    try:
        contender.check()
        if torch.device(device).type not in contender.devices:
            raise Unavailable(f"{contender.name} runs only on {', '.join(contender.devices)}")
        mark("build")
        contender.reset()
        caches.fresh()
        case = build_case(wl, device, scale)
        rec["note"] = case.note
        mem = measure.MemoryProbe(device)
        mem.start()
        mark("compile")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            fn = contender.compile(case.target)
            rec["compile_call_s"] = time.perf_counter() - t0
            mark("first call")
            dt, out = measure.timed(lambda: case.run(fn), device)
            rec["first_call_s"] = rec["compile_call_s"] + dt
            if ref is None:
                rec["out"] = _detach(out)
            else:
                mark("compare")
                err, ok, note = measure.compare(ref["out"], out, case.atol, case.rtol)
                rec.update(max_abs_err=err, within_tol=ok)
                if note:
                    rec["compare_note"] = note
            mark("steady state")
            if wl.kind == "overhead" and contender.family != "eager":
                res = measure.paired_overhead(lambda: case.run(case.target), lambda: case.run(fn), device, budget)
                rec.update(steady_s=res["fn"]["median_s"], steady_iqr_s=res["fn"]["iqr_s"],
                           inner=res["fn"]["inner"], samples=res["fn"]["samples"],
                           overhead_s=res["overhead_s"], overhead_base_s=res["base"]["median_s"])
            else:
                res = measure.steady(lambda: case.run(fn), device, budget)
                rec.update(steady_s=res["median_s"], steady_iqr_s=res["iqr_s"], steady_min_s=res["min_s"],
                           inner=res["inner"], samples=res["samples"])
            rec["peak_mem_mb"] = mem.stop()
            rec["mem_kind"] = mem.kind
            if case.bytes_moved:
                rec["bytes_moved"] = case.bytes_moved
                rec["gbps"] = case.bytes_moved / rec["steady_s"] / 1e9
            fn = case = out = None  # NB: not del: the lambdas above name them
            if do_explain and contender.explain is not None:
                mark("explain")
                _explain(rec, wl, device, scale, contender)
    except Exception as e:  # noqa: BLE001 — every failure is reported, none stops the run
        _fail(rec, stage, e)
    finally:
        try:
            contender.reset()
        except Exception:
            pass
    return rec


def _explain(rec, wl, device, scale, contender):
    try:
        contender.reset()
        case = build_case(wl, device, scale)
        counts = contender.explain(case.target, case.explain_args or case.args)
        rec["graphs"], rec["breaks"] = counts.graphs, counts.breaks
        if counts.note:
            rec["explain_note"] = counts.note
    except Exception as e:
        rec["explain_note"] = f"explain failed: {type(e).__name__}: {first_line(e)}"


def _detach(out):
    import torch
    if isinstance(out, torch.Tensor):
        # NB: kept on the CPU, so the reference does not count in the next contender's GPU peak.
        return out.detach().to("cpu", copy=True)
    if isinstance(out, dict):
        return {k: _detach(v) for k, v in out.items()}
    if isinstance(out, (list, tuple)):
        return [_detach(o) for o in out]
    return out


def _settle(wl, device, scale, budget):
    """An untimed eager pass before anything is measured. NB: without it the first contender measured
    on a workload (always eager) paid for growing the heap to the workload's sizes and faulting its
    pages in, and came out up to 3x slower than an identical contender measured after it."""
    try:
        case = build_case(wl, device, scale)
        measure.warmup(lambda: case.run(case.target), device, budget)
    except Exception:
        pass  # eager's own measured run reports the failure


def run_workload(wl, device, scale, contenders, budget, caches, do_explain=True, on_stage=None, done=None,
                 stop=None):
    """Eager first (its output is the reference), then every other contender; yields their records.
    `done`: contenders already recorded for this workload (by an earlier process that crashed): not
    run again, though eager still runs unrecorded when others need its output. `stop()`: a reason not
    to start the next contender (a run's deadline), or None."""
    from .contenders import CONTENDERS
    done = done or {}
    ref_runner = CONTENDERS["eager"]  # always measured: it is both the reference and the baseline
    others = [c for c in contenders if c.name != "eager" and c.name not in done]
    if "eager" in done and not others:
        return
    stage = on_stage or (lambda c, s: None)
    stage(ref_runner.name, "start")
    if done.get("eager", "ok") != "ok":  # eager itself did not finish: nothing to compare against
        for c in others:
            rec = _base_record(wl, device, c)
            rec.update(status="failed", reason="eager reference did not run (see eager's row)")
            yield rec
        return
    _settle(wl, device, scale, budget)
    r = run_one(wl, device, scale, ref_runner, budget, None, caches, do_explain,
                lambda s: stage(ref_runner.name, s))
    ref = dict(out=r.pop("out")) if r["status"] == "ok" else None
    if "eager" not in done:
        yield r
    for c in others:
        why = stop() if stop else None
        if why:
            rec = _base_record(wl, device, c)
            rec.update(status="skipped", reason=why)
            yield rec
            continue
        stage(c.name, "start")
        if ref is None:
            rec = _base_record(wl, device, c)
            rec.update(status=r["status"], reason=f"eager reference: {r['reason']}")
            yield rec
            continue
        yield run_one(wl, device, scale, c, budget, ref, caches, do_explain, lambda s, c=c: stage(c.name, s))


def interleaved_steady(wl, device, scale, contenders, budget, rounds):
    """Steady state with the contenders taking turns: each round takes one batched sample of every
    contender, back to back, so a minute of background load hits them all alike. (Measured one after
    another, as run_workload does, whichever contender ran later came out up to 20% faster on the
    2-core development machine.) Returns dict(workload, device, rounds, steady_s={name: median
    seconds per call}, paired={name: median per-round eager/name ratio}, notes={name: why left out})."""
    out = dict(workload=wl.name, device=device, rounds=rounds, steady_s={}, paired={}, notes={})
    case = build_case(wl, device, scale)
    fns, inner = {}, {}
    for c in contenders:
        try:
            c.reset()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn = c.compile(case.target)
                call = (lambda fn=fn: case.run(fn))  # noqa: E731
                measure.warmup(call, device, budget)
                inner[c.name] = measure.calibrate(call, device, budget)
            fns[c.name] = call
        except Exception as e:  # noqa: BLE001 — reported in the entry, the others still run
            out["notes"][c.name] = f"{type(e).__name__}: {first_line(e)}"
    samples = {name: [] for name in fns}
    try:
        for _ in range(rounds):
            for name, call in fns.items():
                samples[name].append(measure._batch(call, inner[name], device) / inner[name])
    finally:
        del fns
        for c in contenders:
            try:
                c.reset()
            except Exception:
                pass
    for name, ts in samples.items():
        if ts:
            out["steady_s"][name] = statistics.median(ts)
    if "eager" in samples:
        for name, ts in samples.items():
            if name != "eager" and ts:
                out["paired"][name] = statistics.median(e / t for e, t in zip(samples["eager"], ts))
    if samples.get("framefuse") and samples.get("torch.compile"):
        out["framefuse_vs_torch_compile"] = statistics.median(
            t / f for f, t in zip(samples["framefuse"], samples["torch.compile"]))
    return out


def add_speedups(records):
    """speedup = eager's steady time / the contender's, same workload and device, same run."""
    base = {(r["workload"], r["device"]): r["steady_s"] for r in records
            if r["contender"] == "eager" and r["status"] == "ok" and r.get("steady_s")}
    for r in records:
        b = base.get((r["workload"], r["device"]))
        if b and r["status"] == "ok" and r.get("steady_s"):
            r["speedup"] = b / r["steady_s"]
