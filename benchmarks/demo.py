"""The quick preset's opening: build a small graph from Python with framefuse's graph API, print it,
run it, and check it against eager. When the API is not importable it says so and shows nothing else:
no graph is pretended."""

import torch

from .contenders import Unavailable, first_line, import_framefuse


def _eager(x):
    return torch.relu(torch.add(x, 1.0)) * 0.5


def graph_demo(printer=print):
    """Returns dict(status, reason, code, max_abs_err) and prints the demo."""
    printer("== Graph IR demo: relu(x + 1.0) * 0.5 built from Python with framefuse.graph ==")
    try:
        try:
            import_framefuse()  # puts a source checkout's python/ on the path
        except Unavailable as e:
            # The graph API may exist before compile() does; only the module itself is required.
            if "no compile()" not in str(e):
                raise
        from framefuse.graph import Graph
    except Exception as e:  # Unavailable, ImportError, or anything raised while importing
        reason = str(e) if isinstance(e, Unavailable) else f"{type(e).__name__}: {first_line(e)}"
        printer(f"   framefuse graph API not available: {reason}")
        printer("   (demo skipped; the benchmarks below run without it)")
        return dict(status="unavailable", reason=reason)

    x_value = torch.randn(4, 8)
    try:
        g = Graph()
        x = g.placeholder("x", x_value)
        y = g.call(torch.mul, g.call(torch.relu, g.call(torch.add, x, 1.0)), 0.5)
        g.output((y,))
    except Exception as e:
        reason = f"building the graph raised {type(e).__name__}: {first_line(e)}"
        printer(f"   {reason}")
        return dict(status="failed", reason=reason)
    code, notes = None, []
    try:
        code = g.code()
        printer("   " + "\n   ".join(code.rstrip().splitlines()))
    except Exception as e:
        # The printer may land after the builder: show the real node list rather than nothing.
        notes.append(f"no printed form ({type(e).__name__}: {first_line(e)})")
        printer(f"   graph printer not available ({type(e).__name__}: {first_line(e)}); nodes: "
                + ", ".join(repr(n) for n in g.nodes()))
    try:
        out = g.run(x_value)
    except Exception as e:
        reason = f"run() raised {type(e).__name__}: {first_line(e)}"
        printer(f"   {reason}")
        return dict(status="failed", reason=reason, code=code)
    out = out[0] if isinstance(out, (list, tuple)) and len(out) == 1 else out
    expected = _eager(x_value)
    if not isinstance(out, torch.Tensor) or out.shape != expected.shape:
        reason = f"run() returned {type(out).__name__} {getattr(out, 'shape', '')}, eager gives {tuple(expected.shape)}"
        printer(f"   MISMATCH: {reason}")
        return dict(status="failed", reason=reason, code=code)
    err = float((out - expected).abs().max())
    ok = torch.allclose(out, expected, rtol=1e-6, atol=1e-6)
    printer(f"   run() vs eager: max abs error {err:.1e} -> {'OK' if ok else 'MISMATCH'}")
    if not ok:
        notes.insert(0, "result differs from eager")
    return dict(status="ok" if ok else "failed", reason="; ".join(notes), code=code, max_abs_err=err)
