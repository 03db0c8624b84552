"""The graph passes against eager: random graphs (duplicates, dead code, no-op views, in-place ops,
Python scalar arithmetic) give the same results, input mutations and output aliasing before and
after `Graph.optimized()`, and after a print -> parse round trip."""
import operator
import random

import pytest
import torch

import framefuse
from framefuse.graph import Graph

UNARY = [torch.relu, torch.neg, torch.exp, torch.sin, torch.abs, torch.sigmoid]
BINARY = [torch.add, torch.mul, operator.add, operator.sub, operator.mul]


def random_graph(rng):
    """A graph over two 4x4 inputs, and the list of ops it was built from."""
    g = Graph()
    x = g.placeholder("x", torch.randn(4, 4))
    y = g.placeholder("y", torch.randn(4, 4))
    tensors = [x, y]
    for _ in range(rng.randint(4, 14)):
        a = rng.choice(tensors)
        kind = rng.randrange(9)
        try:
            if kind == 0:
                out = g.call(rng.choice(UNARY), a)
            elif kind == 1:
                other = rng.choice(tensors + [2, 0.5, -1.0])
                out = g.call(rng.choice(BINARY), a, other)
            elif kind == 2:  # Python scalar arithmetic feeding a tensor op
                s = g.call(operator.mul, rng.randint(-3, 3), rng.choice([2, 0.25]))
                out = g.call(operator.add, a, s)
            elif kind == 3:  # a no-op view, and a real one
                out = g.call(torch.Tensor.view, a, rng.choice([(4, 4), (16,), (2, 8)]))
            elif kind == 4:
                out = g.call(torch.transpose, a, 0, rng.choice([0, 1]))
            elif kind == 5:  # an in-place op on a fresh tensor or on an input
                target = rng.choice(tensors)
                if tuple(target.meta["sizes"]) != (4, 4) or target.meta["strides"] != [4, 1]:
                    continue
                out = g.call(torch.Tensor.add_, target, rng.choice([1, 0.5]))
            elif kind == 6:  # a duplicate of an earlier call
                out = g.call(torch.relu, a)
                g.call(torch.relu, a)
            elif kind == 7:
                out = g.call(torch.sum, a, rng.choice([0, 1]), keepdim=True)
            else:  # an in-place op on rows of a fresh cat; the cat itself maybe read afterwards
                if tuple(a.meta["sizes"]) != (4, 4):
                    continue
                c = g.call(torch.cat, [a, g.call(torch.neg, a)], 0)
                rows = g.call(operator.getitem, c, slice(rng.choice([0, 2, None]), rng.choice([4, 8, None])))
                out = g.call(torch.Tensor.mul_, rows, rng.choice([2.0, -0.5]))
                if rng.random() < 0.4:
                    tensors.append(g.call(torch.sum, c, 0, keepdim=True))
        except framefuse.Unsupported:
            continue
        tensors.append(out)
    results = rng.sample(tensors, k=min(len(tensors), rng.randint(1, 3)))
    g.output(tuple(results))
    return g


def run(g, inputs):
    args = [t.clone() for t in inputs]
    out = g.run(*args)
    return out, args


def aliasing(outputs, args):
    """Which outputs share memory with which outputs and inputs."""
    # torch 1.13 has no untyped_storage()
    ptrs = [getattr(t, "untyped_storage", t.storage)().data_ptr() for t in list(outputs) + list(args)]
    return [[p == q for q in ptrs] for p in ptrs]


def same(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)))


@pytest.mark.parametrize("seed", range(60))
def test_optimized_graphs_match_the_original(seed):
    rng = random.Random(seed)
    g = random_graph(rng)
    assert g.verify() == [], g.code()
    opt = g.optimized()
    assert opt.verify() == [], opt.code()
    parsed = Graph.parse(g.code())
    assert parsed.code() == g.code()
    torch.manual_seed(seed)
    inputs = [torch.randn(4, 4), torch.randn(4, 4)]
    ref_out, ref_args = run(g, inputs)
    for other in (opt, parsed):
        out, args = run(other, inputs)
        info = f"\n{g.code()}\n---\n{other.code()}"
        assert len(out) == len(ref_out), info
        for a, b in zip(ref_out, out):
            assert same(a, b), info
        for a, b in zip(ref_args, args):  # in-place effects on the inputs
            assert torch.equal(a, b), info
        assert aliasing(out, args) == aliasing(ref_out, ref_args), info


def test_pass_trace_lists_every_pass():
    g = Graph()
    x = g.placeholder("x", torch.randn(4))
    g.output((g.call(torch.relu, x),))
    trace = g.pass_trace()
    assert [line for line in trace.splitlines() if line.startswith("#")] == [
        "# input", "# after fold_constants", "# after fuse_attention", "# after attention_masks",
        "# after eliminate_common_subexpressions",
        "# after eliminate_dead_code", "# after functionalize"]
