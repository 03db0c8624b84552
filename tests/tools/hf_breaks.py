"""Graph breaks of the transformers zoo (issue #28): for each model of tests/python/hf_zoo.py, what
framefuse.explain records from one inference call (eval mode, no grad): its graphs, its breaks and the most
frequent break reasons (the first line of each reason, counted).

    # from the repository root, after a build (build/main/site holds framefuse)
    PYTHONPATH=build/main/site python tests/tools/hf_breaks.py                  # the whole zoo
    PYTHONPATH=build/main/site python tests/tools/hf_breaks.py --model t5 --top 10

A record, not a gate: tests/python/models/test_hf_models.py checks the results and asserts no counts yet.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import hf_zoo  # noqa: E402

import framefuse  # noqa: E402


def explain(name):
    """framefuse.explain's ExplainOutput for one inference call of zoo model `name`."""
    model = hf_zoo.build(name).eval()
    with torch.no_grad():
        return framefuse.explain(model)(**hf_zoo.inputs(name))


def top_reasons(report, top):
    """[(count, first line of the reason)], most frequent first (ties in the order they first broke)."""
    counts = collections.Counter(br.reason.splitlines()[0] for br in report.break_reasons)
    return [(n, reason) for reason, n in counts.most_common(top)]


def table(rows, top):
    """rows: [(name, ExplainOutput)] -> the printed table."""
    lines = [f"{'model':<8} {'graphs':>6} {'breaks':>6}  top break reasons (count, first line)"]
    for name, report in rows:
        reasons = top_reasons(report, top) or [(0, "-")]
        for i, (n, reason) in enumerate(reasons):
            head = f"{name:<8} {report.graph_count:>6} {report.graph_break_count:>6}" if i == 0 else " " * 22
            lines.append(f"{head}  {n:>4}  {reason}" if n else f"{head}  {reason}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        action="append",
        choices=list(hf_zoo.ZOO),
        help="a zoo model (repeat for several; default: all of them)",
    )
    parser.add_argument("--top", type=int, default=5, help="break reasons listed per model (default 5)")
    args = parser.parse_args(argv)
    rows = [(name, explain(name)) for name in args.model or hf_zoo.ZOO]
    print(table(rows, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
