"""torch's linear against MKL's packed product (torch.ops.mkl._mkl_linear on a weight packed once by
_mkl_reorder_linear_weight), which framefuse's cpu_pack_linear_weights uses: nanoGPT's products at
256 rows, 2 threads, interleaved, medians; also whether the two results are bit-equal.

    python benchmarks/cpu_packed_linear.py
"""
import statistics
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(2)
for k, n in [(768, 50304), (768, 3072), (3072, 768), (768, 2304), (768, 768)]:
    x, w, b = torch.randn(256, k), torch.randn(n, k), torch.randn(n)
    packed = torch.ops.mkl._mkl_reorder_linear_weight(w, 256)
    plain = lambda: F.linear(x, w, b)  # noqa: E731
    mkl = lambda: torch.ops.mkl._mkl_linear(x, packed, w, b, 256)  # noqa: E731
    for _ in range(2):
        plain(), mkl()
    tp, tm = [], []
    for _ in range(9):
        t0 = time.perf_counter(); plain(); t1 = time.perf_counter(); mkl(); t2 = time.perf_counter()
        tp.append(t1 - t0); tm.append(t2 - t1)
    p, m = statistics.median(tp), statistics.median(tm)
    err = (plain() - mkl()).abs().max().item()
    print(f"256x{k} @ {k}x{n}: linear {p*1e3:.2f} ms, packed {m*1e3:.2f} ms, {p/m:.2f}x, max diff {err:.1e}")
