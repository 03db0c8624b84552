"""Run upstream tests one by one, each in a forked process, and classify each outcome.

The parent imports a test module once; every test then runs in its own fork, so a hang (timeout),
a crash (a signal), framefuse's caches or a test's global side effects never reach the next test.
The child sends back one JSON record: unittest's outcome, the failing line, and what the eager
reference (dynamo_reference) saw on each compiled call. `classify` turns that into one class:

    wrong            a compiled call gave another result, mutation, aliasing or exception than eager,
                     or a failing assertion compares results (to be confirmed by triage)
    error            framefuse raised where eager did not (not a fullgraph refusal), crashed or hung
    not captured     results right, but fewer/other graphs than the test expects, or fullgraph refused
    dynamo-internal  the test asserts Dynamo's internals (graph text, counters, guards, its
                     exception classes, custom FX backends ...)
    pass / xfail / skipped
"""
from __future__ import annotations

import inspect
import json
import linecache
import os
import re
import select
import resource
import signal
import sys
import time
import traceback
import unittest

import dynamo_reference as reference

TEST_TIMEOUT_S = 60
MEMORY_LIMIT_BYTES = 8 << 30   # a runaway trace must not take the shared machine down

# A failing line (or the failure's text) that names these asserts how Dynamo works, not what the
# program computes.
_INTERNAL = re.compile(
    r"counters\[|counters\.|assertExpected|normalize_gm|print_readable|\.graphs\[\d*\]\.|fw_graphs|bw_graphs|"
    r"inductor_graphs|_debug_get_cache_entry_list|DynamoInternal|torch\._dynamo\.(utils|exc|guards|variables|"
    r"source|bytecode|symbolic_convert|convert_frame|output_graph|side_effects|eval_frame|compiled_autograd|"
    r"config|testing\.(normalize|extract))|FileCheck|run_and_get_code|op_count|guard|[Rr]ecompil|"
    r"Unsupported|InternalTorchDynamoError|TorchRuntimeError|Observed|graph_code|cache_size|explain|"
    r"torch\._inductor|\.graph\b|\.code\b|fail_reason|compilation_metrics|has no attribute 'graph|"
    r"not raised|CompileCounterInt|error_on_graph_break|\bGraphModule\b|torch\.fx|frame_state|backend\.graphs|"
    r"\brecords\b|getRecord|munge_exc|_dynamo_source|\.meta\[|restart_reasons|signature_cache")
_CAPTURE = re.compile(r"frame_count|len\(\s*[\w.]*graphs\s*\)|unique_graphs|calls_captured|graph_count")


class _Result(unittest.TestResult):
    """Keeps the failing exception itself, not only its text."""

    def __init__(self):
        super().__init__()
        self.outcome, self.exc = "pass", None

    def addFailure(self, test, err):
        self.outcome, self.exc = "fail", err

    def addError(self, test, err):
        if self.outcome == "pass":
            self.outcome, self.exc = "error", err

    def addSubTest(self, test, subtest, err):
        if err is not None and self.outcome == "pass":
            failed = issubclass(err[0], test.failureException)
            self.outcome, self.exc = ("fail" if failed else "error"), err

    def addSkip(self, test, reason):
        self.outcome, self.exc = "skipped", None
        self.skip_reason = reason

    def addExpectedFailure(self, test, err):
        self.outcome, self.exc = "xfail", err

    def addUnexpectedSuccess(self, test):
        self.outcome = "pass"


def _failing_line(exc_info, test_file):
    """The failing source: the innermost line in the test file, followed by the lines of the frames it
    called (helpers such as standard_test assert counters on the test's behalf); and the exception's text."""
    etype, value, tb = exc_info
    lines, in_test = [], False
    for frame, lineno in traceback.walk_tb(tb):
        source = linecache.getline(frame.f_code.co_filename, lineno).strip()
        if os.path.abspath(frame.f_code.co_filename) == test_file:
            in_test, lines = True, [source]
        elif in_test and not re.search(r"/unittest/|/torch/testing/|/expecttest/", frame.f_code.co_filename):
            lines.append(source)
    line = "  <-  ".join(reversed(lines[:1] + lines[-1:])) if len(lines) > 1 else "".join(lines)
    text = "".join(traceback.format_exception_only(etype, value)).strip()
    text = re.sub(r"\n\s*\n", "\n", text)
    return line, text[:2000], "".join(traceback.format_exception(etype, value, tb))[-6000:]


def _source_is_internal(test):
    """Whether the test method's own source asserts anything of Dynamo's internals."""
    try:
        source = inspect.getsource(getattr(test, test._testMethodName))
    except (OSError, TypeError, AttributeError):
        return False
    return bool(_INTERNAL.search(source))


def _run_in_child(test, test_file, wfd):
    reference.reset_state()
    import torch._dynamo.utils as dynamo_utils  # noqa: PLC0415
    result = _Result()
    test.run(result)
    reference.STATE.bank_stats()
    record = {"outcome": result.outcome, "events": reference.STATE.events, "graphs": reference.STATE.graphs,
              "compiled_calls": reference.STATE.compiled_calls, "notes": sorted(reference.STATE.notes),
              "stats": reference.STATE.stats,
              "real_dynamo_frames": int(dynamo_utils.counters["frames"].get("total", 0))}
    if result.outcome == "skipped":
        record["skip_reason"] = str(getattr(result, "skip_reason", ""))[:300]
    if result.exc is not None:
        record["line"], record["error"], record["traceback"] = _failing_line(result.exc, test_file)
        record["source_internal"] = _source_is_internal(test)
    data = json.dumps(record, default=str).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(wfd, view):]


def run_one(test, test_file, log_path, timeout=TEST_TIMEOUT_S):
    """Fork, run `test` in the child (its output to `log_path`), return the child's record."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        os.setpgid(0, 0)
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        code = 0
        try:
            _run_in_child(test, test_file, wfd)
        except BaseException:  # noqa: BLE001 - reported through the missing record
            traceback.print_exc()
            code = 3
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    os.close(wfd)
    start, chunks = time.monotonic(), []
    while True:
        left = timeout - (time.monotonic() - start)
        if left <= 0 or not select.select([rfd], [], [], left)[0]:
            _kill_group(pid)
            os.close(rfd)
            return {"outcome": "timeout", "seconds": round(time.monotonic() - start, 1)}
        chunk = os.read(rfd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    _kill_group(pid)  # eager-reference grandchildren left behind by a crash
    record = json.loads(b"".join(chunks)) if chunks else {"outcome": "crash"}
    if os.WIFSIGNALED(status):
        record = {"outcome": "crash", "signal": signal.Signals(os.WTERMSIG(status)).name, **{
            k: v for k, v in record.items() if k != "outcome"}}
    record["seconds"] = round(time.monotonic() - start, 2)
    return record


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def classify(rec):
    """(class, reason) for one test's record."""
    events = rec.get("events", [])
    mismatches = [e for e in events if e["kind"] == "mismatch"]
    if mismatches:
        return "wrong", _event_text(mismatches[0])
    outcome = rec["outcome"]
    if outcome in ("crash", "timeout"):
        return "error", f"{outcome} {rec.get('signal', '')}".strip()
    if outcome == "pass" and not rec.get("compiled_calls"):
        return "no compile", "passed without calling a compiled function"
    if outcome in ("pass", "xfail", "skipped"):
        return outcome, rec.get("skip_reason", "")
    raised = [e for e in events if e["kind"] == "compiled_raised"]
    if any("torch.ops.higher_order" in e.get("error", "") for e in raised):
        # cond/map compile their branches with torch.compile(fullgraph=True) from inside torch; the
        # adapter hands that call to framefuse too, which has no higher-order ops.
        return "dynamo-internal", "torch's higher-order op compiles its body (fullgraph): " + _event_text(raised[0])
    crashes = [e for e in raised if not (e["error_kind"] == "unsupported" and e.get("fullgraph"))]
    if crashes:
        return "error", _event_text(crashes[0])
    line, text = rec.get("line", ""), rec.get("error", "")
    if "DynamoInternal" in text or "custom FX backend replaced" in rec.get("notes", []):
        return "dynamo-internal", _last(text) or "custom FX backend"
    if not rec.get("compiled_calls") and "framefuse" not in rec.get("traceback", ""):
        return "no compile", f"failed before any compiled call: {line}  ->  {_last(text)}"
    if _CAPTURE.search(line) or (text.startswith("IndexError") and "graphs[" in line):
        return "not captured", f"{line}  ->  {_last(text)}"
    if "standard_test" in line and text.startswith("AssertionError"):
        # standard_test's own assertions are frame and op counts; its results were compared above.
        return "not captured", f"{line}  ->  {_last(text)}"
    like_eager = [e for e in events if e["kind"] == "raised_like_eager"]
    if like_eager and text.split(":")[0] == like_eager[0]["error"].split(":")[0]:
        # The test expects Dynamo's own exception (Unsupported ...) where framefuse lets the user's
        # exception through, as eager does.
        return "dynamo-internal", f"expects a Dynamo exception; framefuse raised eager's: {_last(text)}"
    if raised:
        return "not captured", _event_text(raised[0])
    if _INTERNAL.search(line) or _INTERNAL.search(text):
        return "dynamo-internal", f"{line}  ->  {_last(text)}"
    if text.startswith("AssertionError") and rec.get("compiled_calls", 0) > 0:
        if "XXX: differs from" in line:
            # upstream's own mark on an assertion of where Dynamo differs from eager on purpose
            # (test_numpy_readonly: a numpy input returned as is comes back as a new, writeable
            # array); framefuse returns what eager returns.
            return "dynamo-internal", f"asserts Dynamo's own difference from eager: {line}  ->  {_last(text)}"
        if rec.get("source_internal"):
            return "dynamo-internal", f"(the test reads Dynamo's internals) {line}  ->  {_last(text)}"
        return "wrong", f"test assertion (triage): {line}  ->  {_last(text)}"
    return "error", f"{line}  ->  {_last(text) or outcome}"


def _event_text(e):
    parts = [e["label"]]
    for key in ("what", "diff", "eager", "compiled", "error"):
        if e.get(key):
            parts.append(f"{key}: {str(e[key]).splitlines()[0]}")
    return "; ".join(parts)


def _last(text):
    """The exception's own lines (format_exception_only's text, at most three lines)."""
    return " | ".join(text.splitlines()[:3]) if text else ""
