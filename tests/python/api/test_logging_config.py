"""FRAMEFUSE_LOGS syntax, set_logs, and framefuse.config."""
import logging
import os
import subprocess
import sys

import pytest

import framefuse
from framefuse import _C


@pytest.fixture(autouse=True)
def _logs_off():
    yield
    framefuse.set_logs("")


def test_component_enables_its_default_artifacts():
    framefuse.set_logs("frontend")
    on = set(_C.logging.enabled_artifacts())
    assert {"graph_breaks", "guards", "recompiles"} <= on
    assert "recompiles_verbose" not in on and "bytecode" not in on  # off by default
    assert _C.logging.component_levels()["frontend"] == logging.INFO


def test_plus_minus_set_levels():
    framefuse.set_logs("+inductor,-frontend")
    levels = _C.logging.component_levels()
    assert levels["inductor"] == logging.DEBUG
    assert levels["frontend"] == logging.ERROR


def test_artifact_alone():
    framefuse.set_logs("output_code, perf_hints")
    assert set(_C.logging.enabled_artifacts()) == {"output_code", "perf_hints"}
    assert _C.logging.component_levels()["inductor"] == 255  # the component itself stays off


def test_empty_spec_turns_everything_off():
    framefuse.set_logs("all")
    framefuse.set_logs("")
    assert _C.logging.enabled_artifacts() == []


def test_unknown_name_lists_valid_ones():
    with pytest.raises(framefuse.UserError) as info:
        framefuse.set_logs("graph_brakes")
    msg = str(info.value)
    assert msg.startswith("FRAMEFUSE_LOGS: unknown component or artifact 'graph_brakes'. Valid components: frontend, graph, inductor, all (dynamo: frontend).")
    assert "graph_breaks" in msg and "output_code" in msg


def test_dynamo_is_an_alias_of_frontend():
    # TORCH_LOGS users write `+dynamo`; framefuse's component for it is `frontend`
    framefuse.set_logs("+dynamo")
    assert _C.logging.component_levels()["frontend"] == logging.DEBUG
    framefuse.set_logs(dynamo=True)
    assert _C.logging.component_levels()["frontend"] == logging.INFO
    assert "graph_breaks" in _C.logging.enabled_artifacts()
    framefuse.set_logs("")


def test_keyword_form():
    framefuse.set_logs(frontend=logging.DEBUG, output_code=True, fusion=False)
    assert _C.logging.component_levels()["frontend"] == logging.DEBUG
    assert "output_code" in _C.logging.enabled_artifacts()
    assert "fusion" not in _C.logging.enabled_artifacts()


def test_records_reach_python_logging(caplog):
    framefuse.set_logs("graph_code")
    with caplog.at_level(logging.DEBUG, logger="framefuse"):
        _C.logging.set_compile_tag(3, 1)
        _C.logging.emit("graph_code", "hello graph")
        _C.logging.set_compile_tag(-1, -1)
        _C.logging.emit("fusion", "not enabled: dropped")
    records = [r for r in caplog.records if r.name.startswith("framefuse")]
    assert [(r.name, r.getMessage()) for r in records] == [("framefuse.graph.graph_code", "[3/1] hello graph")]


def test_env_var_is_read_at_import():
    code = "import framefuse; from framefuse import _C; print(sorted(_C.logging.enabled_artifacts()))"
    env = dict(os.environ, FRAMEFUSE_LOGS="+graph,perf_hints")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['graph_code', 'perf_hints']"


def test_env_var_bad_spec_fails_import_clearly():
    env = dict(os.environ, FRAMEFUSE_LOGS="nope")
    out = subprocess.run([sys.executable, "-c", "import framefuse"], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "unknown component or artifact 'nope'" in out.stderr


def test_config_defaults_and_patch():
    assert framefuse.config.recompile_limit == 8
    with framefuse.config.patch(recompile_limit=2):
        assert framefuse.config.recompile_limit == 2
    assert framefuse.config.recompile_limit == 8
    framefuse.config.recompile_limit = 3
    try:
        assert framefuse.config.recompile_limit == 3
    finally:
        framefuse.config.recompile_limit = 8


def test_config_rejects_unknown_and_wrong_types():
    with pytest.raises(AttributeError, match="no knob 'recompile_limt'"):
        framefuse.config.recompile_limt = 3
    with pytest.raises(TypeError, match="must be int, got str"):
        framefuse.config.recompile_limit = "3"
    with pytest.raises(TypeError, match="must be bool"):
        with framefuse.config.patch(raise_on_internal_error=1):
            pass
    assert "recompile_limit (int, default 8)" in framefuse.config.describe()


def _helper_scaled(t):
    return t * 3


def test_plus_frontend_traces_each_instruction(caplog):
    import torch

    def f(x):
        y = torch.relu(x)
        return _helper_scaled(y)

    framefuse.reset()
    framefuse.set_logs("+frontend")
    with caplog.at_level(logging.DEBUG, logger="framefuse"):
        framefuse.compile(f, backend="eager")(torch.randn(4, 2))
    lines = [r.getMessage() for r in caplog.records if r.name == "framefuse.frontend"]
    traces = [m for m in lines if "TRACE " in m]
    first_line = f.__code__.co_firstlineno
    assert any("tracing " in m and "f (" in m for m in lines)
    assert any("inlining _helper_scaled (" in m for m in lines)  # an inlined frame is announced
    # the call of relu: its line, and the stack with the argument's graph value and metadata
    assert any("CALL" in m and f"test_logging_config.py:{first_line + 1} in f" in m and "tensor l_x: f32[4, 2]" in m
               for m in traces), traces[:20]
    # the inlined frame's instructions are indented and name their function
    assert any(f"test_logging_config.py:{_helper_scaled.__code__.co_firstlineno + 1} in _helper_scaled" in m and
               "]   TRACE" in m for m in traces)
    framefuse.set_logs("frontend")  # info level: no trace
    caplog.clear()
    framefuse.reset()
    with caplog.at_level(logging.DEBUG, logger="framefuse"):
        framefuse.compile(f, backend="eager")(torch.randn(4, 2))
    assert not any("TRACE " in r.getMessage() for r in caplog.records)
