"""Ops whose eager CUDA kernels compute by formulas of their own, lowered by the CUDA code generator
(issue #22): floor division by a number (its reciprocal taken on the host), f16/bf16 floor division
and remainder, integer division by a tensor holding zeros (no check: the hardware's values),
round(decimals=) of f16/bf16 (in the dtype), int32 max/min chains (a ptxas miscompile the prelude
avoids), nextafter of f16/bf16, and the composites isclose and mvlgamma. Each is compared with
eager CUDA bit for bit (NaNs as NaNs) and has no extern call in its loop IR."""
import math

import pytest
import torch
from cuda_util import fp32_and_fresh, gpu, need_nvrtc  # noqa: F401
from test_cuda_pointwise_more import _compiled

pytestmark = pytest.mark.usefixtures("fp32_and_fresh")

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _bits_equal(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    if got.dtype.is_floating_point:
        assert torch.equal(got.isnan(), want.isnan()), (got, want)
        got, want = got.nan_to_num(0.0, posinf=math.inf, neginf=-math.inf), want.nan_to_num(0.0, posinf=math.inf, neginf=-math.inf)
        assert torch.equal(torch.signbit(got), torch.signbit(want)), (got, want)
    assert torch.equal(got, want), (got, want)


def _lowered_and_exact(fn, *inputs):
    (got, texts), want = _compiled(fn, *[t.clone() for t in inputs]), fn(*inputs)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        _bits_equal(g, w)
    assert texts and not any("extern node" in t for t in texts), texts


def _floats(dtype, n=20011, seed=0, scale=40.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float64) * scale
    x[:8] = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-3, -7.0, 65504.0])
    return x.to(dtype).cuda()


@gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("divisor", [1e-3, 0.3, -2.7, 7.0, -0.0, 0.0, 1e-40])
def test_floor_division_by_a_number(dtype, divisor):
    x = _floats(dtype)
    _lowered_and_exact(lambda a: a // divisor, x)
    _lowered_and_exact(lambda a: torch.div(a, divisor, rounding_mode="floor"), x)


@gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_floor_division_and_remainder_between_tensors(dtype):
    x, y = _floats(dtype), _floats(dtype, seed=1, scale=3.0)
    _lowered_and_exact(lambda a, b: (torch.floor_divide(a, b), torch.remainder(a, b), torch.fmod(a, b)), x, y)
    _lowered_and_exact(lambda a: (torch.remainder(a, 0.3), torch.remainder(a, -2.7), 5.5 % a), x)


@gpu
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_integer_division_by_a_tensor_with_zeros(dtype):
    info = torch.iinfo(dtype)
    g = torch.Generator().manual_seed(2)
    x = torch.randint(info.min, info.max, (4001,), generator=g, dtype=torch.int64)
    x[:6] = torch.tensor([0, 1, -1, info.min, info.max, 7]).clamp(info.min, info.max)
    if dtype == torch.int64:
        x[6:10] = torch.tensor([2**32 - 1, 2**32, -(2**32), 12345])
    y = torch.randint(-3, 4, (4001,), generator=g)
    y[:6] = torch.tensor([0, 0, 0, -1, 0, -1]).clamp(info.min, info.max)
    x, y = x.to(dtype).cuda(), y.to(dtype).cuda()
    _lowered_and_exact(lambda a, b: (a // b, a % b, torch.fmod(a, b), torch.div(a, b, rounding_mode="trunc"),
                                      torch.remainder(a, b)), x, y)


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("decimals", [-3, -1, 1, 2, 4, 5, 8])
def test_round_with_decimals_in_the_dtype(dtype, decimals):
    x = _floats(dtype, scale=3.0) * 7
    _lowered_and_exact(lambda a: torch.round(a, decimals=decimals), x)


@gpu
@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8, torch.int64])
def test_int_max_min_chains(dtype):
    # ptxas fused two signed 32-bit max into one instruction and dropped a negation (amax(-x) of
    # the column 1, 3, 5 gave 3)
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-100, 100, (257, 3), generator=g).to(dtype).cuda()
    c = torch.tensor([[1, 2], [5, 4], [3, 6]], dtype=dtype, device="cuda")
    fns = lambda a: (torch.amax(-a, 0), torch.amin(-a, 0), torch.max(-a, 0)[0], torch.argmax(-a, 0),  # noqa: E731
                     torch.amin(-a, 1), torch.maximum(torch.maximum(-a[:, 0], a[:, 1]), -a[:, 2]),
                     torch.minimum(torch.minimum(a[:, 0], -a[:, 1]), a[:, 2]))
    _lowered_and_exact(fns, x)
    _lowered_and_exact(lambda a: (torch.amax(-a, 0), torch.amin(-a, 0)), c)


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nextafter_of_reduced_floats(dtype):
    info = torch.finfo(dtype)
    pool = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, info.max, -info.max, info.tiny, 1.0, 2.0, -2.0, 0.5])
    pool = torch.cat([pool, torch.randn(40) * 10, torch.randn(20) * info.tiny]).to(dtype).cuda()
    i, j = torch.randint(0, len(pool), (2, 2001), generator=torch.Generator().manual_seed(4))
    _lowered_and_exact(torch.nextafter, pool[i.cuda()], pool[j.cuda()])


@gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_isclose_and_mvlgamma(dtype):
    x = _floats(dtype, scale=3.0)
    y = (x.double() + torch.randn(x.shape, dtype=torch.float64, device="cuda") * 0.3).to(dtype)
    _lowered_and_exact(lambda a, b: (torch.isclose(a, b, 0.1, 0.3), torch.isclose(a, b, 1e-3, 0.0, True),
                                     torch.isclose(a, b, 0.0, 0.0)), x, y)
    pos = x.abs() + 2.1
    (got, texts), want = _compiled(lambda a: torch.mvlgamma(a, 3), pos), torch.mvlgamma(pos, 3)
    torch.testing.assert_close(got, want, equal_nan=True)  # NB: lgamma in double, eager's in float
    assert texts and not any("extern node" in t for t in texts), texts


@gpu
@pytest.mark.parametrize("name", ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "airy_ai"])
def test_bessel_and_airy_in_float64(name):
    # torch's rational approximations in the library: eager's float64 values (not the exact ones,
    # which differ by up to 3e-7 near x = 5 and Ai's zeros)
    fn = getattr(torch.special, name)
    x = torch.cat([torch.linspace(-30, 30, 6001, dtype=torch.float64), torch.linspace(4.9, 5.1, 401, dtype=torch.float64),
                   torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-300, 103.9, -2.5], dtype=torch.float64)]).cuda()
    (got, texts), want = _compiled(fn, x), fn(x)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-7, atol=1e-12)
    assert texts and not any("extern node" in t for t in texts), texts
