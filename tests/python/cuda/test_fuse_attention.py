"""The attention rewrite (graph/passes/fuse_attention.h): explicit softmax(q @ k^T * scale, masked) @ v
becomes one torch.nn.functional.scaled_dot_product_attention call where exactly equivalent, and
stays explicit everywhere else. Each positive case checks the rewritten graph against eager; each
negative case checks that nothing was rewritten (and why, in the perf_hints line)."""
import logging
import math
import re

import pytest
import torch
import torch.nn.functional as F

import framefuse
from framefuse.graph import Graph

import cuda_util
from interp_models import CausalSelfAttention, GPTConfig

pytestmark = pytest.mark.usefixtures("fresh_framefuse")

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
needs_sdpa = pytest.mark.skipif(not HAS_SDPA, reason="this torch has no F.scaled_dot_product_attention (torch < 2.0)")
NEG_INF = float("-inf")


def capture(fn, *args):
    """The one graph framefuse captures from fn(*args), and the graph's example inputs."""
    seen = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        seen.append((graph, list(example_inputs)))
        return graph.run

    framefuse.compile(fn, backend=backend, fullgraph=True)(*args)
    assert len(seen) == 1
    return seen[0]


def rewrite(fn, *args):
    """(rewritten graph, rewritten softmax names, graph inputs), with the rewritten graph's result
    checked against eager's."""
    graph, inputs = capture(fn, *args)
    new, fired = graph.fuse_attention()
    assert new.verify() == [], new.code()
    expected = fn(*args)
    (got,) = new.run(*inputs)
    tol = dict(rtol=1e-5, atol=1e-5) if expected.dtype in (torch.float32, torch.float64) else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got, expected, equal_nan=True, **tol)
    return new, fired, inputs


def sdpa_args(code):
    """The arguments of the one scaled_dot_product_attention call in graph code, as text."""
    (line,) = [ln for ln in code.splitlines() if "torch.nn.functional.scaled_dot_product_attention(" in ln]
    return line.split("scaled_dot_product_attention(", 1)[1].rsplit(")", 1)[0].split(", ")


def qkv(*batch, L=8, S=8, E=16, Ev=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    Ev = E if Ev is None else Ev
    return (torch.randn(*batch, L, E, generator=g).to(dtype), torch.randn(*batch, S, E, generator=g).to(dtype),
            torch.randn(*batch, S, Ev, generator=g).to(dtype))


def causal(L, S):
    return torch.tril(torch.ones(L, S)).view(1, 1, L, S)


# ---- the nanoGPT block and its variants ------------------------------------------------------


def NanoAttention(d=32, n_head=4, block_size=16, dropout=0.0):
    """nanoGPT's CausalSelfAttention, non-flash branch (the model tests' copy)."""
    return CausalSelfAttention(GPTConfig(block_size=block_size, n_head=n_head, n_embd=d, dropout=dropout))


@needs_sdpa
def test_nanogpt_block_is_rewritten_and_matches_eager():
    torch.manual_seed(0)
    m = NanoAttention(dropout=0.1).eval()
    new, fired, _ = rewrite(m, torch.randn(2, 12, 32))
    assert len(fired) == 1
    code = new.code()
    assert len(sdpa_args(code)) == 4  # q, k, v, attn_mask
    # The scale is SDPA's default 1/sqrt(E): no keyword; the softmax and both matmuls are gone.
    assert "scale=" not in code and "softmax" not in code and " @ " not in code, code


@needs_sdpa
@pytest.mark.parametrize("form", ["mul", "rmul", "div_sqrt", "div_method", "torch_matmul", "no_scale"])
def test_scale_forms(form):
    def f(q, k, v):
        if form == "mul":
            s = (q @ k.transpose(-2, -1)) * 0.3
        elif form == "rmul":
            s = 0.3 * torch.matmul(q, k.transpose(-1, -2))
        elif form == "div_sqrt":
            s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        elif form == "div_method":
            s = (q @ k.transpose(-2, -1)).div(4.0)
        elif form == "torch_matmul":
            s = torch.matmul(q, k.transpose(2, 3)) * 0.25
        else:
            s = q @ k.transpose(-2, -1)
        return torch.softmax(s, dim=-1) @ v

    new, fired, _ = rewrite(f, *qkv(2, 3))
    assert len(fired) == 1
    code = new.code()
    # 1/sqrt(16) == 0.25 is SDPA's default: only other scales are passed.
    assert ("scale=" in code) == (form in ("mul", "rmul", "no_scale")), code


@needs_sdpa
@pytest.mark.parametrize("mask", ["causal_buffer", "tril_in_graph", "arbitrary_bool", "inverted_bool", "additive"])
def test_mask_forms(mask):
    L, S = 6, 10
    torch.manual_seed(1)
    arbitrary = torch.rand(2, 1, L, S) > 0.3
    arbitrary[..., 0] = True  # every row keeps a key
    additive = torch.randn(L, S).masked_fill(torch.rand(L, S) > 0.6, NEG_INF)
    additive[:, 1] = 0.5

    def f(q, k, v, buf):
        s = (q @ k.transpose(-2, -1)) * 0.25
        if mask == "causal_buffer":
            s = s.masked_fill(buf[:, :, :L, :S] == 0, NEG_INF)
        elif mask == "tril_in_graph":
            s = s.masked_fill(torch.tril(torch.ones(L, S, dtype=torch.bool)).logical_not(), NEG_INF)
        elif mask == "arbitrary_bool":
            s = s.masked_fill(buf == 0, NEG_INF)
        elif mask == "inverted_bool":
            s = s.masked_fill(~buf, NEG_INF)
        else:
            s = s + buf
        return F.softmax(s, dim=-1) @ v

    buf = {"causal_buffer": causal(16, 16), "tril_in_graph": causal(16, 16), "arbitrary_bool": arbitrary.float(),
           "inverted_bool": arbitrary, "additive": additive}[mask]
    new, fired, _ = rewrite(f, *qkv(2, 3, L=L, S=S), buf)
    assert len(fired) == 1
    assert len(sdpa_args(new.code())) == 4  # q, k, v, attn_mask (0.25 == 1/sqrt(16): the default scale)


@needs_sdpa
@pytest.mark.parametrize("case", ["3d", "L_ne_S_and_Ev", "bmm", "5d", "float64"])
def test_shapes_and_dtypes(case):
    def f(q, k, v):
        if case == "bmm":
            return torch.bmm(F.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.2, dim=2), v)
        return F.softmax((q @ k.transpose(-2, -1)) * 0.2, dim=-1) @ v

    args = {"3d": qkv(4, L=5, S=7), "L_ne_S_and_Ev": qkv(2, 2, L=3, S=11, E=8, Ev=5), "bmm": qkv(3, L=4, S=9),
            "5d": qkv(2, 2, 2, L=4, S=4), "float64": qkv(2, 2, dtype=torch.float64)}[case]
    _, fired, _ = rewrite(f, *args)
    assert len(fired) == 1


@needs_sdpa
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    def f(q, k, v, mask):
        att = (q @ k.transpose(-2, -1)) * 0.25
        return F.softmax(att.masked_fill(mask == 0, NEG_INF), dim=-1) @ v

    _, fired, _ = rewrite(f, *qkv(1, 2, dtype=dtype), causal(8, 8))
    assert len(fired) == 1


@needs_sdpa
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_fully_masked_rows_stay_nan_as_in_eager(kind):
    L, S = 4, 6
    keep = torch.ones(L, S, dtype=torch.bool)
    keep[1] = False  # query 1 sees no key: eager's softmax row is NaN
    mask = keep if kind == "bool" else torch.zeros(L, S).masked_fill(~keep, NEG_INF)

    def f(q, k, v, m):
        s = q @ k.transpose(-2, -1) * 0.5
        s = s.masked_fill(~m, NEG_INF) if kind == "bool" else s + m
        return F.softmax(s, dim=-1) @ v

    q, k, v = qkv(2, L=L, S=S)
    expected = f(q, k, v, mask)
    assert expected[:, 1].isnan().all() and not expected[:, 0].isnan().any()
    _, fired, _ = rewrite(f, q, k, v, mask)  # rewrite() compares with equal_nan=True
    assert len(fired) == 1


@needs_sdpa
def test_bert_style_additive_mask_with_finfo_min():
    # BERT's eager attention: scores / sqrt(d) + (1 - mask) * finfo.min, softmax, dropout (eval), @ v.
    # A row with every key padded is finite in eager (finfo.min, not -inf): SDPA adds the same mask.
    B, H, S, D = 2, 2, 6, 8
    pad = torch.ones(B, S)
    pad[0, 3:] = 0
    pad[1, :] = 0
    ext = (1.0 - pad[:, None, None, :]) * torch.finfo(torch.float32).min

    def f(q, k, v, ext):
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
        probs = F.dropout(F.softmax(scores + ext, dim=-1), p=0.1, training=False)
        return torch.matmul(probs, v)

    new, fired, _ = rewrite(f, *qkv(B, H, L=S, S=S, E=D), ext)
    assert len(fired) == 1


def _variant(kind):
    def f(q, k, v, m):
        s = (q @ k.transpose(-2, -1)) * 0.3
        if kind == "bool":
            s = s.masked_fill(m == 0, NEG_INF)
        elif kind == "additive":
            s = s + m
        return F.softmax(s, dim=-1) @ v
    return f


def _masks(kind, L, S, device="cpu"):
    keep = torch.rand(L, S, generator=torch.Generator().manual_seed(3)) > 0.4
    keep[:, 0] = True
    keep[2] = False  # a fully masked row: NaN in eager
    if kind == "additive":
        return torch.zeros(L, S).masked_fill(~keep, NEG_INF).to(device)
    return keep.float().to(device)


@needs_sdpa
@pytest.mark.parametrize("kind", ["none", "bool", "additive"])
def test_variants_through_the_inductor_backend(kind, caplog):
    q, k, v = qkv(2, 3, L=5, S=9)
    m = _masks(kind, 5, 9)
    f = _variant(kind)
    framefuse.set_logs("graph_rewrites")
    caplog.set_level(logging.INFO, logger="framefuse")
    try:
        out = framefuse.compile(f, backend="inductor")(q, k, v, m)
    finally:
        framefuse.set_logs("")
    torch.testing.assert_close(out, f(q, k, v, m), rtol=1e-5, atol=1e-5, equal_nan=True)
    assert "scaled_dot_product_attention" in caplog.text


@needs_sdpa
@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["none", "bool", "additive"])
def test_variants_on_cuda(kind, caplog):
    q, k, v = (t.cuda() for t in qkv(2, 3, L=64, S=80, E=32))
    m = _masks(kind, 64, 80, "cuda")
    f = _variant(kind)
    framefuse.set_logs("graph_rewrites")
    caplog.set_level(logging.INFO, logger="framefuse")
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        out = framefuse.compile(f, backend="inductor")(q, k, v, m)
        expected = f(q, k, v, m)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        framefuse.set_logs("")
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert "scaled_dot_product_attention" in caplog.text


@needs_sdpa
@pytest.mark.cuda
def test_nanogpt_block_on_cuda():
    torch.manual_seed(0)
    m = NanoAttention(d=64, n_head=4, block_size=64).eval().cuda()
    x = torch.randn(2, 48, 64, device="cuda")
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            out = framefuse.compile(m, backend="inductor")(x)
            expected = m(x)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


@needs_sdpa
def test_through_the_inductor_backend_with_the_log_line(caplog):
    torch.manual_seed(0)
    m = NanoAttention().eval()
    x = torch.randn(2, 16, 32)
    framefuse.set_logs("graph_rewrites")
    caplog.set_level(logging.INFO, logger="framefuse")
    try:
        with torch.no_grad():
            out = framefuse.compile(m, backend="inductor")(x)
            expected = m(x)
    finally:
        framefuse.set_logs("")
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert "fuse_attention: explicit attention at 'softmax" in caplog.text
    assert "-> torch.nn.functional.scaled_dot_product_attention with a bool attn_mask" in caplog.text


def test_config_knob_and_torch_without_sdpa_keep_the_explicit_form(caplog):
    # On torch 1.13 (no SDPA) the pass never fires; with the knob off it never fires either.
    m = NanoAttention().eval()
    x = torch.randn(1, 8, 32)
    graph, _ = capture(m, x)
    _, fired = graph.fuse_attention()
    assert len(fired) == (1 if HAS_SDPA else 0)
    with framefuse.config.patch(fuse_attention=False):
        _, fired = graph.fuse_attention()
        assert fired == []
        assert "scaled_dot_product_attention" not in graph.optimized().code()
    framefuse.reset()
    framefuse.set_logs("graph_rewrites")
    caplog.set_level(logging.INFO, logger="framefuse")
    try:
        with torch.no_grad():
            out = framefuse.compile(m, backend="inductor")(x)
    finally:
        framefuse.set_logs("")
    torch.testing.assert_close(out, m(x), rtol=1e-5, atol=1e-5)
    assert ("scaled_dot_product_attention" in caplog.text) == HAS_SDPA


@needs_sdpa
def test_the_pipeline_includes_the_rewrite():
    def f(q, k, v):
        return F.softmax(q @ k.transpose(-2, -1) * 0.3, dim=-1) @ v

    graph, inputs = capture(f, *qkv(2, 2))
    opt = graph.optimized()
    assert "scaled_dot_product_attention" in opt.code()
    torch.testing.assert_close(opt.run(*inputs)[0], f(*inputs), rtol=1e-5, atol=1e-5)


# ---- where it must not fire ------------------------------------------------------------------


def _softmax_dim_2(q, k, v):
    return F.softmax(q @ k.transpose(-2, -1) * 0.3, dim=-2) @ v


def _att_returned(q, k, v):
    att = F.softmax(q @ k.transpose(-2, -1) * 0.3, dim=-1)
    return att @ v, att


def _scores_used_twice(q, k, v):
    s = q @ k.transpose(-2, -1) * 0.3
    return F.softmax(s, dim=-1) @ v + s.sum()


def _dropout_training(q, k, v):
    return F.dropout(F.softmax(q @ k.transpose(-2, -1) * 0.3, dim=-1), p=0.1, training=True) @ v


def _finite_fill(q, k, v):
    s = (q @ k.transpose(-2, -1) * 0.3).masked_fill(torch.ones(8, 8).tril() == 0, -1e9)
    return F.softmax(s, dim=-1) @ v


def _softmax_dtype(q, k, v):
    return F.softmax(q @ k.transpose(-2, -1) * 0.3, dim=-1, dtype=torch.float32) @ v


def _no_transpose(q, k, v):
    return F.softmax(q @ k.permute(0, 1, 3, 2) * 0.3, dim=-1) @ v


def _tensor_scale(q, k, v):
    return F.softmax(q @ k.transpose(-2, -1) * torch.full((), 0.3), dim=-1) @ v


def _negative_scale(q, k, v):
    return F.softmax(q @ k.transpose(-2, -1) * -0.3, dim=-1) @ v


def _broadcast_batch(q, k, v):
    return F.softmax(q @ k[:1].transpose(-2, -1) * 0.3, dim=-1) @ v[:1]


@needs_sdpa
@pytest.mark.parametrize("fn, why", [
    (_softmax_dim_2, "not over the last dimension"),
    (_att_returned, "has other users (or is returned)"),
    (_scores_used_twice, "has other users (or is returned)"),
    (_dropout_training, "dropout in training mode"),
    (_finite_fill, "other than -inf"),
    (_softmax_dtype, "casts (dtype=...)"),
    (_no_transpose, "not k.transpose(-2, -1)"),
    (_tensor_scale, "not a matrix product"),
    (_broadcast_batch, "batch dimensions"),
    (_negative_scale, "not a positive finite number"),
])
def test_not_rewritten(fn, why, caplog):
    graph, inputs = capture(fn, *qkv(2, 2))
    framefuse.set_logs("perf_hints")
    caplog.set_level(logging.INFO, logger="framefuse")
    try:
        new, fired = graph.fuse_attention()
    finally:
        framefuse.set_logs("")
    assert fired == [] and "scaled_dot_product_attention" not in new.code()
    assert "stays explicit" in caplog.text and why in caplog.text, caplog.text


@needs_sdpa
def test_nan_rows_survive_reductions_fused_after_the_attention():
    # The NaN rows are a constant in the kernel that also computes the consumers' max/softmax/sum.
    L, S = 4, 6
    keep = torch.ones(L, S, dtype=torch.bool)
    keep[1] = False

    def f(q, k, v, m):
        y = F.softmax(((q @ k.transpose(-2, -1)) * 0.5).masked_fill(~m, NEG_INF), dim=-1) @ v
        return y.amax(-1), F.softmax(y, -1), y.sum(-1)

    q, k, v = qkv(2, L=L, S=S, E=8)
    out = framefuse.compile(f, backend="inductor")(q, k, v, keep)
    for got, want in zip(out, f(q, k, v, keep)):
        assert want.isnan().any()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


def _masked(q, k, v, m):
    return F.softmax((q @ k.transpose(-2, -1) * 0.3).masked_fill(m, NEG_INF), dim=-1) @ v


def _on_cuda(graph):
    """The same graph with every tensor on cuda:0 (parsed from its code: no GPU needed)."""
    code = re.sub(r'"([a-z0-9]+\[[^"]*?\](?:\[[^"]*?\])?)( rg)?"', lambda m: f'"{m.group(1)}cuda:0{m.group(2) or ""}"',
                  graph.code())
    assert code.count("cuda:0") >= 5, code
    return Graph.parse(code)


@needs_sdpa
@pytest.mark.parametrize("dtype, E, rewritten", [(torch.float32, 12, False), (torch.float32, 16, True),
                                                 (torch.float16, 12, True), (torch.bfloat16, 12, True)])
def test_float32_cuda_attention_stays_explicit_under_tf32_matmuls(dtype, E, rewritten, caplog):
    # TF32 matmuls beat SDPA's float32 kernels (which never use TF32): float32 attention is rewritten
    # only where framefuse's TF32 kernel takes it (head dim 16, not 12; test_cuda_attention.py has
    # the rest); half types keep the rewrite.
    graph, _ = capture(_masked, *qkv(2, 2, E=E, dtype=dtype), torch.ones(8, 8, dtype=torch.bool).triu(1))
    cuda = _on_cuda(graph)
    assert cuda.fuse_attention()[1] == ["softmax"]
    framefuse.set_logs("perf_hints")
    caplog.set_level(logging.INFO, logger="framefuse")
    try:
        new, fired = cuda.fuse_attention(cuda_tf32_matmul=True)
    finally:
        framefuse.set_logs("")
    assert (fired == ["softmax"]) == rewritten
    assert ("scaled_dot_product_attention" in new.code()) == rewritten
    assert ("TF32 matmuls on" in caplog.text) != rewritten, caplog.text
    # The switch concerns CUDA only: the CPU graph is rewritten either way.
    assert graph.fuse_attention(cuda_tf32_matmul=True)[1] == ["softmax"]


@needs_sdpa
def test_the_cuda_pipeline_reads_torchs_tf32_switch(tmp_path):
    """The CUDA pipeline's first graph pass reads torch's TF32 switch when it compiles: float32
    attention stays explicit while matmuls run in TF32, one SDPA call else."""
    from framefuse import cuda  # noqa: PLC0415
    cuda_util.need_nvrtc()
    graph, _ = capture(_masked, *qkv(2, 2, E=12), torch.ones(8, 8, dtype=torch.bool).triu(1))
    cuda_graph = _on_cuda(graph)

    def fused():
        with framefuse.config.patch(cache_dir=str(tmp_path)):
            return "(scaled_dot_product_attention)" in cuda.compile_graph(cuda_graph, arch="sm_90")._mod.program

    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        assert not fused()
        torch.backends.cuda.matmul.allow_tf32 = False
        assert fused()
        with framefuse.config.patch(fuse_attention=False):
            assert not fused()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
