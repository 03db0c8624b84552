"""Contenders: ways of running a workload. Eager, framefuse per backend and mode, torch.compile.

Each compiler is imported lazily. A contender that cannot exist here (no framefuse module, a torch
without torch.compile) is *unavailable*; one that raises while compiling or running is *failed*.
Both are reported with their reason and the run goes on.
"""

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Unavailable(Exception):
    """The contender cannot run here (missing module or feature); the message says what is missing."""


def import_framefuse():
    try:
        import framefuse
    except ImportError:
        # Running from a source checkout: the build writes the extension next to python/framefuse.
        src = os.path.join(REPO_ROOT, "python")
        if not os.path.isfile(os.path.join(src, "framefuse", "__init__.py")):
            raise Unavailable("framefuse is not importable (not installed, no python/framefuse in the checkout)")
        if src not in sys.path:
            sys.path.insert(0, src)
        try:
            import framefuse
        except Exception as e:
            raise Unavailable(f"import framefuse failed: {type(e).__name__}: {first_line(e)}") from None
    except Exception as e:
        raise Unavailable(f"import framefuse failed: {type(e).__name__}: {first_line(e)}") from None
    if not callable(getattr(framefuse, "compile", None)):
        raise Unavailable("framefuse has no compile() yet")
    return framefuse


def torch_compile_fn():
    import torch
    fn = getattr(torch, "compile", None)
    if fn is None:
        raise Unavailable(f"torch {torch.__version__} has no torch.compile")
    return fn


def first_line(e):
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


@dataclass
class Counts:
    graphs: Optional[int] = None
    breaks: Optional[int] = None
    note: str = ""


@dataclass
class Contender:
    name: str
    family: str                      # "eager" | "framefuse" | "torch.compile" | anything a test registers
    compile: Callable[[Any], Any]    # target -> callable; raises Unavailable or any error
    reset: Callable[[], None] = lambda: None
    explain: Optional[Callable[[Any, tuple], Counts]] = None
    check: Callable[[], None] = lambda: None   # raises Unavailable when the contender cannot exist here
    devices: tuple = ("cpu", "cuda")
    backend: Optional[str] = None
    mode: Optional[str] = None
    description: str = ""
    prewarm_s: Optional[float] = field(default=None, repr=False)


CONTENDERS: dict = {}


def register(c: Contender):
    CONTENDERS[c.name] = c
    return c


def unregister(name):
    CONTENDERS.pop(name, None)


# --- eager -----------------------------------------------------------------------------------------

register(Contender("eager", "eager", compile=lambda target: target, description="plain PyTorch"))


# --- framefuse ---------------------------------------------------------------------------------------

def _ff_compile(backend, mode):
    def compile(target):  # noqa: A001
        ff = import_framefuse()
        kwargs = {"backend": backend}
        if mode is not None:
            kwargs["mode"] = mode
        return ff.compile(target, **kwargs)
    return compile


def _ff_reset():
    try:
        ff = import_framefuse()
    except Unavailable:
        return
    if callable(getattr(ff, "reset", None)):
        ff.reset()


def _ff_explain(target, args):
    ff = import_framefuse()
    if not callable(getattr(ff, "explain", None)):
        return Counts(note="framefuse.explain missing")
    rep = ff.explain(target)(*args)
    return Counts(getattr(rep, "graph_count", None), getattr(rep, "graph_break_count", None))


def _ff_check():
    import_framefuse()


for _name, _backend, _mode, _devs, _desc in (
        ("framefuse-eager", "eager", None, ("cpu", "cuda"), "capture only; graphs replayed by the reference runner"),
        ("framefuse", "inductor", None, ("cpu", "cuda"), "capture + fusing code generator"),
        ("framefuse-ro", "inductor", "reduce-overhead", ("cuda",), "inductor + CUDA graph replay"),
        ("framefuse-max-autotune", "inductor", "max-autotune", ("cuda",), "inductor + tuned launch configs")):
    register(Contender(_name, "framefuse", _ff_compile(_backend, _mode), _ff_reset, _ff_explain, _ff_check,
                       _devs, _backend, _mode, _desc))


# --- torch.compile -----------------------------------------------------------------------------------

def _tc_compile(backend, mode):
    def compile(target):  # noqa: A001
        fn = torch_compile_fn()
        kwargs = {"backend": backend}
        if mode is not None:
            kwargs["mode"] = mode
        return fn(target, **kwargs)
    return compile


def _tc_reset():
    import torch
    dyn = getattr(torch, "_dynamo", None)
    if dyn is not None and hasattr(torch, "compile"):
        dyn.reset()


def _tc_explain(target, args):
    import torch._dynamo as dyn
    dyn.reset()
    try:
        out = dyn.explain(target)(*args)
    finally:
        dyn.reset()
    return Counts(out.graph_count, out.graph_break_count)


def _tc_check():
    torch_compile_fn()


for _name, _backend, _mode, _devs, _desc in (
        ("torch.compile-eager", "eager", None, ("cpu", "cuda"), "Dynamo capture only (backend='eager')"),
        ("torch.compile", "inductor", None, ("cpu", "cuda"), "Dynamo + Inductor, default mode"),
        ("torch.compile-ro", "inductor", "reduce-overhead", ("cuda",), "Inductor + CUDA graphs"),
        ("torch.compile-max-autotune", "inductor", "max-autotune", ("cuda",), "Inductor max-autotune")):
    register(Contender(_name, "torch.compile", _tc_compile(_backend, _mode), _tc_reset, _tc_explain, _tc_check,
                       _devs, _backend, _mode, _desc))


def _prewarm_fn(x):
    return (x * 2.0).relu() + 1.0


def prewarm(c: Contender, device="cpu"):
    """Compiles and runs a throwaway function once on `device`, so a contender's one-time imports and
    setup are not charged to whichever workload happens to come first. Returns the seconds it took."""
    import time

    import torch
    t0 = time.perf_counter()
    fn = c.compile(lambda x: _prewarm_fn(x))
    fn(torch.randn(16, device=device))
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    c.reset()
    return time.perf_counter() - t0
