"""pyfuzz, the differential fuzzer of Python semantics (tests/fuzz/pyfuzz, issue #21), in CI.

test_fixed_seed_budget runs a fixed-seed budget of generated programs in eager and under
framefuse.compile and asserts that none of them differs: not in a returned value, an argument's
state after the call, a G_ global, printed output or an exception type. The programs run in a
worker process (a segfault costs one program, not the pytest run); a failure lists the seeds,
what differed, and the reduced reproducers.

The other tests check the fuzzer itself: generation is a pure function of the seed (also under
another PYTHONHASHSEED), generated programs are deterministic in eager, and the comparison sees
the differences it exists to see.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ_DIR = Path(__file__).resolve().parents[2] / "fuzz"
sys.path.insert(0, str(FUZZ_DIR))

SEED = "ci"
COUNT = 2000
# Every program runs on the eager backend; every INDUCTOR_EVERY-th also on inductor, whose kernel
# compiles cost 20-90 ms a program with a cold kernel cache (README.md has the measurements).
INDUCTOR_EVERY = 4


@pytest.mark.pure_python
def test_generation_is_a_pure_function_of_the_seed():
    from pyfuzz.generate import generate  # noqa: PLC0415
    first = [generate(f"det:{i}").source() for i in range(40)]
    assert first == [generate(f"det:{i}").source() for i in range(40)]
    assert len(set(first)) == 40
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from pyfuzz.generate import generate; "
            "print(''.join(generate(f'det:{i}').source() for i in range(40)), end='')")
    for hash_seed in ("1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run([sys.executable, "-c", code, str(FUZZ_DIR)], env=env, capture_output=True,
                             text=True, check=True).stdout
        assert out == "".join(first), f"generation depends on PYTHONHASHSEED={hash_seed}"


@pytest.mark.pure_python
def test_rounding_programs_keep_float_values_out_of_python():
    """A program that rounds may not branch on a float tensor's value (generate() draws it again):
    eager and a fused kernel may sum in different orders, and the last ulp would pick the branch."""
    from pyfuzz.generate import generate  # noqa: PLC0415
    progs = [generate(f"ulp:{i}") for i in range(300)]
    assert not [p.seed for p in progs if not p.exact and p.float_to_python]
    # Both kinds the rule keeps are still drawn, so the rule did not empty either class.
    assert sum(not p.exact for p in progs) > 30
    assert sum(p.float_to_python for p in progs) > 30


def test_programs_are_deterministic_in_eager():
    from pyfuzz.compare import compare_calls  # noqa: PLC0415
    from pyfuzz.generate import generate  # noqa: PLC0415
    from pyfuzz.runner import execute  # noqa: PLC0415
    for i in range(150):
        prog = generate(f"eager-twice:{i}")
        first, second = execute(prog, None), execute(prog, None)
        assert compare_calls(first, second, tolerant=False) == [], prog.source()


def test_comparison_sees_values_identity_and_mutation():
    import torch  # noqa: PLC0415
    from pyfuzz.compare import compare_calls, snapshot  # noqa: PLC0415
    from pyfuzz.runner import CallOutcome  # noqa: PLC0415

    def outcome(args, ret, exc=None, out=""):
        return [CallOutcome("A", snapshot(args, ret, {"G_n": 1}), exc, out)]

    x = torch.tensor([1.0, 2.0])
    y = torch.tensor([3.0, 0.0])
    lst = [1, 2]
    base = outcome([x, lst], (y, lst, 0.0))
    assert compare_calls(base, outcome([x, lst], (y.clone(), lst, 0.0)), False) == []
    # one ulp in a float tensor, -0.0 for 0.0, a copy for the argument itself, another list
    assert compare_calls(base, outcome([x, lst], (y + 1e-6, lst, 0.0)), False)[0][0] == "return"
    assert compare_calls(base, outcome([x, lst], (y, lst, -0.0)), False)[0][0] == "return"
    assert compare_calls(base, outcome([x, lst], (y, list(lst), 0.0)), False)[0][0] == "identity"
    assert compare_calls(base, outcome([x, lst], (y, [1, 2, 3], 0.0)), False)[0][0] == "identity"
    assert compare_calls(outcome([x], [1]), outcome([x], [1, 2]), False)[0][0] == "return"
    assert compare_calls(outcome([x, [1]], None), outcome([x, [1, 2]], None), False)[0][0] == "args"
    assert compare_calls(base, outcome([x, lst], (y, lst, 0.0), exc="KeyError"), False)[0][0] == "exception"
    assert compare_calls(base, outcome([x, lst], (y, lst, 0.0), out="p\n"), False)[0][0] == "stdout"
    # a view of the argument in eager, a separate tensor with the same values in the compiled run
    view = outcome([x], x[1:])
    assert compare_calls(view, outcome([x], x[1:].clone()), False)[0][0] == "aliasing"
    # tolerant comparison (inexact float ops under inductor) accepts rounding, not real differences
    assert compare_calls(base, outcome([x, lst], (y + 1e-6, lst, 0.0)), True) == []
    assert compare_calls(base, outcome([x, lst], (y + 1e-2, lst, 0.0)), True)[0][0] == "return"
    assert compare_calls(outcome([x], 418.4867248535156), outcome([x], 418.4866638183594), True) == []
    assert compare_calls(outcome([x], 418.4867248535156), outcome([x], 418.4866638183594), False)[0][0] == "return"
    # past 2**24 a fusing backend may round differently (one rounding for a*b+c); below it, never
    big = torch.tensor([34465849344.0, 3.0])
    near = torch.tensor([34465849344.0 + 4096.0, 3.0])
    assert compare_calls(outcome([x], big), outcome([x], near), False, fused=True) == []
    assert compare_calls(outcome([x], big), outcome([x], near), False, fused=False)[0][0] == "return"
    assert compare_calls(outcome([x], y), outcome([x], y + 1e-6), False, fused=True)[0][0] == "return"


def test_fixed_seed_budget(tmp_path):
    from pyfuzz.driver import run  # noqa: PLC0415
    lines = []
    res = run(SEED, COUNT, ["eager", "inductor"], inductor_every=INDUCTOR_EVERY, out_dir=str(tmp_path),
              reduce=3, reduce_budget=20.0, log=lines.append)
    assert res.programs == COUNT
    if res.mismatching():
        counts = "\n".join(f"  {n:5d} [{b}] {c}" for (b, c), n in sorted(res.by_key().items()))
        repros = "\n\n".join(p.read_text().split("\n# The calls")[0] for p in sorted(tmp_path.glob("mismatch-*.py")))
        pytest.fail(f"pyfuzz: {res.mismatching()} of {COUNT} programs (seed {SEED!r}) differ from eager:\n{counts}\n"
                    + "\n".join(lines[:40]) + f"\n\nReduced reproducers:\n\n{repros}\n\n"
                    "Rerun one: PYTHONPATH=build/main/site:tests/fuzz python -m pyfuzz check SEED --reduce")
