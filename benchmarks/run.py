"""The benchmark runner: `python -m benchmarks.run [--preset quick|zoo|timm|train|full|gpu|tiny|gpu-suite] [flags]`.

`--preset gpu-suite` runs the issue's GPU targets (benchmarks/gpu_suite.py); the flags after it are
that suite's own (`--preset gpu-suite --help` lists them).

Runs every selected workload with every selected contender, prints a live progress line and a table,
and writes results.json, results.md and PNG charts to the output directory (default benchmarks/out/).
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time

from . import core, journal, measure, report
from .contenders import CONTENDERS, Unavailable, first_line, prewarm
from .worker import isolated_first_calls

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

QUICK_WORKLOADS = ("evaluate_features", "conv_feature_model", "mlp_train_step", "linear_10_5", "sin_cos",
                   "copy", "pointwise_chain", "add_layernorm_gelu", "softmax_scaled", "nanogpt",
                   "transformer_encoder_layer", "add_one", "add_one_3args", "one_graph_break")
GPU_WORKLOADS = ("nanogpt", "resnet18", "mlp_train_step", "sin_cos", "add_layernorm_gelu", "softmax_scaled",
                 "evaluate_features", "conv_feature_model", "linear_10_5", "pointwise_chain", "copy",
                 "transformer_encoder_layer", "mobilenet_v2", "add_one", "add_one_3args", "one_graph_break",
                 "resnet50", "resnet50_train_step", "bert", "gpt2", "llama", "t5", "vit", "bert_train_step",
                 "gpt2_train_step", "nanogpt_train_step", "add_layernorm_gelu_grad", "timm_resnet50",
                 "timm_convnext_tiny", "timm_efficientnet_b0", "timm_vit_small")
TIMM_WORKLOADS = ("timm_resnet50", "timm_convnext_tiny", "timm_efficientnet_b0", "timm_vit_small")
ZOO_WORKLOADS = ("bert", "gpt2", "llama", "t5", "vit", "bert_train_step", "gpt2_train_step")
TRAIN_WORKLOADS = ("mlp_train_step", "bert_train_step", "gpt2_train_step", "nanogpt_train_step", "resnet50_train_step",
                   "add_layernorm_gelu_grad")
BASE_CONTENDERS = ("eager", "framefuse-eager", "framefuse", "torch.compile-eager", "torch.compile")
QUICK_BUDGET = measure.Budget(warmup_s=0.05, min_sample_s=0.005, samples=9, max_s=0.3)

PRESETS = {
    # For the tests: seconds, not minutes. torch.compile's Inductor is left out (its cold compile is slow).
    "tiny": dict(devices=("cpu",), scale="tiny", demo=True, threads=1,
                 workloads=("sin_cos", "linear_10_5", "add_one", "one_graph_break"),
                 contenders=("eager", "framefuse-eager", "framefuse", "torch.compile-eager"),
                 budget=measure.Budget(warmup_s=0.02, min_sample_s=0.001, samples=5, max_s=0.05)),
    # NB: one thread by default. On a 2-core machine that is busy with anything else, a 2-thread
    # parallel region waits a whole scheduler slice (~24 ms measured) for its second core, which buries
    # the small kernels this preset times. --threads 2 measures the multi-threaded case.
    "quick": dict(devices=("cpu",), scale="quick", demo=True, threads=1, workloads=QUICK_WORKLOADS,
                  contenders=BASE_CONTENDERS, budget=QUICK_BUDGET),
    # transformers' models (issue #28) at the quick preset's sizes and timing budget, torch.compile included.
    "zoo": dict(devices=("cpu",), scale="quick", demo=True, threads=1, workloads=ZOO_WORKLOADS,
                contenders=("eager", "framefuse", "torch.compile"), budget=QUICK_BUDGET),
    # timm's models (issue #28) where timm imports (the Debian lane: no torch.compile there), full sizes.
    "timm": dict(devices=("cpu",), scale="full", demo=True, threads=1, workloads=TIMM_WORKLOADS,
                 contenders=("eager", "framefuse", "torch.compile"), budget=QUICK_BUDGET),
    # Training and grad-mode calls (issue #23: AOT autograd) at the quick preset's sizes, torch.compile included.
    "train": dict(devices=("cpu",), scale="quick", demo=True, threads=1, workloads=TRAIN_WORKLOADS,
                  contenders=("eager", "framefuse", "torch.compile"), budget=QUICK_BUDGET),
    "full": dict(devices=("cpu",), scale="full", demo=True, workloads=None, contenders=BASE_CONTENDERS,
                 budget=measure.Budget(warmup_s=0.5, min_sample_s=0.02, samples=21, max_s=3.0)),
    # Fits a 550 s session on a GPU machine, build included: the workloads first, then the rest while
    # time remains. After the deadline no contender starts (the rest are recorded as not run), and
    # one contender on one workload may take `timeout` seconds, so the run ends by deadline + timeout
    # (+ the closing report). --deadline 0 measures everything.
    "gpu": dict(devices=("cuda",), scale="full", demo=True, workloads=GPU_WORKLOADS, explain=False,
                contenders=("eager", "framefuse", "framefuse-ro", "framefuse-max-autotune", "torch.compile",
                            "torch.compile-ro"),
                deadline=420, timeout=90,
                budget=measure.Budget(warmup_s=0.3, min_sample_s=0.02, samples=15, max_s=2.0)),
}

MEASURED = {
    "first call": "compile() + first call, synchronized, with a fresh on-disk cache directory per workload "
                  "and contender (TORCHINDUCTOR_CACHE_DIR, FRAMEFUSE_CACHE_DIR); each compiler's one-time "
                  "imports are paid beforehand by a throwaway compile (the contenders' setup column). For "
                  "the `-eager` backends this is capture time alone. Process-wide in-memory caches are "
                  "cleared with reset() between workloads.",
    "cold proc / warm disk": "with --isolate only: compile() + first call in a new process with empty cache "
                             "directories, then in a second new process that finds the first one's disk "
                             "caches. Nothing pre-warmed: includes the compiler's lazy imports. '(compile …)': framefuse's "
                             "own capture + backend seconds within that first call (the rest is the "
                             "model's first run, which eager pays too: its first call in the same "
                             "process is kept as warm_disk_eager_first_call_s in the JSON).",
    "steady": "median seconds per call after warm-up, from batched samples (CPU: torch.utils.benchmark's "
              "Timer.adaptive_autorange; GPU: CUDA events). glibc "
              "malloc's thresholds are fixed for the run (see environment.malloc): left dynamic, the "
              "allocations of one contender changed the speed of the next.",
    "vs eager": "eager's steady median divided by the contender's, same run.",
    "overhead": "tiny workloads only: median per-call time above eager, sampled interleaved with eager.",
    "GB/s": "minimum bytes a fused kernel must move (inputs read once, outputs written once) / steady time; "
            "compare with the `copy` workload's GB/s.",
    "peak MB": "CPU: peak RSS growth from compile() through timing, compiler included; CUDA: "
               "torch.cuda.max_memory_allocated over the same region.",
    "graphs/breaks": "from the contender's explain() on a fresh copy, where it has one.",
    "max err": "max abs difference of the first call's outputs from eager's (same seed, weights and inputs); "
               "for training steps the first step's loss. MISMATCH means outside the workload's tolerance.",
}


class Progress:
    """One live line on a terminal (stderr); plain lines when stderr is not a terminal."""

    def __init__(self, total, stream=None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.t0 = time.perf_counter()

    def show(self, text):
        line = f"[{self.done}/{self.total} {time.perf_counter() - self.t0:5.0f}s] {text}"
        if self.tty:
            cols = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r\x1b[K" + line[:cols - 1])
        elif text.endswith(" build"):  # one line per contender, not one per stage
            self.stream.write(line + "\n")
        self.stream.flush()

    def step(self):
        self.done += 1

    def close(self):
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    p.add_argument("--workloads", help="comma list (default: the preset's); `all` for every registered one")
    p.add_argument("--skip", default="", help="comma list of workloads to leave out")
    p.add_argument("--contenders", help="comma list (default: the preset's); `all` for every registered one")
    p.add_argument("--devices", help="comma list: cpu, cuda (default: the preset's)")
    p.add_argument("--scale", choices=("tiny", "quick", "full"), help="workload sizes (default: the preset's)")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: 1 for quick/zoo/tiny, else the CPUs this process may use)")
    p.add_argument("--out", default=os.path.join(HERE, "out"), help="output directory (default benchmarks/out)")
    p.add_argument("--no-charts", action="store_true")
    p.add_argument("--no-demo", action="store_true")
    p.add_argument("--no-explain", action="store_true", help="skip graph/break counts (explain re-traces)")
    p.add_argument("--isolate", action="store_true",
                   help="also time each compiler's first call in fresh processes: cold (empty cache dirs) "
                        "and warm disk cache (second process, same dirs)")
    p.add_argument("--interleave", type=int, default=0, metavar="ROUNDS",
                   help="after each workload, measure the steady state again with the contenders taking turns "
                        "(one batched sample each per round, ROUNDS rounds): immune to load that comes and "
                        "goes, which the one-after-another measurement is not")
    p.add_argument("--isolate-timeout", type=float, default=900, help="seconds per isolated process")
    p.add_argument("--publish", nargs="?", const="", metavar="NAME",
                   help="also store this run as benchmarks/results/NAME.json (+ charts; NAME defaults to the "
                        "preset) and rebuild benchmarks/RESULTS.md from every stored run")
    p.add_argument("--list", action="store_true", help="list workloads and contenders, then exit")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="a Python file that registers extra contenders or workloads (repeatable)")
    p.add_argument("--in-process", action="store_true",
                   help="measure in this process (no crash containment: a crash ends the run)")
    p.add_argument("--timeout", type=float,
                   help="seconds one contender may spend on one workload before it is killed and recorded as "
                        "failed (default: the preset's, else 1800; not with --in-process)")
    p.add_argument("--deadline", type=float,
                   help="seconds for the whole run: no workload starts after it and the rest are recorded as not "
                        "run (default: the preset's; 0: none)")
    p.add_argument("--child", metavar="JOURNAL", help=argparse.SUPPRESS)  # the supervised measuring process
    return p.parse_args(argv)


def _csv(s):
    return [x.strip() for x in s.split(",") if x.strip()]


def select(args, registry):
    preset = PRESETS[args.preset]
    if args.workloads == "all" or (args.workloads is None and preset["workloads"] is None):
        names = list(registry)
    else:
        names = _csv(args.workloads) if args.workloads else list(preset["workloads"])
    names = [n for n in names if n not in set(_csv(args.skip))]
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise SystemExit(f"unknown workload(s): {', '.join(unknown)}; known: {', '.join(registry)}")
    cnames = list(CONTENDERS) if args.contenders == "all" else (
        _csv(args.contenders) if args.contenders else list(preset["contenders"]))
    unknown = [n for n in cnames if n not in CONTENDERS]
    if unknown:
        raise SystemExit(f"unknown contender(s): {', '.join(unknown)}; known: {', '.join(CONTENDERS)}")
    if "eager" in cnames:
        cnames.remove("eager")
    cnames.insert(0, "eager")  # always measured: it is the reference and the baseline
    devices = _csv(args.devices) if args.devices else list(preset["devices"])
    return [registry[n] for n in names], [CONTENDERS[n] for n in cnames], devices


def environment(threads):
    import torch
    env = dict(python=platform.python_version(), torch=torch.__version__, threads=threads,
               machine=_machine(), platform=platform.platform(terse=True), load_start=_load())
    try:
        import torchvision
        env["torchvision"] = torchvision.__version__
    except Exception:
        env["torchvision"] = None
    try:
        from .contenders import import_framefuse
        ff = import_framefuse()
        env["framefuse"] = getattr(ff, "__version__", "importable")
    except Unavailable as e:
        env["framefuse"] = f"unavailable ({e})"
    return env


def _load():
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def _machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    text = f"{cpu}, {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} CPUs"
    try:
        import torch
        if torch.cuda.is_available():
            text += f"; GPU {torch.cuda.get_device_name(0)}"
    except Exception:
        pass
    return text


def _command(argv):
    argv = list(argv)
    if "--child" in argv:  # the supervised child's internal argument is no part of the user's command
        i = argv.index("--child")
        del argv[i:i + 2]
    return "python -m benchmarks.run" + ("" if not argv else " " + " ".join(shlex.quote(a) for a in argv))


def load_plugins(paths):
    """Python files that register extra contenders or workloads (`contenders.register`, `@workload`)."""
    import importlib.util
    for i, path in enumerate(paths):
        spec = importlib.util.spec_from_file_location(f"benchmarks_plugin_{i}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)


def _suite_argv(argv):
    """The arguments for benchmarks/gpu_suite.py when argv picks `--preset gpu-suite`, else None."""
    for i, a in enumerate(argv):
        if a == "--preset" and argv[i + 1:i + 2] == ["gpu-suite"]:
            return argv[:i] + argv[i + 2:]
        if a == "--preset=gpu-suite":
            return argv[:i] + argv[i + 1:]
    return None


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    # NB: the GPU suite keeps its own flags and supervisor (one child per workload, goals checked at the
    # end); this runner is its front door so that CPU and GPU presets start from one command.
    suite_argv = _suite_argv(argv)
    if suite_argv is not None:
        from . import gpu_suite
        return gpu_suite.main(suite_argv)
    args = parse_args(argv)
    load_plugins(args.plugin)
    if args.list:
        from .workloads import all_workloads
        for w in all_workloads().values():
            print(f"{w.name:28} {w.family:9} {w.kind:9} {w.description}")
        print()
        for c in CONTENDERS.values():
            print(f"{c.name:28} {c.family:14} {c.description}")
        return 0
    if args.child:
        return measure_all(args, argv, journal.Journal(args.child))
    t_start = time.perf_counter()
    preset = PRESETS[args.preset]
    if args.timeout is None:
        args.timeout = preset.get("timeout", 1800)
    deadline = preset.get("deadline", 0) if args.deadline is None else args.deadline
    own_deadline = bool(deadline) and DEADLINE_ENV not in os.environ
    if own_deadline:  # an absolute time, so a child started after a crash keeps the first one's
        os.environ[DEADLINE_ENV] = repr(time.time() + deadline)
    try:
        return _run(args, argv, t_start)
    finally:
        if own_deadline:
            os.environ.pop(DEADLINE_ENV, None)


def _run(args, argv, t_start):
    if args.in_process:
        j = journal.Journal()
        rc = measure_all(args, argv, j)
        entries = j.read()
    else:
        rc, entries = journal.supervise(argv, REPO, timeout=args.timeout)
    st = journal.state(entries)
    if rc != 0 or st.header is None:
        print(f"benchmark run failed ({journal.describe_exit(rc)}) before any result", file=sys.stderr)
        return rc or 1
    contenders = [st.setups.get(c["name"], c) for c in st.header["contenders"]]
    result = dict(st.header, contenders=contenders, records=st.records)
    if st.interleaved:
        result["interleaved"] = st.interleaved
    return finish(args, result, t_start)


DEADLINE_ENV = "FRAMEFUSE_BENCH_DEADLINE_AT"
DEADLINE_REASON = "not run: the run's time limit (--deadline) was reached"


def _past_deadline():
    at = os.environ.get(DEADLINE_ENV)
    return bool(at) and time.time() > float(at)


def measure_all(args, argv, jr):
    """The measuring half: selects, prewarms, runs every workload with every contender and writes each
    record to the journal `jr`. Resumes after the pairs `jr` already holds."""
    from .workloads import all_workloads
    registry = all_workloads()
    preset = PRESETS[args.preset]
    workloads, contenders, devices = select(args, registry)
    scale = args.scale or preset["scale"]
    st = journal.state(jr.read())
    header, done = st.header, st.done

    malloc_note = measure.fix_malloc()
    import torch
    threads = args.threads or preset.get("threads") or (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    torch.set_num_threads(threads)
    if header is None:
        header = dict(command=_command(argv), preset=args.preset, scale=scale, devices=devices,
                      started=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
                      environment=dict(environment(threads), malloc=malloc_note or "glibc defaults"),
                      measured=MEASURED,
                      contenders=[dict(name=c.name, status="set-up not finished") for c in contenders],
                      workloads=[dict(name=w.name, family=w.family, kind=w.kind, description=w.description)
                                 for w in workloads])
        if preset["demo"] and not args.no_demo:
            from .demo import graph_demo
            header["graph_demo"] = graph_demo()
            print()
        jr.write("header", header)

    cuda_missing = [d for d in devices if d.startswith("cuda") and not torch.cuda.is_available()]
    usable = [d for d in devices if d not in cuda_missing]
    crashed = {}  # contender -> how its set-up took a process down
    for c in contenders:
        if c.name in st.setups:  # set up (or crashed setting up) in an earlier process
            if st.setups[c.name]["status"].startswith("set-up crashed"):
                crashed[c.name] = st.setups[c.name]["status"]
            elif c.family != "eager":
                _quiet_prewarm(c, usable)
            continue
        jr.write("start", {"setup": c.name})
        info = dict(name=c.name, family=c.family, backend=c.backend, mode=c.mode, description=c.description)
        try:
            c.check()
            if c.family != "eager" and usable and any(d.split(":")[0] in c.devices for d in usable):
                info["prewarm_s"] = prewarm(c, next(d for d in usable if d.split(":")[0] in c.devices))
            info["status"] = "ok"
        except Unavailable as e:
            info["status"] = f"unavailable: {e}"
        except Exception as e:
            info["status"] = f"setup failed: {type(e).__name__}: {first_line(e)}"
        jr.write("setup", info)

    interleaved_done = {(e["workload"], e["device"]) for e in st.interleaved}  # by an earlier process
    caches = core.CacheDirs()
    prog = Progress(len(workloads) * len(devices) * len(contenders))
    prog.done = sum(len(v) for v in done.values())
    try:
        for wl in workloads:
            for dev in devices:
                done_here = dict(done.get((wl.name, dev), {}))
                for name, how in crashed.items():
                    if name not in done_here:
                        jr.write("record", dict(workload=wl.name, family=wl.family, kind=wl.kind, device=dev,
                                                contender=name, status="failed",
                                                reason=f"not run: its set-up took the process down ({how})"))
                        done_here[name] = "failed"
                        prog.step()
                late = _past_deadline()
                if late or dev.startswith("cuda") and cuda_missing or dev.split(":")[0] not in wl.devices:
                    reason = (DEADLINE_REASON if late else
                              "no CUDA device" if dev.startswith("cuda") and cuda_missing else f"not a {dev} workload")
                    for c in contenders:
                        if c.name not in done_here:
                            jr.write("record", dict(workload=wl.name, family=wl.family, kind=wl.kind, device=dev,
                                                    contender=c.name, status="skipped", reason=reason))
                            prog.step()
                    continue

                def on_stage(cname, stage, wl=wl, dev=dev):
                    if stage == "start":
                        jr.write("start", dict(workload=wl.name, family=wl.family, kind=wl.kind, device=dev,
                                               contender=cname))
                    prog.show(f"{wl.name} [{dev}] · {cname} · {stage}")

                recorded = {}
                for r in core.run_workload(wl, dev, scale, contenders, preset["budget"], caches,
                                           do_explain=not args.no_explain and preset.get("explain", True),
                                           on_stage=on_stage, done=done_here,
                                           stop=lambda: DEADLINE_REASON if _past_deadline() else None):
                    if args.isolate and r["status"] == "ok" and r["contender"] != "eager":
                        prog.show(f"{wl.name} [{dev}] · {r['contender']} · fresh processes")
                        spec = dict(workload=wl.name, device=dev, scale=scale, contender=r["contender"],
                                    threads=threads)
                        r.update(isolated_first_calls(spec, caches.fresh(), REPO, args.isolate_timeout))
                    prog.step()
                    jr.write("record", r)
                    recorded[r["contender"]] = r["status"]
                ok = [c for c in contenders if recorded.get(c.name, done_here.get(c.name)) == "ok"]
                if (args.interleave and "eager" in {c.name for c in ok} and len(ok) > 1 and not _past_deadline()
                        and (wl.name, dev) not in interleaved_done):
                    prog.show(f"{wl.name} [{dev}] · interleaved steady state")
                    jr.write("interleaved", core.interleaved_steady(wl, dev, scale, ok, preset["budget"], args.interleave))
    finally:
        prog.close()
        caches.cleanup()
    return 0


def _quiet_prewarm(c, usable):
    """After a restart: the new process pays the contender's one-time costs again, unrecorded."""
    try:
        c.check()
        if usable and any(d.split(":")[0] in c.devices for d in usable):
            prewarm(c, next(d for d in usable if d.split(":")[0] in c.devices))
    except Exception:
        pass


def finish(args, result, t_start):
    """The reporting half: speedups, the terminal tables, JSON, markdown, charts."""
    order = {k: {n: i for i, n in enumerate(v)} for k, v in (
        ("workload", [w["name"] for w in result["workloads"]]), ("device", result["devices"]),
        ("contender", [c["name"] for c in result["contenders"]]))}
    # Restarts after a crash can write records out of order: the table follows the selection's order.
    result["records"].sort(key=lambda r: tuple(order[k].get(r[k], len(order[k])) for k in order))
    core.add_speedups(result["records"])
    result["wall_s"] = time.perf_counter() - t_start
    result["environment"]["load_end"] = _load()
    busy = max(result["environment"].get("load_start") or 0, result["environment"]["load_end"] or 0)
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if busy > ncpu:
        print(f"NB: the machine was busy (1-minute load average up to {busy:.1f} on {ncpu} CPUs): "
              "timings are noisy; the ±% marks show how much.\n")
    print(report.terminal_table(result["records"]))
    if result.get("interleaved"):
        print("\nsteady state, contenders taking turns (--interleave)\n" +
              report.interleaved_table(result["interleaved"], markdown=False))
    vs = report.versus_table(result["records"], markdown=False)
    if vs:
        print("\nframefuse against torch.compile (first-call and overhead ratios: lower is better)\n" + vs)
    write_outputs(result, args)
    return 0


def find_chart_python():
    """An interpreter that can import matplotlib: this one, $FRAMEFUSE_BENCH_PYTHON, or the system's."""
    cands = [sys.executable, os.environ.get("FRAMEFUSE_BENCH_PYTHON"), "/usr/bin/python3", shutil.which("python3")]
    seen = set()
    for py in cands:
        if not py or py in seen or not os.path.exists(py):
            continue
        seen.add(py)
        if py == sys.executable:
            try:
                import matplotlib  # noqa: F401
                return py
            except ImportError:
                continue
        r = subprocess.run([py, "-c", "import matplotlib"], capture_output=True)
        if r.returncode == 0:
            return py
    return None


def make_charts(results_json, out_dir):
    """Returns (charts, note). Runs benchmarks.charts under an interpreter that has matplotlib."""
    py = find_chart_python()
    if py is None:
        return [], "no matplotlib found (tried this Python, $FRAMEFUSE_BENCH_PYTHON and the system python3)"
    env = dict(os.environ, MPLBACKEND="Agg")
    r = subprocess.run([py, "-m", "benchmarks.charts", results_json, "--out", out_dir], cwd=REPO, env=env,
                       capture_output=True, text=True)
    try:
        res = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [], f"chart step failed (exit {r.returncode}): {first_line(r.stderr[-2000:]) or r.stderr[-300:]}"
    if "error" in res:
        return [], res["error"]
    if not res["charts"]:
        return [], "no chart: no contender other than eager produced a result"
    return res["charts"], f"made with {'this interpreter' if py == sys.executable else os.path.basename(py)}"


def _dump(result, path):
    with open(path, "w") as f:
        json.dump(journal.jsonable(result), f, indent=1, default=str, allow_nan=False)


def write_outputs(result, args):
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "results.json")
    _dump(result, path)
    charts = []
    if args.no_charts:
        result["charts_note"] = "not requested (--no-charts)"
    else:
        charts, result["charts_note"] = make_charts(path, out)
        result["charts"] = charts
        _dump(result, path)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(report.markdown_report(result, charts))
    shown = os.path.relpath(path) if path.startswith(os.getcwd() + os.sep) else path
    print(f"\nwrote {shown}, results.md" + (
        ", " + ", ".join(c["file"] for c in charts) if charts else f" (charts: {result['charts_note']})"))
    if args.publish is not None:
        from .publish import publish
        publish(result, charts, out, args.publish)


if __name__ == "__main__":
    sys.exit(main())
