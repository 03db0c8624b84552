"""Running one program in eager and under framefuse.compile, and comparing the runs.

Each run execs the program's source into a fresh module namespace (so the compiled run never sees
a code object, a global or a class of the eager run), then calls the entry function three times
with freshly built arguments: variant A, A again (a cached call), B (same types, other
contents: stale guards show there) and A once more (the first cache entry must still be found). After each call it snapshots the arguments, the return value
and the G_ globals (compare.py), the printed output and the exception type.
"""
from __future__ import annotations

import re

import builtins
import contextlib
import io
import linecache
from dataclasses import dataclass

from . import compare
from .program import ENTRY, Program
from .values import args_source

VARIANTS = ("A", "A", "B", "A")
# Dynamic programs then take variant C twice: a larger first dimension (a recompile, where a frontend
# with automatic dynamic shapes makes that dimension symbolic), then a cached call.
DYNAMIC_VARIANTS = VARIANTS + ("C", "C")


def variants(prog: Program) -> tuple:
    return DYNAMIC_VARIANTS if prog.dynamic else VARIANTS
MODULE_NAME = "pyfuzz_prog"


@dataclass
class CallOutcome:
    variant: str
    snap: dict
    exc: str | None
    stdout: str


@dataclass
class Mismatch:
    seed: str
    backend: str
    category: str         # compare.py's categories, or "setup" / "internal" (framefuse's own error)
    where: str
    eager: str
    compiled: str

    def key(self) -> tuple:
        return (self.backend, self.category)

    def line(self) -> str:
        return f"[{self.backend}] {self.category} at {self.where}: eager {self.eager} | compiled {self.compiled}"


def _namespace(prog: Program, tag: str) -> dict:
    src = prog.source()
    filename = f"<pyfuzz {prog.seed} {tag}>"
    # NB: registered so tracebacks and framefuse's break reasons can show the program's lines.
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = {"__name__": MODULE_NAME, "__builtins__": builtins}
    # NB: dont_inherit: this module's `from __future__ import annotations` must not leak into it.
    exec(compile(src, filename, "exec", dont_inherit=True), ns)  # noqa: S102 - our own program
    return ns


def execute(prog: Program, backend: str | None, stats: dict | None = None) -> list[CallOutcome]:
    """The outcomes of the three calls, in eager (backend None) or compiled with `backend`; `stats`
    (when given) receives framefuse's frame counters and graph-break ids of the compiled run."""
    import framefuse  # noqa: PLC0415 - the generator and reducer work without it
    ns = _namespace(prog, backend or "eager")
    fn = ns[ENTRY]
    if backend is not None:
        framefuse.reset()
        fn = framefuse.compile(fn, backend=backend)
    sources = {v: args_source(prog.args, prog.seed, v) for v in set(variants(prog))}
    outcomes = []
    for variant in variants(prog):
        args = [eval(s, ns) for s in sources[variant]]  # noqa: S307 - our own literals
        out = io.StringIO()
        exc = None
        ret = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                ret = fn(*args)
            except Exception as e:  # noqa: BLE001 - every exception is an outcome to compare
                exc = compare.typename(e)
        outcomes.append(CallOutcome(variant, compare.snapshot(args, ret, ns), exc, out.getvalue()))
    if backend is not None:
        if stats is not None:
            stats.update(framefuse._C._frame_eval_stats())
            stats["breaks"] = sorted({r["reason"] for r in framefuse._C._graph_break_records()})
        framefuse.reset()
    return outcomes


_MINMAX = re.compile(r"\b(amin|amax|aminmax)\(|\.(min|max)\(|torch\.(min|max)\(")


def run_program(prog: Program, backends, eager: list[CallOutcome] | None = None,
                stats: dict | None = None) -> list[Mismatch]:
    """Every mismatch of `prog` between eager and each backend (at most a few per backend);
    `stats` (when given) receives each backend's counters (see execute)."""
    if eager is None:
        eager = execute(prog, None)
    found = []
    for backend in backends:
        try:
            compiled = execute(prog, backend, None if stats is None else stats.setdefault(backend, {}))
        except Exception as e:  # noqa: BLE001 - the compiled run itself failed to set up
            found.append(Mismatch(prog.seed, backend, "setup", "compile", "ran", f"{compare.typename(e)}: {e}"))
            continue
        tolerant = backend != "eager" and not prog.exact
        # NB: which of +0.0 and -0.0 a min/max reduction keeps is not specified (IEEE minNum), and
        # eager's own answer depends on its vector width and the row's length: a fusing backend's
        # min/max reductions compare zeros without their sign.
        signless = backend != "eager" and _MINMAX.search(prog.source()) is not None
        for category, where, ev, cv in compare.compare_calls(eager, compiled, tolerant, fused=backend != "eager",
                                                             signless_zeros=signless):
            if category == "exception" and cv.startswith("framefuse."):
                category = "internal"
            found.append(Mismatch(prog.seed, backend, category, where, ev, cv))
    return found
