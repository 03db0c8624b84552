"""Dynamic shapes in the CPU code generator: a graph with symbolic sizes is compiled once and its
kernels take the sizes as arguments (loop extents, strides and index arithmetic read the run's
symbol values); a new set of sizes only specialises the program's sizes.

Every call is compared with eager at sizes the program was not traced with, so a traced size read
as a constant somewhere in the lowering shows up as a wrong result. `symbolic_compiles` counts
programs compiled once for all sizes, `per_sizes_compiles` the fallback's one compile per size.
"""
import logging

import pytest
import torch

import framefuse
from framefuse import _C, backends

import inductor_util as iu

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), iu.needs_codegen]


@pytest.fixture(autouse=True)
def _fresh():
    framefuse.reset()
    yield
    framefuse.reset()


def counts():
    return backends.symbolic_compiles(), backends.per_sizes_compiles()


def sweep(fn, inputs, **kwargs):
    """Calls the compiled fn on each input tuple, each checked against eager; returns how many
    programs were compiled for all sizes and how many per size."""
    before = counts()
    cf = framefuse.compile(fn, **kwargs)
    with torch.no_grad():
        for args in inputs:
            torch.testing.assert_close(cf(*args), fn(*args), rtol=1e-5, atol=1e-5, equal_nan=True)
    after = counts()
    return after[0] - before[0], after[1] - before[1]


def relu_sum(x):
    return torch.relu(x) * 2 + x.sum()


def test_a_batch_size_sweep_compiles_one_program():
    sizes = [3, 4, 5, 6, 7, 9, 11, 16, 23, 40, 64, 65, 2, 300]
    assert sweep(relu_sum, [(torch.randn(n, 8),) for n in sizes]) == (1, 0)
    assert _C._frame_eval_stats()["frames_compiled"] == 2  # static, then s0


def test_every_dimension_symbolic_under_dynamic_true():
    shapes = [(3, 5), (7, 2), (2, 9), (33, 17), (4, 4)]
    assert sweep(relu_sum, [(torch.randn(*s),) for s in shapes], dynamic=True) == (1, 0)


def test_layer_norm_over_a_symbolic_normalized_shape_keeps_it_symbolic():
    # `x.shape[-1:]` as normalized_shape: the rule compares it with the input's sizes as
    # expressions, so no size is pinned (each call had retraced with the last size as a constant).
    def norms(x):
        return torch.nn.functional.layer_norm(x, x.shape[-1:]) + x.mean(0), torch.softmax(x, -1).amax(-1)
    shapes = [(3, 5), (7, 2), (2, 9), (33, 17)]
    assert sweep(norms, [(torch.randn(*s),) for s in shapes], dynamic=True) == (1, 0)
    assert _C._frame_eval_stats()["frames_compiled"] == 1


def test_ops_typed_by_torch_keep_sizes_symbolic():
    # acosh, mv and unfold have no C++ meta rule: torch types them on meta tensors, which needs
    # concrete sizes. They run at the traced sizes and at two other bindings, and the result's
    # sizes are fitted to the operands' (mv's operands must agree: their sizes are guarded equal).
    def fn(x, a, v):
        return torch.acosh(x + 1.5), torch.mv(a, v) * 2, x.unfold(0, 2, 1).sum(-1)
    shapes = [(3, 4), (5, 6), (9, 2), (4, 7), (17, 3)]
    assert sweep(fn, [(torch.rand(n, 3), torch.randn(n, k), torch.randn(k)) for n, k in shapes]) == (1, 0)
    assert _C._frame_eval_stats()["frames_compiled"] == 2


def test_a_result_size_no_expression_fits_specialises():
    # conv_transpose2d's output size, 2*n + k - 5 here, is no expression the fit tries: probes along
    # one line had fitted another one (whose sizes disagreed at the next size); now the sizes are
    # specialised and every size is exact.
    def fn(x, w, b):
        return torch.nn.functional.conv_transpose2d(x, w, b, stride=2, padding=2, output_padding=1).relu()
    inputs = [(torch.randn(1, c, n, n), torch.randn(c, c, k, k), torch.randn(c)) for c, k, n in ((3, 3, 4), (5, 5, 6), (4, 3, 9))]
    sweep(fn, inputs, dynamic=True)


def test_reductions_and_normalisations_over_symbolic_dims():
    def f(x, w):
        y = torch.softmax(x, dim=-1) + (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)
        return y.mean(dim=1, keepdim=True), x.amax(dim=0), (x * w).sum(dim=-1), torch.log_softmax(x, 0)

    shapes = [(3, 5), (7, 2), (2, 9), (40, 33)]
    assert sweep(f, [(torch.randn(*s), torch.randn(s[-1])) for s in shapes], dynamic=True) == (1, 0)

    # NB: layer_norm's normalized_shape is an argument the frontend specialises: rows vary only.
    def g(x):
        return torch.nn.functional.layer_norm(x, (12,)) * x.var(dim=0)

    assert sweep(g, [(torch.randn(n, 12),) for n in (3, 5, 8, 70)]) == (1, 0)


def test_views_transposes_and_slices_keep_sizes_symbolic():
    # nanoGPT's shape handling: x.shape unpacked, views with those sizes, a mask sliced to T.
    mask = torch.tril(torch.ones(64, 64))

    def attention_like(x):
        b, t, c = x.shape
        q = x.view(b, t, 2, c // 2).transpose(1, 2)
        s = q @ q.transpose(-2, -1)
        s = s.masked_fill(mask[:t, :t] == 0, float("-inf"))
        y = torch.softmax(s, dim=-1) @ q
        return y.transpose(1, 2).contiguous().view(b, t, c), x[:, t - 1], x[:, 1:t]

    inputs = [(torch.randn(2, t, 8),) for t in (5, 9, 17, 33, 64, 3)]
    assert sweep(attention_like, inputs) == (1, 0)


def test_a_symbolic_index_is_read_at_run_time():
    # NB: x[:, n - 1] has the same result shape at every n: a lowering that read the traced n as a
    # constant would pass any shape check and read the wrong column.
    def last_column(x):
        return x[:, x.shape[1] - 1] * 2, x[:, : x.shape[1] - 1].sum(dim=1)

    inputs = [(torch.randn(3, n),) for n in (4, 7, 2, 19)]
    assert sweep(last_column, inputs, dynamic=True) == (1, 0)


def test_an_mlp_over_batch_sizes_runs_its_linear_layers_in_torch():
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()
    assert sweep(mlp, [(torch.randn(n, 16),) for n in (5, 9, 2, 130, 17)]) == (1, 0)


def test_integer_and_half_precision_kernels():
    def f(a, b):
        return (a * 3 + b) // 2, (a.to(torch.float16) * 1.5).to(torch.float32), torch.cumsum(b, 0)

    inputs = [(torch.randint(-50, 50, (n, 3), dtype=torch.int32), torch.randint(-50, 50, (n, 3), dtype=torch.int32))
              for n in (4, 9, 2, 31)]
    assert sweep(f, inputs, dynamic=True)[0] == 1


def test_sizes_0_and_1_after_a_symbolic_compile_are_traced_apart_and_exact():
    inputs = [(torch.randn(n, 6),) for n in (5, 6, 1, 0, 7, 1, 8)]
    sym, per = sweep(relu_sum, inputs)
    assert (sym, per) == (1, 0)


def test_dynamic_kernels_off_compiles_per_size():
    with framefuse.config.patch(dynamic_kernels=False):
        assert sweep(relu_sum, [(torch.randn(n, 8),) for n in (3, 4, 5, 6)]) == (0, 3)


def test_the_dynamic_log_says_when_a_program_runs_at_new_sizes(caplog):
    framefuse.set_logs(dynamic=True)
    try:
        with caplog.at_level(logging.INFO, logger="framefuse"):
            sweep(relu_sum, [(torch.randn(n, 8),) for n in (3, 4, 5)])
    finally:
        framefuse.set_logs(dynamic=False)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "the symbolic program runs at s0=5" in text, text


def test_a_conv_net_over_batch_sizes_compiles_once():
    # NB: the convolutions run in torch, channels-last (config cpu_channels_last); batch norm, relu,
    # the residual add and the pooling arithmetic are kernels; the feature map returned is copied
    # back to eager's layout at each call's batch size.
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
            self.fc = torch.nn.Linear(8, 5)

        def forward(self, x):
            y = torch.relu(self.bn(self.conv(x)))
            y = torch.nn.functional.max_pool2d(y + self.conv2(y), 2)
            return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1)), y

    net = Net().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
    inputs = [(torch.randn(n, 3, 12, 12),) for n in (3, 5, 2, 9)]
    assert sweep(net, inputs) == (1, 0)
    framefuse.reset()
    cf = framefuse.compile(net)
    with torch.no_grad():
        for (x,) in inputs:
            _, y = cf(x)
            assert y.stride() == net(x)[1].stride()
    with framefuse.config.patch(cpu_channels_last=False):
        framefuse.reset()
        assert sweep(net, inputs) == (1, 0)


def test_more_sizes_than_the_runtime_keeps_specialised():
    # NB: the runtime keeps 64 sets of sizes; older ones are specialised again when they return.
    sizes = list(range(2, 80)) + [2, 3, 79, 40]
    assert sweep(relu_sum, [(torch.randn(n, 3),) for n in sizes]) == (1, 0)


def test_what_the_runtime_cannot_run_fails_the_compile_not_the_call(monkeypatch):
    # NB: as on torch 1.13: a graph that writes an input in place needs torch's version counter bump.
    monkeypatch.delattr(torch.autograd.graph, "increment_version", raising=False)

    def f(x, y):
        y.relu_()
        return -y + x.sum()

    cf = framefuse.compile(f, dynamic=True)
    for n in (3, 5, 9):
        x, y = torch.randn(n, 4), torch.randn(n, 4)
        y2 = y.clone()
        torch.testing.assert_close(cf(x, y), f(x, y2))
        torch.testing.assert_close(y, y2)
