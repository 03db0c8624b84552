"""Interleaved in-process A/B of whole models on CPU: eager, framefuse and torch.compile take turns.

The suite (`benchmarks.run`) measures contenders one after another, so a minute of background load
lands on one of them; on this project's 2-core machine that moves resnet18 and nanoGPT by 10-20%
between runs. Here every round times each contender (best of three calls) back to back, and the
result is the median over rounds plus the median of the per-round framefuse/torch.compile ratio.

    python -m benchmarks.cpu_models_ab --workloads resnet18,nanogpt --rounds 10 [--malloc default]

glibc's malloc thresholds are fixed as in the suite (mmap at 32 MB, trim at 1 GB) unless
`--malloc default`: eager's own speed depends on them (fresh mmaps fault their pages in).
"""

import argparse
import statistics
import sys
import time

import torch


def _best_of(case, fn, calls):
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        case.run(fn)
        best = min(best, time.perf_counter() - t0)
    return best


def measure(workload, rounds, calls=3, contenders=("eager", "framefuse", "torch.compile"), scale="full"):
    import framefuse
    from . import core
    from .workloads import all_workloads
    case = core.build_case(all_workloads()[workload], "cpu", scale)
    builders = {"eager": lambda m: m, "framefuse": lambda m: framefuse.compile(m, backend="inductor"),
                "torch.compile": lambda m: torch.compile(m)}
    fns = {name: builders[name](case.target) for name in contenders}
    for fn in fns.values():
        for _ in range(3):  # compiles, then the calls that settle caches (packed weights from the second)
            case.run(fn)
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(_best_of(case, fn, calls))
    out = {name: statistics.median(ts) for name, ts in times.items()}
    if "framefuse" in times and "torch.compile" in times:
        out["paired"] = statistics.median(t / f for f, t in zip(times["framefuse"], times["torch.compile"]))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="resnet18,nanogpt")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--malloc", choices=("fixed", "default"), default="fixed")
    p.add_argument("--contenders", default="eager,framefuse,torch.compile")
    p.add_argument("--scale", default="full", help="the suite's input sizes: tiny, quick or full")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from . import measure as m
    note = m.fix_malloc() if args.malloc == "fixed" else "glibc defaults"
    contenders = tuple(args.contenders.split(","))
    print(f"# {args.threads} threads, {args.rounds} rounds, malloc: {note}")
    print("| workload | " + " | ".join(contenders) + (" | framefuse / torch.compile (paired) |" if len(contenders) == 3 else " |"))
    print("|---" * (len(contenders) + 1 + (len(contenders) == 3)) + "|")
    for w in args.workloads.split(","):
        r = measure(w, args.rounds, contenders=contenders, scale=args.scale)
        eager = r.get("eager")
        cells = [f"{r[c] * 1e3:.1f} ms" + (f" ({eager / r[c]:.2f}x)" if eager else "") for c in contenders]
        paired = f" | {r['paired']:.3f}x" if "paired" in r else ""
        print(f"| {w} | " + " | ".join(cells) + paired + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
