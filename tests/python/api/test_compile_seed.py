"""The seed workloads compiled end to end (interpreter + hook + guards + runner), against eager."""
import pytest
import torch
from torch import nn

import framefuse
from framefuse import _C


pytestmark = pytest.mark.usefixtures("fresh_framefuse")


def stats():
    return _C._frame_eval_stats()


def evaluate_features(x, w):
    return torch.relu(torch.mm(x, w))


def test_evaluate_features_both_spellings():
    x, w = torch.randn(64, 128), torch.randn(128, 128)
    f = framefuse.compile(evaluate_features, backend="eager")
    assert torch.equal(f(x, w), evaluate_features(x, w))
    assert torch.equal(f(x, w), evaluate_features(x, w))

    @framefuse.compile(backend="eager")
    def evaluate_features_2(x, w):
        return torch.relu(torch.mm(x, w))
    assert torch.equal(evaluate_features_2(x, w), evaluate_features(x, w))
    s = stats()
    assert s["frames_compiled"] == 2 and s["cache_hits"] == 1 and s["graph_breaks"] == 0


class FeatureModel(nn.Module):
    def __init__(self, in_hw=32):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.fc = nn.Linear(16 * in_hw * in_hw, 10)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)), 1))


def test_conv_feature_model():
    model = FeatureModel().eval()
    c = framefuse.compile(model, backend="eager")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(c(x), model(x), atol=1e-5)
        assert torch.allclose(c(x), model(x), atol=1e-5)
    assert stats()["frames_compiled"] == 1


def test_mis_sized_feature_model_raises_what_eager_raises():
    model = FeatureModel(in_hw=16).eval()  # fc expects 16*16*16 features, gets 16*32*32
    c = framefuse.compile(model, backend="eager")
    x = torch.randn(2, 3, 32, 32)
    with pytest.raises(Exception) as eager:
        model(x)
    for _ in range(2):
        with pytest.raises(type(eager.value)):
            c(x)
    # The compiled model keeps working on a model that fits.
    good = framefuse.compile(FeatureModel(in_hw=32).eval(), backend="eager")
    good(x)


def test_linear_10_5():
    lin = nn.Linear(10, 5)
    c = framefuse.compile(lin, backend="eager")
    x = torch.randn(4, 10)
    assert torch.allclose(c(x), lin(x))
    assert stats()["frames_compiled"] == 1


def sin_cos(x):
    return torch.sin(x) + torch.cos(x)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_sin_cos(backend):
    f = framefuse.compile(sin_cos, backend=backend)
    x = torch.randn(4096)
    # The code generator's vector sin/cos differ from torch's by a few ulp.
    torch.testing.assert_close(f(x), sin_cos(x))
    assert stats()["frames_compiled"] == 1


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)


def test_mlp_training_loop_matches_eager():
    torch.manual_seed(0)
    ref = MLP()
    model = MLP()
    model.load_state_dict(ref.state_dict())
    compiled = framefuse.compile(model, backend="eager")
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-3)
    opt = torch.optim.Adam(compiled.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(32, 128)
    y = torch.randint(0, 10, (32,))
    for _ in range(3):
        for m, o in ((ref, opt_ref), (compiled, opt)):
            o.zero_grad(set_to_none=True)
            loss = loss_fn(m(x), y)
            loss.backward()
            o.step()
    for p, q in zip(ref.parameters(), model.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    assert stats()["frames_compiled"] >= 1 and stats()["graph_breaks"] == 0
