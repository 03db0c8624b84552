"""Writes python_scalar_arith.txt: Python's own results for scalar expressions, the oracle of
test_passes.cpp's FoldConstants.PythonScalarArithMatchesPython.

Each line: expression <TAB> result type (int/float/bool, or `raises`) <TAB> repr of the result,
with non-finite floats spelled as graph code spells them. Run: python gen_python_scalar_arith.py
"""
import itertools
import math
import os

INTS = [0, 1, -1, 2, -3, 7, 10, 2**31, 2**53, 2**53 + 1, 2**62, -2**63, 2**63 - 1]
FLOATS = [0.0, -0.0, 0.5, -2.5, 3.0, 0.1, 1e-300, 1e308, -8.0, float("inf"), float("nan")]
BOOLS = [True, False]
BINARY = ["+", "-", "*", "/", "**", "<", ">"]  # the operator.* ops the registry prints infix


def spell(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "float('nan')" if math.isnan(v) else ("float('inf')" if v > 0 else "float('-inf')")
    return repr(v)


def operand(v):  # the left operand of ** (graph code parenthesizes a negative one)
    s = spell(v)
    return "(" + s + ")" if s.startswith("-") else s


def main():
    lines = []
    values = INTS + FLOATS + BOOLS
    for a, b, op in itertools.product(values, values, BINARY):
        expr = f"{operand(a) if op == '**' else spell(a)} {op} {spell(b)}"
        if op == "**" and isinstance(a, int) and isinstance(b, int) and abs(a) > 1 and b > 200:
            lines.append(f"{expr}\tint\t<too big for int64>")  # Python would build a huge int
            continue
        lines.append(case(expr, lambda: eval(f"a {op} b", {}, {"a": a, "b": b})))  # noqa: S307 - our own expressions
    for a in values:
        lines.append(case(f"-({spell(a)})" if spell(a)[0] in "-0123456789" else f"-{spell(a)}", lambda: -a))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python_scalar_arith.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def case(expr, fn):
    try:
        r = fn()
    except (ZeroDivisionError, OverflowError):
        return f"{expr}\traises\t-"
    if isinstance(r, complex):
        return f"{expr}\traises\t-"  # not a value graph code can hold
    return f"{expr}\t{type(r).__name__}\t{spell(r)}"


if __name__ == "__main__":
    main()
