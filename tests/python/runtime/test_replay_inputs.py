"""_C.inductor.ReplayInputs: the check a reduce-overhead CUDA graph makes before each replay
(framefuse.cuda.CudaGraphReplay). Its rules hold for any device, so they are tested here on CPU
tensors; the replays themselves are in the CUDA tests."""
import pytest
import torch

from framefuse import _C


def _recorded():
    param = torch.nn.Parameter(torch.randn(4, 3))
    x = torch.randn(2, 3)
    return (x, param, 0.5, "relu"), [False, True, False, False]


def test_the_recorded_inputs_and_new_batches_of_their_layout_match():
    inputs, fixed = _recorded()
    check = _C.inductor.ReplayInputs(inputs, fixed)
    assert check.matches(inputs)
    x, param, scale, act = inputs
    for _ in range(3):  # the shortcut recorded after the first exact match says the same
        assert check.matches((torch.randn(2, 3), param, 0.5, "relu"))


@pytest.mark.parametrize("change", ["other shape", "other strides", "other dtype", "other param object",
                                    "param moved", "other value", "tensor for a value", "fewer inputs"])
def test_every_difference_is_a_mismatch(change):
    inputs, fixed = _recorded()
    check = _C.inductor.ReplayInputs(inputs, fixed)
    assert check.matches(inputs)
    x, param, scale, act = inputs
    if change == "other shape":
        got = (torch.randn(3, 3), param, scale, act)
    elif change == "other strides":
        got = (torch.randn(3, 2).t(), param, scale, act)
    elif change == "other dtype":
        got = (x.double(), param, scale, act)
    elif change == "other param object":
        got = (x, torch.nn.Parameter(param.detach().clone()), scale, act)
    elif change == "param moved":
        param.data = torch.randn(4, 3)  # the same object over other memory
        got = (x, param, scale, act)
    elif change == "other value":
        got = (x, param, 0.25, act)
    elif change == "tensor for a value":
        got = (x, param, torch.tensor(0.5), act)
    else:
        got = (x, param, scale)
    assert not check.matches(got)
    assert check.matches(inputs) == (change not in ("param moved",))


def test_copied_inputs_on_two_devices_are_checked_each_on_its_own():
    cpu, meta = torch.randn(2), torch.empty(3, device="meta")
    check = _C.inductor.ReplayInputs((cpu, meta), [False, False])
    assert check.matches((torch.randn(2), torch.empty(3, device="meta")))
    assert not check.matches((torch.randn(2), torch.empty(4, device="meta")))  # the meta tensor's size
    assert not check.matches((torch.randn(3), torch.empty(3, device="meta")))  # the CPU tensor's size
    assert not check.matches((torch.empty(3, device="meta"), torch.randn(2)))  # swapped devices


def test_fixed_must_give_one_flag_per_input():
    with pytest.raises(_C.InternalError):
        _C.inductor.ReplayInputs((torch.randn(2),), [False, True])
