"""framefuse: a graph compiler for PyTorch programs, with a C++ engine.

    import framefuse
    model = framefuse.compile(model)
    FRAMEFUSE_LOGS="graph_breaks,recompiles,output_code" python train.py
"""
import sys as _sys

if _sys.version_info[:2] not in ((3, 11), (3, 12), (3, 13)):
    raise ImportError(
        f"framefuse supports CPython 3.11, 3.12 and 3.13; this is {_sys.version.split()[0]}. "
        "Use one of those interpreters.")

import torch as _torch  # noqa: F401  (the op registry resolves torch callables at import)

from . import _C
from ._C import InternalError, Unsupported, UserError
from . import config
from ._logging import set_logs
from .dynamic_shapes import mark_dynamic, mark_static, maybe_mark_dynamic

_C.graph.init_ops()

__version__ = _C.__version__

__all__ = ["config", "set_logs", "Unsupported", "UserError", "InternalError", "__version__", "mark_dynamic",
           "maybe_mark_dynamic", "mark_static"]

# The frontend API (compile, disable, reset, graph_break, explain) is re-exported here when present.
try:
    from .compile import compile, disable, reset, graph_break  # noqa: F401,A004
    __all__ += ["compile", "disable", "reset", "graph_break"]
except ImportError as _e:  # pragma: no cover - only while the frontend module is absent
    if "framefuse.compile" not in str(_e):
        raise
from . import compiler  # noqa: E402,F401  (framefuse.compiler: torch.compiler's functions)
from . import optim  # noqa: E402,F401  (fused SGD/Adam/AdamW steps inside compiled code)
import torch.utils.checkpoint as _checkpoint  # noqa: E402

# What torch.utils.checkpoint runs natively (a call framefuse does not capture) runs with everything
# it calls, as torch 2's torch._disable_dynamo mark on it says (torch 1 has no mark).
_C._set_native_module(vars(_checkpoint))
__all__ += ["compiler", "optim"]
try:
    from .explain import explain  # noqa: F401
    __all__ += ["explain"]
except ImportError as _e:  # pragma: no cover
    if "framefuse.explain" not in str(_e):
        raise
