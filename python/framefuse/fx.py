"""torch.fx interop, both ways.

- `to_fx(graph)`: a framefuse graph as a torch.fx GraphModule. Custom backends of framefuse.compile
  receive one, with the example inputs, as torch.compile's backends do (a backend that wants
  framefuse's own graph says so with `framefuse.backends.native_graph`).
- `backend(gm, example_inputs, mode=None, options=None)`: framefuse as a torch.compile backend,
  `torch.compile(model, backend="framefuse")` (the name is the package's `torch_dynamo_backends`
  entry point). The GraphModule Dynamo captured becomes a framefuse graph, compiled by framefuse's
  code generators (AOT autograd included) once per set of input shapes; a graph framefuse cannot
  take runs as captured, with a logged reason.
"""
import math
import operator

import torch

from . import _C
from .graph import Graph

__all__ = ["to_fx", "from_fx", "backend"]


def to_fx(graph):
    """The framefuse graph `graph` (a framefuse.graph.Graph) as a torch.fx.GraphModule: one
    placeholder per input, one call_function per call (the op's torch callable, with the arguments
    eager passes it), operator.getitem for tuple elements. Calling it runs the graph eagerly."""
    from torch import fx  # noqa: PLC0415

    g = graph._g if isinstance(graph, Graph) else graph
    out = fx.Graph()
    env = {}

    def arg(v):
        if isinstance(v, _C.graph.Node):
            return env[v.id]
        if isinstance(v, (list, tuple)):
            items = [arg(x) for x in v]
            return items if isinstance(v, list) else tuple(items)
        if isinstance(v, slice):
            return slice(arg(v.start), arg(v.stop), arg(v.step))
        return v

    for n in g.nodes():
        if n.kind == "Placeholder":
            env[n.id] = out.placeholder(n.name)
        elif n.kind == "Output":
            out.output(arg(n.args[0]))
        else:
            target, args = n.target, arg(n.args)
            kwargs = {k: arg(v) for k, v in n.kwargs.items()}
            name = getattr(target, "__name__", None)
            if args and name and getattr(torch.Tensor, name, None) is target:  # x.view(...), not torch.Tensor.view(x, ...)
                env[n.id] = out.create_node("call_method", name, args, kwargs, name=n.name)
            else:
                env[n.id] = out.create_node("call_function", target, args, kwargs, name=n.name)
    for n in g.nodes():
        if n.kind != "Output" and n.meta.get("kind") == "tensor":
            env[n.id].meta["framefuse_meta"] = n.meta
    gm = fx.GraphModule(torch.nn.Module(), out)
    gm.framefuse_graph = graph if isinstance(graph, Graph) else Graph(graph)
    return gm


class FxUnsupported(Exception):
    """A node of an fx graph that framefuse cannot take (the message names it; `node`: the node)."""

    def __init__(self, message, node=None):
        super().__init__(message)
        self.node = node


# Calls on Python values (sizes, ints) that the conversion evaluates instead of recording.
_PYTHON_FNS = {getattr(operator, name) for name in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs", "eq", "ne", "lt", "le", "gt",
    "ge", "and_", "or_", "xor", "not_", "getitem", "index", "invert", "lshift", "rshift")}
_PYTHON_FNS |= {math.ceil, math.floor, math.sqrt, math.trunc, int, float, bool, min, max, len, abs}
_PYTHON_FNS |= {getattr(torch, name) for name in ("sym_int", "sym_float", "sym_max", "sym_min", "sym_not", "sym_sum",
                                                  "sym_ite") if hasattr(torch, name)}

# Tensor queries answered from the traced metadata (the compile is for one set of shapes).
_SIZE_METHODS = ("size", "dim", "ndimension", "stride", "numel", "nelement", "is_contiguous")


def _has_node(v):
    if isinstance(v, _C.graph.Node):
        return True
    if isinstance(v, (list, tuple)):
        return any(_has_node(x) for x in v)
    if isinstance(v, dict):
        return any(_has_node(x) for x in v.values())
    if isinstance(v, slice):
        return _has_node(v.start) or _has_node(v.stop) or _has_node(v.step)
    return False


def _static_meta(node, what):
    m = node.meta
    if m.get("kind") != "tensor":
        raise FxUnsupported(f"{what} of a {m.get('kind')} value")
    if any(isinstance(s, str) for s in m["sizes"] + m["strides"]):
        raise FxUnsupported(f"{what} of a tensor with symbolic sizes")
    return m


def _tensor_query(node, name, args):
    """`x.size()`, `x.dim()`, `x.shape`, `x.dtype` ... of a graph node, from its metadata."""
    m = _static_meta(node, f"Tensor.{name}")
    sizes, strides = m["sizes"], m["strides"]
    if name in ("size", "shape", "sym_size"):
        return torch.Size(sizes) if not args else sizes[args[0]]
    if name in ("stride", "sym_stride"):
        return tuple(strides) if not args else strides[args[0]]
    if name in ("dim", "ndimension", "ndim"):
        return len(sizes)
    if name in ("numel", "nelement", "sym_numel"):
        return math.prod(sizes)
    if name == "is_contiguous":  # torch's rule: row-major strides, dims of size 1 (and empty tensors) aside
        expected = 1
        for size, stride in reversed(list(zip(sizes, strides))):
            if size == 0:
                return True
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True
    if name == "dtype":
        return getattr(torch, m["dtype"])
    if name == "device":
        return torch.device(m["device"])
    if name == "requires_grad":
        return m["requires_grad"]
    if name == "is_cuda":
        return torch.device(m["device"]).type == "cuda"
    raise FxUnsupported(f"Tensor.{name} is not answered from graph metadata")


_ATEN_SIZE_OPS = {}
if hasattr(torch.ops.aten, "sym_size"):
    _ATEN_SIZE_OPS = {torch.ops.aten.sym_size.int: "sym_size", torch.ops.aten.sym_stride.int: "sym_stride",
                      torch.ops.aten.sym_numel.default: "sym_numel"}


def _where(node):
    """Where an fx node came from in the user's code (Dynamo records its stack)."""
    trace = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip().startswith("File ")]
    return f" ({lines[-1]})" if lines else ""


def from_fx(gm, example_inputs):
    """The fx GraphModule `gm` as a framefuse graph for the example inputs' shapes.

    Returns (graph, plan): `plan` maps a call's arguments to the graph's inputs (the tensor
    arguments, then tensors the module holds or the graph makes from constants). Non-tensor
    arguments and tensor queries (sizes, dtype) are constants of this graph. Raises FxUnsupported
    naming the node it cannot take."""
    g = Graph()
    env = {}
    inputs, held = [], []  # positions of the tensor arguments; tensors held by the graph's inputs

    def hold(value, name):
        held.append(value)
        return g.placeholder(name, value)

    def arg(v):
        if isinstance(v, torch.fx.Node):
            return env[v]
        if isinstance(v, (list, tuple)):
            items = [arg(x) for x in v]
            return items if isinstance(v, list) else tuple(items)
        if isinstance(v, dict):
            return {k: arg(x) for k, x in v.items()}
        if isinstance(v, slice):
            return slice(arg(v.start), arg(v.stop), arg(v.step))
        return v

    def convert(node, first_pass):
        if node.op == "placeholder" and first_pass:
            k = len(env)
            if k >= len(example_inputs):
                raise FxUnsupported("more placeholders than example inputs")
            ex = example_inputs[k]
            if isinstance(ex, torch.Tensor):
                inputs.append(k)
                env[node] = g.placeholder(node.name, ex)
            else:
                env[node] = ex
        elif node.op == "get_attr" and first_pass:
            value = gm
            for part in node.target.split("."):
                value = getattr(value, part)
            env[node] = hold(value, node.name) if isinstance(value, torch.Tensor) else value
        elif _is_constant_tensor(node) and first_pass:
            # torch.tensor(data) of constant data: made now, held as an input, and cloned by the
            # graph below (eager makes a new tensor on every call)
            env[node] = hold(torch.tensor(*node.args, **node.kwargs), node.name)
        elif _is_constant_tensor(node):
            env[node] = g.call(torch.clone, env[node])
        elif first_pass:
            return
        elif node.op in ("call_function", "call_method"):
            env[node] = _convert_call(g, node, arg(node.args), arg(node.kwargs))
        elif node.op == "output":
            g.output(arg(node.args[0]))
        elif node.op not in ("placeholder", "get_attr"):
            raise FxUnsupported(f"fx {node.op} nodes are not converted (torch inlines modules from 2.5 on)")

    # NB: two passes: a framefuse graph's placeholders precede its other nodes
    for first_pass in (True, False):
        for node in gm.graph.nodes:
            try:
                convert(node, first_pass)
            except (FxUnsupported, _C.Unsupported, TypeError, ValueError) as e:
                raise FxUnsupported(f"{node.format_node()}{_where(node)}: {e}", node) from e
    return g, (inputs, held)


def _is_constant_tensor(node):
    return (node.op == "call_function" and node.target is torch.tensor and set(node.kwargs) <= {"dtype", "device"}
            and not _has_fx_node(node.args) and not _has_fx_node(node.kwargs))


def _has_fx_node(v):
    found = []
    torch.fx.node.map_arg(v, found.append)
    return bool(found)


# Calls that do nothing a graph can observe (torch's API-usage logging).
_NO_OPS = {getattr(torch._C, "_log_api_usage_once", None)} - {None}


# Tensor dunder methods as Dynamo may record them (call_method "__eq__"): the operator function,
# with the operands swapped for reflected ones.
_REFLECTED = {"__radd__": operator.add, "__rsub__": operator.sub, "__rmul__": operator.mul,
              "__rtruediv__": operator.truediv, "__rfloordiv__": operator.floordiv, "__rpow__": operator.pow,
              "__rmod__": operator.mod, "__rand__": operator.and_, "__ror__": operator.or_, "__rxor__": operator.xor,
              "__rmatmul__": operator.matmul, "__rlshift__": operator.lshift, "__rrshift__": operator.rshift}


def _convert_call(g, node, args, kwargs):
    target = node.target
    if target in _NO_OPS:
        return None
    if node.op == "call_method" and target.startswith("__") and target.endswith("__") and not kwargs:
        if target in _REFLECTED and len(args) == 2:
            return _convert_function(g, _REFLECTED[target], (args[1], args[0]), {})
        if hasattr(operator, target):
            return _convert_function(g, getattr(operator, target), args, {})
    if node.op == "call_method":
        if args and isinstance(args[0], _C.graph.Node) and target in _SIZE_METHODS and not kwargs:
            return _tensor_query(args[0], target, args[1:])
        if not _has_node(args) and not _has_node(kwargs):
            return getattr(args[0], target)(*args[1:], **kwargs)  # a method of a Python value
        fn = getattr(torch.Tensor, target, None)
        if fn is None:
            raise FxUnsupported(f"torch.Tensor has no method {target!r}")
        return g.call(fn, *args, **kwargs)
    return _convert_function(g, target, args, kwargs)


def _convert_function(g, target, args, kwargs):
    if target in _ATEN_SIZE_OPS and isinstance(args[0], _C.graph.Node):
        return _tensor_query(args[0], _ATEN_SIZE_OPS[target], args[1:])
    if target is getattr and isinstance(args[0], _C.graph.Node):
        return _tensor_query(args[0], args[1], ())
    if target is operator.getitem and isinstance(args[0], _C.graph.Node) and args[0].meta.get("kind") == "tuple":
        if not isinstance(args[1], int):
            raise FxUnsupported("a tuple indexed by a non-int")
        return g.getitem(args[0], args[1])
    if target in _PYTHON_FNS and not _has_node(args) and not _has_node(kwargs):
        return target(*args, **kwargs)
    return g.call(target, *args, **kwargs)


def _signature(args):
    """What a compile of an fx graph is specialised to: each tensor's shape, strides, dtype, device
    and requires_grad, every other argument's value, which tensors share storage, and grad mode."""
    key = [torch.is_grad_enabled()]
    storages = {}
    for a in args:
        if isinstance(a, torch.Tensor):
            ptr = a.untyped_storage().data_ptr() if hasattr(a, "untyped_storage") else a.storage().data_ptr()
            key.append((tuple(a.shape), a.stride(), a.storage_offset(), a.dtype, a.device, a.requires_grad,
                        storages.setdefault(ptr, len(storages))))
        else:
            key.append((type(a), a))
    return tuple(key)


def _split_around(gm, bad, mode, options):
    """`gm` as three parts run in the graph's order: the nodes before `bad` and those after it, each
    an FxCompiled (compiled on its first call, split again where it meets another such node), and
    `bad` alone, run as captured. None where `bad` cannot be split out (an input or the output)."""
    from torch.fx.passes.split_module import split_module  # noqa: PLC0415
    if bad is None or bad.op in ("placeholder", "output"):
        return None
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    try:
        # NB: keep_original_order: a part with no result (a grad-mode switch) still runs where it
        # was; tuple_return: every part returns a tuple, as a compiled graph does
        split = split_module(gm, gm, lambda n: 0 if order[n] < order[bad] else 1 if n is bad else 2,
                             keep_original_order=True, tuple_return=True)
    except TypeError:  # a torch whose split_module lacks these
        return None
    calls = sum(1 for n in gm.graph.nodes if n.op not in ("placeholder", "output"))
    for name, sub in list(split.named_children()):
        # NB: split_module names the parts submod_<partition>: 1 is `bad`'s. It repeats grad-mode
        # switches at the start of the later parts; a part that is no smaller than the whole would
        # be split again forever: it runs as captured.
        part_calls = sum(1 for n in sub.graph.nodes if n.op not in ("placeholder", "output"))
        if name != "submod_1" and part_calls < calls:
            delattr(split, name)
            setattr(split, name, FxCompiled(sub, None, mode, options))
    return split


class FxCompiled:
    """What the torch.compile backend returns: framefuse's compile of the fx graph for each set of
    argument shapes it is called with (Dynamo's guards decide when it is called). A node framefuse
    cannot take splits the graph there (_split_around): that node runs as Dynamo captured it, the
    rest is compiled; where it cannot be split out, the graph runs as captured."""

    def __init__(self, gm, example_inputs, mode=None, options=None):
        self.gm = gm
        self._mode = mode
        self._options = options
        self._compiled = {}
        self.fallback_reason = None
        self.split_reason = None  # the node the graph was split around
        self._split = None
        # NB: compiled on the first call, whose arguments are concrete (under dynamic shapes
        # Dynamo's example inputs hold SymInts)
        del example_inputs

    def _get(self, args):
        key = _signature(args)
        entry = self._compiled.get(key)
        if entry is None:
            entry = self._compiled[key] = self._compile(args)
        return entry

    def _compile(self, args):
        from . import backends  # noqa: PLC0415
        if self.fallback_reason is not None:
            return None
        try:
            graph, (inputs, held) = from_fx(self.gm, args)
        except FxUnsupported as e:
            self._split = _split_around(self.gm, e.node, self._mode, self._options)
            if self._split is not None:
                self.split_reason = str(e)
                _C.logging.emit("perf_hints", f"backend=framefuse: the fx graph is split around a node framefuse "
                                              f"cannot take, which runs as captured (the rest compiles): {e}")
                return None
            self.fallback_reason = str(e)
            _C.logging.emit("perf_hints", f"backend=framefuse: the fx graph runs as captured: {e}")
            return None
        tensors = [args[i] for i in inputs] + held
        training = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        fn = backends._compile_static("inductor", graph, tensors, self._mode, self._options, training)
        return fn, inputs, held

    @property
    def compiles(self):
        """How many distinct sets of argument shapes were compiled."""
        return sum(1 for e in self._compiled.values() if e is not None)

    def __call__(self, *args):
        if self._split is not None:
            return self._split(*args)
        entry = self._get(args)
        if self._split is not None:
            return self._split(*args)
        if entry is None:
            return self.gm(*args)
        fn, inputs, held = entry
        return fn(*[args[i] for i in inputs], *held)


def backend(gm, example_inputs, mode=None, options=None):
    """torch.compile(model, backend="framefuse"): compile the GraphModule Dynamo captured with
    framefuse's code generators. `mode` and `options` are framefuse.compile's."""
    from .compile import check_mode_and_options  # noqa: PLC0415
    check_mode_and_options(mode, options)
    return FxCompiled(gm, example_inputs, mode, options)
