"""Fused optimizer steps.

Inside code compiled with backend="inductor", `opt.step()` of torch.optim's SGD, Adam and AdamW runs as
one compiled update per parameter group instead of torch's loop of eager kernels per parameter (as
torch.compile compiles the optimizer's step). The step's wrapper (hooks, profiling, grad mode) stays
torch's: the frame hook runs `_fused_step` in place of the class's own `step` function
(`_C._set_frame_substitute`). Called outside compiled code, `opt.step()` is torch's.

The update follows torch's arithmetic kernel for kernel (on the CPU, its single-tensor loop's, which
its foreach loop shares there; on CUDA, its foreach kernels', torch's default there): each parameter's
kernels are fused into one loop that rounds as eager's kernels do; the step-dependent numbers (bias
corrections, learning rate) are computed in Python doubles as torch does and enter the graph as a
float64 tensor, so a learning-rate schedule or the step count never recompiles.

What the update does not cover runs torch's own step, with a `perf_hints` line saying why: CUDA
parameters unless `framefuse.optim.fuse_cuda` is set (torch's foreach kernels are faster than the
update's per-parameter kernels there today), the first step (torch creates the state), a closure,
parameters on several devices, dtypes other than float32 and float64, complex or sparse tensors, the
fused/capturable/differentiable variants (and foreach=False on CUDA), tensor hyper-parameters,
parameters at different step counts, and subclasses.
"""
import types
import weakref

import torch

from . import _C

_TORCH_MAJOR = int(torch.__version__.split(".")[0])
_noted = set()
fused_steps = 0  # steps the fused update made (tests read it)


def _note(opt, reason):
    key = (type(opt).__name__, reason)
    if key not in _noted:
        _noted.add(key)
        _C.logging.emit("perf_hints", f"{type(opt).__name__}.step() runs torch's own step, not a fused one: {reason}")


def _adam_update(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, scalars, beta1, beta2, eps, weight_decay,
                 decoupled, amsgrad, maximize, lerp, cuda):
    # torch.optim.adam's arithmetic, kernel for kernel: on the CPU its single-tensor loop's (its
    # foreach loop calls the same kernels per tensor there), on CUDA its foreach kernels'. scalars
    # (float64, on the parameters' device): -step_size, sqrt(bias_correction2), 1 - lr * weight_decay.
    neg_step_size, bias_correction2_sqrt, decay = scalars[0], scalars[1], scalars[2]
    for i, param in enumerate(params):
        grad = -grads[i] if maximize else grads[i]
        exp_avg, exp_avg_sq = exp_avgs[i], exp_avg_sqs[i]
        if weight_decay != 0:
            if decoupled:
                param.mul_(decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        if lerp:
            exp_avg.lerp_(grad, 1 - beta1)
        else:
            exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        if cuda:  # _foreach_addcmul_'s CUDA kernel: exp_avg_sq + value * (grad * grad)
            exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
        else:
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        if amsgrad:
            max_exp_avg_sqs[i].copy_(torch.maximum(max_exp_avg_sqs[i], exp_avg_sq))
            exp_avg_sq = max_exp_avg_sqs[i]
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        if cuda:  # _foreach_addcdiv_'s CUDA kernel: param + value * (exp_avg / denom), one rounding
            param.addcmul_(exp_avg / denom, neg_step_size)
        else:  # addcdiv_(exp_avg, denom, value=-step_size)'s CPU kernel: param + (value * exp_avg) / denom
            param.add_(neg_step_size * exp_avg / denom)


def _sgd_update(params, grads, momentum_buffers, scalars, weight_decay, momentum, dampening, nesterov, maximize):
    # torch.optim.sgd's arithmetic (its single-tensor loop's and its foreach kernels' are the same).
    # scalars (float64, on the parameters' device): -lr.
    neg_lr = scalars[0]
    for i, param in enumerate(params):
        grad = -grads[i] if maximize else grads[i]
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        if momentum != 0:
            buf = momentum_buffers[i]
            buf.mul_(momentum).add_(grad, alpha=1 - dampening)
            grad = grad.add(buf, alpha=momentum) if nesterov else buf
        # param.add_(grad, alpha=-lr) with the learning rate a graph input: one rounding, as add's alpha.
        param.addcmul_(grad, neg_lr)


# optimizer -> {group index: compiled update}. Each group's update has a code object of its own, so its
# graphs are cached apart from other groups' and optimizers' (the recompile limit counts per code).
_updates = weakref.WeakKeyDictionary()


# CUDA parameters keep torch's step unless this is set: torch's foreach kernels update every parameter in
# a few launches, and the per-parameter kernels of the update took 1.8-2.4x eager's time for 197
# parameters on an H200 (benchmarks/RESULTS.md, fused-optimizer). The arithmetic is eager's there too
# (tests/python/autograd/test_fused_optimizers.py sets it on a GPU).
fuse_cuda = False


def _update(opt, index, fn):
    table = _updates.setdefault(opt, {})
    if index not in table:
        from .compile import compile as compile_fn  # noqa: PLC0415  (framefuse's __init__ imports this module)
        own = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__)
        table[index] = compile_fn(own, dynamic=False)
    return table[index]


def _float(x):
    return type(x) in (float, int) and not isinstance(x, bool)


_FUSED_DTYPES = (torch.float32, torch.float64)


def _variant_reason(group, names):
    for key in ("fused", "capturable", "differentiable"):
        if group.get(key):
            return f"{key}=True"
    if not all(_float(group[k]) for k in names):
        return "a tensor learning rate or hyper-parameter"
    return None


def _collect(opt, group, keys):
    """One pass over the group's parameters that have a gradient: (params, grads, {state key: tensors}),
    or a reason they cannot be updated here. NB: opt.state is a defaultdict: .get creates nothing."""
    params, grads = [], []
    tensors = {k: [] for k in keys}
    state = opt.state
    device = None
    for p in group["params"]:
        g = p.grad
        if g is None:
            continue
        if device is None:
            device = p.device
            if device.type not in ("cpu", "cuda"):
                return None, f"parameters on {device.type}"
            if device.type == "cuda":
                if not fuse_cuda:
                    return None, ("CUDA parameters (torch's foreach kernels are faster there; "
                                  "framefuse.optim.fuse_cuda = True fuses)")
                # NB: on CUDA the update follows torch's foreach kernels, its default there.
                if group.get("foreach") is False:
                    return None, "foreach=False on CUDA"
        if p.device != device or g.device != device:
            return None, "parameters or gradients on several devices"
        if p.dtype not in _FUSED_DTYPES or g.dtype != p.dtype:
            return None, f"a parameter or gradient of dtype {p.dtype} / {g.dtype} (float32 and float64 are fused)"
        if g.layout != torch.strided or p.layout != torch.strided:
            return None, "a sparse gradient or parameter"
        if keys:
            s = state.get(p)
            if not s:
                return None, "the first step (torch creates the optimizer's state)"
            for k in keys:
                t = s.get(k)
                if t is None:
                    return None, f"a parameter without state {k!r}"
                tensors[k].append(t)
        params.append(p)
        grads.append(g)
    return (params, grads, tensors), None


def _plans(opt, plan_group):
    """Every group's plan, `plan_group(opt, group)` -> (params, grads, state tensors) or a reason: (the plans
    of the groups with gradients as (index, group, params, grads, state), None), or (None, the first
    reason). Everything is checked first: nothing is updated unless every group is."""
    plans = []
    for index, group in enumerate(opt.param_groups):
        plan, reason = plan_group(opt, group)
        if reason is not None:
            return None, reason
        if plan[0]:
            plans.append((index, group, *plan))
    return plans, None


def _adam_plan(opt, group):
    reason = _variant_reason(group, ("lr", "eps", "weight_decay"))
    if reason is None and not all(_float(b) for b in group["betas"]):
        reason = "tensor betas"
    if reason is not None:
        return None, reason
    keys = ("step", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
    plan, reason = _collect(opt, group, keys)
    if reason is None and plan[0]:
        steps = plan[2]["step"]
        if not all(type(t) is torch.Tensor and t.device.type == "cpu" and t.numel() == 1 for t in steps):
            reason = "a step count that is not a CPU tensor"
        elif len(steps) > 1 and not bool((torch.stack(steps) == steps[0]).all()):
            reason = "parameters at different step counts"
    return plan, reason


def _adam_step(opt):
    plans, reason = _plans(opt, _adam_plan)
    if reason is not None:
        return reason
    for index, group, params, grads, state in plans:
        steps = state["step"]
        torch._foreach_add_(steps, 1)
        step = steps[0].item()
        beta1, beta2 = group["betas"]
        lr, weight_decay = group["lr"], group["weight_decay"]
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        # torch 2 takes bias_correction2 ** 0.5, torch 1 math.sqrt (the same for every finite double).
        bias_correction2_sqrt = bias_correction2 ** 0.5
        scalars = torch.tensor([-step_size, bias_correction2_sqrt, 1 - lr * weight_decay], dtype=torch.float64,
                               device=params[0].device)
        amsgrad = group["amsgrad"]
        decoupled = group.get("decoupled_weight_decay", type(opt) is torch.optim.AdamW)
        _update(opt, index, _adam_update)(
            params, grads, state["exp_avg"], state["exp_avg_sq"], state["max_exp_avg_sq"] if amsgrad else [],
            scalars, beta1, beta2, group["eps"], weight_decay, decoupled, amsgrad, group["maximize"],
            _TORCH_MAJOR >= 2, params[0].is_cuda)
    return None


def _sgd_plan(opt, group):
    reason = _variant_reason(group, ("lr", "momentum", "dampening", "weight_decay"))
    if reason is not None:
        return None, reason
    # NB: without momentum SGD keeps no state; with it, torch makes the buffers on the first step.
    return _collect(opt, group, ("momentum_buffer",) if group["momentum"] != 0 else ())


def _sgd_step(opt):
    plans, reason = _plans(opt, _sgd_plan)
    if reason is not None:
        return reason
    for index, group, params, grads, state in plans:
        scalars = torch.tensor([-group["lr"]], dtype=torch.float64, device=params[0].device)
        _update(opt, index, _sgd_update)(params, grads, state.get("momentum_buffer", []), scalars,
                                         group["weight_decay"], group["momentum"], group["dampening"],
                                         group["nesterov"], group["maximize"])
    return None


def _fused_step(opt, closure=None, **options):
    """Runs in place of SGD/Adam/AdamW.step inside compiled code; NotImplemented runs torch's."""
    cls = type(opt)
    if closure is not None:
        reason = "a closure"
    elif any(v is not None for v in options.values()):
        reason = "step() options (" + ", ".join(k for k, v in options.items() if v is not None) + ")"
    elif cls is torch.optim.SGD:
        reason = _sgd_step(opt)
    elif cls is torch.optim.Adam or cls is torch.optim.AdamW:
        reason = _adam_step(opt)
    else:
        reason = f"{cls.__qualname__} is not one of SGD, Adam and AdamW"
    if reason is None:
        global fused_steps
        fused_steps += 1
        return None
    _note(opt, reason)
    return NotImplemented


def _class_step(cls):
    """The function `cls` defines as `step`, under its decorators (functools.wraps'd ones, and torch 1's
    grad-mode wrapper, which keeps it only in its closure); None if `cls` defines none."""
    fn = cls.__dict__.get("step")
    for _ in range(8):
        code = getattr(fn, "__code__", None)
        if code is None or code.co_name == "step":
            return fn if code is not None else None
        inner = getattr(fn, "__wrapped__", None)
        if inner is None:
            cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if c.cell_contents is not None]
            inner = next((c for c in cells if getattr(c, "__name__", "") == "step" and hasattr(c, "__code__")), None)
        fn = inner
    return None


def _install():
    for cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
        fn = _class_step(cls)
        code = getattr(fn, "__code__", None)
        # NB: torch versions whose step is not `step(self, closure=None, *, options=None...)` keep their own.
        if code is not None and code.co_argcount == 2 and not code.co_flags & 0x0C:
            _C._set_frame_substitute(code, _fused_step)


_install()
