"""Caches of compiled graphs: in memory by structure, on disk across processes, and a corrupt or
foreign cache file is ignored and rebuilt."""
import os
import subprocess
import sys
import textwrap

import torch

from framefuse import _C
from framefuse.graph import Graph
from framefuse.inductor import compile_graph
from inductor_util import needs_codegen

pytestmark = needs_codegen

SCRIPT = textwrap.dedent("""
    import sys, torch, framefuse
    from framefuse.graph import Graph
    from framefuse.inductor import compile_graph
    framefuse.config.cache_dir = sys.argv[1]
    g = Graph()
    x = g.placeholder("x", torch.randn(64, 48))
    g.output((g.call(torch.softmax, g.call(torch.sin, x), -1),))
    fn = compile_graph(g, None)
    t = torch.linspace(-3, 3, 64 * 48).reshape(64, 48)
    (out,) = fn(t)
    ok = torch.allclose(out, torch.softmax(torch.sin(t), -1), atol=1e-6)
    print(type(fn).__name__, fn.from_disk_cache, ok)
""")


def run_child(cache_dir):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(_C.__file__))] + env.get("PYTHONPATH", "").split(os.pathsep))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(cache_dir)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def cache_files(d):
    sub = os.path.join(d, "inductor-cpu")
    return [os.path.join(sub, f) for f in os.listdir(sub)] if os.path.isdir(sub) else []


def test_disk_cache_across_processes(tmp_path):
    assert run_child(tmp_path) == ["CompiledGraph", "False", "True"]
    files = cache_files(tmp_path)
    assert len(files) == 1
    assert run_child(tmp_path) == ["CompiledGraph", "True", "True"]


def test_corrupt_cache_file_is_rebuilt(tmp_path):
    run_child(tmp_path)
    (path,) = cache_files(tmp_path)
    good = open(path, "rb").read()
    corruptions = [
        b"",                                   # empty
        good[: len(good) // 2],                # truncated
        good[:-40] + bytes(b ^ 0xFF for b in good[-40:]),            # object bytes changed (checksum)
        b"not a framefuse cache file at all",  # foreign
    ]
    for bad in corruptions:
        with open(path, "wb") as f:
            f.write(bad)
        assert run_child(tmp_path) == ["CompiledGraph", "False", "True"]
        assert open(path, "rb").read() == good  # rewritten


def test_memory_cache_by_structure():
    def make():
        g = Graph()
        x = g.placeholder("x", torch.randn(8, 8))
        g.output((g.call(torch.cos, g.call(torch.mul, x, 3.0)),))
        return g
    a = compile_graph(make(), None)
    b = compile_graph(make(), None)
    assert b.from_memory_cache
    g = Graph()
    x = g.placeholder("x", torch.randn(8, 8))
    g.output((g.call(torch.cos, g.call(torch.mul, x, 4.0)),))  # another constant: another program
    c = compile_graph(g, None)
    assert not c.from_memory_cache
    t = torch.randn(8, 8)
    assert torch.equal(a(t)[0], b(t)[0])
    assert torch.allclose(c(t)[0], torch.cos(t * 4.0), atol=1e-6)
