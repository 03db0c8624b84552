"""The CPU code generator computes what eager computes, bit for bit (issue 29, items 1-4): outputs
share memory exactly where eager's do, Python numbers keep their exact value, 8/16-bit ints wrap
and f16/bf16 round after every op, and calls eager rejects raise eager's error. Each test runs a
function through framefuse.compile with the inductor backend and asserts the graph was compiled
by the code generator (not handed to the reference runner), unless it says otherwise."""
import operator

import pytest
import torch
import torch.nn.functional as F

import framefuse
from framefuse import _C
from framefuse.inductor import compile_graph

import inductor_util as iu

pytestmark = iu.needs_codegen


def _compile(fn):
    """fn compiled with framefuse's inductor; returns (compiled fn, list of compiled graphs)."""
    seen = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        cg = compile_graph(graph, example_inputs)
        seen.append(cg)
        return cg

    framefuse.reset()
    return framefuse.compile(fn, backend=backend), seen


def _same(a, b):
    """Bit for bit: NaN equals NaN, -0.0 differs from 0.0."""
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.dtype.is_floating_point:
        return torch.equal(a, b)
    both_nan = torch.isnan(a) & torch.isnan(b)
    return bool((both_nan | ((a == b) & (torch.signbit(a) == torch.signbit(b)))).all())


def _check(fn, *inputs, compiled=True):
    """fn's result and its inputs afterwards equal eager's exactly."""
    ref_in, got_in = [t.clone() for t in inputs], [t.clone() for t in inputs]
    want = fn(*ref_in)
    cfn, seen = _compile(fn)
    got = cfn(*got_in)
    assert _same(got, want), (got, want)
    assert _same(got_in, ref_in)
    if compiled:
        assert seen and all(isinstance(cg, _C.inductor.CompiledGraph) for cg in seen), seen
    return got


# ---- 1: outputs that share memory in eager share it here -----------------------------------------

def test_a_write_through_a_view_after_a_graph_break_reaches_its_base():
    def f(a):
        v = a * 3 + 3
        w = v.reshape(2, 2)
        if v.sum() > 0:  # graph break: v and w are both outputs of the first graph
            pass
        w.zero_()
        return v

    _check(f, torch.ones(4), compiled=False)  # the second graph mutates aliased inputs: reference runner
    cfn, seen = _compile(f)
    assert torch.equal(cfn(torch.ones(4)), torch.zeros(4))
    assert isinstance(seen[0], _C.inductor.CompiledGraph)


def test_view_outputs_of_one_intermediate_are_one_tensor():
    def f(a):
        v = a * 3 + 3
        return v, v.view(2, 2), v.t() if v.dim() == 2 else v[1:]

    v, w, s = _check(f, torch.arange(4.0))
    w.add_(1)
    assert torch.equal(v, w.view(4)) and torch.equal(s, v[1:])


def test_outputs_share_memory_only_where_eager_does():
    # floor of an int tensor and x.reshape of a non-viewable layout are new tensors in eager.
    def f(x, y):
        return torch.floor(x), y.t().reshape(6), x.to(torch.int64)

    x, y = torch.arange(4), torch.arange(6.0).view(2, 3)
    _check(f, x, y)
    a, b, c = _compile(f)[0](x, y)
    a.add_(10)
    b.add_(10)
    assert torch.equal(x, torch.arange(4)) and torch.equal(y, torch.arange(6.0).view(2, 3))
    c.add_(1)  # x.to(x.dtype) is x itself
    assert torch.equal(x, torch.arange(1, 5))


def test_a_clone_of_a_graph_input_is_new_memory_computed_by_a_kernel():
    # (It had been taken for a possible view of the input, and the graph ran on eager ops.)
    def f(x):
        return x.clone(), torch.clone(x.t())

    x = torch.arange(6.0).view(2, 3)
    a, b = _check(f, x)
    a.add_(1)
    b.add_(1)
    assert torch.equal(x, torch.arange(6.0).view(2, 3))
    assert b.stride() == x.t().clone().stride()


def test_view_of_a_graph_input_stays_a_view():
    def f(x):
        return x.view(2, 3).transpose(0, 1), x * 2

    x = torch.arange(6.0)
    _check(f, x)
    t, _ = _compile(f)[0](x)
    t.zero_()
    assert torch.equal(x, torch.zeros(6))


# ---- 3: an epilogue written in place never shows through a view of the extern result ---------

def test_view_of_a_matmul_output_keeps_the_product():
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    _check(lambda a, b: ((a @ b) * 2, (a @ b)[0]), a, b)

    def f(a, b):
        v = a @ b
        return v * 2, v[0]

    _check(f, a, b)


def test_view_of_a_linear_output_keeps_the_product():
    def f(a, w):
        y = F.linear(a, w)
        return y + 1, y[:, :2]

    _check(f, torch.randn(4, 5), torch.randn(6, 5))


# ---- 2: Python numbers keep their exact value ----------------------------------------------------

@pytest.mark.parametrize("fn", [lambda x: x + (2**62 + 1), lambda x: x * (2**53 + 1), lambda x: x + (2**63 - 1),
                                lambda x: x - (-2**63), lambda x: x * -(2**63), lambda x: (x + 2**40) * 2**30])
def test_int64_scalars_are_exact_and_wrap(fn):
    _check(fn, torch.tensor([1, 2, 3, -7, 2**62]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", [lambda x: x * (2**63 - 1), lambda x: x + (2**60 + 2**36 + 1), lambda x: x * 0.1,
                                lambda x: x + 0.1, lambda x: x - 1e-8, lambda x: x / 3.0, lambda x: 3.0 / x,
                                lambda x: 0.1 * x, lambda x: x * 1.0000001])
def test_float_scalars_round_as_in_eager(fn, dtype):
    _check(fn, (torch.randn(64) * 3).to(dtype))


def test_float64_constants_that_print_alike_are_different_kernels():
    # The CPU object cache is keyed by the loop IR's text: 9 significant digits made these one.
    x = torch.randn(16, dtype=torch.float64)
    _check(lambda x: x * 0.1, x)
    _check(lambda x: x * 0.10000000001, x)


# ---- 4: integer and bool semantics -------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64])
@pytest.mark.parametrize("zero", [-0.0, 0.0])
def test_division_by_a_zero_then_a_clamp(dtype, zero):
    # LLVM 14 folded `uitofp(u8) / -0.0 < -2.0` to false: hardtanh kept -inf (codegen fuzz case 11064237).
    x = torch.tensor([3, 0, 7, 200], dtype=dtype)
    _check(lambda x: (F.hardtanh(torch.div(x, zero), -2.0, 3.0), torch.div(x, zero) < -2.0, x / zero), x)


def test_uint8_wraps_before_a_float_conversion():
    got = _check(lambda x: (x + x) * 1.0, torch.tensor([200, 100, 7], dtype=torch.uint8))
    assert got.tolist() == [144.0, 200.0, 14.0]


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16])
@pytest.mark.parametrize("fn", [lambda x: (x + x) * 1.0, lambda x: (x * 3 - 1).float(), lambda x: x + 300,
                                lambda x: x < 300, lambda x: x == 356, lambda x: (-x).to(torch.int32),
                                lambda x: x.to(torch.int64) * 1000, lambda x: (x * 100).sum()])
def test_small_ints_wrap_after_every_op(fn, dtype):
    info = torch.iinfo(dtype)
    _check(fn, torch.tensor([info.min, info.max, 0, 1, -1 if info.min < 0 else 2, 77], dtype=dtype))


def test_f16_and_bf16_round_after_every_op():
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(257).to(dtype)
        _check(lambda x: (x * 3 + 1) * x - 0.3, x)
        _check(lambda x: torch.where(x > 0, x * 1.1, x / 7), x)


@pytest.mark.parametrize("fn", [lambda a: a - 1, lambda a: a.abs(), lambda a: a.floor(), lambda a: -a,
                                lambda a: a - a, lambda a: 1 - a])
def test_bool_ops_eager_rejects_raise_its_error(fn):
    a = torch.tensor([True, False])
    with pytest.raises(Exception) as want:
        fn(a)
    cfn, _ = _compile(fn)
    with pytest.raises(type(want.value)):
        cfn(a)


# ---- found by the codegen fuzzer (tests/fuzz): each a minimal case ------------------------------

def test_no_function_wide_fast_math_in_kernels_with_a_min_reduction():
    # 0.0 - x became -x under no-signed-zeros-fp-math: -0.0 where eager gives 0.0.
    got = _check(lambda x: 0.0 - torch.argmin(x, 1, keepdim=True), torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64))
    assert not torch.signbit(got).any()
    _check(lambda x: (torch.amax(x, 1, keepdim=True), x - x), torch.tensor([[1.0, float("inf"), float("nan")]]))


def test_in_place_ops_compute_in_the_promoted_dtype():
    def f(x, y):
        z = x * 2  # NB: a fresh intermediate: in-place ops on inputs run on the reference runner on torch 1.13
        z *= y
        return z

    def g(x, y):
        return (x * 2).add_(y)

    def h(x, y):
        x *= y
        return x

    # NB: many elements: rounding y to float32 first differs only now and then (double rounding)
    x, y = torch.randn(1 << 16).to(torch.bfloat16), torch.randn(1 << 16, dtype=torch.float64) * 3.3
    _check(f, x, y)
    _check(g, x, y)
    bumps = hasattr(torch.autograd, "graph") and hasattr(torch.autograd.graph, "increment_version")
    _check(h, x, y, compiled=bumps)  # torch 1.13 runs in-place ops on inputs on the reference runner


@pytest.mark.parametrize("fn", [
    lambda x: torch.nn.functional.hardsigmoid(x),
    lambda x: torch.sign(x),
    lambda x: torch.clamp(x, float("nan"), 1.0),
    lambda x: torch.clamp(x, min=float("nan")),
    lambda x: torch.clamp(x, torch.tensor(float("nan")), torch.tensor(2.0)),
    lambda x: torch.clamp_min(x, 0.5),
])
def test_pointwise_formulas_are_eagers(fn):
    x = torch.tensor([-4.0, -3.0, -1.0, -0.0, 0.0, 0.3, 1.7, 3.0, 5.0, float("nan"), float("inf"), -float("inf")] * 3)
    _check(fn, x)


def test_lerp_computes_from_the_nearer_end():
    # start + 1.0 * (end - start) is not end in floats; eager's end - (end - start) * 0.0 is.
    start, end = torch.tensor([3.0, 1e8, -7.1, 0.3]), torch.tensor([0.1, 3.3, 1e-3, 1.9])
    got = _check(lambda a, b: torch.lerp(a, b, 1.0), start, end)
    assert torch.equal(got, end)


# Eager's CPU kernels for `a + alpha * b` round once (a fused multiply-add) where its CPU capability
# is AVX2 or AVX-512, and twice on its default kernels: the code generator follows the running torch.
MULTIPLY_ADDS = [
    lambda a, b, w: torch.add(a, b, alpha=0.3),
    lambda a, b, w: torch.sub(a, b, alpha=-1.7),
    lambda a, b, w: torch.rsub(a, b, alpha=0.3),
    lambda a, b, w: a.clone().add_(b, alpha=2.5),
    lambda a, b, w: torch.addcmul(a, b, w, value=0.3),
    lambda a, b, w: torch.addcmul(a, b, w),
    lambda a, b, w: torch.lerp(a, b, 0.3),
    lambda a, b, w: torch.lerp(a, b, 0.7),
    lambda a, b, w: torch.lerp(a, b, w),
]


def _multiply_add_operands(dtype, n=1003):
    g = torch.Generator().manual_seed(7)
    return [(torch.rand(n, generator=g) * 4 - 2).to(dtype), torch.randn(n, generator=g).to(dtype),
            torch.rand(n, generator=g).to(dtype)]


@pytest.mark.parametrize("fn", MULTIPLY_ADDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_multiply_adds_round_as_eagers_kernels(fn, dtype):
    # NB: 1003 elements: eager's vector body and its scalar tail both (they agree for these)
    _check(fn, *_multiply_add_operands(dtype))


def test_multiply_adds_follow_eagers_default_kernels():
    # The same calls in a process whose eager runs its default (non-fused) kernels.
    import subprocess
    import sys
    code = (
        "import sys; sys.path[:0] = " + repr(sys.path) + "\n"
        "import torch, test_inductor_exact as t\n"
        "for dt in (torch.float32, torch.float64):\n"
        "    for fn in t.MULTIPLY_ADDS:\n"
        "        t._check(fn, *t._multiply_add_operands(dt))\n"
        "print('ok')\n")
    env = dict(__import__("os").environ, ATEN_CPU_CAPABILITY="default")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_exp2_is_accurate_for_large_arguments():
    x = torch.linspace(-120.0, 120.0, 999, dtype=torch.float32)
    cfn, _ = _compile(lambda x: torch.exp2(x))
    torch.testing.assert_close(cfn(x), torch.exp2(x), rtol=3e-7, atol=0)


def test_f16_trunc_division_rounds_the_quotient_first():
    x = torch.tensor([-3.0, 1.5, 2.0, 0.7, 5952.0], dtype=torch.float16)
    y = torch.tensor([0.7, 0.3, 0.11, 0.13, 1.0009765625], dtype=torch.float16)
    _check(lambda x, y: torch.div(x, y, rounding_mode="trunc"), x, y)


@pytest.mark.parametrize("e", [3, -2, 2, -1])
def test_bf16_integer_powers_round_like_eager(e):
    _check(lambda x: x ** e, (torch.randn(257) * 4).to(torch.bfloat16))


def test_reshape_of_a_zero_dim_input_is_a_view():
    _check(lambda x: x.reshape(-1), torch.tensor(5))
    x = torch.tensor(5)
    _compile(lambda x: x.reshape(-1))[0](x).add_(1)
    assert x.item() == 6


@pytest.mark.parametrize("fn", [lambda x: x.masked_fill(x > 0, 300), lambda x: torch.clamp(x, 300),
                                lambda x: torch.where(x > 0, x, 300), lambda x: x.masked_fill(x > 0, -2**63)])
def test_scalars_that_do_not_fit_raise_like_eager(fn):
    x = torch.tensor([1, -2, 3], dtype=torch.int8)
    with pytest.raises(RuntimeError):
        fn(x)
    cfn, _ = _compile(fn)
    with pytest.raises(RuntimeError, match="without overflow"):
        cfn(x)


def test_logical_ops_convert_to_the_common_dtype_first():
    got = _check(lambda x: torch.logical_and(x, torch.tensor(256)), torch.tensor([1, 2, 0], dtype=torch.uint8))
    assert not got.any()


# ---- the CUDA renderer: the same exactness, compile-checked by NVRTC (no GPU needed) ------------

def _cuda_source(build, inputs):
    from cuda_util import need_nvrtc
    from framefuse import cuda
    need_nvrtc()
    g = iu.build(build, inputs)
    return cuda.compile_graph(g, arch="sm_90").source


def test_cuda_source_narrows_small_ints_and_keeps_int64_constants():
    src = _cuda_source(lambda g, x: g.call(operator.mul, g.call(operator.add, x, x), 1.0),
                       [torch.zeros(64, dtype=torch.uint8)])
    assert "(unsigned char)((int)((unsigned)" in src  # x + x wraps to uint8 before the float multiply
    src = _cuda_source(lambda g, x: g.call(operator.add, x, 2**62 + 1), [torch.zeros(64, dtype=torch.int64)])
    assert "4611686018427387905LL" in src and "(unsigned long long)" in src


def test_cuda_source_rounds_f16_results_between_ops():
    src = _cuda_source(lambda g, x: g.call(operator.mul, g.call(operator.add, x, 0.1), 3.0),
                       [torch.zeros(64, dtype=torch.float16)])
    assert "ff_f16_to_f32(ff_f32_to_f16(" in src


def test_a_kernel_llvm_14_cannot_select_is_compiled_without_avx512():
    # LLVM 14's x86 backend aborted the process on this comparison of a stride-0 operand
    # ("Cannot select: v16i8 = X86ISD::VBROADCAST" of an AVX-512 mask).
    x = torch.randn(1, 33, 1, 5).expand(33, 33, 16, 5)
    _check(lambda x: torch.sign(x) > 0, x)


def test_a_dead_reduction_fused_next_to_a_live_loop_is_dropped():
    # argmin's result unused: its reduction stayed in the fused row kernel, wasted work, and
    # NVRTC 13.0 (-Ofast-compile=min) crashed the process compiling it.
    def build(g, x, y):
        g.call(torch.argmin, y, -1)
        return g.call(operator.add, g.call(operator.mul, y, 3), x)

    x, y = torch.arange(48).reshape(1, 8, 2, 3), torch.randn(1, 8, 2, 3).bfloat16()
    cg = iu.check(build, [x, y])
    assert "min(" not in cg.loop_ir, cg.loop_ir
    src = _cuda_source(build, [x, y])
    assert "ff_comb<3>" not in src


def test_log2_and_log10_of_exact_powers_are_exact():
    x = torch.tensor([1, 2, 8, 1024, 2**20, 2**30], dtype=torch.int32)
    got = _compile(lambda x: torch.log2(x))[0](x)
    assert got.tolist() == [0.0, 1.0, 3.0, 10.0, 20.0, 30.0]
    got = _compile(lambda x: torch.log10(x))[0](torch.tensor([1.0, 10.0, 1000.0, 1e6]))
    assert got.tolist() == [0.0, 1.0, 3.0, 6.0]


@pytest.mark.parametrize("n", [20, 28, 37, 78])
def test_argmax_of_vector_math_finds_the_max_in_a_loops_remainder(n):
    # exp's vector and scalar variants round differently: the max loop and the compare loop saw
    # two values of exp(x) for the last elements, and no element equalled the max.
    torch.manual_seed(n)
    x = torch.randn(64, n) * 3
    x[:, -1] = x.max(1).values + 0.001
    _check(lambda x: torch.argmax(torch.exp(x), 1), x)


def test_softmax_of_vector_math_is_one_at_a_dominant_element():
    v = torch.tensor([148.3132, 0.9, 7.2891, 19.9855, 19.9855, 2.6183, 54.4981, 2.6183]).log().reshape(8, 1, 1).expand(8, 7, 3)
    got = _compile(lambda v: torch.softmax(torch.exp(v) - 0.1, 0))[0](v.contiguous())
    assert torch.equal(got[0], torch.ones(7, 3))


@pytest.mark.parametrize("fn", [lambda x: x.masked_fill(x > 0, -0.0), lambda x: torch.where(x < 0, 0.0, x),
                                lambda x: torch.where(x > 0, -0.0, x)])
def test_selects_against_zero_keep_the_sign_of_zero(fn):
    # LLVM 14's InstCombine turned select(x > 0.0, -0.0, x) into select(x >= 0.0, -0.0, x).
    _check(fn, torch.tensor([1.0, -1.0, 0.0, -0.0, 2.5] * 20, dtype=torch.float64))


# ---- expression size: a rule that reads its operand several times --------------------------------

def test_a_chain_of_rules_that_reread_their_operand_stays_linear():
    # leaky_relu reads its operand three times (x < 0 ? x * a : x) and square twice: inlined whole,
    # 14 levels are 6**14 loop IR nodes per element (compiling 9 levels took seconds, 15 never ended).
    def f(y):
        for _ in range(14):
            y = F.leaky_relu(y.square(), 0.5) * 0.5
        return y

    seen_ir = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        seen_ir.append(framefuse.inductor.loop_ir(graph))
        return compile_graph(graph, example_inputs)

    framefuse.reset()
    x = torch.tensor([0.5, -1.0, 1.25, -0.75, 0.0, 1.0])
    got = framefuse.compile(f, backend=backend)(x.clone())
    assert _same(got, f(x.clone()))
    assert len(seen_ir) == 1 and len(seen_ir[0]) < 20_000, len(seen_ir[0])


def test_a_graph_that_makes_a_tensor_requiring_grad_keeps_autograd():
    # Kernels record no autograd graph: compile_graph (as a callable backend) runs such a graph on
    # torch's ops while grad mode is on (Dynamo's test_intermediate_leaf_requires_grad).
    def f(x):
        leaf = torch.ones(2, requires_grad=True)
        return leaf, leaf * 2 + x.sum()

    framefuse.reset()
    x = torch.arange(4, dtype=torch.float32).reshape(2, 2)
    leaf, out = framefuse.compile(f, backend=compile_graph)(x)
    assert leaf.requires_grad and out.requires_grad
    out.sum().backward()
    assert torch.equal(leaf.grad, torch.full((2,), 2.0))


def test_a_sparse_intermediate_is_not_captured():
    # Graphs hold dense, strided tensors: a sparse one (no strides, no data pointer) breaks the
    # graph instead of reaching a kernel (Dynamo's test_sparse_output_inductor_should_break).
    def f(x):
        return x.to_sparse() * 2

    framefuse.reset()
    x = torch.randn(4, 4)
    got = framefuse.compile(f, backend="inductor")(x)
    assert got.is_sparse and torch.equal(got.to_dense(), f(x).to_dense())


def test_std_of_huge_float32_values_accumulates_as_eager():
    # Eager CPU's Welford accumulates float32 in double: a row near 1e38 has a finite std there
    # (the float sum of squares overflowed to inf - inf = nan; codegen fuzz case 7050013).
    x = torch.tensor([[3e38, -3e38, 1e38], [1.0, 2.0, 4.0]])
    _check(lambda x: (torch.std(x), torch.var(x, 1), torch.std(x, 0) / -1), x)


@pytest.mark.skipif(torch.__version__ < "2", reason="torch 1.13 raises for pow of a bool tensor")
def test_bool_tensor_to_a_bool_power_stays_bool():
    # torch's own meta kernel says int64; eager gives bool (codegen fuzz case 7018561).
    x = torch.tensor([True, False, True])
    _check(lambda x: ((x ** False).unsqueeze(-1), x ** True, torch.pow(x, False) * 2), x)


@pytest.mark.parametrize("fn", [lambda x: x.abs_(), lambda x: x.acosh_(), lambda x: torch.abs_(x),
                                lambda x: x.addmv_(torch.ones(x.shape[0], 3), torch.full((3,), 0.5))],
                         ids=["Tensor.abs_", "Tensor.acosh_", "torch.abs_", "Tensor.addmv_"])
def test_in_place_ops_without_a_lowering_on_a_graph_input(fn):
    # Their out-of-place form (`acosh_` -> `acosh`, an extern call where it has no lowering either)
    # computes the value, and a kernel stores it into the caller's tensor, which is returned itself.
    # (They had run on the reference runner: "no out-of-place form known".)
    x = torch.rand(6) + 1.5
    bumps = hasattr(torch.autograd, "graph") and hasattr(torch.autograd.graph, "increment_version")
    _check(fn, x, compiled=bumps)  # torch 1.13 runs in-place ops on inputs on the reference runner
    y = x.clone()
    version = y._version
    assert _compile(fn)[0](y) is y and y._version > version
