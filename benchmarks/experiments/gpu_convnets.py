"""torchvision resnet18 (b32, 224x224) inference on CUDA under torch's default precision (cuDNN
convolutions in TF32), compiled and run as a user would: eager, torch.compile (default and
reduce-overhead) and framefuse variants (NCHW, channels-last, channels-last keeping NHWC copies of
every weight, the default, reduce-overhead), timed interleaved: 15 rounds of 20 CUDA-event timed
calls per variant, medians.

    PYTHONPATH=python python3 benchmarks/experiments/gpu_convnets.py --tc          # with torch.compile
    PYTHONPATH=python python3 benchmarks/experiments/gpu_convnets.py --fp32        # timed with TF32 off

--fp32 compiles everything under torch's defaults and times in full fp32 (cuDNN TF32 off): it shows
what the channels-last layout costs where cuDNN's NHWC kernels run in fp32.
"""
import os
import statistics
import sys
import time

import torch
import torchvision
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python"))
import framefuse  # noqa: E402
from framefuse import config  # noqa: E402
dev = "cuda"
torch.manual_seed(0)
model = torchvision.models.resnet18().to(dev).eval()
xs = [torch.randn(32, 3, 224, 224, device=dev) for _ in range(2)]
with torch.no_grad():
    ref = model(xs[0])
variants = {"eager": model}
def fresh():
    m = torchvision.models.resnet18().to(dev).eval(); m.load_state_dict(model.state_dict()); return m
for name, knobs in [("ff_nchw_nofold", dict(cuda_channels_last=False, cuda_fold_batch_norm=False)),
                    ("ff_cl_nofold", dict(cuda_channels_last=True, cuda_fold_batch_norm=False)),
                    ("ff_keep_weights", dict(cuda_keep_nhwc_weights=True)),
                    ("ff_default", dict()), ("ff_ro", dict())]:
    with config.patch(**knobs):
        f = framefuse.compile(fresh(), backend="inductor", mode="reduce-overhead" if name == "ff_ro" else None)
        t0 = time.time()
        with torch.no_grad():
            out = f(xs[0]); torch.cuda.synchronize()
        print(f"{name}: cold {time.time()-t0:.2f} s  max abs err vs eager (default precision) {(out - ref).abs().max().item():.2e}", flush=True)
    variants[name] = f
if "--tc" in sys.argv:
    tcr = torch.compile(fresh(), mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3): tcr(xs[0])
    variants["torch.compile-ro"] = tcr
    tc = torch.compile(fresh())
    t0 = time.time()
    with torch.no_grad(): tc(xs[0])
    print("torch.compile cold", time.time() - t0, flush=True)
    variants["torch.compile"] = tc
if "--fp32" in sys.argv:  # compiled above with torch's defaults; timed in full fp32
    torch.backends.cudnn.allow_tf32 = False
    variants.pop("torch.compile-ro", None)
def timeit(f, n=20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        s.record()
        for i in range(n): f(xs[i % 2])
        e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n
for name, f in variants.items():
    for _ in range(5): timeit(f)
res = {k: [] for k in variants}
for r in range(15):
    for name, f in variants.items(): res[name].append(timeit(f))
base = statistics.median(res["eager"])
for name, v in res.items():
    m = statistics.median(v)
    print(f"{name:16s} {m:.4f} ms  {base / m:.2f}x eager", flush=True)
print("peak MB", torch.cuda.max_memory_allocated() / 2**20)
