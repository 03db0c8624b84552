"""torch.fx interop (framefuse.fx): custom backends receive an fx GraphModule, as torch.compile's do;
framefuse is a torch.compile backend (`torch.compile(model, backend="framefuse")`); backend names
and register_backend as torch's; options validated. The differential tests run code nobody here
wrote: the codegen fuzzer's random programs and transformers models, each against eager."""
import operator
import os
import sys

import pytest
import torch

import framefuse
import framefuse.fx
import inductor_util as iu
from interp_models import SDPABlock

pytestmark = pytest.mark.usefixtures("fresh_framefuse")


def mixed(x, y):
    a = torch.relu(x) + y
    b, c = torch.split(a, 2, dim=1)
    return b * 2, c.sum(dim=0), a.view(-1)[1:5], x.shape[0] + 1


# ---- framefuse.compile's custom backends receive fx -------------------------------------------------

def test_a_custom_backend_receives_an_fx_graph_module():
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, [tuple(t.shape) for t in example_inputs]))
        return gm.forward  # what many torch backends return

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    got = framefuse.compile(mixed, backend=backend)(x, y)
    want = mixed(x, y)
    assert all(torch.equal(a, b) for a, b in zip(got[:3], want[:3])) and got[3] == want[3]
    (gm, shapes), = seen
    assert isinstance(gm, torch.fx.GraphModule) and shapes == [(3, 4), (3, 4)]
    ops = [n.op for n in gm.graph.nodes]
    assert ops.count("placeholder") == 2 and ops[-1] == "output"
    targets = {n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method")}
    assert torch.relu in targets and "view" in targets  # Tensor methods stay methods: `add.view(...)`
    assert "add.view(" in gm.code
    # the GraphModule runs on its own, outside framefuse, and agrees with the function
    out = gm(x, y)
    assert isinstance(out, tuple) and torch.equal(out[0], want[0])


def test_a_returned_graph_module_and_fx_passes_work():
    # A torch backend that rewrites the graph: every relu becomes sigmoid, then returns gm.
    def rewrite(gm, example_inputs):
        for n in gm.graph.nodes:
            if n.target is torch.relu:
                n.target = torch.sigmoid
        gm.recompile()
        return gm

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    got = framefuse.compile(mixed, backend=rewrite)(x, y)
    assert torch.equal(got[0], (torch.sigmoid(x) + y)[:, :2] * 2)


def test_mode_and_options_reach_a_custom_backend_as_keywords():
    calls = []

    def backend(gm, example_inputs, **kwargs):
        calls.append(kwargs)
        return gm

    x = torch.randn(4)
    framefuse.compile(lambda t: t * 2, backend=backend, mode="max-autotune")(x)
    framefuse.compile(lambda t: t * 3, backend=backend, options={"anything": 1})(x)
    framefuse.compile(lambda t: t * 4, backend=backend)(x)
    assert calls == [{"mode": "max-autotune"}, {"options": {"anything": 1}}, {}]


def test_native_graph_backends_receive_framefuse_graphs():
    seen = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        seen.append(graph)
        return graph.run

    x = torch.randn(4)
    assert torch.equal(framefuse.compile(lambda t: t.sin() + 1, backend=backend)(x), x.sin() + 1)
    assert isinstance(seen[0], framefuse.graph.Graph) and "torch.sin" in seen[0].code()


def test_to_fx_round_trips_every_captured_node():
    seen = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        seen.append(graph)
        return graph.run

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    framefuse.compile(mixed, backend=backend)(x, y)
    graph = seen[0]
    gm = framefuse.fx.to_fx(graph)
    assert [n.name for n in gm.graph.nodes if n.op != "output"] == [n.name for n in graph.nodes() if n.kind != "Output"]
    assert all(torch.equal(a, b) for a, b in zip(gm(x, y), graph.run(x, y)))
    assert gm.framefuse_graph is graph


def test_fx_graphs_as_other_torch_versions_record_them():
    # torch 2.11's Dynamo records `x == 0` as call_method __eq__, `1 - x` as __rsub__; sizes through
    # call_method size and getattr; a constant tensor through get_attr
    from torch import fx
    g = fx.Graph()
    x = g.placeholder("x")
    eq = g.call_method("__eq__", (x, 0))
    rsub = g.call_method("__rsub__", (x, 1))
    n = g.call_method("size", (x, 0))
    contiguous = g.call_method("is_contiguous", (x,))
    shape = g.call_function(getattr, (x, "shape"))
    rows = g.call_function(operator.getitem, (shape, 1))
    scaled = g.call_function(operator.mul, (rsub, g.call_function(operator.add, (n, rows))))
    const = g.get_attr("scale")
    g.output((eq, g.call_function(torch.add, (scaled, const)), contiguous))
    root = torch.nn.Module()
    root.register_buffer("scale", torch.tensor([0.5, 1.5, 2.5]))
    gm = fx.GraphModule(root, g)
    t = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, -1.0]])
    compiled = framefuse.fx.backend(gm, [t])
    got, want = compiled(t), gm(t)
    assert compiled.fallback_reason is None and compiled.compiles == 1
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and got[2] is True
    for t in (torch.randn(3, 2).t(), torch.randn(2, 6)[:, ::2], torch.randn(1, 3).expand(2, 3),
              torch.empty(3, 0).t()):  # is_contiguous from the strides, as torch says
        compiled = framefuse.fx.backend(gm, [t])
        assert compiled(t)[2] == gm(t)[2] == t.is_contiguous() and compiled.fallback_reason is None


# ---- backend names ------------------------------------------------------------------------------------

def test_register_backend_forms_of_torch():
    from framefuse import backends

    @backends.register_backend
    def plain_name(gm, example_inputs):
        return gm

    @backends.register_backend(name="given_name")
    def other(gm, example_inputs):
        return gm

    backends.register_backend(lambda gm, ex: gm, name="by_keyword")
    assert {"plain_name", "given_name", "by_keyword"} <= set(backends.list_backends())
    x = torch.randn(3)
    for name in ("plain_name", "given_name", "by_keyword"):
        assert torch.equal(framefuse.compile(lambda t: t + 1, backend=name)(x), x + 1)
    with pytest.raises(ValueError, match="built-in backend"):
        backends.register_backend(lambda gm, ex: gm, name="aot_eager")


def test_aot_eager_backend_trains_with_eager_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    x = torch.randn(5, 6)
    compiled = framefuse.compile(model, backend="aot_eager")
    model(x).square().sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled(x).square().sum().backward()
    for g, w in zip((p.grad for p in model.parameters()), want):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_cudagraphs_backend_on_cpu_runs_eagerly_with_a_hint(caplog):
    framefuse.set_logs("perf_hints")
    try:
        x = torch.randn(4)
        assert torch.equal(framefuse.compile(lambda t: t.exp(), backend="cudagraphs")(x), x.exp())
    finally:
        framefuse.set_logs("")
    assert "backend=cudagraphs" in caplog.text and "not all CUDA tensors" in caplog.text


# ---- options ------------------------------------------------------------------------------------------

def test_unknown_options_raise_listing_the_knobs():
    with pytest.raises(ValueError) as e:
        framefuse.compile(lambda t: t, options={"bogus_option": 1})
    assert "unknown option 'bogus_option'" in str(e.value) and "recompile_limit" in str(e.value)
    with pytest.raises(TypeError, match="fuse_attention must be bool"):
        framefuse.compile(lambda t: t, options={"fuse_attention": 3})


@iu.needs_codegen
def test_options_are_config_knobs_set_while_compiling():
    # dynamic_kernels=False: a graph with symbolic sizes is compiled per set of sizes, not once
    from framefuse import backends
    x = torch.randn(6, 3)
    before = backends.per_sizes_compiles(), backends.symbolic_compiles()
    fn = framefuse.compile(lambda t: t.relu() * 2, dynamic=True, options={"dynamic_kernels": False})
    assert torch.equal(fn(x), x.relu() * 2)
    assert (backends.per_sizes_compiles() - before[0], backends.symbolic_compiles() - before[1]) == (1, 0)
    assert framefuse.config.dynamic_kernels  # only while compiling
    fn = framefuse.compile(lambda t: t.relu() * 3, dynamic=True)
    fn(x)
    assert backends.symbolic_compiles() - before[1] == 1


# ---- framefuse as a torch.compile backend --------------------------------------------------------------

def _compile(model, **kwargs):
    """torch.compile with framefuse's backend, keeping what it made to check it compiled."""
    import torch._dynamo
    torch._dynamo.reset()
    made = []

    def backend(gm, example_inputs, **kw):
        made.append(framefuse.fx.backend(gm, example_inputs, **kw))
        return made[-1]

    return torch.compile(model, backend=backend, **kwargs), made


def _models():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 3))
    attn = SDPABlock(16, 4)
    return {"mlp": (mlp, torch.randn(8, 16)), "conv": (conv, torch.randn(2, 3, 8, 8)),
            "attn": (attn, torch.randn(2, 5, 16))}


@pytest.mark.torch2
@pytest.mark.parametrize("name", ["mlp", "conv", "attn"])
def test_torch_compile_backend_inference_and_training_match_eager(name):
    model, x = _models()[name]
    import copy
    eager = copy.deepcopy(model)
    compiled, made = _compile(model)
    iu.check_steps(model, compiled, x, eager)
    assert made and all(c.fallback_reason is None and c.compiles >= 1 for c in made), \
        [c.fallback_reason for c in made]


@pytest.mark.torch2
def test_torch_compile_finds_framefuse_by_name():
    # the `torch_dynamo_backends` entry point (pyproject.toml; the test lanes' dist-info mirrors it)
    import torch._dynamo
    assert "framefuse" in torch._dynamo.list_backends(exclude_tags=())
    x = torch.randn(4, 5)
    fn = torch.compile(lambda t: torch.nn.functional.softmax(t * 2, dim=-1), backend="framefuse")
    torch.testing.assert_close(fn(x), torch.softmax(x * 2, dim=-1), **iu.tolerance(torch.float32))
    # framefuse.inductor.backend, passed as a callable, takes Dynamo's graph too
    torch._dynamo.reset()
    fn = torch.compile(lambda t: t.tanh() + 1, backend=framefuse.inductor.backend)
    assert torch.equal(fn(x), x.tanh() + 1)


@pytest.mark.torch2
def test_torch_compile_backend_compiles_each_shape_once():
    compiled, made = _compile(lambda t: (t.sin() * 2).sum(dim=-1), dynamic=True)
    for n in (3, 5, 7, 5, 3):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), (x.sin() * 2).sum(dim=-1), **iu.tolerance(torch.float32))
    assert len(made) == 1 and made[0].compiles == 3  # one Dynamo graph; framefuse compiled 3 shapes


@pytest.mark.torch2
def test_torch_compile_backend_validates_options():
    with pytest.raises(Exception, match="unknown option 'bogus_option'"):
        torch.compile(lambda t: t + 1, backend="framefuse", options={"bogus_option": 1})(torch.randn(2))


@pytest.mark.torch2
def test_what_framefuse_cannot_take_runs_as_captured_with_a_reason(caplog):
    def fn(x):
        with torch.no_grad():  # Dynamo records grad-mode switches as calls in the graph
            y = x * 2
        return y + x

    framefuse.set_logs("perf_hints")
    try:
        compiled, made = _compile(fn)
        x = torch.randn(10)
        assert torch.equal(compiled(x), fn(x))
    finally:
        framefuse.set_logs("")
    # the graph is split around the grad-mode switch, which runs as captured (split_module repeats the
    # switch in the later part, which then runs as captured too rather than being split forever)
    assert made and made[0].split_reason and "_set_grad_enabled" in made[0].split_reason
    assert made[0].fallback_reason is None and "split around" in caplog.text
    x = torch.randn(10, requires_grad=True)
    out = compiled(x)
    assert torch.equal(out, fn(x)) and out.requires_grad
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(10))  # y = 2x was computed without grad


def _custom_op_or_skip():
    custom_op = getattr(getattr(torch, "library", None), "custom_op", None)
    if custom_op is None:
        pytest.skip("torch.library.custom_op (torch >= 2.4)")
    return custom_op


def _checked_top(fn):
    """fn(x, w) through the fx backend, against eager on two calls: the FxCompiled Dynamo's graph got."""
    compiled, made = _compile(fn)
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    for _ in range(2):
        torch.testing.assert_close(compiled(x, w), fn(x, w))
    (top,) = made
    return top


@pytest.mark.torch2
@iu.needs_codegen
def test_a_node_framefuse_cannot_take_splits_the_graph():
    custom_op = _custom_op_or_skip()

    @custom_op("framefuse_test::tanh_into", mutates_args=("out",))
    def tanh_into(x: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(torch.tanh(x) * 2)

    def fn(x, w):
        h = torch.relu(x @ w) + 1
        o = torch.empty_like(h)
        tanh_into(h, o)  # writes `o`: Dynamo keeps it in the graph, framefuse does not take it
        return (o * o).sum(1) - x.mean()

    top = _checked_top(fn)
    assert top.fallback_reason is None and "tanh_into" in top.split_reason
    before, op, after = (getattr(top._split, f"submod_{i}") for i in range(3))
    assert isinstance(before, framefuse.fx.FxCompiled) and before.compiles == 1 and before.fallback_reason is None
    assert isinstance(after, framefuse.fx.FxCompiled) and after.compiles == 1 and after.fallback_reason is None
    assert isinstance(op, torch.fx.GraphModule)  # the custom op runs as captured


@pytest.mark.torch2
@iu.needs_codegen
def test_a_custom_op_is_compiled_with_the_rest():
    custom_op = _custom_op_or_skip()

    @custom_op("framefuse_test::scaled_tanh", mutates_args=())
    def scaled_tanh(x: torch.Tensor, a: float) -> torch.Tensor:
        return torch.tanh(x) * a

    @scaled_tanh.register_fake
    def _(x, a):
        return torch.empty_like(x)

    def fn(x, w):
        h = torch.relu(x @ w) + 1
        h = scaled_tanh(h, 2.0)
        return (h * h).sum(1) - x.mean()

    top = _checked_top(fn)
    assert top.fallback_reason is None and top.split_reason is None and top.compiles == 1


@pytest.mark.torch2
@iu.needs_codegen
def test_torch_compile_backend_on_random_programs():
    # the codegen fuzzer's programs through torch.compile(backend=framefuse's fx backend): Dynamo
    # captures, framefuse.fx converts, framefuse compiles; every result against eager
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fuzz"))
    import codegen_fuzz as cf
    lines = []
    # NB: the fuzzer sets raise_on_internal_error and disk_cache for its run: restored after it
    with framefuse.config.patch(raise_on_internal_error=framefuse.config.raise_on_internal_error,
                                disk_cache=framefuse.config.disk_cache):
        try:
            stats, failures, _ = cf.run(int(os.environ.get("FRAMEFUSE_FUZZ_CASES", "1500")) // 5, seed=41,
                                        device="cpu", report=lines.append, via="torch.compile")
        finally:
            cf.VIA = "framefuse"
    assert not failures, "\n\n".join(lines)
    assert stats["compiled"] >= 0.7 * stats["cases"], stats


@pytest.mark.torch2
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "t5"])
def test_torch_compile_backend_on_transformers_models(name):
    pytest.importorskip("transformers")
    import hf_zoo
    model = hf_zoo.build(name).eval()
    x = hf_zoo.inputs(name)
    compiled, made = _compile(model)
    with torch.no_grad():
        want = model(**x)
        got = compiled(**x)
    for (path, a), (_, b) in zip(hf_zoo.leaves(got), hf_zoo.leaves(want)):
        if isinstance(b, torch.Tensor):
            torch.testing.assert_close(a, b, **iu.tolerance(b.dtype), msg=lambda m: f"{path}: {m}")
    assert made and all(c.fallback_reason is None for c in made), [c.fallback_reason for c in made]
