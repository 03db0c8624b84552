"""Prints the test summary of scripts/test.sh.

Each argument describes one lane as "status|lane|description|junit xml|log":
status is ok, fail or none (the lane had nothing to run). For each lane this
prints the counts read from its JUnit file and the closing line its runner
printed (pytest's "== N passed in Xs ==", ctest's "N% tests passed"), then one
total line "total: N passed, N failed, N skipped". A lane that failed without
countable results (a build error, a crash, a timeout) counts as one failure,
so the total never reads 0 failed when the run failed.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

PYTEST_CLOSING = re.compile(r"^=+ .*\bin \d+(\.\d+)?s\b.*=+$")
CTEST_CLOSING = re.compile(r"^\d+% tests passed, \d+ tests? failed out of \d+")
HEADER_KEYS = ("torch:", "framefuse._C:")


def junit_counts(path: str) -> tuple[int, int, int] | None:
    """(passed, failed, skipped) from a pytest or ctest JUnit file."""
    if not path or not Path(path).is_file():
        return None
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    tests = failed = skipped = 0
    for s in suites:
        tests += int(s.get("tests", 0))
        failed += int(s.get("failures", 0)) + int(s.get("errors", 0))
        skipped += int(s.get("skipped", 0)) + int(s.get("disabled", 0))
    return tests - failed - skipped, failed, skipped


def log_lines(path: str) -> tuple[list[str], list[str]]:
    """(runner closing lines, conftest header lines) found in a lane's log."""
    if not path or not Path(path).is_file():
        return [], []
    closing, header = [], []
    for line in Path(path).read_text(errors="replace").splitlines():
        if PYTEST_CLOSING.match(line) or CTEST_CLOSING.match(line):
            closing.append(line.strip())
        elif line.startswith(HEADER_KEYS) and len(header) < len(HEADER_KEYS):
            header.append(line.strip())
    return closing[-1:], header


def main(argv: list[str]) -> int:
    total = [0, 0, 0]
    bad = False
    print("=" * 30 + " framefuse test summary " + "=" * 30)
    for arg in argv:
        status, lane, desc, xml, log = (arg.split("|") + [""] * 5)[:5]
        counts = junit_counts(xml)
        closing, header = log_lines(log)
        if status == "fail":
            bad = True
            if counts is None or counts[1] == 0:
                counts = (counts or (0, 0, 0))[0], 1, (counts or (0, 0, 0))[2]
        shown = "" if counts is None else \
            f": {counts[0]} passed, {counts[1]} failed, {counts[2]} skipped"
        print(f"{lane:<7} {status.upper():<5} {desc}{shown}")
        for line in header + closing:
            print(f"{'':14}{line}")
        if counts is not None:
            total = [t + c for t, c in zip(total, counts)]
    print(f"total: {total[0]} passed, {total[1]} failed, {total[2]} skipped")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
