"""torch.autocast through framefuse.compile (issue #23): calls made under autocast, and autocast blocks
inside compiled code, against eager autocast on the same inputs.

The trace puts autocast's casts into the graph as explicit casts (which ones autocast makes is read off
torch's own autocast on fake tensors, python/framefuse/_autocast.py), and the graph runs with autocast
off. On the eager backend the graph runs torch's kernels on the cast operands: bit for bit eager's. On
inductor the generated kernels keep float32 intermediates where eager rounds each op to bfloat16 or
float16: results are compared at inductor_util.tolerance of their dtype. op_db's samples under autocast
are swept by tests/python/graph/test_opinfo.py.

torch 1.13 cannot say which casts autocast makes (no fake tensors): calls under autocast run eagerly
there, which the last tests check.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

import framefuse
import inductor_util as iu
from cuda_util import HAVE_GPU
from framefuse import _autocast

pytestmark = pytest.mark.usefixtures("fresh_framefuse")

BACKENDS = ["eager", "inductor"]
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")])]
CAPTURED = _autocast.available()
needs_capture = pytest.mark.skipif(not CAPTURED, reason="torch 1.13 runs calls under autocast eagerly (tested below)")


def _same(got, want, backend):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        if not isinstance(b, torch.Tensor):
            assert a == b
            continue
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        if backend == "eager" or not b.is_floating_point():
            assert torch.equal(a, b), f"max abs difference {(a.float() - b.float()).abs().max().item()}"
        else:
            torch.testing.assert_close(a, b, **iu.tolerance(b.dtype))


def _stats():
    return framefuse._C._frame_eval_stats()


def _run_both(fn, compiled, *args, calls=2):
    """fn eagerly and compiled (the compiled one `calls` times: the second runs the cached capture)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.cpu.amp.autocast is deprecated
        want = fn(*args)
        got = [compiled(*args) for _ in range(calls)]
    return want, got


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x, target):
        a = self.fc1(x)
        h = self.norm(F.gelu(a))
        logits = self.fc2(h) + x.sum(-1, keepdim=True)
        attn = torch.softmax(h @ h.transpose(0, 1), dim=-1) @ h
        return F.cross_entropy(logits, target), logits, attn.float().exp().sum(), a.dtype


def _inputs(device="cpu"):
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=g).to(device), torch.randint(0, 10, (8,), generator=g).to(device)


@needs_capture
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_call_under_autocast_is_one_graph_with_autocasts_casts(backend, dtype, device):
    net = Net().to(device)
    compiled = framefuse.compile(net, backend=backend)
    x, target = _inputs(device)
    with torch.no_grad(), torch.autocast(device, dtype=dtype):
        want = net(x, target)
        for _ in range(2):
            _same(compiled(x, target), want, backend)
    assert want[3] == dtype  # autocast did cast
    stats = _stats()
    assert (stats["frames_compiled"], stats["graph_breaks"], stats["internal_errors"]) == (1, 0, 0), stats


@needs_capture
@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_state_picks_the_cache_entry(backend):
    net = Net()
    compiled = framefuse.compile(net, backend=backend)
    x, target = _inputs()
    with torch.no_grad():
        for state in [torch.bfloat16, None, torch.float16, torch.bfloat16, None]:
            if state is None:
                _same(compiled(x, target), net(x, target), backend)
                continue
            with torch.autocast("cpu", dtype=state):
                _same(compiled(x, target), net(x, target), backend)
    assert _stats()["frames_compiled"] == 3  # bf16, off, f16; then the cached entries


@needs_capture
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_training_step_under_autocast(backend, device):
    net, ref = Net().to(device), Net().to(device)
    compiled = framefuse.compile(net, backend=backend)
    x, target = _inputs(device)
    for model, fn in [(ref, ref), (net, compiled)]:
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = fn(x, target)[0]
        loss.backward()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        assert p.grad is not None and p.grad.dtype == q.grad.dtype == torch.float32, name
        if backend == "eager":
            assert torch.equal(p.grad, q.grad), name
        else:
            torch.testing.assert_close(p.grad, q.grad, **iu.tolerance(torch.bfloat16), msg=name)


lin = torch.nn.Linear(8, 8)


def block_inside(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.relu(lin(x))
        inside = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
        with torch.autocast("cpu", enabled=False):
            z = y.float() @ x.t()  # float32: autocast off in here
        w = torch.mm(z, x)
    return y.float().sum() + w.sum(), w.dtype, inside, torch.is_autocast_enabled("cpu")


def break_inside(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.relu(lin(x))
        framefuse.graph_break()
        w = lin(y.float())
    return w + 1, torch.mm(x, x.t())


bf16 = torch.autocast("cpu", dtype=torch.bfloat16)


def made_outside(x):
    with bf16:
        return lin(x)


@torch.autocast("cpu", dtype=torch.float16)
def decorated(x):
    return lin(x) * 2


def calls_decorated(x):
    return decorated(x) + 1


def deprecated_spelling(x):
    with torch.cpu.amp.autocast():
        return lin(x), torch.mm(x, x)


@needs_capture
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn, breaks", [(block_inside, 0), (break_inside, 1), (made_outside, 0), (calls_decorated, 0),
                                        (deprecated_spelling, 0)], ids=lambda v: getattr(v, "__name__", str(v)))
def test_autocast_blocks_in_compiled_code(backend, fn, breaks):
    x = torch.randn(8, 8)
    with torch.no_grad():
        want, got = _run_both(fn, framefuse.compile(fn, backend=backend), x)
    for g in got:
        _same(g, want, backend)
    stats = _stats()
    assert stats["graph_breaks"] == breaks and stats["internal_errors"] == 0, stats
    assert not torch.is_autocast_enabled("cpu")  # every block was left


@needs_capture
def test_casts_are_nodes_of_the_graph():
    graphs = []

    @framefuse.backends.native_graph
    def recording(graph, example_inputs):
        graphs.append(graph)
        return graph.run

    def f(x, w):
        return (x @ w).softmax(-1)

    compiled = framefuse.compile(f, backend=recording)
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(compiled(x, w), f(x, w))
    ops = [n.op for n in graphs[0].nodes() if n.kind == "Call"]
    assert ops.count("to") == 2 and ops.index("to") < ops.index("op_matmul"), ops  # x and w cast, then the matmul


@needs_capture
def test_a_call_autocast_does_more_to_is_left_to_eager():
    # Reading the casts off torch's autocast needs the call to run on fake tensors; where it cannot
    # (torch.nonzero's size is data-dependent) the call is not put in the graph.
    def f(x):
        return torch.nonzero(x @ x).float().sum()

    compiled = framefuse.compile(f)
    x = torch.randn(6, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(compiled(x), f(x))


@pytest.mark.skipif(CAPTURED, reason="torch 2 captures calls under autocast (tested above)")
def test_torch_1_runs_calls_under_autocast_eagerly():
    def f(x, w):
        return torch.softmax(x @ w, -1) * 2, (x @ w).dtype

    compiled = framefuse.compile(f)
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = f(x, w)
        _same(compiled(x, w), want, "eager")
    assert want[1] == torch.bfloat16 and _stats()["frames_compiled"] == 0
