"""framefuse._torch_replay, the C++ autograd node that replays a training recording (the forward and
backward CUDA graphs of framefuse.cuda.TrainingGraphReplay), driven on the CPU: device -1 takes
Python callables in place of the two graph launches, over the same kind of static buffers. The
GPU tests of the real recordings are in test_cuda_training_graphs.py."""
import gc
import weakref

import pytest
import torch

if int(torch.__version__.split(".")[0]) < 2:
    pytest.skip("framefuse._torch_replay is built against torch 2's C++ libraries only", allow_module_level=True)

from framefuse import _torch_replay  # noqa: E402  (built wherever torch 2 ships its C++ libraries)


class Recording:
    """y = x @ w.T + b and s = (x @ w.T).sum(1) over static buffers, with a forward and a backward
    'graph' that read and write only those buffers (and w, b in place), as a CUDA graph would."""

    def __init__(self, x, w, b, flat=True, scale=None):
        self.w, self.b = w, b
        self.sx = x.detach().clone()
        self.out = torch.empty(x.shape[0], w.shape[0])
        self.sum = torch.empty(x.shape[0])
        self.gin = [torch.empty_like(self.out), torch.empty_like(self.sum)]
        self.gw, self.gb = torch.empty_like(w), torch.empty_like(b)
        self.flat = torch.empty(w.numel() + b.numel()) if flat else None
        self.calls = {"fwd": 0, "bwd": 0, "recompute": 0}

    def fwd(self):
        self.calls["fwd"] += 1
        with torch.no_grad():
            xw = self.sx @ self.w.t()
            self.out.copy_(xw + self.b)
            self.sum.copy_(xw.sum(1))

    def bwd(self):
        self.calls["bwd"] += 1
        with torch.no_grad():
            g = self.gin[0] + self.gin[1][:, None]
            self.gw.copy_(g.t() @ self.sx)
            self.gb.copy_(self.gin[0].sum(0))
            if self.flat is not None:
                self.flat.copy_(torch.cat([self.gw.reshape(-1), self.gb]))

    def recompute(self, inputs, grad_outs, create_graph):
        self.calls["recompute"] += 1
        with torch.enable_grad():
            x, w, b = inputs[0], inputs[1], inputs[2]
            y, s = eager(x, w, b)
            return list(torch.autograd.grad([y, s], [w, b], grad_outs, create_graph=create_graph))

    def replay(self, x, w, b, const=None):
        spec = dict(device=-1, fwd=self.fwd, bwd=self.bwd, n_inputs=3 if const is None else 4,
                    fixed=[(1, w), (2, b)], copied=[(0, self.sx, x)],
                    consts=[] if const is None else [(3, const)],
                    outputs=[self.out, self.sum], diff_out=[0, 1], grad_in=self.gin, need=[1, 2],
                    grads=[self.gw, self.gb], flat=self.flat, recompute=self.recompute, keep=self)
        return _torch_replay.training_replay(spec)


def eager(x, w, b):
    xw = x @ w.t()
    return xw + b, xw.sum(1)


def params():
    torch.manual_seed(0)
    return torch.nn.Parameter(torch.randn(5, 4)), torch.nn.Parameter(torch.randn(5))


def setup(flat=True):
    w, b = params()
    x = torch.randn(3, 4)
    rec = Recording(x, w, b, flat=flat)
    return rec, rec.replay(x, w, b), w, b


def reference(w, b):
    return w.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)


@pytest.mark.parametrize("flat", [True, False])
def test_replayed_outputs_and_gradients_equal_eager(flat):
    rec, rep, w, b = setup(flat)
    wr, br = reference(w, b)
    for step in range(3):
        x = torch.randn(3, 4)
        y, s = rep((x, w, b))
        yr, sr = eager(x, wr, br)
        torch.testing.assert_close(y, yr)
        torch.testing.assert_close(s, sr)
        assert y.data_ptr() != rec.out.data_ptr() and y.grad_fn.name() == "framefuse::TrainingReplayBackward"
        ((y * y).sum() + s.sum()).backward()
        ((yr * yr).sum() + sr.sum()).backward()
        torch.testing.assert_close(w.grad, wr.grad)
        torch.testing.assert_close(b.grad, br.grad)
    assert rep.generation == 3 and rep.backward_replays == 3
    assert rec.calls == {"fwd": 3, "bwd": 3, "recompute": 0}
    # the gradients handed out are copies: the static buffers stay the recording's
    assert w.grad.data_ptr() not in (rec.gw.data_ptr(), rec.flat.data_ptr() if flat else 0)


def test_unused_output_gets_a_zero_gradient():
    rec, rep, w, b = setup()
    wr, br = reference(w, b)
    rec.gin[1].fill_(float("nan"))  # what the last backward left there must not leak in
    x = torch.randn(3, 4)
    rep((x, w, b))[0].sum().backward()
    eager(x, wr, br)[0].sum().backward()
    torch.testing.assert_close(w.grad, wr.grad)
    torch.testing.assert_close(b.grad, br.grad)


def test_inputs_that_do_not_fit_the_recording_are_refused():
    rec, rep, w, b = setup()
    no = _torch_replay.MISMATCH
    assert rep((torch.randn(2, 4), w, b)) == no                       # another shape
    assert rep((torch.randn(4, 3).t(), w, b)) == no                   # another stride
    assert rep((torch.randn(3, 4, dtype=torch.float64), w, b)) == no  # another dtype
    assert rep((torch.randn(3, 4, requires_grad=True), w, b)) == no   # requires_grad
    assert rep((torch.randn(3, 4), w.detach().clone(), b)) == no      # another tensor for a parameter
    assert rep((torch.randn(3, 4), w, b, 1.0)) == no                  # another count
    assert rep((torch.randn(3, 4), b, w)) == no
    with torch.no_grad():
        w.requires_grad_(False)
        assert rep((torch.randn(3, 4), w, b)) == no                   # a parameter frozen since
        w.requires_grad_(True)
    w.data = w.data.clone()                                           # same object, new memory
    assert rep((torch.randn(3, 4), w, b)) == no
    assert rec.calls["fwd"] == 0


def test_constants_are_compared_by_value():
    w, b = params()
    x = torch.randn(3, 4)
    rec = Recording(x, w, b)
    rep = rec.replay(x, w, b, const=0.5)
    assert rep((x, w, b, 0.25)) == _torch_replay.MISMATCH
    assert rep((x, w, b, torch.tensor(0.5))) == _torch_replay.MISMATCH
    assert isinstance(rep((x, w, b, 0.5)), tuple)


def test_a_second_forward_before_the_first_backward_is_refused_until_that_graph_is_gone():
    rec, rep, w, b = setup()
    y, s = rep((torch.randn(3, 4), w, b))
    assert rep((torch.randn(3, 4), w, b)) == _torch_replay.PENDING  # would overwrite y's recorded activations
    del y, s
    y, _ = rep((torch.randn(3, 4), w, b))  # y's graph is gone: nothing to overwrite
    y.sum().backward()
    assert isinstance(rep((torch.randn(3, 4), w, b)), tuple)  # its backward ran


def test_without_grad_mode_no_graph_is_made_and_nothing_is_pending():
    rec, rep, w, b = setup()
    with torch.no_grad():
        y, s = rep((torch.randn(3, 4), w, b))
    assert y.grad_fn is None and not y.requires_grad
    assert isinstance(rep((torch.randn(3, 4), w, b)), tuple)


def test_parameter_changed_in_place_before_backward_raises_as_eager():
    rec, rep, w, b = setup()
    y, _ = rep((torch.randn(3, 4), w, b))
    with torch.no_grad():
        w.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    assert rec.calls["bwd"] == 0


def test_second_backward_without_retain_graph_raises_as_eager():
    rec, rep, w, b = setup()
    y, _ = rep((torch.randn(3, 4), w, b))
    loss = y.sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_retained_graph_after_a_later_forward_recomputes_on_the_eager_ops():
    rec, rep, w, b = setup()
    wr, br = reference(w, b)
    xa, xb = torch.randn(3, 4), torch.randn(3, 4)
    out_a = rep((xa, w, b))[0].square().sum()
    out_a.backward(retain_graph=True)
    out_a.backward(retain_graph=True)  # the recording still holds xa's activations: replayed
    assert rec.calls == {"fwd": 1, "bwd": 2, "recompute": 0}
    rep((xb, w, b))[0].sum().backward()  # overwrites them
    w.grad = b.grad = None
    out_a.backward()
    assert rec.calls["recompute"] == 1 and rec.calls["bwd"] == 3 and rep.backward_replays == 3
    eager(xa, wr, br)[0].square().sum().backward()
    torch.testing.assert_close(w.grad, wr.grad)
    torch.testing.assert_close(b.grad, br.grad)


def test_double_backward_goes_through_the_eager_ops():
    rec, rep, w, b = setup()
    wr, br = reference(w, b)
    x = torch.randn(3, 4)
    y, _ = rep((x, w, b))
    (gw,) = torch.autograd.grad(y.tanh().sum(), w, create_graph=True)
    yr, _ = eager(x, wr, br)
    (gwr,) = torch.autograd.grad(yr.tanh().sum(), wr, create_graph=True)
    torch.testing.assert_close(gw, gwr)
    assert rec.calls["recompute"] == 1 and rec.calls["bwd"] == 0
    gw.square().sum().backward()
    gwr.square().sum().backward()
    torch.testing.assert_close(w.grad, wr.grad)
    torch.testing.assert_close(b.grad, br.grad)


def test_errors_of_a_graph_launch_reach_the_caller():
    rec, rep, w, b = setup()

    def broken():
        raise ValueError("launch failed here")

    rec.bwd = broken
    rep = rec.replay(torch.randn(3, 4), w, b)
    y, _ = rep((torch.randn(3, 4), w, b))
    with pytest.raises(ValueError, match="launch failed here"):
        y.sum().backward()
    rec.fwd = broken
    rep = rec.replay(torch.randn(3, 4), w, b)
    with pytest.raises(ValueError, match="launch failed here"):
        rep((torch.randn(3, 4), w, b))


def test_the_recording_is_freed_with_the_replay_and_its_last_graph():
    rec, rep, w, b = setup()
    outs = rep((torch.randn(3, 4), w, b))
    alive = weakref.ref(rec)
    del rec, rep
    gc.collect()
    assert alive() is not None  # the outputs' backward still needs it
    del outs
    gc.collect()
    assert alive() is None


def test_malformed_specs_raise_instead_of_crashing():
    rec, _, w, b = setup()
    with pytest.raises(TypeError):
        _torch_replay.training_replay([])
    good = dict(device=-1, fwd=rec.fwd, bwd=rec.bwd, n_inputs=3, fixed=[(1, w), (2, b)], copied=[(0, rec.sx, rec.sx)],
                consts=[], outputs=[rec.out, rec.sum], diff_out=[0, 1], grad_in=rec.gin, need=[1, 2],
                grads=[rec.gw, rec.gb], flat=rec.flat, recompute=rec.recompute, keep=rec)
    _torch_replay.training_replay(good)
    for change, error in ((dict(fwd=3), TypeError), (dict(n_inputs=4), ValueError), (dict(need=[0, 7]), ValueError),
                          (dict(diff_out=[0, 5]), IndexError), (dict(grad_in=[rec.out]), ValueError),
                          (dict(fixed=[(9, w), (2, b)]), IndexError), (dict(outputs=[1.0]), TypeError),
                          (dict(recompute=None), TypeError), (dict(flat=torch.empty(24)), ValueError),
                          (dict(device=0, fwd=0), (RuntimeError, ValueError))):
        with pytest.raises(error):
            _torch_replay.training_replay({**good, **change})
    missing = dict(good)
    del missing["keep"]
    with pytest.raises(KeyError):
        _torch_replay.training_replay(missing)
