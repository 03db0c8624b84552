"""Differential tests of the C++ meta rules against eager torch on random shapes and layouts.

Each test draws calls from a seeded generator (reproducible) over random sizes (size-1 and
size-0 dims included), permuted/sliced/expanded layouts, dtypes and Python-scalar operands, and
checks that the rule alone (meta_fallback off) types the call exactly as eager produces it, or
declines it; never a different answer.
"""
import operator
import random

import pytest
import torch

import framefuse
from framefuse.graph import Graph
from op_cases import graph_value

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.uint8]


def random_tensor(rng, shape=None, dtype=None):
    ndim = len(shape) if shape is not None else rng.randint(0, 4)
    shape = list(shape) if shape is not None else [rng.choice([0, 1, 1, 2, 3, 4]) if rng.random() < 0.9 else 1
                                                  for _ in range(ndim)]
    dtype = dtype or rng.choice(DTYPES)
    # storage in a random dim order, then permuted back; maybe sliced with a step; maybe expanded
    order = list(range(ndim))
    rng.shuffle(order)
    steps = [rng.choice([1, 1, 1, 2]) for _ in range(ndim)]
    storage = [shape[d] * steps[d] for d in order]
    if dtype == torch.bool:
        base = torch.randn(storage) > 0
    elif dtype.is_floating_point:
        base = (torch.randn(storage) * 4).to(dtype)
    else:  # no zeros: integer division by zero is an error of values, not of metadata
        base = torch.randint(1, 5, storage).to(dtype)
    inverse = [order.index(d) for d in range(ndim)]
    t = base.permute(*inverse) if ndim else base
    if ndim:
        t = t[tuple(slice(None, None, s) for s in steps)]
    if ndim and rng.random() < 0.15:
        d = rng.randrange(ndim)
        if shape[d] == 1:
            new = list(shape)
            new[d] = rng.choice([2, 3])
            t = t.expand(*new)
    return t


def broadcastable_partner(rng, t):
    shape = list(t.shape)
    if shape and rng.random() < 0.5:
        shape = shape[rng.randint(0, len(shape)):]
    shape = [1 if rng.random() < 0.3 else s for s in shape]
    return random_tensor(rng, shape)


def typed(fn, *args, **kwargs):
    """The metadata the C++ rule gives (None when it declines or rejects) and eager's result."""
    try:
        expected = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - eager rejects: the rule must not type it
        if "ZeroDivisionError" in str(e):
            return None, None  # an error of values (x // False), not of metadata
        expected = None
    g = Graph()
    placeholders = []
    gargs = [graph_value(g, a, placeholders) for a in args]
    try:
        with framefuse.config.patch(meta_fallback=False):
            node = g.call(fn, *gargs, **kwargs)
        meta = node.meta
    except framefuse.Unsupported:
        meta = None
    return meta, expected


def eager_meta(x):
    if isinstance(x, torch.Tensor):
        return {"kind": "tensor", "sizes": list(x.shape), "strides": list(x.stride()),
                "dtype": str(x.dtype).replace("torch.", ""), "device": str(x.device), "requires_grad": x.requires_grad}
    return {"kind": "tuple", "items": [eager_meta(i) for i in x]}


def check(fn, *args, **kwargs):
    meta, expected = typed(fn, *args, **kwargs)
    if meta is None:
        return 0
    assert expected is not None, f"the rule typed a call eager rejects: {fn} {[getattr(a, 'shape', a) for a in args]} {kwargs}"
    assert meta == eager_meta(expected), (fn, [(a.shape, a.stride(), a.dtype) if isinstance(a, torch.Tensor) else a
                                               for a in args], kwargs)
    return 1


BINARY = [torch.remainder, torch.fmod, torch.atan2, torch.ne, torch.bitwise_xor, torch.logical_and, torch.clamp, torch.add, torch.mul, torch.sub, torch.div, torch.maximum, torch.eq, torch.lt, torch.where, operator.add,
          operator.mul, operator.truediv, operator.floordiv, operator.pow, torch.bitwise_and, torch.logical_or]
UNARY = [torch.neg, torch.logical_not, torch.sin, torch.Tensor.double, torch.ones_like, torch.empty_like, operator.invert, torch.abs, torch.exp, torch.sigmoid, torch.floor, torch.isnan, torch.relu, torch.Tensor.float,
         torch.Tensor.half, torch.Tensor.long, torch.Tensor.bool, torch.clone, torch.zeros_like, torch.Tensor.contiguous]


@pytest.mark.parametrize("seed", range(4))
def test_random_pointwise(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    typed_by_rule = 0
    for _ in range(150):
        a = random_tensor(rng)
        fn = rng.choice(BINARY)
        if fn is torch.where:
            cond = broadcastable_partner(rng, a) > 0 if a.dtype != torch.bool else a
            typed_by_rule += check(fn, cond, a, rng.choice([broadcastable_partner(rng, a), 1.5, 2]))
            continue
        other = rng.choice([broadcastable_partner(rng, a), rng.choice([2, 0.5, True]), torch.tensor(3)])
        args = (a, other) if rng.random() < 0.8 or not isinstance(other, (int, float)) else (other, a)
        typed_by_rule += check(fn, *args)
        typed_by_rule += check(rng.choice(UNARY), a)
    assert typed_by_rule > 150  # the rules answer most of these calls


@pytest.mark.parametrize("seed", range(4))
def test_random_views_and_reductions(seed):
    rng = random.Random(100 + seed)
    torch.manual_seed(seed)
    typed_by_rule = 0
    for _ in range(150):
        a = random_tensor(rng, dtype=rng.choice([torch.float32, torch.int64]))
        nd = a.dim()
        d = rng.randint(-max(nd, 1), max(nd, 1) - 1)
        calls = [
            (torch.sum, (a,), {"dim": d, "keepdim": rng.random() < 0.5}),
            (torch.amax, (a, d), {}) if a.numel() else (torch.sum, (a,), {}),
            (torch.transpose, (a, d, rng.randint(-max(nd, 1), max(nd, 1) - 1)), {}),
            (torch.unsqueeze, (a, rng.randint(-nd - 1, nd)), {}),
            (torch.squeeze, (a,), {}),
            (torch.flatten, (a,), {}),
            (torch.reshape, (a, (-1,)), {}),
            (torch.Tensor.view, (a, -1), {}),
            (torch.movedim, (a, d, 0), {}),
            (torch.cumsum, (a, d), {}),
            (operator.getitem, (a, tuple(rng.choice([slice(None), slice(1, None), slice(None, None, 2), 0, None])
                                         for _ in range(rng.randint(0, nd)))), {}),
        ]
        if nd:
            perm = list(range(nd))
            rng.shuffle(perm)
            calls.append((torch.permute, (a, perm), {}))
            calls.append((torch.split, (a, rng.randint(1, 3), d), {}) if a.shape[d] else (torch.t, (a,), {}))
            calls.append((torch.cat, ([a, a], d), {}))
        fn, args, kwargs = rng.choice(calls)
        typed_by_rule += check(fn, *args, **kwargs)
    assert typed_by_rule > 80


def random_4d(rng, c, dtype=torch.float32):
    t = random_tensor(rng, [rng.choice([1, 2]), c, rng.choice([1, 5, 6]), rng.choice([1, 4, 7])], dtype)
    return t.contiguous(memory_format=torch.channels_last) if rng.random() < 0.3 else t


@pytest.mark.parametrize("seed", range(4))
def test_random_nn(seed):
    rng = random.Random(200 + seed)
    torch.manual_seed(seed)
    F = torch.nn.functional
    typed_by_rule = 0
    for _ in range(80):
        dt = rng.choice([torch.float32, torch.float64])
        c = rng.choice([1, 2, 4])
        x = random_4d(rng, c, dt)
        w = random_tensor(rng, [rng.choice([1, 3]), c, rng.choice([1, 3]), rng.choice([1, 2])], dt)
        if rng.random() < 0.3:
            w = w.contiguous(memory_format=torch.channels_last)
        k = rng.choice([1, 2, 3])
        m = random_tensor(rng, [rng.choice([2, 3]), rng.choice([1, 4])], dt)
        calls = [
            (F.conv2d, (x, w), {"padding": rng.choice([0, 1])}),
            (F.max_pool2d, (x, k), {"ceil_mode": rng.random() < 0.5}),
            (F.avg_pool2d, (x, k), {}),
            (F.adaptive_avg_pool2d, (x, rng.choice([1, 2, (3, 1)])), {}),
            (F.batch_norm, (x, None, None), {"training": True}),
            (F.group_norm, (x, 1), {}),
            (F.layer_norm, (x, list(x.shape[-1:])), {}),
            (F.pad, (x, (1, 0, 0, 2)), {}),
            (torch.softmax, (x, rng.randint(-4, 3)), {}),
            (F.normalize, (x,), {"dim": rng.randint(-4, 3)}),
            (torch.matmul, (m, random_tensor(rng, [m.shape[-1], 3], dt)), {}),
            (torch.matmul, (random_tensor(rng, [2, 1, *m.shape], dt), random_tensor(rng, [3, m.shape[-1], 2], dt)), {}),
            (F.linear, (random_tensor(rng, [2, 3, m.shape[-1]], dt), m), {}),
            (torch.cat, ([x, random_4d(rng, c, dt)], rng.choice([0, 1])), {}) if x.shape[0] == 2 else (torch.t, (m,), {}),
            (torch.Tensor.to, (x, rng.choice([torch.float16, torch.int64])), {}),
            (torch.Tensor.contiguous, (x,), {"memory_format": torch.channels_last}),
            (torch.clone, (x,), {}),
            (torch.where, (x > 0, x, random_4d(rng, c, dt)), {}) if x.shape[0] == 2 else (torch.t, (m,), {}),
            (torch.masked_fill, (x, x > 0, 1.0), {}),
            (torch.sum, (x, (1, 2)), {"keepdim": rng.random() < 0.5}),
            (F.interpolate, (x,), {"scale_factor": rng.choice([2, 1.5, 0.7, (2, 3)]),
                                   "mode": rng.choice(["nearest", "bilinear", "bicubic", "nearest-exact"])}),
        ]
        fn, args, kwargs = rng.choice(calls)
        typed_by_rule += check(fn, *args, **kwargs)
    assert typed_by_rule > 40


ACTIVATIONS = ["relu", "relu6", "gelu", "silu", "hardswish", "hardsigmoid", "elu", "leaky_relu", "mish", "softplus",
               "selu", "celu", "hardtanh", "logsigmoid", "sigmoid", "tanh"]


@pytest.mark.parametrize("seed", range(3))
def test_random_activations(seed):
    # Layouts with size-1 dims of any stride (a pooled [N, C, 1, 1] in channels-last: squeeze-excite blocks).
    rng = random.Random(300 + seed)
    F = torch.nn.functional
    typed_by_rule = 0
    for _ in range(120):
        x = random_tensor(rng, dtype=rng.choice([torch.float32, torch.float64]))
        if rng.random() < 0.3:
            x = random_4d(rng, rng.choice([1, 3, 8]), x.dtype)[:, :, :1, :1]
        fn = getattr(torch, name) if (name := rng.choice(ACTIVATIONS)) in ("sigmoid", "tanh") else getattr(F, name)
        typed_by_rule += check(fn, x)
    assert typed_by_rule > 80
