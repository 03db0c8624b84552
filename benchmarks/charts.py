"""PNG charts from a results.json: speedup over eager, first-call (compile) time, call overhead.

Needs only matplotlib and the JSON file (no torch), so it can run under whichever interpreter has
matplotlib: `python -m benchmarks.charts benchmarks/out/results.json [--out DIR]`. Prints one JSON
line listing the charts written.
"""

import argparse
import json
import math
import os
import sys

CHARTS = (
    ("speedup.png", "Steady-state speedup over eager (higher is better)", "speedup", "x eager", False),
    ("compile_time.png", "First call: capture + compile (lower is better)", "first_call_s", "seconds", True),
    ("overhead.png", "Per-call overhead above eager (lower is better)", "overhead_s", "microseconds", True),
)


def _series(records, key, skip_eager):
    workloads, contenders = [], []
    for r in records:
        if r["workload"] not in workloads:
            workloads.append(r["workload"])
        if r["contender"] not in contenders and not (skip_eager and r["contender"] == "eager"):
            contenders.append(r["contender"])
    val, status = {}, {}
    for r in records:
        v = r.get(key)
        if r["status"] == "ok" and v is not None and not (isinstance(v, float) and math.isnan(v)):
            val[(r["workload"], r["contender"])] = v
        else:
            status[(r["workload"], r["contender"])] = r["status"] if r["status"] != "ok" else "n/a"
    return workloads, contenders, val, status


# framefuse in blues, torch.compile in oranges: the families read apart at a glance.
COLORS = {"framefuse-eager": "#6baed6", "framefuse": "#2171b5", "framefuse-ro": "#08306b",
          "framefuse-max-autotune": "#6a51a3", "torch.compile-eager": "#fdae6b", "torch.compile": "#e6550d",
          "torch.compile-ro": "#a63603", "torch.compile-max-autotune": "#7f2704"}


def _chart(plt, records, key, title, unit, skip_eager, path, log):
    if key == "overhead_s":
        records = [r for r in records if r["kind"] == "overhead"]
    workloads, contenders, val, status = _series(records, key, skip_eager)
    workloads = [w for w in workloads if any((w, c) in val for c in contenders)]
    if not workloads or not contenders:
        return False
    scale = 1e6 if key == "overhead_s" else 1.0
    n = len(contenders)
    height = 0.8 / n
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.32 * len(workloads) * max(n, 2)))
    spare = iter(plt.get_cmap("tab10").colors[7:] + plt.get_cmap("Dark2").colors)
    for i, c in enumerate(contenders):
        ys, xs = [], []
        for j, w in enumerate(workloads):
            if (w, c) in val:
                ys.append(j + (i - (n - 1) / 2) * height)
                xs.append(val[(w, c)] * scale)
        ax.barh(ys, xs, height=height, label=c, color=COLORS.get(c) or next(spare, "gray"))
        for y, x in zip(ys, xs):
            ax.text(x, y, f" {x:.3g}", va="center", fontsize=6)
        for j, w in enumerate(workloads):
            if (w, c) not in val:
                ax.text(0.0, j + (i - (n - 1) / 2) * height, f"  {c}: {status.get((w, c), 'not run')}",
                        va="center", fontsize=7, color="gray", transform=ax.get_yaxis_transform())
    if key == "speedup":
        ax.axvline(1.0, color="black", linewidth=0.8)
    vals = [v * scale for v in val.values()]
    if log and vals and min(vals) > 0 and max(vals) / min(vals) > 20:
        ax.set_xscale("log")
    ax.set_yticks(range(len(workloads)))
    ax.set_yticklabels(workloads)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def make_charts(results_path, out_dir=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(results_path) as f:
        result = json.load(f)
    out_dir = out_dir or os.path.dirname(os.path.abspath(results_path))
    os.makedirs(out_dir, exist_ok=True)
    made = []
    for fname, title, key, unit, log in CHARTS:
        device = ", ".join(result.get("devices", []))
        path = os.path.join(out_dir, fname)
        if _chart(plt, result["records"], key, f"{title} [{device}]", unit, True, path, log):
            made.append(dict(file=fname, title=title))
    return made


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.charts", description=__doc__.splitlines()[0])
    p.add_argument("results", help="results.json written by python -m benchmarks.run")
    p.add_argument("--out", help="directory for the PNGs (default: next to results.json)")
    a = p.parse_args(argv)
    try:
        made = make_charts(a.results, a.out)
    except ImportError as e:
        print(json.dumps(dict(error=f"matplotlib not importable under {sys.executable}: {e}")))
        return 2
    print(json.dumps(dict(charts=made)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
