"""The attention_masks graph pass (graph/passes/attention_masks.h): SDPA masks built from index
arithmetic that are True everywhere are dropped, causal ones become is_causal=True, and every other
mask stays. Random mask programs (offsets, comparisons, &, |, ~, views) compiled by both backends
must give eager's results; the pass must also fire on the forms transformers builds."""
import logging
import random

import pytest
import torch
import torch.nn.functional as F

import framefuse

pytestmark = pytest.mark.skipif(not hasattr(F, "scaled_dot_product_attention"), reason="torch without SDPA")

COMPARE = ["<=", "<", ">=", ">", "==", "!="]


def _captured(fn, *args):
    seen = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        seen.append(graph)
        return graph.run

    framefuse.compile(fn, backend=backend, fullgraph=True)(*args)
    assert len(seen) == 1
    return seen[0]


def _sdpa_line(fn, *args):
    code = _captured(fn, *args).optimized().code()
    return [line for line in code.splitlines() if "scaled_dot_product_attention(" in line]


def _bidirectional(q, k, v):
    # transformers' sdpa_mask with no padding mask, as built under a compiler
    L = q.shape[-2]
    kv = torch.arange(L) + 0
    mask = (kv[None, None, :, None] >= 0).expand(q.shape[0], -1, L, L)
    return F.scaled_dot_product_attention(q, k, v, mask)


def _causal(q, k, v):
    L, S = q.shape[-2], k.shape[-2]
    q_idx = torch.arange(L) + 0
    kv_idx = torch.arange(S) + 0
    mask = (kv_idx[None, None, None, :] <= q_idx[None, None, :, None]).expand(q.shape[0], -1, L, S)
    return F.scaled_dot_product_attention(q, k, v, mask)


@pytest.mark.parametrize("fn, want", [(_bidirectional, "(l_q, l_k, l_v)"), (_causal, "(l_q, l_k, l_v, is_causal=True)")])
def test_masks_transformers_builds_become_no_mask_or_is_causal(fn, want):
    q, k, v = (torch.randn(2, 3, 7, 8) for _ in range(3))
    lines = _sdpa_line(fn, q, k, v)
    assert len(lines) == 1 and want in lines[0], lines
    for backend in ("eager", "inductor"):
        torch.testing.assert_close(framefuse.compile(fn, backend=backend)(q, k, v), fn(q, k, v))


def _position_bias(q, k, v, bias):
    # T5's create_position_bias_mask (transformers 5.17) under a mask True everywhere
    L = q.shape[-2]
    mask = ((torch.arange(L) + 0)[None, None, :, None] >= 0).expand(q.shape[0], -1, L, L)
    return F.scaled_dot_product_attention(q, k, v, torch.where(mask, bias, torch.finfo(q.dtype).min), scale=1.0)


def _causal_position_bias(q, k, v, bias):
    L = q.shape[-2]
    i = torch.arange(L)
    mask = (i[None, :] <= i[:, None])[None, None].expand(q.shape[0], 1, L, L)
    return F.scaled_dot_product_attention(q, k, v, torch.where(mask, bias, torch.finfo(q.dtype).min), scale=1.0)


@pytest.mark.parametrize("fn, rewritten", [(_position_bias, True), (_causal_position_bias, False)])
def test_a_where_mask_with_a_condition_true_everywhere_is_its_input(fn, rewritten):
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    bias = torch.randn(1, 4, 6, 6)
    lines = _sdpa_line(fn, q, k, v, bias)
    assert len(lines) == 1 and ("(l_q, l_k, l_v, l_bias, scale=1.0)" in lines[0]) == rewritten, lines
    for backend in ("eager", "inductor"):
        torch.testing.assert_close(framefuse.compile(fn, backend=backend)(q, k, v, bias), fn(q, k, v, bias))


def test_a_causal_mask_over_more_keys_than_queries_stays():
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    lines = _sdpa_line(_causal, q, k, v)
    assert len(lines) == 1 and "is_causal" not in lines[0] and "(l_q, l_k, l_v)" not in lines[0], lines
    torch.testing.assert_close(framefuse.compile(_causal, backend="inductor")(q, k, v), _causal(q, k, v))


def _predicate(rng, L, S):
    """Python source of a random bool [L, S] mask over q_idx (rows) and kv_idx (columns)."""
    def index(name, c=None):
        c = rng.choice([0, 0, 0, 1, -1, 2]) if c is None else c
        return f"({name} + {c})" if c else name

    kind = rng.randrange(3)
    op = rng.choice(COMPARE)
    if kind == 0:  # key index against query index, shifted (often by the same amount: a triangle)
        c = rng.choice([0, 1, 3]) if rng.random() < 0.5 else None
        return f"({index('kv', c)} {op} {index('qi', c)})"
    if kind == 1:  # one index against a number
        return f"({index(rng.choice(['kv', 'qi']))} {op} {rng.randint(-2, max(L, S) + 1)})"
    return rng.choice(["torch.ones(L, S, dtype=torch.bool)", "torch.zeros(1, S, dtype=torch.bool)",
                       "torch.full((L, 1), True)"])


def _mask_program(rng):
    L = rng.randint(1, 7)
    S = L if rng.random() < 0.6 else rng.randint(1, 7)
    if rng.random() < 0.35:  # a triangle, maybe and-ed with something True everywhere
        S = L if rng.random() < 0.8 else S
        c = rng.choice([0, 0, 1, 4])
        tri = f"((kv + {c}) {rng.choice(COMPARE)} (qi + {c}))"
        expr = rng.choice([tri, f"({tri} & (kv < S))", f"((qi >= 0) & {tri})"])
        return _program(expr, L, S, bias=rng.random() < 0.25)
    expr = _predicate(rng, L, S)
    for _ in range(rng.randrange(3)):
        join = rng.choice(["&", "|"])
        expr = f"({expr} {join} {_predicate(rng, L, S)})"
        if rng.random() < 0.2:
            expr = f"(~{expr})"
    return _program(expr, L, S, bias=rng.random() < 0.25)


def _program(expr, L, S, bias=False):
    # bias: a float mask torch.where(mask, bias, -1e4) (T5's form), the bias made from the indices
    src = (
        "def f(q, k, v):\n"
        f"    L, S = {L}, {S}\n"
        "    qi = torch.arange(L)[:, None]\n"
        "    kv = torch.arange(S)[None, :]\n"
        f"    mask = {expr}\n"
        "    mask = mask.expand(L, S)[None, None].expand(q.shape[0], 1, L, S)\n"
        + ("    mask = torch.where(mask, ((qi * 3 + kv) % 5).to(q.dtype)[None, None] / 4, -1e4)\n" if bias else "")
        + "    return F.scaled_dot_product_attention(q, k, v, mask)\n")
    ns = {"torch": torch, "F": F}
    exec(compile(src, f"<mask program {expr}>", "exec"), ns)
    return ns["f"], L, S, src


def test_random_mask_programs_match_eager():
    rng = random.Random(20261129)
    dropped = causal = branch = 0
    for i in range(200):
        f, L, S, src = _mask_program(rng)
        q = torch.randn(2, 2, L, 8, dtype=torch.float64)
        k = torch.randn(2, 2, S, 8, dtype=torch.float64)
        v = torch.randn(2, 2, S, 8, dtype=torch.float64)
        want = f(q, k, v)
        line = _sdpa_line(f, q, k, v)
        dropped += "(l_q, l_k, l_v)" in line[0]
        causal += "is_causal=True" in line[0]
        branch += "(l_q, l_k, l_v, truediv)" in line[0]
        for backend in ("eager", "inductor"):
            got = framefuse.compile(f, backend=backend)(q, k, v)
            torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"{m}\n{src}{line}")
    # NB: the seed's programs include masks True everywhere, causal ones and where() masks over
    # both: every rewrite is exercised.
    assert dropped >= 10 and causal >= 4 and branch >= 5, (dropped, causal, branch)


@pytest.mark.skipif(not framefuse._C.inductor.codegen_available(),
                    reason="built without LLVM: CPU graphs run on the reference runner, which rewrites each length "
                           "(tests/python/cuda/test_cuda_zoo_rewrites.py checks the GPU's one compile)")
def test_masks_of_symbolic_lengths_are_rewritten_once_for_every_length(caplog):
    # dynamic=True: the query and key lengths are one symbol (k and v are made from q); the rewrite
    # holds for every binding of it, so one compile serves every length.
    for fn, want in [(_bidirectional, "all True: dropped"), (_causal, "causal: is_causal=True")]:
        def f(x, fn=fn):
            return fn(x, x * 0.5, x + 1)

        inductor = framefuse.compile(f, backend="inductor", dynamic=True)
        caplog.clear()
        framefuse.set_logs("+graph")
        try:
            with caplog.at_level(logging.DEBUG, logger="framefuse"):
                for L in (5, 9, 12):
                    x = torch.randn(2, 3, L, 8)
                    torch.testing.assert_close(inductor(x), f(x))
        finally:
            framefuse.set_logs("")
        fired = [r.getMessage() for r in caplog.records if "attention_masks:" in r.getMessage()]
        assert len(fired) == 1 and want in fired[0], fired
