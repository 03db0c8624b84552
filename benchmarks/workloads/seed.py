"""The seed workloads: the small programs every compiler tutorial starts with."""

import torch
from torch import nn

from . import Case, pick, tensor_bytes, torchvision_model, train_step, workload
from .nets import MLP, FeatureModel, ResNetStyle


def evaluate_features(x, w):
    return torch.relu(torch.mm(x, w))


@workload("evaluate_features", "seed", description="relu(mm(x, w)), x 64x128, w 128x128")
def build_evaluate_features(device, scale):
    return Case(evaluate_features, (torch.randn(64, 128, device=device), torch.randn(128, 128, device=device)))


@workload("conv_feature_model", "seed", description="Conv2d(3,16,3,pad 1) -> relu -> flatten -> Linear(16*32*32, 10)")
def build_conv_feature_model(device, scale):
    batch = pick(scale, 2, 8, 32)
    model = FeatureModel().to(device).eval()
    return Case(model, (torch.randn(batch, 3, 32, 32, device=device),), atol=1e-3, rtol=1e-3)


@workload("mlp_train_step", "seed", "train",
          description="128->256->10 MLP, CrossEntropy + Adam, one step (batch 32)")
def build_mlp_train_step(device, scale):
    model = MLP().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(32, 128, device=device)
    y = torch.randint(0, 10, (32,), device=device)
    return Case(model, (x, y), step=train_step(nn.CrossEntropyLoss(), opt), explain_args=(x,), atol=1e-4, rtol=1e-4,
                note="error: loss of the first step from identical weights")


@workload("resnet50_train_step", "seed", "train",
          description="resnet50 forward + backward + AdamW step (GPU full: b32 256x256; CPU full: b4 128x128)")
def build_resnet50_train_step(device, scale):
    cuda = torch.device(device).type == "cuda"
    batch, hw = pick(scale, (2, 64), (2, 96), (32, 256) if cuda else (4, 128))
    model, note = torchvision_model("resnet50", lambda: ResNetStyle(50), "ResNet-50-style net")
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, 3, hw, hw, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    return Case(model, (x, y), step=train_step(nn.CrossEntropyLoss(), opt), explain_args=(x,), atol=1e-3, rtol=1e-3,
                note=f"{note}; batch {batch} at {hw}x{hw}; error: first-step loss")


@workload("linear_10_5", "seed", description="nn.Linear(10, 5) on a (4, 10) input")
def build_linear(device, scale):
    return Case(nn.Linear(10, 5).to(device), (torch.randn(4, 10, device=device),))


def sin_cos(x):
    return torch.sin(x) + torch.cos(x)


@workload("sin_cos", "seed", description="sin(x) + cos(x) (full: 16M floats on CPU, 64M on CUDA)")
def build_sin_cos(device, scale):
    cuda = torch.device(device).type == "cuda"
    n = pick(scale, 4096, 1 << 20, (64 << 20) if cuda else (16 << 20))
    x = torch.randn(n, device=device)
    return Case(sin_cos, (x,), bytes_moved=2 * tensor_bytes(x), note=f"{n} floats")
