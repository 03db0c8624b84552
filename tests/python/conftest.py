"""Shared pytest set-up for tests/python.

The header of every run names the interpreter, the framefuse._C file and the
torch it uses: the lanes of scripts/test.sh are all CPython 3.11 with one
extension suffix, so a module built for another interpreter would import
without any error. When FRAMEFUSE_EXPECT_MODULE_DIR is set (the lanes set it),
a framefuse._C from anywhere else stops the run before any test.

Markers (registered in pyproject.toml):
  pure_python  needs no torch; also runs on pyenv's 3.12 and 3.13 (with a _C built for each,
               loaded from FRAMEFUSE_MODULE_DIR without the package)
               (a file with such tests must not import torch at module level)
  torch2       needs torch >= 2.0 (torch.compile); skipped on Debian's torch 1.13
  cuda         needs a CUDA device; skipped where torch sees none
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PURE_LANE = os.environ.get("FRAMEFUSE_TEST_PURE") == "1"


def _module_info() -> tuple[str | None, str]:
    """(file of framefuse._C or None, text for the header)."""
    try:
        import framefuse._C as C  # noqa: PLC0415
    except Exception as e:  # any import failure is reported, not raised, here
        return None, f"not importable ({type(e).__name__}: {e})"
    return C.__file__, C.__file__


def _torch_info() -> str:
    try:
        import torch  # noqa: PLC0415
    except Exception as e:
        return f"not importable ({type(e).__name__}: {e})"
    return f"{torch.__version__} ({Path(torch.__file__).parent})"


def _torch_major() -> int | None:
    try:
        import torch  # noqa: PLC0415
    except Exception:
        return None
    return int(torch.__version__.split(".")[0])


def pytest_report_header(config):
    lane = os.environ.get("FRAMEFUSE_TEST_LANE", "(not run by scripts/test.sh)")
    lines = [
        f"framefuse lane: {lane}",
        f"python: {sys.executable} {sys.version.split()[0]}",
    ]
    if PURE_LANE:
        import glob  # noqa: PLC0415
        built = glob.glob(os.path.join(os.environ.get("FRAMEFUSE_MODULE_DIR", "") or "-", "_C*.so"))
        lines.append(f"framefuse._C: {built[0]} (loaded without the package)" if built
                     else "framefuse._C: none built for this interpreter (pure_python lane)")
        lines.append("torch: not used (pure_python lane)")
    else:
        lines.append(f"framefuse._C: {_module_info()[1]}")
        lines.append(f"torch: {_torch_info()}")
    return lines


def pytest_sessionstart(session):
    expected = os.environ.get("FRAMEFUSE_EXPECT_MODULE_DIR")
    if not expected or PURE_LANE:
        return
    path, text = _module_info()
    if path is None:
        pytest.exit(f"framefuse._C is {text}; this lane expects it in {expected}", returncode=4)
    if Path(path).resolve().parent != Path(expected).resolve():
        pytest.exit(
            f"framefuse._C was imported from {path}, but this lane built its own in {expected}. "
            "Another install of framefuse is shadowing it (an editable install in the venv?); "
            "remove that install or run the tests through scripts/test.sh.",
            returncode=4,
        )


def pytest_ignore_collect(collection_path, config):
    # In the pure lanes torch is not installed: collect only files that declare
    # pure_python tests, so the others' imports do not become collection errors.
    if PURE_LANE and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        if "pure_python" not in collection_path.read_text(errors="replace"):
            return True
    return None


def pytest_collection_modifyitems(config, items):
    major = None if PURE_LANE else _torch_major()
    cuda = False
    if major is not None and any(item.get_closest_marker("cuda") for item in items):
        import torch  # noqa: PLC0415

        cuda = torch.cuda.is_available()
    for item in items:
        if item.get_closest_marker("torch2") and (major is None or major < 2):
            item.add_marker(pytest.mark.skip(reason="needs torch >= 2.0 (torch.compile)"))
        if item.get_closest_marker("cuda") and not cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


@pytest.fixture
def fresh_framefuse():
    """framefuse's caches, counters and logs reset around a test (compile tests use it for every test
    through `pytestmark = pytest.mark.usefixtures("fresh_framefuse")`)."""
    import framefuse  # noqa: PLC0415 - pure lanes never request it
    framefuse.reset()
    yield
    framefuse.reset()
    framefuse.set_logs("")
