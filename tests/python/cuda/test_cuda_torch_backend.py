"""On a GPU: framefuse as torch.compile's backend (framefuse.fx), and the aot_eager and cudagraphs
backends of framefuse.compile, inference and a training step, against eager."""
import copy

import pytest
import torch

import framefuse
import framefuse.fx
import inductor_util as iu
from cuda_util import fp32_and_fresh, gpu  # noqa: F401  (fixture)
from interp_models import SDPABlock

pytestmark = [pytest.mark.usefixtures("fp32_and_fresh"), pytest.mark.torch2]


def _models():
    torch.manual_seed(0)
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 5))
    return {"block": (SDPABlock(64, 4).cuda(), torch.randn(4, 32, 64, device="cuda")),
            "conv": (conv.cuda(), torch.randn(4, 3, 16, 16, device="cuda"))}


def _check_steps(model, compiled, x):
    iu.check_steps(model, compiled, x, copy.deepcopy(model), steps=3)


@gpu
@pytest.mark.parametrize("name", ["block", "conv"])
def test_torch_compile_with_framefuse_backend(name):
    import torch._dynamo
    torch._dynamo.reset()
    model, x = _models()[name]
    made = []

    def backend(gm, example_inputs, **kw):
        made.append(framefuse.fx.backend(gm, example_inputs, **kw))
        return made[-1]

    _check_steps(model, torch.compile(model, backend=backend), x)
    assert made and all(c.fallback_reason is None and c.compiles >= 1 for c in made), \
        [c.fallback_reason for c in made]
    torch._dynamo.reset()


@gpu
@pytest.mark.parametrize("backend", ["aot_eager", "cudagraphs"])
@pytest.mark.parametrize("name", ["block", "conv"])
def test_named_backends_on_cuda(name, backend):
    model, x = _models()[name]
    _check_steps(model, framefuse.compile(model, backend=backend), x)
    assert framefuse._C._frame_eval_stats()["internal_errors"] == 0
