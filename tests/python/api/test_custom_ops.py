"""Operators libraries define through torch.library (custom_op, Library.define) are captured as
torch.compile captures them: one node typed by the op's fake (meta) implementation, run by the
compiled graph through the dispatcher. An op torch cannot type without running it breaks instead,
and runs once per call, as eager runs it."""
import pytest
import torch

import framefuse
import inductor_util as iu
from capture_specs import stats

pytestmark = pytest.mark.usefixtures("fresh_framefuse")

BACKENDS = ["eager", "inductor"]
NS = "ff_custom_ops_test"
has_custom_op = hasattr(torch.library, "custom_op")  # torch >= 2.4
runs = []

# Library.define and impl work on every torch framefuse supports (1.13 too).
_lib = torch.library.Library(NS, "DEF")
_lib.define("scaled_tanh(Tensor x, float scale) -> Tensor")
_lib.define("untyped(Tensor x) -> Tensor")
_lib.define("two(Tensor x, Tensor y) -> (Tensor, Tensor)")


def _scaled_tanh(x, scale):
    runs.append(("scaled_tanh", x.device.type))
    return torch.tanh(x) * scale


def _untyped(x):
    runs.append(("untyped", x.device.type))
    return x + 1


def _two(x, y):
    return x * y, x - y


for _device in ("CPU", "CUDA"):
    _lib.impl("scaled_tanh", _scaled_tanh, _device)
    _lib.impl("untyped", _untyped, _device)
    _lib.impl("two", _two, _device)
# NB: torch 1.13 has no autograd fallback for meta tensors: its users register the Meta kernel
# for AutogradMeta too.
for _key in ("Meta",) if torch.__version__ >= "2" else ("Meta", "AutogradMeta"):
    _lib.impl("scaled_tanh", lambda x, scale: torch.empty_like(x), _key)
    _lib.impl("two", lambda x, y: (torch.empty_like(x + y), torch.empty_like(x + y)), _key)

ops = getattr(torch.ops, NS)


def _defined(x, y):
    a = ops.scaled_tanh(torch.relu(x), 2.0)
    p, m = ops.two.default(a, y)
    return (p + m).sin()


def _defined_eager(x, y):
    a = torch.tanh(torch.relu(x)) * 2.0
    return (a * y + (a - y)).sin()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_library_op_is_one_node_of_the_graph(backend):
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    fn = framefuse.compile(_defined, backend=backend, fullgraph=True)
    runs.clear()
    for _ in range(2):
        torch.testing.assert_close(fn(x, y), _defined_eager(x, y))
    assert runs == [("scaled_tanh", "cpu")] * 2  # the kernel runs once per call; typed by the Meta kernel
    graphs, recording = iu.recording_backend()
    framefuse.reset()
    framefuse.compile(_defined, backend=recording, fullgraph=True)(x, y)
    (code,) = graphs
    assert f"torch.ops.{NS}.scaled_tanh(" in code and f"torch.ops.{NS}.two.default(" in code, code


def test_a_library_op_without_a_meta_kernel_breaks_and_runs_once():
    def f(x):
        return ops.untyped(x * 2).cos()

    x = torch.randn(5)
    runs.clear()
    report = framefuse.explain(f)(x)
    assert runs == [("untyped", "cpu")]  # never run on probe values to type it
    assert report.graph_break_count == 1
    reason = str(report.break_reasons[0])
    assert f"torch.ops.{NS}.untyped" in reason and "register_fake" in reason, reason
    framefuse.reset()
    runs.clear()
    torch.testing.assert_close(framefuse.compile(f)(x), (x * 2 + 1).cos())
    assert runs == [("untyped", "cpu")]


@pytest.mark.skipif(not has_custom_op, reason="torch.library.custom_op is torch >= 2.4's")
@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_op_objects_and_their_gradients(backend):
    @torch.library.custom_op(f"{NS}::mul_shift", mutates_args=())
    def mul_shift(x: torch.Tensor, w: torch.Tensor, shift: float) -> torch.Tensor:
        return x * w + shift

    @mul_shift.register_fake
    def _(x, w, shift):
        return torch.empty_like(x)

    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, g * x, None

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1])

    mul_shift.register_autograd(backward, setup_context=setup_context)

    def f(x, w):
        return mul_shift(torch.exp(x), w, shift=0.5).sum(-1)

    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(3, 4, requires_grad=True)
    out = framefuse.compile(f, backend=backend, fullgraph=True)(x, w)
    gx, gw = torch.autograd.grad(out.sum(), (x, w))
    ref = (torch.exp(x) * w + 0.5).sum(-1)
    rx, rw = torch.autograd.grad(ref.sum(), (x, w))
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(gx, rx)
    torch.testing.assert_close(gw, rw)
    with torch.no_grad():
        torch.testing.assert_close(framefuse.compile(f, backend=backend, fullgraph=True)(x, w), ref)


@pytest.mark.skipif(not has_custom_op, reason="torch.library.custom_op is torch >= 2.4's")
def test_what_cannot_be_captured_breaks_with_its_reason():
    @torch.library.custom_op(f"{NS}::no_fake", mutates_args=())
    def no_fake(x: torch.Tensor) -> torch.Tensor:
        runs.append("no_fake")
        return x * 3

    @torch.library.custom_op(f"{NS}::bump", mutates_args=("x",))
    def bump(x: torch.Tensor) -> None:
        runs.append("bump")
        x.add_(1)

    def f(x):
        y = no_fake(x.abs())
        z = y.clone()
        bump(z)
        return y, z

    x = torch.randn(6)
    runs.clear()
    report = framefuse.explain(f)(x)
    reasons = "\n".join(str(r) for r in report.break_reasons)
    assert runs == ["no_fake", "bump"]
    assert "no_fake" in reasons and "register_fake" in reasons, reasons
    assert "bump" in reasons and "writes its argument 'x'" in reasons, reasons
    framefuse.reset()
    runs.clear()
    y, z = framefuse.compile(f)(x)
    torch.testing.assert_close(y, x.abs() * 3)
    torch.testing.assert_close(z, x.abs() * 3 + 1)  # the write is eager's
    assert runs == ["no_fake", "bump"]


def test_symbolic_sizes_are_typed_by_the_meta_kernel():
    fn = framefuse.compile(_defined, dynamic=True, fullgraph=True)
    for n in (3, 7, 12):
        x, y = torch.randn(n, 5), torch.randn(n, 5)
        torch.testing.assert_close(fn(x, y), _defined_eager(x, y))
    assert stats()["frames_compiled"] == 1
