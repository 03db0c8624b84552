"""Reproducers: a mismatching program as a standalone script that runs it in eager and under
framefuse (each from a fresh copy of the module) and prints both sides' answers."""
from __future__ import annotations

from .program import ENTRY, Program
from .runner import variants
from .values import args_source

FOOTER = '''

# The calls the fuzzer made: each argument list is evaluated afresh in the module's namespace.
CALLS = {calls}

if __name__ == "__main__":
    import types
    import framefuse
    src = open(__file__).read().split("\\n# The calls the fuzzer made")[0]
    for backend in (None, {backend!r}):
        mod = types.ModuleType("pyfuzz_prog")
        exec(compile(src, __file__, "exec"), mod.__dict__)
        fn = getattr(mod, {entry!r})
        if backend:
            fn = framefuse.compile(fn, backend=backend)
        for variant, args_src in CALLS:
            args = eval(args_src, mod.__dict__)
            try:
                out = fn(*args)
            except Exception as e:
                out = f"raised {{type(e).__name__}}: {{e}}"
            print(f"framefuse[{backend}]" if backend else "python", variant, "->", out, "| args after:", args)
'''


def call_sources(prog: Program) -> list[tuple[str, str]]:
    sources = {v: args_source(prog.args, prog.seed, v) for v in set(variants(prog))}
    return [(v, "[" + ", ".join(sources[v]) + "]") for v in variants(prog)]


def reproducer(prog: Program, backend: str, headline: str, disabled=()) -> str:
    calls = "[\n" + "".join(f"    ({v!r}, {s!r}),\n" for v, s in call_sources(prog)) + "]"
    flags = f" --disable {','.join(sorted(disabled))}" if disabled else ""
    head = f"# pyfuzz program {prog.seed}{flags}, backend {backend!r}\n# {headline}\n"
    return head + prog.source() + FOOTER.format(backend=backend, entry=ENTRY, calls=calls)
