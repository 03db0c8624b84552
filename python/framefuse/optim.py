"""Fused optimizer steps.

Inside compiled code, `opt.step()` of torch.optim's SGD, Adam and AdamW runs as one compiled update
per parameter group instead of torch's loop of eager kernels per parameter (as torch.compile compiles
the optimizer's step). The step's wrapper (hooks, profiling, grad mode) stays torch's: the frame hook
runs `_fused_step` in place of the class's own `step` function (`_C._set_frame_substitute`), only inside
compiled code. Called outside compiled code, `opt.step()` is torch's.

The update follows torch's single-tensor implementation op for op (the path eager takes for CPU
tensors): each parameter's kernels are fused into one loop that rounds as eager's kernels do; the
step-dependent numbers (bias corrections, learning rate) are computed in Python doubles as torch does
and enter the graph as a float64 tensor, so a learning-rate schedule or the step count never
recompiles. What the update does not cover runs torch's own step, with a `perf_hints` line saying why:
the first step (torch creates the state), a closure, CUDA or other devices, dtypes other than float32
and float64, complex or sparse tensors, the foreach/fused/capturable/differentiable variants, tensor
hyper-parameters, parameters at different step counts, and subclasses.
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
                 decoupled, amsgrad, maximize, lerp):
    # torch.optim.adam._single_tensor_adam's arithmetic, kernel for kernel. scalars (float64):
    # -step_size, sqrt(bias_correction2), 1 - lr * weight_decay.
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
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        if amsgrad:
            max_exp_avg_sqs[i].copy_(torch.maximum(max_exp_avg_sqs[i], exp_avg_sq))
            exp_avg_sq = max_exp_avg_sqs[i]
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        # param.addcdiv_(exp_avg, denom, value=-step_size): eager's CPU kernel computes
        # param + (value * exp_avg) / denom.
        param.add_(neg_step_size * exp_avg / denom)


def _sgd_update(params, grads, momentum_buffers, scalars, weight_decay, momentum, dampening, nesterov, maximize):
    # torch.optim.sgd._single_tensor_sgd's arithmetic. scalars (float64): -lr.
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


def _update(opt, index, fn):
    table = _updates.setdefault(opt, {})
    if index not in table:
        from .compile import compile as compile_fn  # noqa: PLC0415  (framefuse's __init__ imports this module)
        own = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__)
        table[index] = compile_fn(own, dynamic=False)
    return table[index]


def _float(x):
    return type(x) in (float, int) and not isinstance(x, bool)


def _params_with_grads(opt, group, need_state=True):
    """The group's parameters that have a gradient, or a reason they cannot be updated here."""
    params = [p for p in group["params"] if p.grad is not None]
    for p in params:
        g = p.grad
        if p.device.type != "cpu" or g.device != p.device:
            return None, "a parameter is not on the CPU"
        if p.dtype not in (torch.float32, torch.float64) or g.dtype != p.dtype:
            return None, f"a parameter or gradient of dtype {p.dtype} / {g.dtype} (float32 and float64 are fused)"
        if g.layout != torch.strided or p.layout != torch.strided:
            return None, "a sparse gradient or parameter"
        if need_state and (p not in opt.state or not opt.state[p]):
            return None, "the first step (torch creates the optimizer's state)"
    return params, None


def _variant_reason(group):
    for key in ("foreach", "fused", "capturable", "differentiable"):
        if group.get(key):
            return f"{key}=True"
    return None


def _adam_step(opt):
    for group in opt.param_groups:
        reason = _variant_reason(group)
        if reason is None and not all(_float(group[k]) for k in ("lr", "eps", "weight_decay")):
            reason = "a tensor learning rate or hyper-parameter"
        if reason is None and not all(_float(b) for b in group["betas"]):
            reason = "tensor betas"
        if reason is None:
            params, reason = _params_with_grads(opt, group)
        if reason is None:
            amsgrad = group["amsgrad"]
            states = [opt.state[p] for p in params]
            need = ("step", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
            if not all(all(k in s for k in need) for s in states):
                reason = "a parameter whose state lacks " + "/".join(need)
            else:
                steps = [s["step"] for s in states]
                if not all(isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.numel() == 1 for t in steps):
                    reason = "a step count that is not a CPU tensor"
                elif len({t.item() for t in steps}) > 1:
                    reason = "parameters at different step counts"
        if reason is not None:
            return reason
    # Everything checked first: nothing is updated unless every group is.
    for index, group in enumerate(opt.param_groups):
        params, _ = _params_with_grads(opt, group)
        if not params:
            continue
        states = [opt.state[p] for p in params]
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1)
        step = steps[0].item()
        beta1, beta2 = group["betas"]
        lr, weight_decay = group["lr"], group["weight_decay"]
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        # torch 2 takes bias_correction2 ** 0.5, torch 1 math.sqrt (the same for every finite double).
        bias_correction2_sqrt = bias_correction2 ** 0.5
        scalars = torch.tensor([-step_size, bias_correction2_sqrt, 1 - lr * weight_decay], dtype=torch.float64)
        amsgrad = group["amsgrad"]
        _update(opt, index, _adam_update)(
            params, [p.grad for p in params], [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
            [s["max_exp_avg_sq"] for s in states] if amsgrad else [], scalars, beta1, beta2, group["eps"],
            weight_decay, group.get("decoupled_weight_decay", type(opt) is torch.optim.AdamW), amsgrad, group["maximize"], _TORCH_MAJOR >= 2)
    return None


def _sgd_step(opt):
    for group in opt.param_groups:
        reason = _variant_reason(group)
        if reason is None and not all(_float(group[k]) for k in ("lr", "momentum", "dampening", "weight_decay")):
            reason = "a tensor learning rate or hyper-parameter"
        if reason is None:
            params, reason = _params_with_grads(opt, group, need_state=group["momentum"] != 0)
        if reason is None and group["momentum"] != 0:
            if not all(opt.state[p].get("momentum_buffer") is not None for p in params):
                reason = "the first step (torch creates the momentum buffers)"
        if reason is not None:
            return reason
    for index, group in enumerate(opt.param_groups):
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            continue
        momentum = group["momentum"]
        buffers = [opt.state[p]["momentum_buffer"] for p in params] if momentum != 0 else []
        scalars = torch.tensor([-group["lr"]], dtype=torch.float64)
        _update(opt, index, _sgd_update)(params, [p.grad for p in params], buffers, scalars, group["weight_decay"],
                                         momentum, group["dampening"], group["nesterov"], group["maximize"])
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
