"""The opcode table of the running CPython agrees with `opcode`/`dis`, and pure-Python code (no
torch needed) traces correctly: these tests also run on interpreters without torch (3.12)."""
import dis
import opcode
import sys
import typing
from typing import Dict, List

import pytest

from interp_testing_module import T

pytestmark = pytest.mark.pure_python  # the py312 lane runs them (typing's cache differs on 3.12)


def test_table_version_matches_interpreter():
    assert T.opcode_table_version() == sys.version_info[0] * 100 + sys.version_info[1]


def test_table_matches_opmap_and_caches():
    table = T.opcode_table()
    by_name = {name: num for name, num, *_ in table}
    real = {name: num for name, num in opcode.opmap.items() if num < 256 and not name.startswith("INSTRUMENTED_")}
    assert by_name == real
    caches = dis._inline_cache_entries  # a list by number (3.11/3.12), a dict by name (3.13)
    for name, num, handler, ncache, fwd, back in table:
        assert ncache == (caches.get(name, 0) if isinstance(caches, dict) else caches[num]), name
        assert (fwd or back) == (num in dis.hasjrel), name


def test_unsupported_report_lists_only_known_opcodes():
    report = T.unsupported_opcodes()
    assert all(line.split(" ")[0] in opcode.opmap for line in report)
    handled = {name for name, num, handler, *_ in T.opcode_table() if handler != "Unsupported"}
    for needed in ["LOAD_FAST", "LOAD_GLOBAL", "LOAD_ATTR", "CALL", "BINARY_OP", "FOR_ITER", "RETURN_VALUE",
                   "MAKE_FUNCTION", "BUILD_MAP", "UNPACK_SEQUENCE", "BEFORE_WITH", "COMPARE_OP"]:
        assert needed in handled
    if sys.version_info >= (3, 12):
        assert {"LOAD_FAST_AND_CLEAR", "BINARY_SLICE", "RETURN_CONST", "LOAD_SUPER_ATTR", "END_FOR"} <= handled
    else:
        assert {"LOAD_METHOD", "PRECALL", "LIST_TO_TUPLE"} <= handled
    if sys.version_info >= (3, 13):
        assert {"TO_BOOL", "CALL_KW", "LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST",
                "CONVERT_VALUE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "SET_FUNCTION_ATTRIBUTE"} <= handled


def out(fn, *args, **kwargs):
    r = T.trace(fn, args, kwargs)
    assert r["break"] is None, r["break"]
    assert r["stats"]["ops"] == 0
    return r["output"]


def comprehensions(n):
    xs = [i * i for i in range(n) if i % 2 == 0]
    d = {str(i): i for i in xs}
    s = {i % 3 for i in range(n)}
    return xs, d, len(s), any(i > 10 for i in xs), sum(x for x in xs), list({30, 1, 17, 2}), [k for k in {"b", "a"}]


def test_comprehensions_both_versions():
    # 3.11 runs <listcomp> frames; 3.12 inlines them (LOAD_FAST_AND_CLEAR / SWAP / END_FOR).
    assert out(comprehensions, 7) == repr(comprehensions(7)).replace("True", "True")


def closures(a):
    total = a

    def add(k):
        nonlocal total
        total += k
        return total
    add(2)
    add(3)
    return total, (lambda q: q * a)(4)


def unpacking(seq):
    first, *mid, last = seq
    (a, b), c = (1, 2), 3
    return first, mid, last, a + b + c, [*seq, *mid], {**{"k": 1}, "j": 2}


def strings(n, name):
    return f"{name}_{n:03d}", "%s-%d" % (name, n), "/".join([name] * 2), name[1:3], name[::-1]


class Base:
    def __init__(self, v):
        self.v = v

    def get(self):
        return self.v


class Derived(Base):
    def get(self):
        return super().get() * 2


def classes(v):
    obj = Derived(v)
    return obj.get(), isinstance(obj, Base), type(obj).__name__


def control(n):
    acc = 0
    i = 0
    while True:
        i += 1
        if i > n:
            break
        if i % 2:
            continue
        acc += i
    try:
        acc += 1
    except ZeroDivisionError:
        acc = -1
    finally:
        acc += 100
    return acc, n if n > 3 else None, (n and 5) or 6


@pytest.mark.parametrize("fn,args", [(closures, (5,)), (unpacking, ([1, 2, 3, 4],)), (strings, (7, "abcd")),
                                     (classes, (4,)), (control, (9,)), (control, (2,))])
def test_pure_python_constructs(fn, args):
    assert out(fn, *args) == repr(fn(*args))


def annotated(n):
    # Library code's `torch.jit.annotate(List[torch.Tensor], [])`: a typing subscript of a global.
    # On 3.12 typing's cache wrapper reads a dict keyed by functions; the subscript is evaluated.
    return List[int] is List[int], Dict[str, List[float]] is Dict[str, List[float]], typing.Optional[int] is not None, n


def test_typing_subscripts_of_globals():
    assert out(annotated, 3) == repr(annotated(3))


def test_kwonly_defaults_varargs():
    def g(a, b=2, *rest, c, d=4, **kw):
        return a, b, rest, c, d, sorted(kw.items())

    def f(x):
        return g(x, c=3), g(x, 1, 2, 3, c=0, e=5)
    assert out(f, 1) == repr(f(1))
