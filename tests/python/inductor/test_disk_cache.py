"""The disk cache's file-system side (inductor/kernel_cache.h): verified entries, private
directories, hostile files named like entries, the size bound, processes sharing one cache.
End-to-end runs of compiled graphs through the cache are in test_inductor_cache.py."""
import hashlib
import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest

import framefuse
from framefuse import _C

cache = _C.inductor._testing
ROOT = os.geteuid() == 0  # root writes through permission bits and may chown


def area(tmp_path, name="inductor-cpu"):
    return os.path.join(str(tmp_path), name)


def child_env():
    env = dict(os.environ)
    site = os.path.dirname(os.path.dirname(_C.__file__))
    env["PYTHONPATH"] = os.pathsep.join([site] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def test_entries_are_private_and_carry_a_sha256_of_everything_before_it(tmp_path):
    d = area(tmp_path / "root")
    cache.cache_store(d, "k1.ffobj", "k1", b"\x7fELF object")
    assert cache.cache_load(d, "k1.ffobj", "k1") == b"\x7fELF object"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.dirname(d)).st_mode) == 0o700
    path = os.path.join(d, "k1.ffobj")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = open(path, "rb").read()
    assert data[-32:] == hashlib.sha256(data[:-32]).digest()  # our SHA-256 is the standard one
    assert sorted(os.listdir(d)) == ["k1.ffobj"]  # no temporary file left behind


@pytest.mark.parametrize("damage", [
    "payload byte", "header byte", "key byte", "digest byte", "truncated", "empty", "garbage", "appended"])
def test_damaged_entry_reads_as_absent_and_is_rewritten(tmp_path, damage):
    d = area(tmp_path)
    payload = bytes(range(256)) * 8
    cache.cache_store(d, "e.ffobj", "e", payload)
    path = os.path.join(d, "e.ffobj")
    good = bytearray(open(path, "rb").read())
    n = len(good)
    bad = {
        "payload byte": lambda b: b[:n // 2] + bytes([b[n // 2] ^ 1]) + b[n // 2 + 1:],
        "header byte": lambda b: b[:9] + bytes([b[9] ^ 1]) + b[10:],
        "key byte": lambda b: b[:20] + b"f" + b[21:],
        "digest byte": lambda b: b[:-1] + bytes([b[-1] ^ 0x80]),
        "truncated": lambda b: b[:n - 40],
        "empty": lambda b: b"",
        "garbage": lambda b: os.urandom(n),
        "appended": lambda b: b + b"\0",
    }[damage](bytes(good))
    open(path, "wb").write(bad)
    assert cache.cache_load(d, "e.ffobj", "e") is None
    cache.cache_store(d, "e.ffobj", "e", payload)
    assert cache.cache_load(d, "e.ffobj", "e") == payload


def test_valid_entry_under_another_name_is_not_loaded(tmp_path):
    d = area(tmp_path)
    cache.cache_store(d, "a.ffobj", "a", b"code of a")
    os.rename(os.path.join(d, "a.ffobj"), os.path.join(d, "b.ffobj"))
    assert cache.cache_load(d, "b.ffobj", "b") is None
    assert cache.cache_load(d, "missing.ffobj", "missing") is None


HOSTILE = textwrap.dedent("""
    import os, resource, sys, threading, time
    from framefuse import _C
    cache = _C.inductor._testing
    d = sys.argv[1]
    cache.cache_store(d, "good.ffobj", "good", b"good-bytes")
    os.mkfifo(os.path.join(d, "fifo.ffobj"))
    os.symlink("/dev/zero", os.path.join(d, "zero.ffobj"))
    os.symlink(os.path.join(d, "good.ffobj"), os.path.join(d, "link.ffobj"))
    os.mkdir(os.path.join(d, "dir.ffobj"))
    # NB: a read of /dev/zero must fail here, not take the machine's memory.
    vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize:")][0].split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))
    out = []
    for name in ["fifo", "zero", "link", "dir", "good"]:
        t0 = time.time()
        r = cache.cache_load(d, name + ".ffobj", "good" if name == "link" else name)
        out.append(f"{name}={r!r}:{time.time() - t0 < 5}")
    print(" ".join(out))
""")


def test_fifo_device_link_and_directory_named_like_entries_are_not_read(tmp_path):
    d = area(tmp_path)
    os.makedirs(d, mode=0o700)
    r = subprocess.run([sys.executable, "-c", HOSTILE, d], capture_output=True, text=True, env=child_env(), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["fifo=None:True", "zero=None:True", "link=None:True", "dir=None:True",
                                "good=b'good-bytes':True"]


@pytest.mark.parametrize("which", ["area", "root"])
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_directory_writable_by_others_is_refused_with_one_warning(tmp_path, capfd, which, mode):
    framefuse.set_logs("")  # NB: the warning needs no log settings: without a sink it goes to stderr
    root = str(tmp_path / "root")
    d = area(root)
    cache.cache_store(d, "e.ffobj", "e", b"payload")
    assert cache.cache_load(d, "e.ffobj", "e") == b"payload"
    os.chmod(d if which == "area" else root, mode)
    assert not cache.cache_dir_usable(d)
    assert cache.cache_load(d, "e.ffobj", "e") is None  # a valid entry, but anyone could have put it there
    cache.cache_store(d, "f.ffobj", "f", b"other")
    assert not os.path.exists(os.path.join(d, "f.ffobj"))
    refusals = [line for line in capfd.readouterr().err.splitlines() if "the disk cache is off for " + d in line]
    assert len(refusals) == 1, refusals
    assert refusals[0].startswith("framefuse.inductor: ")
    assert "writable by " + ("others" if mode & 0o002 else "its group") in refusals[0]
    os.chmod(d if which == "area" else root, 0o700)
    assert cache.cache_load(d, "e.ffobj", "e") == b"payload"


@pytest.mark.skipif(not ROOT, reason="needs root to give files to another user")
def test_directory_or_entry_of_another_user_is_refused(tmp_path):
    d = area(tmp_path)
    cache.cache_store(d, "e.ffobj", "e", b"payload")
    os.chown(os.path.join(d, "e.ffobj"), 12345, 12345)
    assert cache.cache_load(d, "e.ffobj", "e") is None
    os.chown(os.path.join(d, "e.ffobj"), 0, 0)
    assert cache.cache_load(d, "e.ffobj", "e") == b"payload"
    os.chown(d, 12345, 12345)
    assert not cache.cache_dir_usable(d)
    assert cache.cache_load(d, "e.ffobj", "e") is None


def test_entry_writable_by_others_is_not_read_and_read_only_entry_is(tmp_path):
    d = area(tmp_path)
    cache.cache_store(d, "e.ffobj", "e", b"payload")
    path = os.path.join(d, "e.ffobj")
    os.chmod(path, 0o666)
    assert cache.cache_load(d, "e.ffobj", "e") is None
    os.chmod(path, 0o400)
    assert cache.cache_load(d, "e.ffobj", "e") == b"payload"
    cache.cache_store(d, "e.ffobj", "e", b"payload 2")  # replaced by rename, whatever its mode
    assert cache.cache_load(d, "e.ffobj", "e") == b"payload 2"


@pytest.mark.skipif(ROOT, reason="root writes into read-only directories")
def test_read_only_directory_is_read_and_never_written(tmp_path):
    d = area(tmp_path)
    cache.cache_store(d, "e.ffobj", "e", b"payload")
    os.chmod(d, 0o500)
    try:
        assert cache.cache_load(d, "e.ffobj", "e") == b"payload"
        cache.cache_store(d, "f.ffobj", "f", b"other")
        assert sorted(os.listdir(d)) == ["e.ffobj"]
    finally:
        os.chmod(d, 0o700)


def test_size_bound_removes_the_least_recently_used_entries(tmp_path):
    cpu, cuda = area(tmp_path, "inductor-cpu"), area(tmp_path, "cuda")
    blob = os.urandom(100 * 1024)
    stale = os.path.join(cpu, "dead.ffobj.tmp.1.2.3")
    with framefuse.config.patch(cache_size_mb=1):
        cache.cache_store(cpu, "first.ffobj", "first", blob)
        open(stale, "wb").write(blob)
        os.utime(stale, (time.time() - 7200, time.time() - 7200))  # left by a writer that died
        for i in range(24):
            cache.cache_store(cpu if i % 2 else cuda, f"e{i}", f"e{i}", blob)
            if i % 4 == 0:  # a hit makes an entry recent
                time.sleep(0.01)
                assert cache.cache_load(cpu, "first.ffobj", "first") == blob
            time.sleep(0.01)
    files = [os.path.join(a, f) for a in (cpu, cuda) for f in os.listdir(a)]
    assert sum(os.path.getsize(f) for f in files) <= 1 << 20
    names = {os.path.basename(f) for f in files}
    assert "first.ffobj" in names and "e23" in names and "e22" in names
    assert "e0" not in names and "e1" not in names
    assert not os.path.exists(stale)


SHARED = textwrap.dedent("""
    import hashlib, sys
    import framefuse
    from framefuse import _C
    cache = _C.inductor._testing
    framefuse.config.cache_size_mb = 1  # about 4 MB of entries: pruned while the others read
    d, me = sys.argv[1], int(sys.argv[2])
    def payload(k):
        return hashlib.sha256(str(k).encode()).digest() * (1000 + 100 * k)
    hits = 0
    for i in range(400):
        # NB: each key three times running: its entry is then the newest, which pruning (least
        # recently used first) keeps, so every process has hits whatever the others do.
        k = ((i // 3) * 7 + me) % 40
        got = cache.cache_load(d, f"k{k}", f"k{k}")
        if got is None:
            cache.cache_store(d, f"k{k}", f"k{k}", payload(k))
        else:
            assert got == payload(k), k
            hits += 1
    print(hits)
""")


def test_processes_sharing_one_cache_only_ever_read_whole_entries(tmp_path):
    d = area(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-c", SHARED, d, str(me)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=child_env()) for me in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert int(out) > 0
    assert not [f for f in os.listdir(d) if ".tmp." in f]
