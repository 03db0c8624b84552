"""framefuse._C._testing for the interpreter tests; on an interpreter without torch (pure-Python
bytecode tests, e.g. a plain CPython 3.12) the extension is loaded without the framefuse package."""
import glob
import importlib.machinery
import importlib.util
import os
import sys

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

if HAVE_TORCH:
    from framefuse._C import _testing as T  # noqa: F401
else:
    _suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    _candidates = [p for d in sys.path if os.path.isdir(os.path.join(d, "framefuse"))
                   for p in glob.glob(os.path.join(d, "framefuse", "_C" + _suffix))]
    if not _candidates:
        import pytest  # noqa: PLC0415
        if sys.version_info[:2] not in ((3, 11), (3, 12)):
            pytest.skip(f"framefuse supports CPython 3.11 and 3.12, not {sys.version.split()[0]}",
                        allow_module_level=True)
        raise ImportError("framefuse._C is not built for this interpreter")
    _spec = importlib.util.spec_from_file_location("framefuse._C", _candidates[0])
    _C = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_C)
    T = _C._testing
