"""The codegen differential fuzzer (tests/fuzz/codegen_fuzz.py): a fixed-seed budget of random
programs must agree with eager, and the fuzzer itself must notice what it is there to notice.
Local runs of any size: `python tests/fuzz/codegen_fuzz.py --count 100000`."""
import os
import sys

import pytest
import torch

import framefuse

import inductor_util as iu
from cuda_util import gpu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fuzz"))
import codegen_fuzz as cf  # noqa: E402

# NB: the CPU tests need the CPU code generator (LLVM); the CUDA ones only NVRTC or a GPU.

# NB: about 30 ms a case on one core: the CPU budget stays near a minute on the CI machines.
CPU_CASES = int(os.environ.get("FRAMEFUSE_FUZZ_CASES", "1500"))


@pytest.fixture()
def fuzz_config():
    # NB: cf.run sets the harness's mode (DYNAMIC, VIA) for the tests after it too: restored here
    old = framefuse.config.raise_on_internal_error, framefuse.config.disk_cache, cf.DYNAMIC, cf.VIA
    yield
    framefuse.config.raise_on_internal_error, framefuse.config.disk_cache, cf.DYNAMIC, cf.VIA = old
    framefuse.reset()


def _run(count, seed, device, dynamic=None):
    lines = []
    stats, failures, ops = cf.run(count, seed=seed, device=device, report=lines.append, dynamic=dynamic)
    assert not failures, "\n\n".join(lines)
    return stats, ops


@iu.needs_codegen
def test_fixed_budget_on_cpu_agrees_with_eager(fuzz_config):
    stats, ops = _run(CPU_CASES, seed=29, device="cpu")
    # The budget must exercise the code generator, not only eager fallbacks and errors.
    assert stats["compiled"] >= 0.7 * stats["cases"], stats
    assert stats["raised like eager"] >= 0.05 * stats["cases"], stats
    assert len(ops) >= 0.9 * len(cf.fuzz_ops.OPS), sorted(set(o.name for o in cf.fuzz_ops.OPS) - set(ops))


@iu.needs_codegen
def test_fixed_budget_with_symbolic_sizes_agrees_with_eager(fuzz_config):
    # compile(dynamic=True): every case is typed by the symbolic meta rules (and guarded) and
    # compiled once at other sizes (every size >= 2 grown by one), then checked at its own: the
    # kernels that take sizes as arguments run at sizes they were not traced with. A wrong symbolic
    # rule, or a traced size read as a constant, gives a wrong layout or result here.
    from framefuse import backends  # noqa: PLC0415
    before = backends.symbolic_compiles()
    stats, _ = _run(CPU_CASES // 3, seed=31, device="cpu", dynamic=True)
    # NB: `compiled` counts graphs with symbolic sizes only (those whose sizes are all 0 or 1 are static).
    assert stats["compiled"] >= 0.6 * stats["cases"], stats
    assert backends.symbolic_compiles() - before >= 0.5 * stats["cases"], stats


def test_generated_cuda_source_compiles_for_random_graphs(fuzz_config):
    from cuda_util import need_nvrtc  # noqa: PLC0415
    need_nvrtc()
    stats, _ = _run(150, seed=29, device="cuda-compile")
    assert stats["cases"] == 150


@gpu
def test_fixed_budget_on_cuda_agrees_with_eager(fuzz_config):
    torch.backends.cuda.matmul.allow_tf32 = False
    stats, _ = _run(1000, seed=29, device="cuda")   # asserts every case agrees with eager
    # NB: no share of compiled cases here: the fuzzer's `compiled` flag names the CPU runtime's class.
    assert stats["cases"] == 1000, stats


# ---- the fuzzer's own checks --------------------------------------------------------------------

@iu.needs_codegen
def test_cases_are_reproducible_from_their_seed():
    a, b = cf.generate(12345), cf.generate(12345)
    assert a.source() == b.source() and a.inputs == b.inputs
    ta, tb = cf.make_input(a.inputs[0], 7, "cpu"), cf.make_input(b.inputs[0], 7, "cpu")
    assert torch.equal(ta.nan_to_num(), tb.nan_to_num()) and ta.stride() == tb.stride()


def test_cancellation_of_approximate_values_is_not_drawn():
    """cos(x) - 1 for a small x: eager's cos may round right there while a kernel's is an ulp away,
    and the subtraction makes that ulp many of the result's (codegen fuzz seed 7, three cases)."""
    add = next(op for op in cf.fuzz_ops.OPS if op.name == "sub")
    x = torch.tensor([1e-3, 0.5, 2.0])
    c = torch.cos(x)
    one = torch.ones(3)
    assert cf._cancellation(add, ["v0", "x1"], [c, one], c - one, approx={"v0"})
    assert not cf._cancellation(add, ["v0", "x1"], [c, one], c - one, approx=set())   # exact: compared bit for bit
    far = torch.tensor([2.0, 2.5, 3.0])
    assert not cf._cancellation(add, ["v0", "x1"], [c, -far], c + far, approx={"v0"})
    mul = next(op for op in cf.fuzz_ops.OPS if op.name == "mul")
    assert not cf._cancellation(mul, ["v0", "x1"], [c, one * 1e-3], c * 1e-3, approx={"v0"})


def test_reductions_that_overflow_in_some_order_are_not_drawn():
    """prod of [3e38, 7, 0, ...] is -0.0 in eager's order and NaN in a sequential one (codegen fuzz
    case 11020410): which order overflows is not a property of the result."""
    t = torch.tensor([3e38, 7.0, 0.0, -0.5])
    assert cf._may_overflow("prod", t) and not cf._may_overflow("prod", t.to(torch.float64))
    assert not cf._may_overflow("prod", torch.tensor([2.0, -3.0, 0.0, float("inf")]))   # inf * 0 is NaN in any order
    assert cf._may_overflow("sum", torch.tensor([3e38, 3e38, -3e38])) and not cf._may_overflow("sum", torch.tensor([3e38, -1.0]))


def test_float32_values_cast_up_are_compared_at_float32():
    """log2(softplus(cos(x))).to(torch.float64): an ulp of float32 apart is close (case 11022640)."""
    w = torch.tensor([-0.38863664865493774, 0.5], dtype=torch.float32).to(torch.float64)
    g = torch.tensor([-0.38863661885261536, 0.5], dtype=torch.float32).to(torch.float64)
    assert cf._computed_eps(w) == 2.0**-23
    cf._check_close("v", g, w, torch.zeros(2, dtype=torch.float64))
    with pytest.raises(cf.Mismatch):   # a float64 computation is still held to float64's ulps
        cf._check_close("v", w + 1e-12, w + torch.tensor([1e-9, 0.0], dtype=torch.float64), torch.zeros(2, dtype=torch.float64))


def test_gelus_tail_gets_the_allowance_of_a_sum():
    """gelu(x, approximate='tanh') at x = -3.4: an ulp of tanh near -1 is 1.2e-4 of the result;
    eager's error there was one lucky draw (case 11039610)."""
    assert {"gelu", "gelu_tanh"} <= cf.fuzz_ops.TAIL_CANCELS
    w = torch.tensor([-0.0008377612684853375, 3.4])
    g = torch.tensor([-0.000837659346871078, 3.4])
    err = torch.tensor([6.28e-9, 0.0], dtype=torch.float64)
    with pytest.raises(cf.Mismatch):
        cf._check_close("v3", g, w, err)
    cf._check_close("v3", g, w, err, summed=True)


@iu.needs_codegen
def test_inputs_have_the_layout_they_claim():
    for layout in cf.LAYOUTS:
        t = cf.make_input(cf.InputSpec((4, 5, 6), torch.float32, layout), 3, "cpu")
        assert t.shape == (4, 5, 6)
        if layout == "contiguous":
            assert t.is_contiguous()
        if layout in ("transposed", "sliced", "expanded"):
            assert not t.is_contiguous(), layout
        if layout == "offset":
            assert t.storage_offset() == 3


@iu.needs_codegen
def test_exact_comparison_sees_one_ulp_and_the_sign_of_zero():
    x = torch.tensor([1.0, 0.0, float("nan")])
    cf._check_exact("x", x.clone(), x)
    with pytest.raises(cf.Mismatch):
        cf._check_exact("x", torch.tensor([1.0000001, 0.0, float("nan")]), x)
    with pytest.raises(cf.Mismatch):
        cf._check_exact("x", torch.tensor([1.0, -0.0, float("nan")]), x)
    cf._check_exact("x", torch.tensor([1.0, -0.0, float("nan")]), x, signed_zeros=False)
    with pytest.raises(cf.Mismatch):
        cf._check_exact("x", x.to(torch.float64), x)


@iu.needs_codegen
def test_approximate_comparison_allows_ulps_but_not_a_wrong_result():
    w = torch.linspace(-3, 3, 101).exp()
    cf._check_close("x", w * (1 + 4e-7), w, torch.zeros_like(w, dtype=torch.float64))
    with pytest.raises(cf.Mismatch):
        cf._check_close("x", w * 1.001, w, torch.zeros_like(w, dtype=torch.float64))
    # eager's own error (cancellation) widens the tolerance where it is large
    err = torch.full_like(w, 1e-3, dtype=torch.float64)
    cf._check_close("x", w + 1e-2, w, err)


@iu.needs_codegen
def test_a_wrong_backend_is_caught():
    # A backend that adds one ulp to every float output must fail the differential check.
    case = cf.Case(0, "cpu", [cf.InputSpec((8,), torch.float32, "contiguous")],
                   [cf.Stmt("v0 = x0 * 3", "mul", [])], ["v0"])

    @framefuse.backends.native_graph
    def wrong(graph, example_inputs):
        run = graph.run

        def call(*args):
            return tuple(torch.nextafter(o, torch.full_like(o, float("inf"))) for o in run(*args))
        return call

    old = cf._backend
    cf._backend = wrong
    try:
        assert cf.run_case(case).status == "fail"
    finally:
        cf._backend = old
    assert cf.run_case(case).status == "ok"


@iu.needs_codegen
def test_minimizer_keeps_the_failure_and_drops_the_rest():
    case = cf.Case(0, "cpu", [cf.InputSpec((8,), torch.int64, "contiguous")],
                   [cf.Stmt("v0 = x0 + 1", "add", []), cf.Stmt("v1 = v0 * 2", "mul", []),
                    cf.Stmt("v2 = x0 - 5", "sub", [])], ["v1", "v2"])
    calls = []

    def fake_run(c):
        calls.append(c)
        failing = any("x0 - 5" in s.text for s in c.stmts) and "v2" in c.outs
        return cf.Outcome("fail" if failing else "ok", "value", "", True)

    old = cf.run_case
    cf.run_case = fake_run
    try:
        small = cf.minimize(case, cf.Outcome("fail", "value", "", True))
    finally:
        cf.run_case = old
    assert [s.text for s in small.stmts] == ["v2 = x0 - 5"] and small.outs == ["v2"]
