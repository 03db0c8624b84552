"""framefuse.compiler: torch.compiler's functions (is_compiling, set_stance, the cache artifacts,
cudagraph_mark_step_begin), with torch.compiler's semantics."""
import importlib
import operator
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import framefuse
import framefuse.compiler as compiler
from framefuse import _C
from inductor_util import needs_codegen

pytestmark = pytest.mark.usefixtures("fresh_framefuse")


def stats():
    return _C._frame_eval_stats()


def test_torch_compiler_names_are_there():
    for name in ("compile", "reset", "disable", "is_compiling", "is_dynamo_compiling", "list_backends", "set_stance",
                 "assume_constant_result", "allow_in_graph", "substitute_in_graph", "cudagraph_mark_step_begin", "save_cache_artifacts",
                 "load_cache_artifacts"):
        assert callable(getattr(compiler, name)), name
    assert compiler.compile is framefuse.compile and "inductor" in compiler.list_backends()


def test_is_compiling_is_true_only_while_captured():
    def fn(x):
        return x + 1 if compiler.is_compiling() else x - 1

    x = torch.zeros(3)
    assert torch.equal(fn(x), x - 1)  # natively
    assert torch.equal(framefuse.compile(fn, backend="eager")(x), x + 1)
    assert stats()["frames_compiled"] == 1


def test_force_eager_compiles_nothing_and_is_restored():
    fn = framefuse.compile(lambda t: torch.relu(t) * 2)
    x = torch.randn(5)
    with compiler.set_stance("force_eager"):
        assert torch.equal(fn(x), torch.relu(x) * 2)
    assert stats()["frames_compiled"] == 0
    assert framefuse.config.stance == "default"
    fn(x)
    assert stats()["frames_compiled"] == 1

    @compiler.set_stance("force_eager")
    def run_eagerly(t):
        return fn(t)

    assert framefuse.config.stance == "default"  # as a decorator: only during the function's calls
    framefuse.reset()
    run_eagerly(x)
    assert stats()["frames_compiled"] == 0


def test_eager_on_recompile_uses_what_is_compiled_and_never_recompiles():
    fn = framefuse.compile(lambda t: t.sin() + 1, dynamic=False)
    a, b = torch.randn(4), torch.randn(6)
    fn(a)
    with compiler.set_stance("eager_on_recompile"):
        assert torch.equal(fn(b), b.sin() + 1)  # would recompile: runs eagerly
        fn(a)  # the compiled entry still serves its shapes
    s = stats()
    assert (s["frames_compiled"], s["recompiles"], s["cache_hits"]) == (1, 0, 1), s


def test_fail_on_recompile_raises_naming_the_code():
    def f(t):
        return t.cos() * 3

    fn = framefuse.compile(f, dynamic=False)
    fn(torch.randn(4))
    with compiler.set_stance("fail_on_recompile"):
        fn(torch.randn(4))  # a cache hit is fine
        with pytest.raises(RuntimeError) as e:
            fn(torch.randn(2, 2))
    msg = str(e.value)
    assert "fail_on_recompile" in msg and f"{os.path.basename(__file__)}:" in msg and "Failing guard" in msg


def test_unknown_stance_lists_valid_ones():
    with pytest.raises(ValueError, match="Valid stances: default, force_eager, eager_on_recompile, fail_on_recompile"):
        compiler.set_stance("sometimes")
    assert framefuse.config.stance == "default"


SCALES = {"a": 2.0, "b": 3.0}
scale_calls = []


def _scale_for(name):
    scale_calls.append(name)
    return SCALES[name]


@pytest.mark.parametrize("marker", ["framefuse", "torch"])
def test_assume_constant_result_is_called_while_tracing_only(marker):
    if marker == "torch" and not hasattr(getattr(torch, "compiler", None), "assume_constant_result"):
        pytest.skip("torch.compiler.assume_constant_result (torch >= 2.1)")
    mark = compiler.assume_constant_result if marker == "framefuse" else torch.compiler.assume_constant_result
    scale_for = mark(lambda name: _scale_for(name))

    def f(x):
        return x * scale_for("a") + scale_for(name="b")

    fn = framefuse.compile(f, fullgraph=True)  # NB: no break: the calls became constants
    x = torch.randn(4)
    scale_calls.clear()
    assert torch.equal(fn(x), x * 2.0 + 3.0) and scale_calls == ["a", "b"]
    SCALES["a"] = 5.0
    try:
        # as torch's: no guard on the result, the compiled code keeps the traced value
        assert torch.equal(fn(x), x * 2.0 + 3.0) and scale_calls == ["a", "b"]
    finally:
        SCALES["a"] = 2.0


def test_assume_constant_result_of_a_tensor_is_traced():
    @compiler.assume_constant_result
    def offset(x):
        return x.sum()  # tensor arguments: not a constant, traced as usual

    x = torch.randn(5)
    fn = framefuse.compile(lambda t: t - offset(t), fullgraph=True)
    assert torch.allclose(fn(x), x - x.sum())
    y = torch.randn(5)
    assert torch.allclose(fn(y), y - y.sum())


def _index_of_tensors(x, y):
    return x * (operator.indexOf([y, x], y) + 2)  # NB: found by identity: `==` of tensors would branch


def test_substitute_in_graph_traces_the_polyfill_in_place_of_a_c_function():
    x, y = torch.randn(4), torch.randn(4)
    with pytest.raises(framefuse.Unsupported):  # the C function alone: framefuse breaks on it
        framefuse.compile(_index_of_tensors, fullgraph=True)(x, y)
    framefuse.reset()
    traced = []

    @compiler.substitute_in_graph(operator.indexOf)
    def index_of(a, b, /):
        traced.append(True)
        for i, item in enumerate(a):
            if item is b or item == b:
                return i
        raise ValueError("sequence.index(x): x not in sequence")

    assert index_of([1, 2, 3], 3) == 2 and not traced  # the decorated name calls the C function
    fn = framefuse.compile(_index_of_tensors, fullgraph=True)
    assert torch.equal(fn(x, y), x * 2) and traced == [True]
    assert torch.equal(fn(y, x), y * 2) and stats()["frames_compiled"] == 1  # the trace's guards hold
    with pytest.raises(ValueError, match="already has a polyfill"):
        compiler.substitute_in_graph(operator.indexOf)(index_of)


def test_substitute_in_graph_checks_signatures():
    def original(a, b=2):
        return a + b

    with pytest.raises(TypeError, match="does not match"):
        compiler.substitute_in_graph(original)(lambda a, c=2: a + c)
    with pytest.raises(TypeError, match="does not match"):
        compiler.substitute_in_graph(original)(lambda a, b=3: a + b)  # another default
    compiler.substitute_in_graph(original, skip_signature_check=True)(lambda a, c=2: a + c)
    with pytest.raises(TypeError, match="expects a function"):
        compiler.substitute_in_graph(int)


def test_substitute_in_graph_folds_constant_calls_when_allowed():
    calls = []

    def measured(n):
        calls.append(n)
        return n * 2

    def unfolded(n):
        return n * 2

    @compiler.substitute_in_graph(measured, can_constant_fold_through=True)
    def doubled(n):
        raise AssertionError("not traced: the call's arguments are constants")

    compiler.substitute_in_graph(unfolded)(lambda n: n * 3)  # a polyfill that differs shows it is traced
    fn = framefuse.compile(lambda x: x * measured(3) + unfolded(1), fullgraph=True)
    x = torch.randn(3)
    assert torch.equal(fn(x), x * 6 + 3) and calls == [3]
    assert torch.equal(fn(x), x * 6 + 3) and calls == [3]  # run while tracing only


def test_torch_substitute_in_graph_is_honoured():
    substitute = getattr(getattr(torch, "compiler", None), "substitute_in_graph", None)
    if substitute is None:
        pytest.skip("torch.compiler.substitute_in_graph (torch >= 2.5)")

    def untraceable(x):
        framefuse.graph_break()
        return x + 1

    @substitute(untraceable)
    def traceable(x):
        return x + 1

    fn = framefuse.compile(lambda x: untraceable(x) * 2, fullgraph=True)
    x = torch.randn(3)
    assert torch.equal(fn(x), (x + 1) * 2)


def test_torch_own_polyfills_are_not_used():
    # torch's countOf polyfill sums `it == b` (a tensor); eager's gives an int: framefuse keeps its own
    # handling (the operator on tensors breaks) and eager's result.
    if not hasattr(getattr(torch, "compiler", None), "substitute_in_graph"):
        pytest.skip("torch.compiler.substitute_in_graph (torch >= 2.5)")
    importlib.import_module("torch._dynamo")  # torch's polyfill table exists once Dynamo is imported

    def count(x, y):
        return operator.countOf([x, y, x], x)

    x, y = torch.tensor([1.0]), torch.tensor([1.0])
    r = framefuse.compile(count)(x, y)
    assert r == 3 and type(r) is int


def test_cudagraph_mark_step_begin_is_callable_anywhere():
    compiler.cudagraph_mark_step_begin()  # replayed outputs are copies: nothing to mark (see its doc)


CHILD = textwrap.dedent("""
    import sys, torch, framefuse
    from framefuse.graph import Graph
    from framefuse.inductor import compile_graph
    framefuse.config.cache_dir = sys.argv[1]
    g = Graph()
    x = g.placeholder("x", torch.randn(32, 16))
    g.output((g.call(torch.tanh, g.call(torch.mul, x, 3.0)),))
    fn = compile_graph(g, None)
    t = torch.randn(32, 16)
    print(fn.from_disk_cache, torch.allclose(fn(t)[0], torch.tanh(t * 3.0), atol=1e-6))
""")


def _child(cache_dir):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(_C.__file__)), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", CHILD, str(cache_dir)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@needs_codegen
def test_cache_artifacts_carry_compiled_code_to_another_cache(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    assert _child(first) == ["False", "True"]  # compiled, written to cache a
    with framefuse.config.patch(cache_dir=str(first)):
        artifacts, info = compiler.save_cache_artifacts()
    assert isinstance(artifacts, bytes) and info["files"]
    with framefuse.config.patch(cache_dir=str(second)):
        assert compiler.save_cache_artifacts() is None  # nothing there yet
        loaded = compiler.load_cache_artifacts(artifacts)
    assert sorted(loaded["files"]) == sorted(info["files"])
    assert _child(second) == ["True", "True"]  # loaded from the carried artifacts, not compiled


def test_cache_artifacts_refuse_paths_outside_the_cache(tmp_path):
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"x"
        member = tarfile.TarInfo("../escaped")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    with framefuse.config.patch(cache_dir=str(tmp_path / "c")):
        with pytest.raises(ValueError, match="unexpected entry"):
            compiler.load_cache_artifacts(buf.getvalue())
    assert not (tmp_path / "escaped").exists()
