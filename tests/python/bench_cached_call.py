"""Cached-call overhead of a compiled function over the plain eager call (backend="eager").

    PYTHONPATH=python python tests/python/bench_cached_call.py [--tracer]

Measures `x + 1` on an 8-element CPU tensor (1 argument), `x + 1 + y + z` (3 arguments) and a
function with one graph break (two graphs and one native call in between): eager, framefuse, and
torch.compile(backend="eager") (Dynamo) where available, in one run.
`--tracer` uses a hand-built capture instead of the bytecode interpreter (same hook, guards and
runner), for builds without the interpreter.
"""
import statistics
import sys
import time

import torch

import framefuse


def f1(x):
    return x + 1


def f3(x, y, z):
    return x + 1 + y + z


def f_break(x):
    y = x + 1
    framefuse.graph_break()  # a C function: Dynamo breaks on it too
    return y + 1


def timeit(fn, args, n=100_000, repeat=7):
    for _ in range(2000):
        fn(*args)
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            fn(*args)
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(sorted(runs)[:4])  # median of the fastest runs: robust to noise


def hand_tracer(code, locals_):
    import operator
    from framefuse.graph import Graph
    g = Graph()
    names = code.co_varnames[:code.co_argcount]
    nodes = [g.placeholder(n, locals_[i]) for i, n in enumerate(names)]
    out = g.call(operator.add, nodes[0], 1)
    for n in nodes[1:]:
        out = g.call(operator.add, out, n)
    g.output((out,))
    srcs = [("local", i, n) for i, n in enumerate(names)]
    return {"graph": g, "inputs": srcs, "guards": [("tensor", s, locals_[i]) for i, s in enumerate(srcs)],
            "output": ("out", 0)}


def main():
    if "--tracer" in sys.argv:
        framefuse._C._testing.set_tracer(hand_tracer)
    x, y, z = (torch.randn(8) for _ in range(3))
    rows = []
    cases = [("1 arg", f1, (x,)), ("3 args", f3, (x, y, z))]
    if "--tracer" not in sys.argv:  # the hand-built capture knows no breaks
        cases.append(("one break", f_break, (x,)))
    for name, fn, args in cases:
        eager = timeit(fn, args)
        ff = framefuse.compile(fn, backend="eager")
        ff_t = timeit(ff, args)
        assert framefuse._C._frame_eval_stats()["cache_hits"] > 0, "framefuse did not compile the function"
        dyn_t = None
        if hasattr(torch, "compile"):
            try:
                import torch._dynamo as dynamo
                dynamo.reset()
                dyn = torch.compile(fn, backend="eager")
                dyn_t = timeit(dyn, args)
            except Exception as e:  # noqa: BLE001
                print(f"(torch.compile unavailable: {e})")
        rows.append((name, eager, ff_t, dyn_t))
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}")
    for name, eager, ff_t, dyn_t in rows:
        line = f"{name}: eager {eager:.3f} us, framefuse {ff_t:.3f} us (+{ff_t - eager:.3f} us)"
        if dyn_t is not None:
            line += f", dynamo {dyn_t:.3f} us (+{dyn_t - eager:.3f} us), ratio {(ff_t - eager) / max(dyn_t - eager, 1e-9):.2f}"
        print(line)


if __name__ == "__main__":
    main()
