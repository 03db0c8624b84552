"""The seed MLP training step on CUDA (128->256->10, CrossEntropy + Adam, batch 32): eager against
framefuse and torch.compile under mode="reduce-overhead", contenders taking turns.

The step is a few dozen tiny launches, so its time is the host's; the GPU machine's host time drifts
by tens of percent within minutes. Each round therefore runs every contender for the same number of
steps, one after another, and the result is the median over rounds of each contender's time over
eager's in the same round.

    PYTHONPATH=python python3 benchmarks/experiments/gpu_train_step.py [--rounds 30] [--steps 100]

Peak memory: torch.cuda.max_memory_allocated from compile() through the warm-up steps, beyond what
was allocated before (cuBLAS's workspaces for the default stream exist by then)."""
import argparse
import os
import statistics
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from benchmarks.workloads.nets import MLP  # noqa: E402


def parts(name, example):
    """(forward, optimizer, loss function) of contender `name` over a fresh seeded MLP."""
    torch.manual_seed(0)
    model = MLP().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    fwd = model
    if name == "framefuse-ro":
        import framefuse
        fwd = framefuse.compile(model, backend="inductor", mode="reduce-overhead")
    elif name == "torch.compile-ro":
        fwd = torch.compile(model, mode="reduce-overhead")
    elif name == "make_graphed":  # a reference, not a compiler: torch's own CUDA graphs of the module,
        fwd = torch.cuda.make_graphed_callables(model, (example,))  # outputs and grads left in static memory
    return fwd, opt, nn.CrossEntropyLoss()


def _contender(name, xs, ys):
    fwd, opt, loss_fn = parts(name, xs[0])

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(fwd(xs[i % len(xs)]), ys[i % len(ys)])
        loss.backward()
        opt.step()
        return loss

    return step


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=100, help="steps per contender per round")
    p.add_argument("--contenders", default="eager,framefuse-ro,torch.compile-ro",
                   help="comma list; also make_graphed (torch.cuda.make_graphed_callables over the model)")
    args = p.parse_args()
    names = args.contenders.split(",")
    if not hasattr(torch, "compile") and "torch.compile-ro" in names:
        names.remove("torch.compile-ro")
    torch.backends.cuda.matmul.allow_tf32 = False
    xs = [torch.randn(32, 128, device="cuda") for _ in range(3)]
    ys = [torch.randint(0, 10, (32,), device="cuda") for _ in range(3)]
    for _ in range(3):  # cuBLAS workspaces of the default stream, on the caller's and autograd's threads
        _contender("eager", xs, ys)(0)
    torch.cuda.synchronize()

    steps, peak, losses, cold = {}, {}, {}, {}
    for name in names:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t = time.perf_counter()
        step = _contender(name, xs, ys)
        first = step(0)
        torch.cuda.synchronize()
        cold[name] = time.perf_counter() - t
        trace = [first.item()] + [step(i).item() for i in range(1, 20)]  # warm-up: records CUDA graphs
        torch.cuda.synchronize()
        peak[name] = (torch.cuda.max_memory_allocated() - base) / 2**20
        steps[name], losses[name] = step, trace

    times = {n: [] for n in names}
    for _ in range(args.rounds):
        for name in names:
            step = steps[name]
            torch.cuda.synchronize()
            t = time.perf_counter()
            for i in range(args.steps):
                step(i)
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t) / args.steps)

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.rounds} rounds x {args.steps} steps")
    print("| contender | median us/step | vs eager (median of per-round ratios) | range of ratios | cold s | peak MB | "
          "loss error after 20 steps |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        ratios = [e / t for e, t in zip(times["eager"], times[name])]
        err = max(abs(a - b) for a, b in zip(losses[name], losses["eager"]))
        print(f"| {name} | {statistics.median(times[name]) * 1e6:.1f} | {statistics.median(ratios):.2f}x | "
              f"{min(ratios):.2f}-{max(ratios):.2f} | {cold[name]:.3f} | {peak[name]:.1f} | {err:.1e} |")


if __name__ == "__main__":
    main()
