"""AOT autograd on CUDA (the default mode): graphs that need autograd run a compiled forward and a compiled
backward (framefuse._autograd) made of the CUDA code generator's kernels, against eager autograd. GPU
tests are marked `cuda` and skipped without a GPU."""
import copy
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import framefuse

from cuda_util import fp32_and_fresh, gpu  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("fp32_and_fresh")


def _close(a, b, tol=1e-4):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def _through_aot(out):
    return type(out.grad_fn).__name__ == "_FunctionBackward"


class _Block(torch.nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


@gpu
def test_training_steps_equal_eager_through_compiled_kernels():
    torch.manual_seed(0)
    ref = _Block().cuda()
    model = copy.deepcopy(ref)
    compiled = framefuse.compile(model)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        x = torch.randn(8, 16, 64, device="cuda")
        out = compiled(x)
        assert _through_aot(out)
        out.square().mean().backward()
        ref(x).square().mean().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            _close(p.grad, q.grad)
        opt.step()
        opt_ref.step()
        opt.zero_grad()
        opt_ref.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        _close(p, q)


@gpu
def test_inference_without_no_grad_runs_the_compiled_forward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(256), torch.nn.GELU()).cuda()
    compiled = framefuse.compile(model)
    x = torch.randn(64, 256, device="cuda")
    out = compiled(x)
    assert _through_aot(out)
    _close(out, model(x))


@gpu
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_transformers_training_step_gradients_equal_eager(name):
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import hf_zoo  # noqa: PLC0415

    ref = hf_zoo.build(name).cuda().train()
    model = copy.deepcopy(ref)
    compiled = framefuse.compile(model)
    inputs = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in hf_zoo.inputs(name, train=True).items()}
    hf_zoo.loss_of(compiled(**inputs)).backward()
    hf_zoo.loss_of(ref(**inputs)).backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), n
        if p.grad is not None:
            _close(p.grad, q.grad, 2e-4)


@gpu
def test_conv_batch_norm_training_equals_eager_with_running_statistics():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(inplace=True),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
    ).cuda().train()
    model = copy.deepcopy(ref)
    compiled = framefuse.compile(model)
    for _ in range(2):
        x = torch.randn(8, 3, 32, 32, device="cuda")
        with framefuse.config.patch(aot_autograd_convolutions=True):
            out = compiled(x)
        assert _through_aot(out)
        out.square().mean().backward()
        ref(x).square().mean().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            _close(p.grad, q.grad)
    for b, c in zip(model.buffers(), ref.buffers()):
        _close(b.float(), c.float())


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dropout_equals_its_explicit_mask_form_that_the_split_uses(dtype):
    """graph/autograd: a CUDA dropout in training becomes x * dropout(ones_like(x)); bit for bit eager's in
    float32 and float64 (half and bfloat16 round the scale differently and are left as they are)."""
    for shape, p in (((64, 128), 0.1), ((3, 7, 9), 0.5), ((100001,), 0.9)):
        x = torch.randn(*shape, device="cuda", dtype=dtype)
        torch.manual_seed(1)
        expected = F.dropout(x, p, True)
        torch.manual_seed(1)
        assert torch.equal(x * F.dropout(torch.ones_like(x), p, True), expected)
