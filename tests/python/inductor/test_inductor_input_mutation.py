"""In-place ops on graph inputs compiled by the CPU code generator (Lowerer::write_input): the
kernels store into the caller's tensor, the tensor's version counter moves as eager's does, and
whatever the kernels could get wrong (inputs sharing memory, expanded or inference tensors, reads of
the old value) runs on the reference runner with eager's result or error."""
import operator

import pytest
import torch
import torch.nn.functional as F

import framefuse
from framefuse import _C

import inductor_util as iu

pytestmark = iu.needs_codegen

# torch 1.13 has no public version bump: there such graphs stay on the reference runner.
BUMPS = hasattr(torch.autograd, "graph") and hasattr(torch.autograd.graph, "increment_version")


def _compiled(fn, inputs):
    g = iu.build(fn, inputs)
    return g, iu.compile_graph(g, inputs)


def _run_both(fn, inputs):
    """Runs fn's graph compiled and on the reference runner, each on its own clones of `inputs`;
    asserts outputs and the inputs afterwards are equal; returns the compiled graph."""
    g, cg = _compiled(fn, inputs)
    assert isinstance(cg, _C.inductor.CompiledGraph) == BUMPS
    mine, ref = [t.clone() for t in inputs], [t.clone() for t in inputs]
    got, want = cg(*mine), g.run(*ref)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    for a, b in zip(mine, ref):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    return cg


def test_copy_into_an_input_writes_the_callers_tensor():
    x, out = torch.randn(1000), torch.zeros(1000)
    cg = _run_both(lambda g, x, o: g.call(torch.Tensor.copy_, o, x), [x, out])
    if BUMPS:
        assert "Input #1 mutated" in cg.loop_ir and cg.num_externs == 0
        o = torch.zeros(1000)
        (r,) = cg(x, o)
        assert r is o and torch.equal(o, x)


@pytest.mark.parametrize("src_dtype,dst_dtype", [(torch.float64, torch.float32), (torch.float32, torch.int64),
                                                 (torch.int32, torch.float16), (torch.float32, torch.bool)])
def test_copy_converts_and_broadcasts_like_eager(src_dtype, dst_dtype):
    src = (torch.randn(1, 37) * 5).to(src_dtype)
    dst = torch.zeros(6, 37, dtype=dst_dtype)
    _run_both(lambda g, s, d: g.call(torch.Tensor.copy_, d, s), [src, dst])


def test_chained_writes_then_reads_see_the_new_value():
    def fn(g, x, y):
        g.call(torch.Tensor.add_, x, y)
        g.call(torch.Tensor.mul_, x, 2.0)
        return g.call(torch.mul, x, 3.0), g.call(torch.sum, x)
    _run_both(fn, [torch.randn(64, 33), torch.randn(33)])


def test_result_of_an_earlier_write_is_an_alias_of_the_input():
    def fn(g, x):
        a = g.call(torch.Tensor.add_, x, 1.0)
        g.call(torch.Tensor.mul_, a, 2.0)  # through the alias
        return g.call(torch.neg, x), a  # a reads as x does: both writes applied
    _run_both(fn, [torch.randn(8, 8)])


@pytest.mark.parametrize("case", ["fill", "fill_tensor", "zero", "masked_fill", "clamp", "relu_", "F.relu", "iadd",
                                  "sigmoid", "div"])
def test_in_place_ops_on_inputs_equal_eager(case):
    fns = {
        "fill": lambda g, x, y, m: g.call(torch.Tensor.fill_, x, 2.5),
        "fill_tensor": lambda g, x, y, m: g.call(torch.Tensor.fill_, x, g.call(torch.sum, y)),
        "zero": lambda g, x, y, m: g.call(torch.Tensor.zero_, x),
        "masked_fill": lambda g, x, y, m: g.call(torch.Tensor.masked_fill_, x, m, -1.0),
        "clamp": lambda g, x, y, m: g.call(torch.Tensor.clamp_, x, -0.5, 0.5),
        "relu_": lambda g, x, y, m: g.call(torch.relu_, x),
        "F.relu": lambda g, x, y, m: g.call(F.relu, x, inplace=True),
        "iadd": lambda g, x, y, m: g.call(operator.iadd, x, y),
        "sigmoid": lambda g, x, y, m: g.call(torch.Tensor.sigmoid_, x),
        "div": lambda g, x, y, m: g.call(torch.Tensor.div_, x, y),
    }
    x, y = torch.randn(16, 24), torch.rand(24) + 0.5
    _run_both(fns[case], [x, y, x > 0.3])


def test_strided_input_is_written_through_its_strides():
    base = torch.randn(40, 30)

    def fn(g, x, y):
        return g.call(torch.Tensor.add_, x, y)
    x = base.t()[::2]  # non-contiguous view of a larger tensor
    y = torch.randn(x.shape)
    g, cg = _compiled(fn, [x, y])
    assert isinstance(cg, _C.inductor.CompiledGraph) == BUMPS
    mine, ref = base.clone(), base.clone()
    cg(mine.t()[::2], y)
    g.run(ref.t()[::2], y)
    assert torch.equal(mine, ref)  # the elements outside the view are untouched


def test_reading_the_old_value_runs_on_the_reference_runner():
    def fn(g, x):
        old = g.call(torch.mul, x, 2.0)
        g.call(torch.Tensor.add_, x, 1.0)
        return g.call(torch.add, old, x)
    g, cg = _compiled(fn, [torch.randn(10)])
    assert not isinstance(cg, _C.inductor.CompiledGraph)
    a = torch.randn(10)
    b = a.clone()
    torch.testing.assert_close(cg(a)[0], g.run(b)[0])
    assert torch.equal(a, b)


def test_the_same_tensor_twice_runs_on_the_reference_runner():
    def fn(g, d, s):
        return g.call(torch.Tensor.add_, d, s)
    g, cg = _compiled(fn, [torch.randn(100), torch.randn(100)])
    y = torch.randn(100)
    mine, ref = y.clone(), y.clone()
    cg(mine, mine)
    g.run(ref, ref)
    assert torch.equal(mine, ref) and torch.equal(mine, y * 2)


@pytest.mark.parametrize("op", ["copy_", "add_"])
def test_partial_overlap_raises_like_eager(op):
    method = getattr(torch.Tensor, op)
    g, cg = _compiled(lambda g, d, s: g.call(method, d, s), [torch.randn(100), torch.randn(100)])
    x = torch.randn(101)
    with pytest.raises(RuntimeError) as eager:
        method(x[1:], x[:-1])
    with pytest.raises(RuntimeError) as mine:
        cg(x[1:], x[:-1])  # kernels would read values they already wrote
    assert str(mine.value).split("\n")[0] == str(eager.value).split("\n")[0]


def test_expanded_input_raises_like_eager():
    g, cg = _compiled(lambda g, x: g.call(torch.Tensor.add_, x, 1.0), [torch.zeros(10)])
    with pytest.raises(RuntimeError, match="single memory location"):
        cg(torch.zeros(1).expand(10))  # elements share memory: other strides, the reference runner


def test_inference_tensor_behaves_as_in_eager():
    g, cg = _compiled(lambda g, x: g.call(torch.Tensor.mul_, x, 3.0), [torch.randn(10)])
    with torch.inference_mode():
        mine, ref = torch.ones(10), torch.ones(10)
    with pytest.raises(RuntimeError, match="nference"):
        ref.mul_(3.0)
    with pytest.raises(RuntimeError, match="nference"):
        cg(mine)
    assert torch.equal(mine, ref)  # eager writes, then raises: so does the reference runner
    with torch.inference_mode():
        cg(mine)
        ref.mul_(3.0)
    assert torch.equal(mine, ref)


def test_version_counter_moves_so_autograd_sees_the_write():
    fn = lambda g, x: g.call(torch.Tensor.mul_, x, 2.0)  # noqa: E731
    g, cg = _compiled(fn, [torch.randn(5)])
    w = torch.randn(5, requires_grad=True)
    z = (w * 1.0).exp()  # exp saves its result for backward
    v = z._version
    with torch.no_grad():
        cg(z)
    assert z._version > v
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_packed_linear_of_a_written_weight_uses_the_new_values():
    def fn(g, x, w):
        g.call(torch.Tensor.add_, w, 0.5)
        return g.call(F.linear, x, w)
    x, w = torch.randn(256, 64), torch.randn(32, 64)
    g, cg = _compiled(fn, [x, w])
    mine, ref = w.clone(), w.clone()
    for _ in range(3):  # the packed copy would be made on the second call with the same version
        torch.testing.assert_close(cg(x, mine)[0], g.run(x, ref)[0], atol=1e-4, rtol=1e-4)
    assert torch.equal(mine, ref)


@pytest.mark.parametrize("threads", [1, 2])
def test_large_copy_into_an_input_with_streaming_stores(tmp_path, threads):
    framefuse.reset()
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with framefuse.config.patch(cpu_streaming_store_mb=1, cache_dir=str(tmp_path)):
            x = torch.randn((1 << 19) + 5)
            base = torch.zeros((1 << 19) + 64)
            for offset in (0, 3):  # an aligned and a misaligned destination
                dst = base[offset:offset + x.numel()]
                _run_both(lambda g, s, d: g.call(torch.Tensor.copy_, d, s), [x, dst])
    finally:
        torch.set_num_threads(old)
        framefuse.reset()


def test_through_framefuse_compile_like_eager():
    def step(params, grads, lr):
        for p, gr in zip(params, grads):
            p.add_(gr, alpha=-lr)
        return params[0] * 2

    params = [torch.randn(50, 20), torch.randn(20)]
    grads = [torch.randn(50, 20), torch.randn(20)]
    mine = [p.clone() for p in params]
    compiled = framefuse.compile(step, backend="inductor")
    for _ in range(3):
        want = step(params, grads, 0.1)
        v = [p._version for p in mine]
        got = compiled(mine, grads, 0.1)
        torch.testing.assert_close(got, want)
        assert all(p._version > vv for p, vv in zip(mine, v))
    for a, b in zip(mine, params):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_read_of_running_statistics_before_a_training_batch_norm_sees_the_old_values(backend):
    # Found in review: inductor computed `bn.running_mean * 2` after the batch norm that updates it
    # had run (the norm's writes were not known to the graph passes or the lowering).
    bn = torch.nn.BatchNorm1d(4).train()

    def f(x):
        before = bn.running_mean * 2
        y = bn(x)
        return y, before, bn.running_mean * 2

    x = torch.randn(8, 4)
    with torch.no_grad():
        want = f(x)
        bn.reset_running_stats()
        framefuse.reset()
        got = framefuse.compile(f, backend=backend)(x)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


# ---- in-place methods torch's schemas resolve (x.sin_()): the out-of-place op, then a write ----

def _traced_inplace(fn, *inputs):
    """fn through framefuse.compile, the graph compiled by inductor: (results, the graph's extern
    count). Asserts the inputs afterwards, the results and returned identities equal eager's."""
    externs = []

    @framefuse.backends.native_graph
    def record(graph, example_inputs):
        cg = iu.compile_graph(graph, example_inputs)
        externs.append(cg.num_externs if isinstance(cg, _C.inductor.CompiledGraph) else None)
        return cg

    framefuse.reset()
    mine, ref = [t.clone() for t in inputs], [t.clone() for t in inputs]
    got, want = framefuse.compile(fn, backend=record)(*mine), fn(*ref)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
        assert any(a is m for m in mine) == any(b is r for r in ref)
    for a, b in zip(mine, ref):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    return got, externs


@pytest.mark.skipif(not BUMPS, reason="torch 1.13 keeps graphs that write inputs on the reference runner")
def test_inplace_methods_of_inputs_are_one_kernel_without_externs():
    def fn(x, y):
        x.sin_()
        y.atan2_(x).exp2_()
        return x * 2, y
    (_, y), externs = _traced_inplace(fn, torch.randn(6, 7), torch.randn(6, 7))
    assert externs == [0]


@pytest.mark.skipif(not BUMPS, reason="torch 1.13 keeps graphs that write inputs on the reference runner")
def test_inplace_method_result_is_cast_to_the_written_dtype():
    # f16 written with a float32 operand: computed in float32 and stored as f16, as eager does
    _, externs = _traced_inplace(lambda a, b: a.atan2_(b), torch.randn(64, dtype=torch.half), torch.randn(64))
    assert externs == [0]
    _traced_inplace(lambda a, b: a.ge_(b), torch.randn(9), torch.randn(9))


def test_inplace_method_old_value_read_before_the_write_stays_old():
    def fn(x):
        y = x + 1
        x.exp_()
        return y, x.sin()
    _traced_inplace(fn, torch.randn(5, 5))

    def explicit(x):
        s = x.sin()
        x.copy_(s)
        return s * 2  # NB: s has a user after the write: it must not be recomputed from the new x
    _traced_inplace(explicit, torch.randn(5, 5))


@pytest.mark.parametrize("fn,inputs", [
    (lambda x: x.sin_(), [torch.arange(4)]),                                     # float result into int64
    (lambda a, b: a.atan2_(b), [torch.randn(5), torch.randn(3, 5)]),             # broadcast past a's shape
    (lambda x: x.atan2_(x.t()), [torch.randn(4, 4)]),                            # operand overlapping x in part
    (lambda x: x.expand(3, 4).sin_(), [torch.randn(1, 4)]),                      # an expanded x
])
def test_inplace_methods_refused_by_eager_raise_the_same_error(fn, inputs):
    with pytest.raises(RuntimeError) as eager:
        fn(*[t.clone() for t in inputs])
    framefuse.reset()
    with pytest.raises(RuntimeError) as mine:
        framefuse.compile(fn, backend="inductor")(*[t.clone() for t in inputs])
    assert str(mine.value).split("\n")[0] == str(eager.value).split("\n")[0]


def test_inplace_methods_of_views_and_intermediates():
    _traced_inplace(lambda x: (x[1:].sin_(), x + 1), torch.randn(4, 4))
    _traced_inplace(lambda x: (x * 2).sin_().cos_() + x, torch.randn(4, 4))
    _traced_inplace(lambda x: x.nan_to_num_(nan=1.0, posinf=2.0), torch.tensor([float("nan"), float("inf"), 1.0]))
