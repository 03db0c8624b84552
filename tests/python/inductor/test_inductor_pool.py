"""Large outputs and intermediates come from the runtime's buffer pool: they must behave like the
tensors torch would allocate (no view, eager strides, right values), and their memory is reused
only once torch has freed every tensor that shares it."""
import gc

import pytest
import torch

import framefuse
from framefuse import _C
from inductor_util import build, check, needs_codegen
from framefuse.inductor import compile_graph

pytestmark = needs_codegen

BIG = (1024, 300)  # 1.2 MB of float32: above the pool's threshold


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_pooled_output_values_and_layout(dtype):
    x = torch.randn(*BIG).to(dtype)
    check(lambda g, a: g.call(torch.sin, g.call(torch.mul, a, 2.0)), [x])


def test_pooled_output_is_a_plain_tensor():
    x = torch.randn(*BIG)
    g = build(lambda g, a: (g.call(torch.exp, a), g.call(torch.gt, a, 0.0)), [x])
    cg = compile_graph(g, [x])
    assert isinstance(cg, _C.inductor.CompiledGraph)
    e, m = cg(x)
    assert e._base is None and m._base is None
    assert e.storage_offset() == 0 and e.is_contiguous()
    assert m.dtype == torch.bool and torch.equal(m, x > 0)
    torch.testing.assert_close(e, torch.exp(x), rtol=2e-6, atol=0)
    e.add_(1)  # writable
    torch.testing.assert_close(e, torch.exp(x) + 1, rtol=2e-6, atol=0)
    e.resize_(10)  # shrinking keeps working
    assert e.shape == (10,)


def test_memory_reused_only_after_free():
    x = torch.randn(*BIG)
    g = build(lambda g, a: g.call(torch.cos, a), [x])
    cg = compile_graph(g, [x])
    (a,) = cg(x)
    ptr = a.data_ptr()
    view = a[3:]  # keeps the storage alive after `a` is gone
    del a
    gc.collect()
    (b,) = cg(x)
    assert b.data_ptr() != ptr
    torch.testing.assert_close(view, torch.cos(x)[3:], rtol=2e-6, atol=1e-7)
    b_ptr = b.data_ptr()
    del b, view
    gc.collect()
    (c,) = cg(x + 1)
    assert c.data_ptr() in (ptr, b_ptr)  # a freed block came back
    torch.testing.assert_close(c, torch.cos(x + 1), rtol=2e-6, atol=1e-7)


def test_pool_off_gives_torch_allocated_tensors():
    x = torch.randn(*BIG)
    with framefuse.config.patch(cpu_buffer_pool_mb=0):
        g = build(lambda g, a: g.call(torch.sin, a), [x])
        cg = compile_graph(g, [x])
        outs = [cg(x)[0] for _ in range(3)]
        for o in outs:
            torch.testing.assert_close(o, torch.sin(x), rtol=2e-6, atol=1e-7)
        outs[0].resize_(2 * x.numel())  # torch's own storage: it can grow
        assert outs[0].numel() == 2 * x.numel()


def test_pooled_intermediates_through_a_reduction():
    # The row sums are an intermediate slot; the output is pooled; results must match eager.
    x = torch.randn(2048, 257)
    check(lambda g, a: g.call(torch.div, g.call(torch.exp, a), g.call(torch.sum, g.call(torch.exp, a), 0, keepdim=True)), [x])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_linear_and_matmul_write_into_the_pool(bias, dtype):
    import torch.nn.functional as F
    x, w, b = torch.randn(2, 70, 96, dtype=dtype), torch.randn(2100, 96, dtype=dtype), torch.randn(2100, dtype=dtype)
    if bias:
        check(lambda g, a, c, d: g.call(F.linear, a, c, d), [x, w, b])
    else:
        check(lambda g, a, c: g.call(F.linear, a, c), [x, w])
    check(lambda g, a, c: g.call(torch.matmul, a, g.call(torch.Tensor.t, c)), [x, w])


def test_large_linear_with_grad_takes_the_ordinary_path():
    import torch.nn.functional as F
    x, w = torch.randn(140, 96), torch.randn(2100, 96, requires_grad=True)
    g = build(lambda g, a, c: g.call(F.linear, a, c), [x, w])
    cg = compile_graph(g, [x, w])
    (out,) = cg(x, w)
    torch.testing.assert_close(out, F.linear(x, w), rtol=1e-5, atol=1e-5)


def test_residual_chain_is_stored_once_and_stays_correct():
    # x = x + f(x) repeated: the running sum has two users each time, so it is stored.
    import torch.nn.functional as F
    x, w = torch.randn(33, 64), torch.randn(64)

    def fn(g, a, c):
        h = a
        for _ in range(5):
            h = g.call(torch.add, h, g.call(F.layer_norm, h, [64], c, None))
        return h
    check(fn, [x, w])


def test_epilogues_written_into_the_extern_result():
    # conv -> batch_norm -> relu and mm -> relu store into the extern's own result; when that result
    # is also returned or read later, or when the extern may alias an input, they must not.
    import torch.nn.functional as F
    x, w = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)
    rm, rv, g_, b_ = torch.randn(4), torch.rand(4) + 0.5, torch.randn(4), torch.randn(4)
    check(lambda g, a, c, m, v, s, t: g.call(F.relu, g.call(F.batch_norm, g.call(F.conv2d, a, c), m, v, s, t)),
          [x, w, rm, rv, g_, b_])
    a, b = torch.randn(33, 20), torch.randn(20, 17)
    check(lambda g, p, q: g.call(torch.relu, g.call(torch.mm, p, q)), [a, b])
    # the product is also a graph output
    check(lambda g, p, q: (lambda m: (g.call(torch.relu, m), m))(g.call(torch.mm, p, q)), [a, b])
    # the product is read again by a later kernel
    check(lambda g, p, q: (lambda m: g.call(torch.add, g.call(torch.sum, g.call(torch.relu, m), 1, keepdim=True), m))(g.call(torch.mm, p, q)), [a, b])
    # an extern that may return its input: the input must not change
    a0 = a.clone()
    check(lambda g, p: g.call(torch.relu, g.call(torch.Tensor.contiguous, p)), [a])
    assert torch.equal(a, a0)


def test_resnet_block_with_inplace_ops_and_in_place_epilogues():
    import operator
    import torch.nn.functional as F
    x = torch.randn(2, 8, 12, 12)
    w1, w2 = torch.randn(8, 8, 3, 3) * 0.2, torch.randn(8, 8, 3, 3) * 0.2
    bn = [torch.randn(8), torch.rand(8) + 0.5, torch.randn(8), torch.randn(8)]

    def fn(g, a, c1, c2, m, v, s, t):
        h = g.call(F.conv2d, a, c1, padding=1)
        h = g.call(F.relu, g.call(F.batch_norm, h, m, v, s, t), inplace=True)
        h = g.call(F.batch_norm, g.call(F.conv2d, h, c2, padding=1), m, v, s, t)
        h = g.call(operator.iadd, h, a)
        return g.call(F.relu, h, inplace=True)
    x0 = x.clone()
    check(fn, [x, w1, w2] + bn)
    assert torch.equal(x, x0)
