"""The ops lowered for issue #22 in CUDA kernels: lowered as eager CUDA computes them (no extern
call) and their generated source compiled by NVRTC for sm_90 (no GPU needed)."""
import operator

import pytest
import torch
import torch.nn.functional as F

import framefuse
from framefuse import cuda
from framefuse.graph import Graph

from cuda_util import need_nvrtc

UNARY = [torch.asin, torch.acos, torch.atan, torch.sinh, torch.cosh, torch.erfc, torch.round, torch.frac, torch.isinf,
         torch.isfinite, torch.signbit, torch.nan_to_num, F.selu, F.logsigmoid]
BINARY = [torch.atan2, torch.fmax, torch.fmin, torch.fmod, torch.remainder, torch.floor_divide, torch.max, torch.min]


def _graph(dtype):
    x, y = torch.randn(300).to(dtype), torch.randn(300).to(dtype)
    i, m = torch.randint(-9, 9, (300,), dtype=torch.int32), torch.rand(300) > 0.5
    g = Graph()
    a, b, k, b8 = (g.placeholder(f"x{j}", t) for j, t in enumerate((x, y, i, m)))
    outs = [g.call(f, a) for f in UNARY]
    outs += [g.call(F.celu, a, alpha=0.5), g.call(torch.round, a, decimals=2), g.call(torch.all, a), g.call(torch.max, a),
             g.call(torch.addcdiv, a, b, b, value=0.5)]
    outs += [g.call(f, a, b) for f in BINARY]
    outs += [g.call(f, k, 3) for f in (torch.fmod, torch.remainder, torch.floor_divide)]
    outs += [g.call(f, k, k) for f in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor, operator.and_)]
    outs += [g.call(torch.bitwise_not, k), g.call(torch.pow, k, 3), g.call(torch.logical_xor, b8, a),
             g.call(torch.maximum, b8, b8), g.call(torch.any, b8, 0), g.call(torch.amax, b8, [0])]
    g.output(tuple(outs))
    return g


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_lowered_ops_compile_for_sm90(dtype, tmp_path):
    need_nvrtc()
    with framefuse.config.patch(cache_dir=str(tmp_path)):
        fn = cuda.compile_graph(_graph(dtype), arch="sm_90")
    externs = [line.split("# ")[1] for line in fn.program.splitlines() if line.startswith("extern node")]
    # NB: eager CUDA's formulas of bf16 remainder, floor division and round(decimals) are the
    # generated code's (test_cuda_eager_formulas.py)
    assert externs == []
    for name in ("ff_asin", "ff_acos", "ff_atan", "ff_sinh", "ff_cosh", "ff_erfc", "ff_round", "ff_signbit", "ff_atan2",
                 "ff_fmod", "ff_mod", "ff_floordiv"):
        assert name + "(" in fn.source, name
    assert fn.kernels()
