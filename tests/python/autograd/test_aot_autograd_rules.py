"""Derivative rules (graph/autograd/derivatives.cpp) at the edges OpInfo's first samples miss.

Each case runs a function eagerly and through framefuse.compile in float64, asserts that the
compiled outputs come from AOT autograd's Function (grad_fn `_FunctionBackward`: the rule ran, the
graph did not fall back to eager ops), and compares the outputs and the gradients of every input that
requires grad (for seeded random cotangents) with eager's, None where eager gives None.
"""

import pytest
import torch
import torch.nn.functional as F

import framefuse
import opinfo_sweep
from test_aot_opinfo import _compare_grads, _cotangents, _differentiable, _grad_inputs

pytestmark = [pytest.mark.usefixtures("fresh_framefuse")]

F64 = torch.float64
TIGHT = {"rtol": 1e-7, "atol": 1e-7}


def rand(*shape, dtype=F64, grad=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g).requires_grad_(grad)


def check(fn, *args, through_aot=True, **tolerances):
    """fn(*args) eagerly and compiled (on copies); returns the compiled result and gradients."""
    e_args, c_args = opinfo_sweep._clone(args), opinfo_sweep._clone(args)
    expected = fn(*e_args)
    actual = framefuse.compile(fn)(*c_args)
    outputs = _differentiable(actual)
    assert outputs, "no compiled output requires grad"
    names = [type(t.grad_fn).__name__ for t in outputs]
    if through_aot:
        assert all(n == "_FunctionBackward" for n in names), f"not through AOT autograd: {names}"
    opinfo_sweep._assert_same(actual, expected, "result")
    e_outputs = _differentiable(expected)
    cotangents = _cotangents(e_outputs, seed=1)
    e_inputs = _grad_inputs(e_args)
    e_grads = torch.autograd.grad(e_outputs, e_inputs, cotangents, allow_unused=True)
    c_grads = torch.autograd.grad(outputs, _grad_inputs(c_args), cotangents, allow_unused=True)
    _compare_grads(c_grads, e_grads, e_inputs, tolerances or TIGHT)
    return actual, c_grads


# ---- broadcasting and dtypes: the gradient is summed and cast to each operand ---------------------


@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: a + b,
        lambda a, b: torch.add(a, b, alpha=-2.5),
        lambda a, b: torch.sub(a, b, alpha=0.5),
        lambda a, b: torch.rsub(a, b, alpha=3.0),
        lambda a, b: a * b,
        lambda a, b: a / b,
        lambda a, b: torch.true_divide(b, a),
    ],
    ids=["add", "add_alpha", "sub_alpha", "rsub_alpha", "mul", "div", "true_divide"],
)
@pytest.mark.parametrize(
    "shapes",
    [((4, 1, 3), (2, 3)), ((2, 3), ()), ((1,), (3, 1, 1)), ((3, 4), (3, 1))],
    ids=["both", "0-d", "leading", "inner"],
)
def test_broadcast_gradient_is_summed_to_operand_shape(op, shapes):
    a = rand(*shapes[0], seed=2)
    # NB: away from 0, so the quotients' gradients are tame
    b = (rand(*shapes[1], seed=3, grad=False).abs() + 0.5).requires_grad_()
    check(lambda x, y: op(x, y).sin(), a, b)


@pytest.mark.parametrize("op", [torch.mul, torch.add, torch.div, torch.sub], ids=["mul", "add", "div", "sub"])
def test_mixed_dtypes_give_each_operand_its_own_dtype(op):
    a = rand(3, 4, dtype=torch.float32, seed=4)
    b = (rand(4, seed=5, grad=False) + 3.0).requires_grad_()
    out, grads = check(lambda x, y: op(x, y).tanh(), a, b)
    assert out.dtype == F64
    assert [g.dtype for g in grads] == [torch.float32, F64]


def test_mixed_dtypes_with_a_python_scalar_and_a_0d_tensor():
    check(lambda x, s: (x * 2.5 + s) / s, rand(3, dtype=torch.float32, seed=6), rand(seed=7))


def test_a_0d_double_operand_of_a_float_tensor_gets_a_double_gradient():
    # a 0-d tensor does not promote a tensor of its category: the product is float32, the gradient of
    # the 0-d float64 operand is summed over it and cast back to float64
    out, grads = check(
        lambda x, s: (x * s).exp(), rand(3, dtype=torch.float32, seed=6), rand(seed=7), rtol=1.3e-6, atol=1e-5
    )
    assert out.dtype == torch.float32
    assert [(g.dtype, g.shape) for g in grads] == [(torch.float32, (3,)), (F64, ())]


# ---- getitem: the gradient padded with zeros back to the input's shape ----------------------------

INDEXES = {
    "int": 1,
    "negative_int": -1,
    "slice": (slice(None), slice(1, 3)),
    "negative_slice": slice(-3, None),
    "slice_past_the_end": (slice(None), slice(2, 100)),
    "negative_stop": slice(1, -1),
    "empty_slice": slice(3, 1),
    "none": (None, 0),
    "ellipsis": (Ellipsis, 0),
    "ellipsis_and_none": (None, Ellipsis, -2),
    "mixed": (slice(1, -1), None, 2, Ellipsis),
    "all_ints": (-1, 0, 3),
    "ellipsis_only": Ellipsis,
}


@pytest.mark.parametrize("index", list(INDEXES.values()), ids=list(INDEXES))
def test_getitem_basic_indexes(index):
    check(lambda x: torch.sin(x[index]) * 2, rand(4, 3, 5))


def test_getitem_twice_and_the_whole_input():
    # two getitems of one input: their gradients add up, with the input's own
    check(lambda x: x[0].exp() + x[-1, :] * x.sum(0), rand(3, 4))


# ---- split / chunk / unbind: chunks nobody used get zeros ------------------------------------------


def test_split_with_only_some_chunks_used():
    def f(x):
        a, _, c = torch.split(x, 2, dim=1)  # the middle chunk takes no part
        return (a * 2 + c.exp()).sum(1)

    check(f, rand(3, 6))


def test_split_uneven_sizes_uses_the_short_last_chunk():
    check(lambda x: torch.split(x, 2, dim=-1)[-1].sin(), rand(3, 5))


def test_split_list_sizes():
    check(lambda x: torch.split(x, [1, 3, 1], dim=0)[1].cos(), rand(5, 2))


def test_chunk_uses_one_chunk():
    check(lambda x: torch.chunk(x, 3, dim=0)[1].tanh(), rand(7, 2))


def test_chunks_used_by_two_outputs():
    def f(x):
        a, b = x.chunk(2, dim=-1)
        return a.sigmoid(), (b * 3).sum()

    check(f, rand(2, 4))


def test_unbind_with_one_item_used():
    check(lambda x: torch.unbind(x, dim=1)[2].exp(), rand(3, 4))


# ---- matmul, embedding, where ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "shapes",
    [((2, 1, 3, 4), (5, 4, 6)), ((4,), (4, 6)), ((3, 4), (4,)), ((4,), (4,))],
    ids=["broadcast_batch", "vector_matrix", "matrix_vector", "dot"],
)
def test_matmul_shapes(shapes):
    check(lambda a, b: torch.matmul(a, b).sin(), rand(*shapes[0]), rand(*shapes[1], seed=1))


@pytest.mark.parametrize("padding_idx", [None, 1, -1])
def test_embedding_padding_idx_rows_get_no_gradient(padding_idx):
    indices = torch.tensor([[0, 1, 4], [1, 1, 2]])
    check(lambda w, i: F.embedding(i, w, padding_idx=padding_idx).sin(), rand(5, 3), indices)


def test_where_and_masked_fill_with_broadcast_masks():
    mask = torch.tensor([True, False, True, False])
    check(lambda x, y: torch.where(x > 0, x, y).exp() + x.masked_fill(mask, 2.0), rand(3, 4), rand(4, seed=1))


# ---- cat / stack ---------------------------------------------------------------------------------


def test_cat_with_a_tensor_that_does_not_require_grad():
    c = rand(1, 3, seed=9, grad=False)
    check(lambda x, c, y: torch.cat([x, c, y], dim=0).sin(), rand(2, 3), c, rand(4, 3, seed=10))


def test_cat_on_a_negative_dim():
    check(lambda x, y: torch.cat((x, y), dim=-1).exp(), rand(2, 3), rand(2, 1, seed=11))


def test_stack_with_a_tensor_that_does_not_require_grad():
    c = rand(2, 3, seed=9, grad=False)
    check(lambda x, c: torch.stack([c, x, x * 2], dim=1).sin(), rand(2, 3), c)


def test_cat_with_a_legacy_empty_tensor_that_requires_grad():
    check(lambda x, e: torch.cat([x, e]).sin(), rand(2, 3), torch.empty(0, dtype=F64, requires_grad=True))


# ---- cross_entropy ------------------------------------------------------------------------------

TARGETS = torch.tensor([0, -100, 3, 2, 2, -100])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_cross_entropy_ignore_index_and_weights(reduction, weighted):
    weight = torch.tensor([0.5, 2.0, 1.0, 0.25], dtype=F64) if weighted else None
    check(lambda x, t: F.cross_entropy(x, t, weight=weight, reduction=reduction), rand(6, 4), TARGETS)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_custom_ignore_index_on_k_dims(reduction):
    target = torch.tensor([[0, 2, 1], [2, 2, 0]])  # class 2 is ignored
    weight = torch.tensor([1.5, 0.5, 3.0], dtype=F64)
    check(lambda x, t: F.cross_entropy(x, t, weight=weight, ignore_index=2, reduction=reduction), rand(2, 3, 3), target)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_cross_entropy_all_targets_ignored_gives_zero_gradients(reduction, weighted):
    weight = torch.tensor([0.5, 2.0, 1.0, 0.25], dtype=F64) if weighted else None
    loss, (grad,) = check(
        lambda x, t: F.cross_entropy(x, t, weight=weight, reduction=reduction), rand(3, 4), torch.full((3,), -100)
    )
    # eager's loss is nan (mean: 0 / 0) or 0, its gradient 0: the compiled one is not 0 / 0 either
    assert loss.isnan().item() == (reduction == "mean")
    assert torch.equal(grad, torch.zeros(3, 4, dtype=F64))


# ---- scaled_dot_product_attention ------------------------------------------------------------------

needs_sdpa = pytest.mark.skipif(
    not hasattr(F, "scaled_dot_product_attention"), reason="this torch has no scaled_dot_product_attention (1.13)"
)


def _qkv(heads_kv=3):
    return rand(2, 3, 5, 8, seed=12), rand(2, heads_kv, 6, 8, seed=13), rand(2, heads_kv, 6, 8, seed=14)


@needs_sdpa
def test_sdpa_bool_mask():
    mask = torch.rand(5, 6, generator=torch.Generator().manual_seed(15)) > 0.4
    mask[:, 0] = True  # NB: no row fully masked (eager's softmax gives nan there)
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), *_qkv(), mask)


@needs_sdpa
def test_sdpa_float_mask_that_requires_grad_broadcast_over_batch_and_heads():
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), *_qkv(), rand(1, 1, 5, 6, seed=16))


@needs_sdpa
def test_sdpa_float_mask_without_grad():
    check(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        *_qkv(),
        rand(5, 6, seed=16, grad=False),
    )


@needs_sdpa
@pytest.mark.parametrize("scale", [None, 0.3])
def test_sdpa_is_causal_with_more_keys_than_queries(scale):
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale), *_qkv())


@needs_sdpa
def test_sdpa_only_value_requires_grad():
    q, k, v = _qkv()
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q.detach(), k.detach(), v)


@needs_sdpa
def test_sdpa_grouped_query_attention():
    check(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        rand(2, 6, 5, 8, seed=12),
        *_qkv(heads_kv=2)[1:],
    )


# ---- layer_norm, linear, activations --------------------------------------------------------------


def test_layer_norm_without_weight_or_bias():
    check(lambda x: F.layer_norm(x, (4,)), rand(3, 2, 4))


def test_layer_norm_with_bias_only_over_two_dims():
    check(lambda x, b: F.layer_norm(x, (2, 4), None, b, eps=1e-3), rand(3, 2, 4), rand(2, 4, seed=17))


def test_layer_norm_weight_without_grad():
    check(lambda x, w: F.layer_norm(x, (4,), w), rand(3, 4), rand(4, seed=18, grad=False))


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_linear_with_3d_input(bias):
    b = rand(5, seed=19) if bias else None
    check(lambda x, w, b: F.linear(x, w, b).tanh(), rand(2, 3, 4), rand(5, 4, seed=20), b)


def test_linear_input_without_grad():
    check(lambda x, w, b: F.linear(x, w, b), rand(2, 3, 4, grad=False), rand(5, 4, seed=20), rand(5, seed=19))


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu(approximate):
    x = torch.cat([rand(8), torch.tensor([0.0, -6.0, 6.0], dtype=F64)]).detach().requires_grad_()
    check(lambda x: F.gelu(x, approximate=approximate) * 1.5, x)


# Activations at their kinks, where eager's subgradient convention decides: relu and leaky_relu
# take the x <= 0 side at 0, hardtanh gives 0 at its bounds, clamp passes the gradient at them.
KINKS = torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0], dtype=F64)


@pytest.mark.parametrize(
    "fn",
    [
        torch.relu,
        F.relu,
        lambda x: F.leaky_relu(x, 0.1),
        F.hardtanh,
        lambda x: F.hardtanh(x, -0.5, 0.5),
        lambda x: torch.clamp(x, -1.0, 0.5),
        lambda x: torch.clamp_min(x, 0.0),
        lambda x: torch.clamp_max(x, 1.0),
        torch.abs,
    ],
    ids=["relu", "F.relu", "leaky_relu", "hardtanh", "hardtanh_bounds", "clamp", "clamp_min", "clamp_max", "abs"],
)
def test_activations_at_their_kinks(fn):
    check(lambda x: fn(x) * 2, KINKS.clone().requires_grad_())


def test_relu_gradient_at_exactly_zero_is_zero():
    x = torch.zeros(3, dtype=F64, requires_grad=True)
    out = framefuse.compile(lambda x: torch.relu(x) * 2)(x)
    assert type(out.grad_fn).__name__ == "_FunctionBackward"
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros(3, dtype=F64))


# ---- reductions, pow, sqrt ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.sum((0, -1)),
        lambda x: x.mean(-2, keepdim=True),
        lambda x: x.sum(),
        lambda x: torch.mean(x, dim=[1]),
    ],
    ids=["sum_dims", "mean_keepdim", "sum_all", "mean_list"],
)
def test_reductions(fn):
    check(lambda x: fn(x.sin()), rand(2, 3, 4))


@pytest.mark.parametrize("exponent", [0.0, 1.0, 2.0, -1.5, 3])
def test_pow_scalar_exponent(exponent):
    x = (rand(5, grad=False).abs() + 0.5).requires_grad_()
    check(lambda x: torch.pow(x, exponent) * 2, x)


def test_sqrt_runs_through_aot():
    x = (rand(5, grad=False).abs() + 0.5).requires_grad_()
    check(lambda x: torch.sqrt(x) * 2, x)
