"""What the compiled forward saves for the backward with and without torch.utils.checkpoint
(use_reentrant=False): Linear(64, 256) -> gelu -> Linear(256, 256) -> tanh, checkpointed or not, then
Linear(256, 8), batch 512, float32. Prints the saved bytes of framefuse's autograd Function and the
largest difference of outputs and gradients from eager's checkpoint.

    PYTHONPATH=python python benchmarks/experiments/checkpoint_memory.py [--device cuda]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import framefuse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    a, b, c = (torch.nn.Linear(64, 256).to(args.device), torch.nn.Linear(256, 256).to(args.device),
               torch.nn.Linear(256, 8).to(args.device))
    params = [p for m in (a, b, c) for p in m.parameters()]

    def block(h):
        return b(F.gelu(a(h))).tanh()

    def with_checkpoint(x):
        return c(checkpoint(block, x, use_reentrant=False)).relu()

    def without(x):
        return c(block(x)).relu()

    def run(fn, x):
        for p in params:
            p.grad = None
        x = x.detach().requires_grad_()
        out = fn(x)
        node = out.grad_fn
        saved = sum(t.numel() * t.element_size() for t in node.saved_tensors) \
            if type(node).__name__ == "_FunctionBackward" else None
        out.sum().backward()
        return [out.detach(), x.grad] + [p.grad.clone() for p in params], saved

    x = torch.randn(512, 64, device=args.device)
    want, _ = run(with_checkpoint, x)
    for fn in (with_checkpoint, without):
        framefuse.reset()
        got, saved = run(framefuse.compile(fn), x)
        diff = max((g - w).abs().max().item() for g, w in zip(got, want))
        print(f"{fn.__name__:16s} saved {saved} bytes, max difference from eager's checkpoint {diff:.2e}")


if __name__ == "__main__":
    main()
