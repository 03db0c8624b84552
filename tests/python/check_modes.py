"""The three ways framefuse checks tensors on a cached call, for tests that must cover each:
`native` (framefuse._torch_native reads the TensorImpl), `batched` (torch's TensorGuards, torch 2.x)
and `per_tensor` (torch's Python getters, as on torch 1.13)."""
import contextlib

import pytest
import torch

import framefuse
from framefuse import _C

MODES = ["native", "batched", "per_tensor"]
HAS_TENSOR_GUARDS = hasattr(getattr(torch._C, "_dynamo", None), "guards")


def available(mode):
    """Why `mode` cannot run with this torch and build, or None."""
    if mode == "native" and _C.graph.torch_native_status() != "loaded":
        return "framefuse._torch_native: " + _C.graph.torch_native_status()
    if mode == "batched" and not HAS_TENSOR_GUARDS:
        return "torch without torch._C._dynamo (1.13) has no TensorGuards"
    return None


@contextlib.contextmanager
def check_mode(mode):
    """Runs the block with tensor guards and input checks in `mode` (skips the test if this torch
    or build has no such mode; test_torch_native.py asserts which builds must have each)."""
    why = available(mode)
    if why:
        pytest.skip(why)
    old = framefuse.config.torch_native, framefuse.config.guard_tensors_batched
    framefuse.config.torch_native = mode == "native"
    framefuse.config.guard_tensors_batched = mode == "batched"
    try:
        yield mode
    finally:
        framefuse.config.torch_native, framefuse.config.guard_tensors_batched = old
