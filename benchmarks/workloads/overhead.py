"""Overhead micro-workloads: calls so small that what is measured is the compiler's per-call cost
(guard checks, cache lookup, entering compiled code), reported as time above the plain eager call."""

import zlib

import torch

from . import Case, workload


def add_one(x):
    return x + 1


def add_three(x, y, z):
    return x + y + z + 1


def one_break(x):
    y = x + 1
    # NB: a native call that neither framefuse nor Dynamo can trace and that prints nothing, so both
    # split here: graph, native call, graph. (framefuse.graph_break() is framefuse-only.)
    zlib.crc32(b"framefuse")
    return y * 2


@workload("add_one", "overhead", "overhead", description="x + 1 on an 8-element tensor (1 argument)")
def build_add_one(device, scale):
    return Case(add_one, (torch.randn(8, device=device),), atol=0, rtol=0)


@workload("add_one_3args", "overhead", "overhead", description="x + y + z + 1 on 8-element tensors (3 arguments)")
def build_add_three(device, scale):
    return Case(add_three, tuple(torch.randn(8, device=device) for _ in range(3)), atol=0, rtol=0)


@workload("one_graph_break", "overhead", "overhead",
          description="(x + 1) * 2 split by a native call (zlib.crc32): two graphs and one break")
def build_one_break(device, scale):
    return Case(one_break, (torch.randn(8, device=device),), atol=0, rtol=0)
