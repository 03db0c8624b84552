"""Host time of a reduce-overhead replay with its input check in C++ (_C.inductor.ReplayInputs, one
call) against the same check in Python (a loop over every input: what framefuse.cuda.CudaGraphReplay
ran before, kept here as `PythonCheck`), the two taking turns on one recorded CUDA graph. resnet18 brings ~100 inputs (its parameters and the batch); at batch 1 the
replay is host-bound.

    PYTHONPATH=python python3 benchmarks/experiments/gpu_replay_inputs.py [--batches 1,32] [--rounds 15] [--calls 200]

Host time: calls issued without waiting for the GPU, per call (the GPU catches up after each round)."""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import framefuse  # noqa: E402
from framefuse import cuda  # noqa: E402
from benchmarks.workloads.models import build_resnet18  # noqa: E402


class PythonCheck:
    """The Python input check replays made before _C.inductor.ReplayInputs: a signature of every
    input (shape, strides, dtype and device of tensors, the value of others) and, per in-place
    input, the same object at the same address."""

    def __init__(self, inputs, fixed):
        self._sig = self._signature(inputs)
        self._fixed = [(i, t, t.data_ptr()) for i, (t, f) in enumerate(zip(inputs, fixed)) if f]
        self.misses = 0  # calls it sent off the CUDA graph: none, or the timing is not of replays

    @staticmethod
    def _signature(inputs):
        return tuple((t.shape, t.stride(), t.dtype, t.device) if isinstance(t, torch.Tensor) else ("obj", t)
                     for t in inputs)

    def matches(self, inputs):
        ok = self._signature(inputs) == self._sig and all(
            inputs[i] is t and t.data_ptr() == ptr for i, t, ptr in self._fixed)
        self.misses += not ok
        return ok


def _replay_of(model, x):
    """The model compiled under reduce-overhead, and the CudaGraphReplay its backend made."""
    made = []

    @framefuse.backends.native_graph
    def backend(graph, example_inputs):
        made.append(cuda.backend(graph, example_inputs, mode="reduce-overhead"))
        return made[-1]

    fn = framefuse.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(3):  # first call compiles and runs, the second records, the third replays
            fn(x)
    torch.cuda.synchronize()
    (replay,) = made
    assert isinstance(replay, cuda.CudaGraphReplay) and replay._inputs is not None
    return fn, replay


def _host_us(fn, x, calls):
    with torch.no_grad():
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(x)
        host = time.perf_counter() - t0
    torch.cuda.synchronize()
    return host / calls * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="1,32")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args()
    for batch in (int(b) for b in args.batches.split(",")):
        case = build_resnet18("cuda", "full")
        model = case.target
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        fn, replay = _replay_of(model, x)
        native = replay._inputs
        n_inputs = len(replay._static_in)
        # In-place inputs are the recorded call's own objects; the others are copies of its inputs,
        # of the same layouts.
        fixed = [id(t) == first for t, first in zip(replay._static_in, replay._first_ids)]
        python = PythonCheck(replay._static_in, fixed)
        times = {"C++ check": [], "Python check": []}
        for _ in range(args.rounds):
            for name in times:
                replay._inputs = native if name == "C++ check" else python
                times[name].append(_host_us(fn, x, args.calls))
        replay._inputs = native
        assert python.misses == 0, "the Python check sent calls off the CUDA graph"
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"resnet18 b{batch} reduce-overhead, {n_inputs} graph inputs: host us per call "
              + ", ".join(f"{k} {v:.1f}" for k, v in med.items())
              + f"; Python / C++ {med['Python check'] / med['C++ check']:.2f}x "
              f"(per-round ratio median {statistics.median(p / c for p, c in zip(times['Python check'], times['C++ check'])):.2f}x)")


if __name__ == "__main__":
    main()
