"""The benchmark runner on its tiny preset: it runs, writes valid JSON, markdown and charts, and keeps
going past a contender that fails. Nothing here asserts a speed."""

import json
import math
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks import contenders, measure, run  # noqa: E402
from benchmarks.workloads import WorkloadUnavailable, all_workloads  # noqa: E402

TINY = run.PRESETS["tiny"]["workloads"]


def _deliberate_failure(target):
    raise RuntimeError("deliberate failure from the test contender")


def _off_by_one(target):
    def wrong(*args):
        out = target(*args)
        return out + 1
    return wrong


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One run of the tiny preset with a failing contender registered between eager and the others."""
    out = tmp_path_factory.mktemp("bench")
    contenders.register(contenders.Contender("test-fails", "test", _deliberate_failure))
    contenders.register(contenders.Contender("test-wrong", "test", _off_by_one))
    try:
        rc = run.main(["--preset", "tiny", "--out", str(out),
                       "--contenders", "eager,test-fails,torch.compile-eager,framefuse-eager,test-wrong"])
    finally:
        contenders.unregister("test-fails")
        contenders.unregister("test-wrong")
    def no_constants(name):
        raise ValueError(f"results.json is not strict JSON: {name}")
    with open(out / "results.json") as f:
        result = json.load(f, parse_constant=no_constants)
    return rc, out, result


def _records(result, contender):
    return {r["workload"]: r for r in result["records"] if r["contender"] == contender}


def test_runs_and_writes_valid_json(tiny_run):
    rc, out, result = tiny_run
    assert rc == 0
    assert result["preset"] == "tiny"
    assert [c["name"] for c in result["contenders"]][0] == "eager"
    assert result["environment"]["torch"] == torch.__version__
    eager = _records(result, "eager")
    assert sorted(eager) == sorted(TINY)
    for name, r in eager.items():
        assert r["status"] == "ok", (name, r.get("reason"))
        assert r["steady_s"] > 0 and r["first_call_s"] > 0
        assert r["speedup"] == 1.0
        assert r["samples"] >= 3 and r["inner"] >= 1


def test_failing_contender_is_reported_and_run_goes_on(tiny_run):
    _, _, result = tiny_run
    failed = _records(result, "test-fails")
    assert sorted(failed) == sorted(TINY)
    for r in failed.values():
        assert r["status"] == "failed"
        assert r["reason"] == "compile: RuntimeError: deliberate failure from the test contender"
        assert "steady_s" not in r and "speedup" not in r  # no number for what did not run
    # Contenders after the failing one were still measured on every workload.
    for name in ("torch.compile-eager", "framefuse-eager", "test-wrong"):
        recs = _records(result, name)
        assert sorted(recs) == sorted(TINY)
        for r in recs.values():
            assert r["status"] in ("ok", "failed", "unavailable")
            if r["status"] != "ok":
                assert r["reason"]


def test_torch_compile_is_measured_or_reported_unavailable(tiny_run):
    _, _, result = tiny_run
    for r in _records(result, "torch.compile-eager").values():
        if hasattr(torch, "compile"):
            assert r["status"] == "ok", r.get("reason")
            assert r["within_tol"] is True
        else:
            assert r["status"] == "unavailable"
            assert "has no torch.compile" in r["reason"]


def test_wrong_results_are_flagged(tiny_run):
    _, _, result = tiny_run
    for r in _records(result, "test-wrong").values():
        assert r["status"] == "ok"
        assert r["within_tol"] is False
        assert r["max_abs_err"] == pytest.approx(1.0, abs=1e-5)
    md = (tiny_run[1] / "results.md").read_text()
    assert "MISMATCH vs eager" in md


def test_markdown_and_terminal_tables(tiny_run, capsys):
    _, out, result = tiny_run
    md = (out / "results.md").read_text()
    assert "| workload | contender | first call |" in md
    assert "deliberate failure from the test contender" in md
    assert result["command"].startswith("python -m benchmarks.run --preset tiny")
    table = run.report.terminal_table(result["records"])
    assert table.splitlines()[0].split()[:2] == ["workload", "contender"]
    assert "FAILED: compile: RuntimeError" in table


def test_overhead_is_measured_for_tiny_workloads(tiny_run):
    _, _, result = tiny_run
    for name in ("add_one", "one_graph_break"):
        r = _records(result, "test-wrong")[name]
        assert math.isfinite(r["overhead_s"]) and r["overhead_base_s"] > 0


def test_charts_png(tiny_run):
    _, out, result = tiny_run
    if run.find_chart_python() is None:
        pytest.skip("no interpreter with matplotlib found (this Python, $FRAMEFUSE_BENCH_PYTHON, system python3); "
                    "the runner reports: " + result["charts_note"])
    names = [c["file"] for c in result["charts"]]
    assert "speedup.png" in names and "compile_time.png" in names, result["charts_note"]
    for n in names:
        with open(out / n, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_graph_demo_is_honest(tiny_run):
    _, _, result = tiny_run
    demo = result["graph_demo"]
    assert demo["status"] in ("ok", "unavailable", "failed")
    if demo["status"] != "ok":
        assert demo["reason"]
    else:
        assert demo["max_abs_err"] <= 1e-6
        assert demo["code"] or "no printed form" in demo["reason"]


def test_compare_reports_structure_and_shape_differences():
    a = torch.ones(3)
    assert measure.compare(a, a.clone(), 0, 0)[:2] == (0.0, True)
    err, ok, note = measure.compare(a, torch.ones(4), 1e-3, 1e-3)
    assert err == math.inf and not ok and "shape" in note
    err, ok, note = measure.compare((a, a), (a,), 1e-3, 1e-3)
    assert not ok and "output tensors" in note
    err, ok, _ = measure.compare(a, a + 1e-3, 1e-4, 0)
    assert not ok and err == pytest.approx(1e-3, rel=1e-3)
    nan = torch.tensor([float("nan")])
    assert measure.compare(nan, nan.clone(), 0, 0)[1] is True
    assert measure.compare(a[:1], nan, 0, 0)[1] is False


def test_every_workload_builds_and_runs_eagerly_at_tiny_scale():
    for name, wl in all_workloads().items():
        try:
            case = wl.build("cpu", "tiny")
        except WorkloadUnavailable as e:
            assert "not importable" in str(e)
            continue
        out = case.run(case.target)
        assert measure.flatten(out), name


def test_unknown_names_are_refused():
    with pytest.raises(SystemExit, match="unknown contender"):
        run.main(["--preset", "tiny", "--contenders", "nope"])
    with pytest.raises(SystemExit, match="unknown workload"):
        run.main(["--preset", "tiny", "--workloads", "nope"])


def test_cli_lists_workloads():
    r = subprocess.run([sys.executable, "-m", "benchmarks.run", "--list"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for name in TINY + ("resnet18", "nanogpt", "torch.compile", "framefuse-eager"):
        assert name in r.stdout


def test_versus_table_pairs_framefuse_with_torch_compile():
    def rec(contender, **kw):
        return dict(workload="w", device="cpu", contender=contender, status="ok", within_tol=True, **kw)
    records = [rec("framefuse-eager", first_call_s=0.01, steady_s=2e-6, overhead_s=1e-6),
               rec("torch.compile-eager", first_call_s=0.5, steady_s=8e-6, overhead_s=5e-6),
               rec("framefuse", first_call_s=0.2, steady_s=1.0),
               dict(rec("torch.compile", first_call_s=2.0, steady_s=1.0), status="failed")]
    rows = run.report.versus_rows(records)
    assert rows == [("w", "framefuse-eager / torch.compile-eager", "1/50", "4.00x", "0.20 (1/5.0)")]
    # A framefuse result that differs from eager is never compared.
    records[0]["within_tol"] = False
    assert run.report.versus_rows(records) == []


@pytest.mark.torch2
def test_isolated_first_calls_run_in_fresh_processes(tmp_path):
    rc = run.main(["--preset", "tiny", "--workloads", "add_one", "--contenders", "eager,torch.compile-eager",
                   "--isolate", "--no-demo", "--no-explain", "--no-charts", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "results.json").read_text())
    r = _records(result, "torch.compile-eager")["add_one"]
    assert r["status"] == "ok", r.get("reason")
    assert r["cold_process_first_call_s"] > 0 and r["warm_disk_first_call_s"] > 0, r
    assert "cold proc" in (tmp_path / "results.md").read_text()
