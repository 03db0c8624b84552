"""Python ints that vary between calls (int arguments, loop counters reaching resume functions) are
symbols as dynamic sizes are: automatic dynamic makes one symbolic once it was seen with two values,
dynamic=True from the first call; kernels read it as a runtime argument, and an int the compiled code
returns or keeps across a graph break is rebuilt from each call's values.

Every call is compared with eager (values 0, 1, negative and past int64 among them).
`frames_compiled` counts traces (one per cache entry).
"""
import logging

import pytest
import torch

import framefuse
from framefuse import _C, backends, inductor

from test_dynamic_shapes import _fresh, compiled_frames  # noqa: F401  (an autouse fixture)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def scale_shift(x, n):
    return torch.relu(x) * n + n, x > n


def check_calls(cf, fn, calls):
    for args in calls:
        try:
            want = fn(*args)
        except Exception as e:  # noqa: BLE001  (the compiled call must raise the same)
            with pytest.raises(type(e)):
                cf(*args)
            continue
        got = cf(*args)
        assert type(got) is type(want)
        for g, w in zip(got, want) if isinstance(want, tuple) else [(got, want)]:
            if isinstance(w, torch.Tensor):
                torch.testing.assert_close(g, w, rtol=0, atol=0)
            else:
                assert g == w and type(g) is type(w)


@pytest.mark.parametrize("backend", ["inductor", "eager"])
def test_an_int_argument_becomes_symbolic_after_a_second_value(backend):
    before = backends.symbolic_compiles(), backends.per_sizes_compiles()
    cf = framefuse.compile(scale_shift, backend=backend)
    x = torch.randn(6, 5)
    values = [3, 4, 5, 6, 7, 9, 11, 12, 13, 2, 40, 1000]
    check_calls(cf, scale_shift, [(x, n) for n in values])
    assert compiled_frames() == 2  # n == 3, then s0
    if backend == "inductor" and inductor.codegen_available():
        # One program whose kernels read n as an argument, for every value.
        assert (backends.symbolic_compiles(), backends.per_sizes_compiles()) == (before[0] + 1, before[1])


def test_zero_one_negative_and_huge_ints_specialise_and_stay_exact():
    cf = framefuse.compile(scale_shift)
    x = torch.randn(4, 3)
    values = [3, 4, 0, 1, -5, 2**40, 7, 2**62, 2**64, 8]
    check_calls(cf, scale_shift, [(x.double(), n) for n in values])
    # 3; s0 (also serving 2**40, 7, 2**62, 8); 0, 1, -5 and the one past int64 as constants.
    assert compiled_frames() == 6


def test_dynamic_true_makes_ints_symbolic_from_the_first_call():
    cf = framefuse.compile(scale_shift, dynamic=True)
    check_calls(cf, scale_shift, [(torch.randn(n, 3), n) for n in (3, 4, 9, 17)])
    assert compiled_frames() == 1


def test_ints_returned_or_computed_are_rebuilt_per_call():
    def f(x, n, m):
        k = n * m - 1
        return x.sum() * 0 + k, k, n // m, x.shape, (n + m) % 7

    cf = framefuse.compile(f, dynamic=True)
    check_calls(cf, f, [(torch.ones(n, 2), n, m) for n, m in [(3, 2), (5, 4), (9, 3), (40, 6)]])
    assert compiled_frames() == 1


def test_results_past_int64_fail_the_guards_and_retrace():
    # The symbolic entry computes n**4 in int64; past it, the guard check fails and the trace
    # at those values computes Python's big int.
    def f(x, n):
        return x + 1, n * n * n * n

    cf = framefuse.compile(f, dynamic=True)
    check_calls(cf, f, [(torch.ones(2), n) for n in (3, 5, 2**20, 7, 2**17, 11)])
    assert compiled_frames() == 3  # s0; 2**20 and 2**17, each its own constant


def test_an_int_of_another_type_fails_the_guard():
    cf = framefuse.compile(scale_shift, dynamic=True)
    x = torch.randn(3)
    check_calls(cf, scale_shift, [(x, 3), (x, 2.5), (x, True), (x, 4)])
    assert compiled_frames() == 3


K = 5


def test_ints_read_through_attributes_and_globals_stay_constants(caplog):
    class M(torch.nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k

        def forward(self, x, n):
            return x * self.k + K * n

    m = M(3)
    framefuse.set_logs(graph_code=True)
    try:
        with caplog.at_level(logging.INFO, logger="framefuse"):
            cf = framefuse.compile(m, dynamic=True)
            x = torch.randn(4)
            torch.testing.assert_close(cf(x, 2), m(x, 2))
    finally:
        framefuse.set_logs()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert 'l_n: "Sym(s1)"' in text and "* 3" in text and "5*s1" in text, text


def loop_with_a_break(x, n):
    for i in range(n):
        x = x * 2
        print("step", i)
        x = x - i
    return x, i


def test_a_loop_counter_reaching_a_resume_function_compiles_a_bounded_number_of_times(capsys):
    # Each iteration resumes after print with the counter as a local and the range iterator's
    # next value: both become symbols, so the resume function compiles for i == 0, 1, then once.
    cf = framefuse.compile(loop_with_a_break)
    x = torch.randn(5)
    check_calls(cf, loop_with_a_break, [(x, 12), (x, 12)])
    first = compiled_frames()
    # On 3.11: the root frame; the resume function for i == 0, i == 1, i symbolic and the iterator
    # exhausted (3.12 passes the counter on the stack too: a frame more or less).
    assert first <= 6
    check_calls(cf, loop_with_a_break, [(x, 40), (x, 25)])
    stats = _C._frame_eval_stats()
    assert stats["internal_errors"] == 0 and stats["cache_limit_hits"] == 0, stats
    # Longer loops add only the root frame's entries (range(n) reads n): none per iteration.
    assert compiled_frames() <= first + 2, stats
    capsys.readouterr()


def test_the_logs_name_the_ints_that_became_symbols(caplog):
    framefuse.set_logs(recompiles=True, dynamic=True)
    try:
        with caplog.at_level(logging.INFO, logger="framefuse"):
            cf = framefuse.compile(scale_shift)
            x = torch.randn(3)
            for n in (3, 4, 5):
                cf(x, n)
    finally:
        framefuse.set_logs()
    text = caplog.text
    assert "L['n'] == 3 (got 4)" in text, text  # the recompile's reason
    assert "symbolic int L['n'] -> s0: it was 3 in an earlier call" in text, text
    assert "L['n'] == " not in text.split("symbolic int")[-1], text  # the symbolic entry serves 5


def test_explain_lists_an_int_that_became_a_symbol():
    from framefuse.explain import _dynamic_dims  # noqa: PLC0415
    assert _dynamic_dims("[0/1] symbolic int L['n'] -> s0: dynamic=True") == ["L['n'] -> s0: dynamic=True"]
