"""graph_breaks.md, the page every break message links to (`Docs: <package>/graph_breaks.md#ff0002`):
one section per id of the break registry, in id order, each with an example that raises exactly that
id under fullgraph=True, and fixes that compile without a break.

Code blocks of a section, by info string:
  python          the example: defines `fn` and `args`; compiled with fullgraph=True it raises
                  framefuse.Unsupported starting with the section's `[FFxxxx]`
  python torch2   the same, run only with torch >= 2.0 (torch.compile)
  python raises   the same program, but it raises its own exception (FF0008: eager's exception is what
                  the user gets); the break is recorded with the section's id
  python no-run   an example no small program triggers; not run
  python fix      the example rewritten: compiles with fullgraph=True and matches eager
"""
import os
import re
from dataclasses import dataclass, field

import pytest
import torch

import framefuse
from framefuse import _C


pytestmark = pytest.mark.usefixtures("fresh_framefuse")

PAGE = os.path.join(os.path.dirname(framefuse.__file__), "graph_breaks.md")
REGISTRY_DEF = os.path.join(os.path.dirname(__file__), "..", "..", "..", "frame_eval", "break_registry.def")
EXAMPLE_KINDS = {"python", "python torch2", "python raises", "python no-run"}
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def registry():
    """[(id, short reason)] in registry order: the engine's own list, or the .def where the module
    was built without it."""
    testing = getattr(_C, "_testing", None)
    if testing is not None and hasattr(testing, "break_registry"):
        return [(r[0], r[1]) for r in testing.break_registry()]
    with open(REGISTRY_DEF) as f:
        return re.findall(r'FF_BREAK\(\w+,\s*"(FF\d{4})",\s*"([^"]*)"', f.read())


@dataclass
class Section:
    anchor: str                  # from `<a id="ff0002"></a>`
    id: str                      # from `## FF0002: reason`
    reason: str
    line: int                    # of the heading, 1-based
    blocks: list = field(default_factory=list)  # (info string, code)


def parse(text):
    """(sections, every anchor of the page, every `## FFxxxx` heading line number)."""
    sections, anchors, headings = [], [], []
    lines = text.splitlines()
    fence = None  # (info, first line) of the open code block
    for i, line in enumerate(lines):
        if fence is not None:
            if line == "```":
                if sections:
                    sections[-1].blocks.append((fence[0], "\n".join(lines[fence[1]:i]) + "\n"))
                fence = None
            continue
        if line.startswith("```"):
            fence = (line[3:].strip(), i + 1)
            continue
        anchor = re.fullmatch(r'<a id="([^"]*)"></a>', line)
        if anchor:
            anchors.append(anchor.group(1))
        heading = re.fullmatch(r"## (FF\d{4}): (.+)", line)
        if heading:
            headings.append(i + 1)
            above = re.fullmatch(r'<a id="([^"]*)"></a>', lines[i - 1]) if i else None
            sections.append(Section(above.group(1) if above else "", heading.group(1), heading.group(2), i + 1))
        elif line.startswith("## "):
            sections.append(Section("", "", line[3:], i + 1))  # a section that is not an id's: ends the last
    assert fence is None, f"graph_breaks.md: the code block opened at line {fence[1]} is not closed"
    return [s for s in sections if s.id], anchors, headings


def read_page():
    with open(PAGE) as f:
        return parse(f.read())


SECTIONS = read_page()[0] if os.path.exists(PAGE) else []


def examples():
    out = []
    for s in SECTIONS:
        for info, code in s.blocks:
            if info in EXAMPLE_KINDS:
                out.append(pytest.param(s, info, code, id=s.id))
    return out


def fixes():
    out = []
    for s in SECTIONS:
        n = 0
        for info, code in s.blocks:
            if info == "python fix":
                n += 1
                out.append(pytest.param(s, code, id=f"{s.id}-fix{n}"))
    return out


def run_block(section, code):
    """The block's namespace; its file name names the section, as a break message shows it."""
    ns = {"__name__": "graph_breaks_example"}
    exec(compile(code, f"<graph_breaks.md#{section.anchor}>", "exec"), ns)
    assert "fn" in ns and isinstance(ns.get("args"), tuple), f"{section.id}: a block defines `fn` and `args = (...)`"
    return ns["fn"], ns["args"]


def docs_link(message):
    m = re.search(r"^\s*Docs: (.+)#([^#\s]+)$", message, re.MULTILINE)
    assert m, f"no Docs: line in\n{message}"
    return m.group(1), m.group(2)


# ---- the page's structure -----------------------------------------------------------------------


def test_the_page_ships_next_to_the_package():
    assert os.path.isfile(PAGE), f"{PAGE} is missing"


def test_one_section_per_registry_id_in_registry_order():
    sections, _, _ = read_page()
    reg = registry()
    known = {i for i, _ in reg}
    ids = [s.id for s in sections]
    assert not [i for i in ids if i not in known], "sections for ids the registry does not have"
    assert sorted(i for i in set(ids) if ids.count(i) > 1) == [], "ids with more than one section"
    assert [i for i, _ in reg if i not in ids] == [], "registry ids without a section"
    assert ids == [i for i, _ in reg], "sections are not in id order"


def test_each_heading_is_the_registry_reason_under_its_anchor():
    sections, anchors, headings = read_page()
    reasons = dict(registry())
    assert len(headings) == len(sections)
    for s in sections:
        assert s.anchor == s.id.lower(), f"line {s.line}: `## {s.id}` needs `<a id=\"{s.id.lower()}\"></a>` above it"
        assert s.reason == reasons[s.id], f"line {s.line}: {s.id}'s heading is not the registry's short reason"
        assert anchors.count(s.anchor) == 1, f"anchor {s.anchor} appears {anchors.count(s.anchor)} times"


def test_each_section_has_one_example():
    sections, _, _ = read_page()
    for s in sections:
        kinds = [info for info, _ in s.blocks if info.startswith("python")]
        unknown = [k for k in kinds if k not in EXAMPLE_KINDS | {"python fix"}]
        assert not unknown, f"{s.id}: unknown code block kinds {unknown}"
        assert len([k for k in kinds if k in EXAMPLE_KINDS]) == 1, f"{s.id}: one example block, got {kinds}"


# ---- the examples and fixes ---------------------------------------------------------------------


# NB: FF0024's example imports torch._dynamo, whose import warns about torch.jit.script_method.
@pytest.mark.filterwarnings("ignore::DeprecationWarning:torch.jit._script")
@pytest.mark.parametrize(("section", "kind", "code"), examples())
def test_example_breaks_with_its_id(section, kind, code):
    if kind == "python no-run":
        pytest.skip("no small program triggers this id")
    if kind == "python torch2" and not TORCH2:
        pytest.skip("needs torch >= 2.0 (torch.compile)")
    # NB: an example may set a config knob to reach its break; patch() puts every knob back.
    with framefuse.config.patch(**framefuse.config.knobs()):
        fn, args = run_block(section, code)
        compiled = framefuse.compile(fn, fullgraph=True)
        if kind == "python raises":
            with pytest.raises(Exception) as e:
                compiled(*args)
            assert not isinstance(e.value, framefuse.Unsupported), str(e.value)
            ids = [r["id"] for r in _C._graph_break_records()]
            assert section.id in ids, f"{section.id}'s example raised {e.value!r}; breaks recorded: {ids}"
            return
        with pytest.raises(framefuse.Unsupported) as e:
            compiled(*args)
    message = str(e.value)
    assert message.startswith(f"[{section.id}] "), f"{section.id}'s example broke with\n{message}"
    path, anchor = docs_link(message)
    assert os.path.samefile(path, PAGE) and anchor == section.anchor


@pytest.mark.parametrize(("section", "code"), fixes())
def test_fix_compiles_in_one_graph(section, code):
    with framefuse.config.patch(**framefuse.config.knobs()):
        fn, args = run_block(section, code)
        expected = fn(*args)
        got = framefuse.compile(fn, fullgraph=True, backend="eager")(*args)
    torch.testing.assert_close(got, expected)


# ---- the link in break messages -----------------------------------------------------------------


def test_a_break_message_links_an_existing_page_and_anchor():
    def with_print(x):
        print("side channel")
        return x + 1

    with pytest.raises(framefuse.Unsupported) as e:
        framefuse.compile(with_print, fullgraph=True)(torch.randn(3))
    path, anchor = docs_link(str(e.value))
    assert os.path.isfile(path), f"the Docs: link names {path}, which does not exist"
    assert os.path.basename(path) == "graph_breaks.md" and anchor == "ff0003"
    with open(path) as f:
        _, anchors, _ = parse(f.read())
    assert anchor in anchors, f"{path} has no anchor {anchor}"
