"""opt.step() of SGD (momentum), Adam and AdamW over a BERT-like set of parameters (fixed gradients):
eager, framefuse (the step called inside compiled code) and torch.compile(opt.step), interleaved in
one process, medians. Also each contender's first (compiling) step.

    PYTHONPATH=python python benchmarks/experiments/fused_optimizer.py [--layers 4] [--hidden 256] [--threads 2]
        [--device cuda] [--cold]
"""
import argparse
import os
import statistics
import tempfile
import time

import torch

import framefuse


def bert_like_shapes(layers, hidden, vocab=30522):
    shapes = [(vocab, hidden), (512, hidden), (2, hidden), (hidden,), (hidden,)]
    for _ in range(layers):
        shapes += [(hidden, hidden), (hidden,)] * 4 + [(hidden,), (hidden,)]
        shapes += [(4 * hidden, hidden), (4 * hidden,), (hidden, 4 * hidden), (hidden,), (hidden,), (hidden,)]
    return shapes


def make(name, shapes, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter((torch.randn(s, generator=gen) * 0.02).to(device)) for s in shapes]
    for p in params:
        p.grad = (torch.randn(p.shape, generator=gen) * 1e-3).to(device)
    kwargs = {"SGD": dict(lr=0.01, momentum=0.9), "Adam": dict(lr=1e-3), "AdamW": dict(lr=1e-3, weight_decay=0.01)}
    return getattr(torch.optim, name)(params, **kwargs[name])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cold", action="store_true",
                    help="empty compile caches (framefuse.config.cache_dir and TORCHINDUCTOR_CACHE_DIR in a temp dir)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.cold:
        tmp = tempfile.mkdtemp()
        framefuse.config.cache_dir = os.path.join(tmp, "framefuse")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
    framefuse.optim.fuse_cuda = True  # measured here even where torch's step is kept by default
    shapes = bert_like_shapes(args.layers, args.hidden)
    numel = sum(torch.Size(s).numel() for s in shapes)
    print(f"torch {torch.__version__}, {args.device}, {len(shapes)} parameters, {numel / 1e6:.1f} M elements, "
          f"{args.threads} threads")
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    for name in ("SGD", "Adam", "AdamW"):
        opts = {"eager": make(name, shapes, args.device), "framefuse": make(name, shapes, args.device)}
        steps = {"eager": opts["eager"].step}
        ff_opt = opts["framefuse"]
        steps["framefuse"] = framefuse.compile(lambda: ff_opt.step())
        if not args.no_torch_compile and hasattr(torch, "compile"):
            opts["torch.compile"] = make(name, shapes, args.device)
            steps["torch.compile"] = torch.compile(opts["torch.compile"].step)
        first = {}
        with torch.no_grad():
            for k in steps:
                opts[k].step()  # torch creates the state; the compiled contenders compile on the next step
                sync()
                t0 = time.perf_counter()
                steps[k]()
                sync()
                first[k] = time.perf_counter() - t0
            times = {k: [] for k in steps}
            for _ in range(3):
                for k in steps:
                    steps[k]()
            for _ in range(args.reps):
                for k in steps:
                    sync()
                    t0 = time.perf_counter()
                    steps[k]()
                    sync()
                    times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        row = "  ".join(f"{k} {med[k]:.2f} ms (first {first[k] * 1e3:.0f} ms)" for k in steps)
        speed = "  ".join(f"{k} {med['eager'] / med[k]:.2f}x" for k in steps if k != "eager")
        print(f"{name:6s} {row}  | vs eager: {speed}")


if __name__ == "__main__":
    main()
