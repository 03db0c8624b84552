"""framefuse.explain(fn)(*args): graphs, breaks, ops, guards and compile times of one call."""
import contextlib
import io
import re

import pytest
import torch

import framefuse

pytestmark = pytest.mark.torch2


def no_break(x, y):
    a = torch.sin(x) + y
    return torch.relu(a) * 2


def with_break(x):
    a = torch.cos(x)
    framefuse.graph_break()
    return a + 1


def _normalize(text):
    text = text.replace(__file__, "test_explain.py")
    # Frame ids count every frame the process compiled (other tests' too); compile times are
    # measurements: keep the structure, drop the numbers.
    text = re.sub(r"\[[0-9]+/([0-9]+)\]", r"[F/\1]", text)
    return re.sub(r"[0-9]+\.[0-9]+ ms", "N ms", text)


def test_explain_no_break_golden():
    x, y = torch.randn(4), torch.randn(4)
    report = framefuse.explain(no_break)(x, y)
    assert report.graph_count == 1
    assert report.graph_break_count == 0
    assert report.break_reasons == []
    assert report.ops_per_graph == [["sin", "op_add", "relu", "op_mul"]]
    assert report.out_guards, "a compiled frame has guards"
    text = _normalize(str(report))
    assert text.startswith(
        "Graph Count: 1\n"
        "Graph Break Count: 0\n"
        "Op Count: 4\n"
        "Break Reasons:\n"
        "Ops per Graph:\n"
        "  Ops 1:\n"
        "    sin\n"
        "    op_add\n"
        "    relu\n"
        "    op_mul\n"
        "Out Guards:\n"
        "  Guard 1:\n"), text
    assert "Compile Times: framefuse compilation metrics:\n  [F/0] no_break (test_explain.py:" in text
    assert re.search(r"capture N ms, backend N ms, total N ms\n$", text), text


def test_explain_with_break_golden():
    x = torch.randn(3)
    report = framefuse.explain(with_break)(x)
    # The frame is split at the break: the graph before it, the call run natively, and the resume
    # function's graph after it.
    assert report.graph_count == 2
    assert report.graph_break_count == 1
    assert report.ops_per_graph == [["cos"], ["op_add"]]
    assert len(report.break_reasons) == 1
    br = report.break_reasons[0]
    line = with_break.__code__.co_firstlineno + 2
    assert br.reason == "[FF0016] graph_break() called: framefuse.graph_break"
    assert br.hint == "Remove the graph_break() call to capture this code."
    assert br.explanation  # printed with the hint (str below)
    assert br.split
    assert any(f"test_explain.py:{line}" in _normalize(frame) for frame in br.user_stack), br.user_stack
    text = _normalize(str(report))
    assert text.startswith(
        "Graph Count: 2\n"
        "Graph Break Count: 1\n"
        "Op Count: 2\n"
        "Break Reasons:\n"
        "  Break Reason 1:\n"
        "    Reason: [FF0016] graph_break() called: framefuse.graph_break\n"
        f"    Explanation: {br.explanation}\n"
        "    Hint: Remove the graph_break() call to capture this code.\n"
        f"    Frame: with_break (test_explain.py:{line - 2}) (split at the break)\n"
        "    User Stack:\n"
        f"      test_explain.py:{line} in with_break\n"
        "Ops per Graph:\n"
        "  Ops 1:\n"
        "    cos\n"
        "  Ops 2:\n"
        "    op_add\n"
        "Out Guards:\n"), text
    assert "Compile Times: framefuse compilation metrics:\n  [F/0] with_break (test_explain.py:" in text
    assert f"[F/0] __resume_with_break_at_{line} (test_explain.py:{line}): capture N ms" in text


def eager_break(x):
    a = torch.cos(x)
    try:
        return a + int("x")  # raises while traced: the whole frame runs eagerly
    except ValueError:
        return a


def test_explain_whole_frame_fallback():
    report = framefuse.explain(eager_break)(torch.randn(3))
    assert report.graph_count == 0 and report.graph_break_count == 1
    assert not report.break_reasons[0].split
    assert "(runs eagerly)" in str(report)


def test_explain_result_matches_eager_and_restores_logs():
    before = framefuse._C.logging.enabled_artifacts()
    x, y = torch.randn(4), torch.randn(4)
    framefuse.explain(no_break)(x, y)
    assert framefuse._C.logging.enabled_artifacts() == before


def test_explain_rejects_arguments_in_the_wrong_place():
    with pytest.raises(TypeError, match=r"framefuse.explain\(fn\)\(\*args"):
        framefuse.explain(no_break, torch.randn(2))


def test_printing_a_tensor_is_one_break():
    # torch's tensor printing calls a namedtuple's __new__ (code collections made with exec): a
    # standard-library frame, not one of the user's to compile (it broke on tuple.__new__).
    def f(x):
        y = x * 2
        print(y)
        return y + 1

    # NB: into a StringIO (C code): pytest's own capture of stdout is Python code, whose frames compile
    with contextlib.redirect_stdout(io.StringIO()) as out:
        report = framefuse.explain(f)(torch.randn(3))
    assert "tensor(" in out.getvalue()
    assert [b.reason.split(":")[0] for b in report.break_reasons] == ["[FF0003] call to print"], report.break_reasons
