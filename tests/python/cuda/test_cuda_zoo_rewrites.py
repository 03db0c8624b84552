"""The rewrites the transformers models needed (issue #28), on the GPU (`cuda` marker, skipped
without one): SDPA masks built from index arithmetic (all True: dropped; causal: is_causal=True),
with static and symbolic lengths; the KV cache's cat with a legacy empty operand as one kernel;
GPT-2's Conv1D products (addmm) as torch.mm with the bias in the kernel after them; T5's position
bias handed to SDPA unit-stride, so that torch runs its fused kernel rather than its math path. Each
against eager in fp32 (TF32 off)."""
import logging

import pytest
import torch
import torch.nn.functional as F

import framefuse
from framefuse import inductor

import inductor_util as iu
from cuda_util import fp32_and_fresh, gpu  # noqa: F401  (fixture)

pytestmark = [pytest.mark.usefixtures("fp32_and_fresh"),
              pytest.mark.skipif(not hasattr(F, "scaled_dot_product_attention"), reason="torch without SDPA")]


def _bidirectional(q, k, v):
    # transformers' sdpa_mask with no padding mask, as built under a compiler
    L = q.shape[-2]
    kv = torch.arange(L, device=q.device) + 0
    mask = (kv[None, None, :, None] >= 0).expand(q.shape[0], -1, L, L)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _causal(q, k, v):
    L = q.shape[-2]
    idx = torch.arange(L, device=q.device)
    mask = (idx[None, :] <= idx[:, None])[None, None].expand(q.shape[0], 1, L, L)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _mask_rewrites(caplog, fn, lengths, dynamic):
    def f(x):
        return fn(x, x * 0.5, x + 1)

    compiled = framefuse.compile(f, backend="inductor", dynamic=dynamic)
    caplog.clear()
    framefuse.set_logs("+graph")
    try:
        with caplog.at_level(logging.DEBUG, logger="framefuse"):
            for L in lengths:
                x = torch.randn(2, 3, L, 8, device="cuda")
                torch.testing.assert_close(compiled(x), f(x), atol=2e-5, rtol=2e-5)
    finally:
        framefuse.set_logs("")
    return [r.getMessage() for r in caplog.records if "attention_masks:" in r.getMessage()]


@gpu
@pytest.mark.parametrize("fn, want", [(_bidirectional, "all True: dropped"), (_causal, "causal: is_causal=True")])
def test_index_masks_are_rewritten_on_the_gpu(caplog, fn, want):
    fired = _mask_rewrites(caplog, fn, [12], dynamic=False)
    assert fired and all(want in m for m in fired), fired


@gpu
@pytest.mark.parametrize("fn, want", [(_bidirectional, "all True: dropped"), (_causal, "causal: is_causal=True")])
def test_index_masks_of_symbolic_lengths_are_rewritten_once_on_the_gpu(caplog, fn, want):
    # dynamic=True: one compile, one rewrite, every length right
    fired = _mask_rewrites(caplog, fn, [5, 9, 12], dynamic=True)
    assert len(fired) == 1 and want in fired[0], fired


@gpu
@pytest.mark.parametrize("empty_dtype", [torch.float32, torch.bfloat16])
def test_kv_cache_cat_with_a_legacy_empty_operand_on_the_gpu(empty_dtype):
    def f(e, k):
        return torch.cat([e, k.transpose(1, 2)], -2) * 2

    e = torch.tensor([], dtype=empty_dtype, device="cuda")
    k = torch.randn(2, 5, 3, 4, device="cuda")
    got = framefuse.compile(f, backend="inductor")(e, k)
    want = f(e, k)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)
    ir = inductor.loop_ir(iu.build(lambda g, e, k: g.call(torch.mul, g.call(torch.cat, [e, g.call(torch.transpose, k, 1, 2)], -2), 2),
                                   [e.cpu(), k.cpu()]), "cuda")
    assert "extern node" not in ir, ir


@gpu
def test_conv1d_mlp_on_the_gpu_equals_eager():
    B, T, N, M = 4, 32, 64, 256

    def f(x, w1, b1, w2, b2):
        h = torch.addmm(b1, x.view(-1, N), w1).view(B, T, M)
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * torch.pow(h, 3.0))))
        return torch.addmm(b2, h.view(-1, M), w2).view(B, T, N) + x

    args = [torch.randn(B, T, N, device="cuda"), torch.randn(N, M, device="cuda") / 8, torch.randn(M, device="cuda"),
            torch.randn(M, N, device="cuda") / 16, torch.randn(N, device="cuda")]
    torch.testing.assert_close(framefuse.compile(f, backend="inductor")(*args), f(*args), atol=1e-4, rtol=1e-4)


@gpu
def test_gpt2_on_the_gpu_is_one_graph_equal_to_eager():
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=127, eos_token_id=127)
    model = tf.GPT2LMHeadModel(cfg).cuda().eval()
    ids = torch.randint(0, 128, (2, 32), device="cuda")
    with torch.no_grad():
        want = model(ids).logits
        report = framefuse.explain(model)(ids)
        framefuse.reset()
        got = framefuse.compile(model)(ids).logits
    assert (report.graph_count, report.graph_break_count) == (1, 0)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def _t5_attention(q, k, v, w, buckets, causal):
    # T5's position bias (an embedding permuted to [1, heads, q, k]: keys strided), alone as an encoder
    # layer's mask and under transformers 5.17's causal where() as a decoder layer's
    bias = F.embedding(buckets, w).permute(2, 0, 1).unsqueeze(0)
    h = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    return F.scaled_dot_product_attention(h, k, v, attn_mask=torch.where(causal, bias, torch.finfo(q.dtype).min))


def _sdpa_paths(fn, *args):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        fn(*args)
        torch.cuda.synchronize()
    names = {e.name for e in p.events()}
    paths = {"math": "aten::_scaled_dot_product_attention_math", "efficient": "aten::_scaled_dot_product_efficient_attention"}
    return {path for path, op in paths.items() if op in names}


@gpu
def test_t5_position_bias_runs_torch_fused_attention_on_the_gpu():
    B, H, L, E = 2, 8, 64, 64
    q, k, v = (torch.randn(B, H, L, E, device="cuda") for _ in range(3))
    w, buckets = torch.randn(32, H, device="cuda"), torch.randint(0, 32, (L, L), device="cuda")
    causal = (torch.arange(L, device="cuda")[None, :] <= torch.arange(L, device="cuda")[:, None])[None, None].expand(B, 1, L, L)
    args = (q, k, v, w, buckets, causal)
    compiled = framefuse.compile(_t5_attention, backend="inductor")
    # the same function, rounded by the fused kernel instead of the math path's products
    torch.testing.assert_close(compiled(*args), _t5_attention(*args), atol=2e-5, rtol=2e-5)
    assert _sdpa_paths(_t5_attention, *args) == {"math"}  # eager, given the strided masks
    assert _sdpa_paths(compiled, *args) == {"efficient"}
