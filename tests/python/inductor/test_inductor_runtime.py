"""The runtime of compiled CPU graphs: which inputs reach the kernels, how extern calls are
called, and how a compiled graph is called."""
import pytest
import torch

from framefuse import _C
from inductor_util import build, needs_codegen
from framefuse.inductor import compile_graph

pytestmark = needs_codegen


def compiled(fn, inputs):
    g = build(fn, inputs)
    cg = compile_graph(g, inputs)
    assert isinstance(cg, _C.inductor.CompiledGraph), "the graph fell back to the reference runner"
    return cg


def test_inputs_of_another_layout_after_matching_calls_give_eager_results():
    x = torch.randn(4, 6)
    cg = compiled(lambda g, a: g.call(torch.add, a, 1), [x])
    for _ in range(3):  # the quick layout check is armed by the first matching call
        assert torch.equal(cg(x)[0], x + 1)
    others = [torch.randn(6, 4).t(), torch.randn(4, 6, dtype=torch.float64), torch.randn(5, 6),
              torch.randn(4, 6, requires_grad=True), torch.randn(4, 7)[:, :6], torch.nn.Parameter(torch.randn(4, 6))]
    for o in others:
        got = cg(o)[0]
        want = o + 1
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.detach(), want.detach()), o.shape
        assert torch.equal(cg(x)[0], x + 1)  # and the compiled path still runs after each


def test_extern_result_read_by_a_kernel():
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    cg = compiled(lambda g, a, b: g.call(torch.relu, g.call(torch.mm, a, b)), [x, w])
    assert cg.num_kernels == 1 and cg.num_externs == 1
    for _ in range(3):
        assert torch.equal(cg(x, w)[0], torch.relu(torch.mm(x, w)))
    x2 = torch.randn(16, 8).t()  # same sizes, other strides: the mm result is still row-major
    assert torch.equal(cg(x2, w)[0], torch.relu(torch.mm(x2, w)))


def test_program_of_extern_calls_only_runs_torch_on_any_inputs():
    x, w = torch.randn(4, 10), torch.randn(10, 5)
    cg = compiled(lambda g, a, b: g.call(torch.mm, a, b), [x, w])
    assert cg.num_kernels == 0
    assert torch.equal(cg(x, w)[0], torch.mm(x, w))
    x6 = torch.randn(6, 10)  # what eager would do with it: no layout assumption to break
    out = cg(x6, w)[0]
    assert out.shape == (6, 5) and torch.equal(out, torch.mm(x6, w))
    with pytest.raises(RuntimeError):
        cg(torch.randn(4, 3), w)  # torch's own error, as eager raises it


def test_extern_with_keyword_arguments():
    x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    f = torch.nn.functional.conv2d
    cg = compiled(lambda g, a, b: g.call(torch.relu, g.call(f, a, b, padding=1)), [x, w])
    for _ in range(2):
        # NB: the conv runs channels-last (config cpu_channels_last): oneDNN's NHWC kernel rounds
        # differently from its NCHW one.
        torch.testing.assert_close(cg(x, w)[0], torch.relu(f(x, w, padding=1)), rtol=1e-5, atol=1e-5)


def test_call_takes_positional_inputs_only():
    x = torch.randn(8)
    cg = compiled(lambda g, a: g.call(torch.mul, a, 2), [x])
    with pytest.raises(TypeError, match="positional"):
        cg(x=x)
    with pytest.raises(TypeError, match="expects 1 inputs"):
        cg(x, x)
    assert torch.equal(cg(x)[0], x * 2)
