"""The program model: a tree of statements that the generator builds, the reducer shrinks and the
runner renders to source.

A program is a module: a fixed import header, module-level nodes (globals, classes, helper
functions) and one entry function `f`, called with arguments that `values.make_args` builds from
the program's argument spec. Keeping statements as a tree (not text) is what lets the reducer
delete a statement together with its suite, or hoist a suite out of its `if`/`for`/`try`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

HEADER = (
    "import collections\n"
    "import dataclasses\n"
    "import functools\n"
    "import math\n"
    "import torch\n"
)

ENTRY = "f"


@dataclass
class Node:
    """One statement. A simple statement is `head` alone; a compound one has a suite (`body`) and
    optional further clauses (`else:`, `except KeyError:`, `finally:`), each with its own suite.
    `items`, when set, makes the node `head + "(" + ", ".join(items) + ",)"`: a return or call
    whose elements the reducer may drop one by one."""
    head: str
    body: list[Node] = field(default_factory=list)
    clauses: list[tuple[str, list[Node]]] = field(default_factory=list)
    items: list[str] | None = None
    pinned: bool = False     # the reducer never deletes it (a while loop's counter increment)

    @property
    def compound(self) -> bool:
        return self.head.endswith(":")

    def copy(self) -> Node:
        return Node(self.head, [n.copy() for n in self.body],
                    [(h, [n.copy() for n in s]) for h, s in self.clauses],
                    None if self.items is None else list(self.items), self.pinned)


def render_suite(nodes: list[Node], indent: int, out: list[str]) -> None:
    pad = "    " * indent
    if not nodes:
        # NB: a suite the reducer emptied stays valid Python.
        out.append(pad + "pass")
        return
    for n in nodes:
        if n.items is not None:
            out.append(pad + n.head + "(" + "".join(i + ", " for i in n.items) + ")")
        else:
            out.append(pad + n.head)
        if n.compound:
            render_suite(n.body, indent + 1, out)
            for header, suite in n.clauses:
                out.append(pad + header)
                render_suite(suite, indent + 1, out)


@dataclass
class ArgSpec:
    """One argument of the entry function: its name, its kind (see values.py) and the keyword
    parameters its factory takes (the tensor shape, the element count...)."""
    name: str
    kind: str
    params: dict = field(default_factory=dict)


@dataclass
class Program:
    """A generated program. `exact` is False when it uses float ops whose rounding a fusing code
    generator may legitimately change (tanh, division by 3, mean): the runner then compares float
    tensors of the inductor backend with a tight tolerance instead of bit for bit."""
    seed: str
    module: list[Node]
    body: list[Node]
    args: list[ArgSpec]
    exact: bool = True
    dynamic: bool = False    # also called with variant C (a larger first dimension, see generate.py)
    float_to_python: bool = False   # a float tensor's value reaches Python (never in a program not exact)

    def entry_node(self) -> Node:
        params = ", ".join(a.name for a in self.args)
        return Node(f"def {ENTRY}({params}):", self.body)

    def source(self) -> str:
        out: list[str] = []
        render_suite(self.module + [self.entry_node()], 0, out)
        return HEADER + "\n" + "\n".join(out) + "\n"

    def replace(self, **changes) -> Program:
        return dataclasses.replace(self, **changes)

    def copy(self) -> Program:
        return self.replace(module=[n.copy() for n in self.module], body=[n.copy() for n in self.body],
                            args=list(self.args))

    def statement_count(self) -> int:
        def count(nodes):
            return sum(1 + count(n.body) + sum(count(s) for _, s in n.clauses) for n in nodes)
        return count(self.module) + count(self.body)
