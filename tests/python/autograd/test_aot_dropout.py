"""Dropout in training under AOT autograd: the forward draws the same mask as eager (x * dropout(ones_like(x)),
one call of the same op on a tensor like x), so results, gradients and the RNG state afterwards equal eager's."""

import pytest
import torch
import torch.nn.functional as F

import framefuse


def _through_aot(out):
    return type(out.grad_fn).__name__ == "_FunctionBackward"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_draws_eager_mask_and_gradients(dtype, p):
    def fn(x, w):
        return F.dropout(torch.tanh(x * w), p, True) * 3

    framefuse.reset()  # NB: each case recompiles the one code object of fn
    x = torch.randn(6, 33, dtype=dtype, requires_grad=True)
    w = torch.randn(33, dtype=dtype, requires_grad=True)
    compiled = framefuse.compile(fn)
    for seed in (1, 2):  # the second call runs the cached code
        torch.manual_seed(seed)
        expected = fn(x, w)
        state = torch.get_rng_state()
        torch.manual_seed(seed)
        actual = compiled(x, w)
        assert _through_aot(actual)
        assert torch.equal(torch.get_rng_state(), state)
        assert torch.equal(actual == 0, expected == 0)
        # NB: bfloat16 kernels compute tanh(x * w) * noise * 3 in float and round once; eager rounds per op
        tol = {"rtol": 1.6e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {}
        torch.testing.assert_close(actual, expected, **tol)
        g = torch.randn_like(expected)
        got, want = torch.autograd.grad(actual, (x, w), g), torch.autograd.grad(expected, (x, w), g)
        for a, e in zip(got, want):
            # NB: w's bfloat16 gradient sums rows scaled by 1 / (1 - p) that cancel; eager rounds each
            # step to bfloat16, so the bound is relative to the gradient's largest element
            bound = {"rtol": 5e-2, "atol": 2e-2 * e.abs().max().item()} if tol else {}
            torch.testing.assert_close(a, e, **bound)


def test_dropout_of_a_model_in_training_trains_as_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.3), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ref = torch.nn.Sequential(*(m for m in model))  # the same parameters
    compiled = framefuse.compile(model)
    x = torch.randn(8, 16)
    torch.manual_seed(3)
    out = compiled(x)
    assert _through_aot(out)
    (gw,) = torch.autograd.grad(out.sum(), model[0].weight)
    torch.manual_seed(3)
    (ew,) = torch.autograd.grad(ref(x).sum(), ref[0].weight)
    torch.testing.assert_close(gw, ew)


def test_inplace_dropout_on_a_tensor_that_requires_grad_runs_eagerly():
    def fn(x):
        y = x * 2
        F.dropout(y, 0.5, True, inplace=True)
        return y + 1

    x = torch.randn(4, 5, requires_grad=True)
    torch.manual_seed(4)
    expected = fn(x)
    torch.manual_seed(4)
    actual = framefuse.compile(fn)(x)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(torch.autograd.grad(actual.sum(), x), torch.autograd.grad(expected.sum(), x))
