"""The open op registry (DESIGN.md 5b): torch ops graph/ops.def does not list are captured through
torch's own schemas, typed on meta tensors and run as extern calls on both backends."""
import pytest
import torch
import torch.nn.functional as F

import framefuse
from framefuse import _C
from framefuse.graph import Graph

BACKENDS = ["eager", "inductor"]


def graph_code(fn, *args):
    report = framefuse.explain(fn)(*args)
    assert report.graph_break_count == 0, report.break_reasons
    assert report.graph_count == 1
    return report.graphs[0].code()


def compiled(fn, backend):
    framefuse.reset()
    return framefuse.compile(fn, backend=backend)


def sort_erfcx_fft(x):
    v, _ = torch.sort(x, dim=0, descending=True)
    return torch.special.erfcx(v).diagonal(), torch.fft.rfft(x, norm="ortho"), torch.linalg.vector_norm(x, 3)


def test_unlisted_ops_enter_the_graph_with_torch_names():
    # As many positional arguments as the call had (torch picks the overload again from them).
    assert graph_code(sort_erfcx_fft, torch.randn(4, 4)) == '''\
def forward(self, l_x: "f32[4, 4]"):
    sort: "(f32[4, 4], i64[4, 4])" = torch.sort(l_x, dim=0, descending=True)
    getitem: "f32[4, 4]" = sort[0]
    getitem_1: "i64[4, 4]" = sort[1]
    erfcx: "f32[4, 4]" = torch.special.erfcx(getitem)
    diagonal: "f32[4][5]" = erfcx.diagonal()
    rfft: "c64[4, 3]" = torch.fft.rfft(l_x, norm='ortho')
    vector_norm: "f32[]" = torch.linalg.vector_norm(l_x, 3)
    return (diagonal, rfft, vector_norm)
'''


@pytest.mark.parametrize("backend", BACKENDS)
def test_unlisted_ops_match_eager(backend):
    x = torch.randn(5, 5)
    for got, want in zip(compiled(sort_erfcx_fft, backend)(x), sort_erfcx_fft(x)):
        torch.testing.assert_close(got, want)


def test_stft_replays_the_overload_torch_picked():
    # torch.stft (Python) calls torch._C._VariableFunctions.stft with eight positional arguments:
    # the overload without `center`. Replayed with its trailing defaults left out, torch would take
    # the one with center=True and pad the signal a second time.
    x, w = torch.randn(2, 40), torch.hann_window(8)

    def f(x, w):
        return torch.stft(x, 8, window=w, return_complex=True)

    for backend in BACKENDS:
        torch.testing.assert_close(compiled(f, backend)(x, w), f(x, w))
    assert framefuse.explain(f)(x, w).graph_break_count == 0


def test_graph_code_of_open_ops_reads_back():
    g = Graph()
    x = g.placeholder("x", torch.randn(4, 3))
    g.output((g.call(torch.linalg.svd, x, full_matrices=False), g.call(torch.Tensor.polygamma, x, 1),
              g.call(torch.ops.aten.flip, x, [0])))
    assert "x.polygamma(1)" in g.code()
    assert Graph.parse(g.code()).code() == g.code()
    X = torch.rand(4, 3) + 0.5
    (u, s, vh), pg, fl = g.run(X)
    torch.testing.assert_close(u @ torch.diag(s) @ vh, X, rtol=1e-4, atol=1e-5)
    assert torch.equal(pg, X.polygamma(1)) and torch.equal(fl, X.flip(0))


def no_meta_kernel(a, b, x):
    sol = torch.linalg.lstsq(a, b).solution
    q, tau = torch.geqrf(a)
    hist, edges = torch.histogram(x, bins=4)
    return sol * 2, q + 1, tau, hist, edges


@pytest.mark.parametrize("backend", BACKENDS)
def test_ops_without_a_meta_kernel_are_typed_on_probe_values(backend):
    # torch has no meta kernel for lstsq, geqrf, histogram: they are typed by running them on
    # real tensors of the operands' metadata (twice, other values), and the user's random stream
    # is left as it was.
    a, b, x = torch.randn(5, 3), torch.randn(5, 2), torch.randn(20)
    report = framefuse.explain(no_meta_kernel)(a, b, x)
    assert report.graph_break_count == 0, report.break_reasons
    torch.manual_seed(0)
    got, after = compiled(no_meta_kernel, backend)(a, b, x), torch.rand(3)
    torch.manual_seed(0)
    want, want_after = no_meta_kernel(a, b, x), torch.rand(3)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype and g.stride() == w.stride()
        torch.testing.assert_close(g, w)
    assert torch.equal(after, want_after)


def test_integer_operands_that_are_sizes_are_not_probed():
    # tensor_split's indices are output sizes: two probes could agree by chance.
    def f(x, idx):
        return [t * 2 for t in torch.tensor_split(x, idx)]

    x, idx = torch.randn(8), torch.tensor([2, 5])
    report = framefuse.explain(f)(x, idx)
    assert report.graph_break_count >= 1
    for g, w in zip(compiled(f, "inductor")(x, idx), f(x, idx)):
        assert torch.equal(g, w)


def test_data_dependent_output_shapes_break_naming_the_config():
    def f(x):
        return torch.nonzero(x + 1)

    report = framefuse.explain(f)(torch.randn(5))
    assert report.graph_break_count == 1
    assert "config capture_dynamic_output_shape_ops is off" in report.break_reasons[0].reason
    assert torch.equal(compiled(f, "eager")(torch.ones(3)), torch.nonzero(torch.ones(3) + 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_is_functionalized_and_returned(backend):
    def f(x, o):
        r = torch.sin(x, out=o)
        return r is o

    assert graph_code(f, torch.randn(4, 4), torch.empty(4, 4)) == '''\
def forward(self, l_x: "f32[4, 4]", l_o: "f32[4, 4]"):
    sin: "f32[4, 4]" = torch.sin(l_x)
    copy_: "f32[4, 4]" = l_o.copy_(sin)
    return ()
'''
    x, o = torch.randn(4, 4), torch.empty(4, 4)
    assert compiled(f, backend)(x, o) is True
    assert torch.equal(o, torch.sin(x))


def test_out_that_eager_would_resize_is_not_captured():
    def f(x, o):
        return torch.sin(x, out=o)

    report = framefuse.explain(f)(torch.randn(4), torch.empty(2))
    assert report.graph_break_count == 1
    assert "eager resizes or casts it" in report.break_reasons[0].reason


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_open_ops_write_the_caller_tensor_and_may_change_its_sizes(backend):
    def f(x):
        y = x.sin_()
        z = x.unsqueeze_(0)
        return y is x, z is x, x.layout, x.is_cpu, x.mH.shape, x[0].H.shape

    x = torch.randn(3, 4)
    eager_x, comp_x = x.clone(), x.clone()
    want = f(eager_x)
    assert compiled(f, backend)(comp_x) == want
    assert comp_x.shape == eager_x.shape == (1, 3, 4) and torch.equal(comp_x, eager_x)
    assert framefuse.explain(f)(x.clone()).graph_break_count == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_rng_ops_draw_what_eager_draws(backend):
    def f(x, p):
        return torch.rand_like(x), torch.bernoulli(p), torch.normal(x, 0.5), F.dropout(x, 0.3), torch.randn(3)

    x, p = torch.randn(4, 5), torch.rand(4, 5)
    torch.manual_seed(0)
    want = f(x, p)
    fn = compiled(f, backend)
    for _ in range(2):  # the first call traces and compiles: that draws nothing
        torch.manual_seed(0)
        got = fn(x, p)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert framefuse.explain(f)(x, p).graph_break_count == 0


def test_calls_that_update_running_statistics_break():
    def f(x, m, v):
        return torch.batch_norm(x, None, None, m, v, True, 0.1, 1e-5, False)

    args = torch.randn(4, 3), torch.zeros(3), torch.ones(3)
    report = framefuse.explain(f)(*args)
    assert report.graph_break_count == 1
    assert "running statistics" in report.break_reasons[0].reason


def test_results_of_unsupported_dtypes_break_cleanly():
    def f(x):
        return x.chalf()  # complex32

    report = framefuse.explain(f)(torch.randn(3))
    # (the resumed code then breaks on the complex32 tensor it is handed)
    assert report.graph_break_count >= 1 and "not supported in graphs" in report.break_reasons[0].reason
    assert _C._frame_eval_stats().get("internal_errors", 0) == 0


def test_open_ops_are_listed_with_their_aten_overload():
    g = Graph()
    x = g.placeholder("x", torch.randn(3))
    g.call(torch.resolve_neg, x)
    assert _C.graph.op_for_callable(torch.resolve_neg) == "torch.resolve_neg"
    # A callable torch has no schema for stays outside the registry, with a reason.
    with pytest.raises(framefuse.Unsupported, match="is not in framefuse's op registry"):
        g.call(print, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_result_type_is_read_off_the_traced_dtypes(backend):
    def f(x, y):
        return x.to(torch.result_type(x, y)) + 1, torch.result_type(x, 2.5), torch.result_type(y, True)

    for x, y in [(torch.ones(2, dtype=torch.int32), torch.ones((), dtype=torch.float64)),
                 (torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.float64)),
                 (torch.ones(3, dtype=torch.bfloat16), torch.ones((), dtype=torch.int64))]:
        want, got = f(x, y), compiled(f, backend)(x, y)
        assert got[1:] == want[1:] and got[0].dtype == want[0].dtype
        torch.testing.assert_close(got[0], want[0])
        assert framefuse.explain(f)(x, y).graph_break_count == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_device_given_as_a_string_is_typed_on_meta_tensors(backend):
    # Tensor.to(device, dtype, non_blocking, copy): the positional 'cpu' is a device, replaced by
    # "meta" when the call is typed (it was copied out of a meta tensor, and broke).
    def f(x):
        return x.to("cpu", torch.float64, False, True), x.to("cpu", copy=True) * 2

    x = torch.randn(3, 4)
    got, want = compiled(f, backend)(x), f(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w)
    assert got[0].data_ptr() != x.data_ptr()
    assert framefuse.explain(f)(x).graph_break_count == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_none_default_before_a_passed_keyword_is_replayed(backend):
    # torch.sum(x, keepdim=True) matches no overload of torch's: the replay passes dim=None too
    # (masked.var's CUDA samples crashed the reference runner on it).
    def f(x):
        return torch.sum(x, dim=None, keepdim=True), x.mean(None, True), torch.sum(x, 1, True)

    x = torch.randn(3, 4)
    for got, want in zip(compiled(f, backend)(x), f(x)):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)
    assert "torch.sum(l_x, dim=None, keepdim=True)" in graph_code(f, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dtype_predicates_are_read_off_the_traced_dtype(backend):
    def f(x):
        kind = (torch.is_signed(x), x.is_signed(), torch.is_floating_point(x), torch.is_complex(x))
        return (x + 1 if kind[0] else x * 2), kind

    for dt in (torch.float32, torch.uint8, torch.bool, torch.int8, torch.int64, torch.bfloat16):
        x = torch.ones(3, dtype=dt)
        got, want = compiled(f, backend)(x), f(x)
        assert torch.equal(got[0], want[0]) and got[1] == want[1], dt
        assert framefuse.explain(f)(x).graph_break_count == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_only_positional_int_list_takes_varargs(backend):
    # torch's binding takes x.sum_to_size(2, 3) as x.sum_to_size((2, 3)): an int list that is the
    # one positional parameter besides self (as view and permute); torch.ops callables do not.
    x = torch.randn(2, 3, 4)

    def f(x):
        return x.sum_to_size(2, 1, 4), torch.Tensor.sum_to_size(x, 3, 1), x.sum_to_size((1, 4)), x.sum_to_size(size=[2, 3, 1])

    assert framefuse.explain(f)(x).graph_break_count == 0
    for got, want in zip(compiled(f, backend)(x), f(x)):
        torch.testing.assert_close(got, want)

    def g(x):
        return torch.ops.aten.sum_to_size(x, 2, 1, 4)

    with pytest.raises(Exception) as eager:
        g(x)
    with pytest.raises(type(eager.value)):
        compiled(g, backend)(x)
