"""Seed models end to end through framefuse.compile: a resnet50 training step with AdamW (the
compiled module's forward in train mode, BatchNorm running stats included), and torchvision's own
resnet18 / mobilenet_v2 captured as one graph where torchvision is importable (Debian's lane and the
GPU machine; PyPI has no CPU build of it, so the main lane uses the same architectures written in
interp_models.py)."""
import pytest
import torch
import torch.nn as nn

import framefuse
import interp_models as M
from framefuse import _C


pytestmark = pytest.mark.usefixtures("fresh_framefuse")


def _resnet50():
    try:
        import torchvision
        return torchvision.models.resnet50(num_classes=10)
    except ImportError:
        return M.resnet50(num_classes=10)


def test_resnet50_training_step_with_adamw_matches_eager():
    torch.manual_seed(0)
    ref = _resnet50().train()
    model = _resnet50().train()
    model.load_state_dict(ref.state_dict())
    compiled = framefuse.compile(model, backend="eager")
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    opt = torch.optim.AdamW(compiled.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(2, 3, 64, 64)
    y = torch.randint(0, 10, (2,))
    for _ in range(2):
        losses = []
        for m, o in ((ref, opt_ref), (compiled, opt)):
            o.zero_grad(set_to_none=True)
            loss = loss_fn(m(x), y)
            loss.backward()
            o.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-5)
    # Parameters after two AdamW steps and the BatchNorm running statistics (mutated in place by
    # the compiled forward) are eager's.
    for (name, p), q in zip(ref.state_dict().items(), model.state_dict().values()):
        if p.dtype.is_floating_point:
            torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-4, msg=name)
        else:
            assert torch.equal(q, p), name
    s = _C._frame_eval_stats()
    assert s["frames_compiled"] >= 1 and s["graph_breaks"] == 0


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_torchvision_model_is_one_graph(name):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10).eval()
    x = torch.randn(2, 3, 64, 64)
    compiled = framefuse.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        expected = model(x)
        got = compiled(x)
        again = compiled(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(again, got)
    s = _C._frame_eval_stats()
    assert s["frames_compiled"] == 1 and s["graph_breaks"] == 0 and s["cache_hits"] >= 1
