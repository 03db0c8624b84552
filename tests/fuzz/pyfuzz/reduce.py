"""A greedy delta-debugging reducer over the program tree.

It tries, until none succeeds: dropping chunks of the entry function's top-level statements (halves,
quarters, ... single ones), dropping any statement anywhere (with its suites), replacing a compound
statement by one of its suites, dropping a clause, a returned item, a module-level node or an
argument. A candidate is kept when it still shows "the same" mismatch: the same backend and
category, and eager raising the same exceptions in the same calls as in the original (so a
reduction that makes eager fail with a NameError is not mistaken for the bug).
"""
from __future__ import annotations

import contextlib
import signal
import time

from .program import Node, Program
from .runner import execute, run_program

CANDIDATE_LIMIT_S = 10.0


def signature(prog: Program, backend: str, category: str):
    """The predicate's view of a program: eager's exceptions per call, and whether `backend`
    still shows a `category` mismatch; None where the program does not even run."""
    try:
        compile(prog.source(), "<candidate>", "exec", dont_inherit=True)
        with _time_limit(CANDIDATE_LIMIT_S):
            eager = execute(prog, None)
            found = run_program(prog, [backend], eager=eager)
    except (Exception, _Timeout):  # noqa: BLE001 - an invalid candidate, or one that ran too long
        return None
    return tuple(o.exc for o in eager), any(m.category == category for m in found)


class _Timeout(BaseException):
    """NB: not an Exception: the runner records a program's Exceptions as outcomes and goes on."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Interrupts Python code running past `seconds` (a candidate whose loop lost its exit)."""
    def on_alarm(signum, frame):
        raise _Timeout
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _paths(nodes: list[Node], prefix=()):
    """Addresses of every node: a tuple of (suite index, node index) steps; suite 0 is the
    body, suite k > 0 the k-th clause."""
    for i, n in enumerate(nodes):
        yield prefix + (i,)
        suites = [n.body] + [s for _, s in n.clauses]
        for k, s in enumerate(suites):
            yield from _paths(s, prefix + (i, k))


def _locate(nodes: list[Node], path):
    """(the suite holding the node at `path`, its index)."""
    suite = nodes
    i = 0
    while True:
        i = path[0]
        if len(path) == 1:
            return suite, i
        n = suite[i]
        k = path[1]
        suite = n.body if k == 0 else n.clauses[k - 1][1]
        path = path[2:]


def _candidates(prog: Program):
    body = prog.body
    # 1. chunks of the top-level statements (the return statement stays).
    n = len(body) - 1
    size = n // 2
    while size >= 1:
        for start in range(0, n, size):
            p = prog.copy()
            del p.body[start:start + size]
            yield p
        size //= 2
    # 2. single statements anywhere, compound statements replaced by a suite, clauses dropped.
    for path in list(_paths(body)):
        p = prog.copy()
        suite, i = _locate(p.body, path)
        node = suite[i]
        if node.pinned:
            continue
        if node.items is not None and not path[1:]:
            for j in range(len(node.items)):
                q = prog.copy()
                s2, i2 = _locate(q.body, path)
                del s2[i2].items[j]
                yield q
            continue
        del suite[i]
        yield p
        if node.compound:
            for k, s in enumerate([node.body] + [c for _, c in node.clauses]):
                q = prog.copy()
                s2, i2 = _locate(q.body, path)
                s2[i2:i2 + 1] = [x.copy() for x in s]
                yield q
            for k in range(len(node.clauses)):
                q = prog.copy()
                s2, i2 = _locate(q.body, path)
                del s2[i2].clauses[k]
                yield q
    # 3. module-level nodes and their statements, then arguments.
    for path in list(_paths(prog.module)):
        p = prog.copy()
        suite, i = _locate(p.module, path)
        if suite[i].pinned:
            continue
        del suite[i]
        yield p
    for j in range(len(prog.args)):
        p = prog.copy()
        del p.args[j]
        yield p


def reduce_program(prog: Program, backend: str, category: str, budget_s: float = 60.0) -> Program:
    """The smallest program found within budget_s seconds that keeps the mismatch."""
    want = signature(prog, backend, category)
    if want is None or not want[1]:
        return prog
    deadline = time.monotonic() + budget_s
    best = prog
    # NB: after a success the scan resumes near where it succeeded (candidates before it failed on a
    # larger program and mostly still fail); a pass that finds nothing from there rescans from 0.
    resume = 0
    while time.monotonic() < deadline:
        found = None
        for k, cand in enumerate(_candidates(best)):
            if k < resume:
                continue
            if time.monotonic() >= deadline:
                break
            if cand.statement_count() >= best.statement_count() and len(cand.args) >= len(best.args) and \
                    _items(cand) >= _items(best):
                continue
            if signature(cand, backend, category) == want:
                found = k
                best = cand
                break
        if found is not None:
            resume = max(0, found - 1)
        elif resume:
            resume = 0
        else:
            break
    return best


def _items(prog: Program) -> int:
    return sum(len(n.items or ()) for n in prog.body)
