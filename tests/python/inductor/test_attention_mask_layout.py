"""SDPA's attn_mask reaches torch in a layout its fused CUDA kernels take (inductor/lower_extern_operands.cpp).
T5's position bias is an embedding's [q, k, heads] result permuted to [1, heads, q, k]: its keys are
strided, and with such a mask torch's CUDA SDPA runs its math path. The CUDA program hands SDPA the
mask unit-stride along keys (stored so in the first place where only attention reads it, else copied
once); the CPU program leaves it as it is (the CPU's flash kernel takes any mask). The CUDA programs'
results against eager are tests/python/cuda/test_cuda_zoo_rewrites.py's."""
import re

import torch
import torch.nn.functional as F

from framefuse import inductor

import pytest

import inductor_util as iu

pytestmark = pytest.mark.skipif(not hasattr(F, "scaled_dot_product_attention"),
                                reason="F.scaled_dot_product_attention is torch >= 2.0's")

B, H, L, E = 2, 4, 16, 8


def _inputs():
    q, k, v = (torch.randn(B, H, L, E) for _ in range(3))
    w, buckets = torch.randn(32, H), torch.randint(0, 32, (L, L))
    causal = (torch.arange(L)[None, :] <= torch.arange(L)[:, None])[None, None].expand(B, 1, L, L)
    return [q, k, v, w, buckets, causal]


def _bias(g, w, buckets):
    return g.call(torch.unsqueeze, g.call(torch.permute, g.call(F.embedding, buckets, w), [2, 0, 1]), 0)


def _encoder(g, q, k, v, w, buckets, causal):
    # one bias, several layers (CSE leaves one node read by each layer's SDPA)
    bias = _bias(g, w, buckets)
    h = g.call(F.scaled_dot_product_attention, q, k, v, bias)
    return g.call(F.scaled_dot_product_attention, h, k, v, bias)


def _decoder(g, q, k, v, w, buckets, causal):
    # transformers 5.17's mask for a causal layer with a position bias: where(causal, bias, min)
    mask = g.call(torch.where, causal, _bias(g, w, buckets), -3.4028234663852886e38)
    h = g.call(F.scaled_dot_product_attention, q, k, v, mask)
    return g.call(F.scaled_dot_product_attention, h, k, v, mask)


def _buffers(ir, kind):
    return re.findall(r"^buf\d+: (\w+\[[^\]]*\]) strides (\[[^\]]*\]) " + kind, ir, re.M)


def test_t5_position_bias_is_copied_unit_stride_once_for_cuda():
    inputs = _inputs()
    g = iu.build(_encoder, inputs)
    assert _buffers(inductor.loop_ir(g, "cuda"), "Intermediate") == [("f32[1, 4, 16, 16]", "[1024, 256, 16, 1]")]
    assert _buffers(inductor.loop_ir(g, "cpu"), "Intermediate") == []


def test_a_where_mask_read_only_by_attention_is_stored_unit_stride():
    # eager lays the where out as its bias operand ([1024, 1, 64, 4]); the CUDA program stores it
    # unit-stride in the first place: one kernel, no copy
    inputs = _inputs()
    g = iu.build(_decoder, inputs)
    assert _buffers(inductor.loop_ir(g, "cuda"), "Intermediate") == [("f32[2, 4, 16, 16]", "[1024, 256, 16, 1]")]
    assert _buffers(inductor.loop_ir(g, "cpu"), "Intermediate") == [("f32[2, 4, 16, 16]", "[1024, 1, 64, 4]")]


def test_a_mask_also_returned_keeps_eager_strides_and_attention_reads_a_copy():
    def f(g, *args):
        mask = g.call(torch.where, args[5], _bias(g, args[3], args[4]), -3.4028234663852886e38)
        return g.call(F.scaled_dot_product_attention, *args[:3], mask), mask

    ir = inductor.loop_ir(iu.build(f, _inputs()), "cuda")
    assert _buffers(ir, "Output") == [("f32[2, 4, 16, 16]", "[1024, 1, 64, 4]")]
    assert _buffers(ir, "Intermediate") == [("f32[2, 4, 16, 16]", "[1024, 256, 16, 1]")]


def test_an_expanded_mask_stays_broadcast_in_its_copy():
    def f(g, q, k, v, w, buckets, causal):
        bias = g.call(torch.Tensor.expand, _bias(g, w, buckets), B, H, L, L)
        return g.call(F.scaled_dot_product_attention, q, k, v, bias)

    ir = inductor.loop_ir(iu.build(f, _inputs()), "cuda")
    assert _buffers(ir, "Intermediate") == [("f32[1, 4, 16, 16]", "[1024, 256, 16, 1]")]


@iu.needs_codegen
@pytest.mark.parametrize("fn", [_encoder, _decoder])
def test_the_cpu_programs_equal_eager(fn):
    iu.check(fn, _inputs())


def test_a_unit_stride_mask_is_not_copied():
    def f(g, q, k, v, w, buckets, causal):
        return g.call(F.scaled_dot_product_attention, q, k, v, causal)

    assert _buffers(inductor.loop_ir(iu.build(f, _inputs()), "cuda"), "Intermediate") == []
