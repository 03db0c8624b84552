"""Picklable snapshots of Python values and their comparison, for the eager reference.

A snapshot is a tree of tuples whose first item names the kind of value: ("tensor", dtype, shape,
data, alias), ("seq", type name, [items]), ("map", type name, [(key, value)]), ("obj", type name,
{attribute: snapshot}), ("v", plain value), ("opaque", type name) ... Tensors are copied (detached,
on the CPU) so the snapshot is what the value was at that moment. `alias` is the path of the
argument tensor a returned tensor *is* (identity), or None.
"""
from __future__ import annotations

import collections
import enum
import math
import types

import unittest

import torch

MAX_DEPTH = 6
MAX_ITEMS = 300
RTOL, ATOL = 1e-4, 1e-5     # Dynamo's `same` tolerances are of this order; inductor may reorder math

_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def _type_name(v):
    t = type(v)
    return f"{t.__module__}.{t.__qualname__}"


def tensor_paths(value, path="args", out=None, depth=0):
    """{id(tensor): path} for every tensor reachable in `value` through containers."""
    out = {} if out is None else out
    if depth > MAX_DEPTH:
        return out
    if isinstance(value, torch.Tensor):
        out.setdefault(id(value), path)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value[:MAX_ITEMS]):
            tensor_paths(item, f"{path}[{i}]", out, depth + 1)
    elif isinstance(value, dict):
        for k, item in list(value.items())[:MAX_ITEMS]:
            tensor_paths(item, f"{path}[{k!r}]", out, depth + 1)
    return out


def _tensor(t, aliases):
    alias = aliases.get(id(t)) if aliases is not None else None
    head = ("tensor", str(t.dtype), tuple(t.shape), alias, t.requires_grad)
    if t.is_sparse or t.is_quantized or t.device.type == "meta" or type(t) not in (torch.Tensor, torch.nn.Parameter):
        return head + (None,)
    with torch.no_grad():
        data = t.detach().to("cpu").clone().resolve_conj().resolve_neg()
    return head + (data,)


def snapshot(v, aliases, depth=0):
    if isinstance(v, _PLAIN):
        return ("v", v)
    if depth > MAX_DEPTH:
        return ("deep", _type_name(v))
    if isinstance(v, torch.Tensor):
        return _tensor(v, aliases)
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format, enum.Enum)):
        return ("v", repr(v))
    if isinstance(v, torch.Size):
        return ("size", tuple(v))
    if isinstance(v, (types.GeneratorType, collections.abc.Iterator)):
        return ("iterator", _type_name(v))
    if isinstance(v, torch.nn.Module):
        return ("module", _type_name(v))
    if isinstance(v, unittest.TestCase):
        return ("testcase", _type_name(v))
    if isinstance(v, BaseException):
        return ("exception", _type_name(v), snapshot(v.args, aliases, depth + 1))
    if isinstance(v, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, type, types.ModuleType)):
        return ("callable", getattr(v, "__qualname__", _type_name(v)))
    if isinstance(v, (list, tuple, collections.deque)):
        return ("seq", _type_name(v), [snapshot(x, aliases, depth + 1) for x in list(v)[:MAX_ITEMS]], len(v))
    if isinstance(v, dict):
        items = list(v.items())[:MAX_ITEMS]
        return ("map", _type_name(v), [(snapshot(k, aliases, depth + 1), snapshot(x, aliases, depth + 1))
                                       for k, x in items], len(v))
    if isinstance(v, (set, frozenset)):
        return ("set", _type_name(v), sorted(repr(snapshot(x, None, depth + 1)) for x in v))
    if isinstance(v, (collections.abc.KeysView, collections.abc.ValuesView, collections.abc.ItemsView)):
        return ("view", _type_name(v), [snapshot(x, aliases, depth + 1) for x in list(v)[:MAX_ITEMS]])
    try:
        import numpy as np  # noqa: PLC0415
        if isinstance(v, np.ndarray):
            return ("ndarray", str(v.dtype), v.shape, v.tobytes() if v.dtype != object else None)
        if isinstance(v, np.generic):
            return ("v", v.item())
    except ImportError:
        pass
    if isinstance(v, functools_partial_type()):
        return ("partial", snapshot(v.func, aliases, depth + 1), snapshot(v.args, aliases, depth + 1))
    attrs = getattr(v, "__dict__", None)
    if isinstance(attrs, dict):
        return ("obj", _type_name(v), {k: snapshot(x, aliases, depth + 1)
                                      for k, x in list(attrs.items())[:MAX_ITEMS] if not k.startswith("__")})
    return ("opaque", _type_name(v))


def functools_partial_type():
    import functools  # noqa: PLC0415
    return functools.partial


def _close(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL)
    return type(a) is type(b) and a == b


def _tensor_diff(a, b, where):
    _, dt_a, shape_a, alias_a, rg_a, data_a = a
    _, dt_b, shape_b, alias_b, rg_b, data_b = b
    if dt_a != dt_b or shape_a != shape_b:
        return f"{where}: eager {dt_a}{list(shape_a)}, compiled {dt_b}{list(shape_b)}"
    if alias_a != alias_b:
        return f"{where}: eager's tensor is {alias_a or 'a new tensor'}, compiled's is {alias_b or 'a new tensor'}"
    if rg_a != rg_b:
        return f"{where}: requires_grad eager {rg_a}, compiled {rg_b}"
    if data_a is None or data_b is None:
        return None
    if data_a.is_floating_point() or data_a.is_complex():
        same = torch.allclose(data_a, data_b, rtol=RTOL, atol=ATOL, equal_nan=True)
    else:
        same = torch.equal(data_a, data_b)
    if same:
        return None
    return f"{where}: values differ (eager {_short(data_a)}, compiled {_short(data_b)})"


def _short(t):
    flat = t.flatten()[:6].tolist()
    return f"{flat}{'...' if t.numel() > 6 else ''}"


def compare(a, b, where="$"):
    """None when the snapshots agree, else a sentence saying where and how they differ."""
    if a[0] != b[0]:
        return f"{where}: eager {_describe(a)}, compiled {_describe(b)}"
    kind = a[0]
    if kind == "tensor":
        return _tensor_diff(a, b, where)
    if kind == "v":
        return None if _close(a[1], b[1]) else f"{where}: eager {a[1]!r}, compiled {b[1]!r}"
    if kind in ("seq", "map", "view"):
        if a[1] != b[1]:
            return f"{where}: eager {a[1]}, compiled {b[1]}"
        if len(a) > 3 and a[3] != b[3]:
            return f"{where}: eager has {a[3]} items, compiled {b[3]}"
        if len(a[2]) != len(b[2]):
            return f"{where}: eager lists {len(a[2])} items, compiled {len(b[2])}"
        for i, (x, y) in enumerate(zip(a[2], b[2])):
            if kind == "map":
                diff = compare(x[0], y[0], f"{where}.key{i}") or compare(x[1], y[1], f"{where}[{_key(x[0])}]")
            else:
                diff = compare(x, y, f"{where}[{i}]")
            if diff:
                return diff
        return None
    if kind == "obj":
        if a[1] != b[1]:
            return f"{where}: eager {a[1]}, compiled {b[1]}"
        for k in sorted(set(a[2]) | set(b[2])):
            if k not in a[2] or k not in b[2]:
                return f"{where}.{k}: {'only compiled' if k in b[2] else 'only eager'} has it"
            diff = compare(a[2][k], b[2][k], f"{where}.{k}")
            if diff:
                return diff
        return None
    if kind == "partial":
        return compare(a[1], b[1], f"{where}.func") or compare(a[2], b[2], f"{where}.args")
    if kind == "exception":
        return (None if a[1] == b[1] else f"{where}: eager {a[1]}, compiled {b[1]}") or compare(a[2], b[2], f"{where}.args")
    # The remaining kinds hold only plain values (names, shapes, bytes).
    return None if a == b else f"{where}: eager {_describe(a)}, compiled {_describe(b)}"


def _key(s):
    return repr(s[1]) if s[0] == "v" else s[0]


def _describe(s):
    if s[0] == "v":
        return repr(s[1])
    if s[0] == "tensor":
        return f"tensor {s[1]}{list(s[2])}"
    return " ".join(str(x) for x in s[:2])
