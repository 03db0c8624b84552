"""relu(x * scale + shift) -> max_pool2d(3, 2, 1) over 8x64x112x112 (resnet18's stem), 2 threads:
eager against framefuse.compile(backend="inductor"), NCHW and channels-last, interleaved, medians.

    PYTHONPATH=python python benchmarks/experiments/cpu_max_pool.py
"""
import statistics
import time

import torch
import torch.nn.functional as F

import framefuse
torch.set_num_threads(2)
x = torch.randn(8, 64, 112, 112)
sc, sh = torch.randn(64, 1, 1), torch.randn(64, 1, 1)
def f(x, sc, sh):
    return F.max_pool2d(F.relu(x * sc + sh), 3, 2, 1)
ff = framefuse.compile(f, backend="inductor")
for cl in (False, True):
    xx = x.contiguous(memory_format=torch.channels_last) if cl else x
    for _ in range(5): ff(xx, sc, sh); f(xx, sc, sh)
    te, tf = [], []
    for _ in range(15):
        t0 = time.perf_counter(); f(xx, sc, sh); t1 = time.perf_counter(); ff(xx, sc, sh); t2 = time.perf_counter()
        te.append(t1 - t0); tf.append(t2 - t1)
    print("channels_last" if cl else "nchw", f"eager {statistics.median(te)*1e3:.2f} ms  ff {statistics.median(tf)*1e3:.2f} ms  {statistics.median(te)/statistics.median(tf):.2f}x")
