"""Memory-bound kernels: where fusion, not arithmetic, decides the speed. Each reports bytes moved
(inputs read once + outputs written once: the minimum a fused kernel must move), hence GB/s."""

import torch
from torch.nn import functional as F

from . import Case, pick, tensor_bytes, workload


def copy_into(x, out):
    # NB: into a buffer allocated once. A fresh output above glibc's mmap threshold (32 MB at most)
    # is mapped anew on every call and its page faults, not memory, would set the speed.
    return out.copy_(x)


@workload("copy", "memory",
          description="out.copy_(x) into a preallocated buffer: the copy bandwidth the other kernels are read against")
def build_copy(device, scale):
    n = pick(scale, 4096, 1 << 22, 1 << 24)
    x = torch.randn(n, device=device)
    return Case(copy_into, (x, torch.empty_like(x)), bytes_moved=2 * tensor_bytes(x), note=f"{n} floats")


def pointwise_chain(x, y):
    return torch.sigmoid(x * 1.5 + y).mul(y - 0.5).relu() + torch.tanh(x)


@workload("pointwise_chain", "memory", description="relu(sigmoid(x*1.5+y)*(y-0.5)) + tanh(x)")
def build_pointwise_chain(device, scale):
    n = pick(scale, 4096, 1 << 20, 1 << 24)
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    return Case(pointwise_chain, (x, y), bytes_moved=3 * tensor_bytes(x), atol=1e-5, rtol=1e-5, note=f"{n} floats")


def add_layernorm_gelu(x, r, w, b):
    return F.gelu(F.layer_norm(x + r, (x.shape[-1],), w, b))


@workload("add_layernorm_gelu", "memory",
          description="gelu(layer_norm(x + r)) (full: 8192x1024 on CPU, 8192x4096 on CUDA)")
def build_add_layernorm_gelu(device, scale):
    cuda = torch.device(device).type == "cuda"
    rows, cols = pick(scale, (64, 256), (1024, 1024), (8192, 4096) if cuda else (8192, 1024))
    x, r = torch.randn(rows, cols, device=device), torch.randn(rows, cols, device=device)
    w, b = torch.randn(cols, device=device), torch.randn(cols, device=device)
    return Case(add_layernorm_gelu, (x, r, w, b), bytes_moved=3 * tensor_bytes(x), atol=1e-4, rtol=1e-4,
                note=f"{rows}x{cols}")


class _AddLayerNormGelu(torch.nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.norm = torch.nn.LayerNorm(cols)

    def forward(self, x, r):
        return F.gelu(self.norm(x + r))


@workload("add_layernorm_gelu_grad", "memory",
          description="gelu(LayerNorm(x + r)) without torch.no_grad(): the norm's parameters require grad "
                      "(full: 8192x1024 on CPU, 8192x4096 on CUDA)")
def build_add_layernorm_gelu_grad(device, scale):
    cuda = torch.device(device).type == "cuda"
    rows, cols = pick(scale, (64, 256), (1024, 1024), (8192, 4096) if cuda else (8192, 1024))
    x, r = torch.randn(rows, cols, device=device), torch.randn(rows, cols, device=device)
    model = _AddLayerNormGelu(cols).to(device)
    with torch.no_grad():
        model.norm.weight.normal_()
        model.norm.bias.normal_()
    # NB: the output is compared detached; what is timed is the call alone, as users make it
    return Case(model, (x, r), step=lambda fn, args: fn(*args).detach(), bytes_moved=3 * tensor_bytes(x),
                atol=1e-4, rtol=1e-4, note=f"{rows}x{cols}")


def softmax_scaled(x):
    return torch.softmax(x * 0.125, -1)


@workload("softmax_scaled", "memory", description="softmax(x * 0.125, -1) (full: 4096x4096)")
def build_softmax_scaled(device, scale):
    rows, cols = pick(scale, (64, 256), (1024, 1024), (4096, 4096))
    x = torch.randn(rows, cols, device=device)
    return Case(softmax_scaled, (x,), bytes_moved=2 * tensor_bytes(x), atol=1e-6, rtol=1e-4, note=f"{rows}x{cols}")
