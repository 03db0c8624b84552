"""The generator's core: typed scopes, fresh names, suites, and the weighted choice of productions.

The generator is typed: every variable it binds has a `Ty` (an int, a list of ints, a float tensor
of shape (2, 3)...), and every production asks for operands of the types it needs. Types never
change under a name: a rebinding keeps the type, so after an `if` or a loop every name still has
the type the generator believes, and the programs it writes run in eager without TypeErrors or
shape errors (except where a production raises on purpose).

Productions live in the gen_* modules, one area each; `generate()` at the bottom assembles a program.
"""
from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field

from .program import Node


@dataclass(frozen=True)
class Ty:
    """A value's type as the generator knows it. Tensors carry shape and dtype ("f" float32,
    "i" int64, "b" bool); tensor containers ("list_T", "dict_sT", ...) hold tensors of the
    program's base shape."""
    kind: str
    shape: tuple = ()
    dtype: str = "f"


INT, FLOAT, BOOL, STR = Ty("int"), Ty("float"), Ty("bool"), Ty("str")
LIST_I, TUPLE_I, SET_I, FSET_I, DICT_SI = Ty("list_int"), Ty("tuple_int"), Ty("set_i"), Ty("fset_i"), Ty("dict_si")
SIZE = Ty("size")
CONTAINER_KINDS = ("list_int", "list_T", "dict_si", "dict_sT", "set_i")
# Features `generate(seed, disabled=...)` can leave out (python -m pyfuzz --disable a,b).
TAGS = ("comp", "genexp", "sum_start", "hasattr", "structseq", "dview", "set_mutation", "list_imul", "dynamic")


class Src(str):
    """Source text of a tensor expression that may alias an existing tensor: `alias` is the storage
    family it may share ("?" when unknown). Plain str results are new tensors."""
    alias: str = ""


def aliasing(text: str, family: str) -> Src:
    s = Src(text)
    s.alias = family or "?"
    return s


def T(shape, dtype="f") -> Ty:
    return Ty("T", tuple(shape), dtype)


@dataclass
class Var:
    """What the generator knows of a binding. `family` names the storage a tensor may share (a
    view has its base's family; "?" means unknown: read out of a container or an attribute).
    `group` names the object a container may be (an alias `b = a` shares a's group): nothing in a
    loop may grow a container of a group the loop iterates. `contig` is True only where eager
    certainly gives a contiguous tensor, which is where `.view(-1)` is safe and where `reshape`
    certainly returns a view (so writes through it reach the base in eager and compiled alike)."""
    ty: Ty
    family: str = ""
    group: str = ""
    contig: bool = True
    writable: bool = True             # False for expanded views (in-place ops on them raise in eager)
    fixed: bool = False               # never rebound (a while loop's counter)


@dataclass
class Frame:
    vars: dict = field(default_factory=dict)
    function: bool = False            # the frame of a def: names of outer frames are read-only here
    nonlocals: set = field(default_factory=set)


class Gen:
    """The state of one program's generation."""

    def __init__(self, seed: str, disabled=frozenset()):
        self.seed = seed
        self.disabled = frozenset(disabled)   # feature tags left out (TAGS), to look past known bugs
        self.r = random.Random(f"pyfuzz|{seed}")
        self.counter = 0
        self.frames: list[Frame] = [Frame(function=True)]   # the module frame
        self.suites: list[list[Node]] = []
        self.depth = 0                   # nesting of compound statements
        self.loop_depth = 0              # > 0: break/continue are allowed
        self.iterating: set[str] = set()  # container groups a loop encloses
        self.in_function = 0             # > 0 inside a helper or closure (no `global` there)
        self.exact = True
        # A float tensor's value reached Python (int(t.sum()), a branch on t.max()...). With a rounding
        # op anywhere in the program (exact False) that value may differ in the last ulp between eager
        # and a fused kernel that sums in another order, and a branch turns the ulp into another path:
        # generate() draws such programs again (see there).
        self.float_to_python = False
        self.base_shape: tuple = (2, 3)
        # A dynamic program is also called with variant C, whose base-shaped tensors have a larger
        # first dimension (generate.DYNAMIC_DIM): shape literals are then written as *_like of a
        # tensor in scope, so the program runs for both sizes (see gen_tensor_exprs._leaf).
        self.dynamic = False
        self.module: list[Node] = []
        self.features: set[str] = set()   # module-level templates the program uses (Box, Pair...)
        self.helpers: list = []          # gen_funcs.Helper records of module-level functions
        self.globals_declared: list[str] = []   # names the entry function declares `global`
        self.main_frame: Frame | None = None
        self.pending: list = []           # bound by bind(), declared by the next emit()
        self.closures: dict = {}          # name -> gen_funcs.Helper of closures and lambdas in scope

    # ---- names and scopes ------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def family(self) -> str:
        return self.fresh("fam")

    def visible(self) -> dict[str, Var]:
        """Every name readable here, innermost binding first."""
        seen: dict[str, Var] = {}
        for fr in reversed(self.frames):
            for name, v in fr.vars.items():
                seen.setdefault(name, v)
        return seen

    def rebindable(self) -> dict[str, Var]:
        """Names a statement here may assign: those of the innermost function (its block frames
        included), its nonlocals, and in the entry function the globals it declares `global`.
        Assigning an outer name inside a def would make it local there."""
        out: dict[str, Var] = {}
        vis = self.visible()
        for fr in reversed(self.frames):
            for name, v in fr.vars.items():
                out.setdefault(name, v)
            if fr.function:
                for name in fr.nonlocals:
                    out.setdefault(name, vis[name])
                if fr is self.main_frame:
                    for name in self.globals_declared:
                        out.setdefault(name, vis[name])
                break
        return {k: v for k, v in out.items() if not v.fixed}

    def declare(self, name: str, var: Var) -> str:
        self.frames[-1].vars[name] = var
        return name

    def bind(self, prefix: str, ty: Ty, **info) -> str:
        """A fresh name for a new value of type ty, declared in the current block. A tensor gets a
        new storage family unless `info` names one; a container a new alias group."""
        if ty.kind == "T":
            info.setdefault("family", self.family())
        elif ty.kind in CONTAINER_KINDS:
            info.setdefault("group", self.fresh("grp"))
        name = self.fresh(prefix)
        # NB: visible only from the next emit(): the statement binding it may not read it.
        self.pending.append((name, Var(ty, **info)))
        return name

    def pick(self, pred, *, rebind=False) -> tuple[str, Var] | tuple[None, None]:
        pool = self.rebindable() if rebind else self.visible()
        names = sorted(n for n, v in pool.items() if pred(v))
        if not names:
            return None, None
        name = self.r.choice(names)
        return name, pool[name]

    def pick_ty(self, ty: Ty, **kw) -> str | None:
        return self.pick(lambda v: v.ty == ty, **kw)[0]

    def has(self, pred) -> bool:
        return any(pred(v) for v in self.visible().values())

    # ---- suites ------------------------------------------------------------------------------
    def emit(self, node: Node | str) -> Node:
        if isinstance(node, str):
            node = Node(node)
        self.suites[-1].append(node)
        for name, var in self.pending:
            self.declare(name, var)
        self.pending.clear()
        return node

    @contextlib.contextmanager
    def suite(self, *, function=False, loop=False, iterating=(), nonlocals=()):
        """A new suite and its block frame; names bound inside are gone after it."""
        nodes: list[Node] = []
        self.frames.append(Frame(function=function, nonlocals=set(nonlocals)))
        self.suites.append(nodes)
        saved = (self.depth, self.loop_depth, set(self.iterating))
        self.depth += 1
        if function:
            self.loop_depth = 0
            self.in_function += 1
        if loop:
            self.loop_depth += 1
        self.iterating |= set(iterating)
        try:
            yield nodes
        finally:
            self.frames.pop()
            self.suites.pop()
            if function:
                self.in_function -= 1
            self.depth, self.loop_depth, self.iterating = saved

    def fill(self, count: int) -> None:
        """Emit about `count` random statements into the current suite."""
        from .gen_stmts import statement  # noqa: PLC0415 - the statement table imports this module
        for _ in range(count):
            statement(self)

    def weighted(self, table, *args):
        """Run productions of `table` ([(weight, fn)]) in weighted random order until one applies
        (returns something other than None); returns that result or None."""
        pool = list(table)
        while pool:
            total = sum(w for w, _ in pool)
            x = self.r.uniform(0, total)
            for i, (w, fn) in enumerate(pool):
                x -= w
                if x <= 0:
                    break
            _, fn = pool.pop(i)
            out = fn(self, *args)
            if out is not None:
                return out
        return None

    # ---- feature tags ------------------------------------------------------------------------
    def off(self, tag: str) -> bool:
        return tag in self.disabled

    def allowed(self, options, **tagged):
        """`options` minus the names listed under a disabled tag (tagged: tag -> names)."""
        drop = {n for tag, names in tagged.items() if tag in self.disabled for n in names}
        return tuple(o for o in options if o not in drop) or tuple(options)

    # ---- small random helpers ----------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def small_int(self, lo=-3, hi=6) -> int:
        return self.r.randint(lo, hi)

    def key(self) -> str:
        return repr(self.r.choice(("a", "b", "c", "d", "k", "z")))

    def small_list(self) -> str:
        """A short literal list of ints: what may be added to a list inside a loop (anything
        derived from the list itself could double it per iteration)."""
        return repr([self.r.randrange(8) for _ in range(self.r.randint(0, 2))])

    def container_groups(self, name: str) -> set[str]:
        v = self.visible().get(name)
        return {v.group} if v and v.group else set()

    def may_grow(self, name: str) -> bool:
        """Whether a statement here may change the size of container `name` (not while a loop
        iterates over it or an alias of it)."""
        v = self.visible().get(name)
        return v is not None and v.group not in self.iterating
