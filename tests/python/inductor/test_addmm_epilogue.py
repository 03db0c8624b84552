"""torch.addmm as transformers' Conv1D calls it (GPT-2): `addmm(bias, x.view(-1, n), w).view(b, t, m)`.
Where a kernel reads the product (through views too) the product runs as `torch.mm` and the bias is
added by that kernel, as for `F.linear` (inductor/lower_ops.cpp, addmm_rule); where nothing but extern
calls read it (a split for attention) the bias stays in BLAS. A reshape that splits a dim and a load
that merges it back index the buffer linearly again (loop_ir.cpp, index_add), so the kernels after
such products load with affine indices, no division or modulo per element. The loop IR is read on
every machine; results against eager where the code generator is built."""
import operator
import re

import pytest
import torch
import torch.nn.functional as F

from framefuse import inductor

import inductor_util as iu

B, T, N, M = 2, 16, 24, 40


def _conv1d(g, x, w, b):
    # transformers' Conv1D on [B, T, N]: the product of the rows, viewed back as [B, T, -1]
    h = g.call(torch.Tensor.view, x, -1, N)
    h = g.call(torch.addmm, b, h, w)
    return g.call(torch.Tensor.view, h, B, T, -1)


def _mlp(g, x, w1, b1, w2, b2):
    # GPT2MLP: c_fc, gelu_new written out (pow, tanh), c_proj, then the residual add
    h = _conv1d(g, x, w1, b1)
    cube = g.call(torch.pow, h, 3.0)
    inner = g.call(operator.mul, g.call(operator.add, h, g.call(operator.mul, cube, 0.044715)), 0.7978845608)
    h = g.call(operator.mul, g.call(operator.mul, h, 0.5), g.call(operator.add, g.call(torch.tanh, inner), 1.0))
    h = g.call(torch.Tensor.view, h, -1, M)
    h = g.call(torch.addmm, b2, h, w2)
    h = g.call(torch.Tensor.view, h, B, T, N)
    return g.call(operator.add, h, x)


def _mlp_inputs():
    return [torch.randn(B, T, N), torch.randn(N, M) / 4, torch.randn(M), torch.randn(M, N) / 4, torch.randn(N)]


def _externs(ir):
    return [line for line in ir.splitlines() if line.startswith("extern node")]


def _kernel_lines(ir):
    return [line for line in ir.splitlines() if line.startswith("  ") and "=" in line]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_conv1d_products_run_as_mm_with_the_bias_in_the_next_kernel(device):
    ir = inductor.loop_ir(iu.build(_mlp, _mlp_inputs()), device)
    externs = _externs(ir)
    assert len(externs) == 2 and all("the bias is added in a fused epilogue" in e for e in externs), ir
    # both biases are read by kernels: the gelu's and the residual add's
    assert "buf2[" in ir and "buf4[" in ir, ir


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_loads_through_a_split_and_merged_dim_are_affine(device):
    # Before: buf[(v0 // 16) * 640 + (v0 % 16) * 40 + v1] for the product read through view(b, t, m)
    ir = inductor.loop_ir(iu.build(_mlp, _mlp_inputs()), device)
    body = "\n".join(_kernel_lines(ir))
    assert "//" not in body and "%" not in body, ir


def test_a_dim_split_in_three_and_merged_back_is_affine():
    def f(g, x):
        y = g.call(torch.Tensor.view, g.call(torch.sin, x), 2, 3, 4, 5)
        return g.call(torch.cos, g.call(torch.Tensor.reshape, y, 24, 5))

    ir = inductor.loop_ir(iu.build(f, [torch.randn(120)]), "cpu")
    assert "//" not in "\n".join(_kernel_lines(ir)), ir


def test_a_transposed_merge_keeps_its_division():
    # The merged dims are not contiguous in the buffer: the index cannot be linear, and must not be made so.
    def f(g, x):
        t = g.call(torch.transpose, g.call(torch.sin, x), 0, 1)  # [5, 6] of a [6, 5] buffer
        return g.call(torch.cos, g.call(torch.Tensor.reshape, g.call(torch.Tensor.contiguous, t), 30))

    x = torch.randn(6, 5)
    ir = inductor.loop_ir(iu.build(f, [x]), "cpu")
    assert re.search(r"//|%", "\n".join(_kernel_lines(ir))), ir
    if inductor.codegen_available():
        iu.check(f, [x])


def test_addmm_with_beta_or_alpha_stays_one_extern():
    def f(g, b, x, w):
        return g.call(torch.relu, g.call(torch.addmm, b, x, w, beta=0.5, alpha=2.0))

    ir = inductor.loop_ir(iu.build(f, [torch.randn(6), torch.randn(4, 5), torch.randn(5, 6)]), "cuda")
    externs = _externs(ir)
    assert len(externs) == 1 and "fused epilogue" not in externs[0], ir


def test_addmm_read_only_by_a_split_keeps_the_bias_in_blas():
    # GPT-2's c_attn: the product, viewed, is split into q, k and v for attention (extern calls)
    def f(g, x, w, b):
        qkv = _conv1d(g, x, w, b)
        q, k, v = (g.getitem(g.call(torch.split, qkv, N, 2), i) for i in range(3))
        return tuple(g.call(torch.transpose, t, 1, 2) for t in (q, k, v))

    ir = inductor.loop_ir(iu.build(f, [torch.randn(B, T, N), torch.randn(N, 3 * N), torch.randn(3 * N)]), "cuda")
    assert not any("fused epilogue" in e for e in _externs(ir)), ir


@iu.needs_codegen
def test_conv1d_mlp_equals_eager():
    iu.check(_mlp, _mlp_inputs())


@iu.needs_codegen
def test_addmm_of_a_row_bias_and_of_a_full_bias_equal_eager():
    for bias in (torch.randn(1, 6), torch.randn(4, 6)):
        iu.check(lambda g, b, x, w: g.call(F.gelu, g.call(torch.addmm, b, x, w)), [bias, torch.randn(4, 5), torch.randn(5, 6)])
