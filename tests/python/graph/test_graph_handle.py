"""The one way a graph crosses between C++ and Python (src/graph_handle.h): a framefuse._C.graph.Graph,
or the framefuse.graph.Graph that wraps one; anything else is a TypeError, never a pointer cast."""

from __future__ import annotations

import pytest
import torch

import framefuse._C as C
from framefuse.graph import Graph


def _graph():
    g = Graph()
    x = g.placeholder("x", torch.randn(4))
    g.output((g.call(torch.relu, x),))
    return g


def test_public_and_internal_graph_are_the_same_graph():
    g = _graph()
    assert C.inductor.loop_ir(g) == C.inductor.loop_ir(g._g)


def test_wrapping_checks_the_type():
    with pytest.raises(TypeError, match=r"^Graph\(_impl\) takes a framefuse._C.graph.Graph, not int$"):
        Graph(3)


@pytest.mark.parametrize("bind", [C.inductor.loop_ir, C.inductor.CompiledGraph, C.cuda.compile])
def test_bindings_refuse_what_is_not_a_graph(bind):
    with pytest.raises(TypeError, match=r"^graph must be a framefuse.graph.Graph, not object$"):
        bind(object())
