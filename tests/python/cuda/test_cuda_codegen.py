"""The CUDA code generator.

Compile-only tests (every machine, CI included): each test graph's generated CUDA C++ is compiled by
NVRTC for sm_90. GPU tests (marked `cuda`, skipped without a GPU): compiled graphs equal eager.
"""
import operator
import os
import re

import pytest
import torch
import torch.nn.functional as F

import framefuse
from framefuse import _C, cuda
from framefuse.graph import Graph

from cuda_util import need_nvrtc as _need_nvrtc

HAVE_GPU = torch.cuda.is_available()
gpu = pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")




# Each case: (name, builder(device) -> (Graph, inputs), eager(*inputs) -> outputs, tolerance).
def _pointwise(dev):
    x = torch.randn(1 << 16, device=dev)
    g = Graph()
    gx = g.placeholder("x", x)
    g.output((g.call(torch.add, g.call(torch.sin, gx), g.call(torch.cos, gx)),))
    return g, [x]


def _softmax(dev):
    x = torch.randn(64, 1000, device=dev)
    g = Graph()
    gx = g.placeholder("x", x)
    g.output((g.call(torch.softmax, g.call(operator.mul, gx, 0.125), -1),))
    return g, [x]


def _layer_norm_gelu(dev, dtype=torch.float32):
    x = torch.randn(48, 768, device=dev, dtype=dtype)
    r = torch.randn(48, 768, device=dev, dtype=dtype)
    w = torch.randn(768, device=dev, dtype=dtype)
    b = torch.randn(768, device=dev, dtype=dtype)
    g = Graph()
    gx, gr, gw, gb = (g.placeholder(n, t) for n, t in zip("xrwb", (x, r, w, b)))
    ln = g.call(F.layer_norm, g.call(operator.add, gx, gr), [768], gw, gb)
    g.output((g.call(F.gelu, ln),))
    return g, [x, r, w, b]


def _reductions(dev):
    x = torch.randn(96, 130, device=dev)
    g = Graph()
    gx = g.placeholder("x", x)
    g.output((g.call(torch.sum, gx, 1), g.call(torch.sum, gx, 0), g.call(torch.amax, gx, [1], True),
              g.call(torch.mean, gx, [0, 1])))
    return g, [x]


def _linear_relu(dev):
    x, w, b = torch.randn(32, 64, device=dev), torch.randn(48, 64, device=dev), torch.randn(48, device=dev)
    g = Graph()
    gx, gw, gb = g.placeholder("x", x), g.placeholder("w", w), g.placeholder("b", b)
    g.output((g.call(torch.relu, g.call(F.linear, gx, gw, gb)),))
    return g, [x, w, b]


def _broadcast_transpose(dev):
    x = torch.randn(40, 24, device=dev)
    y = torch.randn(24, 40, device=dev)
    b = torch.randn(24, device=dev)
    g = Graph()
    gx, gy, gb = g.placeholder("x", x), g.placeholder("y", y), g.placeholder("b", b)
    t = g.call(operator.mul, g.call(torch.t, gy), gb)
    g.output((g.call(torch.sigmoid, g.call(operator.sub, gx, t)), g.call(torch.gt, gx, t)))
    return g, [x, y, b]


def _bn_relu_max_pool(dev, channels_last=False):
    x = torch.randn(4, 16, 30, 30, device=dev)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    sc, sh = torch.randn(16, 1, 1, device=dev), torch.randn(16, 1, 1, device=dev)
    g = Graph()
    gx, gs, gh = g.placeholder("x", x), g.placeholder("s", sc), g.placeholder("h", sh)
    r = g.call(torch.relu, g.call(operator.add, g.call(operator.mul, gx, gs), gh))
    g.output((g.call(F.max_pool2d, r, 3, 2, 1),))
    return g, [x, sc, sh]


def _conv_bias_relu(dev):
    x, w, b = torch.randn(2, 3, 12, 12, device=dev), torch.randn(8, 3, 3, 3, device=dev), torch.randn(8, device=dev)
    g = Graph()
    gx, gw, gb = g.placeholder("x", x), g.placeholder("w", w), g.placeholder("b", b)
    g.output((g.call(torch.relu, g.call(F.conv2d, gx, gw, gb, 1, 1)),))
    return g, [x, w, b]


def _attention_heads(dev):
    # nanoGPT's explicit attention from the qkv product: q, k and v are strided views of it whose
    # batch dims (batch, head) do not flatten, so the batched products get copies made by kernels.
    B, T, nh, hs = 2, 32, 4, 16
    C = nh * hs
    qkv = torch.randn(B, T, 3 * C, device=dev)
    mask = torch.tril(torch.ones(T, T, device=dev)).view(1, 1, T, T)

    def f(qkv, mask):
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, nh, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * 0.25
        att = F.softmax(att.masked_fill(mask == 0, float("-inf")), dim=-1)
        return (att @ v).transpose(1, 2).contiguous().view(B, T, C)

    seen = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        seen.append(graph)
        return graph.run

    framefuse.compile(f, backend=backend, fullgraph=True)(qkv, mask)
    return seen[0], [qkv, mask]


def _softmax_times_centered(dev):
    # One row kernel whose passes read x (max, sum), then y (mean), then both (output): each row
    # register array is filled by the first pass that reads its buffer.
    x, y = torch.randn(64, 512, device=dev), torch.randn(64, 512, device=dev)
    g = Graph()
    gx, gy = g.placeholder("x", x), g.placeholder("y", y)
    centered = g.call(operator.sub, gy, g.call(torch.mean, gy, [-1], True))
    g.output((g.call(operator.mul, g.call(torch.softmax, gx, -1), centered),))
    return g, [x, y]


CASES = {
    "attention_heads": (_attention_heads, 1e-5),
    "softmax_times_centered": (_softmax_times_centered, 1e-5),
    "bn_relu_max_pool": (_bn_relu_max_pool, 1e-6),
    "bn_relu_max_pool_cl": (lambda d: _bn_relu_max_pool(d, True), 1e-6),
    "pointwise": (_pointwise, 1e-5),
    "softmax": (_softmax, 1e-5),
    "layer_norm_gelu": (_layer_norm_gelu, 1e-4),
    "layer_norm_gelu_bf16": (lambda d: _layer_norm_gelu(d, torch.bfloat16), 2e-2),
    "reductions": (_reductions, 1e-4),
    "linear_relu": (_linear_relu, 1e-4),
    "broadcast_transpose": (_broadcast_transpose, 1e-5),
    "conv_bias_relu": (_conv_bias_relu, 1e-4),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_source_compiles_for_sm90(name, tmp_path):
    _need_nvrtc()
    build, _ = CASES[name]
    g, _ = build("cpu")
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        fn = cuda.compile_graph(g, arch="sm_90")
    assert fn.arch == "sm_90"
    assert "extern \"C\" __global__" in fn.source
    assert fn.kernels(), fn.program


def test_softmax_is_one_row_block_kernel():
    _need_nvrtc()
    g, _ = _softmax("cpu")
    fn = cuda.compile_graph(g, arch="sm_90")
    (k,) = fn.kernels()
    assert "RowBlock over 64 rows" in k


def test_a_convolution_bias_is_added_in_the_kernel_after_it():
    # cuDNN would add the bias in a kernel of its own: the convolution runs without it and the relu
    # kernel adds it (graph/passes/split_conv_bias.h).
    _need_nvrtc()
    g, _ = _conv_bias_relu("cpu")
    fn = cuda.compile_graph(g, arch="sm_90")
    assert len(fn.kernels()) == 1
    bias = re.search(r"(buf\d+): f32\[8\] strides \[1\] Input #2 \(b\)", fn.program).group(1)
    kernel = fn.program[fn.program.index("kernel k0"):]
    assert f"{bias}[" in kernel and "relu" in fn.program


MOVED_CONSTANT = """def forward(self, x: "f32[2, 3]cuda:0"):
    made: "{dt}[{n}]" = {make}
    to: "{to_dt}[{n}]cuda:0" = made.to(device=torch.device('cuda:0'), dtype=torch.{to_name})
    mul: "f32[2, 3]cuda:0" = torch.mul(x, to)
    return (mul,)
"""


@pytest.mark.parametrize("make,dt,to_dt,to_name,moved", [
    ("torch.zeros([3])", "f32", "b8", "bool", True),  # timm's edgenext: zeros(shape).to(device, bool)
    ("torch.ones([3])", "f32", "f64", "float64", True),
    ("torch.arange(3)", "i64", "i64", "int64", True),
    ("torch.arange(3)", "i64", "f32", "float32", False),  # the dtype changes: only zeros and ones move
    ("torch.arange(0.0, 3.0)", "f32", "f32", "float32", False),  # float arange rounds differently on CUDA
])
def test_a_constant_made_on_the_cpu_and_moved_to_the_gpu_is_made_there(make, dt, to_dt, to_name, moved):
    _need_nvrtc()
    text = MOVED_CONSTANT.format(make=make, dt=dt, to_dt=to_dt, to_name=to_name, n=3)
    text = text.replace('"f32[2, 3]cuda:0" = torch.mul', f'"{"f64" if to_dt == "f64" else "f32"}[2, 3]cuda:0" = torch.mul')
    g = Graph.parse(text)
    if moved:
        fn = cuda.compile_graph(g, arch="sm_90")  # raised "the graph mixes CUDA tensors with CPU ..."
        assert len(fn.kernels()) == 1, fn.program
    else:
        with pytest.raises(framefuse.Unsupported, match="mixes CUDA tensors with CPU"):
            cuda.compile_graph(g, arch="sm_90")


def _vector_variant(source, fn_name):
    body = source[source.index(fn_name + "("):]
    return body[:body.index("\n}\n")]


def test_batched_product_operands_are_copied_by_vector_kernels(tmp_path):
    # q, k and v: one pointwise kernel each, reading and writing whole vectors (not torch's
    # strided copy inside matmul).
    _need_nvrtc()
    g, _ = _attention_heads("cpu")
    # NB: the products themselves, not one SDPA call
    with framefuse.config.patch(cache_dir=str(tmp_path), fuse_attention=False):
        fn = cuda.compile_graph(g, arch="sm_90")
    copies = [k.split(":")[0] for k in fn.kernels() if "Pointwise over 4096 elements" in k]
    assert len(copies) >= 3, fn.kernels()
    for name in copies[:3]:
        body = _vector_variant(fn.source, "ff_" + name + "_v")
        assert "const ff_vec<float, 4> ld0 = *reinterpret_cast" in body and "ff_vec<float, 4>*>(b" in body, body


def test_row_passes_read_the_row_once(tmp_path):
    # softmax's max, sum and output passes over a 512-wide row: the first loads it into registers,
    # the other two read those.
    _need_nvrtc()
    g = Graph()
    gx = g.placeholder("x", torch.randn(64, 512))
    g.output((g.call(torch.softmax, g.call(operator.mul, gx, 0.125), -1),))
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        fn = cuda.compile_graph(g, arch="sm_90")
    (k,) = fn.kernels()
    body = _vector_variant(fn.source, "ff_" + k.split(":")[0] + "_t64v")
    assert body.count("reinterpret_cast<const ff_vec<float, 4>*>(b0") == 1, body
    assert body.count("= rc0[") == 2, body


def test_row_registers_are_filled_before_they_are_read(tmp_path):
    _need_nvrtc()
    g, _ = _softmax_times_centered("cpu")
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        fn = cuda.compile_graph(g, arch="sm_90")
    (k,) = fn.kernels()
    body = _vector_variant(fn.source, "ff_" + k.split(":")[0] + "_t64v")
    arrays = sorted(set(re.findall(r"\b(rc\d+)\[2\];", body)))
    assert len(arrays) == 2, body
    for arr in arrays:
        uses = re.findall(arr + r"\[v\d+k\]( = |;)", body)
        assert uses and uses[0] == " = ", (arr, body)


def test_cubin_disk_cache_hit_in_second_compile(tmp_path):
    _need_nvrtc()
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        first = cuda.compile_graph(_pointwise("cpu")[0], arch="sm_90")._mod
        second = cuda.compile_graph(_pointwise("cpu")[0], arch="sm_90")._mod
    assert not first.disk_hit and second.disk_hit
    files = os.listdir(os.path.join(str(tmp_path), "cuda"))
    assert any(f.endswith(".cubin") for f in files)
    # A corrupted cache file is ignored and rebuilt.
    for f in files:
        with open(os.path.join(str(tmp_path), "cuda", f), "r+b") as fh:
            fh.seek(30)
            fh.write(b"\x00\xff\x00")
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        third = cuda.compile_graph(_pointwise("cpu")[0], arch="sm_90")._mod
    assert not third.disk_hit


def test_sin_and_cos_of_one_value_share_one_sincos(tmp_path):
    _need_nvrtc()
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        fn = cuda.compile_graph(_pointwise("cpu")[0], arch="sm_90")
    body = fn.source[fn.source.index("// kernel"):]
    assert "ff_sincos(" in body and "ff_sin(" not in body and "ff_cos(" not in body, body


@pytest.mark.parametrize("n, tail", [(1 << 16, False), ((1 << 16) + 2, True)])
def test_vector_kernel_has_a_scalar_tail_only_when_sizes_need_one(n, tail, tmp_path):
    _need_nvrtc()
    g = Graph()
    gx = g.placeholder("x", torch.randn(n))
    g.output((g.call(torch.exp, gx),))
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        fn = cuda.compile_graph(g, arch="sm_90")
    vec = fn.source[fn.source.index("ff_k0_v("):]
    vec = vec[:vec.index("\n}\n")]
    assert ("if (base + 4 <= " in vec) == tail, vec


def _block_graph():
    # Four kernels of different strategies: pointwise, row-block softmax, layer norm, a column sum.
    x = torch.randn(64, 256)
    w, b = torch.randn(256), torch.randn(256)
    g = Graph()
    gx, gw, gb = g.placeholder("x", x), g.placeholder("w", w), g.placeholder("b", b)
    s = g.call(torch.softmax, g.call(operator.mul, gx, 0.5), -1)
    ln = g.call(F.layer_norm, g.call(torch.sin, s), [256], gw, gb)
    g.output((g.call(F.gelu, ln), g.call(torch.sum, g.call(torch.exp, gx), 0)))
    return g


def test_kernels_compile_as_parallel_programs_without_scalar_fallbacks(tmp_path):
    _need_nvrtc()
    g = _block_graph()
    with framefuse.config.patch(cache_dir=str(tmp_path), cuda_compile_threads=3):
        fn = cuda.compile_graph(g, arch="sm_90")
        mod = fn._mod
        n_kernels = len(fn.kernels())
        assert n_kernels >= 2, fn.kernels()
        assert mod.programs == min(3, n_kernels)
        # Every kernel gets one eagerly compiled function at least; the scalar fallbacks of vector
        # kernels are in the inspectable source but not compiled until a misaligned launch needs them.
        in_source = fn.source.count('extern "C" __global__')
        assert n_kernels <= mod.compiled_functions < in_source, (mod.compiled_functions, in_source)
        # The whole module (every function) still compiles as one program.
        assert _C.cuda.compile_source(fn.source, "sm_90")["cubin_bytes"] > 0
        # A second compile of the same graph reads every program from the disk cache.
        again = cuda.compile_graph(g, arch="sm_90")._mod
    assert not mod.disk_hit and again.disk_hit


def test_fast_compile_level_is_checked(tmp_path):
    _need_nvrtc()
    if tuple(int(v) for v in cuda.nvrtc_status()["version"].split(".")) < (12, 8):
        pytest.skip("NVRTC before 12.8 has no -Ofast-compile")
    with framefuse.config.patch(cache_dir=str(tmp_path), cuda_fast_compile="fastest"):
        with pytest.raises(framefuse.UserError, match="cuda_fast_compile"):
            cuda.compile_graph(_pointwise("cpu")[0], arch="sm_90")
    with framefuse.config.patch(cache_dir=str(tmp_path), cuda_fast_compile=""):
        assert cuda.compile_graph(_pointwise("cpu")[0], arch="sm_90").kernels()


def test_unknown_mode_is_an_error():
    g, _ = _pointwise("cpu")
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        cuda.compile_graph(g, mode="fast")


# ---- on the GPU -------------------------------------------------------------------------------

def _check(out, ref, tol):
    if isinstance(ref, torch.Tensor):
        assert out.shape == ref.shape and out.dtype == ref.dtype and out.device == ref.device
        if ref.dtype == torch.bool:
            assert torch.equal(out, ref)
        else:
            err = (out.double() - ref.double()).norm() / max(ref.double().norm().item(), 1e-30)
            assert err <= tol and not torch.isnan(out).any(), f"relative error {err}"
        return
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        _check(o, r, tol)


@gpu
@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["default", "max-autotune", "reduce-overhead"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_equals_eager(name, mode, tmp_path):
    build, tol = CASES[name]
    torch.backends.cuda.matmul.allow_tf32 = False
    g, inputs = build("cuda")
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        fn = cuda.compile_graph(g, mode=mode)
        for _ in range(3):  # fresh inputs each call (reduce-overhead records on the second)
            # NB: centred on 1: a sum of standard normals is near 0, and its relative error is then
            # an ulp of the terms' scale over a small result (1.1e-4 once on an H200, reductions).
            fresh = [torch.randn_like(t) + 1.0 if t.is_floating_point() else t for t in inputs]
            out = fn(*fresh)
            _check(out, g.run(*fresh), tol)


@gpu
@pytest.mark.cuda
def test_gpu_misaligned_input_uses_scalar_variant():
    base = torch.randn((1 << 16) + 1, device="cuda")
    x = base[1:]  # 4-byte offset: no 16-byte vectors
    g = Graph()
    gx = g.placeholder("x", x)
    g.output((g.call(torch.add, g.call(torch.sin, gx), g.call(torch.cos, gx)),))
    fn = cuda.compile_graph(g)
    (out,) = fn(x)
    _check(out, torch.sin(x) + torch.cos(x), 1e-5)
    # kernels() reads "k0: Pointwise ...; launched k0: ff_k0 block 256x1 grid 256": the scalar function.
    assert any("; launched " in k and "_v block" not in k for k in fn.kernels()), fn.kernels()


@gpu
@pytest.mark.cuda
def test_gpu_wrong_input_layout_runs_eagerly():
    g, (x,) = _softmax("cuda")
    fn = cuda.compile_graph(g)
    y = torch.randn(1000, 64, device="cuda").t()  # same shape, other strides
    _check(fn(y), g.run(y), 1e-6)


def test_backend_runs_cpu_graphs_eagerly():
    g, (x,) = _pointwise("cpu")
    fn = cuda.backend(g, [x])
    (out,) = fn(x)
    assert torch.equal(out, torch.sin(x) + torch.cos(x))


@gpu
@pytest.mark.cuda
def test_gpu_backend_compiles_cuda_graphs():
    g, (x,) = _softmax("cuda")
    fn = cuda.backend(g, [x], mode="max-autotune")
    assert isinstance(fn, cuda.CompiledCudaGraph)
    _check(fn(x), g.run(x), 1e-5)
