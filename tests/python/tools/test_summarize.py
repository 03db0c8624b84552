"""scripts/summarize.py: the summary that ends scripts/test.sh (and so CI's output)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure_python

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("summarize", ROOT / "scripts" / "summarize.py")
summarize = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(summarize)

PYTEST_XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="2" skipped="3" tests="10" time="1.0">
</testsuite></testsuites>"""
CTEST_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Linux" tests="7" failures="1" disabled="0" skipped="2" time="0.5"></testsuite>"""


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_pytest_counts_errors_as_failures(tmp_path):
    assert summarize.junit_counts(_write(tmp_path, "a.xml", PYTEST_XML)) == (4, 3, 3)


def test_ctest_counts(tmp_path):
    assert summarize.junit_counts(_write(tmp_path, "c.xml", CTEST_XML)) == (4, 1, 2)


def test_missing_or_broken_junit_gives_no_counts(tmp_path):
    assert summarize.junit_counts(str(tmp_path / "absent.xml")) is None
    assert summarize.junit_counts(_write(tmp_path, "bad.xml", "<testsuite")) is None


def test_closing_and_header_lines_are_found(tmp_path):
    log = _write(tmp_path, "lane.log", "\n".join([
        "framefuse lane: main",
        "framefuse._C: /x/_C.so",
        "torch: 2.13.0 (/x/torch)",
        "tests/python/test_a.py ..F",
        "==== 2 passed, 1 failed in 0.52s ====",
        "100% tests passed, 0 tests failed out of 12",
    ]))
    closing, header = summarize.log_lines(log)
    assert header == ["framefuse._C: /x/_C.so", "torch: 2.13.0 (/x/torch)"]
    assert closing == ["100% tests passed, 0 tests failed out of 12"]


def test_total_line_is_last_and_counts_a_failed_lane_without_results(tmp_path, capsys):
    xml = _write(tmp_path, "main.xml", PYTEST_XML)
    rc = summarize.main([f"ok|main|Python 3.11|{xml}|", "fail|debian|build failed||", "none|py312|nothing||"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert lines[-1] == "total: 4 passed, 4 failed, 3 skipped"


def test_all_ok_returns_zero(tmp_path, capsys):
    xml = _write(tmp_path, "c.xml", CTEST_XML.replace('failures="1"', 'failures="0"'))
    assert summarize.main([f"ok|cpp|ctest|{xml}|"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "total: 5 passed, 0 failed, 2 skipped"
