"""Differential tests of the CPU code generator against eager over random graphs: chains of
pointwise, reduction and view ops with broadcasting and non-contiguous inputs, every dtype."""
import random

import pytest
import torch

import framefuse
from inductor_util import check, needs_codegen

pytestmark = needs_codegen

FLOAT_UNARY = [torch.sin, torch.tanh, torch.abs, torch.neg, torch.relu, torch.sigmoid, torch.exp]
INT_UNARY = [torch.abs, torch.neg]
FLOAT_BINARY = [torch.add, torch.mul, torch.sub, torch.maximum, torch.minimum]
INT_BINARY = [torch.add, torch.mul, torch.sub, torch.maximum]


def make_input(rng, shape, dtype):
    """A tensor of `shape`, sometimes laid out non-contiguously (transposed or strided)."""
    kind = rng.choice(["contiguous", "transposed", "strided", "expanded"])
    if dtype == torch.bool:
        base = lambda s: torch.rand(*s) > 0.5  # noqa: E731
    elif dtype.is_floating_point:
        base = lambda s: torch.randn(*s).to(dtype)  # noqa: E731
    else:
        base = lambda s: torch.randint(-20, 20, s).to(dtype)  # noqa: E731
    if kind == "transposed" and len(shape) >= 2:
        return base(list(reversed(shape))).permute(*reversed(range(len(shape))))
    if kind == "strided" and len(shape) >= 1:
        big = list(shape)
        big[-1] *= 2
        return base(big)[..., ::2]
    if kind == "expanded" and len(shape) >= 1 and shape[0] > 1:
        return base([1] + list(shape[1:])).expand(*shape)
    return base(list(shape))


def random_case(seed, family):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    dtype = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16, "f16": torch.float16,
             "i32": torch.int32, "i64": torch.int64, "bool": torch.bool}[family]
    rank = rng.randint(1, 3)
    shape = [rng.randint(1, 9) for _ in range(rank)]
    inputs = [make_input(rng, shape, dtype)]
    for _ in range(rng.randint(0, 2)):  # broadcast partners
        s = [d if rng.random() < 0.6 else 1 for d in shape][rng.randint(0, rank - 1):]
        inputs.append(make_input(rng, s, dtype))
    steps = rng.randint(2, 6)
    ops = []
    for _ in range(steps):
        ops.append((rng.random(), rng.random(), rng.random(), rng.randint(0, 10 ** 6)))

    def build(g, *phs):
        vals = [(p, dtype, list(t.shape)) for p, t in zip(phs, inputs)]
        for r_kind, r_a, r_b, r_n in ops:
            n_before = len(vals)
            try:
                add_op(g, vals, r_kind, r_a, r_b, r_n)
            except framefuse.Unsupported as e:  # shapes that do not broadcast, kernels older torch lacks: eager refuses too
                assert "size of tensor" in str(e) or "must match" in str(e) or "not implemented for" in str(e), e
                del vals[n_before:]
        outs = [vals[-1][0]]
        if len(vals) > 2 and ops[0][0] < 0.5:
            outs.append(vals[len(vals) // 2][0])
        return tuple(outs)

    def add_op(g, vals, r_kind, r_a, r_b, r_n):
        if True:
            v, dt, sh = vals[-1] if r_a < 0.7 else vals[int(r_a * 100) % len(vals)]
            fl = dt.is_floating_point
            if r_kind < 0.35:  # unary
                if dt == torch.bool:
                    vals.append((g.call(torch.logical_not, v), dt, sh))
                else:
                    pool = FLOAT_UNARY if fl else INT_UNARY
                    fn = pool[r_n % len(pool)]
                    if fn is torch.exp:
                        v = g.call(torch.tanh, v)
                    vals.append((g.call(fn, v), dt, sh))
            elif r_kind < 0.65:  # binary with broadcasting or a scalar
                w, dt2, sh2 = vals[int(r_b * 100) % len(vals)]
                if dt == torch.bool or dt2 == torch.bool:
                    if dt == dt2:
                        vals.append((g.call(torch.logical_or, v, w), dt, None))
                    return
                pool = FLOAT_BINARY if fl or dt2.is_floating_point else INT_BINARY
                fn = pool[r_n % len(pool)]
                other = w if r_b < 0.8 or fn in (torch.maximum, torch.minimum) else (0.5 if fl else 3)
                node = g.call(fn, v, other)
                vals.append((node, torch.promote_types(dt, dt2) if other is w else dt, None))
            elif r_kind < 0.85 and sh and len(sh) >= 1:  # reduction
                dim = r_n % len(sh)
                keep = r_b < 0.5
                if dt == torch.bool:
                    vals.append((g.call(torch.sum, v, [dim], keepdim=keep), torch.int64, None))
                elif fl and r_a < 0.3:
                    vals.append((g.call(torch.mean, v, [dim], keepdim=keep), dt, None))
                elif r_a < 0.6:
                    vals.append((g.call(torch.amax, v, [dim], keepdim=keep), dt, None))
                else:
                    out_dt = dt if fl else torch.int64
                    vals.append((g.call(torch.sum, v, [dim], keepdim=keep), out_dt, None))
            elif sh and len(sh) >= 2:  # views
                if r_b < 0.4:
                    vals.append((g.call(torch.transpose, v, 0, len(sh) - 1), dt, list(reversed(sh))))
                elif r_b < 0.7:
                    vals.append((g.call(torch.reshape, v, [-1]), dt, [int(torch.tensor(sh).prod())]))
                else:
                    vals.append((g.call(torch.unsqueeze, v, 0), dt, [1] + sh))
            elif sh:
                vals.append((g.call(torch.unsqueeze, v, -1), dt, sh + [1]))
            # refresh the recorded shape from the node metadata when unknown
            if vals[-1][2] is None:
                vals[-1] = (vals[-1][0], vals[-1][1], [])

    return build, inputs


@pytest.mark.parametrize("family", ["f32", "f64", "bf16", "f16", "i32", "i64", "bool"])
@pytest.mark.parametrize("seed", range(24))
def test_random_graph(family, seed):
    build, inputs = random_case(seed * 7 + len(family), family)
    check(build, inputs, scale=8)
