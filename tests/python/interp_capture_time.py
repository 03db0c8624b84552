"""Capture time of framefuse's interpreter vs Dynamo on resnet50 forward and a 4-layer nanoGPT
(not a test: run it as a script). framefuse: trace_frame alone, best of N. Dynamo: first call of
torch.compile(backend="eager") after torch._dynamo.reset(), minus one eager forward."""
import sys
import time

import torch

import interp_models as M
from framefuse._C import _testing as T


def dynamo_capture(model, args, repeat=3):
    import torch._dynamo
    best = float("inf")
    for _ in range(repeat):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="eager")
        t0 = time.perf_counter()
        compiled(*args)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        model(*args)
        eager = time.perf_counter() - t0
        best = min(best, first - eager)
    return best


def main():
    torch.manual_seed(0)
    cases = [("resnet50 forward", M.resnet50().eval(), (torch.randn(1, 3, 224, 224),)),
             ("nanoGPT 4 layers", M.GPT(M.GPTConfig(n_layer=4, n_embd=128, block_size=128, vocab_size=512)).eval(),
              (torch.randint(0, 512, (2, 64)),))]
    with torch.no_grad():
        for name, model, args in cases:
            def run(*a):
                return model(*a)
            ff = T.capture_seconds(run, args, {}, 5)
            dyn = dynamo_capture(model, args) if "--no-dynamo" not in sys.argv else float("nan")
            print(f"{name}: framefuse capture {ff * 1e3:.1f} ms, dynamo {dyn * 1e3:.1f} ms, ratio 1/{dyn / ff:.0f}")


if __name__ == "__main__":
    main()
