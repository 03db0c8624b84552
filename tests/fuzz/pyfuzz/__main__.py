"""pyfuzz's command line (see README.md):

    python -m pyfuzz --seed 0 --count 100000 [--backends eager,inductor] [--inductor-every 4] [--out DIR]
    python -m pyfuzz show 0:123          # the program of seed string 0:123
    python -m pyfuzz check 0:123 [--reduce] [--backends ...]   # run one program, print and reduce mismatches
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .gen import TAGS


def _common(p):
    p.add_argument("--backends", default="eager,inductor", help="comma list of framefuse backends")
    p.add_argument("--inductor-every", type=int, default=1, help="run inductor on every k-th program only")
    p.add_argument("--disable", default="", metavar="TAGS",
                   help="leave features out of the programs (comma list of " + ", ".join(TAGS) + ")")
    p.add_argument("--skip", action="append", default=[], metavar="REGEX",
                   help="skip programs whose source matches (to look past a known mismatch); repeatable")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        argv.insert(0, "run")
    ap = argparse.ArgumentParser(prog="python -m pyfuzz")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a batch of programs (the default)")
    r.add_argument("--seed", default="0")
    r.add_argument("--start", type=int, default=0)
    r.add_argument("--count", type=int, default=1000)
    r.add_argument("--out", default=None, help="folder for reproducers (mismatch-<seed>.py)")
    r.add_argument("--reduce", type=int, default=20, help="reduce at most this many mismatches per worker")
    r.add_argument("--reduce-budget", type=float, default=60.0, help="seconds per reduction")
    _common(r)
    w = sub.add_parser("worker")
    w.add_argument("--seed", required=True)
    w.add_argument("--start", type=int, required=True)
    w.add_argument("--stop", type=int, required=True)
    w.add_argument("--out", default=None)
    w.add_argument("--reduce", type=int, default=0)
    w.add_argument("--reduce-budget", type=float, default=60.0)
    _common(w)
    s = sub.add_parser("show")
    s.add_argument("program", help="a seed string like 0:123")
    s.add_argument("--disable", default="")
    c = sub.add_parser("check")
    c.add_argument("program")
    c.add_argument("--reduce", action="store_true")
    c.add_argument("--reduce-budget", type=float, default=120.0)
    _common(c)
    a = ap.parse_args(argv)
    backends = [b for b in a.backends.split(",") if b] if hasattr(a, "backends") else []
    disabled = frozenset(t for t in a.disable.split(",") if t)
    if disabled - set(TAGS):
        ap.error(f"unknown --disable tags {sorted(disabled - set(TAGS))}; known: {', '.join(TAGS)}")

    from .driver import MEMORY_LIMIT_BYTES, _limit_memory  # noqa: PLC0415
    _limit_memory(MEMORY_LIMIT_BYTES)
    if a.cmd == "worker":
        from .driver import worker  # noqa: PLC0415
        worker(a.seed, a.start, a.stop, backends, a.inductor_every, a.reduce, a.reduce_budget, a.out, a.skip,
               disabled)
        return 0
    if a.cmd == "show":
        from .generate import generate  # noqa: PLC0415
        from .report import call_sources  # noqa: PLC0415
        prog = generate(a.program, disabled)
        print(prog.source())
        for variant, src in call_sources(prog):
            print(f"# args {variant}: {src}")
        return 0
    if a.cmd == "check":
        return _check(a, backends, disabled)
    from .driver import run  # noqa: PLC0415
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
    res = run(a.seed, a.count, backends, inductor_every=a.inductor_every, start=a.start, out_dir=a.out,
              reduce=a.reduce if a.out else 0, reduce_budget=a.reduce_budget, skip=a.skip, disabled=disabled)
    print(f"pyfuzz: {res.programs} programs (seed {a.seed}, {a.start}..{a.start + a.count - 1}, backends "
          f"{','.join(backends)}, inductor every {a.inductor_every}) in {res.seconds:.1f}s; "
          f"{res.mismatching()} with mismatches" + (f"; {res.skipped} skipped (--skip)" if res.skipped else "") +
          (f"; {len(res.reference_hangs())} that plain Python does not finish either" if res.reference_hangs() else "") +
          (f"; {len(res.reference_oom)} that exhaust the memory limit in plain Python too" if res.reference_oom else ""))
    for (backend, category), n in sorted(res.by_key().items()):
        print(f"  {n:6d}  [{backend}] {category}")
    print("coverage:\n" + res.coverage())
    if res.internal:
        print(f"  programs whose compile hit an internal error (eager fallback): "
              f"{', '.join(f'{a.seed}:{i} [{b}]' for i, b in res.internal[:20])}")
    return 1 if res.mismatching() else 0


def _check(a, backends, disabled) -> int:
    from .generate import generate  # noqa: PLC0415
    from .reduce import reduce_program  # noqa: PLC0415
    from .report import reproducer  # noqa: PLC0415
    from .runner import run_program  # noqa: PLC0415
    prog = generate(a.program, disabled)
    found = run_program(prog, backends)
    for m in found:
        print(m.line())
    if found and a.reduce:
        small = reduce_program(prog, found[0].backend, found[0].category, a.reduce_budget)
        print(reproducer(small, found[0].backend, found[0].line(), disabled))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
