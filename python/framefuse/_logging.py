"""FRAMEFUSE_LOGS: TORCH_LOGS-style logging.

`FRAMEFUSE_LOGS="+frontend,graph_breaks"` (read at import) or `framefuse.set_logs(...)`.
Records go to Python's `logging` under `framefuse.<component>[.<artifact>]`, tagged with
`[frame_id/compile_id]`. If the application configured no handler, a stderr handler is added on the
first enabled setting so records are visible, as with TORCH_LOGS.
"""
import logging
import os

from . import _C

_ROOT = logging.getLogger("framefuse")
_handler = None


# FRAMEFUSE_COMPILE_DEBUG (framefuse._debug): a sink that gets every record; the spec then enables
# everything, and `logging` gets only what the user's own spec asked for.
_debug_sink = None
_user_artifacts = frozenset()
_user_levels = {}


def _emit(logger_name, level, msg):
    if _debug_sink is not None:
        _debug_sink(logger_name, level, msg)
        parts = logger_name.split(".")
        wanted = parts[2] in _user_artifacts if len(parts) > 2 else level >= _user_levels.get(parts[-1], 255)
        if not wanted:
            return
    logging.getLogger(logger_name).log(level, msg)


def _set_debug_sink(sink):
    global _debug_sink
    _debug_sink = sink
    _apply(_current_spec)


def _ensure_handler():
    global _handler
    if _handler is None and not _ROOT.handlers:
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter("%(levelname).1s%(asctime)s %(name)s] %(message)s"))
        _ROOT.addHandler(_handler)
    _ROOT.setLevel(logging.DEBUG)


_current_spec = ""


def _apply(spec):
    global _current_spec, _user_artifacts, _user_levels
    _C.logging.set_spec(spec)
    _current_spec = spec
    _user_artifacts = frozenset(_C.logging.enabled_artifacts())
    _user_levels = dict(_C.logging.component_levels())
    if _debug_sink is not None:
        everything = ["+" + c for c in _C.logging.component_names()] + list(_C.logging.artifact_names())
        _C.logging.set_spec(",".join(everything))
    if spec.strip():
        _ensure_handler()
    if spec.strip() or _debug_sink is not None:
        _C.logging.set_sink(_emit)
    else:
        _C.logging.set_sink(None)
    # Component loggers filter by the requested level; artifact loggers always pass.
    for name, level in _C.logging.component_levels().items():
        logging.getLogger(f"framefuse.{name}").setLevel(level if level != 255 else logging.CRITICAL + 1)
    for name in _C.logging.artifact_names():
        for comp in _C.logging.component_names():
            logging.getLogger(f"framefuse.{comp}.{name}").setLevel(logging.DEBUG)


def set_logs(spec=None, **kwargs):
    """Enable logs from Python, like torch._logging.set_logs.

    Either a spec string in FRAMEFUSE_LOGS syntax (`set_logs("+frontend,graph_breaks")`) or keywords:
    `set_logs(frontend=logging.DEBUG, graph_breaks=True)`. `set_logs()` turns everything off.
    Raises framefuse.UserError naming the valid components and artifacts on an unknown name.
    """
    if spec is not None and kwargs:
        raise TypeError("set_logs() takes a spec string or keywords, not both")
    if spec is None:
        parts = []
        for name, value in kwargs.items():
            if value is True:
                parts.append(name)
            elif value is False or value is None:
                continue
            elif isinstance(value, int):
                parts.append(("+" if value <= logging.DEBUG else "-" if value >= logging.ERROR else "") + name)
            else:
                raise TypeError(f"set_logs({name}=...): expected a bool or a logging level, got {value!r}")
        spec = ",".join(parts)
    _apply(spec)


def enabled_artifacts():
    return list(_C.logging.enabled_artifacts())


_env = os.environ.get("FRAMEFUSE_LOGS")
if _env:
    _apply(_env)
if os.environ.get("FRAMEFUSE_COMPILE_DEBUG", "") not in ("", "0"):
    from . import _debug  # noqa: E402
    _debug.enable()
