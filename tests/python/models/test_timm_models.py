"""timm's image models through framefuse.compile, differential against eager (issue #28 "Real models").

The zoo is the issue's four: resnet50, convnext_tiny, efficientnet_b0 and vit_small, built by
`timm.create_model` with random weights (nothing downloaded), 10 classes, batch 2 at 64x64 (ViT with
`img_size=64`). Each is one graph with no break and no recompile; its inference matches eager on both
backends (bit for bit on the eager backend, inductor_util.tolerance on inductor), and so do a training
step's loss, gradients and batch-norm running statistics. On a GPU (marked `cuda`), inference on CUDA too.

timm needs torchvision. torchvision imports beside the Debian lane's torch 1.13 (python3-torchvision), and
scripts/test.sh installs timm there from PyPI (scripts/requirements-debian.txt). PyPI's torchvision does
not import beside the main lane's torch 2.13, so the main lane has no timm and these tests skip there; on
the Debian lane a missing timm fails them instead.
"""

import os

import pytest

if os.environ.get("FRAMEFUSE_TEST_LANE") != "debian":
    pytest.importorskip("timm", reason="timm needs torchvision, which this torch has none of")

import timm  # noqa: E402
import torch  # noqa: E402

import framefuse  # noqa: E402
import inductor_util as iu  # noqa: E402
from cuda_util import fp32_and_fresh, gpu  # noqa: E402, F401  (fixture)

pytestmark = pytest.mark.usefixtures("fresh_framefuse")

BACKENDS = ["eager", "inductor"]
ZOO = {
    "resnet50": {},
    "convnext_tiny": {},
    "efficientnet_b0": {},
    "vit_small_patch16_224": {"img_size": 64},
}


def build(name):
    torch.manual_seed(0)
    return timm.create_model(name, num_classes=10, **ZOO[name])


def images():
    return torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))


def assert_close(got, want, backend, what):
    if backend == "eager":
        assert torch.equal(got, want), f"{what}: max abs difference {(got - want).abs().max().item()}"
    else:
        torch.testing.assert_close(got, want, **iu.tolerance(want.dtype), msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(ZOO))
def test_timm_inference_matches_eager(name, backend):
    model = build(name).eval()
    x = images()
    compiled = framefuse.compile(model, backend=backend)
    with torch.no_grad():
        want = model(x)
        for _ in range(2):
            assert_close(compiled(x), want, backend, "logits")
    stats = framefuse._C._frame_eval_stats()
    assert stats["frames_compiled"] >= 1 and stats["internal_errors"] == 0, stats


@pytest.mark.parametrize("name", list(ZOO))
def test_timm_inference_is_one_graph_without_recompiles(name):
    model = build(name).eval()
    x = images()
    with torch.no_grad():
        report = framefuse.explain(model)(x)
        assert (report.graph_count, report.graph_break_count) == (1, 0), [str(b) for b in report.break_reasons]
        framefuse.reset()
        compiled = framefuse.compile(model, backend="eager")
        for _ in range(3):
            compiled(x)
    stats = framefuse._C._frame_eval_stats()
    assert (stats["frames_compiled"], stats["recompiles"], stats["graph_breaks"]) == (1, 0, 0), stats


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(ZOO))
def test_timm_training_step_matches_eager(name, backend):
    """Cross entropy of the logits, backward, on two calls: the loss, every parameter's gradient and every
    buffer (batch norm's running statistics, updated by both calls) are eager's. Two models with one set of
    weights, so each side's buffers see only its own calls."""
    model, twin = build(name).train(), build(name).train()
    x, y = images(), torch.tensor([3, 7])
    compiled = framefuse.compile(twin, backend=backend)

    def step(m, params):
        for p in params.parameters():
            p.grad = None
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in params.named_parameters()}

    for _ in range(2):
        want_loss, want_grads = step(model, model)
        loss, grads = step(compiled, twin)
        tol = iu.tolerance(torch.float32)
        torch.testing.assert_close(loss, want_loss, **tol)
        assert list(grads) == list(want_grads)
        for n, g in want_grads.items():
            torch.testing.assert_close(grads[n], g, **tol, msg=lambda m: f"grad of {n}: {m}")
        for (n, b), (_, want) in zip(twin.named_buffers(), model.named_buffers()):
            torch.testing.assert_close(b, want, **tol, msg=lambda m: f"buffer {n}: {m}")


@gpu
@pytest.mark.usefixtures("fp32_and_fresh")
@pytest.mark.parametrize("name", list(ZOO))
def test_timm_cuda_inference_is_one_graph_and_matches_eager(name):
    model = build(name).cuda().eval()
    x = images().cuda()
    compiled = framefuse.compile(model)
    with torch.no_grad():
        want = model(x)
        for _ in range(2):
            torch.testing.assert_close(compiled(x), want, rtol=1e-4, atol=1e-4)
    stats = framefuse._C._frame_eval_stats()
    assert (stats["frames_compiled"], stats["graph_breaks"], stats["internal_errors"]) == (1, 0, 0), stats
