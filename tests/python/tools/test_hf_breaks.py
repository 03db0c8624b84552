"""tests/tools/hf_breaks.py: the table of graphs, breaks and break reasons of the transformers zoo."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")  # NB: absent on the Debian lane (torch 1.13)

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("hf_breaks", ROOT / "tests" / "tools" / "hf_breaks.py")
hf_breaks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hf_breaks)

pytestmark = pytest.mark.usefixtures("fresh_framefuse")


def test_one_model_prints_a_row_of_counts_and_its_top_reasons(capsys):
    assert hf_breaks.main(["--model", "vit", "--top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["model", "graphs", "breaks"]
    # The counts are a record, not asserted: a row of the model's counts, then at most two reasons.
    assert re.match(r"vit +\d+ +\d+  ", lines[1]), lines[1]
    assert 2 <= len(lines) <= 3
    assert all(re.match(r" {22}  +\d+  \[FF\d{4}\] ", line) for line in lines[2:]), lines


def test_reasons_are_counted_by_their_first_line():
    report = hf_breaks.explain("vit")
    counted = hf_breaks.top_reasons(report, top=100)
    assert sum(n for n, _ in counted) == len(report.break_reasons)
    assert [n for n, _ in counted] == sorted((n for n, _ in counted), reverse=True)
    assert all("\n" not in reason for _, reason in counted)
