"""benchmarks/RESULTS.md: rebuilt from every run stored under benchmarks/results/ (one JSON per name,
its charts in a folder of the same name), so a GPU run adds its section without erasing the CPU ones.
Sections written by hand (measurements taken with other scripts) live in benchmarks/results/NAME.md,
each starting with `## NAME`, and are appended after the runner's sections."""

import glob
import json
import os
import shutil
import tempfile

from . import report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
ORDER = ("quick", "full", "gpu")

HEADER = """# framefuse benchmark results

Each section below is one run of `python -m benchmarks.run`, stored in `benchmarks/results/NAME.json`
with its charts. Speedups are ratios of medians measured within that one run; absolute times hold only
for the machine named in the section. Rows for a contender that could not run say why; no number is
written for them. Regenerate a section with the command it quotes plus `--publish`.
"""


def _scrub(obj):
    """Local paths (the checkout, the temp dir, the home dir) never go into tracked files."""
    text = json.dumps(obj, default=str)
    for path, name in ((REPO, "."), (tempfile.gettempdir(), "$TMPDIR"), (os.path.expanduser("~"), "~")):
        if path and path not in ("/", "."):
            text = text.replace(path, name)
    return json.loads(text)


def publish(result, charts, out_dir, name):
    name = name or result["preset"]
    os.makedirs(os.path.join(RESULTS, name), exist_ok=True)
    stored = []
    for c in charts:
        shutil.copy(os.path.join(out_dir, c["file"]), os.path.join(RESULTS, name, c["file"]))
        stored.append(dict(c, file=f"results/{name}/{c['file']}"))
    from .journal import jsonable
    result = _scrub(jsonable(dict(result, charts=stored)))
    for r in result["records"]:
        r.pop("traceback", None)  # kept in benchmarks/out/results.json, too long for the record
    with open(os.path.join(RESULTS, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    rebuild()
    print(f"published benchmarks/results/{name}.json and rebuilt benchmarks/RESULTS.md")


def rebuild():
    runs = {}
    for path in glob.glob(os.path.join(RESULTS, "*.json")):
        with open(path) as f:
            runs[os.path.splitext(os.path.basename(path))[0]] = json.load(f)
    names = [n for n in ORDER if n in runs] + sorted(n for n in runs if n not in ORDER)
    notes = sorted(glob.glob(os.path.join(RESULTS, "*.md")))
    note_names = [os.path.splitext(os.path.basename(p))[0] for p in notes]
    parts = [HEADER] + [f"- [{n}](#{n})" for n in names + note_names] + [""]
    for n in names:
        parts.append(report.markdown_report(runs[n], runs[n].get("charts", []), title=n, level=2))
    for path in notes:
        with open(path) as f:
            parts.append(f.read().rstrip("\n") + "\n")
    with open(os.path.join(HERE, "RESULTS.md"), "w") as f:
        f.write("\n".join(parts))
