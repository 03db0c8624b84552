"""torch's linear against MKL's packed product, per nanoGPT product at 256 rows, 2 threads, the
contenders taking turns (medians of 9):

- `F.linear`: eager;
- `_mkl_linear`: torch.ops.mkl._mkl_linear on a weight packed once by _mkl_reorder_linear_weight
  (its result from torch's allocator);
- `framefuse`: a compiled graph of the one linear, its weight packed (cpu_pack_linear_weights) and
  its result written into the runtime's output (pooled when large).

Each call's result is dropped before the next, as a model's layers drop theirs. Also whether the
results are bit-equal.

    python benchmarks/experiments/cpu_packed_linear.py    (framefuse importable: PYTHONPATH=python for a plain build)
"""
import statistics
import time

import torch
import torch.nn.functional as F

import framefuse

ROWS = 256


def compiled_linear(x, w, b):
    fn = framefuse.compile(lambda x, w, b: F.linear(x, w, b), backend="inductor")
    return lambda: fn(x, w, b)


def main():
    torch.set_num_threads(2)
    for k, n in [(768, 50304), (768, 3072), (3072, 768), (768, 2304), (768, 768)]:
        x, w = torch.randn(ROWS, k), torch.randn(n, k)
        b = None if n == 50304 else torch.randn(n)  # the tied LM head has no bias
        packed = torch.ops.mkl._mkl_reorder_linear_weight(w, ROWS)
        runs = {
            "F.linear": lambda: F.linear(x, w, b),
            "_mkl_linear": lambda: torch.ops.mkl._mkl_linear(x, packed, w, b, ROWS),
            "framefuse": compiled_linear(x, w, b),
        }
        with torch.no_grad():
            for fn in runs.values():
                fn(), fn(), fn()  # framefuse packs on its second call
            times = {name: [] for name in runs}
            for _ in range(9):
                for name, fn in runs.items():
                    t0 = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t0)
            results = {name: fn() for name, fn in runs.items()}
        med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        same = torch.equal(results["_mkl_linear"], results["framefuse"])
        diff = (results["F.linear"] - results["framefuse"]).abs().max().item()
        print(f"{ROWS}x{k} @ {k}x{n}{' + bias' if b is not None else ''}: "
              + ", ".join(f"{name} {ms:.2f} ms" for name, ms in med.items())
              + f"; framefuse vs F.linear {med['F.linear'] / med['framefuse']:.2f}x, "
              f"vs _mkl_linear {med['_mkl_linear'] / med['framefuse']:.2f}x; "
              f"framefuse == _mkl_linear: {same}; max diff to F.linear {diff:.1e}")


if __name__ == "__main__":
    main()
