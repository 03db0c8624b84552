"""Build, inspect and run framefuse graphs from Python.

    from framefuse.graph import Graph
    g = Graph()
    x = g.placeholder("x", torch.randn(4, 8))
    y = g.call(torch.relu, g.call(torch.add, x, 1.0))
    g.output((y,))
    print(g.code())
    (out,) = g.run(torch.randn(4, 8))

Every torch callable in the op registry can be called (`torch.add`, `torch.Tensor.view`,
`operator.add`, `torch.nn.functional.relu` ...); `framefuse.graph.ops()` lists them. A call the
registry cannot type raises framefuse.Unsupported with the reason.
"""
from . import _C

Node = _C.graph.Node


class Graph:
    """A graph under construction (a thin wrapper over the C++ graph IR)."""

    def __init__(self, _impl=None):
        # `_impl`: the _C.graph.Graph to wrap (how C++ hands a graph to Python: src/graph_handle.h).
        if _impl is not None and not isinstance(_impl, _C.graph.Graph):
            raise TypeError(f"Graph(_impl) takes a framefuse._C.graph.Graph, not {type(_impl).__name__}")
        self._g = _impl if _impl is not None else _C.graph.Graph()

    @classmethod
    def parse(cls, text):
        """Parse graph code (what `code()` prints) back into a graph: print -> parse -> print is the
        identity."""
        return cls(_C.graph.Graph.parse(text))

    def placeholder(self, name, example):
        """Add an input named `name`, typed like the tensor `example`."""
        return self._g.placeholder(name, example)

    def call(self, fn, *args, **kwargs):
        """Add a call of torch callable `fn`; arguments are nodes or Python constants."""
        return self._g.call(fn, *args, **kwargs)

    def getitem(self, node, index):
        """Element `index` of a node producing a tuple (split, max with dim ...)."""
        return self._g.getitem(node, index)

    def output(self, result):
        """Set the graph's result: a node, or a tuple/list of nodes and constants."""
        self._g.output(result)

    def nodes(self):
        return self._g.nodes()

    def __len__(self):
        return len(self._g)

    def code(self):
        """The graph as readable Python-like code (the `graph_code` log artifact)."""
        return self._g.code()

    def table(self):
        """The graph as a table (the `graph` log artifact)."""
        return self._g.table()

    def verify(self):
        """The graph's invariant violations, as sentences (an empty list: the graph is valid)."""
        return list(self._g.verify())

    def optimized(self):
        """A new graph after the graph passes (constant folding, attention rewrite, common
        subexpressions, dead code, functionalization of in-place calls nobody can observe)."""
        return Graph(self._g.optimized())

    def fuse_attention(self, cuda_tf32_matmul=False):
        """(new graph, names of the softmax nodes rewritten): explicit attention replaced by one
        torch.nn.functional.scaled_dot_product_attention call where exactly equivalent (what the
        inductor backend does before code generation). With `cuda_tf32_matmul` (torch runs float32
        matmuls in TF32, as the backend reads from torch), float32 attention on CUDA stays explicit."""
        g, fired = self._g.fuse_attention(cuda_tf32_matmul)
        return Graph(g), list(fired)

    def is_symbolic(self):
        """Whether a size or stride is symbolic (s0, s1 ...: dynamic shapes)."""
        return self._g.is_symbolic()

    def has_unbacked_symbols(self):
        """Whether a size depends on tensor values (u0, u1 ...: outputs of nonzero, masked_select,
        unique ... under config capture_dynamic_output_shape_ops); the run binds them."""
        return self._g.has_unbacked_symbols()

    def has_data_dependent_values(self):
        """Whether a size or a Python number of the graph comes from tensor data: unbacked symbols
        (above) or ``x.item()`` under config capture_scalar_outputs. Such graphs run on the
        reference runner, or split (scalar_sink_split)."""
        return self._g.has_data_dependent_values()

    def scalar_sink_split(self):
        """None, or for a graph that only returns its numbers read by ``x.item()``: a dict with
        `tensors` (the tensor work: the original outputs, None where a number was, then the tensors
        the numbers read), `scalars` (the numbers from those tensors), `operand_outputs`,
        `scalar_outputs` and `outputs` (graph/passes/scalar_sinks.h)."""
        split = self._g.scalar_sink_split()
        if split is not None:
            split["tensors"], split["scalars"] = Graph(split["tensors"]), Graph(split["scalars"])
        return split

    def symbol_bindings(self):
        """Per symbol s0, s1 ...: the (input index, dim) whose size it is; dim -1 for an input that
        is a Python int that varies (the symbol is its value); (-1, -1) for a symbol bound nowhere."""
        return [tuple(b) for b in self._g.symbol_bindings()]

    def symbol_values(self, inputs, bindings=None):
        """The symbols' values in a call with `inputs` (for `specialize`); `bindings`: symbol_bindings()."""
        at = self.symbol_bindings() if bindings is None else bindings
        return tuple(0 if i < 0 else inputs[i] if d < 0 else inputs[i].shape[d] for i, d in at)

    def specialize(self, sizes):
        """The static graph for one call: symbol k replaced by sizes[k]."""
        return Graph(self._g.specialize(list(sizes)))

    def pass_trace(self):
        """The graph after each pass of the pipeline, as text."""
        return self._g.pass_trace()

    def run(self, *inputs):
        """Run the graph on the reference runner (eager torch ops) and return its result."""
        return self._g.run(*inputs)

    def __str__(self):
        return self.code()


def ops():
    """Every op of the registry: name, target, schema, traits, whether a C++ meta rule exists and
    whether the installed torch has it."""
    return list(_C.graph.ops())
