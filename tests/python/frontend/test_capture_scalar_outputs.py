"""config.capture_scalar_outputs: x.item() of a one-element floating or integer tensor (and float(x))
is a Python float or int of the graph, as under torch.compile's knob of the same name. Arithmetic with numbers and
tensor ops keep it in the graph; the graph hands it back where Python needs it; code that decides on
its value breaks there. Every result, dtype and Python type is eager's."""
import random

import pytest
import torch

import framefuse
import inductor_util as iu

pytestmark = pytest.mark.usefixtures("fresh_framefuse")

BACKENDS = ["eager", "inductor"]


@pytest.fixture
def capture():
    with framefuse.config.patch(capture_scalar_outputs=True):
        yield


def same(got, want):
    """Equal values with eager's types: tensors bit for bit with their dtype, floats exactly."""
    if isinstance(want, torch.Tensor):
        return (isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape and
                bool(((got == want) | (got.isnan() & want.isnan())).all()))
    if isinstance(want, (list, tuple)):
        return type(got) is type(want) and len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    return type(got) is type(want) and got == want


def scale_shift(x, y):
    s = x.abs().max().item()
    t = (s * 2 + 1) / 4 - s  # Python arithmetic on the float, in the graph
    return torch.sin(y * t + (-s)), s, t


@pytest.mark.parametrize("backend", BACKENDS)
def test_item_is_a_float_of_the_graph(capture, backend):
    x, y = torch.randn(5), torch.randn(3, 4)
    got = framefuse.compile(scale_shift, backend=backend, fullgraph=True)(x, y)
    assert same(got, scale_shift(x, y))
    assert type(got[1]) is float and type(got[2]) is float
    report = framefuse.explain(scale_shift)(x, y)
    assert report.graph_count == 1 and report.graph_break_count == 0


def test_off_by_default_item_breaks():
    x, y = torch.randn(5), torch.randn(3, 4)
    with pytest.raises(framefuse.Unsupported, match=r"FF0002.*item"):
        framefuse.compile(scale_shift, fullgraph=True)(x, y)
    framefuse.reset()
    assert same(framefuse.compile(scale_shift, backend="eager")(x, y), scale_shift(x, y))


def test_graph_code_and_the_reference_runner(capture, caplog):
    graphs, recording = iu.recording_backend()
    framefuse.compile(scale_shift, backend=recording, fullgraph=True)(torch.randn(5), torch.randn(3, 4))
    (code,) = graphs
    assert '"float" = max_1.item()' in code, code
    framefuse.reset()
    framefuse.set_logs("perf_hints")
    try:
        framefuse.compile(scale_shift, fullgraph=True)(torch.randn(5), torch.randn(3, 4))
    finally:
        framefuse.set_logs("")
    assert ".item()" in caplog.text and "reference runner" in caplog.text


def _value_used_in_python(x, y):
    v = x.sum().item()
    if v > 0:  # decides on the value: the graph breaks here, and the branch is eager's
        return y + v
    return y - v


def _kept_across_a_break(x, y):
    v = float(x.mean())
    print("a break")
    return y * v, v


def _after_a_write(x):
    v = x.sum().item()
    x.add_(1)  # the float is the sum before the write
    return x * v


def _accumulated(xs):
    total = 0.0
    for t in xs:
        total += t.sum().item()
    return total


def _integer_item(x, y):
    n = (x * 10).long().sum().item()
    return y * n, (n * 3 - 1) // 2, n % 7, -n, n / 4, isinstance(n, int), (y > 0) * n


def _integer_as_a_size(x, y):
    n = (x > 0).sum().item()
    return torch.zeros(n) + y.sum()  # a size from tensor data: breaks there


def _bool_item(x, y):
    return y * (x > 0).any().item()


def _as_arguments(x, y):
    m = x.mean().item()
    return (torch.where(y > 0, y, m), y.abs() ** m, m ** y, 1 - m * y, y.clone().mul_(m),
            isinstance(m, float), [m, y])


@pytest.mark.parametrize("fn, graphs, breaks", [
    (_value_used_in_python, 2, 1),
    (_kept_across_a_break, 2, 1),
    (_after_a_write, 1, 0),
    (_integer_item, 1, 0),
    (_integer_as_a_size, 2, 1),
    (_bool_item, 2, 1),
    (_as_arguments, 1, 0),
])
def test_python_semantics(capture, fn, graphs, breaks, capsys):
    for seed in range(3):
        torch.manual_seed(seed)
        x, y = torch.randn(6), torch.randn(2, 3)
        args = (x, y)[:fn.__code__.co_argcount]
        framefuse.reset()
        want = fn(*(a.clone() for a in args))
        # NB: graphs after a break compile as usual (a fused sum may round otherwise): eager's ops here
        got = framefuse.compile(fn, backend="eager")(*(a.clone() for a in args))
        assert same(got, want), (fn.__name__, got, want)
    report = framefuse.explain(fn)(*args)
    assert (report.graph_count, report.graph_break_count) == (graphs, breaks), report
    if breaks:
        reason = str(report.break_reasons[0])
        assert "FF0022" in reason or "FF0001" in reason or "FF0003" in reason, reason


def test_a_loop_accumulating_items(capture):
    xs = [torch.randn(4) for _ in range(3)]
    got = framefuse.compile(_accumulated, fullgraph=True)(xs)
    assert type(got) is float and got == _accumulated(xs)


def test_gradients_flow_around_the_float(capture):
    def f(x, w):
        s = x.detach().abs().max().item()
        return (torch.tanh(x * w) / s).sum(), s

    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    out, s = framefuse.compile(f, fullgraph=True)(x, w)
    ref, rs = f(x, w)
    assert s == rs and torch.equal(out, ref)
    assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(out, (x, w)), torch.autograd.grad(ref, (x, w))))


def test_random_dtypes_and_ops_against_eager(capture):
    # NB: a float's type promotion is a wrapped number's: a 0-d or integer tensor times an item is
    # not promoted to the item's dtype. Random dtypes, ranks and ops, every result against eager.
    rng = random.Random(5)
    dtypes = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8, torch.bool]
    ops = [lambda t, s: t * s, lambda t, s: s - t, lambda t, s: t / (abs(s) + 1), lambda t, s: torch.where(t != 0, s, t),
           lambda t, s: t + s * 3, lambda t, s: torch.maximum(t, torch.zeros_like(t)) * -s]
    fns = []
    for i in range(40):
        src, dst = rng.choice(dtypes[:7]), rng.choice(dtypes)
        shape = rng.choice([(), (3,), (2, 4)])
        op = rng.choice(ops)

        def fn(x, y, op=op, src=src):
            return op(y, x.to(src).sum().item())

        x = torch.randn(3) * 3
        y = (torch.randn(shape) * 4).to(dst)
        fns.append((fn, x, y))
    for fn, x, y in fns:
        framefuse.reset()
        try:
            want = fn(x, y)
        except RuntimeError as e:
            with pytest.raises(type(e)):
                framefuse.compile(fn)(x, y)
            continue
        assert same(framefuse.compile(fn)(x, y), want), (x, y)


def _returns_numbers(x, w):
    out = torch.nn.functional.gelu(x @ w)
    return out, out.argmax().item(), out.sum().item() * 2 + 1, out.max().item() - out.min().item()


def test_numbers_only_returned_leave_the_tensor_work_to_the_backend(capture):
    # `return loss, loss.item()`: the backend compiles the tensor work (no item() in what it gets);
    # the numbers come from the tensors they read, after it.
    x, w = torch.randn(5, 8), torch.randn(8, 4)
    graphs, backend = iu.recording_backend()
    got = framefuse.compile(_returns_numbers, backend=backend, fullgraph=True)(x, w)
    assert same(got, _returns_numbers(x, w))
    (code,) = graphs
    assert ".item()" not in code and "gelu" in code, code
    framefuse.reset()
    got = framefuse.compile(_returns_numbers, fullgraph=True)(x, w)  # inductor's kernels
    want = _returns_numbers(x, w)
    torch.testing.assert_close(got[0], want[0])
    assert [type(v) for v in got[1:]] == [int, float, float] and got[1] == want[1]
    assert got[2] == pytest.approx(want[2], rel=1e-5) and got[3] == pytest.approx(want[3], rel=1e-5)


def _number_feeds_a_tensor_op(x, w):
    s = (x @ w).abs().max().item()
    return x / s, s


def _number_before_a_write(x):
    v = x.sum().item()
    x.mul_(2)  # the number is the sum before the write: the graph is not split
    return x, v


@pytest.mark.parametrize("fn, split", [(_number_feeds_a_tensor_op, False), (_number_before_a_write, False)])
def test_no_split_where_the_numbers_are_not_only_returned(capture, fn, split):
    args = (torch.randn(4, 8), torch.randn(8, 8))[:fn.__code__.co_argcount]
    graphs, backend = iu.recording_backend()
    want = fn(*(a.clone() for a in args))
    got = framefuse.compile(fn, backend=backend, fullgraph=True)(*(a.clone() for a in args))
    assert same(got, want)
    (code,) = graphs
    assert (".item()" not in code) == split, code


def test_a_training_graph_returning_its_loss_as_a_number(capture):
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(4, 6)

    def step(x):
        loss = model(x).pow(2).mean()
        return loss, loss.item()

    loss, value = framefuse.compile(step, fullgraph=True)(x)
    loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref, ref_value = step(x)
    ref.backward()
    assert type(value) is float and value == pytest.approx(ref_value, rel=1e-6)
    for g, r in zip(got, (p.grad for p in model.parameters())):
        torch.testing.assert_close(g, r)
