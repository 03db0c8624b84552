"""framefuse.explain(fn)(*args, **kwargs): what framefuse captures from one call, like torch._dynamo.explain.

    report = framefuse.explain(fn)(x, y)
    print(report)            # Graph Count, Graph Break Count, Op Count, Break Reasons, Ops per Graph ...
    report.break_reasons[0].reason, report.break_reasons[0].user_stack

The call runs `fn` once under framefuse.compile with a recording backend (each graph then runs on the
reference runner), after framefuse.reset(): every frame it reaches is compiled afresh, as with
torch._dynamo.explain. Break records come from the engine's structured records (`_C._graph_break_records`,
the same breaks the `graph_breaks` log artifact prints) and compile times from the `compile_times`
artifact, collected for the duration of the call only; the user's own log settings stay in effect.
"""
from __future__ import annotations

import dataclasses
import re

from . import _C
from .backends import native_graph
from .compile import compile as _compile

__all__ = ["explain", "ExplainOutput", "BreakReason"]


@dataclasses.dataclass
class BreakReason:
    reason: str                 # "[FF0003] call to print"
    user_stack: list            # ["file.py:12 in fn", ...], outermost first
    where: str = ""             # the frame that broke: "fn (file.py:10)"
    split: bool = False         # the frame was split at the break (graph, native instruction, resume
                                # function); False: the whole frame ran eagerly
    explanation: str = ""
    hint: str = ""

    def __str__(self):
        return self.reason


@dataclasses.dataclass
class ExplainOutput:
    graphs: list
    graph_count: int
    graph_break_count: int
    break_reasons: list
    op_count: int
    ops_per_graph: list
    out_guards: list
    compile_times: str
    # Dimensions traced as symbols (dynamic shapes), as "L['x'].size()[0] -> s0: why", and sizes
    # that stayed static although asked for ("L['y'] stays static: ..."), in trace order.
    dynamic_dims: list = dataclasses.field(default_factory=list)

    def __str__(self):
        out = f"Graph Count: {self.graph_count}\n"
        out += f"Graph Break Count: {self.graph_break_count}\n"
        out += f"Op Count: {self.op_count}\n"
        out += "Break Reasons:\n"
        for i, br in enumerate(self.break_reasons, 1):
            out += f"  Break Reason {i}:\n"
            out += f"    Reason: {br.reason}\n"
            if br.explanation:
                out += f"    Explanation: {br.explanation}\n"
            if br.hint:
                out += f"    Hint: {br.hint}\n"
            if br.where:
                out += f"    Frame: {br.where} ({'split at the break' if br.split else 'runs eagerly'})\n"
            out += "    User Stack:\n"
            for frame in br.user_stack:
                out += f"      {frame}\n"
        out += "Ops per Graph:\n"
        for i, ops in enumerate(self.ops_per_graph, 1):
            out += f"  Ops {i}:\n"
            for op in ops:
                out += f"    {op}\n"
        out += "Out Guards:\n"
        for i, guard in enumerate(self.out_guards, 1):
            out += f"  Guard {i}:\n"
            out += f"    {guard}\n"
        if self.dynamic_dims:
            out += "Dynamic Dimensions:\n"
            for d in self.dynamic_dims:
                out += f"  {d}\n"
        out += f"Compile Times: {self.compile_times}\n"
        return out


_BREAK_HEAD = re.compile(r"^(?:\[\d+/\d+\] )?Graph break in (?P<where>.*?) "
                         r"\(the frame (?P<how>runs eagerly|is split)\): (?P<reason>.*)$")


def _parse_break(msg):
    """A BreakReason from a `graph_breaks` record (the hook's break_text format)."""
    lines = msg.split("\n")
    m = _BREAK_HEAD.match(lines[0])
    if not m:
        return None
    br = BreakReason(reason=m.group("reason"), user_stack=[], where=m.group("where"), split=m.group("how") == "is split")
    at = None
    for line in lines[1:]:
        text = line.strip()
        if line.startswith("    ") and not line.startswith("     "):  # a frame; its source line is indented more
            br.user_stack.append(text)
        elif line.startswith("     "):
            continue
        elif text.startswith("Hint: "):
            br.hint = text[len("Hint: "):]
        elif text.startswith("Docs: "):
            continue
        elif text.startswith("at "):
            at = text[len("at "):]
        elif text:
            br.explanation = text
    if at and not any(frame.startswith(at) for frame in br.user_stack):
        br.user_stack.append(at)
    return br


def _from_record(rec):
    """A BreakReason from one of _C._graph_break_records()."""
    stack = list(rec["user_stack"])
    at = f"{rec['filename']}:{rec['lineno']}" if rec["filename"] else ""
    if at and not any(frame.startswith(at) for frame in stack):
        stack.append(at)
    return BreakReason(reason=rec["reason"], user_stack=stack, where=rec["where"], explanation=rec["explanation"],
                       hint=rec["hint"], split=rec["split"])


_FRAME_PREFIX = re.compile(r"^\[\d+/\d+\] ")


def _dynamic_dims(msg):
    """The dimensions a `dynamic` record names: "symbolic sizes of KEY:" lists one per line
    ("L['x'].size()[0] -> s0: marked dynamic"), "symbolic int KEY -> s1: why" one int; "KEY stays
    static: why" is kept whole."""
    lines = _FRAME_PREFIX.sub("", msg).split("\n")
    if lines[0].startswith("symbolic int "):  # "symbolic int L['n'] -> s1: why"
        return [lines[0][len("symbolic int "):]]
    if lines[0].startswith("symbolic sizes of "):
        return [line.strip() for line in lines[1:] if line.strip()]
    if " stays static: " in lines[0]:
        return [lines[0]]
    return []


def _graph_ops(graph):
    """The op names of a graph's call nodes, in order."""
    return [node.op for node in graph.nodes() if node.kind == "Call"]


def _spec_of_current_settings():
    """The current FRAMEFUSE_LOGS settings as a spec string (to restore them afterwards)."""
    parts = list(_C.logging.enabled_artifacts())
    for name, level in _C.logging.component_levels().items():
        if level == 255:
            continue
        parts.append(("+" if level <= 10 else "-" if level >= 40 else "") + name)
    return ",".join(parts)


def explain(fn, *extra_args, **extra_kwargs):
    """`framefuse.explain(fn)(*args, **kwargs)` runs fn once and returns an ExplainOutput."""
    if extra_args or extra_kwargs:
        raise TypeError("framefuse.explain(fn) takes only the function; call the result with the arguments: "
                        "framefuse.explain(fn)(*args, **kwargs)")
    if not callable(fn):
        raise TypeError(f"framefuse.explain expects a callable, not {type(fn).__name__}")

    def inner(*args, **kwargs):
        from . import _logging  # noqa: PLC0415

        graphs, ops_per_graph = [], []

        @native_graph
        def recording_backend(graph, example_inputs):
            graphs.append(graph)
            ops_per_graph.append(_graph_ops(graph))
            return graph.run

        breaks, times, dynamic = [], [], []
        user_artifacts = set(_C.logging.enabled_artifacts())
        previous = _spec_of_current_settings()

        def sink(logger_name, level, msg):
            artifact = logger_name.rsplit(".", 1)[-1]
            if artifact == "graph_breaks":
                br = _parse_break(msg)
                if br is not None:
                    breaks.append(br)
            elif artifact == "compile_times":
                times.append(msg)
            elif artifact == "dynamic":
                dynamic.extend(_dynamic_dims(msg))
            if artifact in user_artifacts or artifact not in ("graph_breaks", "compile_times", "dynamic"):
                _logging._emit(logger_name, level, msg)

        _C._reset()  # also clears the break records
        _C.logging.set_spec(",".join(filter(None, [previous, "graph_breaks", "compile_times", "dynamic"])))
        _C.logging.set_sink(sink)
        try:
            compiled = _compile(fn, backend=recording_backend)
            compiled(*args, **kwargs)
        finally:
            _logging._apply(previous)
        # Guards of the root frame (frames it calls that compile on their own are not listed).
        guards = []
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        if code is None and hasattr(fn, "forward"):
            code = getattr(type(fn).forward, "__code__", None)
        if code is not None:
            info = _C._code_cache_info(code)
            if info is not None:
                for entry in info.get("guards", []):
                    guards.extend(entry)
        if hasattr(_C, "_graph_break_records"):
            breaks = [_from_record(r) for r in _C._graph_break_records()]
        stats = _C._frame_eval_stats()
        return ExplainOutput(
            graphs=graphs,
            graph_count=len(graphs),
            graph_break_count=max(len(breaks), stats.get("graph_breaks", 0)),
            break_reasons=breaks,
            op_count=sum(len(o) for o in ops_per_graph),
            ops_per_graph=ops_per_graph,
            out_guards=guards,
            compile_times="framefuse compilation metrics:\n" + "\n".join("  " + t for t in times) if times
            else "framefuse compilation metrics: (no frame compiled)",
            dynamic_dims=dynamic,
        )

    return inner
