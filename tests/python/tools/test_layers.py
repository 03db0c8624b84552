"""The C++ tree's layers (README.md, src/README.md): no file includes a header of a layer above its own,
and no target links one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure_python

ROOT = Path(__file__).resolve().parents[3]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# folder (most specific first) -> the include prefixes its files may use. Bottom to top:
# src/base, graph (graph/python: its Python side), inductor (python/, cuda/python/: the runtimes),
# frame_eval, then src (the bindings) which may use everything.
ALLOWED = [
    ("src/base/", ("src/base/",)),
    ("graph/python/", ("src/base/", "graph/")),
    ("graph/", ("src/base/", "graph/")),
    ("inductor/python/", ("src/base/", "graph/", "inductor/")),
    ("inductor/cuda/python/", ("src/base/", "graph/", "inductor/")),
    ("inductor/", ("src/base/", "graph/", "inductor/")),
    ("frame_eval/", ("src/base/", "graph/", "frame_eval/")),
]
# The parts without Python never include their area's Python side.
NO_PYTHON = {"graph/": ("graph/python/",), "inductor/": ("inductor/python/", "inductor/cuda/python/")}


def _layer(rel: str):
    for folder, allowed in ALLOWED:
        if rel.startswith(folder):
            return folder, allowed
    return None, None


def test_no_include_of_a_higher_layer():
    wrong = []
    for path in sorted(p for top in ("src", "graph", "inductor", "frame_eval") for p in (ROOT / top).rglob("*")):
        if path.suffix not in (".h", ".cpp", ".c", ".def"):
            continue
        rel = path.relative_to(ROOT).as_posix()
        folder, allowed = _layer(rel)
        if folder is None:
            continue
        for inc in INCLUDE.findall(path.read_text(errors="replace")):
            if "/" not in inc:
                continue  # a sibling or a system-style include
            if not inc.startswith(allowed):
                wrong.append(f"{rel}: {inc}")
            elif folder in NO_PYTHON and inc.startswith(NO_PYTHON[folder]):
                wrong.append(f"{rel}: {inc} (the Python side of its own area)")
    assert not wrong, "includes of a higher layer:\n" + "\n".join(wrong)


def test_no_lower_target_links_a_higher_one():
    order = ["ff_base", "ff_graph", "ff_graph_py", "ff_inductor", "ff_inductor_py", "ff_frame_eval"]
    text = "\n".join((ROOT / top / "CMakeLists.txt").read_text() for top in ("src/base", "graph", "inductor", "frame_eval"))
    for m in re.finditer(r"target_link_libraries\((\w+)([^)]*)\)", text):
        target, linked = m.group(1), m.group(2).split()
        if target not in order:
            continue
        above = order[order.index(target) + 1:]
        assert not [t for t in linked if t in above], f"{target} links {linked}"
