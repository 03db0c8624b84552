"""Crash containment for a benchmark run.

framefuse is a frame-evaluation hook and a JIT in C++: while it is young, a contender may take the
whole process down (a segfault, an abort). So `python -m benchmarks.run` supervises: the measuring
happens in a child process that appends what it does to a journal (JSON lines: the run's header, a
`start` before each contender on each workload, the `record` after). If the child dies, the parent
records the contender it died in as failed, with the signal, and starts a new child that skips
everything the journal already holds. `--in-process` runs without a child (the tests use it).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile


def jsonable(x):
    """Strict JSON: non-finite floats (an infinite error for a wrong shape) become strings."""
    import math
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


class Journal:
    """Entries {"header": result skeleton} | {"start": pair} | {"record": record} | {"interleaved":
    core.interleaved_steady result}; in memory when
    `path` is None."""

    def __init__(self, path=None):
        self.path = path
        self.entries = []

    def write(self, kind, value):
        if self.path is None:
            self.entries.append({kind: value})
            return
        line = json.dumps({kind: jsonable(value)}, default=str, allow_nan=False)
        with open(self.path, "a") as f:  # NB: closed at once, so a crash right after loses nothing
            f.write(line + "\n")

    def read(self):
        if self.path is None:
            return list(self.entries)
        out = []
        try:
            with open(self.path) as f:
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:  # a line cut short by the crash
                        break
        except OSError:
            pass
        return out


class State:
    def __init__(self, header, records, done, pending, setups, interleaved=()):
        self.header = header      # the run's skeleton (environment, demo...), or None
        self.interleaved = list(interleaved)  # core.interleaved_steady results, in order
        self.records = records    # in order
        self.done = done          # {(workload, device): {contender: status}}
        self.pending = pending    # the last thing started and not finished: a pair or {"setup": name}
        self.setups = setups      # {contender: its set-up info}


def state(entries):
    header, records, done, pending, setups, interleaved = None, [], {}, None, {}, []
    for e in entries:
        if "header" in e and header is None:
            header = e["header"]
        elif "start" in e:
            pending = e["start"]
        elif "setup" in e:
            setups[e["setup"]["name"]] = e["setup"]
            pending = None
        elif "interleaved" in e:
            interleaved.append(e["interleaved"])
        elif "record" in e:
            r = e["record"]
            records.append(r)
            done.setdefault((r["workload"], r["device"]), {})[r["contender"]] = r["status"]
            if pending and (pending["workload"], pending["device"], pending["contender"]) == \
                    (r["workload"], r["device"], r["contender"]):
                pending = None
    return State(header, records, done, pending, setups, interleaved)


def describe_exit(rc):
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def _wait(proc, path, timeout):
    """The child's exit status; kills it when one contender's work has run past `timeout` seconds
    (a hang is a failure like a crash). Returns (status, True if it was killed for time)."""
    import time
    last, since = None, time.monotonic()
    while True:
        try:
            return proc.wait(timeout=1.0), False
        except subprocess.TimeoutExpired:
            pass
        pending = state(Journal(path).read()).pending
        if pending != last:
            last, since = pending, time.monotonic()
        elif pending is not None and time.monotonic() - since > timeout:
            proc.kill()
            return proc.wait(), True


def supervise(argv, repo, timeout=1800, max_restarts=50):
    """Runs the measuring child until it finishes, restarting it after each crash or hang (one
    contender on one workload past `timeout` seconds). Returns (exit status, journal entries)."""
    fd, path = tempfile.mkstemp(prefix="framefuse-bench-", suffix=".jsonl")
    os.close(fd)
    caches = tempfile.mkdtemp(prefix="framefuse-bench-")
    env = dict(os.environ, FRAMEFUSE_BENCH_CACHE_ROOT=caches)
    try:
        restarts = 0
        while True:
            proc = subprocess.Popen([sys.executable, "-m", "benchmarks.run", *argv, "--child", path], cwd=repo,
                                    env=env)
            rc, hung = _wait(proc, path, timeout)
            entries = Journal(path).read()
            if rc == 0:
                return 0, entries
            st = state(entries)
            pending = st.pending
            if st.header is None or pending is None or restarts >= max_restarts:
                return rc, entries
            how = f"no result within {timeout:g} s, killed" if hung else describe_exit(rc)
            if "setup" in pending:
                what = f"{pending['setup']} (set-up)"
                Journal(path).write("setup", dict(name=pending["setup"], status=f"set-up crashed: {how}"))
            else:
                what = f"{pending['workload']} [{pending['device']}] · {pending['contender']}"
                Journal(path).write("record", dict(pending, status="failed", reason=(
                    f"the benchmark process died ({how}) while running this; the run went on in a new one")))
            restarts += 1
            print(f"\n!! {what}: the process died ({how}); recorded as failed, continuing in a new process",
                  file=sys.stderr, flush=True)
    finally:
        os.unlink(path)
        shutil.rmtree(caches, ignore_errors=True)
