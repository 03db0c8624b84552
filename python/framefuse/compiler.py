"""framefuse.compiler: torch.compiler's functions, for code written against torch.compiler.

    import framefuse.compiler as compiler
    model = compiler.compile(model)
    with compiler.set_stance("force_eager"):
        model(x)                       # runs eagerly, compiles nothing

torch's own markers are honoured inside framefuse-compiled code too: torch.compiler.disable,
torch._dynamo.graph_break, torch.compiler.is_compiling.
"""
import functools
import inspect
import io
import os
import tarfile
import tempfile

from . import _C
from .backends import list_backends
from .compile import compile, disable, reset  # noqa: A004

__all__ = ["compile", "reset", "disable", "is_compiling", "is_dynamo_compiling", "list_backends", "set_stance",
           "assume_constant_result", "allow_in_graph", "substitute_in_graph", "cudagraph_mark_step_begin", "save_cache_artifacts", "load_cache_artifacts"]

_STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile")


def is_compiling():
    """True while framefuse captures the calling code (the frontend reads this call as True), False
    when it runs natively: `if not framefuse.compiler.is_compiling(): print(...)`."""
    return False


is_dynamo_compiling = is_compiling


def assume_constant_result(fn):
    """Mark `fn` as returning a constant, as torch.compiler.assume_constant_result: where compiled
    code calls it with constant arguments, it is called once while tracing and its result is built
    into the compiled code, without a guard (a later change of what it returns is not seen). A
    tensor result, or non-constant arguments, trace it as usual. torch's own mark works too."""
    fn._dynamo_marked_constant = True
    return fn


def allow_in_graph(fn):
    """Put calls of `fn` into the graph as one opaque call instead of tracing into it, as
    torch.compiler.allow_in_graph (a list or tuple marks each function; returns its argument):

        @framefuse.compiler.allow_in_graph
        def fused_op(x, w):              # framefuse does not look inside
            return my_extension.op(x, w)

    At run time the compiled code calls `fn` with the real tensors (the code generators call it
    from the program, as an op they do not generate). While tracing it is called once with meta
    tensors to type its result. Its arguments must be tensors, lists of tensors or constants (int,
    float, bool, str, None); its result a tensor or a tuple of tensors, new memory (not an argument
    or a view of one) and it may not write its arguments: anything else breaks the graph at the
    call with the reason. Like torch's, it is for functions of their tensor arguments: what the
    function reads besides them (a global it changes, Python side effects) is not seen by guards,
    and Python side effects happen when the compiled code runs. torch.compiler.allow_in_graph's
    marks are honoured too."""
    if isinstance(fn, (list, tuple)):
        return [allow_in_graph(f) for f in fn]
    if not callable(fn):
        raise TypeError(f"allow_in_graph expects a callable, not {type(fn).__name__}")
    _C._allowed_in_graph()[id(fn)] = fn
    return fn


def _signature_key(sig):
    # NB: as torch compares them: positional names, keyword-only names, defaults; the names of *args
    # and **kwargs and the annotations do not count.
    varargs = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    params = sig.parameters.values()
    return (tuple(p.name for p in params if p.kind not in varargs and p.kind != p.KEYWORD_ONLY),
            {p.name for p in params if p.kind == p.KEYWORD_ONLY},
            {p.name: p.default for p in params if p.kind not in varargs})


def substitute_in_graph(original_fn, *, can_constant_fold_through=False, skip_signature_check=False):
    """Register a traceable Python function to be traced in place of `original_fn` (usually a C
    function framefuse cannot trace into), as torch.compiler.substitute_in_graph:

        @framefuse.compiler.substitute_in_graph(operator.indexOf)
        def index_of(a, b, /):
            for i, item in enumerate(a):
                if item is b or item == b:
                    return i
            raise ValueError("sequence.index(x): x not in sequence")

    Compiled code calling `operator.indexOf` then traces `index_of`; eager calls still run the
    original. With `can_constant_fold_through=True`, a call whose arguments are all constants runs the
    original while tracing and its (immutable) result becomes a constant of the compiled code. The
    signatures must match (as torch checks) unless `skip_signature_check=True`. Returns the decorator;
    the decorated name becomes a function calling the original. Polyfills registered with torch's own
    substitute_in_graph are used too, where framefuse would otherwise break on the call."""
    if not callable(original_fn) or inspect.isclass(original_fn):
        raise TypeError(f"substitute_in_graph expects a function but got {type(original_fn)!r}")

    def register(traceable_fn):
        if not inspect.isfunction(traceable_fn):
            raise TypeError(f"@substitute_in_graph(...) expects a Python function but got {type(traceable_fn)!r}")
        if not skip_signature_check:
            try:
                original_sig = inspect.signature(original_fn)
            except ValueError:  # a C function without a text signature: nothing to compare
                original_sig = None
            if original_sig is not None:
                wildcard = _signature_key(inspect.signature(lambda *args, **kwargs: None))
                keys = (_signature_key(original_sig), _signature_key(inspect.signature(traceable_fn)))
                if keys[0] != keys[1] and wildcard not in keys:
                    raise TypeError(f"substitute_in_graph: the signature of {traceable_fn.__qualname__}"
                                    f"{inspect.signature(traceable_fn)} does not match {original_fn!r}'s "
                                    f"{original_sig}; make them match or pass skip_signature_check=True")
        table = _C._polyfills()
        if id(original_fn) in table and table[id(original_fn)][0] is original_fn:
            raise ValueError(f"substitute_in_graph: {original_fn!r} already has a polyfill "
                             f"({table[id(original_fn)][1].__qualname__})")

        @functools.wraps(traceable_fn)
        def wrapped(*args, **kwargs):
            return original_fn(*args, **kwargs)

        wrapped.__torch_dynamo_original__ = original_fn
        wrapped.__torch_dynamo_polyfill__ = traceable_fn
        fold = bool(can_constant_fold_through)
        table[id(original_fn)] = (original_fn, traceable_fn, fold)
        table[id(wrapped)] = (wrapped, traceable_fn, fold)
        return wrapped

    return register


class set_stance:  # noqa: N801  (torch's name; a function, a context manager and a decorator)
    """Change what compiled functions do, as torch.compiler.set_stance:

    - "default": compile, recompile when guards fail;
    - "force_eager": run eagerly, compile nothing (cached compiled code is not used either);
    - "eager_on_recompile": use compiled code whose guards pass; where a recompile would be needed,
      run eagerly instead;
    - "fail_on_recompile": raise (naming the code and the failing guard) where a recompile would be
      needed.

    `set_stance("force_eager")` changes it until changed again; `with set_stance(...):` and
    `@set_stance(...)` change it for a block or a function's calls."""

    def __init__(self, stance="default", *, skip_guard_eval_unsafe=False, force_backend=None):
        if stance not in _STANCES:
            raise ValueError(f"set_stance: unknown stance {stance!r}. Valid stances: {', '.join(_STANCES)}.")
        if skip_guard_eval_unsafe or force_backend is not None:
            raise NotImplementedError("set_stance: skip_guard_eval_unsafe and force_backend are not supported by "
                                      "framefuse; leave them out")
        self._stance = stance
        self._prior = _C.config.get("stance")
        _C.config.set("stance", stance)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C.config.set("stance", self._prior)
        return False

    def __call__(self, fn):
        # NB: as a decorator the stance applies to the function's calls only
        _C.config.set("stance", self._prior)
        stance = self._stance

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prior = _C.config.get("stance")
            _C.config.set("stance", stance)
            try:
                return fn(*args, **kwargs)
            finally:
                _C.config.set("stance", prior)

        return wrapper


def cudagraph_mark_step_begin():
    """torch's marker of a new training or inference step for CUDA graphs. framefuse's replayed
    CUDA graphs (mode="reduce-overhead") return copies of their outputs, never their static buffers,
    so no output of an earlier replay can be overwritten and there is nothing to mark."""


def _cache_dir():
    d = _C.config.get("cache_dir")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "framefuse")


def save_cache_artifacts():
    """The on-disk compile cache (generated kernels, compiled objects) as bytes, to carry to another
    machine or process: `(artifact_bytes, info)`, as torch.compiler.save_cache_artifacts;
    None where the cache is empty. `info` lists the files."""
    root = _cache_dir()
    if not os.path.isdir(root):
        return None
    buf = io.BytesIO()
    names = []
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for dirpath, _, files in os.walk(root):
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                tar.add(path, arcname=rel, recursive=False)
                names.append(rel)
    if not names:
        return None
    return buf.getvalue(), {"files": names, "cache_dir": root}


def load_cache_artifacts(artifact_bytes):
    """Unpack what save_cache_artifacts returned into this process's compile cache: later compiles
    of the same graphs load their code from it. Returns the info (the files written)."""
    root = _cache_dir()
    os.makedirs(root, mode=0o700, exist_ok=True)
    names = []
    with tarfile.open(fileobj=io.BytesIO(artifact_bytes), mode="r:gz") as tar:
        for member in tar.getmembers():
            target = os.path.realpath(os.path.join(root, member.name))
            if not member.isfile() or not target.startswith(os.path.realpath(root) + os.sep):
                raise ValueError(f"load_cache_artifacts: unexpected entry {member.name!r} in the artifacts")
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target))  # private (0600), then renamed over
            with os.fdopen(fd, "wb") as out:
                out.write(tar.extractfile(member).read())
            os.replace(tmp, target)
            names.append(member.name)
    return {"files": names, "cache_dir": root}
