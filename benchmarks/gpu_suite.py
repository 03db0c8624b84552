"""GPU model and kernel benchmarks in one command: eager vs torch.compile vs framefuse.

    PYTHONUNBUFFERED=1 PYTHONPATH=python python -m benchmarks.gpu_suite --json gpu.json
    python -m benchmarks.gpu_suite --device cpu --tiny --json tiny.json   # checks the code paths on CPU

Workloads (benchmarks/gpu_cases.py): the nanoGPT-style decoder (4 layers, B8 T512, d768) and resnet18
(b32) in inference, the seed MLP training step (b32) with mode="reduce-overhead", and the three
memory-bound kernels of gpu_kernels.py. Contenders: eager, torch.compile (default; reduce-overhead for
the MLP step), framefuse.compile(backend="inductor") (the same modes; max-autotune too for kernels).

Per pair: steady ms (median of CUDA-event timed batches after warm-up), speedup over eager, cold first
call (compile + first call, fresh on-disk caches, each compiler's imports paid beforehand by a
throwaway compile), peak GPU memory beyond the model and inputs, and the error against eager (TF32
off for the whole run, so matmuls and convolutions compare in full fp32).

Robustness: the measuring runs in a child process; a contender that raises is recorded with its
reason, one that crashes the child or runs past the per-workload cap (--cap) is recorded as failed and
a new child goes on with the rest. Each record is printed as soon as it exists, and the JSON is
rewritten after every record, so a run cut short still leaves its results.
"""

import argparse
import datetime
import json
import math
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TAG = "@@ "
MEASURED = ("steady_ms: median ms per step, CUDA-event timed batches after warm-up, rotating input sets; "
            "cold_s: compile() + first call, fresh on-disk caches, the compiler's imports paid before by a "
            "throwaway compile (prewarm_s); peak_mb: torch.cuda.max_memory_allocated from compile() through "
            "warm-up beyond the model and inputs; max_abs_err / rel_err: against eager from the same seed "
            "(inference: first call's outputs; training: 3 steps' losses and the parameters after them), "
            "TF32 off (with --precision default: torch's own settings for the cold call of inference workloads and "
            "while timing, TF32 off for the compared call; with --precision high: matmuls in TF32 too)")


def parse_args(argv):
    from .gpu_cases import WORKLOADS
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_suite", description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write every measurement here (rewritten after each record)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="tiny sizes (a check of the code paths, not a benchmark)")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list; default: all")
    p.add_argument("--contenders", help="comma list of contender families: eager, torch.compile, framefuse")
    p.add_argument("--precision", choices=("fp32", "default", "high"), default="fp32",
                   help="fp32 (default): TF32 off for matmuls and cuDNN convolutions in timing and comparison; "
                        "default: torch's own settings (cuDNN convolutions in TF32) in timing; high: "
                        "torch.set_float32_matmul_precision('high') as well (matmuls in TF32, as nanoGPT's own "
                        "scripts set and torch.compile's hint suggests) in timing; with either, TF32 off for the "
                        "first call that the error compares")
    p.add_argument("--cap", type=float, default=150, help="seconds one workload may take (all contenders)")
    p.add_argument("--deadline", type=float, default=0,
                   help="seconds for the whole run: no workload starts after it (0: none)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--done", default="", help=argparse.SUPPRESS)  # workload/contender pairs already recorded
    return p.parse_args(argv)


def selected(args, workload):
    from .gpu_cases import contenders
    fams = set(args.contenders.split(",")) | {"eager"} if args.contenders else None
    return [c for c in contenders(workload, args.device) if fams is None or c[1] in fams]


def emit(kind, payload):
    sys.stdout.write(TAG + json.dumps({"kind": kind, **payload}, default=str) + "\n")
    sys.stdout.flush()


# --- the measuring child -----------------------------------------------------------------------

def child(args):
    import torch
    from . import gpu_cases as gc
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        emit("fatal", dict(reason="no CUDA device (torch.cuda.is_available() is False)"))
        return 2
    sys.path.append(os.path.join(REPO, "python"))  # NB: after PYTHONPATH: a lane's own package wins
    if not args.device.startswith("cuda"):
        torch.set_num_threads(1)  # the CPU check of the code paths: steadier on a shared machine
    gc.PRECISION = args.precision
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if args.device.startswith("cuda"):
        # cuBLAS's and cuDNN's one-time workspaces, made before anything is measured: otherwise the
        # first contender's peak memory would carry them.
        a = torch.randn(64, 64, device=args.device)
        (a @ a).sum().item()
        torch.nn.functional.conv2d(a.view(1, 1, 64, 64), a[:3, :3].reshape(1, 1, 3, 3)).sum().item()
        del a
    done = set(tuple(p.split("/", 1)) for p in args.done.split(",") if p)
    cache_root = tempfile.mkdtemp(prefix="ff_gpu_suite_")
    t_run = time.perf_counter()
    prewarmed = {}
    try:
        for wl in args.workloads.split(","):
            cands = selected(args, wl)
            if all((wl, c[0]) in done for c in cands):
                continue
            emit("workload", dict(workload=wl))
            t_wl, ref = time.perf_counter(), None
            for cname, family, compile_fn in cands:
                if (wl, cname) in done:
                    if family == "eager":  # measured by an earlier child: only its outputs are needed again
                        try:
                            _, ref = gc.measure(wl, cname, family, compile_fn, args.device, args.tiny, None,
                                                cache_root, timing=False)
                        except Exception:  # noqa: BLE001 - then nothing is compared
                            ref = None
                    continue
                late = time.perf_counter() - t_wl > args.cap
                if late:
                    emit("record", dict(workload=wl, contender=cname, family=family, status="not run",
                                        reason=f"workload time cap ({args.cap:.0f} s) reached"))
                    continue
                emit("start", dict(workload=wl, contender=cname))
                try:
                    if family not in prewarmed:
                        prewarmed[family] = gc.prewarm(family, args.device)
                        emit("prewarm", dict(family=family, seconds=prewarmed[family]))
                    rec, snap = gc.measure(wl, cname, family, compile_fn, args.device, args.tiny,
                                           ref if family != "eager" else None, cache_root)
                    if family == "eager":
                        ref = snap
                    del snap
                except Exception as e:  # noqa: BLE001 - reported, and the run goes on
                    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    rec = dict(workload=wl, contender=cname, family=family, status="failed",
                               reason=f"{type(e).__name__}: {msg}"[:400], traceback=traceback.format_exc(limit=-4))
                emit("record", rec)
            if args.deadline and time.perf_counter() - t_run > args.deadline:
                emit("deadline", dict(after=wl))
                break
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)
    return 0


# --- the supervising parent --------------------------------------------------------------------

def _environment(device):
    import torch
    env = dict(python=platform.python_version(), torch=torch.__version__, device=device,
               started=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    if device.startswith("cuda") and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env["gpu"] = f"{p.name} ({p.multi_processor_count} SMs)"
    try:
        import torchvision
        env["torchvision"] = torchvision.__version__
    except Exception as e:
        env["torchvision"] = f"not importable ({type(e).__name__})"
    try:
        sys.path.append(os.path.join(REPO, "python"))  # NB: after PYTHONPATH: a lane's own package wins
        from framefuse import cuda as ffcuda
        env["nvrtc"] = ffcuda.nvrtc_status().get("version") if device.startswith("cuda") else None
    except Exception as e:
        env["nvrtc"] = f"unknown ({type(e).__name__})"
    return env


def _child_cmd(args, workloads, done):
    cmd = [sys.executable, "-m", "benchmarks.gpu_suite", "--child", "--device", args.device,
           "--workloads", ",".join(workloads), "--cap", str(args.cap), "--done", ",".join("/".join(p) for p in done)]
    if args.tiny:
        cmd.append("--tiny")
    if args.precision != "fp32":
        cmd += ["--precision", args.precision]
    if args.contenders:
        cmd += ["--contenders", args.contenders]
    if args.deadline:
        cmd += ["--deadline", str(max(1.0, args.deadline - (time.perf_counter() - T0)))]
    return cmd


T0 = time.perf_counter()


def supervise(args, result, save):
    """Runs children until every workload is measured, crashed, timed out or past the deadline."""
    workloads = args.workloads.split(",")
    done = set()
    restarts = 0
    while True:
        pending = [w for w in workloads if any((w, c[0]) not in done for c in selected(args, w))]
        if not pending or restarts > 2 * len(workloads):
            return
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(_child_cmd(args, pending, done), cwd=REPO, stdout=subprocess.PIPE, env=env,
                                start_new_session=True)
        current, t_wl, buf, killed, fatal = None, time.perf_counter(), b"", None, False
        fd = proc.stdout.fileno()
        while True:
            r, _, _ = select.select([fd], [], [], 1.0)
            if r:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    line = raw.decode("utf-8", "replace")
                    if not line.startswith(TAG):
                        print("  | " + line.rstrip(), flush=True)
                        continue
                    msg = json.loads(line[len(TAG):])
                    kind = msg.pop("kind")
                    if kind == "workload":
                        t_wl = time.perf_counter()
                        print(f"== {msg['workload']}", flush=True)
                    elif kind == "start":
                        current = (msg["workload"], msg["contender"])
                    elif kind == "prewarm":
                        result["prewarm_s"][msg["family"]] = msg["seconds"]
                    elif kind == "record":
                        done.add((msg["workload"], msg["contender"]))
                        current = None
                        result["records"].append(msg)
                        print("  " + describe(msg), flush=True)
                        save()
                    elif kind == "deadline":
                        result["notes"].append(f"deadline reached after {msg['after']}: later workloads not run")
                    elif kind == "fatal":
                        result["notes"].append(msg["reason"])
                        print("fatal: " + msg["reason"], flush=True)
                        fatal = True
            elif proc.poll() is not None:
                break
            if current and time.perf_counter() - t_wl > args.cap + 20:
                killed = f"killed: workload time cap ({args.cap:.0f} s) exceeded"
                os.killpg(proc.pid, signal.SIGKILL)
                break
        rc = proc.wait()
        if fatal:
            return
        if current is None and not killed:
            if rc == 0:
                return
            if rc != 0:
                result["notes"].append(f"child exited with {rc} between records")
        else:
            how = killed or (f"crashed: {signal.Signals(-rc).name}" if rc < 0 else f"child exited with status {rc}")
            fam = next((c[1] for c in selected(args, current[0]) if c[0] == current[1]), None)
            rec = dict(workload=current[0], contender=current[1], family=fam, status="failed", reason=how)
            done.add(current)
            result["records"].append(rec)
            print("  " + describe(rec), flush=True)
            if killed:  # the rest of that workload is not run: its time is spent
                for c in selected(args, current[0]):
                    if (current[0], c[0]) not in done:
                        done.add((current[0], c[0]))
                        result["records"].append(dict(workload=current[0], contender=c[0], family=c[1],
                                                      status="not run",
                                                      reason="after a killed contender, workload time cap"))
            save()
        restarts += 1
        if args.deadline and time.perf_counter() - T0 > args.deadline:
            result["notes"].append("deadline reached: later workloads not run")
            return


def describe(r):
    if r["status"] != "ok":
        return f"{r['workload']:13} {r['contender']:24} {r['status']}: {r.get('reason', '')}"
    err = "" if "rel_err" not in r else f" rel err {r['rel_err']:.1e} max abs {r['max_abs_err']:.1e}"
    mem = "" if "peak_mb" not in r else f" peak {r['peak_mb']:.0f} MB"
    return (f"{r['workload']:13} {r['contender']:24} {r['steady_ms']:9.4f} ms  cold {r['cold_s']:6.2f} s"
            f"{mem}{err}")


def add_speedups(records):
    eager = {r["workload"]: r["steady_ms"] for r in records if r.get("family") == "eager" and r["status"] == "ok"}
    for r in records:
        if r["status"] == "ok" and r["workload"] in eager:
            r["speedup"] = eager[r["workload"]] / r["steady_ms"]


def _fmt(v, spec):
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def markdown_table(records):
    rows = ["| workload | contender | steady ms | vs eager | TB/s | cold s | peak MB | max abs err | rel err |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        if r["status"] != "ok":
            rows.append(f"| {r['workload']} | {r['contender']} | {r['status']}: {r.get('reason', '')} "
                        "| | | | | | |")
            continue
        rows.append(f"| {r['workload']} | {r['contender']} | {_fmt(r['steady_ms'], '.4f')} | "
                    f"{_fmt(r.get('speedup'), '.2f')}x | {_fmt(r.get('tbps'), '.2f')} | {_fmt(r['cold_s'], '.3f')} | "
                    f"{_fmt(r.get('peak_mb'), '.0f')} | {_fmt(r.get('max_abs_err'), '.1e')} | "
                    f"{_fmt(r.get('rel_err'), '.1e')} |")
    return "\n".join(rows)


def goals(records):
    """The issue's targets, met or missed, from framefuse's best contender on each workload."""
    from .gpu_cases import GOALS
    by = {}
    for r in records:
        by.setdefault(r["workload"], []).append(r)
    lines = []
    for wl, rs in by.items():
        ok = [r for r in rs if r["status"] == "ok"]
        ff = [r for r in ok if r.get("family") == "framefuse"]
        tc = next((r for r in ok if r.get("family") == "torch.compile"), None)
        eager = next((r for r in ok if r.get("family") == "eager"), None)
        if not ff:
            lines.append(f"- {wl}: no framefuse result")
            continue
        best = min(ff, key=lambda r: r["steady_ms"])
        what, target = GOALS.get(wl, (None, None))
        if what == "speedup" and "speedup" in best:
            v, met = best["speedup"], best["speedup"] >= target
            txt = f"{v:.2f}x eager (goal >= {target}x)"
        elif what == "TB/s" and "tbps" in best:
            v, met = best["tbps"], best["tbps"] >= target
            txt = f"{v:.2f} TB/s (goal >= {target})"
        elif what == "ms":
            met = best["steady_ms"] <= target
            txt = f"{best['steady_ms']:.4f} ms (goal <= {target} ms)"
        else:
            met, txt = None, "no goal"
        parts = [f"{best['contender']} {txt}: {'met' if met else 'MISSED'}"]
        first = next((r for r in ff if r["contender"] in ("framefuse", "framefuse-ro")), best)
        if tc:
            ratio = first["cold_s"] / tc["cold_s"]
            parts.append(f"cold {first['cold_s']:.3f} s vs torch.compile {tc['cold_s']:.3f} s "
                         f"(1/{1 / ratio:.1f}; goal <= 1/5: {'met' if ratio <= 0.2 else 'MISSED'})")
        if "peak_mb" in first and eager and "peak_mb" in eager:
            lim = min(x["peak_mb"] for x in (eager, tc) if x and "peak_mb" in x)
            parts.append(f"peak {first['peak_mb']:.0f} MB vs min(eager, torch.compile) {lim:.0f} MB "
                         f"({'met' if first['peak_mb'] <= lim + 0.5 else 'MISSED'})")
        if first.get("within_tol") is False:
            parts.append("ERROR beyond tolerance")
        lines.append(f"- {wl}: " + "; ".join(parts))
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.child:
        return child(args)
    result = dict(command="python -m benchmarks.gpu_suite " + " ".join(sys.argv[1:] if argv is None else argv),
                  environment=_environment(args.device), prewarm_s={}, records=[], notes=[],
                  measured=MEASURED)
    env = result["environment"]
    print(f"device {env.get('gpu', args.device)}; torch {env['torch']}; python {env['python']}; "
          f"torchvision {env['torchvision']}; nvrtc {env.get('nvrtc')}", flush=True)

    def save():
        if args.json:
            add_speedups(result["records"])
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1, default=str)

    supervise(args, result, save)
    seen = {(r["workload"], r["contender"]) for r in result["records"]}
    for wl in args.workloads.split(","):
        for cname, family, _ in selected(args, wl):
            if (wl, cname) not in seen:
                result["records"].append(dict(workload=wl, contender=cname, family=family, status="not run",
                                              reason="run deadline reached before it"))
    add_speedups(result["records"])
    result["wall_s"] = time.perf_counter() - T0
    save()
    print("\n" + markdown_table(result["records"]))
    print("\nprewarm s: " + ", ".join(f"{k} {v:.2f}" for k, v in result["prewarm_s"].items()))
    print("\nGoals (issue 6, framefuse's best mode):\n" + goals(result["records"]))
    for n in result["notes"]:
        print("note: " + n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
