"""Whole models through framefuse.compile(backend="inductor") on CUDA, against eager (TF32 off).

The seed models, a resnet18-style CNN and a nanoGPT-style decoder in inference (each graph goes to
the CUDA code generator); reduce-overhead on the MLP in inference (CUDA graph replay) and over three
training steps. Marked `cuda`: skipped where torch sees no GPU.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import framefuse
from framefuse import cuda as ffcuda
from framefuse import inductor as ffinductor

import interp_models as im

import operator
import os

from framefuse.graph import Graph

HAVE_GPU = torch.cuda.is_available()


def gpu(test):
    """Marked `cuda` and skipped without a GPU."""
    return pytest.mark.cuda(pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")(test))


def _need_nvrtc():
    st = ffcuda.nvrtc_status()
    if st["available"]:
        return
    if os.environ.get("FRAMEFUSE_TEST_LANE") == "main":
        pytest.fail("NVRTC is required in the main lane (pip install nvidia-cuda-nvrtc): " + st["error"])
    pytest.skip("NVRTC not installed: " + st["error"].splitlines()[0])


@pytest.fixture(autouse=True)
def fp32_and_fresh(tmp_path):  # noqa: PT004
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    framefuse.reset()
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        yield
    framefuse.reset()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def _check(got, ref, tol):
    a, b = _tensors(ref), _tensors(got)
    assert len(a) == len(b) and a, (len(a), len(b))
    for x, y in zip(a, b):
        assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
        assert not torch.isnan(y).any()
        err = ((y.double() - x.double()).norm() / max(x.double().norm().item(), 1e-30)).item()
        assert err <= tol, f"relative error {err:.2e} > {tol}"


class FeatureModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 32 * 32, 10)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)), 1))


def evaluate_features(x, w):
    return torch.relu(torch.mm(x, w))


def sin_cos(x):
    return torch.sin(x) + torch.cos(x)


def _gpt(targets):
    cfg = im.GPTConfig(block_size=64, vocab_size=256, n_layer=2, n_head=4, n_embd=128)
    model = im.GPT(cfg)
    idx = lambda: torch.randint(0, 256, (2, 64), device="cuda")  # noqa: E731
    if not targets:
        return model, lambda: (idx(),)
    return model, lambda: (idx(), torch.randint(0, 256, (2, 64), device="cuda"))


def _layernorm_mlp_block():
    return nn.Sequential(nn.LayerNorm(256), nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256), nn.Softmax(-1))


# name -> (build() -> (target, make_inputs() -> tuple), relative tolerance)
MODELS = {
    "evaluate_features": (lambda: (evaluate_features, lambda: (torch.randn(64, 128, device="cuda"),
                                                                torch.randn(128, 128, device="cuda"))), 1e-5),
    "conv_feature_model": (lambda: (FeatureModel(), lambda: (torch.randn(8, 3, 32, 32, device="cuda"),)), 1e-4),
    "linear_10_5": (lambda: (nn.Linear(10, 5), lambda: (torch.randn(4, 10, device="cuda"),)), 1e-5),
    "sin_cos": (lambda: (sin_cos, lambda: (torch.randn(1 << 16, device="cuda"),)), 1e-5),
    "mlp_128_256_10": (lambda: (im.mlp_128_256_10(), lambda: (torch.randn(32, 128, device="cuda"),)), 1e-5),
    "layernorm_mlp_softmax": (lambda: (_layernorm_mlp_block(), lambda: (torch.randn(4, 50, 256, device="cuda"),)),
                              1e-4),
    "resnet18": (lambda: (im.resnet18(num_classes=100), lambda: (torch.randn(2, 3, 64, 64, device="cuda"),)), 1e-4),
    "nanogpt": (lambda: _gpt(targets=False), 1e-4),
    "nanogpt_loss": (lambda: _gpt(targets=True), 1e-4),
}


def _build(name):
    torch.manual_seed(0)
    build, tol = MODELS[name]
    target, make = build()
    if isinstance(target, nn.Module):
        target = target.cuda().eval()
    return target, make, tol


@pytest.mark.parametrize("name", sorted(MODELS))
@gpu
def test_model_equals_eager_on_cuda(name):
    target, make, tol = _build(name)
    compiled = framefuse.compile(target, backend="inductor")
    with torch.no_grad():
        for _ in range(3):  # first call compiles; later calls run the cached entry on fresh inputs
            args = make()
            _check(compiled(*args), target(*args), tol)


@pytest.mark.parametrize("name", ["mlp_128_256_10", "conv_feature_model", "resnet18", "nanogpt"])
@gpu
def test_model_graphs_reach_the_cuda_code_generator(name):
    """The same models through the inductor backend's own entry point, recorded: every captured graph
    of CUDA tensors must come back as compiled CUDA code (not the reference runner) with kernels."""
    target, make, tol = _build(name)
    compiled_graphs = []

    def recording(graph, example_inputs):
        fn = ffinductor.backend(graph, example_inputs)
        compiled_graphs.append(fn)
        return fn

    compiled = framefuse.compile(target, backend=recording)
    with torch.no_grad():
        args = make()
        _check(compiled(*args), target(*args), tol)
    assert compiled_graphs, "no graph was captured"
    for fn in compiled_graphs:
        assert isinstance(fn, ffcuda.CompiledCudaGraph), type(fn)
    assert any(fn.kernels() for fn in compiled_graphs)


@gpu
def test_reduce_overhead_inference_replays_and_equals_eager():
    target, make, tol = _build("mlp_128_256_10")
    compiled = framefuse.compile(target, backend="inductor", mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):  # the second call records the CUDA graph, later ones replay it
            args = make()
            _check(compiled(*args), target(*args), tol)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@gpu
def test_mlp_training_steps_equal_eager(mode):
    torch.manual_seed(0)
    ref = im.mlp_128_256_10().cuda()
    model = im.mlp_128_256_10().cuda()
    model.load_state_dict(ref.state_dict())
    kw = {"mode": mode} if mode else {}
    compiled = framefuse.compile(model, backend="inductor", **kw)
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):
        x = torch.randn(32, 128, device="cuda")
        y = torch.randint(0, 10, (32,), device="cuda")
        losses = []
        for m, o in ((ref, opt_ref), (compiled, opt)):
            o.zero_grad(set_to_none=True)
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            losses.append(loss.detach())
        _check(losses[1], losses[0], 1e-5)
    for p, q in zip(ref.parameters(), model.parameters()):
        _check(q.detach(), p.detach(), 1e-5)


# ---- in-place ops on private intermediates (resnet's relu(inplace=True) and `out += identity`) ----

def _block_graph(dev, read_after=False, on_input=False):
    """conv -> bn-like affine -> relu(inplace=True) -> += skip -> relu(inplace=True). With read_after
    the mutated intermediate is read again after the mutation (it must keep the mutation); with
    on_input the in-place op mutates a graph input."""
    x = torch.randn(2, 8, 10, 10, device=dev)
    w = torch.randn(8, 8, 3, 3, device=dev)
    s = torch.randn(1, 8, 1, 1, device=dev)
    g = Graph()
    gx, gw, gs = g.placeholder("x", x), g.placeholder("w", w), g.placeholder("s", s)
    if on_input:
        y = g.call(F.relu, gx, True)
        g.output((g.call(operator.mul, y, gs), gx))
        return g, [x, w, s]
    c = g.call(F.conv2d, gx, gw, None, 1, 1)
    a = g.call(operator.mul, c, gs)
    r = g.call(F.relu, a, True)
    t = g.call(operator.iadd, r, gx)
    out = g.call(F.relu, t, True)
    g.output((out, a) if read_after else (out,))
    return g, [x, w, s]


def test_private_inplace_ops_compile_for_sm90(tmp_path):
    _need_nvrtc()
    g, _ = _block_graph("cpu")
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        fn = ffcuda.compile_graph(g, arch="sm_90")
    assert fn.kernels(), fn.program


@pytest.mark.parametrize("case", ["read_after", "on_input"])
def test_observable_inplace_ops_are_not_rewritten(case, tmp_path):
    _need_nvrtc()
    g, _ = _block_graph("cpu", **{case: True})
    with framefuse.config.patch(cache_dir=str(tmp_path)), pytest.raises(framefuse.Unsupported, match="in-place|inplace=True"):
        ffcuda.compile_graph(g, arch="sm_90")


@pytest.mark.parametrize("case", ["private", "read_after", "on_input"])
@gpu
def test_inplace_blocks_equal_eager_on_cuda(case):
    g, inputs = _block_graph("cuda", **({} if case == "private" else {case: True}))
    fn = ffcuda.backend(g, inputs)
    if case == "private":
        assert isinstance(fn, ffcuda.CompiledCudaGraph)
    for _ in range(2):
        fresh = [torch.randn_like(t) for t in inputs]
        ref_in = [t.clone() for t in fresh]
        ref = g.run(*ref_in)
        out = fn(*fresh)
        _check(out, ref, 1e-5)
        _check(fresh, ref_in, 0.0)  # inputs mutated exactly as eager mutates them
