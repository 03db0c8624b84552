"""Graph breaks in frames that use zero-argument super() (a `forward` calling super().forward(...),
an __init__, a classmethod). super() reads `self` from the frame's first local slot (a cell's
contents when an inner function captures it) and the class from the __class__ cell, so the stub
and resume functions of such a frame keep both. Each case is compared with eager (results,
printed output, Python state) with split and break counts asserted."""
import pytest
import torch

import framefuse
from framefuse import _C

from test_graph_breaks import X, run_both, same

pytestmark = pytest.mark.usefixtures("fresh_framefuse")


class _Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x, scale=1.0):
        return self.lin(x) * scale

    def describe(self):
        return type(self).__name__


class _After(_Lin):
    def forward(self, x):
        h = super().forward(x).relu()
        print("after super", h.shape)
        return super().forward(h, scale=2.0) - h


class _Captured(_Lin):
    def forward(self, x):
        y = x + 1
        print("captured")
        weight_sum = lambda: self.lin.weight.sum()  # noqa: E731 -- makes `self` a cell
        return super().forward(y) * weight_sum()


class _Looped(_Lin):
    def forward(self, x):
        for i in range(3):
            x = super().forward(x).tanh()
            print("iteration", i)
        return x


class _Native(_Lin):
    def forward(self, x):
        y = x * 3
        print("native")
        # no tensor work after the break: the resume function runs natively, and CPython's own
        # super() reads its slot 0
        return y, super().describe()


def _module(cls):
    torch.manual_seed(0)
    return cls()


@pytest.mark.parametrize("cls", [_After, _Captured, _Native])
def test_super_around_a_break(capsys, cls):
    s = run_both(_module(cls), X, capsys=capsys)
    assert s["frames_split"] == 1 and s["graph_breaks"] >= 1 and s["internal_errors"] == 0


def test_super_in_a_loop_with_a_break(capsys):
    s = run_both(_module(_Looped), X, capsys=capsys)
    # the frame, then a resume function per iteration that breaks again
    assert s["frames_split"] >= 3 and s["internal_errors"] == 0


def test_super_gradients_after_a_break(capsys):
    m = _module(_After)
    cm = framefuse.compile(m, backend="eager")
    for _ in range(2):
        xe, xc = X.clone().requires_grad_(True), X.clone().requires_grad_(True)
        m(xe).sum().backward()
        out = capsys.readouterr().out
        cm(xc).sum().backward()
        assert capsys.readouterr().out == out
        same(xe.grad, xc.grad)
    assert _C._frame_eval_stats()["frames_split"] == 1


class _Acc:
    def __init__(self, x):
        self.t = x * 2


class _Acc2(_Acc):
    def __init__(self, x):
        super().__init__(x + 1)
        print("acc2")
        self.u = self.t.sin()


def make_acc(x):
    a = _Acc2(x)
    return a.t, a.u, type(a).__name__


def test_super_in_init_with_a_break(capsys):
    s = run_both(make_acc, X, capsys=capsys)
    # make_acc breaks at the call into __init__, whose own frame is split at its print
    assert s["frames_split"] >= 2 and s["internal_errors"] == 0
    assert _C._code_cache_info(_Acc2.__init__.__code__)["entries"] >= 1


class _Factory:
    k = 1.0

    @classmethod
    def scale(cls, x):
        return x * cls.k


class _Factory2(_Factory):
    k = 3.0

    @classmethod
    def scale(cls, x):
        y = x + 1
        print("classmethod of", cls.__name__)
        return super().scale(y) - 1


def test_super_in_a_classmethod_with_a_break(capsys):
    s = run_both(_Factory2.scale, X, capsys=capsys)
    assert s["frames_split"] == 1 and s["internal_errors"] == 0
