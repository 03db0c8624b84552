"""CPU graphs with 2-d convolutions run them channels-last (config cpu_channels_last,
graph/passes/channels_last.h): conv weights become NHWC copies made once per weight version, the fused
kernels between convolutions read and write NHWC, and outputs come back in eager's layout. Every
model here is compiled with the knob on and off and must equal eager, strides included."""
import logging
import operator
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import framefuse
from framefuse import _C
from framefuse.graph import Graph
from framefuse.inductor import compile_graph

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
from benchmarks.workloads.nets import BasicBlock  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("fresh_framefuse"),
    pytest.mark.skipif(not _C.inductor.codegen_available(), reason="framefuse built without LLVM"),
]

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}


class Block(BasicBlock):
    """The suite's resnet block, with torchvision's in-place residual add and relu."""

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        out += x if self.down is None else self.down(x)
        return F.relu(out)


class TinyResNet(nn.Module):
    """conv+bn+relu stem, max pool, residual blocks (one with a downsample), adaptive average pool,
    linear head; `features=True` also returns the last block's 4-d activations."""

    def __init__(self, features=False):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 5, 2, 2, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(Block(8, 8, 1), Block(8, 16, 2))
        self.fc = nn.Linear(16, 10)
        self.features = features

    def forward(self, x):
        f = self.blocks(self.stem(x))
        logits = self.fc(torch.flatten(F.adaptive_avg_pool2d(f, 1), 1))
        return (logits, f) if self.features else logits


def _randomize_bn(model):
    # Non-trivial running statistics and affine parameters, so batch norm is not the identity.
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            with torch.no_grad():
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model


def _model(dtype=torch.float32, features=False):
    torch.manual_seed(0)
    return _randomize_bn(TinyResNet(features)).to(dtype).eval()


def _logs(caplog):
    framefuse.set_logs("schedule,perf_hints")
    caplog.set_level(logging.INFO, logger="framefuse")


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _check(got, want, dtype):
    for g, w in zip(_as_tuple(got), _as_tuple(want)):
        torch.testing.assert_close(g, w, **TOL[dtype])
        assert g.stride() == w.stride()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("knob", [True, False])
def test_resnet_blocks_equal_eager_with_the_knob_on_and_off(dtype, knob, caplog):
    _logs(caplog)
    model = _model(dtype, features=True)
    x = torch.randn(2, 3, 32, 32, dtype=dtype)
    with framefuse.config.patch(cpu_channels_last=knob):
        compiled = framefuse.compile(model, backend="inductor")
        with torch.no_grad():
            want = model(x)
            got = compiled(x)
            again = compiled(x)
    _check(got, want, dtype)
    _check(again, want, dtype)
    assert want[1].is_contiguous() and got[1].is_contiguous()  # eager's NCHW, though computed NHWC
    ran_cl = "channels-last:" in caplog.text and "conv weight(s) converted" in caplog.text
    assert ran_cl == knob
    if knob:
        assert "1 output(s) copied back to eager's layout" in caplog.text


def graph_of(model, x):
    captured = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        captured.append(graph)
        return graph.run

    with torch.no_grad():
        framefuse.compile(model, backend=backend)(x)
    return captured[0]


def test_the_rewritten_graph_computes_nhwc_between_convolutions():
    model = _model()
    x = torch.randn(2, 3, 32, 32)
    graphs = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        cg = compile_graph(graph, example_inputs)
        graphs.append(cg)
        return cg

    compiled = framefuse.compile(model, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), **TOL[torch.float32])
    (cg,) = graphs
    assert cg.channels_last
    # The first conv's output and the fused batch norm + relu after it: [2, 8, 16, 16] in NHWC.
    assert "f32[2, 8, 16, 16] strides [2048, 1, 128, 8]" in cg.loop_ir
    with framefuse.config.patch(cpu_channels_last=False), torch.no_grad():  # parameters require grad
        off = compile_graph(graph_of(model, x))
    assert not off.channels_last and "strides [2048, 1, 128, 8]" not in off.loop_ir


def test_channels_last_input_gives_eager_layouts():
    model = _model(features=True)
    x = torch.randn(2, 3, 32, 32).to(memory_format=torch.channels_last)
    compiled = framefuse.compile(model, backend="inductor")
    with torch.no_grad():
        want = model(x)
        got = compiled(x)
    assert want[1].is_contiguous(memory_format=torch.channels_last)
    _check(got, want, torch.float32)


def test_channels_last_model_equals_eager():
    model = _model().to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 32, 32)
    compiled = framefuse.compile(model, backend="inductor")
    with torch.no_grad():
        _check(compiled(x), model(x), torch.float32)


def _same_after(change):
    """Compiles the model, checks a call, applies change(model), checks again (no_grad)."""
    model = _model()
    x = torch.randn(2, 3, 32, 32)
    compiled = framefuse.compile(model, backend="inductor")
    with torch.no_grad():
        _check(compiled(x), model(x), torch.float32)
        change(model)
        _check(compiled(x), model(x), torch.float32)
    return model, x, compiled


def test_weights_changed_in_place_are_converted_again():
    def change(model):
        model.stem[0].weight.mul_(-2.0)  # bumps the version counter
        model.blocks[1].conv2.weight.zero_()

    model, x, compiled = _same_after(change)
    with torch.no_grad():
        model.load_state_dict(_randomize_bn(TinyResNet()).state_dict())
        _check(compiled(x), model(x), torch.float32)


def test_a_replaced_weight_tensor_is_used():
    def change(model):
        model.blocks[0].conv1.weight = nn.Parameter(torch.randn_like(model.blocks[0].conv1.weight))

    _same_after(change)


def test_inference_mode_weights_without_a_version_counter():
    with torch.inference_mode():
        model = _model()
        x = torch.randn(2, 3, 32, 32)
        compiled = framefuse.compile(model, backend="inductor")
        _check(compiled(x), model(x), torch.float32)
        model.stem[0].weight.mul_(0.5)  # no version counter to tell: converted on every call
        _check(compiled(x), model(x), torch.float32)


def _training_pair():
    """An eager reference and a compiled copy of the same train-mode model, and an input."""
    torch.manual_seed(0)
    ref = _randomize_bn(TinyResNet()).train()
    model = _randomize_bn(TinyResNet()).train()
    model.load_state_dict(ref.state_dict())
    return ref, model, framefuse.compile(model, backend="inductor"), torch.randn(4, 3, 32, 32)


def test_training_mode_batch_norm_updates_running_stats():
    ref, model, compiled, x = _training_pair()
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(compiled(x), ref(x), rtol=1e-4, atol=1e-4)
    for (name, p), q in zip(ref.state_dict().items(), model.state_dict().values()):
        if p.dtype.is_floating_point:
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-5, msg=name)
        else:
            assert torch.equal(q, p), name


def test_training_with_autograd_still_matches_eager():
    # Graphs that need autograd run on the reference runner; the rewrite must not change that.
    ref, model, compiled, x = _training_pair()
    compiled(x).sum().backward()
    ref(x).sum().backward()
    for (name, p), q in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4, msg=name)


@pytest.mark.parametrize("case", ["conv1d", "conv3d", "weight_read_elsewhere", "no_conv"])
def test_graphs_the_rewrite_leaves_alone(case, caplog):
    _logs(caplog)
    torch.manual_seed(0)
    if case == "conv1d":
        inputs = [torch.randn(2, 4, 16), torch.randn(6, 4, 3)]
        fn = lambda x, w: torch.relu(F.conv1d(x, w))  # noqa: E731
    elif case == "conv3d":
        inputs = [torch.randn(2, 4, 6, 6, 6), torch.randn(6, 4, 3, 3, 3)]
        fn = lambda x, w: torch.relu(F.conv3d(x, w))  # noqa: E731
    elif case == "weight_read_elsewhere":
        inputs = [torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3)]
        fn = lambda x, w: F.conv2d(x, w) + w.sum()  # noqa: E731
    else:
        inputs = [torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8)]
        fn = lambda x, y: torch.relu(x + y)  # noqa: E731
    got = framefuse.compile(fn, backend="inductor")(*inputs)
    want = fn(*inputs)
    torch.testing.assert_close(got, want, **TOL[torch.float32])
    assert got.stride() == want.stride()
    assert "conv weight(s) converted" not in caplog.text
    if case == "weight_read_elsewhere":
        assert "not channels-last: every conv weight has other readers" in caplog.text
    else:
        assert "channels-last" not in caplog.text


def _compile_fn(fn, *inputs):
    g = Graph()
    phs = [g.placeholder(f"x{i}", t) for i, t in enumerate(inputs)]
    out = fn(g, *phs)
    g.output(out if isinstance(out, tuple) else (out,))
    return g, compile_graph(g)


def test_grouped_and_depthwise_convolutions():
    torch.manual_seed(0)
    x, wg, wd = torch.randn(2, 8, 12, 12), torch.randn(8, 4, 3, 3), torch.randn(8, 1, 3, 3)

    def fn(g, x, wg, wd):
        y = g.call(F.relu, g.call(F.conv2d, x, wg, None, 1, 1, 1, 2))
        return g.call(F.relu6, g.call(F.conv2d, y, wd, None, 1, 1, 1, 8))

    g, cg = _compile_fn(fn, x, wg, wd)
    assert cg.channels_last
    (got,) = cg(x, wg, wd)
    want = F.relu6(F.conv2d(F.relu(F.conv2d(x, wg, None, 1, 1, 1, 2)), wd, None, 1, 1, 1, 8))
    torch.testing.assert_close(got, want, **TOL[torch.float32])
    assert got.stride() == want.stride()


def test_squeeze_excite_gate_of_a_pooled_batch_of_one():
    # A pooled [1, C, 1, 1] in NHWC has strides a contiguous tensor of that shape does not; the activations
    # after it (timm's squeeze-excite blocks, batch 1) are typed, so the convolutions stay channels-last.
    torch.manual_seed(0)
    x, w, ws = torch.randn(1, 3, 12, 12), torch.randn(8, 3, 3, 3), torch.randn(8, 8, 1, 1)

    def fn(g, x, w, ws):
        y = g.call(F.silu, g.call(F.conv2d, x, w, None, 1, 1))
        gate = g.call(torch.sigmoid, g.call(F.conv2d, g.call(F.relu, g.call(F.adaptive_avg_pool2d, y, 1)), ws))
        return g.call(operator.mul, y, gate)

    g, cg = _compile_fn(fn, x, w, ws)
    assert cg.channels_last
    (got,) = cg(x, w, ws)
    y = F.silu(F.conv2d(x, w, None, 1, 1))
    want = y * torch.sigmoid(F.conv2d(F.relu(F.adaptive_avg_pool2d(y, 1)), ws))
    torch.testing.assert_close(got, want, **TOL[torch.float32])
    assert got.stride() == want.stride()


def test_outputs_that_alias_keep_eager_layout_and_aliasing(caplog):
    # A conv result and a view of it: copies back to NCHW would not alias, so no rewrite.
    _logs(caplog)
    torch.manual_seed(0)
    x, w = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3)

    def fn(g, x, w):
        r = g.call(F.relu, g.call(F.conv2d, x, w))
        return r, g.call(torch.flatten, r, 1)

    g, cg = _compile_fn(fn, x, w)
    assert not cg.channels_last
    assert "aliases output" in caplog.text
    r, f = cg(x, w)
    want = F.relu(F.conv2d(x, w))
    torch.testing.assert_close(r, want, **TOL[torch.float32])
    assert r.stride() == want.stride() and torch.equal(f, torch.flatten(r, 1))


def test_inputs_of_another_layout_run_the_captured_graph():
    # A weight of other strides than the captured ones fails the input check: the reference runner
    # runs the graph as captured (not the rewritten one) and returns eager's layouts.
    torch.manual_seed(0)
    x, w = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3)
    g, cg = _compile_fn(lambda g, x, w: g.call(F.relu, g.call(F.conv2d, x, w)), x, w)
    assert cg.channels_last
    w_t = torch.randn(6, 4, 3, 3).transpose(2, 3)
    (got,) = cg(x, w_t)
    want = F.relu(F.conv2d(x, w_t))
    torch.testing.assert_close(got, want, **TOL[torch.float32])
    assert got.stride() == want.stride()


def test_weight_copies_are_made_once_per_version():
    profiler = pytest.importorskip("torch.profiler")

    def copies_of(fn):
        # NB: counted by the profiler, which sees framefuse's own calls (a TorchDispatchMode would
        # not: a compiled function entered under one runs uncompiled, as eager).
        with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as prof:
            out = fn()
        return sum(e.count for e in prof.key_averages() if e.key == "aten::copy_"), out

    model = _model()
    x = torch.randn(2, 3, 32, 32)
    compiled = framefuse.compile(model, backend="inductor")
    n_convs = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    with torch.no_grad():
        first, _ = copies_of(lambda: compiled(x))  # compiles, converts every conv weight
        steady, _ = copies_of(lambda: compiled(x))  # the input's and output's layout changes alone
        assert first - steady >= n_convs
        assert copies_of(lambda: compiled(x))[0] == steady
        model.blocks[1].conv1.weight.mul_(0.5)
        n, got = copies_of(lambda: compiled(x))
        assert n == steady + 1  # the changed weight alone is converted again
        assert copies_of(lambda: compiled(x))[0] == steady
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), **TOL[torch.float32])
