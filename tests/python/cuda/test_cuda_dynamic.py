"""Dynamic shapes on the GPU: one trace serves every size (automatic dynamic), and in the default
mode one CUDA compile too: the kernels take the sizes as arguments (backends.symbolic_compiles).
Under mode="reduce-overhead" each new set of sizes is compiled with a CUDA graph of its own
(backends._PerSizes), bounded by config dynamic_size_compiles. Every call is checked against eager
at sizes the kernels were not traced with (divisible by nothing in particular), so a traced size
baked into a kernel shows up as a wrong result."""
import logging

import pytest
import torch

import framefuse
from framefuse import _C, backends

from cuda_util import fp32_and_fresh, gpu  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("fp32_and_fresh")


def frames():
    return _C._frame_eval_stats()["frames_compiled"]


def counts():
    return backends.symbolic_compiles(), backends.per_sizes_compiles()


def sweep(fn, inputs, rtol=1e-5, atol=1e-5, **kwargs):
    """Calls the compiled fn on each input tuple, each checked against eager; returns how many
    programs were compiled for all sizes and how many per size."""
    before = counts()
    cf = framefuse.compile(fn, **kwargs)
    with torch.no_grad():
        for args in inputs:
            torch.testing.assert_close(cf(*args), fn(*args), rtol=rtol, atol=atol, equal_nan=True)
    after = counts()
    return after[0] - before[0], after[1] - before[1]


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
    before = counts()
    lengths = [5, 9, 17, 33, 5, 2, 9]
    with torch.no_grad():
        for t in lengths:
            x = torch.randn(3, t, 32, device="cuda")
            for _ in range(2):  # NB: reduce-overhead replays its CUDA graph on the second call
                got, want = cf(x), block(x)
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert frames() == 2  # static, then the length as s0
    # NB: under reduce-overhead the first call's size is also compiled once more when it comes
    # back: the symbolic entry, the newest, is the one that matches it then.
    after = counts()
    want = (1, 0) if mode is None else (0, len(set(lengths)))
    assert (after[0] - before[0], after[1] - before[1]) == want


def relu_sum(x):
    return torch.relu(x) * 2 + x.sum()


def norms(x):
    return torch.softmax(x, -1) + torch.nn.functional.layer_norm(x, x.shape[-1:]) + x.mean(0), x.amax(-1)


@gpu
def test_pointwise_reductions_and_norms_over_batch_sizes_compile_once():
    sizes = [3, 5, 7, 9, 64, 65, 2, 300, 1000, 4097]
    assert sweep(relu_sum, [(torch.randn(n, 40, device="cuda"),) for n in sizes]) == (1, 0)
    assert sweep(norms, [(torch.randn(n, 72, device="cuda"),) for n in sizes]) == (1, 0)


@gpu
def test_every_dimension_symbolic_under_dynamic_true():
    # Rows of symbolic length: the row loops and vector widths cannot rely on the traced length.
    shapes = [(3, 5), (7, 2), (2, 9), (33, 17), (4, 4), (129, 1031), (2, 4096)]
    assert sweep(norms, [(torch.randn(*s, device="cuda"),) for s in shapes], dynamic=True) == (1, 0)


def masked_attention(x):
    b, t, c = x.shape
    h = x.view(b, t, 4, c // 4).transpose(1, 2)
    mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
    s = (h @ h.transpose(-2, -1)) / 4.0
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ h, x[:, -1] * 2


@gpu
def test_attention_over_sequence_lengths_compiles_once():
    lengths = [5, 9, 17, 33, 64, 100, 2, 257]
    assert sweep(masked_attention, [(torch.randn(2, t, 64, device="cuda"),) for t in lengths]) == (1, 0)


@gpu
def test_a_conv_net_over_batch_sizes_compiles_once():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10)).cuda().eval()
    sizes = [2, 3, 5, 16, 33, 7]
    assert sweep(net, [(torch.randn(n, 3, 16, 16, device="cuda"),) for n in sizes], rtol=1e-4, atol=1e-4) == (1, 0)


@gpu
def test_integer_and_half_precision_kernels_over_sizes():
    def fn(a, h):
        return (a * 3 + a.sum(-1, keepdim=True)) // 2, torch.softmax(h, -1) * h
    inputs = [(torch.randint(-50, 50, (n, 24), device="cuda"), torch.randn(n, 24, device="cuda", dtype=torch.half))
              for n in (3, 6, 11, 130)]
    assert sweep(fn, inputs, rtol=1e-3, atol=1e-3) == (1, 0)


@gpu
def test_max_autotune_takes_sizes_as_arguments_too():
    sizes = [3, 5, 9, 300]
    assert sweep(norms, [(torch.randn(n, 72, device="cuda"),) for n in sizes], mode="max-autotune") == (1, 0)


@gpu
def test_sizes_past_32_bit_indices_compile_their_own_kernels(caplog):
    # The kernels were rendered with 32-bit indices for the traced sizes; a binding past 2^30
    # elements is compiled for its sizes (the same graph, its own kernels) and stays exact.
    def fn(x):
        return x ^ 1
    cf = framefuse.compile(fn)
    for n in (4, 6):
        x = torch.randint(0, 100, (n, 1 << 20), dtype=torch.uint8, device="cuda")
        assert torch.equal(cf(x), fn(x))
    x = torch.randint(0, 100, (1025, 1 << 20), dtype=torch.uint8, device="cuda")
    before = counts()
    framefuse.set_logs(perf_hints=True, dynamic=True)
    try:
        with caplog.at_level(logging.INFO, logger="framefuse"):
            got = cf(x)
    finally:
        framefuse.set_logs(perf_hints=False, dynamic=False)
    assert torch.equal(got, fn(x))
    assert counts() == before  # no new trace or program: the compiled graph made its own instance
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "needs 64-bit indices at these sizes" in text and "compiling the graph for these sizes" in text, text
    del got, x
    torch.cuda.empty_cache()


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


def sdpa_block(x, mask):
    b, t, c = x.shape
    q = x.view(b, t, 4, c // 4).transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(q, q * 0.5, q, attn_mask=mask)
    return out.transpose(1, 2).reshape(b, t, c).relu()


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_calls_keep_the_sequence_length_symbolic(dtype):
    # scaled_dot_product_attention of CUDA tensors is typed by framefuse's rule (the meta-tensor
    # fallback pinned the length: a trace per length); the runtime copies a result whose layout
    # the rule did not predict, so any kernel choice stays exact.
    def inputs(t):
        x = torch.randn(2, t, 64, device="cuda", dtype=dtype)
        return x, torch.rand(2, 1, t, t, device="cuda") > 0.3
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert sweep(sdpa_block, [inputs(t) for t in (5, 9, 17, 33, 100, 9)], rtol=tol, atol=tol) == (1, 0)
    assert frames() == 2


@gpu
def test_in_place_ops_without_a_lowering_on_inputs_over_sizes():
    # acosh_ on a graph input: its out-of-place form (an extern call), then a kernel storing the
    # result into the caller's tensor, at each size through one compile.
    def fn(x, y):
        x.acosh_()
        return x, y.addmv_(torch.ones(y.shape[0], 3, device="cuda"), torch.full((3,), 0.5, device="cuda"))

    cf = framefuse.compile(fn)
    before = counts()
    for n in (5, 9, 33, 7):
        x, y = torch.rand(n, 4, device="cuda") + 1.5, torch.randn(n, device="cuda")
        ex, ey = x.clone(), y.clone()
        with torch.no_grad():
            got = cf(x, y)
            want = fn(ex, ey)
        assert got[0] is x and got[1] is y
        torch.testing.assert_close(x, ex)
        torch.testing.assert_close(y, ey)
        torch.testing.assert_close(got, want)
    after = counts()
    assert (after[0] - before[0], after[1] - before[1]) == (1, 0)


def scale_shift(x, n):
    return torch.relu(x) * n + n, x * (n - 1) - n, x > n


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_an_int_argument_that_varies_is_a_kernel_argument(dtype):
    # The int n is a symbol after its second value: the kernels read it at each call (a value
    # baked in would show up as a wrong result at the other values).
    x = (torch.randn(64, 33, device="cuda") * 8).to(dtype)
    values = [3, 4, 7, 100, 2, 5000, 0, 1, 9]
    assert sweep(scale_shift, [(x, n) for n in values], rtol=0, atol=0) == (1, 0)
    assert frames() == 4  # 3, then s0; 0 and 1 specialise


@gpu
def test_a_loop_counter_reaching_a_resume_function_on_cuda(capsys):
    def loop(x):
        for i in range(10):
            x = torch.tanh(x) * 0.5 + i
            print(i)
        return x

    x = torch.randn(256, device="cuda")
    cf = framefuse.compile(loop)
    for _ in range(3):
        torch.testing.assert_close(cf(x), loop(x), rtol=0, atol=0)
    # The root frame; the resume function at i == 0, 1, symbolic, exhausted (on 3.11; 3.12's
    # resume functions receive the counter on the stack: one fewer): not one per iteration.
    assert frames() <= 5 and _C._frame_eval_stats()["cache_limit_hits"] == 0
    capsys.readouterr()
