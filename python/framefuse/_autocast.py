"""torch.autocast's casts for one call, read off torch's own autocast.

A call traced under torch.autocast becomes explicit casts plus the call on the cast operands. Which
operands autocast casts, and to what, is torch's decision (its per-op policy differs between CPU and
CUDA and between torch versions), so it is not tabulated here: the call is run on fake tensors (no
data, no kernels) twice, under a mode that records every ATen call it reaches:

1. under autocast in the traced state: the `_to_copy` calls whose source is an operand are autocast's
   casts;
2. with autocast off, on the operands cast that way.

The casts are the call's plan only where both runs reach the same ATen calls with the same dtypes
(less the casts) and give results of the same dtypes: then autocast did nothing but cast operands.
Anything else (a dtype argument autocast adds, a cast of an intermediate value inside a composite
op) is not a plan, and the call is not captured.

The graph built from the plan runs with autocast off (the casts are in it).
"""

import torch
from torch.utils._pytree import tree_flatten, tree_map

try:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError:  # NB: imported by the trace only under autocast; available() says False then
    FakeTensorMode = TorchDispatchMode = None

_mode = None


def available():
    """Whether this torch can answer (fake tensors and per-device autocast state: torch 2)."""
    return FakeTensorMode is not None and hasattr(torch, "get_autocast_dtype")


def _fake_mode():
    global _mode
    if _mode is None:
        _mode = FakeTensorMode()
    return _mode


def fake(sizes, strides, dtype, device, requires_grad):
    """A fake tensor of this layout on `device` (autocast sees its device, unlike a meta tensor's)."""
    with _fake_mode():
        t = torch.empty_strided(sizes, strides, dtype=dtype, device=device)
    return t.requires_grad_(True) if requires_grad else t


def _recorder():
    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func.namespace != "prim":  # device queries
                self.calls.append((func, args, kwargs, out))
            return out

    return Recorder()


def _leaves(tree):
    return tree_flatten(tree)[0]


def _signature(func, args, kwargs, out):
    def describe(x):
        if isinstance(x, torch.Tensor):
            return ("tensor", x.dtype, tuple(x.shape), x.device.type)
        return repr(x)

    return (str(func), tuple(describe(x) for x in _leaves((args, kwargs))), tuple(describe(x) for x in _leaves(out)))


def _replace(tree, casts):
    return tree_map(lambda x: casts.get(id(x), x), tree)


_COPY_OPTIONS = {"dtype", "layout", "device", "pin_memory", "non_blocking", "memory_format"}


def casts(fn, args, kwargs, inputs, state):
    """Autocast's plan for `fn(*args, **kwargs)`: a list of (k, dtype), operand `inputs[k]` (a fake
    tensor in args/kwargs) cast to dtype, or a string saying why autocast did more than cast operands.
    `state`: ((device type, dtype), ...) where autocast is on."""
    try:
        return _casts(fn, args, kwargs, inputs, state)
    except Exception as e:  # noqa: BLE001  (the call is then not captured: eager raises its own error)
        return f"the call raised on fake tensors under autocast: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _casts(fn, args, kwargs, inputs, state):
    mode = _fake_mode()
    index = {id(t): k for k, t in enumerate(inputs)}
    # NB: autocast is off where this runs (the trace switches it off); its cache is not used, so
    # that no fake tensor stays in it.
    managers = [torch.autocast(dev, dtype=dt, cache_enabled=False) for dev, dt in state]
    recorded = _recorder()
    with mode:
        for m in managers:
            m.__enter__()
        try:
            with recorded:
                out = fn(*args, **kwargs)
        finally:
            for m in reversed(managers):
                m.__exit__(None, None, None)
    plan = {}
    rest = []
    for func, a, kw, r in recorded.calls:
        src = a[0] if a else None
        if (
            func is torch.ops.aten._to_copy.default
            and id(src) in index
            and set(kw) <= _COPY_OPTIONS
            and kw.get("dtype") not in (None, src.dtype)
            and kw.get("device") in (None, src.device)
            and not kw.get("memory_format")
        ):
            k = index[id(src)]
            if plan.get(k, kw["dtype"]) != kw["dtype"]:
                return "autocast casts one operand to two dtypes"
            plan[k] = kw["dtype"]
            continue
        rest.append(_signature(func, a, kw, r))
    if not plan and not rest:
        return []
    with mode:
        cast = {id(inputs[k]): inputs[k].to(dt) for k, dt in plan.items()}
        cast_args, cast_kwargs = _replace((args, kwargs), cast)
        again = _recorder()
        with again:
            out_again = fn(*cast_args, **cast_kwargs)
    replay = [_signature(func, a, kw, r) for func, a, kw, r in again.calls]
    if replay != rest:
        return "autocast does more than cast its operands (" + _first_difference(rest, replay) + ")"
    dtypes = [x.dtype if isinstance(x, torch.Tensor) else type(x) for x in _leaves(out)]
    if dtypes != [x.dtype if isinstance(x, torch.Tensor) else type(x) for x in _leaves(out_again)]:
        return "autocast changes the result's dtype beyond its casts"
    opaque = [str(func) for func, a, kw, r in recorded.calls if _composite_kernel(func, a, kw)]
    if opaque and not _same_when_run(fn, args, kwargs, inputs, plan, state):
        return f"autocast casts inside torch's composite kernel of {opaque[0]}"
    return sorted(plan.items())


def _composite_kernel(func, args, kwargs):
    # NB: a kernel written as calls of other ATen ops (no kernel of the device's own) makes those
    # calls through the dispatcher, where autocast casts again; fake tensors run a meta function
    # in its place, which shows none of them.
    if func is torch.ops.aten._to_copy.default or "empty" in func.name():  # NB: allocations compute nothing
        return False
    devices = {t.device.type for t in _leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
    name = func.name()
    return any(
        d in ("cpu", "cuda") and not torch._C._dispatch_has_kernel_for_dispatch_key(name, d.upper()) for d in devices
    )


def _real(t, shrink):
    # NB: shrunk, every size above 2 becomes 2 (equal sizes stay equal, and 1 broadcasts as before)
    if shrink:
        x = torch.empty([min(d, 2) for d in t.shape], dtype=t.dtype, device=t.device)
    else:
        x = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    # NB: positive floats (scales and variances must be), ints of 0 (valid indices)
    if x.is_floating_point():
        x.uniform_(0.5, 1.5)
    elif x.dtype == torch.bool:
        x.bernoulli_(0.5)
    else:
        x.fill_(0)
    return x


_REAL_NUMEL = 1 << 16  # larger operands are shrunk for the check


def _same_when_run(fn, args, kwargs, inputs, plan, state):
    """fn on real tensors of the operands' layouts (shrunk where large) gives the same results under
    autocast as without on the operands cast as `plan` says, from the same random numbers."""
    shrink = sum(t.numel() for t in inputs) > _REAL_NUMEL
    cuda = sorted({t.device.index or 0 for t in inputs if t.device.type == "cuda"})
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(0)
        real = {id(t): _real(t, shrink) for t in inputs}
    real_args, real_kwargs = _replace((args, kwargs), real)
    cast = {id(real[id(inputs[k])]): real[id(inputs[k])].to(dt) for k, dt in plan.items()}
    cast_args, cast_kwargs = _replace((real_args, real_kwargs), cast)
    managers = [torch.autocast(dev, dtype=dt, cache_enabled=False) for dev, dt in state]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=cuda):
            torch.manual_seed(0)
            for m in managers:
                m.__enter__()
            try:
                want = fn(*real_args, **real_kwargs)
            finally:
                for m in reversed(managers):
                    m.__exit__(None, None, None)
        with torch.no_grad(), torch.random.fork_rng(devices=cuda):
            torch.manual_seed(0)
            got = fn(*cast_args, **cast_kwargs)
    except Exception:  # noqa: BLE001  (not captured: eager decides)
        return False
    want, got = _leaves(want), _leaves(got)
    if len(want) != len(got):
        return False
    for a, b in zip(want, got):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return False
        if not isinstance(a, torch.Tensor):
            if a != b:
                return False
            continue
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        a, b = a.detach(), b.detach()
        if a.is_floating_point() and not torch.equal(a.isnan(), b.isnan()):
            return False
        if not torch.equal(
            torch.nan_to_num(a) if a.is_floating_point() else a, torch.nan_to_num(b) if b.is_floating_point() else b
        ):
            return False
    return True


def _first_difference(a, b):
    for x, y in zip(a, b):
        if x != y:
            return f"{x[0]} under autocast, {y[0]} on the cast operands"
    return f"{len(a)} ATen calls under autocast, {len(b)} on the cast operands"
