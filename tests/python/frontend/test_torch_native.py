"""framefuse._torch_native: the hot-path tensor check read through torch's C++ headers.

What it must do: be built and loaded wherever torch's headers come with the torch in use, tell apart
every property the exact check compares (and the dispatch keys, as torch.compile's guards do), leave
tensors it cannot read to the exact check, and refuse to import under another torch."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import framefuse
from framefuse import _C
from check_modes import check_mode

mismatch = _C.graph.native_tensor_mismatch
TORCH_DIR = Path(torch.__file__).parent


def torch_ships_headers():
    """Whether the running torch's C++ headers are installed: inside a wheel, or Debian's
    libtorch-dev next to python3-torch (the build then must have made the module)."""
    if (TORCH_DIR / "include/torch/csrc/autograd/python_variable.h").exists():
        return True
    return str(TORCH_DIR).startswith("/usr/lib/python3/dist-packages/") and \
        Path("/usr/include/torch/csrc/autograd/python_variable.h").exists()


def test_built_and_loaded_where_torch_has_headers():
    assert _C.HAVE_TORCH_NATIVE == torch_ships_headers()
    status = _C.graph.torch_native_status()
    assert (status == "loaded") == _C.HAVE_TORCH_NATIVE, status


needs_native = pytest.mark.skipif(not _C.HAVE_TORCH_NATIVE, reason="torch's C++ headers are not installed")


@needs_native
def test_equal_tensors_match():
    x = torch.randn(3, 4)
    assert mismatch(x, torch.randn(3, 4)) == ""
    assert mismatch(x.t(), torch.randn(3, 4).t()) == ""
    w = torch.nn.Parameter(torch.randn(2))
    assert mismatch(w, torch.nn.Parameter(torch.randn(2))) == ""


@needs_native
@pytest.mark.parametrize("other, expected", [
    (lambda: torch.randn(4, 3), "sizes (4, 3) (expected (3, 4))"),
    (lambda: torch.randn(4, 3).t(), "strides (1, 3) (expected (4, 1))"),
    (lambda: torch.randn(12), "sizes (12,) (expected (3, 4))"),
    (lambda: torch.randn(3, 4, dtype=torch.float64), "dtype: c10::ScalarType 7 (expected 6)"),
    (lambda: torch.randn(3, 4, requires_grad=True), "requires_grad True (expected False)"),
    (lambda: torch.nn.Parameter(torch.randn(3, 4)), "type Parameter (expected Tensor)"),
    (lambda: torch.empty(3, 4, device="meta"), "device: c10::DeviceType"),
    (lambda: torch._neg_view(torch.randn(3, 4)), "dispatch keys differ"),
    (lambda: torch.randn(3, 4).new_ones(3, 4).requires_grad_(False), ""),
])
def test_each_property_is_compared(other, expected):
    got = mismatch(torch.randn(3, 4), other())
    assert got.startswith(expected) if expected else got == "", got


@needs_native
def test_inference_tensor_differs_in_dispatch_keys():
    with torch.inference_mode():
        y = torch.randn(3)
    assert mismatch(torch.randn(3), y).startswith("dispatch keys differ")
    assert mismatch(y, torch.randn(3)).startswith("dispatch keys differ")


@needs_native
def test_conjugate_view_differs_in_dispatch_keys():
    z = torch.randn(3, dtype=torch.complex64)
    assert mismatch(z, torch.randn(3, dtype=torch.complex64)) == ""
    assert mismatch(z, z.conj()).startswith("dispatch keys differ")


class Dispatching(torch.Tensor):
    """A wrapper subclass with __torch_dispatch__: its sizes may come from Python."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.size(), dtype=elem.dtype)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(func)


@needs_native
def test_tensors_it_cannot_read_are_left_to_the_exact_check():
    assert mismatch(torch.randn(3, 3).to_sparse(), torch.randn(3, 3)) is None
    assert mismatch(Dispatching(torch.randn(3)), torch.randn(3)) is None
    # Non-tensors and unreadable tensors never match a recorded plain tensor.
    assert mismatch(torch.randn(3, 3), torch.randn(3, 3).to_sparse()) != ""
    assert mismatch(torch.randn(3), 3.0) != ""


def double(x):
    return x * 2


@needs_native
@pytest.mark.usefixtures("fresh_framefuse")
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_guards_and_input_checks_of_cached_calls(backend):
    # Cached calls go through the native check; every property change still recompiles.
    with check_mode("native"):
        f = framefuse.compile(double, backend=backend)
        x = torch.randn(4, 4)
        for _ in range(3):
            assert torch.equal(f(x), x * 2)
        changed = [torch.randn(8, 4), torch.randn(4, 4).t(), torch.randn(4, 4, dtype=torch.float64),
                   torch.randn(4, 4, requires_grad=True)]
        for y in changed:
            assert torch.equal(f(y), y * 2)
        assert _C._frame_eval_stats()["recompiles"] == len(changed)
        hits = _C._frame_eval_stats()["cache_hits"]
        for y in [x] + changed:
            assert torch.equal(f(y), y * 2)
        assert _C._frame_eval_stats()["cache_hits"] == hits + 1 + len(changed)
        assert _C._frame_eval_stats()["recompiles"] == len(changed)


def test_refuses_another_torch():
    # The module compares torch.__version__ with the one it was built for; under another it raises
    # ImportError, and framefuse then checks tensors through torch's Python-visible API.
    if not _C.HAVE_TORCH_NATIVE:
        pytest.skip("the module was not built (test_built_and_loaded_where_torch_has_headers says why)")
    code = (
        "import torch\n"
        "real = torch.__version__\n"
        "torch.__version__ = '0.0.0+other'\n"
        "try:\n"
        "    import framefuse._torch_native\n"
        "except ImportError as e:\n"
        "    print('REFUSED', e)\n"
        "import framefuse\n"
        "from framefuse import _C\n"
        "print('STATUS', _C.graph.torch_native_status())\n"
        "f = framefuse.compile(lambda x: x * 2, backend='eager')\n"
        "x = torch.randn(3)\n"
        "print('RESULT', all(torch.equal(f(x), x * 2) for _ in range(3)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "REFUSED framefuse._torch_native was built for torch " in out.stdout
    assert "and this is torch 0.0.0+other: rebuild framefuse" in out.stdout
    assert "STATUS not importable: framefuse._torch_native was built for torch" in out.stdout
    assert "RESULT True" in out.stdout
