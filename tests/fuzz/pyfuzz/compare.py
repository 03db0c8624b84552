"""Snapshots of what a call left behind, and their comparison.

`snapshot(roots)` turns the arguments (after the call), the return value and the module's G_
globals into plain nested tuples right after the call, before anything else can change them.
Mutable objects (tensors, lists, dicts, sets, instances) seen a second time become ("same", path),
so the snapshot records identity: `return x` gives ("same", "args[0]") in eager, and a compiled
function that returns a copy of x differs there. Tensors also get a storage number (first
appearance order), which records views: `return x[0]` shares args[0]'s storage in eager.

`diff(eager, compiled, tolerant)` walks two snapshots and names the first differences by category:
  exception  the types of the raised exceptions differ (or one side raised)
  stdout     printed output differs
  return / args / globals   a value differs there
  identity   an object is the same as another in one run and a separate one in the other
  aliasing   only storage sharing (views) differs
"""
from __future__ import annotations

import math
import re

import torch

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
_INT_VIEW = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16,
             torch.bfloat16: torch.int16}


def typename(v) -> str:
    t = type(v)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _storage_ptr(t: torch.Tensor) -> int:
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().data_ptr()
    return t.storage().data_ptr()


class _Snapper:
    def __init__(self):
        self.seen: dict[int, str] = {}
        self.keep: list = []          # keeps snapshotted objects alive, so ids stay unique
        self.storages: dict[int, int] = {}

    def _mutable(self, v, path):
        key = id(v)
        if key in self.seen:
            return ("same", self.seen[key])
        self.seen[key] = path
        self.keep.append(v)
        return None

    def snap(self, v, path):
        if isinstance(v, torch.Tensor):
            same = self._mutable(v, path)
            if same:
                return same
            sid = self.storages.setdefault(_storage_ptr(v), len(self.storages))
            return ("tensor", str(v.dtype), tuple(v.shape), v.requires_grad, v.detach().clone(), sid)
        if v is None or isinstance(v, (bool, int, str, bytes, complex)):
            return (typename(v), v)
        if isinstance(v, float):
            return ("float", repr(v))   # NB: repr tells -0.0 from 0.0 and keeps NaN comparable
        if isinstance(v, (list, dict, set)) or (hasattr(v, "__dict__") and not callable(v)
                                                and not isinstance(v, (type, tuple))):
            same = self._mutable(v, path)
            if same:
                return same
        if isinstance(v, (list, tuple)):
            # tuples include namedtuples, torch.Size and structseqs (torch.return_types.max)
            items = tuple(self.snap(x, f"{path}[{i}]") for i, x in enumerate(v))
            return (typename(v), items)
        if isinstance(v, dict):
            return (typename(v), tuple((self.snap(k, f"{path}.key"), self.snap(x, f"{path}[{k!r}]"))
                                       for k, x in v.items()))
        if isinstance(v, (set, frozenset)):
            return (typename(v), tuple(sorted((self.snap(x, f"{path}{{}}") for x in v), key=repr)))
        if type(v).__name__ in ("dict_keys", "dict_values", "dict_items"):
            return (typename(v), tuple(self.snap(x, f"{path}[{i}]") for i, x in enumerate(v)))
        if isinstance(v, BaseException):
            return ("exception", typename(v), _ADDRESS.sub("", str(v)))
        if isinstance(v, (torch.dtype, torch.device)):
            return (typename(v), str(v))
        if callable(v):
            return ("callable", typename(v))
        if hasattr(v, "__dict__"):
            return ("object", typename(v), tuple((k, self.snap(x, f"{path}.{k}")) for k, x in vars(v).items()))
        return ("other", typename(v), _ADDRESS.sub("", repr(v)))


def snapshot(args, ret, module_ns) -> tuple:
    s = _Snapper()
    a = s.snap(list(args), "args")
    r = s.snap(ret, "ret")
    g = tuple((k, s.snap(v, k)) for k, v in sorted(module_ns.items()) if k.startswith("G_"))
    # Class attributes of the program's own classes are module state too (Box.count).
    module = module_ns.get("__name__")
    g += tuple((f"{k}.{a}", s.snap(x, f"{k}.{a}")) for k, v in sorted(module_ns.items())
               if isinstance(v, type) and v.__module__ == module
               for a, x in sorted(vars(v).items()) if not a.startswith("__") and not callable(x))
    return {"args": a, "return": r, "globals": g}


# ---- comparison -------------------------------------------------------------------------------
# Integers up to 2**24 are exact in float32: below it, float tensors of small integers compare bit for
# bit whatever order or fusion computed them; past it (repeated squaring in a loop) rounding starts.
EXACT_LIMIT = float(2 ** 24)


def _tensor_equal(a: torch.Tensor, b: torch.Tensor, tolerant: bool, fused: bool = False,
                  signless_zeros: bool = False) -> bool:
    """Bit for bit (so -0.0 differs from 0.0; any NaN equals any NaN). `tolerant`: the program uses
    rounding ops; `fused`: a fusing backend, whose contractions (a*b+c in one rounding) may round
    values past EXACT_LIMIT differently. Either accepts a tight relative tolerance where it applies."""
    if a.dtype in _INT_VIEW:
        iv = _INT_VIEW[a.dtype]
        a, b = a.contiguous(), b.contiguous()
        if signless_zeros:  # +0.0 for every zero of both (see runner: min/max reductions)
            a, b = torch.where(a == 0, torch.zeros_like(a), a), torch.where(b == 0, torch.zeros_like(b), b)
        if bool(((a.view(iv) == b.view(iv)) | (a.isnan() & b.isnan())).all()):
            return True
        big = fused and bool((a.abs() >= EXACT_LIMIT).any() or (b.abs() >= EXACT_LIMIT).any())
        return (tolerant or big) and torch.allclose(a, b, rtol=1e-5, atol=1e-5, equal_nan=True)
    return torch.equal(a, b)


def render(s) -> str:
    """A snapshot node as Python-like text (for messages)."""
    if not isinstance(s, tuple) or not s or not isinstance(s[0], str):
        return repr(s)
    kind = s[0]
    if kind == "tensor":
        dtype = "" if s[1] == "torch.float32" else f", dtype={s[1]}"
        return f"tensor({s[4].tolist()}{dtype})"
    if kind == "same":
        return f"<the same object as {s[1]}>"
    if kind == "float":
        return s[1]
    if kind in ("exception", "callable", "other"):
        return f"<{' '.join(map(str, s[1:]))}>"
    if kind == "object":
        return f"{s[1]}(" + ", ".join(f"{k}={render(v)}" for k, v in s[2]) + ")"
    if len(s) == 2 and isinstance(s[1], tuple):
        items = s[1]
        if kind in ("dict", "collections.OrderedDict", "collections.defaultdict"):
            return "{" + ", ".join(f"{render(k)}: {render(v)}" for k, v in items) + "}"
        body = ", ".join(render(x) for x in items)
        if kind == "list":
            return f"[{body}]"
        if kind == "tuple":
            return f"({body}{',' if len(items) == 1 else ''})"
        if kind in ("set", "frozenset"):
            return f"{kind}({{{body}}})"
        return f"{kind}({body})"
    return repr(s[1])


def describe(s, limit=300) -> str:
    text = render(s)
    return text if len(text) <= limit else text[:limit] + "..."


def _tagged(s) -> bool:
    return isinstance(s, tuple) and bool(s) and isinstance(s[0], str)


def diff(a, b, tolerant: bool, out: list, aliasing: list, ta=None, tb=None, fused: bool = False,
         signless_zeros: bool = False) -> None:
    """Appends (category, eager text, compiled text) for the differences of snapshots a and b;
    ta/tb are the nearest enclosing tagged nodes, which name a difference found below them."""
    if len(out) >= 3:
        return
    if _tagged(a):
        ta, tb = a, b
    if _tagged(a) and a[0] == "tensor" and _tagged(b) and b[0] == "tensor":
        if a[1:4] != b[1:4] or not _tensor_equal(a[4], b[4], tolerant, fused, signless_zeros):
            out.append(("value", describe(a), describe(b)))
        elif a[5] != b[5]:
            aliasing.append(("aliasing", f"storage #{a[5]} in {describe(ta)}", f"storage #{b[5]} in {describe(tb)}"))
        return
    if tolerant and _tagged(a) and _tagged(b) and a[0] == b[0] == "float":
        # A Python float read out of a tensor the program rounded (`t.sum().item()`).
        if not math.isclose(float(a[1]), float(b[1]), rel_tol=1e-5, abs_tol=1e-5) and a[1] != b[1]:
            out.append(("value", describe(ta), describe(tb)))
        return
    if (_tagged(a) and a[0] == "same") or (_tagged(b) and b[0] == "same"):
        if a != b:
            out.append(("identity", describe(a), describe(b)))
        return
    if type(a) is not type(b) or (isinstance(a, tuple) and len(a) != len(b)) or \
            (_tagged(a) and a[0] != b[0]):
        out.append(("value", describe(ta), describe(tb)))
        return
    if isinstance(a, tuple):
        for x, y in zip(a, b):
            diff(x, y, tolerant, out, aliasing, ta, tb, fused, signless_zeros)
        return
    if a != b:
        out.append(("value", describe(ta), describe(tb)))


def compare_calls(eager: list, compiled: list, tolerant: bool, fused: bool = False,
                  signless_zeros: bool = False) -> list[tuple]:
    """Differences between two lists of call outcomes (runner.CallOutcome): (category, where,
    eager's, compiled's)."""
    found = []
    for i, (e, c) in enumerate(zip(eager, compiled)):
        where = f"call {i + 1} ({e.variant})"
        if e.exc != c.exc:
            found.append(("exception", where, e.exc or "returned", c.exc or "returned"))
        if e.stdout != c.stdout:
            found.append(("stdout", where, repr(e.stdout[-300:]), repr(c.stdout[-300:])))
        for part in ("return", "args", "globals"):
            out, aliasing = [], []
            diff(e.snap[part], c.snap[part], tolerant, out, aliasing, fused=fused, signless_zeros=signless_zeros)
            for cat, ev, cv in out:
                found.append((part if cat == "value" else cat, f"{where} {part}", ev, cv))
            if not out and aliasing:
                found.append(("aliasing", f"{where} {part}", aliasing[0][1], aliasing[0][2]))
        if found:
            break   # later calls start from a different state anyway
    return found
