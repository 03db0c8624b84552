"""Pointwise ops lowered to generated code where eager's formula is its own (issue #22): isclose,
mvlgamma and ldexp are chains of separate ATen ops in eager (each step's result rounded to its dtype,
a number operand read as that op's kernel reads it), nextafter of f16/bf16 steps in the dtype's own
bits, and float64 Bessel J/Y and Airy Ai take torch's rational approximations (eager's values, not
the exact ones). Each runs as kernels, no extern call, and equals eager's ops on values that reach
the edge cases."""
import math

import pytest
import torch

from inductor_util import needs_codegen
from test_inductor_lowered_ops import REDUCED, TORCH2, floats, ints, lowered

pytestmark = needs_codegen

TORCH_2_11 = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 11)


def near(x, spread, seed):
    """x moved by about `spread` (relative and absolute), every seventh element left equal."""
    g = torch.Generator().manual_seed(seed)
    d = x.double()
    y = d + torch.randn(d.shape, generator=g, dtype=torch.float64) * spread * (1 + d.abs())
    y[::7] = d[::7]
    return y.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *REDUCED])
@pytest.mark.parametrize("rtol,atol,equal_nan", [(1e-5, 1e-8, False), (0.1, 0.3, True), (0.3, 0.1, False),
                                                  (0.0, 0.0, True), (1e-3, 0.0, False)])
def test_isclose_floats(dtype, rtol, atol, equal_nan):
    if dtype == torch.float16 and not TORCH2:
        pytest.skip("torch 1.13 has no f16 isclose on the CPU")
    x = floats(dtype, n=2003)
    y = near(x, 0.2, seed=3)
    lowered(lambda g, a, b: g.call(torch.isclose, a, b, rtol=rtol, atol=atol, equal_nan=equal_nan), [x, y])
    lowered(lambda g, a, b: g.call(torch.Tensor.isclose, a, b, rtol, atol), [x.view(1, -1), y.view(-1, 1)[:5]])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_isclose_ints_in_the_default_float_dtype(dtype):
    if dtype == torch.bool:
        a, b = ints(torch.uint8) > 50, ints(torch.uint8, seed=5) > 50
    else:
        a, b = ints(dtype), ints(dtype, seed=5)
    lowered(lambda g, x, y: g.call(torch.isclose, x, y, rtol=0.05, atol=3.0), [a, b])
    # zero tolerances compare the ints themselves: 2**24 + 1 and 2**24 are equal only as float32
    big = torch.tensor([2**24 + 1, 5, 2**40 + 1, -3])
    lowered(lambda g, x, y: g.call(torch.isclose, x, y, rtol=0.0, atol=0.0), [big, big - torch.tensor([1, 0, 1, 0])])
    lowered(lambda g, x, y: g.call(torch.isclose, x, y), [big, big - torch.tensor([1, 0, 1, 0])])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *REDUCED, torch.int64])
@pytest.mark.parametrize("p", [1, 3, 5])
def test_mvlgamma(dtype, p):
    if dtype == torch.float16 and not TORCH2:
        pytest.skip("torch 1.13 has no f16 lgamma on the CPU")
    g = torch.Generator().manual_seed(p)
    x = torch.rand(501, generator=g, dtype=torch.float64) * 12 + (p - 1) / 2 + 0.01
    x[:3] = torch.tensor([(p - 1) / 2 + 1e-3, 1.0 + (p - 1) / 2, 2.0 + (p - 1) / 2])  # near lgamma's zeros
    x = x.round().to(dtype) if dtype == torch.int64 else x.to(dtype)
    # NB: not bit for bit: eager takes lgamma in float (lgammaf), the library in double
    lowered(lambda gr, a: gr.call(torch.mvlgamma, a, p), [x], exact=False)
    lowered(lambda gr, a: gr.call(torch.special.multigammaln, a, p=p), [x], exact=False)


def test_mvlgamma_outside_its_domain_is_eagers():
    x = torch.tensor([0.1, -0.3, 0.0, float("nan"), float("inf"), -2.0, 0.75])
    lowered(lambda g, a: g.call(torch.mvlgamma, a, 3), [x], exact=False)


def exponents(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    e = torch.randint(-160, 160, (203,), generator=g)
    e[:8] = torch.tensor([0, 1, -1, 127, 128, -149, -150, 1100])
    return e.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *REDUCED])
@pytest.mark.parametrize("edtype", [torch.int64, torch.int32, torch.int16])
def test_ldexp_of_an_integer_exponent(dtype, edtype):
    if dtype == torch.float16 and not TORCH2:
        pytest.skip("torch 1.13 has no f16 ldexp on the CPU")
    if TORCH2 and not TORCH_2_11:
        pytest.skip("torch 2.0-2.10's ldexp of an integer exponent stays in torch")
    x = floats(dtype)
    lowered(lambda g, a, b: g.call(torch.ldexp, a, b), [x, exponents(edtype, 1)])
    lowered(lambda g, a, b: g.call(torch.Tensor.ldexp, a, b), [floats(dtype, n=63).view(9, 7), exponents(edtype, 2)[:7]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_ldexp_of_a_float_exponent(dtype):
    x = floats(dtype)
    e = (exponents(torch.float32, 3) * 0.37).to(dtype)
    e[-4:] = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.5]).to(dtype)
    lowered(lambda g, a, b: g.call(torch.ldexp, a, b), [x, e], exact=False)
    lowered(lambda g, a, b: g.call(torch.ldexp, a, b), [ints(torch.int64), e], exact=False)


@pytest.mark.parametrize("dtype", REDUCED)
def test_nextafter_steps_in_the_dtypes_bits(dtype):
    if dtype == torch.float16 and not TORCH2:
        pytest.skip("torch 1.13 has no f16 nextafter on the CPU")
    info = torch.finfo(dtype)
    edges = [0.0, -0.0, math.inf, -math.inf, math.nan, info.max, -info.max, info.tiny, -info.tiny,
             info.tiny / 2 ** 3, 1.0, 2.0, -2.0, 0.5, 65504.0 if dtype == torch.float16 else 3e38]
    g = torch.Generator().manual_seed(7)
    pool = torch.cat([torch.tensor(edges), torch.randn(60, generator=g) * 10, torch.randn(20, generator=g) * info.tiny])
    pool = pool.to(dtype)
    i, j = torch.randint(0, len(pool), (2, 3001), generator=g)
    lowered(lambda gr, a, b: gr.call(torch.nextafter, a, b), [pool[i], pool[j]])
    lowered(lambda gr, a, b: gr.call(torch.nextafter, a, b), [pool, pool.flip(0)])


@pytest.mark.skipif(not hasattr(torch.special, "bessel_j0"), reason="torch.special has no Bessel functions")
@pytest.mark.parametrize("name", ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "airy_ai"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_bessel_and_airy_give_eagers_values(name, dtype):
    fn = getattr(torch.special, name)
    g = torch.Generator().manual_seed(11)
    # the grid where eager's float64 is farthest from the exact values (near x = 5 and the zeros,
    # Ai near -2.5), the branches' ends, wide values and the edges
    x = torch.cat([torch.linspace(-30, 30, 6001, dtype=torch.float64), torch.linspace(4.9, 5.1, 401, dtype=torch.float64),
                   torch.tensor([2.404825557695773, 5.520078110286311, 0.893576966279167, 3.957678419314858,
                                 -2.338107410459767, -4.087949444130970, 0.0, -0.0, 1e-300, 1e10, -1e10,
                                 math.inf, -math.inf, math.nan, 25.77, 103.9, -2.5]).double(),
                   torch.randn(500, generator=g, dtype=torch.float64) * 1e3])
    if dtype == torch.float32:
        # NB: eager's float32 kernels run the formulas in float, farther from the exact values than
        # float32's tolerance beyond |x| = 30 (Ai(-1000) by 1.4e-3); the library computes in double
        x = x[~(x.abs() > 30)]
    lowered(lambda gr, a: gr.call(fn, a), [x.to(dtype)], exact=False)
