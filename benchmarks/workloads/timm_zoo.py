"""timm's image models (issue #28's zoo): resnet50, convnext_tiny, efficientnet_b0 and vit_small, built by
`timm.create_model` with random weights (nothing downloaded), where timm imports. timm needs torchvision:
the GPU machine and the Debian lane (torch 1.13, scripts/requirements-debian.txt) have both; the main
lane's torch 2.13 has no torchvision, so these workloads are unavailable there."""

import torch

from . import Case, WorkloadUnavailable, no_grad_step, pick, workload


def _timm_case(name, device, scale, atol=1e-3, **kwargs):
    try:
        import timm
    except Exception as e:
        raise WorkloadUnavailable(f"timm not importable ({type(e).__name__})") from None
    cuda = torch.device(device).type == "cuda"
    batch, hw = pick(scale, (1, 32), (2, 64), (32, 224) if cuda else (8, 224))
    if "img_size" in kwargs:
        kwargs["img_size"] = hw
    model = timm.create_model(name, **kwargs).to(device).eval()
    x = torch.randn(batch, 3, hw, hw, device=device)
    return Case(model, (x,), step=no_grad_step, atol=atol, rtol=1e-3,
                note=f"timm {name}, random weights, batch {batch} at {hw}x{hw}")


@workload("timm_resnet50", "timm_zoo", description="timm resnet50 inference (full: b8 224x224 on CPU, b32 on CUDA)")
def build_timm_resnet50(device, scale):
    return _timm_case("resnet50", device, scale)


@workload("timm_convnext_tiny", "timm_zoo",
          description="timm convnext_tiny inference (full: b8 224x224 on CPU, b32 on CUDA)")
def build_timm_convnext_tiny(device, scale):
    # NB: on CUDA both compilers differ from eager by up to 3.5e-3 (its 7x7 depthwise convolutions and
    # channel layer norms sum in another order).
    return _timm_case("convnext_tiny", device, scale, atol=1e-2)


@workload("timm_efficientnet_b0", "timm_zoo",
          description="timm efficientnet_b0 inference (full: b8 224x224 on CPU, b32 on CUDA)")
def build_timm_efficientnet_b0(device, scale):
    return _timm_case("efficientnet_b0", device, scale)


@workload("timm_vit_small", "timm_zoo",
          description="timm vit_small_patch16_224 inference (full: b8 224x224 on CPU, b32 on CUDA)")
def build_timm_vit_small(device, scale):
    return _timm_case("vit_small_patch16_224", device, scale, img_size=None)
