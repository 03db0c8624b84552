"""The interpreter behind framefuse.compile: guards it installs trigger recompiles exactly when the
traced assumptions change, side effects land, and unsupported code falls back to eager."""
import pytest
import torch
import torch.nn as nn

import framefuse
from framefuse import _C

SCALE = 2.0


def stats():
    return _C._frame_eval_stats()


pytestmark = pytest.mark.usefixtures("fresh_framefuse")


def test_shape_and_scalar_changes_recompile():
    def f(x, n):
        return x * n + x.shape[0]
    cf = framefuse.compile(f, backend="eager")
    x = torch.randn(4, 3)
    assert torch.allclose(cf(x, 2), f(x, 2))
    s0 = stats()
    assert torch.allclose(cf(x, 2), f(x, 2))
    assert stats()["recompiles"] == s0["recompiles"] and stats()["cache_hits"] == s0["cache_hits"] + 1
    assert torch.allclose(cf(x, 3), f(x, 3))
    y = torch.randn(8, 3)
    assert torch.allclose(cf(y, 3), f(y, 3))
    assert stats()["recompiles"] == s0["recompiles"] + 2


def test_global_change_recompiles():
    global SCALE

    def f(x):
        return x * SCALE
    cf = framefuse.compile(f, backend="eager")
    x = torch.randn(3)
    assert torch.allclose(cf(x), x * 2.0)
    SCALE = 5.0
    try:
        assert torch.allclose(cf(x), x * 5.0)
    finally:
        SCALE = 2.0


def test_train_eval_flip():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    cm = framefuse.compile(m, backend="eager")
    x = torch.randn(2, 4)
    m.eval()
    assert torch.allclose(cm(x), m(x))
    m.train()
    torch.manual_seed(0)
    a = cm(x)
    torch.manual_seed(0)
    b = m(x)
    assert torch.allclose(a, b)


def test_side_effects_through_compile():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.calls = 0

        def forward(self, x, log):
            self.calls += 1
            log.append(self.calls)
            self.last = x.sum()
            return self.lin(x)
    m = Model()
    cm = framefuse.compile(m, backend="eager")
    log = []
    x = torch.randn(2, 3)
    out = cm(x, log)
    out2 = cm(x, log)
    assert torch.allclose(out, m.lin(x)) and torch.allclose(out2, out)
    assert m.calls == 2 and log == [1, 2] and torch.allclose(m.last, x.sum())


def test_graph_break_runs_eagerly_and_fullgraph_raises():
    def f(x):
        if x.sum() > 0:
            return x + 1
        return x - 1
    cf = framefuse.compile(f, backend="eager")
    x = torch.ones(3)
    assert torch.equal(cf(x), x + 1)
    assert torch.equal(cf(-x), -x - 1)

    def g(x):
        return x + 1 if x.sum() > 0 else x - 1
    strict = framefuse.compile(g, backend="eager", fullgraph=True)
    with pytest.raises(framefuse.Unsupported, match="branch on a tensor value"):
        strict(x)


def test_exceptions_match_eager():
    lin = nn.Linear(4, 2)
    cl = framefuse.compile(lin, backend="eager")
    with pytest.raises(RuntimeError):
        cl(torch.randn(2, 5))
    assert torch.allclose(cl(torch.randn(2, 4) * 0), lin(torch.zeros(2, 4)))

    def div(x, n):
        return x * (1 // n)
    cd = framefuse.compile(div, backend="eager")
    with pytest.raises(ZeroDivisionError):
        cd(torch.ones(2), 0)
    assert torch.equal(cd(torch.ones(2), 1), torch.ones(2))
