"""The CUDA runtime's host side without a GPU: a recording stand-in for libcuda.so.1 (built here with
the C compiler) receives module loads and launches, while buffers are CPU tensors. This checks
allocation, extern calls, output assembly, variant choice by pointer alignment and max-autotune's
bookkeeping on every machine; the kernels themselves are checked on the GPU (test_cuda_codegen.py).
"""
import os
import shutil
import subprocess
import sys

import pytest
import torch

from framefuse import cuda
from test_cuda_codegen import CASES as CODEGEN_CASES

STUB = r"""
#include <stdio.h>
typedef int CUresult;
static int dummy;
static void* cur = 0;
CUresult cuInit(unsigned f) { return 0; }
CUresult cuDriverGetVersion(int* v) { *v = 13000; return 0; }
CUresult cuDeviceGet(int* d, int i) { *d = i; return 0; }
CUresult cuDeviceGetAttribute(int* v, int a, int d) { *v = a == 75 ? 9 : a == 76 ? 0 : a == 16 ? 132 : 1 << 20; return 0; }
CUresult cuDevicePrimaryCtxRetain(void** c, int d) { *c = &dummy; return 0; }
CUresult cuCtxGetCurrent(void** c) { *c = cur; return 0; }
CUresult cuCtxSetCurrent(void* c) { cur = c; return 0; }
CUresult cuModuleLoadData(void** m, const void* img) { printf("stub: load %.3s\n", (const char*)img + 1); *m = &dummy; return 0; }
CUresult cuModuleUnload(void* m) { return 0; }
CUresult cuModuleGetFunction(void** f, void* m, const char* name) { *f = (void*)name; return 0; }
CUresult cuFuncSetAttribute(void* f, int a, int v) { return 0; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sh, void* s, void** args, void** extra) {
  printf("stub: launch grid %u block %ux%u\n", gx, bx, by); fflush(stdout); return 0; }
CUresult cuGetErrorName(CUresult r, const char** s) { *s = "STUB_ERROR"; return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) { *s = "stub"; return 0; }
CUresult cuEventCreate(void** e, unsigned f) { *e = &dummy; return 0; }
CUresult cuEventRecord(void* e, void* s) { return 0; }
CUresult cuEventSynchronize(void* e) { return 0; }
CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) { *ms = 1.0f; return 0; }
CUresult cuEventDestroy_v2(void* e) { return 0; }
CUresult cuStreamIsCapturing(void* s, int* c) { *c = 0; return 0; }
CUresult cuGraphLaunch(void* g, void* s) { return 1; }
CUresult cuGetExportTable(const void** t, const void* id) { *t = 0; return 1; }  /* NVRTC asks */
"""

SCRIPT = r"""
import sys, torch, framefuse, framefuse.cuda, framefuse.graph
from framefuse import _C
sys.path.insert(0, {tests!r})
from test_cuda_codegen import CASES

def same_structure(out, ref):
    if isinstance(ref, torch.Tensor):
        assert isinstance(out, torch.Tensor), type(out)
        assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, ref.shape, out.dtype, ref.dtype)
        return
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        same_structure(o, r)

with framefuse.config.patch(cache_dir={cache!r}):
    for name in sorted(CASES):
        for mode in ("default", "max-autotune"):
            g, inputs = CASES[name][0]("cpu")
            m = _C.cuda.compile(g._g, mode, "", True, True)
            out = m.run(*inputs)
            same_structure(out, g.run(*inputs))
            print("case", name, mode, "|".join(m.kernels()), flush=True)
    # Channels-last convolutions: 1x1 kernels (whose contiguous strides already pass torch's
    # channels-last test) are converted to the compiled strides; outputs come back in eager's. NB:
    # two of them: a graph with one convolution stays NCHW.
    import torch.nn.functional as F
    x, w, w2 = torch.randn(2, 8, 6, 6), torch.randn(16, 8, 1, 1), torch.randn(16, 16, 1, 1)
    g = framefuse.graph.Graph()
    gx, gw, gw2 = g.placeholder("x", x), g.placeholder("w", w), g.placeholder("w2", w2)
    g.output((g.call(F.conv2d, g.call(torch.relu, g.call(F.conv2d, gx, gw)), gw2),))
    with framefuse.config.patch(cuda_channels_last=True):  # off by default
        m = _C.cuda.compile(g._g, "default", "", True, True)
    (out,) = m.run(x, w, w2)
    print("channels-last", repr(m.channels_last_why), out.stride() == g.run(x, w, w2)[0].stride(), m.layout_copies,
          flush=True)
    # Weights made under inference mode have no version counter (reading it raises): they are
    # converted on every call. (The stand-in driver runs no kernel: only the host side is checked.)
    with torch.inference_mode():
        shapes = [tuple(m.run(x, torch.randn(16, 8, 1, 1), torch.randn(16, 16, 1, 1))[0].shape) for _ in range(2)]
    print("inference-mode weights", shapes == [(2, 16, 6, 6)] * 2, flush=True)
    # A conv weight behind an NHWC input is packed into an arena in each call (one launch) and the
    # convolution reads its piece through a view at the piece's offset.
    from test_cuda_models import _resnet_block_graph
    g, vals = _resnet_block_graph()
    with framefuse.config.patch(cuda_channels_last=True):
        m = _C.cuda.compile(g._g, "default", "", True, True)
    print("packing", flush=True)
    outs = [m.run(*vals) for _ in range(2)]
    shapes = [[tuple(o.shape) for o in out] for out in outs]
    print("packed", m.packed_weights, shapes == [[tuple(r.shape) for r in g.run(*vals)]] * 2, flush=True)
    # A misaligned input: the scalar variant is chosen.
    g, (x,) = CASES["pointwise"][0]("cpu")
    m = _C.cuda.compile(g._g, "default", "", True, True)
    base = torch.randn(x.numel() + 1)
    m.run(base[1:])
    print("misaligned", "|".join(m.kernels()), flush=True)
    # A wrong layout is a UserError naming the input.
    try:
        m.run(torch.randn(x.numel() * 2)[::2])
    except framefuse.UserError as e:
        print("layout error:", e, flush=True)
    # An in-place op on a graph input: the kernel stores into the caller's tensor (here only the
    # host side runs), whose version moves; a written input overlapping another one is a UserError.
    g = framefuse.graph.Graph()
    gs, gd = g.placeholder("src", torch.randn(64)), g.placeholder("dst", torch.randn(64))
    g.output((g.call(torch.Tensor.copy_, gd, gs),))
    try:
        m = _C.cuda.compile(g._g, "default", "", True, True)
    except framefuse.Unsupported as e:  # torch 1.13 cannot bump a version: such graphs run eagerly
        print("writes inputs unsupported:", e, flush=True)
    else:
        src, dst = torch.randn(64), torch.zeros(64)
        version = dst._version
        (r,) = m.run(src, dst)
        print("writes inputs", m.writes_inputs, r is dst, dst._version > version, flush=True)
        buf = torch.randn(65)
        try:
            m.run(buf[:-1], buf[1:])
        except framefuse.UserError as e:
            print("overlap error:", e, flush=True)
"""


@pytest.fixture(scope="module")
def stub_dir(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the driver stand-in")
    d = tmp_path_factory.mktemp("cudastub")
    (d / "stub.c").write_text(STUB)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(d / "stub.c")], check=True)
    return d


def test_runtime_host_side_with_driver_stand_in(stub_dir, tmp_path):
    if not cuda.nvrtc_status()["available"]:
        if os.environ.get("FRAMEFUSE_TEST_LANE") == "main":
            pytest.fail("NVRTC is required in the main lane (pip install nvidia-cuda-nvrtc)")
        pytest.skip("NVRTC not installed")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(stub_dir) + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    script = SCRIPT.format(tests=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), cache=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "stub: load ELF" in out
    cases = [line for line in out.splitlines() if line.startswith("case ")]
    assert len(cases) == 2 * len(CODEGEN_CASES), out[-2000:]
    assert all("launched" in c for c in cases), cases
    softmax = [c for c in cases if c.startswith("case softmax default")][0]
    assert "RowBlock" in softmax and "_t128v block 128x2" in softmax, softmax
    # max-autotune timed several block sizes: more launches than kernels.
    assert out.count("stub: launch") > 4 * len(cases)
    assert "channels-last '' True 0" in out, out[-2000:]
    assert "inference-mode weights True" in out, out[-2000:]
    assert "packed [2] True" in out, out[-2000:]
    assert "stub: launch" in out[out.index("packing"):out.index("packed [2]")]  # the packing kernel
    misaligned = [line for line in out.splitlines() if line.startswith("misaligned")][0]
    assert "ff_k0 block" in misaligned and "_v block" not in misaligned, misaligned
    assert "layout error: input x is float32[65536] strides [2] on cpu; the graph was compiled for float32[65536] strides [1]" in out, out[-2000:]
    if hasattr(torch.autograd.graph, "increment_version"):
        assert "writes inputs True True True" in out, out[-2000:]
        assert "overlap error: an input the graph writes in place shares memory with another input" in out, out[-2000:]
    else:
        assert "writes inputs unsupported: the graph writes a graph input in place and this torch has no" in out, out[-2000:]


MEMORY_SCRIPT = r"""
import torch, framefuse
from framefuse import _C
from framefuse.graph import Graph

torch.set_num_threads(1)
def status_mb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024

# Eight matrix products, each result (16 MB) read once by a fused relu: the runtime may hold a
# couple of them at a time, not all eight until the graph ends.
x, w = torch.randn(4096, 1024), torch.randn(1024, 1024) / 32
g = Graph()
h, gw = g.placeholder("x", x), g.placeholder("w", w)
for _ in range(8):
    h = g.call(torch.relu, g.call(torch.mm, h, gw))
g.output((h,))
with framefuse.config.patch(cache_dir={cache!r}):
    m = _C.cuda.compile(g._g, "default", "", True, True)
m.run(x, w)  # first run: module load, allocator warm-up
base = status_mb("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
m.run(x, w)
print("peak growth MB", status_mb("VmHWM") - base, flush=True)
"""


def _peak_growth_mb(stub_dir, script, cache_dir):
    """Runs a MEMORY_SCRIPT variant against the driver stand-in; the peak RSS growth it printed."""
    if not cuda.nvrtc_status()["available"]:
        pytest.skip("NVRTC not installed")
    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak RSS")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(stub_dir) + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    # NB: a fixed mmap threshold: every buffer here is mapped on allocation and unmapped when freed,
    # so the peak RSS follows what is alive. Left dynamic, glibc serves a freed 16 MB chunk's
    # successors from the heap and keeps it, and the peak moved between 0 and 96 MB from run to run.
    env["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-c", script.format(cache=str(cache_dir))], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return float(r.stdout.split("peak growth MB")[1].split()[0])


def test_runtime_releases_extern_results_after_their_last_use(stub_dir, tmp_path):
    growth = _peak_growth_mb(stub_dir, MEMORY_SCRIPT, tmp_path / "cache")
    assert growth < 5 * 16, f"peak RSS grew {growth:.0f} MB over one run: extern results held to the end?"


def test_runtime_releases_split_tuples_after_their_last_getitem(stub_dir, tmp_path):
    # nanoGPT's `c_attn(x).split(C, dim=2)`: the tuple of views keeps the whole product alive; it
    # must go after its last getitem, not at the end of the graph.
    script = MEMORY_SCRIPT.replace(
        "h = g.call(torch.relu, g.call(torch.mm, h, gw))",
        "h = g.call(torch.relu, g.getitem(g.call(torch.split, g.call(torch.mm, h, gw), 512, 1), 0))").replace(
        "w = torch.randn(4096, 1024), torch.randn(1024, 1024) / 32", "w = torch.randn(4096, 512), torch.randn(512, 1024) / 32")
    assert "torch.split" in script and "torch.randn(512, 1024)" in script
    growth = _peak_growth_mb(stub_dir, script, tmp_path / "cache")
    # Each product is 16 MB; held to the end, eight of them would add 128 MB.
    assert growth < 5 * 16, f"peak RSS grew {growth:.0f} MB over one run: split tuples held to the end?"


SYMBOLIC_SCRIPT = r"""
import torch, framefuse
from framefuse import _C, inductor

# The symbolic graphs framefuse.compile makes for CPU tensors (the CUDA backend gets the same
# graphs for CUDA ones), compiled here for the GPU with the runtime on the stand-in driver.
graphs = []
original = inductor.compile_symbolic
inductor.compile_symbolic = lambda g, ex, mode=None: graphs.append(g) or original(g, ex, mode)

def fn(x):
    return torch.relu(x) * 2 + x.sum(), torch.softmax(x, -1), x.view(x.shape[0], 2, 4).sum(1)

cf = framefuse.compile(fn)
with torch.no_grad():
    for n in (3, 5):
        cf(torch.randn(n, 8))
(g,) = graphs
with framefuse.config.patch(cache_dir={cache!r}):
    m = _C.cuda.compile(g._g, "default", "", True, True)
print("symbolic", m.symbolic, m.instances, flush=True)
for n in (3, 1000, 3, 77):
    print("size", n, flush=True)
    out = m.run(torch.randn(n, 8))
    print("shapes", [tuple(o.shape) for o in out] == [(n, 8), (n, 8), (n, 4)], flush=True)
print("instances", m.instances, m.compiled_instances, flush=True)
print("kernels", "|".join(m.kernels()), flush=True)
try:
    m.run(torch.randn(1, 8))
except framefuse.UserError as e:
    print("size 1:", e, flush=True)
# What the compiled graph cannot run runs on eager ops at the call's sizes (the view's size too).
from framefuse.cuda import CompiledCudaGraph
wrapper = CompiledCudaGraph.__new__(CompiledCudaGraph)
wrapper._graph, wrapper._mod = g, m
x = torch.randn(1, 8)
print("eager at size 1", all(torch.allclose(a, b) for a, b in zip(wrapper(x), fn(x))), flush=True)
"""


def test_a_symbolic_graph_runs_every_size_on_one_compile(stub_dir, tmp_path):
    # Dynamic shapes: the kernels take the sizes as arguments, so a new size makes an instance (the
    # program's sizes specialised) and launches the same functions over a grid of its own.
    if not cuda.nvrtc_status()["available"]:
        pytest.skip("NVRTC not installed")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(stub_dir) + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-c", SYMBOLIC_SCRIPT.format(cache=str(tmp_path / "cache"))], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "symbolic True 1" in out, out[-2000:]  # the traced sizes' instance, made when compiling
    assert out.count("shapes True") == 4, out[-2000:]
    assert "instances 4 0" in out, out[-2000:]  # traced 5, then 3, 1000 and 77; none compiled on its own
    assert "over 8*s0 elements" in out, out[-2000:]
    # The module is loaded by the first run only: later sizes launch the same functions.
    assert "stub: load" not in out[out.index("size 1000"):], out[-2000:]
    grids = {}
    size = None
    for line in out.splitlines():
        if line.startswith("size ") and line.split()[1].isdigit():
            size = int(line.split()[1])
        elif line.startswith("stub: launch grid") and size is not None:
            grids.setdefault(size, []).append(int(line.split()[3]))
    assert grids[1000] != grids[3], grids  # the grids follow the sizes
    assert "block 32x8" in out, out[-2000:]  # softmax: 8 rows a block, the last block's clamped
    assert "size 1: the inputs' sizes do not fit the graph's dynamic dimensions" in out, out[-2000:]
    assert "eager at size 1 True" in out, out[-2000:]
