"""The CPU generator's state inside compiled code (and a CUDA generator's): torch.manual_seed, get_rng_state and
set_rng_state are graph nodes ordered with the draws, so a compiled function draws eager's numbers
and leaves the generator where eager leaves it. torch.testing's freeze_rng_state (a contextmanager
over torch._C._DisableTorchDispatch and _DisableFuncTorch, which change nothing where compiled
code runs) is how PyTorch's OpInfo database runs its random ops."""
import pytest
import torch
import torch.nn.functional as F

import framefuse

BACKENDS = ["eager", "inductor"]
# torch 1.13's _DisableTorchDispatch disables dispatch for its lifetime: no `with` block.
needs_no_dispatch_block = pytest.mark.skipif(not hasattr(torch._C._DisableTorchDispatch, "__enter__"),
                                             reason="torch._C._DisableTorchDispatch is no context manager here")


def reseed_and_drop(x):
    torch.manual_seed(42)
    return F.dropout(x, 0.5) + torch.rand_like(x)


def replay_a_draw(x):
    state = torch.get_rng_state()
    a = torch.rand_like(x)
    torch.set_rng_state(state)
    return a, torch.rand_like(x) * 2


def draw_in_frozen_state(x):
    with torch._C._DisableTorchDispatch(), torch._C._DisableFuncTorch():
        state = torch.get_rng_state()
    torch.manual_seed(7)
    y = torch.bernoulli(x)
    with torch._C._DisableTorchDispatch():
        torch.set_rng_state(state)
    return y


def returns_the_generator(x):
    return torch.manual_seed(3), x + 1


def run_both(fn, backend, x):
    """fn's results eagerly and compiled from one seed, and a draw after each (on x's device):
    equal generators."""
    torch.manual_seed(0)
    want, want_after = fn(x), torch.rand(5, device=x.device)
    report = framefuse.explain(fn)(x)
    assert report.graph_break_count == 0, report.break_reasons
    framefuse.reset()
    compiled = framefuse.compile(fn, backend=backend)
    for _ in range(2):
        torch.manual_seed(0)
        got, got_after = compiled(x), torch.rand(5, device=x.device)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(got_after, want_after, rtol=0, atol=0)
    return got


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [reseed_and_drop, replay_a_draw,
                                pytest.param(draw_in_frozen_state, marks=needs_no_dispatch_block)], ids=lambda f: f.__name__)
def test_generator_state_calls_draw_what_eager_draws(fn, backend):
    x = torch.rand(64)
    run_both(fn, backend, x)


def test_replayed_state_gives_the_same_numbers_twice():
    a, b = framefuse.compile(replay_a_draw, backend="inductor")(torch.rand(32))
    torch.testing.assert_close(b, a * 2, rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_manual_seed_returns_the_default_generator(backend):
    gen, _ = framefuse.compile(returns_the_generator, backend=backend)(torch.ones(2))
    assert gen is torch.default_generator


def test_freeze_rng_state_of_torch_testing_is_captured():
    freeze_rng_state = pytest.importorskip("torch.testing._internal.common_utils").freeze_rng_state

    def sample(x):
        with freeze_rng_state():
            torch.manual_seed(42)
            return F.dropout(x, 0.3)

    x = torch.rand(128)
    got = run_both(sample, "inductor", x)
    assert (got == 0).any()


def break_inside_no_dispatch(x):
    with torch._C._DisableTorchDispatch():
        y = x + 1
        framefuse.graph_break()
        y = y * 2
    return y


def dispatch_reaches_modes():
    """Whether a TorchDispatchMode entered now sees ops (the block above was left)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Seen.ops += 1
            return func(*args, **(kwargs or {}))

    with Seen():
        torch.ones(2) + 1
    return Seen.ops > 0


@needs_no_dispatch_block
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_break_inside_a_no_dispatch_block_resumes_inside_it(backend):
    framefuse.reset()
    x = torch.rand(8)
    fn = framefuse.compile(break_inside_no_dispatch, backend=backend)
    for _ in range(2):
        torch.testing.assert_close(fn(x), (x + 1) * 2)
        assert dispatch_reaches_modes()
    report = framefuse.explain(break_inside_no_dispatch)(x)
    assert report.graph_break_count == 1 and report.graph_count == 2


def test_manual_seed_replaced_by_dynamos_wrapper_is_captured():
    # Importing torch._dynamo wraps torch.manual_seed in torch._disable_dynamo (torch >= 2.1).
    pytest.importorskip("torch._dynamo")
    run_both(reseed_and_drop, "inductor", torch.rand(16))


def guard_object(x):
    guard = torch._C._DisableTorchDispatch()   # torch 1.13's no_dispatch(): disabled while it lives
    y = x + 1
    del guard
    return y * 2


def with_block(x):
    with torch._C._DisableTorchDispatch():
        return x + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_dispatch_objects_as_guards_and_as_context_managers(backend):
    x = torch.rand(8)
    framefuse.reset()
    torch.testing.assert_close(framefuse.compile(guard_object, backend=backend)(x), (x + 1) * 2)
    assert framefuse.explain(guard_object)(x).graph_break_count == 0
    try:
        want = with_block(x)
    except Exception as e:  # noqa: BLE001 - torch 1.13's is no context manager: the same error
        with pytest.raises(type(e)):
            framefuse.compile(with_block, backend=backend)(x)
    else:
        torch.testing.assert_close(framefuse.compile(with_block, backend=backend)(x), want)


def replay_a_cuda_draw(x):
    state = torch.cuda.get_rng_state()
    a = torch.rand_like(x)
    torch.cuda.set_rng_state(state)
    return a, F.dropout(x, 0.5) + torch.rand_like(x)


@pytest.mark.cuda
@pytest.mark.parametrize("backend", BACKENDS)
def test_cuda_generator_state_calls_draw_what_eager_draws(backend):
    # torch.cuda.get_rng_state / set_rng_state are graph nodes too (OpInfo's freeze_rng_state
    # saves and restores the CUDA generator around every random sample).
    freeze_rng_state = pytest.importorskip("torch.testing._internal.common_utils").freeze_rng_state

    def frozen(x):
        with freeze_rng_state():
            torch.manual_seed(42)
            return F.dropout(x, 0.3) * 2

    x = torch.rand(256, device="cuda")
    for fn in (replay_a_cuda_draw, frozen):
        run_both(fn, backend, x)
