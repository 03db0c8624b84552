"""What the CUDA test modules share: the `gpu` marker and a fixture that runs each test in full fp32
(TF32 off for matmuls and cuDNN) with fresh framefuse state and its own cache folder."""
import pytest
import torch

import framefuse

HAVE_GPU = torch.cuda.is_available()


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
