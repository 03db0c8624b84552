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
op) is not a plan, and the call is not captured. An ATen op whose kernel is written as calls of other
ops (no kernel of the device's own: embedding, linalg.pinv) makes those calls through the dispatcher,
where autocast casts again; fake tensors would run a meta function in its place, so the recorder runs
that composite kernel itself, in the same autocast state, and records its calls too.

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


_COMPOSITE_KEYS = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def _composite_key(func, args, kwargs):
    """The dispatch key of func's composite kernel where it has no kernel of its operands' device."""
    # NB: casts, allocations and views compute nothing autocast could cast
    if func is torch.ops.aten._to_copy.default or func.namespace == "prim" or "empty" in func.name():
        return None
    if any(r.alias_info is not None for r in func._schema.returns):
        return None
    devices = {t.device.type for t in _leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
    name = func.name()
    if not any(
        d in ("cpu", "cuda") and not torch._C._dispatch_has_kernel_for_dispatch_key(name, d.upper()) for d in devices
    ):
        return None
    for key in _COMPOSITE_KEYS:
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            return getattr(torch._C.DispatchKey, key)
    return None


def _recorder(state):
    class Recorder(TorchDispatchMode):
        """Records the ATen calls (func, args, kwargs, result, inner calls); a composite kernel runs
        here, under autocast in `state` again (a mode's handler runs with autocast excluded), its
        calls recorded by a nested recorder."""

        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            key = _composite_key(func, args, kwargs)
            inner = None
            if key is None:
                out = func(*args, **kwargs)
            else:
                inner = _recorder(state)
                managers = [torch.autocast(dev, dtype=dt, cache_enabled=False) for dev, dt in state]
                try:
                    for m in managers:
                        m.__enter__()
                    try:
                        with inner:
                            out = func._op_dk(key, *args, **kwargs)
                    finally:
                        for m in reversed(managers):
                            m.__exit__(None, None, None)
                except Exception:  # noqa: BLE001
                    # NB: a composite kernel that cannot run on fake tensors (data-dependent checks,
                    # kernels reached under an autocast-listed op, whose casts autocast made above it)
                    # is taken as the op it is
                    inner = None
                    out = func(*args, **kwargs)
            if func.namespace != "prim":  # device queries
                self.calls.append((func, args, kwargs, out, inner.calls if inner else None))
            return out

    return Recorder()


def _leaves(tree):
    return tree_flatten(tree)[0]


def _signature(func, args, kwargs, out, inner):
    def describe(x):
        if isinstance(x, torch.Tensor):
            return ("tensor", x.dtype, tuple(x.shape), x.device.type)
        return repr(x)

    return (
        str(func),
        tuple(describe(x) for x in _leaves((args, kwargs))),
        tuple(describe(x) for x in _leaves(out)),
        tuple(_signature(*c) for c in inner) if inner is not None else None,
    )


def _replace(tree, casts):
    return tree_map(lambda x: casts.get(id(x), x), tree)


_COPY_OPTIONS = {"dtype", "layout", "device", "pin_memory", "non_blocking", "memory_format"}


def casts(fn, args, kwargs, inputs, state):
    """Autocast's plan for `fn(*args, **kwargs)`: a list of (k, dtype), operand `inputs[k]` (a fake
    tensor in args/kwargs) cast to dtype, or [(-1, dtype)]: the call with its dtype argument set to
    dtype; or a string saying why autocast did more than that.
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
    recorded = _recorder(state)
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
    for func, a, kw, r, inner in recorded.calls:
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
        rest.append(_signature(func, a, kw, r, inner))
    if not plan and not rest:
        return []
    with mode:
        cast = {id(inputs[k]): inputs[k].to(dt) for k, dt in plan.items()}
        cast_args, cast_kwargs = _replace((args, kwargs), cast)
        again = _recorder(())
        with again:
            out_again = fn(*cast_args, **cast_kwargs)
    replay = [_signature(*c) for c in again.calls]
    if replay != rest:
        # NB: CUDA's autocast passes dtype=float32 to some ops instead of casting (sum, softmax,
        # cumsum, ...: its fp32_set_opt_dtype policy): the call with that argument is the plan then.
        if not plan and "dtype" not in kwargs and _same_calls(fn, args, dict(kwargs, dtype=torch.float32), rest, out):
            return [(-1, torch.float32)]
        return "autocast does more than cast its operands (" + _first_difference(rest, replay) + ")"
    dtypes = [x.dtype if isinstance(x, torch.Tensor) else type(x) for x in _leaves(out)]
    if dtypes != [x.dtype if isinstance(x, torch.Tensor) else type(x) for x in _leaves(out_again)]:
        return "autocast changes the result's dtype beyond its casts"
    return sorted(plan.items())


def _same_calls(fn, args, kwargs, calls, out):
    """fn(*args, **kwargs) without autocast makes these ATen calls, to results of out's dtypes."""
    again = _recorder(())
    try:
        with _fake_mode(), again:
            got = fn(*args, **kwargs)
    except Exception:  # noqa: BLE001
        return False
    same_dtypes = [getattr(x, "dtype", type(x)) for x in _leaves(got)] == [
        getattr(x, "dtype", type(x)) for x in _leaves(out)
    ]
    return same_dtypes and [_signature(*c) for c in again.calls] == calls


def _first_difference(a, b):
    for x, y in zip(a, b):
        if x != y:
            return f"{x[0]} under autocast, {y[0]} on the cast operands"
    return f"{len(a)} ATen calls under autocast, {len(b)} on the cast operands"
