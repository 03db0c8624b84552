"""Where a GPU workload's peak memory comes from: for each contender, torch.cuda.max_memory_allocated
beyond what the model and inputs hold, over the cold call (compile included), the second call and
five steady calls, and what the contender keeps allocated after them (cached converted weights, a
CUDA graph's pool). With --trace, the largest blocks live at the peak of one steady call of the
last contender, with the C++ and Python frames that allocated them.

    PYTHONPATH=python python3 benchmarks/experiments/gpu_peak_phases.py [--workload resnet18] [--contenders eager,torch.compile,framefuse] [--trace]"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from benchmarks import gpu_cases as gc  # noqa: E402



def _ff_keep_weights(target):
    """framefuse keeping the NHWC copies of every conv weight between calls (cuda_keep_nhwc_weights)."""
    import framefuse
    fn = framefuse.compile(target, backend="inductor")

    def run(*args):
        with framefuse.config.patch(cuda_keep_nhwc_weights=True):  # read where a graph compiles
            return fn(*args)
    return run


COMPILERS = {"eager": lambda t: t, "torch.compile": gc._tc(None), "framefuse": gc._ff(None),
             "framefuse-ro": gc._ff("reduce-overhead"), "framefuse-keep-weights": _ff_keep_weights}
_NOISE = ("c10::", "torch::unwind", "_Py", "Py", "pybind11", "CUDACachingAllocator", "start_thread", "clone", "main")


def _peak_since(base):
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def phases(workload, name):
    torch.manual_seed(0)
    spec = gc.build(workload, "cuda", False)
    gc.warm_workspaces("cuda")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    out = {}
    torch.cuda.reset_peak_memory_stats()
    fn = COMPILERS[name](spec.target)
    spec.step(fn, spec.arg_sets[0])
    out["cold"] = _peak_since(base)
    torch.cuda.reset_peak_memory_stats()
    spec.step(fn, spec.arg_sets[0])
    out["second"] = _peak_since(base)
    torch.cuda.reset_peak_memory_stats()
    for i in range(5):
        spec.step(fn, spec.arg_sets[i % len(spec.arg_sets)])
    out["steady"] = _peak_since(base)
    out["kept"] = (torch.cuda.memory_allocated() - base) / 2**20
    return out, spec, fn


def trace(spec, fn, top=6):
    """The largest blocks live at the peak of one steady call."""
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all", max_entries=100000)
    spec.step(fn, spec.arg_sets[0])
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    live, cur, peak, at_peak = {}, 0, 0, {}
    for ev in snap["device_traces"][torch.cuda.current_device()]:
        if ev["action"] == "alloc":
            live[ev["addr"]] = ev
            cur += ev["size"]
            if cur > peak:
                peak, at_peak = cur, dict(live)
        elif ev["action"] == "free_requested" and ev["addr"] in live:
            cur -= live.pop(ev["addr"])["size"]
    print(f"  allocated during the call, at its peak: {peak / 2**20:.1f} MB; largest blocks:")
    for ev in sorted(at_peak.values(), key=lambda e: -e["size"])[:top]:
        frames = [f for f in ev.get("frames", []) if not f["name"].startswith(_NOISE)][:4]
        print(f"    {ev['size'] / 2**20:8.2f} MB  " + " <- ".join(f"{f['name'][:60]}" for f in frames))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="resnet18")
    p.add_argument("--contenders", default="eager,torch.compile,framefuse")
    p.add_argument("--trace", action="store_true")
    args = p.parse_args()
    gc.PRECISION = "default"  # torch's own settings, as a user runs (TF32 on for cuDNN)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.workload}")
    print("| contender | cold MB | second MB | steady MB | kept after MB |")
    print("|---|---|---|---|---|")
    for name in args.contenders.split(","):
        r, spec, fn = phases(args.workload, name)
        print(f"| {name} | {r['cold']:.1f} | {r['second']:.1f} | {r['steady']:.1f} | {r['kept']:.1f} |", flush=True)
    if args.trace:
        trace(spec, fn)


if __name__ == "__main__":
    main()
