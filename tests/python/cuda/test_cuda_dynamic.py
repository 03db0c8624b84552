"""Dynamic shapes on the GPU: one trace serves every size (automatic dynamic); the CUDA code generator
still compiles each new set of sizes (backends._PerSizes), under mode="reduce-overhead" with a CUDA
graph of its own, both bounded by config dynamic_size_compiles. Every call is checked against eager."""
import pytest
import torch

import framefuse
from framefuse import _C, backends

from cuda_util import fp32_and_fresh, gpu  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("fp32_and_fresh")


def frames():
    return _C._frame_eval_stats()["frames_compiled"]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 32)

    def forward(self, x):
        b, t, c = x.shape
        h = torch.nn.functional.gelu(self.fc(x)).view(b, t, 2, c // 2).transpose(1, 2)
        return torch.softmax(h @ h.transpose(-2, -1), dim=-1).sum(dim=1), x.mean(dim=1)


@gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_a_sequence_sweep_traces_twice_and_matches_eager(mode):
    block = Block().cuda().eval()
    cf = framefuse.compile(block, mode=mode)
    before = backends.per_sizes_compiles()
    lengths = [5, 9, 17, 33, 5, 2, 9]
    with torch.no_grad():
        for t in lengths:
            x = torch.randn(3, t, 32, device="cuda")
            for _ in range(2):  # NB: reduce-overhead replays its CUDA graph on the second call
                got, want = cf(x), block(x)
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert frames() == 2  # static, then the length as s0
    # NB: the first call's size is also compiled once more when it comes back: the symbolic entry,
    # the newest, is the one that matches it then.
    assert backends.per_sizes_compiles() - before == len(set(lengths))


@gpu
def test_sizes_past_the_bound_run_on_eager_ops_under_reduce_overhead():
    block = Block().cuda().eval()
    with framefuse.config.patch(dynamic_size_compiles=2):
        cf = framefuse.compile(block, mode="reduce-overhead")
        before = backends.per_sizes_compiles()
        with torch.no_grad():
            for t in (5, 9, 17, 33, 9):
                x = torch.randn(3, t, 32, device="cuda")
                for g, w in zip(cf(x), block(x)):
                    torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        assert backends.per_sizes_compiles() - before == 2
