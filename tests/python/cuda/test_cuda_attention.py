"""framefuse's float32 attention kernel with TF32 products (inductor/cuda/attention.h).

While torch runs float32 CUDA matmuls in TF32, explicit attention becomes one
scaled_dot_product_attention call that the CUDA runner gives to this kernel. Without a GPU: the
rewrite's decisions, and the kernels compiled by NVRTC for sm_90 (every CI run). On a GPU (`cuda`
marker): results against float64 attention, no further from it than eager's own TF32 products; NaN
rows where eager has them; torch's SDPA again once TF32 is switched off.
"""
import copy
import math
import re

import pytest
import torch
import torch.nn.functional as F

import framefuse
from framefuse import _C
from framefuse import cuda as ffcuda
from framefuse.graph import Graph

import interp_models as im
from cuda_util import HAVE_GPU, fp32_and_fresh, gpu  # noqa: F401  (fixture)
from cuda_util import need_nvrtc as _need_nvrtc
from test_fuse_attention import capture as capture_one

pytestmark = [pytest.mark.usefixtures("fp32_and_fresh"),
              pytest.mark.skipif(not hasattr(F, "scaled_dot_product_attention"), reason="torch < 2.0 has no SDPA")]
NEG_INF = float("-inf")




class tf32:
    """torch's float32 matmuls in TF32 (or not) inside the block."""

    def __init__(self, on=True):
        self.on = on

    def __enter__(self):
        self.saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = self.on

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self.saved


def capture(fn, *args, inputs=False):
    """fn's one graph (and with `inputs`, the graph's example inputs: a module's parameters and
    buffers come after the arguments)."""
    graph, example_inputs = capture_one(fn, *args)
    return (graph, example_inputs) if inputs else graph


def on_cuda(graph):
    """The same graph with every tensor on cuda:0, tuple items too (parsed from its code: no GPU
    needed)."""
    tensor = re.compile(r'\b([a-z]+[0-9]+\[[^\]]*\](?:\[[^\]]*\])?)(?:cpu|cuda:[0-9]+|meta)?')
    code = re.sub(r'"[^"]*"', lambda m: tensor.sub(r'\1cuda:0', m.group(0)), graph.code())
    return Graph.parse(code)


def masked(q, k, v, m):
    return F.softmax((q @ k.transpose(-2, -1) * 0.3).masked_fill(m, NEG_INF), dim=-1) @ v


def plain(q, k, v):
    return F.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def additive(q, k, v, a):
    return F.softmax(q @ k.transpose(-2, -1) * 0.3 + a, dim=-1) @ v


def qkv(*batch, L=8, S=8, E=16, Ev=None, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    Ev = E if Ev is None else Ev
    return tuple(torch.randn(*batch, n, e, generator=g).to(device) for n, e in ((L, E), (S, E), (S, Ev)))


# ---- the rewrite's decisions (no GPU) ----------------------------------------------------------

@pytest.mark.parametrize("E, Ev, fits", [(16, 16, True), (64, 64, True), (128, 128, True), (12, 12, False),
                                         (136, 136, False), (16, 32, False)])
def test_tf32_attention_is_rewritten_only_where_the_kernel_takes_it(E, Ev, fits):
    graph = on_cuda(capture(masked, *qkv(2, 3, E=E, Ev=Ev), torch.ones(8, 8, dtype=torch.bool).triu(1)))
    assert graph.fuse_attention(cuda_tf32_matmul=True)[1] == (["softmax"] if fits else [])
    assert graph.fuse_attention(cuda_tf32_matmul=False)[1] == ["softmax"]  # SDPA's float32 kernels: any dims


def test_additive_masks_and_the_config_keep_tf32_attention_explicit(caplog):
    graph = on_cuda(capture(additive, *qkv(2, 3), torch.randn(8, 8)))
    framefuse.set_logs("perf_hints")
    try:
        assert graph.fuse_attention(cuda_tf32_matmul=True)[1] == []
        assert "bool masks, not float ones" in caplog.text
        g2 = on_cuda(capture(plain, *qkv(2, 3)))
        with framefuse.config.patch(cuda_tf32_attention=False):
            assert g2.fuse_attention(cuda_tf32_matmul=True)[1] == []
        assert "config cuda_tf32_attention is off" in caplog.text
        assert g2.fuse_attention(cuda_tf32_matmul=True)[1] == ["softmax"]
    finally:
        framefuse.set_logs("")


def test_tf32_attention_kernels_compile_for_sm90():
    _need_nvrtc()
    for dims in ([8], [16, 64], [40, 128]):
        src = _C.cuda._tf32_attention_source(dims)
        for d in dims:
            assert f"ff_attention_tf32_d{d}(" in src
        assert _C.cuda.compile_source(src, "sm_90")["cubin_bytes"] > 0
    with pytest.raises(Exception, match="head dim 12"):
        _C.cuda._tf32_attention_source([12])


def _nanogpt_attention_graph(device="cpu"):
    cfg = im.GPTConfig(block_size=64, vocab_size=256, n_layer=1, n_head=4, n_embd=128)
    attn = im.CausalSelfAttention(cfg).eval().to(device)
    x = torch.randn(2, 64, 128, device=device)
    return attn, x


def test_nanogpt_attention_runs_on_the_tf32_kernel_for_sm90():
    # The causal bool mask comes from a module buffer; q, k, v are strided views of one product.
    _need_nvrtc()
    attn, x = _nanogpt_attention_graph()
    with torch.no_grad():
        graph = on_cuda(capture(attn, x))
    with tf32():
        g, _ = graph.fuse_attention(cuda_tf32_matmul=True)
    assert "scaled_dot_product_attention" in g.code()
    mod = ffcuda.compile_graph(g, arch="sm_90")._mod
    assert len(mod.tf32_attention) == 1
    with framefuse.config.patch(cuda_tf32_attention=False):
        assert ffcuda.compile_graph(g, arch="sm_90")._mod.tf32_attention == []


# ---- on the GPU -------------------------------------------------------------------------------

def _rel(x, ref):
    """Relative error against the float64 reference over the finite entries."""
    ok = torch.isfinite(ref)
    return ((x.double()[ok] - ref[ok]).norm() / ref[ok].norm().clamp_min(1e-30)).item()


def _compiled(fn, *args):
    """fn's graph, rewritten under TF32 and compiled for the GPU, as a function of fn's arguments;
    the names of the calls the TF32 kernel runs."""
    graph, inputs = capture(fn, *args, inputs=True)
    with tf32():
        g, _ = graph.fuse_attention(cuda_tf32_matmul=True)
    compiled = ffcuda.compile_graph(g)
    rest = inputs[len(args):]

    def run(*a):
        out = compiled(*a, *rest)
        return out[0] if isinstance(out, (tuple, list)) and len(out) == 1 else out

    return run, compiled._mod.tf32_attention


def _check_against_eager(fn, args, got):
    """got (framefuse, TF32 on) is no further from float64 than eager with TF32 matmuls, and NaN
    exactly where eager is."""
    as_double = copy.deepcopy(fn).double() if isinstance(fn, torch.nn.Module) else fn
    ref = as_double(*[a.double() if a.is_floating_point() else a for a in args])
    with tf32():
        eager = fn(*args)
    assert torch.equal(got.isnan(), eager.isnan())
    e_ff, e_eager = _rel(got, ref), _rel(eager, ref)
    # NB: TF32 is allowed, not forced: cuBLAS runs some shapes in full float32 anyway.
    assert e_ff <= 2 * e_eager + 1e-3, (e_ff, e_eager)
    return e_ff, e_eager


CASES = [
    # batch dims, L, S, E, mask
    ((2, 3), 64, 64, 64, "causal"),
    ((2, 3), 100, 100, 64, "causal"),      # partial tiles of rows and keys
    ((1, 2), 130, 70, 32, "random"),       # L != S, random holes
    ((2, 2), 64, 96, 128, "none"),         # head dim 128: 32-key tiles
    ((3,), 50, 33, 16, "rows_masked"),     # 3-d, fully masked rows: NaN as in eager
    ((1, 1), 8, 8, 8, "causal"),
]


@gpu
@pytest.mark.parametrize("batch, L, S, E, kind", CASES)
def test_tf32_attention_against_float64_and_eager(batch, L, S, E, kind):
    q, k, v = qkv(*batch, L=L, S=S, E=E, device="cuda", seed=L + S + E)
    g = torch.Generator().manual_seed(1)
    if kind == "none":
        fn, args = plain, (q, k, v)
    else:
        if kind == "causal":
            m = torch.ones(L, S, dtype=torch.bool).triu(1)
        else:
            m = torch.rand(L, S, generator=g) < 0.3
            if kind == "rows_masked":
                m[3] = True
                m[L - 1] = True
        fn, args = masked, (q, k, v, m.cuda())
    compiled, calls = _compiled(fn, *args)
    assert len(calls) == 1
    with tf32():
        got = compiled(*args)
    if kind == "rows_masked":
        assert got.isnan().any()
    _check_against_eager(fn, args, got)


@gpu
def test_tf32_attention_reads_strided_views_and_follows_the_switch():
    # nanoGPT's attention: q, k, v views of one product, the causal mask a module buffer.
    attn, x = _nanogpt_attention_graph("cuda")
    with torch.no_grad():
        compiled, calls = _compiled(attn, x)
        assert len(calls) == 1
        with tf32():
            got = compiled(x)
        _check_against_eager(attn, (x,), got)
        # TF32 switched off after compiling: torch's SDPA (float32) runs the call instead.
        with tf32(False):
            exact = compiled(x)
            want = attn(x)
        assert ((exact - want).norm() / want.norm()).item() < 1e-5
        # A buffer change is seen (the mask is read in every call).
        attn.bias.zero_()
        with tf32():
            nan_rows = compiled(x)
        assert nan_rows.isnan().all()


@gpu
def test_nanogpt_under_tf32_through_framefuse_compile():
    cfg = im.GPTConfig(block_size=128, vocab_size=512, n_layer=2, n_head=4, n_embd=256)
    model = im.GPT(cfg).eval().cuda()
    idx = torch.randint(0, 512, (2, 128), device="cuda")
    with torch.no_grad(), tf32():
        want = model(idx)[0]
        got = framefuse.compile(model, backend="inductor")(idx)[0]
    ref = model.double()(idx)[0]
    e_ff, e_eager = _rel(got, ref), _rel(want.double(), ref)
    assert e_ff <= 2 * e_eager + 1e-3, (e_ff, e_eager)
