"""What the CUDA test modules share: the `gpu` marker, the NVRTC check of compile-only tests and a
fixture that runs each test in full fp32 (TF32 off for matmuls and cuDNN) with fresh framefuse state
and its own cache folder."""
import os

import pytest
import torch

import framefuse

HAVE_GPU = torch.cuda.is_available()


def need_nvrtc():
    """Skips a compile-only test where NVRTC is missing, except in the main lane, which installs
    nvidia-cuda-nvrtc (scripts/requirements-main.txt): there a missing NVRTC is a failure."""
    from framefuse import cuda  # noqa: PLC0415
    st = cuda.nvrtc_status()
    if st["available"]:
        return
    if os.environ.get("FRAMEFUSE_TEST_LANE") == "main":
        pytest.fail("NVRTC is required in the main lane (pip install nvidia-cuda-nvrtc): " + st["error"])
    pytest.skip("NVRTC not installed: " + st["error"].splitlines()[0])


def gpu(test):
    """Marked `cuda` and skipped without a GPU."""
    return pytest.mark.cuda(pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")(test))


@pytest.fixture()
def fp32_and_fresh(tmp_path):  # noqa: PT004
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    framefuse.reset()
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        yield
    framefuse.reset()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old
