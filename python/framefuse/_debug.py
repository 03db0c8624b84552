"""FRAMEFUSE_COMPILE_DEBUG=1: every compile's artifacts in a folder, as TORCH_COMPILE_DEBUG=1.

    FRAMEFUSE_COMPILE_DEBUG=1 python train.py     # FRAMEFUSE_COMPILE_DEBUG_DIR picks the parent folder

writes `framefuse_debug/run_<date>_<time>_pid<pid>/` (in the working directory unless
FRAMEFUSE_COMPILE_DEBUG_DIR names another):

- `debug.log`: every log record of every component and artifact, at debug level;
- one folder per compile, `<frame_id>_<compile_id>` (the `[frame_id/compile_id]` of the logs),
  holding one file per log artifact: `graph_code.py` (the captured graph), `guards.txt`,
  `bytecode.txt`, `graph_breaks.txt`, `pass_ir.txt` (the IR after each pipeline pass),
  `output_code.txt` (the loop IR and the generated LLVM IR or CUDA C++), `schedule.txt`,
  `fusion.txt`, `perf_hints.txt` ...;
- `repro.py` in the folder of each graph given to a backend: it rebuilds the graph from its code,
  makes random inputs with the recorded shapes, strides, dtypes and devices, runs the graph with
  the same backend and compares the result with the reference runner's (eager torch ops).
  `python repro.py` exits non-zero on a mismatch.

What FRAMEFUSE_LOGS asks for still goes to `logging` as usual; the folder gets everything.
"""
import datetime
import logging
import os
import re

from . import _C

_TAG = re.compile(r"^\[(\d+)/(\d+)\] ")
_SUFFIX = {"graph_code": ".py"}

_run_dir = None


def run_dir():
    """The folder this process writes (None when compile debug is off)."""
    return _run_dir


def enable(parent=None):
    """Start writing the compile artifacts of this process under `parent` (default:
    $FRAMEFUSE_COMPILE_DEBUG_DIR, else ./framefuse_debug); returns the run folder."""
    global _run_dir
    from . import _logging  # noqa: PLC0415  (_logging imports this module)
    parent = parent or os.environ.get("FRAMEFUSE_COMPILE_DEBUG_DIR") or os.path.join(os.getcwd(), "framefuse_debug")
    stamp = datetime.datetime.now().strftime("%Y_%m_%d_%H_%M_%S_%f")
    path = os.path.join(os.path.abspath(parent), f"run_{stamp}_pid{os.getpid()}")
    os.makedirs(path, exist_ok=True)
    _run_dir = path
    _logging._set_debug_sink(_write_record)
    return path


def disable():
    global _run_dir
    from . import _logging  # noqa: PLC0415
    _run_dir = None
    _logging._set_debug_sink(None)


def _compile_dir(frame_id, compile_id):
    d = os.path.join(_run_dir, f"{frame_id}_{compile_id}")
    os.makedirs(d, exist_ok=True)
    return d


def _append(path, text):
    with open(path, "a", encoding="utf-8") as f:
        f.write(text if text.endswith("\n") else text + "\n")


def _write_record(logger_name, level, msg):
    if _run_dir is None:
        return
    stamp = datetime.datetime.now().strftime("%H:%M:%S.%f")[:-3]
    _append(os.path.join(_run_dir, "debug.log"), f"{logging.getLevelName(level)[0]}{stamp} {logger_name}] {msg}")
    m = _TAG.match(msg)
    if m is None:
        return
    parts = logger_name.split(".")
    name = parts[2] if len(parts) > 2 else parts[-1]  # the artifact, else the component
    body = msg[m.end():]
    if name == "graph_code" and not body.startswith("def "):
        body = "# " + body  # "GRAPH for f (file:line)": a comment, so that the file stays Python
    _append(os.path.join(_compile_dir(m.group(1), m.group(2)), name + _SUFFIX.get(name, ".txt")), body + "\n")


def _input_spec(x):
    import torch  # noqa: PLC0415
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), tuple(x.stride()), str(x.dtype).replace("torch.", ""), str(x.device),
                bool(x.requires_grad))
    if isinstance(x, (bool, int, float)) or x is None:
        return ("value", x)
    return ("value", None)  # NB: not representable; the repro passes None


def record_graph(graph, example_inputs, backend, mode, options):
    """Writes `repro.py` for a graph about to be given to `backend` (the current compile's folder)."""
    if _run_dir is None:
        return
    frame_id, compile_id = _C.logging.compile_tag()
    folder = _compile_dir(max(frame_id, 0), max(compile_id, 0))
    backend_name = backend if isinstance(backend, str) else None
    specs = [_input_spec(x) for x in example_inputs]
    text = _REPRO.format(code=graph.code(), specs=repr(specs), backend=repr(backend_name or "inductor"),
                         mode=repr(mode), options=repr(dict(options or {})),
                         note="" if backend_name else
                         f"# NB: compiled with a custom backend ({getattr(backend, '__name__', type(backend).__name__)});"
                         " the repro compiles with backend='inductor'.\n")
    path = os.path.join(folder, "repro.py")
    if os.path.exists(path):  # several graphs in one compile (a symbolic graph's sizes ...)
        n = 1
        while os.path.exists(os.path.join(folder, f"repro_{n}.py")):
            n += 1
        path = os.path.join(folder, f"repro_{n}.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


_REPRO = '''"""A graph framefuse captured, as a runnable repro (written by FRAMEFUSE_COMPILE_DEBUG=1).

Rebuilds the graph from its code, makes random inputs with the recorded metadata, runs it with the
backend it was compiled for and compares with the reference runner (eager torch ops).
`python repro.py` exits with 1 on a mismatch.
"""
import sys

import torch

import framefuse
from framefuse.backends import _call_backend
from framefuse.graph import Graph

{note}GRAPH = """
{code}"""

# (kind, shape, stride, dtype, device, requires_grad) of each input, or ("value", constant)
INPUTS = {specs}
BACKEND, MODE, OPTIONS = {backend}, {mode}, {options}


def make_inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for spec in INPUTS:
        if spec[0] != "tensor":
            out.append(spec[1])
            continue
        _, shape, stride, dtype, device, requires_grad = spec
        dtype = getattr(torch, dtype)
        size = 1 + sum((n - 1) * s for n, s in zip(shape, stride) if n > 0)  # the last element's offset + 1
        if dtype.is_floating_point or dtype.is_complex:
            flat = torch.randn(size, generator=gen).to(dtype)
        elif dtype == torch.bool:
            flat = torch.randint(0, 2, (size,), generator=gen).bool()
        else:
            flat = torch.randint(-8, 8, (size,), generator=gen).to(dtype)
        t = flat.to(device).as_strided(shape, stride)
        out.append(t.requires_grad_() if requires_grad else t)
    return out


def main():
    graph = Graph.parse(GRAPH)
    expected = graph.run(*make_inputs())
    compiled = _call_backend(BACKEND, graph._g, make_inputs(), MODE, OPTIONS or None)
    actual = compiled(*make_inputs())
    ok = True
    for i, (e, a) in enumerate(zip(expected, actual)):
        if isinstance(e, torch.Tensor):
            try:
                torch.testing.assert_close(a, e, equal_nan=True)
            except AssertionError as err:
                ok = False
                print(f"output {{i}}: mismatch\\n{{err}}")
        elif e != a:
            ok = False
            print(f"output {{i}}: {{a!r}} where the reference runner gives {{e!r}}")
    print("repro: outputs match the reference runner" if ok else "repro: MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
'''
