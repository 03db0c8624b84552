"""Installing framefuse: pip's isolated build of the tree, and the self-contained wheel of
scripts/build_wheel.sh. The builds themselves take minutes, so CI checks what they rely on: the
declared build requirements, the torch probe under pip's isolation (src/torch_probe.cmake, run by
cmake -P), the wheel script's settings and its check. A built wheel is tested when
FRAMEFUSE_TEST_WHEEL names it (benchmarks/results/wheel-2026-11-29.md has that run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BUILD_WHEEL = ROOT / "scripts" / "build_wheel.sh"


def _cmake() -> str:
    """A cmake executable; the pip package's binary first (its `cmake` entry point is a Python script)."""
    try:
        import cmake

        path = Path(cmake.CMAKE_BIN_DIR) / "cmake"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    found = shutil.which("cmake")
    if found is None:
        pytest.skip("no cmake here to run src/torch_probe.cmake with")
    return found


def _probe_torch(tmp_path: Path, python: Path) -> dict[str, str]:
    """Runs ff_probe_torch(python) as the top-level CMakeLists.txt does; returns the FF_TORCH_* it set."""
    script = tmp_path / "probe.cmake"
    script.write_text(
        f'include("{ROOT / "src" / "torch_probe.cmake"}")\n'
        f'ff_probe_torch("{python}")\n'
        'foreach(v FOUND VERSION DIR CXX11_ABI PROBE)\n'
        '  message("FF_TORCH_${v}=${FF_TORCH_${v}}")\n'
        "endforeach()\n"
    )
    out = subprocess.run([_cmake(), "-P", str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return dict(line.split("=", 1) for line in out.stderr.splitlines() if line.startswith("FF_TORCH_"))


def _wrapper(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _torch_dir_or_skip() -> str:
    try:
        import torch
    except ImportError:
        pytest.skip("needs torch")
    return os.path.dirname(torch.__file__)


def test_pyproject_declares_the_build_requirements_and_not_torch():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requires = [re.split(r"[<>=!~\[ ;]", r)[0].lower() for r in meta["build-system"]["requires"]]
    assert "scikit-build-core" in requires and "pybind11" in requires, requires
    # NB: cmake and ninja come from scikit-build-core's get_requires_for_build_wheel, only where the
    # machine has none as new as these minimums (pyproject.toml says why).
    skb = meta["tool"]["scikit-build"]
    assert skb["cmake"]["version"] and skb["ninja"]["version"]
    assert "torch" not in requires
    assert not [d for d in meta["project"]["dependencies"] if d.lower().startswith("torch")]


def test_torch_probe_sees_the_target_environment_through_pips_isolation(tmp_path):
    torch_dir = _torch_dir_or_skip()
    # What pip's isolated build does to the interpreter that configures framefuse: PYTHONPATH names
    # a sitecustomize.py that drops the environment's site-packages, and user site is off.
    iso = tmp_path / "pip-isolation"
    iso.mkdir()
    (iso / "sitecustomize.py").write_text(
        "import sys\nsys.path[:] = [p for p in sys.path if not p.endswith(('site-packages', 'dist-packages'))]\n"
    )
    isolated = _wrapper(tmp_path, "isolated-python", f'PYTHONPATH="{iso}" PYTHONNOUSERSITE=1 exec "{sys.executable}" "$@"')
    hidden = subprocess.run([str(isolated), "-c", "import torch"], capture_output=True)
    assert hidden.returncode != 0, "the simulated isolation did not hide torch"

    found = _probe_torch(tmp_path, isolated)
    assert found["FF_TORCH_FOUND"] == "TRUE", found
    assert found["FF_TORCH_PROBE"] == "-E"
    assert Path(found["FF_TORCH_DIR"]).resolve() == Path(torch_dir).resolve()


def test_torch_probe_asks_plainly_first(tmp_path):
    _torch_dir_or_skip()
    import torch

    found = _probe_torch(tmp_path, Path(sys.executable))
    assert (found["FF_TORCH_FOUND"], found["FF_TORCH_PROBE"]) == ("TRUE", "")
    assert found["FF_TORCH_VERSION"] == torch.__version__
    assert found["FF_TORCH_CXX11_ABI"] == str(int(torch._C._GLIBCXX_USE_CXX11_ABI))


def test_torch_probe_without_torch_finds_none(tmp_path):
    # -S: no site-packages at all, as an interpreter without torch; the build then goes on without
    # _torch_native (the pure lanes build that way).
    bare = _wrapper(tmp_path, "bare-python", f'exec "{sys.executable}" -S "$@"')
    assert _probe_torch(tmp_path, bare)["FF_TORCH_FOUND"] == "FALSE"


def _cmake_declared() -> set[str]:
    text = (ROOT / "CMakeLists.txt").read_text()
    return set(re.findall(r"option\((FRAMEFUSE_\w+)", text)) | set(re.findall(r"set\((FRAMEFUSE_\w+) [^)]*CACHE", text))


def test_build_wheel_settings_are_cmake_options():
    script = BUILD_WHEEL.read_text()
    defined = re.findall(r"cmake\.define\.(FRAMEFUSE_\w+)=(\w+)", script)
    assert dict(defined) == {"FRAMEFUSE_LLVM_STATIC": "ON", "FRAMEFUSE_WITH_TORCH_NATIVE": "OFF"}, defined
    missing = {name for name, _ in defined} - _cmake_declared()
    assert not missing, f"scripts/build_wheel.sh sets {missing}, which CMakeLists.txt does not declare"
    for path in ("inductor/CMakeLists.txt", "src/CMakeLists.txt"):
        assert "FRAMEFUSE_LLVM_STATIC" in (ROOT / path).read_text(), f"{path} ignores FRAMEFUSE_LLVM_STATIC"


def _wheel_with(tmp_path: Path, module: str, extra: dict[str, str] | None = None) -> Path:
    """A wheel-shaped zip whose framefuse/_C is MODULE (the check reads nothing else)."""
    wheel = tmp_path / "framefuse-0.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(module, "framefuse/_C" + sysconfig.get_config_var("EXT_SUFFIX"))
        for name, source in (extra or {}).items():
            z.write(source, name)
    return wheel


def _check(wheel: Path) -> subprocess.CompletedProcess:
    if shutil.which("readelf") is None or shutil.which("nm") is None:
        pytest.fail("readelf and nm (binutils) are needed to check a wheel; install binutils")
    return subprocess.run(["bash", str(BUILD_WHEEL), "--check", str(wheel)], capture_output=True, text=True, timeout=300)


def test_build_wheel_check_rejects_a_module_that_needs_libllvm(tmp_path):
    import framefuse._C as C

    if not C.HAVE_LLVM or C.LLVM_STATIC:
        pytest.skip("this build's _C does not link the shared libLLVM")
    out = _check(_wheel_with(tmp_path, C.__file__))
    assert out.returncode != 0
    assert re.search(r"needs .*libLLVM[-.\w]*\.so.*: not self-contained", out.stderr), out.stderr


def test_build_wheel_check_rejects_torch_specific_modules(tmp_path):
    # The torch-built modules import only under the torch they were built for: not in a wheel.
    import framefuse._C as C

    extra = {"framefuse/_torch_native" + sysconfig.get_config_var("EXT_SUFFIX"): C.__file__}
    out = _check(_wheel_with(tmp_path, C.__file__, extra))
    assert out.returncode != 0 and "torch-specific modules" in out.stderr, out.stderr


# The one slow test: FRAMEFUSE_TEST_WHEEL=dist/framefuse-*.whl. It installs the wheel into a folder
# of its own and compiles a model there with the CPU code generator.
WHEEL = os.environ.get("FRAMEFUSE_TEST_WHEEL")

_COMPILE_IN_WHEEL = textwrap.dedent("""
    import ctypes, ctypes.util, logging, sys
    # Another LLVM in the process first, its symbols global (as a module linking the system's
    # libLLVM would load it): the wheel's LLVM must not bind to it.
    other = ctypes.util.find_library("LLVM-14")
    if other:
        ctypes.CDLL(other, mode=ctypes.RTLD_GLOBAL)
    print("OTHER_LLVM", other)
    import torch
    import framefuse
    from framefuse import _C
    assert framefuse.__file__.startswith(sys.argv[1]), framefuse.__file__
    assert _C.LLVM_STATIC and _C.inductor.codegen_available(), (_C.LLVM_STATIC, _C.HAVE_LLVM)
    records = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())
    logging.getLogger("framefuse").addHandler(handler)
    logging.getLogger("framefuse").setLevel(logging.INFO)
    framefuse.set_logs("output_code")
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU())
    compiled = framefuse.compile(model)
    x = torch.randn(8, 64)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    code = "\\n".join(records)
    assert "kernel k0" in code, code[:2000]
    print("TORCH_NATIVE", _C.graph.torch_native_status())
    print("OK", _C.__file__)
""")


@pytest.mark.skipif(not WHEEL, reason="set FRAMEFUSE_TEST_WHEEL to a wheel built by scripts/build_wheel.sh")
def test_built_wheel_installs_and_compiles_with_its_own_llvm(tmp_path):
    wheel = Path(WHEEL).resolve()
    out = _check(wheel)
    assert out.returncode == 0, out.stderr
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, timeout=300)
    (module,) = (target / "framefuse").glob("_C*.so")
    ldd = subprocess.run(["ldd", str(module)], check=True, capture_output=True, text=True).stdout
    assert "libLLVM" not in ldd and "not found" not in ldd, ldd
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEFUSE_")}
    env["PYTHONPATH"] = str(target)
    run = subprocess.run([sys.executable, "-c", _COMPILE_IN_WHEEL, str(target)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"OK {module}" in run.stdout
