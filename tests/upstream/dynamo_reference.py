"""The eager reference: every call of a compiled callable is also run eagerly and compared.

The reference runs in a fork taken just before the compiled call: the child starts from exactly the
state the compiled call starts from (arguments, globals, closures, torch's and Python's RNG, grad
mode) and whatever the eager run changes stays in the child, so the test itself sees one call, not
two. This holds for impure functions too (appends to a global list, RNG draws, prints), which a
deep-copy-and-rerun scheme would double. The child sends back a snapshot of what a caller can
observe; the parent takes the same snapshot after the compiled call and compares:

    result      the return value (tensors by dtype, shape and value; containers by type and items;
                objects by type and attributes), or the exception's type
    arguments   every argument after the call (in-place mutation of tensors, lists, dicts, objects)
    aliasing    which returned tensors are argument tensors (`return x`, `y = x.add_(1); return y`)
    state       the function's closure cells and the plain-data globals it names; a module's
                state_dict and plain attributes; a bound method's instance attributes

Printed output is not compared. Returned generators and iterators are compared by type only
(consuming them would change what the test sees).
"""
from __future__ import annotations

import os
import pickle
import random
import select
import sys
import time

import torch

from dynamo_snapshot import compare, snapshot, tensor_paths

REFERENCE_TIMEOUT_S = 60
# Called (no arguments) before each checked call runs its compiled callable, outside any trace:
# dynamo_patches mirrors torch._dynamo.config's knobs into framefuse.config there.
BEFORE_CALL = []


class _State:
    """What one test's compiled calls reported (reset in each test's process)."""

    def __init__(self):
        self.events = []        # dicts: kind, label, detail
        self.graphs = 0         # graphs framefuse handed to a backend
        self.notes = set()      # adapter remarks: replaced backends, dynamic=True ...
        self.in_reference = False
        self.compiled_calls = 0
        self.depth = 0          # > 0 while a checked call runs its compiled callable
        self.stats = {}         # framefuse's frame statistics, summed over framefuse.reset() calls

    def bank_stats(self):
        """Add framefuse's counters to `stats` (framefuse.reset() zeroes them)."""
        import framefuse  # noqa: PLC0415
        for key, value in framefuse._C._frame_eval_stats().items():
            if isinstance(value, int):
                self.stats[key] = self.stats.get(key, 0) + value

    def event(self, kind, label, **detail):
        if len(self.events) < 200:
            self.events.append({"kind": kind, "label": label, **detail})


STATE = _State()


def reset_state():
    global STATE
    STATE = _State()


def _label(fn):
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})" if code else name


def _state_of(fn):
    """The observable state a call of `fn` may change besides its arguments."""
    out = {}
    if isinstance(fn, torch.nn.Module):
        out["module.state_dict"] = dict(fn.state_dict(keep_vars=False))
        out["module.attrs"] = {k: v for k, v in vars(fn).items()
                               if not k.startswith("_") and not isinstance(v, torch.nn.Module)}
        out["module.training"] = fn.training
        return out
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, type) and hasattr(owner, "__dict__"):
        out["self"] = {k: v for k, v in vars(owner).items() if not k.startswith("__")}
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return out
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            out[f"closure:{name}"] = cell.cell_contents
        except ValueError:  # an empty cell
            out[f"closure:{name}"] = "<empty cell>"
    g = getattr(fn, "__globals__", {})
    for name in code.co_names:
        if name in g and isinstance(g[name], (int, float, str, list, dict, set, tuple, torch.Tensor)):
            out[f"global:{name}"] = g[name]
    return out


def _observe(outcome, args, kwargs, fn):
    """A picklable snapshot of everything compared after one call."""
    arg_tensors = tensor_paths((args, kwargs))
    return {
        "outcome": outcome if outcome[0] == "raise" else ("ok", snapshot(outcome[1], arg_tensors)),
        "args": snapshot((args, kwargs), None),
        "state": snapshot(_state_of(fn), None),
    }


def _compiling_semantics():
    """The one place where compiled code differs from eager on purpose, under torch.compile as under
    framefuse: `torch.compiler.is_compiling()` and its aliases are True. The reference (a throwaway
    child) runs with them True too."""
    def true():
        return True

    for mod_name in ("torch.compiler", "torch._utils", "torch._dynamo", "torch._dynamo.external_utils"):
        mod = sys.modules.get(mod_name)
        for name in ("is_compiling", "is_dynamo_compiling"):
            if mod is not None and hasattr(mod, name):
                setattr(mod, name, true)


def _run_reference(original, args, kwargs, wfd):
    """In the forked child: the eager call, its snapshot down the pipe, then exit."""
    STATE.in_reference = True
    _compiling_semantics()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        try:
            outcome = ("ok", original(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - eager's exception is the expected outcome
            outcome = ("raise", type(e).__qualname__, str(e)[:300])
        data = pickle.dumps(_observe(outcome, args, kwargs, original), protocol=4)
    except BaseException as e:  # noqa: BLE001
        data = pickle.dumps({"unobservable": f"{type(e).__name__}: {e}"[:300]}, protocol=4)
    view = memoryview(data)
    while view:
        view = view[os.write(wfd, view):]
    os._exit(0)


def _read_reference(pid, rfd):
    chunks, deadline = [], time.monotonic() + REFERENCE_TIMEOUT_S
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([rfd], [], [], left)[0]:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            os.close(rfd)
            return {"unobservable": f"the eager reference ran past {REFERENCE_TIMEOUT_S}s"}
        chunk = os.read(rfd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        return {"unobservable": f"the eager reference died (wait status {status})"}
    return pickle.loads(b"".join(chunks))


def _compiled_error_kind(exc):
    import framefuse  # noqa: PLC0415
    if isinstance(exc, framefuse.Unsupported):
        return "unsupported"
    if isinstance(exc, framefuse.InternalError):
        return "internal"
    return "other"


def call_checked(compiled, original, fullgraph, args, kwargs):
    """One call of a compiled callable, compared with the eager reference."""
    if STATE.in_reference:
        return original(*args, **kwargs)
    if STATE.depth:
        # A compiled callable called from inside another one (torch.compile of a compiled module, a
        # compiled helper): the outer call's reference already covers it, and framefuse may be tracing
        # this very frame, so the bookkeeping below (fork, snapshots) must stay out of its way.
        return compiled(*args, **kwargs)
    STATE.compiled_calls += 1
    for hook in BEFORE_CALL:
        hook()
    label = _label(original)
    rfd, wfd = os.pipe()
    # CPython reseeds `random` in a forked child (os.register_at_fork), so the child restores the
    # parent's state: a test that seeds `random` must see the same draws in both runs.
    py_rng = random.getstate()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        random.setstate(py_rng)
        _run_reference(original, args, kwargs, wfd)
    os.close(wfd)
    error = None
    STATE.depth += 1
    try:
        result = compiled(*args, **kwargs)
        outcome = ("ok", result)
    except BaseException as e:  # noqa: BLE001 - re-raised below
        error, outcome = e, ("raise", type(e).__qualname__, str(e)[:300])
    finally:
        STATE.depth -= 1
    try:
        mine = _observe(outcome, args, kwargs, original)
    except Exception as e:  # noqa: BLE001
        mine = {"unobservable": f"{type(e).__name__}: {e}"[:300]}
    ref = _read_reference(pid, rfd)
    try:
        _judge(label, fullgraph, ref, mine, error)
    except Exception as e:  # noqa: BLE001 - the adapter's own failure must not fail the test
        STATE.event("unchecked", label, why=f"adapter: {type(e).__name__}: {e}"[:300])
    if error is not None:
        raise error
    return result


def _judge(label, fullgraph, ref, mine, error):
    if "unobservable" in ref or "unobservable" in mine:
        STATE.event("unchecked", label, why=ref.get("unobservable") or mine.get("unobservable"))
        return
    eager_raised = ref["outcome"][0] == "raise"
    if error is not None and not eager_raised:
        STATE.event("compiled_raised", label, error_kind=_compiled_error_kind(error), fullgraph=fullgraph,
                    error=f"{mine['outcome'][1]}: {mine['outcome'][2]}")
        return
    if error is None and eager_raised:
        STATE.event("mismatch", label, what="exception", eager=f"raises {ref['outcome'][1]}: {ref['outcome'][2]}",
                    compiled="returns normally")
        return
    if eager_raised:
        if ref["outcome"][1] != mine["outcome"][1]:
            kind = "compiled_raised" if _compiled_error_kind(error) != "other" else "mismatch"
            STATE.event(kind, label, what="exception", error_kind=_compiled_error_kind(error), fullgraph=fullgraph,
                        eager=f"raises {ref['outcome'][1]}: {ref['outcome'][2]}",
                        compiled=f"raises {mine['outcome'][1]}: {mine['outcome'][2]}",
                        error=f"{mine['outcome'][1]}: {mine['outcome'][2]}")
        else:
            STATE.event("raised_like_eager", label, error=f"{mine['outcome'][1]}: {mine['outcome'][2]}")
        return
    for what, a, b in (("result", ref["outcome"][1], mine["outcome"][1]), ("arguments", ref["args"], mine["args"]),
                       ("state", ref["state"], mine["state"])):
        diff = compare(a, b)
        if diff:
            STATE.event("mismatch", label, what=what, diff=diff)
            return


def checked(compiled, original, fullgraph):
    """`compiled`, with every call compared against `original` run eagerly."""
    if isinstance(compiled, torch.nn.Module):
        # framefuse's compiled module is an instance of a fresh subclass whose __call__ is compiled;
        # the reference calls the original module, which shares its __dict__.
        cls, compiled_call = type(compiled), type(compiled).__call__

        def __call__(self, *args, **kwargs):
            return call_checked(lambda *a, **k: compiled_call(self, *a, **k), original, fullgraph, args, kwargs)
        cls.__call__ = __call__
        return compiled

    def wrapper(*args, **kwargs):
        return call_checked(compiled, original, fullgraph, args, kwargs)
    for attr in ("__name__", "__qualname__", "__doc__", "__module__", "__wrapped__"):
        try:
            setattr(wrapper, attr, getattr(compiled, attr))
        except AttributeError:
            pass
    wrapper._framefuse_compiled = compiled
    wrapper._torchdynamo_orig_callable = original
    return wrapper
