"""First call of one contender on one workload in a process of its own (`--isolate`).

The parent runs this twice per (workload, contender) with the same fresh cache directories: the first
process starts with empty on-disk caches (cold compile), the second finds what the first wrote (warm
disk cache, new process). Unlike the in-process runs, nothing is pre-warmed: the time includes the
compiler's lazy imports, which is what a user's fresh process pays.

`python -m benchmarks.worker '{"workload": ..., "device": ..., "scale": ..., "contender": ..., "threads": N}'`
prints one line `@@result {json}`.
"""

import json
import sys
import time

MARK = "@@result "


def main(argv=None):
    spec = json.loads((argv or sys.argv[1:])[0])
    out = dict(status="ok", reason="")
    try:
        import torch
        torch.set_num_threads(spec["threads"])
        from . import contenders, core, measure
        from .workloads import all_workloads
        wl = all_workloads()[spec["workload"]]
        c = contenders.CONTENDERS[spec["contender"]]
        dev = spec["device"]
        c.check()
        core.apply_framefuse_cache_dir()
        ref_case = core.build_case(wl, dev, spec["scale"])
        measure.sync(dev)
        t0 = time.perf_counter()
        ref = core._detach(ref_case.run(ref_case.target))
        measure.sync(dev)
        out["eager_first_call_s"] = time.perf_counter() - t0  # the model's own first call in this process
        del ref_case
        case = core.build_case(wl, dev, spec["scale"])
        compiled_before = _framefuse_compile_seconds()
        measure.sync(dev)
        t0 = time.perf_counter()
        fn = c.compile(case.target)
        res = case.run(fn)
        measure.sync(dev)
        out["first_call_s"] = time.perf_counter() - t0
        compiled_after = _framefuse_compile_seconds()
        if compiled_after is not None:
            out["compile_s"] = compiled_after - (compiled_before or 0.0)
        err, ok, note = measure.compare(ref, res, case.atol, case.rtol)
        out.update(max_abs_err=err, within_tol=ok, compare_note=note)
    except Exception as e:  # reported to the parent, which records it
        from .core import _fail
        _fail(out, "isolated first call", e)
        out.pop("traceback", None)
    print(MARK + json.dumps(out, default=str), flush=True)
    return 0


def _framefuse_compile_seconds():
    """framefuse's capture + backend seconds so far in this process (None if it is not loaded): the
    compile part of a first call, without the model's own first run."""
    ff = sys.modules.get("framefuse")
    return ff._C._frame_eval_stats()["compile_seconds"] if ff is not None else None


def _one(spec, env, cwd, timeout):
    import subprocess
    try:
        r = subprocess.run([sys.executable, "-m", "benchmarks.worker", json.dumps(spec)], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(status="failed", reason=f"isolated first call: no result within {timeout} s")
    for line in reversed(r.stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
    return dict(status="failed", reason=f"isolated first call: worker exit {r.returncode}: {tail}")


def isolated_first_calls(spec, cache_dir, repo, timeout):
    """Cold (empty cache dirs) and warm-disk (same dirs, new process) first calls. Returns the fields
    to add to the in-process record."""
    import os
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_dir, "inductor"),
               FRAMEFUSE_CACHE_DIR=os.path.join(cache_dir, "framefuse"))
    fields = {}
    for label in ("cold_process", "warm_disk"):
        res = _one(spec, env, repo, timeout)
        if res["status"] != "ok":
            fields[f"{label}_note"] = res["reason"]
            break
        fields[f"{label}_first_call_s"] = res["first_call_s"]
        for key in ("compile_s", "eager_first_call_s"):
            if key in res:
                fields[f"{label}_{key}"] = res[key]
        if not res.get("within_tol", True):
            fields[f"{label}_note"] = f"MISMATCH vs eager (max abs err {res['max_abs_err']:.2e})"
    return fields


if __name__ == "__main__":
    sys.exit(main())
