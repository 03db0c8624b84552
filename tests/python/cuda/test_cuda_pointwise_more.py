"""The pointwise ops and reductions added to the registry for issue #22 (deg2rad ... nanmean) and
in-place methods of torch's schemas (x.sin_()), compiled by the CUDA code generator: eager CUDA's
values within the dtype's tolerance, and every call lowered to generated code (no extern call in
the loop IR the CUDA lowering makes)."""
import framefuse
import pytest
import torch
import torch.nn.functional as F
from cuda_util import fp32_and_fresh, gpu, need_nvrtc  # noqa: F401
from framefuse import inductor

pytestmark = pytest.mark.usefixtures("fp32_and_fresh")

UNARY = [torch.deg2rad, torch.rad2deg, torch.sinc, torch.sgn, torch.isposinf, torch.isneginf, torch.logit,
         lambda x: torch.logit(x, eps=0.2), torch.special.entr, lambda x: F.hardshrink(x, 0.3),
         lambda x: F.softshrink(x, 0.4), lambda x: torch.threshold(x, 0.1, -2.0), lambda x: F.hardtanh(x, -0.5, 0.5),
         torch.nansum, lambda x: torch.nanmean(x, 1), lambda x: torch.count_nonzero(x, 0)]
BINARY = [torch.xlogy, torch.special.xlog1py, torch.copysign, torch.logaddexp, torch.heaviside, torch.fmax]


def _compiled(fn, *inputs):
    """fn(*inputs) through framefuse's CUDA inductor, and the loop IR of its graphs."""
    texts = []

    @framefuse.backends.native_graph
    def record(graph, example_inputs):
        texts.append(inductor.loop_ir(graph, "cuda"))
        return framefuse.backends._inductor(graph, example_inputs)

    framefuse.reset()
    # NB: through a Python frame: a builtin (torch.deg2rad) has no bytecode to trace
    return framefuse.compile(lambda *a: fn(*a), backend=record)(*inputs), texts


def _lowered_and_close(fn, *inputs):
    mine, ref = [t.clone() for t in inputs], [t.clone() for t in inputs]
    (got, texts), want = _compiled(fn, *mine), fn(*ref)
    torch.testing.assert_close(got, want, equal_nan=True)
    for a, b in zip(mine, ref):
        torch.testing.assert_close(a, b, equal_nan=True)
    assert texts and not any("extern node" in t for t in texts), texts


def _data(dtype):
    x = torch.randn(37, 65, device="cuda") * 3
    x[0, :5] = torch.tensor([0.0, float("nan"), float("inf"), float("-inf"), 1.0])
    return x.to(dtype)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", UNARY)
def test_unary_and_reductions(fn, dtype):
    _lowered_and_close(fn, _data(dtype))


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn", BINARY)
def test_binary(fn, dtype):
    _lowered_and_close(fn, _data(dtype), _data(dtype).flip(0))


@gpu
def test_prelu_and_inplace_methods():
    _lowered_and_close(F.prelu, _data(torch.float32).view(37, 5, 13), torch.rand(5, device="cuda"))

    def fn(x, y):
        x.sin_()
        y.atan2_(x).exp2_()
        return x * 2, y
    _lowered_and_close(fn, _data(torch.float32), _data(torch.float32))


SPECIAL_UNARY = [torch.digamma, torch.lgamma, torch.erfinv, torch.i0, torch.special.erfcx, torch.special.ndtr,
                 torch.special.ndtri, torch.special.log_ndtr, torch.special.i0e, torch.special.i1, torch.special.i1e,
                 torch.special.modified_bessel_k0, torch.special.modified_bessel_k1, torch.special.scaled_modified_bessel_k0,
                 torch.special.spherical_bessel_j0, lambda x: torch.polygamma(2, x)]
SPECIAL_BINARY = [torch.special.zeta, torch.igamma, torch.igammac, torch.special.chebyshev_polynomial_u,
                  torch.special.shifted_chebyshev_polynomial_w, torch.special.hermite_polynomial_he,
                  torch.special.laguerre_polynomial_l, torch.special.legendre_polynomial_p]


@gpu
@pytest.mark.parametrize("fn", SPECIAL_UNARY)
def test_special_functions_of_the_math_library(fn):
    # float64: the library's double results against eager's within float64's tolerance
    x = torch.rand(33, 17, device="cuda", dtype=torch.float64) * 8 - 2
    _lowered_and_close(fn, x.clamp(-0.99, 0.99) if fn in (torch.erfinv,) else x)


@gpu
@pytest.mark.parametrize("fn", SPECIAL_BINARY)
def test_binary_special_functions_of_the_math_library(fn):
    x = torch.rand(33, 17, device="cuda", dtype=torch.float64) * 4
    n = torch.randint(0, 7, (17,), device="cuda").double()
    _lowered_and_close(fn, x, n + 0.5 if fn in (torch.special.zeta, torch.igamma, torch.igammac) else n)


def _exact(fn, *inputs, nan_bits=True):
    """Lowered (no extern call) and bit for bit eager's: integer results and C's nextafter (NaNs
    as NaNs only, without nan_bits)."""
    (got, texts), want = _compiled(fn, *inputs), fn(*inputs)
    assert got.dtype == want.dtype, (got, want)
    if nan_bits:
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), (got, want)
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.signbit() | got.isnan(), want.signbit() | want.isnan())
    assert texts and not any("extern node" in t for t in texts), texts


INT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def _ints(dtype, seed):
    info = torch.iinfo(dtype)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(max(info.min, -300), min(info.max, 300), (41, 13), generator=g).to(dtype)
    x[0, :2] = torch.tensor([info.min, info.max]).to(dtype)
    return x.cuda()


@gpu
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_shifts_gcd_lcm_and_integer_pow(dtype):
    # shift counts outside [0, bits) included; powi with negative exponents; gcd of the extremes
    a = _ints(dtype, 0)
    counts = (torch.arange(41 * 13, device="cuda").view(41, 13) % (torch.iinfo(dtype).bits + 6) - 3).to(dtype)
    for fn in (torch.bitwise_left_shift, torch.bitwise_right_shift, lambda x, y: x << y, lambda x, y: x >> 3):
        _exact(fn, a, counts)
    b = _ints(dtype, 1) // 5
    for fn in (torch.gcd, torch.lcm, torch.pow):
        _exact(fn, a, b)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nextafter(dtype):
    x = _data(dtype)
    _exact(torch.nextafter, x, x.flip(0))


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_frexp(dtype):
    x = _data(dtype)
    x[1, :3] = torch.tensor([1e-40, -0.0, 0.75]).to(dtype)
    # NB: eager CUDA's frexpf gives 0x7fffffff for every NaN; the library's double frexp keeps the
    # NaN's sign and payload (as eager CPU's does)
    _exact(lambda a: torch.frexp(a).mantissa, x, nan_bits=dtype != torch.float32)
    _exact(lambda a: torch.frexp(a)[1], x)
