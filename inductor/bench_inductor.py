"""Benchmarks of the CPU code generator against eager (and torch.compile where available).

    PYTHONPATH=python python inductor/bench_inductor.py [--threads 2] [--no-torch-compile]

Prints one line per workload: best-of-N steady-state times, speedups, effective GB/s and the
cold compile times (fresh cache directories).
"""
import argparse
import os
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

import framefuse
from framefuse.graph import Graph
from framefuse.inductor import compile_graph


def best(fn, args, reps=20):
    fn(*args)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t0)
    return min(ts)


def sincos(x):
    return torch.sin(x) + torch.cos(x)


def ln_gelu(x, r, w, b):
    return F.gelu(F.layer_norm(x + r, (x.shape[-1],), w, b))


def softmax(x):
    return torch.softmax(x * 0.125, -1)


def graph_sincos(x):
    g = Graph(); xn = g.placeholder("x", x)
    g.output((g.call(torch.add, g.call(torch.sin, xn), g.call(torch.cos, xn)),))
    return g


def graph_ln_gelu(x, r, w, b):
    g = Graph()
    xn, rn, wn, bn = (g.placeholder(n, t) for n, t in zip("xrwb", (x, r, w, b)))
    a = g.call(torch.add, xn, rn)
    ln = g.call(F.layer_norm, a, [x.shape[-1]], wn, bn)
    g.output((g.call(F.gelu, ln),))
    return g


def graph_softmax(x):
    g = Graph(); xn = g.placeholder("x", x)
    g.output((g.call(torch.softmax, g.call(torch.mul, xn, 0.125), -1),))
    return g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-torch-compile", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    framefuse.config.cache_dir = tempfile.mkdtemp(prefix="ff_bench_cache_")
    use_tc = hasattr(torch, "compile") and not a.no_torch_compile
    if use_tc:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="ti_bench_cache_"))
    torch.manual_seed(0)
    N, D = 8192, 1024
    work = [
        ("sin+cos 16M", sincos, graph_sincos, (torch.randn(16 * 2**20),), 8 * 16 * 2**20),
        ("gelu(layer_norm(x+r)) 8192x1024", ln_gelu, graph_ln_gelu,
         (torch.randn(N, D), torch.randn(N, D), torch.randn(D), torch.randn(D)), 12 * N * D),
        ("softmax(x*0.125) 4096x4096", softmax, graph_softmax, (torch.randn(4096, 4096),), 8 * 4096 * 4096),
    ]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"framefuse threads via {framefuse._C.inductor.parallel_backend()}")
    for name, eager, build, args, nbytes in work:
        t_eager = best(eager, args)
        g = build(*args)
        t0 = time.perf_counter()
        fn = compile_graph(g, list(args))
        fn(*args)
        ff_compile = time.perf_counter() - t0
        t_ff = best(fn, args)
        got = fn(*args)[0]
        ref = eager(*args)
        err = (got - ref).abs().max().item()
        line = (f"{name}: eager {t_eager*1e3:.2f} ms, framefuse {t_ff*1e3:.2f} ms "
                f"({t_eager/t_ff:.2f}x, {nbytes/t_ff/1e9:.1f} GB/s), compile {ff_compile*1e3:.0f} ms, max err {err:.2e}")
        if use_tc:
            tc = torch.compile(eager)
            t0 = time.perf_counter()
            tc(*args)
            tc_compile = time.perf_counter() - t0
            t_tc = best(tc, args)
            line += (f"; torch.compile {t_tc*1e3:.2f} ms ({t_eager/t_tc:.2f}x eager, framefuse/tc {t_tc/t_ff:.2f}x),"
                     f" tc compile {tc_compile:.2f} s (ratio {ff_compile/tc_compile:.3f})")
        print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
