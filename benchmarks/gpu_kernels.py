"""GPU kernel benchmarks: eager vs torch.compile (default) vs framefuse's CUDA code generator, in one
run on one device.

    python benchmarks/gpu_kernels.py [--json out.json] [--quick]

Workloads (issue targets on an H200 in parentheses): sin(x)+cos(x) over 64M floats (TB/s),
gelu(layer_norm(x + r)) 8192x4096, softmax(x * 0.125, -1) 4096x4096. For each: steady-state time
(median of CUDA-event timings over rotated input sets), cold compile time of the first call (fresh
cache directories for both compilers), peak memory of one call beyond its inputs, and the relative
error against eager.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

_tmp = tempfile.mkdtemp(prefix="ff_gpu_bench_")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_tmp, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_tmp, "triton"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import framefuse  # noqa: E402
from framefuse import cuda as ffcuda  # noqa: E402
from framefuse.graph import Graph  # noqa: E402


def time_ms(fn, inputs_sets, reps=50):
    """Median per-call time in ms over `reps` calls, rotating input sets (beyond the L2)."""
    for i in range(5):
        fn(*inputs_sets[i % len(inputs_sets)])
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        args = inputs_sets[i % len(inputs_sets)]
        s.record()
        fn(*args)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def peak_mb(fn, args):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**20


def rel_err(a, b):
    # framefuse returns the graph's output tuple; eager and torch.compile return the tensor.
    if isinstance(a, (tuple, list)):
        a = a[0]
    if isinstance(b, (tuple, list)):
        b = b[0]
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def workloads(quick):
    n = (1 << 22) if quick else (1 << 26)
    rows = 1024 if quick else 8192

    def sincos(x):
        return torch.sin(x) + torch.cos(x)

    def sincos_graph(x):
        g = Graph()
        gx = g.placeholder("x", x)
        g.output((g.call(torch.add, g.call(torch.sin, gx), g.call(torch.cos, gx)),))
        return g

    def lngelu(x, r, w, b):
        return F.gelu(F.layer_norm(x + r, (x.shape[-1],), w, b))

    def lngelu_graph(x, r, w, b):
        g = Graph()
        gx, gr, gw, gb = (g.placeholder(nm, t) for nm, t in zip("xrwb", (x, r, w, b)))
        g.output((g.call(F.gelu, g.call(F.layer_norm, g.call(torch.add, gx, gr), [x.shape[-1]], gw, gb)),))
        return g

    def softmax(x):
        return torch.softmax(x * 0.125, -1)

    def softmax_graph(x):
        g = Graph()
        gx = g.placeholder("x", x)
        g.output((g.call(torch.softmax, g.call(torch.mul, gx, 0.125), -1),))
        return g

    dev = "cuda"
    yield ("sin+cos", sincos, sincos_graph, lambda: [torch.randn(n, device=dev)], 2 * n * 4)
    yield ("gelu(layer_norm(x+r))", lngelu, lngelu_graph,
           lambda: [torch.randn(rows, 4096, device=dev), torch.randn(rows, 4096, device=dev),
                    torch.randn(4096, device=dev), torch.randn(4096, device=dev)], 3 * rows * 4096 * 4)
    yield ("softmax(x*0.125)", softmax, softmax_graph, lambda: [torch.randn(4096 if not quick else 1024, 4096, device=dev)],
           2 * (4096 if not quick else 1024) * 4096 * 4)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--modes", default="default,max-autotune")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    dev_name = torch.cuda.get_device_name()
    print(f"device: {dev_name}; torch {torch.__version__}; python {sys.version.split()[0]}; "
          f"nvrtc {ffcuda.nvrtc_status()['version']}", flush=True)
    results = []
    with framefuse.config.patch(cache_dir=os.path.join(_tmp, "framefuse")):
        for name, eager, build, make, nbytes in workloads(args.quick):
            sets = [make() for _ in range(3)]
            ref = eager(*sets[0])
            row = {"workload": name, "bytes": nbytes}
            row["eager_ms"] = time_ms(eager, sets)
            row["eager_peak_mb"] = peak_mb(eager, sets[0])
            # torch.compile, cold first call then steady state.
            tc = torch.compile(eager)
            t0 = time.perf_counter()
            out = tc(*sets[0])
            torch.cuda.synchronize()
            row["tc_cold_s"] = time.perf_counter() - t0
            row["tc_err"] = rel_err(out, ref)
            row["tc_ms"] = time_ms(tc, sets)
            row["tc_peak_mb"] = peak_mb(tc, sets[0])
            for mode in args.modes.split(","):
                t0 = time.perf_counter()
                fn = ffcuda.compile_graph(build(*sets[0]), mode=mode)
                out = fn(*sets[0])
                torch.cuda.synchronize()
                key = "ff" if mode == "default" else "ff_" + mode.replace("-", "_")
                row[key + "_cold_s"] = time.perf_counter() - t0
                row[key + "_err"] = rel_err(out, ref)
                row[key + "_ms"] = time_ms(fn, sets)
                row[key + "_peak_mb"] = peak_mb(fn, sets[0])
                row[key + "_kernels"] = fn.kernels()
            results.append(row)
            print(json.dumps(row), flush=True)
    print()
    print(f"{'workload':24} {'eager ms':>9} {'tc ms':>8} {'ff ms':>8} {'ff-at ms':>9} {'ff TB/s':>8} "
          f"{'tc cold s':>9} {'ff cold s':>9} {'peak MB e/tc/ff':>18} {'ff err':>8}")
    for r in results:
        at = r.get("ff_max_autotune_ms", float("nan"))
        best = min(r["ff_ms"], at) if at == at else r["ff_ms"]
        print(f"{r['workload']:24} {r['eager_ms']:9.4f} {r['tc_ms']:8.4f} {r['ff_ms']:8.4f} {at:9.4f} "
              f"{r['bytes'] / best / 1e9:8.2f} {r['tc_cold_s']:9.3f} {r['ff_cold_s']:9.3f} "
              f"{r['eager_peak_mb']:6.0f}/{r['tc_peak_mb']:5.0f}/{r['ff_peak_mb']:5.0f} {r['ff_err']:8.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev_name, "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
