"""framefuse with and without non-temporal stores for large outputs (config cpu_streaming_store_mb)
on the suite's memory-bound CPU workloads at full size, 2 threads, against eager: the three take
turns each round; medians over rounds of each one's time and of the per-round ratios.

    PYTHONPATH=python python benchmarks/experiments/cpu_streaming_stores.py [--rounds 15] [--workloads copy,sin_cos]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import framefuse  # noqa: E402
from benchmarks.workloads import all_workloads  # noqa: E402

DEFAULT = "copy,sin_cos,pointwise_chain,add_layernorm_gelu,softmax_scaled"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=5, help="calls per contender per round")
    p.add_argument("--workloads", default=DEFAULT)
    args = p.parse_args()
    torch.set_num_threads(2)
    default_mb = framefuse.config.cpu_streaming_store_mb
    print(f"torch {torch.__version__}, 2 threads, cpu_streaming_store_mb {default_mb} against 0, "
          f"{args.rounds} rounds x {args.calls} calls")
    print("| workload | eager ms | framefuse, plain stores | framefuse, streaming | streaming / plain |")
    print("|---|---|---|---|---|")
    for name in args.workloads.split(","):
        case = all_workloads()[name].build("cpu", "full")
        fns = {"eager": lambda *a, _t=case.target: _t(*a)}
        for label, mb in (("plain", 0), ("streaming", default_mb)):
            with framefuse.config.patch(cpu_streaming_store_mb=mb, cache_dir=tempfile.mkdtemp()):
                compiled = framefuse.compile(case.target, backend="inductor")
                for _ in range(3):
                    compiled(*case.args)  # compile (under this setting) and warm up
            fns[label] = compiled
        times = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, f in fns.items():
                t = time.perf_counter()
                for _ in range(args.calls):
                    f(*case.args)
                times[k].append((time.perf_counter() - t) / args.calls)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        ratio = {k: statistics.median(e / t for e, t in zip(times["eager"], times[k])) for k in ("plain", "streaming")}
        gain = statistics.median(p_ / s for p_, s in zip(times["plain"], times["streaming"]))
        print(f"| {name} | {med['eager']:.2f} | {med['plain']:.2f} ({ratio['plain']:.2f}x eager) | "
              f"{med['streaming']:.2f} ({ratio['streaming']:.2f}x eager) | {gain:.2f}x |")


if __name__ == "__main__":
    main()
