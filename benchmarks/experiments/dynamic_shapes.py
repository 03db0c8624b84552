"""Dynamic shapes (issue #24's sweeps): each model called with N different sizes in a row, compiled
fresh by framefuse and by torch.compile (dynamic=None, both), against eager: compiles, the total
wall time of the N calls (compiles included), then the steady time per call at one size against a
compile that only ever saw that size. Every result is compared with eager's.

    PYTHONPATH=build/main/site python benchmarks/experiments/dynamic_shapes.py [--calls 50] [--models relu_sum,mlp,resnet18,nanogpt,bert,int_scale,loop_break]

int_scale and loop_break vary Python ints instead of sizes: an int argument (50 values) and a loop
counter reaching the resume function after a graph break (12 iterations per call).

framefuse's count is its traces ("frames"), then the programs its backend compiled ("kernels": a
symbolic graph whose kernels take sizes as arguments counts once; one that cannot, once per size).
"""
import argparse
import io
import os
import random
import statistics
import sys
import tempfile
import time

# NB: cold on-disk caches for both compilers (torch's inductor cache directory is read at import).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="tc-cache-"))

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import framefuse  # noqa: E402
from framefuse import _C, backends  # noqa: E402
from benchmarks.workloads import torchvision_model  # noqa: E402
from benchmarks.workloads.nets import MLP, NanoGPT, ResNetStyle  # noqa: E402


def relu_sum(x):
    return torch.relu(x) * 2 + x.sum()


def int_scale(x, n):
    """A Python int argument that varies, used in tensor arithmetic."""
    return torch.relu(x) * n + torch.tanh(x) * (n - 1) - n


_SINK = io.StringIO()


def loop_break(x):
    """A loop whose body breaks the graph: its counter reaches the resume function as an int."""
    for i in range(12):
        x = torch.tanh(x) * 0.5 + i
        print(i, file=_SINK)
    return x


def models(calls, seed, device):
    rng = random.Random(seed)
    batch = rng.sample(range(2, 400), calls)
    seq = rng.sample(range(8, 129), calls)
    torch.manual_seed(0)
    dev = torch.device(device)
    out = {
        "relu_sum": (relu_sum, [(torch.randn(n, 256, device=dev),) for n in batch], (torch.randn(64, 256, device=dev),)),
        "mlp": (MLP(128, 256, 10).to(dev).eval(), [(torch.randn(n, 128, device=dev),) for n in batch],
                (torch.randn(64, 128, device=dev),)),
    }
    ints = rng.sample(range(2, 1000), calls)
    out["int_scale"] = (int_scale, [(torch.randn(64, 256, device=dev), n) for n in ints],
                        (torch.randn(64, 256, device=dev), 7))
    out["loop_break"] = (loop_break, [(torch.randn(64, 256, device=dev),) for _ in range(calls)],
                         (torch.randn(64, 256, device=dev),))
    gpt = NanoGPT(vocab=2048, block_size=128, n_layer=2, n_head=4, d=128).to(dev).eval()
    out["nanogpt"] = (gpt, [(torch.randint(0, 2048, (1, t), device=dev),) for t in seq],
                      (torch.randint(0, 2048, (1, 64), device=dev),))
    # NB: torchvision's resnet18 where it imports (not beside torch 2.13's CPU wheel), else the
    # suite's ResNet-18-style net; a batch sweep at 32x32 (CPU) or 64x64 (CUDA).
    resnet, _ = torchvision_model("resnet18", lambda: ResNetStyle(18), "ResNet-18-style net")
    resnet = resnet.to(dev).eval()
    hw = 64 if dev.type == "cuda" else 32
    out["resnet18"] = (resnet, [(torch.randn(n, 3, hw, hw, device=dev),) for n in rng.sample(range(2, 66), calls)],
                       (torch.randn(16, 3, hw, hw, device=dev),))
    try:
        import transformers  # noqa: PLC0415
    except ImportError:
        return out
    cfg = transformers.BertConfig(vocab_size=2048, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=512, max_position_embeddings=256)
    bert = transformers.BertModel(cfg).to(dev).eval()

    def bert_call(ids):
        return bert(input_ids=ids).last_hidden_state
    out["bert"] = (bert_call, [(torch.randint(0, 2048, (2, t), device=dev),) for t in seq],
                   (torch.randint(0, 2048, (2, 64), device=dev),))
    return out


def framefuse_counts():
    return _C._frame_eval_stats()["frames_compiled"], backends.per_sizes_compiles() + backends.symbolic_compiles()


def torch_counts():
    from torch._dynamo.utils import counters  # noqa: PLC0415
    return counters["stats"]["unique_graphs"], 0


def run_sweep(compile_fn, reset, counts, fn, inputs, expected):
    reset()
    before = counts()
    compiled = compile_fn(fn)
    t0 = time.perf_counter()
    with torch.no_grad():
        outs = [compiled(*args) for args in inputs]
    sync()
    total = time.perf_counter() - t0
    for o, e in zip(outs, expected):
        torch.testing.assert_close(o, e, atol=1e-4, rtol=1e-4)
    after = counts()
    return total, (after[0] - (0 if compile_fn is framefuse.compile else before[0]), after[1] - before[1])


def sync():
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def steady(compiled, args, calls=30):
    with torch.no_grad():
        for _ in range(3):
            compiled(*args)
        times = []
        for _ in range(calls):
            sync()
            t = time.perf_counter()
            compiled(*args)
            sync()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def throughput(compiled, args, calls):
    """ms per call over `calls` back-to-back calls (one synchronisation at the end)."""
    with torch.no_grad():
        for _ in range(5):
            compiled(*args)
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            compiled(*args)
        sync()
    return (time.perf_counter() - t) / calls * 1e3


def interleaved_steady(fn, inputs, fixed, rounds, calls):
    """framefuse at one size, static compile against the symbolic one (traced over a few sizes of
    the sweep), in alternating rounds so that drift hits both alike: the median ms per call of
    each, and their ratio's median."""
    static, dynamic, ratios = [], [], []
    for _ in range(rounds):
        framefuse.reset()
        s = throughput(framefuse.compile(fn), fixed, calls)
        framefuse.reset()
        cf = framefuse.compile(fn)
        with torch.no_grad():
            for a in inputs[:3]:
                cf(*a)
        d = throughput(cf, fixed, calls)
        static.append(s)
        dynamic.append(d)
        ratios.append(d / s)
    framefuse.reset()
    return statistics.median(static), statistics.median(dynamic), statistics.median(ratios)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--models", default="relu_sum,mlp,resnet18,nanogpt,bert,int_scale,loop_break")
    p.add_argument("--seed", type=int, default=24)
    p.add_argument("--no-torch-compile", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--steady-rounds", type=int, default=0,
                   help="also time framefuse's symbolic program against its static compile at one size, in "
                        "this many alternating rounds (a second table)")
    p.add_argument("--steady-calls", type=int, default=200)
    args = p.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(2)
    else:
        torch.backends.cuda.matmul.allow_tf32 = False  # exact comparison with eager
        torch.backends.cudnn.allow_tf32 = False
    framefuse.config.cache_dir = tempfile.mkdtemp(prefix="ff-cache-")
    where = torch.cuda.get_device_name() if args.device != "cpu" else f"CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}, {args.calls} sizes per sweep, cold on-disk caches")
    print("| model | contender | compiles | total of the sweep, s | steady ms at one size | static compile ms | eager ms |")
    print("|---|---|---|---|---|---|---|")
    steady_rows = []
    for name, (fn, inputs, fixed) in models(args.calls, args.seed, args.device).items():
        if name not in args.models.split(","):
            continue
        with torch.no_grad():
            expected = [fn(*a) for a in inputs]
        eager_ms = steady(fn, fixed) * 1e3
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            for a in inputs:
                fn(*a)
        sync()
        eager_total = time.perf_counter() - t0
        contenders = [("framefuse", framefuse.compile, framefuse.reset, framefuse_counts)]
        if not args.no_torch_compile and hasattr(torch, "compile"):
            contenders.append(("torch.compile", torch.compile, torch._dynamo.reset, torch_counts))
        for label, compile_fn, reset, counts in contenders:
            total, (frames, kernels) = run_sweep(compile_fn, reset, counts, fn, inputs, expected)
            dyn = compile_fn(fn)  # the sweep's entries serve this size too
            dyn_ms = steady(dyn, fixed) * 1e3
            reset()
            static_ms = steady(compile_fn(fn), fixed) * 1e3
            what = f"{frames} frames" + (f", {kernels} kernel sets" if label == "framefuse" else " graphs")
            print(f"| {name} | {label} | {what} | {total:.2f} | {dyn_ms:.3f} | {static_ms:.3f} | {eager_ms:.3f} |")
        print(f"| {name} | eager | - | {eager_total:.2f} | {eager_ms:.3f} | - | {eager_ms:.3f} |")
        if args.steady_rounds:
            steady_rows.append((name, *interleaved_steady(fn, inputs, fixed, args.steady_rounds, args.steady_calls)))
    if steady_rows:
        print(f"\nframefuse at one size, {args.steady_rounds} alternating rounds of {args.steady_calls} calls "
              "(median ms per call; ratio: median of the rounds' symbolic / static)")
        print("| model | static compile ms | symbolic program ms | ratio |")
        print("|---|---|---|---|")
        for name, s, d, r in steady_rows:
            print(f"| {name} | {s:.3f} | {d:.3f} | {r:.3f} |")


if __name__ == "__main__":
    main()
