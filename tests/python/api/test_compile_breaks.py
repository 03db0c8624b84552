"""Unsupported constructs with the real interpreter: the frame is split at the break (logged once);
fullgraph=True raises framefuse.Unsupported naming the user's line; exceptions match eager.
Splitting itself is tested in test_graph_breaks.py."""
import logging

import pytest
import torch

import framefuse
from framefuse import _C


pytestmark = pytest.mark.usefixtures("fresh_framefuse")


def with_print(x):
    print("side channel")
    return x + 1


def test_print_splits_the_frame_once_and_is_logged(caplog, capsys):
    framefuse.set_logs("graph_breaks")
    caplog.set_level(logging.INFO, logger="framefuse")
    f = framefuse.compile(with_print, backend="eager")
    x = torch.randn(3)
    for _ in range(3):
        assert torch.equal(f(x), x + 1)
    assert capsys.readouterr().out.count("side channel") == 3
    s = _C._frame_eval_stats()
    # the graph before the print (empty) and the resume function's graph after it
    assert s["graph_breaks"] == 1 and s["frames_split"] == 1 and s["frames_compiled"] == 2
    assert _C._code_cache_info(with_print.__code__)["strategy"] == "compile"
    assert caplog.text.count("[FF0003] call to print") == 1
    assert "(the frame is split)" in caplog.text
    assert f"{__file__}:{with_print.__code__.co_firstlineno + 1}" in caplog.text


def test_fullgraph_raises_unsupported_with_the_user_line():
    f = framefuse.compile(with_print, backend="eager", fullgraph=True)
    with pytest.raises(framefuse.Unsupported) as e:
        f(torch.randn(3))
    text = str(e.value)
    assert text.startswith("[FF0003] call to print\n")
    assert f"at {__file__}:{with_print.__code__.co_firstlineno + 1}" in text


def with_graph_break(x):
    y = x * 2
    framefuse.graph_break()
    return y + 1


def test_graph_break_splits_the_frame():
    f = framefuse.compile(with_graph_break, backend="eager")
    x = torch.randn(3)
    assert torch.equal(f(x), x * 2 + 1)
    assert _C._frame_eval_stats()["graph_breaks"] == 1
    with pytest.raises(framefuse.Unsupported):
        framefuse.compile(with_graph_break, backend="eager", fullgraph=True)(x)


def divide(x, n):
    return x / (10 // n)


def test_python_exception_matches_eager_and_the_function_keeps_working():
    f = framefuse.compile(divide, backend="eager")
    x = torch.randn(3)
    with pytest.raises(ZeroDivisionError):
        f(x, 0)
    assert torch.equal(f(x, 2), divide(x, 2))
    assert _C._frame_eval_stats()["frames_compiled"] == 1


def test_wrong_argument_count_is_a_type_error():
    f = framefuse.compile(divide, backend="eager")
    with pytest.raises(TypeError):
        f(torch.randn(3))
    assert torch.equal(f(torch.ones(2), 5), divide(torch.ones(2), 5))


def test_shape_mismatch_raises_the_eager_error_type():
    def mm(a, b):
        return a @ b
    f = framefuse.compile(mm, backend="eager")
    a = torch.randn(2, 3)
    with pytest.raises(RuntimeError):
        f(a, torch.randn(4, 5))
    assert torch.equal(f(a, torch.ones(3, 2)), a @ torch.ones(3, 2))
