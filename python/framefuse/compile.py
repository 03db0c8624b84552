"""framefuse.compile, framefuse.disable, framefuse.reset, framefuse.graph_break."""
import copy
import functools

import torch

from . import _C
from .backends import lookup_backend

__all__ = ["compile", "disable", "reset", "graph_break"]

_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

graph_break = _C.graph_break


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,  # noqa: A001
            disable=False):
    """Compile a function, method or nn.Module, as torch.compile does.

    Usable as `framefuse.compile(fn)`, `@framefuse.compile` and `@framefuse.compile(backend="eager")`.
    A compiled nn.Module behaves like the original (attributes, parameters(), state_dict() keys,
    train()/eval(), repr) and shares its parameters.
    """
    backend = lookup_backend(backend)
    check_mode_and_options(mode, options, builtin=isinstance(backend, str))
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError("framefuse.compile: dynamic must be None, True or False")
    if not isinstance(fullgraph, bool):
        raise TypeError("framefuse.compile: fullgraph must be a bool")

    def apply(m):
        if disable:
            return m
        if isinstance(m, torch.nn.Module):
            return _compile_module(m, backend, fullgraph, mode, options, dynamic)
        if not callable(m):
            raise TypeError(f"framefuse.compile expects a function, a method or an nn.Module, not {type(m).__name__}")
        wrapper = _C._compile_callable(m, backend, fullgraph, mode, options, _root_code(m), dynamic)
        return _wraps(wrapper, m)

    return apply if model is None else apply(model)


def check_mode_and_options(mode, options, builtin=True):
    """Validate framefuse.compile's `mode` and `options` (raises naming the valid ones). A built-in
    backend's options are framefuse.config knobs, set while the function's graphs are compiled
    (`options={"fuse_attention": False}`); a custom backend receives its options as they are."""
    if mode is not None and options is not None:
        raise RuntimeError("framefuse.compile: give either mode or options, not both")
    if mode is not None and mode not in _MODES:
        raise ValueError(f"framefuse.compile: unknown mode {mode!r}. Valid modes: {', '.join(_MODES)}.")
    if options is None:
        return
    if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
        raise TypeError("framefuse.compile: options must be a dict with str keys")
    if builtin:
        from . import config  # noqa: PLC0415
        valid = config.knobs()
        for name, value in options.items():
            if name not in valid:
                raise ValueError(f"framefuse.compile: unknown option {name!r}. Options are framefuse.config knobs: "
                                 f"{', '.join(sorted(valid))}.")
            config._check(name, value)


def disable(fn=None, recursive=True):
    """Run `fn`, and everything it calls, natively (as a decorator or a function). With
    `recursive=False` only `fn`'s own frame runs natively: the functions it calls are compiled
    where compiled code calls `fn` (as torch.compiler.disable(fn, recursive=False))."""
    if fn is None:
        return functools.partial(disable, recursive=recursive)
    if not recursive:
        func = getattr(fn, "__func__", fn)
        if not hasattr(func, "__code__"):
            raise TypeError(f"framefuse.disable(recursive=False) expects a Python function, not {type(fn).__name__}")
        func._framefuse_disable_frame = True
        return fn
    if not callable(fn):
        raise TypeError(f"framefuse.disable expects a callable, not {type(fn).__name__}")
    return _wraps(_C._disable_callable(fn), fn)


def reset():
    """Forget every compiled frame (the next call of a compiled function compiles again)."""
    _C._reset()


def _root_code(fn):
    fn = getattr(fn, "__func__", fn)
    return getattr(fn, "__code__", None)


def _wraps(wrapper, fn):
    try:
        functools.update_wrapper(wrapper, fn)
    except (AttributeError, TypeError):
        pass
    return wrapper


def _compile_module(mod, backend, fullgraph, mode, options, dynamic=None):
    # The compiled module is an instance of a subclass of the module's class that shares the
    # module's __dict__: parameters, buffers, submodules and `training` are the same objects, so
    # state_dict() keys stay the original ones and checkpoints load both ways. Only __call__ differs:
    # it calls the module itself, so `self` in forward is `mod`, as under torch.compile (id(self),
    # `self is m` and hooks keyed by the module see the original).
    cls = type(mod)
    forward = getattr(cls, "forward", None)
    call = _C._compile_callable(cls.__call__, backend, fullgraph, mode, options, _root_code(forward), dynamic)

    def __call__(self, *args, **kwargs):
        return call(mod, *args, **kwargs)

    # NB: a copy is a compiled copy of the module (its forward runs on the copy's parameters, not
    # on `mod`'s), and pickling stores the module and how it was compiled (the class above has the
    # module class's name, which pickle would take for the module class).
    def __copy__(self):
        return _compile_module(copy.copy(mod), backend, fullgraph, mode, options, dynamic)

    def __deepcopy__(self, memo):
        return _compile_module(copy.deepcopy(mod, memo), backend, fullgraph, mode, options, dynamic)

    def __reduce_ex__(self, protocol):
        return _compile_module, (mod, backend, fullgraph, mode, options, dynamic)

    compiled_cls = type(cls.__name__, (cls,), {
        "__call__": __call__,
        "__copy__": __copy__,
        "__deepcopy__": __deepcopy__,
        "__reduce_ex__": __reduce_ex__,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "_orig_mod": property(lambda self: mod),
        "__doc__": cls.__doc__,
    })
    compiled = object.__new__(compiled_cls)
    object.__setattr__(compiled, "__dict__", mod.__dict__)
    return compiled
