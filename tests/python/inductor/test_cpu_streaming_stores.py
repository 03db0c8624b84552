"""Non-temporal stores for large CPU outputs (config `cpu_streaming_store_mb`, lowered to 1 MB here):
results equal eager's for every dtype, aligned and misaligned outputs, one and two threads, one-level
and row kernels; the generated LLVM IR has them exactly where it should."""
import io
import logging

import pytest
import torch

import framefuse

import inductor_util as iu

pytestmark = iu.needs_codegen


@pytest.fixture(autouse=True)
def one_megabyte_threshold(tmp_path):  # noqa: PT004
    framefuse.reset()
    with framefuse.config.patch(cpu_streaming_store_mb=1, cache_dir=str(tmp_path)):
        yield
    framefuse.reset()


def _llvm_ir(fn, inputs):
    """fn's graph compiled with the LLVM IR logged; returns (compiled, IR text)."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    logging.getLogger("framefuse").addHandler(handler)
    framefuse.set_logs("+inductor,+output_code")
    try:
        cg = iu.compile_graph(iu.build(fn, inputs), inputs)
    finally:
        framefuse.set_logs("")
        logging.getLogger("framefuse").removeHandler(handler)
    return cg, buf.getvalue()


def _affine(g, a):
    return g.call(torch.add, g.call(torch.mul, a, 3), 1)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32])
def test_one_level_kernel_equals_eager(dtype, threads):
    x = (torch.randn((1 << 19) + 13) * 100).to(dtype)  # over 1 MB for every dtype; an odd length
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        iu.check(_affine, [x])
    finally:
        torch.set_num_threads(old)


def test_streaming_stores_only_in_kernels_with_large_outputs():
    _, ir = _llvm_ir(_affine, [torch.randn(1 << 19)])
    assert "!nontemporal" in ir and "llvm.x86.sse.sfence" in ir, ir[-3000:]
    _, ir = _llvm_ir(_affine, [torch.randn(1 << 17)])  # 512 KB: under the threshold
    assert "_stream" not in ir and "!nontemporal" not in ir


def test_row_kernel_equals_eager():
    x = torch.randn(1024, 1000)
    cg, ir = _llvm_ir(lambda g, a: g.call(torch.softmax, g.call(torch.mul, a, 0.125), -1), [x])
    assert "_stream" in ir
    torch.testing.assert_close(cg(x)[0], torch.softmax(x * 0.125, -1), atol=2e-6, rtol=2e-6)


@pytest.mark.parametrize("offset", [0, 1, 16])  # elements into a 64-byte aligned allocation
def test_output_into_a_view_equals_eager(offset):
    # A misaligned output runs the kernel's plain body, an aligned one the streaming body.
    def f(out, x):
        out.copy_(x * 2)
        return out

    x = torch.randn(1 << 19)
    base, ref = torch.zeros((1 << 19) + 32), torch.zeros((1 << 19) + 32)
    compiled = framefuse.compile(f, backend="inductor")
    compiled(base[offset:offset + x.numel()], x)
    f(ref[offset:offset + x.numel()], x)
    assert torch.equal(base, ref)
