"""PyTorch's OpInfo database (`op_db`) through framefuse.compile(dynamic=True): symbolic sizes
against eager on inputs nobody here chose.

For each op of op_db that supports the dtype (float32 by default) and each variant (function,
tensor method, in-place method), the op's sample inputs are grouped by structure: the same tensor
ranks, dtypes and contiguity in the same places, and equal non-tensor arguments. The first pair of
samples of one structure whose sizes differ is called through one compiled function, traced with
every size symbolic at the first sample and then run at the second: the second call either runs the
program compiled for the first (its kernels take the sizes as arguments) or retraces where the
trace relied on a size. Both calls are compared with eager (tolerances and rules of
opinfo_sweep.py). Each pair is recorded as

  eager-error  eager raised on either call: not counted
  agrees       both results (and mutated operands) match eager
  wrong        a compiled result differs from eager's
  crashed      framefuse raised where eager did not

with `symbolic` (a program compiled once for all sizes served the pair) and `traces` (frames the
two calls compiled: 1 where the second call reused the first's).

    python tests/python/opinfo_dynamic.py [--device cuda] [--ops a,b] [--max-seconds N] [--jsonl FILE]

tests/python/inductor/test_dynamic_opinfo.py runs it in CI; the GPU session runs it with --device cuda.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opinfo_sweep as ops  # noqa: E402


def _grown_tensor(x):
    import torch
    # NB: integer tensors may hold structure (embedding_bag's offsets must stay increasing).
    if x.layout != torch.strided or not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool):
        return x
    for d in range(x.dim()):
        if x.shape[d] >= 2:
            x = torch.cat([x, x.narrow(d, 0, 2)], d)
    return x


def _grown(x):
    """`x` with every dimension of size >= 2 of its float, complex and bool tensors two larger, its
    first two slices repeated at the end (values from the same distribution, equal sizes stay
    equal)."""
    return ops.map_tensors(_grown_tensor, x)


def pairs(op_db, dtype, device, ops_filter=None, samples=1):
    """(op, variant name, variant, call a, call b): the op's first samples, each as given and grown
    (_grown); a call is (args, kwargs)."""
    import torch
    for op in op_db:
        if ops_filter and op.name not in ops_filter:
            continue
        try:
            if dtype not in ops.supported_dtypes(op, device):
                continue
        except Exception:
            continue
        for vname, fn in ops.variants(op):
            try:
                for i, s in enumerate(op.sample_inputs(device, dtype, requires_grad=False)):
                    if i >= samples:
                        break
                    a = ((s.input,) + tuple(s.args), dict(s.kwargs))
                    # NB: on CUDA an index out of a grown operand's range is a device-side assert,
                    # which poisons the process: samples with integer tensors are left out there.
                    if device == "cuda" and any(not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)
                                                for t in ops._tensors(list(a))):
                        continue
                    b = _grown(a)
                    if _sizes(a) != _sizes(b):
                        yield op, vname, fn, a, b
            except Exception:
                continue  # the sample generator itself fails on this torch


def _sizes(call):
    return [tuple(t.shape) for t in ops._tensors(list(call))]


def run_pair(op, fn, a, b, device="cpu"):
    import torch
    import framefuse
    from framefuse import _C, backends

    expected = []
    for args, kwargs in (a, b):
        eargs, ekwargs = ops._clone(args), ops._clone(kwargs)
        torch.manual_seed(0)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected.append((fn(*eargs, **ekwargs), eargs, ekwargs))
                ops._synchronize(device)
        except Exception as e:
            return {"status": "eager-error", "reason": ops._first_line(e)}

    def call(*x, **k):
        return fn(*x, **k)

    framefuse.reset()
    before = backends.symbolic_compiles()
    compiled = framefuse.compile(call, backend="inductor", dynamic=True)
    unspecified = ops._unspecified(op.name)
    item = {"status": "agrees"}
    for which, ((args, kwargs), (want, eargs, ekwargs)) in enumerate(zip((a, b), expected)):
        cargs, ckwargs = ops._clone(args), ops._clone(kwargs)
        torch.manual_seed(0)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = compiled(*cargs, **ckwargs)
                ops._synchronize(device)
        except Exception as e:
            return {"status": "crashed", "reason": f"call {which + 1}: {ops._first_line(e)}"}
        try:
            try:
                ops._compare(got, want, unspecified, ops.SPECIFIED_RESULTS.get(op.name))
            except AssertionError:
                if not ops._closer_than_eager(fn, args, kwargs, got, want):
                    raise
            if not any(want is x for x in eargs):  # an in-place result was judged above
                ops._compare(cargs, eargs, unspecified)
            ops._compare(ckwargs, ekwargs, unspecified)
        except Exception as e:
            return {"status": "wrong", "reason": f"call {which + 1} at {_sizes((args, kwargs))}: {ops._first_line(e)}"}
    stats = _C._frame_eval_stats()
    item["traces"] = stats.get("frames_compiled", 0)
    item["symbolic"] = backends.symbolic_compiles() > before
    item["sizes"] = [_sizes(a), _sizes(b)]
    return item


def sweep(out, dtype, device, ops_filter=None, deadline=None, samples=1):
    import torch
    torch.set_num_threads(1)
    op_db = ops.load_op_db()
    for op, vname, fn, a, b in pairs(op_db, dtype, device, ops_filter, samples):
        key = {"op": op.name, "variant": op.variant_test_name or "", "kind": vname, "dtype": str(dtype).replace("torch.", "")}
        if deadline is not None and time.time() > deadline:
            out.write(json.dumps({"cut": key}) + "\n")
            return
        out.write(json.dumps({"start": key}) + "\n")
        out.flush()
        item = run_pair(op, fn, a, b, device)
        item.update(key)
        out.write(json.dumps(item) + "\n")
        out.flush()


def summarize(done):
    counts = collections.Counter(r["status"] for r in done)
    runnable = [r for r in done if r["status"] != "eager-error"]
    return {"pairs": len(runnable), "statuses": dict(counts),
            "symbolic": sum(1 for r in runnable if r.get("symbolic")),
            "one_trace": sum(1 for r in runnable if r.get("traces") == 1)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--ops", default=None, help="comma list of op_db names")
    p.add_argument("--jsonl", default=None, help="write the pairs here (default: a temporary file)")
    p.add_argument("--max-seconds", type=float, default=None, help="start no pair after this many seconds")
    p.add_argument("--samples", type=int, default=1, help="pairs from this many of each op's first samples")
    a = p.parse_args(argv)
    import torch
    path = a.jsonl or os.path.join(os.environ.get("TMPDIR", "/tmp"), f"opinfo-dynamic-{os.getpid()}.jsonl")
    deadline = time.time() + a.max_seconds if a.max_seconds is not None else None
    with open(path, "w") as out:
        sweep(out, getattr(torch, a.dtype), a.device, set(a.ops.split(",")) if a.ops else None, deadline, a.samples)
    done, running = ops.read_results(path)
    s = summarize(done)
    print(f"{s['pairs']} pairs eager runs: {s['statuses']}; a program compiled once served {s['symbolic']}, "
          f"one trace {s['one_trace']}")
    for r in done:
        if r["status"] in ("wrong", "crashed"):
            print(f"{r['status']}: {r['op']} {r['variant']} {r['kind']}: {r.get('reason')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
