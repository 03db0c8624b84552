"""Differential fuzzer of framefuse's code generators against eager PyTorch.

Each case is a random Python function over random inputs (shapes, dtypes from bool to float64,
strides: contiguous, transposed, sliced, expanded, offset), built from the op table in
fuzz_ops.py: pointwise, reduction, view and in-place ops with Python scalars including extremes.
It is run eagerly and through framefuse.compile(fn, backend="inductor"), and the two must agree:

  - results and the inputs afterwards: bit for bit where eager is exact, within a few ulps
    (measured against a float64 run) where it is not (transcendentals, float reductions);
  - which outputs share memory with each other and with the inputs;
  - where eager raises, the compiled function raises the same exception type.

The generator runs each op eagerly as it draws it, so every case is valid by construction and
ops eager rejects appear only as a deliberate last statement.

    python tests/fuzz/codegen_fuzz.py --count 100000            # a local run; prints a summary
    python tests/fuzz/codegen_fuzz.py --case 1234 --show        # one case's source and verdict
    python tests/fuzz/codegen_fuzz.py --count 2000 --device cuda
    python tests/fuzz/codegen_fuzz.py --count 2000 --device cuda-compile   # NVRTC only, no GPU
    python tests/fuzz/codegen_fuzz.py --count 2000 --dynamic    # compile(dynamic=True): symbolic sizes

Failing cases are minimized (statements dropped while the failure stays) and printed; with
--out DIR each is also written there as a runnable script.
"""
import argparse
import collections
import dataclasses
import math
import os
import random
import re
import sys
import time
import traceback
import warnings
from typing import List

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_ops  # noqa: E402

import framefuse  # noqa: E402

LAYOUTS = ("contiguous", "transposed", "sliced", "expanded", "offset")


@dataclasses.dataclass
class InputSpec:
    shape: tuple
    dtype: torch.dtype
    layout: str


@dataclasses.dataclass
class Stmt:
    text: str                   # `vN = expr` or an in-place statement
    op: str
    approx: List[str]           # variables whose values are approximate after this statement
    raises: bool = False        # eager raises here (the last statement)
    signless: List[str] = dataclasses.field(default_factory=list)  # zeros of unspecified sign (fuzz_ops.ZERO_SIGN)
    summed: List[str] = dataclasses.field(default_factory=list)  # downstream of a float sum (fuzz_ops.SUMS)


@dataclasses.dataclass
class Case:
    seed: int
    device: str
    inputs: List[InputSpec]
    stmts: List[Stmt]
    outs: List[str]

    def source(self):
        args = ", ".join(f"x{i}" for i in range(len(self.inputs)))
        body = [f"    {s.text}" for s in self.stmts]
        ret = ", ".join(self.outs)
        return f"def f({args}):\n" + "\n".join(body) + f"\n    return ({ret}{',' if len(self.outs) == 1 else ''})\n"

    def approx_vars(self):
        return {v for s in self.stmts for v in s.approx}

    def signless_vars(self):
        return {v for s in self.stmts for v in s.signless}

    def summed_vars(self):
        return {v for s in self.stmts for v in s.summed}


# ---- inputs ------------------------------------------------------------------------------------

def _values(gen, shape, dtype):
    n = math.prod(shape)
    if dtype == torch.bool:
        return torch.rand(n, generator=gen) < 0.5
    if dtype.is_floating_point:
        v = torch.randn(n, generator=gen, dtype=torch.float64) * torch.tensor([0.5, 1.0, 4.0, 100.0])[torch.randint(0, 4, (1,), generator=gen)]
        specials = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 0.5, -2.5, 1.5, 1e-40, 65504.0, 3e38,
                                 1e-7, 1.0, -1.0, 7.0, 1e5])
        pick = torch.rand(n, generator=gen) < 0.12
        v = torch.where(pick, specials[torch.randint(0, len(specials), (n,), generator=gen)], v)
        if torch.rand(1, generator=gen).item() < 0.5:  # often a finite, tame tensor
            v = torch.nan_to_num(v, 0.5, 2.0, -2.0).clamp(-60, 60)
        return v.to(dtype)
    info = torch.iinfo(dtype)
    v = torch.randint(-20 if info.min < 0 else 0, 21, (n,), generator=gen, dtype=torch.int64)
    specials = torch.tensor([info.min, info.max, 0, 1, -1 if info.min < 0 else 2, info.max // 2 + 1])
    pick = torch.rand(n, generator=gen) < 0.15
    return torch.where(pick, specials[torch.randint(0, len(specials), (n,), generator=gen)], v).to(dtype)


def make_input(spec: InputSpec, seed: int, device: str):
    gen = torch.Generator().manual_seed(seed)
    shape = list(spec.shape)
    nd = len(shape)
    if spec.layout == "transposed" and nd >= 2:
        perm = list(range(nd))[::-1]
        base = _values(gen, [shape[p] for p in perm], spec.dtype).reshape([shape[p] for p in perm])
        t = base.permute(*[perm.index(d) for d in range(nd)])
    elif spec.layout == "sliced" and nd >= 1:
        big = shape[:-1] + [shape[-1] * 2 + 1]
        t = _values(gen, big, spec.dtype).reshape(big)[..., 1::2]
    elif spec.layout == "expanded" and nd >= 1:
        small = [1 if s > 1 and i % 2 == 0 else s for i, s in enumerate(shape)]
        t = _values(gen, small, spec.dtype).reshape(small).expand(*shape)
    elif spec.layout == "offset":
        n = math.prod(shape)
        t = _values(gen, [n + 3], spec.dtype)[3:].reshape(shape)
    else:
        t = _values(gen, shape, spec.dtype).reshape(shape) if shape else _values(gen, [1], spec.dtype).reshape(())
    return t.to(device)


def _shape(rng):
    nd = rng.choices([0, 1, 2, 3, 4], [1, 3, 4, 3, 1])[0]
    shape = [rng.choice([1, 2, 3, 4, 5, 7, 8, 16, 33]) for _ in range(nd)]
    if nd and rng.random() < 0.03:
        shape[rng.randrange(nd)] = 0
    return tuple(shape)


# ---- generation -----------------------------------------------------------------------------

_INT_DIVISION = {"floordiv", "mod", "fmod", "div_trunc", "div_floor", "remainder", "floor_divide"}


def _storage(t):
    try:
        return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()
    except Exception:  # noqa: BLE001
        return None


def _small(t, bound=4.0):
    return t.numel() == 0 or bool((t.to(torch.float64).abs() <= bound).all())


def _may_overflow(op_name, t):
    """Whether some order of the reduction's partial results overflows t's dtype (see
    fuzz_ops.ORDER_OVERFLOW): a sum whose terms' magnitudes add past the largest finite value, a
    product whose factors above 1 multiply past it."""
    if not t.dtype.is_floating_point or t.numel() == 0:
        return False
    a = t.detach().abs().to(torch.float64).nan_to_num(0.0, posinf=0.0)
    big = torch.finfo(t.dtype).max
    if op_name == "prod":
        return float(torch.log2(a.clamp(min=1.0)).sum()) >= math.log2(big)
    return float(a.sum()) >= big


def _far_from_zero(t):
    if not t.dtype.is_floating_point or t.numel() == 0:
        return False
    a = t.abs().to(torch.float64)
    return bool(torch.isfinite(a).all()) and float(a.min()) > max(1e-6 * float(a.max()), 1e-30)


def _cancellation(op, operands, before, value, approx, limit=4.0):
    """An add of an approximate operand whose result is smaller than the operand by more than
    `limit` somewhere, or a var / std of one whose spread is (fuzz_ops.CANCELS and SPREADS say why
    they are not drawn)."""
    if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point:
        return False
    if op.name in fuzz_ops.SPREADS:
        spread = value.detach().abs().to(torch.float64)
        spread = spread.sqrt() if op.name == "var" else spread
        for n, t in zip(operands, before):
            if n in approx and isinstance(t, torch.Tensor) and t.dtype.is_floating_point and t.numel():
                a = t.detach().abs().to(torch.float64)
                a = a[torch.isfinite(a)]
                if a.numel() and bool((float(a.max()) > limit * spread).any()):
                    return True
        return False
    if op.name not in fuzz_ops.CANCELS:
        return False
    r = value.detach().abs().to(torch.float64)
    for n, t in zip(operands, before):
        if n not in approx or not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point:
            continue
        try:
            a = torch.broadcast_to(t.abs().to(torch.float64), r.shape)
        except RuntimeError:
            continue
        if bool(((a > limit * r) & torch.isfinite(a)).any()):
            return True
    return False


def _division_hazard(op, text, values, device="cpu"):
    # NB: INT_MIN // -1 traps (SIGFPE) in eager's integer division: never drawn.
    if op.name not in _INT_DIVISION:
        return False
    if any(m in text for m in ("-2147483648", "-9223372036854775808", "-32768", "-128")):
        return True
    for t in values:
        if not t.dtype.is_floating_point and t.dtype != torch.bool and t.numel():
            if (t == torch.iinfo(t.dtype).min).any():
                return True
    # NB: an integer division by zero raises in eager CPU (a case of its own: "raised like eager")
    # and gives whatever the GPU's division gives in eager CUDA: not drawn there.
    if device.startswith("cuda") and not any(t.dtype.is_floating_point for t in values):
        if any(t.numel() and bool((t == 0).any()) for t in values[1:]) or re.search(r"(,|%|//)\s*0\b(?!\.)", text):
            return True
    return False


# NB: torch 1.13's vector loop of floor division takes fmod from SLEEF too (1 // 1e-40 is NaN there, inf
# in its scalar tail); torch 2's is not NaN there, so the check below never fires on it.
_FMOD = {"fmod", "mod", "remainder", "floordiv", "div_floor", "floor_divide"}


def _sleef_fmod_hazard(op, line, local, target, value):
    """Eager CPU's vector loop computes fmod (and remainder, and on torch 1.13 floor division) with SLEEF, which gives NaN where x / y
    overflows the dtype (fmod(1.0, 1e-40), fmod(3e38, 1e-3)); its scalar tail and eager CUDA give
    C's fmod. Where they disagree eager has no one answer: such ops are not drawn. The C result is
    the op run again on float64 copies of the operands (exact: fmod needs no rounding)."""
    if op.name not in _FMOD or not value.dtype.is_floating_point or value.dtype == torch.float64:
        return False
    if not bool(value.isnan().any()):
        return False
    wide = {k: (v.double() if isinstance(v, torch.Tensor) and v.dtype.is_floating_point else v) for k, v in local.items()}
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # torch.tensor(1e-40) in the line, ints promoted by numbers
    try:
        exec(line, wide)  # noqa: S102 - our own program
    except Exception:  # noqa: BLE001
        return True
    finally:
        torch.set_default_dtype(default)
    return bool((value.isnan() & ~wide[target].isnan()).any())


def generate(seed: int, device: str = "cpu", max_ops: int = 10) -> Case:
    rng = random.Random(seed)
    base_dtype = rng.choice(fuzz_ops.DTYPES)
    inputs = []
    for i in range(rng.choice([1, 1, 2, 2, 3])):
        shape = _shape(rng) if i == 0 or rng.random() < 0.4 else inputs[0].shape
        if i and rng.random() < 0.3 and shape:  # broadcast partner
            shape = shape[rng.randrange(len(shape)):]
        dtype = base_dtype if rng.random() < 0.6 else rng.choice(fuzz_ops.DTYPES)
        layout = rng.choice(LAYOUTS) if rng.random() < 0.5 else "contiguous"
        inputs.append(InputSpec(tuple(shape), dtype, layout))
    env = {f"x{i}": make_input(s, seed * 31 + i, "cpu" if device == "cuda-compile" else device) for i, s in enumerate(inputs)}
    approx, signless, summed = set(), set(), set()
    names = list(env)
    stmts = []
    ns = {"torch": torch, "framefuse": framefuse}
    n_ops = rng.randint(1, max_ops)
    tries = 0
    while len(stmts) < n_ops and tries < n_ops * 8:
        tries += 1
        if stmts and rng.random() < 0.04:
            # A graph break: what is live crosses it as outputs of one graph and inputs of the next.
            stmts.append(Stmt("framefuse.graph_break()", "graph_break", []))
            continue
        op = fuzz_ops.choose(rng)
        recent = names[-4:] if rng.random() < 0.7 else names
        pool = [n for n in recent if (op.smooth or n not in approx) and
                (op.name not in fuzz_ops.POLES or (n not in signless and n not in approx) or _far_from_zero(env[n])) and
                (op.name not in fuzz_ops.AMPLIFIERS or (n not in summed and n not in approx) or _small(env[n])) and
                (op.name not in fuzz_ops.ORDER_OVERFLOW or not _may_overflow(op.name, env[n])) and
                (op.name not in fuzz_ops.PERIODIC or n not in approx or _small(env[n], 100.0)) and
                (op.name not in fuzz_ops.UNIT_POLES or n not in approx or _small(env[n], 0.5))]
        if not pool:
            continue
        operands = [rng.choice(pool) for _ in range(op.arity)]
        vals = [env[n] for n in operands]
        try:
            text = op.render(rng, operands, vals)
        except (ValueError, IndexError):
            text = None
        if text is None or _division_hazard(op, text, vals, device):
            continue
        target = f"v{len(stmts)}"
        line = text if op.inplace else f"{target} = {text}"
        local = dict(ns, **env)
        # operands as they were (an in-place op overwrites its first)
        before = [v.clone() if isinstance(v, torch.Tensor) else v for v in vals] if op.name in fuzz_ops.CANCELS else vals
        try:
            exec(line, local)  # noqa: S102 - our own program
        except Exception:  # noqa: BLE001  eager rejects it: kept now and then, as the last statement
            if rng.random() < 0.12:
                stmts.append(Stmt(line, op.name, [], raises=True))
                break
            continue
        if op.inplace:
            mutated = env[operands[0]]
            # `a += b` rebinds a; the object is the same (or eager raised).
            new = local[operands[0]]
            if new is not mutated:
                continue
            if _cancellation(op, operands, before, mutated, approx):
                env[operands[0]].copy_(before[0])   # undone: the op is not drawn
                continue
            touched = [n for n, t in env.items() if isinstance(t, torch.Tensor) and _storage(t) == _storage(mutated)]
            is_approx = not op.exact or any(o in approx for o in operands)
            no_sign = op.name in fuzz_ops.ZERO_SIGN or any(o in signless for o in operands)
            is_summed = any(o in summed for o in operands)
            stmts.append(Stmt(line, op.name, touched if is_approx else [], signless=touched if no_sign else [],
                              summed=touched if is_summed else []))
            approx.update(touched if is_approx else [])
            signless.update(touched if no_sign else [])
            summed.update(touched if is_summed else [])
            continue
        value = local[target]
        if not isinstance(value, torch.Tensor) or _cancellation(op, operands, before, value, approx):
            continue
        if _sleef_fmod_hazard(op, line, local, target, value):
            continue
        is_approx = value.dtype.is_floating_point and (not op.exact or any(o in approx for o in operands))
        # a view of an approximate value is approximate, and so is anything sharing its memory
        no_sign = value.dtype.is_floating_point and (op.name in fuzz_ops.ZERO_SIGN or any(o in signless for o in operands))
        is_summed = is_approx and (op.name in fuzz_ops.SUMS or op.name in fuzz_ops.TAIL_CANCELS or any(o in summed for o in operands))
        stmts.append(Stmt(line, op.name, [target] if is_approx else [], signless=[target] if no_sign else [],
                          summed=[target] if is_summed else []))
        if is_summed:
            summed.add(target)
        if is_approx:
            approx.add(target)
        if no_sign:
            signless.add(target)
        env[target] = value
        names.append(target)
    if stmts and stmts[-1].raises:
        outs = [names[-1]]
    else:
        made = [n for n in names if n.startswith("v")] or names
        outs = rng.sample(made, min(len(made), rng.choice([1, 1, 2, 3])))
        if rng.random() < 0.1:
            outs.append(rng.choice(names))
    return Case(seed, device, inputs, stmts, outs)


# ---- comparison ------------------------------------------------------------------------------

class Mismatch(Exception):
    def __init__(self, kind, detail):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def _eps(dtype):
    return {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float32: 2.0**-23, torch.float64: 2.0**-52}[dtype]


def _computed_eps(want):
    """The epsilon of the precision want's values were rounded in: a float64 result of float32
    math cast up (`cos(x).to(torch.float64)`) holds float32 values, rounded as float32 rounds."""
    eps = _eps(want.dtype)
    w = want.detach().cpu()
    w = w[torch.isfinite(w)]
    for narrow in (torch.bfloat16, torch.float16, torch.float32):
        if _eps(narrow) > eps and w.numel() and bool((w.to(narrow).to(w.dtype) == w).all()):
            return _eps(narrow)
    return eps


def _check_exact(name, got, want, signed_zeros=True):
    if got.dtype != want.dtype or got.shape != want.shape:
        raise Mismatch("meta", f"{name}: {got.dtype}{tuple(got.shape)} vs eager {want.dtype}{tuple(want.shape)}")
    g, w = got.cpu(), want.cpu()
    if g.dtype.is_floating_point:
        same = (g == w) | (torch.isnan(g) & torch.isnan(w))
        if signed_zeros:
            same &= (torch.signbit(g) == torch.signbit(w)) | torch.isnan(w)
    else:
        same = g == w
    if not bool(same.all()):
        i = int((~same).reshape(-1).nonzero()[0])
        raise Mismatch("value", f"{name}: element {i}: {g.reshape(-1)[i].item()!r} vs eager {w.reshape(-1)[i].item()!r} "
                                f"({int((~same).sum())} of {same.numel()} differ)")


def _check_close(name, got, want, err_eager, k=16.0, summed=False):
    """got within k times eager's own error (err_eager, estimated) or k ulps of eager's result.
    summed: downstream of a float sum, whose error depends on the order of the terms; eager's own
    error is one draw of it (lucky where all inputs are ints and nothing varies), so an ulp of the
    tensor's largest value per term of a short sum is allowed."""
    if got.dtype != want.dtype or got.shape != want.shape:
        raise Mismatch("meta", f"{name}: {got.dtype}{tuple(got.shape)} vs eager {want.dtype}{tuple(want.shape)}")
    if not got.dtype.is_floating_point:
        return _check_exact(name, got, want)
    g, w = got.cpu().to(torch.float64), want.cpu().to(torch.float64)
    if err_eager is None:
        err_eager = torch.zeros_like(w)
    eps = _computed_eps(want)
    scale = max(float(w[torch.isfinite(w)].abs().max()) if torch.isfinite(w).any() else 0.0, 1e-30)
    tol = k * torch.maximum(err_eager.nan_to_num(float("inf"), float("inf"), float("inf")), w.abs() * eps) + k * eps * eps * scale + 1e-300
    if summed:
        tol = tol + k * 64 * eps * scale
    if want.dtype == torch.float64:
        # NB: no wider run estimates float64's error, and a float32 run hides cancellation where it
        # saturates (1 + erf(-4.2) is 0.0 in float32): an ulp of an intermediate at the tensor's
        # scale, amplified a thousandfold, is allowed.
        tol = tol + k * 2.0**-42 * scale
    nonfinite = ~torch.isfinite(w) | ~torch.isfinite(g)
    close = (g - w).abs() <= tol
    # NB: where eager overflows or makes NaN near a threshold (exp at 88.7), one ulp decides.
    huge = ~torch.isfinite(err_eager) | (w.abs() > torch.finfo(want.dtype).max / 4) | (g.abs() > torch.finfo(want.dtype).max / 4)
    same_nonfinite = (g == w) | (torch.isnan(g) & torch.isnan(w)) | huge
    ok = torch.where(nonfinite, same_nonfinite, close)
    if not bool(ok.all()):
        i = int((~ok).reshape(-1).nonzero()[0])
        raise Mismatch("value", f"{name}: element {i}: {g.reshape(-1)[i].item()!r} vs eager {w.reshape(-1)[i].item()!r} "
                                f"(eager's error about {err_eager.reshape(-1)[i].item():.3g}; {int((~ok).sum())} of {ok.numel()} differ)")


def _alias_pattern(tensors):
    ptrs = [_storage(t) if isinstance(t, torch.Tensor) and t.numel() else None for t in tensors]
    return {(i, j) for i in range(len(ptrs)) for j in range(i + 1, len(ptrs)) if ptrs[i] is not None and ptrs[i] == ptrs[j]}


# ---- running -----------------------------------------------------------------------------------

Outcome = collections.namedtuple("Outcome", "status kind detail compiled")  # status: ok | fail | skip


def _function(case):
    ns = {"torch": torch, "framefuse": framefuse}
    exec(compile(case.source(), f"<fuzz case {case.seed}>", "exec"), ns)  # noqa: S102 - our own program
    return ns["f"]


_COMPILED = []
# compile(dynamic=...) of every case: True traces the inputs' sizes as symbols (each case is then
# typed by the symbolic meta rules and compiled specialised to its sizes).
DYNAMIC = None
# How a case is compiled: "framefuse" (framefuse.compile) or "torch.compile" (torch.compile with
# framefuse as its backend: Dynamo captures, framefuse.fx converts and compiles).
VIA = "framefuse"


def _torch_compile(fn):
    import torch._dynamo  # noqa: PLC0415
    from framefuse import fx  # noqa: PLC0415

    def backend(gm, example_inputs):
        compiled = fx.backend(gm, example_inputs)
        _COMPILED.append("fallback" if compiled.fallback_reason else "FxCompiled")
        return compiled

    torch._dynamo.reset()
    return torch.compile(fn, backend=backend)


@framefuse.backends.native_graph
def _backend(graph, example_inputs):
    # NB: backend="inductor" itself, recording whether the code generator took the graph.
    from framefuse import backends  # noqa: PLC0415
    fn = backends._inductor(graph, example_inputs)
    _COMPILED.append(type(fn).__name__)
    return fn


def _call(fn, inputs):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*inputs), None
    except Exception as e:  # noqa: BLE001
        return None, e


def run_compile_only(case: Case) -> Outcome:
    """--device cuda-compile: every graph of the case rendered as CUDA C++ and compiled by NVRTC
    for sm_90 (no GPU needed); the graphs themselves run eagerly."""
    from framefuse import cuda  # noqa: PLC0415
    errors = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        try:
            cuda.compile_graph(graph, arch="sm_90")
        except Exception as e:  # noqa: BLE001
            if not isinstance(e, framefuse.Unsupported):
                errors.append(f"{type(e).__name__}: {e}")
        return graph.run

    framefuse.reset()
    inputs = [make_input(s, case.seed * 31 + i, "cpu") for i, s in enumerate(case.inputs)]
    _call(framefuse.compile(_function(case), backend=backend), inputs)
    if errors:
        return Outcome("fail", "nvrtc", errors[0][:2000], True)
    return Outcome("ok", "", "", True)


def run_case(case: Case) -> Outcome:
    if case.device == "cuda-compile":
        return run_compile_only(case)
    originals = [make_input(s, case.seed * 31 + i, case.device) for i, s in enumerate(case.inputs)]
    eager_in = [_restride(t) for t in originals]
    want, werr = _call(_function(case), eager_in)
    framefuse.reset()
    _COMPILED.clear()
    comp_in = [_restride(t) for t in originals]
    if DYNAMIC:
        # NB: backend="inductor" itself, so that graphs with symbolic sizes reach the code generator
        # whole (kernels that take sizes as arguments). A first call at other sizes (every size
        # >= 2 grown by one: equal sizes stay equal, broadcast ones stay 1) compiles the program;
        # the checked call then runs it at the case's sizes.
        from framefuse import backends  # noqa: PLC0415
        before = backends.symbolic_compiles() + backends.per_sizes_compiles()
        fn = framefuse.compile(_function(case), backend="inductor", dynamic=True)
        grown = [dataclasses.replace(s, shape=tuple(d + 1 if d >= 2 else d for d in s.shape)) for s in case.inputs]
        _call(fn, [make_input(s, case.seed * 37 + i, case.device) for i, s in enumerate(grown)])
        got, gerr = _call(fn, comp_in)
        compiled = backends.symbolic_compiles() + backends.per_sizes_compiles() > before
    elif VIA == "torch.compile":
        got, gerr = _call(_torch_compile(_function(case)), comp_in)
        compiled = "FxCompiled" in _COMPILED
    else:
        got, gerr = _call(framefuse.compile(_function(case), backend=_backend, dynamic=DYNAMIC), comp_in)
        # NB: graph.run (a bound method) where the code generator did not take the graph
        compiled = any(name not in ("method", "function") for name in _COMPILED)
    if isinstance(gerr, (framefuse.InternalError,)) or (gerr is not None and "framefuse" in type(gerr).__module__):
        return Outcome("fail", "internal", f"{type(gerr).__name__}: {gerr}", compiled)
    if werr is not None or gerr is not None:
        if werr is None:
            return Outcome("fail", "raise", f"compiled raised {type(gerr).__name__}: {str(gerr)[:300]}", compiled)
        if gerr is None:
            return Outcome("fail", "raise", f"eager raised {type(werr).__name__}: {str(werr)[:200]}; compiled returned", compiled)
        if type(werr) is not type(gerr) and VIA != "torch.compile":  # NB: Dynamo wraps what a graph raised
            return Outcome("fail", "raise", f"eager raised {type(werr).__name__}, compiled {type(gerr).__name__}: {gerr}", compiled)
        return Outcome("ok", "raise", "", compiled)
    oracles = Oracles(case, originals)
    approx, signless, summed = case.approx_vars(), case.signless_vars(), case.summed_vars()
    try:
        for i, (name, g, w) in enumerate(zip(case.outs, got, want)):
            if name in approx:
                _check_close(name, g, w, oracles.error(w, 0, i), summed=name in summed)
            else:
                _check_exact(name, g, w, name not in signless)
        for i, (g, w) in enumerate(zip(comp_in, eager_in)):
            name = f"x{i}"
            if name in approx:
                _check_close(name + " (after the call)", g, w, oracles.error(w, 1, i), summed=name in summed)
            else:
                _check_exact(name + " (after the call)", g, w, name not in signless)
        if _alias_pattern(list(got) + comp_in) != _alias_pattern(list(want) + eager_in):
            raise Mismatch("aliasing", f"shared memory among (outputs, inputs): {sorted(_alias_pattern(list(got) + comp_in))} "
                                       f"vs eager {sorted(_alias_pattern(list(want) + eager_in))}")
    except Mismatch as m:
        return Outcome("fail", m.kind, str(m), compiled)
    return Outcome("ok", "", "", compiled)


def _restride(t):
    """A copy of t with t's strides and storage offset (expanded dims stay expanded)."""
    if t.numel() == 0:
        return t.clone()
    span = 1 + t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    base = torch.empty(span, dtype=t.dtype, device=t.device)
    out = base.as_strided(t.shape, t.stride(), t.storage_offset())
    if all(st != 0 for s, st in zip(t.shape, t.stride()) if s > 1):
        out.copy_(t)
    else:  # expanded: write the distinct elements once
        idx = [slice(None) if st != 0 else slice(0, 1) for st in t.stride()]
        out.as_strided(t[tuple(idx)].shape, t.stride(), t.storage_offset()).copy_(t[tuple(idx)])
    return out


def _oracle(case, originals, dtype=torch.float64, nudge=0.0):
    """The case run eagerly with float inputs in `dtype` (times 1 + nudge): (outputs, inputs
    afterwards), or None."""
    ins = [t.to(dtype) * (1 + nudge) if t.dtype.is_floating_point else t.clone() for t in originals]
    # NB: integer math promotes to the default dtype: in a float64 run it must be float64 too.
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        out, err = _call(_function(case), ins)
    finally:
        torch.set_default_dtype(old)
    if err is not None:
        return None
    return [o.to(torch.float64) if isinstance(o, torch.Tensor) and o.dtype.is_floating_point else o for o in out], ins


class Oracles:
    """Eager's error, estimated: against a float64 run for narrower results; for float64 results,
    the distance of two float32 runs (one with inputs nudged by a few ulps, so that one lucky run
    does not hide the condition of the computation) scaled down by the ratio of the epsilons."""

    def __init__(self, case, originals):
        self.case, self.originals, self.runs = case, originals, {}

    def _run(self, dtype, nudge=0.0):
        if (dtype, nudge) not in self.runs:
            self.runs[dtype, nudge] = _oracle(self.case, self.originals, dtype, nudge)
        return self.runs[dtype, nudge]

    def _distance(self, run, want, which, i):
        if run is None or i >= len(run[which]) or not isinstance(run[which][i], torch.Tensor) or run[which][i].shape != want.shape:
            return None
        return (want.cpu().to(torch.float64) - run[which][i].cpu().to(torch.float64)).abs()

    def error(self, want, which, i):
        """|eager - exact| estimated for output (which=0) or input (which=1) i."""
        wide = self._distance(self._run(torch.float64), want, which, i)
        if want.dtype != torch.float64 or wide is None:
            return wide
        # a float64 result computed in float64 all along: the float64 run is eager itself
        d = [self._distance(self._run(torch.float32, nudge), want, which, i) for nudge in (0.0, 2.0**-21)]
        if d[0] is None or d[1] is None:
            return wide
        return torch.maximum(wide, torch.maximum(d[0], d[1]) * (2.0**-52 / 2.0**-23))


# ---- minimizing ------------------------------------------------------------------------------

_VAR = re.compile(r"\b([vx]\d+)\b")


def _drop(case, k):
    """case without statement k and every statement reading what k defined."""
    dead = set()
    stmts = []
    for i, s in enumerate(case.stmts):
        m = re.match(r"^(v\d+) = (.*)$", s.text)
        reads = set(_VAR.findall(m.group(2) if m else s.text))
        if i == k or reads & dead:
            if m:
                dead.add(m.group(1))
            continue
        stmts.append(s)
    outs = [o for o in case.outs if o not in dead]
    if not outs:
        return None
    return dataclasses.replace(case, stmts=stmts, outs=outs)


def minimize(case, outcome, budget=200):
    """Drops statements and outputs while the case still fails the same way."""
    def same(c):
        r = run_case(c)
        return r.status == "fail" and r.kind == outcome.kind
    changed = True
    while changed and budget > 0:
        changed = False
        for k in range(len(case.stmts) - 1, -1, -1):
            smaller = _drop(case, k)
            budget -= 1
            if smaller is not None and same(smaller):
                case, changed = smaller, True
                break
        if not changed and len(case.outs) > 1:
            for o in list(case.outs):
                smaller = dataclasses.replace(case, outs=[x for x in case.outs if x != o])
                budget -= 1
                if same(smaller):
                    case, changed = smaller, True
                    break
    return case


def describe(case):
    ins = "\n".join(f"    # x{i}: {tuple(s.shape)} {str(s.dtype)[6:]} {s.layout}" for i, s in enumerate(case.inputs))
    return f"# case {case.seed} ({case.device})\n{ins}\n{case.source()}"


# ---- driver ----------------------------------------------------------------------------------

def run(count, seed=0, device="cpu", out_dir=None, stop_after=None, verbose=False, report=print, start=0, trace=False,
        dynamic=None, via="framefuse"):
    """Runs `count` cases; returns (summary Counter, list of (minimized case, outcome)). `via`:
    "framefuse" (framefuse.compile) or "torch.compile" (framefuse as torch.compile's backend)."""
    global DYNAMIC, VIA
    DYNAMIC, VIA = dynamic, via
    framefuse.config.raise_on_internal_error = True
    framefuse.config.disk_cache = False
    stats = collections.Counter()
    ops = collections.Counter()
    failures = []
    t0 = time.time()
    for i in range(start, start + count):
        case_seed = seed * 1_000_003 + i
        if trace:  # the case a crash (a signal, an abort in LLVM) happened in
            print(f"case {case_seed}", file=sys.stderr, flush=True)
        case = generate(case_seed, device)
        try:
            outcome = run_case(case)
        except Exception as e:  # noqa: BLE001  the harness itself
            outcome = Outcome("fail", "harness", "".join(traceback.format_exception_only(type(e), e)).strip(), False)
        stats["cases"] += 1
        stats["compiled" if outcome.compiled else "not compiled"] += 1
        if outcome.kind == "raise" and outcome.status == "ok":
            stats["raised like eager"] += 1
        for s in case.stmts:
            ops[s.op] += 1
        if outcome.status == "fail":
            stats["fail: " + outcome.kind] += 1
            small = minimize(case, outcome) if outcome.kind != "harness" else case
            final = run_case(small) if small is not case else outcome
            failures.append((small, final if final.status == "fail" else outcome))
            report(f"FAIL [{outcome.kind}] {outcome.detail}\n{describe(small)}")
            if out_dir:
                os.makedirs(out_dir, exist_ok=True)
                with open(os.path.join(out_dir, f"case_{case_seed}.py"), "w") as fh:
                    fh.write(f"# {outcome.kind}: {outcome.detail}\n" + describe(small))
            if stop_after and len(failures) >= stop_after:
                break
        if verbose and (i + 1) % 500 == 0:
            report(f"{i + 1} cases, {len(failures)} failing, {time.time() - t0:.0f}s")
    stats["seconds"] = int(time.time() - t0)
    return stats, failures, ops


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--case", type=int, help="run one case by its seed (seed * 1000003 + index)")
    p.add_argument("--show", action="store_true", help="print the case's source")
    p.add_argument("--out", help="write failing cases into this folder")
    p.add_argument("--stop-after", type=int, help="stop after this many failures")
    p.add_argument("--start", type=int, default=0, help="index of the first case")
    p.add_argument("--trace", action="store_true", help="print each case's seed to stderr before running it")
    p.add_argument("--dynamic", action="store_true", help="compile with dynamic=True (symbolic sizes)")
    p.add_argument("--via", choices=("framefuse", "torch.compile"), default="framefuse",
                   help="torch.compile: compile through torch.compile(backend=framefuse's fx backend)")
    args = p.parse_args(argv)
    global DYNAMIC, VIA
    DYNAMIC = True if args.dynamic else None
    VIA = args.via
    warnings.simplefilter("ignore")
    if args.case is not None:
        framefuse.config.raise_on_internal_error = True
        framefuse.config.disk_cache = False
        case = generate(args.case, args.device)
        if args.show:
            print(describe(case))
        print(run_case(case))
        return 0
    stats, failures, ops = run(args.count, args.seed, args.device, args.out, args.stop_after, verbose=True,
                               start=args.start, trace=args.trace, dynamic=DYNAMIC, via=VIA)
    print("\nsummary:", ", ".join(f"{k}: {v}" for k, v in sorted(stats.items())))
    print("ops drawn:", ", ".join(f"{k} {v}" for k, v in ops.most_common()))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
