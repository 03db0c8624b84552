"""opt.step() inside compiled code: torch.optim's SGD, Adam and AdamW run as a compiled update
(framefuse/optim.py). Each test trains a model and its copy for a few steps, one eagerly and one
through a compiled training step, and compares parameters and optimizer state with eager's."""

import copy
import math

import pytest
import torch

import framefuse
from framefuse import optim as ff_optim

from cuda_util import HAVE_GPU

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")])]


def _eager_sqrt_is_correctly_rounded(dtype, device="cpu"):
    # Some torch builds take sqrt from a vector library that is not correctly rounded; the compiled
    # update's sqrt is, so its parameters then differ from eager's by rounding (compared with a tolerance).
    x = torch.rand(4099, dtype=dtype) * 1e-3
    exact = torch.tensor([math.sqrt(v) for v in x.tolist()], dtype=torch.float64).to(dtype)
    return torch.equal(x.to(device).sqrt().cpu(), exact)


def _model(dtype, device="cpu"):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 40), torch.nn.Tanh(), torch.nn.Linear(40, 7)).to(device, dtype)


def _train(model, opt, steps, compiled, dtype, scheduler=None, whole=False, device="cpu"):
    """`steps` training steps; with `compiled`, opt.step() runs in compiled code (with `whole`, so do the
    forward and backward: their own rounding then enters the comparison)."""
    def opt_step():
        opt.step()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x).float(), y.float())
        loss.backward()
        (framefuse.compile(opt_step) if compiled and not whole else opt_step)()
        return loss.detach()

    fn = framefuse.compile(step) if compiled and whole else step
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(33, 12, generator=gen, dtype=dtype), torch.randn(33, 7, generator=gen, dtype=dtype)
        losses.append(fn(x.to(device), y.to(device)))
        if scheduler is not None:
            scheduler.step()
    return losses


def _state_tensors(opt):
    out = []
    for group in opt.param_groups:
        for p in group["params"]:
            out.append(p.detach())
            for v in opt.state[p].values():
                if isinstance(v, torch.Tensor):
                    out.append(v)
    return out


CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, weight_decay=1e-2, nesterov=True)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.1, maximize=True)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=3e-3, weight_decay=1e-2, amsgrad=True)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.05)),
    ("AdamW", dict(lr=2e-3, betas=(0.8, 0.95), eps=1e-6, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.05, foreach=True)),
    ("Adam", dict(lr=1e-2, weight_decay=0.05, foreach=True, maximize=True)),
    ("SGD", dict(lr=0.05, momentum=0.9, weight_decay=1e-2, foreach=True)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_compiled_step_matches_eagers_parameters_and_state(name, kwargs, dtype, device, monkeypatch):
    monkeypatch.setattr(ff_optim, "fuse_cuda", True)
    ref, mine = _model(dtype, device), _model(dtype, device)
    opt_ref = getattr(torch.optim, name)(ref.parameters(), **kwargs)
    opt_mine = getattr(torch.optim, name)(mine.parameters(), **kwargs)
    before = ff_optim.fused_steps
    want = _train(ref, opt_ref, 5, False, dtype, device=device)
    got = _train(mine, opt_mine, 5, True, dtype, device=device)
    # SGD without momentum keeps no state and is fused from its first step; the others from the second.
    stateless = name == "SGD" and not kwargs.get("momentum")
    assert ff_optim.fused_steps - before == (5 if stateless else 4)
    exact = name == "SGD" or _eager_sqrt_is_correctly_rounded(dtype, device)
    for a, b in zip(want + _state_tensors(opt_ref), got + _state_tensors(opt_mine)):
        if exact:
            assert torch.equal(a, b), (a - b).abs().max()
        else:
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_a_learning_rate_schedule_neither_recompiles_nor_differs():
    ref, mine = _model(torch.float32), _model(torch.float32)
    opts = [torch.optim.SGD(m.parameters(), lr=0.2, momentum=0.5) for m in (ref, mine)]
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda k: 1 / (1 + k)) for o in opts]
    _train(ref, opts[0], 6, False, torch.float32, scheds[0])
    before = ff_optim.fused_steps
    _train(mine, opts[1], 6, True, torch.float32, scheds[1])
    assert ff_optim.fused_steps - before == 5
    for a, b in zip(_state_tensors(opts[0]), _state_tensors(opts[1])):
        assert torch.equal(a, b)
    update = ff_optim._updates[opts[1]][0]
    info = framefuse._C._code_cache_info(update.__wrapped__.__code__)
    assert info is not None and info["entries"] == 1, info


@pytest.mark.parametrize("name", ["SGD", "AdamW"])
def test_a_whole_compiled_training_step(name):
    ref, mine = _model(torch.float32), _model(torch.float32)
    kwargs = dict(lr=0.05, momentum=0.9) if name == "SGD" else dict(lr=1e-2)
    opt_ref = getattr(torch.optim, name)(ref.parameters(), **kwargs)
    opt_mine = getattr(torch.optim, name)(mine.parameters(), **kwargs)
    want = _train(ref, opt_ref, 4, False, torch.float32)
    before = ff_optim.fused_steps
    got = _train(mine, opt_mine, 4, True, torch.float32, whole=True)
    assert ff_optim.fused_steps - before == 3
    for a, b in zip(want + _state_tensors(opt_ref), got + _state_tensors(opt_mine)):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("fuse_cuda", [False, True])
def test_cuda_parameters_keep_torchs_step_by_default_and_with_foreach_false(fuse_cuda, monkeypatch):
    monkeypatch.setattr(ff_optim, "fuse_cuda", fuse_cuda)
    ref, mine = _model(torch.float32, "cuda"), _model(torch.float32, "cuda")
    kwargs = dict(lr=1e-2, foreach=False) if fuse_cuda else dict(lr=1e-2)
    opt_ref = torch.optim.AdamW(ref.parameters(), **kwargs)
    opt_mine = torch.optim.AdamW(mine.parameters(), **kwargs)
    _train(ref, opt_ref, 3, False, torch.float32, device="cuda")
    before = ff_optim.fused_steps
    _train(mine, opt_mine, 3, True, torch.float32, device="cuda")
    assert ff_optim.fused_steps == before
    for a, b in zip(_state_tensors(opt_ref), _state_tensors(opt_mine)):
        assert torch.equal(a, b)


def test_the_eager_backend_keeps_torchs_step():
    ref, mine = _model(torch.float32), _model(torch.float32)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (ref, mine)]
    x, y = torch.randn(9, 12), torch.randn(9, 7)
    step = framefuse.compile(lambda: opts[1].step(), backend="eager")
    before = ff_optim.fused_steps
    for _ in range(3):
        for model, opt, fn in ((ref, opts[0], opts[0].step), (mine, opts[1], step)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            fn()
    assert ff_optim.fused_steps == before
    for a, b in zip(_state_tensors(opts[0]), _state_tensors(opts[1])):
        assert torch.equal(a, b)


def test_step_outside_compiled_code_is_torchs():
    model = _model(torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    before = ff_optim.fused_steps
    _train(model, opt, 3, False, torch.float32)
    assert ff_optim.fused_steps == before


@pytest.mark.parametrize("variant", ["bfloat16", "closure", "subclass"])
def test_variants_the_update_does_not_cover_run_torchs_step(variant, caplog):
    dtype = torch.bfloat16 if variant == "bfloat16" else torch.float32
    ref, mine = _model(dtype), _model(dtype)
    cls = torch.optim.AdamW
    if variant == "subclass":
        cls = type("MyAdamW", (torch.optim.AdamW,), {})
    opt_ref, opt_mine = cls(ref.parameters(), lr=1e-2), cls(mine.parameters(), lr=1e-2)
    if variant == "closure":
        x, y = torch.randn(5, 12), torch.randn(5, 7)

        def run(model, opt):
            def closure():
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                return loss
            return opt.step(closure)

        before = ff_optim.fused_steps
        for _ in range(3):
            run(ref, opt_ref)
            framefuse.compile(run)(mine, opt_mine)
    else:
        _train(ref, opt_ref, 3, False, dtype)
        before = ff_optim.fused_steps
        _train(mine, opt_mine, 3, True, dtype)
    assert ff_optim.fused_steps == before
    for a, b in zip(_state_tensors(opt_ref), _state_tensors(opt_mine)):
        if variant == "closure":  # the closure's forward and backward are compiled code
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(a, b)


def test_the_reason_is_logged_once(caplog):
    framefuse.set_logs("perf_hints")
    try:
        with caplog.at_level("INFO", logger="framefuse"):
            model = _model(torch.bfloat16)
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            _train(model, opt, 3, True, torch.bfloat16)
    finally:
        framefuse.set_logs("")
    lines = [r.getMessage() for r in caplog.records if "torch.bfloat16" in r.getMessage()]
    assert len(lines) == 1 and "Adam.step() runs torch's own step" in lines[0]


def test_compiling_the_step_method_itself():
    ref, mine = _model(torch.float32), _model(torch.float32)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    opt_mine = torch.optim.SGD(mine.parameters(), lr=0.1, momentum=0.9)
    step = framefuse.compile(opt_mine.step)
    x, y = torch.randn(9, 12), torch.randn(9, 7)
    before = ff_optim.fused_steps
    for _ in range(3):
        for model, opt, fn in ((ref, opt_ref, opt_ref.step), (mine, opt_mine, step)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            fn()
    assert ff_optim.fused_steps - before == 2
    for a, b in zip(_state_tensors(opt_ref), _state_tensors(opt_mine)):
        assert torch.equal(a, b)


def test_a_copy_keeps_the_state_objects_the_optimizer_holds():
    # The update writes the optimizer's own tensors in place: state_dict() afterwards holds the new values.
    model = _model(torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _train(model, opt, 3, True, torch.float32)
    sd = copy.deepcopy(opt.state_dict())
    assert all(float(s["step"]) == 3.0 for s in sd["state"].values())
