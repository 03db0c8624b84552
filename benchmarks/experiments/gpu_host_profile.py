"""Where the host's time goes in the GPU workloads that are host-bound: the MLP training step under
reduce-overhead and resnet18 b32 inference in the default mode (torch's default precision).

For each contender: wall time per call, the host's time per call (calls issued without waiting,
over the same count; equal to the wall time when the host is the bottleneck), the CUDA launches
per call from torch.profiler, its ops with the most host time, and for framefuse a cProfile of
its Python functions.

    PYTHONPATH=python python3 benchmarks/experiments/gpu_host_profile.py [--workloads mlp,resnet18] [--calls 200]"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from benchmarks import gpu_cases  # noqa: E402
from benchmarks.experiments.gpu_train_step import _contender, parts  # noqa: E402


def _resnet_spec(name):
    """A fresh seeded resnet18 spec and contender `name`'s compile function."""
    torch.manual_seed(0)
    spec = gpu_cases.build("resnet18", "cuda", False)
    compile_fn = {"eager": lambda t: t, "torch.compile": gpu_cases._tc(None), "framefuse": gpu_cases._ff(None),
                  "framefuse-ro": gpu_cases._ff("reduce-overhead")}[name]
    return spec, compile_fn


def _resnet(name):
    spec, compile_fn = _resnet_spec(name)
    fn = compile_fn(spec.target)
    args = spec.arg_sets[0]
    return lambda i: spec.step(fn, args)


def _memory(names):
    """resnet18's peak allocation per phase, beyond what the model and inputs hold: the first call
    (capture and compile), the second, then one call with TF32 off and one with torch's defaults."""
    print("\n## resnet18 peak memory per phase (MB above the model and inputs)\n")
    print("| contender | first call | second call | fp32 call | default-precision call |")
    print("|---|---|---|---|---|")
    defaults = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    for n in names:
        spec, compile_fn = _resnet_spec(n)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        row = []
        fn = None
        for phase in ("first", "second", "fp32", "default"):
            if phase == "fp32":
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
            else:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = defaults
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            if fn is None:
                fn = compile_fn(spec.target)
            out = spec.step(fn, spec.arg_sets[0])
            torch.cuda.synchronize()
            row.append((torch.cuda.max_memory_allocated() - base) / 2 ** 20)
            del out
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = defaults
        print(f"| {n} | " + " | ".join(f"{v:.0f}" for v in row) + " |")
        del fn, spec
        torch.cuda.synchronize()


def _mlp_phases(xs, ys, calls):
    """Host time per phase of the MLP step (zero_grad, forward, loss, backward, optimizer step) for
    each contender, in us per step; the step is host-bound, so these add up to its time."""
    print("\n## mlp: host time per phase (us per step)\n")
    print("| contender | zero_grad | forward | loss | backward | opt.step | total |")
    print("|---|---|---|---|---|---|---|")
    for name in ("eager", "framefuse-ro", "make_graphed", "torch.compile-ro"):
        fwd, opt, loss_fn = parts(name, xs[0])
        acc = [0.0] * 5
        for i in range(calls + 25):
            x, y = xs[i % len(xs)], ys[i % len(ys)]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            t1 = time.perf_counter()
            out = fwd(x)
            t2 = time.perf_counter()
            loss = loss_fn(out, y)
            t3 = time.perf_counter()
            loss.backward()
            t4 = time.perf_counter()
            opt.step()
            t5 = time.perf_counter()
            if i >= 25:
                for k, d in enumerate((t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                    acc[k] += d
            del out, loss
        torch.cuda.synchronize()
        us = [a / calls * 1e6 for a in acc]
        print(f"| {name} | " + " | ".join(f"{u:.1f}" for u in us) + f" | {sum(us):.1f} |")
        if name == "framefuse-ro":
            pr = cProfile.Profile()
            for i in range(calls):
                opt.zero_grad(set_to_none=True)
                pr.enable()
                out = fwd(xs[i % len(xs)])
                pr.disable()
                loss_fn(out, ys[i % len(ys)]).backward()
                opt.step()
            text = io.StringIO()
            pstats.Stats(pr, stream=text).strip_dirs().sort_stats("tottime").print_stats(30)
            print(f"\nframefuse-ro forward call only, cProfile over {calls} steps:\n{text.getvalue()}")


def _timed(step, calls):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(calls):
        step(i)
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return wall / calls * 1e6, host / calls * 1e6


def _profiled(step, calls):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            step(i)
        torch.cuda.synchronize()
    events = prof.key_averages()
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC",
                                                        "cuLaunchKernelEx", "cudaGraphLaunch", "cudaMemcpyAsync",
                                                        "cudaMemsetAsync"))
    rows = sorted((e for e in events if e.self_cpu_time_total > 0), key=lambda e: -e.self_cpu_time_total)[:14]
    return launches / calls, [(e.key, e.count / calls, e.self_cpu_time_total / calls) for e in rows]


def _python_profile(step, calls):
    pr = cProfile.Profile()
    pr.enable()
    for i in range(calls):
        step(i)
    torch.cuda.synchronize()
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).strip_dirs().sort_stats("tottime").print_stats(18)
    return out.getvalue()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="mlp,resnet18")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--precision", default="default", choices=["default", "fp32"])
    p.add_argument("--memory", action="store_true", help="only resnet18's peak memory per phase")
    p.add_argument("--phases", action="store_true", help="only the MLP step's host time per phase")
    args = p.parse_args()
    if args.precision == "fp32":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, precision {args.precision}")
    if args.memory:
        return _memory(["eager", "framefuse", "torch.compile"])
    if args.phases:
        xs = [torch.randn(32, 128, device="cuda") for _ in range(3)]
        ys = [torch.randint(0, 10, (32,), device="cuda") for _ in range(3)]
        return _mlp_phases(xs, ys, args.calls)
    for w in args.workloads.split(","):
        if w == "mlp":
            xs = [torch.randn(32, 128, device="cuda") for _ in range(3)]
            ys = [torch.randint(0, 10, (32,), device="cuda") for _ in range(3)]
            names = ["eager", "framefuse-ro", "make_graphed", "torch.compile-ro"]
            steps = {n: _contender(n, xs, ys) for n in names}
        else:
            names = ["eager", "framefuse", "framefuse-ro", "torch.compile"]
            steps = {n: _resnet(n) for n in names}
        for n in names:  # warm up: compiles, records CUDA graphs
            for i in range(25):
                steps[n](i)
        torch.cuda.synchronize()
        print(f"\n## {w}\n")
        print("| contender | wall us/call | host us/call | launches/call |")
        print("|---|---|---|---|")
        detail = {}
        for n in names:
            best = min((_timed(steps[n], args.calls) for _ in range(3)), key=lambda r: r[0])
            launches, rows = _profiled(steps[n], 20)
            detail[n] = rows
            print(f"| {n} | {best[0]:.1f} | {best[1]:.1f} | {launches:.1f} |")
        for n in names:
            print(f"\n{w} / {n}: ops by host time per call (us)")
            for key, count, us in detail[n]:
                print(f"  {us:8.1f}  x{count:5.1f}  {key}")
        for n in names:
            if n.startswith("framefuse"):
                print(f"\n{w} / {n}: cProfile, {args.calls} calls")
                print(_python_profile(steps[n], args.calls))


if __name__ == "__main__":
    main()
