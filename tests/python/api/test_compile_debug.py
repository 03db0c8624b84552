"""FRAMEFUSE_COMPILE_DEBUG=1: a folder per run with every compile's artifacts and a runnable repro
per graph (framefuse/_debug.py)."""
import importlib.util
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import framefuse
from framefuse import _debug
from inductor_util import needs_codegen

pytestmark = pytest.mark.usefixtures("fresh_framefuse")

PROGRAM = textwrap.dedent("""
    import torch, framefuse

    @framefuse.compile
    def f(x, y):
        h = torch.relu(x @ y).sum(1) * 2
        print("a break")                      # two graphs: [0/0] and the resume function's
        return torch.tanh(h) + 1

    f(torch.randn(8, 8), torch.randn(8, 8))
""")


@pytest.fixture
def debug_dir(tmp_path):
    run = _debug.enable(str(tmp_path))
    yield run
    _debug.disable()


def _load(path):
    spec = importlib.util.spec_from_file_location(f"repro_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _folder(run):
    """The one compile's folder of an in-process test (frame ids are not reset between tests)."""
    (only,) = [d for d in os.listdir(run) if os.path.isdir(os.path.join(run, d))]
    return os.path.join(run, only)


def test_the_environment_variable_writes_a_run_folder(tmp_path):
    env = dict(os.environ, FRAMEFUSE_COMPILE_DEBUG="1", FRAMEFUSE_COMPILE_DEBUG_DIR=str(tmp_path))
    env.pop("FRAMEFUSE_LOGS", None)
    r = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "framefuse" not in r.stderr  # the folder gets the records, stderr none (no FRAMEFUSE_LOGS)
    (run,) = os.listdir(tmp_path)
    assert run.startswith("run_") and run.endswith(f"_pid{run.rsplit('pid', 1)[1]}")
    files = set(os.listdir(tmp_path / run))
    assert "debug.log" in files and "0_0" in files
    compiles = sorted(f for f in files if f != "debug.log")
    assert len(compiles) >= 2, compiles  # the frame and its resume function
    for c in compiles:
        got = set(os.listdir(tmp_path / run / c))
        assert {"graph_code.py", "guards.txt", "repro.py"} <= got, (c, got)
        code = (tmp_path / run / c / "graph_code.py").read_text()
        compile(code, "graph_code.py", "exec")  # a Python file (the header line is a comment)
        assert "def forward" in code
    first = tmp_path / run / "0_0"
    assert "check_tensor(L['x']" in (first / "guards.txt").read_text()
    assert "graph_breaks.txt" in os.listdir(first) and "print" in (first / "graph_breaks.txt").read_text()
    log = (tmp_path / run / "debug.log").read_text()
    assert "[0/0]" in log and "framefuse.frontend" in log


@needs_codegen
def test_pipeline_passes_and_generated_code_are_written(debug_dir):
    fn = framefuse.compile(lambda x: torch.relu(x).sum(0) * 3)
    fn(torch.randn(16, 4))
    folder = _folder(debug_dir)
    pass_ir = open(os.path.join(folder, "pass_ir.txt")).read()
    assert "graph after fold_constants" in pass_ir and "loop IR after lower_graph" in pass_ir
    output = open(os.path.join(folder, "output_code.txt")).read()
    assert "kernel" in output


def test_repro_runs_the_graph_and_detects_a_mismatch(debug_dir):
    fn = framefuse.compile(lambda x, y: torch.sigmoid(x[:, :3] * y) - x.mean(), backend="inductor")
    x, y = torch.randn(5, 4), torch.randn(5, 1)
    fn(x, y)
    repro = _load(os.path.join(_folder(debug_dir), "repro.py"))
    shapes = [(s[1], s[2]) for s in repro.INPUTS]
    assert shapes == [((5, 4), (4, 1)), ((5, 1), (1, 1))]
    assert repro.main() == 0
    # A backend that computes something else: the repro says so and exits with 1.
    real = repro._call_backend
    repro._call_backend = lambda *a: (lambda *inputs: tuple(o + 1 for o in real(*a)(*inputs)))
    assert repro.main() == 1


def test_logs_the_user_asked_for_still_reach_logging(debug_dir, caplog):
    framefuse.set_logs("guards")
    with caplog.at_level(logging.DEBUG, logger="framefuse"):
        framefuse.compile(lambda x: x * 2)(torch.randn(3))
    names = {r.name for r in caplog.records}
    assert names == {"framefuse.frontend.guards"}, names  # the folder has the rest
    folder = _folder(debug_dir)
    assert os.path.exists(os.path.join(folder, "pass_ir.txt")) or not framefuse.inductor.codegen_available()
    assert os.path.exists(os.path.join(folder, "graph_code.py"))


def test_off_writes_nothing(tmp_path):
    _debug.enable(str(tmp_path))
    _debug.disable()
    (run,) = os.listdir(tmp_path)
    framefuse.compile(lambda x: x + 1)(torch.randn(2))
    assert os.listdir(tmp_path / run) == []
