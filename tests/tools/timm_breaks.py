"""Graph breaks and errors of timm's image models (issue #28): for each model, what framefuse.explain
records from one inference call (eval mode, no grad, random weights, batch 1 at the model's input size)
and how far the inductor backend's result is from eager's (max abs difference over max abs value).

    # where timm imports (the Debian lane's packages, or a machine with torchvision), after a build
    PYTHONPATH=build/pydeps-debian:build/debian/site /usr/bin/python3 tests/tools/timm_breaks.py
    python3 tests/tools/timm_breaks.py --device cuda resnet50 convnext_tiny

A record, not a gate: tests/python/models/test_timm_models.py checks the zoo's four models.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import timm
import torch

import framefuse

# Architectures of many families: convolutions with squeeze-excite, depthwise and grouped convolutions,
# attention of several shapes (windows, pooling, cross-attention, class attention), hybrids.
MODELS = ("resnet18 mobilenetv3_small_100 regnety_002 densenet121 deit_tiny_patch16_224 swin_tiny_patch4_window7_224 "
          "levit_128 poolformer_s12 ghostnet_100 dla34 mobilevit_xxs edgenext_xx_small inception_v3 rexnet_100 "
          "ese_vovnet19b_dw crossvit_tiny_240 pit_ti_224 twins_svt_small visformer_tiny fastvit_t8 efficientformer_l1 "
          "coat_tiny xcit_nano_12_p16_224 cait_xxs24_224 maxvit_tiny_tf_224 eva02_tiny_patch14_224 convnextv2_atto "
          "resnest14d cspresnet50 hrnet_w18_small nfnet_l0 repvgg_a2").split()


def survey(name, device):
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10).to(device).eval()
    x = torch.randn(1, *model.pretrained_cfg.get("input_size", (3, 224, 224)), device=device)
    with torch.no_grad():
        want = model(x)
        report = framefuse.explain(model)(x)
        framefuse.reset()
        compiled = framefuse.compile(model)
        t0 = time.perf_counter()
        compiled(x)
        first = time.perf_counter() - t0
        got = compiled(x)
        framefuse.reset()
    err = ((got - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()
    reasons = collections.Counter(b.reason.splitlines()[0] for b in report.break_reasons)
    return report.graph_count, report.graph_break_count, first, err, reasons.most_common(3)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help="timm model names (default: the list in this file)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    print(f"{'model':<30} {'graphs':>6} {'breaks':>6} {'first call':>10} {'rel. error':>10}  top break reasons")
    for name in args.models or MODELS:
        try:
            graphs, breaks, first, err, reasons = survey(name, args.device)
        except Exception as e:  # noqa: BLE001 - a model that does not build here is reported, not fatal
            print(f"{name:<30} {type(e).__name__}: {str(e).splitlines()[0][:100]}")
            continue
        top = "; ".join(f"{n}x {r[:80]}" for r, n in reasons) or "-"
        print(f"{name:<30} {graphs:>6} {breaks:>6} {first:>9.2f}s {err:>10.1e}  {top}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
