"""Every op of the registry against eager torch.

For each case of op_cases.CASES: the call is built through the graph API (C++ meta rule, else the
meta-tensor fallback) and its result metadata (sizes, strides, dtype, device, requires_grad) must
be exactly what eager produces; running the graph on the reference runner must give eager's
values (and leave in-place operands as eager leaves them). Where eager raises, building the call
must be rejected. Cases not marked `fallback` must be typed by the C++ rule alone.
"""
import operator
import warnings
import zlib

import pytest
import torch

import framefuse
from framefuse import _C
from framefuse.graph import Graph, ops

from op_cases import CASES, T, graph_value

OPS = {op["name"]: op for op in ops()}
TORCH = torch.__version__.split("+")[0]


def resolve(path):
    obj = {"torch": torch, "operator": operator}[path.split(".")[0]]
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def materialize(value, gen):
    if isinstance(value, T):
        return value.make(gen)
    if isinstance(value, (list, tuple)):
        return type(value)(materialize(v, gen) for v in value)
    return value


def make_args(case, seed):
    gen = torch.Generator().manual_seed(seed)
    args = [materialize(a, gen) for a in case.args]
    kwargs = {k: materialize(v, gen) for k, v in case.kwargs.items()}
    return args, kwargs


def tensors_in(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    return []


def meta_of(x):
    if isinstance(x, torch.Tensor):
        return {"kind": "tensor", "sizes": list(x.shape), "strides": list(x.stride()),
                "dtype": str(x.dtype).replace("torch.", ""), "device": str(x.device), "requires_grad": x.requires_grad}
    if isinstance(x, (tuple, list)):
        return {"kind": "tuple", "items": [meta_of(i) for i in x]}
    if x is None:
        return {"kind": "none"}
    return {"kind": type(x).__name__}


def assert_same_values(actual, expected, what):
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), what
        assert meta_of(actual)["sizes"] == meta_of(expected)["sizes"], what
        assert actual.dtype == expected.dtype, what
        torch.testing.assert_close(actual.detach(), expected.detach(), rtol=0, atol=0, equal_nan=True, msg=what)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), what
        for a, e in zip(actual, expected):
            assert_same_values(a, e, what)
    else:
        assert actual == expected, what


def build(fn, args, kwargs):
    """The call as a graph: tensors become placeholders, everything else constants."""
    g = Graph()
    placeholders = []
    gargs = [graph_value(g, a, placeholders) for a in args]
    gkwargs = {k: graph_value(g, v, placeholders) for k, v in kwargs.items()}
    node = g.call(fn, *gargs, **gkwargs)
    return g, node, placeholders


def all_cases():
    for op, cs in CASES.items():
        for i, case in enumerate(cs):
            yield pytest.param(op, case, id=f"{op}-{i}")


@pytest.mark.parametrize("op,case", list(all_cases()))
def test_op_against_eager(op, case):
    fn = case.fn
    if isinstance(fn, str):
        fn = resolve(fn)
    if op not in OPS:
        pytest.fail(f"op {op} has cases but is not registered")
    if not OPS[op]["available"] or fn is None:
        pytest.skip(f"{OPS[op]['target']} is not in torch {TORCH}")
    assert _C.graph.op_for_callable(fn) == op, f"{case} is not a call of op {op}"
    seed = zlib.crc32(repr(case).encode()) % 10000

    args, kwargs = make_args(case, seed)
    eager_error = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.manual_seed(seed)
            expected = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - any eager error must be mirrored
            eager_error = e

    g_args, g_kwargs = make_args(case, seed)
    if eager_error is not None:
        # A C++ rule never types a call eager rejects.
        with pytest.raises(framefuse.Unsupported), framefuse.config.patch(meta_fallback=False):
            build(fn, g_args, g_kwargs)
        try:
            g, node, phs = build(fn, g_args, g_kwargs)
        except framefuse.Unsupported:
            return
        # Meta tensors cannot see a missing kernel ("abs_cpu" not implemented for 'Bool'): the
        # graph then raises eager's error when it runs.
        g.output(node)
        with pytest.raises(type(eager_error)):
            g.run(*tensors_in([g_args, g_kwargs]))
        return

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with framefuse.config.patch(meta_fallback=False):
                g, node, phs = build(fn, g_args, g_kwargs)
            by_rule = True
        except framefuse.Unsupported as e:
            assert case.fallback, f"the C++ meta rule declined {case}: {e}"
            g, node, phs = build(fn, g_args, g_kwargs)
            by_rule = False
    assert node.meta == meta_of(expected), f"{case} ({'C++ rule' if by_rule else 'fallback'})"

    # The reference runner gives eager's values and mutates in-place operands as eager does.
    g.output((node, *phs))
    run_args, run_kwargs = make_args(case, seed)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = g.run(*tensors_in([run_args, run_kwargs]))
    assert meta_of(result[0]) == meta_of(expected)
    if case.values:
        assert_same_values(result[0], expected, f"{case}: result")
        assert_same_values(list(result[1:]), tensors_in([args, kwargs]), f"{case}: operands after the call")


def test_every_registered_op_has_cases():
    # Seeding and restoring the generator are checked against eager by their effect on later draws
    # (test_rng_state.py): manual_seed returns a Generator, and a state must be a real one. A CUDA
    # generator's state needs a GPU (test_rng_state.py's CUDA test).
    generator_state = {"manual_seed", "set_rng_state", "cuda_get_rng_state", "cuda_set_rng_state"}
    missing = sorted(set(OPS) - set(CASES) - generator_state)
    assert not missing, f"ops without a test case in op_cases.py: {missing}"
    unknown = sorted(set(CASES) - set(OPS))
    assert not unknown, f"test cases for unregistered ops: {unknown}"


def test_every_op_has_a_case_typed_by_its_rule():
    # An op whose rule declines every case would be a fallback-only op in disguise. The listed ones
    # are fallback-only on purpose (cuDNN's fused convolutions exist only on CUDA tensors).
    fallback_only = {"einsum", "scaled_dot_product_attention", "cudnn_convolution_relu", "cudnn_convolution_add_relu",
                     "get_rng_state",  # the generator's state has the generator's size
                     # eager's own dtype checks (logaddexp of ints, heaviside's one dtype, prelu's weight)
                     "logaddexp", "heaviside", "hardshrink", "softshrink", "threshold", "prelu",
                     "nansum", "nanmean", "count_nonzero", "polygamma", "tensor_polygamma", "special_zeta", "igamma",
                     "igammac", "hypot", "nextafter", "frexp", "linalg_vector_norm", "fill", "angle", "float_power", "ldexp", "mvlgamma",
                     "isclose"} | {op for op in CASES if "polynomial" in op or "bessel" in op or "airy" in op}
    for op, cs in CASES.items():
        if "meta_fallback" in OPS[op].get("meta_rule", ""):
            continue
        assert any(not c.fallback for c in cs) or op in fallback_only, op


def _unavailable_reason(op):
    return None if OPS[op]["available"] else f"{OPS[op]['target']} is not in torch {TORCH}"


def param_types(schema):
    """Parameter types from a printed schema: "sum(Tensor input, int[]? dim=<default>, ...)"."""
    inner = schema[schema.index("(") + 1:schema.rindex(")")]
    return [p.split(" ")[0].rstrip("?") for p in inner.split(", ") if p not in ("*", "")]


def _keyword_checkable(op):
    """Ops whose cases pass parameters after the first positionally to the op's own target (the
    Python operators and varargs methods take none by keyword)."""
    entry = OPS[op]
    if entry["target"].startswith("operator.") or "..." in entry["schema"] or len(entry["params"]) < 2:
        return False
    fn = resolve(entry["target"])
    return any(c.fn is fn and len(c.args) >= 2 for c in CASES.get(op, [])) or not entry["available"]


@pytest.mark.parametrize("op", [op for op in sorted(OPS) if _keyword_checkable(op)])
def test_schema_keywords_are_torchs(op):
    """Every non-first parameter of the op's schema, passed by keyword under its schema name, is
    accepted by the eager callable and gives the same result as the positional call."""
    entry = OPS[op]
    if _unavailable_reason(op):
        pytest.skip(_unavailable_reason(op))
    fn = resolve(entry["target"])
    params = entry["params"]
    types = [t for t in param_types(entry["schema"]) if not t.startswith("*")]
    # `Any` parameters stand for overloads whose names differ (max(x, dim) / max(x, other)):
    # they and the parameters before them stay positional.
    first_keyword = max([i + 1 for i, t in enumerate(types) if t == "Any"] + [1])
    checked = 0
    for case in CASES[op]:
        if case.fn is not fn or len(case.args) <= first_keyword or len(case.args) > len(params):
            continue
        args, kwargs = make_args(case, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                torch.manual_seed(0)
                expected = fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - only calls eager accepts are compared
                continue
            args2, kwargs2 = make_args(case, 1)
            by_name = dict(kwargs2)
            by_name.update({params[i]: a for i, a in enumerate(args2) if i >= first_keyword})
            torch.manual_seed(0)
            actual = fn(*args2[:first_keyword], **by_name)
        if "nondeterministic_output" not in entry["traits"]:
            assert_same_values(actual, expected, f"{op}: keywords {sorted(by_name)}")
        checked += 1
    if first_keyword > 1 and checked == 0:
        return  # every parameter is an overloaded `Any` one: nothing to pass by keyword
    assert checked > 0, f"{op}: no case passes a parameter after the first positionally"


# ---- calls the registry rejects, with the reason ------------------------------------------------------

def _reject(fn, *args, **kwargs):
    g = Graph()
    placeholders = []
    gargs = [graph_value(g, a, placeholders) for a in args]
    with pytest.raises(framefuse.Unsupported) as info:
        g.call(fn, *gargs, **kwargs)
    return str(info.value)


def test_unknown_keyword_is_rejected():
    assert "sum() got an unexpected keyword argument 'dims'" in _reject(torch.sum, torch.ones(2, 3), dims=1)
    assert "unexpected keyword argument 'axis'" in _reject(torch.softmax, torch.ones(2, 3), axis=1)


def test_missing_and_mistyped_arguments_are_rejected():
    assert "missing required argument 'dim1'" in _reject(torch.transpose, torch.ones(2, 3), 0)
    assert "argument 'dim' must be an int" in _reject(torch.unsqueeze, torch.ones(2, 3), "a")


def test_shape_mismatch_is_rejected_with_eagers_reason():
    msg = _reject(torch.add, torch.ones(3), torch.ones(4))
    assert msg.startswith("torch.add: The size of tensor a (3) must match the size of tensor b (4)")
    assert "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)" in _reject(torch.mm, torch.ones(3, 4), torch.ones(5, 6))
    assert "view size is not compatible" in _reject(torch.Tensor.view, torch.ones(3, 4).t(), 12)
    assert "Sizes of tensors must match except in dimension 0" in _reject(torch.cat, [torch.ones(2, 3), torch.ones(2, 4)])
    assert "Dimension out of range" in _reject(torch.sum, torch.ones(2, 3), 2)
