"""PyTorch's OpInfo database (`op_db`, loaded from the installed torch) through framefuse.compile.

Every op of op_db that supports a dtype on the device (--device, cpu by default), in each of its
variants (the function, the tensor method, the in-place method), runs its sample inputs once eagerly
and once compiled, per backend.
Each item is recorded as one of

  eager-error  eager raised: not counted (the sample is invalid for this variant or dtype)
  captured     the call entered a graph (no graph break) and the result matches eager
  broke        the frame broke or ran eagerly; the result matches eager (the reason is kept)
  wrong        the compiled result (or a mutated input, or the identity of a returned input)
               differs from eager
  crashed      framefuse raised where eager did not (or raised another exception type)

Results are compared with torch.testing.assert_close at its dtype-based tolerances (NaNs equal);
ops whose results are unspecified memory (empty*, the fused attention kernels' RNG state without
dropout: SPECIFIED_RESULTS) are compared by metadata only. RNG ops run from
the same seed eagerly and compiled (torch.manual_seed seeds the CUDA generators too): they must draw
the same numbers. A float16 or bfloat16 result outside the tolerance is compared with the op run in
float64 on the same inputs, as torch's own compiler tests do: fused kernels keep intermediates in
float32 where eager rounds each op to the low precision, so the compiled result counts as right
where it is no farther from the float64 one than twice eager's error (its RMSE). A float32 CUDA
result where TF32 is on (cuDNN's default) is judged so too: a convolution run in another layout
picks another TF32 algorithm, which rounds otherwise than eager's; such items are
counted as `closer_than_eager` in the report (the operand an in-place variant returns is judged
once, as its result).

    python tests/python/opinfo_sweep.py --full --report FILE.md     # all samples, five dtypes
    python tests/python/opinfo_sweep.py --jsonl FILE                # the CI budget (test_opinfo.py)

With --autocast DTYPE both calls run inside torch.autocast(device, dtype=DTYPE): the compiled one
must give what eager autocast gives (framefuse puts autocast's casts into the graph).

Items are written to --jsonl as they finish (a line "start" before each), so a process that dies
names the item that killed it; --isolate runs the items in worker processes and goes on in a new
one after one dies. --max-seconds N starts no item after N seconds (the report says where the run
was cut); --shard K/N sweeps every N-th op_db entry from the K-th (parts that run at once); --merge
writes one report from the shards' --jsonl files.

With --device cuda the samples are made on the GPU, for the ops whose CUDA dtypes (OpInfo's
supported_dtypes("cuda"), its dtypesIfCUDA) include the dtype; the dtypes are float32 (the CI-like
selection) or, with --full, float32, float16 and bfloat16. An error of the CUDA context
(a device-side assert) poisons it for the rest of the process: the item is recorded (crashed, or
eager-error where eager raised it) with the message, and the sweep goes on in a new process from the
next item; a worker process that dies gets its running item recorded as crashed the same way.
On the GPU machine, from the repository root (about 49,000 samples on torch 2.11, both backends):

    OUT=$OUT sh tests/python/opinfo_cuda_run.sh        # 8 shards at once on the GPU, 480 s each

which runs, for K in 0..7 and then merges the parts into $OUT/opinfo-cuda.{md,jsonl},

    PYTHONPATH=$PWD/python:$PWD python3 tests/python/opinfo_sweep.py --device cuda --full \
        --dtypes float32,float16,bfloat16 --max-seconds 480 --shard K/8 --jsonl PART_K.jsonl
"""
from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import types
import warnings


def load_op_db():
    """op_db of the installed torch (its testing modules import `expecttest`, which Debian does not
    package: where it is missing a stand-in with the two names torch reads is installed first)."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        import unittest
        stub = types.ModuleType("expecttest")
        stub.TestCase = unittest.TestCase
        stub.ACCEPT = False
        sys.modules["expecttest"] = stub
    import torch
    frozen = torch.backends.flags_frozen()
    from torch.testing._internal.common_methods_invocations import op_db
    # NB: importing torch's test utilities freezes torch.backends flags for the whole process.
    setattr(torch.backends, "__allow_nonbracketed_mutation_flag", not frozen)
    return op_db


def map_tensors(fn, x):
    """`x` with each tensor in it (through lists, tuples other than named ones, and dicts) replaced
    by fn(tensor)."""
    import torch
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, list):
        return [map_tensors(fn, i) for i in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(map_tensors(fn, i) for i in x)
    if isinstance(x, dict):
        return {k: map_tensors(fn, v) for k, v in x.items()}
    return x


def _clone_tensor(x):
    import torch
    if x.layout != torch.strided:
        return x.clone()
    y = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    with torch.no_grad():
        y.copy_(x)
    return y.requires_grad_(x.requires_grad) if x.is_leaf else y


def _clone(x):
    return map_tensors(_clone_tensor, x)


def _unspecified(name):
    return name.startswith("empty") or name.startswith("new_empty") or "empty_" in name


# Ops whose results past the first few are unspecified memory: the fused attention kernels' RNG
# seed and offset (and debug mask) are torch.empty() where there is no dropout.
SPECIFIED_RESULTS = {"torch.ops.aten._efficient_attention_forward": 2, "torch.ops.aten._flash_attention_forward": 2}


def _compare(actual, expected, metadata_only, specified=None):
    if specified is not None and isinstance(actual, tuple) and isinstance(expected, tuple):
        _assert_same(actual[:specified], expected[:specified], "result")
        _compare(actual[specified:], expected[specified:], True)
        return
    if metadata_only:
        a = [t for t in _tensors(actual)]
        e = [t for t in _tensors(expected)]
        if [(t.shape, t.dtype) for t in a] != [(t.shape, t.dtype) for t in e]:
            raise AssertionError(f"metadata differs: {[(t.shape, t.dtype) for t in a]} vs {[(t.shape, t.dtype) for t in e]}")
        return
    _assert_same(actual, expected, "result")


def _assert_same(a, e, where):
    """assert_close on tensors (its dtype-based tolerances, NaNs equal), == on everything else."""
    import torch
    if isinstance(e, torch.Tensor) or isinstance(a, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)):
            raise AssertionError(f"{where}: {type(a).__name__} where eager gives {type(e).__name__}")
        torch.testing.assert_close(a, e, equal_nan=True, check_device=True, check_dtype=True, check_layout=True,
                                   msg=lambda m: f"{where}: {m}")
    elif isinstance(e, (list, tuple)):
        if not isinstance(a, (list, tuple)) or len(a) != len(e) or type(a) is not type(e):
            raise AssertionError(f"{where}: {type(a).__name__} of {len(a) if isinstance(a, (list, tuple)) else '?'} "
                                 f"where eager gives {type(e).__name__} of {len(e)}")
        for i, (x, y) in enumerate(zip(a, e)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(e, dict):
        if not isinstance(a, dict) or a.keys() != e.keys():
            raise AssertionError(f"{where}: keys differ")
        for k in e:
            _assert_same(a[k], e[k], f"{where}[{k!r}]")
    elif isinstance(e, float) and e != e:
        if not (isinstance(a, float) and a != a):
            raise AssertionError(f"{where}: {a!r} where eager gives nan")
    elif not (type(a) is type(e) and a == e):
        raise AssertionError(f"{where}: {a!r} where eager gives {e!r}")


def _to_double(x, ints=False):
    """x with its reduced-float tensors (and with `ints`, its integer tensors) in float64."""
    import torch
    convert = (torch.bfloat16, torch.float16, torch.float32) + ((torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8) if ints else ())
    if isinstance(x, torch.Tensor) and x.dtype in convert:
        return x.detach().double()
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_to_double(i, ints) for i in x)
    if isinstance(x, dict):
        return {k: _to_double(v, ints) for k, v in x.items()}
    return x


def _closer_than_eager(fn, args, kwargs, actual, expected):
    """Results below float64 (float16, bfloat16, float32): is the compiled one no farther from the
    float64 result than eager's (twice its RMSE, plus a little for results eager gets exactly)?
    NB: float32 too: eager's float32 kernels of special functions (polygamma, the orthogonal
    polynomials) run their series and recurrences in float, where the generated code computes in
    double; its results are closer to the exact ones and can differ from eager's beyond float32's
    tolerance."""
    import torch
    low = [t for t in _tensors(expected) if t.dtype in (torch.bfloat16, torch.float16, torch.float32)]
    if not low or len(_tensors(actual)) != len(_tensors(expected)):
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = fn(*_to_double(_clone(args)), **_to_double(_clone(kwargs)))
            if all(r.dtype != torch.float64 for r in _tensors(ref)):
                # NB: a float result of integer operands (polygamma of int64 is float32): its
                # float64 result is that of the integers as float64
                ref = fn(*_to_double(_clone(args), True), **_to_double(_clone(kwargs), True))
    except Exception:
        return False
    refs, acts, exps = _tensors(ref), _tensors(actual), _tensors(expected)
    if len(refs) != len(exps):
        return False
    for r, a, e in zip(refs, acts, exps):
        if a.shape != e.shape or a.dtype != e.dtype or r.shape != e.shape:
            return False
        if not (a.is_floating_point() and r.is_floating_point()):
            if not torch.equal(a, e):
                return False
            continue
        finite = torch.isfinite(r)
        if not torch.equal(torch.isfinite(a), finite) or not torch.equal(torch.isnan(a), torch.isnan(r)):
            return False
        def rmse(x):
            d = (x.double() - r)[finite]
            return d.pow(2).mean().sqrt().item() if d.numel() else 0.0
        if rmse(a) > 2.0 * rmse(e) + 1e-5 * (r[finite].abs().mean().item() if finite.any() else 0.0):
            return False
    return True


def _tensors(x):
    import torch
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for i in x for t in _tensors(i)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _first_line(e):
    text = f"{type(e).__name__}: {e}"
    return text.splitlines()[0][:300] if text else type(e).__name__


def variants(op):
    out = [("fn", op.op)]
    if getattr(op, "method_variant", None) is not None:
        out.append(("method", op.method_variant))
    if getattr(op, "inplace_variant", None) is not None:
        out.append(("inplace", op.inplace_variant))
    return out


def _synchronize(device):
    """Wait for the GPU's queued work, so that an asynchronous CUDA error is raised by the item that
    caused it."""
    if device == "cuda":
        import torch
        torch.cuda.synchronize()


def cuda_context_lost():
    """The error that left the CUDA context unusable (a device-side assert is sticky: every later call
    fails with it), or None where it still runs work."""
    import torch
    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
    except Exception as e:
        return _first_line(e)
    return None


AUTOCAST = None  # --autocast: the dtype both calls run under torch.autocast with


def _autocast(device):
    import contextlib
    import torch
    return torch.autocast(device, dtype=AUTOCAST) if AUTOCAST is not None else contextlib.nullcontext()


def run_item(op, variant_name, fn, sample, backend, seed=0, device="cpu"):
    """One sample through one variant and backend: a dict with `status` and details."""
    import torch
    import framefuse
    from framefuse import _C

    args = (sample.input,) + tuple(sample.args)
    kwargs = dict(sample.kwargs)
    eager_args, eager_kwargs = _clone(args), _clone(kwargs)
    torch.manual_seed(seed)
    try:
        with warnings.catch_warnings(), _autocast(device):
            warnings.simplefilter("ignore")
            expected = fn(*eager_args, **eager_kwargs)
            _synchronize(device)
    except Exception as e:
        return {"status": "eager-error", "reason": _first_line(e)}

    def call(*a, **k):
        return fn(*a, **k)

    framefuse.reset()
    graphs = []

    placement = {"lowered": set(), "extern": set(), "reference": False}

    @framefuse.backends.native_graph
    def recording(graph, example_inputs):
        graphs.append(graph)
        if backend == "inductor":
            from framefuse import backends, inductor
            _note_placement(graph, inductor, placement, device)
            return backends._inductor(graph, example_inputs)
        return graph.run

    comp_args, comp_kwargs = _clone(args), _clone(kwargs)
    compiled = framefuse.compile(call, backend=recording)
    torch.manual_seed(seed)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(), _autocast(device):
            warnings.simplefilter("ignore")
            actual = compiled(*comp_args, **comp_kwargs)
            _synchronize(device)
    except Exception as e:
        return {"status": "crashed", "reason": _first_line(e)}
    seconds = time.perf_counter() - start
    breaks = [r.get("reason", "") if isinstance(r, dict) else str(r) for r in _C._graph_break_records()]
    stats = _C._frame_eval_stats()
    broke = bool(breaks) or stats.get("graph_breaks", 0) > 0 or stats.get("internal_errors", 0) > 0
    ops = []
    for g in graphs:
        for n in g.nodes():
            if n.kind == "Call":
                ops.append(n.op)
    item = {"status": "broke" if broke else "captured", "seconds": seconds, "ops": ops,
            "graphs": len(graphs)}
    if backend == "inductor":
        item.update(lowered=sorted(placement["lowered"]), extern=sorted(placement["extern"]),
                    reference=placement["reference"])
    # NB: a frame traced whole that computes nothing (torch.conj of a real tensor returns it) needs
    # no graph; any other frame without one ran natively.
    traced_empty = (_C._code_cache_info(call.__code__) or {}).get("skip_reason") == "no tensor operations"
    if not broke and not graphs and _tensors(actual) and not traced_empty:
        broke, breaks = True, ["no graph: the frame ran natively"]
        item["status"] = "broke"
    if broke:
        item["reason"] = breaks[0] if breaks else "internal error: the frame ran eagerly"
    unspecified = _unspecified(op.name)
    try:
        try:
            _compare(actual, expected, unspecified, SPECIFIED_RESULTS.get(op.name))
        except AssertionError:
            if not _closer_than_eager(fn, args, kwargs, actual, expected):
                raise
            item["closer_than_eager"] = True
        # In-place variants and ops that write an operand: the operands after the call.
        if item.get("closer_than_eager"):
            # NB: the operand an in-place op returns was judged as the result (the identity check
            # below holds the compiled call to returning that operand too).
            judged = {i for i, a in enumerate(eager_args) if a is expected}
            _compare(tuple(a for i, a in enumerate(comp_args) if i not in judged),
                     tuple(a for i, a in enumerate(eager_args) if i not in judged), unspecified)
        else:
            _compare(comp_args, eager_args, unspecified)
        _compare(comp_kwargs, eager_kwargs, unspecified)
        if isinstance(expected, torch.Tensor) and any(expected is a for a in eager_args):
            i = next(i for i, a in enumerate(eager_args) if a is expected)
            if actual is not comp_args[i]:
                raise AssertionError(f"eager returns its argument {i} itself; the compiled call returns another tensor")
    except Exception as e:
        item["status"] = "wrong"
        item["reason"] = _first_line(e)
    return item


def _note_placement(graph, inductor, placement, device="cpu"):
    """Which of the graph's calls inductor lowers to generated code and which it runs in torch
    (`extern node N` lines of the loop IR); `reference` where it cannot compile the graph."""
    import re
    try:
        text = inductor.loop_ir(graph, "cuda" if str(device).startswith("cuda") else "cpu")
    except Exception:
        placement["reference"] = True
        return
    extern = {int(m) for m in re.findall(r"^extern node (\d+)", text, re.M)}
    for n in graph.nodes():
        if n.kind == "Call":
            placement["extern" if n.id in extern else "lowered"].add(n.op.split("/")[0])


def supported_dtypes(op, device):
    """The op's dtypes on the device type: OpInfo.supported_dtypes on torch 1.13 to 2.13 (dtypesIfCUDA
    where the device is cuda; 2.x keeps them in the dtypesIf dict behind the same attribute)."""
    try:
        return op.supported_dtypes(device)
    except Exception:
        return (getattr(op, "dtypesIfCUDA", None) if device == "cuda" else None) or op.dtypes


def items(op_db, dtypes, all_samples, ops_filter=None, device="cpu", shard=(0, 1), after=None):
    """(position, op, variant name, variant, dtype, sample index, sample) in a fixed order. The
    position (op_db index, dtype index, variant index, sample index) orders the items; with `after`
    only the items past that position come (the ops before it generate no samples)."""
    for oi, op in enumerate(op_db):
        if oi % shard[1] != shard[0] or (ops_filter and op.name not in ops_filter):
            continue
        if after is not None and oi < after[0]:
            continue
        for di, dtype in enumerate(dtypes):
            try:
                if dtype not in supported_dtypes(op, device):
                    continue
            except Exception:
                continue
            for vi, (vname, fn) in enumerate(variants(op)):
                try:
                    samples = op.sample_inputs(device, dtype, requires_grad=False)
                    for i, s in enumerate(samples):
                        pos = [oi, di, vi, i]
                        if after is None or pos >= after[:4]:
                            yield pos, op, vname, fn, dtype, i, s
                        if not all_samples:
                            break
                except Exception:
                    continue  # the sample generator itself fails on this torch: nothing to test


def op_class(op):
    """"pointwise" or "reduction" where op_db's OpInfo class says the op is one (UnaryUfuncInfo,
    BinaryUfuncInfo; ReductionOpInfo), else None: the ops issue #22 wants lowered to generated code."""
    try:
        from torch.testing._internal.opinfo import core
    except ImportError:  # torch without the opinfo package
        return None
    if isinstance(op, (core.UnaryUfuncInfo, core.BinaryUfuncInfo)):
        return "pointwise"
    return "reduction" if isinstance(op, core.ReductionOpInfo) else None


CONTEXT_LOST = 3  # the worker's exit status after an item that left the CUDA context unusable


def sweep(out, dtypes, all_samples, backends, ops_filter=None, device="cpu", shard=(0, 1), after=None,
          deadline=None):
    """Write the items to `out` (a "start" line before each); past `deadline` (time.time()) write a
    "cut" line naming the next item instead. Returns CONTEXT_LOST where an item left the CUDA context
    unusable (the item is written; the items after it need a new process), else 0."""
    import torch
    torch.set_num_threads(1)
    op_db = load_op_db()
    for pos, op, vname, fn, dtype, i, s in items(op_db, dtypes, all_samples, ops_filter, device, shard, after):
        for bi, backend in enumerate(backends):
            if after is not None and pos + [bi] <= after:
                continue
            key = {"op": op.name, "variant": op.variant_test_name or "", "kind": vname,
                   "dtype": str(dtype).replace("torch.", ""), "sample": i, "backend": backend}
            if op_class(op):
                key["class"] = op_class(op)
            if device != "cpu":
                key["device"] = device
            if deadline is not None and time.time() > deadline:
                out.write(json.dumps({"cut": dict(key, shard=f"{shard[0]}/{shard[1]}") if shard[1] > 1 else key}) + "\n")
                return 0
            out.write(json.dumps({"start": key, "pos": pos + [bi]}) + "\n")
            out.flush()
            item = run_item(op, vname, fn, s, backend, device=device)
            lost = cuda_context_lost() if device == "cuda" else None
            if lost:
                if item["status"] not in ("eager-error", "crashed"):
                    item["status"] = "crashed"
                    item["reason"] = f"the CUDA context was lost after the item: {lost}"
                item["cuda_context_lost"] = True
            item.update(key)
            out.write(json.dumps(item) + "\n")
            out.flush()
            if lost:
                return CONTEXT_LOST
    return 0


def read_results(path):
    """The finished items of a --jsonl file, and the item that was running when it ended (or None)."""
    done, running = [], None
    for rec in _records(path):
        if "start" in rec:
            running = rec["start"]
        elif "status" in rec:
            done.append(rec)
            running = None
    return done, running


def _records(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                yield json.loads(line)


def read_run(path):
    """The "run" line of a --jsonl file (device, torch version) and the item a --max-seconds cut
    stopped before (or None)."""
    run, cut = {}, None
    for rec in _records(path):
        if "run" in rec:
            run = rec["run"]
        elif "cut" in rec:
            cut = rec["cut"]
    return run, cut


def summarize(done):
    """Per backend: counts by status, the capture share of the items eager can run."""
    by_backend = collections.defaultdict(collections.Counter)
    for r in done:
        by_backend[r["backend"]][r["status"]] += 1
    out = {}
    for b, c in by_backend.items():
        runnable = sum(v for k, v in c.items() if k != "eager-error")
        out[b] = {"counts": dict(c), "runnable": runnable,
                  "captured_share": c["captured"] / runnable if runnable else 0.0}
    return out


def report(done, command, run=None, cuts=()):
    """The markdown report of a sweep; `run` and `cuts` as read_run gives them (one cut per shard)."""
    s = summarize(done)
    run = run or {}
    where = run.get("device", "cpu") + (f" ({run['device_name']})" if run.get("device_name") else "")
    torch_version = f", torch {run['torch']}" if run.get("torch") else ""
    lines = [f"# OpInfo sweep on {where}{torch_version}", "", f"Command: `{command}`", ""]
    for cut in cuts:
        shard = f" of shard {cut['shard']}" if cut.get("shard") else ""
        lines += [f"The run{shard} was cut by --max-seconds: items from {_item_name(cut)} on in the sweep's order "
                  "were not run.", ""]
    lost = [r for r in done if r.get("cuda_context_lost")]
    if lost:
        lines += [f"{len(lost)} items left the CUDA context unusable; the sweep went on in a new process after each "
                  "(listed below with the wrong and crashed items).", ""]
    lines += ["| backend | items eager runs | captured | broke | wrong | crashed | share captured |",
             "|---|---|---|---|---|---|---|"]
    for b, v in sorted(s.items()):
        c = v["counts"]
        lines.append(f"| {b} | {v['runnable']} | {c.get('captured', 0)} | {c.get('broke', 0)} | {c.get('wrong', 0)} | "
                     f"{c.get('crashed', 0)} | {100 * v['captured_share']:.1f}% |")
    closer = [r for r in done if r.get("closer_than_eager")]
    if closer:
        lines += ["", f"{len(closer)} {'/'.join(sorted({r['dtype'] for r in closer}))} items differ from eager beyond its tolerance but are no farther from the "
                      f"float64 result than eager ({', '.join(sorted({r['op'] for r in closer}))})."]
    times = sorted(r["seconds"] for r in done if r["status"] == "captured" and "seconds" in r)
    if times:
        lines += ["", f"First compiled call of a captured item (trace + compile + run): median "
                      f"{1000 * times[len(times) // 2]:.1f} ms, 90th percentile {1000 * times[int(len(times) * 0.9)]:.1f} ms."]
    bad = [r for r in done if r["status"] in ("wrong", "crashed") or r.get("cuda_context_lost")]
    if bad:
        lines += ["", "## Wrong or crashed", ""]
        for r in bad:
            lost = ", CUDA context lost" if r.get("cuda_context_lost") else ""
            lines.append(f"- {r['status']}: {_item_name(r)}{lost}: {r.get('reason', '')}")
    per_op = collections.defaultdict(lambda: [set(), set()])
    for r in done:
        if r["backend"] == "inductor" and r["status"] == "captured":
            name = r["op"] + ("." + r["variant"] if r["variant"] else "")
            per_op[name][0].update(r.get("lowered", []))
            per_op[name][1].update(r.get("extern", []))
            if r.get("reference"):  # the whole graph ran on the reference runner: every call in torch
                per_op[name][1].add("(reference runner)")
    if per_op:
        # NB: an entry whose graphs hold no call (torch.conj of a real tensor is the tensor itself)
        # runs nothing in torch: it counts with the lowered ones, and is listed.
        only_lowered = sorted(n for n, (lo, ex) in per_op.items() if not ex)
        no_calls = sorted(n for n, (lo, ex) in per_op.items() if not lo and not ex)
        mixed = sorted(n for n, (lo, ex) in per_op.items() if lo and ex)
        only_extern = sorted(n for n, (lo, ex) in per_op.items() if ex and not lo)
        lines += ["", "## Inductor: lowered to generated code vs extern calls (captured items, per op_db entry)", "",
                  f"- all graph calls lowered ({len(only_lowered)}): {', '.join(only_lowered)}",
                  f"- of these, no call in any graph (the result is an operand itself) ({len(no_calls)}): "
                  + ", ".join(no_calls),
                  f"- some calls lowered, some extern ({len(mixed)}): "
                  + ", ".join(f"{n} [extern: {', '.join(sorted(per_op[n][1]))}]" for n in mixed),
                  f"- extern calls only ({len(only_extern)}): "
                  + ", ".join(f"{n} [{', '.join(sorted(per_op[n][1]))}]" for n in only_extern)]
        classes = {r["op"] + ("." + r["variant"] if r["variant"] else ""): r["class"] for r in done if r.get("class")}
        if classes:
            lines += ["", "### op_db's pointwise ops and reductions (UnaryUfuncInfo, BinaryUfuncInfo, ReductionOpInfo)", "",
                      "| class | entries captured | all calls lowered | some extern | extern only |", "|---|---|---|---|---|"]
            for cls in ("pointwise", "reduction"):
                names = [n for n in per_op if classes.get(n) == cls]
                lines.append(f"| {cls} | {len(names)} | {sum(n in only_lowered for n in names)} | "
                             f"{sum(n in mixed for n in names)} | {sum(n in only_extern for n in names)} |")
            for cls in ("pointwise", "reduction"):
                left = sorted(n for n in per_op if classes.get(n) == cls and n not in only_lowered)
                lines.append(f"- {cls} entries with extern calls ({len(left)}): "
                             + ", ".join(f"{n} [{', '.join(sorted(per_op[n][1]))}]" for n in left))
    reasons = collections.Counter()
    for r in done:
        if r["status"] == "broke":
            reasons[_reason_class(r.get("reason", ""))] += 1
    lines += ["", "## Why items break (all backends)", "", "| count | reason |", "|---|---|"]
    for reason, n in reasons.most_common():
        lines.append(f"| {n} | {reason} |")
    broken_ops = collections.defaultdict(set)
    for r in done:
        if r["status"] == "broke":
            broken_ops[_reason_class(r.get("reason", ""))].add(r["op"] + ("." + r["variant"] if r["variant"] else ""))
    lines += ["", "## Ops with breaking items, by reason", ""]
    for reason, n in reasons.most_common():
        lines.append(f"- {reason}: {', '.join(sorted(broken_ops[reason]))}")
    return "\n".join(lines) + "\n"


def _item_name(r):
    return (f"{r['op']}{'.' + r['variant'] if r['variant'] else ''} {r['kind']} {r['dtype']} "
            f"sample {r['sample']} ({r['backend']})")


def _reason_class(reason):
    """A break reason without the operand-specific tail (for grouping)."""
    import re
    r = re.sub(r"0x[0-9a-f]+", "0x…", reason)
    r = re.sub(r"\[[0-9, ]+\]", "[…]", r)
    return r[:160]


def _run_info(device, command):
    import torch
    info = {"device": device, "torch": torch.__version__, "command": command}
    if device == "cuda":
        info["device_name"] = torch.cuda.get_device_name()
    return info


def supervise(worker_argv, path, spawn=None):
    """Run the sweep in worker processes that append to `path`, a new one after each worker that
    lost its CUDA context (the item is written) or died (its running item is written here as
    crashed); each starts after the last item begun. Returns the exit status."""
    spawn = spawn or (lambda argv: subprocess.call([sys.executable, os.path.abspath(__file__), *argv]))
    after = None
    while True:
        rc = spawn(worker_argv + (["--after", json.dumps(after)] if after else []))
        if rc == 0:
            return 0
        _, running = read_results(path)
        start = [rec for rec in _records(path) if "start" in rec]
        if not start or (after is not None and start[-1]["pos"] <= after):
            print(f"opinfo_sweep: the worker exited with status {rc} before starting an item", file=sys.stderr)
            return rc or 1
        if running is not None:
            item = {"status": "crashed", "reason": f"the sweep process died (exit status {rc}) in this item"}
            item.update(running)
            with open(path, "a") as f:
                f.write(json.dumps(item) + "\n")
        elif rc != CONTEXT_LOST:
            # NB: not fatal: a worker may fail at exit after its context was lost; one that fails again
            # before an item stops the sweep above.
            print(f"opinfo_sweep: the worker exited with status {rc} between items; going on", file=sys.stderr)
        after = start[-1]["pos"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true",
                   help="all samples; float32, float64, bfloat16, int64, bool (cuda: float32, float16, bfloat16)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the samples are made")
    p.add_argument("--jsonl", default=None, help="write the items here (default: a temporary file)")
    p.add_argument("--report", default=None, help="write the markdown report here")
    p.add_argument("--backends", default="eager,inductor")
    p.add_argument("--ops", default=None, help="comma list of op_db names")
    p.add_argument("--dtypes", default=None,
                   help="comma list of dtypes (default: float32; --full: five on cpu, three on cuda)")
    p.add_argument("--max-seconds", type=float, default=None, help="start no item after this many seconds")
    p.add_argument("--shard", default="0/1", help="K/N: only every N-th op_db entry, from the K-th")
    p.add_argument("--merge", default=None, help="comma list of --jsonl files: write their report only")
    p.add_argument("--isolate", action="store_true",
                   help="run the items in worker processes that are replaced where one dies (always with cuda)")
    p.add_argument("--autocast", default=None, metavar="DTYPE",
                   help="run eager and compiled calls under torch.autocast(device, dtype=DTYPE)")
    p.add_argument("--config", action="append", default=[], metavar="KNOB=VALUE",
                   help="set a framefuse.config knob for the sweep, e.g. capture_dynamic_output_shape_ops=True")
    # Internal: a worker process of --isolate (see supervise).
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--after", default=None, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    command = "python " + " ".join(sys.argv)
    if a.merge:
        paths = a.merge.split(",")
        done = [r for path in paths for r in read_results(path)[0]]
        runs = [read_run(path) for path in paths]
        cuts = [c for _, c in runs if c]
        first = runs[0][0].get("command", "?")
        merged = f"{first}` and {len(paths) - 1} more shards, merged by `{command}" if len(paths) > 1 else first
        _write_report(report(done, merged, runs[0][0], cuts), a.report)
        return 0
    import torch

    import framefuse
    for setting in a.config:
        knob, _, value = setting.partition("=")
        try:
            setattr(framefuse.config, knob, ast.literal_eval(value))
        except (ValueError, SyntaxError, AttributeError, TypeError) as e:
            p.error(f"--config {setting}: {e}")
    if a.device == "cuda" and not torch.cuda.is_available():
        built = f"built with CUDA {torch.version.cuda}, no GPU visible" if torch.version.cuda else "built without CUDA"
        p.error(f"--device cuda: CUDA is not available (torch {torch.__version__}, {built})")
    try:
        k, n = (int(x) for x in a.shard.split("/"))
        assert 0 <= k < n
    except (ValueError, AssertionError):
        p.error(f"--shard {a.shard}: expected K/N with 0 <= K < N")
    full_dtypes = ["float32", "float16", "bfloat16"] if a.device == "cuda" else ["float32", "float64", "bfloat16", "int64", "bool"]
    names = a.dtypes.split(",") if a.dtypes else full_dtypes if a.full else ["float32"]
    dtypes = [getattr(torch, n) for n in names]
    global AUTOCAST
    AUTOCAST = getattr(torch, a.autocast) if a.autocast else None
    deadline = a.deadline or (time.time() + a.max_seconds if a.max_seconds is not None else None)
    # NB: a device-side assert poisons the process's CUDA context, so the items run in workers.
    isolate = a.isolate or a.device == "cuda"
    path = a.jsonl or os.path.join(tempfile.gettempdir(), f"opinfo-{os.getpid()}.jsonl")
    sweep_args = (dtypes, a.full, a.backends.split(","), set(a.ops.split(",")) if a.ops else None, a.device, (k, n))
    if a.worker:
        with open(path, "a") as out:
            return sweep(out, *sweep_args, after=json.loads(a.after) if a.after else None, deadline=deadline)
    with open(path, "w") as out:
        out.write(json.dumps({"run": _run_info(a.device, command)}) + "\n")
        if not isolate:
            sweep(out, *sweep_args, deadline=deadline)
    if isolate:
        worker = list(argv if argv is not None else sys.argv[1:])
        worker += ["--worker", "--jsonl", path] + (["--deadline", repr(deadline)] if deadline else [])
        rc = supervise(worker, path)
        if rc:
            return rc
    done, _ = read_results(path)
    run, cut = read_run(path)
    _write_report(report(done, command, run, [cut] if cut else []), a.report)
    return 0


def _write_report(text, path):
    if path:
        with open(path, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
