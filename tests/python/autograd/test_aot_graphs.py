"""AOT autograd's graphs as text (graph/autograd/autograd.h): what the forward saves, what the backward
recomputes and reads. Gradients themselves are compared with eager's in test_aot_autograd_rules.py and
test_aot_opinfo.py."""

import pytest
import torch
import torch.nn.functional as F

import framefuse
from framefuse.graph import Graph


def _split(build):
    g = Graph()
    build(g)
    return g._g.autograd_split()


def test_a_chain_from_the_inputs_is_recomputed_not_saved():
    def build(g):
        x = g.placeholder("x", torch.randn(4, 8, requires_grad=True))
        w = g.placeholder("w", torch.randn(8))
        g.output((g.call(torch.sum, g.call(torch.tanh, g.call(torch.mul, x, w)), -1),))

    d = _split(build)
    assert d["forward"].code() == (
        'def forward(self, x: "f32[4, 8] rg", w: "f32[8]"):\n'
        '    mul: "f32[4, 8]" = torch.mul(x, w)\n'
        '    tanh: "f32[4, 8]" = torch.tanh(mul)\n'
        '    sum_1: "f32[4]" = torch.sum(tanh, [-1])\n'
        "    return (sum_1,)\n"
    )
    assert d["backward"].code() == (
        'def forward(self, x: "f32[4, 8] rg", w: "f32[8]", tangents_0: "f32[4]"):\n'
        '    mul: "f32[4, 8]" = torch.mul(x, w)\n'
        '    tanh: "f32[4, 8]" = torch.tanh(mul)\n'
        '    reshape: "f32[4, 1]" = torch.reshape(tangents_0, [4, 1])\n'
        '    expand: "f32[4, 8][1, 0]" = reshape.expand([4, 8])\n'
        '    mul_1: "f32[4, 8]" = torch.mul(tanh, tanh)\n'
        '    rsub: "f32[4, 8]" = torch.rsub(mul_1, 1.0)\n'
        '    mul_2: "f32[4, 8]" = torch.mul(expand, rsub)\n'
        '    mul_3: "f32[4, 8]" = torch.mul(mul_2, w)\n'
        "    return (mul_3,)\n"
    )
    assert d["saved_inputs"] == [0, 1] and d["grad_inputs"] == [0] and d["grad_tangents"] == [[0]]


def test_a_matrix_product_result_is_saved_and_an_unused_input_gets_no_gradient():
    def build(g):
        x = g.placeholder("x", torch.randn(4, 8))
        w = g.placeholder("w", torch.randn(16, 8, requires_grad=True))
        g.placeholder("b", torch.randn(8, requires_grad=True))
        g.output((g.call(torch.relu, g.call(F.linear, x, w)),))

    d = _split(build)
    # relu's rule reads its result: the user's result is also the saved one, nothing else is
    assert d["forward"].code().endswith("    return (relu, relu)\n") and d["saved_inputs"] == [0, -1]
    backward = d["backward"].code()
    assert "torch.nn.functional.linear" not in backward  # the product is never computed again
    assert backward.endswith("    return (mm, None)\n")
    assert d["grad_inputs"] == [1, 2] and d["grad_tangents"][1] == []


def test_an_op_without_a_rule_is_named():
    def build(g):
        x = g.placeholder("x", torch.randn(4, 8, requires_grad=True))
        g.output((g.call(torch.cumprod, x, 1),))

    with pytest.raises(framefuse._C.UserError, match="no derivative rule for torch.cumprod"):
        _split(build)


def test_a_result_that_is_an_input_view_is_made_outside_the_function():
    def build(g):
        x = g.placeholder("x", torch.randn(4, 8, requires_grad=True))
        g.output((g.call(torch.sin, x), g.call(torch.transpose, x, 0, 1)))

    d = _split(build)
    assert d["alias_outputs"] == [1] and d["outputs"] == 1
    assert d["aliases"].code().endswith("    return (transpose,)\n")
