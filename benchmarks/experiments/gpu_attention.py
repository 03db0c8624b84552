"""nanoGPT's causal attention alone on CUDA with float32 matmuls in TF32: eager (two TF32 batched
products around a softmax), framefuse (its TF32 attention kernel, inductor/cuda/attention.h) and
torch.compile, from the product holding q, k and v to the heads merged back.

    PYTHONPATH=python python3 benchmarks/experiments/gpu_attention.py [--batch 8 --heads 12 --seq 512 --head-dim 64]

Each round times every contender for `--calls` calls between two CUDA events, the contenders taking
turns; medians over `--rounds` rounds. Errors are against the same attention in float64.
"""
import argparse
import math
import statistics

import torch
import torch.nn.functional as F

import framefuse


def make(B, H, T, E):
    mask = torch.tril(torch.ones(T, T, device="cuda")).view(1, 1, T, T)

    def attention(qkv):
        q, k, v = qkv.split(H * E, dim=2)
        q, k, v = (x.view(B, T, H, E).transpose(1, 2) for x in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(E))
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
        return (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, H * E)

    return attention


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=50)
    a = p.parse_args()
    B, H, T, E = a.batch, a.heads, a.seq, a.head_dim
    torch.backends.cuda.matmul.allow_tf32 = True
    attention = make(B, H, T, E)
    qkv = torch.randn(B, T, 3 * H * E, device="cuda")
    contenders = {"eager": attention, "framefuse": framefuse.compile(attention, backend="inductor")}
    if hasattr(torch, "compile"):
        contenders["torch.compile"] = torch.compile(attention)
    print(f"device {torch.cuda.get_device_name()}; torch {torch.__version__}; B{B} H{H} T{T} E{E}, causal, TF32 matmuls")
    with torch.no_grad():
        ref = attention(qkv.double())
        for name, fn in contenders.items():
            out = fn(qkv)
            err = ((out.double() - ref).norm() / ref.norm()).item()
            print(f"{name:14s} relative error against float64: {err:.2e}")
        times = {name: [] for name in contenders}
        for _ in range(a.rounds):
            for name, fn in contenders.items():
                fn(qkv)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(a.calls):
                    fn(qkv)
                end.record()
                torch.cuda.synchronize()
                times[name].append(start.elapsed_time(end) / a.calls)
    base = statistics.median(times["eager"])
    print("| contender | ms per call (median) | vs eager | range over rounds |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"| {name} | {m:.4f} | {base / m:.2f}x | {min(ts):.4f}-{max(ts):.4f} |")


if __name__ == "__main__":
    main()
