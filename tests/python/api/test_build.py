"""The built extension module: what it links and what it reports about its build."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import framefuse._C as C

ROOT = Path(__file__).resolve().parents[3]
GPU_LIBS = ("libcuda.so", "libnvrtc.so")


def _needed(path: str) -> list[str]:
    out = subprocess.run(["readelf", "-d", path], check=True, capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


@pytest.fixture(scope="module")
def module_path() -> str:
    if shutil.which("readelf") is None:
        pytest.fail("readelf (binutils) is needed to inspect the module; install binutils")
    return C.__file__


def test_module_never_links_gpu_libraries(module_path):
    # The driver and NVRTC are dlopen'ed at run time so that the module
    # imports on machines without a GPU.
    needed = _needed(module_path)
    assert needed, f"readelf found no NEEDED entries in {module_path}"
    assert not [n for n in needed if n.startswith(GPU_LIBS)], needed


def test_every_shared_library_resolves(module_path):
    out = subprocess.run(["ldd", module_path], check=True, capture_output=True, text=True).stdout
    assert "not found" not in out, out
    assert not [line for line in out.splitlines() if any(g in line for g in GPU_LIBS)], out


def test_module_built_for_this_interpreter():
    suffix = C.__file__.rsplit("/", 1)[-1].removeprefix("_C")
    import sysconfig

    assert suffix == sysconfig.get_config_var("EXT_SUFFIX"), (C.__file__, sys.version)


def test_module_reports_build_facts():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert C.__version__ == meta["project"]["version"]
    assert isinstance(C.HAVE_LLVM, bool)
    assert isinstance(C.HAVE_CUDA_CODEGEN, bool)
    assert isinstance(C.LLVM_STATIC, bool)


def test_llvm_is_linked_as_the_build_says(module_path):
    # FRAMEFUSE_LLVM_STATIC (scripts/build_wheel.sh): LLVM's archives inside _C, no libLLVM to find
    # at run time, and nothing of them exported to clash with another LLVM in the process.
    needed = _needed(module_path)
    links_libllvm = any(n.startswith("libLLVM") for n in needed)
    if not C.HAVE_LLVM:
        assert not links_libllvm, needed
    elif not C.LLVM_STATIC:
        assert links_libllvm, needed
    else:
        assert not links_libllvm, needed
        # Only the entry point and std's template instantiations (default-visible in libstdc++'s
        # headers; scripts/build_wheel.sh's check says more) stay exported.
        out = subprocess.run(["nm", "-D", "--defined-only", module_path], check=True, capture_output=True, text=True)
        exported = [line.split()[-1] for line in out.stdout.splitlines() if re.search(r"\s[A-Zu]\s", line)]
        std = re.compile(r"_ZZ?NK?St|_ZSt|_ZT[IS]P?F|_ZT[ISV]St|_ZN9__gnu_cxx")
        assert "PyInit__C" in exported
        assert not [s for s in exported if s != "PyInit__C" and not std.match(s)], exported[:20]


# Symbols that only libstdc++ itself defines: iostream number formatting, locales, codecvt facets.
_LIBSTDCXX_OWN = re.compile(r"\s[TtWw]\s+(_ZNSo9_M_insertI|_ZNSt6locale|_ZNSt7codecvtI|_ZNKSt7codecvtI)")


def test_module_carries_no_copy_of_the_cxx_runtime(module_path):
    # A module that links parts of libstdc++ statically (a toolchain whose libstdc++ differs from the
    # process's, which torch loaded first) mixes two runtimes: its own stream code then calls locale
    # facets built by the other one and crashes at the first `ostream << number`.
    if shutil.which("nm") is None:
        pytest.fail("nm (binutils) is needed to inspect the module; install binutils")
    assert "libstdc++.so.6" in _needed(module_path)
    for args in (["nm", "-D", "--defined-only"], ["nm", "--defined-only"]):
        out = subprocess.run(args + [module_path], capture_output=True, text=True).stdout
        own = sorted({m.group(1) for m in _LIBSTDCXX_OWN.finditer(out)})
        assert not own, f"{module_path} defines libstdc++'s own symbols ({', '.join(own)}): link libstdc++ shared"
