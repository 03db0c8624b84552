"""Marking tensor dimensions dynamic or static, as torch._dynamo does.

A dimension marked dynamic gets a symbol on the first compile, so one compiled entry serves every
size of it (>= 2: sizes 0 and 1 always specialise). Without marks, a dimension becomes dynamic
when a compiled function sees it change size (config `automatic_dynamic_shapes`); compile(dynamic=
True) makes every dimension of the tensors passed in dynamic from the start, dynamic=False none.
Python ints passed in follow the same rules (without marks): one seen with a second value, or any
under dynamic=True, is a symbol where it is >= 2 (ints read through attributes and globals stay
constants, as torch's nn.Module ints do).
The marks are the attributes torch._dynamo's functions set, so either library's marks serve both.
"""

__all__ = ["mark_dynamic", "maybe_mark_dynamic", "mark_static"]


def _dims(t, index):
    import torch  # noqa: PLC0415
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a tensor, not {type(t).__name__}")
    dims = [index] if isinstance(index, int) else list(index)
    for d in dims:
        if not isinstance(d, int) or not -t.dim() <= d < max(t.dim(), 1):
            raise IndexError(f"dimension {d!r} is out of range for a tensor of {t.dim()} dimensions")
    return {d % t.dim() for d in dims} if t.dim() else set()


def _add(t, attr, dims):
    current = set(getattr(t, attr, set()))
    setattr(t, attr, current | dims)


def mark_dynamic(t, index):
    """Compile dimension(s) `index` of tensor `t` with a symbolic size."""
    _add(t, "_dynamo_dynamic_indices", _dims(t, index))


def maybe_mark_dynamic(t, index):
    """As mark_dynamic; torch keeps such a dimension static where the code needs it so, and so does
    framefuse (a size the trace relies on is guarded either way)."""
    _add(t, "_dynamo_weak_dynamic_indices", _dims(t, index))


def mark_static(t, index=None):
    """Keep dimension(s) `index` of `t` (every one when None) static, even under dynamic=True."""
    dims = set(range(t.dim())) if index is None else _dims(t, index)
    _add(t, "_dynamo_static_indices", dims)
