"""Arguments of generated programs, as Python source.

Every argument is built by evaluating a literal (`torch.tensor([[1.0, -2.0], ...])`, `[3, 0, 5]`,
`Box(torch.tensor(...), 2)`) in the program's namespace. One source of truth serves three needs:
each call gets fresh objects (nothing leaks between eager and compiled runs), the values depend only
on the program's seed (never on the hash seed or id()), and a reproducer can print its arguments.

Two variants exist per program: "A" and "B" have the same types and tensor shapes but different
contents (other ints, other list lengths, other dict keys), so a compiled function called with B
after A shows whether its guards noticed.
"""
from __future__ import annotations

import random

# Tensor elements are small integers (stored as float32 for float tensors): sums and products of
# them are exact in float32 whatever order a fused kernel adds them in, so tensors compare bit for bit.
ELEMENT_RANGE = (-3, 3)
# Set elements stay below 8, the size of a small set's hash table: every such int has its own slot,
# so a set's iteration order is ascending whatever history built it (no dependence on the history
# of adds and removes, which a compiler could legitimately rebuild differently).
SET_RANGE = 8
DICT_KEYS = ("a", "b", "c", "d", "e", "k")
WORDS = ("ab", "xyz", "q", "", "hello", "a-b")

KINDS = ("tensor", "int", "float", "bool", "str", "list_int", "list_T", "tuple_int", "dict_si",
         "dict_sT", "set_i", "obj", "nt")


def _rng(seed: str, name: str, variant: str) -> random.Random:
    # NB: a str seed goes through sha512 in random.Random, independent of PYTHONHASHSEED.
    return random.Random(f"{seed}|{name}|{variant}")


def tensor_source(rng: random.Random, shape: tuple, dtype: str) -> str:
    lo, hi = ELEMENT_RANGE

    def build(dims):
        if not dims:
            if dtype == "b":
                return repr(rng.random() < 0.5)
            v = rng.randint(lo, hi)
            return repr(float(v)) if dtype == "f" else repr(v)
        return "[" + ", ".join(build(dims[1:]) for _ in range(dims[0])) + "]"

    suffix = {"f": "", "i": ", dtype=torch.int64", "b": ""}[dtype]
    return f"torch.tensor({build(shape)}{suffix})"


def arg_source(kind: str, params: dict, seed: str, name: str, variant: str) -> str:
    rng = _rng(seed, name, variant)
    shape = tuple(params.get("shape_c" if variant == "C" and "shape_c" in params else "shape", ()))
    if kind == "tensor":
        return tensor_source(rng, shape, params.get("dtype", "f"))
    if kind == "int":
        return repr(rng.randint(-2, 5))
    if kind == "float":
        return repr(rng.choice((0.5, 1.5, -2.0, 3.25, 0.0, 2.0)))
    if kind == "bool":
        # NB: A and B differ, so a branch on the flag must be guarded.
        return repr(variant == "A") if params.get("flip", True) else repr(rng.random() < 0.5)
    if kind == "str":
        return repr(rng.choice(WORDS))
    if kind == "list_int":
        return repr([rng.randrange(SET_RANGE) for _ in range(rng.randint(0, 5))])
    if kind == "tuple_int":
        return repr(tuple(rng.randrange(SET_RANGE) for _ in range(rng.randint(1, 4))))
    if kind == "list_T":
        return "[" + ", ".join(tensor_source(rng, shape, "f") for _ in range(rng.randint(1, 3))) + "]"
    if kind == "dict_si":
        keys = rng.sample(DICT_KEYS, rng.randint(0, 4))
        return "{" + ", ".join(f"{k!r}: {rng.randint(-2, 6)}" for k in keys) + "}"
    if kind == "dict_sT":
        keys = rng.sample(DICT_KEYS, rng.randint(1, 3))
        return "{" + ", ".join(f"{k!r}: {tensor_source(rng, shape, 'f')}" for k in keys) + "}"
    if kind == "set_i":
        return "{" + ", ".join(str(v) for v in sorted(rng.sample(range(SET_RANGE), rng.randint(1, 5)))) + "}"
    if kind == "obj":
        return f"Box({tensor_source(rng, shape, 'f')}, {rng.randint(0, 4)})"
    if kind == "nt":
        return f"Pair({tensor_source(rng, shape, 'f')}, {rng.randint(0, 4)})"
    raise ValueError(f"unknown argument kind {kind!r}")


def args_source(specs, seed: str, variant: str) -> list[str]:
    return [arg_source(a.kind, a.params, seed, a.name, variant) for a in specs]


def make_args(specs, seed: str, variant: str, namespace: dict) -> list:
    """Fresh argument objects for one call, built in the program's namespace (for Box and Pair)."""
    return [eval(src, namespace) for src in args_source(specs, seed, variant)]  # noqa: S307 - our own literals
