"""PyTorch's OpInfo database against framefuse on both backends (tests/python/opinfo_sweep.py).

The CI budget: the first float32 sample of every op and variant (function, method, in-place
method) that supports float32 on CPU, and of the int64 and bool variants of a few ops, through
backend="eager" and backend="inductor". No item may be wrong or crash, and the share of items
eager can run that framefuse captures whole must stay at the floor measured on each torch.
The sweep runs in a child process: op_db's import changes process state (torch.backends flags),
and a process that dies names the item that killed it.

The full local sweep (all samples; float32, float64, bfloat16, int64, bool) is
`python tests/python/opinfo_sweep.py --full --report FILE.md`; its numbers are in
benchmarks/RESULTS.md.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import opinfo_sweep

TORCH_MAJOR = int(torch.__version__.split(".")[0])
# Measured with this file's selection (see benchmarks/RESULTS.md); a drop means a regression.
CAPTURE_FLOOR = {2: 0.95, 1: 0.89}[min(TORCH_MAJOR, 2)]
# A few ops on integer and bool tensors too (their lowerings differ from the float ones).
INTEGER_OPS = "add,mul,sub,abs,neg,sum,cumsum,eq,lt,maximum,where,bitwise_and,logical_not,sort,flip,cat,index_select,remainder"


def _run_sweep(jsonl, *args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(Path(opinfo_sweep.__file__)), "--jsonl", str(jsonl), *args],
                          env=env, capture_output=True, text=True, timeout=900)
    done, running = opinfo_sweep.read_results(jsonl) if jsonl.exists() else ([], None)
    assert running is None, f"the sweep process died (exit {proc.returncode}) in item {running}:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, proc.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def float32_items(tmp_path_factory):
    return _run_sweep(tmp_path_factory.mktemp("opinfo") / "float32.jsonl")


def test_no_item_is_wrong_or_crashes(float32_items):
    bad = [r for r in float32_items if r["status"] in ("wrong", "crashed")]
    assert not bad, "\n".join(f"{r['status']}: {r['op']} {r['kind']} ({r['backend']}): {r.get('reason')}" for r in bad)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_capture_rate_floor(float32_items, backend):
    summary = opinfo_sweep.summarize(float32_items)[backend]
    assert summary["runnable"] > 500, summary  # op_db was loaded and swept, not skipped
    assert summary["captured_share"] >= CAPTURE_FLOOR, (
        f"{backend}: {summary['captured_share']:.1%} of {summary['runnable']} items captured, floor {CAPTURE_FLOOR:.0%}")


def test_captured_items_compile_in_milliseconds(float32_items):
    times = sorted(r["seconds"] for r in float32_items if r["status"] == "captured" and r["backend"] == "eager")
    assert times and times[len(times) // 2] < 0.05, f"median first call {times[len(times) // 2]:.3f} s"


def test_integer_and_bool_samples(tmp_path):
    done = _run_sweep(tmp_path / "integer.jsonl", "--dtypes", "int64,bool", "--ops", INTEGER_OPS)
    bad = [r for r in done if r["status"] in ("wrong", "crashed")]
    assert not bad, "\n".join(f"{r['status']}: {r['op']} {r['kind']} {r['dtype']} ({r['backend']}): {r.get('reason')}" for r in bad)
    assert sum(r["status"] == "captured" for r in done) >= 20, json.dumps(opinfo_sweep.summarize(done))
