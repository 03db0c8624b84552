"""Whole models through framefuse.compile(backend="inductor") on CUDA, against eager (TF32 off).

The seed models, a resnet18-style CNN and a nanoGPT-style decoder in inference (each graph goes to
the CUDA code generator); reduce-overhead on the MLP in inference (CUDA graph replay) and over three
training steps. Marked `cuda`: skipped where torch sees no GPU.
"""
import contextlib
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import framefuse
from framefuse import cuda as ffcuda
from framefuse import inductor as ffinductor

import interp_models as im

import operator

from framefuse.graph import Graph

from cuda_util import HAVE_GPU, fp32_and_fresh, gpu  # noqa: F401  (fixture)
from cuda_util import need_nvrtc as _need_nvrtc

pytestmark = pytest.mark.usefixtures("fp32_and_fresh")




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

    @framefuse.backends.native_graph
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


def test_observable_inplace_ops_are_not_rewritten(tmp_path):
    _need_nvrtc()
    g, _ = _block_graph("cpu", read_after=True)
    with framefuse.config.patch(cache_dir=str(tmp_path)), pytest.raises(framefuse.Unsupported, match="in-place|inplace=True"):
        ffcuda.compile_graph(g, arch="sm_90")


def test_inplace_op_on_an_input_is_a_store_into_it(tmp_path):
    _need_nvrtc()
    g, _ = _block_graph("cpu", on_input=True)
    if not hasattr(torch.autograd.graph, "increment_version"):  # torch 1.13: no version bump, eager
        with framefuse.config.patch(cache_dir=str(tmp_path)), pytest.raises(framefuse.Unsupported, match="increment_version"):
            ffcuda.compile_graph(g, arch="sm_90")
        return
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        fn = ffcuda.compile_graph(g, arch="sm_90")
    assert fn._mod.writes_inputs and "Input #0 mutated" in fn.program, fn.program
    g, _ = _block_graph("cpu")
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        assert not ffcuda.compile_graph(g, arch="sm_90")._mod.writes_inputs


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


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@gpu
def test_inplace_writes_to_inputs_equal_eager_on_cuda(mode):
    # An optimizer-like update through framefuse.compile: the kernels store into the caller's
    # tensors and their versions move; under reduce-overhead such a graph is not recorded.
    def step(params, grads, lr):
        for p, gr in zip(params, grads):
            p.add_(gr, alpha=-lr)
        return params[0] * 2

    params = [torch.randn(50, 20, device="cuda"), torch.randn(20, device="cuda")]
    grads = [torch.randn_like(p) for p in params]
    mine = [p.clone() for p in params]
    compiled = framefuse.compile(step, backend="inductor", **({"mode": mode} if mode else {}))
    with torch.no_grad():
        for _ in range(4):
            want = step(params, grads, 0.1)
            versions = [p._version for p in mine]
            got = compiled(mine, grads, 0.1)
            _check(got, want, 1e-6)
            assert all(p._version > v for p, v in zip(mine, versions))
    _check(mine, params, 1e-6)
    # Overlapping operands: the call runs eagerly and gives eager's result.
    x = torch.randn(101, device="cuda")
    ref = x.clone()
    g = Graph()
    gd, gs = g.placeholder("d", x[:50]), g.placeholder("s", x[50:100])
    g.output((g.call(torch.Tensor.add_, gd, gs),))
    fn = ffcuda.backend(g, [x[:50], x[50:100]])
    assert isinstance(fn, ffcuda.CompiledCudaGraph) and fn._mod.writes_inputs
    fn(x[:50], x[:50])
    ref[:50].add_(ref[:50])
    assert torch.equal(x, ref)


# ---- channels-last convolutions -----------------------------------------------------------------

def _conv_graph(dev, weight_also_output=False):
    # NB: two convolutions: CUDA graphs with one stay NCHW (nothing else would be channels-last).
    x = torch.randn(4, 8, 16, 16, device=dev)
    w = torch.randn(16, 8, 3, 3, device=dev) / 8
    w2 = torch.randn(16, 16, 3, 3, device=dev) / 12
    b = torch.randn(16, device=dev)
    g = Graph()
    gx, gw, gw2, gb = g.placeholder("x", x), g.placeholder("w", w), g.placeholder("w2", w2), g.placeholder("b", b)
    y = g.call(torch.relu, g.call(operator.add, g.call(F.conv2d, gx, gw, None, 1, 1), g.call(torch.reshape, gb, (1, 16, 1, 1))))
    y2 = g.call(F.conv2d, y, gw2, None, 1, 1)
    outs = (y2, g.call(torch.sum, y, [2, 3]))
    if weight_also_output:
        outs = outs + (g.call(operator.mul, gw, 2.0), g.call(operator.mul, gw2, 2.0))
    g.output(outs)
    return g, [x, w, w2, b]


@contextlib.contextmanager
def _tf32_convs():
    """cuDNN convolutions allowed in TF32 (torch's default) while a graph compiles: the condition
    for channels-last. The graph then runs with the suite's setting (TF32 off), exactly."""
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = old


def test_conv_nets_compile_channels_last_for_sm90(tmp_path):
    _need_nvrtc()
    g, _ = _conv_graph("cpu")
    assert "off" in ffcuda.compile_graph(g, arch="sm_90")._mod.channels_last_why  # the default
    with framefuse.config.patch(cuda_channels_last=True), _tf32_convs():
        fn = ffcuda.compile_graph(g, arch="sm_90")
        assert fn._mod.channels_last_why == "", fn._mod.channels_last_why
        # A weight with another reader keeps its layout: nothing to convert.
        g2, _ = _conv_graph("cpu", weight_also_output=True)
        assert "other readers" in ffcuda.compile_graph(g2, arch="sm_90")._mod.channels_last_why
        # One convolution (a ViT's patch embedding) stays NCHW.
        g3 = Graph()
        px = g3.placeholder("x", torch.randn(2, 3, 32, 32))
        pw = g3.placeholder("w", torch.randn(64, 3, 16, 16))
        g3.output((g3.call(torch.transpose, g3.call(torch.flatten, g3.call(F.conv2d, px, pw, None, 16), 2), 1, 2),))
        assert "one convolution" in ffcuda.compile_graph(g3, arch="sm_90")._mod.channels_last_why


@gpu
def test_channels_last_conv_graph_equals_eager_with_eager_strides():
    g, (x, w, w2, b) = _conv_graph("cuda")
    with framefuse.config.patch(cuda_channels_last=True), _tf32_convs():
        fn = ffcuda.compile_graph(g)
    assert fn._mod.channels_last_why == ""
    for step in range(3):
        x = torch.randn_like(x)
        if step == 2:
            w.mul_(-1.5)  # in place: a new version, so the channels-last copy is made again
        out, ref = fn(x, w, w2, b), g.run(x, w, w2, b)
        for o, r in zip(out, ref):
            assert o.stride() == r.stride(), (o.stride(), r.stride())
        _check(out, ref, 1e-5)


def _resnet_block_graph(dev="cpu"):
    torch.manual_seed(0)
    vals = [torch.randn(4, 8, 16, 16), torch.randn(16, 8, 3, 3) / 8, torch.randn(16, 16, 3, 3) / 12,
            torch.randn(16, 8, 1, 1) / 3, torch.randn(16), torch.rand(16) + 0.5, torch.randn(16), torch.randn(16),
            torch.randn(10, 16), torch.randn(10)]
    vals = [v.to(dev) for v in vals]
    g = Graph()
    gx, gw, gw2, gwd, grm, grv, gbw, gbb, glw, glb = (
        g.placeholder(n, t) for n, t in zip(["x", "w", "w2", "wd", "rm", "rv", "bw", "bb", "lw", "lb"], vals))
    r = g.call(F.relu, g.call(F.batch_norm, g.call(F.conv2d, gx, gw, None, 1, 1), grm, grv, gbw, gbb, False, 0.1, 1e-5))
    p = g.call(F.max_pool2d, r, 3, 2, 1)
    b2 = g.call(F.batch_norm, g.call(F.conv2d, p, gw2, None, 1, 1), grm, grv, gbw, gbb, False, 0.1, 1e-5)
    down = g.call(F.conv2d, g.call(F.max_pool2d, gx, 2), gwd)
    s = g.call(F.relu, g.call(operator.add, g.call(operator.add, b2, p), down))
    f = g.call(torch.flatten, g.call(F.adaptive_avg_pool2d, s, (1, 1)), 1)
    g.output((g.call(F.linear, f, glw, glb), r, s))
    return g, vals


def test_channels_last_rewrite_of_a_resnet_block_computes_the_same_on_the_cpu_generator():
    # The rewrite is device-neutral: the CPU code generator (same lowering and loop IR) runs the
    # rewritten graph, every activation between convs in NHWC, and must match eager.
    g, vals = _resnet_block_graph()
    code, cl_inputs, nchw_fed, why = framefuse._C.cuda._channels_last_code(g._g)
    assert why == "" and cl_inputs == [1, 2, 3], why
    # w and wd feed convs of NCHW tensors (x, max_pool2d(x)); w2's conv reads the NHWC pool output.
    assert nchw_fed == [1, 3]
    g2 = Graph.parse(code)
    assert "[4096, 1, 256, 16]" in code  # the first conv's output and its bn/relu: NHWC
    args = list(vals)
    for i in cl_inputs:
        args[i] = torch.empty_strided(vals[i].shape, torch.empty_like(vals[i], memory_format=torch.channels_last).stride())
        args[i].copy_(vals[i])
    out = ffinductor.compile_graph(g2)(*args)
    ref = g.run(*vals)
    for o, r in zip(out, ref):
        assert o.shape == r.shape
        assert ((o - r).norm() / r.norm()).item() < 1e-5
    assert out[1].stride() == (4096, 1, 256, 16)  # the CUDA runner copies such outputs back to eager's strides


def test_conv_weights_behind_an_nhwc_input_are_packed_per_call_for_sm90(tmp_path):
    # Only w2's conv reads an NHWC input (the pool output): w2 is packed into an arena in each call
    # (one kernel, compiled here by NVRTC); w and wd stay cached copies. With the config on, or under
    # reduce-overhead, all three are cached.
    _need_nvrtc()
    g, _ = _resnet_block_graph()
    with framefuse.config.patch(cuda_channels_last=True, cache_dir=str(tmp_path)), _tf32_convs():
        assert ffcuda.compile_graph(g, arch="sm_90")._mod.packed_weights == [2]
        with framefuse.config.patch(cuda_keep_nhwc_weights=True):
            assert ffcuda.compile_graph(g, arch="sm_90")._mod.packed_weights == []
        assert framefuse._C.cuda.compile(g._g, "reduce-overhead", "sm_90", True, False).packed_weights == []


@gpu
@pytest.mark.parametrize("keep", [False, True])
def test_channels_last_resnet_block_equals_eager_and_predicts_every_conv_layout(keep):
    g, vals = _resnet_block_graph("cuda")
    with framefuse.config.patch(cuda_channels_last=True, cuda_keep_nhwc_weights=keep), _tf32_convs():
        fn = ffcuda.compile_graph(g)
    assert fn._mod.channels_last_why == "", fn._mod.channels_last_why
    for _ in range(2):
        out, ref = fn(*vals), g.run(*vals)
        for o, r in zip(out, ref):
            assert o.stride() == r.stride()
        _check(out, ref, 1e-5)
    assert fn._mod.layout_copies == 0  # cuDNN returned NHWC wherever the rewrite said it would
    assert fn._mod.packed_weights == ([] if keep else [2])
    # A new weight version is packed from its new values (nothing packed is kept).
    vals[2].mul_(-0.5)
    _check(fn(*vals), g.run(*vals), 1e-5)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_packed_conv_weights_of_many_shapes_equal_eager(dtype):
    # 34 packed weights (two launches of at most 32): 1x1 (plain copies), 3x3 and 5x5 rows through
    # shared memory, and a 1536-channel 3x3 row too wide for it in fp32 (read straight from memory).
    # The wide first output is pooled before the packed convolutions start: packing must not raise
    # the graph's peak, which is that output.
    torch.manual_seed(0)
    specs = [(8, 1536, 1), (1536, 16, 3)] + [(16, 16, k) for k in (1, 3, 5)] * 11
    x = torch.randn(32, 8, 32, 32, device="cuda", dtype=dtype)
    ws = [(torch.randn(co, ci, k, k, device="cuda") / (ci * k * k) ** 0.5).to(dtype) for ci, co, k in specs]
    g = Graph()
    y = g.placeholder("x", x)
    gws = [g.placeholder(f"w{i}", w) for i, w in enumerate(ws)]
    for i, (gw, (ci, co, k)) in enumerate(zip(gws, specs)):
        y = g.call(F.conv2d, y, gw, None, 1, k // 2)
        if i == 0:
            y = g.call(F.max_pool2d, y, 4)
    g.output((y,))
    with framefuse.config.patch(cuda_channels_last=True), _tf32_convs():
        fn = ffcuda.compile_graph(g)
    assert fn._mod.packed_weights == list(range(2, 2 + 34)), fn._mod.packed_weights
    (out,), (ref,) = fn(x, *ws), g.run(x, *ws)
    assert out.stride() == ref.stride()
    _check([out.float()], [ref.float()], 1e-5 if dtype == torch.float32 else 2e-2)


def test_resnet_block_compiles_channels_last_for_cuda_graphs(tmp_path):
    # On CUDA metadata (fake CUDA tensors: no GPU needed) the rewrite must not give up at batch norm
    # or pooling, whose C++ rules leave GPU layouts to the fallback.
    _need_nvrtc()
    import inspect
    from torch._subclasses.fake_tensor import FakeTensorMode
    if "allow_non_fake_inputs" not in inspect.signature(FakeTensorMode).parameters:
        pytest.skip("this torch's FakeTensorMode cannot make CUDA tensors without a GPU (torch 1.13)")
    g, vals = _resnet_block_graph()
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = [torch.empty_strided(v.shape, v.stride(), device="cuda") for v in vals]
    gc = Graph()
    names = ["x", "w", "w2", "wd", "rm", "rv", "bw", "bb", "lw", "lb"]
    ph = [gc.placeholder(n, t) for n, t in zip(names, fake)]
    gx, gw, gw2, gwd, grm, grv, gbw, gbb, glw, glb = ph
    r = gc.call(F.relu, gc.call(F.batch_norm, gc.call(F.conv2d, gx, gw, None, 1, 1), grm, grv, gbw, gbb, False, 0.1, 1e-5))
    p = gc.call(F.max_pool2d, r, 3, 2, 1)
    gc.output((gc.call(F.relu, gc.call(operator.add, gc.call(F.conv2d, p, gw2, None, 1, 1), p)),))
    with framefuse.config.patch(cuda_channels_last=True), _tf32_convs():
        fn = ffcuda.compile_graph(gc, arch="sm_90")
    assert fn._mod.channels_last_why == "", fn._mod.channels_last_why


def _conv_bn_graph(dev, epilogue, conv_bias=False, affine=True):
    """x -> conv -> eval batch norm -> (nothing | relu | + z then relu), and the tensors."""
    torch.manual_seed(1)
    t = dict(device=dev)
    x, w = torch.randn(4, 8, 12, 12, **t), torch.randn(16, 8, 3, 3, **t) / 8
    cb = torch.randn(16, **t) if conv_bias else None
    rm, rv = torch.randn(16, **t), torch.rand(16, **t) + 0.5
    bw, bb = (torch.randn(16, **t), torch.randn(16, **t)) if affine else (None, None)
    z = torch.randn(4, 16, 12, 12, **t)
    w2 = torch.randn(16, 8, 3, 3, **t) / 8 if epilogue == "two_bn_add_relu" else None  # the downsample's own weight
    vals = {"x": x, "w": w, "cb": cb, "rm": rm, "rv": rv, "bw": bw, "bb": bb, "z": z, "w2": w2}
    vals = {k: v for k, v in vals.items() if v is not None}
    g = Graph()
    ph = {k: g.placeholder(k, v) for k, v in vals.items()}
    y = g.call(F.batch_norm, g.call(F.conv2d, ph["x"], ph["w"], ph.get("cb"), 1, 1), ph["rm"], ph["rv"],
               ph.get("bw"), ph.get("bb"), False, 0.1, 1e-5)
    if epilogue == "relu":
        y = g.call(F.relu, y)
    elif epilogue == "add_relu":
        y = g.call(torch.relu, g.call(operator.add, ph["z"], y))
    elif epilogue == "two_bn_add_relu":  # a residual block with a downsample: two folded convs, one add
        y2 = g.call(F.batch_norm, g.call(F.conv2d, ph["x"], ph["w2"], None, 1, 1), ph["rv"], ph["rv"], None, ph["rm"],
                    False, 0.1, 1e-3)
        y = g.call(F.relu, g.call(operator.add, y, y2))
    g.output((y,))
    return g, list(vals.values())


@pytest.mark.parametrize("epilogue,extern", [("none", "conv2d"), ("relu", "conv_relu"), ("add_relu", "conv_relu"),
                                             ("two_bn_add_relu", "conv_relu")])
def test_batch_norm_folds_into_the_convolution_for_sm90(epilogue, extern, caplog):
    # Compile-only (CI): the batch norm and its epilogue leave no kernel; one extern call remains.
    _need_nvrtc()
    g, _ = _conv_bn_graph("cpu", epilogue)
    framefuse.set_logs("perf_hints")
    caplog.set_level("INFO", logger="framefuse")
    try:
        fn = ffcuda.compile_graph(g, mode="reduce-overhead", arch="sm_90")
    finally:
        framefuse.set_logs("")
    assert "batch norm(s) folded" in caplog.text
    assert f"ExternResult ({extern})" in fn.program and "kernel" not in fn.program, fn.program
    assert "kernel" in ffcuda.compile_graph(g, arch="sm_90").program  # only under CUDA graphs
    with framefuse.config.patch(cuda_fold_batch_norm=False):
        assert "kernel" in ffcuda.compile_graph(g, mode="reduce-overhead", arch="sm_90").program


@gpu
@pytest.mark.parametrize("epilogue", ["none", "relu", "add_relu", "two_bn_add_relu"])
@pytest.mark.parametrize("conv_bias,affine", [(False, True), (True, False)])
def test_folded_batch_norm_equals_eager_and_follows_updates(epilogue, conv_bias, affine):
    g, vals = _conv_bn_graph("cuda", epilogue, conv_bias, affine)
    fn = ffcuda.compile_graph(g, mode="reduce-overhead")
    assert "ExternResult (" in fn.program and "batch_norm" not in fn.program
    for step in range(3):
        if step == 1:
            vals[0] = torch.randn_like(vals[0])
        if step == 2:  # the statistics change in place: the folded weights must follow
            for v in vals[1:]:
                v.mul_(1.1)
        _check(fn(*vals), g.run(*vals), 1e-5)


@gpu
def test_reduce_overhead_conv_net_keeps_weights_in_place_and_follows_their_updates():
    # Parameters and buffers are passed as the same objects: the CUDA graph reads them in place; the
    # folded batch norms are made again when a statistic changes in place.
    g, vals = _conv_bn_graph("cuda", "add_relu")
    fn = ffcuda.compile_graph(g, mode="reduce-overhead")
    x, rest = vals[0], vals[1:]
    for step in range(5):
        x = torch.randn_like(x)
        if step == 3:
            rest[2].mul_(1.5)  # running_var, in place
        _check(fn(x, *rest), g.run(x, *rest), 1e-5)
    assert fn._cuda_graph is not None


@gpu
def test_reduce_overhead_with_new_weight_tensors_each_call_runs_without_a_graph():
    g, vals = _conv_bn_graph("cuda", "relu")
    fn = ffcuda.compile_graph(g, mode="reduce-overhead")
    for step in range(4):
        args = [torch.randn_like(v) if i != 3 else v for i, v in enumerate(vals)]  # fresh weights, same var
        _check(fn(*args), g.run(*args), 1e-5)
    assert fn._no_graph


@gpu
def test_reduce_overhead_copies_an_input_batch_passed_twice():
    # The first two calls get the same batch; later calls other batches: the batch is not taken for
    # a parameter, so the CUDA graph keeps replaying with each new batch copied in.
    g, vals = _conv_bn_graph("cuda", "relu")
    fn = ffcuda.compile_graph(g, mode="reduce-overhead")
    x, rest = vals[0], vals[1:]
    fn(x, *rest)
    fn(x, *rest)
    graph = fn._cuda_graph
    for _ in range(3):
        x = torch.randn_like(x)
        _check(fn(x, *rest), g.run(x, *rest), 1e-5)
    assert fn._cuda_graph is graph and not fn._no_graph


@gpu
def test_reduce_overhead_replays_only_under_the_precision_switches_it_was_recorded_under():
    # A CUDA graph keeps the cuBLAS kernels chosen when it was recorded (here TF32 ones).
    a, b = torch.randn(256, 4096, device="cuda"), torch.randn(4096, 256, device="cuda")
    g = Graph()
    g.output((g.call(torch.mm, g.placeholder("a", a), g.placeholder("b", b)),))
    fn = ffcuda.compile_graph(g, mode="reduce-overhead")
    torch.backends.cuda.matmul.allow_tf32 = True
    fn(a, b)
    fn(a, b)
    assert fn._cuda_graph is not None
    x = torch.randn_like(a)
    ref = torch.mm(x.double(), b.double()).float()
    with pytest.raises(AssertionError, match="relative error"):
        _check(fn(x, b), ref, 1e-5)  # replayed in TF32: the check below could fail
    torch.backends.cuda.matmul.allow_tf32 = False
    _check(fn(x, b), ref, 1e-5)


@gpu
def test_reduce_overhead_from_two_threads_on_their_own_streams_equals_eager():
    # The recorded graph's input and output buffers are shared: one thread replays at a time (the
    # other runs the compiled graph without it), and a replay on another stream waits for the last.
    from thread_util import run_threads
    b = torch.randn(1024, 256, device="cuda")
    g = Graph()
    g.output((g.call(torch.relu, g.call(torch.mm, g.placeholder("a", torch.randn(256, 1024, device="cuda")),
                                          g.placeholder("b", b))),))
    fn = ffcuda.compile_graph(g, mode="reduce-overhead")
    for _ in range(2):
        fn(torch.randn(256, 1024, device="cuda"), b)
    assert fn._cuda_graph is not None

    def work(seed):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        with torch.cuda.stream(torch.cuda.Stream()):
            for _ in range(150):
                x = torch.randn(256, 1024, device="cuda", generator=gen)
                (out,) = fn(x, b)
                torch.testing.assert_close(out, torch.relu(x @ b), rtol=1e-4, atol=1e-4)

    assert run_threads(work, [(1,), (2,)], switch_interval=1e-5) == []
