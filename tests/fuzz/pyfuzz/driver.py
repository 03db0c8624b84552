"""Batches of programs: a worker process runs them in-process and streams JSON lines; the parent
restarts it where a program crashed the process or hung, so one segfault costs one program.

Program i of a run with seed S has the seed string "S:i". Every program runs in eager and on the
eager backend; every `inductor_every`-th also on the inductor backend (its compiles cost ~50x).
"""
from __future__ import annotations

import dataclasses
import gc
import json
import os
import re
import select
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from .generate import generate

PACKAGE_ROOT = Path(__file__).resolve().parent.parent      # the folder holding the pyfuzz package


def backends_for(i: int, backends: list[str], inductor_every: int) -> list[str]:
    return [b for b in backends if b != "inductor" or inductor_every <= 1 or i % inductor_every == 0]


# A worker past this much heap fails (MemoryError, or a crash the parent records) instead of taking
# the machine's memory: a program that mismatches may loop where eager does not.
MEMORY_LIMIT_BYTES = 3 << 30


def _asan_loaded() -> bool:
    try:
        with open("/proc/self/maps") as fh:
            return any("libasan" in line for line in fh)
    except OSError:
        return False


def _limit_memory(limit: int) -> None:
    # NB: not under AddressSanitizer (the asan lane): its shadow memory is terabytes of reserved
    # address space, which RLIMIT_DATA counts, so ASan could not start a single mapping.
    if _asan_loaded():
        return
    try:
        import resource  # noqa: PLC0415 - POSIX only
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if hard == resource.RLIM_INFINITY or hard > limit:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass


def _print_flush(line: str) -> None:
    print(line, flush=True)


# ---- worker ----------------------------------------------------------------------------------
def _emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def worker(seed: str, start: int, stop: int, backends: list[str], inductor_every: int, reduce_left: int,
           reduce_budget: float, out_dir: str | None, skip: list[str] = (), disabled=frozenset()) -> None:
    # NB: the protocol owns stdout; programs print into a StringIO (runner.py).
    _limit_memory(MEMORY_LIMIT_BYTES)
    from .reduce import reduce_program  # noqa: PLC0415
    from .report import reproducer  # noqa: PLC0415
    from .runner import execute, run_program  # noqa: PLC0415
    skip_re = [re.compile(p) for p in skip]
    modules_frozen = 0
    for i in range(start, stop):
        if len(sys.modules) != modules_frozen:
            # NB: the modules imported so far (torch 2's are hundreds of thousands of objects) are
            # moved out of the collector's sight, so the gc.collect() before each run costs what the
            # programs made, not a walk over torch (0.1 s a program with torch 2.13).
            gc.collect()
            gc.freeze()
            modules_frozen = len(sys.modules)
        prog = generate(f"{seed}:{i}", disabled)
        if any(r.search(prog.source()) for r in skip_re):
            _emit({"event": "skipped", "i": i})
            continue
        # NB: "reference" is plain Python; a hang there is the program's own (a list that doubles on
        # every call), no difference of framefuse's.
        _emit({"event": "start", "i": i, "phase": "reference"})
        eager = execute(prog, None)
        found = []
        stats = {}
        for b in backends_for(i, backends, inductor_every):
            _emit({"event": "phase", "i": i, "phase": b})
            gc.collect()   # NB: each run starts from what the reference left, not from its garbage
            found += run_program(prog, [b], eager=eager, stats=stats)
        if found and all("MemoryError" in m.compiled for m in found):
            # NB: the worker's memory limit covers every run of a program at once: a program that
            # grows a list without bound may exhaust it on the third run whatever runs it. Plain
            # Python once more, with all this held: out of memory too, the program is the cause.
            _emit({"event": "phase", "i": i, "phase": "reference"})
            gc.collect()
            try:
                oom = any(o.exc == "MemoryError" for o in execute(prog, None))
            except MemoryError:
                oom = True
            if oom:
                _emit({"event": "done", "i": i, "mismatches": [], "exact": prog.exact, "stats": stats,
                       "reference_out_of_memory": True})
                continue
        record = {"event": "done", "i": i, "mismatches": [dataclasses.asdict(m) for m in found], "exact": prog.exact,
                  "stats": stats}
        if found and out_dir:
            first = found[0]
            small = prog
            if reduce_left > 0:
                reduce_left -= 1
                _emit({"event": "phase", "i": i, "phase": "reduce"})
                small = reduce_program(prog, first.backend, first.category, reduce_budget)
                again = [m for m in run_program(small, [first.backend]) if m.category == first.category]
                first = again[0] if again else first
                record["reduced"] = dataclasses.asdict(first)
            path = Path(out_dir) / f"mismatch-{prog.seed.replace(':', '-')}.py"
            path.write_text(reproducer(small, first.backend, first.line(), disabled))
            record["reproducer"] = str(path)
            record["reduced_statements"] = small.statement_count()
        _emit(record)


# ---- parent ----------------------------------------------------------------------------------
@dataclasses.dataclass
class RunResult:
    programs: int = 0
    skipped: int = 0
    seconds: float = 0.0
    records: list = dataclasses.field(default_factory=list)     # done records with mismatches
    failures: list = dataclasses.field(default_factory=list)    # (i, phase, "crash rc=.." / "hang")
    reference_oom: list = dataclasses.field(default_factory=list)  # programs plain Python ran out of memory on too

    stats: dict = dataclasses.field(default_factory=dict)     # backend -> summed frame counters
    breaks: Counter = dataclasses.field(default_factory=Counter)  # graph-break reason -> programs
    internal: list = dataclasses.field(default_factory=list)  # programs whose compile hit an internal error

    def add_stats(self, i: int, stats: dict) -> None:
        for backend, s in stats.items():
            total = self.stats.setdefault(backend, Counter())
            total["programs"] += 1
            total["programs with a compiled frame"] += bool(s.get("frames_compiled"))
            for k, v in s.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    total[k] += v
            if s.get("internal_errors"):
                self.internal.append((i, backend))
            for b in set(s.get("breaks", ())):
                self.breaks[b] += 1

    def coverage(self) -> str:
        """What the compiled runs did: frame counters per backend, the commonest break ids."""
        lines = []
        for backend, t in sorted(self.stats.items()):
            keys = ("programs", "programs with a compiled frame", "frames_compiled", "eager_frames", "graph_breaks",
                    "frames_split", "recompiles", "cache_limit_hits", "internal_errors")
            lines.append(f"  [{backend}] " + ", ".join(f"{k} {int(t[k])}" for k in keys))
        ids = Counter()
        for reason, n in self.breaks.items():
            ids[reason.split("]")[0].lstrip("[")] += n
        if ids:
            lines.append("  graph-break ids (programs x reasons): " + ", ".join(f"{k} {n}" for k, n in ids.most_common()))
            lines += [f"    {n:6d}  {reason[:150]}" for reason, n in self.breaks.most_common(25)]
        return "\n".join(lines)

    def reference_hangs(self) -> list:
        """Programs plain Python did not finish (the generator's fault, not framefuse's)."""
        return [f for f in self.failures if f[1] == "reference" and f[2].startswith("hang")]

    def mismatching(self) -> int:
        return len(self.records) + len(self.failures) - len(self.reference_hangs())

    def by_key(self) -> Counter:
        c = Counter()
        for r in self.records:
            for key in {(m["backend"], m["category"]) for m in r["mismatches"]}:
                c[key] += 1
        for _, phase, what in self.failures:
            c[(phase, what.split()[0])] += 1
        return c


def run(seed: str, count: int, backends: list[str], *, inductor_every: int = 1, start: int = 0,
        out_dir: str | None = None, reduce: int = 0, reduce_budget: float = 60.0, chunk: int = 2000,
        hang_s: float = 120.0, skip: list[str] = (), disabled=frozenset(), log=_print_flush) -> RunResult:
    res = RunResult()
    t0 = time.monotonic()
    i, end = start, start + count
    while i < end:
        stop = min(i + chunk, end)
        cmd = [sys.executable, "-m", "pyfuzz", "worker", "--seed", seed, "--start", str(i), "--stop", str(stop),
               "--backends", ",".join(backends), "--inductor-every", str(inductor_every),
               "--reduce", str(reduce), "--reduce-budget", str(reduce_budget)] + (["--out", out_dir] if out_dir else [])
        for pattern in skip:
            cmd += ["--skip", pattern]
        if disabled:
            cmd += ["--disable", ",".join(sorted(disabled))]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(
            os.pathsep) if p])
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1)
        current, phase = None, "reference"
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], hang_s if phase != "reduce" else hang_s + reduce_budget)
            if not ready:
                proc.kill()
                proc.wait()
                res.failures.append((current, phase, f"hang (no progress in {hang_s:.0f}s)"))
                log(f"program {seed}:{current} [{phase}]: hang")
                i = (current if current is not None else i) + 1
                break
            line = proc.stdout.readline()
            if not line:
                rc = proc.wait()
                if current is not None:
                    res.failures.append((current, phase, f"crash (exit status {rc})"))
                    log(f"program {seed}:{current} [{phase}]: crash, exit status {rc}")
                    i = current + 1
                elif rc != 0:
                    raise RuntimeError(f"the pyfuzz worker exited with status {rc} between programs "
                                       f"(run `{' '.join(cmd)}` to see why)")
                else:
                    i = stop
                break
            ev = json.loads(line)
            if ev["event"] in ("start", "phase"):
                current, phase = ev["i"], ev["phase"]
                continue
            if ev["event"] == "skipped":
                res.skipped += 1
                continue
            res.programs += 1
            current = None
            res.add_stats(ev["i"], ev.get("stats", {}))
            if ev.get("reference_out_of_memory"):
                res.reference_oom.append(ev["i"])
                log(f"program {seed}:{ev['i']}: out of memory in a compiled run and in plain Python alike")
            if ev["mismatches"]:
                res.records.append(ev)
                for m in ev["mismatches"][:2]:
                    log(f"program {m['seed']}: [{m['backend']}] {m['category']} at {m['where']}: "
                        f"eager {m['eager'][:150]} | compiled {m['compiled'][:150]}")
                if ev.get("reduced"):
                    m = ev["reduced"]
                    log(f"  reduced: [{m['backend']}] {m['category']} at {m['where']}: eager {m['eager'][:150]} | "
                        f"compiled {m['compiled'][:150]}")
                if ev.get("reproducer"):
                    log(f"  reproducer ({ev['reduced_statements']} statements): {ev['reproducer']}")
        if i >= stop and proc.poll() is None:
            proc.wait()
    res.programs += len(res.failures)
    res.seconds = time.monotonic() - t0
    return res
