"""mode="reduce-overhead" for graphs that need autograd: forward and backward recorded in CUDA graphs
(framefuse.cuda.TrainingGraphReplay), against eager autograd. GPU tests are marked `cuda` and skipped
without a GPU; the checks that need no GPU run everywhere."""
import gc

import pytest
import torch
import torch.nn.functional as F

import framefuse
from framefuse import cuda as ffcuda
from framefuse.graph import Graph

from cuda_util import fp32_and_fresh, gpu  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("fp32_and_fresh")


@pytest.fixture(autouse=True, params=["native", "python"])
def replay_path(request, monkeypatch):
    """Each test twice: replays through framefuse._torch_replay's C++ node, and through the
    torch.autograd.Function used where that module is missing."""
    monkeypatch.setattr(ffcuda, "native_training_replay", request.param == "native")
    return request.param


def _mlp_graph(dev, dropout=False):
    """linear -> relu (-> dropout) -> linear over (x, w1, b1, w2, b2), and parameters for it."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(64, 32, device=dev) * 0.1), torch.nn.Parameter(torch.zeros(64, device=dev)),
              torch.nn.Parameter(torch.randn(10, 64, device=dev) * 0.1), torch.nn.Parameter(torch.zeros(10, device=dev))]
    x = torch.randn(16, 32, device=dev)
    g = Graph()
    gx = g.placeholder("x", x)
    gw1, gb1, gw2, gb2 = (g.placeholder(n, p) for n, p in zip(("w1", "b1", "w2", "b2"), params))
    h = g.call(torch.relu, g.call(F.linear, gx, gw1, gb1))
    if dropout:
        h = g.call(F.dropout, h, 0.5, True)
    g.output((g.call(F.linear, h, gw2, gb2),))
    return g, params


def _eager(x, w1, b1, w2, b2):
    return F.linear(torch.relu(F.linear(x, w1, b1)), w2, b2)


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _replay(fn):
    return fn._training  # the TrainingGraphReplay a reduce-overhead graph made for autograd calls


def _recorded(calls=2, dropout=False):
    """The MLP graph under reduce-overhead after `calls` forward/backward calls (the first runs
    eagerly, the second records), its parameters (gradients cleared) and a float32 copy of them."""
    g, params = _mlp_graph("cuda", dropout)
    ref = [p.detach().clone().requires_grad_(True) for p in params]
    fn = ffcuda.compile_graph(g, mode="reduce-overhead")
    for _ in range(calls):
        fn(torch.randn(16, 32, device="cuda"), *params)[0].sum().backward()
    for p in params:
        p.grad = None
    return fn, params, ref


def test_graphs_that_draw_random_numbers_are_not_recorded():
    g, _ = _mlp_graph("cpu", dropout=True)
    assert ffcuda.TrainingGraphReplay(g)._no_graph == "the graph draws random numbers (f_dropout)"
    g, _ = _mlp_graph("cpu")
    assert ffcuda.TrainingGraphReplay(g)._no_graph is None


@gpu
def test_training_steps_replay_and_equal_eager():
    g, params = _mlp_graph("cuda")
    ref = [p.detach().clone().requires_grad_(True) for p in params]
    fn = ffcuda.compile_graph(g, mode="reduce-overhead")
    opt, opt_ref = torch.optim.SGD(params, lr=0.1), torch.optim.SGD(ref, lr=0.1)
    for step in range(6):
        x, y = torch.randn(16, 32, device="cuda"), torch.randint(0, 10, (16,), device="cuda")
        losses = []
        for run, ps, o in ((lambda *a: fn(*a)[0], params, opt), (_eager, ref, opt_ref)):
            o.zero_grad(set_to_none=True)
            loss = F.cross_entropy(run(x, *ps), y)
            loss.backward()
            losses.append(loss.detach())
            o.step()
        _close(losses[0], losses[1])
        for p, q in zip(params, ref):
            _close(p.grad, q.grad)
            _close(p.detach(), q.detach())
    replay = _replay(fn)
    assert replay._no_graph is None and replay._rec is not None
    assert replay.replays == 5  # the first call runs eagerly, the second records, every later one replays


@gpu
def test_gradients_accumulate_across_replays_without_aliasing_the_recording():
    g, params = _mlp_graph("cuda")
    ref = [p.detach().clone().requires_grad_(True) for p in params]
    fn = ffcuda.compile_graph(g, mode="reduce-overhead")
    kept = []
    for _ in range(4):  # no zero_grad: .grad accumulates, as in gradient accumulation
        x = torch.randn(16, 32, device="cuda")
        fn(x, *params)[0].square().sum().backward()
        _eager(x, *ref).square().sum().backward()
        kept.append(params[0].grad.clone())
        for p, q in zip(params, ref):
            _close(p.grad, q.grad)
    assert _replay(fn).replays >= 2
    assert not torch.equal(kept[-1], kept[-2])


@gpu
def test_two_forwards_before_one_backward_keep_their_own_activations():
    fn, params, ref = _recorded()
    xa, xb = torch.randn(16, 32, device="cuda"), torch.randn(16, 32, device="cuda")
    (fn(xa, *params)[0].square().sum() + fn(xb, *params)[0].exp().sum()).backward()
    (_eager(xa, *ref).square().sum() + _eager(xb, *ref).exp().sum()).backward()
    for p, q in zip(params, ref):
        _close(p.grad, q.grad)


@gpu
def test_retained_graph_backward_after_a_later_forward_recomputes():
    fn, params, ref = _recorded()
    xa, xb = torch.randn(16, 32, device="cuda"), torch.randn(16, 32, device="cuda")
    out_a = fn(xa, *params)[0].square().sum()
    out_a.backward(retain_graph=True)
    fn(xb, *params)[0].sum().backward()  # replays: the activations of xa are overwritten
    for p in params:
        p.grad = None
    out_a.backward()
    _eager(xa, *ref).square().sum().backward()
    for p, q in zip(params, ref):
        _close(p.grad, q.grad)


@gpu
def test_double_backward_goes_through_the_eager_ops():
    fn, params, ref = _recorded(calls=0)
    for _ in range(3):
        x = torch.randn(16, 32, device="cuda", requires_grad=True)
        xr = x.detach().clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(fn(x, *params)[0].tanh().sum(), x, create_graph=True)
        (gxr,) = torch.autograd.grad(_eager(xr, *ref).tanh().sum(), xr, create_graph=True)
        _close(gx, gxr)
        gx.square().sum().backward()
        gxr.square().sum().backward()
        for p, q in zip(params, ref):
            _close(p.grad, q.grad)


@gpu
def test_parameter_changed_between_forward_and_backward_raises_as_eager():
    fn, params, _ = _recorded(calls=3)
    out = fn(torch.randn(16, 32, device="cuda"), *params)[0].sum()
    with torch.no_grad():
        params[2].mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


@gpu
def test_graph_with_dropout_runs_eagerly_and_trains():
    fn, params, _ = _recorded(calls=3, dropout=True)
    fn(torch.randn(16, 32, device="cuda"), *params)[0].sum().backward()
    assert _replay(fn)._rec is None
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)


def _records(replay, param):
    # NB: replays of other tests' models may still wait for the garbage collector; their weak
    # references to parameters are dead
    try:
        return replay._rec.fixed[0][1] is param
    except ReferenceError:
        return False


@gpu
def test_compiled_module_training_step_replays_forward_and_backward_graphs(replay_path):
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
    model.load_state_dict(ref.state_dict())
    compiled = framefuse.compile(model, backend="inductor", mode="reduce-overhead")
    opt_ref, opt = torch.optim.Adam(ref.parameters(), lr=1e-3), torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(m, o, x, y):
        o.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        return loss.detach()

    for i in range(5):
        x, y = torch.randn(32, 128, device="cuda"), torch.randint(0, 10, (32,), device="cuda")
        if i == 4:
            # NB: type(), not isinstance(): gc also lists weak proxies, dead ones raise on isinstance
            (replay,) = [o for o in gc.get_objects() if type(o) is ffcuda.TrainingGraphReplay and o._rec is not None
                         and _records(o, next(model.parameters()))]
            assert (replay._native is not None) == (replay_path == "native" and ffcuda._torch_replay() is not None)
            before = replay.replays, replay.backward_replays
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                loss = step(compiled, opt, x, y)
                torch.cuda.synchronize()
            assert (replay.replays, replay.backward_replays) == (before[0] + 1, before[1] + 1)
            ran = {e.key for e in prof.key_averages()}
            assert not ran & {"aten::addmm", "aten::mm", "aten::linear"}, ran  # no eager op of the model ran
            if replay._native is None:  # torch's CUDAGraph.replay (the native node launches through the driver)
                assert sum(e.count for e in prof.key_averages() if e.key == "cudaGraphLaunch") == 2
        else:
            loss = step(compiled, opt, x, y)
        _close(loss, step(ref, opt_ref, x, y))
    for p, q in zip(model.parameters(), ref.parameters()):
        _close(p.detach(), q.detach())


@gpu
def test_training_replay_only_under_the_precision_switches_it_was_recorded_under():
    torch.backends.cuda.matmul.allow_tf32 = True
    fn, params, _ = _recorded(calls=3)
    ref = [p.detach().double().requires_grad_(True) for p in params]
    assert _replay(fn)._rec is not None
    replays = _replay(fn).replays
    torch.backends.cudnn.allow_tf32 = True  # no convolution here: cuDNN's switch does not matter
    fn(torch.randn(16, 32, device="cuda"), *params)[0].sum().backward()
    assert _replay(fn).replays == replays + 1
    for p in params:
        p.grad = None
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.randn(16, 32, device="cuda")
    fn(x, *params)[0].square().sum().backward()
    _eager(x.double(), *ref).square().sum().backward()
    for p, q in zip(params, ref):
        torch.testing.assert_close(p.grad.double(), q.grad, rtol=1e-5, atol=1e-5)


_RELEASED_WORKSPACES = """
import torch, torch.nn.functional as F, framefuse
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
make = lambda: torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
ref, model = make(), make()
model.load_state_dict(ref.state_dict())
compiled = framefuse.compile(model, backend="inductor", mode="reduce-overhead")
infer = framefuse.compile(make().eval(), backend="inductor", mode="reduce-overhead")
x = torch.randn(32, 128, device="cuda")
for i in range(6):
    if i == 3:  # what torch.compile's CUDA graphs do around each recording
        torch._C._cuda_clearCublasWorkspaces()
        torch.cuda.empty_cache()
        torch.randn(64 << 20, device="cuda").mul_(2)  # reuses whatever was let go
    for m in (compiled, ref):
        m.zero_grad(set_to_none=True)
        F.cross_entropy(m(x), torch.arange(32, device="cuda") % 10).backward()
    with torch.no_grad():
        infer(x)
    torch.cuda.synchronize()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
print("ok")
"""


@gpu
def test_recorded_graphs_survive_torch_releasing_cublas_workspaces():
    # A recording whose cuBLAS workspace came from the common pool replayed into freed memory once
    # torch.compile released the workspaces (the process died). Run apart, so a crash is a failure.
    import subprocess
    import sys
    if not hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        pytest.skip("this torch keeps no per-stream cuBLAS workspaces")
    r = subprocess.run([sys.executable, "-c", _RELEASED_WORKSPACES], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:] + r.stderr[-4000:]


@gpu
def test_batch_norm_in_training_mode_keeps_running_statistics_equal_to_eager():
    # The graph updates running_mean/var (inputs) in place: it is not recorded, and no warm-up or
    # trial run may update them an extra time.
    torch.manual_seed(0)
    make = lambda: torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(),  # noqa: E731
                                       torch.nn.Linear(64, 10)).cuda().train()
    ref, model = make(), make()
    model.load_state_dict(ref.state_dict())
    compiled = framefuse.compile(model, backend="inductor", mode="reduce-overhead")
    opt_ref, opt = torch.optim.SGD(ref.parameters(), lr=0.1), torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        x = torch.randn(16, 32, device="cuda")
        for m, o in ((compiled, opt), (ref, opt_ref)):
            o.zero_grad(set_to_none=True)
            m(x).square().mean().backward()
            o.step()
    for (name, a), (_, b) in zip(model.state_dict().items(), ref.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
