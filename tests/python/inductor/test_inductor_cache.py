"""Caches of compiled graphs: in memory by structure, on disk across processes; a damaged, foreign or
hostile cache entry is ignored and rebuilt, and a cache directory others can write is not used
(inductor/kernel_cache.h; its file-system side in detail: test_disk_cache.py)."""
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


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(_C.__file__))] + env.get("PYTHONPATH", "").split(os.pathsep))
    return env


def run_child(cache_dir):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(cache_dir)], capture_output=True, text=True, env=child_env(), timeout=300)
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


FAULTS = textwrap.dedent("""
    import os, resource, stat, sys, torch, framefuse
    from framefuse import _C
    from framefuse.graph import Graph
    from framefuse.inductor import compile_graph
    framefuse.config.cache_dir = sys.argv[1]
    t = torch.linspace(-3, 3, 64 * 48).reshape(64, 48)
    ref = torch.softmax(torch.sin(t), -1)

    def run():
        _C.inductor.clear_memory_cache()  # the next compile goes to the disk cache
        g = Graph()
        x = g.placeholder("x", torch.randn(64, 48))
        g.output((g.call(torch.softmax, g.call(torch.sin, x), -1),))
        fn = compile_graph(g, None)
        (out,) = fn(t)
        return f"{fn.from_disk_cache}/{torch.allclose(out, ref, atol=1e-6)}"

    print("missing", run())
    sub = os.path.join(sys.argv[1], "inductor-cpu")
    (name,) = os.listdir(sub)
    path = os.path.join(sub, name)
    good = open(path, "rb").read()
    print("whole", run())
    # NB: a read of /dev/zero must fail in this process, not take the machine's memory.
    vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize:")][0].split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 30), resource.RLIM_INFINITY))
    damage = {
        "empty": lambda: open(path, "wb").write(b""),
        "truncated": lambda: open(path, "wb").write(good[: len(good) // 2]),
        # header, key and digest intact: only the hash over the whole entry catches it
        "object_bytes": lambda: open(path, "wb").write(good[:-100] + bytes(b ^ 0x5A for b in good[-100:-40]) + good[-40:]),
        "foreign": lambda: open(path, "wb").write(b"not a framefuse cache file at all"),
        "fifo": lambda: os.mkfifo(path),
        "link_to_dev_zero": lambda: os.symlink("/dev/zero", path),
        "writable_by_others": lambda: (open(path, "wb").write(good), os.chmod(path, 0o666)),
        "read_only": lambda: (open(path, "wb").write(good), os.chmod(path, 0o400)),
    }
    for what, make in damage.items():
        os.unlink(path)
        make()
        result = run()
        st = os.lstat(path)
        intact = stat.S_ISREG(st.st_mode) and open(path, "rb").read() == good
        print(what, result, intact)
""")


def test_damaged_or_hostile_cache_entries_are_compiled_again(tmp_path):
    # NB: a FIFO read as an entry blocks the child forever: the timeout is what fails then.
    out = subprocess.run([sys.executable, "-c", FAULTS, str(tmp_path)], capture_output=True, text=True,
                         env=child_env(), timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[:2] == ["missing False/True", "whole True/True"]
    rebuilt = ["empty", "truncated", "object_bytes", "foreign", "fifo", "link_to_dev_zero", "writable_by_others"]
    assert lines[2:] == [f"{what} False/True True" for what in rebuilt] + ["read_only True/True True"]


def test_cache_directory_writable_by_others_is_not_used(tmp_path):
    os.chmod(tmp_path, 0o777)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                         env=child_env(), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["CompiledGraph", "False", "True"]
    assert "the disk cache is off for " + str(tmp_path) in out.stderr
    assert "writable by others (mode 0777)" in out.stderr
    assert cache_files(tmp_path) == []


def test_processes_compiling_at_once_share_one_cache(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=child_env()) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        assert out.split()[0::2] == ["CompiledGraph", "True"]
    assert len(cache_files(tmp_path)) == 1  # one entry, no temporary file left
    assert run_child(tmp_path) == ["CompiledGraph", "True", "True"]


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
