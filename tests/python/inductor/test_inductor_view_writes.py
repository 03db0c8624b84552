"""In-place ops on a view of a tensor the graph made (functionalize, graph/passes/functionalize.h):
where nothing reads the base afterwards the write is seen through the view only, so the graph is
compiled with the out-of-place op (ghostnet's `cat(...)[:, :oup] += shortcut`); where the base or a
sibling view is read afterwards the graph runs on the reference runner. Both give eager's results."""
import operator

import pytest
import torch

from framefuse import _C

import inductor_util as iu

pytestmark = iu.needs_codegen


def _ghost(g, a, b, r):
    # timm's GhostModule and GhostBottleneck: the module returns a slice of a cat, the block adds
    # its shortcut into it in place
    c = g.call(torch.cat, [g.call(torch.relu, a), g.call(torch.mul, b, 0.5)], 1)
    x = g.call(operator.getitem, c, (slice(None), slice(None, 4)))
    x = g.call(operator.iadd, x, r)
    return g.call(torch.sigmoid, x)


def _base_read_after(g, a, b, r):
    c = g.call(torch.cat, [a, b], 1)
    x = g.call(operator.getitem, c, (slice(None), slice(None, 2)))
    x = g.call(operator.iadd, x, g.call(operator.getitem, r, (slice(None), slice(None, 2))))
    return g.call(torch.sum, c, 1), x


def _sibling_read_after(g, a, b, r):
    c = g.call(torch.cat, [a, b], 1)
    left = g.call(operator.getitem, c, (slice(None), slice(None, 3)))
    right = g.call(operator.getitem, c, (slice(None), slice(1, None)))
    left = g.call(torch.Tensor.mul_, left, 2.0)
    return g.call(torch.neg, right), left


@pytest.mark.parametrize("fn, compiled", [(_ghost, True), (_base_read_after, False), (_sibling_read_after, False)])
def test_writes_into_a_view_of_a_made_tensor(fn, compiled):
    inputs = [torch.randn(2, 2, 5, 5), torch.randn(2, 2, 5, 5), torch.randn(2, 4, 5, 5)]
    g = iu.build(fn, inputs)
    cg = iu.compile_graph(g, inputs)
    assert isinstance(cg, _C.inductor.CompiledGraph) == compiled
    for got, want in zip(cg(*inputs), g.run(*inputs)):
        assert got.shape == want.shape and got.stride() == want.stride()
        torch.testing.assert_close(got, want)
