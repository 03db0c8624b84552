"""Cold compile time of the CUDA code generator without a GPU: every graph of a workload is captured
on the CPU and compiled for sm_90 (render + NVRTC) with an empty cubin cache. Prints, per workload,
graphs, kernels, functions compiled, wall seconds and the NVRTC share.

    PYTHONPATH=python python -m benchmarks.experiments.cuda_compile_time [--workloads nanogpt,resnet18,sin_cos]
"""
import argparse
import operator
import os
import tempfile
import time

import torch
import torch.nn.functional as F

import framefuse
from framefuse import cuda
from framefuse.graph import Graph


def _nanogpt():
    from benchmarks.workloads.nets import NanoGPT
    m = NanoGPT(n_layer=4, n_head=12, d=768).eval()
    return m, (torch.randint(0, 50304, (8, 512)),)


def _resnet18():
    import torchvision
    return torchvision.models.resnet18().eval(), (torch.randn(32, 3, 224, 224),)


def _graph(build):
    def fn():
        g = Graph()
        return build(g)
    return fn


def _sin_cos(g):
    x = g.placeholder("x", torch.randn(1 << 26))
    g.output((g.call(torch.add, g.call(torch.sin, x), g.call(torch.cos, x)),))
    return g


def _softmax(g):
    x = g.placeholder("x", torch.randn(4096, 4096))
    g.output((g.call(torch.softmax, g.call(operator.mul, x, 0.125), -1),))
    return g


def _ln_gelu(g):
    x, r = g.placeholder("x", torch.randn(8192, 4096)), g.placeholder("r", torch.randn(8192, 4096))
    w, b = g.placeholder("w", torch.randn(4096)), g.placeholder("b", torch.randn(4096))
    g.output((g.call(F.gelu, g.call(F.layer_norm, g.call(operator.add, x, r), [4096], w, b)),))
    return g


MODELS = {"nanogpt": _nanogpt, "resnet18": _resnet18}
GRAPHS = {"sin_cos": _sin_cos, "softmax": _softmax, "ln_gelu": _ln_gelu}


def measure(name, whole):
    stats = {"graphs": 0, "kernels": 0, "functions": 0, "compile_s": 0.0, "nvrtc_s": 0.0, "compiled_functions": 0,
             "programs": 0, "whole_s": 0.0}

    @framefuse.backends.native_graph
    def backend(graph, example_inputs, **_):
        t0 = time.perf_counter()
        fn = cuda.compile_graph(graph, arch="sm_90")
        stats["compile_s"] += time.perf_counter() - t0
        stats["nvrtc_s"] += fn._mod.nvrtc_ms / 1000.0
        stats["graphs"] += 1
        stats["kernels"] += len(fn.kernels())
        stats["functions"] += fn.source.count('extern "C" __global__')
        stats["compiled_functions"] += fn._mod.compiled_functions
        stats["programs"] += fn._mod.programs
        if whole:
            # The previous scheme: the whole module (every variant) as one program.
            t1 = time.perf_counter()
            from framefuse import _C
            _C.cuda.compile_source(fn.source, "sm_90")
            stats["whole_s"] += time.perf_counter() - t1
        return graph.run

    with tempfile.TemporaryDirectory() as d, framefuse.config.patch(cache_dir=d):
        t0 = time.perf_counter()
        if name in MODELS:
            framefuse.reset()
            model, args = MODELS[name]()
            with torch.no_grad():
                framefuse.compile(model, backend=backend)(*args)
        else:
            g = GRAPHS[name](Graph())
            backend(g, [])
        stats["wall_s"] = time.perf_counter() - t0
    return stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="sin_cos,softmax,ln_gelu,nanogpt")
    ap.add_argument("--threads", type=int, default=0, help="cuda_compile_threads (0: one per hardware thread)")
    ap.add_argument("--whole", action="store_true", help="also time the whole module as one NVRTC program")
    ap.add_argument("--repeat", type=int, default=1, help="runs per workload; the fastest is printed")
    args = ap.parse_args()
    print(f"cuda_compile_threads={args.threads}, {os.cpu_count()} CPUs")
    print("| workload | graphs | kernels | functions in source | functions compiled | programs | compile s | "
          "NVRTC s (sum over threads) | whole module as one program s |")
    print("|---|---|---|---|---|---|---|---|---|")
    with framefuse.config.patch(cuda_compile_threads=args.threads):
        for name in args.workloads.split(","):
            runs = [measure(name, args.whole) for _ in range(args.repeat)]
            s = min(runs, key=lambda r: r["compile_s"])
            s["whole_s"] = min(r["whole_s"] for r in runs)
            whole = f"{s['whole_s']:.3f}" if args.whole else "—"
            print(f"| {name} | {s['graphs']} | {s['kernels']} | {s['functions']} | {s['compiled_functions']} | "
                  f"{s['programs']} | {s['compile_s']:.3f} | {s['nvrtc_s']:.3f} | {whole} |", flush=True)


if __name__ == "__main__":
    main()
