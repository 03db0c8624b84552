"""Tables: the terminal one and the markdown one, from the same rows."""

import math

COLUMNS = ("workload", "contender", "first call", "steady", "vs eager", "overhead", "GB/s", "peak MB",
           "graphs/breaks", "max err", "status")
ISOLATED = ("cold proc", "warm disk")


def _isolated(records):
    return any("cold_process_first_call_s" in r or "cold_process_note" in r for r in records)


def columns(records):
    return COLUMNS[:3] + ISOLATED + COLUMNS[3:] if _isolated(records) else COLUMNS


def fmt_time(s):
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return ""
    a = abs(s)
    if a < 1e-3:
        return f"{s * 1e6:.2f} µs"
    if a < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_err(e):
    if e is None:
        return ""
    if isinstance(e, str):  # "inf"/"nan" as stored in JSON
        return e
    if isinstance(e, float) and (math.isinf(e) or math.isnan(e)):
        return str(e)
    return "0" if e == 0 else f"{e:.1e}"


def row(r, width=None, isolated=False):
    ok = r["status"] == "ok"
    status = "ok" if ok else f"{r['status'].upper()}: {r['reason']}"
    if ok and r.get("within_tol") is False:
        status = "MISMATCH vs eager" + (f" ({r['compare_note']})" if r.get("compare_note") else "")
    for label in ("cold_process", "warm_disk"):
        if r.get(f"{label}_note"):
            status += f"; {label.replace('_', ' ')}: {r[f'{label}_note']}"
    if width and len(status) > width:
        status = status[:width - 1] + "…"
    gb = f"{r['graphs']}/{r['breaks']}" if r.get("graphs") is not None else ""
    steady = fmt_time(r.get("steady_s"))
    if steady and r.get("steady_iqr_s") and r["steady_iqr_s"] > 0.1 * r["steady_s"]:
        steady += f" ±{50 * r['steady_iqr_s'] / r['steady_s']:.0f}%"  # half the IQR: a noisy measurement
    warm = fmt_time(r.get("warm_disk_first_call_s"))
    if warm and r.get("warm_disk_compile_s") is not None:
        warm += f" (compile {fmt_time(r['warm_disk_compile_s'])})"
    iso = (fmt_time(r.get("cold_process_first_call_s")), warm)
    rest = (steady, f"{r['speedup']:.2f}x" if r.get("speedup") else "",
            fmt_time(r.get("overhead_s")) if r.get("overhead_s") is not None else "",
            f"{r['gbps']:.1f}" if r.get("gbps") else "",
            f"{r['peak_mem_mb']:.1f}" if r.get("peak_mem_mb") is not None else "",
            gb, fmt_err(r.get("max_abs_err")), status)
    return (r["workload"], r["contender"], fmt_time(r.get("first_call_s"))) + (iso if isolated else ()) + rest


def terminal_table(records, status_width=60):
    cols = columns(records)
    rows = [cols] + [row(r, status_width, _isolated(records)) for r in records]
    widths = [max(len(x[i]) for x in rows) for i in range(len(cols))]
    right = set(range(2, len(cols) - 1))
    lines = []
    prev = None
    for n, x in enumerate(rows):
        if n > 1 and x[0] != prev:
            lines.append("")
        prev = x[0]
        cells = [x[i].rjust(widths[i]) if i in right else x[i].ljust(widths[i]) for i in range(len(x))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _md_escape(s):
    return s.replace("|", "\\|").replace("\n", " ")


def markdown_table(records):
    cols = columns(records)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in records:
        out.append("| " + " | ".join(_md_escape(c) for c in row(r, isolated=_isolated(records))) + " |")
    return "\n".join(out)


def contender_table(contenders_info):
    out = ["| contender | backend | mode | setup (prewarm) | status |", "|---|---|---|---|---|"]
    for c in contenders_info:
        out.append(f"| {c['name']} | {c.get('backend') or ''} | {c.get('mode') or ''} | "
                   f"{fmt_time(c.get('prewarm_s'))} | {_md_escape(c.get('status', ''))} |")
    return "\n".join(out)


# framefuse contender -> its torch.compile counterpart, for the head-to-head ratios.
PAIRS = (("framefuse-eager", "torch.compile-eager"), ("framefuse", "torch.compile"),
         ("framefuse-ro", "torch.compile-ro"), ("framefuse-max-autotune", "torch.compile-max-autotune"))


def versus_rows(records):
    """Per workload and pair: framefuse's first call and overhead as a fraction of torch.compile's
    (lower is better), and torch.compile's steady time over framefuse's (higher is better). Only where
    both ran and matched eager."""
    ok = {(r["workload"], r["device"], r["contender"]): r for r in records
          if r["status"] == "ok" and r.get("within_tol", True)}
    rows = []
    for (w, d, c), ff in ok.items():
        for ffc, tcc in PAIRS:
            tc = ok.get((w, d, tcc))
            if c != ffc or tc is None:
                continue
            first = ff.get("first_call_s") / tc["first_call_s"] if tc.get("first_call_s") else None
            steady = tc["steady_s"] / ff["steady_s"] if ff.get("steady_s") else None
            over = None
            if ff.get("overhead_s") is not None and tc.get("overhead_s"):
                over = ff["overhead_s"] / tc["overhead_s"]
            rows.append((w, f"{ffc} / {tcc}", _ratio(first), "" if steady is None else f"{steady:.2f}x",
                         _ratio(over)))
    return rows


def _ratio(r):
    """0.0012 reads as "1/830", the form the targets are written in."""
    if r is None:
        return ""
    if 0 < r < 1:
        return f"1/{1 / r:.0f}" if r < 0.1 else f"{r:.2f} (1/{1 / r:.1f})"
    return f"{r:.2f}"


def versus_table(records, markdown=True):
    rows = versus_rows(records)
    if not rows:
        return ""
    head = ("workload", "framefuse / torch.compile", "first-call ratio", "steady speedup", "overhead ratio")
    return _render(head, rows, markdown)


def _render(head, rows, markdown):
    """A markdown table, or left-aligned columns for the terminal."""
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] +
                         ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(x[i]) for x in [head] + rows) for i in range(len(head))]
    return "\n".join("  ".join(x[i].ljust(widths[i]) for i in range(len(head))).rstrip() for x in [head] + rows)


def interleaved_table(entries, markdown=True):
    """core.interleaved_steady results: per workload, each contender's median with its paired ratio
    to eager, and framefuse over torch.compile paired per round."""
    names = []
    for e in entries:
        for n in e["steady_s"]:
            if n not in names:
                names.append(n)
    head = ("workload", "rounds") + tuple(names) + ("framefuse / torch.compile",)
    rows = []
    for e in entries:
        cells = []
        for n in names:
            t = e["steady_s"].get(n)
            ratio = e["paired"].get(n)
            cells.append("" if t is None else fmt_time(t) + (f" ({ratio:.2f}x)" if ratio else ""))
        vs = e.get("framefuse_vs_torch_compile")
        rows.append((e["workload"], str(e["rounds"])) + tuple(cells) + (f"{vs:.2f}x" if vs else "",))
    return _render(head, rows, markdown)


def workload_table(result):
    notes = {r["workload"]: r.get("note", "") for r in result["records"] if r["contender"] == "eager"}
    out = ["| workload | kind | what | this run |", "|---|---|---|---|"]
    for w in result.get("workloads", []):
        out.append(f"| {w['name']} | {w['kind']} | {_md_escape(w['description'])} | "
                   f"{_md_escape(notes.get(w['name'], ''))} |")
    return "\n".join(out)


def markdown_report(result, charts, title="framefuse benchmarks", level=1):
    env = result["environment"]
    h = "#" * (level + 1)
    lines = [f"{'#' * level} {title}", "",
             f"Command: `{result['command']}`", "",
             f"- Machine: {env['machine']}",
             f"- Python {env['python']}, torch {env['torch']}" + (f", torchvision {env['torchvision']}"
                                                                 if env.get("torchvision") else ""),
             f"- framefuse: {env['framefuse']}",
             f"- malloc: {env.get('malloc', 'glibc defaults')}",
             f"- torch threads: {env['threads']}; devices: {', '.join(result['devices'])}; "
             f"preset `{result['preset']}` (scale `{result['scale']}`)",
             f"- Run at {result['started']} UTC, {result['wall_s']:.0f} s; 1-minute load average "
             f"{env.get('load_start')} at the start, {env.get('load_end')} at the end", ""]
    demo = result.get("graph_demo")
    if demo:
        what = {"ok": "built from Python, ran on the reference runner, matched eager",
                "unavailable": "not run", "failed": "FAILED"}.get(demo["status"], demo["status"])
        lines += [f"Graph IR demo (quick preset's opening): {what}" + (f"; {demo['reason']}" if demo.get("reason") else ""),
                  ""]
    lines += [f"{h} Workloads", "", workload_table(result), "",
              f"{h} Contenders", "", contender_table(result["contenders"]), "",
              f"{h} Results", "",
              "Speedups (`vs eager`) are ratios of steady-state medians measured in this one run; absolute "
              "times hold only for the machine above.", "",
              markdown_table(result["records"]), ""]
    vs = versus_table(result["records"])
    lines += [f"{h} framefuse against torch.compile", "",
              "first-call ratio: framefuse's first call (capture + compile) over torch.compile's, lower is better; "
              "steady speedup: torch.compile's steady time over framefuse's; overhead ratio: framefuse's "
              "per-call overhead over torch.compile's. Only where both ran and matched eager.", "",
              vs or "No workload has results from both yet.", ""]
    if result.get("interleaved"):
        lines += [f"{h} Steady state, contenders taking turns", "",
                  "Measured again after each workload's rows above (`--interleave`): every round takes one "
                  "batched sample of each contender back to back; medians over the rounds, `(Nx)` the median "
                  "per-round ratio to eager, and the median per-round ratio of torch.compile's time to "
                  "framefuse's. Load that comes and goes hits every contender alike here, not the rows above.",
                  "", interleaved_table(result["interleaved"]), ""]
    if charts:
        lines += [f"{h} Charts", ""] + [f"![{c['title']}]({c['file']})" for c in charts] + [""]
    else:
        lines += [f"Charts: {result.get('charts_note', 'not produced')}", ""]
    lines += [f"{h} What was measured", ""] + [f"- **{k}**: {v}" for k, v in result["measured"].items()] + [""]
    return "\n".join(lines)
