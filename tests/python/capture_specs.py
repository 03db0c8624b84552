"""Hand-built captures for frontend tests: run the real hook, guards, cache and capture runner
without the bytecode interpreter (framefuse._C._testing.set_tracer)."""
import contextlib

import torch

import framefuse
from framefuse import _C
from framefuse.graph import Graph


def local(code, name):
    """The source of argument `name` of `code`."""
    return ("local", code.co_varnames.index(name), name)


def tensor_args_capture(op, extra_guards=(), output=None, side_effects=()):
    """A tracer: every argument is a tensor input; the graph folds `op` over them
    (op(a0) for one argument, op(op(a0, a1), a2) ... otherwise)."""
    def tracer(code, locals_):
        g = Graph()
        names = code.co_varnames[:code.co_argcount]
        nodes, inputs, guards = [], [], []
        for i, name in enumerate(names):
            v = locals_[i]
            if isinstance(v, torch.Tensor):
                nodes.append(g.placeholder(name, v))
                inputs.append(("local", i, name))
                guards.append(("tensor", ("local", i, name), v))
        out = g.call(op, nodes[0]) if len(nodes) == 1 else nodes[0]
        for n in nodes[1:]:
            out = g.call(op, out, n)
        g.output((out,))
        return {"graph": g, "inputs": inputs, "guards": guards + [("global_state",)] + list(extra_guards(code, locals_) if callable(extra_guards) else extra_guards),
                "output": output or ("out", 0), "side_effects": list(side_effects)}
    return tracer


@contextlib.contextmanager
def tracer(fn):
    """Use `fn(code, localsplus) -> spec` instead of the interpreter inside the block."""
    framefuse.reset()
    _C._testing.set_tracer(fn)
    try:
        yield
    finally:
        _C._testing.set_tracer(None)
        framefuse.reset()


def stats():
    return _C._frame_eval_stats()
