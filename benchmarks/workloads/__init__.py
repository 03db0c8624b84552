"""The workload registry.

A workload is a `build(device, scale)` function registered with `@workload(...)`. It returns a `Case`:
the thing handed to each compiler (`target`: a function or an nn.Module), its inputs, and how one
step calls it. Building twice after the same seed gives identical weights and inputs, which is how
every contender starts from the same state and how results are compared with eager's.

Scales: "tiny" (tests), "quick" (the CPU quick preset), "full" (issue-sized; larger on CUDA).
"""

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

KINDS = ("infer", "train", "overhead")
SCALES = ("tiny", "quick", "full")


@dataclass
class Case:
    target: Any                      # function or nn.Module given to each compiler
    args: tuple                      # inputs of one call
    # One step with the (possibly compiled) target. Default: target(*args). Training steps close over
    # their optimizer here; the compiled module shares the original's parameters.
    step: Optional[Callable[[Any, tuple], Any]] = None
    bytes_moved: Optional[int] = None    # memory traffic of one step, for GB/s (memory-bound kernels)
    atol: float = 1e-4
    rtol: float = 1e-4
    note: str = ""                       # e.g. which model source was used
    explain_args: Optional[tuple] = None # inputs for explain() when the target takes fewer than `args`

    def run(self, fn):
        return self.step(fn, self.args) if self.step is not None else fn(*self.args)


@dataclass
class Workload:
    name: str
    family: str
    kind: str
    build: Callable[[Any, str], Case]
    description: str
    devices: tuple = ("cpu", "cuda")
    tags: tuple = field(default_factory=tuple)


class WorkloadUnavailable(Exception):
    """Raised by a build function when the workload cannot exist here (a missing optional package)."""


REGISTRY: dict = {}

FAMILIES = ("seed", "memory", "models", "timm_zoo", "overhead")


def workload(name, family, kind="infer", description="", devices=("cpu", "cuda")):
    assert kind in KINDS, kind

    def deco(build):
        if name in REGISTRY:
            raise ValueError(f"workload {name!r} registered twice")
        REGISTRY[name] = Workload(name, family, kind, build, description or (build.__doc__ or "").strip(),
                                  tuple(devices))
        return build

    return deco


def all_workloads():
    """Imports every family module (each registers its workloads) and returns the registry."""
    for fam in FAMILIES:
        importlib.import_module(f"{__name__}.{fam}")
    return REGISTRY


def no_grad_step(fn, args):
    import torch
    with torch.no_grad():
        return fn(*args)


def train_step(loss_fn, opt):
    """A step for `Case.step`: one forward, `loss_fn(output, y)`, backward and `opt.step()` on args (x, y).
    Returns the detached loss, which is what the runner compares with eager's."""
    def step(model, args):
        x, y = args
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def pick(scale, tiny, quick, full):
    return {"tiny": tiny, "quick": quick, "full": full}[scale]


def randn(*shape, device="cpu", dtype=None):
    import torch
    return torch.randn(*shape, device=device, dtype=dtype)


def tensor_bytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def torchvision_model(name, fallback, fallback_name, **kwargs):
    """A torchvision architecture with random weights, or the suite's own network (`fallback()`) when
    torchvision is not importable. Returns (model, note saying which one)."""
    try:
        import torchvision.models as tvm
        ctor = getattr(tvm, name)
    except Exception as e:  # ImportError, or a torchvision without this model
        return fallback(), f"suite's {fallback_name} (no torchvision: {type(e).__name__})"
    try:
        return ctor(weights=None, **kwargs), "torchvision"
    except TypeError:  # torchvision < 0.13 takes `pretrained` instead of `weights`
        return ctor(pretrained=False, **kwargs), "torchvision"
