"""Run PyTorch's own Dynamo tests against framefuse and count pass / wrong / not captured.

    python tests/upstream/dynamo_adapter.py --upstream DIR [--files test_dicts test_generator ...]
        [--backend eager|inductor] [-k SUBSTRING] [--out DIR] [--timeout SECONDS]
    python tests/upstream/dynamo_adapter.py --summarize OUT/results.json

DIR holds upstream `test/dynamo/*.py` files, fetched outside this repository (their code never
enters it); see README.md. Each test runs in its own forked process with torch.compile and the
Dynamo test helpers redirected to framefuse (dynamo_patches), every compiled call checked against
eager (dynamo_reference), and is classified (dynamo_runner.classify). Writes results.json (every
test's record) and summary.md (the table and the wrong / error lists) to --out.
"""
from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import re
import sys
import time
import traceback
import unittest

# NB: before torch is imported. The runner forks per test and the eager reference forks per call;
# an OpenMP pool started before a fork hangs the child on its first parallel region.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["PYTORCH_PRINT_REPRO_ON_FAILURE"] = "0"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DEFAULT_FILES = ["test_misc", "test_repros", "test_dicts", "test_ctx_manager", "test_exceptions",
                 "test_generator", "test_modules"]
CLASSES = ["pass", "wrong", "not captured", "error", "dynamo-internal", "no compile", "xfail", "skipped"]


def _tests(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _tests(item)
        else:
            yield item


def run_file(name, args, out_dir):
    """Records of every test of one upstream module (or one record saying why it did not import)."""
    import dynamo_runner  # noqa: PLC0415
    try:
        module = importlib.import_module(name)
    except BaseException as e:  # noqa: BLE001 - a file that does not import is reported, not fatal
        return [{"test": f"{name} (import)", "class": "error", "outcome": "import error",
                 "reason": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}]
    test_file = os.path.abspath(module.__file__)
    tests = [t for t in _tests(unittest.TestLoader().loadTestsFromModule(module))
             if not args.k or any(k in t.id() for k in args.k)]
    records = []
    log_dir = os.path.join(out_dir, "logs", name)
    os.makedirs(log_dir, exist_ok=True)
    for i, test in enumerate(tests, 1):
        test_id = test.id().split(".", 1)[-1]
        rec = dynamo_runner.run_one(test, test_file, os.path.join(log_dir, f"{test_id}.log"), args.timeout)
        rec["test"] = test_id
        rec["class"], rec["reason"] = dynamo_runner.classify(rec)
        records.append(rec)
        print(f"[{name} {i}/{len(tests)}] {rec['class']:<15} {test_id}  {rec['reason'][:160]}", flush=True)
    return records


def summarize(results, meta):
    lines = ["# framefuse on PyTorch's Dynamo tests\n", f"backend: `{meta['backend']}`, torch {meta['torch']}, "
             f"framefuse {meta['framefuse']}, {meta['date']}\n", "| file | tests | " + " | ".join(CLASSES) + " |",
             "|---|---|" + "---|" * len(CLASSES)]
    totals = {c: 0 for c in CLASSES}
    for name, recs in results.items():
        counts = {c: sum(r["class"] == c for r in recs) for c in CLASSES}
        for c in CLASSES:
            totals[c] += counts[c]
        lines.append(f"| {name} | {len(recs)} | " + " | ".join(str(counts[c]) for c in CLASSES) + " |")
    lines.append(f"| total | {sum(totals.values())} | " + " | ".join(str(totals[c]) for c in CLASSES) + " |")
    lines += ["\n## not captured, by cause\n", "| tests | cause | e.g. |", "|---|---|---|"]
    lines += [f"| {n} | {cause} | `{example}` |" for cause, (n, example) in _causes(results)]
    for cls in ("wrong", "error", "not captured"):
        lines.append(f"\n## {cls}\n")
        for name, recs in results.items():
            for r in recs:
                if r["class"] == cls:
                    lines.append(f"- `{name}::{r['test']}`: {r['reason'][:400]}")
    return "\n".join(lines) + "\n"


def _causes(results):
    """The not-captured tests grouped by framefuse's refusal code (or by the count they assert)."""
    counts, examples = collections.Counter(), {}
    for name, recs in results.items():
        for r in recs:
            if r["class"] != "not captured":
                continue
            m = re.search(r"\[(FF\d+)\] ([^:;|]+)", r["reason"])
            cause = f"{m.group(1)} {m.group(2).strip()[:60]}" if m else "the test's frame/graph/op counts"
            counts[cause] += 1
            examples.setdefault(cause, f"{name}::{r['test']}")
    return [(cause, (n, examples[cause])) for cause, n in counts.most_common()]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", help="folder with the upstream test/dynamo files")
    p.add_argument("--summarize", metavar="RESULTS_JSON", help="only rewrite summary.md from a results.json")
    p.add_argument("--files", nargs="*", default=DEFAULT_FILES, help="module names (default: the seven)")
    p.add_argument("--backend", choices=("eager", "inductor"), default="eager")
    p.add_argument("-k", action="append", help="run only tests whose id contains this (repeatable)")
    p.add_argument("--out", default=os.path.join("build", "dynamo-acceptance"))
    p.add_argument("--timeout", type=int, default=60, help="seconds per test")
    args = p.parse_args(argv)
    if args.summarize:
        with open(args.summarize) as f:
            saved = json.load(f)
        summary = summarize(saved["results"], saved["meta"])
        with open(os.path.join(os.path.dirname(os.path.abspath(args.summarize)), "summary.md"), "w") as f:
            f.write(summary)
        print(summary)
        return
    if not args.upstream:
        p.error("--upstream is required")

    upstream = os.path.abspath(args.upstream)
    sys.path.insert(0, upstream)
    import torch  # noqa: PLC0415

    import framefuse  # noqa: PLC0415
    import dynamo_patches  # noqa: PLC0415
    torch.set_num_threads(1)
    dynamo_patches.install(args.backend)

    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    meta = {"backend": args.backend, "torch": torch.__version__, "framefuse": framefuse.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M"), "upstream": upstream}
    results = {}
    for name in args.files:
        results[name] = run_file(name, args, out_dir)
        with open(os.path.join(out_dir, "results.json"), "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1, default=str)
    summary = summarize(results, meta)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(summary)
    print(summary)


if __name__ == "__main__":
    main()
