"""The benchmark runner on its tiny preset: it runs, writes valid JSON, markdown and charts, and keeps
going past a contender that fails. Nothing here asserts a speed."""

import json
import math
import os
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
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
        rc = run.main(["--preset", "tiny", "--in-process", "--out", str(out),
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


def test_cpu_steady_state_keeps_torch_threads_and_takes_enough_samples():
    """steady() on CPU goes through torch.utils.benchmark's Timer: torch's thread count stays as set (the
    Timer's own default is one thread), and a slow call still gets at least 4 samples."""
    seen = set()

    def call():
        seen.add(torch.get_num_threads())
        time.sleep(0.02)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        res = measure.steady(call, "cpu", run.QUICK_BUDGET)
    finally:
        torch.set_num_threads(before)
    assert seen == {2}
    assert res["samples"] >= 4 and res["inner"] == 1
    assert 0.02 <= res["min_s"] <= res["median_s"] < 0.2
    assert res["iqr_s"] >= 0
    fast = measure.steady(lambda: None, "cpu", run.PRESETS["tiny"]["budget"])
    assert fast["samples"] >= 4 and fast["inner"] > 1


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
        run.main(["--preset", "tiny", "--in-process", "--contenders", "nope"])
    with pytest.raises(SystemExit, match="unknown workload"):
        run.main(["--preset", "tiny", "--in-process", "--workloads", "nope"])


PLUGIN = """
import os, signal
from benchmarks import contenders

# NB: SIGKILL, not SIGSEGV: under AddressSanitizer (the asan lane) a SIGSEGV is ASan's to report,
# and the child then exits with status 1 instead of dying by the signal.
def die(*args):
    os.kill(os.getpid(), signal.SIGKILL)

def crash_on_workloads(target):
    # The set-up's throwaway call has 16 elements and passes; the workloads' calls crash.
    return lambda *args: target(*args) if args[0].numel() == 16 else die()

contenders.register(contenders.Contender("test-crash-setup", "test", die))
contenders.register(contenders.Contender("test-crash", "test", crash_on_workloads))
contenders.register(contenders.Contender("test-same", "test", lambda target: target))

def hang(target):
    import time
    return lambda *args: target(*args) if args[0].numel() == 16 else time.sleep(3600)

contenders.register(contenders.Contender("test-hang", "test", hang))
"""


def test_a_contender_that_kills_or_hangs_the_process_is_recorded_and_the_run_goes_on(tmp_path):
    plugin = tmp_path / "crash_plugin.py"
    plugin.write_text(PLUGIN)
    rc = run.main(["--preset", "tiny", "--plugin", str(plugin), "--workloads", "add_one",
                   "--contenders", "eager,test-crash-setup,test-crash,test-hang,test-same", "--no-demo",
                   "--no-charts", "--no-explain", "--timeout", "20", "--out", str(tmp_path / "out")])
    assert rc == 0
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [(r["workload"], r["contender"]) for r in result["records"]] == [
        ("add_one", c) for c in ("eager", "test-crash-setup", "test-crash", "test-hang", "test-same")]
    assert "--child" not in result["command"] and "--timeout 20" in result["command"]
    setups = {c["name"]: c["status"] for c in result["contenders"]}
    assert setups["test-crash-setup"] == "set-up crashed: killed by SIGKILL"
    assert setups["test-crash"] == "ok"
    for r in result["records"]:
        if r["contender"] == "test-crash-setup":
            assert r["status"] == "failed"
            assert r["reason"] == "not run: its set-up took the process down (set-up crashed: killed by SIGKILL)"
        elif r["contender"] == "test-crash":
            assert r["status"] == "failed"
            assert r["reason"].startswith("the benchmark process died (killed by SIGKILL)")
        elif r["contender"] == "test-hang":
            assert r["status"] == "failed"
            assert r["reason"].startswith("the benchmark process died (no result within 20 s, killed)")
        else:
            assert r["status"] == "ok", r.get("reason")
            assert r["steady_s"] > 0
    assert all(r.get("speedup") for r in result["records"] if r["contender"] == "test-same")


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


def _isolated_add_one(tmp_path, contender):
    """add_one with eager and `contender`, isolated first calls on: (results.json, contender's record)."""
    rc = run.main(["--preset", "tiny", "--workloads", "add_one", "--contenders", "eager," + contender,
                   "--isolate", "--in-process", "--no-demo", "--no-explain", "--no-charts", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "results.json").read_text())
    return result, _records(result, contender)["add_one"]


@pytest.mark.torch2
def test_isolated_first_calls_run_in_fresh_processes(tmp_path):
    _, r = _isolated_add_one(tmp_path, "torch.compile-eager")
    assert r["status"] == "ok", r.get("reason")
    assert r["cold_process_first_call_s"] > 0 and r["warm_disk_first_call_s"] > 0, r
    assert "cold proc" in (tmp_path / "results.md").read_text()


def test_isolated_first_calls_split_out_framefuse_compile_time(tmp_path):
    result, r = _isolated_add_one(tmp_path, "framefuse-eager")
    assert r["status"] == "ok", r.get("reason")
    for label in ("cold_process", "warm_disk"):
        assert 0 < r[f"{label}_compile_s"] < r[f"{label}_first_call_s"], r
        assert r[f"{label}_eager_first_call_s"] > 0, r
    assert "eager_first_call_s" not in r  # only the isolated processes measure it
    assert "(compile " in (tmp_path / "results.md").read_text()
    e = _records(result, "eager")["add_one"]
    assert "warm_disk_compile_s" not in e  # eager never loads framefuse


def test_deadline_records_the_rest_as_not_run(tmp_path):
    rc = run.main(["--preset", "tiny", "--in-process", "--deadline", "0.001", "--workloads", "sin_cos,add_one",
                   "--contenders", "eager,framefuse-eager", "--no-demo", "--no-charts", "--out", str(tmp_path)])
    assert rc == 0
    assert run.DEADLINE_ENV not in os.environ  # the next run in this process has no deadline
    result = json.loads((tmp_path / "results.json").read_text())
    assert len(result["records"]) == 4
    for r in result["records"]:
        assert r["status"] == "skipped" and "time limit" in r["reason"], r
        assert "steady_s" not in r


def test_gpu_preset_is_a_known_subset_with_a_deadline():
    preset = run.PRESETS["gpu"]
    known = all_workloads()
    assert all(w in known for w in preset["workloads"])
    assert preset["workloads"][:3] == ("nanogpt", "resnet18", "mlp_train_step")  # the models first
    assert 0 < preset["deadline"] <= 550 and preset["timeout"] < preset["deadline"]
    assert all(c in contenders.CONTENDERS for c in preset["contenders"])


def test_zoo_preset_is_the_transformers_models_at_quick_scale():
    preset = run.PRESETS["zoo"]
    assert preset["workloads"] == ("bert", "gpt2", "llama", "t5", "vit", "bert_train_step", "gpt2_train_step")
    assert all(w in all_workloads() and w in run.GPU_WORKLOADS for w in preset["workloads"])
    assert preset["scale"] == "quick" and preset["budget"] == run.PRESETS["quick"]["budget"]
    assert all(c in contenders.CONTENDERS for c in preset["contenders"])


def test_train_preset_is_the_training_workloads_with_torch_compile():
    preset = run.PRESETS["train"]
    assert all(w in all_workloads() and w in run.GPU_WORKLOADS for w in preset["workloads"])
    assert all(all_workloads()[w].kind == "train" or w.endswith("_grad") for w in preset["workloads"])
    assert "torch.compile" in preset["contenders"] and preset["scale"] == "quick"


def test_gpu_suite_on_cpu_tiny(tmp_path):
    """benchmarks.gpu_suite's code paths on CPU at tiny sizes: a child measures, the parent writes JSON
    and a markdown table; the errors against eager are within tolerance. No speed is asserted."""
    out = tmp_path / "gpu.json"
    import framefuse  # the lane's own package (with its _C), not the source folder
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(framefuse.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, REPO, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "benchmarks.gpu_suite", "--device", "cpu", "--tiny", "--contenders",
                        "framefuse", "--workloads", "sin_cos,mlp_train_ro", "--json", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "| workload | contender | steady ms |" in r.stdout
    result = json.loads(out.read_text())
    got = {(x["workload"], x["contender"]): x for x in result["records"]}
    assert set(got) == {("sin_cos", "eager"), ("sin_cos", "framefuse"), ("mlp_train_ro", "eager"),
                        ("mlp_train_ro", "framefuse-ro")}
    for key, x in got.items():
        assert x["status"] == "ok", x
        assert x["steady_ms"] > 0 and x["cold_s"] > 0
        if key[1] != "eager":
            assert x["within_tol"] and x["rel_err"] <= 1e-4, x


def test_run_workload_stops_starting_contenders_when_told():
    from benchmarks import core
    wl = all_workloads()["add_one"]
    caches = core.CacheDirs()
    try:
        recs = list(core.run_workload(wl, "cpu", "tiny", [contenders.CONTENDERS[n] for n in ("eager", "framefuse-eager")],
                                      run.PRESETS["tiny"]["budget"], caches, do_explain=False,
                                      stop=lambda: "not run: deadline"))
    finally:
        caches.cleanup()
    assert [(r["contender"], r["status"]) for r in recs] == [("eager", "ok"), ("framefuse-eager", "skipped")]
    assert recs[1]["reason"] == "not run: deadline" and "steady_s" not in recs[1]


def test_interleave_measures_contenders_in_turns(tmp_path):
    rc = run.main(["--preset", "tiny", "--workloads", "add_one,sin_cos", "--contenders", "eager,framefuse-eager",
                   "--interleave", "3", "--in-process", "--no-demo", "--no-explain", "--no-charts",
                   "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "results.json").read_text())
    entries = result["interleaved"]
    assert [e["workload"] for e in entries] == ["add_one", "sin_cos"]
    for e in entries:
        assert e["rounds"] == 3 and set(e["steady_s"]) == {"eager", "framefuse-eager"}, e
        assert all(t > 0 for t in e["steady_s"].values())
        assert set(e["paired"]) == {"framefuse-eager"} and e["paired"]["framefuse-eager"] > 0
    md = (tmp_path / "results.md").read_text()
    assert "contenders taking turns" in md and "| add_one | 3 |" in md
