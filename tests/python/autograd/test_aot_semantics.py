"""What eager autograd promises, under AOT autograd: retained graphs, None gradients, aliasing of results that
are inputs, autograd's in-place checks, and what is refused (double backward)."""

import pytest
import torch

import framefuse


def _through_aot(out):
    return type(out.grad_fn).__name__ == "_FunctionBackward"


def test_a_retained_graph_runs_its_compiled_backward_twice():
    x = torch.randn(5, 6, requires_grad=True)
    out = framefuse.compile(lambda x: (x.sin() * 2).sum())(x)
    assert _through_aot(out)
    (g1,) = torch.autograd.grad(out, x, retain_graph=True)
    (g2,) = torch.autograd.grad(out, x)
    torch.testing.assert_close(g1, 2 * x.detach().cos())
    assert torch.equal(g1, g2)


def test_an_output_outside_the_loss_leaves_its_parameters_without_gradients():
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 2)
    f = framefuse.compile(lambda x: (a(x).relu(), b(x).tanh()))
    first, _ = f(torch.randn(5, 4))
    assert _through_aot(first)
    first.sum().backward()
    assert a.weight.grad is not None and b.weight.grad is None and b.bias.grad is None


def test_a_result_that_is_a_view_of_an_input_aliases_it_as_in_eager():
    x = torch.randn(3, 4, requires_grad=True)
    y, v = framefuse.compile(lambda x: (x.exp(), x.t()))(x)
    assert _through_aot(y) and v._base is x
    (y.sum() + (v * 3).sum()).backward()
    torch.testing.assert_close(x.grad, x.detach().exp() + 3)


def test_an_input_changed_in_place_before_backward_raises_as_in_eager():
    x = torch.randn(4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    out = framefuse.compile(lambda x, w: (x * w).sum())(x, w)
    with torch.no_grad():
        w.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_a_backward_that_builds_a_graph_raises_and_says_what_to_do():
    # NB: create_graph=True asks for a differentiable backward, which the compiled one is not; a
    # first-order gradient without its graph would make the second order silently zero
    x = torch.randn(4, requires_grad=True)
    out = framefuse.compile(lambda x: x.sin().sum())(x)
    with pytest.raises(RuntimeError, match="not differentiable again.*framefuse.disable.*aot_autograd = False"):
        torch.autograd.grad(out, x, create_graph=True)


def test_with_aot_autograd_off_the_graph_runs_on_eager_ops():
    x = torch.randn(4, requires_grad=True)
    with framefuse.config.patch(aot_autograd=False):
        framefuse.reset()
        out = framefuse.compile(lambda x: x.sin() * 2)(x)
    assert type(out.grad_fn).__name__ == "MulBackward0"
    framefuse.reset()


def test_a_graph_whose_results_all_alias_inputs_still_writes_its_buffers():
    buf = torch.zeros(3)

    def f(x):
        buf.add_(1)
        return x.view(6)

    x = torch.randn(2, 3, requires_grad=True)
    out = framefuse.compile(f)(x)
    assert torch.equal(buf, torch.ones(3)) and out._base is x
