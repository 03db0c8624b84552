"""framefuse.config: typed, documented knobs in one place.

    framefuse.config.recompile_limit = 4
    with framefuse.config.patch(recompile_limit=1):
        ...

Every knob is declared once (with its type, default and documentation) in the C++ engine, which
reads them on its own hot paths; this module is their Python face.
"""
import contextlib
import sys
import types

from . import _C

_KNOBS = {k["name"]: k for k in _C.config.KNOBS}
_TYPES = {"bool": bool, "int": int, "str": str}
# torch._dynamo.config's names of knobs framefuse names otherwise.
_ALIASES = {"cache_size_limit": "recompile_limit"}


def _check(name, value):
    name = _ALIASES.get(name, name)
    if name not in _KNOBS:
        raise AttributeError(f"framefuse.config has no knob {name!r}; knobs: {', '.join(sorted(_KNOBS))}")
    want = _TYPES[_KNOBS[name]["type"]]
    if want is int and isinstance(value, bool) or not isinstance(value, want):
        raise TypeError(f"framefuse.config.{name} must be {want.__name__}, got {type(value).__name__}")


class _ConfigModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        name = _ALIASES.get(name, name)
        if name not in _KNOBS:
            raise AttributeError(f"framefuse.config has no knob {name!r}; knobs: {', '.join(sorted(_KNOBS))}")
        return _C.config.get(name)

    def __setattr__(self, name, value):
        if name.startswith("_") or name in ("patch", "knobs", "describe"):
            return super().__setattr__(name, value)
        _check(name, value)
        _C.config.set(_ALIASES.get(name, name), value)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_KNOBS))


def knobs():
    """Name -> current value of every knob."""
    return {name: _C.config.get(name) for name in _KNOBS}


def describe():
    """A readable table of every knob with its type, default and documentation."""
    lines = []
    for name, k in _KNOBS.items():
        lines.append(f"{name} ({k['type']}, default {k['default']!r}): {k['doc']}")
    return "\n".join(lines)


@contextlib.contextmanager
def patch(**changes):
    """Temporarily set knobs: `with framefuse.config.patch(recompile_limit=1): ...`."""
    for name, value in changes.items():
        _check(name, value)
    changes = {_ALIASES.get(name, name): value for name, value in changes.items()}
    saved = {name: _C.config.get(name) for name in changes}
    try:
        for name, value in changes.items():
            _C.config.set(name, value)
        yield
    finally:
        for name, value in saved.items():
            _C.config.set(name, value)


sys.modules[__name__].__class__ = _ConfigModule
