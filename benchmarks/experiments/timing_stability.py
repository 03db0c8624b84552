"""Steady-state timing on CPU: measure.steady (torch.utils.benchmark's Timer.adaptive_autorange) against
the batches it replaced (warm-up, calibrate(), `samples` batches of `inner` calls), taking turns in one
process, same budget. Each method measures every (workload, contender) once per round; reported per
case: the median of the per-round medians, their spread ((max - min) / median) and the wall seconds
one measurement took.

    PYTHONPATH=build/main/site:. python benchmarks/experiments/timing_stability.py [--rounds 16]
        [--workloads add_one,sin_cos] [--contenders eager,framefuse]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from benchmarks import core, measure, run  # noqa: E402
from benchmarks.contenders import CONTENDERS  # noqa: E402
from benchmarks.workloads import all_workloads  # noqa: E402

DEFAULT = "add_one,sin_cos,softmax_scaled,pointwise_chain,add_layernorm_gelu"


def own_batches(call, budget):
    """measure.steady on CPU before it used torch.utils.benchmark."""
    measure.warmup(call, "cpu", budget)
    inner = measure.calibrate(call, "cpu", budget)
    per_call = []
    t0 = time.perf_counter()
    while len(per_call) < budget.samples and (len(per_call) < 3 or time.perf_counter() - t0 < budget.max_s):
        per_call.append(measure._batch(call, inner, "cpu") / inner)
    return statistics.median(per_call)


def timer_steady(call, budget):
    return measure.steady(call, "cpu", budget)["median_s"]


METHODS = {"own batches (before)": own_batches, "Timer.adaptive_autorange": timer_steady}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--workloads", default=DEFAULT)
    p.add_argument("--contenders", default="eager")
    p.add_argument("--scale", default="quick")
    a = p.parse_args()
    torch.set_num_threads(1)
    measure.fix_malloc()
    budget = run.QUICK_BUDGET
    wls = all_workloads()
    calls = {}
    for wn in a.workloads.split(","):
        case = core.build_case(wls[wn], "cpu", a.scale)
        for cn in a.contenders.split(","):
            c = CONTENDERS[cn]
            c.check()
            fn = c.compile(case.target)
            calls[(wn, cn)] = (lambda fn=fn, case=case: case.run(fn))
    medians = {(k, m): [] for k in calls for m in METHODS}
    cost = {(k, m): [] for k in calls for m in METHODS}
    for _ in range(a.rounds):
        for k, call in calls.items():
            for m, f in METHODS.items():
                t0 = time.perf_counter()
                medians[(k, m)].append(f(call, budget))
                cost[(k, m)].append(time.perf_counter() - t0)
    print(f"torch {torch.__version__}, {a.rounds} rounds, 1 thread, the quick preset's budget")
    print("| workload | contender | method | median µs | spread % | s per measurement |\n|---|---|---|---:|---:|---:|")
    total = {m: [0.0, 0.0] for m in METHODS}
    for k in calls:
        for m in METHODS:
            v, c = medians[(k, m)], statistics.mean(cost[(k, m)])
            med = statistics.median(v)
            spread = (max(v) - min(v)) / med * 100
            total[m][0] += spread / len(calls)
            total[m][1] += c / len(calls)
            print(f"| {k[0]} | {k[1]} | {m} | {med * 1e6:.2f} | {spread:.1f} | {c:.3f} |")
    for m, (spread, c) in total.items():
        print(f"mean over cases, {m}: spread {spread:.1f} %, {c:.3f} s per measurement")


if __name__ == "__main__":
    main()
