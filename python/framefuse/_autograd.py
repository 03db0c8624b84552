"""Compiled graphs that need autograd: AOT autograd's forward and backward (graph/autograd/autograd.h)
under one torch.autograd.Function.

The forward graph returns the user's outputs and then what the backward reads; the Function saves
those (and the inputs the backward reads) and runs the backward graph, compiled on its first call,
from its own backward. Gradients agree with eager's up to rounding, as the compiled forward does.
"""
import torch

from . import _C

__all__ = ["compile_with_autograd"]


def compile_with_autograd(handle, compile_fn, hint):
    """The graph `handle` as forward and backward compiled by `compile_fn` (a graph -> callable), or
    None (after a `hint`) where the split cannot model it exactly."""
    if not _C.config.get("aot_autograd"):
        hint("the graph needs autograd and config aot_autograd is off")
        return None
    try:
        split = handle.autograd_split()
    except _C.UserError as e:
        hint(f"the graph needs autograd and has no compiled backward: {e}")
        return None
    return _CompiledAutograd(split, compile_fn)


class _CompiledAutograd:
    def __init__(self, split, compile_fn):
        self.forward_graph = split["forward"]
        self.backward_graph = split["backward"]
        self._forward = compile_fn(self.forward_graph)
        self._backward = None
        self._compile = compile_fn
        self._outputs = split["outputs"]
        self._diff = [k for k, d in enumerate(split["differentiable"]) if d]
        self._non_diff = [k for k, d in enumerate(split["differentiable"]) if not d]
        self._saved_inputs = split["saved_inputs"]
        self._grad_inputs = split["grad_inputs"]
        self._grad_tangents = split["grad_tangents"]
        # The tangents' shapes (static: the graph was compiled for them), for outputs that get no
        # gradient: the last placeholders of the backward.
        inputs = [n.meta for n in self.backward_graph.nodes() if n.kind == "Placeholder"]
        self._tangent_meta = [(m["sizes"], getattr(torch, m["dtype"]), torch.device(m["device"]))
                              for m in inputs[len(inputs) - len(self._diff):]]
        self._aliases = split["aliases"]  # results that are inputs or views of them, made outside
        self._alias_outputs = split["alias_outputs"]
        self.num_kernels = getattr(self._forward, "num_kernels", 0)

    def backward_fn(self):
        if self._backward is None:
            self._backward = self._compile(self.backward_graph)
        return self._backward

    def __call__(self, *inputs):
        if self._outputs:
            outs = _Function.apply(self, *inputs)
        else:  # every result aliases an input; the forward still runs for what it writes
            with torch.no_grad():
                self._forward(*inputs)
            outs = ()
        if self._aliases is None:
            return outs
        # NB: views of the inputs are made here, under grad mode, so they are views as in eager
        made = iter(self._aliases.run(*inputs))
        rest = iter(outs)
        n = self._outputs + len(self._alias_outputs)
        positions = set(self._alias_outputs)
        return tuple(next(made) if k in positions else next(rest) for k in range(n))


_NOT_SAVED = object()  # marks a saved tensor's slot in ctx.others


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, compiled, *inputs):
        results = compiled._forward(*inputs)
        n = compiled._outputs
        extra = iter(results[n:])
        saved = [inputs[i] if i >= 0 else next(extra) for i in compiled._saved_inputs]
        ctx.save_for_backward(*(s for s in saved if isinstance(s, torch.Tensor)))
        ctx.others = [_NOT_SAVED if isinstance(s, torch.Tensor) else s for s in saved]
        ctx.compiled = compiled
        ctx.num_inputs = len(inputs)
        # NB: an output that took no part in the loss gets None, not zeros: the inputs whose
        # gradients read only such outputs then get None, as in eager (optimizers skip them)
        ctx.set_materialize_grads(False)
        outs = tuple(results[:n])
        if compiled._non_diff:
            ctx.mark_non_differentiable(*(outs[k] for k in compiled._non_diff))
        return outs

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "framefuse: the backward of a compiled graph is not differentiable again (double backward, "
                "create_graph=True). Compute this gradient outside the compiled function (framefuse.disable), "
                "or set framefuse.config.aot_autograd = False to run such graphs on eager ops.")
        compiled = ctx.compiled
        tensors = iter(ctx.saved_tensors)
        saved = [next(tensors) if o is _NOT_SAVED else o for o in ctx.others]
        tangents, given = [], []
        for k, (shape, dtype, device) in zip(compiled._diff, compiled._tangent_meta):
            g = grads[k]
            given.append(g is not None)
            if g is None:
                g = torch.zeros(shape, dtype=dtype, device=device)
            tangents.append(g if g.is_contiguous() else g.contiguous())
        results = compiled.backward_fn()(*saved, *tangents)
        out = [None] * (1 + ctx.num_inputs)
        for i, g, deps in zip(compiled._grad_inputs, results, compiled._grad_tangents):
            if not deps or any(given[t] for t in deps):  # none: a constant (zeros), as eager gives it
                out[1 + i] = g
        return tuple(out)
