"""What framefuse keeps for a compiled function dies with it (frame_eval/cache.h: everything per code
object lives in the code's ExtraState, and nothing there owns the code): programs that make
functions in a loop (exec, lambdas, closures per request) run in flat memory, and reset() costs
nothing per function that is gone."""
import gc
import sys
import weakref

import pytest
import torch

import framefuse
from framefuse import _C
from mem_util import assert_rss_growth_below, rss_kb

pytestmark = pytest.mark.usefixtures("fresh_framefuse")

SOURCES = {
    "tensor_work": "def f(x):\n    return x * 3 + 1\n",
    "no_tensor_work": "def f(x):\n    return len(x.shape) + 1\n",
    "graph_break": "def f(x):\n    y = x * 3\n    print('', end='')\n    return y + 1\n",
}
BACKENDS = ["eager", "inductor"]


def make(kind):
    """A fresh code object per call, as exec'd code, per-request closures or lambdas in a loop have."""
    ns = {"torch": torch}
    exec(compile(SOURCES[kind], f"<generated {kind}>", "exec"), ns)
    return ns["f"]


def compile_and_call(kind, backend, x):
    f = make(kind)
    cf = framefuse.compile(f, backend=backend)
    expected = f(x)
    for _ in range(2):  # compile, then a cached call
        out = cf(x)
        assert out == expected if isinstance(out, int) else torch.equal(out, expected)
    return weakref.ref(f.__code__)


@pytest.mark.parametrize("reset", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_a_dropped_compiled_function_frees_its_code_and_state(kind, backend, reset):
    x = torch.ones(3)
    counts = None
    for _ in range(2):  # the first also gives long-lived code the calls reach (torch's) its state
        code = compile_and_call(kind, backend, x)
        assert code() is not None and _C._code_cache_info(code()) is not None
        if reset:
            framefuse.reset()
        gc.collect()
        assert code() is None, f"the code object is still referenced: {sys.getrefcount(code()) - 1} references"
        if counts is not None:
            assert _C._testing.code_state_counts() == counts
        counts = _C._testing.code_state_counts()


def test_reset_drops_generated_code_and_compiles_again():
    x = torch.ones(3)
    f = make("graph_break")
    cf = framefuse.compile(f, backend="eager")
    assert torch.equal(cf(x), f(x))
    counts = _C._testing.code_state_counts()
    assert counts["break_plans"] == 1 and counts["resume_codes"] == 1
    framefuse.reset()
    counts = _C._testing.code_state_counts()
    assert counts["break_plans"] == 0 and counts["resume_codes"] == 0 and counts["entries"] == 0
    assert torch.equal(cf(x), f(x))
    assert _C._frame_eval_stats()["codes_generated"] == 2  # a stub and a resume function, made again


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_making_and_dropping_functions_keeps_memory_flat(kind):
    """A bounded version of issue 29's 100,000 functions per kind (RSS within 10 MB, measured
    locally): past a warm-up (allocator pools, the first thousand graph-break records), a few
    thousand more functions leave every counter of per-code state where it was and RSS within
    1 kB per function (before the fix: 6 kB per function with tensor work, 12 kB with a break)."""
    x = torch.ones(3)
    for _ in range(1100):
        compile_and_call(kind, "eager", x)
    gc.collect()
    counts, rss = _C._testing.code_state_counts(), rss_kb()
    n = 1500
    for _ in range(n):
        compile_and_call(kind, "eager", x)
    gc.collect()
    assert _C._testing.code_state_counts() == counts
    grown = rss_kb() - rss
    assert_rss_growth_below(grown, n, f"{n} functions")


def map_count():
    with open("/proc/self/maps") as fh:
        return sum(1 for _ in fh)


def test_dropped_kernels_leave_the_jit():
    """Generated CPU code goes with the last graph that holds it, past the most recent programs the
    in-memory cache keeps: the codegen fuzzer's 100,000-case process stopped with "Cannot allocate
    memory" after ~27,000 graphs, each of which had kept its JIT memory mappings (the kernel's
    limit is 65,530 per process)."""
    import framefuse.inductor  # noqa: PLC0415
    if not framefuse.inductor.codegen_available():
        pytest.skip("no CPU code generator (LLVM) in this build")
    x = torch.ones(3)

    def one(i):   # a graph of its own (its constant differs), so kernels of its own
        ns = {"torch": torch}
        exec(compile(f"def f(x):\n    return x * 3 + {i}\n", "<generated>", "exec"), ns)
        assert torch.equal(framefuse.compile(ns["f"], backend="inductor")(x), x * 3 + i)

    for i in range(300):   # past the programs the in-memory cache keeps (256)
        one(i)
    gc.collect()
    before, n = map_count(), 300
    for i in range(n):
        one(1000 + i)
    gc.collect()
    grown = map_count() - before
    assert grown < n // 4, f"{grown} more memory mappings after {n} compiled and dropped functions"
