"""On a GPU: allow_in_graph's opaque call and a torch.library custom op run by the CUDA program, a
float read by .item() under capture_scalar_outputs, and FRAMEFUSE_COMPILE_DEBUG's repro of a CUDA graph."""
import importlib.util
import os

import pytest
import torch

import framefuse
from framefuse import _debug
from cuda_util import fp32_and_fresh, gpu  # noqa: F401  (fixture)

pytestmark = [pytest.mark.usefixtures("fp32_and_fresh")]

calls = []


@framefuse.compiler.allow_in_graph
def _opaque_scale(x, w):
    calls.append(x.device.type)
    return torch.nn.functional.softplus(x @ w) * 2


def _model(x, w):
    return torch.sigmoid(_opaque_scale(torch.relu(x), w)) + x.sum()


@gpu
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_allow_in_graph_on_cuda(backend):
    x, w = torch.randn(64, 32, device="cuda"), torch.randn(32, 32, device="cuda")
    calls.clear()
    fn = framefuse.compile(_model, backend=backend, fullgraph=True)
    for _ in range(2):
        torch.testing.assert_close(fn(x, w), _model(x, w))
    assert calls.count("cuda") == 4 and calls.count("meta") == 1, calls  # 2 compiled calls + 2 eager, 1 typing


@gpu
@pytest.mark.skipif(not hasattr(torch.library, "custom_op"), reason="torch.library.custom_op is torch >= 2.4's")
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_custom_op_on_cuda(backend):
    name = f"ff_cuda_custom_test::softplus_scale_{backend}"

    @torch.library.custom_op(name, mutates_args=())
    def softplus_scale(x: torch.Tensor, scale: float) -> torch.Tensor:
        calls.append(x.device.type)
        return torch.nn.functional.softplus(x) * scale

    @softplus_scale.register_fake
    def _(x, scale):
        return torch.empty_like(x)

    def f(x):
        return torch.sigmoid(softplus_scale(torch.relu(x) + 1, 3.0)).sum(0)

    x = torch.randn(128, 64, device="cuda")
    calls.clear()
    fn = framefuse.compile(f, backend=backend, fullgraph=True)
    for _ in range(2):
        torch.testing.assert_close(fn(x), f(x))
    assert calls == ["cuda"] * 4, calls  # the op's kernel once per call, compiled or eager


@gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_capture_scalar_outputs_on_cuda(mode):
    def f(x, y):
        s = x.abs().max().item()
        n = (x > 0).sum().item()
        return torch.sigmoid(y * (s * 2 - 1)) + n, s, n // 3

    x, y = torch.randn(64, device="cuda"), torch.randn(32, 16, device="cuda")
    with framefuse.config.patch(capture_scalar_outputs=True):
        fn = framefuse.compile(f, mode=mode, fullgraph=True)
        for _ in range(3):
            out, s, n = fn(x, y)
            ref, rs, rn = f(x, y)
            assert type(s) is float and s == rs and type(n) is int and n == rn
            assert torch.equal(out, ref)  # the graph runs on eager ops: bit for bit


@gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_numbers_only_returned_on_cuda(mode):
    # the tensor work compiles (CUDA program or graph replay); the numbers are read after it
    def f(x, w):
        out = torch.relu(x @ w)
        return out, out.argmax().item(), out.sum().item() / 2

    x, w = torch.randn(64, 32, device="cuda"), torch.randn(32, 16, device="cuda")
    with framefuse.config.patch(capture_scalar_outputs=True):
        fn = framefuse.compile(f, mode=mode, fullgraph=True)
        for _ in range(3):
            out, i, s = fn(x, w)
            ref, ri, rs = f(x, w)
            torch.testing.assert_close(out, ref)
            assert type(i) is int and i == ri and type(s) is float and s == pytest.approx(rs, rel=1e-5)


@gpu
def test_compile_debug_repro_of_a_cuda_graph(tmp_path):
    run = _debug.enable(str(tmp_path))
    try:
        framefuse.compile(lambda x: torch.tanh(x) * x.mean(0))(torch.randn(16, 8, device="cuda"))
    finally:
        _debug.disable()
    (folder,) = [d for d in os.listdir(run) if os.path.isdir(os.path.join(run, d))]
    spec = importlib.util.spec_from_file_location("cuda_repro", os.path.join(run, folder, "repro.py"))
    repro = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(repro)
    assert repro.INPUTS[0][4].startswith("cuda")
    assert repro.main() == 0
